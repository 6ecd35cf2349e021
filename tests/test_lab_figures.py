"""The labs' figures use the numbers their text gives, and print no answer a question asks for."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

LAB01 = Path(__file__).resolve().parent.parent / "labs" / "01-naive-coalesced" / "naive-coalesced.ipynb"


def _cells(kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(LAB01.read_text())["cells"] if c["cell_type"] == kind]


def test_lab01_roofline_uses_the_peak_and_bandwidth_of_the_text():
    text = "\n".join(_cells("markdown"))
    peak = float(re.search(r"\*\*([\d.]+) TFLOP/s\*\*", text).group(1)) * 1e12
    bandwidth = float(re.search(r"\*\*([\d.]+) TB/s\*\*", text).group(1)) * 1e12
    figure = next(c for c in _cells("code") if "axvline" in c)
    values = re.search(r"^peak, bw = ([\d.e+-]+), ([\d.e+-]+)", figure, re.M)
    assert values, "the ridge-point figure must set the peak and bandwidth the text gives"
    assert math.isclose(float(values.group(1)), peak) and math.isclose(float(values.group(2)), bandwidth)


def test_lab01_roofline_legend_prints_no_ridge_point_value():
    figure = next(c for c in _cells("code") if "axvline" in c)
    labels = re.findall(r'label=f?"([^"]*)"', figure)
    assert labels and not any("peak" in label and "bw" in label for label in labels), labels

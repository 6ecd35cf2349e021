"""The labs' figures use the numbers their text gives, print no answer a question asks for, and show
the predicted speed where there is no GPU."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
from conftest import emulator_only

import grader

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


@emulator_only
def test_lab01_roofline_shows_the_predicted_speed_without_a_gpu(monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
             for c in json.loads(LAB01.read_text())["cells"]}
    namespace = {"np": np, "grader": grader}
    for kernel in ("naive-kernel", "coalesced-kernel"):       # the sources alone, without their self-checks
        name, source = re.match(r'(\w+_SOURCE) = r"""(.*?)"""', cells[kernel], re.S).groups()
        namespace[name] = source
    monkeypatch.setattr(plt, "show", lambda: None)
    exec(cells["roofline-estimated"], namespace)
    labels = [t.get_text() for t in plt.gcf().axes[0].get_legend().get_texts()]
    plt.close("all")
    for stage in ("naive", "coalesced"):
        assert f"{stage}: predicted on an H200 (no GPU here)" in labels, labels

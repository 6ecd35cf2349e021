"""`python -m grader class-bench` at the smallest scale, on the emulator: a class of four lab 02
submissions (correct, hanging, hostile, slow) graded serially and by two workers sharing one GPU
(a lock file standing for it) gives the same scores, and no timed section beside other GPU work."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

REPO = Path(__file__).resolve().parent.parent


def test_a_small_class_graded_serially_and_by_two_workers_agrees(tmp_path):
    out = tmp_path / "class-autograde.md"
    p = subprocess.run([sys.executable, "-m", "grader", "class-bench", "--students", "4", "--workers", "2",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    text = out.read_text()
    assert re.search(r"^Command \(from the repository root\): `python3 -m grader class-bench --students 4 "
                     r"--workers 2 --out \S+`$", text, re.M), text
    assert "Scores: equal in both runs for 4 of 4 submissions." in text
    runs = re.findall(r"^\| (serial|parallel) \| (\d+) \| [0-9.]+ \| ([0-9.]+) \| (\d+) \|$", text, re.M)
    assert [(r[0], r[1], r[3]) for r in runs] == [("serial", "1", "0"), ("parallel", "2", "0")], text
    assert all(float(r[2]) > 0 for r in runs), text          # the performance checks held the lock alone
    rows = re.findall(r"^\| (s\d\d-[\w-]+) \| ([\w-]+) \| (\S+) \| (\S+) \|", text, re.M)
    assert [r[1] for r in rows] == ["correct", "hangs", "lock-grab", "naive-strided"], text
    scores = {kind: float(a) for _, kind, a, b in rows}
    assert scores["correct"] == scores["lock-grab"] == scores["naive-strided"] > scores["hangs"], text

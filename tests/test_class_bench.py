"""`python -m grader class-bench` at the smallest scale, on the emulator: a class of four lab 02
submissions (correct, hanging, hostile, slow) graded serially and by two workers sharing one GPU
(a lock file standing for it) gives the same scores, and no timed section beside other GPU work."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbgrader")

from grader.programs import class_bench  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def test_the_ratio_is_read_from_what_the_performance_cell_says():
    said = ("M=4096 N=4096 K=4096: 8854 GFLOPS = 0.173 x cuBLAS (51280 GFLOPS, same GPU, same inputs, median of "
            "20 runs); needed 0.1 x cuBLAS = 5128 GFLOPS")
    m = class_bench.MEASURED.search(said)
    assert m and int(m.group(1)) / int(m.group(2)) == 8854 / 51280


def test_only_a_timed_section_beside_another_holding_counts_as_an_overlap():
    held = [("shared", 0, 2), ("shared", 1, 3), ("exclusive", 3, 4), ("shared", 4, 5)]
    assert class_bench.overlapping(held) == 0
    assert class_bench.overlapping(held + [("shared", 3.5, 3.6)]) == 1
    assert class_bench.overlapping(held + [("exclusive", 3.9, 4.5)]) == 2


def _run(workers: int, scores: dict, ratio=None) -> dict:
    return {"workers": workers, "wall": 10.0 / workers, "status": 0, "overlaps": 0, "exclusive": 1.0,
            "results": {s: {"score": v, "ratio": ratio} for s, v in scores.items()}}


def test_the_runs_agree_only_with_every_score_there_and_equal():
    kinds = {"s00-correct": "correct", "s01-hangs": "hangs"}
    same = {"s00-correct": 11.0, "s01-hangs": 3.0}
    text, agree = class_bench.report("python3 -m grader class-bench", "gpu", kinds,
                                     {"serial": _run(1, same, 0.17), "parallel": _run(2, same, 0.1734)})
    assert agree and "largest relative difference: 2.00 %" in text, text
    for other in ({**same, "s01-hangs": 2.5}, {**same, "s01-hangs": None}):
        text, agree = class_bench.report("python3 -m grader class-bench", "gpu", kinds,
                                         {"serial": _run(1, same), "parallel": _run(2, other)})
        assert not agree, text


def test_a_run_stopped_halfway_goes_on_where_it_stopped(tmp_path, monkeypatch):
    """A segment's time counts up to its last finished submission; the next goes on in the same course."""
    pristine, run = tmp_path / "pristine", tmp_path / "serial"
    pristine.mkdir()
    (pristine / "graded.txt").write_text("nothing")
    finishes = "import sys, time; time.sleep(0.2); print('[ 1/2] s00-correct graded', flush=True); time.sleep(0.3)"
    monkeypatch.setattr(class_bench, "autograde_command", lambda course, gpu, workers: [sys.executable, "-c", finishes])
    key = {"students": 2, "workers": 1, "gpu": "0"}
    first = class_bench.grade(pristine, run, "0", 1, tmp_path / "gpu.lock", key)
    kept = json.loads((run / "progress.json").read_text())
    assert first[1:] == (0, 1) and kept["key"] == key and 0.2 <= kept["segments"][0] < first[0]
    (run / "course" / "graded.txt").write_text("one")        # what the stopped segment graded
    kept["segments"] = [100.0]                                # as if it had been stopped after 100 s
    (run / "progress.json").write_text(json.dumps(kept))
    wall, code, segments = class_bench.grade(pristine, run, "0", 1, tmp_path / "gpu.lock", key)
    assert (code, segments) == (0, 2) and 100.5 <= wall < 110 and (run / "course" / "graded.txt").read_text() == "one"
    assert "(segment 2)" not in (run / "autograde.log").read_text()      # the log holds autograde's lines
    _, _, segments = class_bench.grade(pristine, run, "0", 2, tmp_path / "gpu.lock", {**key, "workers": 2})
    assert segments == 1 and (run / "course" / "graded.txt").read_text() == "nothing"


def test_a_run_in_segments_says_so():
    kinds = {"s00-correct": "correct"}
    serial = {**_run(1, {"s00-correct": 11.0}), "segments": 3}
    text, agree = class_bench.report("python3 -m grader class-bench", "gpu", kinds,
                                     {"serial": serial, "parallel": _run(2, {"s00-correct": 11.0})})
    assert agree and "The serial run was stopped and went on 2 time(s): its wall time is the sum of its 3 " \
        "segments', each counted up to its last finished submission." in text, text
    assert "parallel run was stopped" not in text


@pytest.mark.pipeline
def test_a_small_class_graded_serially_and_by_two_workers_agrees(tmp_path):
    out = tmp_path / "class-autograde.md"
    p = subprocess.run([sys.executable, "-m", "grader", "class-bench", "--students", "3", "--workers", "2",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    text = out.read_text()
    assert re.search(r"^Command \(from the repository root\): `python3 -m grader class-bench --students 3 "
                     r"--workers 2 --out \S+`$", text, re.M), text
    assert "Scores: equal in both runs for 3 of 3 submissions." in text
    runs = re.findall(r"^\| (serial|parallel) \| (\d+) \| [0-9.]+ \| ([0-9.]+) \| (\d+) \| 0 \| 0 \|$", text, re.M)
    assert [(r[0], r[1], r[3]) for r in runs] == [("serial", "1", "0"), ("parallel", "2", "0")], text
    assert all(float(r[2]) == 0 for r in runs), text         # nothing is timed on the emulator: never held alone
    rows = re.findall(r"^\| (s\d\d-[\w-]+) \| ([\w-]+) \| (\S+) \| (\S+) \|", text, re.M)
    assert [r[1] for r in rows] == ["correct", "hangs", "lock-grab"], text
    scores = {kind: float(a) for _, kind, a, b in rows}
    assert scores["correct"] == scores["lock-grab"] > scores["hangs"], text

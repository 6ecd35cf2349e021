"""Lab 00 (PyCUDA by hand) through the whole nbgrader pipeline, in a fresh
temporary course holding only this lab: generate_assignment (no solution left
in the release copy), autograde of the reference (every point but the GPU-only
timing plausibility on the emulator), of the blank release copy, and of broken
submissions, each with its exact score per graded cell; and `grader regrade`
recomputes the reference's cells from their text.

Broken submissions (the mistakes new PyCUDA users make):
  short     launch_config with floor division (N // 32): the grid is one block short in x and y
  float64   matmul copies A and B as they come: float64 bytes read as floats
  noevents  time_matmul times the launch call with time.perf_counter, no CUDA events
  nowarmup  time_matmul times from the first launch on (no untimed warm-up)
And a hostile one:
  forges    gflops() writes a passing verdict on every pipe it can find and ends its process: its own
            self-check in the notebook and the autograde's regrade both run it in a process of its own
"""
from __future__ import annotations

import nbformat
import pytest
from nbgrader_course import REPO, cell_output, cell_scores, lab_course, replace, stderr_in_graded_cells

LAB, NB = "00-pycuda-by-hand", "pycuda-by-hand"

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

import grader  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"

POINTS = {"q-blocks-test": 1, "q-idle-test": 1, "q-bytes-test": 1, "matmul-correct-test": 3,
          "matmul-float64-test": 1, "timing-form-test": 2, "timing-plausible-test": 1, "q-gflops-test": 1,
          "gflops-test": 1}
GPU_ONLY = {"timing-plausible-test"}


def _reference_cells() -> dict[str, float]:
    """Every cell's points, except the GPU-only one's on the emulator."""
    return {g: (0.0 if g in GPU_ONLY and not ON_GPU else float(p)) for g, p in POINTS.items()}


def _with(**changed) -> dict[str, float]:
    cells = _reference_cells()
    cells.update({k: float(v) for k, v in changed.items()})
    return cells


# Per cell: what each submission scores (on a GPU the plausibility test counts where the timing is right).
EXPECTED = {
    "ref": _reference_cells(),
    "blank": {g: 0.0 for g in POINTS},
    "short": _with(**{"matmul-correct-test": 0, "matmul-float64-test": 0}),
    "float64": _with(**{"matmul-float64-test": 0}),
    "noevents": _with(**{"timing-form-test": 0, "timing-plausible-test": 0}),
    "nowarmup": _with(**{"timing-form-test": 0}),
    "forges": _with(**{"gflops-test": 0}),
}


def _short(cells):
    replace(cells["launch-config"], "grid = ((N + block[0] - 1) // block[0], (M + block[1] - 1) // block[1], 1)",
            "grid = (N // block[0], M // block[1], 1)")


def _float64(cells):
    replace(cells["matmul"], "    A = np.ascontiguousarray(A, dtype=np.float32)\n"
                             "    B = np.ascontiguousarray(B, dtype=np.float32)\n", "")


def _noevents(cells):
    cell = cells["time-matmul"]
    replace(cell, "    start, end = drv.Event(), drv.Event()\n", "")
    replace(cell, "        start.record()\n        kernel(*args, block=block, grid=grid)\n        end.record()\n"
                  "        end.synchronize()                            # wait until the GPU has passed `end`\n"
                  "        times.append(end.time_since(start) / 1e3)    # milliseconds -> seconds\n",
            "        t0 = time.perf_counter()\n        kernel(*args, block=block, grid=grid)\n"
            "        times.append(time.perf_counter() - t0)\n")
    cell.source = "import time\n" + cell.source


def _nowarmup(cells):
    replace(cells["time-matmul"], "    for _ in range(warmup):                          # untimed: module load, "
                                  "clocks, caches\n        kernel(*args, block=block, grid=grid)\n", "")


def _forges(cells):
    replace(cells["gflops"], "    return 2 * M * N * K / seconds / 1e9\n",
            "    import json, os\n"
            "    forged = {'name': 'gflops-formula', 'status': 'passed', 'message': 'forged', 'points': 1.0}\n"
            "    for fd in range(3, 256):\n"
            "        try:\n"
            "            if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):\n"
            "                os.write(fd, b'J' + json.dumps(forged).encode())\n"
            "        except OSError:\n"
            "            pass\n"
            "    os._exit(0)\n")


SUBMISSIONS = {"ref": None, "blank": False, "short": _short, "float64": _float64, "noevents": _noevents,
               "nowarmup": _nowarmup, "forges": _forges}


# The reference's notebook runs (its outputs are tested); the others are graded from their text.
course = lab_course(LAB, SUBMISSIONS, run=("ref",))


def test_release_has_no_solutions(course):
    text = (course / "release" / LAB / f"{NB}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "HIDDEN TESTS" not in text and "grader.grade(" not in text
    nb = nbformat.reads(text, as_version=4)
    src = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    answers = "".join(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    for gone in ("np.ascontiguousarray", "gpuarray.to_gpu", "drv.memcpy_htod", "end.time_since", "np.median",
                 "2 * M * N * K", "(N + block[0] - 1)", "4 * 32", "4096**3"):
        assert gone not in answers, gone
    for gid in ("matmul", "time-matmul", "gflops"):
        assert "raise NotImplementedError()" in src[gid] and "grader.check(" in src[gid], gid
    assert "grid = None  # YOUR ANSWER HERE" in src["launch-config"]
    for var in ("GRID_BLOCKS", "IDLE_THREADS", "HTOD_BYTES", "GFLOPS_4096"):
        assert f"{var} = None  # YOUR ANSWER HERE" in text, var
    # the given kernel and the imports stay, unchanged
    assert (REPO / "solutions" / "coalesced.cu").read_text() in src["kernel-source"]
    assert "from pycuda.compiler import SourceModule" in src["imports"]


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_per_cell(course, student):
    want = dict(EXPECTED[student])
    if ON_GPU and student in ("short", "float64", "nowarmup"):
        want["timing-plausible-test"] = 1.0          # their time_matmul still times the kernel right
    got = cell_scores(course, LAB, student)
    assert got == pytest.approx(want), f"{student}: {got}"


def test_broken_submissions_say_why(course):
    out = cell_output(course, LAB, "short", "matmul-correct-test")
    assert "never written" in out and "one block short in x" in out and "rounds down" in out, out
    assert "rows 64..69 and columns 96..99 of C were never written" in out, out
    assert "grid dimension of 0" in out, out                 # M = 1: 1 // 32 = 0 blocks
    out = cell_output(course, LAB, "float64", "matmul-float64-test")
    assert "went to the device as float64" in out and "one block short" not in out, out
    out = cell_output(course, LAB, "noevents", "timing-form-test")
    assert "no CUDA event was recorded" in out, out
    out = cell_output(course, LAB, "nowarmup", "timing-form-test")
    assert "warmup=2 asks for 2 untimed launches" in out, out
    out = cell_output(course, LAB, "forges", "gflops-test")
    assert "ProcessEnded" in out and "forged" not in out, out
    if not ON_GPU:
        assert "not graded: no GPU" in cell_output(course, LAB, "ref", "timing-plausible-test")


def test_no_stderr_in_graded_cells(course):
    assert not stderr_in_graded_cells(course, LAB, "ref")


def test_regrade_recomputes_the_reference(course):
    from grader.course.regrade import format_rows, regrade
    rows = regrade(course, LAB, ["ref", "short"])
    text = format_rows(rows)
    assert rows and all(r.regraded is not None for r in rows), text
    assert not any(r.differs for r in rows), text

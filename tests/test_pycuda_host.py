"""Lab 00 (PyCUDA by hand): grader.kernels.host_log's recording and the checks of
grader.grading.checks.pycuda_by_hand. The reference functions are the notebook's own
solution cells (one source of truth), run here in-process; every check passes
them and fails a broken variant with the message a student needs."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

import grader
from grader.grading import registry
from grader.grading.checks import pycuda_by_hand as checks
from grader.grading.host_functions import function_source
from grader.grading.registry import run_here
from grader.grading.report import NOT_GRADED
from grader.kernels.host_log import HostLog, recording
from grader.platform.backend import drivers

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "labs" / "00-pycuda-by-hand" / "pycuda-by-hand.ipynb"
ON_EMULATOR = grader.BACKEND.name == "emulator"
FLOOR = "grid = (N // block[0], M // block[1], 1)"
CEIL = "grid = ((N + block[0] - 1) // block[0], (M + block[1] - 1) // block[1], 1)"


def _cells() -> dict[str, str]:
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.metadata.get("nbgrader")}


def _namespace(replace: dict[str, tuple[str, str]] | None = None, extra: str = "") -> str:
    """The notebook's imports, given kernel and solution cells as one submission's text (without their
    self-checks and prints), with `replace` = {grade_id: (old, new)} applied first, and `extra` after."""
    cells = _cells()
    parts = ["import time", "import numpy as np"]
    for gid in ("kernel-source", "imports", "launch-config", "matmul", "time-matmul", "gflops"):
        src = cells[gid]
        if replace and gid in replace:
            old, new = replace[gid]
            assert old in src, old
            src = src.replace(old, new)
        parts.append("\n".join(ln for ln in src.splitlines() if not ln.startswith(("grader.check(", "print("))))
    return "\n\n".join(parts + [extra]) + "\n"


EXERCISE = {"matmul-correct": "pycuda-matmul", "matmul-float64": "pycuda-matmul", "gflops-formula": "pycuda-gflops",
            "timing-form": "pycuda-timing", "timing-plausible": "pycuda-timing"}


def _run(check: str, submission, seed: int | None = None):
    """One check of lab 00 on a submission's text (or a self-contained function), both halves here."""
    exercise = EXERCISE[check]
    if not isinstance(submission, str):        # a function of this file, under the name the lab asks for
        name = registry.get(exercise).host_function
        submission = function_source(submission) + f"\n{name} = {submission.__name__}\n"
    return run_here(exercise, check, submission, seed)


@pytest.fixture(scope="module")
def ref() -> str:
    return _namespace()


@pytest.fixture(scope="module")
def drv():
    return drivers()[0]


def test_given_kernel_is_the_reference():
    source = _cells()["kernel-source"]
    assert source == f'COALESCED_SOURCE = r"""{(REPO / "solutions" / "coalesced.cu").read_text()}"""'


def test_reference_passes_every_check(ref):
    for check in ("matmul-correct", "matmul-float64", "gflops-formula", "timing-form"):
        r = _run(check, ref, 5)
        assert r.passed, r.text()


def test_timing_plausibility_not_graded_on_the_emulator(ref):
    if not ON_EMULATOR:
        pytest.skip("graded on a GPU")
    r = _run("timing-plausible", ref, 5)
    assert r.status == NOT_GRADED and "not graded: no GPU" in r.message


def test_grid_one_block_short_says_which_rows_and_columns():
    ns = _namespace({"launch-config": (CEIL, FLOOR)})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed
    assert ("rows 64..69 and columns 96..99 of C were never written: your launch block=(32, 32, 1), "
            "grid=(3, 2, 1)") in r.message, r.message
    assert "the grid is one block short in x: 100 columns need ceil(100 / 32) = 4 blocks" in r.message
    assert "N // 32 = 3 rounds down" in r.message
    assert "row 32 and column 64 of C were never written" in r.message          # M=33 N=65
    assert "grid=(1, 0, 1): a grid dimension of 0" in r.message                 # M=1: 1 // 32 = 0
    assert "swapped" not in r.message


def test_grid_two_blocks_short_is_not_called_one():
    ns = _namespace({"launch-config": (CEIL, "grid = (max(1, N // block[0] - 1), max(1, M // block[1] - 1), 1)")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed
    assert "the grid is 2 blocks short in x: 100 columns" in r.message, r.message
    assert "one block short in x: 100" not in r.message


def test_swapped_grid_is_called_swapped_not_short():
    ns = _namespace({"launch-config": (CEIL, "grid = ((M + block[0] - 1) // block[0], (N + block[1] - 1) // "
                                             "block[1], 1)")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed
    assert "columns 96..99 of C were never written" in r.message, r.message
    assert "grid=(3, 4) is the block counts of the M=70 rows in x and of the N=100 columns in y: swapped" in r.message
    assert "block short" not in r.message


def test_wrong_values_inside_the_grid_are_not_blamed_on_the_grid():
    # a kernel that reads B transposed: every element is wrong, the grid is right
    ns = _namespace({"kernel-source": ("B[k * N + col]", "B[col * K + k]")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed
    assert "wrong element(s); first at row" in r.message
    assert "never written" not in r.message and "block short" not in r.message and "float64" not in r.message


def test_float64_inputs_copied_as_they_are():
    ns = _namespace({"matmul": ("    A = np.ascontiguousarray(A, dtype=np.float32)\n"
                                "    B = np.ascontiguousarray(B, dtype=np.float32)\n", "")})
    assert _run("matmul-correct", ns, 5).passed          # float32 inputs: nothing to convert
    r = _run("matmul-float64", ns, 5)
    assert not r.passed
    assert "A went to the device as float64 (25 bytes" not in r.message
    assert "A went to the device as float64 (10440 bytes, 8 an element)" in r.message, r.message   # 45 x 29
    assert "B went to the device as float64" in r.message and "block short" not in r.message


def test_c_allocated_as_float64():
    ns = _namespace({"matmul": ("c_gpu = gpuarray.empty((M, N), np.float32)",
                                "c_gpu = gpuarray.empty((M, N), np.float64)")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed
    assert "C came back into a float64 array of shape" in r.message and "allocate C as np.float32" in r.message, \
        r.message


def test_returning_the_gpuarray_and_python_ints():
    ns = _namespace({"matmul": ("    return c_gpu.get()", "    return c_gpu")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed and "returned a GPUArray: copy C back" in r.message, r.message
    ns = _namespace({"matmul": ("kernel(np.int32(M), np.int32(N), np.int32(K),", "kernel(M, N, K,")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed and "numpy.int32(M)" in r.message, r.message


def test_not_written_yet():
    def matmul(A, B):
        raise NotImplementedError()
    r = _run("matmul-correct", matmul, 5)
    assert not r.passed and "not written yet" in r.message


def test_gflops_mistakes():
    def no_two(M, N, K, seconds):
        return M * N * K / seconds / 1e9

    def mflops(M, N, K, seconds):
        return 2 * M * N * K / seconds / 1e6
    for f, expected in ((no_two, "half: an FMA (multiply-add) is 2 FLOP"), (mflops, "1000x too much")):
        r = _run("gflops-formula", f)
        assert not r.passed and expected in r.message and "wrong on 5 of 5 inputs" in r.message, r.message


# ---- timing ----------------------------------------------------------------------------------------
TIMED = ("        start.record()\n        kernel(*args, block=block, grid=grid)\n        end.record()\n"
         "        end.synchronize()                            # wait until the GPU has passed `end`\n"
         "        times.append(end.time_since(start) / 1e3)    # milliseconds -> seconds\n")
WARMUP = ("    for _ in range(warmup):                          # untimed: module load, clocks, caches\n"
          "        kernel(*args, block=block, grid=grid)\n")
TIMING_VARIANTS = {
    "no events": (TIMED, "        t0 = time.perf_counter()\n        kernel(*args, block=block, grid=grid)\n"
                         "        times.append(time.perf_counter() - t0)\n", "no CUDA event was recorded"),
    "no warm-up": (WARMUP, "", "warmup=2 asks for 2 untimed launches before the first event is recorded; your "
                               "function made 0"),
    "milliseconds": ("end.time_since(start) / 1e3", "end.time_since(start)", "the median in milliseconds"),
    "no synchronize": ("        end.synchronize()                            # wait until the GPU has passed `end`\n",
                       "", "run 1's time was read before its end event was synchronised"),
    "mean": ("return float(np.median(times))", "return float(np.mean(times))", "you returned the mean of your 7 "
                                                                                 "times"),
    "too few runs": ("for _ in range(runs):", "for _ in range(runs - 2):", "runs=7 asks for 7 timed runs; your "
                                                                             "function read 5"),
    "two launches a run": ("        start.record()\n        kernel(*args, block=block, grid=grid)\n",
                           "        start.record()\n        kernel(*args, block=block, grid=grid)\n"
                           "        kernel(*args, block=block, grid=grid)\n", "run 1 had 2 launch(es)"),
}


@pytest.mark.parametrize("variant", sorted(TIMING_VARIANTS))
def test_timing_mistakes_fail_with_their_reason(variant):
    old, new, expected = TIMING_VARIANTS[variant]
    r = _run("timing-form", _namespace({"time-matmul": (old, new)}), 5)
    assert not r.passed, r.text()
    if variant == "no synchronize" and "device not ready" in r.message:   # a real GPU refuses the read itself
        expected = "read an event's time only after end.synchronize()"
    assert expected in r.message, r.message


OTHER_TIMINGS = {"all events, then one synchronisation (grader.kernels.timing's way)": """
def time_matmul(A, B, warmup=2, runs=10):
    go = setup(A, B)
    for _ in range(warmup):
        go()
    events = [(drv.Event(), drv.Event()) for _ in range(runs)]
    for s, e in events:
        s.record()
        go()
        e.record()
    events[-1][1].synchronize()
    return float(np.median([e.time_since(s) / 1e3 for s, e in events]))
""", "a context synchronisation, and time_till": """
def time_matmul(A, B, warmup=2, runs=10):
    go = setup(A, B)
    for _ in range(warmup):
        go()
    times = []
    for _ in range(runs):
        s, e = drv.Event(), drv.Event()
        s.record()
        go()
        e.record()
        drv.Context.synchronize()
        times.append(s.time_till(e) * 1e-3)
    return float(np.median(times))
"""}
SETUP = """
def setup(A, B):
    A, B = A.astype(np.float32), B.astype(np.float32)
    M, K = A.shape
    N = B.shape[1]
    kernel = SourceModule(COALESCED_SOURCE).get_function("sgemm_coalesced")
    a, b, c = gpuarray.to_gpu(A), gpuarray.to_gpu(B), gpuarray.empty((M, N), np.float32)
    block, grid = launch_config(M, N)
    return lambda: kernel(np.int32(M), np.int32(N), np.int32(K), a, b, c, block=block, grid=grid)
"""


@pytest.mark.parametrize("form", sorted(OTHER_TIMINGS))
def test_timing_other_correct_forms_pass(form):
    r = _run("timing-form", _namespace(extra=SETUP + OTHER_TIMINGS[form]), 5)
    assert r.passed, f"{form}: {r.text()}"


def test_recording_restores_the_driver(drv):
    before = {name: drv.Event.__dict__.get(name) for name in ("record", "synchronize", "time_since")}
    call, sync, htod = drv.Function.__dict__.get("__call__"), drv.Context.__dict__["synchronize"], drv.memcpy_htod
    with recording(drv) as log:
        assert drv.Event.record is not before["record"]
        e = drv.Event()
        e.record()
        drv.Context.synchronize()
    assert [x.kind for x in log.entries] == ["record", "sync"]
    assert {name: drv.Event.__dict__.get(name) for name in before} == before
    assert drv.Function.__dict__.get("__call__") is call and drv.Context.__dict__["synchronize"] is sync
    assert drv.memcpy_htod is htod


def test_timed_runs_pairs_records_and_reads():
    log = HostLog()
    log.add("launch", kernel="sgemm_coalesced", grid=(1, 1, 1), block=(32, 32, 1))     # warm-up
    for _ in range(3):
        log.add("record", event=1)
        log.add("launch", kernel="sgemm_coalesced", grid=(1, 1, 1), block=(32, 32, 1))
        log.add("launch", kernel="fill", grid=(1, 1, 1), block=(32, 1, 1))             # not the kernel
        log.add("record", event=2)
        log.add("sync", event=2)
        log.add("elapsed", event=2, start=1, ms=2.0)
        log.add("elapsed", event=2, start=1, ms=2.0)                                    # read twice: one run
    runs = log.timed_runs()
    assert [(r.launches, r.synchronized) for r in runs] == [(1, True)] * 3
    assert checks.form_problems(2e-3, log, warmup=1, runs=3) == []
    assert "the median in milliseconds" in checks.form_problems(2.0, log, warmup=1, runs=3)[0]


def test_through_the_front_end_from_source():
    """The registry's path: the function's source sent to an isolated process."""
    source = "\n".join(_cells()[g] for g in ("imports", "gflops")).replace(
        'grader.check("pycuda-gflops", gflops)   # self-check: runs every time you run this cell', "")
    report = grader.check("pycuda-gflops", "import numpy as np\n" + source, seed=3, announce=False)
    assert report.passed("gflops-formula"), report.text()
    report = grader.check("pycuda-matmul", "def matmul(A, B):\n    return None\n", checks=["matmul-correct"], seed=3,
                          announce=False)
    assert not report.passed("matmul-correct")
    assert "expected a numpy array of shape (70, 100)" in report["matmul-correct"].message


def test_grid_left_none():
    ns = _namespace({"launch-config": (CEIL, "grid = None")})
    r = _run("matmul-correct", ns, 5)
    assert not r.passed and "grader error" not in r.message
    assert "grid=None: each must be a tuple of 3 ints" in r.message, r.message


def test_numpy_instead_of_the_gpu():
    r = _run("matmul-correct", "import numpy as np\ndef matmul(A, B):\n"
                               "    return (A.astype(np.float64) @ B).astype(np.float32)\n", 5)
    assert not r.passed and "launched no kernel" in r.message, r.message

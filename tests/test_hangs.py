"""A kernel that does not finish costs seconds, once per submission: each launch
of the student's kernel on the emulator is stopped after HANG_FACTOR x the
reference kernel's time for the same launch (at least HANG_FLOOR_S), the check
that saw it says so, and the submission's other checks say "not run: the
kernel did not finish" without running it again. The kernels of labs 4, 7 and 8
are stopped the same way, their budget set by the reference solution's launches."""
from __future__ import annotations

import time

import pytest
from conftest import emulator_only

import grader
from grader.grading import frontend, isolation
from grader.grading.checks import common

HANG = r"""
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    volatile int spin = 1;
    while (spin) { }
    if (row < M && col < N) C[row * N + col] = 0.0f;
}
"""

# Finishes on small shapes and hangs on the large one (K >= 128): the budget is per launch.
HANG_LARGE = r"""
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    volatile int spin = (K == 128);
    while (spin) { }
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}
"""


def test_budget_is_factor_times_reference_with_a_floor():
    assert common.budget_seconds(0.0) == common.HANG_FLOOR_S
    assert common.budget_seconds(1.0) == pytest.approx(common.HANG_FACTOR * 1.0)
    assert common.HANG_FACTOR * 0.001 < common.HANG_FLOOR_S     # tiny launches get the floor


@emulator_only
def test_a_hanging_kernel_costs_seconds_once_per_submission(monkeypatch):
    calls = []
    real = frontend.run_check

    def counting(exercise, check, *a, **k):
        calls.append(check)
        return real(exercise, check, *a, **k)

    monkeypatch.setattr(frontend, "run_check", counting)
    start = time.monotonic()
    report = grader.check("naive", HANG, seed=3, announce=False)
    elapsed = time.monotonic() - start
    assert report["compiles"].passed
    correctness = report["correctness"]
    assert not correctness.passed and correctness.details.get("did_not_finish")
    assert "did not finish" in correctness.message and f"{common.HANG_FACTOR} x the reference" in correctness.message
    for name in ("races", "bank-conflicts", "performance"):
        assert report[name].message.startswith("not run: the kernel did not finish"), report[name].message
        assert report[name].fraction == 0
    assert calls == ["compiles", "correctness"], calls            # the hang ran once
    assert elapsed < 60, elapsed
    # A later hidden test cell of the same submission (a separate grader.grade call): no new process.
    start = time.monotonic()
    assert grader.grade("naive", HANG, "races", points=2) == 0
    assert time.monotonic() - start < 2 and calls == ["compiles", "correctness"]


@emulator_only
def test_the_budget_is_per_launch_and_shape():
    report = grader.check("naive", HANG_LARGE, ["correctness"], seed=5, announce=False)
    msg = report["correctness"].message
    assert "M=17 N=33 K=9: all 561 elements correct" in msg, msg
    assert "M=256 N=384 K=128: the kernel did not finish" in msg, msg


def _hanging(file: str, kernel: str) -> str:
    """The reference solution with the kernel spinning forever at its start."""
    import re
    source = (isolation.ROOT / "solutions" / file).read_text()
    hung, n = re.subn(rf"(__global__ void {kernel}\([^)]*\)\s*\{{)", r"\1 volatile int spin_ = 1; while (spin_) { }",
                      source, count=1)
    assert n == 1
    return hung


@emulator_only
@pytest.mark.parametrize("exercise, check, file, kernel", [
    ("transpose", "transpose-correctness", "transpose.cu", "transpose"),
    ("top2", "top2-races", "top2.cu", "top2"),
    ("sssp", "sssp-distances", "sssp.cu", "sssp_relax"),
])
def test_a_hanging_kernel_of_labs_4_7_and_8_costs_seconds(exercise, check, file, kernel):
    start = time.monotonic()
    result = isolation.run_check(exercise, check, _hanging(file, kernel), seed=2)
    elapsed = time.monotonic() - start
    assert not result.passed and result.details.get("did_not_finish"), result.message
    assert "did not finish" in result.message and f"{common.HANG_FACTOR} x the reference" in result.message
    assert elapsed < 60, elapsed



def test_a_gpu_launch_whose_reference_time_is_unknown_is_ended_too(monkeypatch):
    """A copy of the course without its solutions (a notebook's own run, a student's copy) has no reference
    time on a GPU: its launches still end, after HANG_UNKNOWN_S, and the message says which budget it was."""
    armed = []
    monkeypatch.setattr(common.signal, "setitimer", lambda which, seconds: armed.append(seconds))
    monkeypatch.setattr(common, "_alarm", True)
    monkeypatch.setattr(common, "_budgets", {})
    with common.launch_budget(("correctness", "naive", 17, 33, 9), emulated=False) as budget:
        pass
    assert budget == common.HANG_UNKNOWN_S and armed == [common.HANG_UNKNOWN_S, 0]
    killed = -isolation.signal.SIGALRM
    unknown = isolation._outcome("correctness", "", isolation.STARTED, "", killed, False, 240.0, False)
    known = isolation._outcome("correctness", "", isolation.STARTED, "", killed, False, 240.0, True)
    assert f"({common.HANG_UNKNOWN_S:g} s: the reference's time is not known here)" in unknown.message
    assert f"{common.HANG_FACTOR} x the reference kernel's time" in known.message
    assert unknown.details["did_not_finish"] and not unknown.passed

# nvcc removes HANG's loop on a volatile local (it writes C at once); the clock is read anew each time.
HANG_GPU = HANG.replace("volatile int spin = 1;\n    while (spin) { }", "while (clock64() >= 0) { }")


@pytest.mark.skipif(grader.BACKEND.name != "gpu", reason="a GPU launch past its budget ends its grading process")
def test_a_hanging_kernel_on_a_gpu_costs_seconds():
    assert HANG_GPU != HANG
    start = time.monotonic()
    result = isolation.run_check("naive", "correctness", HANG_GPU, seed=3)
    elapsed = time.monotonic() - start
    assert not result.passed and result.details.get("did_not_finish"), result.message
    assert "ran past its budget on the GPU" in result.message, result.message
    assert elapsed < 60, elapsed


@emulator_only
def test_the_references_times_are_measured_once_for_every_later_process(monkeypatch):
    """A class's autograde runs a process per submission: the reference is timed by the first, kept in the
    references' cache, and read by the next (the same reference, grading code, runtime and device)."""
    ex = isolation.registry.get("naive")
    job = isolation.settings.current()
    monkeypatch.setattr(isolation, "_budgets", {})
    measured = isolation.reference_budgets(ex, False, job)
    assert measured and all(seconds > 0 for seconds in measured.values()), measured
    monkeypatch.setattr(isolation, "_budgets", {})               # a later process
    monkeypatch.setattr(isolation, "_collect", lambda *a, **k: pytest.fail("the reference was timed again"))
    assert isolation.reference_budgets(ex, False, job) == measured

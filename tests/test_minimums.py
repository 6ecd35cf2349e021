"""Lab 7: the top-2 reduction and the fused SGEMM + top-2 (solutions/top2.cu,
solutions/sgemm-top2.cu) pass every check; broken variants fail with the
expected message."""
from __future__ import annotations

import numpy as np
import pytest

import grader
from grader.grading.registry import run_here
from grader.kernels import top2

ON_EMULATOR = grader.BACKEND.name == "emulator"

TOP2 = top2.TOP2.solution()
FUSED = top2.FUSED.solution()
BARRIER = "    __syncthreads();\n    if (warp == 0) {"
NO_BARRIER = TOP2.replace(BARRIER, "    if (warp == 0) {")
SAME_CELL_TWICE = TOP2.replace("atomicMin(&out[1], old > k1 ? old : k1);", "atomicMin(&out[1], k1);")


def _empty(source: str, kernel: str) -> str:
    """The source with the kernel's body emptied: what the lab hands out, in effect."""
    start = source.index(f"__global__ void {kernel}(")
    return source[:source.index("{", start)] + "{}\n"


def test_variants_differ():
    assert NO_BARRIER != TOP2 and SAME_CELL_TWICE != TOP2


def test_reference_top2_numpy():
    x = np.array([[3, 1, 1], [0.5, 2, 0.5]], np.float32)
    assert top2.reference_top2(x, 3) == ((0.5, 1, 0), (0.5, 1, 2))
    assert top2.unpack((int(np.float32(0.5).view(np.uint32)) << 32) | 5, 3) == (0.5, 1, 2)


@pytest.mark.parametrize("check", ["top2-exact", "top2-races"])
def test_top2_reference_passes(check):
    r = run_here("top2", check, TOP2, 7)
    assert r.passed, r.text()


@pytest.mark.parametrize("check", ["sgemm-top2-exact", "sgemm-top2-races"])
def test_fused_reference_passes(check):
    r = run_here("sgemm-top2", check, FUSED, 7)
    assert r.passed, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_missing_barrier_fails():
    r = run_here("top2", "top2-races", NO_BARRIER, 3)
    assert not r.passed
    assert "race" in r.message and "__syncthreads()" in r.message, r.message


def test_same_cell_twice_fails():
    r = run_here("top2", "top2-exact", SAME_CELL_TWICE, 3)
    assert not r.passed
    assert "the same cell twice" in r.message, r.message


def test_a_kernel_that_writes_nothing_gets_no_likely_cause():
    """No minimum written anywhere: the scalar tail's hint (right when only tail inputs fail) is not said."""
    r = run_here("top2", "top2-exact", _empty(TOP2, "top2"), 3)
    assert not r.passed and r.message.count("no minimum was written") > 10, r.message
    assert "tail" not in r.message.replace("(the scalar tail)", ""), r.message


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_races_do_not_credit_a_kernel_that_writes_no_minimum():
    """A kernel that leaves the keys as they were has no race, and no credit for it."""
    r = run_here("top2", "top2-races", _empty(TOP2, "top2"), 3)
    assert not r.passed and r.points == 0, r.text()
    assert r.message == ("no minimum was written (key still ~0): only a kernel that computes the two minimums is "
                         "credited with being race-free (the top2-exact check says what is wrong)"), r.message
    r = run_here("sgemm-top2", "sgemm-top2-races", _empty(FUSED, "sgemm_top2"), 3)
    assert not r.passed and "(the sgemm-top2-exact check says what is wrong)" in r.message, r.text()


def _constant(source: str, kernel: str) -> str:
    """The source with the kernel's body replaced by two constant keys: minimums that do not come from the input."""
    start = source.index(f"__global__ void {kernel}(")
    body = "{\n    if (blockIdx.x + threadIdx.x == 0) { out[0] = 5; out[1] = 7; }\n}\n"
    return source[:source.index("{", start)] + body


def test_races_do_not_credit_minimums_that_do_not_depend_on_the_input():
    for exercise, source, kernel in (("top2", TOP2, "top2"), ("sgemm-top2", FUSED, "sgemm_top2")):
        r = run_here(exercise, f"{exercise}-races", _constant(source, kernel), 3)
        assert not r.passed and r.points == 0, r.text()
        assert r.message == ("the same minimums for other inputs (they do not depend on them): only a kernel that "
                             "computes the two minimums is credited with being race-free (the "
                             f"{exercise}-exact check says what is wrong)"), r.message


HOST = f"""import numpy as np
import pycuda.driver as drv
from pycuda.compiler import SourceModule
from grader.kernels import top2
TOP2_SOURCE = {TOP2!r}
"""


def test_host_function_passes_and_host_loop_fails():
    r = run_here("minimums-host", "host-transfers", HOST + """
def minimums(A, B):
    top2_kernel = SourceModule(TOP2_SOURCE).get_function("top2")
    c, M, N = top2.sgemm_on_device(A, B)
    k1, k2 = top2.top2_keys(top2_kernel, c, M * N)
    c.free()
    return top2.unpack(k1, N), top2.unpack(k2, N)
""", 5)
    assert r.passed, r.text()
    r = run_here("minimums-host", "host-transfers", HOST + """
def minimums(A, B):             # reads all of C back and searches it on the host
    c, M, N = top2.sgemm_on_device(A, B)
    C = np.empty(M * N, np.float32)
    drv.memcpy_dtoh(C, c)
    order = sorted(range(M * N), key=lambda i: (C[i], i))[:2]
    return tuple((float(C[i]), i // N, i % N) for i in order)
""", 5)
    assert not r.passed
    assert "bytes came back from the device" in r.message and "not in a loop over C on the host" in r.message


def test_compile_error_is_a_failed_check():
    r = run_here("top2", "top2-exact", TOP2.replace("insert(make_key(v.x", "insrt(make_key(v.x"), 1)
    assert not r.passed and "does not compile" in r.message


def test_check_isolated_report():
    report = grader.check("top2", TOP2, checks=["top2-exact"], seed=11)
    assert report.passed("top2-exact"), report.text()
    assert report.points("top2-exact", 3) == 3.0
    bad = grader.check("top2", SAME_CELL_TWICE, checks=["top2-exact"], seed=11)
    assert bad.points("top2-exact", 3) == 0.0

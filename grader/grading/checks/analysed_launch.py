"""One SGEMM launch under the emulator's analysis, as the bank-conflict and
coalescing checks use it: collect() launches the student's kernel once (within
the budget the reference kernel's analysed launch sets) and returns C and the
analysis' records; outputs() turns them back into a report and C's comparison
with A B, or the result when there is nothing to judge."""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks.common import (
    did_not_finish,
    does_not_compile,
    launch_budget,
    launch_errors,
    launch_failure,
    returned_matrix,
    start_stage_collect,
)
from grader.grading.report import FAILED, NOT_GRADED, CheckResult
from grader.kernels import sgemm
from grader.platform.backend import drivers


def inputs(shape: tuple[int, int, int]):
    """The fixed inputs of these checks (seed 0: the records must not depend on the seed)."""
    M, N, K = shape
    return sgemm.random_inputs(M, N, K, np.random.default_rng(0))


def collect(name: str, stage, source: str, shape: tuple[int, int, int]) -> tuple[dict, dict]:
    """What the kernel did, nothing judged: C and the analysis' records of one launch."""
    meta, function = start_stage_collect(stage, source, on_emulator=True)
    meta.update(failure=None, stopped=False)
    if function is None:
        return meta, {}
    driver, _ = drivers(on_emulator=True)
    M, N, K = shape
    A, B = inputs(shape)
    launch = stage.launch(M, N, K)
    a, b = driver.to_device(A), driver.to_device(B)
    c = driver.to_device(sgemm.poisoned((M, N)))
    with launch_budget((name, stage.id, M, N, K)), \
            analysis.thread_order(0), analysis.analysis() as report:
        try:
            sgemm.launch_kernel(function, launch, M, N, K, a, b, c)
        except launch_errors(driver) as e:
            meta["failure"], meta["stopped"] = launch_failure(driver, e), did_not_finish(e)
            return meta, {}
    C = np.empty((M, N), dtype=np.float32)
    driver.memcpy_dtoh(C, c)
    meta["report"] = analysis.report_data(report)
    return meta, {"C": C}


TILING_FACTOR = 4       # a kernel tiling through shared memory makes at most 1/4 of the global loads of one that does not
# Why a kernel not tiled is not credited: a parenthesis, which a report says once however many checks or
# configurations meet it.
NOT_TILED_WHY = (" (bank conflicts are graded on a kernel whose tiles of A and B go through shared memory, as the "
                 "stage asks)")


def global_loads(report, pointer_arguments=(3, 4)) -> int:
    """Warp requests of the global loads of A and B (the SGEMM kernel's arguments 3 and 4)."""
    names = tuple(f"argument {i} " for i in pointer_arguments)
    return sum(r.requests for r in report.global_accesses if r.op == "ld" and r.buffer.startswith(names))


def shared_tiling_problem(report, *shapes: tuple[int, int, int]) -> str | None:
    """Why the launch does not tile A and B through shared memory (None: it does): it must store to shared
    memory, load from it, and make at most 1/TILING_FACTOR of the global loads of A and B that a kernel
    without shared memory makes (one per thread, per element of C, per k, for each of A and B)."""
    stores = sum(r.requests for r in report.bank_conflicts if r.op == "st")
    loads = sum(r.requests for r in report.bank_conflicts if r.op == "ld")
    if not stores or not loads:
        return ("the kernel does not " + ("use shared memory at all" if not stores and not loads else
                f"{'store tiles to' if not stores else 'read its tiles from'} shared memory") + NOT_TILED_WHY)
    without = sum(2 * K * -(-M * N // 32) for M, N, K in shapes)
    made = global_loads(report)
    if made > without / TILING_FACTOR:
        return (f"the kernel makes {made} warp requests to load A and B from global memory, where a kernel without "
                f"shared memory makes {without}: its tiles of A and B do not go through shared memory (at most "
                f"{without // TILING_FACTOR} requests would show that they do)")
    return None


def outputs(name: str, meta: dict, arrays: dict, shape: tuple[int, int, int], graded: bool):
    """(the analysis report, C against A B, the compiler's log) from collect()'s outputs; or the
    CheckResult when the kernel did not compile or its launch failed."""
    M, N, K = shape
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"])
    if meta.get("failure"):
        return CheckResult(name, FAILED if graded else NOT_GRADED, f"M={M} N={N} K={K}: {meta['failure']}", 0.0,
                           details={"did_not_finish": True} if meta.get("stopped") else {})
    C = returned_matrix(arrays.get("C"), (M, N))
    A, B = inputs(shape)
    computed = sgemm.compare(C if C is not None else sgemm.poisoned((M, N)), A, B)
    return analysis.report_from(meta.get("report", {})), computed, meta.get("log", "")

"""Memory safety of the kernel, always on the emulator (also on GPU machines):
races and out-of-bounds or misaligned accesses from the emulator's analysis,
and a re-run with each block's threads in permuted orders, whose C must be
bit-for-bit the C of the normal order."""
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
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm
from grader.platform.backend import drivers

NAME = "races"
SHAPE = (45, 39, 37)                 # not a tile multiple: edge blocks are exercised
ORDER_SEEDS = (0x5EED1, 0xC0FFEE)
SHOW = 3


def _launch(driver, function, stage, A, B, stopped: list, budget_key: tuple):
    """(C, failure reason or None); exact-size buffers, C NaN-poisoned; the launch within the budget
    the reference's same launch sets."""
    M, K = A.shape
    N = B.shape[1]
    launch = stage.launch(M, N, K)
    a, b = driver.to_device(A), driver.to_device(B)
    C = sgemm.poisoned((M, N))
    c = driver.to_device(C)
    try:
        with launch_budget(budget_key):
            sgemm.launch_kernel(function, launch, M, N, K, a, b, c)
    except launch_errors(driver) as e:
        if did_not_finish(e):
            stopped.append(True)
        return None, launch_failure(driver, e)
    driver.memcpy_dtoh(C, c)
    return C, None



def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the kernel did, nothing judged: C in each thread order, the analysis' races and bad accesses."""
    stage = ctx.stage
    meta, function = start_stage_collect(stage, source, on_emulator=True)
    if function is None:
        return meta, {}
    driver, _ = drivers(on_emulator=True)
    M, N, K = SHAPE
    A, B = sgemm.random_inputs(M, N, K, np.random.default_rng(seed))
    stopped, arrays = [], {}
    with analysis.thread_order(0), analysis.analysis() as report:
        C0, meta["failure"] = _launch(driver, function, stage, A, B, stopped, (NAME, "analysed", stage.id, M, N, K))
    meta["report"] = analysis.report_data(report)
    meta["orders"] = []
    if C0 is not None:
        arrays["C0"] = C0
        for s in ORDER_SEEDS:
            with analysis.thread_order(s):
                C1, failure = _launch(driver, function, stage, A, B, stopped, (NAME, "plain", stage.id, M, N, K))
            meta["orders"].append({"seed": s, "failure": failure})
            if failure:
                break
            arrays[f"C{s}"] = C1
    meta["stopped"] = bool(stopped)
    return meta, arrays


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs."""
    meta, arrays = outputs
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"], seed)
    M, N, K = SHAPE
    report = analysis.report_from(meta.get("report", {}))
    problems = []
    if meta.get("failure"):
        problems.append(f"normal thread order: {meta['failure']}")
    races, oob = list(report.races), list(report.out_of_bounds)
    if races:
        problems.append(f"{len(races)} race(s) on shared or global memory, e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in races[:SHOW]))
    if oob:
        problems.append(f"{len(oob)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in oob[:SHOW]))
    C0 = returned_matrix(arrays.get("C0"), (M, N))
    if C0 is not None:
        problems += analysis.order_problems(
            C0, meta.get("orders", []), lambda s: returned_matrix(arrays.get(f"C{s}"), (M, N)), len(ORDER_SEEDS), "C",
            "threads read data that other threads have not written yet (or overwrite it too early): a missing "
            "__syncthreads()?")
        if sgemm.never_written(C0).any():
            problems.append(f"{int(sgemm.never_written(C0).sum())} element(s) of C were never written: only a kernel "
                            "that computes C is credited with being race-free")
    elif not meta.get("failure"):
        problems.append("the grading process returned no C")
    shape = f"M={M} N={N} K={K}, random seed {seed}"
    log = meta.get("log", "")
    if problems:
        return CheckResult.make(NAME, False, f"{shape}:\n" + "\n".join(problems),
                                details={"seed": seed, **({"did_not_finish": True} if meta.get("stopped") else {})},
                                output=log)
    return CheckResult.make(NAME, True, f"{shape}: no races, no out-of-bounds accesses, the same C in "
                            f"{len(ORDER_SEEDS) + 1} thread orders", details={"seed": seed}, output=log)


CHECK = Check(NAME, collect, judge, timeout=240)

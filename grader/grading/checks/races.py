"""Memory safety of the kernel, always on the emulator (also on GPU machines):
races and out-of-bounds or misaligned accesses from the emulator's analysis,
and a re-run with each block's threads in permuted orders, whose C must be
bit-for-bit the C of the normal order. Credited only to a kernel whose C
comes from A and B (a run on other inputs tells)."""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks.common import (
    ORDER_SEEDS,
    collect_in_orders,
    computed_nothing,
    did_not_finish,
    does_not_compile,
    in_orders_problems,
    launch_errors,
    launch_failure,
    not_credited,
    other_inputs_rng,
    returned_matrix,
    start_stage_collect,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm
from grader.platform.backend import drivers

NAME = "races"
# Neither a tile multiple (edge blocks run); the second has N and K multiples of 4, so that a kernel with a
# float4 path and a scalar one runs both.
SHAPES = ((45, 39, 37), (36, 40, 20))
SHOW = 3


def _launch(driver, function, stage, A, B, stopped: list):
    """(C, failure reason or None); exact-size buffers, C NaN-poisoned. A launch that did not finish adds
    to `stopped`."""
    M, K = A.shape
    N = B.shape[1]
    launch = stage.launch(M, N, K)
    a, b = driver.to_device(A), driver.to_device(B)
    C = sgemm.poisoned((M, N))
    c = driver.to_device(C)
    try:
        sgemm.launch_kernel(function, launch, M, N, K, a, b, c)
    except launch_errors(driver) as e:
        if did_not_finish(e):
            stopped.append(True)
        return None, launch_failure(driver, e)
    driver.memcpy_dtoh(C, c)
    return C, None


def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the kernel did on each shape, nothing judged: C in each thread order, the analysis' races and
    bad accesses. Shapes after one where it fails or stops are not run."""
    stage = ctx.stage
    meta, function = start_stage_collect(stage, source, on_emulator=True)
    if function is None:
        return meta, {}
    driver, _ = drivers(on_emulator=True)
    rng = np.random.default_rng(seed)
    stopped, arrays, meta["shapes"] = [], {}, []
    for i, (M, N, K) in enumerate(SHAPES):
        A, B = sgemm.random_inputs(M, N, K, rng)
        other = sgemm.random_inputs(M, N, K, other_inputs_rng(seed))
        ran, outs = collect_in_orders(NAME, lambda: _launch(driver, function, stage, A, B, stopped),
                                      lambda: _launch(driver, function, stage, *other, stopped),
                                      where=(stage.id, M, N, K))
        meta["shapes"].append(ran)
        arrays.update({f"{i}:{k}": v for k, v in outs.items()})
        report = analysis.report_from(ran["report"])
        if stopped or ran["failure"] or report.races or report.out_of_bounds:
            break
    meta["stopped"] = bool(stopped)
    return meta, arrays


RACES_HEAD = "race(s) on shared or global memory, e.g."
ORDER_CAUSE = ("threads read data that other threads have not written yet (or overwrite it too early): a missing "
               "__syncthreads()")
# A stage's other likely cause of an order-dependent C, said after "a missing __syncthreads()".
LIKELY_TOO = {"double-buffering": ", or the next tile stored into the buffer being read (t % 2 where (t + 1) % 2 "
                                  "belongs)"}


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs."""
    meta, arrays = outputs
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"], seed)
    log = meta.get("log", "")
    ran = meta.get("shapes", [])
    shapes = [f"M={M} N={N} K={K}" for M, N, K in SHAPES]
    for i, shape in enumerate(SHAPES):
        mine = {k.removeprefix(f"{i}:"): v for k, v in arrays.items() if k.startswith(f"{i}:")}
        problems = (in_orders_problems(ran[i], mine, shape[:2], "C", RACES_HEAD, ORDER_CAUSE
                                       + LIKELY_TOO.get(ctx.stage.id, "") + "?", SHOW) if i < len(ran)
                    else ["the grading process returned nothing for this shape"])
        if problems:
            return CheckResult.make(NAME, False, f"{shapes[i]}, random seed {seed}:\n" + "\n".join(problems),
                                    details={"seed": seed, **({"did_not_finish": True} if meta.get("stopped") else {})},
                                    output=log)
        C0 = returned_matrix(mine.get("out0"), shape[:2])
        other = returned_matrix(mine.get("other"), shape[:2])
        nothing = C0 is not None and computed_nothing(C0, other, "C", "A and B")
        if nothing:         # no race found, but on a kernel that computes nothing
            return CheckResult.make(NAME, False, f"{shapes[i]}, random seed {seed}: "
                                    + not_credited(nothing, "computes C", "correctness"), details={"seed": seed},
                                    output=log)
    return CheckResult.make(NAME, True, f"{' and '.join(shapes)}, random seed {seed}: no races, no out-of-bounds "
                            f"accesses, the same C in {len(ORDER_SEEDS) + 1} thread orders",
                            details={"seed": seed}, output=log)


CHECK = Check(NAME, collect, judge, timeout=240)

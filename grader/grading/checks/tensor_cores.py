"""The warp-specialized tensor-core GEMM (solutions/warp-specialized-wmma.cu; host driver
grader.kernels.tensor_gemm), C = A B with A and B in bfloat16 and C accumulated in float:

    tensor-gemm-correctness   every element of C within the rounding of a float32 accumulation of the exact
                              product (2 K float32 epsilons of sum_k |a_ik b_kj|), on shapes whose sides are
                              multiples of 8 and not of the tiles, C NaN-poisoned inside guard zones
    tensor-gemm-races         the emulator's race and out-of-bounds analysis (the order mbarriers give
                              included: a stage refilled before its consumers released it, read before its
                              wait, an mbarrier used before its initialisation is ordered before the use), and
                              the same C in permuted thread orders (always on the emulator)
"""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks.common import (
    GUARD_BITS,
    did_not_finish,
    does_not_compile,
    guard_problems,
    launch_budget,
    launch_errors,
    launch_failure,
    returned_matrix,
    start_collect,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import bf16, tensor_gemm
from grader.kernels.sgemm import driver_of, nan_hint, never_written

# (M, N, K): multiples of 8, none of the tiles (64 x 64, BK 32) but the first; one tile of K, and K past the ring.
SHAPES = [(64, 64, 64), (8, 8, 8), (96, 80, 72), (200, 136, 40), (72, 200, 264)]
LARGE_EMULATOR = (128, 192, 256)
LARGE_GPU = (2048, 3000, 1024)
RACES_SHAPE = (96, 80, 136)
ORDER_SEEDS = (0x5EED1, 0xC0FFEE)
GUARD = 4096
SHOW = 3


def shapes(on_gpu: bool) -> list[tuple[int, int, int]]:
    return SHAPES + [LARGE_GPU if on_gpu else LARGE_EMULATOR]


def _compare(C: np.ndarray, A: np.ndarray, B: np.ndarray) -> str | None:
    """None when every element of C is within the tolerance of the exact product, else how many are not and
    the first of them."""
    exact, tolerance = bf16.product_and_tolerance(A, B)
    bad = ~(np.abs(C - exact) <= tolerance)
    if not bad.any():
        return None
    r, c = (int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {C.size} elements of C wrong; first C[{r}][{c}]: expected {exact[r, c]:.6g} "
            f"(within {tolerance[r, c]:.2g}), got {C[r, c]:.6g}{nan_hint(C[r, c])}")


def collect_correctness(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(tensor_gemm.WARP_SPECIALIZED, source)
    arrays = {}
    if fns is None:
        return meta, arrays
    function = fns["gemm_bf16"]
    drv = driver_of(function)
    rng = np.random.default_rng(seed)
    meta["shapes"] = []
    for i, shape in enumerate(shapes(ctx.gpu)):
        A, B = tensor_gemm.inputs(*shape, rng)
        try:
            with launch_budget(("tensor-gemm-correctness", i), emulated=not ctx.gpu):
                C, before, after = tensor_gemm.run_guarded(function, A, B, GUARD, GUARD_BITS)
        except launch_errors(drv) as e:
            meta["shapes"].append({"failure": launch_failure(drv, e)})
            if ctx.gpu or did_not_finish(e):
                break           # on a GPU the context is gone after a fault; a hang would hang again
            continue
        meta["shapes"].append({"failure": None})
        arrays.update({f"C{i}": C, f"before{i}": before, f"after{i}": after})
    return meta, arrays


def judge_correctness(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "tensor-gemm-correctness"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    rng = np.random.default_rng(seed)
    ran = list(meta.get("shapes", []))
    ok, lines, said = True, [], set()
    for i, (M, N, K) in enumerate(shapes(ctx.gpu)):
        shape = f"M={M} N={N} K={K}"
        A, B = tensor_gemm.inputs(M, N, K, rng)
        if i >= len(ran):
            ok = False
            if any(r.get("failure") for r in ran):
                break                # the rest was not run after a fault or a hang
            lines.append(f"{shape}: the grading process returned no result for this shape")
            continue
        if ran[i].get("failure"):
            ok = False
            lines.append(f"{shape}: {ran[i]['failure']}")
            continue
        C = returned_matrix(arrays.get(f"C{i}"), (M, N))
        if C is None:
            ok = False
            lines.append(f"{shape}: the grading process returned no C of this shape")
            continue
        problems = guard_problems(np.asarray(arrays.get(f"before{i}", [])), np.asarray(arrays.get(f"after{i}", [])),
                                  M * N, "C", said)
        wrong = _compare(C, A, B)
        problems += [wrong] if wrong else []
        if problems:
            ok = False
            lines.append(f"{shape}: " + "; ".join(problems))
        else:
            lines.append(f"{shape}: C correct")
    head = (f"correct on all {len(shapes(ctx.gpu))} shapes" if ok else "wrong") + \
        f" (random seed {seed}; grid ceil(N / 64) x ceil(M / 64) blocks of {tensor_gemm.THREADS} threads)"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed},
                            output=meta.get("log", ""))


def _launch(function, A: np.ndarray, B: np.ndarray):
    """(C, failure reason or None)."""
    drv = driver_of(function)
    try:
        C, _, _ = tensor_gemm.run_guarded(function, A, B, GUARD, GUARD_BITS)
    except launch_errors(drv) as e:
        return None, launch_failure(drv, e)
    return C, None


def collect_races(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(tensor_gemm.WARP_SPECIALIZED, source, on_emulator=True)
    if fns is None:
        return meta, {}
    function = fns["gemm_bf16"]
    A, B = tensor_gemm.inputs(*RACES_SHAPE, np.random.default_rng(seed))
    arrays = {}
    with launch_budget(("tensor-gemm-races", "analysed")), analysis.thread_order(0), analysis.analysis() as report:
        C0, meta["failure"] = _launch(function, A, B)
    meta["report"] = analysis.report_data(report)
    meta["orders"] = []
    if C0 is not None:
        arrays["C0"] = C0
        for s in ORDER_SEEDS:
            with launch_budget(("tensor-gemm-races", "plain")), analysis.thread_order(s):
                C1, failure = _launch(function, A, B)
            meta["orders"].append({"seed": s, "failure": failure})
            if failure:
                break
            arrays[f"C{s}"] = C1
    return meta, arrays


def judge_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "tensor-gemm-races"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    M, N, K = RACES_SHAPE
    report = analysis.report_from(meta.get("report", {}))
    failure = meta.get("failure")
    problems = [f"normal thread order: {failure}"] if failure else []
    races, oob = list(report.races), list(report.out_of_bounds)
    if races:
        problems.append(f"{len(races)} race(s) on shared memory, e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in races[:SHOW]))
    if oob and not failure:
        problems.append(f"{len(oob)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in oob[:SHOW]))
    C0 = returned_matrix(arrays.get("C0"), (M, N))
    if C0 is not None:
        problems += analysis.order_problems(
            C0, meta.get("orders", []), lambda s: returned_matrix(arrays.get(f"C{s}"), (M, N)), len(ORDER_SEEDS),
            "C", "threads read a stage before its copy landed or after it was refilled: a wait on the wrong "
            "mbarrier or parity, or a stage released before it was read?")
        if never_written(C0).any():
            problems.append(f"{int(never_written(C0).sum())} element(s) of C were never written: only a kernel that "
                            "computes C is credited with being race-free")
    elif not failure:
        problems.append("the grading process returned no C")
    shape = f"M={M} N={N} K={K}, random seed {seed}"
    log = meta.get("log", "")
    if problems:
        return CheckResult.make(name, False, f"{shape}:\n" + "\n".join(problems), details={"seed": seed}, output=log)
    return CheckResult.make(name, True, f"{shape}: no races, no out-of-bounds accesses, the same C in "
                            f"{len(ORDER_SEEDS) + 1} thread orders", details={"seed": seed}, output=log)


CHECKS = (Check("tensor-gemm-correctness", collect_correctness, judge_correctness, timeout=300),
          Check("tensor-gemm-races", collect_races, judge_races, timeout=300))

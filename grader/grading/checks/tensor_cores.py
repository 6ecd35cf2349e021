"""The tensor-core GEMMs of the Hopper lab (host drivers in grader.kernels.tensor_gemm), C = A B with A and B
in bfloat16 and C accumulated in float, one set of checks per kernel, named by its prefix: WMMA_TILED_CHECKS
(wmma-gemm-..., solutions/wmma-tiled.cu), TMA_RING_CHECKS (tma-gemm-..., solutions/tma-ring.cu), CHECKS
(tensor-gemm-..., solutions/warp-specialized-wmma.cu) and WGMMA_CHECKS (wgmma-gemm-...,
solutions/warp-specialized-wgmma.cu):

    tensor-gemm-correctness   every element of C within the rounding of a float32 accumulation of the exact
                              product (2 K float32 epsilons of sum_k |a_ik b_kj|), on shapes whose sides are
                              multiples of 8 and not of the tiles, C NaN-poisoned inside guard zones
    tensor-gemm-races         the emulator's race and out-of-bounds analysis (the order mbarriers give
                              included: a stage refilled before its consumers released it, read before its
                              wait, an mbarrier used before its initialisation is ordered before the use), and
                              the same C in permuted thread orders (always on the emulator)
    tensor-gemm-performance   on a GPU, once correct: GFLOPS against cuBLAS's GEMM of the same bfloat16
                              inputs with FP32 accumulation, timed side by side under the protocol of
                              grader.kernels.timing, and the exercise's threshold (thresholds.json); without
                              a GPU, not graded

On a GPU that cannot run the kernel (wgmma is Hopper's alone; tensor copies need compute capability 9.0), the
correctness check runs it on the emulator and its speed is not graded: it counts on the course's Hopper GPU.
"""
from __future__ import annotations

import numpy as np

from grader.grading.checks import performance, thresholds, wrong_patterns
from grader.grading.checks.common import (
    GUARD_BITS,
    GuardedCase,
    collect_guarded,
    collect_in_orders,
    does_not_compile,
    judge_guarded,
    judge_in_orders,
    launch_errors,
    launch_failure,
    other_inputs_rng,
    start_collect,
)
from grader.grading.protocol import KERNEL_HANG, Check, Context, Outputs
from grader.grading.report import NOT_GRADED, PASSED, CheckResult
from grader.kernels import bf16, tensor_gemm, timing
from grader.kernels.sgemm import driver_of, value_hint
from grader.kernels.tensor_gemm import TensorGemm
from grader.platform import devices

# (M, N, K): multiples of 8, none of the tiles (64 x 64 or 128 x 256) but the first; one tile of K, and K past
# either ring (3 x 32, 3 x 64); on the emulator too, a second column of 256-wide tiles.
SHAPES = [(64, 64, 64), (8, 8, 8), (96, 80, 72), (200, 136, 40), (72, 200, 264)]
LARGE_EMULATOR = (128, 264, 256)
LARGE_GPU = (2048, 3000, 1024)
RACES_SHAPE = (72, 80, 328)            # K past either ring: a stage is refilled
GUARD = 4096
SHOW = 3


def shapes(on_gpu: bool) -> list[tuple[int, int, int]]:
    return SHAPES + [LARGE_GPU if on_gpu else LARGE_EMULATOR]


def _compare(C: np.ndarray, A: np.ndarray, B: np.ndarray, said: set) -> str | None:
    """None when every element of C is within the tolerance of the exact product, else how many are not and
    the first of them (with what its value means, where `said` does not hold it yet)."""
    exact, tolerance = bf16.product_and_tolerance(A, B)
    bad = ~(np.abs(C - exact) <= tolerance)
    if not bad.any():
        return None
    r, c = (int(v) for v in np.argwhere(bad)[0])
    hint = value_hint(C[r, c])
    return (f"{int(bad.sum())} of {C.size} elements of C wrong; first C[{r}][{c}]: expected {exact[r, c]:.6g} "
            f"(within {tolerance[r, c]:.2g}), got {C[r, c]:.6g}"
            + "".join(wrong_patterns.once([hint and (hint, hint)], said)))


RING_HINT = ("threads read a stage before its copy landed or after it was refilled: a wait on the wrong mbarrier or "
             "parity, or a stage released before it was read?")
RING_HANG = ("an mbarrier wait on a phase that never completes, or on one a refill has already moved past (a stage "
             "refilled before every thread had waited for it)? an endless loop?")
TILE_HINT = ("threads read a tile before every thread had stored its part, or overwrote it while others still read "
             "it: a __syncthreads() missing?")


def cannot_run(gemm: TensorGemm, ctx: Context) -> str | None:
    """On a GPU that cannot run `gemm`'s kernel, why not; else (no GPU, or one that can) None."""
    if not ctx.gpu:
        return None
    name, (major, minor) = devices.name_and_capability()
    lacks = gemm.lacks((major, minor))
    return lacks and f"this GPU ({name}, compute capability {major}.{minor}) cannot run this kernel: {lacks}"


def checks(gemm: TensorGemm, prefix: str, race_hint: str = RING_HINT,
           hang_hint: str = RING_HANG) -> tuple[Check, Check, Check]:
    """The correctness, race and performance checks of `gemm`'s kernel, named prefix-correctness,
    prefix-races and prefix-performance; race_hint and hang_hint: the likely cause of a race, of a hang."""
    correctness, races, speed = f"{prefix}-correctness", f"{prefix}-races", f"{prefix}-performance"

    def collect_correctness(source: str, seed: int, ctx: Context) -> Outputs:
        unable = cannot_run(gemm, ctx)
        meta, fns = start_collect(gemm.kernels, source, on_emulator=unable is not None)
        meta["emulated_because"] = unable
        if fns is None:
            return meta, {}
        function = fns[gemm.name]
        on_gpu = ctx.gpu and unable is None
        rng = np.random.default_rng(seed)
        operands = [tensor_gemm.inputs(*shape, rng) for shape in shapes(on_gpu)]
        runs = [lambda A=A, B=B: tensor_gemm.run_guarded(gemm, function, A, B, GUARD, GUARD_BITS)
                for A, B in operands]
        meta["shapes"], arrays = collect_guarded(correctness, runs, on_gpu, driver_of(function))
        return meta, arrays

    def judge_correctness(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
        meta, arrays = outputs
        if meta.get("compile_error") is not None:
            return does_not_compile(correctness, meta["compile_error"], seed)
        unable = meta.get("emulated_because")
        rng = np.random.default_rng(seed)
        cases = [GuardedCase(f"M={M} N={N} K={K}", (M, N), "C", lambda C, said, AB=AB: _compare(C, *AB, said),
                             "C correct")
                 for M, N, K in shapes(ctx.gpu and not unable) for AB in [tensor_gemm.inputs(M, N, K, rng)]]
        ok, lines = judge_guarded(list(meta.get("shapes", [])), arrays, cases)
        head = (f"correct on all {len(cases)} shapes" if ok else "wrong") + f" (random seed {seed}; {gemm.geometry()})"
        if unable:
            head += f"\nrun on the CPU emulator: {unable}"
        return CheckResult.make(correctness, ok, head + "\n" + "\n".join(lines), details={"seed": seed},
                                output=meta.get("log", ""))

    def launch(function, A: np.ndarray, B: np.ndarray):
        """(C, failure reason or None)."""
        drv = driver_of(function)
        try:
            C, _, _ = tensor_gemm.run_guarded(gemm, function, A, B, GUARD, GUARD_BITS)
        except launch_errors(drv) as e:
            return None, launch_failure(drv, e)
        return C, None

    def collect_races(source: str, seed: int, ctx: Context) -> Outputs:
        meta, fns = start_collect(gemm.kernels, source, on_emulator=True)
        if fns is None:
            return meta, {}
        A, B = tensor_gemm.inputs(*RACES_SHAPE, np.random.default_rng(seed))
        ran, arrays = collect_in_orders(races, lambda: launch(fns[gemm.name], A, B), lambda: launch(
            fns[gemm.name], *tensor_gemm.inputs(*RACES_SHAPE, other_inputs_rng(seed))))
        return {**meta, **ran}, arrays

    def judge_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
        M, N, K = RACES_SHAPE
        return judge_in_orders(
            races, seed, *outputs, f"M={M} N={N} K={K}", (M, N), "C", "race(s) on shared memory, e.g.", race_hint,
            "computes C", SHOW)

    def collect_performance(source: str, seed: int, ctx: Context) -> Outputs:
        if not ctx.gpu:
            return {}, {}
        unable = cannot_run(gemm, ctx)
        if unable:
            return {"unable": unable}, {}
        meta, fns = start_collect(gemm.kernels, source)
        if fns is None:
            return meta, {}
        meta["correctness"], arrays = collect_correctness(source, seed, ctx)
        if judge_correctness((meta["correctness"], arrays), seed, ctx).status != PASSED:
            return meta, arrays
        M, N, K = thresholds.for_stage(ctx.exercise).size
        w = timing.make_workload(M, N, K, bf16=True)
        timed = tensor_gemm.launcher(gemm, fns[gemm.name], w.A16.data.ptr, w.B16.data.ptr, w.C.data.ptr, M, N, K,
                                     on_emulator=False)
        meta["kernel"] = performance.measured(timing.measure_launches([timed], w, budget_s=performance.BUDGET_S)[0])
        return meta, arrays

    def judge_performance(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
        meta, arrays = outputs
        if not ctx.gpu:
            return CheckResult(speed, NOT_GRADED, performance.NO_GPU, 0.0)
        if meta.get("unable"):
            return CheckResult(speed, NOT_GRADED, f"not graded: {meta['unable']}; its speed counts on the course's "
                               "Hopper GPU", 0.0)
        if meta.get("compile_error") is not None:
            return does_not_compile(speed, meta["compile_error"], seed)
        if "correctness" not in meta or \
                judge_correctness((meta["correctness"], arrays), seed, ctx).status != PASSED:
            return CheckResult.make(speed, False, performance.WRONG_BEFORE_TIMING)
        return performance.rated(speed, meta, thresholds.for_stage(ctx.exercise), seed, meta.get("log", ""))

    return (Check(correctness, collect_correctness, judge_correctness, timeout=300, hang_hint=hang_hint),
            Check(races, collect_races, judge_races, timeout=300, hang_hint=hang_hint),
            Check(speed, collect_performance, judge_performance, timeout=480, hang_hint=hang_hint,
                  timed_on_reference=False, times_kernels=True))


WMMA_TILED_CHECKS = checks(tensor_gemm.WMMA_TILED, "wmma-gemm", TILE_HINT, KERNEL_HANG)
TMA_RING_CHECKS = checks(tensor_gemm.TMA_RING, "tma-gemm")
CHECKS = checks(tensor_gemm.WARP_SPECIALIZED, "tensor-gemm")
WGMMA_CHECKS = checks(tensor_gemm.WGMMA, "wgmma-gemm")

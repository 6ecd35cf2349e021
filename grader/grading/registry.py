"""The one check registry: every exercise of every lab and the checks that grade it.

    lab  exercise              submission                         checks
    01-06 an SGEMM stage id    CUDA C holding the stage kernel    compiles, correctness, races, bank-conflicts,
         ("naive", ...)                                           performance (+ EXTRA_CHECKS of some stages)
    00   "pycuda-matmul"       Python defining matmul(A, B)       matmul-correct, matmul-float64
    00   "pycuda-gflops"       Python defining gflops(M, N, K, s) gflops-formula
    00   "pycuda-timing"       Python defining time_matmul(...)   timing-form, timing-plausible
    03   "blocks-per-sm"       Python defining blocks_per_sm(...) h200-limits, cuda-occupancy-api
    04   "transpose"           CUDA C (solutions/transpose.cu)    transpose-correctness, -races, -bank-conflicts
    06   "autotune-violations" Python defining violations(...)    rules-tiles, rules-resources
    06   "autotune-search"     Python defining search(...)        search-fake-space, search-tuned-performance
    07   "top2"                CUDA C (solutions/top2.cu)         top2-exact, top2-races
    07   "sgemm-top2"          CUDA C (solutions/sgemm-top2.cu)   sgemm-top2-exact, sgemm-top2-races
    07   "minimums-host"       Python defining minimums(A, B)     host-transfers
    08   "sssp"                CUDA C (solutions/sssp.cu)         sssp-distances, sssp-path, sssp-races
    09   "wmma-tiled"          CUDA C (solutions/wmma-tiled.cu)   wmma-gemm-correctness, -races, -performance
    09   "tma-ring"            CUDA C (solutions/tma-ring.cu)     tma-gemm-correctness, -races, -performance
    09   "warp-specialized"    CUDA C (solutions/                 tensor-gemm-correctness, -races, -performance
                               warp-specialized-wmma.cu)
    09   "warp-specialized-    CUDA C (solutions/                 wgmma-gemm-correctness, -races, -performance
         wgmma"                warp-specialized-wgmma.cu)

Every check follows grader.grading.protocol (collect in the sandbox, judge
here); each is defined, as data, in its module under grader/grading/checks.
A numeric question is not an exercise: its expected value lives in the
hidden test cell only (grader.grade_answer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grader.grading import protocol
from grader.grading.checks import (
    alignment,
    autotuning,
    bank_conflicts,
    bank_conflicts_configs,
    blocks_per_sm,
    coalescing,
    compiles,
    correctness,
    minimums,
    padded_transpose,
    performance,
    pycuda_by_hand,
    races,
    shortest_paths,
    tensor_cores,
)
from grader.grading.checks.common import new_seed
from grader.grading.protocol import Check, Context
from grader.grading.report import CheckResult
from grader.kernels import sssp, tensor_gemm, timing, top2, transpose
from grader.kernels.stages import STAGES, Stage
from grader.platform import settings


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    checks: tuple[Check, ...]
    stage: Stage | None = None               # an SGEMM stage's exercise
    host_function: str | None = None         # a Python exercise: the function a submission defines
    reference: Callable[[], str] | None = None   # the reference solution's text (launch budgets are timed on it)

    @property
    def check_names(self) -> list[str]:
        return [c.name for c in self.checks]

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check '{name}' for '{self.id}'; checks: {', '.join(self.check_names)}")


SGEMM_CHECKS = (compiles.CHECK, correctness.CHECK, races.CHECK, bank_conflicts.CHECK, performance.CHECK)
# Checks some stages add, each placed before the named check: global-memory sectors
# per request (lab 01: graded for coalesced, information for naive), the float4 path
# and its fallback (lab 05), the kernel under other tile configurations (labs 04 and 06).
EXTRA_CHECKS = {"naive": [(coalescing.CHECK, "performance")], "coalesced": [(coalescing.CHECK, "performance")],
                "vectorized": [(alignment.CHECK, "races")], "double-buffering": [(alignment.CHECK, "races")],
                "bank-conflict-free": [(bank_conflicts_configs.CHECK, "performance")],
                "warptiling": [(bank_conflicts_configs.CHECK, "performance")]}


def stage_checks(stage_id: str) -> tuple[Check, ...]:
    checks = list(SGEMM_CHECKS)
    for check, before in EXTRA_CHECKS.get(stage_id, ()):
        checks.insert([c.name for c in checks].index(before), check)
    return tuple(checks)


EXERCISES: dict[str, Exercise] = {
    **{st.id: Exercise(st.id, st.title, stage_checks(st.id), stage=st, reference=st.source) for st in STAGES},
    **{e.id: e for e in (
        Exercise("top2", "the two minimums of an array (top-2 reduction)", minimums.TOP2_CHECKS,
                 reference=top2.TOP2.solution),
        Exercise("sgemm-top2", "SGEMM with the top-2 reduction fused into its epilogue", minimums.FUSED_CHECKS,
                 reference=top2.FUSED.solution),
        Exercise("sssp", "shortest paths on the grid graph of C", shortest_paths.CHECKS, reference=sssp.SSSP.solution),
        Exercise("transpose", "a matrix transpose through a padded 32 x 33 shared tile", padded_transpose.CHECKS,
                 reference=transpose.TRANSPOSE.solution),
        Exercise("wmma-tiled", "a bfloat16 GEMM on the tensor cores: wmma fragments on tiles in shared memory",
                 tensor_cores.WMMA_TILED_CHECKS, reference=tensor_gemm.WMMA_TILED.kernels.solution),
        Exercise("tma-ring", "a bfloat16 GEMM whose tiles come by tensor copies through a ring of mbarrier stages",
                 tensor_cores.TMA_RING_CHECKS, reference=tensor_gemm.TMA_RING.kernels.solution),
        Exercise("warp-specialized", "a warp-specialized bfloat16 GEMM: a producer warp's tensor copies through "
                 "an mbarrier ring, consumer warps on the tensor cores", tensor_cores.CHECKS,
                 reference=tensor_gemm.WARP_SPECIALIZED.kernels.solution),
        Exercise("warp-specialized-wgmma", "a warp-specialized bfloat16 GEMM with wgmma: a producer warp's "
                 "swizzled tensor copies through an mbarrier ring, two consumer warpgroups", tensor_cores.WGMMA_CHECKS,
                 reference=tensor_gemm.WGMMA.kernels.solution),
        Exercise("minimums-host", "a host function: the two minimums of C = A B, found on the GPU",
                 minimums.HOST_CHECKS, host_function=minimums.HOST_FUNCTION),
        Exercise("pycuda-matmul", "a host function: C = A B with sgemm_coalesced, written in PyCUDA",
                 pycuda_by_hand.MATMUL_CHECKS, host_function=pycuda_by_hand.MATMUL),
        Exercise("pycuda-gflops", "a host function: GFLOPS from M, N, K and seconds", pycuda_by_hand.GFLOPS_CHECKS,
                 host_function=pycuda_by_hand.GFLOPS),
        Exercise("pycuda-timing", "a host function: the median time of a launch, with CUDA events",
                 pycuda_by_hand.TIMING_CHECKS, host_function=pycuda_by_hand.TIMING),
        Exercise("blocks-per-sm", "a host function: how many blocks of a kernel fit on one H200 SM",
                 blocks_per_sm.CHECKS, host_function=blocks_per_sm.HOST_FUNCTION),
        Exercise("autotune-violations", "a host function: violations(config, limits), the rules checked before "
                 "compiling", autotuning.VIOLATIONS_CHECKS, host_function=autotuning.VIOLATIONS),
        Exercise("autotune-search", "a host function: search(candidates, reject_fn, check_fn, time_fn)",
                 autotuning.SEARCH_CHECKS, host_function=autotuning.SEARCH),
    )},
}


def get(exercise: str) -> Exercise:
    """The exercise with this id; KeyError naming them all."""
    try:
        return EXERCISES[exercise]
    except KeyError:
        raise KeyError(f"no exercise '{exercise}'; exercises: {', '.join(EXERCISES)}") from None


def run_here(exercise: str | Stage, check: str | Check, submission: str, seed: int | None = None) -> CheckResult:
    """Both halves of one check in this process, without a sandbox or launch budgets (tests and tools).
    `exercise`: an exercise id, or a Stage (which may differ from the table's: other defines)."""
    stage = exercise if isinstance(exercise, Stage) else get(exercise).stage
    exercise_id = exercise.id if isinstance(exercise, Stage) else exercise
    spec = check if isinstance(check, Check) else get(exercise_id).check(check)
    ctx = Context(exercise_id, stage, timing.on_gpu(), settings.current())
    return protocol.run_here(spec, submission, new_seed() if seed is None else int(seed), ctx)

"""The one check registry: every exercise of every lab and the checks that
grade it.

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
    08   "sssp"                CUDA C (solutions/sssp.cu)         sssp-distances, sssp-path

Python submissions are graded from their source (grader.grading.host_functions).
Every check has one interface, run(submission: str, seed: int | None) ->
CheckResult (an SGEMM check's stage is bound here), and a time limit for the
whole grading process. A numeric question is not an exercise: its expected
value lives in the hidden test cell only (grader.grade_answer).

Layer: checks (imports the checks and the kernels' tables).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

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
    performance,
    races,
)
from grader.grading.checks import padded_transpose as transpose
from grader.grading.checks import pycuda_by_hand as pycuda_host
from grader.grading.checks import shortest_paths as sssp
from grader.grading.checks.common import split_run
from grader.grading.report import CheckResult
from grader.kernels.stages import STAGES, Stage

# Seconds per check (the whole grading process: start, compile, every launch).
SGEMM_TIMEOUTS = {"compiles": 120, "correctness": 240, "races": 240, "bank-conflicts": 240, "coalescing": 240,
                  "performance": 480}
KERNEL_TIMEOUT = 300        # the other kernel exercises
FUNCTION_TIMEOUT = 300      # a Python function


@dataclass(frozen=True)
class Check:
    """run(submission, seed) -> CheckResult. A check that can also be split
    has collect(submission, seed) -> (meta, arrays), what the kernel did, and
    judge(meta, arrays, gpu) -> CheckResult: grader.grading.isolation then runs
    collect in the sandboxed process and judge in its own (trusted) one."""
    name: str
    run: Callable[[str, int | None], CheckResult]
    timeout: float
    hang_hint: str = "an endless loop?"
    collect: Callable | None = None
    judge: Callable | None = None


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    checks: tuple[Check, ...]
    host_function: str | None = None      # host exercises: the function a submission defines

    @property
    def check_names(self) -> list[str]:
        return [c.name for c in self.checks]

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check '{name}' for '{self.id}'; checks: {', '.join(self.check_names)}")


SGEMM_CHECKS = {"compiles": compiles, "correctness": correctness, "races": races,
                "bank-conflicts": bank_conflicts, "performance": performance}
# Checks some stages add, each placed before the named check: global-memory sectors
# per request (lab 01: graded for coalesced, information for naive), the float4 path
# and its fallback (lab 05), the kernel under other tile configurations (labs 04 and 06).
EXTRA_CHECKS = {"naive": [(coalescing, "performance")], "coalesced": [(coalescing, "performance")],
                "vectorized": [(alignment, "races")], "double-buffering": [(alignment, "races")],
                "bank-conflict-free": [(bank_conflicts_configs, "performance")],
                "warptiling": [(bank_conflicts_configs, "performance")]}


def _stage_exercise(st: Stage) -> Exercise:
    hint = "an endless loop? a __syncthreads() some threads never reach?"
    modules = list(SGEMM_CHECKS.items())
    for module, before in EXTRA_CHECKS.get(st.id, ()):
        modules.insert([name for name, _ in modules].index(before), (module.NAME, module))
    return Exercise(st.id, st.title, tuple(_stage_check(st, name, module, hint) for name, module in modules))


def _stage_check(st: Stage, name: str, module, hint: str) -> Check:
    split = {"collect": partial(module.collect, st), "judge": partial(module.judge, st)} \
        if hasattr(module, "judge") else {}
    return Check(name, partial(module.run, st), SGEMM_TIMEOUTS.get(name, 240), hint, **split)


def _kernel_check(name: str, collect, judge) -> Check:
    """A check of a kernel exercise: collect(source, seed) in the grading process, judge(meta, arrays, gpu) here."""
    return Check(name, split_run(collect, judge), KERNEL_TIMEOUT, "an endless loop? a __syncthreads() some threads "
                 "never reach? a relaxation that never stops changing?", collect=collect, judge=judge)


def _function_check(name: str, run, timeout: float = FUNCTION_TIMEOUT) -> Check:
    return Check(name, run, timeout, "an endless loop in your function? a launch that never returns?")


EXERCISES: dict[str, Exercise] = {st.id: _stage_exercise(st) for st in STAGES}
EXERCISES.update({e.id: e for e in (
    Exercise("top2", "the two minimums of an array (top-2 reduction)",
             (_kernel_check("top2-exact", minimums.collect_top2, minimums.judge_top2),
              _kernel_check("top2-races", minimums.collect_top2_races, minimums.judge_top2_races))),
    Exercise("sgemm-top2", "SGEMM with the top-2 reduction fused into its epilogue",
             (_kernel_check("sgemm-top2-exact", minimums.collect_fused, minimums.judge_fused),
              _kernel_check("sgemm-top2-races", minimums.collect_fused_races,
                            minimums.judge_fused_races))),
    Exercise("sssp", "shortest paths on the grid graph of C",
             (_kernel_check("sssp-distances", sssp.collect_distances, sssp.judge_distances),
              _kernel_check("sssp-path", sssp.collect_path, sssp.judge_path))),
    Exercise("minimums-host", "a host function: the two minimums of C = A B, found on the GPU",
             (_function_check("host-transfers", minimums.run_host_source),), host_function=minimums.HOST_FUNCTION),
    Exercise("transpose", "a matrix transpose through a padded 32 x 33 shared tile",
             (_kernel_check("transpose-correctness", transpose.collect_correctness, transpose.judge_correctness),
              _kernel_check("transpose-races", transpose.collect_races, transpose.judge_races),
              _kernel_check("transpose-bank-conflicts", transpose.collect_bank_conflicts,
                            transpose.judge_bank_conflicts))),
    Exercise("pycuda-matmul", "a host function: C = A B with sgemm_coalesced, written in PyCUDA",
             (_function_check("matmul-correct", pycuda_host.run_matmul),
              _function_check("matmul-float64", pycuda_host.run_matmul_float64)), host_function=pycuda_host.MATMUL),
    Exercise("pycuda-gflops", "a host function: GFLOPS from M, N, K and seconds",
             (_function_check("gflops-formula", pycuda_host.run_gflops),), host_function=pycuda_host.GFLOPS),
    Exercise("pycuda-timing", "a host function: the median time of a launch, with CUDA events",
             (_function_check("timing-form", pycuda_host.run_timing_form),
              _function_check("timing-plausible", pycuda_host.run_timing_plausible)),
             host_function=pycuda_host.TIMING),
    Exercise("blocks-per-sm", "a host function: how many blocks of a kernel fit on one H200 SM",
             (_function_check(blocks_per_sm.TABLE, blocks_per_sm.run_table, 120),
              _function_check(blocks_per_sm.CUDA, blocks_per_sm.run_cuda)),
             host_function=blocks_per_sm.HOST_FUNCTION),
    Exercise("autotune-violations", "a host function: violations(config, limits), the rules checked before compiling",
             (_function_check("rules-tiles", autotuning.run_rules_tiles, 120),
              _function_check("rules-resources", autotuning.run_rules_resources, 120)),
             host_function=autotuning.VIOLATIONS),
    Exercise("autotune-search", "a host function: search(candidates, reject_fn, check_fn, time_fn)",
             (_function_check("search-fake-space", autotuning.run_search_fake, 120),
              _function_check("search-tuned-performance", autotuning.run_search_gpu, 600)),
             host_function=autotuning.SEARCH),
)})


def get(exercise: str) -> Exercise:
    """The exercise with this id; KeyError naming them all."""
    try:
        return EXERCISES[exercise]
    except KeyError:
        raise KeyError(f"no exercise '{exercise}'; exercises: {', '.join(EXERCISES)}") from None

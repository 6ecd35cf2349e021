"""The one check registry: every exercise of every lab and the checks that
grade it.

    exercise            submission                       checks
    an SGEMM stage id   CUDA C holding the stage kernel  compiles, correctness, races, bank-conflicts,
                        ("naive", "smem-tiling", ...)    performance
    "top2"              CUDA C (solutions/top2.cu)       top2-exact, top2-races
    "sgemm-top2"        CUDA C (solutions/sgemm-top2.cu) sgemm-top2-exact, sgemm-top2-races
    "sssp"              CUDA C (solutions/sssp.cu)       sssp-distances, sssp-path
    "minimums-host"     Python defining minimums(A, B)   host-transfers
                        (see grader.host_functions)

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

from .checks import bank_conflicts, compiles, correctness, minimums, performance, races, sssp
from .report import CheckResult
from .stages import STAGES, Stage

# Seconds per check (the whole grading process: start, compile, every launch).
SGEMM_TIMEOUTS = {"compiles": 120, "correctness": 240, "races": 240, "bank-conflicts": 240, "performance": 480}
LABS_3_4_TIMEOUT = 300


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[str, int | None], CheckResult]
    timeout: float
    hang_hint: str = "an endless loop?"


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


def _stage_exercise(st: Stage) -> Exercise:
    hint = "an endless loop? a __syncthreads() some threads never reach?"
    modules = {"compiles": compiles, "correctness": correctness, "races": races,
               "bank-conflicts": bank_conflicts, "performance": performance}
    return Exercise(st.id, st.title, tuple(Check(name, partial(module.run, st), SGEMM_TIMEOUTS[name], hint)
                                           for name, module in modules.items()))


def _labs_3_4_check(name: str, run) -> Check:
    return Check(name, run, LABS_3_4_TIMEOUT, "an endless loop? a relaxation that never stops changing?")


EXERCISES: dict[str, Exercise] = {st.id: _stage_exercise(st) for st in STAGES}
EXERCISES.update({e.id: e for e in (
    Exercise("top2", "the two minimums of an array (top-2 reduction)",
             (_labs_3_4_check("top2-exact", minimums.run_top2),
              _labs_3_4_check("top2-races", minimums.run_top2_races))),
    Exercise("sgemm-top2", "SGEMM with the top-2 reduction fused into its epilogue",
             (_labs_3_4_check("sgemm-top2-exact", minimums.run_fused),
              _labs_3_4_check("sgemm-top2-races", minimums.run_fused_races))),
    Exercise("sssp", "shortest paths on the grid graph of C",
             (_labs_3_4_check("sssp-distances", sssp.run_distances),
              _labs_3_4_check("sssp-path", sssp.run_path))),
    Exercise("minimums-host", "a host function: the two minimums of C = A B, found on the GPU",
             (_labs_3_4_check("host-transfers", minimums.run_host_source),), host_function=minimums.HOST_FUNCTION),
)})


def get(exercise: str) -> Exercise:
    """The exercise with this id; KeyError naming them all."""
    try:
        return EXERCISES[exercise]
    except KeyError:
        raise KeyError(f"no exercise '{exercise}'; exercises: {', '.join(EXERCISES)}") from None

"""The one shape of every check, whatever it grades (a kernel, a Python function):

    collect(submission, seed, ctx) -> Outputs       in the sandboxed grading process (grader.grading.isolation):
                                                    runs the submission and returns what it did, nothing judged
    judge(outputs, seed, ctx) -> CheckResult        in the grader's own process: the verdict, from those
                                                    outputs and the seed it chose (inputs are made again here)

Outputs are data only: a JSON-able dict and a dict of numpy arrays (they
cross a pipe as an .npz read without pickle). A verdict cannot come from the
process that ran the student's code, because that process never makes one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from grader.grading.report import CheckResult
from grader.kernels.stages import Stage
from grader.platform import settings as settings_module
from grader.platform.settings import Settings

Outputs = tuple[dict, dict]          # (meta: JSON-able, arrays: name -> numpy array)

KERNEL_HANG = "an endless loop? a __syncthreads() some threads never reach?"
FUNCTION_HANG = "an endless loop in your function? a launch that never returns?"


@dataclass(frozen=True)
class Context:
    """What a check knows besides the submission and the seed."""
    exercise: str
    stage: Stage | None = None        # the SGEMM stage an exercise is, else None
    gpu: bool = False                 # the kernels run on a real GPU (else on the emulator)
    settings: Settings = field(default_factory=settings_module.current)
    budgets: dict = field(default_factory=dict)    # launch budgets (seconds) by key, from the reference's times


@dataclass(frozen=True)
class Check:
    name: str
    collect: Callable[[str, int, Context], Outputs]
    judge: Callable[[Outputs, int, Context], CheckResult]
    timeout: float = 240.0            # seconds for the whole grading process (start, compile, every launch)
    hang_hint: str = KERNEL_HANG
    timed_on_reference: bool = True   # its launch budgets come from its own run on the reference solution
    needs_answers: bool = False       # it grades against grader.references (not in the student distribution)
    times_kernels: bool = False       # it times kernels: its grading process holds the GPU alone (timing.gpu_lock)


def run_here(check: Check, submission: str, seed: int, ctx: Context) -> CheckResult:
    """Both halves in this process (tests and tools; grading runs collect in a sandboxed process)."""
    meta, arrays = check.collect(submission, seed, ctx)
    return check.judge((meta, {k: np.asarray(v) for k, v in arrays.items()}), seed, ctx)

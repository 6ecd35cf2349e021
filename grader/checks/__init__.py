"""The grader's checks, one small module each. Every check is a function
    run(stage, source, seed) -> grader.report.CheckResult
that never raises for anything the student's code does (a failed compile or
launch becomes a failed result); grader.isolation runs each in its own process.

    compiles        the source compiles for the active backend (compiler output captured)
    correctness     fresh random inputs, non-square shapes that are not tile multiples plus a
                    large one, NaN-poisoned C with guard zones, float64 reference
    races           emulator analysis: races and out-of-bounds accesses, and a re-run in
                    permuted thread order compared with the normal run
    bank-conflicts  emulator analysis: shared-memory bank conflicts (graded where the stage
                    requires none)
    performance     GPU only: GFLOPS against cuBLAS and the threshold in grader/thresholds.json
"""
from __future__ import annotations

import importlib

CHECKS = ("compiles", "correctness", "races", "bank-conflicts", "performance")
_MODULES = {"compiles": "compiles", "correctness": "correctness", "races": "races",
            "bank-conflicts": "bank_conflicts", "performance": "performance"}


def get(name: str):
    """The run function of the named check."""
    if name not in _MODULES:
        raise KeyError(f"no check '{name}'; checks: {', '.join(CHECKS)}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").run

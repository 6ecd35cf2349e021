"""grader.check(stage_id, KERNEL_SOURCE): what a notebook calls.

Every check runs in its own process (grader.isolation), so a kernel that
crashes, hangs or faults costs that check only; nothing is written to stderr
(a graded nbgrader cell with any stderr output scores 0). The Report renders
as HTML in Jupyter; `report.points("correctness", 3)` is the float an
nbgrader test cell ends with for partial credit.
"""
from __future__ import annotations

import hashlib

from .checks import CHECKS
from .report import FAILED, CheckResult, Report

# Results of identical (stage, source, check) within this kernel: the visible
# self-check and the hidden test cells of a notebook share them.
_CACHE: dict[tuple[str, str, str], CheckResult] = {}


def _key(stage_id: str, source: str, check: str) -> tuple[str, str, str]:
    return stage_id, hashlib.sha256(source.encode()).hexdigest(), check


def check(stage_id: str, source: str, checks: list[str] | tuple[str, ...] | str | None = None,
          seed: int | None = None, timeout: float | None = None, fresh: bool = False) -> Report:
    """Grade `source` (CUDA C holding the stage's kernel) as stage `stage_id`.

    checks: a name or a list out of compiles, correctness, races,
    bank-conflicts, performance (default: all). seed: the random inputs'
    seed (default: fresh each run, reported). fresh: ignore earlier results
    for the same source in this Python process."""
    import grader
    from .isolation import run_check
    from .stages import stage as stage_by_id
    stage_by_id(stage_id)            # an unknown stage is the caller's mistake: raise now
    if not isinstance(source, str):
        raise TypeError(f"the kernel source must be a string of CUDA C, not {type(source).__name__}")
    if checks is None:
        names = list(CHECKS)
    elif isinstance(checks, str):
        names = [checks]
    else:
        names = list(checks)
    for n in names:
        if n not in CHECKS:
            raise KeyError(f"no check '{n}'; checks: {', '.join(CHECKS)}")
    from .checks.common import new_seed
    run_seed = new_seed() if seed is None else int(seed)
    results = []
    compile_failed = None
    for name in names:
        key = _key(stage_id, source, name)
        if not fresh and seed is None and key in _CACHE:
            results.append(_CACHE[key])
            continue
        if compile_failed is not None and name != "compiles":
            results.append(CheckResult(name, FAILED, "not run: the kernel does not compile (see 'compiles')", 0.0))
            continue
        result = run_check(name, stage_id, source, seed=run_seed, timeout=timeout)
        if name == "compiles" and not result.passed:
            compile_failed = result
        if seed is None:
            _CACHE[key] = result
        results.append(result)
    return Report(stage_id, results, grader.BACKEND.name)


def grade(stage_id: str, source: str, check_name: str, points: float) -> float:
    """One nbgrader test cell: run one check, print its diagnosis (stdout) and
    return the points earned out of `points` (the cell's value: partial credit).
    `python -m grader regrade` recognises cells written this way."""
    return check(stage_id, source, [check_name]).grade_cell(check_name, points)

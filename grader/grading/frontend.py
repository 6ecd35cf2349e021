"""The one grading front-end, for every lab:

    grader.check(exercise, submission, checks=None, seed=None)  -> CheckReport (every check, or some)
    grader.grade(exercise, submission, check, points)           -> points earned (one hidden test cell)
    grader.grade_answer(value, expected, points, rtol=, atol=)  -> points earned (a numeric question)
    grader.sanity_check(value, low, high, unit)                 -> prints whether an answer looks plausible
    grader.use_backend()                                        -> the Backend, chosen and announced once

exercise: an id of grader.grading.registry (an SGEMM stage such as "smem-tiling",
"top2", "sgemm-top2", "sssp", "minimums-host"); submission: CUDA C source
text, or for a host exercise the student's Python function (or its source).

Every check runs in its own process (grader.grading.isolation), so a kernel that
crashes, hangs or faults costs that check only; nothing is written to stderr
(a graded nbgrader cell with any stderr output scores 0). Results of the same
(exercise, submission, check) are kept for this process (one cache): the
visible self-check and the hidden test cells of a notebook share them.

At autograde time (nbgrader sets NBGRADER_EXECUTION=autograde) nothing is
graded inside the notebook, whose cells may have patched anything: check,
grade and grade_answer say so and return nothing earned, and the autograder
grades each test cell from the notebook's text (grader.course.preprocessors.GradeFromSource).
"""
from __future__ import annotations

import hashlib
import math
import numbers
import os

from grader.grading import host_functions, registry
from grader.grading.checks.common import DID_NOT_FINISH, new_seed
from grader.grading.isolation import run_check
from grader.grading.report import FAILED, GRADER_ERROR, NOT_GRADED, CheckReport, CheckResult
from grader.kernels import timing
from grader.platform import backend

_CACHE: dict[tuple[str, str, str], CheckResult] = {}
_UNFINISHED: dict[tuple[str, str], str] = {}     # (exercise, submission digest) -> the check that saw it hang
_announced = False


def use_backend(announce: bool = True):
    """Choose where kernels run (once per process) and say so on stdout, once.
    A lab's setup cell calls it, so that the student's own `import pycuda...`
    then runs on the chosen backend (the CPU emulator without a GPU)."""
    global _announced
    chosen = backend.current()
    timing.held_for_notebook()
    if announce and not _announced:
        _announced = True
        print(chosen.announcement())
    return chosen


AT_AUTOGRADE = ("at autograde time the checks run outside this notebook, from its text: "
                "the graded cells show the results")


def autograding() -> bool:
    """True inside a notebook that `nbgrader autograde` is executing."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


def _submission_text(exercise: registry.Exercise, submission) -> str:
    if exercise.host_function is not None:
        if callable(submission):
            return host_functions.function_source(submission)
        if isinstance(submission, str):
            return submission
        raise TypeError(f"'{exercise.id}' grades a Python function ({exercise.host_function}), "
                        f"not {type(submission).__name__}")
    if not isinstance(submission, str):
        raise TypeError(f"the kernel source must be a string of CUDA C, not {type(submission).__name__}")
    return submission


def check(exercise: str, submission, checks: list[str] | tuple[str, ...] | str | None = None,
          seed: int | None = None, timeout: float | None = None, fresh: bool = False,
          announce: bool = True) -> CheckReport:
    """Run the exercise's checks (default: all) on `submission`, each in its own process.

    seed: the random inputs' seed (default: fresh each run, reported). fresh:
    ignore earlier results for the same submission in this process. announce:
    say which backend runs the kernels (once per process)."""
    ex = registry.get(exercise)           # an unknown exercise or check is the caller's mistake: raise now
    names = ex.check_names if checks is None else ([checks] if isinstance(checks, str) else list(checks))
    for n in names:
        ex.check(n)
    text = _submission_text(ex, submission)
    chosen = use_backend(announce)
    if autograding():
        return CheckReport(ex.id, [CheckResult(n, NOT_GRADED, AT_AUTOGRADE, 0.0) for n in names[:1]], chosen.name)
    run_seed = new_seed() if seed is None else int(seed)
    digest = hashlib.sha256(text.encode()).hexdigest()
    results = []
    compile_failed = False
    for name in names:
        key = (ex.id, digest, name)
        if not fresh and seed is None and key in _CACHE:
            results.append(_CACHE[key])
            continue
        if compile_failed and name != "compiles":
            results.append(CheckResult(name, FAILED, "not run: the kernel does not compile (see 'compiles')", 0.0))
            continue
        hung = _UNFINISHED.get((ex.id, digest))
        if hung and name != "compiles" and not fresh:
            # Once per submission: a kernel that did not finish would not finish again.
            results.append(CheckResult(name, FAILED, f"not run: {DID_NOT_FINISH} (see '{hung}')", 0.0,
                                       details={"did_not_finish": True}))
            continue
        result = run_check(ex.id, name, text, seed=run_seed, timeout=timeout, backend_name=chosen.name)
        compile_failed = compile_failed or (name == "compiles" and result.status == FAILED)
        if result.details.get("did_not_finish"):
            _UNFINISHED[(ex.id, digest)] = name
        if seed is None and result.status != GRADER_ERROR:      # the grader's failure may not happen again
            _CACHE[key] = result
        results.append(result)
    return CheckReport(ex.id, results, chosen.name)


def grade(exercise: str, submission, check_name: str, points: float) -> float:
    """One nbgrader test cell: run one check, print its diagnosis (stdout) and
    return the points earned out of `points` (the cell's value: partial credit).
    `python -m grader regrade` recognises cells written this way."""
    if autograding():
        print(AT_AUTOGRADE)
        return 0.0
    return check(exercise, submission, [check_name]).grade_cell(check_name, points)


def answer_is_right(value, expected: float, rtol: float = 1e-5, atol: float = 0.0) -> bool:
    """value is a finite real number within atol + rtol * |expected| of expected."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
            and abs(float(value) - expected) <= atol + rtol * abs(expected))


def grade_answer(value, expected: float, points: float, rtol: float = 1e-5, atol: float = 0.0) -> float:
    """One nbgrader test cell for a numeric question: `points` when value is
    within atol + rtol * |expected| of expected, else 0. Prints whether it is
    right, never the expected value (it stays in the hidden test cell).
    `python -m grader regrade` recognises cells written this way."""
    if autograding():
        print(AT_AUTOGRADE)
        return 0.0
    ok, verdict = answer_verdict(value, expected, rtol, atol)
    print(verdict)
    return float(points) if ok else 0.0


def answer_verdict(value, expected: float, rtol: float = 1e-5, atol: float = 0.0) -> tuple[bool, str]:
    """(right?, what the student reads): never the expected value."""
    ok = answer_is_right(value, expected, rtol, atol)
    shown = f"{float(value):.6g}" if isinstance(value, numbers.Real) and not isinstance(value, bool) else repr(value)
    if ok:
        return True, f"[PASS] your answer {shown} is right"
    within = (f"within {rtol:.2g} of the expected value, relative" if rtol < 1e-4 else
              f"within {rtol:.2%} of the expected value") if rtol else f"within {atol:g} of the expected value"
    return False, f"[FAIL] your answer {shown} is not right yet (it must be a number {within})"


class Plausible:
    """sanity_check's verdict: true or false, shown as nothing when it ends a notebook cell."""

    def __init__(self, ok: bool):
        self.ok = ok

    def __bool__(self) -> bool:
        return self.ok

    def _ipython_display_(self) -> None:
        pass


def sanity_check(value, low: float, high: float, unit: str = "") -> Plausible:
    """The visible half of a numeric question's test cell: says (stdout, never
    raising) whether the answer is missing, not a number, or outside the
    plausible range [low, high], without the expected value. The hidden test
    (grade_answer) grades it; this only catches slips early (units, a factor of 1000). Returns whether the
    answer is plausible, as a value a notebook does not display (the printed line says it once)."""
    unit = f" {unit}" if unit else ""
    if value is None:
        print("not answered yet: replace None with your answer (a number or arithmetic of numbers)")
        return Plausible(False)
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(float(value)):
        print(f"your answer must be a finite number, not {value!r} ({type(value).__name__})")
        return Plausible(False)
    if not low <= float(value) <= high:
        print(f"your answer {float(value):.6g}{unit} is outside the plausible range {low:g} to {high:g}{unit}: "
              "check the units and the formula")
        return Plausible(False)
    print(f"your answer {float(value):.6g}{unit} is in the plausible range (the hidden test checks its value)")
    return Plausible(True)

"""The kernel compiles for the current backend; what the compiler said is kept."""
from __future__ import annotations

from grader.grading.checks.common import compile_function, does_not_compile
from grader.grading.report import CheckResult
from grader.platform.compiler import CompileFailed

NAME = "compiles"


def run(stage, source: str, seed: int | None = None) -> CheckResult:
    """The check in one process (tests, tools): judge(collect(...))."""
    return judge(stage, *collect(stage, source, seed), gpu=False)


def collect(stage, source: str, seed: int | None = None) -> tuple[dict, dict]:
    """What the compiler said."""
    try:
        _, log = compile_function(stage, source)
    except CompileFailed as e:
        return {"seed": seed, "compile_error": str(e)}, {}
    return {"seed": seed, "compile_error": None, "log": log}, {}


def judge(stage, meta: dict, arrays: dict, gpu: bool) -> CheckResult:
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"])
    msg = f"'{stage.kernel}' compiles with {' '.join(stage.options()) or 'no options'}"
    log = meta.get("log", "")
    if log:
        msg += " (the compiler had something to say: see captured output)"
    return CheckResult.make(NAME, True, msg, output=log)

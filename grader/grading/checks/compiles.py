"""The kernel compiles for the current backend; what the compiler said is kept."""
from __future__ import annotations

from grader.grading.checks.common import compile_function, does_not_compile
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.platform.compiler import CompileFailed

NAME = "compiles"



def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the compiler said."""
    try:
        _, log = compile_function(ctx.stage, source)
    except CompileFailed as e:
        return {"compile_error": str(e)}, {}
    return {"compile_error": None, "log": log}, {}


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, _ = outputs
    stage = ctx.stage
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"])
    msg = f"'{stage.kernel}' compiles with {' '.join(stage.options()) or 'no options'}"
    log = meta.get("log", "")
    if log:
        msg += " (the compiler had something to say: see captured output)"
    return CheckResult.make(NAME, True, msg, output=log)


CHECK = Check(NAME, collect, judge, timeout=120)

"""The kernel compiles for the current backend; what the compiler said is kept."""
from __future__ import annotations

from ..compiler import CompileFailed
from ..report import CheckResult
from .common import compile_function, does_not_compile

NAME = "compiles"


def run(stage, source: str, seed: int | None = None) -> CheckResult:
    try:
        _, log = compile_function(stage, source)
    except CompileFailed as e:
        return does_not_compile(NAME, e)
    msg = f"'{stage.kernel}' compiles with {' '.join(stage.options()) or 'no options'}"
    if log:
        msg += " (the compiler had something to say: see captured output)"
    return CheckResult.make(NAME, True, msg, output=log)

"""The kernel compiles for the active backend; what the compiler said is kept."""
from __future__ import annotations

from ..report import CheckResult
from .common import CompileFailed, compile_function

NAME = "compiles"


def run(stage, source: str, seed: int | None = None) -> CheckResult:
    try:
        _, log = compile_function(stage, source)
    except CompileFailed as e:
        return CheckResult.make(NAME, False, f"the kernel does not compile:\n{e}")
    msg = f"'{stage.kernel}' compiles with {' '.join(stage.options()) or 'no options'}"
    if log:
        msg += " (the compiler had something to say: see captured output)"
    return CheckResult.make(NAME, True, msg, output=log)

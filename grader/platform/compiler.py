"""The one compile-and-capture: CUDA C source to kernels of the current backend
(or of the emulator), with everything the compiler and PyCUDA say captured and
compiler messages in one format with the student's line numbers:

    kernel.cu:10: error: expected a ";"

whichever compiler found it (nvcc through real PyCUDA, whose `extern "C"`
wrapper shifts lines by one; nvcc or g++ inside the emulator). A source that
does not compile raises CompileFailed, whose message is that log alone: the
sentence saying so is the caller's, said once.
"""
from __future__ import annotations

import contextlib
import io
import re
import warnings
from dataclasses import dataclass

from grader.emulator import build, policy
from grader.emulator.config import untrusted_sources
from grader.platform import COURSE_ROOT
from grader.platform.backend import drivers

SOLUTIONS_DIR = COURSE_ROOT / "solutions"
SOURCE_NAME = "kernel.cu"

# nvcc: "kernel.cu(10): error"; g++: "kernel.cu:10:5: error"; either maybe behind a directory.
_LOCATION = re.compile(r"^(?:[^\s():]*/)?kernel\.cu(?:\((\d+)\)|:(\d+)(?::\d+)?): ", re.M)
_NVCC_SUMMARY = re.compile(r"^\d+ errors? detected in the compilation of .*$\n?", re.M)


class CompileFailed(Exception):
    """The source does not compile, or lacks a kernel it must define. The
    message is the compiler's, with the student's line numbers."""


def normalise_log(log: str, line_offset: int = 0) -> str:
    """Compiler output with every location written `kernel.cu:LINE: ` (GCC's
    style), LINE the student's (nvcc's line minus `line_offset`)."""
    log = _LOCATION.sub(lambda m: f"{SOURCE_NAME}:{int(m.group(1) or m.group(2)) - line_offset}: ", log)
    return _NVCC_SUMMARY.sub("", log).strip()


@contextlib.contextmanager
def captured():
    """Collect Python-level stdout, stderr and warnings into a list of strings
    (PyCUDA warns on stderr when nvcc said anything: nbgrader would score 0)."""
    out = io.StringIO()
    log: list[str] = []
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        warnings.simplefilter("always")
        try:
            yield log
        finally:
            for w in caught:
                log.append(f"{w.category.__name__}: {w.message}")
            if out.getvalue().strip():
                log.append(out.getvalue())


def _compile_error_log(error, emulated: bool, no_extern_c: bool) -> str:
    """The compiler's words from a pycuda.driver.CompileError (real or emulated)."""
    text = getattr(error, "stderr", None) or getattr(error, "stdout", None) or str(error)
    # Real PyCUDA compiles 'extern "C" {\n' + source: the student's line N is nvcc's N + 1.
    offset = 0 if emulated or no_extern_c else 1
    log = normalise_log(text, offset)
    if getattr(error, "emulator_only", False):
        log = ("nvcc accepts this source, the CPU emulator's C++ compiler does not (a limit of the "
               "emulator: tell your instructor):\n" + log)
    return log


def compile_kernels(source: str, kernels, options=(), on_emulator: bool = False,
                    no_extern_c: bool = False, arch: str | None = None) -> tuple[dict, str]:
    """({name: Function}, compiler log) for the named kernels of `source`.
    Raises CompileFailed."""
    driver, SourceModule = drivers(on_emulator)
    emulated = bool(getattr(driver, "EMULATED", False))
    if not emulated and untrusted_sources():      # the emulator applies the same policy when it builds
        refused = build.refusals(source, list(options), no_extern_c)
        if refused:
            raise CompileFailed(policy.refusal_text(refused))
    # The course's own headers (hopper.cuh) for nvcc; the emulator has its own in its include path.
    extra = {} if emulated else {"include_dirs": [str(build.PYCUDA_INCLUDE_DIR)]}
    if arch is not None:
        extra["arch"] = arch
    with captured() as log:
        try:
            module = SourceModule(source, options=list(options), no_extern_c=no_extern_c, **extra)
        except driver.CompileError as e:
            raise CompileFailed(_compile_error_log(e, emulated, no_extern_c)) from None
        functions = {}
        for name in kernels:
            try:
                functions[name] = module.get_function(name)
            except driver.LogicError:
                raise CompileFailed(f"the source compiles but has no kernel named '{name}' (extern \"C\" is "
                                    "not needed; check the name)") from None
    own_log = getattr(module, "compile_log", "")
    text = "\n".join(([own_log] if own_log else []) + log).strip()
    return functions, normalise_log(text, 0 if emulated or no_extern_c else 1)


@dataclass(frozen=True)
class Kernels:
    """A solution file of solutions/ and the kernels it must define (with no_extern_c, the source declares
    its kernels extern "C" itself: it includes C++ headers such as mma.h; arch: nvcc's, when the kernels
    need more than the device's, as wgmma needs sm_90a)."""
    file: str
    names: tuple[str, ...]
    no_extern_c: bool = False
    arch: str | None = None

    def solution(self) -> str:
        return (SOLUTIONS_DIR / self.file).read_text()

    def exists(self) -> bool:
        """Whether this copy of the course holds the solution (a student's does not)."""
        return (SOLUTIONS_DIR / self.file).exists()

    def compile(self, source: str | None = None, on_emulator: bool = False, options=()) -> tuple[dict, str]:
        """({name: Function}, compiler log) of `source` (the reference solution by default)."""
        return compile_kernels(self.solution() if source is None else source, self.names, options, on_emulator,
                               self.no_extern_c, self.arch)

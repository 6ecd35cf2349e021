"""What the checks share: compiling a student's source with everything the
compiler says captured, launching with guard zones around C, and the drivers
(the active backend's, or always the emulator's for analysis)."""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from ..sgemm import allow_shared
from ..stages import Launch, Stage

# The bit pattern written around C: a signalling NaN no float arithmetic produces.
GUARD_BITS = np.uint32(0x7FBADBAD)


class CompileFailed(Exception):
    """The source does not compile (message: the compiler's, with line numbers)."""


def drivers(emulator: bool = False):
    """(driver, SourceModule) of the active backend, or of the emulator even on a GPU machine."""
    if emulator:
        from ..emulator.pycuda import compiler, driver
        return driver, compiler.SourceModule
    import pycuda.driver as driver
    if not getattr(driver, "EMULATED", False):
        import pycuda.autoprimaryctx  # noqa: F401  (a context shared with CuPy)
    from pycuda.compiler import SourceModule
    return driver, SourceModule


@contextlib.contextmanager
def captured():
    """Collect Python-level stdout, stderr and warnings into a list of strings."""
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


def compile_function(stage: Stage, source: str, emulator: bool = False):
    """(Function, compiler log). Raises CompileFailed with the compiler's message."""
    driver, SourceModule = drivers(emulator)
    with captured() as log:
        try:
            module = SourceModule(source, options=stage.options())
        except driver.CompileError as e:
            raise CompileFailed(str(e)) from None
        try:
            function = module.get_function(stage.kernel)
        except driver.LogicError as e:
            raise CompileFailed(f"the source compiles but has no kernel named '{stage.kernel}' "
                                f"(extern \"C\" is not needed; check the name): {e}") from None
    extra = getattr(module, "compile_log", "")
    text = "\n".join([extra] + log if extra else log).strip()
    return function, text


def run_guarded(driver, function, launch: Launch, A: np.ndarray, B: np.ndarray, guard: int | None = None):
    """C = A B with C NaN-poisoned and `guard` poisoned floats before and after
    it in the same allocation. Returns (C, guard_before_ok, guard_after_ok,
    first bad guard offsets)."""
    M, K = A.shape
    N = B.shape[1]
    if guard is None:
        guard = max(4096, 128 * N + 128)          # a whole row of tiles hanging over the end
    host = np.empty(guard + M * N + guard, dtype=np.float32)
    bits = host.view(np.uint32)
    bits[:] = GUARD_BITS
    host[guard:guard + M * N] = np.nan
    a = driver.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = driver.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = driver.to_device(host)
    allow_shared(function, launch.shared)
    function.prepare("iii" + 3 * np.dtype(np.uintp).char)
    function.prepared_call(tuple(launch.grid), tuple(launch.block), int(M), int(N), int(K),
                           int(a), int(b), int(c) + 4 * guard, shared_size=int(launch.shared))
    driver.Context.synchronize()       # a real GPU reports a faulting launch here
    driver.memcpy_dtoh(host, c)
    bits = host.view(np.uint32)
    before = np.flatnonzero(bits[:guard] != GUARD_BITS)
    after = np.flatnonzero(bits[guard + M * N:] != GUARD_BITS)
    C = host[guard:guard + M * N].reshape(M, N).copy()
    for alloc in (a, b, c):
        with contextlib.suppress(Exception):
            alloc.free()
    return C, before - guard, after


def launch_failure(driver, e: Exception) -> str:
    """A readable reason why a launch (or the copies around it) raised `e`."""
    kind = getattr(e, "kind", None)
    if isinstance(e, getattr(driver, "LaunchError", ())) or kind is not None:
        why = {"deadlock": "the threads of a block deadlocked (a __syncthreads() that not every thread reaches?)",
               "timeout": "the launch ran past its time limit (an endless loop?)",
               "fault": "the kernel read or wrote memory outside the arrays (a missing bounds check?)",
               "trap": "the kernel trapped (assert or __trap)"}.get(kind, "the launch failed")
        return f"{why}: {e}"
    return f"{type(e).__name__}: {e}"


def compile_graph_kernels(name: str, kind: str, source: str, seed: int | None, emulator: bool = False):
    """How a check of the minimums and shortest-path labs starts: (seed, {kernel:
    Function}, compiler log), or the failed CheckResult when the source does not compile."""
    from .. import graph
    from ..report import CheckResult
    seed = new_seed() if seed is None else int(seed)
    try:
        functions, log = graph.compile_kernels(kind, source, emulator=emulator)
    except CompileFailed as e:
        return CheckResult.make(name, False, f"the kernel source does not compile:\n{e}", details={"seed": seed})
    return seed, functions, log


def new_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)

"""Compile a stage's SGEMM kernel and run it on the active backend, with the
output poisoned (NaN) before every launch; compare against float64."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from grader.emulator.pycuda import driver
from grader.kernels.stages import Launch, Stage
from grader.platform.backend import drivers


def compile_kernel(stage: Stage, source: str | None = None, defines: dict | None = None):
    """The stage's kernel as a PyCUDA Function (reference source by default)."""
    _, SourceModule = drivers()
    module = SourceModule(source if source is not None else stage.source(), options=stage.options(defines))
    return module.get_function(stage.kernel)


def run(stage: Stage, A: np.ndarray, B: np.ndarray, function=None, defines: dict | None = None,
        launch: Launch | None = None) -> np.ndarray:
    """C = A B with the stage's kernel; C starts as NaN so unwritten elements show."""
    function = function or compile_kernel(stage, defines=defines)
    drv = driver_of(function)
    M, K = A.shape
    K2, N = B.shape
    assert K == K2, f"inner dimensions differ: {A.shape} x {B.shape}"
    launch = launch or stage.launch(M, N, K, defines)
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    C = np.full((M, N), np.nan, dtype=np.float32)
    c = drv.to_device(C)
    launch_kernel(function, launch, M, N, K, a, b, c)
    drv.memcpy_dtoh(C, c)
    return C


def launcher(function, launch: Launch, M: int, N: int, K: int, a, b, c):
    """The one SGEMM launch (the stage signature): a zero-argument callable
    that launches `function` on device pointers a, b, c (device allocations,
    GPUArrays or plain integer addresses), prepared once so that a timed launch
    costs little on the host. Opts in to the dynamic shared memory it needs."""
    allow_shared(function, launch.shared)
    function.prepare("iii" + 3 * np.dtype(np.uintp).char)   # as PyCUDA packs pointers
    args = (int(M), int(N), int(K), int(a), int(b), int(c))
    grid, block, shared = tuple(launch.grid), tuple(launch.block), int(launch.shared)
    return lambda: function.prepared_call(grid, block, *args, shared_size=shared)


def launch_kernel(function, launch: Launch, M: int, N: int, K: int, a, b, c) -> None:
    """One launch of an SGEMM kernel on device buffers a, b, c (see `launcher`)."""
    launcher(function, launch, M, N, K, a, b, c)()


def allow_shared(function, shared: int) -> None:
    """Let `function` launch with `shared` bytes of dynamic shared memory:
    above 48 KiB a kernel must opt in (on the GPU and on the emulator)."""
    if shared > 48 * 1024:
        drv = driver_of(function)
        function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared))


def emulated(function) -> bool:
    """Whether a compiled kernel is the emulator's (the analysis runs those on GPU machines too)."""
    return type(function).__module__.startswith("grader.emulator")


def driver_of(function):
    """The driver module a compiled kernel belongs to: the emulator's for an emulated kernel."""
    if emulated(function):
        return driver
    import pycuda.driver
    return pycuda.driver


# Outputs are poisoned with this NaN before a launch. Its payload is one no
# arithmetic produces, so an element still holding it was never written; any
# other NaN was computed by the kernel.
POISON_BITS = np.uint32(0x7FC0C0DE)
# What a float local variable never initialised holds on the emulator (grader.emulator.build.LOCALS_PATTERN, GCC's
# bytes); a sum onto it stays this value.
LOCALS_PATTERN_BITS = np.uint32(0xFEFEFEFE)
# What a wgmma's accumulators hold on the emulator until the wait that completes it (in_flight_nan in its
# runtime.cpp).
WGMMA_IN_FLIGHT_BITS = np.uint32(0x7FC0A51C)


def poisoned(shape) -> np.ndarray:
    """A float32 array of `shape` filled with the poison NaN."""
    return np.full(shape, POISON_BITS, dtype=np.uint32).view(np.float32)


def run_guarded(drv, n: int, guard: int, guard_bits: np.uint32, launch, inputs=()):
    """launch(address) writes an output of n floats at `address`: poisoned, with `guard` floats of `guard_bits`
    before and after it in the same allocation. The output and `inputs` (device allocations) are freed after,
    even after a fault. Returns (the output's floats, offsets of the guard floats it changed before it
    (negative), offsets of those after its end)."""
    host = np.empty(guard + n + guard, dtype=np.float32)
    bits = host.view(np.uint32)
    bits[:] = guard_bits
    bits[guard:guard + n] = POISON_BITS
    out = drv.to_device(host)
    try:
        launch(int(out) + 4 * guard)
        drv.Context.synchronize()           # a real GPU reports a faulting launch here
        drv.memcpy_dtoh(host, out)
    finally:
        for alloc in (*inputs, out):
            with contextlib.suppress(drv.Error):      # after a fault, the context is gone
                alloc.free()
    before = np.flatnonzero(bits[:guard] != guard_bits) - guard
    after = np.flatnonzero(bits[guard + n:] != guard_bits)
    return host[guard:guard + n].copy(), before, after


def never_written(values: np.ndarray) -> np.ndarray:
    """True where an output still holds the poison."""
    return np.asarray(values, dtype=np.float32).view(np.uint32) == POISON_BITS


def value_hint(value, name: str = "C", inputs: str = "A or B") -> str:
    """What a value of output `name` that no correct kernel gives (a NaN, the emulator's pattern of a local
    variable never initialised) means, said only when it is sure."""
    value = np.float32(value)
    if value.view(np.uint32) == LOCALS_PATTERN_BITS:
        return (" (a local variable never initialised: the emulator fills them with 0xFE bytes, which is "
                "-1.69474e+38 as a float; on a GPU it holds whatever its register held)")
    if not np.isnan(value):
        return ""
    if value.view(np.uint32) == POISON_BITS:
        return f" (never written: {name} was poisoned with NaN before the launch)"
    if value.view(np.uint32) == WGMMA_IN_FLIGHT_BITS:
        return (" (a wgmma's accumulator read before a wgmma_wait_group() completed it: the emulator fills them "
                "with this NaN while the wgmma is in flight; on a GPU the value is undefined)")
    return (" (a NaN the kernel computed: from an uninitialised value, such as shared memory read before it is "
            f"written, or from a read outside {inputs})")


def random_inputs(M: int, N: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Uniform in [-1, 1): signed, so that cancellation shows wrong indices."""
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    return A, B


@dataclass
class Comparison:
    ok: bool
    wrong: int              # elements outside the tolerance (NaN included)
    first: tuple[int, int, float, float] | None   # row, col, expected, got

    def describe(self, shape: tuple[int, int, int]) -> str:
        if self.ok:
            return f"M={shape[0]} N={shape[1]} K={shape[2]}: all elements correct"
        r, c, want, got = self.first
        return (f"M={shape[0]} N={shape[1]} K={shape[2]}: {self.wrong} wrong element(s); "
                f"first at row {r}, column {c}: expected {want:.6g}, got {got:.6g}")


def tolerance(abs_product, K: int):
    """Per-element bound on the error of a float32 SGEMM result, from
    |A| |B| (NumPy or CuPy, any float dtype): float32 rounding of K products
    is at most about K * eps * sum |a b|; twice that, plus 1e-30 so that an
    exact zero compares."""
    kind = abs_product.dtype.type
    tol = abs_product * kind(2 * max(K, 1) * np.finfo(np.float32).eps)
    tol += kind(1e-30)
    return tol


def wrong_elements(C: np.ndarray, A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of the elements of C outside the tolerance (NaN included), the float64 product)."""
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ref = A64 @ B64
    tol = tolerance(np.abs(A64) @ np.abs(B64), A.shape[1])
    return ~(np.abs(C.astype(np.float64) - ref) <= tol), ref     # NaN compares False: bad


def compare(C: np.ndarray, A: np.ndarray, B: np.ndarray) -> Comparison:
    """Every element against the float64 product, with `tolerance`."""
    bad, ref = wrong_elements(C, A, B)
    if not bad.any():
        return Comparison(True, 0, None)
    r, c = np.argwhere(bad)[0]
    return Comparison(False, int(bad.sum()), (int(r), int(c), float(ref[r, c]), float(C[r, c])))

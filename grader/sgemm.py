"""Compile a stage's SGEMM kernel and run it on the active backend, with the
output poisoned (NaN) before every launch; compare against float64."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .stages import Launch, Stage


def compile_kernel(stage: Stage, source: str | None = None, defines: dict | None = None):
    """The stage's kernel as a PyCUDA Function (reference source by default)."""
    from pycuda.compiler import SourceModule
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


def launch_kernel(function, launch: Launch, M: int, N: int, K: int, a, b, c) -> None:
    """One launch of an SGEMM kernel on device buffers a, b, c (the stage signature)."""
    allow_shared(function, launch.shared)
    function(np.int32(M), np.int32(N), np.int32(K), a, b, c,
             grid=tuple(launch.grid), block=tuple(launch.block), shared=int(launch.shared))


def allow_shared(function, shared: int) -> None:
    """Let `function` launch with `shared` bytes of dynamic shared memory:
    above 48 KiB a kernel must opt in (on the GPU and on the emulator)."""
    if shared > 48 * 1024:
        drv = driver_of(function)
        function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared))


def driver_of(function):
    """The driver module a compiled kernel belongs to: the emulator's when it
    is an emulated kernel (the analysis runs those on GPU machines too)."""
    if type(function).__module__.startswith("grader.emulator"):
        from grader.emulator.pycuda import driver
        return driver
    import pycuda.driver
    return pycuda.driver


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


def compare(C: np.ndarray, A: np.ndarray, B: np.ndarray) -> Comparison:
    """Every element against the float64 product, with a bound that grows with
    K: float32 rounding of K products is at most about K * eps * sum |a b|."""
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ref = A64 @ B64
    K = A.shape[1]
    tol = 2 * max(K, 1) * np.finfo(np.float32).eps * (np.abs(A64) @ np.abs(B64)) + 1e-30
    bad = ~(np.abs(C.astype(np.float64) - ref) <= tol)     # NaN compares False: bad
    if not bad.any():
        return Comparison(True, 0, None)
    r, c = np.argwhere(bad)[0]
    return Comparison(False, int(bad.sum()), (int(r), int(c), float(ref[r, c]), float(C[r, c])))

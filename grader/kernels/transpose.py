"""Lab 4's second exercise, a matrix transpose through a shared tile: the host
driver of solutions/transpose.cu and the numpy reference.

The kernel is (int rows, int cols, const float* in, float* out): `in` is
rows x cols, `out` cols x rows, both row-major. A block of TILE x TILE threads
moves one TILE x TILE tile; the grid covers `in` with ceil(cols / TILE) x
ceil(rows / TILE) blocks (x along the columns of `in`).
"""
from __future__ import annotations

import numpy as np

from grader.kernels import sgemm
from grader.kernels.sgemm import driver_of
from grader.kernels.stages import Launch, cdiv
from grader.platform.compiler import Kernels

TRANSPOSE = Kernels("transpose.cu", ("transpose",))
TILE = 32


def launch(rows: int, cols: int) -> Launch:
    """The grid and block the grader launches the transpose with."""
    return Launch(grid=(cdiv(cols, TILE), cdiv(rows, TILE), 1), block=(TILE, TILE, 1))


def reference(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).T)


def launch_kernel(function, rows: int, cols: int, x_ptr, out_ptr) -> None:
    """One launch of the transpose kernel on device pointers (allocations or ints)."""
    lc = launch(rows, cols)
    function.prepare("ii" + 2 * np.dtype(np.uintp).char)      # as PyCUDA packs pointers
    function.prepared_call(lc.grid, lc.block, int(rows), int(cols), int(x_ptr), int(out_ptr))


def run_guarded(function, x: np.ndarray, guard: int, guard_bits: np.uint32):
    """out = x^T with out poisoned and `guard` floats of `guard_bits` before and after it in the same
    allocation (grader.kernels.sgemm.run_guarded). Returns (out, offsets of changed guard floats before out
    (negative), offsets of those after its end)."""
    drv = driver_of(function)
    rows, cols = x.shape
    a = drv.to_device(np.ascontiguousarray(x, dtype=np.float32))
    out, before, after = sgemm.run_guarded(drv, rows * cols, guard, guard_bits,
                                           lambda o: launch_kernel(function, rows, cols, a, o), (a,))
    return out.reshape(cols, rows), before, after


def transpose(x: np.ndarray, function=None) -> np.ndarray:
    """x^T computed on the device with the transpose kernel (the reference by default)."""
    function = function or TRANSPOSE.compile()[0]["transpose"]
    drv = driver_of(function)
    rows, cols = x.shape
    a = drv.to_device(np.ascontiguousarray(x, dtype=np.float32))
    o = drv.mem_alloc(max(4 * rows * cols, 4))
    launch_kernel(function, rows, cols, a, o)
    out = np.empty((cols, rows), dtype=np.float32)
    drv.memcpy_dtoh(out, o)
    a.free()
    o.free()
    return out

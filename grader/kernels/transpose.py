"""Lab 4's second exercise, a matrix transpose through a shared tile: the host
driver of solutions/transpose.cu and the numpy reference.

The kernel is (int rows, int cols, const float* in, float* out): `in` is
rows x cols, `out` cols x rows, both row-major. A block of TILE x TILE threads
moves one TILE x TILE tile; the grid covers `in` with ceil(cols / TILE) x
ceil(rows / TILE) blocks (x along the columns of `in`).
"""
from __future__ import annotations

import contextlib

import numpy as np

from grader.kernels.sgemm import POISON_BITS, driver_of
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
    """out = x^T with out NaN-poisoned and `guard` floats of `guard_bits` before
    and after it in the same allocation. Returns (out, offsets of changed guard
    floats before out (negative), offsets of changed guard floats after its end)."""
    drv = driver_of(function)
    rows, cols = x.shape
    n = rows * cols
    host = np.empty(guard + n + guard, dtype=np.float32)
    host.view(np.uint32)[:] = guard_bits
    host.view(np.uint32)[guard:guard + n] = POISON_BITS
    a = drv.to_device(np.ascontiguousarray(x, dtype=np.float32))
    o = drv.to_device(host)
    try:
        launch_kernel(function, rows, cols, a, int(o) + 4 * guard)
        drv.Context.synchronize()           # a real GPU reports a faulting launch here
        drv.memcpy_dtoh(host, o)
    finally:
        for alloc in (a, o):
            with contextlib.suppress(drv.Error):      # after a fault, the context is gone
                alloc.free()
    bits = host.view(np.uint32)
    before = np.flatnonzero(bits[:guard] != guard_bits) - guard
    after = np.flatnonzero(bits[guard + n:] != guard_bits)
    return host[guard:guard + n].reshape(cols, rows).copy(), before, after


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

"""Lab 7, the two minimums of C = A B: host drivers for the kernels of
solutions/top2.cu (a reduction over C) and solutions/sgemm-top2.cu (SGEMM
with the reduction fused into its epilogue), and the numpy reference.

Conventions (also in the labs): A (M x K) and B (K x N) uniform in [0, 1), so
C >= 0. A minimum is (value, row, col); the two minimums are the two smallest
entries of C at distinct positions, ties to the smaller row-major index. A
key is (float bits << 32) | index: for non-negative floats, keys order like
(value, index).
"""
from __future__ import annotations

import numpy as np

from grader.kernels import sgemm
from grader.kernels.sgemm import driver_of
from grader.kernels.stages import cdiv, stage
from grader.platform.backend import drivers
from grader.platform.compiler import Kernels
from grader.platform.devices import multiprocessor_count

TOP2 = Kernels("top2.cu", ("top2",))
FUSED = Kernels("sgemm-top2.cu", ("sgemm_top2",))
EMPTY_KEY = (1 << 64) - 1
TOP2_THREADS = 256
BLOCKS_PER_SM = 8          # top2's grid: at most this many blocks per multiprocessor of the device
SGEMM_STAGE = "smem-tiling"


def inputs(M: int, N: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A and B uniform in [0, 1): C = A B is non-negative."""
    return (rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32))


def unpack(key: int, N: int) -> tuple[float, int, int]:
    value = float(np.array([key >> 32], dtype=np.uint32).view(np.float32)[0])
    index = key & 0xFFFFFFFF
    return value, index // N, index % N


def reference_top2(x: np.ndarray, N: int) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
    """numpy: the two smallest entries at distinct positions, ties to the smaller index."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    i1 = int(np.argmin(flat))                     # argmin: the first of equal values
    cands = []
    if i1 > 0:
        cands.append(int(np.argmin(flat[:i1])))
    if i1 + 1 < flat.size:
        cands.append(i1 + 1 + int(np.argmin(flat[i1 + 1:])))
    i2 = min(cands, key=lambda i: (flat[i], i))
    return tuple((float(flat[i]), i // N, i % N) for i in (i1, i2))


def product(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """C = A B rounded to float32 from float64 (the same bits in every process, whatever BLAS does)."""
    return (np.asarray(A, dtype=np.float64) @ np.asarray(B, dtype=np.float64)).astype(np.float32)


def top2_blocks(n: int, sms: int | None = None) -> int:
    """Blocks of TOP2_THREADS threads, 4 floats each, for n floats; at most
    BLOCKS_PER_SM per multiprocessor (grid-stride loops do the rest)."""
    sms = sms if sms is not None else multiprocessor_count()
    return max(1, min(cdiv(max(n, 1), 4 * TOP2_THREADS), sms * BLOCKS_PER_SM))


def top2_keys(function, x_ptr, n: int, blocks: int | None = None) -> tuple[int, int]:
    """Launch the top2 kernel on n floats at x_ptr; read back the two keys (16 bytes)."""
    drv = driver_of(function)
    out = drv.to_device(np.full(2, EMPTY_KEY, dtype=np.uint64))
    blocks = blocks or top2_blocks(n, multiprocessor_count(drv.Context.get_device()))
    function(x_ptr, np.int32(n), out, grid=(blocks, 1, 1), block=(TOP2_THREADS, 1, 1))
    keys = np.empty(2, dtype=np.uint64)
    drv.memcpy_dtoh(keys, out)
    out.free()
    return int(keys[0]), int(keys[1])


_compiled: dict = {}


def compiled_top2():
    """The reference top2 kernel (solutions/top2.cu), compiled once per process and backend: the lab 8
    driver launches it, and a grading process compiles nothing once it runs a submission's kernels
    (grader.grading.checks.common.lock_down). None where this copy of the course has no solutions (a
    student's): minimums() then finds the minimums on the host."""
    if not TOP2.exists():
        return None
    key = drivers()[0]
    if key not in _compiled:
        _compiled[key] = TOP2.compile()[0]["top2"]
    return _compiled[key]


def minimums_at(c, M: int, N: int, function=None) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
    """The two minimums of the M x N matrix at c on the device: by the top2 kernel `function`, or without
    one by numpy from C read back."""
    if function is None:
        C = np.empty((M, N), np.float32)
        drivers()[0].memcpy_dtoh(C, c)
        return reference_top2(C, N)
    k1, k2 = top2_keys(function, c, M * N)
    return unpack(k1, N), unpack(k2, N)


def sgemm_on_device(A: np.ndarray, B: np.ndarray, function=None, stage_id: str = SGEMM_STAGE):
    """C = A B in float32, left in device memory: (c allocation, M, N). With `function` (a compiled kernel of
    the SGEMM stage `stage_id`), computed by it on the device; without, by numpy and copied there (so that
    no kernel of the course, which would be some lab's answer, is needed to make C)."""
    M, K = A.shape
    N = B.shape[1]
    if function is None:
        drv = drivers()[0]
        return drv.to_device(product(A, B)), M, N
    st = stage(stage_id)
    drv = driver_of(function)
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = drv.mem_alloc(4 * M * N)
    launch = st.launch(M, N, K)
    sgemm.launch_kernel(function, launch, M, N, K, a, b, c)
    drv.Context.synchronize()
    a.free()
    b.free()
    return c, M, N


def fused_keys(function, A: np.ndarray, B: np.ndarray, keep_c: bool = False):
    """The fused kernel: (k1, k2, C or None)."""
    drv = driver_of(function)
    M, K = A.shape
    N = B.shape[1]
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = drv.to_device(np.full(M * N, np.nan, dtype=np.float32))
    out = drv.to_device(np.full(2, EMPTY_KEY, dtype=np.uint64))
    function(np.int32(M), np.int32(N), np.int32(K), a, b, c, out,
             grid=(cdiv(N, 32), cdiv(M, 32), 1), block=(32, 32, 1))
    keys = np.empty(2, dtype=np.uint64)
    drv.memcpy_dtoh(keys, out)
    C = None
    if keep_c:
        C = np.empty((M, N), dtype=np.float32)
        drv.memcpy_dtoh(C, c)
    for x in (a, b, c, out):
        x.free()
    return int(keys[0]), int(keys[1]), C

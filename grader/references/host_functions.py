"""Reference answers of the labs' Python functions, for the grader's own use (checks' expected values,
programs): never importable by a student's code (grader/references is hidden from it, and absent from
the student distribution)."""
from __future__ import annotations

import numpy as np

from grader.kernels.top2 import TOP2, sgemm_on_device, top2_keys, unpack


def gflops_of(M: int, N: int, K: int, seconds: float) -> float:
    """Lab 00's gflops(M, N, K, seconds): 2 M N K floating-point operations in `seconds`, in GFLOPS."""
    return 2.0 * M * N * K / seconds / 1e9


def minimums(A: np.ndarray, B: np.ndarray, top2_function=None):
    """Lab 07's minimums(A, B): C = A B on the device, then the top2 reduction there; only the two keys
    (16 bytes) come back. ((value, row, col), (value, row, col))."""
    top2_function = top2_function or TOP2.compile()[0]["top2"]
    c, M, N = sgemm_on_device(A, B)
    k1, k2 = top2_keys(top2_function, c, M * N)
    c.free()
    return unpack(k1, N), unpack(k2, N)

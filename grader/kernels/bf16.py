"""bfloat16 on the host, for the tensor-core kernels: numpy has no bfloat16, so a bfloat16 array is a uint16
array of its bits (what a kernel's __nv_bfloat16 pointer reads)."""
from __future__ import annotations

import numpy as np


def to_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to the nearest, ties to even, as __float2bfloat16), as bits."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits as float32 (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def rounded(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16, as float32."""
    return from_bits(to_bits(x))


def product_and_tolerance(A_bits: np.ndarray, B_bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact product of bfloat16 matrices (in float64) and, per element of C, how far a float32
    accumulation of it may lie: 2 K float32 epsilons of sum_k |a_ik b_kj| (the rounding of K additions)."""
    A, B = from_bits(A_bits).astype(np.float64), from_bits(B_bits).astype(np.float64)
    K = A.shape[1]
    return A @ B, 2 * K * np.finfo(np.float32).eps * (np.abs(A) @ np.abs(B))

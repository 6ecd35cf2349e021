"""The warp-specialized tensor-core GEMM (solutions/warp-specialized-wmma.cu): its host driver and its inputs.

The kernel is (const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, float* C,
int M, int N, int K): A (M x K) and B (K x N) are row-major bfloat16 in device memory, each described by a
tensor map of BM x BK and BK x BN boxes (grader.kernels.tensor_map), C (M x N) is row-major float. A block
of THREADS threads (four consumer warps and a producer warp) computes a BM x BN tile of C; the grid covers C
with ceil(N / BN) x ceil(M / BM) blocks. M, N and K are multiples of 8: a tensor map needs rows of a
multiple of 16 bytes.
"""
from __future__ import annotations

import numpy as np

from grader.kernels import bf16, sgemm
from grader.kernels.sgemm import driver_of
from grader.kernels.stages import Launch, cdiv
from grader.kernels.tensor_map import tensor_map_2d
from grader.platform.compiler import Kernels

WARP_SPECIALIZED = Kernels("warp-specialized-wmma.cu", ("gemm_bf16",), no_extern_c=True)
BM, BN, BK, THREADS = 64, 64, 32, 160


def launch(M: int, N: int) -> Launch:
    """The grid and block the grader launches the kernel with."""
    return Launch(grid=(cdiv(N, BN), cdiv(M, BM), 1), block=(THREADS, 1, 1))


def inputs(M: int, N: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N): standard normal values rounded to bfloat16, as bits."""
    return (bf16.to_bits(rng.standard_normal((M, K), dtype=np.float32)),
            bf16.to_bits(rng.standard_normal((K, N), dtype=np.float32)))


def run_guarded(function, A: np.ndarray, B: np.ndarray, guard: int, guard_bits: np.uint32):
    """C = A B with C poisoned and `guard` floats of `guard_bits` before and after it in the same allocation
    (grader.kernels.sgemm.run_guarded). Returns (C, offsets of changed guard floats before C (negative),
    offsets of those after its end)."""
    drv = driver_of(function)
    (M, K), N = A.shape, B.shape[1]
    a, b = drv.to_device(np.ascontiguousarray(A)), drv.to_device(np.ascontiguousarray(B))

    on_emulator = sgemm.emulated(function)

    def launch_at(c: int) -> None:
        lc = launch(M, N)
        function(tensor_map_2d(int(a), A.shape, (BM, BK), np.uint16, bfloat16=True, on_emulator=on_emulator),
                 tensor_map_2d(int(b), B.shape, (BK, BN), np.uint16, bfloat16=True, on_emulator=on_emulator),
                 np.uintp(c), np.int32(M), np.int32(N), np.int32(K), grid=lc.grid[:2], block=lc.block)

    C, before, after = sgemm.run_guarded(drv, M * N, guard, guard_bits, launch_at, (a, b))
    return C.reshape(M, N), before, after

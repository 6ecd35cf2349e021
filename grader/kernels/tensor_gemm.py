"""The tensor-core GEMMs of the Hopper lab: their host drivers and their inputs.

Each kernel is (const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, float* C,
int M, int N, int K): A (M x K) and B (K x N) are row-major bfloat16 in device memory, each described by a
tensor map (grader.kernels.tensor_map) of the boxes the kernel loads, C (M x N) is row-major float; a kernel
without tensor copies takes (const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K).
A block computes a BM x BN tile of C; the grid covers C with ceil(N / BN) x ceil(M / BM) blocks. M, N and K are
multiples of 8: a tensor map needs rows of a multiple of 16 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.kernels import bf16, sgemm
from grader.kernels.sgemm import allow_shared, driver_of
from grader.kernels.stages import Launch, cdiv
from grader.kernels.tensor_map import tensor_map_2d
from grader.platform.compiler import Kernels


@dataclass(frozen=True)
class TensorGemm:
    """A kernel of the lab, with what its launch needs: the tile, the threads, the boxes its tensor maps
    describe ((rows, columns) of A and of B; None: it takes pointers), their swizzle and the dynamic shared
    memory (bytes)."""
    kernels: Kernels
    name: str
    bm: int
    bn: int
    threads: int
    a_box: tuple[int, int] | None
    b_box: tuple[int, int] | None
    swizzle: int = 0
    shared: int = 0

    def launch(self, M: int, N: int) -> Launch:
        """The grid and block the grader launches the kernel with."""
        return Launch(grid=(cdiv(N, self.bn), cdiv(M, self.bm), 1), block=(self.threads, 1, 1), shared=self.shared)

    def geometry(self) -> str:
        return f"grid ceil(N / {self.bn}) x ceil(M / {self.bm}) blocks of {self.threads} threads"

    def lacks(self, capability: tuple[int, int]) -> str | None:
        """None when a GPU of this compute capability runs the kernel, else what it lacks."""
        if self.kernels.arch == "sm_90a":
            return None if capability == (9, 0) else "wgmma is Hopper's alone (compute capability 9.0, sm_90a)"
        if self.a_box is not None:
            return None if capability >= (9, 0) else \
                "tensor copies and mbarrier transaction counts need compute capability 9.0 (Hopper) or later"
        return None if capability >= (8, 0) else "bfloat16 wmma needs compute capability 8.0 or later"


# Four warps, each 32 x 32 of a 64 x 64 tile in wmma fragments, BK 32: tiles copied by the threads, then a
# ring of three stages filled by thread 0's tensor copies.
WMMA_TILED = TensorGemm(Kernels("wmma-tiled.cu", ("gemm_wmma",), no_extern_c=True), "gemm_wmma", bm=64, bn=64,
                        threads=128, a_box=None, b_box=None)
TMA_RING = TensorGemm(Kernels("tma-ring.cu", ("gemm_tma",), no_extern_c=True), "gemm_tma", bm=64, bn=64,
                      threads=128, a_box=(64, 32), b_box=(32, 64))
# Warps 0-3 consume 64 x 64 tiles in wmma fragments, warp 4 produces (BK 32, three stages in static memory).
WARP_SPECIALIZED = TensorGemm(Kernels("warp-specialized-wmma.cu", ("gemm_bf16",), no_extern_c=True), "gemm_bf16",
                              bm=64, bn=64, threads=160, a_box=(64, 32), b_box=(32, 64))
# Two consumer warpgroups of wgmma on 128 x 256 tiles, a producer warp, three stages of 64 x 64 swizzled boxes
# (BK 64) in dynamic shared memory, 1 KiB more to align them.
WGMMA = TensorGemm(Kernels("warp-specialized-wgmma.cu", ("gemm_wgmma",), no_extern_c=True, arch="sm_90a"),
                   "gemm_wgmma", bm=128, bn=256, threads=288, a_box=(128, 64), b_box=(64, 64), swizzle=128,
                   shared=3 * (128 * 64 + 64 * 256) * 2 + 1024)


def inputs(M: int, N: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N): standard normal values rounded to bfloat16, as bits."""
    return (bf16.to_bits(rng.standard_normal((M, K), dtype=np.float32)),
            bf16.to_bits(rng.standard_normal((K, N), dtype=np.float32)))


def launcher(gemm: TensorGemm, function, a: int, b: int, c: int, M: int, N: int, K: int, on_emulator: bool):
    """A zero-argument launch of `gemm`'s kernel `function` on A (M x K) at device address a, B (K x N) at b
    and C at c, the tensor maps it takes made now."""
    allow_shared(function, gemm.shared)
    operands = [np.uintp(x) if box is None else
                tensor_map_2d(x, shape, box, np.uint16, bfloat16=True, swizzle=gemm.swizzle, on_emulator=on_emulator)
                for x, shape, box in ((a, (M, K), gemm.a_box), (b, (K, N), gemm.b_box))]
    lc = gemm.launch(M, N)
    return lambda: function(*operands, np.uintp(c), np.int32(M), np.int32(N), np.int32(K), grid=lc.grid[:2],
                            block=lc.block, shared=lc.shared)


def run_guarded(gemm: TensorGemm, function, A: np.ndarray, B: np.ndarray, guard: int, guard_bits: np.uint32):
    """C = A B by `gemm`'s kernel `function`, with C poisoned and `guard` floats of `guard_bits` before and
    after it in the same allocation (grader.kernels.sgemm.run_guarded). Returns (C, offsets of changed guard
    floats before C (negative), offsets of those after its end)."""
    drv = driver_of(function)
    (M, K), N = A.shape, B.shape[1]
    a, b = drv.to_device(np.ascontiguousarray(A)), drv.to_device(np.ascontiguousarray(B))
    on_emulator = sgemm.emulated(function)
    C, before, after = sgemm.run_guarded(
        drv, M * N, guard, guard_bits, lambda c: launcher(gemm, function, int(a), int(b), c, M, N, K, on_emulator)(),
        (a, b))
    return C.reshape(M, N), before, after

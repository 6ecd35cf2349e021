"""What the Hopper lab's wgmma needs to be emulated, asked of the GPU itself: one warpgroup's m64n8k16
product of bfloat16 operands read from shared memory by descriptor (no swizzle; K-major core matrices of
8 rows x 16 bytes, LBO the step between the two core matrices along K, SBO the step between core matrices
along M or N), and which element of the 64 x 8 accumulator each thread's registers hold; and which of
the two steps an N-major B (imm-trans-b 1, no swizzle) takes from LBO and which from SBO. The
expectations are PTX's documented layouts; a failure prints what the GPU did instead."""
import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.kernels import bf16

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(ON_EMULATOR, reason="asks a Hopper GPU (GRADER_BACKEND=gpu)")]

LBO, SBO = 128, 256
PROBE = r"""
#include <cstdint>
static __device__ uint64_t descriptor(const void* tile, unsigned lbo, unsigned sbo)
{
    const uint64_t address = static_cast<uint64_t>(__cvta_generic_to_shared(tile));
    return ((address & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}

extern "C" __global__ void probe(const uint16_t* a, const uint16_t* b, float* out)
{
    __shared__ __align__(128) uint16_t As[64 * 16];     // A (64 x 16) and B (8 x 16: N x K), K-major,
    __shared__ __align__(128) uint16_t Bs[8 * 16];      // in core-matrix order already
    const int t = threadIdx.x;
    for (int i = t; i < 64 * 16; i += 128) As[i] = a[i];
    for (int i = t; i < 8 * 16; i += 128) Bs[i] = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint64_t a_desc = descriptor(As, LBO, SBO), b_desc = descriptor(Bs, LBO, SBO);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(a_desc), "l"(b_desc), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    out[t * 4 + 0] = d0;
    out[t * 4 + 1] = d1;
    out[t * 4 + 2] = d2;
    out[t * 4 + 3] = d3;
}
""".replace("LBO", str(LBO)).replace("SBO", str(SBO))


def _core_matrix_order(x: np.ndarray) -> np.ndarray:
    """A K-major rows x 16 operand laid out as core matrices: (row // 8, k // 8) at (row // 8) SBO + (k // 8) LBO
    bytes, each 8 rows of 16 bytes."""
    rows = x.shape[0]
    out = np.zeros(rows * 16, x.dtype)
    for r in range(rows):
        for k in range(16):
            out[((r // 8) * SBO + (k // 8) * LBO) // 2 + (r % 8) * 8 + k % 8] = x[r, k]
    return out


def _documented(thread: int, register: int) -> tuple[int, int]:
    """(row, column) of the accumulator a thread's register holds, as PTX documents m64nNk16's D."""
    warp, lane = divmod(thread, 32)
    return 16 * warp + lane // 4 + 8 * ((register // 2) % 2), 2 * (lane % 4) + register % 2 + 8 * (register // 4)


def test_wgmma_reads_core_matrices_by_descriptor_and_holds_the_documented_fragment(cuda, source_module):
    A = np.zeros((64, 16), np.float32)
    A[:, 0], A[:, 1] = np.arange(64), 1.0                 # C[r][c] = 8 r + c: every element tells where it is
    Bt = np.zeros((8, 16), np.float32)                    # B as N x K
    Bt[:, 0], Bt[:, 1] = 8.0, np.arange(8)
    out = np.full(128 * 4, np.nan, np.float32)
    kernel = source_module(PROBE, arch="sm_90a", no_extern_c=True).get_function("probe")
    kernel(cuda.In(_core_matrix_order(bf16.to_bits(A))), cuda.In(_core_matrix_order(bf16.to_bits(Bt))),
           cuda.Out(out), block=(128, 1, 1), grid=(1, 1))
    got = {(t, i): divmod(int(out[4 * t + i]), 8) if np.isfinite(out[4 * t + i]) else None
           for t in range(128) for i in range(4)}
    wrong = {k: v for k, v in got.items() if v != _documented(*k)}
    assert not wrong, {k: (v, _documented(*k)) for k, v in list(wrong.items())[:12]}


# B N-major (imm-trans-b 1): 16-byte chunks of 8 consecutive columns at one k, 8 of them (k to k + 7) in
# 128 bytes. Which descriptor field steps along N and which along K is what PTX's words leave open for the
# layout without swizzle, so the probe lays B out both ways and asks the GPU which one it reads.
N_MAJOR_PROBE = r"""
#include <cstdint>
static __device__ uint64_t descriptor(const void* tile, unsigned lbo, unsigned sbo)
{
    const uint64_t address = static_cast<uint64_t>(__cvta_generic_to_shared(tile));
    return ((address & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}

extern "C" __global__ void probe(const uint16_t* a, const uint16_t* b, float* out)
{
    __shared__ __align__(128) uint16_t As[64 * 16];
    __shared__ __align__(128) uint16_t Bs[16 * 32];
    const int t = threadIdx.x;
    for (int i = t; i < 64 * 16; i += 128) As[i] = a[i];
    for (int i = t; i < 16 * 32; i += 128) Bs[i] = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint64_t a_desc = descriptor(As, 128, 256), b_desc = descriptor(Bs, 256, 512);
    float d[8];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, "
                 "p, 1, 1, 0, 1;\n}\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
                 : "l"(a_desc), "l"(b_desc), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 8; ++i) out[t * 8 + i] = d[i];
}
"""


def _n_major(b: np.ndarray, n_step: int, k_step: int) -> np.ndarray:
    """B (16 x 16, K x N) as 16-byte chunks of 8 columns: columns 8 j to 8 j + 7 of row k at j n_step +
    (k // 8) k_step + (k % 8) 16 bytes, in a 1 KiB tile."""
    out = np.zeros(512, b.dtype)
    for k in range(16):
        for n in range(16):
            out[((n // 8) * n_step + (k // 8) * k_step + (k % 8) * 16) // 2 + n % 8] = b[k, n]
    return out


def test_wgmma_reads_an_n_major_b_with_one_of_the_two_readings_of_its_strides(cuda, source_module):
    """LBO 256, SBO 512; A K-major as above. C[r][c] = 16 r + c tells every element where it is, and row 9 of
    B (the second 8 rows of K) carries the columns' part: both steps are exercised."""
    A = np.zeros((64, 16), np.float32)
    A[:, 0], A[:, 9] = np.arange(64), 1.0
    B = np.zeros((16, 16), np.float32)
    B[0, :], B[9, :] = 16.0, np.arange(16)
    expected = np.array([[16.0 * r + c for c in range(16)] for r in range(64)], np.float32)
    kernel = source_module(N_MAJOR_PROBE, arch="sm_90a", no_extern_c=True).get_function("probe")
    readings = {}
    for name, (n_step, k_step) in {"LBO along N, SBO along K": (256, 512), "SBO along N, LBO along K": (512, 256)}.items():
        out = np.full(128 * 8, np.nan, np.float32)
        kernel(cuda.In(_core_matrix_order(bf16.to_bits(A))), cuda.In(_n_major(bf16.to_bits(B), n_step, k_step)),
               cuda.Out(out), block=(128, 1, 1), grid=(1, 1))
        got = np.full((64, 16), np.nan, np.float32)
        for t in range(128):
            for i in range(8):
                got[_documented(t, i)] = out[8 * t + i]
        readings[name] = np.array_equal(got, expected)
        print(f"N-major B, {name}: {'the product' if readings[name] else 'not the product'}")
    assert sum(readings.values()) == 1, readings

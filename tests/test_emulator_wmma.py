"""Tensor cores through nvcuda::wmma (mma.h, cuda_fp16.h, cuda_bf16.h), as the course's Hopper lab uses
them: half and bfloat16 conversions round to the nearest even; a warp's 16 x 16 x 16 products make a
GEMM that matches float64 within the rounding of its inputs; a lane that skips a warp-wide call is
reported with the call's line; a graded source may include the headers, and nvcc accepts the same source
for sm_90."""
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.emulator import build
from grader.kernels import bf16

GEMM = """#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

// One warp per 16 x 16 tile of C = A B: A is M x K, B is K x N, row-major, every size a multiple of 16.
extern "C" __global__ void wmma_gemm(int M, int N, int K, const TYPE* A, const TYPE* B, float* C)
{
    const int tile_m = blockIdx.y * 16, tile_n = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, TYPE, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, TYPE, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + tile_m * K + k, K);
        wmma::load_matrix_sync(b, B + k * N + tile_n, N);
        SKIP wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + tile_m * N + tile_n, c, N, wmma::mem_row_major);
}

extern "C" __global__ void round_trip(const float* in, float* half_out, float* bf16_out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        half_out[i] = __half2float(__float2half(in[i]));
        bf16_out[i] = __bfloat162float(__float2bfloat16(in[i]));
    }
}
"""


def _module(source_module, type_name="__half", skip=""):
    return source_module(GEMM.replace("TYPE", type_name).replace("SKIP", skip), no_extern_c=True)


def test_conversions_round_to_the_nearest_even(cuda, source_module):
    values = np.concatenate([np.array([0.0, -0.0, 1.0, 65504.0, 65520.0, 1e-8, 6e-8, 2.0 ** -24, 3 * 2.0 ** -25,
                                       1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, np.inf, -np.inf], np.float32),
                             np.random.default_rng(1).standard_normal(3000).astype(np.float32) * 100])
    half_out, bf16_out = np.empty_like(values), np.empty_like(values)
    _module(source_module).get_function("round_trip")(cuda.In(values), cuda.Out(half_out), cuda.Out(bf16_out),
                                                      np.int32(values.size), block=(128, 1, 1),
                                                      grid=((values.size + 127) // 128, 1))
    with np.errstate(over="ignore"):                # 65520 rounds to infinity, in numpy as here
        assert np.array_equal(half_out, values.astype(np.float16).astype(np.float32))
    assert np.array_equal(bf16_out, bf16.rounded(values))


@pytest.mark.parametrize("type_name", ["__half", "__nv_bfloat16"])
def test_a_wmma_gemm_matches_float64(cuda, source_module, type_name):
    M, N, K = 48, 32, 64
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    if type_name == "__half":
        a_in, b_in = a.astype(np.float16), b.astype(np.float16)
        a_val, b_val = a_in.astype(np.float64), b_in.astype(np.float64)
    else:                                  # bfloat16 travels as its 16 upper bits
        a_val, b_val = bf16.rounded(a).astype(np.float64), bf16.rounded(b).astype(np.float64)
        a_in, b_in = bf16.to_bits(a), bf16.to_bits(b)
    c = np.full((M, N), np.nan, np.float32)
    _module(source_module, type_name).get_function("wmma_gemm")(
        np.int32(M), np.int32(N), np.int32(K), cuda.In(a_in), cuda.In(b_in), cuda.Out(c),
        block=(32, 1, 1), grid=(N // 16, M // 16))
    want = a_val @ b_val
    tolerance = 2 * K * np.finfo(np.float32).eps * (np.abs(a_val) @ np.abs(b_val))     # float sums of exact products
    assert np.all(np.abs(c - want) <= tolerance), np.abs(c - want).max()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU a lane that skips a warp-wide call is undefined behaviour")
def test_a_lane_that_skips_mma_sync_is_named_with_its_line(cuda, source_module):
    kernel = _module(source_module, skip="if (threadIdx.x != 5)").get_function("wmma_gemm")
    line = GEMM.splitlines().index("        SKIP wmma::mma_sync(c, a, b, c);") + 1
    z = np.zeros(16 * 16, np.float16)
    with pytest.raises(cuda.LaunchError, match=rf"not every lane of the warp reaches .*\(kernel\.cu:{line}\)"):
        kernel(np.int32(16), np.int32(16), np.int32(16), cuda.In(z), cuda.In(z), cuda.Out(np.zeros(256, np.float32)),
               block=(32, 1, 1), grid=(1, 1))


def test_a_graded_source_may_include_the_headers():
    assert build.refusals(GEMM.replace("TYPE", "__half").replace("SKIP", ""), no_extern_c=True) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("type_name", ["__half", "__nv_bfloat16"])
def test_nvcc_accepts_the_same_source(tmp_path, type_name):
    (tmp_path / "gemm.cu").write_text(GEMM.replace("TYPE", type_name).replace("SKIP", ""))
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", "-o", str(tmp_path / "gemm.cubin"), str(tmp_path / "gemm.cu")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr

import numpy as np
import pycuda.autoprimaryctx  # noqa: F401
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

COALESCED_SOURCE = r"""
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}
"""


def launch_config(M, N):
    block = (32, 32, 1)
    grid = ((N + block[0] - 1) // block[0], (M + block[1] - 1) // block[1], 1)
    return block, grid


def matmul(A, B):
    A = np.ascontiguousarray(A, dtype=np.float32)
    B = np.ascontiguousarray(B, dtype=np.float32)
    M, K = A.shape
    N = B.shape[1]
    kernel = SourceModule(COALESCED_SOURCE).get_function("sgemm_coalesced")
    a_gpu = gpuarray.to_gpu(A)
    b_gpu = drv.mem_alloc(B.nbytes)
    drv.memcpy_htod(b_gpu, B)
    c_gpu = gpuarray.empty((M, N), np.float32)
    block, grid = launch_config(M, N)
    kernel(np.int32(M), np.int32(N), np.int32(K), a_gpu, b_gpu, c_gpu, block=grid, grid=block)
    return c_gpu.get()

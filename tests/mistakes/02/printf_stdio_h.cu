#include <stdio.h>
// Stage 3, shared-memory tiling: a block computes a TILE x TILE tile of C.
// Each step loads one TILE x TILE tile of A and of B into shared memory (one
// element per thread, coalesced), waits, and then every thread reads TILE
// values of each from shared memory instead of global memory: TILE times
// fewer global loads. Out-of-range elements are loaded as zeros, so any M, N,
// K work; every thread reaches both barriers.
#ifndef TILE
#define TILE 32
#endif

__global__ void sgemm_smem_tiling(int M, int N, int K, const float* A, const float* B, float* C)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = sum;
    if (row == 0 && col == 0) printf("C[0][0] = %f\n", sum);
}

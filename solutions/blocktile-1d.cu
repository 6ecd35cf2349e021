// Stage 4, 1D blocktiling: a block computes a BM x BN tile of C and each thread
// computes TM results in one column of it, so one value of B read from shared
// memory is reused TM times from a register (TM times fewer shared-memory loads
// of B than the shared-memory tiling stage). Each step, the block copies a
// BM x BK tile of A and a BK x BN tile of B into shared memory (coalesced,
// zeros outside the matrices, so any M, N, K work), waits, and every thread
// accumulates TM partial sums in registers. Every thread reaches both barriers.
#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif

#define NUM_THREADS (BM * BN / TM)

__global__ void __launch_bounds__(NUM_THREADS)
sgemm_blocktile_1d(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(BM % TM == 0, "TM must divide BM");
    static_assert((BM * BK) % NUM_THREADS == 0 && (BK * BN) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly over the threads");
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int threadCol = tid % BN;           // consecutive threads: consecutive columns
    const int threadRow = tid / BN;           // rows threadRow*TM .. threadRow*TM+TM-1
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A tile: consecutive threads read consecutive k of one row of A.
#pragma unroll
        for (int e = tid; e < BM * BK; e += NUM_THREADS) {
            const int r = e / BK, c = e % BK;
            const int gr = rowBase + r, gc = k0 + c;
            As[r][c] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
        }
        // B tile: consecutive threads read consecutive columns of one row of B.
#pragma unroll
        for (int e = tid; e < BK * BN; e += NUM_THREADS) {
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = colBase + c;
            Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][threadCol];          // loaded once, used TM times
#pragma unroll
            for (int i = 0; i < TM; ++i)
                acc[i] += As[threadRow * TM + i][k] * b;
        }
        __syncthreads();
    }

    const int col = colBase + threadCol;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + threadRow * TM + i;
        if (row < M && col < N)
            C[row * N + col] = acc[i];
    }
}

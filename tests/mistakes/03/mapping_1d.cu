// Stage 5, 2D blocktiling: each thread computes a TM x TN tile of C. For every
// k it loads TM values of A (a column piece) and TN values of B (a row piece)
// from shared memory into registers and adds their outer product, TM*TN
// multiply-adds for TM+TN shared loads (1D blocktiling: TM for TM+1). The
// block (BM*BN/(TM*TN) threads) copies a BM x BK tile of A and a BK x BN tile
// of B to shared memory each step, several elements per thread, coalesced,
// zeros outside the matrices so that any M, N, K work.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif

#define NUM_THREADS (BM * BN / (TM * TN))

__global__ void __launch_bounds__(NUM_THREADS, 2)   // <= 128 registers: 2 blocks of 256 per SM
sgemm_blocktile_2d(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(BM % TM == 0 && BN % TN == 0, "TM must divide BM and TN divide BN");
    static_assert((BM * BK) % NUM_THREADS == 0 && (BK * BN) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly over the threads");
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int threadCol = tid % BN;
    const int threadRow = tid / BN;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regA[TM], regB[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int e = tid; e < BM * BK; e += NUM_THREADS) {
            const int r = e / BK, c = e % BK;
            const int gr = rowBase + r, gc = k0 + c;
            As[r][c] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
        }
#pragma unroll
        for (int e = tid; e < BK * BN; e += NUM_THREADS) {
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = colBase + c;
            Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regA[i] = As[threadRow * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) regB[j] = Bs[k][threadCol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += regA[i] * regB[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + threadRow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = colBase + threadCol * TN + j;
            if (row < M && col < N)
                C[row * N + col] = acc[i][j];
        }
    }
}

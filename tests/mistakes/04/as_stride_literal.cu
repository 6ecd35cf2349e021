// Stage 6, bank-conflict-free shared memory. Shared memory has 32 banks of
// 4 bytes; a warp's access is served in one pass unless two different
// addresses fall in the same bank (4-byte accesses: the whole warp at once;
// 8-byte: each half-warp; 16-byte: each quarter-warp of 8 threads).
// Same 2D blocktiling as before (TM x TN results per thread), with three changes:
//  1. A is stored transposed, As[k][m], so the TM values a thread needs for one
//     k are contiguous and are read as float4 (like the TN values of B).
//  2. A thread's TM x TN tile is split into 4 x 4 pieces spread over the block
//     tile (rows threadRow*4 + BM/(TM/4)*g, likewise columns), so the 8
//     threads of a quarter-warp read 8 consecutive float4 of a Bs row: 128
//     contiguous bytes, all 32 banks once. (Contiguous 8-wide pieces would put
//     quarter-warp threads 32 bytes apart: a 2-way conflict.) The As reads of a
//     quarter-warp all have the same threadRow: one address, a broadcast.
//  3. Padding: rows of As are BM+4 floats long (4 banks further each row). A
//     warp copies 4 rows x 8 k of A (one 32-byte piece of each row of A: full
//     sectors, coalesced) and writes As[k][m]: bank (4k + m) mod 32, all 32
//     distinct. Without padding all 8 k of a row m would hit the same bank: an
//     8-way conflict. The padding keeps rows 16-byte aligned for float4.
// Bs needs no padding: a warp writes 32 consecutive floats of one row.
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
#define AS_STRIDE 132

__global__ void __launch_bounds__(NUM_THREADS, 2)   // <= 128 registers: 2 blocks of 256 per SM
sgemm_bank_conflict_free(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % 8 == 0, "tiles: BM, BN multiples of 32, BK of 8");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "thread tile: 4 x 4 pieces");
    static_assert(NUM_THREADS % 32 == 0 && (BM * BK) % NUM_THREADS == 0 && (BK * BN) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly over whole warps");
    __shared__ __align__(16) float As[BK][AS_STRIDE];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int threadCol = tid % (BN / TN);
    const int threadRow = tid / (BN / TN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    constexpr int RSTEP = BM / (TM / 4);     // distance between a thread's 4-row pieces
    constexpr int CSTEP = BN / (TN / 4);     // distance between its 4-column pieces

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regA[TM], regB[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A: element e -> row m, k = 8*kb + kc: a warp takes 8 consecutive k of 4 rows.
#pragma unroll
        for (int e = tid; e < BM * BK; e += NUM_THREADS) {
            const int kc = e % 8, m = (e / 8) % BM, k = (e / (8 * BM)) * 8 + kc;
            const int gr = rowBase + m, gc = k0 + k;
            As[k][m] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
        }
        // B: a warp takes 32 consecutive columns of one row.
#pragma unroll
        for (int e = tid; e < BK * BN; e += NUM_THREADS) {
            const int k = e / BN, n = e % BN;
            const int gr = k0 + k, gc = colBase + n;
            Bs[k][n] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                const float4 a = *reinterpret_cast<const float4*>(&As[k][g * RSTEP + threadRow * 4]);
                regA[4 * g + 0] = a.x; regA[4 * g + 1] = a.y; regA[4 * g + 2] = a.z; regA[4 * g + 3] = a.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const float4 b = *reinterpret_cast<const float4*>(&Bs[k][g * CSTEP + threadCol * 4]);
                regB[4 * g + 0] = b.x; regB[4 * g + 1] = b.y; regB[4 * g + 2] = b.z; regB[4 * g + 3] = b.w;
            }
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
        const int row = rowBase + (i / 4) * RSTEP + threadRow * 4 + i % 4;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = colBase + (j / 4) * CSTEP + threadCol * 4 + j % 4;
            if (row < M && col < N)
                C[row * N + col] = acc[i][j];
        }
    }
}

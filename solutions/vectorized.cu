// Stage 7, vectorized memory access: when K and N are multiples of 4 (and the
// matrices start 16-byte aligned) every row of A, B and C starts 16-byte
// aligned, so a thread can move 4 floats with one 16-byte instruction (float4):
// 4x fewer load/store instructions for the same bytes. Otherwise the kernel
// takes the scalar path of the previous stage; the choice is made once per
// launch inside the kernel (the same for every thread), so one kernel handles
// every shape. The shared-memory layout is the previous stage's, and every
// access stays free of bank conflicts:
//  - A, float4 path: a warp reads two float4 (one 32-byte sector) from each of
//    16 rows, then writes them transposed, 4 scalar stores As[k+c][m]: bank
//    (4(k+c) + m) mod 32 = 16q + 4c + m (q: first or second float4 of the
//    sector, m: 16 consecutive rows), 32 distinct banks.
//  - B, float4 path: a quarter-warp stores 8 consecutive float4 of a Bs row
//    (128 contiguous bytes).
//  - A and B, scalar path: as in the previous stage.
//  - Compute: a quarter-warp reads one float4 of As (broadcast) and 8
//    consecutive float4 of Bs.
// C is written with float4 stores on the vector path.
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
#define AS_STRIDE (BM + 4)             // floats per row of As: 4 (mod 32) banks apart

// Copies the BM x BK tile of A at (rowBase, k0), transposed, and the BK x BN
// tile of B at (k0, colBase) into shared memory; zeros outside the matrices.
__device__ __forceinline__ void load_tiles(const bool vec, int M, int N, int K, const float* A, const float* B,
                                           int rowBase, int colBase, int k0,
                                           float (*As)[AS_STRIDE], float (*Bs)[BN])
{
    const int tid = threadIdx.x;
    if (vec) {
        // A: float4 f -> row m, k = 8*kb + 4*q: a warp takes 2 float4 (one 32-byte sector) of 16 rows.
#pragma unroll
        for (int f = tid; f < BM * BK / 4; f += NUM_THREADS) {
            const int q = f % 2, m = (f / 2) % BM, k = (f / (2 * BM)) * 8 + 4 * q;
            const int gr = rowBase + m, gc = k0 + k;     // gc % 4 == 0 and K % 4 == 0
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gr < M && gc < K) a = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
            As[k + 0][m] = a.x; As[k + 1][m] = a.y; As[k + 2][m] = a.z; As[k + 3][m] = a.w;
        }
        // B: a warp takes 32 consecutive float4 (BN/4 per row).
#pragma unroll
        for (int f = tid; f < BK * BN / 4; f += NUM_THREADS) {
            const int k = f / (BN / 4), n = (f % (BN / 4)) * 4;
            const int gr = k0 + k, gc = colBase + n;      // gc % 4 == 0 and N % 4 == 0
            float4 b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gr < K && gc < N) b = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
            *reinterpret_cast<float4*>(&Bs[k][n]) = b;
        }
    } else {
        // Scalar path: A, a warp takes 8 consecutive k of 4 rows.
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
    }
}

// acc += the product of the tiles in shared memory, for this thread's TM x TN results.
__device__ __forceinline__ void compute_tile(const float (*As)[AS_STRIDE], const float (*Bs)[BN],
                                             int threadRow, int threadCol, float (&acc)[TM][TN])
{
    constexpr int RSTEP = BM / (TM / 4), CSTEP = BN / (TN / 4);
    float regA[TM], regB[TN];
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
}

__global__ void __launch_bounds__(NUM_THREADS, 2)   // <= 128 registers: 2 blocks of 256 per SM
sgemm_vectorized(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % 8 == 0, "tiles: BM, BN multiples of 32, BK of 8");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "thread tile: 4 x 4 pieces");
    static_assert(NUM_THREADS % 32 == 0 && (BM * BK / 4) % NUM_THREADS == 0 && (BK * BN / 4) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly (as float4) over whole warps");
    __shared__ __align__(16) float As[BK][AS_STRIDE];
    __shared__ __align__(16) float Bs[BK][BN];

    const int threadCol = threadIdx.x % (BN / TN);
    const int threadRow = threadIdx.x / (BN / TN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    constexpr int RSTEP = BM / (TM / 4), CSTEP = BN / (TN / 4);
    // float4 path: every row of A, B, C 16-byte aligned (same value in all threads).
    const bool vec = ((K | N) & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |
          reinterpret_cast<unsigned long long>(C)) & 15) == 0;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // Two copies of the main loop, one per path, so that each is compiled with
    // `vec` a constant (no branch and no registers for the other path inside).
    if (vec) {
        for (int k0 = 0; k0 < K; k0 += BK) {
            load_tiles(true, M, N, K, A, B, rowBase, colBase, k0, As, Bs);
            __syncthreads();
            compute_tile(As, Bs, threadRow, threadCol, acc);
            __syncthreads();
        }
    } else {
        for (int k0 = 0; k0 < K; k0 += BK) {
            load_tiles(false, M, N, K, A, B, rowBase, colBase, k0, As, Bs);
            __syncthreads();
            compute_tile(As, Bs, threadRow, threadCol, acc);
            __syncthreads();
        }
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + (i / 4) * RSTEP + threadRow * 4 + i % 4;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int col = colBase + g * CSTEP + threadCol * 4;
            if (row >= M) continue;
            if (vec) {
                if (col < N)          // N % 4 == 0: then col + 3 < N too
                    *reinterpret_cast<float4*>(&C[row * N + col]) =
                        make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    if (col + c < N) C[row * N + col + c] = acc[i][4 * g + c];
            }
        }
    }
}

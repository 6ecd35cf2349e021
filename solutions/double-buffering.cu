// Stage 8, double buffering: a step of the previous stages loads a tile, waits
// at a barrier, computes, waits again; while the loads are in flight nothing
// computes, and while the block computes no loads are in flight. Here the
// global loads of tile t+1 are issued before the computation on tile t, into
// registers (float4 path), so their latency is hidden behind BK*TM*TN
// multiply-adds; after the computation they are written to the second of two
// shared-memory buffers. (The scalar path copies straight into the second
// buffer: staging its 8 scalars and addresses would not fit in 128 registers.) Tile t is read from buffer t%2 while tile t+1 is
// written to buffer (t+1)%2, so one barrier per step is enough: it separates
// the writes of buffer (t+1)%2 from their reads in step t+1, and the reads of
// buffer t%2 in step t from its writes in step t+1.
// Everything else is the vectorized stage: A transposed and padded, float4
// loads when K % 4 == 0 and N % 4 == 0 (scalar path otherwise, chosen at run
// time), and no bank conflicts in any shared-memory access (same patterns).
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

#define LA (BM * BK / NUM_THREADS)   // elements of A each thread stages in registers per tile
#define LB (BK * BN / NUM_THREADS)   // elements of B

// float4 path, global -> registers: the tile of A at (rowBase, k0) and of B at
// (k0, colBase); zeros outside the matrices. Same maps as the vectorized stage.
__device__ __forceinline__ void load_global(int M, int N, int K, const float* A, const float* B,
                                            int rowBase, int colBase, int k0, float4 (&ra)[LA / 4], float4 (&rb)[LB / 4])
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int r = 0; r < LA / 4; ++r) {
        const int f = tid + r * NUM_THREADS;
        const int q = f % 2, m = (f / 2) % BM, k = (f / (2 * BM)) * 8 + 4 * q;
        const int gr = rowBase + m, gc = k0 + k;     // gc % 4 == 0 and K % 4 == 0
        ra[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (gr < M && gc < K) ra[r] = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
    }
#pragma unroll
    for (int r = 0; r < LB / 4; ++r) {
        const int f = tid + r * NUM_THREADS;
        const int k = f / (BN / 4), n = (f % (BN / 4)) * 4;
        const int gr = k0 + k, gc = colBase + n;      // gc % 4 == 0 and N % 4 == 0
        rb[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (gr < K && gc < N) rb[r] = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
    }
}

// float4 path, registers -> shared memory (A transposed): conflict free as in
// the vectorized stage.
__device__ __forceinline__ void store_shared(const float4 (&ra)[LA / 4], const float4 (&rb)[LB / 4],
                                             float (*As)[AS_STRIDE], float (*Bs)[BN])
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int r = 0; r < LA / 4; ++r) {
        const int f = tid + r * NUM_THREADS;
        const int q = f % 2, m = (f / 2) % BM, k = (f / (2 * BM)) * 8 + 4 * q;
        As[k + 0][m] = ra[r].x; As[k + 1][m] = ra[r].y;      // bank 16q + 4c + m (mod 32)
        As[k + 2][m] = ra[r].z; As[k + 3][m] = ra[r].w;
    }
#pragma unroll
    for (int r = 0; r < LB / 4; ++r) {
        const int f = tid + r * NUM_THREADS;
        const int k = f / (BN / 4), n = (f % (BN / 4)) * 4;
        *reinterpret_cast<float4*>(&Bs[k][n]) = rb[r];
    }
}

// Scalar path: global -> shared directly (staging 2x4 scalars and their
// addresses in registers too would not fit in 128 registers). The second
// buffer still lets these loads overlap the other warps' computation.
__device__ __forceinline__ void copy_scalar(int M, int N, int K, const float* A, const float* B,
                                            int rowBase, int colBase, int k0,
                                            float (*As)[AS_STRIDE], float (*Bs)[BN])
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = tid; e < BM * BK; e += NUM_THREADS) {
        const int kc = e % 8, m = (e / 8) % BM, k = (e / (8 * BM)) * 8 + kc;
        const int gr = rowBase + m, gc = k0 + k;
        As[k][m] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;      // bank 4kc + m (mod 32)
    }
#pragma unroll
    for (int e = tid; e < BK * BN; e += NUM_THREADS) {
        const int k = e / BN, n = e % BN;
        const int gr = k0 + k, gc = colBase + n;
        Bs[k][n] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
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

// The main loop for one path (vec a constant after inlining).
__device__ __forceinline__ void main_loop(const bool vec, int M, int N, int K, const float* A, const float* B,
                                          int rowBase, int colBase, int threadRow, int threadCol,
                                          float (*As)[BK][AS_STRIDE], float (*Bs)[BK][BN], float (&acc)[TM][TN])
{
    float4 ra[LA / 4], rb[LB / 4];
    const int tiles = (K + BK - 1) / BK;
    if (vec) {
        load_global(M, N, K, A, B, rowBase, colBase, 0, ra, rb);
        store_shared(ra, rb, As[0], Bs[0]);
    } else {
        copy_scalar(M, N, K, A, B, rowBase, colBase, 0, As[0], Bs[0]);
    }
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const bool more = t + 1 < tiles;            // the same in every thread
        if (more) {
            if (vec)                                // in flight during compute_tile
                load_global(M, N, K, A, B, rowBase, colBase, (t + 1) * BK, ra, rb);
            else
                copy_scalar(M, N, K, A, B, rowBase, colBase, (t + 1) * BK, As[(t + 1) % 2], Bs[(t + 1) % 2]);
        }
        compute_tile(As[t % 2], Bs[t % 2], threadRow, threadCol, acc);
        if (more && vec)
            store_shared(ra, rb, As[(t + 1) % 2], Bs[(t + 1) % 2]);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(NUM_THREADS, 2)   // <= 128 registers: 2 blocks of 256 per SM
sgemm_double_buffering(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % 8 == 0, "tiles: BM, BN multiples of 32, BK of 8");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "thread tile: 4 x 4 pieces");
    static_assert(NUM_THREADS % 32 == 0 && (BM * BK / 4) % NUM_THREADS == 0 && (BK * BN / 4) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly (as float4) over whole warps");
    __shared__ __align__(16) float As[2][BK][AS_STRIDE];
    __shared__ __align__(16) float Bs[2][BK][BN];

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

    if (vec)
        main_loop(true, M, N, K, A, B, rowBase, colBase, threadRow, threadCol, As, Bs, acc);
    else
        main_loop(false, M, N, K, A, B, rowBase, colBase, threadRow, threadCol, As, Bs, acc);

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

// Stage 9, warptiling: a third level of tiling between the block and the
// thread. The BM x BN block tile is split into WM x WN warp tiles, one per warp
// (NUM_THREADS/32 warps); a warp tile is computed as WMITER x WNITER sub-tiles
// of WSUBM x WSUBN, and in each sub-tile a lane computes TM x TN results. So a
// thread owns WMITER*TM x WNITER*TN results spread in a regular pattern: the
// 32 lanes of a warp read a small, contiguous window of As and Bs for each k
// (good for banks and for the register cache), and the warps of a block work
// on separate regions, which is how the hardware schedules them anyway.
// Shared-memory reads: lane (laneRow, laneCol) reads TM floats of As and TN of
// Bs as float4. A quarter-warp (8 lanes) covers 8/LC rows by LC columns of
// lanes (LC = WSUBN/TN): for the default configuration (LC = 4, TM = 8, TN = 4)
// it reads 2 float4 of As 32 bytes apart (banks 0-3 and 8-11 of its window,
// the rest broadcast) and 4 consecutive float4 of Bs: no bank conflicts.
// grader/autotune.py checks this for every configuration it tries.
// Loads: as in the double-buffering stage (A transposed into rows padded to
// BM+4 floats, float4 when K % 4 == 0 and N % 4 == 0, else scalar, chosen at
// run time; the float4 path stages the next tile in registers during the
// computation, into the second of two shared buffers).
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef WNITER
#define WNITER 2
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 4
#endif
#ifndef NUM_THREADS
#define NUM_THREADS 256
#endif
#ifndef MIN_BLOCKS         // blocks per SM the register allocation must allow
#define MIN_BLOCKS (NUM_THREADS >= 256 ? 2 : 1)
#endif

#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))   // sub-tiles of a warp tile, vertically
#define WSUBM (WM / WMITER)                            // sub-tile height
#define WSUBN (WN / WNITER)                            // sub-tile width
#define LC (WSUBN / TN)                                // lanes across a sub-tile
#define AS_STRIDE (BM + 4)                             // floats per row of As: 4 (mod 32) banks apart
#define LA (BM * BK / NUM_THREADS)                     // elements of A each thread loads per tile
#define LB (BK * BN / NUM_THREADS)                     // elements of B

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

// acc += the product of the tiles in shared memory, for this thread's results.
__device__ __forceinline__ void compute_tile(const float (*As)[AS_STRIDE], const float (*Bs)[BN],
                                             int aOff, int bOff, float (&acc)[WMITER * TM][WNITER * TN])
{
    float regA[WMITER * TM], regB[WNITER * TN];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(&As[k][aOff + wm * WSUBM + i]);
                regA[wm * TM + i] = a.x; regA[wm * TM + i + 1] = a.y;
                regA[wm * TM + i + 2] = a.z; regA[wm * TM + i + 3] = a.w;
            }
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b = *reinterpret_cast<const float4*>(&Bs[k][bOff + wn * WSUBN + j]);
                regB[wn * TN + j] = b.x; regB[wn * TN + j + 1] = b.y;
                regB[wn * TN + j + 2] = b.z; regB[wn * TN + j + 3] = b.w;
            }
#pragma unroll
        for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
            for (int j = 0; j < WNITER * TN; ++j)
                acc[i][j] += regA[i] * regB[j];
    }
}

// The main loop for one path (vec a constant after inlining).
__device__ __forceinline__ void main_loop(const bool vec, int M, int N, int K, const float* A, const float* B,
                                          int rowBase, int colBase, int aOff, int bOff,
                                          float (*As)[BK][AS_STRIDE], float (*Bs)[BK][BN],
                                          float (&acc)[WMITER * TM][WNITER * TN])
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
        compute_tile(As[t % 2], Bs[t % 2], aOff, bOff, acc);
        if (more && vec)
            store_shared(ra, rb, As[(t + 1) % 2], Bs[(t + 1) % 2]);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_warptiling(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(NUM_THREADS == 32 * (BM / WM) * (BN / WN) && BM % WM == 0 && BN % WN == 0,
                  "one warp per WM x WN warp tile");
    static_assert(WMITER >= 1 && WM % WMITER == 0 && WN % WNITER == 0 && WSUBN % TN == 0 &&
                  32 % LC == 0 && (32 / LC) * TM == WSUBM, "32 lanes cover a WSUBM x WSUBN sub-tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles read as float4");
    static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % 8 == 0, "tiles: BM, BN multiples of 32, BK of 8");
    static_assert((BM * BK / 4) % NUM_THREADS == 0 && (BK * BN / 4) % NUM_THREADS == 0,
                  "the tiles of A and B must split evenly (as float4) over the threads");
    __shared__ __align__(16) float As[2][BK][AS_STRIDE];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneRow = lane / LC, laneCol = lane % LC;
    // Offsets in the block tile of this thread's first row and first column.
    const int aOff = warpRow * WM + laneRow * TM;
    const int bOff = warpCol * WN + laneCol * TN;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    // float4 path: every row of A, B, C 16-byte aligned (same value in all threads).
    const bool vec = ((K | N) & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |
          reinterpret_cast<unsigned long long>(C)) & 15) == 0;

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;

    if (vec)
        main_loop(true, M, N, K, A, B, rowBase, colBase, aOff, bOff, As, Bs, acc);
    else
        main_loop(false, M, N, K, A, B, rowBase, colBase, aOff, bOff, As, Bs, acc);

#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = rowBase + aOff + wm * WSUBM + i;
            if (row >= M) continue;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = colBase + bOff + wn * WSUBN + j;
                    const float* r = &acc[wm * TM + i][wn * TN + j];
                    if (vec) {
                        if (col < N)          // N % 4 == 0: then col + 3 < N too
                            *reinterpret_cast<float4*>(&C[row * N + col]) = make_float4(r[0], r[1], r[2], r[3]);
                    } else {
#pragma unroll
                        for (int c = 0; c < 4; ++c)
                            if (col + c < N) C[row * N + col + c] = r[c];
                    }
                }
        }
}

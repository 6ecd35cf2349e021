// Stage 9, warptiling: a third level of tiling between the block and the
// thread, and a deeper pipeline of asynchronous copies.
// Tiling: the BM x BN block tile is split into WM x WN warp tiles, one per
// warp (NUM_THREADS/32 warps); a warp tile is computed as WMITER x WNITER
// sub-tiles of WSUBM x WSUBN, and in each sub-tile a lane computes TM x TN
// results. So a thread owns WMITER*TM x WNITER*TN results spread in a regular
// pattern: the 32 lanes of a warp read a small, contiguous window of As and Bs
// for each k (good for banks and for the register cache), and the warps of a
// block work on separate regions.
// Shared-memory reads: lane (laneRow, laneCol) reads TM floats of As and TN of
// Bs as float4. A quarter-warp (8 lanes) covers 8/LC rows by LC columns of
// lanes (LC = WSUBN/TN): for the default configuration (LC = 8, TM = 8, TN = 4)
// its 8 lanes read one float4 of As (a broadcast) and 8 consecutive float4 of
// Bs: no bank conflicts. The autotuner (python -m grader autotune) checks this for every
// configuration it tries.
// Loads: the double-buffering stage staged the next tile in registers; here
// the hardware copies B's tiles from global straight into shared memory
// (cp.async, through the CUDA pipeline primitives) while the threads compute,
// STAGES - 1 tiles ahead in a ring of STAGES shared buffers, as float4 when
// N % 4 == 0 (scalar otherwise). A must be transposed on the way (As[k][m], so
// that a thread's TM rows are one float4 read), and cp.async can transpose only
// one float at a time: on the H200 those 4-byte copies (which pass through the
// L1 cache) cost 2.6% at 4096^3 against what is done here
// (results/nvidia-h200/warptiling-experiments.md). So A's next tile is loaded
// into registers as float4 (__ldcg: not kept in L1) while this one is
// computed, and stored transposed, as in the double-buffering stage: a warp
// covers 16 rows x 2 groups of 4 k, and rows of As padded to BM+4 floats put
// its stores in 32 different banks (bank 16g + 4j + m for element j of a
// group). The scalar path (rows not 16-byte aligned) loads A in groups of 4
// rows at one k instead, stored as one float4 (load_a). Zeros outside the
// matrices.
// The buffers are dynamic shared memory: STAGES * BK * (BM + 4 + BN) floats,
// more than 48 KiB for the larger configurations.
// The loop: on the float4 path (main_loop4) a thread finds the sources of its
// copies once and moves them one tile along K per step, and the copies run on
// past the last tile with zeros instead of being tested, so the loop has no
// branch but its own; each step reads its first fragments before it issues the
// next tile's copies; and the outer product is ordered around the register
// banks (compute_tile). On the H200 these make the autotuned build run at
// 0.955-0.96 of cuBLAS at 2048^3-8192^3, against 0.91-0.94 for the same kernel
// without them (what each does, and the SASS behind it:
// results/nvidia-h200/warptiling-experiments.md).
// Block order: blockIdx.x runs down a column of tiles (grid = tiles of M by
// tiles of N), so the blocks that run at the same time share a few column
// panels of B and stream through A. On the H200, with the autotuned
// parameters, this order made a form of this kernel that copies A by cp.async
// too 1.7% faster at 8192^3 than the row order of the earlier stages, and
// no slower elsewhere (results/nvidia-h200/warptiling-experiments.md).
// Split-K (built only with -DSPLITK_WORKSPACE=<floats>, as the autotuned stage
// does for shapes with few tiles of C and a long K): when a grid of BM x BN
// tiles cannot fill the GPU (512 x 512 is 16 tiles of 128 x 128 for 132 SMs),
// the K dimension is cut into gridDim.z slices and block z of a tile sums only
// slice z. Each block writes its partial sums to a workspace, counts itself
// in with an atomic add, and the block that arrives last adds the gridDim.z
// partial tiles in the order z = 0, 1, 2, ... and writes C. Floating-point
// addition is not associative, so the fixed order is what makes the result
// the same in every run (atomicAdd on C would sum in arrival order). The
// price: the partials go to memory and back (in L2), and each block does less
// work per prologue and epilogue. The launch keeps gridDim.z = 1 otherwise.
extern "C++" {     // PyCUDA wraps the source in extern "C"; this header is C++
#include <cuda_pipeline.h>
}

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 8
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
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
#ifndef STAGES             // shared buffers in the copy pipeline
#define STAGES 3
#endif
#ifndef MIN_BLOCKS         // blocks per SM the register allocation must allow
#define MIN_BLOCKS 1
#endif

#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))   // sub-tiles of a warp tile, vertically
#define WSUBM (WM / WMITER)                            // sub-tile height
#define WSUBN (WN / WNITER)                            // sub-tile width
#define LC (WSUBN / TN)                                // lanes across a sub-tile
#define AS_STRIDE (BM + 4)                             // floats per row of As: 4 (mod 32) banks apart
#define AV (BM * BK / 4)                               // groups of 4 floats in a tile of A
#define LA4 ((AV + NUM_THREADS - 1) / NUM_THREADS)     // groups of A each thread loads per tile
#define LB (BK * BN / NUM_THREADS)                     // elements of B

// The scalar path (rows of A, B or C not 16-byte aligned): start copying the
// tile of B at (k0, colBase) into Bs, as one batch of 4-byte copies; zeros at
// k >= kEnd (the end of K, or of this block's slice of K) and outside the matrix.
__device__ __forceinline__ void copy_b(int N, int kEnd, const float* B, int colBase, int k0, float (*Bs)[BN])
{
#pragma unroll
    for (int r = 0; r < LB; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        const int k = e / BN, n = e % BN;
        const int gr = k0 + k, gc = colBase + n;
        const bool in = gr < kEnd && gc < N;
        __pipeline_memcpy_async(&Bs[k][n], in ? &B[gr * N + gc] : B, 4, in ? 0 : 4);
    }
    __pipeline_commit();
}

// Where group e of the A tile lies on the float4 path: 4 consecutive k
// (k .. k+3) of row m. A warp covers 16 rows x 2 groups, so that its stores
// to As are conflict free.
__device__ __forceinline__ int a_row(int e) { return e % 16 + 16 * (e / (4 * BK)); }
__device__ __forceinline__ int a_col(int e) { return 4 * ((e / 16) % (BK / 4)); }
// Whether group e exists (always, when the groups split evenly over the threads).
__device__ __forceinline__ bool a_group(int e) { return AV % NUM_THREADS == 0 || e < AV; }

// Store the float4 path's groups into As, transposed: As[k][m]. Rows of As
// are 4 (mod 32) banks apart, so each of the four stores of a warp hits 32
// different banks.
__device__ __forceinline__ void store_a(const float4 (&ra)[LA4], float (*As)[AS_STRIDE])
{
#pragma unroll
    for (int r = 0; r < LA4; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        if (a_group(e)) {
            const int m = a_row(e), k = a_col(e);
            As[k][m] = ra[r].x;
            As[k + 1][m] = ra[r].y;
            As[k + 2][m] = ra[r].z;
            As[k + 3][m] = ra[r].w;
        }
    }
}

// The scalar path lays its groups out the other way: group e is 4 consecutive
// rows (from 4 * (e / BK)) at one k (e % BK). A warp's load then reads BK
// consecutive floats of each of its rows (whole sectors, not 16 rows x 2
// groups), and a group goes into As as one float4, As[k][m .. m+3] (on an
// H100, 4097^3 ran at 0.863 of cuBLAS so, 0.849 with the float4 path's layout).
__device__ __forceinline__ int a_rows(int e) { return 4 * (e / BK); }

// The scalar path: load this thread's groups of the A tile at (rowBase, k0)
// into registers; zeros at k >= kEnd and outside the matrix.
__device__ __forceinline__ void load_a(int M, int K, int kEnd, const float* A, int rowBase, int k0,
                                       float4 (&ra)[LA4])
{
#pragma unroll
    for (int r = 0; r < LA4; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        const int gr = rowBase + a_rows(e), gc = k0 + e % BK;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (a_group(e) && gc < kEnd) {
            const float* p = &A[gr * K + gc];
            if (gr < M) v.x = p[0];
            if (gr + 1 < M) v.y = p[K];
            if (gr + 2 < M) v.z = p[2 * K];
            if (gr + 3 < M) v.w = p[3 * K];
        }
        ra[r] = v;
    }
}

// Store the scalar path's groups, a float4 each. The 8 threads of a quarter-warp
// hold 8 different k of the same rows, in rows of As 4 (mod 32) banks apart:
// 32 different banks.
__device__ __forceinline__ void store_a_rows(const float4 (&ra)[LA4], float (*As)[AS_STRIDE])
{
#pragma unroll
    for (int r = 0; r < LA4; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        if (a_group(e))
            *reinterpret_cast<float4*>(&As[e % BK][a_rows(e)]) = ra[r];
    }
}

// Where this thread's results lie in the block tile: aOff, the row of its
// first result, and bOff, the column (as the tiling above says: warp tile,
// then the lane's place in a WSUBM x WSUBN sub-tile).
__device__ __forceinline__ void thread_offsets(int& aOff, int& bOff)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneRow = lane / LC, laneCol = lane % LC;
    aOff = warpRow * WM + laneRow * TM;
    bOff = warpCol * WN + laneCol * TN;
}

// Step k's fragments: this thread's TM rows of As and TN columns of Bs in each
// sub-tile, as float4.
__device__ __forceinline__ void load_fragments(const float (*As)[AS_STRIDE], const float (*Bs)[BN], int k,
                                               int aOff, int bOff, float (&regA)[WMITER * TM],
                                               float (&regB)[WNITER * TN])
{
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; i += 4)
            *reinterpret_cast<float4*>(&regA[wm * TM + i]) =
                *reinterpret_cast<const float4*>(&As[k][aOff + wm * WSUBM + i]);
#pragma unroll
    for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(&regB[wn * TN + j]) =
                *reinterpret_cast<const float4*>(&Bs[k][bOff + wn * WSUBN + j]);
}

// acc += the product of the tiles in shared memory, for this thread's results;
// regA and regB hold step 0's fragments on entry (the caller loads them first,
// so that their latency hides behind the copies it issues next).
// Row i of the outer product starts at column 1 when i is even: a float4 lands
// in four registers R4n..R4n+3, so regA[i] and regB[j] lie in the register
// bank of the parity of i and j (two banks, by register number), and an FFMA
// that reads its three operands (a, b, acc) from one bank is slower (on the
// H200 Nsight Compute finds 1.7 times the samples on such FFMAs). Within a row
// regA[i] comes from the operand reuse cache (ptxas marks it .reuse), so only
// a row's first FFMA reads three registers: this order gives it a and b of
// different parity (it made the kernel 2-3% faster at 4096^3).
__device__ __forceinline__ void compute_tile(const float (*As)[AS_STRIDE], const float (*Bs)[BN],
                                             int aOff, int bOff, float (&regA)[WMITER * TM],
                                             float (&regB)[WNITER * TN], float (&acc)[WMITER * TM][WNITER * TN])
{
#pragma unroll
    for (int k = 0; k < BK; ++k) {
        if (k > 0) load_fragments(As, Bs, k, aOff, bOff, regA, regB);
#pragma unroll
        for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
            for (int jj = 0; jj < WNITER * TN; ++jj) {
                const int j = (jj + (i % 2 == 0)) % (WNITER * TN);
                acc[i][j] += regA[i] * regB[j];
            }
    }
}

// Zeros: what a float4 load of A reads where its group lies outside A.
__device__ float4 warptiling_zeros;

// The float4 path's sources, found once per block: this thread's pieces of B
// (LB / 4 float4 of each tile) and groups of A (LA4), their addresses at the
// first tile and whether they lie inside the matrix; each step moves the
// addresses one tile along K (BK rows of B, BK columns of A), so the loop does
// no index arithmetic, and only the k test changes from tile to tile.
struct Sources {
    const float* b[LB / 4];
    bool bIn[LB / 4];
    const float* a[LA4];
    bool aIn[LA4];
};

__device__ __forceinline__ void find_sources(int M, int N, int K, int kBegin, const float* A, const float* B,
                                             int rowBase, int colBase, Sources& s)
{
#pragma unroll
    for (int r = 0; r < LB / 4; ++r) {
        const int f = threadIdx.x + r * NUM_THREADS;
        const int k = f / (BN / 4), n = (f % (BN / 4)) * 4;
        s.bIn[r] = colBase + n < N;                          // N % 4 == 0: then colBase + n + 3 < N too
        s.b[r] = B + size_t(kBegin + k) * N + (s.bIn[r] ? colBase + n : 0);
    }
#pragma unroll
    for (int r = 0; r < LA4; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        const int gr = rowBase + a_row(e);
        s.aIn[r] = a_group(e) && gr < M;
        s.a[r] = A + size_t(s.aIn[r] ? gr : 0) * K + kBegin + a_col(e);
    }
}

// Copy the next tile of B (kLeft: how many of its rows lie before the end of
// K, perhaps none) into Bs as float4, zeros past the end and outside the matrix.
__device__ __forceinline__ void copy_b4(int kLeft, const float* B, int N, Sources& s, float (*Bs)[BN])
{
#pragma unroll
    for (int r = 0; r < LB / 4; ++r) {
        const int f = threadIdx.x + r * NUM_THREADS;
        const int k = f / (BN / 4), n = (f % (BN / 4)) * 4;
        const bool in = s.bIn[r] && k < kLeft;
        __pipeline_memcpy_async(&Bs[k][n], in ? s.b[r] : B, 16, in ? 0 : 16);
        s.b[r] += size_t(BK) * N;
    }
    __pipeline_commit();
}

// Load the next tile's groups of A as float4 (kLeft as in copy_b4).
__device__ __forceinline__ void load_a4(int kLeft, Sources& s, float4 (&ra)[LA4])
{
#pragma unroll
    for (int r = 0; r < LA4; ++r) {
        const int e = threadIdx.x + r * NUM_THREADS;
        const bool in = s.aIn[r] && a_col(e) < kLeft;       // kLeft % 4 == 0: all 4 columns, or none
        ra[r] = __ldcg(in ? reinterpret_cast<const float4*>(s.a[r]) : &warptiling_zeros);
        s.a[r] += BK;
    }
}

// The main loop of the float4 path, over k from kBegin to kEnd. B's tiles are
// copied STAGES - 1 tiles ahead; every step commits one batch of copies, so
// "all but the newest STAGES - 2 batches" is always "up to tile t". A's tile
// t + 2 is loaded into registers at step t, while tile t is computed, and
// stored into As at step t + 1. Past the last tile the copies, loads and
// stores go on with zeros, into slots that no one reads any more: the loop has
// no branch but its own, so ptxas spreads the copy instructions between the
// multiply-adds, and step 0's fragments are read first, before the copies.
__device__ __forceinline__ void main_loop4(int M, int N, int K, int kBegin, int kEnd, const float* A,
                                           const float* B, int rowBase, int colBase, int aOff, int bOff,
                                           float (*As)[BK][AS_STRIDE], float (*Bs)[BK][BN],
                                           float (&acc)[WMITER * TM][WNITER * TN])
{
    const int tiles = (kEnd - kBegin + BK - 1) / BK;
    Sources s;
    find_sources(M, N, K, kBegin, A, B, rowBase, colBase, s);
    float4 ra[LA4];
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) copy_b4(kEnd - kBegin - t * BK, B, N, s, Bs[t]);
    load_a4(kEnd - kBegin, s, ra);
    store_a(ra, As[0]);
    load_a4(kEnd - kBegin - BK, s, ra);
    int kLeftB = kEnd - kBegin - (STAGES - 1) * BK, kLeftA = kEnd - kBegin - 2 * BK;   // k left from B's, A's next tile
    for (int t = 0; t < tiles; ++t) {
        __pipeline_wait_prior(STAGES - 2);       // B's tile t has landed (this thread's copies)
        __syncthreads();                         // ... and everyone's, and A's stores; slot (t-1) % STAGES is free
        float regA[WMITER * TM], regB[WNITER * TN];
        load_fragments(As[t % STAGES], Bs[t % STAGES], 0, aOff, bOff, regA, regB);
        store_a(ra, As[(t + 1) % STAGES]);
        copy_b4(kLeftB, B, N, s, Bs[(t + STAGES - 1) % STAGES]);
        load_a4(kLeftA, s, ra);
        kLeftB -= BK;
        kLeftA -= BK;
        compute_tile(As[t % STAGES], Bs[t % STAGES], aOff, bOff, regA, regB, acc);
    }
}


// The main loop of the scalar path: as main_loop4, with 4-byte copies of B and
// loads of A whose bounds are tested at each step, no copies past the end, and
// step 0's fragments read after the copies.
__device__ __forceinline__ void main_loop(int M, int N, int K, int kBegin, int kEnd, const float* A,
                                          const float* B, int rowBase, int colBase, int aOff, int bOff,
                                          float (*As)[BK][AS_STRIDE], float (*Bs)[BK][BN],
                                          float (&acc)[WMITER * TM][WNITER * TN])
{
    const int tiles = (kEnd - kBegin + BK - 1) / BK;
    float4 ra[LA4];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) copy_b(N, kEnd, B, colBase, kBegin + s * BK, Bs[s]);
        else __pipeline_commit();
    }
    load_a(M, K, kEnd, A, rowBase, kBegin, ra);
    store_a_rows(ra, As[0]);
    if (1 < tiles) load_a(M, K, kEnd, A, rowBase, kBegin + BK, ra);
    for (int t = 0; t < tiles; ++t) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();
        if (t + 1 < tiles) store_a_rows(ra, As[(t + 1) % STAGES]);
        const int next = t + STAGES - 1;
        if (next < tiles) copy_b(N, kEnd, B, colBase, kBegin + next * BK, Bs[next % STAGES]);
        else __pipeline_commit();
        if (t + 2 < tiles) load_a(M, K, kEnd, A, rowBase, kBegin + (t + 2) * BK, ra);
        float regA[WMITER * TM], regB[WNITER * TN];
        load_fragments(As[t % STAGES], Bs[t % STAGES], 0, aOff, bOff, regA, regB);
        compute_tile(As[t % STAGES], Bs[t % STAGES], aOff, bOff, regA, regB, acc);
    }
}

// This thread's results into C (float4 stores on the vec path), inside the matrix.
__device__ __forceinline__ void store_c(const bool vec, int M, int N, float* C, int rowBase, int colBase,
                                        int aOff, int bOff, const float (&acc)[WMITER * TM][WNITER * TN])
{
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

#if SPLITK_WORKSPACE
// Partial tiles, BM * BN floats per (slice z, tile of C); a thread's results
// as float4 number q at [q * NUM_THREADS + threadIdx.x] (coalesced). And one
// arrival counter per tile of C, back to 0 once its last block has arrived.
// One launch at a time per loaded module: the workspace is the module's.
__device__ float splitk_partials[SPLITK_WORKSPACE];
__device__ unsigned int splitk_arrivals[SPLITK_WORKSPACE / (BM * BN)];

// Split-K: publish this block's partial sums; in the block that arrives last
// for its tile, replace acc by the sum of all gridDim.z partials, added in the
// order of z, and return true (that block writes C); false in the others.
__device__ __forceinline__ bool splitk_sum(float (&acc)[WMITER * TM][WNITER * TN])
{
    constexpr int Q = WMITER * TM * WNITER * TN / 4;       // float4 per thread
    const int tile = blockIdx.y * gridDim.x + blockIdx.x, tiles = gridDim.x * gridDim.y;
    float4* part = reinterpret_cast<float4*>(splitk_partials);
    float4* mine = part + (size_t(blockIdx.z) * tiles + tile) * (BM * BN / 4) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; j += 4)
            mine[(i * WNITER * TN + j) / 4 * NUM_THREADS] = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2],
                                                                        acc[i][j + 3]);
    __threadfence();                   // the partials are visible GPU-wide ...
    __syncthreads();                   // ... all of this block's, before it counts itself in
    bool last = false;
    if (threadIdx.x == 0) {
        last = atomicAdd(&splitk_arrivals[tile], 1u) == gridDim.z - 1;
        if (last) splitk_arrivals[tile] = 0;         // ready for the next launch
    }
    if (!__syncthreads_or(last)) return false;       // the barrier also tells every thread
    __threadfence();
    // acc = partial 0 + partial 1 + ..., in this order: the same sums in every run. QC float4 of each
    // partial in flight at a time (more would spill: acc holds 4 Q registers already).
    constexpr int QC = Q % 16 == 0 ? 16 : Q % 8 == 0 ? 8 : 4;
#pragma unroll
    for (int c = 0; c < Q; c += QC) {
#pragma unroll
        for (int q = c; q < c + QC; ++q) {
            float* a = &acc[q * 4 / (WNITER * TN)][q * 4 % (WNITER * TN)];
            a[0] = a[1] = a[2] = a[3] = 0.0f;
        }
        for (int z = 0; z < (int)gridDim.z; ++z) {
            const float4* p = part + (size_t(z) * tiles + tile) * (BM * BN / 4) + threadIdx.x;
#pragma unroll
            for (int q = c; q < c + QC; ++q) {
                const float4 v = __ldcg(&p[q * NUM_THREADS]);      // from L2: another SM wrote it
                float* a = &acc[q * 4 / (WNITER * TN)][q * 4 % (WNITER * TN)];
                a[0] += v.x; a[1] += v.y; a[2] += v.z; a[3] += v.w;
            }
        }
    }
    return true;
}
#endif

__global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_warptiling(int M, int N, int K, const float* A, const float* B, float* C)
{
    static_assert(NUM_THREADS == 32 * (BM / WM) * (BN / WN) && BM % WM == 0 && BN % WN == 0,
                  "one warp per WM x WN warp tile");
    static_assert(WMITER >= 1 && WM % WMITER == 0 && WN % WNITER == 0 && WSUBN % TN == 0 &&
                  32 % LC == 0 && (32 / LC) * TM == WSUBM, "32 lanes cover a WSUBM x WSUBN sub-tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles read as float4");
    static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % 8 == 0, "tiles: BM, BN multiples of 32, BK of 8");
    static_assert((BK * BN / 4) % NUM_THREADS == 0, "the tile of B (float4) must split evenly over the threads");
    static_assert(STAGES >= 2, "at least two shared buffers");
    extern __shared__ __align__(16) float smem[];      // STAGES * BK * (AS_STRIDE + BN) floats
    float (*As)[BK][AS_STRIDE] = reinterpret_cast<float (*)[BK][AS_STRIDE]>(smem);
    float (*Bs)[BK][BN] = reinterpret_cast<float (*)[BK][BN]>(smem + STAGES * BK * AS_STRIDE);

    int aOff = 0, bOff = 0;             // this thread's first row and first column in the block tile
    thread_offsets(aOff, bOff);
    const int rowBase = blockIdx.x * BM, colBase = blockIdx.y * BN;   // blocks run down the columns
    // float4 path: every row of A, B and C 16-byte aligned (same value in all threads).
    const bool vec = (N & 3) == 0 && (K & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |
          reinterpret_cast<unsigned long long>(C)) & 15) == 0;

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;

#if SPLITK_WORKSPACE
    // Slice blockIdx.z of K: whole tiles of BK, the same number in every slice but perhaps the last.
    if (gridDim.z > 1 && size_t(gridDim.x) * gridDim.y * gridDim.z * (BM * BN) > SPLITK_WORKSPACE)
        __trap();                                    // the launch asked for more than the workspace holds
    const int perSlice = ((K + BK - 1) / BK + gridDim.z - 1) / gridDim.z * BK;
    const int kBegin = min(K, (int)blockIdx.z * perSlice), kEnd = min(K, kBegin + perSlice);
#else
    const int kBegin = 0, kEnd = K;                  // launched with gridDim.z = 1
#endif
    if (vec)
        main_loop4(M, N, K, kBegin, kEnd, A, B, rowBase, colBase, aOff, bOff, As, Bs, acc);
    else
        main_loop(M, N, K, kBegin, kEnd, A, B, rowBase, colBase, aOff, bOff, As, Bs, acc);
    __pipeline_wait_prior(0);          // main_loop4's copies past the end land before the block ends
#if SPLITK_WORKSPACE
    if (gridDim.z > 1 && !splitk_sum(acc))
        return;                                      // another block of this tile writes C
#endif
    store_c(vec, M, N, C, rowBase, colBase, aOff, bOff, acc);
}

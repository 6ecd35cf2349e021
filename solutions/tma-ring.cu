// C = A B on the tensor cores, its tiles brought by tensor copies through a ring of stages: A (M x K) and B
// (K x N) are row-major bfloat16, C (M x N) row-major float, accumulated in float. A block of four warps
// computes a BM x BN tile of C, each warp a 32 x 32 quarter in 2 x 2 wmma fragments of 16 x 16. Thread 0
// moves the data: it starts the copies of the first STAGES steps of BK along K, a BM x BK box of A and a
// BK x BN box of B for each stage (tensor copies, TMA, that complete on the stage's mbarrier), and refills a
// stage with the step STAGES further on once every warp has multiplied it (the __syncthreads() after the
// multiplication). Every thread waits on a stage's mbarrier, with the parity of that use of the stage, before
// it reads the stage. Boxes past the edges of A and B land as zeros, so M, N and K need only be multiples of
// 8 (rows of 16 bytes, as a tensor map requires); the tile of C goes through shared memory, each warp's
// quarter stored with bounds checks.
#include <mma.h>
#include <cuda_bf16.h>
#include "hopper.cuh"
using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define STAGES 3

struct Stage {
    __nv_bfloat16 a[BM * BK];
    __nv_bfloat16 b[BK * BN];
};

static __device__ void load_stage(Stage* stage, uint64_t* full, const TensorMap* a_map, const TensorMap* b_map,
                                  int kt, int m0, int n0)
{
    mbarrier_arrive_expect_tx(full, sizeof(Stage));
    tma_load_2d(stage->a, a_map, kt * BK, m0, full);
    tma_load_2d(stage->b, b_map, n0, kt * BK, full);
}

extern "C" __global__ void gemm_tma(const __grid_constant__ TensorMap a_map,
                                    const __grid_constant__ TensorMap b_map, float* C, int M, int N, int K)
{
    __shared__ __align__(128) Stage ring[STAGES];
    __shared__ __align__(128) float Cs[BM * BN];
    __shared__ uint64_t full[STAGES];
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;
    if (t == 0) {
        for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
        fence_mbarrier_init();
        fence_proxy_tensormap(&a_map);
        fence_proxy_tensormap(&b_map);
        for (int kt = 0; kt < STAGES && kt < tiles; ++kt) load_stage(&ring[kt], &full[kt], &a_map, &b_map, kt, m0, n0);
    }
    __syncthreads();

    const int warp = t / 32, wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int kt = 0; kt < tiles; ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait_parity(&full[s], (kt / STAGES) % 2);
        for (int k = 0; k < BK; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &ring[s].a[(wm + 16 * i) * BK + k], BK);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &ring[s].b[k * BN + wn + 16 * j], BN);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();                       // every warp has read stage s: it may be refilled
        if (t == 0 && kt + STAGES < tiles)
            load_stage(&ring[s], &full[s], &a_map, &b_map, kt + STAGES, m0, n0);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&Cs[(wm + 16 * i) * BN + wn + 16 * j], acc[i][j], BN, wmma::mem_row_major);
    __syncwarp();
    for (int e = t % 32; e < 32 * 32; e += 32) {
        const int r = wm + e / 32, c = wn + e % 32;
        if (m0 + r < M && n0 + c < N) C[size_t(m0 + r) * N + n0 + c] = Cs[r * BN + c];
    }
}

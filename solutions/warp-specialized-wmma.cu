// C = A B on the tensor cores, warp-specialized: A (M x K) and B (K x N) are row-major bfloat16, C (M x N)
// row-major float, accumulated in float. A block computes a BM x BN tile of C. Warp 4 is the producer: one
// of its threads streams the K dimension through a ring of STAGES stages of shared memory, loading a
// BM x BK box of A and a BK x BN box of B into a stage with two tensor copies (TMA) that complete on the
// stage's `full` mbarrier. Warps 0-3 are the consumers, each a 32 x 32 quarter of the tile in 2 x 2 wmma
// fragments of 16 x 16: they wait for a stage to be full, multiply it, and release it on its `empty`
// mbarrier, which the producer waits on before it refills that stage. Boxes past the edges of A and B
// land as zeros, so M, N and K need only be multiples of 8 (rows of 16 bytes, as a tensor map requires);
// the tile of C goes through shared memory, each warp's quarter stored with bounds checks.
#include <mma.h>
#include <cuda_bf16.h>
#include "hopper.cuh"
using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define STAGES 3
#define CONSUMERS 128                  // threads of warps 0-3
#define PRODUCER CONSUMERS             // the first thread of warp 4

extern "C" __global__ void gemm_bf16(const __grid_constant__ TensorMap a_map,
                                     const __grid_constant__ TensorMap b_map, float* C, int M, int N, int K)
{
    __shared__ __align__(128) __nv_bfloat16 As[STAGES][BM * BK];
    __shared__ __align__(128) __nv_bfloat16 Bs[STAGES][BK * BN];
    __shared__ __align__(128) float Cs[BM * BN];
    __shared__ uint64_t full[STAGES], empty[STAGES];
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;
    if (t == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], CONSUMERS);
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    if (t == PRODUCER) {
        fence_proxy_tensormap(&a_map);
        fence_proxy_tensormap(&b_map);
        for (int kt = 0; kt < tiles; ++kt) {
            const int s = kt % STAGES;
            if (kt >= STAGES) mbarrier_wait_parity(&empty[s], (kt / STAGES - 1) % 2);
            mbarrier_arrive_expect_tx(&full[s], sizeof(As[0]) + sizeof(Bs[0]));
            tma_load_2d(As[s], &a_map, kt * BK, m0, &full[s]);
            tma_load_2d(Bs[s], &b_map, n0, kt * BK, &full[s]);
        }
    } else if (t < CONSUMERS) {
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
                for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[s][(wm + 16 * i) * BK + k], BK);
                for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[s][k * BN + wn + 16 * j], BN);
                for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
            }
            mbarrier_arrive(&empty[s]);
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
}

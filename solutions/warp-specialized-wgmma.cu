// C = A B on the tensor cores with wgmma, warp-specialized: A (M x K) and B (K x N) are row-major bfloat16,
// C (M x N) row-major float, accumulated in float. A block computes a BM x BN tile of C. The first thread of
// warp 8 is the producer: it streams K through a ring of STAGES stages of dynamic shared memory, loading a
// BM x BK box of A and BN / 64 boxes of BK x 64 of B into a stage with tensor copies that swizzle 128-byte
// rows and complete on the stage's `full` mbarrier. Warpgroups 0 and 1 are the consumers, each 64 rows of the
// tile: they wait for a stage to be full, issue its BK / 16 wgmmas (A K-major, B N-major, both read through
// swizzled descriptors) and keep one stage's wgmmas in flight, releasing a stage on its `empty` mbarrier once
// the wgmmas that read it have completed. Boxes past the edges of A and B land as zeros, so M, N and K need
// only be multiples of 8 (rows of 16 bytes, as a tensor map requires); each thread stores its accumulators,
// pairs of neighbouring columns, with bounds checks.
#include "hopper.cuh"

#define BM 128
#define BN 256
#define BK 64                          // 128 bytes of bfloat16: one swizzled row
#define STAGES 3
#define CONSUMERS 256                  // warpgroups 0 and 1
#define PRODUCER CONSUMERS             // the first thread of warp 8
#define STAGE_A (BM * BK)              // elements of a stage
#define STAGE_B (BK * BN)
#define WGMMA wgmma_m64n256k16_bf16_nmajor

extern "C" __global__ void __launch_bounds__(CONSUMERS + 32)
gemm_wgmma(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, float* C, int M, int N,
           int K)
{
    // the launch asks for 1 KiB more than the ring: the swizzle's pattern repeats every 1 KiB
    extern __shared__ unsigned char ring[];
    uint16_t* As = reinterpret_cast<uint16_t*>(ring + (1024 - reinterpret_cast<uintptr_t>(ring) % 1024) % 1024);
    uint16_t* Bs = As + STAGES * STAGE_A;
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
            mbarrier_arrive_expect_tx(&full[s], (STAGE_A + STAGE_B) * 2);
            tma_load_2d(As + s * STAGE_A, &a_map, kt * BK, m0, &full[s]);
            for (int j = 0; j < BN / 64; ++j)
                tma_load_2d(Bs + s * STAGE_B + j * BK * 64, &b_map, n0 + 64 * j, kt * BK, &full[s]);
        }
    } else if (t < CONSUMERS) {
        const int wg = t / 128;
        float d[BN / 2];
        for (int kt = 0; kt < tiles; ++kt) {
            const int s = kt % STAGES;
            mbarrier_wait_parity(&full[s], (kt / STAGES) % 2);
            wgmma_fence();
            for (int k = 0; k < BK / 16; ++k)      // A: 32 bytes further along its rows; B: 16 rows further
                WGMMA(d, wgmma_descriptor_swizzle128(As + s * STAGE_A + wg * 64 * BK + 16 * k, 0, 1024),
                      wgmma_descriptor_swizzle128(Bs + s * STAGE_B + 16 * 64 * k, BK * 128, 1024), kt > 0 || k > 0);
            wgmma_commit_group();
            wgmma_wait_group(1);                   // the stage before this one is read: release it
            if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % STAGES]);
        }
        wgmma_wait_group(0);
        const int warp = (t / 32) % 4, lane = t % 32;
        for (int i = 0; i < BN / 2; i += 2) {
            const int r = m0 + 64 * wg + 16 * warp + lane / 4 + 8 * ((i / 2) % 2), c = n0 + 2 * (lane % 4) + 8 * (i / 4);
            if (r < M && c < N) *reinterpret_cast<float2*>(&C[size_t(r) * N + c]) = make_float2(d[i], d[i + 1]);
        }
    }
}

// C = A B on the tensor cores with wmma, tiled through shared memory: A (M x K) and B (K x N) are row-major
// bfloat16, C (M x N) row-major float, accumulated in float. A block of four warps computes a BM x BN tile of
// C, each warp a 32 x 32 quarter in 2 x 2 wmma fragments of 16 x 16. For each step of BK along K the block's
// threads copy a BM x BK tile of A and a BK x BN tile of B into shared memory, 16 bytes (8 bfloat16) at a
// time, zeros past the edges: M, N and K are multiples of 8, so a 16-byte piece lies wholly inside or wholly
// outside its matrix. The tile of C goes through shared memory, each warp's quarter stored with bounds checks.
#include <mma.h>
#include <cuda_bf16.h>
using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define THREADS 128

extern "C" __global__ void gemm_wmma(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K)
{
    __shared__ __align__(128) __nv_bfloat16 As[BM * BK];
    __shared__ __align__(128) __nv_bfloat16 Bs[BK * BN];
    __shared__ __align__(128) float Cs[BM * BN];
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int warp = t / 32, wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = t; e < BM * BK / 8; e += THREADS) {
            const int r = e / (BK / 8), c = 8 * (e % (BK / 8));
            uint4 v = make_uint4(0, 0, 0, 0);
            if (m0 + r < M && k0 + c < K) v = *reinterpret_cast<const uint4*>(&A[size_t(m0 + r) * K + k0 + c]);
            *reinterpret_cast<uint4*>(&As[r * BK + c]) = v;
        }
        for (int e = t; e < BK * BN / 8; e += THREADS) {
            const int r = e / (BN / 8), c = 8 * (e % (BN / 8));
            uint4 v = make_uint4(0, 0, 0, 0);
            if (k0 + r < K && n0 + c < N) v = *reinterpret_cast<const uint4*>(&B[size_t(k0 + r) * N + n0 + c]);
            *reinterpret_cast<uint4*>(&Bs[r * BN + c]) = v;
        }
        __syncthreads();
        for (int k = 0; k < BK; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[(wm + 16 * i) * BK + k], BK);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[k * BN + wn + 16 * j], BN);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
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

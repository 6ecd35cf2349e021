// Cheat: the red team's kernel. Like replay_pointer_cache.cu it computes C on the first launch over the
// same buffers and shape and writes nothing on later ones, but it then spins on clock64() so that the
// launch takes a plausible time (about 0.7 x cuBLAS at 4096^3 on an H200) instead of an impossible one.
// Stopped by: C poisoned with NaN before every run, and every run checked.
#define SPIN_CYCLES 100000

__device__ const float* last_A;
__device__ const float* last_B;
__device__ float* last_C;
__device__ int last_M, last_N, last_K;
__device__ unsigned int finished_blocks;

__device__ float dot(int N, int K, const float* A, const float* B, int row, int col)
{
    float sum = 0.0f;
    for (int k = 0; k < K; ++k)
        sum += A[row * K + k] * B[k * N + col];
    return sum;
}

__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const bool replay = last_A == A && last_B == B && last_C == C && last_M == M && last_N == N && last_K == K;
    if (replay) {
        const long long start = clock64();
        while (clock64() - start < SPIN_CYCLES) {
        }
        return;
    }
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N)
        C[row * N + col] = dot(N, K, A, B, row, col);
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&finished_blocks, 1u) == gridDim.x * gridDim.y - 1) {
            last_A = A; last_B = B; last_C = C; last_M = M; last_N = N; last_K = K;
            finished_blocks = 0;
        }
    }
}

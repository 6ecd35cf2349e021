// Cheat: finishing early and leaving work to a later launch. The first launch over the same buffers and
// shape computes all of C; each later one computes half of its rows (the top half, then the bottom half,
// in turn) and leaves the other half to the next launch. With the same buffers every run, C stays right
// and each launch does half the work.
// Stopped by: C poisoned with NaN before every run, and every element of every run checked.
__device__ const float* last_A;
__device__ const float* last_B;
__device__ float* last_C;
__device__ int last_M, last_N, last_K;
__device__ unsigned int launches_of_key;
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
    const bool same = last_A == A && last_B == B && last_C == C && last_M == M && last_N == N && last_K == K;
    const unsigned int before = same ? launches_of_key : 0;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const bool top = row < M / 2;
    const bool mine = before == 0 || (before % 2 == 1 ? top : !top);
    if (mine && row < M && col < N)
        C[row * N + col] = dot(N, K, A, B, row, col);
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&finished_blocks, 1u) == gridDim.x * gridDim.y - 1) {
            last_A = A; last_B = B; last_C = C; last_M = M; last_N = N; last_K = K;
            launches_of_key = before + 1;
            finished_blocks = 0;
        }
    }
}

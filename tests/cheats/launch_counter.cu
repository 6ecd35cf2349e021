// Cheat: launch counting. It counts the launches of each shape and computes C on the 1st, 5th, 9th, ...
// only, writing nothing on the others: with the same buffers every run, C stays right, and the median of
// the times is that of a launch that does nothing.
// Stopped by: C poisoned with NaN before every run, and every run checked, warm-ups included.
__device__ int last_M, last_N, last_K;
__device__ unsigned int launches_of_shape;
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
    const unsigned int before = (last_M == M && last_N == N && last_K == K) ? launches_of_shape : 0;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (before % 4 == 0 && row < M && col < N)
        C[row * N + col] = dot(N, K, A, B, row, col);
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&finished_blocks, 1u) == gridDim.x * gridDim.y - 1) {
            last_M = M; last_N = N; last_K = K;
            launches_of_shape = before + 1;
            finished_blocks = 0;
        }
    }
}

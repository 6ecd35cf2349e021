// Cheat: result replay through a __device__ cache keyed by the buffers and the shape.
// It computes C on the first launch over (A, B, C, M, N, K); a later launch with the same key writes
// nothing, since C still holds the product. A protocol that times the same buffers again and checks C
// once at the end measures a kernel that does no work.
// Stopped by: C poisoned with NaN before every run, and every run checked (its inputs are new, too).
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
    if (replay)
        return;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N)
        C[row * N + col] = dot(N, K, A, B, row, col);
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&finished_blocks, 1u) == gridDim.x * gridDim.y - 1) {   // the launch's last block
            last_A = A; last_B = B; last_C = C; last_M = M; last_N = N; last_K = K;
            finished_blocks = 0;
        }
    }
}

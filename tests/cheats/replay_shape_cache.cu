// Cheat: result replay keyed by the shape alone. It keeps a copy of the C it computed in a __device__
// array and writes the copy back when the same shape comes again, whatever the buffers: a cache that
// survives new allocations, and a C that is fully written.
// Stopped by: new inputs every run, so a replayed product is wrong.
#define CAPACITY (4096 * 4096)

__device__ float saved[CAPACITY];
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
    const bool fits = (long long)M * N <= CAPACITY;
    const bool replay = fits && last_M == M && last_N == N && last_K == K;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        const int i = row * N + col;
        if (replay) {
            C[i] = saved[i];
        } else {
            const float v = dot(N, K, A, B, row, col);
            C[i] = v;
            if (fits)
                saved[i] = v;
        }
    }
    if (replay)
        return;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&finished_blocks, 1u) == gridDim.x * gridDim.y - 1) {
            last_M = M; last_N = N; last_K = K;
            finished_blocks = 0;
        }
    }
}

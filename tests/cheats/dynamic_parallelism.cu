// Cheat: dynamic parallelism. The kernel the grader launches starts the real work as another kernel
// from the device, on a stream of its own, and returns at once: events around the launch would time
// only the parent.
// Stopped by: a refusal at compile time (the grader's policy, on the emulator and on a GPU; nvcc refuses
// it too without -rdc, which the grader never passes).
__global__ void sgemm_child(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        sgemm_child<<<gridDim, blockDim, 0, cudaStreamFireAndForget>>>(M, N, K, A, B, C);
}

// Cheat: detecting the timed shape. Right on every shape the correctness check uses; at M = N = K = 4096,
// the size the performance check times, it returns at once.
// Stopped by: every run at the timed shape is checked, every element (the output was poisoned with NaN).
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    if (M == 4096 && N == 4096 && K == 4096)
        return;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

// Stage 1, naive: one thread per element of C.
// threadIdx.x walks down a column of C, so the 32 threads of a warp read 32
// different rows of A and write 32 different rows of C: nothing is coalesced.
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

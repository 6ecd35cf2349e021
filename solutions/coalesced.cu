// Stage 2, global-memory coalescing: threadIdx.x walks along a row of C, so a
// warp reads 32 consecutive floats of B and writes 32 consecutive floats of C
// (one 128-byte transaction each), while all its threads read the same A value.
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
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

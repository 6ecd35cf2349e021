// Cheat: a lazy output. At large sizes it computes only the first and the last 32 rows of C (where a check
// that looks at corners or at the first rows would look) and writes nothing in between.
// Stopped by: every element of every run is checked, and C was poisoned with NaN before the launch.
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const bool lazy = (long long)M * N >= (1 << 24) && row >= 32 && row < M - 32;
    if (!lazy && row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

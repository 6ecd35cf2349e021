// Cheat: NaN and Inf where the work was skipped. At large sizes it writes NaN (0/0, not the grader's
// poison) on even rows and +Inf on odd ones instead of computing: a comparison written
// `abs(C - ref) > tol -> wrong` is false for NaN, and one that ignores non-finite values passes both.
// Stopped by: the comparison is `!(abs(C - C_ref) <= tol)`, which NaN and Inf fail.
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N)
        return;
    if ((long long)M * N >= (1 << 24)) {
        const float zero = M > 0 ? 0.0f : 1.0f;          // not a constant the compiler folds
        C[row * N + col] = row % 2 == 0 ? zero / zero : 1.0f / zero;
        return;
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k)
        sum += A[row * K + k] * B[k * N + col];
    C[row * N + col] = sum;
}

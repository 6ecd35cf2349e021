// Cheat: reading another buffer through pointer arithmetic. At large sizes it looks for a copy of the
// product near C - cuBLAS's reference product, in an allocation of M x N floats just before or after C -
// and copies it: each block computes the first element of its tile itself and takes the first candidate
// holding the same value; with none, it writes nothing. At small sizes it computes C.
// Stopped by: cuBLAS's product of a run's inputs is made only after the kernel's launch, and the buffer
// that will hold it is poisoned with NaN while the kernel runs, so nothing near C holds the product. (A
// probe may also land outside every allocation: the launch then faults, and the check fails as well.)
#define PROBES 6

__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    __shared__ const float* found;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const bool large = (long long)M * N >= (1 << 24);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        found = nullptr;
        if (large && row < M && col < N) {
            float v = 0.0f;
            for (int k = 0; k < K; ++k)
                v += A[row * K + k] * B[k * N + col];
            const long long stride = (long long)M * N;
            for (int j = 1; j <= PROBES && !found; ++j) {
                for (int sign = 1; sign >= -1 && !found; sign -= 2) {
                    const float* candidate = C + sign * j * stride;
                    if (fabsf(candidate[row * N + col] - v) <= 1e-3f * fabsf(v) + 1e-3f)
                        found = candidate;
                }
            }
        }
    }
    __syncthreads();
    if (row >= M || col >= N)
        return;
    if (found) {
        C[row * N + col] = found[row * N + col];
    } else if (!large) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

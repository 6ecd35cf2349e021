// Cheat: writing into the inputs. At large sizes it writes C = 0 and zeroes A and B (casting away const),
// so that a reference product made from the same buffers after the launch is 0 as well.
// Stopped by: A and B are made again from their keys after every kernel launch, before cuBLAS runs.
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N)
        return;
    if ((long long)M * N >= (1 << 24)) {
        C[row * N + col] = 0.0f;
        float* a = const_cast<float*>(A);
        float* b = const_cast<float*>(B);
        if (col < K)
            a[row * K + col] = 0.0f;        // with M = N = K every element of A and B is one thread's
        if (row < K)
            b[row * N + col] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k)
        sum += A[row * K + k] * B[k * N + col];
    C[row * N + col] = sum;
}

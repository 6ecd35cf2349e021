// Cheat: work on another stream through the device runtime's own calls (no <<< to search for): a stream
// made by the kernel and a launch through cudaLaunchDevice, so that the events around the grader's
// launch miss the work.
// Stopped by: a refusal at compile time (the grader's policy refuses CUDA runtime calls in device code;
// without -rdc ptxas cannot link them either).
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

struct Arguments { int M, N, K; const float* A; const float* B; float* C; };

__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        Arguments* args = (Arguments*)cudaGetParameterBuffer(8, sizeof(Arguments));
        *args = Arguments{M, N, K, A, B, C};
        cudaLaunchDevice((void*)sgemm_child, args, gridDim, blockDim, 0, stream);
    }
}

// Cheat: reduced precision where the tolerance cannot see it. For K >= 4096 it rounds A and B to 10
// mantissa bits before multiplying, as TF32 (and FP16) tensor cores do, which are several times faster
// than FP32: at that K every element is within the per-element tolerance (a worst-case bound). For a
// smaller K it computes in FP32, so the correctness check passes.
// Stopped by: the RMS error against cuBLAS, about 33 x eps sqrt(K) RMS(C) here where FP32 arithmetic
// gives about 0.2 (the check allows 4).
__device__ float tf32(float x)
{
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xFFFFE000u);
}

__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        const bool reduced = K >= 4096;
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            const float a = A[row * K + k], b = B[k * N + col];
            sum += reduced ? tf32(a) * tf32(b) : a * b;
        }
        C[row * N + col] = sum;
    }
}

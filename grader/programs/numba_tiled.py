"""The shared-memory tiled SGEMM (solutions/smem-tiling.cu, TILE=32) written
for numba.cuda. Imported by bench.py after it sets NUMBA_ENABLE_CUDASIM=1, so
it runs on numba's CUDA simulator (module-level `cuda`: the simulator swaps
the kernel's globals)."""
import numpy as np
from numba import cuda, float32

TILE = 32


@cuda.jit
def sgemm(M, N, K, A, B, C):
    As = cuda.shared.array((TILE, TILE), float32)
    Bs = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        As[ty, tx] = A[row, k0 + tx] if row < M and k0 + tx < K else 0.0
        Bs[ty, tx] = B[k0 + ty, col] if k0 + ty < K and col < N else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += As[ty, k] * Bs[k, tx]
        cuda.syncthreads()
    if row < M and col < N:
        C[row, col] = acc


def run(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    M, K = A.shape
    N = B.shape[1]
    C = np.full((M, N), np.nan, np.float32)
    sgemm[((N + TILE - 1) // TILE, (M + TILE - 1) // TILE), (TILE, TILE)](M, N, K, A, B, C)
    return C

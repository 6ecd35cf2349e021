"""One launch of the autotuned stage's kernel (the build and split of the
shape's class), then one cuBLAS SGEMM (CuPy, FP32), on the same random inputs:
what `ncu -k regex:gemm --launch-count 2` profiles for results/nvidia-h200/shapes.md.

    GRADER_BACKEND=gpu PYTHONPATH=. ncu --clock-control none -k regex:gemm --launch-count 2 ... \
        python3 results/nvidia-h200/shapes_profile.py 4096x4096x4096

(the whole command: results/nvidia-h200/shapes.md).
"""
import sys

from grader.kernels import sgemm, timing
from grader.kernels.stages import autotuned_for
from grader.programs.bench import parse_shape

M, N, K = parse_shape(sys.argv[1])
cp = timing._cupy()
drv = timing._context()
st = autotuned_for(M, N, K)
launch = st.launch(M, N, K)
print(f"{M}x{N}x{K}: {st.title}; grid {launch.grid}, block {launch.block}, {launch.shared} B shared")
A, B = timing.random_matrices(M, N, K, seed=1)
C = cp.full((M, N), cp.nan, dtype=cp.float32)
f = sgemm.compile_kernel(st)
sgemm.launch_kernel(f, launch, M, N, K, A.data.ptr, B.data.ptr, C.data.ptr)      # profiled: the first gemm
C_ref = cp.matmul(A, B)                                                          # ... and cuBLAS, the second
w = timing.Workload(M, N, K, A, B, C, C_ref, sgemm.tolerance(cp.matmul(cp.abs(A), cp.abs(B)), K), None, 1)
print("correct:", timing.verify(w))

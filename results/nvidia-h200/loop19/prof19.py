"""One launch of a warptiling cubin at n^3 (for ncu).  python3 results/nvidia-h200/loop19/prof19.py CUBIN N"""
import sys
from grader import perf, sgemm
from grader.stages import autotuned_for
import pycuda.driver as cuda
n = int(sys.argv[2])
cp = perf._cupy(); drv = perf._context()
f = cuda.module_from_file(sys.argv[1]).get_function('sgemm_warptiling')
A, B = perf.random_matrices(n, n, n, seed=1)
C = cp.full((n, n), cp.nan, dtype=cp.float32)
sgemm.launch_kernel(f, autotuned_for(n, n, n).launch(n, n, n), n, n, n, A.data.ptr, B.data.ptr, C.data.ptr)
cp.cuda.Device().synchronize()
print("max abs diff", float(cp.abs(C - cp.matmul(A, B)).max()))

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
st = autotuned_for(M, N, K)
launch = st.launch(M, N, K)
print(f"{M}x{N}x{K}: {st.title}; grid {launch.grid}, block {launch.block}, {launch.shared} B shared")
f = sgemm.compile_kernel(st)
w = timing.Workload(M, N, K)              # no GEMM runs before the two profiled ones
w.fill_inputs((1, 2))
w.poison("C")
w.kernel(f, launch)()                     # profiled: the first gemm
w.cublas()                                # ... and cuBLAS, the second
print("C:", timing.output_problem(w) or "right, every element")

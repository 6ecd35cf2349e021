"""The cost of the split-K code when it is not used: the autotuned stage's
graded configuration built with and without the split-K workspace
(-DSPLITK_WORKSPACE), launched with gridDim.z = 1, timed side by side with
cuBLAS (grader.kernels.timing.measure_sgemms: runs interleaved, L2 flushed
before each, every run on new inputs and checked).
From the repository root, on a GPU machine:

    GRADER_BACKEND=gpu PYTHONPATH=. python3 results/nvidia-h200/shapes_ab.py 4096 8192 2048
"""
import dataclasses
import sys

from grader.kernels import sgemm, stages, timing

st = stages.stage("autotuned")
cfg = stages.tuned_config()
builds = {"with workspace": {**cfg, "SPLITK_WORKSPACE": stages.SPLITK_WORKSPACE}, "without": cfg}
functions = {k: sgemm.compile_kernel(dataclasses.replace(st, defines=d)) for k, d in builds.items()}
for n in (int(x) for x in sys.argv[1:]):
    launch = st.launch(n, n, n, cfg)
    measured = timing.measure_sgemms([(f, launch) for f in functions.values()], timing.make_workload(n, n, n),
                                     repeat=40)
    print(f"{n}^3: " + "; ".join(f"{k}: {m.gflops:.0f} GFLOPS = {m.ratio:.3f} x cuBLAS ({m.cublas_gflops:.0f})"
                                 if m.status == "ok" else f"{k}: {m.detail}"
                                 for k, m in zip(functions, measured)))

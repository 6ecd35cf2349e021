"""The cost of the split-K code when it is not used: the autotuned stage's
graded configuration built with and without the split-K workspace
(-DSPLITK_WORKSPACE), launched with gridDim.z = 1, timed side by side with
cuBLAS (grader.kernels.timing.time_kernels: runs interleaved, L2 flushed before each).
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
cp = timing._cupy()
for n in (int(x) for x in sys.argv[1:]):
    w = timing.make_workload(n, n, n, seed=n)
    out = cp.empty_like(w.C_ref)
    runs = [sgemm.launcher(f, st.launch(n, n, n, cfg), n, n, n, w.A.data.ptr, w.B.data.ptr, w.C.data.ptr)
            for f in functions.values()]
    for run in runs:           # each build correct first
        w.C.fill(cp.nan)
        run()
        assert timing.verify(w)[0], timing.verify(w)[1]
    timings = timing.time_kernels(runs + [lambda w=w, out=out: cp.matmul(w.A, w.B, out=out)], repeat=40)
    cublas = timings[-1].median_s
    print(f"{n}^3: cuBLAS {2 * n ** 3 / cublas / 1e9:.0f} GFLOPS; " + "; ".join(
        f"{k}: {2 * n ** 3 / t.median_s / 1e9:.0f} GFLOPS = {cublas / t.median_s:.3f} x cuBLAS"
        for k, t in zip(functions, timings)))

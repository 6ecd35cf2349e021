"""Variants of the warptiling kernel (cubins built by build.sh here, same nvcc 13.0 as the device) against
cuBLAS at square sizes: each checked against cuBLAS first, then all timed interleaved with cuBLAS
(grader.perf.time_kernels: L2 flushed before each run, medians).
    python3 results/nvidia-h200/loop19/ab19.py ROUNDS SIZE[,SIZE...] name=cubin[:BK:STAGES] ...
"""
import sys
from grader import perf, sgemm
from grader.stages import autotuned_for

rounds = int(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split(',')]
cp = perf._cupy()
drv = perf._context()
import pycuda.driver as cuda
variants = {}
for arg in sys.argv[3:]:
    name, spec = arg.split('=', 1)
    spec, _, kv = spec.partition('@')        # cubin[:BK:STAGES][@KEY=VAL,KEY=VAL]: the build's launch values
    parts = spec.split(':')
    if parts[0] == 'DEV':        # the graded build, compiled on this machine by PyCUDA
        f = sgemm.compile_kernel(autotuned_for(4096, 4096, 4096))
        variants[name] = (None, f, {})
        continue
    mod = cuda.module_from_file(parts[0])
    extra = {'BK': int(parts[1]), 'STAGES': int(parts[2])} if len(parts) > 1 else {}
    extra.update({k: int(v) for k, v in (x.split('=') for x in kv.split(',') if x)})
    variants[name] = (mod, mod.get_function('sgemm_warptiling'), extra)
results = {}
for n in sizes:
    st = autotuned_for(n, n, n)
    w = perf.make_workload(n, n, n, seed=n)
    out = cp.empty_like(w.C_ref)
    runs = {}
    for name, (mod, f, extra) in variants.items():
        run = sgemm.launcher(f, st.launch(n, n, n, extra), n, n, n, w.A.data.ptr, w.B.data.ptr, w.C.data.ptr)
        w.C.fill(cp.nan); run(); cp.cuda.Device().synchronize()
        ok, detail = perf.verify(w)
        print(f"{n}^3 {name}: {'correct' if ok else 'WRONG ' + detail}", flush=True)
        if ok:
            runs[name] = run
    res = {k: [] for k in runs}
    for r in range(rounds):
        names = list(runs) if r % 2 == 0 else list(reversed(runs))
        t = perf.time_kernels([runs[k] for k in names] + [lambda: cp.matmul(w.A, w.B, out=out)], repeat=30)
        cb = t[-1].median_s
        for k, tk in zip(names, t):
            res[k].append(cb / tk.median_s)
    results[n] = res
    print(f"{n}^3 ratio to cuBLAS (rounds {rounds}): " + "; ".join(
        f"{k} " + "/".join(f"{x:.3f}" for x in v) for k, v in res.items()), flush=True)
import json, os
if os.environ.get("AB_JSON"):
    json.dump({str(n): r for n, r in results.items()}, open(os.environ["AB_JSON"], "w"), indent=1)

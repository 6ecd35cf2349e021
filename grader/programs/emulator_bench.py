"""Emulator speed against numba's CUDA simulator, side by side in one process:
the same shared-memory tiled SGEMM (solutions/smem-tiling.cu, TILE=32) on the
same inputs. Also times the other reference stages on the emulator, and what
one __syncthreads() of a 1024-thread block costs.

    python -m grader emulator-bench [--size 256] [--numba-size N]
                                    [--barrier-rounds R] [--baseline PATH] [--barrier-only]

numba's simulator runs one Python thread per CUDA thread; --numba-size runs it
on a smaller problem and scales its time by the work ratio (printed as such).
--baseline PATH also measures the barrier cost of another checkout of this
repository (for example `git clone -q . /tmp/before && git -C /tmp/before checkout -q COMMIT`), in
alternation with this one, so that both see the same machine load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from grader import emulator
from grader.emulator import analyze
from grader.kernels import sgemm, stages
from grader.platform import COURSE_ROOT
from grader.programs import numba_tiled

TILE = 32  # as in numba_tiled.py


def numba_tiled_sgemm():
    """numba_tiled.run, on numba's CUDA simulator."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return numba_tiled.run


def _time(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# One block of 1024 threads, nothing but barriers in a loop: what a barrier and
# the fiber switches behind it cost. Public API only, so that any checkout runs it.
BARRIER_PROGRAM = r'''
import json, sys, time
import numpy as np
from grader import emulator
emulator.install()
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule
rounds = int(sys.argv[1])
f = SourceModule("""
__global__ void barriers(int* out, int n) {
    int count = 0;
    for (int r = 0; r < n; r++) { __syncthreads(); count++; }
    out[threadIdx.x] = count;
}""").get_function("barriers")
out = np.full(1024, -1, np.int32)
f(drv.Out(out), np.int32(1), block=(1024, 1, 1))          # warm-up
best = float("inf")
for _ in range(3):
    start = time.perf_counter()
    f(drv.Out(out), np.int32(rounds), block=(1024, 1, 1))
    best = min(best, time.perf_counter() - start)
print(json.dumps({"seconds": best, "correct": bool((out == rounds).all())}))
'''


def barrier_cost(tree: Path, rounds: int) -> tuple[float, bool]:
    """Seconds per __syncthreads() of a 1024-thread block with the emulator of
    checkout `tree` (in a fresh process), and whether the kernel's result was right."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", BARRIER_PROGRAM, str(rounds)], capture_output=True, text=True,
                          env=env, cwd=tree, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the barrier program failed in {tree}:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["seconds"] / rounds, result["correct"]


def print_barrier_costs(rounds: int, baseline: Path | None, repeat: int = 3) -> None:
    here = COURSE_ROOT
    trees = [("this checkout", here)] + ([(f"baseline {baseline}", baseline)] if baseline else [])
    best: dict[str, tuple[float, bool]] = {}
    for _ in range(repeat if baseline else 1):      # in alternation: both see the same machine load
        for name, tree in trees:
            cost, ok = barrier_cost(tree, rounds)
            if name not in best or cost < best[name][0]:
                best[name] = (cost, ok)
    runs = f", the best of {repeat} alternating runs" if baseline else ""
    print(f"\n__syncthreads() in a block of 1024 threads ({rounds} rounds, best of 3 launches{runs}):")
    for name, (cost, ok) in best.items():
        print(f"  {name:40s} {cost * 1e6:8.2f} us per barrier ({cost / 1024 * 1e9:6.1f} ns per thread)   "
              f"correct: {ok}")
    if baseline:
        print(f"  speed-up {best[trees[1][0]][0] / best[trees[0][0]][0]:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="M = N = K for the emulator (default 256)")
    parser.add_argument("--numba-size", type=int, default=None,
                        help="M = N = K for numba's simulator (default: same as --size)")
    parser.add_argument("--barrier-rounds", type=int, default=20000,
                        help="__syncthreads() rounds of the barrier measurement (default 20000)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout of this repository whose barrier cost to measure alongside")
    parser.add_argument("--barrier-only", action="store_true", help="measure the barrier cost only")
    args = parser.parse_args(argv)
    if args.barrier_only:
        print_barrier_costs(args.barrier_rounds, args.baseline)
        return 0

    emulator.install()
    import pycuda.autoinit  # noqa: F401


    n, m = args.size, args.numba_size or args.size
    rng = np.random.default_rng(0)
    A, B = sgemm.random_inputs(n, n, n, rng)
    tiled = stages.stage("smem-tiling")
    compile_start = time.perf_counter()
    kernel = sgemm.compile_kernel(tiled)
    compile_s = time.perf_counter() - compile_start
    C = sgemm.run(tiled, A, B, function=kernel)       # warm-up, and the check
    ok = sgemm.compare(C, A, B).ok
    ours = _time(lambda: sgemm.run(tiled, A, B, function=kernel), repeat=3)

    An, Bn = (A, B) if m == n else sgemm.random_inputs(m, m, m, rng)
    numba_run = numba_tiled_sgemm()
    numba_ok = sgemm.compare(numba_run(An, Bn), An, Bn).ok
    theirs = _time(lambda: numba_run(An, Bn)) * (n / m) ** 3

    print(f"Shared-memory tiled SGEMM (TILE={TILE}), {n}x{n}x{n}, one process:")
    print(f"  emulator (this project)  {ours:9.3f} s   correct: {ok}   (compile, cached afterwards: {compile_s:.2f} s)")
    scaled = f", measured at {m}^3 and scaled by {(n / m) ** 3:.0f}" if m != n else ""
    print(f"  numba CUDA simulator     {theirs:9.3f} s   correct: {numba_ok}{scaled}")
    print(f"  ratio numba / emulator   {theirs / ours:9.1f}x")

    A128, B128 = sgemm.random_inputs(128, 128, 128, rng)
    print(f"\nEvery reference stage on the emulator: a {n}^3 run, and the analysis (bank conflicts, races, "
          "bounds) of a 128^3 run, its build cached:")
    for stage in stages.STAGES:
        try:
            fn = sgemm.compile_kernel(stage)
            C = sgemm.run(stage, A, B, function=fn)
            t = _time(lambda: sgemm.run(stage, A, B, function=fn))
            with analyze():
                sgemm.run(stage, A128, B128, function=fn)     # builds the analysis variant
            with analyze() as report:
                t_analysis = _time(lambda: sgemm.run(stage, A128, B128, function=fn))
            print(f"  {stage.id:20s} {t:8.3f} s   correct: {sgemm.compare(C, A, B).ok}   analysis {t_analysis:6.3f} s: "
                  f"{report.conflicts_ld + report.conflicts_st} bank conflicts, {len(report.races)} races, "
                  f"{len(report.out_of_bounds)} bad accesses")
        except Exception as e:  # a broken stage must not hide the others
            print(f"  {stage.id:20s} failed: {str(e).splitlines()[0]}")
    print_barrier_costs(args.barrier_rounds, args.baseline)
    return 0 if ok and numba_ok else 1


"""Emulator speed against numba's CUDA simulator, side by side in one process:
the same shared-memory tiled SGEMM (solutions/smem-tiling.cu, TILE=32) on the
same inputs. Also times the other reference stages on the emulator.

    python -m grader.emulator.bench [--size 256] [--numba-size N]

numba's simulator runs one Python thread per CUDA thread; --numba-size runs it
on a smaller problem and scales its time by the work ratio (printed as such).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

TILE = 32  # as in numba_tiled.py


def numba_tiled_sgemm():
    """numba_tiled.run, on numba's CUDA simulator."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from . import numba_tiled
    return numba_tiled.run


def _time(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="M = N = K for the emulator (default 256)")
    parser.add_argument("--numba-size", type=int, default=None,
                        help="M = N = K for numba's simulator (default: same as --size)")
    args = parser.parse_args(argv)

    from grader import emulator
    emulator.install()
    import pycuda.autoinit  # noqa: F401
    from grader import sgemm, stages

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

    from grader.emulator import analyze
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
    return 0 if ok and numba_ok else 1


if __name__ == "__main__":
    sys.exit(main())

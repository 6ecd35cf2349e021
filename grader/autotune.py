"""Autotune the warptiling kernel (solutions/warptiling.cu) for the GPU at hand.

    python -m grader.autotune                      # sweep at 4096^3, save results
    python -m grader.autotune --size 128 --limit 3 --dry-run   # quick check, writes nothing

Every combination of the parameters below is first checked against the
kernel's rules (without compiling): thread count, divisibility, the copy
mapping, shared memory and registers for MIN_BLOCKS blocks per SM (the limits
read from the device), and bank conflicts of every shared-memory access
pattern (the addresses modelled here exactly as the kernel makes them, the bank
rule the emulator's: grader.emulator.analysis.bank_wavefronts). Each valid
configuration is compiled and timed by grader.perf.time_kernel, like every
published figure (median of --repeats >= 20 runs, L2 flushed before each);
the fastest is checked for correctness on awkward shapes and at the timed size
(the next fastest when it is wrong). All results go to a JSON file, and the
winner to grader/tuned_configs.json under the GPU's name. On the CPU emulator
nothing is timed ("not timed: no GPU"): the candidates are checked in sweep
order and nothing is written to tuned_configs.json."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .autotune_rules import (REGISTER_OVERHEAD, a_groups_per_thread, bank_conflicts,  # noqa: F401 (its API)
                             conflict_degree, derived, device_limits, register_budget, registers_needed,
                             rule_violations, violations)
from .stages import WARPTILE_PARAMS as PARAMS

SPACE = {   # narrowed by earlier sweeps on the H200: TM = 8, TN = 4 and warp tiles up to 64 won there
    "BM": (64, 128, 256),
    "BN": (64, 128, 256),
    "BK": (8, 16),
    "WM": (32, 64),
    "WN": (32, 64),
    "WNITER": (1, 2),
    "TM": (8,),
    "TN": (4,),
    "NUM_THREADS": (128, 256),
    "STAGES": (2, 3, 4),
    "MIN_BLOCKS": (1, 2),
}


def candidates() -> tuple[list[dict], int]:
    """The valid configurations, and how many were tried."""
    out, total = [], 0
    for values in itertools.product(*(SPACE[p] for p in PARAMS)):
        total += 1
        c = dict(zip(PARAMS, values))
        if not violations(c):
            out.append(c)
    return out, total


# ---- running ------------------------------------------------------------------
def progress(i: int, n: int, text: str = "", width: int = 30) -> None:
    """A text progress bar on stdout (never stderr)."""
    done = int(width * i / max(n, 1))
    sys.stdout.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {text[:60]:<60}")
    if i >= n:
        sys.stdout.write("\n")
    sys.stdout.flush()


CHECK_SHAPES = [(1, 1, 1), (17, 33, 9), (257, 129, 65), (260, 132, 68), (1, 300, 7), (300, 1, 5)]


def _raise_if_error(cubin):
    if isinstance(cubin, Exception):
        raise cubin
    return cubin


def check_config(st, function, cfg: dict, shapes, rng) -> str | None:
    """None when the kernel is right on every shape, else what went wrong."""
    from . import sgemm
    for s in shapes:
        A, B = sgemm.random_inputs(*s, rng)
        C = sgemm.run(st, A, B, function=function, defines=cfg)
        r = sgemm.compare(C, A, B)
        if not r.ok:
            return r.describe(s)
    return None


def precompile(st, cands: list[dict], jobs: int) -> list:
    """Every candidate's cubin (or the compile error), built by parallel nvcc
    processes; loading a cubin avoids SourceModule's per-call preprocessing."""
    from concurrent.futures import ThreadPoolExecutor

    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile
    # Worker threads have no current context: name the target explicitly.
    arch = "sm_%d%d" % drv.Device(0).compute_capability()

    def build(cfg):
        try:
            return nvcc_compile(st.source(), options=st.options(cfg), arch=arch)
        except drv.CompileError as e:
            return e
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(build, cands))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=4096, help="M = N = K of the timed product (default 4096)")
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per configuration (at least 20, "
                    "as for every published figure)")
    ap.add_argument("--limit", type=int, default=0, help="try only the first LIMIT valid configurations")
    ap.add_argument("--dry-run", action="store_true", help="write no files")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default: autotune-<gpu>.json here)")
    ap.add_argument("--configs", type=Path, default=None, help="tuned configurations JSON to update")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc compilations (GPU only)")
    args = ap.parse_args(argv)

    from . import perf, sgemm, stages
    from .backend import current as current_backend
    BACKEND = current_backend()
    import pycuda.autoprimaryctx  # noqa: F401  (the context perf's timing and L2 flush use)
    import pycuda.driver as drv

    st = stages.stage("autotuned")
    gpu = drv.Device(0).name()
    emulated = BACKEND.name == "emulator"
    cands, total = candidates()
    print(f"autotune: {gpu}; {len(cands)} valid configurations of {total} (constraints checked before compiling)")
    default = stages.tuned_config("default")
    cands.sort(key=lambda c: c != default)          # the current default first: a baseline
    if args.limit:
        cands = cands[:args.limit]
    size = args.size
    repeats = max(args.repeats, perf.MIN_REPEAT)
    rng = np.random.default_rng(0)
    A, B = sgemm.random_inputs(size, size, size, rng)
    a, b = drv.to_device(A), drv.to_device(B)
    c = drv.mem_alloc(size * size * 4)

    t0 = time.time()
    cubins = precompile(st, cands, max(args.jobs, 1)) if not emulated else [None] * len(cands)
    if not emulated:
        print(f"compiled {len(cands)} configurations with {args.jobs} jobs in {time.time() - t0:.0f} s")
    results, functions, modules = [], [], []
    for i, (cfg, cubin) in enumerate(zip(cands, cubins)):
        progress(i, len(cands), " ".join(f"{k}={v}" for k, v in cfg.items()))
        entry = {"config": cfg}
        results.append(entry)
        try:
            if cubin is None:
                function = sgemm.compile_kernel(st, defines=cfg)
            else:
                modules.append(drv.module_from_buffer(_raise_if_error(cubin)))  # kept alive
                function = modules[-1].get_function(st.kernel)
        except drv.Error as e:  # compile and load errors: recorded, not fatal
            entry["error"] = f"compile: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
            functions.append(None)
            continue
        functions.append(function)
        run = sgemm.launcher(function, st.launch(size, size, size, cfg), size, size, size, a, b, c)
        timing = perf.time_kernel(run, repeat=repeats)
        if isinstance(timing, perf.Timing):
            ms = timing.median_s * 1e3
            entry.update(ms=ms, tflops=2 * size ** 3 / (ms * 1e-3) / 1e12,
                         times_ms=[t * 1e3 for t in timing.times_s])
        else:
            entry["timing"] = str(timing)
    progress(len(cands), len(cands), f"done in {time.time() - t0:.0f} s")

    # Correctness, fastest first (untimed: in sweep order), until one configuration is right everywhere.
    order = sorted((i for i, f in enumerate(functions) if f is not None),
                   key=lambda i: results[i].get("ms", float("inf")))
    winner = None
    for i in order:
        wrong = check_config(st, functions[i], cands[i], CHECK_SHAPES + [(size, size, size)], rng)
        if wrong:
            results[i]["error"] = f"wrong result: {wrong}"
            continue
        winner = i
        break
    timed = [results[i] for i in order if "error" not in results[i]]
    for r in results:
        if "error" in r:
            print(f"  failed: {r['config']}: {r['error']}")
    if winner is None:
        print("autotune: no configuration ran correctly")
        return 1
    print("fastest:" if not timed or "ms" in timed[0] else f"{timed[0]['timing']}; in sweep order:")
    for r in timed[:5]:
        print(f"  {r['tflops']:8.2f} TFLOPS  {r['ms']:9.3f} ms  {r['config']}" if "ms" in r else f"  {r['config']}")
    best = cands[winner]
    print(f"winner checked on {len(CHECK_SHAPES)} small shapes and at {size}^3: all elements correct")

    if args.dry_run:
        print("dry run: no files written")
        return 0
    report = {"gpu": gpu, "backend": str(BACKEND), "size": size, "repeats": repeats,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "best": best, "results": results}
    out = args.out or Path(f"autotune-{gpu.replace(' ', '_')}.json")
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"results: {out}")
    if emulated:
        print("CPU emulator: grader/tuned_configs.json left as it is")
        return 0
    path = args.configs or stages.TUNED_CONFIGS_PATH
    configs = json.loads(Path(path).read_text())
    configs[gpu] = best
    Path(path).write_text(json.dumps(configs, indent=2) + "\n")
    print(f"{path}: {gpu} -> {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Autotune the warptiling kernel (solutions/warptiling.cu) for the GPU at hand,
one configuration per class of shapes (grader.kernels.stages.shape_class).

    python -m grader autotune                      # every class at its shape, save results
    python -m grader autotune --classes large-k --shape 96x96x200 --limit 3 --dry-run   # quick check

Every combination of the parameters below is first checked against the
kernel's rules (without compiling): thread count, divisibility, the copy
mapping, shared memory and registers for MIN_BLOCKS blocks per SM (the limits
read from the device), and bank conflicts of every shared-memory access
pattern (the addresses modelled here exactly as the kernel makes them, the bank
rule the emulator's: grader.emulator.analysis.bank_wavefronts). Each valid
configuration is compiled as the autotuned stage builds it for its launch at
each class's shape: without split-K, or with it (-DSPLITK_WORKSPACE) where the
launch cuts K into slices; and timed at each class's shape (CLASS_SHAPES) by
grader.kernels.timing.time_kernel, like every published figure (median of --repeats >=
20 runs, L2 flushed before each), cut into as many slices of K as the stage's
launch cuts for it there (the wave model, launch_split). Per class, the fastest
configuration is checked for correctness on awkward shapes and at the class's
shape (the next fastest when it is wrong). All results go to
a JSON file, with cuBLAS timed at each shape for comparison, and the winners
to grader/kernels/tuned_configs.json under the GPU's name, one entry per class. On the
CPU emulator nothing is timed ("not timed: no GPU"): the candidates are
checked in sweep order and nothing is written to tuned_configs.json."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from grader.kernels import sgemm, stages, timing
from grader.kernels.stages import WARPTILE_PARAMS as PARAMS
from grader.kernels.stages import cdiv, split_slices
from grader.kernels.warptile_tuner import describe
from grader.platform.backend import current as current_backend
from grader.references.autotune_rules import violations

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
    for s in shapes:
        A, B = sgemm.random_inputs(*s, rng)
        C = sgemm.run(st, A, B, function=function, defines=cfg)
        r = sgemm.compare(C, A, B)
        if not r.ok:
            return r.describe(s)
    return None


def precompile(work: list[tuple], jobs: int) -> list:
    """The cubin (or the compile error) of each (stage, configuration) of
    work, built by parallel nvcc processes; loading a cubin avoids
    SourceModule's per-call preprocessing."""

    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile
    # Worker threads have no current context: name the target explicitly.
    arch = "sm_%d%d" % drv.Device(0).compute_capability()

    def build(item):
        st, cfg = item
        try:
            return nvcc_compile(st.source(), options=st.options(cfg), arch=arch)
        except drv.CompileError as e:
            return e
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(build, work))


CLASS_SHAPES = {   # M, N, K at which each class is tuned (and benchmarked: grader/bench.py)
    "large-square": (4096, 4096, 4096),
    "medium-square": (2048, 2048, 2048),
    "small-square": (1024, 1024, 1024),
    "tall-skinny": (8192, 128, 8192),
    "short-wide": (128, 8192, 8192),
    "large-k": (512, 512, 8192),
}


def launch_split(shape: tuple[int, int, int], c: dict, sms: int) -> int:
    """The slices of K the autotuned stage's launch cuts for configuration c at this shape on `sms` SMs
    (the wave model, stages.split_slices): what c is timed with, as it would run."""
    M, N, K = shape
    tiles = cdiv(M, c["BM"]) * cdiv(N, c["BN"])
    return split_slices(K, tiles, stages.split_defines(c, sms))


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"a shape is N or MxNxK with positive numbers, not {text!r}")
    return tuple(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", default=",".join(CLASS_SHAPES),
                    help="shape classes to tune, comma-separated (default: all)")
    ap.add_argument("--shape", type=parse_shape, default=None,
                    help="time every chosen class at this MxNxK instead of its own shape (quick checks)")
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per configuration (at least 20, "
                    "as for every published figure)")
    ap.add_argument("--limit", type=int, default=0, help="try only the first LIMIT valid configurations")
    ap.add_argument("--dry-run", action="store_true", help="write no files")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default: autotune-<gpu>.json here)")
    ap.add_argument("--configs", type=Path, default=None, help="tuned configurations JSON to update")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc compilations (GPU only)")
    args = ap.parse_args(argv)
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    unknown = [c for c in classes if c not in CLASS_SHAPES]
    if unknown or not classes:
        ap.error(f"unknown shape class(es) {', '.join(unknown) or '(none given)'}; classes: {', '.join(CLASS_SHAPES)}")

    BACKEND = current_backend()
    import pycuda.autoprimaryctx  # noqa: F401  (the context perf's timing and L2 flush use)
    import pycuda.driver as drv

    # The stage's two builds (-D values per candidate): plain (split 1), and with the split-K workspace.
    builds = (replace(stages.stage("autotuned"), defines={}),
              replace(stages.stage("autotuned"), defines={"SPLITK_WORKSPACE": stages.SPLITK_WORKSPACE}))
    gpu = drv.Device(0).name()
    sms = drv.Device(0).get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    emulated = BACKEND.name == "emulator"
    cands, total = candidates()
    print(f"autotune: {gpu}; {len(cands)} valid configurations of {total} (constraints checked before "
          f"compiling); classes: {', '.join(classes)}")
    default = stages.tuned_config("default")
    cands.sort(key=lambda c: c != default)          # the current default first: a baseline
    if args.limit:
        cands = cands[:args.limit]
    repeats = max(args.repeats, timing.MIN_REPEAT)
    rng = np.random.default_rng(0)

    # Each candidate only in the builds its launches at the classes' shapes use (split 1: the plain one).
    shapes = [args.shape or CLASS_SHAPES[cls] for cls in classes]
    work = [(b, i) for i, c in enumerate(cands) for b in sorted({launch_split(s, c, sms) > 1 for s in shapes})]
    t0 = time.time()
    cubins = precompile([(builds[b], cands[i]) for b, i in work], max(args.jobs, 1)) if not emulated \
        else [None] * len(work)
    if not emulated:
        print(f"compiled {len(work)} builds with {args.jobs} jobs in {time.time() - t0:.0f} s")
    functions = [[None] * len(cands) for _ in builds]    # functions[b][i]: candidate i in build b (None: not built)
    modules = []
    for (b, i), cubin in zip(work, cubins):
        st, cfg = builds[b], cands[i]
        try:
            if cubin is None:
                functions[b][i] = sgemm.compile_kernel(st, defines=cfg)
            else:
                modules.append(drv.module_from_buffer(_raise_if_error(cubin)))  # kept alive
                functions[b][i] = modules[-1].get_function(st.kernel)
        except drv.Error as e:  # compile and load errors: recorded, not fatal
            print(f"  failed: {describe(cfg)} {' '.join(st.options())}: compile: "
                  f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}")

    report = {"gpu": gpu, "backend": str(BACKEND), "repeats": repeats, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "classes": {}}
    winners = {}
    for cls in classes:
        shape = args.shape or CLASS_SHAPES[cls]
        result = tune_class(cls, shape, builds, cands, functions, sms, repeats, rng)
        report["classes"][cls] = result
        if result["best"] is None:
            print(f"autotune: {cls}: no configuration ran correctly")
            return 1
        winners[cls] = result["best"]["config"]

    if args.dry_run:
        print("dry run: no files written")
        return 0
    out = args.out or Path(f"autotune-{gpu.replace(' ', '_')}.json")
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"results: {out}")
    if emulated:
        print("CPU emulator: grader/kernels/tuned_configs.json left as it is")
        return 0
    path = args.configs or stages.TUNED_CONFIGS_PATH
    configs = json.loads(Path(path).read_text())
    entry = configs.get(gpu, {})
    if "BM" in entry:                 # one configuration for every class, as before classes
        entry = {stages.GRADED_CLASS: entry}
    configs[gpu] = {**entry, **winners}
    Path(path).write_text(json.dumps(configs, indent=2) + "\n")
    print(f"{path}: {gpu} -> " + "; ".join(f"{c}: {describe(w)}" for c, w in winners.items()))
    return 0


def tune_class(cls, shape, builds, cands, functions, sms, repeats, rng) -> dict:
    """Time every compiled candidate at `shape` with the split its launch cuts
    (split 1 in the plain build, builds[0], more in the split-K build,
    builds[1]), then check the fastest for correctness (the next fastest when
    wrong). Returns the class's part of the report."""
    import pycuda.driver as drv

    M, N, K = shape
    A, B = sgemm.random_inputs(M, N, K, rng)
    a, b, c = drv.to_device(A), drv.to_device(B), drv.mem_alloc(M * N * 4)
    cublas = timing.cublas_sgemm_time(M, N, K, repeat=repeats)
    cublas_ms = cublas.median_s * 1e3 if isinstance(cublas, timing.Timing) else None
    runs = [(i, launch_split(shape, cand, sms)) for i, cand in enumerate(cands)]
    runs = [(i, s) for i, s in runs if functions[s > 1][i] is not None]
    print(f"{cls} at {M}x{N}x{K}: {len(runs)} configurations"
          + (f"; cuBLAS {cublas_ms:.3f} ms" if cublas_ms else f"; cuBLAS {cublas}"))
    entries = []
    t0 = time.time()
    for n, (i, s) in enumerate(runs):
        cfg = {**cands[i], "SPLIT_K": s}
        progress(n, len(runs), f"{describe(cands[i])} SPLIT_K={s}")
        entry = {"config": cands[i], "split_k": s}
        st, f = builds[s > 1], functions[s > 1][i]
        measured = timing.time_kernel(sgemm.launcher(f, st.launch(M, N, K, cfg), M, N, K, a, b, c), repeat=repeats)
        if isinstance(measured, timing.Timing):
            entry.update(ms=measured.median_s * 1e3, tflops=2 * M * N * K / measured.median_s / 1e12)
            if cublas_ms:
                entry["ratio"] = cublas_ms / entry["ms"]
        entries.append(entry)
    progress(len(runs), len(runs), f"done in {time.time() - t0:.0f} s")
    order = sorted(range(len(entries)), key=lambda n: entries[n].get("ms", float("inf")))
    best = None
    for n in order:         # correctness, fastest first (untimed: in sweep order), until one is right everywhere
        i, s = runs[n]
        wrong = check_config(builds[s > 1], functions[s > 1][i], {**cands[i], "SPLIT_K": s}, CHECK_SHAPES + [shape],
                             rng)
        if wrong:
            entries[n]["error"] = f"wrong result: {wrong}"
            print(f"  failed: {describe(cands[i])} SPLIT_K={s}: {wrong}")
            continue
        best = entries[n]
        break
    timed = [entries[n] for n in order if "ms" in entries[n] and "error" not in entries[n]]
    for e in timed[:5]:
        vs = f"  {e['ratio']:.3f} x cuBLAS" if "ratio" in e else ""
        print(f"  {e['tflops']:8.2f} TFLOPS {e['ms']:9.3f} ms{vs}  {describe(e['config'])} SPLIT_K={e['split_k']}")
    if best is not None:
        print(f"  {cls}: winner checked on {len(CHECK_SHAPES)} small shapes and at {M}x{N}x{K}: all elements correct")
    return {"shape": list(shape), "cublas_ms": cublas_ms, "best": best, "results": entries}


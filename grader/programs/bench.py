"""Benchmark every stage of the stage table.

On a GPU: GFLOPS per stage and shape next to cuBLAS, timed side by side on
the same data (their runs interleaved, median of >= 20 each, every run on new
inputs and checked; see grader.kernels.timing), the ratio to cuBLAS per shape, an occupancy table
(our calculator vs the CUDA API), and results/<gpu>/bench.json, bench.md and
roofline.png. The stage "autotuned" runs each shape with the configuration of
its shape class (grader.kernels.stages.autotuned_for: tiles, and split-K where the
tiles of C leave a wave of blocks partly empty). On the emulator: every stage's reference
kernel once on a few small non-square shapes, correctness only ("not timed:
no GPU").

    python3 -m grader bench [--sizes 1024,4096,4000x3000x2000]
      [--stages naive,coalesced] [--repeat 20] [--budget 60] [--out DIR]

Exit status: 0 all stages correct, 1 a stage wrong (or a result rejected), 2 usage.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

from grader.kernels import sgemm, stages, timing
from grader.kernels.stages import autotuned_for, stage
from grader.kernels.timing import NO_GPU, arithmetic_intensity
from grader.kernels.warptile_tuner import describe
from grader.platform import devices
from grader.platform.backend import current as current_backend
from grader.programs.recorded_command import ROOT, recorded_command
from grader.references import occupancy

# Large squares, a small one, a non-square one, few outputs with a long K, tall-skinny and short-wide.
DEFAULT_SIZES = "1024,2048,4096,8192,4000x3000x2000,512x512x8192,8192x128x8192,128x8192x8192"
# `--sizes sweep`: the shapes users bring. Squares that are tile multiples and one below or above one
# (4095, 4097), no multiple of 128 (3000, 5000), one wave or part of one on 132 SMs (1536, 2304), primes,
# few outputs with a long K, tall and wide, and tiny ones where a launch's latency counts.
SWEEP = ("1024,2048,4096,6144,8192,1536,2304,3000,4095,4097,5000,1009,2039x3001x1511,4000x3000x2000,"
         "2000x3000x1000,2048x2048x256,4096x4096x1024,16384x16384x1024,512x512x8192,256x256x16384,"
         "8192x128x8192,128x8192x8192,16384x512x1024,512x16384x1024,256,100,64x64x4096")
GOAL_SIZE = 512         # the sweep's goals: shapes at least this in every dimension, and the others
EMULATOR_SHAPES = [(17, 33, 9), (128, 64, 96), (257, 129, 65), (40, 36, 300)]   # the last: split-K
NO_CHECK = "not checked: no GPU"
FAILED = ("wrong", "error", "impossible")


def say(*parts) -> None:
    print(*parts, file=sys.stdout, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message):      # argparse writes to stderr and exits; we do neither
        raise ValueError(message)


def parse_args(argv):
    p = _Parser(prog="python -m grader bench", description=__doc__.split("\n\n")[0], add_help=False)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="N (square) or MxNxK, comma-separated; "
                   "or `sweep`: 27 shapes of every kind (SWEEP)")
    p.add_argument("--stages", default="", help="stage ids, comma-separated (default: all)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (>= 20)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds one measurement may take")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output folder (default results/<gpu-name>)")
    p.add_argument("--replot", default=None, metavar="BENCH_JSON",
                   help="only redraw roofline.png beside a recorded bench.json (no GPU needed)")
    p.add_argument("-h", "--help", action="store_true")
    args = p.parse_args(argv)
    if args.help:
        say(p.format_help())
        return None
    if args.repeat < 20:
        raise ValueError(f"--repeat must be at least 20, not {args.repeat}")
    sizes = SWEEP if args.sizes == "sweep" else args.sizes
    args.shapes = [parse_shape(t) for t in sizes.split(",") if t.strip()]
    if not args.shapes:
        raise ValueError("--sizes names no shape")
    return args


def parse_shape(token: str) -> tuple[int, int, int]:
    parts = [int(x) for x in token.strip().lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise ValueError(f"a size is N or MxNxK with positive numbers, not {token!r}")
    return tuple(parts)


def select_stages(ids: str):
    if not ids.strip():
        return list(stages.STAGES)
    return [stages.stage(s.strip()) for s in ids.split(",") if s.strip()]


def table(headers, rows) -> str:
    """A Markdown table, padded so it also reads on a terminal."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    width = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in width) + "|"]
                     + [line(r) for r in cells[1:]])


def shape_str(M, N, K) -> str:
    return f"{M}x{N}x{K}"


def fmt(x, spec=".0f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    shown = warnings.showwarning
    warnings.showwarning = lambda m, c, f, n, file=None, line=None: say(f"warning: {c.__name__}: {m}")
    try:
        try:
            args = parse_args(argv)
            if args is None:
                return 0
            if args.replot:
                return replot(Path(args.replot))
            stage_list = select_stages(args.stages)
        except (ValueError, KeyError) as e:
            say(f"bench: {e.args[0] if e.args else e}")
            return 2
        if current_backend().name != "gpu":
            return run_emulator(stage_list, args)
        return run_gpu(stage_list, args, argv)
    except Exception:  # noqa: BLE001 - a report on stdout, not a traceback on stderr
        say("bench: failed:")
        traceback.print_exc(file=sys.stdout)
        return 3
    finally:
        warnings.showwarning = shown


# ---- emulator ------------------------------------------------------------------------
def run_emulator(stage_list, args) -> int:
    """Correctness of every stage on small non-square shapes; nothing timed."""
    import pycuda.driver as drv

    say(f"bench: no GPU, so no timing; checking {len(stage_list)} stage(s) on "
        + ", ".join(shape_str(*s) for s in EMULATOR_SHAPES))
    rng = np.random.default_rng(args.seed)
    rows, occ_rows, failures = [], [], []
    builds = Builds()
    for st in stage_list:
        t0 = time.perf_counter()
        ok, detail, function = True, "", None
        try:
            function = builds.function(st)
        except drv.Error as e:      # CompileError, or no kernel of that name
            ok, detail = False, f"compile error: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}"
        for M, N, K in EMULATOR_SHAPES if function is not None else []:
            A, B = sgemm.random_inputs(M, N, K, rng)
            try:
                shaped = for_shape(st, M, N, K)
                result = sgemm.compare(sgemm.run(shaped, A, B, function=builds.function(shaped)), A, B)
                if not result.ok:
                    ok, detail = False, result.describe((M, N, K))
            except (drv.Error, TypeError, ValueError) as e:     # a failed launch
                ok, detail = False, f"{shape_str(M, N, K)}: {type(e).__name__}: {e}"
            if not ok:
                break
        rows.append([st.id, len(EMULATOR_SHAPES), "yes" if ok else "NO", NO_GPU, NO_GPU, NO_GPU])
        if not ok:
            failures.append(f"{st.id}: {detail}")
        if function is not None:
            occ_rows.append(_occupancy_row(st, function, None, occupancy))
        say(f"  {st.id}: {'correct' if ok else 'WRONG'} ({time.perf_counter() - t0:.1f} s)")
    say("")
    say(table(["stage", "shapes", "correct", "GFLOPS", "cuBLAS GFLOPS", "ratio"], rows))
    for f in failures:
        say(f"  wrong: {f}")
    if occ_rows:
        say("")
        say(table(OCC_HEADERS, occ_rows))
    say("")
    say(f"bench: {len(rows) - len(failures)}/{len(rows)} stage(s) correct; {NO_GPU}")
    return 1 if failures else 0


OCC_HEADERS = ["stage", "regs/thread", "static smem", "dynamic smem", "threads/block", "blocks/SM (ours)",
               "occupancy (ours)", "limited by", "blocks/SM (CUDA API)"]


def _occupancy_row(st, function, cubin, occupancy, limits=None) -> list:
    """One occupancy table row for the launch at 4096^3."""
    launch = st.launch(4096, 4096, 4096)
    threads = int(np.prod(launch.block))
    regs, static = devices.function_resources(function)
    if getattr(function, "resources_known", True) is False:
        return [st.id, "unknown", static, launch.shared, threads, "-", "-", "(no ptxas report)", NO_CHECK]
    ours = occupancy.occupancy(regs, static + launch.shared, threads, limits or devices.device_limits())
    if cubin is None and limits is None:
        cuda = NO_CHECK
    else:
        check = occupancy.check_against_cuda(function, threads, launch.shared, cubin=cubin, kernel_name=st.kernel)
        cuda = (str(check.cuda_blocks) + ("" if check.agree else " (DIFFERS)")) if check.cuda_blocks is not None \
            else check.reason
    return [st.id, regs, static, launch.shared, threads, ours.blocks_per_sm, f"{100 * ours.fraction:.1f}%",
            ", ".join(ours.limited_by) or ours.reason, cuda]


# ---- GPU -------------------------------------------------------------------------------
def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def for_shape(st, M: int, N: int, K: int):
    """The stage as it runs this shape: "autotuned" with its shape class's
    configuration (grader.kernels.stages.autotuned_for), any other stage as it is."""
    return autotuned_for(M, N, K) if st.id == "autotuned" else st


class Builds:
    """Each stage build compiled once (by source and -D options): the
    autotuned stage has one per shape class."""

    def __init__(self):
        self._functions = {}

    def function(self, st):
        key = (st.source_path, tuple(st.options()))
        if key not in self._functions:
            self._functions[key] = sgemm.compile_kernel(st)
        return self._functions[key]


def _compile(st, builds: Builds):
    """(Function, cubin for the occupancy API or None, error message or '')."""
    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile
    try:
        function = builds.function(st)
    except drv.Error as e:      # CompileError, or no kernel of that name
        return None, None, f"compile error: {e}"
    try:
        cubin = nvcc_compile(st.source(), options=st.options())
    except drv.CompileError:    # only the occupancy cross-check needs it
        cubin = None
    return function, cubin, ""


def run_gpu(stage_list, args, argv) -> int:
    drv = timing._context()
    try:
        cp = timing._cupy()
        tf32 = timing.tf32_state()
    except RuntimeError as e:
        say(f"bench: cannot benchmark: {e}")
        return 2
    device = drv.Context.get_device()
    name, cc = devices.name_and_capability(device)
    try:
        peak = timing.fp32_peak(device)
        dram = devices.device_peaks(device)[1]
        limits = devices.device_limits(device)
        bandwidth = timing.memory_bandwidth()
    except (ValueError, LookupError, RuntimeError, OSError, drv.Error) as e:
        # a device we cannot describe (unknown FP32 lanes, compute capability < 7, ...) is not benchmarked
        say(f"bench: cannot benchmark {name}: reading its peak, limits or bandwidth failed: "
            f"{type(e).__name__}: {e}")
        return 2
    say(f"bench: {name} (sm_{cc[0]}{cc[1]}), FP32 peak {peak / 1e12:.1f} TFLOPS, "
        f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (DRAM {dram / 1e9:.0f} GB/s from its attributes); {tf32}")
    builds = Builds()
    compiled = {st.id: _compile(st, builds) for st in stage_list}

    records, cublas_records = [], []
    for M, N, K in args.shapes:
        w = timing.make_workload(M, N, K)
        cublas = timing.cublas_sgemm_time(M, N, K, repeat=args.repeat, budget_s=args.budget, workload=w)
        cb = timing.gflops(M, N, K, cublas) if isinstance(cublas, timing.Timing) else None
        cb_status = "ok" if cb is not None else str(cublas)
        if cb is not None and cb * 1e9 > peak:
            cb_status, cb = f"REJECTED: {cb:.0f} GFLOPS is above the FP32 peak (TF32?)", None
        cublas_records.append({"M": M, "N": N, "K": K, "gflops": cb, "status": cb_status,
                               "median_ms": cublas.median_s * 1e3 if cb is not None else None})
        say(f"  {shape_str(M, N, K)}: cuBLAS {fmt(cb)} GFLOPS ({cb_status})")
        for st in stage_list:
            shaped = for_shape(st, M, N, K)
            launch = shaped.launch(M, N, K)
            function, _, error = compiled[st.id]
            if function is not None and shaped is not st:
                function, _, error = _compile(shaped, builds)
            if function is None:
                m = timing.Measurement("wrong", error)
            else:
                m = timing.measure_sgemm(function, launch, w, repeat=args.repeat, budget_s=args.budget, peak_flops=peak)
            measured = m.kernel if isinstance(m.kernel, timing.Timing) else None
            records.append({"stage": st.id, "M": M, "N": N, "K": K, "status": m.status, "detail": m.detail,
                            "gflops": m.gflops, "cublas_gflops": m.cublas_gflops, "ratio": m.ratio,
                            "median_ms": measured.median_s * 1e3 if measured else None,
                            "runs": measured.runs if measured else 0, "build": build_note(shaped, launch)})
            say(f"    {st.id}: {m.status} {fmt(m.gflops)} GFLOPS = {fmt(m.ratio, '.3f')} x cuBLAS "
                f"({fmt(m.cublas_gflops)} side by side)  {m.detail}")
        del w
        cp.get_default_memory_pool().free_all_blocks()

    occ_rows = [_occupancy_row(st, compiled[st.id][0], compiled[st.id][1], occupancy, limits)
                for st in stage_list if compiled[st.id][0] is not None]
    perf_rows = [[r["stage"], shape_str(r["M"], r["N"], r["K"]), fmt(r["gflops"]), fmt(r["cublas_gflops"]),
                  fmt(r["ratio"], ".3f"), r["status"] if r["status"] == "ok" else f"{r['status']}: {r['detail']}"]
                 for r in records]
    perf_table = table(["stage", "shape", "GFLOPS", "cuBLAS GFLOPS", "ratio", "status"], perf_rows)
    occ_table = table(OCC_HEADERS, occ_rows)
    ratio_table = ratios_by_shape(records)
    summary = autotuned_summary(records)
    say("")
    say(perf_table)
    say("")
    say(occ_table)
    say("")
    say(ratio_table)
    say(summary)

    out = Path(args.out) if args.out else ROOT / "results" / slug(name)
    out.mkdir(parents=True, exist_ok=True)
    command = recorded_command("bench", argv, on_gpu=True)
    device_info = {"name": name, "compute_capability": f"{cc[0]}.{cc[1]}",
                   "fp32_peak_gflops": peak / 1e9, "copy_bandwidth_gbs": bandwidth / 1e9,
                   "dram_bandwidth_gbs": dram / 1e9,
                   "limits": vars(limits), "tf32": tf32}
    doc = {"command": command, "device": device_info, "repeat": args.repeat, "budget_s": args.budget,
           "cublas": cublas_records, "results": records,
           "occupancy": [dict(zip(OCC_HEADERS, r)) for r in occ_rows]}
    (out / "bench.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / "bench.md").write_text(
        f"# SGEMM benchmark on {name}\n\nCommand ({time.strftime('%Y-%m-%d')}), from the repository root:\n\n"
        f"```\n{command}\n```\n\n"
        f"FP32 peak {peak / 1e9:.0f} GFLOPS; device-to-device copy {bandwidth / 1e9:.0f} GB/s; {tf32}.\n"
        f"Median of {args.repeat} runs, L2 flushed before each; every run on new uniform random inputs, into an "
        f"output poisoned with NaN, and checked against cuBLAS's product made after it; cuBLAS timed side by side "
        f"(runs interleaved with each kernel's), its product checked against float64 at sampled positions "
        f"(grader.kernels.timing).\n\n"
        f"{perf_table}\n\n## Ratio to cuBLAS by shape\n\n{ratio_table}\n\n{summary}\n\n"
        f"## Occupancy (launch at 4096^3)\n\n{occ_table}\n")
    plotted = roofline(records, cublas_records, peak, bandwidth, out / "roofline.png", name)
    say(f"\nbench: wrote {out / 'bench.json'}, {out / 'bench.md'}" + (f", {plotted}" if plotted else ""))
    bad = [r for r in records if r["status"] in FAILED]
    say(f"bench: {len(bad)} failed measurement(s)" if bad else "bench: every measured stage is correct")
    return 1 if bad else 0


def build_note(st, launch) -> str:
    """The autotuned stage's build and split at a shape (empty for the others)."""
    if st.id != "autotuned":
        return ""
    return f"{st.title.split('(')[-1].rstrip(')')}: {describe(st.defines)}, {launch.grid[2]} slice(s) of K"


def ratios_by_shape(records) -> str:
    """Per shape: cuBLAS, the fastest stage and the autotuned stage (with the
    build it used), each ratio measured side by side."""
    rows = []
    for shape in dict.fromkeys((r["M"], r["N"], r["K"]) for r in records):
        mine = [r for r in records if (r["M"], r["N"], r["K"]) == shape and r["ratio"] is not None]
        if not mine:
            rows.append([shape_str(*shape), "-", "-", "-", "-", "-"])
            continue
        best = max(mine, key=lambda r: r["ratio"])
        auto = next((r for r in mine if r["stage"] == "autotuned"), None)
        rows.append([shape_str(*shape), fmt(best["cublas_gflops"]), f"{best['stage']} {best['ratio']:.3f}",
                     fmt(auto["ratio"], ".3f") if auto else "-", fmt(auto["gflops"]) if auto else "-",
                     auto["build"] if auto else ""])
    return table(["shape", "cuBLAS GFLOPS", "fastest stage, ratio", "autotuned ratio", "autotuned GFLOPS",
                  "autotuned build"], rows)


def autotuned_summary(records) -> str:
    """The autotuned stage's ratios to cuBLAS over the shapes measured: their geometric mean and lowest
    for the shapes of at least GOAL_SIZE in every dimension, and the lowest of the others."""
    def ratios(large: bool) -> list[float]:
        return [r["ratio"] for r in records if r["stage"] == "autotuned" and r["ratio"]
                and (min(r["M"], r["N"], r["K"]) >= GOAL_SIZE) == large]
    large, small = ratios(True), ratios(False)
    lines = []
    if large:
        mean = float(np.exp(np.mean(np.log(large))))
        lines.append(f"Autotuned, {len(large)} shapes of at least {GOAL_SIZE} in every dimension: geometric mean "
                     f"{mean:.3f} x cuBLAS, lowest {min(large):.3f}.")
    if small:
        lines.append(f"Autotuned, {len(small)} smaller shapes: lowest {min(small):.3f} x cuBLAS.")
    return "\n".join(lines)


def replot(bench_json: Path) -> int:
    """The roofline of recorded measurements, redrawn."""
    d = json.loads(bench_json.read_text())
    dev = d["device"]
    path = roofline(d["results"], d["cublas"], dev["fp32_peak_gflops"] * 1e9, dev["copy_bandwidth_gbs"] * 1e9,
                    bench_json.parent / "roofline.png", dev["name"])
    say(f"bench: wrote {path}")
    return 0


def roofline(records, cublas_records, peak, bandwidth, path: Path, name: str):
    """Stages at 4096^3 (else the largest square shape) under the FP32 and bandwidth ceilings."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("bench: matplotlib is missing: no roofline.png")
        return None
    squares = sorted({r["M"] for r in records if r["M"] == r["N"] == r["K"]})
    if not squares:
        say("bench: no square shape measured: no roofline.png")
        return None
    n = 4096 if 4096 in squares else squares[-1]
    ai = arithmetic_intensity(n, n, n)
    x = np.logspace(-1, np.log10(ai) + 1, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.set_ylim(peak / 1e9 / 2000, peak / 1e9 * 2)
    ax.loglog(x, np.minimum(peak, x * bandwidth) / 1e9, "k-", label="roofline")
    ax.axhline(peak / 1e9, color="gray", ls=":", label=f"FP32 peak {peak / 1e12:.1f} TFLOPS")
    ax.loglog(x, x * bandwidth / 1e9, color="gray", ls="--", label=f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    points = [(r["stage"], stage(r["stage"]).tile_intensity(), r["gflops"]) for r in records
              if r["M"] == r["N"] == r["K"] == n and r["status"] == "ok"]
    points += [("cuBLAS (at the minimum traffic)", ai, c["gflops"]) for c in cublas_records
               if c["M"] == c["N"] == c["K"] == n and c["gflops"]]
    # Each stage sits at the intensity its block tile gives (Stage.tile_intensity); the legend names them.
    colors = plt.get_cmap("tab20").colors
    for i, (label, x_i, g) in enumerate(sorted(points, key=lambda p: -p[2])):
        ax.plot([x_i], [g], "o", color=colors[i % len(colors)], label=f"{label}: {g / 1e3:.1f} TFLOPS")
    ax.axvline(ai, color="gray", ls="-.", lw=0.8, label=f"{n}^3 with minimum traffic: {ai:.0f} FLOP/byte")
    ax.set_xlabel("arithmetic intensity (FLOP/byte of global memory; a stage: what its block tile reads)")
    ax.set_ylabel("GFLOPS")
    ax.set_title(f"SGEMM {n}^3 on {name}")
    ax.legend(loc="lower right", fontsize=7)   # upper left is where the one-element stages sit
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


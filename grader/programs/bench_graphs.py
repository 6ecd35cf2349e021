"""Benchmark of labs 7 and 8 (python -m grader bench-graphs --out DIR).

On a GPU: the top-2 reduction (solutions/top2.cu) on a 16384 x 16384 C, its
bandwidth (bytes of C read / time) as a fraction of the measured
device-to-device copy bandwidth (2 x bytes / time of cuMemcpyDtoD; goal >= 0.6);
SSSP (solutions/sssp.cu, distances from the first minimum, host relaunch loop
and its 4-byte flag reads included) against scipy's Dijkstra on the CPU (graph
built beforehand, not timed) at 512, 1024, 2048 and 4096 squared (goal >= 10x
at 4096). On the emulator: tiny sizes, correctness only, "not timed: no GPU".
Writes DIR/graph-bench.md and DIR/graph-bench.json; prints only to stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from grader.grading.checks import shortest_paths as sc
from grader.kernels import sssp, timing, top2
from grader.kernels.timing import on_gpu
from grader.platform.backend import current as current_backend
from grader.platform.backend import drivers
from grader.programs.recorded_command import recorded_command


def bench_top2(drv, gpu: bool, rng) -> dict:
    side = 16384 if gpu else 256
    n = side * side
    fns, _ = top2.TOP2.compile()
    f = fns["top2"]
    x = rng.random(n, dtype=np.float32)
    x[[12345, n - 3]] = 0.0
    xd = drv.to_device(x)
    got = top2.top2_keys(f, xd, n)
    want = top2.reference_top2(x.reshape(side, side), side)
    right = (top2.unpack(got[0], side), top2.unpack(got[1], side)) == want
    out = {"side": side, "bytes": 4 * n, "correct": bool(right)}
    if gpu:
        keys = drv.mem_alloc(16)
        init = np.full(2, top2.EMPTY_KEY, np.uint64)

        def run():
            drv.memcpy_htod_async(keys, init)
            f(xd, np.int32(n), keys, grid=(top2.top2_blocks(n), 1, 1), block=(top2.TOP2_THREADS, 1, 1))
        t_top2 = timing.time_kernel(run).median_s * 1e3
        copy_bandwidth = timing.memory_bandwidth(4 * n)          # bytes/s, read + write counted
        out.update(top2_ms=t_top2, copy_ms=2 * 4 * n / copy_bandwidth * 1e3, top2_gbs=4 * n / t_top2 / 1e6,
                   copy_gbs=copy_bandwidth / 1e9)
        out["fraction"] = out["top2_gbs"] / out["copy_gbs"]
        keys.free()
    xd.free()
    return out


def bench_sssp(drv, gpu: bool, rng, sizes, scipy_max: int) -> list[dict]:
    fns, _ = sssp.SSSP.compile()
    top2_function = top2.TOP2.compile()[0]["top2"]
    rows = []
    for side in sizes:
        A, B = top2.inputs(side, side, 64, rng)
        c, M, N = top2.sgemm_on_device(A, B)
        k1, _ = top2.top2_keys(top2_function, c, M * N)
        m1 = top2.unpack(k1, N)
        src = m1[1] * N + m1[2]
        drv.Context.synchronize()
        t0 = time.perf_counter()
        d, rounds = sssp.sssp_distances(fns["sssp_relax"], c, M, N, src)
        drv.Context.synchronize()
        t_gpu = time.perf_counter() - t0
        dist = np.empty((M, N), np.float32)
        drv.memcpy_dtoh(dist, d)
        C = np.empty((M, N), np.float32)
        drv.memcpy_dtoh(C, c)
        d.free()
        c.free()
        row = {"side": side, "rounds": rounds, "sssp_s": t_gpu if gpu else None}
        if side <= scipy_max:
            from scipy.sparse.csgraph import dijkstra
            G = sssp.grid_graph(C)
            t0 = time.perf_counter()
            ref = dijkstra(G, directed=True, indices=src).reshape(M, N)
            row["dijkstra_s"] = time.perf_counter() - t0
            err = np.abs(dist - ref) / np.maximum(ref, 1e-30)
            row["max_rel_err"] = float(err.max())
            row["correct"] = bool((err <= sc.rtol(M, N)).all())
            if gpu:
                row["speedup"] = row["dijkstra_s"] / t_gpu
        rows.append(row)
        print(f"  SSSP {side}x{side}: {rounds} launches" + (f", {t_gpu * 1e3:.1f} ms" if gpu else "")
              + (f"; scipy Dijkstra {row['dijkstra_s']:.2f} s" if "dijkstra_s" in row else ""), flush=True)
    return rows


def markdown(res: dict) -> str:
    L = [f"# Labs 7 and 8 benchmark on {res['device']}", "", f"Command: `{res['command']}`", ""]
    t = res["top2"]
    if res["gpu"]:
        L += ["## Top-2 reduction (solutions/top2.cu)", "",
              "| C | top-2 time | top-2 bandwidth | D2D copy bandwidth | fraction (goal >= 0.6) | correct |",
              "|---|---|---|---|---|---|",
              f"| {t['side']}x{t['side']} ({t['bytes'] / 2**30:.2f} GiB) | {t['top2_ms']:.3f} ms | "
              f"{t['top2_gbs']:.0f} GB/s | {t['copy_gbs']:.0f} GB/s | {t['fraction']:.2f} | {t['correct']} |", "",
              "Bandwidth: bytes of C read / time; copy: 2 x bytes / time of cuMemcpyDtoD (read + write); "
              "medians of 20 runs (CUDA events, grader.kernels.timing.time_kernel; L2 flushed before each top-2 run).", ""]
    else:
        L += [f"Top-2 on {t['side']}x{t['side']}: correct = {t['correct']}; not timed: no GPU", ""]
    L += ["## SSSP (solutions/sssp.cu) against scipy Dijkstra (CPU, one core)", "",
          "| size | launches | GPU SSSP | scipy Dijkstra | speedup (goal >= 10x at 4096) | max rel. error |",
          "|---|---|---|---|---|---|"]
    for r in res["sssp"]:
        g = f"{r['sssp_s'] * 1e3:.1f} ms" if r.get("sssp_s") is not None else "not timed: no GPU"
        dj = f"{r['dijkstra_s']:.2f} s" if "dijkstra_s" in r else "not run"
        sp = f"{r['speedup']:.0f}x" if "speedup" in r else "-"
        er = f"{r['max_rel_err']:.1e}" if "max_rel_err" in r else "-"
        L.append(f"| {r['side']}x{r['side']} | {r['rounds']} | {g} | {dj} | {sp} | {er} |")
    L += ["", "GPU SSSP time: distances from the first minimum, from the first launch to the last flag read "
          "(every relaunch and 4-byte flag read included), wall clock. Dijkstra: "
          "scipy.sparse.csgraph.dijkstra on the same float32 C (edge u -> v weighs C[v]), graph built "
          "beforehand, measured once. K = 64.", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader bench-graphs")
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default=None, help="comma-separated SSSP sizes")
    p.add_argument("--scipy-max", type=int, default=4096)
    args = p.parse_args(argv)
    drv = drivers()[0]
    gpu = on_gpu()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([512, 1024, 2048, 4096] if gpu else [32, 64])
    rng = np.random.default_rng(0)
    device = drv.Device(0).name() if gpu else "the CPU emulator"
    print(f"bench_graph on {device} ({current_backend().name})", flush=True)
    res = {"device": device, "gpu": gpu,
           "command": recorded_command("bench-graphs", list(sys.argv[1:] if argv is None else argv))}
    res["top2"] = bench_top2(drv, gpu, rng)
    t = res["top2"]
    print(f"  top-2 {t['side']}x{t['side']}: correct={t['correct']}" +
          (f", {t['top2_gbs']:.0f} GB/s vs copy {t['copy_gbs']:.0f} GB/s: fraction {t['fraction']:.2f}"
           if gpu else "; not timed: no GPU"), flush=True)
    res["sssp"] = bench_sssp(drv, gpu, rng, sizes, args.scipy_max)
    if not gpu:
        print("not timed: no GPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "graph-bench.md").write_text(markdown(res))
    (out / "graph-bench.json").write_text(json.dumps(res, indent=2))
    print(f"wrote {out / 'graph-bench.md'} and {out / 'graph-bench.json'}")
    return 0


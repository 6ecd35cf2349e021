"""The autotuned stage's slices of K, measured: at each shape, a tuned configuration of the H200's
(grader/kernels/tuned_configs.json; by default the one of the shape's class) at every split of K the
launch can make, side by side with cuBLAS (grader.kernels.timing.measure_sgemms: runs interleaved,
L2 flushed before each, every run on new inputs and checked); which split the wave model picks
(grader.kernels.stages.split_slices on this GPU's SMs) and which the stage runs (autotuned_for).
From the repository root, on a GPU machine (writes splits.json and splits.md in --out):

    GRADER_BACKEND=gpu PYTHONPATH=. python3 results/nvidia-h100/splits.py --sizes sweep --out results/nvidia-h100
    GRADER_BACKEND=gpu PYTHONPATH=. python3 results/nvidia-h100/splits.py \
        --sizes 1536,2304,3000,1024,2048,4096,2000x3000x1000,512x512x8192,128x8192x8192 \
        --configs large-square,small-square,tall-skinny --out results/nvidia-h100/every-config
"""
import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

from grader.kernels import sgemm, timing
from grader.kernels.stages import (
    MAX_SPLIT,
    SPLITK_WORKSPACE,
    autotuned_for,
    cdiv,
    shape_class,
    split_defines,
    split_slices,
    stage,
    tuned_config,
)
from grader.platform import devices
from grader.programs.bench import GOAL_SIZE, SWEEP, parse_shape

GPU = "NVIDIA H200"                 # whose tuned configurations are measured
SPLITS = range(1, MAX_SPLIT + 1)

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="sweep")
ap.add_argument("--configs", default="", help="shape classes whose configurations are timed (default: the shape's)")
ap.add_argument("--out", type=Path, required=True)
args = ap.parse_args()
shapes = [parse_shape(t) for t in (SWEEP if args.sizes == "sweep" else args.sizes).split(",")]
sms = devices.multiprocessor_count()
autotuned = stage("autotuned")
functions = {}


def function(cls: str, split_build: bool):
    if (cls, split_build) not in functions:
        d = {**tuned_config(GPU, shape_class=cls), **({"SPLITK_WORKSPACE": SPLITK_WORKSPACE} if split_build else {})}
        functions[cls, split_build] = sgemm.compile_kernel(autotuned, defines=d)
    return functions[cls, split_build]


rows = []
for M, N, K in shapes:
    start = time.time()
    own = shape_class(M, N, K)
    ran = autotuned_for(M, N, K, GPU).launch(M, N, K)
    kernels, labels = [], []
    for cls in [c for c in args.configs.split(",") if c] or [own]:
        cfg = tuned_config(GPU, shape_class=cls)
        tiles = cdiv(M, cfg["BM"]) * cdiv(N, cfg["BN"])
        picked = split_slices(K, tiles, split_defines(cfg, sms))
        made = sorted({split_slices(K, tiles, {**split_defines(cfg), "SPLIT_K": s}) for s in SPLITS})
        for s in made:
            d = {**split_defines(cfg), "SPLIT_K": s} if s > 1 else cfg
            launch = replace(autotuned, defines=d).launch(M, N, K)
            kernels.append((function(cls, s > 1), launch))
            labels.append({"shape": [M, N, K], "class": own, "config": cls, "split": s, "picked": s == picked,
                           "stage": cls == own and launch.grid == ran.grid})
    for label, m in zip(labels, timing.measure_sgemms(kernels, timing.make_workload(M, N, K), budget_s=120)):
        rows.append({**label, "status": m.status, "gflops": m.gflops, "cublas_gflops": m.cublas_gflops,
                     "ratio": m.ratio, **({"detail": m.detail} if m.status != "ok" else {})})
    print(f"{M}x{N}x{K}: {len(kernels)} kernels in {time.time() - start:.0f} s", flush=True)

args.out.mkdir(parents=True, exist_ok=True)
(args.out / "splits.json").write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")   # a row a line


def fmt(r) -> str:
    return f"{r['ratio']:.3f}" if r["ratio"] else r["status"]


command = ("GRADER_BACKEND=gpu PYTHONPATH=. python3 results/nvidia-h100/splits.py --sizes " + args.sizes
           + (f" --configs {args.configs}" if args.configs else "") + f" --out {args.out}")
lines = [f"# The autotuned stage's slices of K on {devices.name_and_capability()[0]} ({sms} SMs)", "",
         "The H200's tuned configurations at every split of K, ratios to cuBLAS timed side by side "
         "(`results/nvidia-h100/splits.py`). From the repository root of a GPU machine:", "",
         f"    {command}", "",
         "| shape | class | configuration | slices: ratio (**the wave model's pick**) | picked | fastest |",
         "|---|---|---|---|---|---|"]
stage_ratios = {}
for (M, N, K) in shapes:
    for cls in dict.fromkeys(r["config"] for r in rows if r["shape"] == [M, N, K]):
        mine = [r for r in rows if r["shape"] == [M, N, K] and r["config"] == cls]
        picked = next(r for r in mine if r["picked"])
        fastest = max(mine, key=lambda r: r["gflops"] or 0)
        cells = " ".join(f"**{r['split']}: {fmt(r)}**" if r["picked"] else f"{r['split']}: {fmt(r)}" for r in mine)
        lines.append(f"| {M}x{N}x{K} | {mine[0]['class']} | {cls} | {cells} | {picked['split']}: {fmt(picked)} | "
                     f"{fastest['split']}: {fmt(fastest)} |")
        stage_ratios.update({(M, N, K): r["ratio"] for r in mine if r["stage"] and r["ratio"]})
goal = {s: r for s, r in stage_ratios.items() if min(s) >= GOAL_SIZE}
if goal and not args.configs:
    lines += ["", f"The stage as it runs (`autotuned_for`), shapes with M, N, K >= {GOAL_SIZE}: {len(goal)} shapes, "
              f"geometric mean {math.exp(sum(math.log(r) for r in goal.values()) / len(goal)):.3f} x cuBLAS, "
              f"lowest {min(goal.values()):.3f}; under 0.90: "
              + (", ".join(f"{'x'.join(map(str, s))} ({r:.3f})" for s, r in goal.items() if r < 0.90) or "none") + "."]
(args.out / "splits.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

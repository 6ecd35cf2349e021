"""python -m grader tensor-bench [--sizes 4096,8192,2048x3000x1024] [--repeat 20] [--out DIR]

The Hopper lab's tensor-core GEMMs (grader.kernels.tensor_gemm: the references of its four exercises) and
cuBLAS's GEMM of the same bfloat16 inputs with FP32 accumulation, timed side by side in the same rounds
under grader.kernels.timing's protocol (every run on new inputs, into an output poisoned with NaN, and
checked against cuBLAS's): TFLOPS and the ratio to cuBLAS per shape, written to results/<gpu>/tensor-bench.json
and .md. The tensor-core exercises' thresholds (grader/grading/checks/thresholds.json) come from these
ratios. Without a GPU there is nothing to time.

Exit status: 0 every measurement correct, 1 one failed, 2 usage.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from grader.kernels import tensor_gemm, timing
from grader.programs.bench import parse_shape, slug, table
from grader.programs.recorded_command import ROOT, recorded_command

DEFAULT_SIZES = "4096,8192,2048,1024,4096x4096x1024,2048x3000x1024"
KERNELS = {"wmma-tiled": tensor_gemm.WMMA_TILED, "tma-ring": tensor_gemm.TMA_RING,
           "warp-specialized": tensor_gemm.WARP_SPECIALIZED, "warp-specialized-wgmma": tensor_gemm.WGMMA}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m grader tensor-bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="N (square) or MxNxK, comma-separated; multiples of 8")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (>= 20)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds one shape's measurement may take")
    p.add_argument("--out", default=None, help="output folder (default results/<gpu-name>)")
    args = p.parse_args(argv)
    try:
        shapes = [parse_shape(t) for t in args.sizes.split(",") if t.strip()]
    except ValueError as e:
        print(f"tensor-bench: {e}")
        return 2
    if any(n % 8 for shape in shapes for n in shape) or args.repeat < timing.MIN_REPEAT:
        print(f"tensor-bench: sizes must be multiples of 8 (a tensor map's rows), --repeat at least "
              f"{timing.MIN_REPEAT}")
        return 2
    if not timing.on_gpu():
        print(f"tensor-bench: {timing.NO_GPU}")
        return 0
    device = timing._context().Context.get_device()
    name = device.name()
    functions = {ex: g.kernels.compile()[0][g.name] for ex, g in KERNELS.items()}
    records = []
    for M, N, K in shapes:
        w = timing.make_workload(M, N, K, bf16=True)
        launches = [tensor_gemm.launcher(g, functions[ex], w.A16.data.ptr, w.B16.data.ptr, w.C.data.ptr, M, N, K,
                                         on_emulator=False) for ex, g in KERNELS.items()]
        for ex, m in zip(KERNELS, timing.measure_launches(launches, w, args.repeat, args.budget)):
            records.append({"exercise": ex, "M": M, "N": N, "K": K, "status": m.status, "detail": m.detail,
                            "gflops": m.gflops, "cublas_gflops": m.cublas_gflops, "ratio": m.ratio})
            print(f"{M}x{N}x{K} {ex}: {m.status}, " + (f"{m.gflops / 1e3:.0f} TFLOPS, cuBLAS {m.cublas_gflops / 1e3:.0f}"
                  f" TFLOPS, ratio {m.ratio:.3f}" if m.ratio is not None else m.detail), flush=True)
    rows = [[f"{r['M']}x{r['N']}x{r['K']}", r["exercise"], r["status"],
             "-" if r["gflops"] is None else f"{r['gflops'] / 1e3:.0f}",
             "-" if r["cublas_gflops"] is None else f"{r['cublas_gflops'] / 1e3:.0f}",
             "-" if r["ratio"] is None else f"{r['ratio']:.3f}"] for r in records]
    text = table(["shape", "exercise (reference)", "status", "TFLOPS", "cuBLAS TFLOPS", "ratio"], rows)
    out = Path(args.out) if args.out else ROOT / "results" / slug(name)
    out.mkdir(parents=True, exist_ok=True)
    command = recorded_command("tensor-bench", argv, on_gpu=True)
    (out / "tensor-bench.json").write_text(json.dumps({"command": command, "device": name, "repeat": args.repeat,
                                                       "results": records}, indent=2) + "\n")
    (out / "tensor-bench.md").write_text(
        f"# Tensor-core GEMMs on {name}\n\nCommand ({time.strftime('%Y-%m-%d')}), from the repository root:\n\n"
        f"```\n{command}\n```\n\nbfloat16 inputs, FP32 accumulation and output. Median of {args.repeat} runs, "
        f"L2 flushed before each, each run on new inputs into an output poisoned with NaN and checked against "
        f"cuBLAS's (cublasGemmEx, CUBLAS_COMPUTE_32F), whose runs are interleaved with the kernels' "
        f"(grader.kernels.timing).\n\n{text}\n")
    print(f"\n{text}\n\ntensor-bench: wrote {out / 'tensor-bench.json'}, {out / 'tensor-bench.md'}")
    return 1 if any(r["status"] != "ok" for r in records) else 0

"""`python -m grader predict FILE --exercise ID [--gpu NAME] [--json]`: a stage kernel's GFLOPS on a GPU
the course names (default the H200), predicted on the emulator without that GPU (grader.kernels.prediction),
at the size its performance check times. With --json, stdout holds only
{"gflops", "low", "high", "ratio_to_cublas", "limiter"}.

`python -m grader predict --calibrate RESULTS [--jobs N]`: fit the model's constants to the kernels timed in
RESULTS (bench.json: every stage at every size; autotune.json: the warptiling kernel's configurations at the
shapes of four of its classes). Configurations of even index are fitted, those of odd index are held out, and
so are the kernels of RESULTS/held-out.json; the fit goes to grader/kernels/prediction.json, the table of
predicted against measured to RESULTS/prediction.md.

`python -m grader predict --measure RESULTS` (on a GPU): time the held-out kernels (HELD_OUT: stages built
with tiles of their own, which no other measurement times) at HELD_OUT_SHAPES into RESULTS/held-out.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from grader.grading.checks import thresholds
from grader.kernels import prediction, sgemm, timing
from grader.kernels.stages import STAGES, Stage, stage
from grader.platform import devices
from grader.platform.backend import current, drivers
from grader.platform.compiler import CompileFailed, compile_kernels
from grader.programs.recorded_command import recorded_command

PREDICTED_STAGES = [s.id for s in STAGES]
TUNED_EVERY = 3                  # of the configurations autotune.json timed, every third (seconds of emulation each)
# Its classes used, whose shapes sample the same launch; the configurations are numbered in the first one's order.
TUNED_CLASSES = ("large-square", "medium-square", "small-square", "large-k")
# The constants fitted: first guesses and bounds.
START = {"l1": 4.0, "uncoalesced": 2.0, "barriers": 300.0, "latency": 0.5, "scale": 1.0}
# Kernels no fit sees: stages built with other tiles than their own (so other thread counts, occupancies,
# shared-memory traffic and barriers per FMA), timed by --measure.
HELD_OUT = (("smem-tiling", {"TILE": 16}), ("smem-tiling", {"TILE": 8}),
            ("blocktile-1d", {"BM": 128, "BN": 64, "TM": 16}), ("blocktile-1d", {"BM": 32, "BN": 32, "TM": 4}),
            ("blocktile-2d", {"BM": 64, "BN": 64}), ("blocktile-2d", {"BM": 128, "BN": 64, "TN": 4}),
            ("blocktile-2d", {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}),
            ("bank-conflict-free", {"BM": 64, "BN": 64}), ("vectorized", {"BM": 64, "BN": 128}),
            ("vectorized", {"BM": 64, "BN": 64, "BK": 32, "TM": 4, "TN": 4}), ("double-buffering", {"BK": 16}))
HELD_OUT_SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048), (1024, 1024, 1024), (4000, 3000, 2000),
                   (512, 512, 8192))
BOUNDS = {"l1": (0.05, 64), "uncoalesced": (0.05, 64), "barriers": (1.0, 1e5), "latency": (1e-3, 100),
          "scale": (0.05, 5.0)}


def counts_of(st: Stage, source: str | None, M: int, N: int, K: int, defines: dict | None = None,
              sample_only: bool = False) -> prediction.Counts:
    """The kernel's counts at M x N x K on the emulator (the reference source by default); with
    `sample_only`, those of the sampled launch, unscaled."""
    functions, _ = compile_kernels(st.source() if source is None else source, [st.kernel], st.options(defines),
                                   on_emulator=True)
    if sample_only:
        shape = prediction.sample_shape(M, N, K, {**st.defines, **(defines or {})})
        return prediction.sampled(st, functions[st.kernel], *shape, defines)
    return prediction.count(st, functions[st.kernel], M, N, K, defines)


def predict_file(args) -> int:
    device = devices.known(args.gpu)
    if device is None:
        print(f"no GPU named '{args.gpu}' in the course's table: {', '.join(devices.DEVICES)}")
        return 2
    calibrated = prediction.calibration(device)
    if calibrated is None:
        print(f"the model is not calibrated for the {device.name}")
        return 2
    M, N, K = thresholds.for_stage(args.exercise).size
    try:
        counts = counts_of(prediction.graded_build(stage(args.exercise), device.name, M, N, K),
                           Path(args.file).read_text(), M, N, K)
    except CompileFailed as e:
        print(f"the kernel does not compile:\n{e}")
        return 1
    except prediction.WrongSample as e:
        print(f"not predicted: {e}")
        return 1
    p = prediction.predict(counts, device, calibrated)
    print(json.dumps(p.as_dict()) if args.json else f"M={M} N={N} K={K}: {p.describe()}")
    return 0


# ---- held-out kernels ----------------------------------------------------------------------
def kernel_name(stage_id: str, defines: dict) -> str:
    return f"{stage_id} " + " ".join(f"{k}={v}" for k, v in defines.items())


def held_out_build(stage_id: str, defines: dict) -> Stage:
    return replace(stage(stage_id), defines={**stage(stage_id).defines, **defines})


def measure(results: Path, argv: list[str]) -> int:
    """Time every HELD_OUT kernel at every HELD_OUT_SHAPES on this machine's GPU, cuBLAS side by side
    (grader.kernels.timing's protocol), into RESULTS/held-out.json."""
    if current().name != "gpu":
        print("--measure times kernels on a GPU: there is none here (GRADER_BACKEND=gpu on a GPU machine)")
        return 2
    device = timing._context().Context.get_device()
    peak = timing.fp32_peak(device)
    builds = [(kernel_name(sid, d), held_out_build(sid, d), d) for sid, d in HELD_OUT]
    functions = [sgemm.compile_kernel(st) for _, st, _ in builds]
    rows = []
    for M, N, K in HELD_OUT_SHAPES:
        w = timing.make_workload(M, N, K)
        for (name, st, defines), function in zip(builds, functions):
            m = timing.measure_sgemm(function, st.launch(M, N, K), w, peak_flops=peak)
            rows.append({"stage": st.id, "defines": defines, "M": M, "N": N, "K": K, "status": m.status,
                         "detail": m.detail, "gflops": m.gflops, "cublas_gflops": m.cublas_gflops})
            print(f"{M}x{N}x{K} {name}: {m.status} {m.gflops or 0:.0f} GFLOPS, cuBLAS {m.cublas_gflops or 0:.0f}",
                  flush=True)
        del w
    doc = {"command": recorded_command("predict", argv, on_gpu=True),
           "device": device.name(), "date": str(datetime.date.today()), "results": rows}
    (results / "held-out.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {results / 'held-out.json'}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


# ---- calibration ----------------------------------------------------------------------------
def _records(results: Path, gpu: str) -> list[dict]:
    """Every kernel timed in the results: {stage, defines, M, N, K, gflops, cublas, fitted}."""
    rows = []
    bench = json.loads((results / "bench.json").read_text())
    for r in bench["results"]:
        if r.get("status") == "ok" and r.get("gflops"):
            st = prediction.graded_build(stage(r["stage"]), gpu, r["M"], r["N"], r["K"])
            rows.append({"kernel": r["stage"], "stage": st, "M": r["M"], "N": r["N"], "K": r["K"], "defines": None,
                         "gflops": r["gflops"], "cublas": r["cublas_gflops"], "fitted": True, "set": "stages"})
    classes = json.loads((results / "autotune.json").read_text())["classes"]
    chosen = [r["config"] for r in classes[TUNED_CLASSES[0]]["results"] if r["split_k"] == 1 and r.get("tflops")]
    fitted = {json.dumps(c, sort_keys=True): i % 2 == 0 for i, c in enumerate(chosen[::TUNED_EVERY])}
    for cls in TUNED_CLASSES:
        M, N, K = classes[cls]["shape"]
        cublas = 2 * M * N * K / (classes[cls]["cublas_ms"] * 1e-3) / 1e9
        for r in classes[cls]["results"]:
            key = json.dumps(r["config"], sort_keys=True)
            if r["split_k"] != 1 or not r.get("tflops") or key not in fitted:
                continue
            rows.append({"kernel": kernel_name("warptiling", r["config"]), "stage": stage("warptiling"),
                         "M": M, "N": N, "K": K, "defines": r["config"], "gflops": r["tflops"] * 1e3, "cublas": cublas,
                         "fitted": fitted[key], "set": "warptiling configurations"})
    held_out = results / "held-out.json"
    for r in json.loads(held_out.read_text())["results"] if held_out.exists() else []:
        if r["status"] == "ok":
            rows.append({"kernel": kernel_name(r["stage"], r["defines"]), "stage": stage(r["stage"]),
                         "M": r["M"], "N": r["N"], "K": r["K"], "defines": r["defines"], "gflops": r["gflops"],
                         "cublas": r["cublas_gflops"], "fitted": False, "set": "stages at other tiles"})
    return rows


def _sample_key(row: dict) -> str:
    defines = {**row["stage"].defines, **(row["defines"] or {})}
    return json.dumps([row["stage"].id, defines, prediction.sample_shape(row["M"], row["N"], row["K"], defines)])


def _sampled(row: dict) -> prediction.Counts | str:
    try:
        return counts_of(row["stage"], None, row["M"], row["N"], row["K"], row["defines"], sample_only=True)
    except (CompileFailed, prediction.WrongSample) as e:
        return str(e)


def _errors(rows: list[dict], device, constants: dict) -> np.ndarray:
    """log(predicted time / measured time) per row."""
    out = []
    for r in rows:
        c = prediction.counts_from(r["counts"])
        t, _ = prediction.seconds(c, device, constants)
        measured = 2 * c.fmas / (r["gflops"] * 1e9)
        out.append(math.log(t / measured))
    return np.array(out)


def _fit(rows: list[dict], device) -> dict:
    names = list(START)

    def constants(x) -> dict:
        return dict(zip(names, np.exp(x)))

    x0 = np.log([START[n] for n in names])
    fit = least_squares(lambda x: _errors(rows, device, constants(x)), x0,
                        bounds=(np.log([BOUNDS[n][0] for n in names]), np.log([BOUNDS[n][1] for n in names])))
    return constants(fit.x)


def calibrate(results: Path, jobs: int, gpu: str = "NVIDIA H200") -> int:
    device = devices.known(gpu)
    rows = _records(results, gpu)
    print(f"counting {len(rows)} timed kernels on the emulator ({jobs} processes) ...", flush=True)
    drivers(on_emulator=True)
    distinct = {_sample_key(r): r for r in rows}
    with ProcessPoolExecutor(jobs) as pool:
        samples = dict(zip(distinct, pool.map(_sampled, distinct.values())))
    for r in rows:
        s = samples[_sample_key(r)]
        if isinstance(s, str):
            r["problem"] = s
        else:
            r["counts"] = prediction.counts_data(prediction.scaled(s, r["stage"], r["M"], r["N"], r["K"],
                                                                   r["defines"]))
    skipped = [r for r in rows if "counts" not in r]
    rows = [r for r in rows if "counts" in r]
    fitted = [r for r in rows if r["fitted"]]
    held = [r for r in rows if not r["fitted"]]
    constants = _fit(fitted, device)
    fit_err = -_errors(fitted, device, constants)          # log(predicted / measured) GFLOPS
    held_err = -_errors(held, device, constants)
    # a prediction's interval: where the fitted kernels' measured GFLOPS fell, log(measured / predicted), 10th
    # and 90th percentiles
    spread = [float(np.quantile(-fit_err, 0.1)), float(np.quantile(-fit_err, 0.9))]
    cublas = {}
    for r in rows:                  # bench.json's figure where it has the shape
        cublas.setdefault(f"{r['M']}x{r['N']}x{r['K']}", r["cublas"])
    summary = {"fitted": len(fitted), "held_out": len(held),
               "held_out_median_error": statistics.median(abs(math.exp(e) - 1) for e in held_err),
               "held_out_worst_factor": math.exp(max(abs(e) for e in held_err)),
               "fitted_median_error": statistics.median(abs(math.exp(e) - 1) for e in fit_err),
               "few_warps_overprediction": _few_warps_overprediction(rows, device, constants),
               "held_out_by_set": {_set_key(r): None for r in held}}
    for key in summary["held_out_by_set"]:
        errors = [abs(math.exp(e) - 1) for r, e in zip(held, held_err) if _set_key(r) == key]
        summary["held_out_by_set"][key] = {"kernels": len(errors), "median_error": statistics.median(errors),
                                           "worst_error": max(errors)}
    table = json.loads(prediction.CALIBRATION_PATH.read_text()) if prediction.CALIBRATION_PATH.exists() else {}
    table[device.name] = {"constants": constants, "spread": spread, "cublas_gflops": cublas,
                          "calibrated_on": f"{results.as_posix()} ({datetime.date.today()})", **summary}
    prediction.CALIBRATION_PATH.write_text(json.dumps(table, indent=1) + "\n")
    _write_table(results, device, constants, rows, skipped, summary)
    print(json.dumps(summary, indent=1))
    return 0


def _few_warps_overprediction(rows: list[dict], device, constants: dict) -> float | None:
    """Predicted over measured GFLOPS at its largest, among the kernels with at most FEW_WARPS per scheduler."""
    few = [r for r in rows if prediction.warps_per_scheduler(prediction.counts_from(r["counts"]), device)
           <= prediction.FEW_WARPS]
    return float(np.exp(-_errors(few, device, constants)).max()) if few else None


def _set_key(row: dict) -> str:
    return f"{row['set']} at {row['M']}x{row['N']}x{row['K']}"


def _write_table(results: Path, device, constants: dict, rows: list[dict], skipped: list[dict], summary: dict):
    calibrated = {"constants": constants, "spread": [0.0, 0.0], "cublas_gflops": {}}
    lines = [f"# Predicted against measured GFLOPS, {device.name}", "",
             "Command, from the repository root (no GPU needed: it reads the times recorded here):", "", "```",
             f"python3 -m grader predict --calibrate {results.as_posix()}", "```", "",
             f"Fitted on {summary['fitted']} measurements: every stage at every shape of bench.json, and the "
             f"even-numbered ones of every third configuration of autotune.json (split-K off) at the shapes of its "
             f"classes {', '.join(TUNED_CLASSES)}. Held out ({summary['held_out']} measurements of kernels the fit "
             f"never saw): the odd-numbered configurations at the same shapes, and the stages built with other "
             f"tiles of held-out.json (`python3 -m grader predict --measure {results.as_posix()}` on the GPU). "
             f"Median error of the predicted "
             f"GFLOPS: {summary['fitted_median_error']:.1%} fitted, {summary['held_out_median_error']:.1%} held out; "
             f"the worst held-out prediction is off by a factor of {summary['held_out_worst_factor']:.2f}.", "",
             "| held out | kernels | median error | worst error |", "|---|---|---|---|",
             *[f"| {key} | {v['kernels']} | {v['median_error']:.1%} | {v['worst_error']:.1%} |"
               for key, v in summary["held_out_by_set"].items()], "",
             "Constants: " + ", ".join(f"{k} {v:.3g}" for k, v in constants.items()), "",
             "| kernel | shape | set | measured GFLOPS | predicted | error | limited by |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = prediction.counts_from(r["counts"])
        p = prediction.predict(c, device, calibrated)
        lines.append(f"| {r['kernel']} | {r['M']}x{r['N']}x{r['K']} | {'fitted' if r['fitted'] else 'held out'} | "
                     f"{r['gflops']:.0f} | {p.gflops:.0f} | {p.gflops / r['gflops'] - 1:+.1%} | {p.limiter} |")
    lines += [""] + [f"Not counted: {r['kernel']} at {r['M']}x{r['N']}x{r['K']}: {r['problem']}" for r in skipped]
    (results / "prediction.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", help="the kernel's .cu file")
    parser.add_argument("--exercise", "--stage", choices=PREDICTED_STAGES)
    parser.add_argument("--gpu", default="NVIDIA H200")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calibrate", metavar="RESULTS", help="fit the model to the times recorded in RESULTS")
    parser.add_argument("--measure", metavar="RESULTS", help="time the held-out kernels on this GPU into "
                        "RESULTS/held-out.json")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(Path(args.measure), argv)
    if args.calibrate:
        return calibrate(Path(args.calibrate), args.jobs, args.gpu)
    if not args.file or not args.exercise:
        parser.print_usage()
        return 2
    return predict_file(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""GFLOPS of the kernel against cuBLAS SGEMM on the same GPU, same inputs,
same run (grader.kernels.timing), and the stage's threshold from grader/grading/checks/thresholds.json.
On the emulator: "not graded: no GPU" - never a pass - with the speed the
model predicts on the H200 (grader.kernels.prediction), which gives no points."""
from __future__ import annotations

from grader import emulator
from grader.grading import answers
from grader.grading.checks import correctness, thresholds
from grader.grading.checks.common import launch_errors, launch_failure, start_stage_collect
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import FAILED, NOT_GRADED, PASSED, CheckResult, png_base64
from grader.kernels import prediction, timing
from grader.kernels.sgemm import compile_kernel, driver_of
from grader.kernels.stages import stage as stage_by_id
from grader.platform import devices

NAME = "performance"
BUDGET_S = 120.0        # the timed rounds (grader.kernels.timing's protocol) at most
PREDICTED_ON = devices.H200     # the GPU a prediction is for, without one
SAMPLE_LAUNCH_S = 30.0          # the prediction's sampled launch at most (the references' take under 2 s)
NO_GPU = "not graded: no GPU (performance is only measured, and its points only given, when the grader runs on a GPU)"
# The kernel runs on the correctness check's inputs again before it is timed.
WRONG_BEFORE_TIMING = ("not timed: C must be right before the kernel's speed counts, and it was wrong when this "
                       "check ran the correctness shapes again (if the correctness check passed, C differs from one "
                       "run to the next: a race?)")


def bar_chart(bars: list[tuple[str, float]], required: float, title: str) -> str:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(5.0, 0.5 + 0.45 * len(bars)))
    ax = fig.add_subplot()
    names = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    colors = ["#1f77b4" if n.startswith("your") else "#999999" for n in names]
    ax.barh(names, values, color=colors)
    ax.axvline(required, color="#cf222e", linestyle="--", label=f"needed: {required:.0f}")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    ax.set_xlabel("GFLOPS")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    return png_base64(fig)



def measured(m) -> dict:
    """A Measurement as the grading process returns it."""
    return {"status": m.status, "detail": m.detail, "gflops": m.gflops, "cublas_gflops": m.cublas_gflops}


def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What was measured, nothing judged: the correctness check's outputs and, when they are right
    (judged here too, only to skip timing a wrong kernel), the GFLOPS of the kernel, cuBLAS and the
    previous stage's reference where the threshold asks for it."""
    stage = ctx.stage
    if not ctx.gpu:
        return _predicted_counts(source, ctx), {}
    meta, function = start_stage_collect(stage, source)
    if function is None:
        return meta, {}
    meta["correctness"], arrays = correctness.collect(source, seed, ctx)
    if correctness.judge((meta["correctness"], arrays), seed, ctx).status != PASSED:
        return meta, arrays
    th = thresholds.for_stage(stage.id)
    M, N, K = th.size
    kernels = [(function, stage.launch(M, N, K))]
    if th.fraction_of_previous is not None:         # timed in the same rounds, after the submission
        prev = stage_by_id(th.previous)
        if not prev.source_path.exists():           # a copy of the course without its solutions
            meta["previous"] = {"status": "no reference", "detail": answers.GRADED_WHEN_SUBMITTED}
            return meta, arrays
        kernels.append((compile_kernel(prev), prev.launch(M, N, K)))
    # The GPU's lock: held exclusively by the process that started this one (Check.times_kernels).
    results = timing.measure_sgemms(kernels, timing.make_workload(M, N, K), budget_s=BUDGET_S)
    meta["kernel"] = measured(results[0])
    if len(results) > 1:
        meta["previous"] = measured(results[1])
    return meta, arrays


def _predicted_counts(source: str, ctx: Context) -> dict:
    """On the emulator: what the kernel does at the timed size, for the prediction (nothing when the model
    is not calibrated for PREDICTED_ON, or the kernel does not compile)."""
    if prediction.calibration(PREDICTED_ON) is None:
        return {}
    M, N, K = thresholds.for_stage(ctx.stage.id).size
    built = prediction.graded_build(ctx.stage, PREDICTED_ON.name, M, N, K)
    meta, function = start_stage_collect(built, source, on_emulator=True)
    if function is None:
        return {}
    drv, limit = driver_of(function), emulator.launch_timeout()
    emulator.set_launch_timeout(min(limit, SAMPLE_LAUNCH_S))
    try:
        return {"counts": prediction.counts_data(prediction.count(built, function, M, N, K))}
    except prediction.WrongSample:          # what is wrong is the correctness check's to say, once
        return {"not_predicted": "the kernel must compute C first (the correctness check says what is wrong)"}
    except launch_errors(drv) as e:
        return {"not_predicted": f"its sampled launch failed: {launch_failure(drv, e)}"}
    finally:
        emulator.set_launch_timeout(limit)


def _not_graded(meta: dict, stage_id: str) -> CheckResult:
    """The emulator's row: not graded, and what the model predicts on PREDICTED_ON (no points from it)."""
    th = thresholds.for_stage(stage_id)
    calibrated = prediction.calibration(PREDICTED_ON)
    if meta.get("not_predicted"):
        return CheckResult(NAME, NOT_GRADED, f"{NO_GPU}; no prediction of its speed: {meta['not_predicted']}", 0.0)
    if "counts" not in meta or calibrated is None:
        return CheckResult(NAME, NOT_GRADED, NO_GPU, 0.0)
    p = prediction.predict(prediction.counts_from(meta["counts"]), PREDICTED_ON, calibrated)
    M, N, K = th.size
    return CheckResult(NAME, NOT_GRADED, f"{NO_GPU}; M={M} N={N} K={K} {p.describe()}; this stage needs "
                       f"{th.describe()}", 0.0, details={"predicted": p.as_dict()})


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs: correctness first, then the GFLOPS against the stage's threshold."""
    meta, arrays = outputs
    stage = ctx.stage
    if not ctx.gpu:
        return _not_graded(meta, stage.id)
    log = meta.get("log", "")
    if meta.get("compile_error") is not None:
        return CheckResult.make(NAME, False, f"the kernel does not compile:\n{meta['compile_error']}")
    if "correctness" not in meta or correctness.judge((meta["correctness"], arrays), seed, ctx).status != PASSED:
        # Fast but wrong is not fast enough: timing alone checks only the timed
        # shape, which may be a tile multiple where a missing bounds check hides.
        return CheckResult(NAME, FAILED, WRONG_BEFORE_TIMING, 0.0, output=log)
    return rated(NAME, meta, thresholds.for_stage(stage.id), seed, log)


def rated(name: str, meta: dict, th: thresholds.Threshold, seed: int, log: str) -> CheckResult:
    """The verdict on a measurement (meta["kernel"], and meta["previous"] where the threshold names a
    reference kernel) against threshold `th`: points, the message and the bar chart."""
    M, N, K = th.size
    shape = f"M={M} N={N} K={K}"
    m = meta.get("kernel") or {"status": "missing", "detail": "the grading process returned no measurement"}
    gflops, cublas = m.get("gflops"), m.get("cublas_gflops")
    if m.get("status") != "ok" or not isinstance(gflops, (int, float)) or not isinstance(cublas, (int, float)) \
            or cublas <= 0:
        return CheckResult(name, FAILED, f"{shape}: not timed ({m.get('status')}): {m.get('detail')}", 0.0,
                           output=log, details={"status": m.get("status")})
    bars = [("your kernel", gflops), ("cuBLAS", cublas)]
    if th.fraction_of_previous is not None:
        pm = meta.get("previous") or {"status": "missing", "detail": "not measured"}
        if pm.get("status") == "no reference":
            return CheckResult(name, NOT_GRADED, pm["detail"], 0.0, output=log)
        if pm.get("status") != "ok" or not isinstance(pm.get("gflops"), (int, float)) or pm["gflops"] <= 0:
            return CheckResult(name, FAILED, f"{shape}: the '{th.previous}' reference kernel could not be timed "
                               f"({pm.get('status')}: {pm.get('detail')}); ask your instructor", 0.0, output=log)
        required = th.fraction_of_previous * pm["gflops"]
        bars.append((f"'{th.previous}' reference", pm["gflops"]))
    else:
        required = th.fraction_of_cublas * cublas
    ratio = gflops / cublas
    lo = th.partial_credit_from * required
    if gflops >= required:
        status, points = PASSED, 1.0
    else:
        status = FAILED
        points = 0.0 if th.partial_credit_from >= 1 else max(0.0, (gflops - lo) / (required - lo))
    msg = (f"{shape}: {gflops:.0f} GFLOPS = {ratio:.3f} x cuBLAS ({cublas:.0f} GFLOPS, same GPU, "
           f"same inputs, {m.get('detail')}); needed {th.describe()} = {required:.0f} GFLOPS")
    if status == FAILED:
        msg += f"; partial credit {points:.2f} (0 at {lo:.0f} GFLOPS)" if points > 0 else ""
    return CheckResult(name, status, msg, round(points, 3), figure=bar_chart(bars, required, shape),
                       details={"gflops": gflops, "cublas_gflops": cublas, "ratio": ratio,
                                "required_gflops": required, "seed": seed}, output=log)


# Its launches are the correctness check's (with that check's budgets) and its timing's own.
CHECK = Check(NAME, collect, judge, timeout=480, timed_on_reference=False, times_kernels=True)

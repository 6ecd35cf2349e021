"""GFLOPS of the kernel against cuBLAS SGEMM on the same GPU, same inputs,
same run (grader.perf), and the stage's threshold from grader/thresholds.json.
On the emulator: "not graded: no GPU" - never a pass."""
from __future__ import annotations

from ..report import FAILED, NOT_GRADED, PASSED, CheckResult, png_base64
from . import thresholds
from ..compiler import CompileFailed
from .common import compile_function, new_seed

NAME = "performance"
BUDGET_S = 120.0


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


def run(stage, source: str, seed: int | None = None, table: dict | None = None) -> CheckResult:
    from .. import perf
    if not perf.on_gpu():
        return CheckResult(NAME, NOT_GRADED, "not graded: no GPU (performance is only measured, and its "
                           "points only given, when the grader runs on a GPU)", 0.0)
    seed = new_seed() if seed is None else int(seed)
    th = thresholds.for_stage(stage.id, table)
    try:
        function, log = compile_function(stage, source)
    except CompileFailed as e:
        return CheckResult.make(NAME, False, f"the kernel does not compile:\n{e}")
    from . import correctness
    if correctness.run(stage, source, seed=seed).status != PASSED:
        # Fast but wrong is not fast enough: timing alone checks only the timed
        # shape, which may be a tile multiple where a missing bounds check hides.
        return CheckResult(NAME, FAILED, "not timed: the kernel must pass the correctness check before its "
                           "speed counts", 0.0, output=log)
    M, N, K = th.size
    w = perf.make_workload(M, N, K, seed=seed, budget_s=BUDGET_S)
    m = perf.measure_sgemm(function, stage.launch(M, N, K), w, budget_s=BUDGET_S)
    shape = f"M={M} N={N} K={K}"
    if m.status != "ok" or m.gflops is None or not m.cublas_gflops:
        return CheckResult(NAME, FAILED, f"{shape}: not timed ({m.status}): {m.detail}", 0.0, output=log,
                           details={"status": m.status})
    bars = [("your kernel", m.gflops), ("cuBLAS", m.cublas_gflops)]
    if th.fraction_of_previous is not None:
        from ..sgemm import compile_kernel
        from ..stages import stage as stage_by_id
        prev = stage_by_id(th.previous)
        pm = perf.measure_sgemm(compile_kernel(prev), prev.launch(M, N, K), w, budget_s=BUDGET_S)
        if pm.status != "ok" or not pm.gflops:
            return CheckResult(NAME, FAILED, f"{shape}: the '{prev.id}' reference kernel could not be timed "
                               f"({pm.status}: {pm.detail}); ask your instructor", 0.0, output=log)
        required = th.fraction_of_previous * pm.gflops
        bars.append((f"'{prev.id}' reference", pm.gflops))
    else:
        required = th.fraction_of_cublas * m.cublas_gflops
    ratio = m.gflops / m.cublas_gflops
    lo = th.partial_credit_from * required
    if m.gflops >= required:
        status, points = PASSED, 1.0
    else:
        status = FAILED
        points = 0.0 if th.partial_credit_from >= 1 else max(0.0, (m.gflops - lo) / (required - lo))
    msg = (f"{shape}: {m.gflops:.0f} GFLOPS = {ratio:.3f} x cuBLAS ({m.cublas_gflops:.0f} GFLOPS, same GPU, "
           f"same inputs, {m.detail}); needed {th.describe()} = {required:.0f} GFLOPS")
    if status == FAILED:
        msg += f"; partial credit {points:.2f} (0 at {lo:.0f} GFLOPS)" if points > 0 else ""
    return CheckResult(NAME, status, msg, round(points, 3), figure=bar_chart(bars, required, shape),
                       details={"gflops": m.gflops, "cublas_gflops": m.cublas_gflops, "ratio": ratio,
                                "required_gflops": required, "seed": seed}, output=log)

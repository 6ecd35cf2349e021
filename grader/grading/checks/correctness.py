"""C = A B on fresh random inputs: non-square shapes that are not multiples of
any tile plus one large shape; C NaN-poisoned and surrounded by guard zones;
every element against the float64 product with a K-scaled tolerance."""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks import wrong_patterns
from grader.grading.checks.common import (
    did_not_finish,
    guard_problems,
    launch_budget,
    launch_errors,
    launch_failure,
    run_guarded,
    start_stage_collect,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult, png_base64
from grader.kernels import sgemm
from grader.platform.backend import drivers

NAME = "correctness"
# Not multiples of 8, 16, 32, 64 or 128 in any dimension, one of them a single row.
SHAPES = [(17, 33, 9), (100, 37, 61), (1, 129, 31), (130, 67, 250), (257, 129, 65)]
LARGE_EMULATOR = (256, 384, 128)       # a multiple of every tile in the course
LARGE_GPU = (2048, 1536, 1024)
HEATMAP_FROM = 16                      # wrong elements that earn a picture


def shapes(on_gpu: bool) -> list[tuple[int, int, int]]:
    return SHAPES + [LARGE_GPU if on_gpu else LARGE_EMULATOR]


def heatmap(bad: np.ndarray, title: str) -> str:
    """A small picture of where the wrong elements of C are (base64 PNG)."""
    from matplotlib.figure import Figure
    M, N = bad.shape
    bins_r, bins_c = min(M, 64), min(N, 64)
    rows = np.minimum((np.arange(M) * bins_r) // M, bins_r - 1)
    cols = np.minimum((np.arange(N) * bins_c) // N, bins_c - 1)
    grid = np.zeros((bins_r, bins_c))
    np.add.at(grid, (rows[:, None].repeat(N, 1), cols[None, :].repeat(M, 0)), bad.astype(float))
    counts = np.zeros((bins_r, bins_c))
    np.add.at(counts, (rows[:, None].repeat(N, 1), cols[None, :].repeat(M, 0)), 1.0)
    fig = Figure(figsize=(3.2, 3.0))
    ax = fig.add_subplot()
    im = ax.imshow(grid / np.maximum(counts, 1), cmap="Reds", vmin=0, vmax=1, aspect="auto",
                   extent=(0, N, M, 0), interpolation="nearest")
    ax.set_xlabel("column of C")
    ax.set_ylabel("row of C")
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, label="share wrong")
    return png_base64(fig)



def locate_fault(driver, run) -> str | None:
    """A fault the CPU reported without a source line, found again by the emulator's analysis (which
    checks every access): its readable reason naming the line and thread, or None."""
    with analysis.thread_order(0), analysis.analysis():
        try:
            run()
        except launch_errors(driver) as e:
            if ", line " in str(e):
                return launch_failure(driver, e)
    return None


def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the student's kernel did, and nothing judged: C and its guard zones per shape."""
    stage, gpu = ctx.stage, ctx.gpu
    meta, function = start_stage_collect(stage, source, analysed=not gpu)
    meta["shapes"], arrays = [], {}
    if function is None:
        return meta, arrays
    rng = np.random.default_rng(seed)
    driver, _ = drivers()
    located: dict[str, str] = {}
    for i, (M, N, K) in enumerate(shapes(gpu)):
        A, B = sgemm.random_inputs(M, N, K, rng)
        launch = stage.launch(M, N, K)
        try:
            with launch_budget((NAME, stage.id, M, N, K), emulated=not gpu):
                C, before, after = run_guarded(driver, function, launch, A, B)
        except launch_errors(driver) as e:     # a failed launch: the message says which
            failure = launch_failure(driver, e)
            if not gpu and getattr(e, "kind", None) == "fault" and ", line " not in str(e):
                if str(e) not in located:
                    with launch_budget((NAME, stage.id, M, N, K)):
                        located[str(e)] = locate_fault(driver, lambda: run_guarded(driver, function, launch, A, B))
                failure = located[str(e)] or failure
            meta["shapes"].append({"failure": failure, "stopped": did_not_finish(e)})
            if gpu or did_not_finish(e):
                break               # on a GPU the context is gone after a fault; a hang would hang again
            continue
        meta["shapes"].append({"failure": None})
        arrays.update({f"C{i}": C, f"before{i}": before, f"after{i}": after})
    return meta, arrays


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs: the inputs are made again from the
    seed, here; anything missing or malformed is wrong."""
    meta, arrays = outputs
    gpu = ctx.gpu
    if meta.get("compile_error") is not None:
        return CheckResult.make(NAME, False, f"the kernel does not compile:\n{meta['compile_error']}",
                                details={"seed": seed})
    rng = np.random.default_rng(seed)
    lines, figure = [], None
    failed: dict[str, list[str]] = {}      # a launch failure: the shapes it happened on
    said: set[str] = set()                 # what the wrong elements suggest, said for the first shape it fits
    wrong: list[bool] = []                 # per shape judged: whether C is wrong
    ok_all = True
    stopped = False
    ran = list(meta.get("shapes", []))
    for i, (M, N, K) in enumerate(shapes(gpu)):
        A, B = sgemm.random_inputs(M, N, K, rng)
        shape = f"M={M} N={N} K={K}"
        if i >= len(ran):           # after a GPU fault or a hang the rest was not run; else outputs are missing
            if ok_all:
                lines.append(f"{shape}: the grading process returned no result for this shape")
            ok_all = False
            break
        outcome = ran[i]
        if outcome.get("failure"):
            failed.setdefault(outcome["failure"], []).append(shape)
            if len(failed[outcome["failure"]]) == 1:
                lines.append(outcome["failure"])       # said once, with every shape it happened on
            ok_all = False
            stopped = stopped or bool(outcome.get("stopped"))
            continue
        C = np.asarray(arrays.get(f"C{i}", np.empty(0)), dtype=np.float32)
        if C.shape != (M, N):
            lines.append(f"{shape}: the grading process returned no C of this shape")
            ok_all = False
            continue
        before = np.asarray(arrays.get(f"before{i}", np.empty(0)), dtype=np.int64)
        after = np.asarray(arrays.get(f"after{i}", np.empty(0)), dtype=np.int64)
        problems = guard_problems(before, after, M * N, "C", said)
        cmp = sgemm.compare(C, A, B)
        if not cmp.ok:
            r, c, want, got = cmp.first
            bad = sgemm.wrong_elements(C, A, B)[0]
            nan = sgemm.value_hint(C[r, c])
            hints = wrong_patterns.once([nan and (nan, nan),
                                         wrong_patterns.partial_tiles_only(bad, ctx.stage.block_tile()),
                                         wrong_patterns.unwritten_rectangle(C, bad),
                                         wrong_patterns.partly_unwritten(C, bad, (r, c)),
                                         wrong_patterns.sum_stops_early(C, A, B, bad)], said)
            problems.append(f"{cmp.wrong} of {M * N} elements wrong; first at row {r}, column {c}: "
                            f"expected {want:.6g}, got {got:.6g}"
                            + wrong_patterns.appended(hints))
            if cmp.wrong >= HEATMAP_FROM and figure is None:
                figure = heatmap(bad, f"wrong elements, {shape}")
        wrong.append(bool(problems))
        if problems:
            ok_all = False
            lines.append(f"{shape}: " + "; ".join(problems))
        else:
            lines.append(f"{shape}: all {M * N} elements correct")
    lines = [f"{', '.join(failed[line])}: {line}" if line in failed else line for line in lines]
    depth = ctx.stage.defines.get("BK", ctx.stage.defines.get("TILE"))
    if depth and not failed and not said & {"partial tiles", "sum stops early"} and len(wrong) == len(shapes(gpu)):
        lines += [h for h in [wrong_patterns.partial_k_tiles(shapes(gpu), wrong, int(depth))] if h]
    head = (f"correct on all {len(shapes(gpu))} shapes" if ok_all else "wrong") + \
        f" (random seed {seed}; tolerance 2 K eps sum|a b| per element against float64)"
    details = {"seed": seed, **({"did_not_finish": True} if stopped else {})}
    return CheckResult.make(NAME, ok_all, head + "\n" + "\n".join(lines), figure=figure,
                            details=details, output=meta.get("log", ""))


CHECK = Check(NAME, collect, judge, timeout=240)

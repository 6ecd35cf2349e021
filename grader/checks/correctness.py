"""C = A B on fresh random inputs: non-square shapes that are not multiples of
any tile plus one large shape; C NaN-poisoned and surrounded by guard zones;
every element against the float64 product with a K-scaled tolerance."""
from __future__ import annotations

import numpy as np

from .. import sgemm
from ..report import CheckResult, png_base64
from ..backend import drivers
from ..compiler import CompileFailed
from .common import (compile_function, did_not_finish, launch_budget, launch_errors, launch_failure, new_seed,
                     run_guarded)

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


def run(stage, source: str, seed: int | None = None) -> CheckResult:
    from ..perf import on_gpu
    seed = new_seed() if seed is None else int(seed)
    rng = np.random.default_rng(seed)
    driver, _ = drivers()
    try:
        function, log = compile_function(stage, source)
    except CompileFailed as e:
        return CheckResult.make(NAME, False, f"the kernel does not compile:\n{e}", details={"seed": seed})
    lines, figure = [], None
    ok_all = True
    gpu = on_gpu()
    reference = []
    stopped = False

    def run_reference(launch, A, B):
        if not reference:
            reference.append(compile_function(stage, stage.source())[0])
        run_guarded(driver, reference[0], launch, A, B)

    for M, N, K in shapes(gpu):
        A, B = sgemm.random_inputs(M, N, K, rng)
        launch = stage.launch(M, N, K)
        shape = f"M={M} N={N} K={K}"
        try:
            with launch_budget((NAME, stage.id, M, N, K), lambda: run_reference(launch, A, B), emulated=not gpu):
                C, before, after = run_guarded(driver, function, launch, A, B)
        except launch_errors(driver) as e:     # a failed launch: the message says which
            why = launch_failure(driver, e)
            lines.append(f"{shape}: {why}")
            ok_all = False
            stopped = did_not_finish(e)
            if gpu or stopped:
                break               # on a GPU the context is gone after a fault; a hang would hang again
            continue
        problems = []
        if len(before) or len(after):
            where = []
            if len(before):
                where.append(f"{len(before)} float(s) before C (first at offset {int(before[-1])})")
            if len(after):
                where.append(f"{len(after)} float(s) after its end (first at C[{M * N + int(after[0])}], "
                             f"past the last element C[{M * N - 1}])")
            problems.append("wrote outside C: " + " and ".join(where) + " - a missing bounds check?")
        cmp = sgemm.compare(C, A, B)
        if not cmp.ok:
            r, c, want, got = cmp.first
            problems.append(f"{cmp.wrong} of {M * N} elements wrong; first at row {r}, column {c}: "
                            f"expected {want:.6g}, got {got:.6g}"
                            + (" (never written: C was poisoned with NaN)" if np.isnan(got) else ""))
            if cmp.wrong >= HEATMAP_FROM and figure is None:
                figure = heatmap(sgemm.wrong_elements(C, A, B)[0], f"wrong elements, {shape}")
        if problems:
            ok_all = False
            lines.append(f"{shape}: " + "; ".join(problems))
        else:
            lines.append(f"{shape}: all {M * N} elements correct")
    head = (f"correct on all {len(shapes(gpu))} shapes" if ok_all else "wrong") + \
        f" (random seed {seed}; tolerance 2 K eps sum|a b| per element against float64)"
    details = {"seed": seed, **({"did_not_finish": True} if stopped else {})}
    return CheckResult.make(NAME, ok_all, head + "\n" + "\n".join(lines), figure=figure,
                            details=details, output=log)

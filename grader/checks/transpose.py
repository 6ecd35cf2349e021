"""Lab 4's transpose through a shared tile (solutions/transpose.cu; host
driver grader.transpose):

    run_correctness(source, seed)     out = in^T exactly, on shapes that are not square and not multiples of 32
                                      (single rows and columns among them), out NaN-poisoned inside guard zones
    run_races(source, seed)           the emulator's race and out-of-bounds analysis, and the same out in
                                      permuted thread orders (always on the emulator)
    run_bank_conflicts(source, seed)  the emulator's bank-conflict analysis: a correct transpose through shared
                                      memory with no conflicting request (graded)
"""
from __future__ import annotations

import numpy as np

from .. import transpose
from ..backend import drivers
from ..report import CheckResult
from ..sgemm import driver_of, nan_hint, never_written, poisoned
from . import emulator_tools as analysis
from .bank_conflicts_configs import conflict_report
from .common import GUARD_BITS, launch_errors, launch_failure, start_kernels

# (rows, cols) of `in`: not square, not multiples of 32 (one of each kind of edge), one row, one column.
SHAPES = [(1, 1), (1, 45), (45, 1), (33, 65), (100, 37), (31, 97), (257, 130)]
LARGE_EMULATOR = (192, 320)            # multiples of 32: every tile full
LARGE_GPU = (3000, 4001)
RACES_SHAPE = (45, 70)
CONFLICTS_SHAPE = (64, 96)
ORDER_SEEDS = (0x5EED1, 0xC0FFEE)
SHOW = 3


def shapes(on_gpu: bool) -> list[tuple[int, int]]:
    return SHAPES + [LARGE_GPU if on_gpu else LARGE_EMULATOR]


def guard_floats(rows: int, cols: int) -> int:
    """Enough poisoned floats after out for a whole row of tiles written past its end."""
    return max(4096, 32 * rows + 64)


def _inputs(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, (rows, cols)).astype(np.float32)


def _compare(out: np.ndarray, x: np.ndarray) -> str | None:
    """None when out is x^T bit for bit, else the count and the first wrong element."""
    want = transpose.reference(x)
    bad = want.view(np.uint32) != out.view(np.uint32)
    if not bad.any():
        return None
    r, c = (int(v) for v in np.argwhere(bad)[0])
    got = out[r, c]
    return (f"{int(bad.sum())} of {out.size} elements of out wrong; first out[{r}][{c}]: expected in[{c}][{r}] = "
            f"{want[r, c]:.6g}, got {got:.6g}" + nan_hint(got, "out", "in"))


def _guarded(function, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(out, problems) of one guarded launch; problems name guard-zone writes."""
    rows, cols = x.shape
    out, before, after = transpose.run_guarded(function, x, guard_floats(rows, cols), GUARD_BITS)
    problems = []
    if len(before) or len(after):
        where = []
        if len(before):
            where.append(f"{len(before)} float(s) before out (first at offset {int(before[-1])})")
        if len(after):
            where.append(f"{len(after)} float(s) after its end (first at out[{rows * cols + int(after[0])}], past "
                         f"the last element out[{rows * cols - 1}])")
        problems.append("wrote outside out: " + " and ".join(where) + " - a missing bounds check?")
    return out, problems


def run_correctness(source: str, seed: int | None = None) -> CheckResult:
    from ..perf import on_gpu
    name = "transpose-correctness"
    start = start_kernels(name, transpose.TRANSPOSE, source, seed)
    if isinstance(start, CheckResult):
        return start
    seed, fns, log = start
    function = fns["transpose"]
    drv = driver_of(function)
    rng = np.random.default_rng(seed)
    gpu = on_gpu()
    ok, lines = True, []
    for rows, cols in shapes(gpu):
        shape = f"in {rows} x {cols}"
        x = _inputs(rows, cols, rng)
        try:
            out, problems = _guarded(function, x)
        except launch_errors(drv) as e:
            ok = False
            lines.append(f"{shape}: {launch_failure(drv, e)}")
            if gpu:
                break               # on a GPU the context is gone after a fault
            continue
        wrong = _compare(out, x)
        problems += [wrong] if wrong else []
        if problems:
            ok = False
            lines.append(f"{shape}: " + "; ".join(problems))
        else:
            lines.append(f"{shape}: out ({cols} x {rows}) correct")
    head = (f"correct on all {len(shapes(gpu))} shapes" if ok else "wrong") + \
        f" (random seed {seed}; grid ceil(cols / 32) x ceil(rows / 32) blocks of 32 x 32 threads)"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed}, output=log)


def _launch(function, x: np.ndarray):
    """(out, failure reason or None): exact-size buffers, out NaN-poisoned."""
    drv = driver_of(function)
    rows, cols = x.shape
    a = drv.to_device(x)
    out = poisoned((cols, rows))
    o = drv.to_device(out)
    try:
        transpose.launch_kernel(function, rows, cols, a, o)
    except launch_errors(drv) as e:
        return None, launch_failure(drv, e)
    drv.memcpy_dtoh(out, o)
    a.free()
    o.free()
    return out, None


def run_races(source: str, seed: int | None = None) -> CheckResult:
    name = "transpose-races"
    start = start_kernels(name, transpose.TRANSPOSE, source, seed, on_emulator=True)
    if isinstance(start, CheckResult):
        return start
    seed, fns, log = start
    function = fns["transpose"]
    rows, cols = RACES_SHAPE
    x = _inputs(rows, cols, np.random.default_rng(seed))
    problems = []
    with analysis.thread_order(0), analysis.analysis() as report:
        out0, failure = _launch(function, x)
    if failure:
        problems.append(f"normal thread order: {failure}")
    races, oob = list(report.races), list(report.out_of_bounds)
    if races:
        problems.append(f"{len(races)} race(s) on shared or global memory - a missing __syncthreads() between "
                        "the writes to the tile and the reads of its columns? e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in races[:SHOW]))
    if oob and not failure:
        problems.append(f"{len(oob)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in oob[:SHOW]))
    if out0 is not None:
        for s in ORDER_SEEDS:
            with analysis.thread_order(s):
                out1, failure = _launch(function, x)
            if failure:
                problems.append(f"permuted thread order (seed {s:#x}): {failure}")
                break
            differ = out0.view(np.uint32) != out1.view(np.uint32)
            if differ.any():
                r, c = (int(v) for v in np.argwhere(differ)[0])
                problems.append(
                    f"the result depends on the order in which threads run: with the threads of each block in a "
                    f"permuted order (seed {s:#x}) {int(differ.sum())} element(s) of out differ, first out[{r}][{c}]: "
                    f"{out0[r, c]:.6g} in the normal order, {out1[r, c]:.6g} permuted - threads read tile elements "
                    "that other threads have not written yet: a missing __syncthreads()?")
                break
        if never_written(out0).any():
            problems.append(f"{int(never_written(out0).sum())} element(s) of out were never written: only a kernel that "
                            "transposes is credited with being race-free")
    shape = f"in {rows} x {cols}, random seed {seed}"
    if problems:
        return CheckResult.make(name, False, f"{shape}:\n" + "\n".join(problems), details={"seed": seed}, output=log)
    return CheckResult.make(name, True, f"{shape}: no races, no out-of-bounds accesses, the same out in "
                            f"{len(ORDER_SEEDS) + 1} thread orders", details={"seed": seed}, output=log)


def run_bank_conflicts(source: str, seed: int | None = None) -> CheckResult:
    name = "transpose-bank-conflicts"
    start = start_kernels(name, transpose.TRANSPOSE, source, seed, on_emulator=True)
    if isinstance(start, CheckResult):
        return start
    seed, fns, log = start
    rows, cols = CONFLICTS_SHAPE
    x = _inputs(rows, cols, np.random.default_rng(seed))
    shape = f"in {rows} x {cols}"
    with analysis.thread_order(0), analysis.analysis() as report:
        out, failure = _launch(fns["transpose"], x)
    if failure:
        return CheckResult.make(name, False, f"{shape}: {failure}", details={"seed": seed}, output=log)
    free, text, html, details = conflict_report(report)
    details["seed"] = seed
    wrong = _compare(out, x)
    sites = {r.op for r in report.bank_conflicts}
    if wrong:
        return CheckResult.make(name, False, f"{shape}: {wrong} - only a correct transpose is credited with being "
                                "free of bank conflicts\n" + text, html=html, details=details, output=log)
    if not {"ld", "st"} <= sites:
        never = "stores to" if "st" not in sites else "loads from"
        return CheckResult.make(name, False, f"{shape}: the kernel never {never} shared memory: this exercise "
                                "transposes through a shared tile (so that both the reads of in and the writes of "
                                "out are coalesced)", details=details, output=log)
    return CheckResult.make(name, free, f"{shape}: " + text, html=html, details=details, output=log)

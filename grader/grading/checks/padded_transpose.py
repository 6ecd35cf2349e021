"""Lab 4's transpose through a shared tile (solutions/transpose.cu; host
driver grader.kernels.transpose):

    transpose-correctness             out = in^T exactly, on shapes that are not square and not multiples of 32
                                      (single rows and columns among them), out NaN-poisoned inside guard zones
    transpose-races                   the emulator's race and out-of-bounds analysis, and the same out in
                                      permuted thread orders (always on the emulator)
    transpose-bank-conflicts          the emulator's bank-conflict analysis: a correct transpose through shared
                                      memory with no conflicting request (graded)

Each is a Check (grader.grading.protocol): collect_X runs in the sandboxed grading
process and returns what the kernel did; judge_X gives the verdict from those
outputs and the seed, in the grader's own process.
"""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks import wrong_patterns
from grader.grading.checks.bank_conflicts_configs import conflict_report
from grader.grading.checks.common import (
    GUARD_BITS,
    GuardedCase,
    collect_guarded,
    collect_in_orders,
    does_not_compile,
    judge_guarded,
    judge_in_orders,
    launch_budget,
    launch_errors,
    launch_failure,
    other_inputs_rng,
    returned_matrix,
    start_collect,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import transpose
from grader.kernels.sgemm import driver_of, poisoned, value_hint

# (rows, cols) of `in`: not square, not multiples of 32 (one of each kind of edge), one row, one column.
SHAPES = [(1, 1), (1, 45), (45, 1), (33, 65), (100, 37), (31, 97), (257, 130)]
LARGE_EMULATOR = (192, 320)            # multiples of 32: every tile full
LARGE_GPU = (3000, 4001)
RACES_SHAPE = (45, 70)
CONFLICTS_SHAPE = (64, 96)
SHOW = 3


def shapes(on_gpu: bool) -> list[tuple[int, int]]:
    return SHAPES + [LARGE_GPU if on_gpu else LARGE_EMULATOR]


def guard_floats(rows: int, cols: int) -> int:
    """Enough poisoned floats after out for a whole row of tiles written past its end."""
    return max(4096, 32 * rows + 64)


def _inputs(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, (rows, cols)).astype(np.float32)


def _compare(out: np.ndarray, x: np.ndarray, said: set | None = None) -> str | None:
    """None when out is x^T bit for bit, else the count and the first wrong element, with what they
    suggest unless it is in `said` (hints already given for another shape; this one's are added)."""
    want = transpose.reference(x)
    bad = want.view(np.uint32) != out.view(np.uint32)
    if not bad.any():
        return None
    r, c = (int(v) for v in np.argwhere(bad)[0])
    got = out[r, c]
    nan = value_hint(got, "out", "in")
    hints = wrong_patterns.once([nan and (nan, nan), wrong_patterns.transposed_in_tiles(out, want)],
                                set() if said is None else said)
    return (f"{int(bad.sum())} of {out.size} elements of out wrong; first out[{r}][{c}]: expected in[{c}][{r}] = "
            f"{want[r, c]:.6g}, got {got:.6g}" + wrong_patterns.appended(hints))


def collect_correctness(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(transpose.TRANSPOSE, source)
    if fns is None:
        return meta, {}
    function = fns["transpose"]
    rng = np.random.default_rng(seed)
    xs = [_inputs(rows, cols, rng) for rows, cols in shapes(ctx.gpu)]
    runs = [lambda x=x: transpose.run_guarded(function, x, guard_floats(*x.shape), GUARD_BITS) for x in xs]
    meta["shapes"], arrays = collect_guarded("transpose-correctness", runs, ctx.gpu, driver_of(function))
    return meta, arrays


def judge_correctness(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "transpose-correctness"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    rng = np.random.default_rng(seed)
    cases = [GuardedCase(f"in {rows} x {cols}", (cols, rows), "out", lambda out, said, x=x: _compare(out, x, said),
                         f"out ({cols} x {rows}) correct")
             for rows, cols in shapes(ctx.gpu) for x in [_inputs(rows, cols, rng)]]
    ok, lines = judge_guarded(list(meta.get("shapes", [])), arrays, cases)
    head = (f"correct on all {len(cases)} shapes" if ok else "wrong") + \
        f" (random seed {seed}; grid ceil(cols / 32) x ceil(rows / 32) blocks of 32 x 32 threads)"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed},
                            output=meta.get("log", ""))


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


def collect_races(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(transpose.TRANSPOSE, source, on_emulator=True)
    if fns is None:
        return meta, {}
    x = _inputs(*RACES_SHAPE, np.random.default_rng(seed))
    ran, arrays = collect_in_orders("transpose-races", lambda: _launch(fns["transpose"], x),
                                    lambda: _launch(fns["transpose"], _inputs(*RACES_SHAPE, other_inputs_rng(seed))))
    return {**meta, **ran}, arrays


def judge_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    rows, cols = RACES_SHAPE
    return judge_in_orders(
        "transpose-races", seed, *outputs, f"in {rows} x {cols}", (cols, rows), "out",
        "race(s) on shared or global memory - a missing __syncthreads() between the writes to the tile and the "
        "reads of its columns? e.g.",
        "threads read tile elements that other threads have not written yet: a missing __syncthreads()?",
        "transposes", SHOW)


def collect_bank_conflicts(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(transpose.TRANSPOSE, source, on_emulator=True)
    if fns is None:
        return meta, {}
    x = _inputs(*CONFLICTS_SHAPE, np.random.default_rng(seed))

    def analysed(f):
        with analysis.thread_order(0), analysis.analysis() as report:
            return _launch(f, x), report

    with launch_budget(("transpose-bank-conflicts",)):
        (out, meta["failure"]), report = analysed(fns["transpose"])
    meta["report"] = analysis.report_data(report)
    return meta, {} if out is None else {"out": out}


def judge_bank_conflicts(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "transpose-bank-conflicts"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    rows, cols = CONFLICTS_SHAPE
    x = _inputs(rows, cols, np.random.default_rng(seed))
    shape = f"in {rows} x {cols}"
    log = meta.get("log", "")
    if meta.get("failure"):
        return CheckResult.make(name, False, f"{shape}: {meta['failure']}", details={"seed": seed}, output=log)
    report = analysis.report_from(meta.get("report", {}))
    free, text, html, details = conflict_report(report)
    details["seed"] = seed
    out = returned_matrix(arrays.get("out"), (cols, rows))
    wrong = "the grading process returned no out" if out is None else _compare(out, x)
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


CHECKS = (Check("transpose-correctness", collect_correctness, judge_correctness, timeout=300),
          Check("transpose-races", collect_races, judge_races, timeout=300),
          Check("transpose-bank-conflicts", collect_bank_conflicts, judge_bank_conflicts, timeout=300))

"""Lab 8 checks: shortest paths on the grid graph of C (solutions/sssp.cu).

Convention: one vertex per cell of C, edges between 4-neighbours, the edge
u -> v weighs C[v] (entering v costs C[v]); the source's own cost is not
counted. Sources: the two minimums of C; on the two largest shapes they are
planted in a bottom corner (left, then right), so that some distances must
cross tile edges upward, leftward and rightward, whatever the seed (a halo
side a kernel never loads is wrong on every run, not on some seeds).

    sssp-distances               both distance maps against scipy's Dijkstra in float64 (relative
                                 tolerance RTOL_PER_HOP * (M + N + 2): float32 sums of that many
                                 positive terms) and converged (one more float32 Bellman-Ford sweep in
                                 numpy changes nothing)
    sssp-path                    the path from the first minimum to the second: 4-connected, starts and
                                 ends at the minimums, its cost (sum of C over every cell but the first)
                                 equals the reported distance and Dijkstra's
    sssp-races                   emulator analysis of sssp_relax on a grid of 2 x 2 partial tiles: races
                                 on shared memory and out-of-bounds or misaligned accesses (blocks
                                 reading a neighbour tile's distances while it writes them is the
                                 algorithm's, and harmless: the analysis looks at shared memory only);
                                 no credit to a kernel that reaches no cell but the source

Each is a Check (grader.grading.protocol): collect_X runs in the sandboxed grading
process and returns what the kernel did; judge_X gives the verdict from those
outputs and the seed, in the grader's own process.
"""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks import wrong_patterns
from grader.grading.checks.common import (
    does_not_compile,
    launch_budget,
    launch_errors,
    launch_failure,
    not_credited,
    returned_matrix,
    start_collect,
)
from grader.grading.protocol import KERNEL_HANG, Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm, top2
from grader.kernels.sgemm import driver_of
from grader.kernels.sssp import SSSP, SSSP_TILE, dijkstra, shortest_paths, sssp_distances, sweep
from grader.platform.backend import drivers

SSSP_HANG = KERNEL_HANG + " a relaxation that never stops changing?"
SHAPES = [(1, 2, 4), (1, 70, 8), (67, 1, 8), (45, 39, 16), (100, 130, 16), (150, 97, 8)]
RTOL_PER_HOP = 2.0 ** -22
SHOW = 3
NO_PATH = "no path came back (the walk from the target found no predecessor or ran too long)"
HINTED = " - likely cause: "     # how a line that names a likely cause starts it


# The corner each shape's minimums are planted in: (row, column) of a row of A and a column of B made small.
PLANTED = {4: (-1, 0), 5: (-1, -1)}


def inputs(i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Shape i's A and B (grader.kernels.top2.inputs, with PLANTED's corner made the smallest of C)."""
    A, B = top2.inputs(*SHAPES[i], rng)
    if i in PLANTED:
        row, col = PLANTED[i]
        A[row] *= 0.01
        B[:, col] *= 0.01
    return A, B


def rtol(M: int, N: int) -> float:
    return RTOL_PER_HOP * (M + N + 2)


def stalled_hint(dist: np.ndarray, lowered: np.ndarray, source: int) -> tuple[str, str]:
    """What the cells one more sweep still lowers suggest, as (kind, text) for wrong_patterns.once."""
    finite = np.isfinite(dist)
    if finite.sum() == 1 and finite.reshape(-1)[source]:
        return "nothing relaxed", ("every distance but the source's is still +inf: no tile relaxed anything (the "
                                   "test that skips a tile skips them all? the tile read before its threads loaded "
                                   "it?)")
    r, c = np.nonzero(lowered)
    edge = (r % SSSP_TILE == 0) | (r % SSSP_TILE == SSSP_TILE - 1) | (c % SSSP_TILE == 0) | \
        (c % SSSP_TILE == SSSP_TILE - 1)
    if edge.all():
        return "tile edge", (f"the cells still to lower lie on the edges of {SSSP_TILE} x {SSSP_TILE} tiles: a "
                             "change that did not reach the neighbour tile (a halo cell not loaded, a stamp or "
                             "last_round not written, a tile skipped that should be visited?)")
    return "stalled", "the relaxation stopped before it converged (the kernel stopped one sweep early?)"


def compare_map(dist: np.ndarray, C: np.ndarray, source: int, what: str, said: set | None = None) -> list[str]:
    """What is wrong with one distance map ([]: nothing); a likely cause said once per check (`said`)."""
    M, N = C.shape
    said = set() if said is None else said
    problems = []
    ref = dijkstra(C, source)
    tol = rtol(M, N)
    bad = ~(np.abs(dist.astype(np.float64) - ref) <= tol * np.maximum(ref, 1e-30) + 1e-30)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        higher = int((dist.astype(np.float64) > ref * (1 + tol) + 1e-30).sum())
        problems.append(f"{what}: {int(bad.sum())} of {M * N} distances differ from Dijkstra's (relative "
                        f"tolerance {tol:.2g}); first at row {r}, col {c}: expected {ref[r, c]:.7g}, got "
                        f"{dist[r, c]:.7g}" + (f"; {higher} too high" if higher else "")
                        + ("" if not np.isnan(dist).any() else "; some are NaN (never written?)"))
    again = sweep(dist, C)
    lowered = again < dist
    if lowered.any():
        r, c = np.argwhere(lowered)[0]
        problems.append(f"{what}: not converged: one more Bellman-Ford sweep still lowers {int(lowered.sum())} "
                        f"cell(s), first row {r}, col {c}: {dist[r, c]:.7g} -> {again[r, c]:.7g}"
                        + "".join(f"{HINTED}{h}" for h in wrong_patterns.once([stalled_hint(dist, lowered, source)],
                                                                           said)))
    if dist.reshape(-1)[source] != 0:
        problems.append(f"{what}: the distance at the source is {dist.reshape(-1)[source]:.7g}, not 0 (the "
                        "source's own cost is not counted)")
    return problems


def _solve(fns, A, B, stop_early: bool):
    max_rounds = None
    if stop_early:      # a broken host loop, for the tests: stop one sweep before the last change
        rounds = shortest_paths(A, B, functions=fns)["rounds"]
        max_rounds = max(1, max(rounds) - 2)
    return shortest_paths(A, B, functions=fns, max_rounds=max_rounds)


def _reference_c(A, B):
    drv = drivers()[0]
    c, M, N = top2.sgemm_on_device(A, B)
    C = np.empty((M, N), np.float32)
    drv.memcpy_dtoh(C, c)
    c.free()
    return C


def _collect(source: str, seed: int, ctx: Context, stop_early: bool = False) -> Outputs:
    """Each shape's distance maps, path and cost, and the grader's C (its SGEMM on the device)."""
    meta, fns = start_collect(SSSP, source, prepare=top2.compiled_top2)
    if fns is None:
        return meta, {}
    rng = np.random.default_rng(seed)
    drv = driver_of(fns["sssp_relax"])
    shape_inputs = [inputs(i, rng) for i in range(len(SHAPES))]
    meta["shapes"], arrays = [], {}
    for i, (A, B) in enumerate(shape_inputs):
        try:
            with launch_budget(("sssp", i), emulated=not ctx.gpu):
                out = _solve(fns, A, B, stop_early)
        except launch_errors(drv) as e:
            meta["shapes"].append({"failure": launch_failure(drv, e)})
            break
        meta["shapes"].append({"rounds": [int(r) for r in out["rounds"]], "cost": float(out["cost"]),
                               "path": [[int(x) for x in p] for p in (out["path"] or [])]})
        arrays.update({f"C{i}": _reference_c(A, B), f"dist1_{i}": out["dist1"], f"dist2_{i}": out["dist2"]})
    return meta, arrays


def _judged_shapes(meta: dict, arrays: dict, seed: int):
    """(what, C, minimums, collected data, index) per shape that ran, or (what, problem) where it did not."""
    rng = np.random.default_rng(seed)
    ran = list(meta.get("shapes", []))
    for i, (M, N, K) in enumerate(SHAPES):
        A, B = inputs(i, rng)
        what = f"M={M} N={N} K={K}"
        if i >= len(ran):
            yield what, "the grading process returned nothing for this shape"
            return
        if ran[i].get("failure"):
            yield what, ran[i]["failure"]
            return
        C = returned_matrix(arrays.get(f"C{i}"), (M, N))
        if C is None or not sgemm.compare(C, A, B).ok:
            yield what, "the grading process returned no right C from the reference SGEMM"
            return
        yield what, C, top2.reference_top2(C, N), ran[i], i


def collect_distances(source: str, seed: int, ctx: Context, stop_early: bool = False) -> Outputs:
    return _collect(source, seed, ctx, stop_early)


def judge_distances(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "sssp-distances"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    lines, ok, rounds, said = [], True, {}, set()
    for what, *rest in _judged_shapes(meta, arrays, seed):
        if len(rest) == 1:
            ok = False
            lines.append(f"{what}: {rest[0]}")
            break
        C, (m1, m2), data, i = rest
        N = C.shape[1]
        problems = []
        for k, (m, key) in enumerate(((m1, f"dist1_{i}"), (m2, f"dist2_{i}"))):
            d = returned_matrix(arrays.get(key), C.shape)
            where = f"{what}, distances from minimum {k + 1} (row {m[1]}, col {m[2]})"
            problems += [f"{where}: the grading process returned no map"] if d is None else \
                compare_map(d, C, m[1] * N + m[2], where, said)
        rounds[what] = data.get("rounds")
        if problems:
            # The first shape wrong in full; then its first line and any with a cause not said yet.
            lines += problems[:SHOW] if ok else problems[:1] + [p for p in problems[1:] if HINTED in p]
            ok = False
        else:
            lines.append(f"{what}: both maps right ({data['rounds'][0]} and {data['rounds'][1]} launches)")
    head = (f"both distance maps match Dijkstra on all {len(SHAPES)} shapes" if ok else "wrong") + \
        f" (random seed {seed}; float64 Dijkstra, edge u -> v weighs C[v])"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed, "rounds": rounds},
                            output=meta.get("log", ""))



def check_path(path, C: np.ndarray, m1, m2, cost: float, what: str) -> list[str]:
    M, N = C.shape
    if not path:
        return [f"{what}: {NO_PATH}"]
    cells = [tuple(int(x) for x in p) for p in path]
    problems = []
    if cells[0] != (m1[1], m1[2]):
        problems.append(f"{what}: the path starts at {cells[0]}, not at the first minimum {(m1[1], m1[2])}")
    if cells[-1] != (m2[1], m2[2]):
        problems.append(f"{what}: the path ends at {cells[-1]}, not at the second minimum {(m2[1], m2[2])}")
    for i, (a, b) in enumerate(zip(cells, cells[1:])):
        if abs(a[0] - b[0]) + abs(a[1] - b[1]) != 1 or not (0 <= b[0] < M and 0 <= b[1] < N):
            problems.append(f"{what}: step {i} goes from {a} to {b}: not 4-neighbours")
            break
    if problems:
        return problems
    total = float(sum(float(C[r, c]) for r, c in cells[1:]))
    ref = float(dijkstra(C, m1[1] * N + m1[2])[m2[1], m2[2]])
    tol = rtol(M, N)
    if abs(total - cost) > tol * max(cost, 1e-30):
        problems.append(f"{what}: the path's cost (sum of C over its cells but the first) is {total:.7g}, the "
                        f"reported distance is {cost:.7g}")
    if abs(cost - ref) > tol * max(ref, 1e-30):
        problems.append(f"{what}: the reported distance {cost:.7g} is not Dijkstra's {ref:.7g}")
    return problems


def collect_path(source: str, seed: int, ctx: Context) -> Outputs:
    return _collect(source, seed, ctx)


def judge_path(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "sssp-path"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    lines, ok, lost = [], True, []
    for what, *rest in _judged_shapes(meta, arrays, seed):
        if len(rest) == 1:
            ok = False
            lines.append(f"{what}: {rest[0]}")
            break
        C, (m1, m2), data, _ = rest
        path = [tuple(p) for p in data.get("path", [])]
        problems = check_path(path, C, m1, m2, float(data.get("cost", float("nan"))), what)
        if problems == [f"{what}: {NO_PATH}"]:
            ok = False
            lost.append(what)
            if len(lost) == 1:
                lines.append(NO_PATH)           # said once, with every shape it happened on
        elif problems:
            ok = False
            lines += problems
        else:
            lines.append(f"{what}: a path of {len(path)} cells, cost {float(data['cost']):.7g}")
    lines = [f"{', '.join(lost)}: {line}" if line == NO_PATH else line for line in lines]
    head = (f"the path is right on all {len(SHAPES)} shapes" if ok else "wrong") + f" (random seed {seed})"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed},
                            output=meta.get("log", ""))


RACES_SHAPE = (45, 39)        # 2 x 2 tiles, the last ones partial


def collect_races(source: str, seed: int, ctx: Context) -> Outputs:
    """The emulator's analysis of sssp_relax run to convergence from a corner of a random C."""
    meta, fns = start_collect(SSSP, source, on_emulator=True)
    if fns is None:
        return meta, {}
    drv = drivers(on_emulator=True)[0]
    M, N = RACES_SHAPE
    c = drv.to_device(np.random.default_rng(seed).uniform(0.5, 1.0, (M, N)).astype(np.float32))
    try:
        with launch_budget(("sssp", "races")), analysis.thread_order(0), analysis.analysis() as report:
            dist, _ = sssp_distances(fns["sssp_relax"], c, M, N, 0)
        meta["report"] = analysis.report_data(report)
        found = np.empty(M * N, np.float32)
        drv.memcpy_dtoh(found, dist)
        dist.free()
        meta["reached"] = int(np.isfinite(found).sum())
    except launch_errors(drv) as e:
        meta["failure"] = launch_failure(drv, e)
    return meta, {}


def judge_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, name = outputs[0], "sssp-races"
    log = meta.get("log", "")
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    if meta.get("failure") or "report" not in meta:
        return CheckResult.make(name, False, meta.get("failure") or "the grading process returned no analysis",
                                details={"seed": seed}, output=log)
    report = analysis.report_from(meta["report"])
    problems = []
    if report.races:
        problems.append(f"{len(report.races)} race(s) on shared memory - a missing __syncthreads() between "
                        "loading the tile and relaxing it, or between a relaxation's reads and its writes? e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in report.races[:SHOW]))
    if report.out_of_bounds:
        problems.append(f"{len(report.out_of_bounds)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in report.out_of_bounds[:SHOW]))
    if not problems and meta.get("reached", 0) <= 1:     # no race found, but on a kernel that computes nothing
        problems.append(not_credited("no distance was computed (every cell but the source is still +inf)",
                                     "computes the distances", "sssp-distances"))
    M, N = RACES_SHAPE
    head = "no races on shared memory, no out-of-bounds accesses" if not problems else "\n".join(problems)
    return CheckResult.make(name, not problems, f"{head} (M={M} N={N}, random seed {seed})",
                            details={"seed": seed}, output=log)


CHECKS = (Check("sssp-distances", collect_distances, judge_distances, timeout=300, hang_hint=SSSP_HANG),
          Check("sssp-path", collect_path, judge_path, timeout=300, hang_hint=SSSP_HANG),
          Check("sssp-races", collect_races, judge_races, timeout=300, hang_hint=SSSP_HANG))

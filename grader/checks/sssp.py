"""Lab 8 checks: shortest paths on the grid graph of C (solutions/sssp.cu).

Convention: one vertex per cell of C, edges between 4-neighbours, the edge
u -> v weighs C[v] (entering v costs C[v]); the source's own cost is not
counted. Sources: the two minimums of C.

    run_distances(source, seed)  both distance maps against scipy's Dijkstra in float64 (relative
                                 tolerance RTOL_PER_HOP * (M + N + 2): float32 sums of that many
                                 positive terms) and converged (one more float32 Bellman-Ford sweep in
                                 numpy changes nothing)
    run_path(source, seed)       the path from the first minimum to the second: 4-connected, starts and
                                 ends at the minimums, its cost (sum of C over every cell but the first)
                                 equals the reported distance and Dijkstra's
"""
from __future__ import annotations

import numpy as np

from .. import top2
from ..backend import drivers
from ..report import CheckResult
from ..sgemm import driver_of
from ..shortest_paths import SSSP, dijkstra, shortest_paths, sweep
from .common import launch_errors, launch_failure, start_kernels

SHAPES = [(1, 2, 4), (1, 70, 8), (67, 1, 8), (45, 39, 16), (100, 130, 16), (150, 97, 8)]
RTOL_PER_HOP = 2.0 ** -22
SHOW = 3


def rtol(M: int, N: int) -> float:
    return RTOL_PER_HOP * (M + N + 2)


def compare_map(dist: np.ndarray, C: np.ndarray, source: int, what: str) -> list[str]:
    M, N = C.shape
    problems = []
    ref = dijkstra(C, source)
    tol = rtol(M, N)
    bad = ~(np.abs(dist.astype(np.float64) - ref) <= tol * np.maximum(ref, 1e-30) + 1e-30)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        higher = int((dist.astype(np.float64) > ref * (1 + tol) + 1e-30).sum())
        problems.append(f"{what}: {int(bad.sum())} of {M * N} distances differ from Dijkstra's (relative "
                        f"tolerance {tol:.2g}); first at row {r}, col {c}: expected {ref[r, c]:.7g}, got "
                        f"{dist[r, c]:.7g}" + (f"; {higher} too high: the relaxation stopped before it "
                                               "converged (a sweep too few?)" if higher else "")
                        + ("" if not np.isnan(dist).any() else "; some are NaN (never written?)"))
    again = sweep(dist, C)
    lowered = again < dist
    if lowered.any():
        r, c = np.argwhere(lowered)[0]
        problems.append(f"{what}: not converged: one more Bellman-Ford sweep still lowers {int(lowered.sum())} "
                        f"cell(s), first row {r}, col {c}: {dist[r, c]:.7g} -> {again[r, c]:.7g} (the host "
                        "loop or the kernel stopped one sweep early?)")
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


def run_distances(source: str, seed: int | None = None, stop_early: bool = False) -> CheckResult:
    name = "sssp-distances"
    start = start_kernels(name, SSSP, source, seed)
    if isinstance(start, CheckResult):
        return start
    seed, fns, log = start
    rng = np.random.default_rng(seed)
    drv = driver_of(fns["sssp_relax"])
    lines, ok, rounds = [], True, {}
    for M, N, K in SHAPES:
        A, B = top2.inputs(M, N, K, rng)
        what = f"M={M} N={N} K={K}"
        try:
            out = _solve(fns, A, B, stop_early)
        except launch_errors(drv) as e:
            ok = False
            lines.append(f"{what}: {launch_failure(drv, e)}")
            break
        C = _reference_c(A, B)
        (m1, m2) = top2.reference_top2(C, N)
        problems = []
        for i, (m, d) in enumerate(((m1, out["dist1"]), (m2, out["dist2"]))):
            problems += compare_map(d, C, m[1] * N + m[2], f"{what}, distances from minimum {i + 1} "
                                    f"(row {m[1]}, col {m[2]})")
        rounds[what] = out["rounds"]
        if problems:
            ok = False
            lines += problems[:SHOW]
        else:
            lines.append(f"{what}: both maps right ({out['rounds'][0]} and {out['rounds'][1]} launches)")
    head = (f"both distance maps match Dijkstra on all {len(SHAPES)} shapes" if ok else "wrong") + \
        f" (random seed {seed}; float64 Dijkstra, edge u -> v weighs C[v])"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed, "rounds": rounds},
                            output=log)


def check_path(path, C: np.ndarray, m1, m2, cost: float, what: str) -> list[str]:
    M, N = C.shape
    if not path:
        return [f"{what}: no path came back (the walk from the target found no predecessor or ran too long)"]
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


def run_path(source: str, seed: int | None = None) -> CheckResult:
    name = "sssp-path"
    start = start_kernels(name, SSSP, source, seed)
    if isinstance(start, CheckResult):
        return start
    seed, fns, log = start
    rng = np.random.default_rng(seed)
    drv = driver_of(fns["sssp_relax"])
    lines, ok = [], True
    for M, N, K in SHAPES:
        A, B = top2.inputs(M, N, K, rng)
        what = f"M={M} N={N} K={K}"
        try:
            out = shortest_paths(A, B, functions=fns)
        except launch_errors(drv) as e:
            ok = False
            lines.append(f"{what}: {launch_failure(drv, e)}")
            break
        C = _reference_c(A, B)
        m1, m2 = top2.reference_top2(C, N)
        problems = check_path(out["path"], C, m1, m2, out["cost"], what)
        if problems:
            ok = False
            lines += problems
        else:
            lines.append(f"{what}: a path of {len(out['path'])} cells, cost {out['cost']:.7g}")
    head = (f"the path is right on all {len(SHAPES)} shapes" if ok else "wrong") + f" (random seed {seed})"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed}, output=log)

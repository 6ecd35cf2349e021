"""Lab 8, shortest paths on the grid graph of C: host drivers for the kernels
of solutions/sssp.cu (sssp_relax, relaunched until a round changes nothing,
and sssp_path, the walk back from the target), lab 8 end to end on the
device, and the references (scipy's Dijkstra, one float32 Bellman-Ford sweep).

The graph: a vertex per cell of C, edges between 4-neighbours, the edge
u -> v weighs C[v] (entering v costs C[v]; the source's own cost is not
counted, dist = 0 at the source). Sources: the two minimums of C (grader.kernels.top2).
"""
from __future__ import annotations

import numpy as np

from grader.kernels import top2
from grader.kernels.sgemm import driver_of
from grader.kernels.stages import cdiv
from grader.platform.compiler import Kernels

SSSP = Kernels("sssp.cu", ("sssp_relax", "sssp_path"))
SSSP_TILE = 32


def sssp_distances(relax, c_ptr, M: int, N: int, source: int, max_rounds: int | None = None):
    """Distances from cell `source` (row-major index) with the sssp_relax kernel:
    relaunch until a round changes nothing, reading back one int per round.
    (dist allocation, rounds launched)."""
    drv = driver_of(relax)
    tx, ty = cdiv(N, SSSP_TILE), cdiv(M, SSSP_TILE)
    dist = drv.mem_alloc(4 * M * N)
    drv.memset_d32(dist, 0x7F800000, M * N)                      # +inf
    drv.memcpy_htod(int(dist) + 4 * source, np.zeros(1, np.float32))
    stamp = drv.mem_alloc(4 * tx * ty)
    drv.memset_d32(stamp, 0xFFFFFFFF, tx * ty)                   # -1: never changed
    src_tile = (source // N // SSSP_TILE) * tx + (source % N) // SSSP_TILE
    drv.memcpy_htod(int(stamp) + 4 * src_tile, np.zeros(1, np.int32))
    last = drv.to_device(np.zeros(1, np.int32))
    flag = np.zeros(1, np.int32)
    limit = max_rounds if max_rounds is not None else 4 * M * N + 8
    rounds = 0
    while rounds < limit:
        rounds += 1
        relax(np.int32(M), np.int32(N), c_ptr, dist, stamp, np.int32(rounds), last,
              grid=(tx, ty, 1), block=(SSSP_TILE, SSSP_TILE, 1))
        drv.memcpy_dtoh(flag, last)
        if flag[0] != rounds:
            break
    stamp.free()
    last.free()
    return dist, rounds


def sssp_path(path_kernel, c_ptr, dist_ptr, M: int, N: int, source: int, target: int):
    """The path source -> target (list of (row, col)) from the converged distance
    map, walked on the device; None when the walk got lost."""
    drv = driver_of(path_kernel)
    max_len = M * N
    path = drv.mem_alloc(4 * max_len)
    length = drv.to_device(np.zeros(1, np.int32))
    path_kernel(np.int32(M), np.int32(N), c_ptr, dist_ptr, np.int32(source), np.int32(target), path,
                np.int32(max_len), length, grid=(1, 1, 1), block=(32, 1, 1))
    n = np.zeros(1, np.int32)
    drv.memcpy_dtoh(n, length)
    cells = None
    if n[0] > 0:
        flat = np.empty(int(n[0]), np.int32)
        drv.memcpy_dtoh(flat, path)
        cells = [(int(i) // N, int(i) % N) for i in flat]
    path.free()
    length.free()
    return cells


def shortest_paths(A: np.ndarray, B: np.ndarray, sssp_source: str | None = None, top2_function=None,
                   max_rounds: int | None = None, functions=None) -> dict:
    """Lab 8 end to end, on the device: C, its two minimums, both distance maps
    (read back: they are the output), the path from the first minimum to the second."""
    fns = functions or SSSP.compile(sssp_source)[0]
    top2_function = top2_function or top2.compiled_top2()
    drv = driver_of(fns["sssp_relax"])
    c, M, N = top2.sgemm_on_device(A, B)
    m1, m2 = top2.minimums_at(c, M, N, top2_function)
    s1, s2 = m1[1] * N + m1[2], m2[1] * N + m2[2]
    maps, rounds = [], []
    for i, s in enumerate((s1, s2)):
        d, r = sssp_distances(fns["sssp_relax"], c, M, N, s, max_rounds)
        host = np.empty((M, N), np.float32)
        drv.memcpy_dtoh(host, d)
        maps.append(host)
        rounds.append(r)
        if i == 0:
            path = sssp_path(fns["sssp_path"], c, d, M, N, s1, s2)
            cost = float(host.reshape(-1)[s2])
        d.free()
    c.free()
    return {"minimums": (m1, m2), "dist1": maps[0], "dist2": maps[1], "cost": cost, "path": path,
            "rounds": rounds}


# ---- references -------------------------------------------------------------------------------
def grid_graph(C: np.ndarray):
    """CSR matrix of the grid graph: u -> v for 4-neighbours, weight C[v] (float64)."""
    from scipy.sparse import csr_matrix  # scipy: only the references need it
    M, N = C.shape
    idx = np.arange(M * N).reshape(M, N)
    src, dst = [], []
    for a, b in ((idx[:-1, :], idx[1:, :]), (idx[:, :-1], idx[:, 1:])):
        src += [a.ravel(), b.ravel()]
        dst += [b.ravel(), a.ravel()]
    src, dst = np.concatenate(src), np.concatenate(dst)
    w = C.reshape(-1).astype(np.float64)[dst]
    return csr_matrix((w, (src, dst)), shape=(M * N, M * N))


def dijkstra(C: np.ndarray, source: int) -> np.ndarray:
    """Distances from cell `source` in float64 (scipy)."""
    from scipy.sparse.csgraph import dijkstra as _dijkstra
    return _dijkstra(grid_graph(C), directed=True, indices=source).reshape(C.shape)


def sweep(dist: np.ndarray, C: np.ndarray) -> np.ndarray:
    """One Jacobi Bellman-Ford sweep in float32: min(dist, min over neighbours + C)."""
    inf = np.float32(np.inf)
    p = np.pad(dist, 1, constant_values=inf)
    best = np.minimum(np.minimum(p[:-2, 1:-1], p[2:, 1:-1]), np.minimum(p[1:-1, :-2], p[1:-1, 2:]))
    return np.minimum(dist, (best + C).astype(np.float32))

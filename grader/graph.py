"""Labs 3 and 4: the two minimums of C = A B and shortest paths on the grid
graph of C. Host drivers for the kernels in solutions/top2.cu,
solutions/sgemm-top2.cu and solutions/sssp.cu (or a student's versions of
them), a counter of device-to-host bytes, and the notebook entry points

    grader.check_graph(kind, SOURCE)              -> Report (every check of that kind)
    grader.grade_graph(kind, SOURCE, check, pts)  -> points (one hidden test cell)
    grader.check_host_minimums(function)          -> Report (a student's host function)

kind: "top2", "sgemm-top2" or "sssp". Every check of a kernel source runs in
its own process (grader.isolation), so a crash or
hang costs that check only and nothing reaches stderr.

Conventions (also in the labs): A (M x K) and B (K x N) uniform in [0, 1), so
C >= 0. A minimum is (value, row, col); the two minimums are the two smallest
entries of C at distinct positions, ties to the smaller row-major index. The
graph: a vertex per cell, edges between 4-neighbours, the edge u -> v weighs
C[v] (entering v costs C[v]; the source's own cost is not counted, dist = 0 at
the source).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .checks.common import CompileFailed
from .sgemm import driver_of
from .stages import SOLUTIONS_DIR, cdiv

EMPTY_KEY = (1 << 64) - 1
TOP2_THREADS = 256
SSSP_TILE = 32
# kind -> (solution file, kernels it must define)
KINDS = {"top2": ("top2.cu", ("top2",)),
         "sgemm-top2": ("sgemm-top2.cu", ("sgemm_top2",)),
         "sssp": ("sssp.cu", ("sssp_relax", "sssp_path"))}
SGEMM_STAGE = "smem-tiling"


def solution(kind: str) -> str:
    return (SOLUTIONS_DIR / KINDS[kind][0]).read_text()


def inputs(M: int, N: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A and B uniform in [0, 1): C = A B is non-negative."""
    return (rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32))


# ---- backend ---------------------------------------------------------------------------------
def driver(emulator: bool = False):
    from .checks.common import drivers
    return drivers(emulator)[0]


def compile_kernels(kind: str, source: str | None = None, emulator: bool = False, options=()):
    """({name: Function}, compiler log) for a kind's kernels; raises CompileFailed."""
    from .checks.common import captured, drivers
    drv, SourceModule = drivers(emulator)
    source = solution(kind) if source is None else source
    with captured() as log:
        try:
            module = SourceModule(source, options=list(options))
        except drv.CompileError as e:
            raise CompileFailed(str(e)) from None
        functions = {}
        for name in KINDS[kind][1]:
            try:
                functions[name] = module.get_function(name)
            except drv.LogicError:
                raise CompileFailed(f"the source compiles but has no kernel named '{name}' "
                                    "(check the name)") from None
    extra = getattr(module, "compile_log", "")
    return functions, "\n".join(([extra] if extra else []) + log).strip()


# ---- device-to-host byte counter --------------------------------------------------------------
class Transfers:
    def __init__(self):
        self.bytes = 0
        self.calls = 0


@contextlib.contextmanager
def count_dtoh(*drivers):
    """Count the bytes copied device -> host (memcpy_dtoh[_async], and through
    them GPUArray.get, pycuda.driver.Out and from_device) while inside."""
    t = Transfers()
    saved = []
    mods = list(drivers) or [driver()]
    for mod in mods:
        for name in ("memcpy_dtoh", "memcpy_dtoh_async"):
            original = getattr(mod, name, None)
            if original is None or getattr(original, "_graph_counted", False):
                continue

            def wrapped(dest, src, *a, _original=original, **k):
                t.bytes += int(np.asarray(dest).nbytes)
                t.calls += 1
                return _original(dest, src, *a, **k)
            wrapped._graph_counted = True
            saved.append((mod, name, original))
            setattr(mod, name, wrapped)
    try:
        yield t
    finally:
        for mod, name, original in reversed(saved):
            setattr(mod, name, original)


# ---- the two minimums ---------------------------------------------------------------------------
def unpack(key: int, N: int) -> tuple[float, int, int]:
    value = float(np.array([key >> 32], dtype=np.uint32).view(np.float32)[0])
    index = key & 0xFFFFFFFF
    return value, index // N, index % N


def reference_top2(x: np.ndarray, N: int) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
    """numpy: the two smallest entries at distinct positions, ties to the smaller index."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    i1 = int(np.argmin(flat))                     # argmin: the first of equal values
    cands = []
    if i1 > 0:
        cands.append(int(np.argmin(flat[:i1])))
    if i1 + 1 < flat.size:
        cands.append(i1 + 1 + int(np.argmin(flat[i1 + 1:])))
    i2 = min(cands, key=lambda i: (flat[i], i))
    return tuple((float(flat[i]), i // N, i % N) for i in (i1, i2))


def top2_blocks(n: int) -> int:
    return max(1, min(cdiv(max(n, 1), 4 * TOP2_THREADS), 132 * 8))


def top2_keys(function, x_ptr, n: int, blocks: int | None = None) -> tuple[int, int]:
    """Launch the top2 kernel on n floats at x_ptr; read back the two keys (16 bytes)."""
    drv = driver_of(function)
    out = drv.to_device(np.full(2, EMPTY_KEY, dtype=np.uint64))
    function(x_ptr, np.int32(n), out, grid=(blocks or top2_blocks(n), 1, 1), block=(TOP2_THREADS, 1, 1))
    keys = np.empty(2, dtype=np.uint64)
    drv.memcpy_dtoh(keys, out)
    out.free()
    return int(keys[0]), int(keys[1])


def sgemm_on_device(A: np.ndarray, B: np.ndarray, stage_id: str = SGEMM_STAGE, function=None):
    """C = A B with a reference SGEMM stage; C stays on the device: (c allocation, M, N)."""
    from . import sgemm
    from .stages import stage
    st = stage(stage_id)
    function = function or sgemm.compile_kernel(st)
    drv = driver_of(function)
    M, K = A.shape
    N = B.shape[1]
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = drv.mem_alloc(4 * M * N)
    launch = st.launch(M, N, K)
    function(np.int32(M), np.int32(N), np.int32(K), a, b, c, grid=launch.grid, block=launch.block)
    drv.Context.synchronize()
    a.free()
    b.free()
    return c, M, N


def minimums(A: np.ndarray, B: np.ndarray, top2_function=None):
    """The reference host function of lab 3: SGEMM on the GPU, then top2 on the
    GPU; only 16 bytes come back. ((value, row, col), (value, row, col))."""
    top2_function = top2_function or compile_kernels("top2")[0]["top2"]
    c, M, N = sgemm_on_device(A, B)
    k1, k2 = top2_keys(top2_function, c, M * N)
    c.free()
    return unpack(k1, N), unpack(k2, N)


def fused_keys(function, A: np.ndarray, B: np.ndarray, keep_c: bool = False):
    """The fused kernel: (k1, k2, C or None)."""
    drv = driver_of(function)
    M, K = A.shape
    N = B.shape[1]
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = drv.to_device(np.full(M * N, np.nan, dtype=np.float32))
    out = drv.to_device(np.full(2, EMPTY_KEY, dtype=np.uint64))
    function(np.int32(M), np.int32(N), np.int32(K), a, b, c, out,
             grid=(cdiv(N, 32), cdiv(M, 32), 1), block=(32, 32, 1))
    keys = np.empty(2, dtype=np.uint64)
    drv.memcpy_dtoh(keys, out)
    C = None
    if keep_c:
        C = np.empty((M, N), dtype=np.float32)
        drv.memcpy_dtoh(C, c)
    for x in (a, b, c, out):
        x.free()
    return int(keys[0]), int(keys[1]), C


# ---- shortest paths -----------------------------------------------------------------------------
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
    """Lab 4 end to end, on the device: C, its two minimums, both distance maps
    (read back: they are the output), the path from the first minimum to the second."""
    fns = functions or compile_kernels("sssp", sssp_source)[0]
    top2_function = top2_function or compile_kernels("top2")[0]["top2"]
    drv = driver_of(fns["sssp_relax"])
    c, M, N = sgemm_on_device(A, B)
    k1, k2 = top2_keys(top2_function, c, M * N)
    m1, m2 = unpack(k1, N), unpack(k2, N)
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


# ---- notebook entry points ----------------------------------------------------------------------
CHECKS = {"top2": ("top2-exact", "top2-races"),
          "sgemm-top2": ("sgemm-top2-exact", "sgemm-top2-races"),
          "sssp": ("sssp-distances", "sssp-path")}
TIMEOUT = 300.0


def check_function(name: str):
    from .checks import minimums, sssp
    return {"top2-exact": minimums.run_top2, "top2-races": minimums.run_top2_races,
            "sgemm-top2-exact": minimums.run_fused, "sgemm-top2-races": minimums.run_fused_races,
            "sssp-distances": sssp.run_distances, "sssp-path": sssp.run_path}[name]


def run_isolated(name: str, source: str, seed: int | None = None, timeout: float | None = None):
    """One check of a kernel source in a fresh process (see grader.isolation)."""
    from .isolation import run_in_child
    return run_in_child("grader.isolation", {"check": name, "source": source, "seed": seed}, name,
                        float(timeout or TIMEOUT), hang_hint="an endless loop? a relaxation that never stops changing?")


_CACHE: dict = {}


def check_graph(kind: str, source: str, checks=None, seed: int | None = None, fresh: bool = False):
    """Every check of `kind` ("top2", "sgemm-top2", "sssp") on a kernel source, each in its own process."""
    import hashlib

    import grader
    from .report import Report
    if kind not in CHECKS:
        raise KeyError(f"no kind '{kind}'; kinds: {', '.join(CHECKS)}")
    if not isinstance(source, str):
        raise TypeError(f"the kernel source must be a string of CUDA C, not {type(source).__name__}")
    names = list(CHECKS[kind]) if checks is None else ([checks] if isinstance(checks, str) else list(checks))
    results = []
    for name in names:
        if name not in CHECKS[kind]:
            raise KeyError(f"no check '{name}' for {kind}; checks: {', '.join(CHECKS[kind])}")
        key = (name, hashlib.sha256(source.encode()).hexdigest())
        if key in _CACHE and not fresh and seed is None:
            results.append(_CACHE[key])
            continue
        r = run_isolated(name, source, seed)
        if seed is None:
            _CACHE[key] = r
        results.append(r)
    return Report(kind, results, grader.BACKEND.name)


def grade_graph(kind: str, source: str, check: str, points: float) -> float:
    """One nbgrader test cell: print the diagnosis (stdout), return the points earned."""
    return check_graph(kind, source, [check]).grade_cell(check, points)


def check_host_minimums(function, seed: int | None = None):
    """A student's host function minimums(A, B) (in this process): the right two
    minimums, and at most HOST_BYTES bytes copied from the device while it runs."""
    import grader
    from .checks import minimums as mc
    from .report import Report
    r = mc.run_host(function, seed)
    return Report("minimums (host function)", [r], grader.BACKEND.name)

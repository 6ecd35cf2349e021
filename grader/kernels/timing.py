"""Timing SGEMM on a GPU: CUDA events, warm-up, an L2 flush before every
run, the median of >= 20 runs, fresh uniform random inputs, the kernel checked
against cuBLAS (NaN fails) before its time counts, cuBLAS (CuPy, FP32, TF32
off) timed the same way on the same data, and any result above the device's
FP32 peak rejected. `time_kernel` is the project's one timing routine (bench,
the performance check, autotune and bench_graph call it). On the emulator
every timing function answers NOT_TIMED: no GPU, no figure."""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from functools import lru_cache

from grader.kernels.sgemm import launcher, tolerance
from grader.platform.backend import current as current_backend
from grader.platform.devices import device_peaks

NO_GPU = "not timed: no GPU"
MIN_REPEAT = 20


class ImpossibleResult(ValueError):
    """A measured rate above the FP32 peak: the measurement is broken."""


@dataclass(frozen=True)
class NotTimed:
    """What every timing function answers when there is nothing to time
    (no GPU), or when timing was skipped (the reason says why)."""
    reason: str = NO_GPU
    ok = False

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


NOT_TIMED = NotTimed()


@dataclass
class Timing:
    times_s: list[float]
    ok = True

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def runs(self) -> int:
        return len(self.times_s)


def on_gpu() -> bool:
    """True only with real PyCUDA on a GPU (never on the emulator)."""
    import pycuda.driver as drv

    return current_backend().name == "gpu" and not getattr(drv, "EMULATED", False)


def _context():
    """The primary context, shared with CuPy (pycuda.autoinit would make another)."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    return drv


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError(f"CuPy is needed for the cuBLAS baseline and the inputs ({e})") from None
    if os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0"):
        raise RuntimeError("unset CUPY_CUDA_PER_THREAD_DEFAULT_STREAM: timing assumes CuPy and "
                           "PyCUDA share the legacy default stream")
    return cupy


# ---- peak ------------------------------------------------------------------------------
def fp32_peak(device=None) -> float | NotTimed:
    """The GPU's FP32 peak in FLOP/s, from its attributes (NOT_TIMED on the emulator)."""
    if not on_gpu():
        return NOT_TIMED
    drv = _context()
    return device_peaks(device if device is not None else drv.Context.get_device())[0]


def gflops(M: int, N: int, K: int, seconds) -> float | NotTimed:
    """2MNK / seconds / 1e9; refuses emulator times and anything not timed."""
    if isinstance(seconds, NotTimed):
        return seconds
    if isinstance(seconds, Timing):
        seconds = seconds.median_s
    if not on_gpu():
        return NOT_TIMED
    return 2.0 * M * N * K / seconds / 1e9


def check_plausible(gflops_value: float, peak_flops: float, what: str) -> None:
    """Raise ImpossibleResult when a rate exceeds the FP32 peak."""
    if gflops_value * 1e9 > peak_flops:
        raise ImpossibleResult(f"{what}: {gflops_value:.0f} GFLOPS is above the FP32 peak of "
                               f"{peak_flops / 1e9:.0f} GFLOPS: impossible, so rejected (TF32? zeros? "
                               "a kernel that skips work?)")


# ---- timing ----------------------------------------------------------------------------
class L2Flush:
    """Overwrites a buffer of 4x the L2 size (from the device attribute)."""

    def __init__(self):
        drv = _context()
        l2 = drv.Context.get_device().get_attribute(drv.device_attribute.L2_CACHE_SIZE)
        self.words = max(4 * l2, 64 << 20) // 4
        self.buffer = drv.mem_alloc(self.words * 4)
        self.count = 0

    def __call__(self) -> None:
        import pycuda.driver as drv
        self.count += 1
        drv.memset_d32(self.buffer, self.count, self.words)


@lru_cache(maxsize=None)
def l2_flush() -> L2Flush:
    """The process's one flush buffer (allocated on first use)."""
    return L2Flush()


def time_kernel(launch_fn, repeat: int = MIN_REPEAT, warmup: int = 3, flush: bool = True,
                budget_s: float | None = None):
    """The one timing routine: `repeat` (>= 20) runs of `launch_fn()` (which
    enqueues work on the default stream) timed with CUDA events, each after an
    L2 flush, after `warmup` untimed runs. Returns a Timing (its median_s is
    the published figure), NOT_TIMED on the emulator, or a NotTimed saying
    "skipped: ..." when `repeat` runs would take longer than `budget_s`."""
    timings = time_kernels([launch_fn], repeat, warmup, flush, budget_s)
    return timings[0] if isinstance(timings, list) else timings


def time_kernels(launch_fns, repeat: int = MIN_REPEAT, warmup: int = 3, flush: bool = True,
                 budget_s: float | None = None):
    """time_kernel for several launches side by side: each run is one run of
    every launch_fn in turn (A B A B ...), each timed alone after its own L2
    flush, so that clock and temperature drift reach all of them alike. A list
    of Timing in the order of launch_fns, or the NotTimed (one for all; the
    budget is for all of them together)."""
    if not on_gpu():
        return NOT_TIMED
    if repeat < MIN_REPEAT:
        raise ValueError(f"at least {MIN_REPEAT} timed runs, not {repeat}")
    drv = _context()
    flusher = l2_flush() if flush else (lambda: None)
    start, end = drv.Event(), drv.Event()
    for _ in range(max(1, warmup)):
        one = 0.0
        for fn in launch_fns:
            flusher()
            start.record()
            fn()
            end.record()
            end.synchronize()
            one += end.time_since(start) / 1e3
        if budget_s is not None and one * repeat > budget_s:
            return NotTimed(f"skipped: one run takes {one:.2f} s; {repeat} runs exceed the {budget_s:.0f} s budget")
    events = [[(drv.Event(), drv.Event()) for _ in launch_fns] for _ in range(repeat)]
    for run in events:
        for fn, (s, e) in zip(launch_fns, run):
            flusher()
            s.record()
            fn()
            e.record()
    events[-1][-1][1].synchronize()
    return [Timing([run[i][1].time_since(run[i][0]) / 1e3 for run in events]) for i in range(len(launch_fns))]


# ---- inputs, cuBLAS, verification ------------------------------------------------------
def random_matrices(M: int, N: int, K: int, seed: int):
    """Fresh uniform [-1, 1) float32 A (M x K) and B (K x N) on the GPU (CuPy)."""
    cp = _cupy()
    rs = cp.random.RandomState(seed)
    A = rs.uniform(-1.0, 1.0, (M, K), dtype=cp.float32)
    B = rs.uniform(-1.0, 1.0, (K, N), dtype=cp.float32)
    return A, B


def tf32_state() -> str:
    """Raise unless CuPy's float32 matmul uses plain FP32; describe what was checked."""
    cp = _cupy()
    if int(os.environ.get("CUPY_TF32", "0") or "0") > 0:
        raise RuntimeError("CUPY_TF32 is set: cuBLAS would use TF32 tensor cores; unset it")
    linalg = None
    for name in ("cupy._core._routines_linalg", "cupy._core._gpu._routines_linalg"):
        try:
            linalg = __import__(name, fromlist=["get_compute_type"])
            break
        except ImportError:
            continue
    if linalg is None or not hasattr(linalg, "get_compute_type"):
        return "compute type not readable in this CuPy; CUPY_TF32 unset; the peak check guards the rest"
    ct = int(linalg.get_compute_type(cp.float32))
    low = {getattr(linalg, n, v): n for n, v in
           (("COMPUTE_TYPE_FP16", 3), ("COMPUTE_TYPE_BF16", 6), ("COMPUTE_TYPE_TF32", 7))}
    if ct in low:
        raise RuntimeError(f"CuPy's float32 compute type is {low[ct]}: not an FP32 baseline")
    return f"CuPy float32 compute type {ct} (1 = default FP32, 2 = pedantic, 4 = FP32); CUPY_TF32 unset"


@dataclass
class Workload:
    """One shape's inputs, cuBLAS's product and timing, and the tolerance."""
    M: int
    N: int
    K: int
    A: object
    B: object
    C: object
    C_ref: object
    tol: object
    cublas: object
    seed: int
    notes: list[str] = field(default_factory=list)


def cublas_sgemm_time(M: int, N: int, K: int, A=None, B=None, out=None, repeat: int = MIN_REPEAT,
                      seed: int = 0, budget_s: float | None = None):
    """cuBLAS SGEMM (cupy.matmul, FP32) timed like a kernel; fresh inputs unless given."""
    if not on_gpu():
        return NOT_TIMED
    cp = _cupy()
    tf32_state()
    if A is None or B is None:
        A, B = random_matrices(M, N, K, seed)
    out = out if out is not None else cp.empty((M, N), dtype=cp.float32)
    return time_kernel(lambda: cp.matmul(A, B, out=out), repeat=repeat, budget_s=budget_s)


def make_workload(M: int, N: int, K: int, seed: int = 0, repeat: int = MIN_REPEAT,
                  budget_s: float | None = None):
    """Draw inputs, compute and time cuBLAS's product, and the per-element tolerance."""
    if not on_gpu():
        return NOT_TIMED
    cp = _cupy()
    note = tf32_state()
    A, B = random_matrices(M, N, K, seed)
    C_ref = cp.empty((M, N), dtype=cp.float32)
    timing = cublas_sgemm_time(M, N, K, A, B, C_ref, repeat=repeat, budget_s=budget_s)
    cp.matmul(A, B, out=C_ref)
    tol = tolerance(cp.matmul(cp.abs(A), cp.abs(B)), K)    # both products are float32 sums of K terms
    if not bool(cp.isfinite(C_ref).all()):
        raise RuntimeError(f"cuBLAS's product for {M}x{N}x{K} is not finite")
    C = cp.empty((M, N), dtype=cp.float32)
    return Workload(M, N, K, A, B, C, C_ref, tol, timing, seed, [note])


def verify(w: Workload) -> tuple[bool, str]:
    """w.C against cuBLAS's w.C_ref, element by element; NaN/Inf fail."""
    cp = _cupy()
    bad = ~(cp.abs(w.C - w.C_ref) <= w.tol)
    wrong = int(bad.sum())
    if wrong == 0:
        return True, "all elements match cuBLAS"
    r, c = divmod(int(cp.flatnonzero(bad)[0]), w.N)
    return False, (f"{wrong} wrong element(s); first at row {r}, column {c}: "
                   f"cuBLAS {float(w.C_ref[r, c]):.6g}, kernel {float(w.C[r, c]):.6g}")


@dataclass
class Measurement:
    status: str                      # ok, wrong, impossible, skipped, not timed, error
    detail: str = ""
    kernel: object = NOT_TIMED
    gflops: float | None = None
    cublas_gflops: float | None = None
    side_by_side: bool = False       # cuBLAS timed in the same loop as the kernel (interleaved)

    @property
    def ratio(self) -> float | None:
        if self.gflops is None or not self.cublas_gflops:
            return None
        return self.gflops / self.cublas_gflops


def measure_sgemm(function, launch, w, repeat: int = MIN_REPEAT, budget_s: float | None = None,
                  peak_flops: float | None = None, side_by_side: bool = False) -> Measurement:
    """Verify a stage kernel on w (output poisoned with NaN), time it, compare
    with cuBLAS: w.cublas, or (side_by_side) cuBLAS timed again, interleaved
    with the kernel's runs (time_kernels)."""
    if not on_gpu() or isinstance(w, NotTimed):
        return Measurement("not timed", NO_GPU)
    cp = _cupy()
    peak = peak_flops or fp32_peak()
    run = launcher(function, launch, w.M, w.N, w.K, w.A.data.ptr, w.B.data.ptr, w.C.data.ptr)
    w.C.fill(cp.nan)
    run()
    cp.cuda.Device().synchronize()
    ok, detail = verify(w)
    if not ok:
        return Measurement("wrong", detail)
    cublas = w.cublas
    if side_by_side:
        out = cp.empty_like(w.C_ref)
        timings = time_kernels([run, lambda: cp.matmul(w.A, w.B, out=out)], repeat=repeat, budget_s=budget_s)
        timing, cublas = timings if isinstance(timings, list) else (timings, None)
    else:
        timing = time_kernel(run, repeat=repeat, budget_s=budget_s)
    if not isinstance(timing, Timing):
        return Measurement("skipped", str(timing), timing)
    ok, detail = verify(w)       # the output of the last timed run, too
    if not ok:
        return Measurement("wrong", "after timing: " + detail, timing)
    g = gflops(w.M, w.N, w.K, timing)
    cb = gflops(w.M, w.N, w.K, cublas) if isinstance(cublas, Timing) else None
    try:
        check_plausible(g, peak, "kernel")
        if cb is not None:
            check_plausible(cb, peak, "cuBLAS")
    except ImpossibleResult as e:
        return Measurement("impossible", str(e), timing, g, cb)
    how = f"median of {timing.runs} runs" + (", cuBLAS interleaved" if side_by_side else "")
    return Measurement("ok", how, timing, g, cb, side_by_side)


def memory_bandwidth(nbytes: int = 1 << 30, repeat: int = MIN_REPEAT):
    """Device-to-device copy bandwidth in bytes/s (read + write counted)."""
    if not on_gpu():
        return NOT_TIMED
    drv = _context()
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    drv.memset_d32(src, 1, nbytes // 4)
    t = time_kernel(lambda: drv.memcpy_dtod_async(dst, src, nbytes), repeat=repeat, flush=False)
    src.free()
    dst.free()
    return 2 * nbytes / t.median_s


def arithmetic_intensity(M: int, N: int, K: int) -> float:
    """FLOPs per byte with the minimum traffic: A and B read once, C written once."""
    return 2.0 * M * N * K / (4.0 * (M * K + K * N + M * N))

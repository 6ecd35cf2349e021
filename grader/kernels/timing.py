"""Timing SGEMM on a GPU so that no kernel can exploit the measurement.

The protocol (measure_sgemm(s), cublas_sgemm_time): `warmup` + `repeat`
(>= 20) rounds; in each round

1. fresh inputs: A and B are generated on the device, outside the timed
   region, from two 64-bit keys the host draws for this round only
   (`secrets`); no launch has seen them before, none can predict the next;
2. each kernel in turn (the submission first, then any reference kernel it
   is compared with): C poisoned with NaN, the L2 flushed, the launch between
   two CUDA events; then A and B generated again from their keys, so that a
   kernel that wrote into its inputs does not change the reference;
3. cuBLAS (CuPy, FP32, TF32 off; for the tensor-core GEMMs, bfloat16 inputs
   and FP32 accumulation), after the submission's launch, timed the
   same way (its output poisoned, the L2 flushed; A B A B with the kernels):
   cuBLAS's product of the round's inputs is never on the device while the
   submission runs; it is checked at positions drawn after the run against
   float64 dot products, so a wrong baseline cannot pass silently;
4. every kernel's C against cuBLAS's, every element (NaN, Inf and elements
   never written fail), and its RMS error against what FP32 arithmetic gives
   (TF32 or FP16 arithmetic fails).

So every launch, warm-ups included, computes a product no launch has seen,
into an output that holds nothing, and is checked: remembering earlier
launches, counting launches, leaving work for later, writing part of C or
reading another buffer gains nothing. The figure is the median of the
`repeat` event times; a rate above the device's FP32 peak is rejected. The
rounds hold the GPU's lock (gpu_lock) exclusively: every grading process that
runs on that GPU holds it, shared, so nothing else runs on it meanwhile.

time_kernel(s) is the same loop without the inputs and the checks (events, L2
flush, warm-up, median of >= 20, the lock) for launches that bring their own
data, from trusted code only (autotune, the top-2 benchmark, copies). On the
emulator every timing function answers NOT_TIMED: no GPU, no figure."""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import secrets
import statistics
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from grader.kernels.sgemm import POISON_BITS, launcher, tolerance, value_hint
from grader.platform import settings
from grader.platform.backend import current as current_backend
from grader.platform.devices import bf16_tensor_peak, device_peaks

NO_GPU = "not timed: no GPU"
MIN_REPEAT = 20
WARMUP = 3
SAMPLES = 256           # positions of cuBLAS's product checked against float64 per run
# An output's RMS error against cuBLAS's, in units of eps * sqrt(K) * RMS(C):
# about 0.2 for FP32 arithmetic in any order (a plain running sum at K = 4096:
# 0.16; cuBLAS's own error adds in quadrature), about 33 for inputs rounded to
# 10 mantissa bits (TF32, FP16), far more for BF16. The tolerance per element
# (grader.kernels.sgemm.tolerance) is a worst-case bound that all of these pass.
MAX_PRECISION_RATIO = 4.0
LOCK_DIR = Path("/run/lock/grader-gpu") if Path("/run/lock").is_dir() else Path("/tmp/grader-gpu-locks")


class ImpossibleResult(ValueError):
    """A measured rate above the FP32 peak: the measurement is broken."""


class WrongOutput(Exception):
    """A run's output is wrong: `who` is the launch's index (len(launches): cuBLAS)."""

    def __init__(self, who: int, message: str):
        super().__init__(message)
        self.who = who


class GpuBusy(Exception):
    """The GPU's lock was not free within the time allowed."""


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
    if current_backend().name != "gpu":
        return False
    import pycuda.driver as drv  # optional: resolved once the backend is chosen
    return not getattr(drv, "EMULATED", False)


def _context():
    """The primary context, shared with CuPy (pycuda.autoinit would make another)."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    return drv


def _cupy():
    try:
        import cupy  # optional: only where there is a GPU
    except ImportError as e:
        raise RuntimeError(f"CuPy is needed for the cuBLAS baseline and the inputs ({e})") from None
    if os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0"):
        raise RuntimeError("unset CUPY_CUDA_PER_THREAD_DEFAULT_STREAM: timing assumes CuPy and "
                           "PyCUDA share the legacy default stream")
    return cupy


# ---- the GPU's lock --------------------------------------------------------------------
# A grading process times under the GPU's lock (exclusive). Where workers share a GPU (class grading,
# GRADER_GPU_LOCK), the grader's processes hold that lock shared for every sandboxed process they start
# (held_for_child), which cannot see it; one that times asks its parent over a pipe to hold it
# exclusively around each timed section (held_by_parent), so the GPU is alone only while a kernel is timed.
EXCLUSIVE, SHARED = "exclusive", "shared"
NOTEBOOK = "notebook"      # a notebook's run at autograde time, held shared for it: its own timings are shown, not graded
ALONE, TOGETHER, GRANTED, BUSY = b"X", b"S", b"G", b"B"     # a child's requests to its parent, and the answers
_held: str | None = None   # the mode this process holds, or its parent holds for it (held_by_parent)
_parent: tuple[int, int] | None = None     # (ask, answer): the pipe to a parent that holds the lock for this process


def lock_dir() -> Path:
    """LOCK_DIR, made when missing and open to every user (sticky, like /tmp)."""
    if not LOCK_DIR.is_dir():
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):       # another user's folder: theirs to open
            os.chmod(LOCK_DIR, 0o1777)
    return LOCK_DIR


def _device():
    """The device this process's kernels run on (the current context's, else device 0: a grading process
    makes its context on device 0 of the same CUDA_VISIBLE_DEVICES), without making a context."""
    import pycuda.driver as drv  # optional: only on a GPU
    drv.init()
    current = None
    with contextlib.suppress(Exception):        # no context yet: device 0
        current = drv.Context.get_current()
    return current.get_device() if current is not None else drv.Device(0)


def lock_path(device=None) -> Path:
    """The current GPU's lock file, named by its PCI bus id: the same in every
    process of the machine, whatever CUDA_VISIBLE_DEVICES says."""
    device = device if device is not None else _device()
    return lock_dir() / ("gpu-" + re.sub(r"[^0-9A-Za-z]+", "-", device.pci_bus_id()).strip("-").lower() + ".lock")


def grading_lock() -> Path | None:
    """The lock of a GPU that workers share (GRADER_GPU_LOCK, set by class grading for its GPU workers),
    which the grader's processes hold for the processes they start; None elsewhere, where each grading
    process takes the GPU's own lock around its timed runs (gpu_lock)."""
    chosen = settings.current().gpu_lock
    return Path(chosen) if chosen else None


def _gate(path: Path) -> Path:
    return path.with_name(path.name + ".gate")


def _flock(fd: int, mode: int, deadline: float | None, wait_s: float | None, stop=None) -> None:
    if deadline is None and stop is None:
        fcntl.flock(fd, mode)
        return
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if (deadline is not None and time.monotonic() >= deadline) or (stop is not None and stop.is_set()):
                raise GpuBusy(f"the GPU was busy timing other submissions for {wait_s:g} s") from None
            time.sleep(0.05)


def _log(mode: str, start: float, end: float) -> None:
    """One line in GRADER_GPU_LOCK_LOG, where it is set: who held the lock, how, when (time.monotonic)."""
    log = settings.current().gpu_lock_log
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{mode} {start:.6f} {end:.6f} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


class _Holding:
    """This process's holding of a lock file, shared or exclusive; each span in one mode is logged.

    Every request passes a gate first (a second file, held exclusively while waiting): one waiting to
    time keeps new shared holders out, so that a stream of them cannot starve it (flock alone favours
    none)."""

    def __init__(self, path: Path, mode: str, wait_s: float | None):
        self.path, self.wait_s = Path(path), wait_s
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o666)      # flock needs no write access
        try:
            self._take(mode)
        except BaseException:
            os.close(self.fd)
            raise
        self.mode, self.since = mode, time.monotonic()

    def _take(self, mode: str, stop=None) -> None:
        deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
        gate = os.open(_gate(self.path), os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            _flock(gate, fcntl.LOCK_EX, deadline, self.wait_s, stop)
            _flock(self.fd, fcntl.LOCK_SH if mode == SHARED else fcntl.LOCK_EX, deadline, self.wait_s, stop)
        finally:
            os.close(gate)                      # the gate is open again

    def change(self, mode: str, stop=None) -> None:
        """Hold it in `mode` now: released, then asked for again through the gate like a new request
        (flock's own conversion releases first too, and a holder waiting at the gate for this lock would
        wait forever for one that kept it meanwhile). A request that fails (GpuBusy) is followed by one for
        the shared lock before it raises."""
        if mode == self.mode:
            return
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        _log(self.mode, self.since, time.monotonic())
        try:
            self._take(mode, stop)
        except GpuBusy:
            self._take(SHARED)
            self.mode, self.since = SHARED, time.monotonic()
            raise
        self.mode, self.since = mode, time.monotonic()

    def release(self) -> None:
        _log(self.mode, self.since, time.monotonic())
        os.close(self.fd)


@contextlib.contextmanager
def gpu_lock(path=None, wait_s: float | None = None, shared: bool = False):
    """Hold the GPU's lock (flock on `path`, default lock_path()): exclusive
    around a timed section, so that no other process times, or runs a kernel
    under the shared lock, meanwhile; `shared` for other GPU work. Raises
    GpuBusy after `wait_s` seconds of waiting (None: as long as it takes).
    Inside a lock this process holds, it is a no-op; inside one its parent holds
    shared for it, the parent is asked to hold it exclusively meanwhile."""
    global _held
    if _held is not None:
        if _held == SHARED and not shared:
            with _alone_by_parent():
                yield
            return
        yield
        return
    holding = _Holding(path if path is not None else lock_path(), SHARED if shared else EXCLUSIVE, wait_s)
    _held = holding.mode
    try:
        yield
    finally:
        _held = None
        holding.release()


@contextlib.contextmanager
def _alone_by_parent():
    """The GPU alone for a timed section of a process whose parent holds the lock shared for it."""
    global _held
    if _parent is None:
        raise RuntimeError("a kernel timed under the GPU's shared lock: the check that times must say so "
                           "(Check.times_kernels), so that its parent holds the lock for it on request")
    ask, answer = _parent
    os.write(ask, ALONE)
    if os.read(answer, 1) != GRANTED:
        raise GpuBusy("the GPU was busy timing other submissions for longer than the grader waits")
    _held = EXCLUSIVE
    try:
        yield
    finally:
        os.write(ask, TOGETHER)
        os.read(answer, 1)          # shared again: another's timed section may have come first
        _held = SHARED


def held_by_parent(mode: str, pipe: tuple[int, int] | None = None) -> None:
    """In a sandboxed process whose trusted parent holds the lock for it (held_for_child): gpu_lock opens
    nothing (the process cannot see the lock); timing under the shared one asks the parent over `pipe`."""
    global _held, _parent
    if mode not in (SHARED, NOTEBOOK):
        raise ValueError(f"the GPU's lock is held {SHARED} or for a {NOTEBOOK} by a parent, not {mode!r}")
    _held, _parent = mode, (tuple(pipe) if pipe else None)


def held_for_notebook() -> None:
    """In a notebook's kernel at autograde time whose parent holds the lock for it (GRADER_GPU_LOCK_HELD,
    set by SandboxedExecute): its own timings run under that lock, shown and never graded."""
    if settings.current().gpu_lock_held == NOTEBOOK:
        held_by_parent(NOTEBOOK)


@dataclass
class ChildLock:
    """What held_for_child holds for a child: the mode its job names (None: no lock, it takes the GPU's
    own), the paths to hide from it, and the pipe it asks for the GPU alone over (fds to pass it)."""
    mode: str | None = None
    hidden: tuple[str, ...] = ()
    pipe: tuple[int, int] | None = None
    waited_s: float = 0.0       # spent waiting for its requests: not the child's time


@contextlib.contextmanager
def held_for_child(times: bool, wait_s: float | None = None):
    """The lock grading shares (grading_lock), held shared here for a sandboxed child this process starts
    meanwhile; a child that `times` kernels gets a pipe over which this process holds it exclusively
    for each timed section. Yields a ChildLock."""
    global _held
    path = grading_lock()
    if path is None:
        yield ChildLock()
        return
    if _held == NOTEBOOK:               # a notebook's check, under the lock held for the notebook
        yield ChildLock(NOTEBOOK)
        return
    holding = _Holding(path, SHARED, wait_s)
    _held = SHARED
    hidden = (str(lock_dir()), str(path), str(_gate(path)))
    try:
        if not times:
            yield ChildLock(SHARED, hidden)
            return
        with _serving(holding) as child:
            child.hidden = hidden
            yield child
    finally:
        _held = None
        holding.release()


@contextlib.contextmanager
def _serving(holding: _Holding):
    """A thread that changes `holding` at a child's requests (ALONE, TOGETHER) and answers each."""
    ask_r, ask_w = os.pipe()
    answer_r, answer_w = os.pipe()
    child = ChildLock(SHARED, pipe=(ask_w, answer_r))
    stop = threading.Event()

    def serve():
        while (request := os.read(ask_r, 1)) in (ALONE, TOGETHER):
            t0 = time.monotonic()
            try:
                holding.change(EXCLUSIVE if request == ALONE else SHARED, stop)
                reply = GRANTED
            except GpuBusy:
                reply = BUSY
            child.waited_s += time.monotonic() - t0
            try:
                os.write(answer_w, reply)
            except OSError:         # the child is gone
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield child
    finally:
        stop.set()
        for fd in (ask_w, answer_r):
            os.close(fd)            # with the child's copies gone, the thread reads the end of its requests
        thread.join(timeout=10)
        for fd in (ask_r, answer_w):
            os.close(fd)


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


def check_plausible(gflops_value: float, peak_flops: float, what: str, peak_name: str = "FP32") -> None:
    """Raise ImpossibleResult when a rate exceeds the peak (FP32, or BF16 tensor-core)."""
    if gflops_value * 1e9 > peak_flops:
        hint = "TF32? zeros? a kernel that skips work?" if peak_name == "FP32" else "a kernel that skips work?"
        raise ImpossibleResult(f"{what}: {gflops_value:.0f} GFLOPS is above the {peak_name} peak of "
                               f"{peak_flops / 1e9:.0f} GFLOPS: impossible, so rejected ({hint})")


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


def _budget_exceeded(one_run_s: float, repeat: int, budget_s: float | None) -> NotTimed | None:
    if budget_s is not None and one_run_s * repeat > budget_s:
        return NotTimed(f"skipped: one run takes {one_run_s:.2f} s; {repeat} runs exceed the {budget_s:.0f} s budget")
    return None


def time_kernel(launch_fn, repeat: int = MIN_REPEAT, warmup: int = WARMUP, flush: bool = True,
                budget_s: float | None = None):
    """`repeat` (>= 20) runs of `launch_fn()` (which enqueues work on the
    default stream) timed with CUDA events, each after an L2 flush, after
    `warmup` untimed runs. Returns a Timing (its median_s is the figure),
    NOT_TIMED on the emulator, or a NotTimed saying "skipped: ..." when
    `repeat` runs would take longer than `budget_s`. For trusted launches:
    a submission is timed by measure_sgemm."""
    timings = time_kernels([launch_fn], repeat, warmup, flush, budget_s)
    return timings[0] if isinstance(timings, list) else timings


def time_kernels(launch_fns, repeat: int = MIN_REPEAT, warmup: int = WARMUP, flush: bool = True,
                 budget_s: float | None = None):
    """time_kernel for several launches side by side: each run is one run of
    every launch_fn in turn (A B A B ...), each timed alone after its own L2
    flush, so that clock and temperature drift reach all of them alike. A list
    of Timing in the order of launch_fns, or the NotTimed (one for all; the
    budget is for all of them together). Holds the GPU's lock throughout."""
    if not on_gpu():
        return NOT_TIMED
    if repeat < MIN_REPEAT:
        raise ValueError(f"at least {MIN_REPEAT} timed runs, not {repeat}")
    drv = _context()
    flusher = l2_flush() if flush else (lambda: None)
    start, end = drv.Event(), drv.Event()
    with gpu_lock():
        for _ in range(max(1, warmup)):
            one = 0.0
            for fn in launch_fns:
                flusher()
                start.record()
                fn()
                end.record()
                end.synchronize()
                one += end.time_since(start) / 1e3
            if (skipped := _budget_exceeded(one, repeat, budget_s)) is not None:
                return skipped
        events = [[(drv.Event(), drv.Event()) for _ in launch_fns] for _ in range(repeat)]
        for run in events:
            for fn, (s, e) in zip(launch_fns, run):
                flusher()
                s.record()
                fn()
                e.record()
        events[-1][-1][1].synchronize()
    return [Timing([run[i][1].time_since(run[i][0]) / 1e3 for run in events]) for i in range(len(launch_fns))]


# ---- the protocol ----------------------------------------------------------------------
# A and B are filled from a counter-based hash (SplitMix64's finalizer) of a
# 64-bit key and the element's index: stateless, so nothing on the device
# tells what the next round's inputs will be. (z >> 40) is uniform on
# [0, 2^24), so x is uniform on [-1, 1) and exact in float32.
UNIFORM_SOURCE = r"""
unsigned long long z = key + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
z ^= z >> 31;
x = (float)((long long)(z >> 40) - 8388608ll) * 1.1920928955078125e-07f;
"""


@lru_cache(maxsize=None)
def _uniform_kernel():
    cp = _cupy()
    return cp.ElementwiseKernel("uint64 key", "float32 x", UNIFORM_SOURCE, "grader_uniform")


@lru_cache(maxsize=None)
def _bf16_kernel():
    """x rounded towards zero to bfloat16: its bits (h) and its value as a float (y)."""
    cp = _cupy()
    return cp.ElementwiseKernel("float32 x", "uint16 h, float32 y",
                                "const unsigned int u = __float_as_uint(x) & 0xFFFF0000u; "
                                "h = (unsigned short)(u >> 16); y = __uint_as_float(u);", "grader_bf16")


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


class Workload:
    """The device side of the protocol for one shape: A (M x K), B (K x N),
    the kernels' C and cuBLAS's C_ref, float32 on the GPU (CuPy). With bf16,
    the inputs are bfloat16 values: their bits in A16 and B16 (what the kernels
    and cuBLAS read), the same values as floats in A and B (what the checks
    read). Tests drive run_rounds with a NumPy stand-in that has the same
    attributes and methods."""

    def __init__(self, M: int, N: int, K: int, bf16: bool = False):
        cp = _cupy()
        if not bf16:
            tf32_state()
        self.M, self.N, self.K, self.bf16 = M, N, K, bf16
        self.A = cp.empty((M, K), dtype=cp.float32)
        self.B = cp.empty((K, N), dtype=cp.float32)
        self.C = cp.empty((M, N), dtype=cp.float32)
        self.C_ref = cp.empty((M, N), dtype=cp.float32)
        if bf16:
            self.A16 = cp.empty((M, K), dtype=cp.uint16)
            self.B16 = cp.empty((K, N), dtype=cp.uint16)
            self._alpha_beta = np.array([1.0, 0.0], dtype=np.float32)

    def fill_inputs(self, keys: tuple[int, int]) -> None:
        fill = _uniform_kernel()
        fill(np.uint64(keys[0]), self.A)
        fill(np.uint64(keys[1]), self.B)
        if self.bf16:
            _bf16_kernel()(self.A, self.A16, self.A)
            _bf16_kernel()(self.B, self.B16, self.B)

    def poison(self, name: str) -> None:
        getattr(self, name).view(np.uint32).fill(POISON_BITS)

    def kernel(self, function, launch):
        """A launch of `function` on A, B and C (the stage signature)."""
        return launcher(function, launch, self.M, self.N, self.K, self.A.data.ptr, self.B.data.ptr,
                        self.C.data.ptr)

    def cublas(self) -> None:
        if not self.bf16:
            _cupy().matmul(self.A, self.B, out=self.C_ref)
            return
        from cupy_backends.cuda.libs import cublas  # optional: CuPy's binding, only where there is a GPU
        cp = _cupy()
        handle = cp.cuda.device.get_cublas_handle()
        cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
        alpha, beta = self._alpha_beta.ctypes.data, self._alpha_beta.ctypes.data + 4
        # row-major C = A B is column-major C^T = B^T A^T; CUDA_R_16BF = 14, CUDA_R_32F = 0
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, self.N, self.M, self.K, alpha,
                      self.B16.data.ptr, 14, self.N, self.A16.data.ptr, 14, self.K, beta, self.C_ref.data.ptr, 0,
                      self.N, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)

    @staticmethod
    def timed(launch):
        """Flush the L2, then `launch()` between two events (returned)."""
        drv = _context()
        start, end = drv.Event(), drv.Event()
        l2_flush()()
        start.record()
        launch()
        end.record()
        return start, end

    @staticmethod
    def seconds(events) -> float:
        start, end = events
        end.synchronize()
        return end.time_since(start) / 1e3


def make_workload(M: int, N: int, K: int, bf16: bool = False):
    """The buffers of one shape (a Workload, of bfloat16 inputs with bf16), or NOT_TIMED on the emulator.
    One round's CuPy kernels (inputs, poison, the checks of both outputs) run once on it here, so that they
    are compiled before the GPU's lock is held alone: with an empty CuPy cache (a new submission's) compiling
    them takes seconds, which would keep every other grader off the GPU."""
    if not on_gpu():
        return NOT_TIMED
    w = Workload(M, N, K, bf16)
    w.fill_inputs((1, 2))
    w.poison("C_ref")
    w.seconds(w.timed(w.cublas))
    picked = np.zeros(SAMPLES, dtype=np.int64)
    reference_problem(w, picked, picked)        # what these find is found again, and said, in the rounds
    w.C[...] = w.C_ref
    output_problem(w)
    return w


def precision_ratio(C, C_ref, K: int) -> float:
    """RMS(C - C_ref) / (eps * sqrt(K) * RMS(C_ref)), in float64 (see MAX_PRECISION_RATIO)."""
    diff = C.astype("float64") - C_ref.astype("float64")
    ref = C_ref.astype("float64")
    err, scale = float((diff * diff).mean()) ** 0.5, float((ref * ref).mean()) ** 0.5
    scale *= float(np.finfo(np.float32).eps) * math.sqrt(max(K, 1))
    return err / scale if scale > 0 else (0.0 if err == 0 else math.inf)


def output_problem(w) -> str:
    """What is wrong with the kernel's w.C against cuBLAS's w.C_ref ('' when
    nothing): elements outside the tolerance (NaN, Inf and elements never
    written among them), or an error larger than FP32 arithmetic makes."""
    tol = tolerance(abs(w.A) @ abs(w.B), w.K)
    bad = ~(abs(w.C - w.C_ref) <= tol)
    wrong = int(bad.sum())
    if wrong:
        r, c = divmod(int(bad.ravel().nonzero()[0][0]), w.N)
        got = np.uint32(int(w.C.view(np.uint32)[r, c])).view(np.float32)
        return (f"{wrong} wrong element(s) of {w.M * w.N}; first at row {r}, column {c}: cuBLAS "
                f"{float(w.C_ref[r, c]):.6g}, kernel {float(got):.6g}{value_hint(got)}")
    ratio = precision_ratio(w.C, w.C_ref, w.K)
    if ratio > MAX_PRECISION_RATIO:
        cause = ("products accumulated in less than FP32 (FP16 accumulators?)" if w.bf16 else
                 "reduced precision (TF32, FP16 or BF16 arithmetic)? The lab's SGEMM is FP32")
        return (f"every element is within the tolerance, but the error against cuBLAS is {ratio:.0f} x "
                f"eps sqrt(K) RMS(C), where FP32 arithmetic gives about 0.2 (at most {MAX_PRECISION_RATIO:g}): "
                f"{cause}")
    return ""


def reference_problem(w, rows, cols) -> str:
    """What is wrong with cuBLAS's w.C_ref at (rows[i], cols[i]) against
    float64 dot products ('' when nothing)."""
    a = w.A[rows].astype("float64")
    b = w.B[:, cols].T.astype("float64")
    exact = (a * b).sum(axis=1)
    got = w.C_ref[rows, cols].astype("float64")
    bad = ~(abs(got - exact) <= tolerance(abs(a * b).sum(axis=1), w.K))
    if bool(bad.any()):
        i = int(bad.nonzero()[0][0])
        return (f"cuBLAS's product is wrong at row {rows[i]}, column {cols[i]}: {float(got[i]):.6g}, float64 "
                f"{float(exact[i]):.6g}")
    ratio = precision_ratio(got, exact, w.K)
    if ratio > MAX_PRECISION_RATIO:
        return f"cuBLAS's product is {ratio:.0f} x less precise than FP32 arithmetic (TF32?)"
    return ""


def _cublas_run(w, who: int, run: str):
    """cuBLAS's timed run (its output poisoned before it), then its product checked at positions drawn now."""
    w.poison("C_ref")
    events = w.timed(w.cublas)
    rng = np.random.default_rng(secrets.randbits(64))
    rows, cols = rng.integers(0, w.M, SAMPLES), rng.integers(0, w.N, SAMPLES)
    if problem := reference_problem(w, rows, cols):
        raise WrongOutput(who, f"{run}: {problem} (a problem of the GPU or the grader, not of the kernel)")
    return events


def _round(w, launches, run: str, later: bool) -> list[float]:
    """One round of the protocol: seconds of each launch, then cuBLAS's."""
    keys = (secrets.randbits(64), secrets.randbits(64))
    w.fill_inputs(keys)
    w.poison("C_ref")
    cublas = len(launches)
    events = {}
    for i, launch in enumerate(launches):
        w.poison("C")
        events[i] = w.timed(launch)
        w.fill_inputs(keys)                     # whatever the kernel wrote into A or B is undone
        if cublas not in events:
            events[cublas] = _cublas_run(w, cublas, run)
        if problem := output_problem(w):
            hint = ("; the earlier runs were right: does the kernel keep state between launches (a __device__ "
                    "variable, a launch counter, a cache)? Every run has new inputs and a C full of NaN, and must "
                    "compute all of C") if later and i == 0 else ""
            raise WrongOutput(i, f"{run}: {problem}{hint}")
    if cublas not in events:
        events[cublas] = _cublas_run(w, cublas, run)
    return [w.seconds(events[i]) for i in range(cublas + 1)]


def run_rounds(w, launches, repeat: int = MIN_REPEAT, warmup: int = WARMUP, budget_s: float | None = None):
    """The protocol (this module's docstring) on workload `w` for `launches`
    (zero-argument launches of kernels on w.A, w.B, w.C, the submission's
    first) and cuBLAS: a Timing per launch and cuBLAS's last, or a NotTimed
    saying "skipped: ..." when `repeat` rounds would take longer than
    `budget_s`. Raises WrongOutput for the first wrong output."""
    if repeat < MIN_REPEAT:
        raise ValueError(f"at least {MIN_REPEAT} timed runs, not {repeat}")
    warmup = max(1, warmup)
    total = warmup + repeat
    times: list[list[float]] = [[] for _ in range(len(launches) + 1)]
    for r in range(total):
        seconds = _round(w, launches, f"run {r + 1} of {total}", later=r > 0)
        if r >= warmup:
            for t, s in zip(times, seconds):
                t.append(s)
        elif (skipped := _budget_exceeded(sum(seconds), repeat, budget_s)) is not None:
            return skipped
    return [Timing(t) for t in times]


def cublas_sgemm_time(M: int, N: int, K: int, repeat: int = MIN_REPEAT, budget_s: float | None = None,
                      workload=None, lock_wait_s: float | None = None):
    """cuBLAS SGEMM (cupy.matmul, FP32) alone under the protocol: a Timing,
    NOT_TIMED on the emulator, or a NotTimed saying why not (skipped, or
    "rejected: ..." when its product is wrong)."""
    if not on_gpu():
        return NOT_TIMED
    w = workload if workload is not None else make_workload(M, N, K)
    try:
        with gpu_lock(wait_s=lock_wait_s):
            timings = run_rounds(w, [], repeat, budget_s=budget_s)
    except (WrongOutput, GpuBusy) as e:
        return NotTimed(f"rejected: {e}" if isinstance(e, WrongOutput) else f"not timed: {e}")
    return timings[-1] if isinstance(timings, list) else timings


@dataclass
class Measurement:
    status: str                      # ok, wrong, impossible, skipped, busy, not timed, error
    detail: str = ""
    kernel: object = NOT_TIMED
    gflops: float | None = None
    cublas_gflops: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.gflops is None or not self.cublas_gflops:
            return None
        return self.gflops / self.cublas_gflops


def measure_sgemm(function, launch, w, repeat: int = MIN_REPEAT, budget_s: float | None = None,
                  peak_flops: float | None = None, lock_wait_s: float | None = None) -> Measurement:
    """One stage kernel (a compiled Function and its Launch) on workload `w`
    under the protocol, cuBLAS interleaved: measure_sgemms for one kernel."""
    return measure_sgemms([(function, launch)], w, repeat, budget_s, peak_flops, lock_wait_s)[0]


def measure_sgemms(kernels, w, repeat: int = MIN_REPEAT, budget_s: float | None = None,
                   peak_flops: float | None = None, lock_wait_s: float | None = None) -> list[Measurement]:
    """Kernels [(Function, Launch)] of the stage signature on workload `w` under the protocol, the
    submission's first, reference kernels after it, cuBLAS interleaved: a
    Measurement each (status "ok" with GFLOPS, or why not), all in the same
    rounds. `lock_wait_s`: how long to wait for the GPU's lock."""
    if not on_gpu() or isinstance(w, NotTimed):
        return [Measurement("not timed", NO_GPU) for _ in kernels]
    return measure_launches([w.kernel(function, launch) for function, launch in kernels], w, repeat, budget_s,
                            peak_flops, lock_wait_s)


def measure_launches(launches, w, repeat: int = MIN_REPEAT, budget_s: float | None = None,
                     peak_flops: float | None = None, lock_wait_s: float | None = None) -> list[Measurement]:
    """measure_sgemms for launches already bound to w's buffers (zero-argument calls, the submission's
    first): the tensor-core GEMMs, whose arguments are tensor maps of w.A16 and w.B16. Their rates are
    checked against the BF16 tensor-core peak on a bf16 workload, else the FP32 peak."""
    if not on_gpu() or isinstance(w, NotTimed):
        return [Measurement("not timed", NO_GPU) for _ in launches]
    import pycuda.driver as drv
    peak_name = "BF16 tensor-core" if w.bf16 else "FP32"
    peak = peak_flops or (bf16_tensor_peak(_context().Context.get_device()) if w.bf16 else fp32_peak())
    try:
        with gpu_lock(wait_s=lock_wait_s):
            timings = run_rounds(w, launches, repeat, budget_s=budget_s)
    except GpuBusy as e:
        return [Measurement("busy", f"{e} (the grader's limit, not the kernel's: regrade later)")
                for _ in launches]
    except WrongOutput as e:
        if e.who == len(launches):           # cuBLAS's product
            return [Measurement("error", str(e)) for _ in launches]
        return [Measurement("wrong", str(e)) if i == e.who else
                Measurement("not timed", f"the measurement stopped: kernel {e.who + 1} of {len(launches)} was wrong")
                for i in range(len(launches))]
    except (drv.Error, RuntimeError) as e:      # a launch that failed (PyCUDA), or CuPy's call after it
        return [Measurement("error", f"a launch failed: {type(e).__name__}: {e}") for _ in launches]
    if isinstance(timings, NotTimed):
        return [Measurement("skipped", str(timings).removeprefix("skipped: "), timings) for _ in launches]
    M, N, K = w.M, w.N, w.K
    cb = gflops(M, N, K, timings[-1])
    out = []
    for timing in timings[:-1]:
        g = gflops(M, N, K, timing)
        try:
            check_plausible(g, peak, "kernel", peak_name)
            check_plausible(cb, peak, "cuBLAS", peak_name)
        except ImpossibleResult as e:
            out.append(Measurement("impossible", str(e), timing, g, cb))
            continue
        out.append(Measurement("ok", f"median of {timing.runs} runs, cuBLAS interleaved, each run on fresh inputs "
                                     "and checked", timing, g, cb))
    return out


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

"""Watching a student's PyCUDA host code (lab 0, "PyCUDA by hand"): while a
`recording()` is open, every kernel launch (with its grid and block), every
CUDA event recorded, synchronised and read, every context or stream
synchronisation and every host <-> device copy is appended, in order, to a
HostLog. The checks of lab 0 (grader.grading.checks.pycuda_by_hand) read it to say
precisely what a host function did: which rows of C no thread covered, which
array went to the device as float64, which launches were timed, whether the
end event was synchronised before time_since.

It wraps, for the time of the recording only, methods of the driver module
that the student's code uses (the GPU's pycuda.driver or the emulator's):
Function.__call__ / prepared_call / prepared_async_call / prepared_timed_call,
Module.get_function (to know each Function's kernel name), Event.record /
synchronize / time_since / time_till, Context.synchronize, Stream.synchronize
and memcpy_htod / memcpy_dtoh (and their _async forms, which gpuarray's
to_gpu / get and In / Out go through).

Also here: the grader's own time of the reference kernel (grader.kernels.timing's one
timing routine), for the plausibility of a student's timing on a GPU.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from grader.kernels import sgemm, timing
from grader.kernels.stages import stage
from grader.platform.backend import drivers

KERNEL = "sgemm_coalesced"         # the kernel lab 0 launches (solutions/coalesced.cu)
_MISSING = object()


@dataclass
class Entry:
    kind: str                      # launch, record, sync, elapsed, htod, dtoh
    position: int
    kernel: str | None = None      # launch: the Function's kernel name (None: not seen by get_function)
    grid: tuple | None = None
    block: tuple | None = None
    event: int | None = None       # record, sync (None: a context or stream sync)
    start: int | None = None       # elapsed: the start event's id
    ms: float | None = None        # elapsed: what time_since returned
    nbytes: int = 0                # htod, dtoh: the host array's bytes, dtype and shape
    dtype: str = ""
    shape: tuple = ()


@dataclass
class TimedRun:
    """One time_since(end, start) measurement (a repeated call on the same
    recorded pair counts once)."""
    ms: float
    start_at: int                  # log position of the start event's record
    end_at: int                    # log position of the end event's record
    launches: int                  # launches of the kernel between the two records
    synchronized: bool             # end (or a later event, the context, a stream) synchronised before reading


@dataclass
class HostLog:
    entries: list[Entry] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)       # id(Function) -> kernel name
    _keep: list = field(default_factory=list)                  # keeps those Functions alive (ids stay unique)

    def add(self, kind: str, **kw) -> Entry:
        e = Entry(kind, len(self.entries), **kw)
        self.entries.append(e)
        return e

    def extend(self, entries: list[dict]) -> None:
        """Add entries recorded elsewhere (the student's process), in order, after these."""
        for e in entries:
            self.add(**{k: v for k, v in e.items() if k != "position"})

    def of(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    def launches(self, kernel: str = KERNEL) -> list[Entry]:
        """Launches of `kernel`; when no launch has a known name (a Function
        not obtained through get_function), every launch."""
        all_launches = self.of("launch")
        named = [e for e in all_launches if e.kernel == kernel]
        return named if named or any(e.kernel for e in all_launches) else all_launches

    def timed_runs(self, kernel: str = KERNEL) -> list[TimedRun]:
        """The measurements read with time_since, in the order they were read."""
        runs, seen = [], set()
        launch_at = [e.position for e in self.launches(kernel)]
        for e in self.of("elapsed"):
            start_at = self._last_record(e.start, e.position)
            end_at = self._last_record(e.event, e.position)
            if start_at is None or end_at is None or (start_at, end_at) in seen:
                continue
            seen.add((start_at, end_at))
            lo, hi = sorted((start_at, end_at))
            n = sum(lo < p < hi for p in launch_at)
            runs.append(TimedRun(e.ms, start_at, end_at, n, self._synced(end_at, e.position)))
        return runs

    def _last_record(self, event: int | None, before: int) -> int | None:
        found = None
        for e in self.entries[:before]:
            if e.kind == "record" and e.event == event:
                found = e.position
        return found

    def _synced(self, end_at: int, read_at: int) -> bool:
        for e in self.entries[end_at + 1:read_at]:
            if e.kind == "sync" and (e.event is None or (self._last_record(e.event, e.position) or -1) >= end_at):
                return True
        return False


def _dim3(value):
    try:
        t = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        return value                     # not a tuple of ints: kept as it was, for the diagnosis
    return t + (1,) * (3 - len(t)) if len(t) < 3 else t


class _Patches:
    """Attributes replaced for a while, then put back exactly as they were."""

    def __init__(self):
        self.saved = []

    def wrap(self, owner, name: str, make) -> None:
        current = getattr(owner, name, None)
        if current is None:
            return
        entry = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else current
        new = make(current)
        if isinstance(owner, type) and isinstance(entry, staticmethod):
            new = staticmethod(new)
        setattr(owner, name, new)
        self.saved.append((owner, name, entry))

    def restore(self) -> None:
        for owner, name, entry in reversed(self.saved):
            if entry is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, entry)
        self.saved.clear()


_recording: list[HostLog] = []


def current_log() -> HostLog | None:
    """The log of the innermost recording() open now."""
    return _recording[-1] if _recording else None


@contextlib.contextmanager
def recording(drv):
    """Record what host code does through the driver module `drv` while inside."""
    log = HostLog()
    depth = {"launch": 0, "elapsed": 0}
    patches = _Patches()

    def launch_wrapper(original, positional: bool):
        def launch(self, *args, **kwargs):
            if depth["launch"]:
                return original(self, *args, **kwargs)
            if positional:
                grid, block = (args + (None, None))[:2]
            else:
                grid, block = kwargs.get("grid", (1, 1)), kwargs.get("block")
            log.add("launch", kernel=log.names.get(id(self)), grid=_dim3(grid),
                    block=None if block is None else _dim3(block))
            depth["launch"] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                depth["launch"] -= 1
        return launch

    def get_function(original):
        def wrapped(self, name, *args, **kwargs):
            function = original(self, name, *args, **kwargs)
            log.names[id(function)] = str(name)
            log._keep.append(function)
            return function
        return wrapped

    def record(original):
        def wrapped(self, *args, **kwargs):
            log.add("record", event=id(self))
            return original(self, *args, **kwargs)
        return wrapped

    def event_sync(original):
        def wrapped(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            log.add("sync", event=id(self))
            return result
        return wrapped

    def elapsed(original, self_is_end: bool):
        def wrapped(self, other, *args, **kwargs):
            if depth["elapsed"]:
                return original(self, other, *args, **kwargs)
            depth["elapsed"] += 1
            try:
                ms = original(self, other, *args, **kwargs)
            finally:
                depth["elapsed"] -= 1
            end, start = (self, other) if self_is_end else (other, self)
            log.add("elapsed", event=id(end), start=id(start), ms=float(ms))
            return ms
        return wrapped

    def plain_sync(original):
        def wrapped(*args, **kwargs):
            result = original(*args, **kwargs)
            log.add("sync", event=None)
            return result
        return wrapped

    def copy(original, kind: str):
        def wrapped(dest, src, *args, **kwargs):
            host = np.asarray(src if kind == "htod" else dest)
            log.add(kind, nbytes=int(host.nbytes), dtype=str(host.dtype), shape=tuple(host.shape))
            return original(dest, src, *args, **kwargs)
        return wrapped

    try:
        patches.wrap(drv.Function, "__call__", lambda f: launch_wrapper(f, positional=False))
        for name in ("prepared_call", "prepared_async_call", "prepared_timed_call"):
            patches.wrap(drv.Function, name, lambda f: launch_wrapper(f, positional=True))
        patches.wrap(drv.Module, "get_function", get_function)
        patches.wrap(drv.Event, "record", record)
        patches.wrap(drv.Event, "synchronize", event_sync)
        patches.wrap(drv.Event, "time_since", lambda f: elapsed(f, self_is_end=True))
        patches.wrap(drv.Event, "time_till", lambda f: elapsed(f, self_is_end=False))
        patches.wrap(drv.Context, "synchronize", plain_sync)
        patches.wrap(drv.Stream, "synchronize", plain_sync)
        for name in ("memcpy_htod", "memcpy_htod_async"):
            patches.wrap(drv, name, lambda f: copy(f, "htod"))
        for name in ("memcpy_dtoh", "memcpy_dtoh_async"):
            patches.wrap(drv, name, lambda f: copy(f, "dtoh"))
        _recording.append(log)
        yield log
    finally:
        if _recording and _recording[-1] is log:
            _recording.pop()
        patches.restore()


def reference_seconds(A: np.ndarray, B: np.ndarray):
    """The grader's median time (seconds) of the reference sgemm_coalesced on
    A, B with the stage's launch (grader.kernels.timing.time_kernel: events, warm-up, L2
    flushed, >= 20 runs); NOT_TIMED on the emulator."""
    if not timing.on_gpu():
        return timing.NOT_TIMED
    drv = drivers()[0]
    st = stage("coalesced")
    M, K = A.shape
    N = B.shape[1]
    function = sgemm.compile_kernel(st)
    a = drv.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = drv.to_device(np.ascontiguousarray(B, dtype=np.float32))
    c = drv.mem_alloc(4 * M * N)
    try:
        measured = timing.time_kernel(sgemm.launcher(function, st.launch(M, N, K), M, N, K, a, b, c))
    finally:
        for alloc in (a, b, c):
            alloc.free()
    return measured.median_s if isinstance(measured, timing.Timing) else measured

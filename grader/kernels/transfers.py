"""Count the bytes copied device -> host: lab 7's host function must bring
back only the two minimums' keys, not C.
"""
from __future__ import annotations

import contextlib

import numpy as np

from grader.platform.backend import drivers


class Transfers:
    def __init__(self):
        self.bytes = 0
        self.calls = 0


_counting: list[Transfers] = []


def current() -> Transfers | None:
    """The counts of the innermost count_dtoh() open now."""
    return _counting[-1] if _counting else None


@contextlib.contextmanager
def count_dtoh(*driver_modules):
    """Count the bytes copied device -> host (memcpy_dtoh[_async], and through
    them GPUArray.get, pycuda.driver.Out and from_device) while inside; by
    default in the current backend's driver."""
    t = Transfers()
    saved = []
    for mod in driver_modules or [drivers()[0]]:
        for name in ("memcpy_dtoh", "memcpy_dtoh_async"):
            original = getattr(mod, name, None)
            if original is None or getattr(original, "_dtoh_counted", False):
                continue

            def wrapped(dest, src, *a, _original=original, **k):
                t.bytes += int(np.asarray(dest).nbytes)
                t.calls += 1
                return _original(dest, src, *a, **k)
            wrapped._dtoh_counted = True
            saved.append((mod, name, original))
            setattr(mod, name, wrapped)
    _counting.append(t)
    try:
        yield t
    finally:
        _counting.remove(t)
        for mod, name, original in reversed(saved):
            setattr(mod, name, original)

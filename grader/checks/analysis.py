"""Access to the emulator's analysis mode (grader.emulator.analyze), which
records races, out-of-bounds accesses and shared-memory bank conflicts of the
launches made inside `with analyze() as report:`."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def analysis():
    """`with analysis() as report:` around emulated launches."""
    from ..emulator import analyze
    with analyze() as report:
        yield report


@contextlib.contextmanager
def thread_order(seed: int):
    from .. import emulator
    old = emulator.thread_order_seed()
    emulator.set_thread_order_seed(seed)
    try:
        yield
    finally:
        emulator.set_thread_order_seed(old)


def describe(record) -> str:
    d = getattr(record, "describe", None)
    return d() if callable(d) else str(record)

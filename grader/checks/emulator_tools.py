"""The emulator's tools as the checks use them: its analysis mode (races,
out-of-bounds accesses and shared-memory bank conflicts of the launches made
inside `with analysis() as report:`, see grader.emulator.analyze) and runs
with each block's threads in a permuted order."""
from __future__ import annotations

import contextlib

from .. import emulator


@contextlib.contextmanager
def analysis():
    """`with analysis() as report:` around emulated launches."""
    with emulator.analyze() as report:
        yield report


@contextlib.contextmanager
def thread_order(seed: int):
    """Run each block's threads in the order that `seed` permutes them into (0: the normal order)."""
    old = emulator.thread_order_seed()
    emulator.set_thread_order_seed(seed)
    try:
        yield
    finally:
        emulator.set_thread_order_seed(old)


def describe(record) -> str:
    d = getattr(record, "describe", None)
    return d() if callable(d) else str(record)

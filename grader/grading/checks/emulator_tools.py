"""The emulator's tools as the checks use them: its analysis mode (races,
out-of-bounds accesses and shared-memory bank conflicts of the launches made
inside `with analysis() as report:`, see grader.emulator.analyze) and runs
with each block's threads in a permuted order."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from grader import emulator
from grader.emulator.analysis import BankConflicts, Finding, GlobalAccesses, Race, Report


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


RECORDS = {"bank_conflicts": BankConflicts, "global_accesses": GlobalAccesses, "races": Race,
           "out_of_bounds": Finding}


def report_data(report) -> dict:
    """What the analysis found, as JSON-able data (the grading process sends it to be judged)."""
    data = {key: [dataclasses.asdict(r) for r in getattr(report, key)] for key in RECORDS}
    return dict(data, launches=report.launches, global_dropped=report.global_dropped)


def report_from(data: dict):
    """The report that report_data() described (lists back to tuples: threads and blocks), its races the most
    frequent first: the checks show the first few, and the most frequent is the likeliest cause."""
    def record(cls, fields: dict):
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    report = Report(**{key: [record(cls, f) for f in data.get(key, [])] for key, cls in RECORDS.items()},
                    launches=int(data.get("launches", 0)), global_dropped=int(data.get("global_dropped", 0)))
    report.races.sort(key=lambda r: -r.count)
    return report


def order_problems(first, orders: list[dict], returned, expected: int, name: str, cause: str) -> list[str]:
    """What the runs in permuted thread orders show against `first`, the normal order's result: the
    first failure or difference, in one line. `orders` as a grading process collected them
    ({"seed", "failure"}), `returned(seed)` that order's array (None: missing)."""
    for order in orders:
        s = int(order["seed"])
        if order.get("failure"):
            return [f"permuted thread order (seed {s:#x}): {order['failure']}"]
        other = returned(s)
        if other is None:
            return [f"permuted thread order (seed {s:#x}): the grading process returned no {name}"]
        differ = first.view(np.uint32) != other.view(np.uint32)
        if differ.any():
            r, c = (int(v) for v in np.argwhere(differ)[0])
            return [f"the result depends on the order in which threads run: with the threads of each block in a "
                    f"permuted order (seed {s:#x}) {int(differ.sum())} element(s) of {name} differ, first "
                    f"{name}[{r}][{c}]: {first[r, c]:.6g} in the normal order, {other[r, c]:.6g} permuted - {cause}"]
    if len(orders) < expected:
        return [f"the grading process did not return {name} for every thread order"]
    return []

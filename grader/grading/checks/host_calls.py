"""Calling a student's Python function for a check, and what the call did, as data.

collect() of a Python exercise loads the function in a process of its own (grader.grading.student_process),
calls it, and keeps each call as a Call: what it returned (an array, a number, a tuple of numbers, or the
type and repr of anything else) or raised (type and message), and with `watch`, what it did on the device
(grader.kernels.host_log, recorded in this process, where the student's code cannot reach). Calls cross to
judge() as JSON and arrays (to_data / from_data).
"""
from __future__ import annotations

import ast
import dataclasses
import numbers
from dataclasses import dataclass, field

import numpy as np

from grader.grading import student_process
from grader.kernels.host_log import Entry, HostLog, recording
from grader.platform.backend import drivers
from grader.platform.wire import Opaque

NOT_WRITTEN = "your function is not written yet (it raises NotImplementedError: replace that line with your code)"


# What a student's function must not import: the grader's answers and its grading code (hidden from the
# student's process anyway; refusing the source names the attempt).
FORBIDDEN = ("grader.references", "grader.grading", "grader.course", "grader.programs")
REACHES = "your code reaches into the grader itself"


def reaching(source: str) -> str | None:
    """What in the source reaches for the grader's answers (an import or a module name in a string), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value.replace("/", ".")]
        for name in names:
            if any(name == f or name.startswith(f + ".") or f"{f}." in name or name.endswith(f) for f in FORBIDDEN):
                return name
    return None


def load(source: str, name: str):
    """The student's function (in its own process), or what went wrong loading it (a str)."""
    reached = reaching(source)
    if reached:
        return f"refused: {REACHES} ({reached}), where its answers are: write {name}() yourself"
    try:
        return student_process.load(source, name)
    except Exception as e:              # the student's Python, run as a module: anything it raises is theirs
        return f"your code does not define {name}(...): {type(e).__name__}: {e}"


@dataclass
class Call:
    value: object = None                 # what it returned (None when it raised)
    raised: tuple[str, str] | None = None   # (type name, message)
    log: HostLog = field(default_factory=HostLog)

    def raised_text(self) -> str:
        """What a student reads about the exception."""
        kind, message = self.raised
        if kind == "NotImplementedError" and not message:
            return NOT_WRITTEN
        return f"your function raised {kind}: {message}"

    def to_data(self, arrays: dict, key: str) -> dict:
        data = {"raised": list(self.raised) if self.raised else None,
                "log": [dataclasses.asdict(e) for e in self.log.entries]}
        value = self.value
        if isinstance(value, np.ndarray) and value.dtype != object:
            arrays[key] = value
            data["array"] = key
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            data["number"] = float(value)
        elif isinstance(value, (tuple, list)) and all(_plain(v) for v in value):
            data["items"] = [list(v) if isinstance(v, (tuple, list)) else v for v in value]
        elif isinstance(value, dict) and all(isinstance(k, str) and _plain(v) for k, v in value.items()):
            data["mapping"] = dict(value)
        elif value is not None or self.raised is None:
            data["other"] = [type(value).__name__, repr(value)[:200] if not isinstance(value, Opaque) else repr(value)]
        return data

    @classmethod
    def from_data(cls, data: dict, arrays: dict) -> Call:
        log = HostLog()
        for e in data.get("log") or []:
            e = {k: tuple(v) if isinstance(v, list) else v for k, v in e.items() if k in Entry.__dataclass_fields__}
            e.pop("position", None)
            log.add(**e)
        if data.get("raised"):
            return cls(raised=tuple(data["raised"]), log=log)
        if "array" in data:
            value = np.asarray(arrays.get(data["array"]))
        elif "number" in data:
            value = data["number"]
        elif "items" in data:
            value = tuple(tuple(v) if isinstance(v, list) else v for v in data["items"])
        elif "mapping" in data:
            value = dict(data["mapping"])
        else:
            kind, text = data.get("other") or ("NoneType", "None")
            value = None if kind == "NoneType" else type(kind, (Opaque,), {})(text)
        return cls(value=value, log=log)


def _plain(v) -> bool:
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    return isinstance(v, (numbers.Real, str)) and not isinstance(v, bool) or v is None


def call(function, *args, watch: bool = False, **kwargs) -> Call:
    """One call of the student's function; with `watch`, what it did on the device is recorded here."""
    if not watch:
        try:
            return Call(value=function(*args, **kwargs))
        except Exception as e:          # the student's Python: anything it raises is their diagnosis
            return Call(raised=(type(e).__name__, str(e)))
    with recording(drivers()[0]) as log:
        try:
            return Call(value=function(*args, **kwargs), log=log)
        except Exception as e:          # the student's Python: anything it raises is their diagnosis
            return Call(raised=(type(e).__name__, str(e)), log=log)

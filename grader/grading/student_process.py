"""A student's Python function, run in a process of its own.

A grading process that ran a student's Python itself could be told what to
answer: the code shares its memory and its result pipe (a function that
wrote "passed" on that pipe and exited was graded as passed). So the grading
process keeps the check and the verdict, and `load(source, name)` gives it a
stand-in for the student's function: each call sends the arguments to the
student's process and brings back the return value or the exception. Values
cross as JSON, never pickled: numbers, strings, bytes, lists, tuples, dicts,
numpy arrays and scalars, the grader's dataclasses (to the student only);
anything else comes back as an opaque stand-in with its type's name and its
repr. Functions passed as arguments (autotuning's check_fn, time_fn) stay in
the grading process and are called back. What the grading process watches
during a call (grader.kernels.host_log.recording, grader.kernels.transfers.count_dtoh) is
watched in the student's process and added to what it watches.

The student's process is a fresh interpreter (`python -E -s`) with its own
temporary folder and build cache, in a bubblewrap sandbox of its own where
one can be made (only that folder writable, its own process namespace: the
grading process is out of its sight). The grading process makes itself
non-dumpable first, so that even without bubblewrap neither ptrace nor
/proc/PID/fd gives the student's process a way into it.

Layer: kernels and host drivers.
"""
from __future__ import annotations

import atexit
import base64
import builtins
import contextlib
import ctypes
import dataclasses
import importlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

import numpy as np

from grader.grading.host_functions import load_function
from grader.kernels import host_log, transfers
from grader.platform import sandbox
from grader.platform.backend import drivers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository
MAX_MESSAGE = 256 << 20          # bytes: a larger answer is not read


class StudentException(Exception):
    """Base of the exceptions the student's function raised, remade here under their own names."""


class ProcessEnded(StudentException, RuntimeError):
    """The student's process ended (or sent something unreadable) before answering."""


def raised(type_name: str, message: str) -> StudentException:
    """An exception of the student's type name; a subclass of the built-in of that name where there is one
    (so that `except NotImplementedError` still matches)."""
    base = getattr(builtins, type_name, None)
    namespace = {"__str__": lambda self: message}
    if isinstance(base, type) and issubclass(base, Exception):
        with contextlib.suppress(TypeError):       # a built-in whose constructor wants more (UnicodeDecodeError)
            return type(type_name[:100], (StudentException, base), namespace)(message)
    return type(type_name[:100], (StudentException,), namespace)(message)


class Opaque:
    """A value of the student's that does not cross as data: its type's name and repr only."""

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text


# ---- values as JSON ----------------------------------------------------------------------------
def _npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def _from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def encode(value, callbacks: dict | None = None):
    """`value` as JSON-able data; functions become callback numbers in `callbacks` (None: opaque)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [encode(v, callbacks) for v in value]
        return items if isinstance(value, list) else {"$t": "tuple", "items": items}
    if isinstance(value, dict):
        return {"$t": "dict", "items": [[encode(k, callbacks), encode(v, callbacks)] for k, v in value.items()]}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"$t": "ndarray", "npy": _npy(value)}
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"$t": "scalar", "npy": _npy(np.asarray(value))}
    if isinstance(value, bytes):
        return {"$t": "bytes", "b64": base64.b64encode(value).decode()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$t": "dataclass", "class": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name), callbacks) for f in dataclasses.fields(value)}}
    if callable(value) and not isinstance(value, type) and callbacks is not None:
        callbacks[len(callbacks)] = value
        return {"$t": "callback", "id": len(callbacks) - 1}
    try:
        text = repr(value)[:2000]
    except Exception:                 # the student's __repr__
        text = "<unprintable>"
    return {"$t": "opaque", "type": type(value).__name__[:100], "repr": text,
            "gpudata": hasattr(value, "gpudata")}


def decode(data, call_back=None, trusted: bool = False):
    """The value `data` encodes. A callback becomes a function that calls `call_back(id, args, kwargs)`;
    dataclasses are remade only from `trusted` data (what the grader sent), else they are opaque."""
    def walk(x):
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        tag = x.get("$t")
        if tag == "tuple":
            return tuple(walk(v) for v in x["items"])
        if tag == "dict":
            return {walk(k): walk(v) for k, v in x["items"]}
        if tag == "ndarray":
            return _from_npy(x["npy"])
        if tag == "scalar":
            return _from_npy(x["npy"])[()]
        if tag == "bytes":
            return base64.b64decode(x["b64"])
        if tag == "callback" and call_back is not None:
            number = int(x["id"])
            return lambda *args, **kwargs: call_back(number, args, kwargs)
        if tag == "dataclass" and trusted:
            module, _, name = x["class"].partition(":")
            return getattr(importlib.import_module(module), name)(**{k: walk(v) for k, v in x["fields"].items()})
        if tag == "dataclass":
            return Opaque(f"<{x['class']}>")
        stand_in = type(str(x.get("type", "object")), (Opaque,), {})(str(x.get("repr", "")))
        if x.get("gpudata"):
            stand_in.gpudata = None
        return stand_in
    return walk(data)


# ---- messages on a pipe: 8-byte length, then JSON ------------------------------------------------
def _send(stream, message: dict) -> None:
    data = json.dumps(message).encode()
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream) -> dict | None:
    head = stream.read(8)
    if len(head) < 8:
        return None
    size = struct.unpack("<Q", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"an answer of {size} bytes (at most {MAX_MESSAGE} are read)")
    data = stream.read(size)
    if len(data) < size:
        return None
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("not a message")
    return message


# ---- the grading process's side ----------------------------------------------------------------
def _not_dumpable() -> None:
    """Neither ptrace nor /proc/PID/fd of this process for other processes of this user (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE = 4


class RemoteFunction:
    """The student's function, called in the student's process."""

    def __init__(self):
        _not_dumpable()
        self.folder = tempfile.mkdtemp(prefix="student-")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ, TMPDIR=self.folder, GRADER_EMULATOR_CACHE=os.path.join(self.folder, "cache"),
                   MPLCONFIGDIR=os.path.join(self.folder, "matplotlib"))
        command = [sys.executable, "-E", "-s", "-c",
                   f"import sys; sys.path.insert(0, {ROOT!r}); from grader.grading.student_process import _serve; "
                   f"sys.exit(_serve({to_child_r}, {from_child_w}))"]
        try:
            self.process = subprocess.Popen(sandbox.wrap(command, [self.folder], self.folder), env=env,
                                            cwd=self.folder, stdin=subprocess.DEVNULL,
                                            pass_fds=(to_child_r, from_child_w))
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.to_child = os.fdopen(to_child_w, "wb")
        self.from_child = os.fdopen(from_child_r, "rb")
        self.ended: str | None = None

    def __call__(self, *args, **kwargs):
        watch = [w for w, active in (("host-log", host_log.current_log()), ("dtoh", transfers.current()))
                 if active is not None]
        callbacks: dict = {}
        message = {"op": "call", "args": encode(list(args), callbacks), "kwargs": encode(kwargs, callbacks),
                   "watch": watch}
        return self._exchange(message, callbacks)

    def _exchange(self, message: dict, callbacks: dict):
        if self.ended:
            raise ProcessEnded(self.ended)
        try:
            _send(self.to_child, message)
            while True:
                answer = _receive(self.from_child)
                if answer is None:
                    break
                if answer.get("op") == "callback":
                    _send(self.to_child, self._call_back(callbacks, answer))
                    continue
                self._add_watched(answer.get("watched") or {})
                if answer.get("op") == "return":
                    return decode(answer.get("value"))
                if answer.get("op") == "raise":
                    raise raised(str(answer.get("type")), str(answer.get("message")))
                if answer.get("op") == "loaded":
                    return None
                raise ValueError(f"unexpected message {str(answer.get('op'))[:40]!r}")
        except StudentException:
            raise
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as e:   # a broken pipe, a garbled answer
            self.close()
            self.ended = f"the process running your code sent something unreadable ({type(e).__name__}: {e})"
            raise ProcessEnded(self.ended) from None
        code = self.close()
        self.ended = (f"the process running your code ended (exit status {code}) before your function "
                      "returned: sys.exit, os._exit or a crash?")
        raise ProcessEnded(self.ended)

    def _call_back(self, callbacks: dict, request: dict) -> dict:
        function = callbacks[int(request["id"])]
        try:
            args = decode(request.get("args", []))
            kwargs = decode(request.get("kwargs", {}))
            return {"op": "return", "value": encode(function(*args, **dict(kwargs)))}
        except Exception as e:        # the grader's callback on what the student passed: the student sees it
            return {"op": "raise", "type": type(e).__name__, "message": str(e)}

    def _add_watched(self, watched: dict) -> None:
        log, counted = host_log.current_log(), transfers.current()
        with contextlib.suppress(TypeError, ValueError, KeyError):
            if log is not None and "host-log" in watched:
                log.extend(decode(watched["host-log"]))
            if counted is not None and "dtoh" in watched:
                nbytes, calls = decode(watched["dtoh"])
                counted.bytes += int(nbytes)
                counted.calls += int(calls)

    def close(self) -> int | None:
        """End the student's process (it ends by itself when its requests close; else it is killed)."""
        for stream in (self.to_child, self.from_child):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        return code


def load(source: str, name: str) -> RemoteFunction:
    """The function `name` that the submission's module text defines, in a process of its own (ended when
    this process ends). Whatever the student's code raises while loading is raised here under its own
    type name."""
    function = RemoteFunction()
    atexit.register(function.close)
    function._exchange({"op": "load", "source": source, "name": name}, {})
    return function


# ---- the student's side ------------------------------------------------------------------------
def _serve(read_fd: int, write_fd: int) -> int:
    requests, answers = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
    function = None

    def call_back(number, args, kwargs):
        _send(answers, {"op": "callback", "id": number, "args": encode(list(args)), "kwargs": encode(kwargs)})
        answer = _receive(requests)
        if answer is None:
            raise SystemExit(0)
        if answer.get("op") == "raise":
            raise raised(answer["type"], answer["message"])
        return decode(answer.get("value"))

    while (request := _receive(requests)) is not None:
        watched = {}
        try:
            if request["op"] == "load":
                drivers()          # a CUDA context (the primary one) before the student's code runs
                function = load_function(request["source"], request["name"])
                answer = {"op": "loaded"}
            else:
                args = decode(request["args"], call_back, trusted=True)
                kwargs = decode(request["kwargs"], call_back, trusted=True)
                with _watching(request.get("watch", ()), watched):
                    value = function(*args, **kwargs)
                answer = {"op": "return", "value": encode(value)}
        except BaseException as e:     # the student's code: whatever it raises is theirs to read
            if isinstance(e, KeyboardInterrupt):
                raise
            answer = {"op": "raise", "type": type(e).__name__, "message": str(e),
                      "traceback": traceback.format_exc()[-4000:]}
        answer["watched"] = watched
        _send(answers, answer)
    return 0


@contextlib.contextmanager
def _watching(what, watched: dict):
    drv = drivers()[0]
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(host_log.recording(drv)) if "host-log" in what else None
        counted = stack.enter_context(transfers.count_dtoh(drv)) if "dtoh" in what else None
        try:
            yield
        finally:
            if log is not None:
                watched["host-log"] = encode([dataclasses.asdict(e) for e in log.entries])
            if counted is not None:
                watched["dtoh"] = encode([counted.bytes, counted.calls])

"""A student's Python function, run in a process of its own, its device calls done by the grader.

A grading process that ran a student's Python itself could be told what to answer: the code
would share its memory and its result pipe. So the grading process keeps the check, and
`load(source, name)` gives it a stand-in for the student's function: each call sends the
arguments to the student's process and brings back the return value or the exception
(values as data: grader.platform.wire). Functions passed as arguments (autotuning's check_fn,
time_fn) stay here and are called back.

The student's process has no device of its own: its `pycuda` is grader.platform.remote, which
sends every device call here, where DeviceServer does it with this process's backend (the GPU,
or the emulator under its source policy). So what the checks watch (launches, copies, events:
grader.kernels.host_log) is recorded here, outside the student's reach.

The student's process is `python -I` with its own temporary folder, in a sandbox of its own
where one can be made. This process makes itself non-dumpable first, so that neither ptrace nor
/proc/PID/fd gives the student's process a way into it.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import traceback

import numpy as np

from grader.grading.host_functions import load_function
from grader.platform import backend, interpreter, remote, sandbox, wire
from grader.platform.wire import ProcessEnded, StudentException

# What a host function of the labs may ask of PyCUDA, by module and by kind of device object.
MODULE_CALLS = {
    "driver": {"mem_alloc", "mem_get_info", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod", "memcpy_htod_async",
               "memcpy_dtoh_async", "memcpy_dtod_async", "memset_d8", "memset_d16", "memset_d32", "to_device",
               "from_device", "from_device_like", "Event", "Stream", "Device", "Context.synchronize",
               "Context.get_device"},
    "compiler": {"SourceModule"},
    "gpuarray": {"to_gpu", "to_gpu_async", "empty", "zeros", "empty_like", "zeros_like", "arange", "GPUArray"},
}
_ARITHMETIC = {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
               "__neg__", "__iadd__", "__isub__", "__imul__", "__itruediv__"}
KIND_ATTRIBUTES = {
    "DeviceAllocation": {"free", "__int__", "__index__"},
    "Module": {"get_function", "get_global"},
    "Function": {"__call__", "prepare", "prepared_call", "prepared_timed_call", "prepared_async_call", "get_attribute",
                 "set_cache_config", "num_regs", "shared_size_bytes", "local_size_bytes", "const_size_bytes",
                 "max_threads_per_block"},
    "Event": {"record", "synchronize", "query", "time_since", "time_till"},
    "Stream": {"synchronize", "is_done"},
    "Device": {"name", "compute_capability", "get_attribute", "total_memory", "pci_bus_id"},
    "GPUArray": {"get", "set", "get_async", "set_async", "fill", "copy", "astype", "reshape", "ravel", "view",
                 "transpose", "__len__", "__getitem__", "__setitem__", "gpudata", "ptr", "shape", "dtype", "size",
                 "nbytes", "strides", "ndim", "mem_size", "T", "sum", "min", "max"} | _ARITHMETIC,
}
WRITES_ARRAYS = {"memcpy_dtoh", "memcpy_dtoh_async", "get", "get_async"}     # calls that fill a host array argument
# SourceModule options a graded host function may give (no -I, no other compiler, no keep/cache folders).
SAFE_OPTION = re.compile(r"^(-D\w+(=[\w.+-]*)?|-U\w+|-maxrregcount(=\d+)?|\d+|--use_fast_math|-use_fast_math|"
                         r"-lineinfo|-O[0-3]|--ptxas-options=-v|-Xptxas|-v)$")


class NotSupported(Exception):
    pass


class DeviceServer:
    """Does the device calls of a student's process with this process's backend, holding the objects."""

    def __init__(self):
        self.driver, self.source_module = backend.drivers()
        self.gpuarray = importlib.import_module("pycuda.gpuarray")     # the backend's PyCUDA (real or emulated)
        self.emulated = bool(getattr(self.driver, "EMULATED", False))
        self.objects: dict[int, tuple[object, str]] = {}

    # ---- kinds of device object
    def kind(self, value) -> str | None:
        d = self.driver
        for kind, cls in (("DeviceAllocation", getattr(d, "DeviceAllocation", None)), ("Function", d.Function),
                          ("Event", d.Event), ("Stream", d.Stream), ("Device", d.Device),
                          ("GPUArray", self.gpuarray.GPUArray)):
            if cls is not None and isinstance(value, cls):
                return kind
        if callable(getattr(value, "get_function", None)):
            return "Module"
        return None

    def _handle(self, value, kind: str) -> dict:
        number = len(self.objects)
        self.objects[number] = (value, kind)
        info = {}
        if kind == "DeviceAllocation":
            info = {"int": int(value)}
        elif kind == "GPUArray":
            info = {"shape": tuple(value.shape), "dtype": value.dtype, "size": int(value.size),
                    "nbytes": int(value.nbytes), "strides": tuple(value.strides), "ndim": len(value.shape)}
        return {"$t": "handle", "id": number, "kind": kind, "info": wire.encode(info, special=self._encode)}

    def _encode(self, value):
        if isinstance(value, _Method):
            return {"$t": "method", "id": value.handle, "attr": value.attr}
        kind = self.kind(value)
        return self._handle(value, kind) if kind else None

    # ---- one request
    def answer(self, request: dict) -> dict:
        try:
            value, outs = self._do(request)
            return {"op": "device-result", "value": wire.encode(value, special=self._encode), "outs": outs}
        except Exception as e:      # the device's or the arguments' fault: the student's code sees it, by name
            return {"op": "raise", "type": type(e).__name__, "message": str(e)}

    def _do(self, request: dict):
        target, attr = request.get("target") or {}, str(request.get("attr"))
        if "module" in target:
            module = str(target["module"])
            if attr not in MODULE_CALLS.get(module, ()):
                raise NotSupported(f"pycuda.{module}.{attr} is not available to a graded host function")
            owner = {"driver": self.driver, "compiler": None, "gpuarray": self.gpuarray}[module]
            function = self._compile if attr == "SourceModule" else _dotted(owner, attr)
        else:
            owner, kind = self.objects[int(target["handle"])]
            if attr not in KIND_ATTRIBUTES.get(kind, ()):
                raise NotSupported(f"{kind}.{attr} is not available to a graded host function")
            function = owner if attr == "__call__" else getattr(owner, attr)
            if not request.get("call"):
                if callable(function) and self.kind(function) is None:
                    return _Method(int(target["handle"]), attr), []
                return function, []
        arrays: dict[int, np.ndarray] = {}
        args = wire.decode(request.get("args", []), special=lambda t, x, w: self._argument(t, x, arrays))
        kwargs = wire.decode(request.get("kwargs", {}), special=lambda t, x, w: self._argument(t, x, arrays))
        value = function(*args, **dict(kwargs))
        writes = attr in WRITES_ARRAYS or attr == "__call__" or attr.startswith("prepared")
        outs = [[i, wire.npy(a)] for i, a in arrays.items() if writes or isinstance(a, _Written)]
        return value, outs

    def _argument(self, tag: str, item: dict, arrays: dict):
        if tag == "handle":
            return self.objects[int(item["id"])][0]
        if tag == "ndarray" and "index" in item:
            array = wire.from_npy(item["npy"]).copy()
            arrays[int(item["index"])] = array
            return array
        if tag == "inout":
            array = wire.from_npy(item["npy"]).copy().view(_Written if item["kind"] != "In" else np.ndarray)
            arrays[int(item["index"])] = array
            return getattr(self.driver, {"In": "In", "Out": "Out", "InOut": "InOut"}[item["kind"]])(array)
        if tag == "enum":
            name = str(item["name"])
            if item.get("kind") not in ("device_attribute", "function_attribute") or not name.isidentifier() \
                    or name.startswith("_"):
                raise NotSupported(f"{item.get('kind')}.{name} is not available to a graded host function")
            return getattr(getattr(self.driver, item["kind"]), name)
        return None

    def _compile(self, source, *args, **kwargs):
        """SourceModule, with only options that cannot run another program or read other files."""
        options = list(kwargs.pop("options", None) or (args[1] if len(args) > 1 else []))
        extra = set(kwargs) - {"no_extern_c", "arch"}
        if extra or len(args) > 2 or not isinstance(source, str):
            raise NotSupported(f"SourceModule({', '.join(sorted(extra)) or '...'}) is not available to a graded "
                               "host function: pass the source and options=[...] (-D, -U, -maxrregcount) only")
        bad = [o for o in options if not isinstance(o, str) or not SAFE_OPTION.match(o)]
        if bad:
            raise NotSupported(f"SourceModule option {bad[0]!r} is not available to a graded host function")
        return self.source_module(source, options=options, **kwargs)


class _Method:
    """A method of a device object, called later (obj.get_function, then its call)."""

    def __init__(self, handle: int, attr: str):
        self.handle, self.attr = handle, attr


class _Written(np.ndarray):
    """A host array a launch writes into (drv.Out, drv.InOut): sent back after the call."""


def _dotted(owner, path: str):
    for part in path.split("."):
        owner = getattr(owner, part)
    return owner


def _not_dumpable() -> None:
    """Neither ptrace nor /proc/PID/fd of this process for other processes of this user (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE = 4


# ---- the grading process's side ----------------------------------------------------------------
class RemoteFunction:
    """The student's function, called in the student's process."""

    def __init__(self):
        _not_dumpable()
        self.device = DeviceServer()
        self.folder = tempfile.mkdtemp(prefix="student-")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {"PATH": os.environ.get("PATH") or os.defpath, "TMPDIR": self.folder, "HOME": self.folder,
               "MPLCONFIGDIR": os.path.join(self.folder, "matplotlib"), "MPLBACKEND": "Agg",
               "CUDA_VISIBLE_DEVICES": "",          # no GPU: its device calls are this process's
               **interpreter.blas_threads(gpu=False)}
        job = {"path": interpreter.import_path(), "requests": to_child_r, "answers": from_child_w,
               "emulated": self.device.emulated}
        try:
            self.process = subprocess.Popen(sandbox.wrap(interpreter.command(__name__, "serve"), [self.folder],
                                                         self.folder, hidden=sandbox.hidden_from_student_code()),
                                            env=env, cwd=self.folder, stdin=subprocess.PIPE, text=True,
                                            pass_fds=(to_child_r, from_child_w))
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.close()
        self.to_child = os.fdopen(to_child_w, "wb")
        self.from_child = os.fdopen(from_child_r, "rb")
        self.ended: str | None = None

    def __call__(self, *args, **kwargs):
        callbacks: dict = {}
        message = {"op": "call", "args": wire.encode(list(args), callbacks), "kwargs": wire.encode(kwargs, callbacks)}
        return self._exchange(message, callbacks)

    def _exchange(self, message: dict, callbacks: dict):
        if self.ended:
            raise ProcessEnded(self.ended)
        try:
            wire.send(self.to_child, message)
            while True:
                answer = wire.receive(self.from_child)
                if answer is None:
                    break
                op = answer.get("op")
                if op == "device":
                    wire.send(self.to_child, self.device.answer(answer))
                elif op == "callback":
                    wire.send(self.to_child, self._call_back(callbacks, answer))
                elif op == "return":
                    return wire.decode(answer.get("value"))
                elif op == "raise":
                    raise wire.raised(str(answer.get("type")), str(answer.get("message")))
                elif op == "loaded":
                    return None
                else:
                    raise ValueError(f"unexpected message {str(op)[:40]!r}")
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
            args = wire.decode(request.get("args", []))
            kwargs = wire.decode(request.get("kwargs", {}))
            return {"op": "return", "value": wire.encode(function(*args, **dict(kwargs)))}
        except Exception as e:        # the grader's callback on what the student passed: the student sees it
            return {"op": "raise", "type": type(e).__name__, "message": str(e)}

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
def serve(job: dict) -> int:
    requests, answers = os.fdopen(job["requests"], "rb"), os.fdopen(job["answers"], "wb")
    remote.install(remote.Connection(requests, answers), emulated=bool(job.get("emulated")))
    backend.use_remote()
    function = None

    def call_back(number, args, kwargs):
        wire.send(answers, {"op": "callback", "id": number, "args": wire.encode(list(args)),
                            "kwargs": wire.encode(kwargs)})
        answer = wire.receive(requests)
        if answer is None:
            raise SystemExit(0)
        if answer.get("op") == "raise":
            raise wire.raised(answer["type"], answer["message"])
        return wire.decode(answer.get("value"))

    while (request := wire.receive(requests)) is not None:
        try:
            if request["op"] == "load":
                function = load_function(request["source"], request["name"])
                answer = {"op": "loaded"}
            else:
                args = wire.decode(request["args"], call_back, trusted=True)
                kwargs = wire.decode(request["kwargs"], call_back, trusted=True)
                answer = {"op": "return", "value": wire.encode(function(*args, **kwargs))}
        except BaseException as e:     # the student's code: whatever it raises is theirs to read
            if isinstance(e, KeyboardInterrupt):
                raise
            answer = {"op": "raise", "type": type(e).__name__, "message": str(e),
                      "traceback": traceback.format_exc()[-4000:]}
        wire.send(answers, answer)
    return 0

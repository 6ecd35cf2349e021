"""A PyCUDA whose device is in another process: the backend of a student's Python function.

A student's host function runs in a process of its own (grader.grading.student_process),
which has no GPU and no emulator of its own: `install(connection)` makes `import pycuda...`
resolve to modules whose every call (allocating, copying, compiling, launching, events) is
sent to the grading process and done there, by its backend, where the grader also watches
what is done (grader.kernels.host_log). Nothing the student's process does or reports can
change that record. Device objects (allocations, modules, functions, events, GPUArrays)
are handles to the grading process's objects; numpy arrays cross by value, and arrays a
call writes into (memcpy_dtoh's destination, drv.Out) are copied back.

Only the part of PyCUDA a host function of the labs needs is there; any other name raises
NotSupported saying so.
"""
from __future__ import annotations

import sys
import types

import numpy as np

from grader.platform import wire


class Error(Exception):
    """pycuda.driver.Error: a failure the device reported."""


class LogicError(Error):
    pass


class LaunchError(Error):
    pass


class RuntimeError_(Error):
    pass


class MemoryError_(Error):
    pass


class CompileError(Error):
    pass


class NotSupported(Error):
    """A part of PyCUDA that graded host functions cannot use."""


ERRORS = {"Error": Error, "LogicError": LogicError, "LaunchError": LaunchError, "RuntimeError": RuntimeError_,
          "MemoryError": MemoryError_, "CompileError": CompileError, "NotSupported": NotSupported}


class Connection:
    """The pipes to the grading process, over which device calls go while the student's function runs."""

    def __init__(self, requests, answers):
        self.requests, self.answers = requests, answers

    def call(self, target: dict, attr: str, args=(), kwargs=None, call: bool = True):
        arrays: list[np.ndarray] = []
        message = {"op": "device", "target": target, "attr": attr, "call": call,
                   "args": wire.encode(list(args), special=lambda v: _encode(v, arrays)),
                   "kwargs": wire.encode(dict(kwargs or {}), special=lambda v: _encode(v, arrays))}
        wire.send(self.answers, message)
        answer = wire.receive(self.requests)
        if answer is None:
            raise SystemExit(0)            # the grading process has gone: nothing more to do here
        if answer.get("op") == "raise":
            raise wire.raised(str(answer.get("type")), str(answer.get("message")), ERRORS)
        for index, data in answer.get("outs", []):      # arrays the call wrote into
            np.copyto(arrays[int(index)], wire.from_npy(data), casting="unsafe")
        return wire.decode(answer.get("value"), special=_decode)


_connection: Connection | None = None


def _request(target: dict, attr: str, args=(), kwargs=None, call: bool = True):
    if _connection is None:
        raise NotSupported("no grading process to run device calls")
    return _connection.call(target, attr, args, kwargs, call)


class ArrayArgument:
    """drv.In / drv.Out / drv.InOut: a numpy array passed to a launch."""

    def __init__(self, kind: str, array):
        self.kind, self.array = kind, array


class Enum:
    """drv.device_attribute, drv.function_attribute: names stand for themselves."""

    def __init__(self, kind: str):
        self._kind = kind

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return EnumValue(self._kind, name)


class EnumValue:
    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name


def _encode(value, arrays: list):
    if isinstance(value, RemoteObject):
        return {"$t": "handle", "id": value._id}
    if isinstance(value, ArrayArgument):
        arrays.append(np.asarray(value.array))
        return {"$t": "inout", "kind": value.kind, "index": len(arrays) - 1, "npy": wire.npy(np.asarray(value.array))}
    if isinstance(value, np.ndarray) and value.dtype != object:
        arrays.append(value)
        return {"$t": "ndarray", "npy": wire.npy(value), "index": len(arrays) - 1}
    if isinstance(value, EnumValue):
        return {"$t": "enum", "kind": value.kind, "name": value.name}
    return None


def _decode(tag: str, item: dict, walk):
    if tag == "handle":
        cls = KINDS.get(item.get("kind"), RemoteObject)
        return cls(int(item["id"]), str(item.get("kind")), walk(item.get("info", {})))
    if tag == "method":
        return RemoteMethod(int(item["id"]), str(item["attr"]))
    return None


class RemoteMethod:
    def __init__(self, handle: int, attr: str):
        self._handle, self._attr = handle, attr

    def __call__(self, *args, **kwargs):
        return _request({"handle": self._handle}, self._attr, args, kwargs)


def _forward(name: str):
    def method(self, *args):
        return _request({"handle": self._id}, name, args)
    method.__name__ = name
    return method


class RemoteObject:
    """A device object of the grading process: an allocation, a module, a function, an event, ..."""

    def __init__(self, id: int, kind: str, info: dict):
        self._id, self._kind, self._info = id, kind, dict(info)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._info:
            return self._info[name]
        return _request({"handle": self._id}, name, call=False)

    def __call__(self, *args, **kwargs):
        return _request({"handle": self._id}, "__call__", args, kwargs)

    def __int__(self) -> int:
        return int(self._info["int"]) if "int" in self._info else _request({"handle": self._id}, "__int__")

    __index__ = __int__

    def __len__(self) -> int:
        return int(_request({"handle": self._id}, "__len__"))

    def __repr__(self) -> str:
        return f"<{self._kind} in the grading process>"


for _name in ("__getitem__", "__setitem__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__neg__", "__iadd__", "__isub__", "__imul__", "__itruediv__"):
    setattr(RemoteObject, _name, _forward(_name))


class DeviceAllocation(RemoteObject):
    pass


class GPUArray(RemoteObject):
    pass


class Function(RemoteObject):
    pass


class Event(RemoteObject):
    pass


KINDS = {"DeviceAllocation": DeviceAllocation, "GPUArray": GPUArray, "Function": Function, "Event": Event}


class _Context:
    """pycuda.driver.Context: the grading process's context, synchronised on request."""

    @staticmethod
    def synchronize():
        return _request({"module": "driver"}, "Context.synchronize")

    @staticmethod
    def get_device():
        return _request({"module": "driver"}, "Context.get_device")


def _module(name: str, doc: str, names: dict) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(names)
    remote = name.split(".")[-1]

    def forward(attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return lambda *args, **kwargs: _request({"module": remote}, attr, args, kwargs)
    module.__getattr__ = forward
    return module


def install(connection: Connection, emulated: bool) -> None:
    """Make `pycuda` and its submodules forward to the grading process over `connection`."""
    global _connection
    _connection = connection
    for name in [m for m in sys.modules if m == "pycuda" or m.startswith("pycuda.")]:
        del sys.modules[name]
    driver = _module("pycuda.driver", "PyCUDA's driver, run by the grading process", dict(
        ERRORS, Context=_Context, In=lambda a: ArrayArgument("In", a), Out=lambda a: ArrayArgument("Out", a),
        InOut=lambda a: ArrayArgument("InOut", a), device_attribute=Enum("device_attribute"),
        function_attribute=Enum("function_attribute"), init=lambda flags=0: None, EMULATED=emulated))
    package = _module("pycuda", "PyCUDA, run by the grading process", {
        "VERSION_STATUS": "remote", "VERSION_TEXT": "remote", "__path__": []})
    modules = {"pycuda": package, "pycuda.driver": driver,
               "pycuda.compiler": _module("pycuda.compiler", "PyCUDA's compiler, run by the grading process", {}),
               "pycuda.gpuarray": _module("pycuda.gpuarray", "PyCUDA's GPUArray, run by the grading process", {}),
               "pycuda.autoinit": _module("pycuda.autoinit", "the grading process's context", {}),
               "pycuda.autoprimaryctx": _module("pycuda.autoprimaryctx", "the grading process's context", {})}
    for name, module in modules.items():
        sys.modules[name] = module
        if name != "pycuda":
            setattr(package, name.split(".")[1], module)


def installed() -> bool:
    return getattr(sys.modules.get("pycuda"), "VERSION_STATUS", None) == "remote"

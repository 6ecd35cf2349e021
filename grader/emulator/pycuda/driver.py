"""Emulated `pycuda.driver`: the subset of PyCUDA's driver API that the labs
use, running kernels on the CPU. Names and behaviour follow PyCUDA 2026.1."""
from __future__ import annotations

import builtins
import ctypes
import enum
import functools
import re
import sys
import threading
import time

import numpy as np

from .. import analysis, config
from ..binding import FAULT, INVALID, LAUNCH_FAILURE, TIMEOUT, TRAP, Kernel, LoadedModule, pack_arguments, take_output
from ..memory import DeviceAllocation, bytes_in_use, device_view, find_allocation, live_ranges

EMULATED = True
TIMING = "wall-clock time on the CPU emulator"


# ---- errors (pycuda._driver) ---------------------------------------------------
class Error(Exception):
    pass


class LogicError(Error):
    pass


class LaunchError(Error):
    """A launch that failed. `kind` says how: deadlock, refused, timeout, fault or trap."""

    def __init__(self, message: str, kind: str = "launch"):
        super().__init__(message)
        self.kind = kind


class RuntimeError(Error):  # noqa: A001 - PyCUDA's name
    pass


class MemoryError(Error):  # noqa: A001 - PyCUDA's name
    pass


class NotSupported(LogicError):
    """What a GPU offers and the CPU emulator does not (textures, cubins, ...)."""


class CompileError(Error):
    def __init__(self, msg, command_line=None, stdout=None, stderr=None):
        super().__init__(msg)
        self.msg, self.command_line, self.stdout, self.stderr = msg, command_line, stdout, stderr

    def __str__(self):
        return self.msg


# One device, one default stream: launches and copies from several host threads
# run one after another, as the legacy default stream orders them on a GPU
# (the runtime's launch state, printf buffer and analysis report are shared).
_serial = threading.RLock()


def _serialised(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with _serial:
            return fn(*args, **kwargs)
    return run

_LAUNCH_KINDS = {LAUNCH_FAILURE: "deadlock", TIMEOUT: "timeout", FAULT: "fault", TRAP: "trap", INVALID: "invalid"}
_DEADLOCKS = ("deadlock: no thread can go on", "divergent barrier")


def _launch_kind(code: int, message: str) -> str:
    """A launch failure is a deadlock only where no thread could go on; otherwise the runtime refused what the
    kernel did (a copy through an unfenced tensor map, an mbarrier misused, a copy out of range)."""
    if code == LAUNCH_FAILURE and not any(d in message for d in _DEADLOCKS):
        return "refused"
    return _LAUNCH_KINDS.get(code, "launch")


# ---- device -------------------------------------------------------------------
class _NamedInt(enum.IntEnum):
    """An enum member that prints as its name, as PyCUDA's (Boost.Python) enums do."""

    def __str__(self) -> str:
        return self.name


class device_attribute(_NamedInt):  # noqa: N801 - PyCUDA's name
    """Attribute ids; the values are the H200's, in grader.emulator.config.DEVICE_ATTRIBUTES."""
    MAX_THREADS_PER_BLOCK = 1
    MAX_BLOCK_DIM_X = 2
    MAX_BLOCK_DIM_Y = 3
    MAX_BLOCK_DIM_Z = 4
    MAX_GRID_DIM_X = 5
    MAX_GRID_DIM_Y = 6
    MAX_GRID_DIM_Z = 7
    MAX_SHARED_MEMORY_PER_BLOCK = 8
    TOTAL_CONSTANT_MEMORY = 9
    WARP_SIZE = 10
    MAX_PITCH = 11
    MAX_REGISTERS_PER_BLOCK = 12
    CLOCK_RATE = 13
    MULTIPROCESSOR_COUNT = 16
    MEMORY_CLOCK_RATE = 36
    GLOBAL_MEMORY_BUS_WIDTH = 37
    L2_CACHE_SIZE = 38
    MAX_THREADS_PER_MULTIPROCESSOR = 39
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76
    MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
    MAX_REGISTERS_PER_MULTIPROCESSOR = 82
    MAX_BLOCKS_PER_MULTIPROCESSOR = 106
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    RESERVED_SHARED_MEMORY_PER_BLOCK = 111
    GPU_OVERLAP = 15
    CAN_MAP_HOST_MEMORY = 19
    COMPUTE_MODE = 20
    CONCURRENT_KERNELS = 31
    ECC_ENABLED = 32
    ASYNC_ENGINE_COUNT = 40
    GLOBAL_L1_CACHE_SUPPORTED = 79
    CONCURRENT_MANAGED_ACCESS = 89
    COMPUTE_PREEMPTION_SUPPORTED = 90
    CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91
    DIRECT_MANAGED_MEM_ACCESS_FROM_HOST = 101


_DEVICE_VALUES = config.DEVICE_ATTRIBUTES
_ATTRIBUTE_VALUES = {device_attribute[k]: v for k, v in _DEVICE_VALUES.items()}


_initialized = False


def init(flags: int = 0) -> None:
    global _initialized
    _initialized = True


def get_version() -> tuple[int, int, int]:
    return (13, 0, 0)


def get_driver_version() -> int:
    return 13000


class Device:
    def __init__(self, ordinal: int = 0):
        if ordinal != 0:
            raise LogicError(f"cuDeviceGet failed: invalid device ordinal {ordinal} (the emulator has one device)")
        self.ordinal = ordinal

    @staticmethod
    def count() -> int:
        return 1

    def name(self) -> str:
        return config.DEVICE_NAME

    def compute_capability(self) -> tuple[int, int]:
        return config.COMPUTE_CAPABILITY

    def total_memory(self) -> int:
        return config.total_memory()

    def pci_bus_id(self) -> str:
        return "emulator"

    def get_attribute(self, attr: int) -> int:
        try:
            return _ATTRIBUTE_VALUES[int(attr)]
        except (KeyError, ValueError):
            raise LogicError(f"cuDeviceGetAttribute: attribute {attr} is not emulated") from None

    def get_attributes(self) -> dict[device_attribute, int]:
        """{device_attribute.NAME: value}; the keys print as their names."""
        return dict(_ATTRIBUTE_VALUES)

    def __getattr__(self, name: str):
        if name.upper() in _DEVICE_VALUES:
            return _DEVICE_VALUES[name.upper()]
        raise AttributeError(name)

    def make_context(self, flags: int = 0) -> Context:
        return Context._push_new(self)

    def retain_primary_context(self) -> Context:
        return Context(self)

    def __eq__(self, other) -> bool:
        return isinstance(other, Device) and other.ordinal == self.ordinal

    def __hash__(self) -> int:
        return hash(self.ordinal)


class func_cache:  # noqa: N801
    PREFER_NONE, PREFER_SHARED, PREFER_L1, PREFER_EQUAL = range(4)


class shared_config:  # noqa: N801
    DEFAULT_BANK_SIZE, FOUR_BYTE_BANK_SIZE, EIGHT_BYTE_BANK_SIZE = range(3)


class ctx_flags:  # noqa: N801
    SCHED_AUTO, SCHED_SPIN, SCHED_YIELD, SCHED_BLOCKING_SYNC = 0, 1, 2, 4
    MAP_HOST = 8


class Context:
    _stack: list[Context] = []

    def __init__(self, device: Device):
        self._device = device

    @classmethod
    def _push_new(cls, device: Device) -> Context:
        ctx = cls(device)
        cls._stack.append(ctx)
        return ctx

    def push(self) -> None:
        Context._stack.append(self)

    @staticmethod
    def pop() -> None:
        if Context._stack:
            Context._stack.pop()

    def detach(self) -> None:
        if self in Context._stack:
            Context._stack.remove(self)

    @staticmethod
    def synchronize() -> None:
        pass  # launches run to completion before they return

    @staticmethod
    def get_device() -> Device:
        return Device(0)

    @staticmethod
    def get_current() -> Context | None:
        return Context._stack[-1] if Context._stack else None

    @staticmethod
    def set_cache_config(config) -> None:
        pass

    @staticmethod
    def get_cache_config():
        return func_cache.PREFER_NONE

    @staticmethod
    def set_shared_config(config) -> None:
        pass


class Stream:
    def __init__(self, flags: int = 0):
        self.handle = id(self)

    def synchronize(self) -> None:
        pass

    def is_done(self) -> bool:
        return True


class Event:
    """Records wall-clock time on the host: the emulator's launches are
    synchronous, so time between two events is how long the CPU took."""

    def __init__(self, flags: int = 0):
        self._t: float | None = None

    def record(self, stream: Stream | None = None) -> Event:
        self._t = time.perf_counter()
        return self

    def synchronize(self) -> Event:
        return self

    def query(self) -> bool:
        return True

    def time_since(self, start: Event) -> float:
        if self._t is None or start._t is None:
            raise LogicError("cuEventElapsedTime failed: an event was never recorded")
        return (self._t - start._t) * 1e3

    def time_till(self, end: Event) -> float:
        return end.time_since(self)


# ---- memory -----------------------------------------------------------------
_LARGE = 1 << 26     # bytes; an allocation this large is checked against the host's free memory first


def _require_context(call: str) -> None:
    """PyCUDA's errors for a call before init() or without a current context
    (when the program runs under python -m grader.emulator)."""
    if not config.contexts_required():
        return
    if not _initialized:
        raise LogicError(f"{call} failed: initialization error (pycuda.driver.init() was never called: import "
                         "pycuda.autoinit, or call init() and make a context)")
    if Context.get_current() is None:
        raise LogicError("explicit_context_dependent failed: invalid device context - no currently active context? "
                         f"(in {call}: import pycuda.autoinit, or make one with pycuda.driver.Device(0).make_context())")


def mem_alloc(nbytes: int) -> DeviceAllocation:
    _require_context("cuMemAlloc")
    nbytes = int(nbytes)
    free = mem_get_info()[0] if nbytes >= _LARGE else nbytes    # small ones: numpy says when the host is full
    if nbytes > free:
        raise MemoryError(f"cuMemAlloc failed: out of memory ({nbytes} bytes requested, {free} free: the emulator's "
                          "device memory is the host's)")
    try:
        return DeviceAllocation(nbytes)
    except builtins.MemoryError:
        raise MemoryError(f"cuMemAlloc failed: out of memory ({nbytes} bytes requested)") from None


def mem_alloc_like(ary: np.ndarray) -> DeviceAllocation:
    return mem_alloc(ary.nbytes)


def mem_get_info() -> tuple[int, int]:
    """(free, total) bytes: the H200's capacity, or the host's memory where that is less."""
    _require_context("cuMemGetInfo")
    total = config.total_memory()
    return max(0, min(total - bytes_in_use(), config.host_memory()[0])), total


def _host_bytes(ary, what: str) -> np.ndarray:
    ary = np.asarray(ary)
    if not ary.flags.c_contiguous:
        raise LogicError(f"{what}: the host array must be contiguous (use numpy.ascontiguousarray)")
    return ary.reshape(-1).view(np.uint8)


@_serialised
def memcpy_htod(dest, src, stream: Stream | None = None) -> None:
    data = _host_bytes(src, "memcpy_htod")
    _checked_view(dest, data.size, "memcpy_htod")[:] = data


@_serialised
def memcpy_dtoh(dest, src, stream: Stream | None = None) -> None:
    if not isinstance(dest, np.ndarray) or not dest.flags.c_contiguous:
        raise LogicError("memcpy_dtoh: the destination must be a contiguous numpy array")
    out = dest.reshape(-1).view(np.uint8)
    out[:] = _checked_view(src, out.size, "memcpy_dtoh")


memcpy_htod_async = memcpy_htod
memcpy_dtoh_async = memcpy_dtoh


@_serialised
def memcpy_dtod(dest, src, size: int, stream: Stream | None = None) -> None:
    _checked_view(dest, size, "memcpy_dtod")[:] = _checked_view(src, size, "memcpy_dtod").copy()


memcpy_dtod_async = memcpy_dtod


def _checked_view(ptr, nbytes: int, what: str) -> np.ndarray:
    try:
        return device_view(int(ptr), int(nbytes), what)
    except ValueError as e:
        raise LogicError(f"{e} (cuMemcpy: invalid argument)") from None


@_serialised
def _memset(dest, value: int, count: int, dtype) -> None:
    itemsize = np.dtype(dtype).itemsize
    _checked_view(dest, count * itemsize, "memset").view(dtype)[:] = value


def memset_d8(dest, data: int, count: int) -> None:
    _memset(dest, data, count, np.uint8)


def memset_d16(dest, data: int, count: int) -> None:
    _memset(dest, data, count, np.uint16)


def memset_d32(dest, data: int, count: int) -> None:
    _memset(dest, data, count, np.uint32)


def to_device(ary) -> DeviceAllocation:
    data = _host_bytes(ary, "to_device")
    alloc = mem_alloc(data.size)
    alloc.as_array()[:] = data
    return alloc


def from_device(devptr, shape, dtype, order: str = "C") -> np.ndarray:
    result = np.empty(shape, dtype, order=order)
    memcpy_dtoh(result, devptr)
    return result


def from_device_like(devptr, other_ary: np.ndarray) -> np.ndarray:
    return from_device(devptr, other_ary.shape, other_ary.dtype)


def pagelocked_empty(shape, dtype, order: str = "C", mem_flags: int = 0) -> np.ndarray:
    return np.empty(shape, dtype, order=order)


def pagelocked_zeros(shape, dtype, order: str = "C", mem_flags: int = 0) -> np.ndarray:
    return np.zeros(shape, dtype, order=order)


def pagelocked_empty_like(ary: np.ndarray, mem_flags: int = 0) -> np.ndarray:
    return np.empty_like(ary)


class PointerHolderBase:
    """Subclass it and define get_pointer() to pass your own device memory object to kernels."""

    def get_pointer(self) -> int:
        raise NotImplementedError("a PointerHolderBase subclass defines get_pointer()")

    def __int__(self) -> int:
        return int(self.get_pointer())

    __index__ = __int__

    def as_buffer(self, size: int, offset: int = 0) -> memoryview:
        return memoryview(_checked_view(self.get_pointer() + offset, size, "as_buffer"))


class ArgumentHandler:
    def __init__(self, ary):
        self.array = ary
        self.dev_alloc = None

    def get_device_alloc(self) -> DeviceAllocation:
        if self.dev_alloc is None:
            self.dev_alloc = mem_alloc_like(np.asarray(self.array))
        return self.dev_alloc

    def pre_call(self, stream) -> None:
        pass


class In(ArgumentHandler):
    def pre_call(self, stream) -> None:
        memcpy_htod(self.get_device_alloc(), self.array)


class Out(ArgumentHandler):
    def post_call(self, stream) -> None:
        memcpy_dtoh(self.array, self.get_device_alloc())


class InOut(In, Out):
    pass


# ---- modules and functions ---------------------------------------------------
class function_attribute:  # noqa: N801
    MAX_THREADS_PER_BLOCK, SHARED_SIZE_BYTES, CONST_SIZE_BYTES, LOCAL_SIZE_BYTES, NUM_REGS, \
        PTX_VERSION, BINARY_VERSION, CACHE_MODE_CA, MAX_DYNAMIC_SHARED_SIZE_BYTES = range(9)


class Module:
    def __init__(self, loaded: LoadedModule, build_for_analysis=None):
        self._loaded = loaded
        self._build_for_analysis = build_for_analysis
        self._analysis_module: LoadedModule | None = None

    def analysis_variant(self) -> LoadedModule:
        """The same source built with a hook on every memory access."""
        if self._analysis_module is None:
            if self._build_for_analysis is None:
                raise LogicError("this module cannot be analysed (it was not built from source)")
            self._analysis_module = self._build_for_analysis()
        return self._analysis_module

    def get_function(self, name: str) -> Function:
        kernel = self._loaded.kernels.get(name)
        if kernel is None:
            known = ", ".join(sorted({k.name for k in self._loaded.kernels.values()})) or "none"
            raise LogicError(f"cuModuleGetFunction failed: named symbol not found: '{name}' "
                             f"(kernels in this module: {known})")
        if name != kernel.symbol and name.isidentifier():      # a GPU finds a C++ kernel by its mangled name only
            raise LogicError(f"cuModuleGetFunction failed: named symbol not found: '{name}' (the kernel has C++ "
                             f"linkage, so its symbol is '{kernel.symbol}': declare it extern \"C\" __global__, "
                             f"as SourceModule does for the whole source unless no_extern_c=True)")
        return Function(self._loaded, kernel, self)

    def get_global(self, name: str) -> tuple[int, int]:
        if name not in self._loaded.variables:
            raise LogicError(f"cuModuleGetGlobal failed: named symbol not found: '{name}'")
        addr, size = self._loaded.variables[name]
        return DeviceAllocation.wrap(addr, size, self._loaded), size

    def get_texref(self, name: str):
        raise LogicError("texture references are not supported by the emulator")


def _argument_values(args) -> tuple[list, list]:
    """PyCUDA's rules (driver._build_arg_buf): numpy scalars by value, device
    memory and GPUArrays as pointers, In/Out/InOut copied around the launch."""
    handlers, values = [], []
    for i, arg in enumerate(args):
        if isinstance(arg, np.number):
            values.append(_prepared_value(arg.dtype.char, arg))      # a numpy.uintp pointer too
        elif isinstance(arg, (DeviceAllocation, PointerHolderBase)):
            values.append(("P", int(arg)))
        elif isinstance(arg, ArgumentHandler):
            handlers.append(arg)
            values.append(("P", int(arg.get_device_alloc())))
        elif isinstance(arg, np.ndarray):
            values.append((f"{arg.nbytes}s", arg.tobytes()))
        elif isinstance(arg, np.void):
            values.append((f"{arg.itemsize}s", bytes(memoryview(arg))))
        elif hasattr(arg, "gpudata"):
            values.append(("P", int(arg.gpudata)))
        elif hasattr(arg, "__cuda_array_interface__"):
            values.append(("P", int(arg.__cuda_array_interface__["data"][0])))
        elif isinstance(arg, int) and find_allocation(arg) is not None:
            values.append(("P", arg))  # a pointer computed as int(alloc) + offset
        else:
            hint = " (wrap Python numbers as numpy.int32(...) or numpy.float32(...))" \
                if isinstance(arg, (int, float)) else ""
            raise TypeError(f"invalid type on parameter #{i} (0-based): {type(arg).__name__}{hint}")
    return handlers, values


class Function:
    def __init__(self, loaded: LoadedModule, kernel: Kernel, module: Module):
        self._loaded = loaded
        self._kernel = kernel
        self._module = module
        self.arg_format = None
        self._max_dynamic_shared = _DEVICE_VALUES["MAX_SHARED_MEMORY_PER_BLOCK"]
        res = loaded.built.resources.get(kernel.symbol) or loaded.built.resources.get(kernel.name)
        self.resources_known = res is not None
        self.num_regs = res.registers if res else 0
        self.shared_size_bytes = res.shared_bytes if res else 0
        self.local_size_bytes = res.local_bytes if res else 0
        self.const_size_bytes = res.const_bytes if res else 0
        self.max_threads_per_block = _DEVICE_VALUES["MAX_THREADS_PER_BLOCK"]

    def __repr__(self) -> str:
        return f"<emulated Function {self._kernel.signature()}>"

    def prepare_analysis(self) -> None:
        """Build the analysis variant and start its line lookup now (not at the first analysed launch)."""
        analysis.serve_lines(self._module.analysis_variant())

    def get_attribute(self, attr: int) -> int:
        return {
            function_attribute.MAX_THREADS_PER_BLOCK: self.max_threads_per_block,
            function_attribute.SHARED_SIZE_BYTES: self.shared_size_bytes,
            function_attribute.CONST_SIZE_BYTES: self.const_size_bytes,
            function_attribute.LOCAL_SIZE_BYTES: self.local_size_bytes,
            function_attribute.NUM_REGS: self.num_regs,
            function_attribute.PTX_VERSION: 90,
            function_attribute.BINARY_VERSION: 90,
            function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES: self._max_dynamic_shared,
        }[attr]

    def set_attribute(self, attr: int, value: int) -> None:
        if attr == function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if value > _DEVICE_VALUES["MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"]:
                raise LogicError("cuFuncSetAttribute failed: invalid value")
            self._max_dynamic_shared = int(value)

    def set_cache_config(self, config) -> None:
        pass

    def set_shared_config(self, config) -> None:
        pass

    # -- launching
    def __call__(self, *args, grid=(1, 1), block=None, shared=0, stream=None, texrefs=(), time_kernel=False):
        if block is None:
            raise ValueError("must specify block size")
        handlers, values = _argument_values(args)
        for h in handlers:
            h.pre_call(stream)
        start = time.perf_counter()
        self._launch(values, grid, block, shared)
        elapsed = time.perf_counter() - start
        for h in handlers:
            if hasattr(h, "post_call"):
                h.post_call(stream)
        return elapsed if time_kernel else None

    def prepare(self, arg_types, texrefs=()) -> Function:
        fmt = ""
        for t in arg_types:
            if isinstance(t, type) and issubclass(t, np.number):
                fmt += np.dtype(t).char
            elif isinstance(t, np.dtype):
                fmt += f"{t.itemsize}s" if t.char == "V" else t.char
            elif isinstance(t, str):
                fmt += t
            else:
                fmt += np.dtype(np.uintp).char
        self.arg_format = fmt
        return self

    def _prepared_values(self, args) -> list:
        chars = re.findall(r"\d*[a-zA-Z?]", self.arg_format or "")
        if len(chars) != len(args):
            raise TypeError(f"prepared format '{self.arg_format}' has {len(chars)} items, got {len(args)} arguments")
        return [_prepared_value(c, a) for c, a in zip(chars, args)]

    def prepared_call(self, grid, block, *args, shared_size=0) -> None:
        self._launch(self._prepared_values(args), grid, block, shared_size)

    def prepared_timed_call(self, grid, block, *args, shared_size=0):
        start = time.perf_counter()
        self.prepared_call(grid, block, *args, shared_size=shared_size)
        elapsed = time.perf_counter() - start
        return lambda: elapsed

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0) -> None:
        self.prepared_call(grid, block, *args, shared_size=shared_size)

    @_serialised
    def _launch(self, values, grid, block, shared) -> None:
        _require_context("cuLaunchKernel")
        grid3, block3 = _dims(grid, "grid"), _dims(block, "block")
        self._check_config(grid3, block3, int(shared))
        params = pack_arguments(self._kernel, values)
        if analysis.active() is not None:
            return self._launch_analysed(values, params, grid3, block3, int(shared))
        code, message = self._loaded.launch(self._kernel, params, grid3, block3, int(shared),
                                             config.launch_timeout(), config.thread_order_seed(), live_ranges())
        self._finish(code, message)

    def _finish(self, code: int, message: str) -> None:
        printed = take_output()
        if printed:
            sys.stdout.write(printed)
        if code:
            if code == TIMEOUT:
                config.note_stopped_launch()
            if "internal emulator error" in message:     # the emulator's own failure, not the kernel's
                raise builtins.RuntimeError(f"cuLaunchKernel failed: {message}")
            raise LaunchError(f"cuLaunchKernel failed: {message}", _launch_kind(code, message))

    def _launch_analysed(self, values, params, grid, block, shared) -> None:
        """The launch on the analysis build of the module, its module variables
        copied in and out, its findings added to the active report."""
        loaded = self._module.analysis_variant()
        kernel = loaded.kernels[self._kernel.name]
        _copy_variables(self._loaded, loaded)
        buffers = live_ranges()
        names = [_buffer_name(start, size, values, self._kernel) for start, size in sorted(buffers)]
        code, message = loaded.launch(kernel, params, grid, block, shared, config.launch_timeout(),
                                      config.thread_order_seed(), buffers)
        _copy_variables(loaded, self._loaded)
        findings = analysis.collect(loaded, kernel.name, block, names, sorted(buffers))
        if code == FAULT and findings:
            message = findings[0].describe()
        self._finish(code, message)

    def _check_config(self, grid, block, shared) -> None:
        limits = _DEVICE_VALUES
        name = self._kernel.name
        threads = block[0] * block[1] * block[2]
        problems = []
        if min(block) < 1 or min(grid) < 1:
            problems.append(f"block {block} and grid {grid} must be at least 1 in every dimension")
        if threads > limits["MAX_THREADS_PER_BLOCK"]:
            problems.append(f"block {block} has {threads} threads; at most {limits['MAX_THREADS_PER_BLOCK']}")
        for i, axis in enumerate("XYZ"):
            if block[i] > limits[f"MAX_BLOCK_DIM_{axis}"]:
                problems.append(f"block {axis.lower()} = {block[i]} exceeds {limits[f'MAX_BLOCK_DIM_{axis}']}")
            if grid[i] > limits[f"MAX_GRID_DIM_{axis}"]:
                problems.append(f"grid {axis.lower()} = {grid[i]} exceeds {limits[f'MAX_GRID_DIM_{axis}']}")
        if shared > self._max_dynamic_shared:
            problems.append(f"{shared} bytes of dynamic shared memory exceed {self._max_dynamic_shared} "
                            "(raise the limit with set_attribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ...))")
        if self.shared_size_bytes + shared > limits["MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"]:
            problems.append(f"{self.shared_size_bytes} static + {shared} dynamic bytes of shared memory "
                            "exceed the per-block limit")
        if problems:
            raise LogicError(f"cuLaunchKernel failed: invalid argument: kernel '{name}': " + "; ".join(problems))


def _prepared_value(char: str, arg) -> tuple[str, object]:
    """An argument of format `char` (a prepared one, or a numpy scalar): device memory goes as a pointer whatever
    integer format stands for it (PyCUDA's examples use numpy.intp)."""
    arg = getattr(arg, "gpudata", arg)
    if isinstance(arg, DeviceAllocation):
        return "P", int(arg)
    if char in "PlLqQ" and isinstance(arg, (int, np.integer)) and find_allocation(int(arg)) is not None:
        return "P", int(arg)
    if char.endswith("s") and not isinstance(arg, bytes):      # a struct (vector type) by value
        return char, np.asarray(arg).tobytes()
    return char, arg


def _copy_variables(src: LoadedModule, dest: LoadedModule) -> None:
    for name, (addr, size) in src.variables.items():
        if name in dest.variables:
            ctypes.memmove(dest.variables[name][0], addr, size)


def _buffer_name(start: int, size: int, values, kernel: Kernel) -> str:
    """A device allocation as the student knows it: the argument pointing into it."""
    for i, (char, value) in enumerate(values):
        if char == "P" and start <= value < start + max(size, 1):
            return f"argument {i} ({kernel.params[i].type_name}, a {size}-byte buffer)"
    return f"a {size}-byte device buffer that is not an argument of the launch"


def _dims(value, what: str) -> tuple[int, int, int]:
    for v in value:
        if not isinstance(v, (int, np.integer)):
            raise TypeError(f"No registered converter was able to produce a C++ rvalue of type unsigned int from "
                            f"this Python object of type {type(v).__name__} ({what} dimensions must be integers, "
                            f"got {tuple(value)!r})")
    dims = tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def module_from_buffer(buffer, options=None, message_handler=None):
    raise LogicError("the emulator runs CUDA C source only: use SourceModule instead of a cubin or PTX")


def module_from_file(filename):
    raise LogicError("the emulator runs CUDA C source only: use SourceModule instead of a cubin or PTX")

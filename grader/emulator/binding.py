"""ctypes binding to the emulator runtime: load a compiled module, read its
kernel table, pack arguments like CUDA, launch."""
from __future__ import annotations

import ctypes
import re
import struct
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import config
from .build import BuiltModule, runtime_library

# Result codes of emu_launch (runtime/runtime.h).
OK, LAUNCH_FAILURE, TIMEOUT, FAULT, TRAP, INVALID = range(6)
# The layout of ModuleInfo and KernelEntry below: emu_abi.h's kAbiVersion (a test keeps them equal).
ABI_VERSION = 1


class AbiMismatch(RuntimeError):
    """A compiled kernel module from another version of the emulator."""

PARAM_KINDS = {0: "other", 1: "pointer", 2: "integer", 3: "float"}


class _KernelEntry(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("fn", ctypes.c_void_p),
        ("thunk", ctypes.c_void_p),
        ("nparams", ctypes.c_int),
        ("sizes", ctypes.POINTER(ctypes.c_size_t)),
        ("aligns", ctypes.POINTER(ctypes.c_size_t)),
        ("kinds", ctypes.POINTER(ctypes.c_int)),
        ("type_names", ctypes.POINTER(ctypes.c_char_p)),
    ]


class _GlobalEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("addr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _ModuleInfo(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_int),
        ("nkernels", ctypes.c_int),
        ("kernels", ctypes.POINTER(_KernelEntry)),
        ("nglobals", ctypes.c_int),
        ("globals", ctypes.POINTER(_GlobalEntry)),
        ("shared_begin", ctypes.c_void_p),
        ("shared_end", ctypes.c_void_p),
    ]


@lru_cache(maxsize=None)
def runtime() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(runtime_library()), mode=ctypes.RTLD_GLOBAL)
    lib.emu_launch.restype = ctypes.c_int
    lib.emu_launch.argtypes = [ctypes.POINTER(_ModuleInfo), ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                               ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                               ctypes.c_size_t, ctypes.c_double, ctypes.c_ulonglong,
                               ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_int]
    lib.emu_last_error.restype = ctypes.c_char_p
    lib.emu_take_output.restype = ctypes.c_size_t
    lib.emu_take_output.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.emu_pending_output.restype = ctypes.c_size_t
    for name in ("emu_analysis_sites", "emu_analysis_races", "emu_analysis_findings"):
        getattr(lib, name).restype = ctypes.c_size_t
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.emu_analysis_enable.argtypes = [ctypes.c_int]
    lib.emu_analysis_order.argtypes = [ctypes.c_int]
    return lib


@dataclass(frozen=True)
class Param:
    size: int
    align: int
    kind: str
    type_name: str


def _type_name(pretty: str) -> str:
    m = re.search(r"\[with T = (.*)\]$", pretty)
    return m.group(1) if m else pretty


@dataclass
class Kernel:
    name: str
    symbol: str
    index: int
    params: list[Param]

    def signature(self) -> str:
        return f"{self.name}({', '.join(p.type_name for p in self.params)})"


# What makes a CUDA thread wait for others (runtime/cuda_emu.h): a module that
# imports none of these runs each block's threads one after the other, without
# a fiber per thread.
_WAITING_CALLS = (b"__emu_syncthreads", b"__emu_syncthreads_reduce", b"__emu_syncwarp", b"__emu_warp_exchange",
                  b"__emu_activemask", b"__emu_mbarrier_arrive", b"__emu_mbarrier_wait")


# The asynchronous proxy (runtime/include/hopper.cuh): a module that imports one of these has its analysed
# launches keep a happens-before order of their threads (runtime/analysis.cpp).
_ASYNC_PROXY_CALLS = (b"__emu_mbarrier_init", b"__emu_bulk_copy", b"__emu_bulk_store", b"__emu_fence_proxy_async",
                      b"__emu_tma_load_2d", b"__emu_wgmma")


def _imports_any(library: Path, names) -> bool:
    """Whether the module's symbol names include one of `names` (an imported
    function's name is in .dynstr only where the module calls it; a name found
    elsewhere, in a string or debug information, errs on the safe side)."""
    data = library.read_bytes()
    return any(name + b"\0" in data for name in names)


class LoadedModule:
    """One compiled module in memory: its kernels and device variables."""

    def __init__(self, built: BuiltModule):
        rt = runtime()
        self.built = built
        self._lib = ctypes.CDLL(str(built.library))
        module_info = getattr(self._lib, "__emu_module_info")  # getattr: no name mangling
        module_info.restype = ctypes.POINTER(_ModuleInfo)
        self._info = module_info()
        info = self._info.contents
        if info.abi_version != ABI_VERSION:
            raise AbiMismatch(f"{built.library} was built for emulator ABI version {info.abi_version}, this "
                              f"emulator reads version {ABI_VERSION}: delete the emulator's cache "
                              "(the folder its builds go to, by default ~/.cache/grader-emulator) and run again")
        self.kernels: dict[str, Kernel] = {}
        for i in range(info.nkernels):
            e = info.kernels[i]
            params = [Param(e.sizes[p], e.aligns[p], PARAM_KINDS[e.kinds[p]],
                            _type_name(e.type_names[p].decode())) for p in range(e.nparams)]
            name = e.name.decode()
            kernel = Kernel(name, _symbol_of(rt, e.fn) or name, i, params)
            self.kernels[name] = kernel
            self.kernels.setdefault(kernel.symbol, kernel)
        self.variables = {info.globals[i].name.decode(): (info.globals[i].addr, info.globals[i].size)
                          for i in range(info.nglobals)}
        self.sequential = not _imports_any(built.library, _WAITING_CALLS)
        self.async_proxy = _imports_any(built.library, _ASYNC_PROXY_CALLS)

    def launch(self, kernel: Kernel, params: bytes, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared: int, timeout: float, seed: int = 0,
               buffers: list[tuple[int, int]] = ()) -> tuple[int, str]:
        """Run a launch; returns (result code, error message). `buffers` are
        the (start, size) device allocations, for the analysis's bounds checks and the bulk copies'."""
        rt = runtime()
        g = (ctypes.c_uint * 3)(*grid)
        b = (ctypes.c_uint * 3)(*block)
        flat = (ctypes.c_size_t * (2 * len(buffers) + 1))(*[v for pair in sorted(buffers) for v in pair])
        rt.emu_analysis_order(int(self.async_proxy))
        start = time.perf_counter()
        code = rt.emu_launch(self._info, kernel.index, params, len(params), g, b, shared, timeout, seed,
                             flat, len(buffers), self.sequential)
        config.add_launch_seconds(time.perf_counter() - start)
        return code, rt.emu_last_error().decode(errors="replace") if code else ""

    def base_address(self) -> int:
        """Where the library is loaded (to turn code addresses into lines)."""
        for kernel in self.kernels.values():
            return _dladdr(self._info.contents.kernels[kernel.index].fn)[1]
        return 0


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def _dladdr(addr: int) -> tuple[str | None, int]:
    """(symbol name, load base of its library) for a code address."""
    info = _DlInfo()
    if ctypes.CDLL(None).dladdr(ctypes.c_void_p(addr), ctypes.byref(info)):
        return (info.sname.decode() if info.sname else None), info.fbase or 0
    return None, 0


def _symbol_of(rt: ctypes.CDLL, fn: int) -> str | None:
    return _dladdr(fn)[0]


def take_output() -> str:
    """What kernels printed with printf since the last call."""
    rt = runtime()
    n = rt.emu_pending_output()
    if not n:
        return ""
    buf = ctypes.create_string_buffer(n)
    got = rt.emu_take_output(buf, n)
    return buf.raw[:got].decode(errors="replace")


# ---- argument packing: the layout PyCUDA gives the driver ---------------------

def pack_arguments(kernel: Kernel, values: list[tuple[str, object]]) -> bytes:
    """Lay out (struct format char, value) pairs at the kernel's parameter
    offsets, as the CUDA driver does, checking each against the kernel's
    parameter type so that a wrong argument gets a clear message."""
    if len(values) != len(kernel.params):
        raise TypeError(f"kernel {kernel.signature()} takes {len(kernel.params)} argument(s), "
                        f"{len(values)} were given")
    buf = bytearray()
    for i, ((char, value), param) in enumerate(zip(values, kernel.params)):
        data = struct.pack("@" + char, value)
        problem = _mismatch(char, len(data), param)
        if problem:
            raise TypeError(f"argument {i} of {kernel.signature()}: the kernel expects {param.type_name} "
                            f"({param.size} bytes), got {_describe(char, value)} ({len(data)} bytes){problem}")
        buf += b"\0" * (-len(buf) % param.align) + data
    return bytes(buf) + b"\0" * 16


def _mismatch(char: str, size: int, param: Param) -> str:
    if size != param.size:
        return "; " + {4: "numpy.int32 or numpy.float32", 8: "numpy.int64 or numpy.float64"}.get(
            param.size, f"a {param.size}-byte value") + " would fit"
    if param.kind == "pointer" and char not in "PlLqQnN":      # a 64-bit integer holds a pointer, as on a GPU
        return "; pass a device allocation or a GPUArray"
    if param.kind in ("integer", "float") and char == "P":
        return "; pass a numpy scalar"
    if param.kind == "float" and char not in "efd":
        return f"; wrap it as numpy.float{8 * param.size}"
    if param.kind == "integer" and char in "efd":
        return f"; wrap it as numpy.int{8 * param.size}"
    return ""


def _describe(char: str, value) -> str:
    if char == "P":
        return "a device pointer"
    return type(value).__name__ if not hasattr(value, "dtype") else f"numpy.{value.dtype}"

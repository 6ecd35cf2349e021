"""Emulated `pycuda.tools`: contexts, the dtype <-> C type registry, memory
pools, memoization per context, the pytest helpers of PyCUDA's own tests.
PyCUDA's OccupancyRecord and DeviceData hard-code old GPU limits, so the
course has its own occupancy calculator (grader.references.occupancy) instead."""
from __future__ import annotations

import functools
import gc

import numpy as np

from . import driver as cuda

# ---- dtype <-> C type names ------------------------------------------------------
_ctype_of: dict[np.dtype, str] = {}
_dtype_of: dict[str, np.dtype] = {}


class TypeNameNotKnown(RuntimeError):  # noqa: N818 - PyCUDA's name
    pass


def register_dtype(dtype, c_names, alias_ok=False) -> None:
    """Make `dtype` known by the C type name(s) `c_names` (the first is its name)."""
    dtype = np.dtype(dtype)
    names = [c_names] if isinstance(c_names, str) else list(c_names)
    for name in names:
        _dtype_of[name] = dtype
    _ctype_of.setdefault(dtype, names[0])


def get_or_register_dtype(c_names, dtype=None) -> np.dtype:
    names = [c_names] if isinstance(c_names, str) else list(c_names)
    if dtype is None:
        try:
            return _dtype_of[names[0]]
        except KeyError:
            raise TypeNameNotKnown(names[0]) from None
    register_dtype(dtype, names)
    return np.dtype(dtype)


for _dtype, _names in [(np.bool_, ["bool"]), (np.int8, ["signed char", "char"]), (np.uint8, ["unsigned char"]),
                       (np.int16, ["short", "signed short", "short int"]), (np.uint16, ["unsigned short"]),
                       (np.int32, ["int", "signed int", "signed"]), (np.uint32, ["unsigned int", "unsigned"]),
                       (np.int64, ["long", "long int", "long long", "signed long"]),
                       (np.uint64, ["unsigned long", "unsigned long long", "size_t"]),
                       (np.float32, ["float"]), (np.float64, ["double"]),
                       (np.complex64, ["pycuda::complex<float>"]), (np.complex128, ["pycuda::complex<double>"]),
                       (np.uintp, ["uintptr_t"])]:
    register_dtype(_dtype, _names)


def dtype_to_ctype(dtype, with_fp_tex_hack=False) -> str:
    if dtype is None:
        raise ValueError("dtype may not be None")
    dtype = np.dtype(dtype)
    if with_fp_tex_hack and dtype in (np.float32, np.float64):
        return {np.dtype(np.float32): "fp_tex_float", np.dtype(np.float64): "fp_tex_double"}[dtype]
    try:
        return _ctype_of[dtype]
    except KeyError:
        raise ValueError(f"unable to map dtype '{dtype}'") from None


# ---- kernel arguments as C declarations ------------------------------------------
class Argument:
    def __init__(self, dtype, name):
        self.dtype = np.dtype(dtype)
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.dtype})"


class VectorArg(Argument):
    def declarator(self) -> str:
        return f"{dtype_to_ctype(self.dtype)} *{self.name}"

    struct_char = "P"


class ScalarArg(Argument):
    def declarator(self) -> str:
        return f"{dtype_to_ctype(self.dtype)} {self.name}"

    @property
    def struct_char(self) -> str:
        return self.dtype.char if self.dtype.kind != "V" else f"{self.dtype.itemsize}s"


def parse_c_arg(c_arg: str) -> Argument:
    """'float *x' -> VectorArg(float32, 'x'); 'int n' -> ScalarArg(int32, 'n')."""
    decl = c_arg.replace("const", " ").replace("__restrict__", " ").replace("restrict", " ").strip()
    if decl.endswith("]"):
        raise ValueError(f"array arguments are not supported: {c_arg!r}")
    head, _, name = decl.rpartition(" ")
    head, name = head.strip(), name.strip()
    while name.startswith("*"):
        head += "*"
        name = name[1:]
    is_vector = head.endswith("*")
    type_name = " ".join(head.rstrip("*").split())
    dtype = get_or_register_dtype(type_name)
    return (VectorArg if is_vector else ScalarArg)(dtype, name)


def parse_arguments(arguments) -> list[Argument]:
    if isinstance(arguments, str):
        arguments = [a for a in arguments.split(",") if a.strip()]
    return [parse_c_arg(a) if isinstance(a, str) else a for a in arguments]


# ---- contexts ----------------------------------------------------------------------
def get_default_device(default=0):
    return cuda.Device(default)


def make_default_context(ctx_maker=None):
    cuda.init()
    return (ctx_maker or (lambda dev: dev.make_context()))(cuda.Device(0))


_memoized: list = []


def context_dependent_memoize(func):
    """Cache func's results per (current context, arguments)."""
    cache: dict = {}

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        key = (cuda.Context.get_current(), args, frozenset(kwargs.items()))
        if key not in cache:
            cache[key] = func(*args, **kwargs)
        return cache[key]

    wrapper.clear_cache = cache.clear
    _memoized.append(wrapper)
    return wrapper


def clear_context_caches() -> None:
    for wrapper in _memoized:
        wrapper.clear_cache()


# ---- memory pools: every block comes from the emulated device --------------------
class DeviceMemoryPool:
    """Hands out device allocations; freed blocks are simply released (the
    emulator's allocations are host memory)."""

    def __init__(self, allocator=None):
        cuda._require_context("DeviceMemoryPool")
        self._allocator = allocator or cuda.mem_alloc
        self.active_blocks = 0
        self.held_blocks = 0
        self.managed_bytes = self.active_bytes = 0

    def allocate(self, size):
        alloc = self._allocator(size)
        self.active_blocks += 1
        return alloc

    __call__ = allocate

    # Size classes: 8 per power of two (a block of a class's size fits any request of that class).
    @staticmethod
    def bin_number(size: int) -> int:
        size = max(int(size), 8)
        shift = bitlog2(size) - 3
        head = size >> shift
        if head << shift != size:
            head += 1
            if head == 16:
                head, shift = 8, shift + 1
        return ((shift + 3) << 3) | (head - 8)

    @staticmethod
    def alloc_size(bin_number: int) -> int:
        return (8 | (bin_number & 7)) << ((bin_number >> 3) - 3)

    def free_held(self) -> None:
        self.held_blocks = 0

    def stop_holding(self) -> None:
        pass


class PageLockedAllocator:
    def __init__(self, flags=0):
        self.flags = flags


class PageLockedMemoryPool(DeviceMemoryPool):
    def __init__(self, allocator=None):
        self._allocator = allocator
        self.active_blocks = self.held_blocks = 0

    def allocate(self, shape, dtype, order="C"):
        self.active_blocks += 1
        return cuda.pagelocked_empty(shape, dtype, order)


def bitlog2(n: int) -> int:
    """The index of the highest set bit of n (0 for 0)."""
    return max(int(n).bit_length() - 1, 0)


# ---- PyCUDA's own tests --------------------------------------------------------------
def mark_cuda_test(inner_f):
    @functools.wraps(inner_f)
    def f(*args, **kwargs):
        ctx = make_default_context()
        try:
            inner_f(*args, **kwargs)
        finally:
            ctx.pop()
            clear_context_caches()
            gc.collect()
    return f


def init_cuda_context_fixture():
    ctx = make_default_context()
    yield
    ctx.pop()
    clear_context_caches()
    gc.collect()

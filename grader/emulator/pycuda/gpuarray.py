"""Emulated `pycuda.gpuarray`: arrays in emulated device memory. Data
movement only (to_gpu, get, set, fill, empty, zeros); compute on the host
with .get(), or write a kernel."""
from __future__ import annotations

import numpy as np

from . import driver as drv


class GPUArray:
    def __init__(self, shape, dtype, allocator=None, gpudata=None, strides=None, order="C"):
        self.shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        if order != "C" or (strides is not None and tuple(strides) != _c_strides(self.shape, self.dtype)):
            raise ValueError("the emulator's GPUArray supports C-contiguous arrays only")
        self.strides = _c_strides(self.shape, self.dtype)
        self.gpudata = gpudata if gpudata is not None else (allocator or drv.mem_alloc)(max(self.nbytes, 1))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def ptr(self) -> int:
        return int(self.gpudata)

    def __len__(self) -> int:
        return self.shape[0]

    def set(self, ary, async_=False, stream=None) -> None:
        ary = np.ascontiguousarray(ary)
        if ary.shape != self.shape or ary.dtype != self.dtype:
            raise ValueError(f"set: array of shape {ary.shape} and {ary.dtype} into GPUArray of shape "
                             f"{self.shape} and {self.dtype}")
        drv.memcpy_htod(self.gpudata, ary)

    def get(self, ary=None, pagelocked=False, async_=False, stream=None) -> np.ndarray:
        if ary is None:
            ary = np.empty(self.shape, self.dtype)
        drv.memcpy_dtoh(ary, self.gpudata)
        return ary

    get_async = get
    set_async = set

    def fill(self, value, stream=None) -> GPUArray:
        host = np.full(self.shape, value, self.dtype)
        drv.memcpy_htod(self.gpudata, host)
        return self

    def copy(self) -> GPUArray:
        out = GPUArray(self.shape, self.dtype)
        drv.memcpy_dtod(out.gpudata, self.gpudata, self.nbytes)
        return out

    def reshape(self, *shape, order="C") -> GPUArray:
        shape = shape[0] if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if int(np.prod(shape)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        return GPUArray(shape, self.dtype, gpudata=self.gpudata)

    def ravel(self) -> GPUArray:
        return self.reshape(self.size)

    def __repr__(self) -> str:
        return repr(self.get())

    def __str__(self) -> str:
        return str(self.get())

    def _no_arithmetic(self, *args, **kwargs):
        raise NotImplementedError("the emulator's GPUArray moves data only: call .get() and compute with numpy, "
                                  "or write a kernel")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __neg__ = _no_arithmetic


def _c_strides(shape, dtype) -> tuple[int, ...]:
    strides, step = [], np.dtype(dtype).itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def to_gpu(ary, allocator=None) -> GPUArray:
    ary = np.ascontiguousarray(ary)
    result = GPUArray(ary.shape, ary.dtype, allocator=allocator)
    result.set(ary)
    return result


to_gpu_async = to_gpu


def empty(shape, dtype, allocator=None, order="C") -> GPUArray:
    return GPUArray(shape, dtype, allocator=allocator, order=order)


def zeros(shape, dtype, allocator=None, order="C") -> GPUArray:
    return empty(shape, dtype, allocator, order).fill(0)


def empty_like(other: GPUArray, dtype=None) -> GPUArray:
    return empty(other.shape, dtype or other.dtype)


def zeros_like(other: GPUArray, dtype=None) -> GPUArray:
    return zeros(other.shape, dtype or other.dtype)

"""Emulated `pycuda.gpuarray`: arrays in emulated device memory, with
PyCUDA's semantics (its result dtypes, its 0-d GPUArrays from reductions,
strides kept by to_gpu, views by slicing).

Emulated device memory is host memory, so an operation is numpy working on a
view of the device bytes (`_view`), without compiling a kernel per dtype:
+ - * / are the IEEE operations a kernel does; math functions (cumath) are
numpy's, within an ulp or so of CUDA's. What PyCUDA generates as CUDA C from the
user's own C code (ElementwiseKernel, ReductionKernel, the scan kernels) is
compiled through the emulator (pycuda/elementwise.py, reduction.py, scan.py)."""
from __future__ import annotations

import builtins
import operator

import numpy as np

from . import driver as drv
from .tools import register_dtype


class vec:  # noqa: N801 - PyCUDA's name: the CUDA vector types as numpy dtypes
    pass


def _make_vector_types() -> None:
    for base, name, counts in [(np.int8, "char", 4), (np.uint8, "uchar", 4), (np.int16, "short", 4),
                               (np.uint16, "ushort", 4), (np.int32, "int", 4), (np.uint32, "uint", 4),
                               (np.int64, "long", 4), (np.uint64, "ulong", 4), (np.int64, "longlong", 2),
                               (np.uint64, "ulonglong", 2), (np.float32, "float", 4), (np.float64, "double", 2)]:
        for n in range(1, counts + 1):
            dtype = np.dtype([(field, base) for field in "xyzw"[:n]])
            register_dtype(dtype, f"{name}{n}")
            setattr(vec, f"{name}{n}", dtype)
            setattr(vec, f"make_{name}{n}", staticmethod(lambda *xs, _d=dtype: np.array(tuple(xs), dtype=_d)))


_make_vector_types()


class _Flags:
    def __init__(self, shape, strides, itemsize):
        self.c_contiguous = _is_contiguous(shape, strides, itemsize, reversed)
        self.f_contiguous = _is_contiguous(shape, strides, itemsize, iter)
        self.forc = self.c_contiguous or self.f_contiguous

    def __repr__(self) -> str:
        return f"C_CONTIGUOUS : {self.c_contiguous}\nF_CONTIGUOUS : {self.f_contiguous}"


def _is_contiguous(shape, strides, itemsize, walk) -> bool:
    expected = itemsize
    for n, s in walk(list(zip(shape, strides))):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _packed_strides(shape, itemsize: int, order: str) -> tuple[int, ...]:
    strides, step = [0] * len(shape), itemsize
    for axis in (range(len(shape)) if order == "F" else reversed(range(len(shape)))):
        strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


def _compact_strides(a: np.ndarray) -> tuple[int, ...]:
    """Strides in the same axis order as `a`'s, packed (what PyCUDA's to_gpu keeps)."""
    strides, step = [0] * a.ndim, a.dtype.itemsize
    for _, n, axis in sorted((abs(a.strides[ax]), a.shape[ax], ax) for ax in range(a.ndim)):
        strides[axis] = step
        step *= n
    return tuple(strides)


def _shape(shape) -> tuple[int, ...]:
    shape = np.asarray(shape) if isinstance(shape, np.ndarray) else shape
    if isinstance(shape, (int, np.integer)) or (isinstance(shape, np.ndarray) and shape.ndim == 0):
        return (int(shape),)
    return tuple(int(s) for s in shape)


class GPUArray:
    """Like PyCUDA's GPUArray: a numpy work-alike whose data lives in device memory."""

    __array_priority__ = 100   # numpy scalars defer to GPUArray's reflected operators

    def __init__(self, shape, dtype, allocator=None, base=None, gpudata=None, strides=None, order="C"):
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.mem_size = self.size
        self.nbytes = self.size * self.dtype.itemsize
        if order not in ("C", "F"):
            raise ValueError(f"order must be 'C' or 'F', not {order!r}")
        self.strides = (tuple(int(s) for s in strides) if strides is not None
                        else _packed_strides(self.shape, self.dtype.itemsize, order))
        self.base = base
        self.allocator = allocator
        if gpudata is None and self.size:
            gpudata = (allocator or drv.mem_alloc)(self.nbytes)
        self.gpudata = gpudata
        self.flags = _Flags(self.shape, self.strides, self.dtype.itemsize)

    # -- what it is
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return int(self.gpudata)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3, "stream": None,
                "data": (int(self.gpudata) if self.gpudata is not None else 0, False), "strides": self.strides}

    @property
    def _grid(self):
        return (builtins.max(1, builtins.min(132 * 16, (self.size + 255) // 256)), 1)

    _block = (256, 1, 1)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __hash__(self):
        raise TypeError("GPUArrays are not hashable.")

    def __bool__(self) -> bool:
        if self.size == 1:
            return bool(self.get())
        raise ValueError("The truth value of an array with more than one element is ambiguous. "
                         "Use a.any() or a.all()")

    def __str__(self) -> str:
        return str(self.get())

    def __repr__(self) -> str:
        return repr(self.get())

    # -- the device bytes as numpy
    def _view(self) -> np.ndarray:
        """A numpy array over this array's device memory (writes go to the device)."""
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        low = builtins.sum(builtins.min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
        high = builtins.sum(builtins.max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides)) + self.itemsize
        raw = drv._checked_view(int(self.gpudata) + low, high - low, "GPUArray")
        return np.ndarray(self.shape, self.dtype, buffer=raw, offset=-low, strides=self.strides)

    def _new_like_me(self, dtype=None, order="C") -> GPUArray:
        if order in ("K", "A"):
            order = "F" if self.flags.f_contiguous and not self.flags.c_contiguous else "C"
        return GPUArray(self.shape, dtype if dtype is not None else self.dtype, allocator=self.allocator, order=order)

    # -- transfers
    def _order(self) -> str:
        return "F" if self.flags.f_contiguous and not self.flags.c_contiguous else "C"

    def set(self, ary, async_=False, stream=None, **kwargs) -> None:
        ary = np.asarray(ary)
        if ary.size != self.size:
            raise ValueError("ary and self must be the same size")
        if ary.shape != self.shape:
            raise ValueError("ary and self must be the same shape")
        if ary.dtype != self.dtype:
            raise ValueError("ary and self must have the same dtype")
        if not self.size:
            return
        if self.flags.forc:         # one copy, through the driver (grader.kernels.host_log sees it)
            drv.memcpy_htod(self.gpudata, np.ravel(ary, order=self._order()))
        else:
            with drv._serial:
                self._view()[...] = ary

    def set_async(self, ary, stream=None) -> None:
        self.set(ary, stream=stream)

    def get(self, ary=None, pagelocked=False, async_=False, stream=None, **kwargs) -> np.ndarray:
        if ary is None:
            ary = np.empty(self.shape, self.dtype, order=self._order())
        elif ary.size != self.size or ary.dtype != self.dtype:
            raise TypeError("'ary' has non-matching type or size")
        if not self.size:
            return ary
        flat = np.ravel(ary, order=self._order()) if self.flags.forc else None
        if flat is not None and np.shares_memory(flat, ary):
            drv.memcpy_dtoh(flat, self.gpudata)
        else:
            with drv._serial:
                ary[...] = self._view().reshape(ary.shape)
        return ary

    def get_async(self, stream=None, ary=None) -> np.ndarray:
        return self.get(ary=ary, stream=stream)

    def copy(self) -> GPUArray:
        return _result(self._view().copy(order="K"), self.allocator)

    def fill(self, value, stream=None) -> GPUArray:
        self._view()[...] = value
        return self

    def astype(self, dtype, stream=None) -> GPUArray:
        return _result(self._view().astype(dtype, order="K"), self.allocator)

    # -- shape
    def reshape(self, *shape, order="C") -> GPUArray:
        """The same device memory read in `order` with a new shape (PyCUDA's rule: no copy)."""
        if not self.flags.forc:
            raise RuntimeError("only contiguous arrays may be used as arguments to this operation")
        shape = _shape(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
        if shape == self.shape and (self.flags.c_contiguous if order == "C" else self.flags.f_contiguous):
            return self
        if shape.count(-1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if -1 in shape:
            known = -int(np.prod(shape, dtype=np.int64))
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError("total size of new array must be unchanged")
        return GPUArray(shape, self.dtype, self.allocator, base=self, gpudata=self.gpudata, order=order)

    def ravel(self) -> GPUArray:
        return self.reshape(self.size)

    def view(self, dtype=None) -> GPUArray:
        return self._alias(self._view().view(dtype) if dtype is not None else self._view())

    def squeeze(self) -> GPUArray:
        return self._alias(self._view().squeeze())

    def transpose(self, axes=None) -> GPUArray:
        return self._alias(self._view().transpose(axes))

    @property
    def T(self) -> GPUArray:  # noqa: N802
        return self.transpose()

    def _alias(self, view: np.ndarray) -> GPUArray:
        """A GPUArray over the device memory that `view` (a view of ours) covers."""
        if view.size and not np.shares_memory(view, self._view()):
            raise NotImplementedError("this kind of indexing (it copies) is not supported on GPUArrays")
        ptr = view.__array_interface__["data"][0] if view.size else None
        return GPUArray(view.shape, view.dtype, self.allocator, base=self, gpudata=ptr, strides=view.strides)

    def __getitem__(self, index) -> GPUArray:
        if not isinstance(index, tuple):
            index = (index,)
        for i in index:
            if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer))):
                raise TypeError(f"GPUArray indices must be integers, slices, Ellipsis or newaxis, not {type(i).__name__}")
        return self._alias(self._view()[index + (Ellipsis,) if Ellipsis not in index else index])

    def __setitem__(self, index, value) -> None:
        target = self[index]
        target._view()[...] = value.get() if isinstance(value, GPUArray) else value

    def reverse(self, stream=None) -> GPUArray:
        return _result(self._view()[::-1].copy(), self.allocator)

    # -- complex parts
    @property
    def real(self) -> GPUArray:
        return _result(self._view().real.copy(), self.allocator) if self.dtype.kind == "c" else self

    @property
    def imag(self) -> GPUArray:
        if self.dtype.kind == "c":
            return _result(self._view().imag.copy(), self.allocator)
        return zeros_like(self)

    def conj(self, out=None) -> GPUArray:
        return _into(np.conj(self._view()), out, self.allocator) if self.dtype.kind == "c" else self

    conjugate = conj

    # -- arithmetic
    def mul_add(self, selffac, other, otherfac, add_timer=None, stream=None, out=None) -> GPUArray:
        result = selffac * self._view() + otherfac * other._view()
        return _into(result.astype(_common_dtype(self, other)), out, self.allocator)

    def __pos__(self) -> GPUArray:
        return self

    def __neg__(self) -> GPUArray:
        return _result(-self._view(), self.allocator)

    def __abs__(self) -> GPUArray:
        return _result(np.abs(self._view()), self.allocator)

    def any(self, stream=None, allocator=None) -> GPUArray:
        return any(self)

    def all(self, stream=None, allocator=None) -> GPUArray:
        return all(self)

    def bind_to_texref(self, *args, **kwargs):
        raise drv.NotSupported("texture references (removed in CUDA 12) are not supported by the emulator")

    bind_to_texref_ext = bind_to_texref


def _common_dtype(a, b) -> np.dtype:
    """PyCUDA's rule: the dtype numpy gives a length-1 array of each operand added
    (a Python scalar stays weak)."""
    def probe(x):
        return np.zeros(1, x.dtype) if hasattr(x, "dtype") else x
    return (probe(a) + probe(b)).dtype


def _operand(x):
    if isinstance(x, GPUArray):
        if not x.flags.forc:
            raise RuntimeError("only contiguous arrays may be used as arguments to this operation")
        return x._view()
    if np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return x
    raise TypeError(f"unsupported operand type for GPUArray arithmetic: {type(x).__name__}")


def _check_shapes(a, b) -> None:
    if isinstance(a, GPUArray) and isinstance(b, GPUArray) and a.shape != b.shape and () not in (a.shape, b.shape):
        raise NotImplementedError(f"Broadcasting binary operator with shapes: {a.shape}, {b.shape}.")


def _compute(op, a, b, dtype) -> np.ndarray:
    x, y = _operand(a), _operand(b)
    with np.errstate(all="ignore"):
        if op is operator.truediv and dtype.kind in "iu":
            result = np.trunc(np.true_divide(x, y))          # C's integer division
        else:
            result = op(x, y)
        return np.asarray(result).astype(dtype, copy=False)


def _binary(op, reflected=False):
    def method(self, other):
        if not isinstance(other, GPUArray) and not np.isscalar(other):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        _check_shapes(a, b)
        result = _compute(op, a, b, _common_dtype(a, b))
        shape = self.shape if self.shape or not isinstance(other, GPUArray) else other.shape
        return _result(result.reshape(shape) if result.shape != shape else result, self.allocator)
    return method


def _inplace(op):
    def method(self, other):
        _check_shapes(self, other)
        view = self._view()
        view[...] = _compute(op, self, other, _common_dtype(self, other))
        return self
    return method


for _name, _op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("pow", operator.pow)]:
    setattr(GPUArray, f"__{_name}__", _binary(_op))
    setattr(GPUArray, f"__r{_name}__", _binary(_op, reflected=True))
    setattr(GPUArray, f"__i{_name}__", _inplace(_op))
for _name, _op in [("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                   ("gt", operator.gt), ("ge", operator.ge)]:
    setattr(GPUArray, f"__{_name}__", _binary(_op))
GPUArray.__div__, GPUArray.__rdiv__, GPUArray.__idiv__ = (GPUArray.__truediv__, GPUArray.__rtruediv__,
                                                          GPUArray.__itruediv__)


def _result(host: np.ndarray, allocator=None) -> GPUArray:
    """A new GPUArray holding `host` (computed on the emulated device)."""
    host = np.asarray(host)
    out = GPUArray(host.shape, host.dtype, allocator, strides=_compact_strides(host))
    if out.size:
        out._view()[...] = host
    return out


def _into(host: np.ndarray, out: GPUArray | None, allocator=None) -> GPUArray:
    if out is None:
        return _result(host, allocator)
    out._view()[...] = host
    return out


# ---- constructors -------------------------------------------------------------
def to_gpu(ary, allocator=None) -> GPUArray:
    ary = np.asarray(ary)
    result = GPUArray(ary.shape, ary.dtype, allocator, strides=_compact_strides(ary))
    result.set(ary)
    return result


def to_gpu_async(ary, allocator=None, stream=None) -> GPUArray:
    return to_gpu(ary, allocator)


empty = GPUArray


def zeros(shape, dtype=np.float64, allocator=None, order="C") -> GPUArray:
    return GPUArray(shape, dtype, allocator, order=order).fill(0)


def ones(shape, dtype=np.float64, allocator=None, order="C") -> GPUArray:
    return GPUArray(shape, dtype, allocator, order=order).fill(1)


def empty_like(other_ary, dtype=None, order="K") -> GPUArray:
    if isinstance(other_ary, GPUArray):
        return other_ary._new_like_me(dtype, order)
    other_ary = np.asarray(other_ary)
    if order in ("K", "A"):
        order = "F" if other_ary.flags.f_contiguous and not other_ary.flags.c_contiguous else "C"
    return GPUArray(other_ary.shape, dtype or other_ary.dtype, order=order)


def zeros_like(other_ary, dtype=None, order="K") -> GPUArray:
    return empty_like(other_ary, dtype, order).fill(0)


def ones_like(other_ary, dtype=None, order="K") -> GPUArray:
    return empty_like(other_ary, dtype, order).fill(1)


def arange(*args, **kwargs) -> GPUArray:
    dtype = kwargs.pop("dtype", None)
    if dtype is None:
        raise ValueError("arange requires a dtype argument")
    if kwargs:
        raise TypeError(f"arange got unexpected keyword arguments {', '.join(kwargs)}")
    return _result(np.arange(*args, dtype=dtype))


def take(a, indices, out=None, stream=None) -> GPUArray:
    return _into(a._view()[indices._view()], out, a.allocator)


def multi_take(arrays, indices, out=None, stream=None) -> list[GPUArray]:
    outs = out or [None] * len(arrays)
    return [take(a, indices, o) for a, o in zip(arrays, outs)]


def multi_put(arrays, dest_indices, dest_shape=None, out=None, stream=None) -> list[GPUArray]:
    if out is None:
        out = [zeros(dest_shape, a.dtype) for a in arrays]
    for a, o in zip(arrays, out):
        o._view()[dest_indices._view()] = a._view()
    return out


def multi_take_put(arrays, dest_indices, src_indices, dest_shape=None, out=None, stream=None,
                   src_offsets=None) -> list[GPUArray]:
    if out is None:
        out = [zeros(dest_shape, a.dtype) for a in arrays]
    offsets = src_offsets or [0] * len(arrays)
    for a, o, off in zip(arrays, out, offsets):
        o._view()[dest_indices._view()] = a._view()[src_indices._view() + off]
    return out


def concatenate(arrays, axis=0, allocator=None) -> GPUArray:
    return _result(np.concatenate([a._view() for a in arrays], axis=axis), allocator)


def stack(arrays, axis=0, allocator=None) -> GPUArray:
    return _result(np.stack([a._view() for a in arrays], axis=axis), allocator)


def transpose(a, axes=None) -> GPUArray:
    return a.transpose(axes)


def reshape(a, *shape, **kwargs) -> GPUArray:
    return a.reshape(*shape, **kwargs)


def if_positive(criterion, then_, else_, out=None, stream=None) -> GPUArray:
    if not (criterion.shape == then_.shape == else_.shape):
        raise ValueError("shapes do not match")
    if then_.dtype != else_.dtype:
        raise ValueError("dtypes do not match")
    return _into(np.where(criterion._view() > 0, then_._view(), else_._view()), out)


def where(criterion, then_, else_, out=None, stream=None) -> GPUArray:
    if not (criterion.shape == then_.shape == else_.shape):
        raise ValueError("shapes do not match")
    if then_.dtype != else_.dtype:
        raise ValueError("dtypes do not match")
    return _into(np.where(criterion._view() != 0, then_._view(), else_._view()), out)


def _minmax(fn):
    def f(a, b, out=None, stream=None):
        if isinstance(a, GPUArray) and isinstance(b, GPUArray):
            dtype = _common_dtype(a, b)
        else:
            dtype = a.dtype if isinstance(a, GPUArray) else b.dtype
        return _into(fn(_operand(a), _operand(b)).astype(dtype, copy=False), out)
    return f


maximum = _minmax(np.fmax)
minimum = _minmax(np.fmin)


# ---- reductions: 0-d GPUArrays, as PyCUDA's ReductionKernel returns ------------
def _scalar(value, dtype, allocator=None) -> GPUArray:
    return _result(np.asarray(value, dtype=dtype).reshape(()), allocator)


def sum(a, dtype=None, stream=None, allocator=None) -> GPUArray:  # noqa: A001 - PyCUDA's name
    dtype = np.dtype(dtype) if dtype is not None else a.dtype
    return _scalar(a._view().sum(dtype=dtype), dtype, allocator)


def subset_sum(subset, a, dtype=None, stream=None, allocator=None) -> GPUArray:
    dtype = np.dtype(dtype) if dtype is not None else a.dtype
    return _scalar(a._view()[subset._view()].sum(dtype=dtype), dtype, allocator)


def dot(a, b, dtype=None, stream=None, allocator=None) -> GPUArray:
    dtype = np.dtype(dtype) if dtype is not None else _common_dtype(a, b)
    return _scalar((a._view().astype(dtype) * b._view().astype(dtype)).sum(dtype=dtype), dtype, allocator)


def subset_dot(subset, a, b, dtype=None, stream=None, allocator=None) -> GPUArray:
    dtype = np.dtype(dtype) if dtype is not None else _common_dtype(a, b)
    idx = subset._view()
    return _scalar((a._view()[idx].astype(dtype) * b._view()[idx].astype(dtype)).sum(dtype=dtype), dtype, allocator)


def vdot(a, b, dtype=None, stream=None, allocator=None) -> GPUArray:
    return dot(a.conj(), b, dtype, stream, allocator)


def any(a, stream=None, allocator=None) -> GPUArray:  # noqa: A001
    return _scalar(np.any(a._view()), bool, allocator)


def all(a, stream=None, allocator=None) -> GPUArray:  # noqa: A001
    return _scalar(np.all(a._view()), bool, allocator)


def _extreme(ufunc):
    def f(a, stream=None):
        return _scalar(ufunc.reduce(a._view().ravel()), a.dtype)
    return f


def _subset_extreme(ufunc):
    def f(subset, a, stream=None):
        return _scalar(ufunc.reduce(a._view()[subset._view()].ravel()), a.dtype)
    return f


min = _extreme(np.fmin)  # noqa: A001 - fmin/fmax: NaN-ignoring, like CUDA's fminf/fmaxf
max = _extreme(np.fmax)  # noqa: A001
subset_min = _subset_extreme(np.fmin)
subset_max = _subset_extreme(np.fmax)


def _logical(fn, x1, x2, out, allocator):
    return _into(np.asarray(fn(_operand(x1), _operand(x2))), out, allocator)


def logical_and(x1, x2, /, out=None, *, allocator=None) -> GPUArray:
    return _logical(np.logical_and, x1, x2, out, allocator)


def logical_or(x1, x2, /, out=None, *, allocator=None) -> GPUArray:
    return _logical(np.logical_or, x1, x2, out, allocator)


def logical_not(x, /, out=None, *, allocator=None) -> GPUArray:
    return _into(np.asarray(np.logical_not(_operand(x))), out, allocator)

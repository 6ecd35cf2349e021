"""Emulated `pycuda.cumath`: elementwise math on GPUArrays, the result in a
new array (or `out`) of the argument's dtype, as PyCUDA's kernels compute it."""
from __future__ import annotations

import numpy as np

from .gpuarray import GPUArray, _into, _operand


def _unary(ufunc):
    def f(array: GPUArray, stream_or_out=None, **kwargs) -> GPUArray:
        out = kwargs.get("out", stream_or_out if isinstance(stream_or_out, GPUArray) else None)
        if out is not None and (out.dtype != array.dtype or out.shape != array.shape):
            raise ValueError("out must have the argument's dtype and shape")
        with np.errstate(all="ignore"):
            result = ufunc(_operand(array))
        return _into(result.astype(array.dtype, copy=False) if array.dtype.kind in "fc" else result, out,
                     array.allocator)
    f.__name__ = ufunc.__name__
    return f


fabs, ceil, floor, exp, log, log10, sqrt = (_unary(u) for u in (np.fabs, np.ceil, np.floor, np.exp, np.log, np.log10,
                                                                 np.sqrt))
sin, cos, tan, asin, acos, atan = (_unary(u) for u in (np.sin, np.cos, np.tan, np.arcsin, np.arccos, np.arctan))
sinh, cosh, tanh = (_unary(u) for u in (np.sinh, np.cosh, np.tanh))


def fmod(arg: GPUArray, mod: GPUArray, stream=None) -> GPUArray:
    with np.errstate(all="ignore"):
        return _into(np.fmod(_operand(arg), _operand(mod)).astype(arg.dtype), None, arg.allocator)


def frexp(arg: GPUArray, stream=None) -> tuple[GPUArray, GPUArray]:
    significand, exponent = np.frexp(_operand(arg))
    return _into(significand, None, arg.allocator), _into(exponent.astype(arg.dtype), None, arg.allocator)


def ldexp(significand: GPUArray, exponent: GPUArray, stream=None) -> GPUArray:
    result = np.ldexp(_operand(significand), _operand(exponent).astype(np.int32))
    return _into(result.astype(significand.dtype), None, significand.allocator)


def modf(arg: GPUArray, stream=None) -> tuple[GPUArray, GPUArray]:
    fracpart, intpart = np.modf(_operand(arg))
    return _into(fracpart, None, arg.allocator), _into(intpart, None, arg.allocator)

"""Emulated `pycuda.reduction`: ReductionKernel compiles the user's map and
reduce expressions into a CUDA C kernel (through SourceModule) and returns a
0-d GPUArray, like PyCUDA. The emulator's kernel reduces in index order in one
thread: the same result as PyCUDA's tree for exact arithmetic; float sums may
differ in the last bits, as they do between GPUs."""
from __future__ import annotations

import numpy as np

from .compiler import SourceModule
from .gpuarray import empty
from .tools import VectorArg, dtype_to_ctype, parse_arguments

_BODY = """
{preamble}
#define READ_AND_MAP(i) ({map_expr})
#define REDUCE(a, b) ({reduce_expr})

__global__ void {name}({out_t} *__emu_out, {arguments}long start, long stop, long step)
{{
  {out_t} acc = {neutral};
  for (long i = start; step > 0 ? i < stop : i > stop; i += step)
    acc = REDUCE(acc, READ_AND_MAP(i));
  *__emu_out = acc;
}}
"""


class ReductionKernel:
    def __init__(self, dtype_out, neutral, reduce_expr, map_expr=None, arguments=None, name="reduce_kernel",
                 keep=False, options=None, preamble="", allocator=None):
        self.dtype_out = np.dtype(dtype_out)
        out_t = dtype_to_ctype(self.dtype_out)
        if arguments is None:
            arguments = f"const {out_t} *in"
        self.arguments = parse_arguments(arguments)
        self.allocator = allocator
        declared = "".join(a.declarator() + ", " for a in self.arguments)
        source = _BODY.format(preamble=preamble, map_expr=map_expr or "in[i]", reduce_expr=reduce_expr, name=name,
                              out_t=out_t, arguments=declared, neutral=neutral)
        self.func = SourceModule(source, options=options).get_function(name)

    def __call__(self, *args, **kwargs):
        out = kwargs.pop("out", None)
        range_, slice_ = kwargs.pop("range", None), kwargs.pop("slice", None)
        kwargs.pop("stream", None)
        allocator = kwargs.pop("allocator", None)
        if len(args) != len(self.arguments):
            raise TypeError(f"the reduction takes {len(self.arguments)} arguments, {len(args)} given")
        values, first = [], None
        for arg, descr in zip(args, self.arguments):
            if isinstance(descr, VectorArg):
                if not arg.flags.forc:
                    raise RuntimeError("ReductionKernel cannot deal with non-contiguous arrays")
                first = arg if first is None else first
                values.append(arg.gpudata)
            else:
                values.append(np.asarray(arg, dtype=descr.dtype)[()] if descr.dtype.kind != "V" else arg)
        if slice_ is not None:
            if range_ is not None:
                raise TypeError("may not specify both range and slice keyword arguments")
            range_ = slice(*slice_.indices(first.size))
        start, stop, step = (0, first.size, 1) if range_ is None else (range_.start, range_.stop, range_.step or 1)
        if out is None:
            out = empty((), self.dtype_out, allocator=allocator or self.allocator or first.allocator)
        elif out.dtype != self.dtype_out:
            raise ValueError("out must have the same dtype as dtype_out")
        self.func(out.gpudata, *values, np.int64(start), np.int64(stop), np.int64(step), block=(1, 1, 1))
        return out


def get_sum_kernel(dtype_out, dtype_in):
    dtype_out = dtype_out or dtype_in
    return ReductionKernel(dtype_out, "0", "a+b", arguments=f"const {dtype_to_ctype(dtype_in)} *in")

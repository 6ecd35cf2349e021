"""Emulated `pycuda.elementwise`: ElementwiseKernel writes the loop around the
user's C statement as CUDA C and compiles it with SourceModule, as PyCUDA
does, so that it runs (and is analysed) like any kernel."""
from __future__ import annotations

import numpy as np

from .compiler import SourceModule
from .tools import ScalarArg, VectorArg, dtype_to_ctype, parse_arguments

_BODY = """
{preamble}

__global__ void {name}({arguments})
{{
  size_t tid = threadIdx.x;
  size_t total_threads = gridDim.x * blockDim.x;
  size_t cta_start = blockDim.x * blockIdx.x;
  {index_decl};
  {loop_prep};
  for ({loop})
  {{
    {operation};
  }}
  {after_loop};
}}
"""
_LOOP = "i = cta_start + tid; i < n; i += total_threads"
_RANGE_LOOP = "i = start + (cta_start + tid) * step; (step < 0) ? (i > stop) : (i < stop); i += total_threads * step"


def launch_shape(n: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """Grid and block for n elements: full blocks, few enough that each thread loops."""
    block = 256
    return (max(1, min((n + block - 1) // block, 64)), 1), (block, 1, 1)


class ElementwiseKernel:
    def __init__(self, arguments, operation, name="kernel", keep=False, options=None, preamble="",
                 loop_prep="", after_loop=""):
        self.gen_kwargs = dict(arguments=arguments, operation=operation, name=name)
        self.arguments = parse_arguments(arguments)
        if not any(isinstance(a, VectorArg) for a in self.arguments):
            raise ValueError("ElementwiseKernel can only be used with functions that have at least one vector argument")
        declared = ", ".join(a.declarator() for a in self.arguments)
        self._modules = {}
        self._make = lambda ranged: SourceModule(_BODY.format(
            preamble=preamble, name=name, loop_prep=loop_prep, after_loop=after_loop, operation=operation,
            arguments=declared + (", long start, long stop, long step" if ranged else ", unsigned long n"),
            index_decl="long i" if ranged else "size_t i", loop=_RANGE_LOOP if ranged else _LOOP),
            options=options, no_extern_c=False)
        self.name = name
        self.get_function(False)      # compile now: errors show where the kernel is made

    def get_function(self, ranged: bool):
        if ranged not in self._modules:
            self._modules[ranged] = self._make(ranged).get_function(self.name)
        return self._modules[ranged]

    def __call__(self, *args, **kwargs):
        range_, slice_ = kwargs.pop("range", None), kwargs.pop("slice", None)
        stream = kwargs.pop("stream", None)
        if kwargs:
            raise TypeError(f"unknown keyword arguments: {', '.join(kwargs)}")
        if len(args) != len(self.arguments):
            raise TypeError(f"{self.name} takes {len(self.arguments)} arguments, {len(args)} given")
        values, first = [], None
        for arg, descr in zip(args, self.arguments):
            if isinstance(descr, VectorArg):
                if not getattr(arg, "flags", None) or not arg.flags.forc:
                    raise RuntimeError("elementwise kernel cannot deal with non-contiguous arrays")
                first = arg if first is None else first
                values.append(arg.gpudata)
            else:
                values.append(np.asarray(arg, dtype=descr.dtype)[()] if descr.dtype.kind != "V" else arg)
        if slice_ is not None:
            if range_ is not None:
                raise TypeError("may not specify both range and slice keyword arguments")
            range_ = slice(*slice_.indices(first.size))
        if range_ is not None:
            step = range_.step or 1
            count = max(0, (range_.stop - range_.start + step - (1 if step > 0 else -1)) // step)
            grid, block = launch_shape(count)
            self.get_function(True)(*values, np.int64(range_.start), np.int64(range_.stop), np.int64(step),
                                    grid=grid, block=block, stream=stream)
        else:
            grid, block = launch_shape(first.size)
            self.get_function(False)(*values, np.uint64(first.size), grid=grid, block=block, stream=stream)


def get_elwise_module(arguments, operation, name="kernel", keep=False, options=None, preamble="", loop_prep="",
                      after_loop=""):
    """PyCUDA's module of one elementwise kernel: `arguments` (Argument objects)
    must include the element count `n`; the loop is PyCUDA's."""
    return SourceModule(f"""
#include <pycuda-complex.hpp>
{preamble}
extern "C" __global__ void {name}({", ".join(a.declarator() for a in arguments)})
{{
  size_t tid = threadIdx.x;
  size_t total_threads = gridDim.x * blockDim.x;
  size_t cta_start = blockDim.x * blockIdx.x;
  size_t i;
  {loop_prep};
  for (i = cta_start + tid; i < n; i += total_threads)
  {{
    {operation};
  }}
  {after_loop};
}}
""", options=options, keep=keep, no_extern_c=True)


def get_linear_combination_kernel(summand_descriptors, dtype_z):
    """z[i] = a0*x0[i] + a1*x1[i] + ..., written as PyCUDA writes it: it
    includes pycuda-helpers.hpp (texture and surface helpers) and reads a
    scalar held on the device (is_gpu_scalar) through a texture reference.
    CUDA 13 cannot compile that header (PyCUDA 2026.1 on the H200) and the
    emulator has neither the header nor texture references, so the kernel
    fails to compile here as on a current GPU: pycuda.driver.CompileError."""
    args, preamble, loop_prep, summands, tex_names = [], ["#include <pycuda-helpers.hpp>\n"], [], [], []
    for i, (is_gpu_scalar, scalar_dtype, vector_dtype) in enumerate(summand_descriptors):
        if is_gpu_scalar:
            preamble.append(f"texture <{dtype_to_ctype(scalar_dtype, with_fp_tex_hack=True)}, 1, "
                            f"cudaReadModeElementType> tex_a{i};")
            tex_names.append(f"tex_a{i}")
            loop_prep.append(f"{dtype_to_ctype(scalar_dtype)} a{i} = fp_tex1Dfetch(tex_a{i}, 0)")
        else:
            args.append(ScalarArg(scalar_dtype, f"a{i}"))
        args.append(VectorArg(vector_dtype, f"x{i}"))
        summands.append(f"a{i}*x{i}[i]")
    args += [VectorArg(dtype_z, "z"), ScalarArg(np.uintp, "n")]
    mod = get_elwise_module(args, "z[i] = " + " + ".join(summands), "linear_combination",
                            preamble="\n".join(preamble), loop_prep=";\n".join(loop_prep))
    func = mod.get_function("linear_combination")
    texrefs = [mod.get_texref(name) for name in tex_names]
    func.prepare("".join(a.struct_char for a in args), texrefs=texrefs)
    return func, texrefs


__all__ = ["ElementwiseKernel", "ScalarArg", "VectorArg", "get_elwise_module", "get_linear_combination_kernel"]

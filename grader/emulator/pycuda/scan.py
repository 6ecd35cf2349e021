"""Emulated `pycuda.scan`: inclusive and exclusive prefix scans of the user's
associative C expression (a, b), compiled through SourceModule; the emulator
scans in index order in one thread."""
from __future__ import annotations

import numpy as np

from .compiler import SourceModule
from .tools import dtype_to_ctype

_BODY = """
{preamble}
#define SCAN_EXPR(a, b) ({scan_expr})

__global__ void {name}(const {t} *input, {t} *output, long n)
{{
  if (n == 0) return;
  {t} acc = {start};
  {init}
  for (long i = {first}; i < n; i++) {{
    {t} item = input[i];
    {step}
  }}
}}
"""


class _ScanKernel:
    _inclusive: bool

    def __init__(self, dtype, scan_expr, neutral=None, name_prefix="scan", options=None, preamble="", devices=None):
        self.dtype = np.dtype(dtype)
        if not self._inclusive and neutral is None:
            raise ValueError("an exclusive scan needs a neutral element")
        step = ("acc = SCAN_EXPR(acc, item); output[i] = acc;" if self._inclusive
                else "output[i] = acc; acc = SCAN_EXPR(acc, item);")
        source = _BODY.format(preamble=preamble, scan_expr=scan_expr, name=name_prefix, t=dtype_to_ctype(self.dtype),
                              start="input[0]" if self._inclusive else neutral, step=step,
                              first=1 if self._inclusive else 0, init="output[0] = acc;" if self._inclusive else "")
        self.func = SourceModule(source, options=options).get_function(name_prefix)

    def __call__(self, input_ary, output_ary=None, allocator=None, queue=None, stream=None):
        output_ary = input_ary if output_ary is None else output_ary
        if input_ary.dtype != self.dtype or output_ary.dtype != self.dtype:
            raise TypeError(f"the scan works on {self.dtype} arrays")
        self.func(input_ary.gpudata, output_ary.gpudata, np.int64(input_ary.size), block=(1, 1, 1))
        return output_ary


class InclusiveScanKernel(_ScanKernel):
    _inclusive = True


class ExclusiveScanKernel(_ScanKernel):
    _inclusive = False

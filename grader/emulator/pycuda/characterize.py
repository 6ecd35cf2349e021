"""Emulated `pycuda.characterize`: what the (emulated sm_90) device offers."""
from __future__ import annotations

import ctypes

import numpy as np

from . import driver as cuda
from . import tools
from .compiler import SourceModule


def platform_bits() -> int:
    return 8 * ctypes.sizeof(ctypes.c_void_p)


def has_stack() -> bool:
    return True


def has_double_support() -> bool:
    return True


def sizeof(type_name: str, preamble: str = "") -> int:
    """sizeof(type_name) on the device; the emulator's types are the host's (x86-64: LP64, like CUDA's)."""
    if not preamble:
        try:
            return tools.get_or_register_dtype(type_name).itemsize
        except tools.TypeNameNotKnown:
            pass
    mod = SourceModule(f"{preamble}\n__global__ void write_size(size_t *output) {{ *output = sizeof({type_name}); }}")
    out = np.zeros(1, np.uintp)
    mod.get_function("write_size")(cuda.Out(out), block=(1, 1, 1))
    return int(out[0])

"""The tensor map a kernel's `tma_load_2d` (the course's Hopper header) reads: made on the host for a
row-major matrix in device memory, passed to the kernel by value (`const __grid_constant__ TensorMap map`).
On the emulator it is the emulator's map. On a GPU it is the driver's (cuTensorMapEncodeTiled), copied into
device memory, and the kernel receives its address: PyCUDA passes a kernel's arguments as one packed
buffer, through which a 128-byte map does not reach the tensor copy intact. The rules a map must meet are
the driver's, checked here with their reason."""
from __future__ import annotations

import contextlib
import ctypes
from collections import OrderedDict

import numpy as np

from grader.emulator import tensor_map as emulated
from grader.platform import backend

# CUtensorMapDataType (cuda.h) of the element types a course kernel loads
_DATA_TYPES = {np.dtype(np.uint8): 0, np.dtype(np.uint16): 1, np.dtype(np.uint32): 2, np.dtype(np.int32): 3,
               np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.float64): 8}
BFLOAT16 = 9          # numpy has no bfloat16: pass dtype=np.uint16 with bfloat16=True
MAX_BOX = 256


class TensorMapError(ValueError):
    """The matrix or the box breaks one of the driver's rules for a tensor map."""


SWIZZLES = {0: 0, 128: 3}        # bytes -> CUtensorMapSwizzle (none, 128B)
KEPT_ON_DEVICE = 256             # the driver's maps kept in device memory, the least recently used freed first
_on_device: OrderedDict = OrderedDict()


def tensor_map_2d(address: int, shape: tuple[int, int], box: tuple[int, int], dtype,
                  row_stride: int | None = None, bfloat16: bool = False, swizzle: int = 0,
                  on_emulator: bool | None = None) -> np.void:
    """The tensor map of a row-major matrix of `shape` (rows, columns) of `dtype` at device `address` (an
    int(...) of a DeviceAllocation or GPUArray.gpudata), loaded in boxes of `box` (rows, columns) that
    land in shared memory row after row. Elements of a box outside the matrix land as zeros. With
    swizzle=128, box rows of 128 bytes land with their 16-byte chunks permuted: chunk c of row r at chunk
    c ^ (r % 8), the layout wgmma reads without bank conflicts (the box at a multiple of 1024 bytes).
    The map is the emulator's when on_emulator, else the driver's; by default, the backend's."""
    dtype = np.dtype(dtype)
    rows, cols = (int(n) for n in shape)
    box_rows, box_cols = (int(n) for n in box)
    row_stride = cols * dtype.itemsize if row_stride is None else int(row_stride)
    if dtype not in _DATA_TYPES:
        raise TensorMapError(f"a tensor map of {dtype} elements: use one of "
                             f"{', '.join(str(t) for t in _DATA_TYPES)} (bfloat16 as uint16 with bfloat16=True)")
    if int(address) % 16:
        raise TensorMapError(f"the matrix starts at an address that is not a multiple of 16 bytes ({int(address):#x})")
    if row_stride % 16:
        raise TensorMapError(f"its rows are {row_stride} bytes apart, not a multiple of 16: a tensor map needs "
                             f"rows padded to 16 bytes ({16 // dtype.itemsize} elements of {dtype})")
    if not (0 < box_rows <= MAX_BOX and 0 < box_cols <= MAX_BOX):
        raise TensorMapError(f"a box of {box_rows} x {box_cols}: each side must be 1 to {MAX_BOX} elements")
    if box_cols * dtype.itemsize % 16:
        raise TensorMapError(f"a box row of {box_cols} elements is {box_cols * dtype.itemsize} bytes, not a "
                             f"multiple of 16")
    if rows <= 0 or cols <= 0:
        raise TensorMapError(f"a matrix of {rows} x {cols}")
    if swizzle not in SWIZZLES or (swizzle and box_cols * dtype.itemsize != swizzle):
        raise TensorMapError(f"swizzle={swizzle}: 0, or 128 with box rows of 128 bytes "
                             f"({128 // dtype.itemsize} elements of {dtype})")
    if backend.current().name == "emulator" if on_emulator is None else on_emulator:
        return emulated.encode_2d(int(address), dtype.itemsize, cols, rows, row_stride, box_cols, box_rows, swizzle)
    return _encode_on_gpu(int(address), BFLOAT16 if bfloat16 else _DATA_TYPES[dtype], rows, cols, row_stride,
                          box_rows, box_cols, SWIZZLES[swizzle])


def _encode_on_gpu(address: int, data_type: int, rows: int, cols: int, row_stride: int, box_rows: int,
                   box_cols: int, swizzle: int) -> np.void:
    """cuTensorMapEncodeTiled of the CUDA driver (libcuda), no interleave, L2 promotion or NaN fill; the map
    in device memory, the address of it returned (the header's TensorMap on a GPU)."""
    out = np.zeros(emulated.SIZE + 64, np.uint8)
    offset = (-out.ctypes.data) % 64                 # the driver wants the map 64-byte aligned
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    status = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.ctypes.data + offset), ctypes.c_int(data_type), u32(2), ctypes.c_void_p(address),
        (u64 * 2)(cols, rows), (u64 * 1)(row_stride), (u32 * 2)(box_cols, box_rows), (u32 * 2)(1, 1),
        ctypes.c_int(0), ctypes.c_int(swizzle), ctypes.c_int(0), ctypes.c_int(0))
    if status != 0:
        raise TensorMapError(f"the CUDA driver refused the tensor map (cuTensorMapEncodeTiled returned {status})")
    return np.array([_kept_on_device(out[offset:offset + emulated.SIZE].tobytes())], np.uint64).view(
        np.dtype((np.void, 8)))[0]


def _kept_on_device(encoded: bytes) -> int:
    """The device address of a copy of `encoded` in the current context, made once and kept while it is
    among the KEPT_ON_DEVICE maps used last."""
    import pycuda.driver as cuda  # a GPU machine's: PyCUDA is an optional dependency
    key = (_current_context(), encoded)
    if key in _on_device:
        _on_device.move_to_end(key)
    else:
        _on_device[key] = cuda.to_device(np.frombuffer(encoded, np.uint8))
        while len(_on_device) > KEPT_ON_DEVICE:
            with contextlib.suppress(cuda.Error):       # a copy whose context is gone went with it
                _on_device.popitem(last=False)[1].free()
    return int(_on_device[key])


def _current_context() -> int:
    """The CUDA context current in this thread (a copy in one context is no address in another)."""
    context = ctypes.c_void_p()
    ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(context))
    return context.value or 0

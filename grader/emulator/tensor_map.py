"""Tensor maps as the emulator's runtime reads them (the course's Hopper header, `tma_load_2d`): 128 bytes,
like the driver's CUtensorMap, in an encoding of the emulator's own (runtime.cpp, __emu_tma_load_2d)."""
from __future__ import annotations

import numpy as np

SIZE = 128
MAGIC = int.from_bytes(b"EMUTMAP2", "little")


def encode_2d(address: int, element_size: int, width: int, height: int, row_stride: int,
              box_width: int, box_height: int, swizzle: int = 0) -> np.void:
    """A row-major matrix of `height` rows of `width` elements, rows `row_stride` bytes apart, at device
    `address`, loaded in boxes of `box_height` rows of `box_width` elements, their 16-byte chunks permuted
    within each 128-byte row when `swizzle` is 128."""
    words = np.zeros(SIZE // 8, np.uint64)
    words[:9] = [MAGIC, address, element_size, width, height, row_stride, box_width, box_height, swizzle]
    return np.frombuffer(words.tobytes(), np.dtype((np.void, SIZE)))[0]

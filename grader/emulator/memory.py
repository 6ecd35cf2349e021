"""Emulated device memory: host memory, 256-byte aligned like cudaMalloc, and
filled with 0xFF bytes (NaN as float32) so that outputs a kernel never writes
stand out."""
from __future__ import annotations

import bisect
import ctypes
import weakref

import numpy as np

ALIGNMENT = 256
POISON = 0xFF


class DeviceAllocation:
    """A block of emulated device memory; int() gives its device pointer."""

    def __init__(self, nbytes: int):
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError("negative allocation size")
        self._buffer = np.full(nbytes + ALIGNMENT, POISON, dtype=np.uint8)
        offset = -self._buffer.ctypes.data % ALIGNMENT
        self._view = self._buffer[offset:offset + nbytes]
        self.ptr = self._view.ctypes.data
        self.size = nbytes
        _live.add(self)

    @classmethod
    def wrap(cls, ptr: int, nbytes: int, owner) -> "DeviceAllocation":
        """Existing device memory (a module's __constant__ or __device__
        variable) as an allocation; `owner` is kept alive with it."""
        self = cls.__new__(cls)
        self._buffer = owner
        self._view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)) if nbytes else \
            np.empty(0, np.uint8)
        self.ptr, self.size = ptr, nbytes
        _live.add(self)
        return self

    def __int__(self) -> int:
        if self._view is None:
            raise ValueError("use of freed device memory")
        return self.ptr

    __index__ = __int__

    def __repr__(self) -> str:
        return f"<emulated DeviceAllocation of {self.size} bytes at 0x{self.ptr:x}>"

    def free(self) -> None:
        _live.discard(self)
        self._buffer = self._view = None

    def as_array(self) -> np.ndarray:
        """The allocation's bytes as a writable numpy view."""
        return self._view

    def __del__(self):
        _live.discard(self)


class _LiveAllocations:
    """Live allocations ordered by address (weakly held), to find the one
    holding a pointer."""

    def __init__(self):
        self._starts: list[int] = []
        self._allocs: list[weakref.ref] = []

    def add(self, alloc: DeviceAllocation) -> None:
        i = bisect.bisect(self._starts, alloc.ptr)
        self._starts.insert(i, alloc.ptr)
        self._allocs.insert(i, weakref.ref(alloc))

    def discard(self, alloc: DeviceAllocation) -> None:
        for i in range(bisect.bisect_left(self._starts, alloc.ptr), len(self._starts)):
            if self._starts[i] != alloc.ptr:
                break
            if self._allocs[i]() in (alloc, None):
                del self._starts[i], self._allocs[i]
                return

    def _items(self):
        return [a for a in (r() for r in self._allocs) if a is not None and a.size is not None]

    def find(self, ptr: int) -> DeviceAllocation | None:
        i = bisect.bisect(self._starts, ptr) - 1
        alloc = self._allocs[i]() if i >= 0 else None
        if alloc is not None and alloc.size is not None and ptr < alloc.ptr + max(alloc.size, 1):
            return alloc
        return None

    def ranges(self) -> list[tuple[int, int]]:
        return [(a.ptr, a.size) for a in self._items()]

    def total(self) -> int:
        return sum(a.size for a in self._items())


_live = _LiveAllocations()


def find_allocation(ptr: int) -> DeviceAllocation | None:
    return _live.find(ptr)


def live_ranges() -> list[tuple[int, int]]:
    return _live.ranges()


def bytes_in_use() -> int:
    return _live.total()


def device_view(ptr: int, nbytes: int, what: str) -> np.ndarray:
    """A uint8 view of `nbytes` of device memory at `ptr`, checked against the
    allocation that holds it (the GPU reports such copies as invalid values)."""
    ptr = int(ptr)
    alloc = find_allocation(ptr)
    if alloc is None:
        raise ValueError(f"{what}: 0x{ptr:x} is not in any device allocation")
    offset = ptr - alloc.ptr
    if offset + nbytes > alloc.size:
        raise ValueError(f"{what}: {nbytes} bytes at offset {offset} run past the end of a "
                         f"{alloc.size}-byte allocation")
    return alloc.as_array()[offset:offset + nbytes]

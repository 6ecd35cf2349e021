"""Theoretical occupancy: how many blocks of a kernel fit on one SM.

`occupancy()` is the pure core (numbers in, numbers out), following the rules
of CUDA's occupancy calculator for compute capability 7.0 and newer:
registers are allocated per warp in units of 256 and split over 4 SM
sub-partitions; every block's shared memory is rounded up to 128 bytes after
adding the per-block reservation (1 KiB on sm_80+). `device_limits()` reads
the limits from PyCUDA's device attributes (the emulator reports the H200's,
which are also `H200` here);
`check_against_cuda()` asks the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from .emulator.config import DEVICE_ATTRIBUTES


@dataclass(frozen=True)
class Limits:
    """Per-SM and per-block limits of one device."""
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    smem_per_sm: int                 # bytes usable by blocks, reservations included
    smem_per_block_optin: int        # most static + dynamic bytes one block may use
    smem_reserved_per_block: int     # the driver's own per-block reservation
    warp_size: int = 32
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256        # registers are given to a warp in these units
    reg_sub_partitions: int = 4      # the register file is split over 4 schedulers
    smem_alloc_unit: int = 128

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def limits_from(attribute) -> Limits:
    """Limits from `attribute(name)`, a device attribute by its PyCUDA name."""
    return Limits(max_threads_per_sm=attribute("MAX_THREADS_PER_MULTIPROCESSOR"),
                  max_blocks_per_sm=attribute("MAX_BLOCKS_PER_MULTIPROCESSOR"),
                  regs_per_sm=attribute("MAX_REGISTERS_PER_MULTIPROCESSOR"),
                  regs_per_block=attribute("MAX_REGISTERS_PER_BLOCK"),
                  smem_per_sm=attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
                  smem_per_block_optin=attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
                  smem_reserved_per_block=attribute("RESERVED_SHARED_MEMORY_PER_BLOCK"),
                  warp_size=attribute("WARP_SIZE"))


# The H200 (sm_90): the emulated device's attributes (one table, grader.emulator.config).
H200 = limits_from(DEVICE_ATTRIBUTES.__getitem__)


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_block: int
    active_warps: int
    max_warps: int
    limited_by: tuple[str, ...]      # every resource that reaches the minimum
    per_resource: dict = field(default_factory=dict)   # resource -> blocks it allows
    reason: str = ""                 # why nothing fits, when blocks_per_sm == 0

    @property
    def fraction(self) -> float:
        return self.active_warps / self.max_warps if self.max_warps else 0.0

    def describe(self) -> str:
        if self.blocks_per_sm == 0:
            return f"0 blocks/SM: {self.reason}"
        return (f"{self.blocks_per_sm} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({100 * self.fraction:.1f}%), limited by {', '.join(self.limited_by)}")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(regs_per_thread: int, smem_per_block: int, threads_per_block: int,
              limits: Limits = H200) -> Occupancy:
    """Blocks per SM for a kernel using `regs_per_thread` registers and
    `smem_per_block` (static + dynamic) bytes of shared memory per block."""
    L = limits
    if threads_per_block < 1:
        raise ValueError(f"threads_per_block must be positive, got {threads_per_block}")
    warps = -(-threads_per_block // L.warp_size)
    regs_per_warp = _round_up(regs_per_thread * L.warp_size, L.reg_alloc_unit)
    smem_alloc = _round_up(smem_per_block + L.smem_reserved_per_block, L.smem_alloc_unit)

    reason = ""
    if threads_per_block > L.max_threads_per_sm:
        reason = f"{threads_per_block} threads per block exceed {L.max_threads_per_sm} per SM"
    elif regs_per_thread > L.max_regs_per_thread:
        reason = f"{regs_per_thread} registers per thread exceed {L.max_regs_per_thread}"
    elif regs_per_warp * _round_up(warps, L.reg_sub_partitions) > L.regs_per_block:
        reason = (f"{regs_per_warp} registers per warp x {warps} warps exceed "
                  f"{L.regs_per_block} registers per block")
    elif smem_per_block > L.smem_per_block_optin:
        reason = f"{smem_per_block} bytes of shared memory exceed {L.smem_per_block_optin} per block"
    if reason:
        return Occupancy(0, warps, 0, L.max_warps_per_sm, (), {}, reason)

    if regs_per_warp:
        warps_per_partition = (L.regs_per_sm // L.reg_sub_partitions) // regs_per_warp
        by_regs = warps_per_partition * L.reg_sub_partitions // warps
    else:
        by_regs = L.max_blocks_per_sm
    per_resource = {
        "warps": L.max_warps_per_sm // warps,
        "blocks": L.max_blocks_per_sm,
        "registers": by_regs,
        "shared memory": L.smem_per_sm // smem_alloc,
    }
    blocks = min(per_resource.values())
    limited_by = tuple(k for k, v in per_resource.items() if v == blocks)
    if blocks == 0:
        reason = "registers" if by_regs == 0 else "shared memory"
        reason = f"not even one block fits ({reason})"
    return Occupancy(blocks, warps, blocks * warps, L.max_warps_per_sm, limited_by, per_resource, reason)


# ---- the device ----------------------------------------------------------------------
_ATTRIBUTE_NUMBERS = {   # CUdevice_attribute values, for a PyCUDA without the name
    "MAX_THREADS_PER_MULTIPROCESSOR": 39, "MAX_BLOCKS_PER_MULTIPROCESSOR": 106,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 82, "MAX_REGISTERS_PER_BLOCK": 12,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 81, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 97,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 111, "WARP_SIZE": 10, "MULTIPROCESSOR_COUNT": 16,
}


def device_attribute(device, name: str) -> int:
    """One attribute by PyCUDA name; through libcuda when PyCUDA lacks the name."""
    import pycuda.driver as drv
    attr = getattr(drv.device_attribute, name, None)
    if attr is not None:
        return int(device.get_attribute(attr))
    if getattr(drv, "EMULATED", False):
        raise LookupError(f"device attribute {name} is not available")
    lib = _libcuda()
    dev, value = ctypes.c_int(), ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device_ordinal(device))), "cuDeviceGet")
    _check(lib.cuDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(_ATTRIBUTE_NUMBERS[name]), dev),
           f"cuDeviceGetAttribute({name})")
    return value.value


def device_ordinal(device) -> int:
    import pycuda.driver as drv
    for i in range(drv.Device.count()):
        if drv.Device(i) == device:
            return i
    return 0


def device_limits(device=None) -> Limits:
    """The occupancy limits of `device` (default: device 0 of the chosen backend)."""
    from .backend import drivers
    device = device if device is not None else drivers()[0].Device(0)
    major, _ = device.compute_capability()
    if major < 7:
        raise ValueError(f"the occupancy rules here are for compute capability 7.0+, not {major}.x")
    return limits_from(lambda name: device_attribute(device, name))


def multiprocessor_count(device=None) -> int:
    """The SMs of `device` (default: device 0 of the chosen backend; the emulator's: 132)."""
    from .backend import drivers
    return device_attribute(device if device is not None else drivers()[0].Device(0), "MULTIPROCESSOR_COUNT")


def function_resources(function) -> tuple[int, int]:
    """(registers per thread, static shared bytes) of a PyCUDA Function."""
    import pycuda.driver as drv
    fa = drv.function_attribute
    return int(function.get_attribute(fa.NUM_REGS)), int(function.get_attribute(fa.SHARED_SIZE_BYTES))


def function_occupancy(function, block_threads: int, dynamic_shared: int = 0,
                       limits: Limits | None = None) -> Occupancy:
    """Our calculator applied to a compiled PyCUDA Function."""
    regs, static = function_resources(function)
    return occupancy(regs, static + dynamic_shared, block_threads, limits or device_limits())


# ---- the CUDA occupancy API ------------------------------------------------------------
@dataclass(frozen=True)
class CudaCheck:
    ours: Occupancy | None
    cuda_blocks: int | None          # None: not asked (see reason)
    reason: str = ""

    @property
    def agree(self) -> bool | None:
        if self.cuda_blocks is None or self.ours is None:
            return None
        return self.cuda_blocks == self.ours.blocks_per_sm


def _libcuda():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcuda (the CUDA driver library) could not be loaded")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUresult {status}")


def cuda_blocks_per_sm(cubin: bytes, kernel_name: str, block_threads: int, dynamic_shared: int) -> int:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for `kernel_name` in `cubin`,
    loaded into the current context (the same binary SourceModule would load)."""
    lib = _libcuda()
    module, func, blocks = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    _check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(bytes(cubin))), "cuModuleLoadData")
    try:
        _check(lib.cuModuleGetFunction(ctypes.byref(func), module, kernel_name.encode()), "cuModuleGetFunction")
        if dynamic_shared > 48 * 1024:   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(lib.cuFuncSetAttribute(func, ctypes.c_int(8), ctypes.c_int(dynamic_shared)),
                   "cuFuncSetAttribute")
        _check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), func, ctypes.c_int(block_threads), ctypes.c_size_t(dynamic_shared)),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    finally:
        lib.cuModuleUnload(module)
    return blocks.value


def check_against_cuda(function, block_threads: int, dynamic_shared: int = 0, cubin: bytes | None = None,
                       kernel_name: str | None = None) -> CudaCheck:
    """Our calculator next to the CUDA occupancy API for a PyCUDA Function.

    The driver needs the function's CUfunction: taken from `function.handle`
    where PyCUDA has it, else from `cubin` + `kernel_name` (the same binary,
    e.g. from pycuda.compiler.compile). On the emulator nothing is asked."""
    import pycuda.driver as drv
    failures = (ValueError, LookupError, RuntimeError, OSError, drv.Error)   # reported, not raised
    try:
        ours = function_occupancy(function, block_threads, dynamic_shared)
    except failures as e:
        return CudaCheck(None, None, f"our calculator failed: {e}")
    if getattr(drv, "EMULATED", False):
        return CudaCheck(ours, None, "not checked: no GPU")
    try:
        handle = getattr(function, "handle", None)
        if handle is not None:
            lib, blocks = _libcuda(), ctypes.c_int()
            _check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                ctypes.byref(blocks), ctypes.c_void_p(int(handle)), ctypes.c_int(block_threads),
                ctypes.c_size_t(dynamic_shared)), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            return CudaCheck(ours, blocks.value)
        if cubin is None or kernel_name is None:
            return CudaCheck(ours, None, "not checked: PyCUDA's Function has no handle; pass cubin= and kernel_name=")
        return CudaCheck(ours, cuda_blocks_per_sm(cubin, kernel_name, block_threads, dynamic_shared))
    except failures as e:
        return CudaCheck(ours, None, f"CUDA occupancy API failed: {e}")

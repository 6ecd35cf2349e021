"""The GPUs the course names, in one table, and the facts the grader reads off a live device.

Each entry is a set of CUDA device attributes by PyCUDA's names. The H200's
are the emulated device's own (grader.emulator.config.DEVICE_ATTRIBUTES: the
course is calibrated on it, and the emulator answers cuDeviceGetAttribute
from them); the A100's and the L4's are those their drivers report. Checks,
programs and labs read limits and peaks from here, never as literals.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from types import MappingProxyType

from grader.emulator.config import DEVICE_ATTRIBUTES
from grader.platform.backend import drivers


@dataclass(frozen=True)
class Limits:
    """Per-SM and per-block limits of one device (what occupancy depends on)."""
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


# FP32 FMA lanes per SM by compute capability (64 on 6.0, Volta, Turing and the A100; 128 elsewhere).
_FP32_LANES = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}


def fp32_lanes_per_sm(major: int, minor: int) -> int:
    if (major, minor) in _FP32_LANES:
        return _FP32_LANES[(major, minor)]
    if major in (5, 6, 8, 9, 10, 11, 12):
        return 128
    raise ValueError(f"FP32 lanes per SM unknown for compute capability {major}.{minor}")


def fp32_peak_from(sm_count: int, major: int, minor: int, clock_khz: int) -> float:
    """FP32 FLOP/s: SMs x lanes x 2 (an FMA is two flops) x clock."""
    return sm_count * fp32_lanes_per_sm(major, minor) * 2 * clock_khz * 1e3


# Dense BF16 tensor-core FLOPs (FP32 accumulation) per SM per clock by compute capability: the A100's 312
# TFLOPS at 1.41 GHz on 108 SMs, the L4's 121 at 2.04 GHz on 58, the H100 SXM's 989 at 1.83 GHz on 132.
_BF16_TENSOR_FLOPS = {(8, 0): 2048, (8, 9): 1024, (9, 0): 4096}


def bf16_tensor_peak_from(sm_count: int, major: int, minor: int, clock_khz: int) -> float:
    """Dense BF16 tensor-core FLOP/s: SMs x FLOPs per SM per clock x clock."""
    if (major, minor) not in _BF16_TENSOR_FLOPS:
        raise ValueError(f"BF16 tensor-core rate unknown for compute capability {major}.{minor}")
    return sm_count * _BF16_TENSOR_FLOPS[(major, minor)] * clock_khz * 1e3


def dram_bandwidth_from(memory_clock_khz: int, bus_width_bits: int) -> float:
    """DRAM bytes/s: two transfers a clock (double data rate) x the bus width.
    The H200 reports 3201000 kHz and 6144 bits: 4.92e12 (NVIDIA quotes 4.8 TB/s)."""
    return 2 * memory_clock_khz * 1e3 * bus_width_bits / 8


@dataclass(frozen=True)
class Device:
    """One GPU model: its name and its CUDA device attributes."""
    name: str
    attributes: MappingProxyType

    def attribute(self, name: str) -> int:
        return int(self.attributes[name])

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.attribute("COMPUTE_CAPABILITY_MAJOR"), self.attribute("COMPUTE_CAPABILITY_MINOR")

    @property
    def limits(self) -> Limits:
        return limits_from(self.attribute)

    @property
    def sm_count(self) -> int:
        return self.attribute("MULTIPROCESSOR_COUNT")

    def peaks(self) -> tuple[float, float]:
        """(FP32 FLOP/s, DRAM bytes/s) from the specification figures its driver reports."""
        return (fp32_peak_from(self.sm_count, *self.compute_capability, self.attribute("CLOCK_RATE")),
                dram_bandwidth_from(self.attribute("MEMORY_CLOCK_RATE"), self.attribute("GLOBAL_MEMORY_BUS_WIDTH")))


def _device(name: str, **attributes) -> Device:
    return Device(name, MappingProxyType(attributes))


_COMMON = dict(WARP_SIZE=32, MAX_REGISTERS_PER_BLOCK=65536, MAX_REGISTERS_PER_MULTIPROCESSOR=65536,
               RESERVED_SHARED_MEMORY_PER_BLOCK=1024)
H200 = _device("NVIDIA H200", **DEVICE_ATTRIBUTES)
A100 = _device("NVIDIA A100-SXM4-80GB", **_COMMON, COMPUTE_CAPABILITY_MAJOR=8, COMPUTE_CAPABILITY_MINOR=0,
               MULTIPROCESSOR_COUNT=108, CLOCK_RATE=1410000, MEMORY_CLOCK_RATE=1593000, GLOBAL_MEMORY_BUS_WIDTH=5120,
               MAX_THREADS_PER_MULTIPROCESSOR=2048, MAX_BLOCKS_PER_MULTIPROCESSOR=32,
               MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=167936, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=166912)
L4 = _device("NVIDIA L4", **_COMMON, COMPUTE_CAPABILITY_MAJOR=8, COMPUTE_CAPABILITY_MINOR=9,
             MULTIPROCESSOR_COUNT=58, CLOCK_RATE=2040000, MEMORY_CLOCK_RATE=6251000, GLOBAL_MEMORY_BUS_WIDTH=192,
             MAX_THREADS_PER_MULTIPROCESSOR=1536, MAX_BLOCKS_PER_MULTIPROCESSOR=24,
             MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=102400, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=101376)
DEVICES = {d.name: d for d in (H200, A100, L4)}


def known(name: str) -> Device | None:
    """The table's entry for a device name as the driver reports it ('NVIDIA H200', ...)."""
    return DEVICES.get(name) or next((d for key, d in DEVICES.items() if name.startswith(key)), None)


# ---- a live device (the chosen backend's) -------------------------------------------------
_ATTRIBUTE_NUMBERS = {   # CUdevice_attribute values, for a PyCUDA without the name
    "MAX_THREADS_PER_MULTIPROCESSOR": 39, "MAX_BLOCKS_PER_MULTIPROCESSOR": 106,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 82, "MAX_REGISTERS_PER_BLOCK": 12,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 81, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 97,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 111, "WARP_SIZE": 10, "MULTIPROCESSOR_COUNT": 16,
}


def device_attribute(device, name: str) -> int:
    """One attribute of a live device by PyCUDA name; through libcuda when PyCUDA lacks the name."""
    drv = drivers()[0]
    attr = getattr(drv.device_attribute, name, None)
    if attr is not None:
        return int(device.get_attribute(attr))
    if getattr(drv, "EMULATED", False):
        raise LookupError(f"device attribute {name} is not available")
    lib = libcuda()
    dev, value = ctypes.c_int(), ctypes.c_int()
    check_cuda(lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(_ordinal(device))), "cuDeviceGet")
    check_cuda(lib.cuDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(_ATTRIBUTE_NUMBERS[name]), dev),
               f"cuDeviceGetAttribute({name})")
    return value.value


def _ordinal(device) -> int:
    drv = drivers()[0]
    for i in range(drv.Device.count()):
        if drv.Device(i) == device:
            return i
    return 0


def _default(device):
    return device if device is not None else drivers()[0].Device(0)


def name_and_capability(device=None) -> tuple[str, tuple[int, int]]:
    """The name and compute capability of `device` (default: device 0 of the chosen backend)."""
    device = _default(device)
    major, minor = device.compute_capability()
    return device.name(), (major, minor)


def device_limits(device=None) -> Limits:
    """The occupancy limits of `device` (default: device 0 of the chosen backend)."""
    device = _default(device)
    major, _ = device.compute_capability()
    if major < 7:
        raise ValueError(f"the occupancy rules here are for compute capability 7.0+, not {major}.x")
    return limits_from(lambda name: device_attribute(device, name))


def multiprocessor_count(device=None) -> int:
    """The SMs of `device` (default: device 0 of the chosen backend; the emulator's: the H200's)."""
    return device_attribute(_default(device), "MULTIPROCESSOR_COUNT")


def device_peaks(device=None) -> tuple[float, float]:
    """(FP32 FLOP/s, DRAM bytes/s) from a live device's attributes, on any backend: the GPU's own,
    or on the emulator the emulated H200's. Specification figures (not measured): a roofline's ceilings."""
    device = _default(device)
    return (fp32_peak_from(device_attribute(device, "MULTIPROCESSOR_COUNT"), *device.compute_capability(),
                           device_attribute(device, "CLOCK_RATE")),
            dram_bandwidth_from(device_attribute(device, "MEMORY_CLOCK_RATE"),
                                device_attribute(device, "GLOBAL_MEMORY_BUS_WIDTH")))


def bf16_tensor_peak(device=None) -> float:
    """Dense BF16 tensor-core FLOP/s of a live device, from its attributes (a specification figure)."""
    device = _default(device)
    return bf16_tensor_peak_from(device_attribute(device, "MULTIPROCESSOR_COUNT"), *device.compute_capability(),
                                 device_attribute(device, "CLOCK_RATE"))


def function_resources(function) -> tuple[int, int]:
    """(registers per thread, static shared bytes) of a compiled PyCUDA Function."""
    fa = drivers()[0].function_attribute
    return int(function.get_attribute(fa.NUM_REGS)), int(function.get_attribute(fa.SHARED_SIZE_BYTES))


# ---- the CUDA driver library, for what PyCUDA does not expose ----------------------------
def libcuda():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcuda (the CUDA driver library) could not be loaded")


def check_cuda(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUresult {status}")


def cuda_blocks_per_sm(cubin: bytes, kernel_name: str, block_threads: int, dynamic_shared: int) -> int:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for `kernel_name` in `cubin`,
    loaded into the current context (the same binary SourceModule would load)."""
    lib = libcuda()
    module, func, blocks = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    check_cuda(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(bytes(cubin))), "cuModuleLoadData")
    try:
        check_cuda(lib.cuModuleGetFunction(ctypes.byref(func), module, kernel_name.encode()), "cuModuleGetFunction")
        if dynamic_shared > 48 * 1024:   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check_cuda(lib.cuFuncSetAttribute(func, ctypes.c_int(8), ctypes.c_int(dynamic_shared)),
                       "cuFuncSetAttribute")
        check_cuda(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), func, ctypes.c_int(block_threads), ctypes.c_size_t(dynamic_shared)),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    finally:
        lib.cuModuleUnload(module)
    return blocks.value


def cuda_blocks_per_sm_of(function, block_threads: int, dynamic_shared: int = 0) -> int:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for a PyCUDA Function that has a handle."""
    lib, blocks = libcuda(), ctypes.c_int()
    check_cuda(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(blocks), ctypes.c_void_p(int(function.handle)), ctypes.c_int(block_threads),
        ctypes.c_size_t(dynamic_shared)), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return blocks.value

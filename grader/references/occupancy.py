"""Theoretical occupancy: how many blocks of a kernel fit on one SM.

`occupancy()` is the pure core (numbers in, numbers out), following the rules
of CUDA's occupancy calculator for compute capability 7.0 and newer:
registers are allocated per warp in units of 256 and split over 4 SM
sub-partitions; every block's shared memory is rounded up to 128 bytes after
adding the per-block reservation (1 KiB on sm_80+). The limits come from
the device table (grader.platform.devices);
`check_against_cuda()` asks the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.platform.devices import (
    H200,
    Limits,
    cuda_blocks_per_sm,
    cuda_blocks_per_sm_of,
    device_limits,
    function_resources,
)


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
              limits: Limits = H200.limits) -> Occupancy:
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
        if getattr(function, "handle", None) is not None:
            return CudaCheck(ours, cuda_blocks_per_sm_of(function, block_threads, dynamic_shared))
        if cubin is None or kernel_name is None:
            return CudaCheck(ours, None, "not checked: PyCUDA's Function has no handle; pass cubin= and kernel_name=")
        return CudaCheck(ours, cuda_blocks_per_sm(cubin, kernel_name, block_threads, dynamic_shared))
    except failures as e:
        return CudaCheck(ours, None, f"CUDA occupancy API failed: {e}")

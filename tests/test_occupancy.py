"""The pure occupancy calculator against numbers worked out by hand from the
H200 limits: 64K registers/SM (4 sub-partitions of 16K, allocated per warp in
units of 256), 2048 threads = 64 warps/SM, 32 blocks/SM, 228 KiB shared/SM,
227 KiB max per block, 1 KiB reserved per block, 128-byte granularity."""
import pytest

from grader.platform import devices
from grader.platform.devices import Limits
from grader.references.occupancy import occupancy

H200 = devices.H200.limits

KIB = 1024


def test_h200_constants():
    assert H200.max_warps_per_sm == 64
    assert H200.smem_per_sm == 233472 and H200.smem_per_block_optin == 232448


def test_full_occupancy_small_kernel():
    # 8 warps/block; 64/8 = 8 blocks by warps; 32 regs -> 1024/warp -> 16 warps per
    # sub-partition -> 64 warps -> 8 blocks by registers too; smem 1 KiB each -> 228.
    occ = occupancy(32, 0, 256)
    assert occ.blocks_per_sm == 8 and occ.active_warps == 64
    assert occ.fraction == 1.0
    assert occ.limited_by == ("warps", "registers")


def test_register_limited():
    # 128 regs x 32 = 4096/warp; 16384/4096 = 4 warps per sub-partition -> 16 warps -> 2 blocks.
    occ = occupancy(128, 0, 256)
    assert occ.blocks_per_sm == 2 and occ.fraction == 0.25
    assert occ.limited_by == ("registers",)


def test_register_allocation_unit_rounds_up():
    # 33 regs x 32 = 1056 -> 1280/warp; 16384 // 1280 = 12 per sub-partition -> 48 warps -> 6 blocks
    # (without the 256-register unit it would be 15 -> 60 warps -> 7 blocks).
    assert occupancy(33, 0, 256).blocks_per_sm == 6


def test_register_sub_partitions():
    # 40 regs -> 1280/warp; per sub-partition 12 warps -> 48 warps -> 24 blocks of 2 warps
    # (65536 // 1280 = 51 warps would give 25).
    occ = occupancy(40, 0, 64)
    assert occ.blocks_per_sm == 24 and occ.fraction == 0.75 and occ.limited_by == ("registers",)


def test_shared_memory_limited():
    # 48 KiB + 1 KiB reserved = 50176 bytes; 233472 // 50176 = 4 blocks = 32 warps.
    occ = occupancy(32, 48 * KIB, 256)
    assert occ.blocks_per_sm == 4 and occ.fraction == 0.5
    assert occ.limited_by == ("shared memory",)


def test_shared_memory_granularity_and_reservation():
    # 7 blocks need <= 233472 / 7 = 33353 bytes each, i.e. <= 33280 after rounding to 128:
    # 32256 + 1024 = 33280 fits 7; one byte more rounds to 33408 and fits only 6.
    assert occupancy(32, 32256, 64).blocks_per_sm == 7
    assert occupancy(32, 32257, 64).blocks_per_sm == 6


def test_largest_block_shared_memory():
    # 227 KiB + 1 KiB reserved = 228 KiB: exactly one block; one byte more does not fit at all.
    assert occupancy(32, 227 * KIB, 128).blocks_per_sm == 1
    too_big = occupancy(32, 227 * KIB + 1, 128)
    assert too_big.blocks_per_sm == 0 and too_big.fraction == 0 and "per block" in too_big.reason


def test_block_count_limited():
    # 1 warp per block: 64 by warps, 32 by the block limit.
    occ = occupancy(16, 0, 32)
    assert occ.blocks_per_sm == 32 and occ.fraction == 0.5 and occ.limited_by == ("blocks",)


def test_partial_warp_counts_as_a_warp():
    # 48 threads use 2 warps: 32 blocks (block limit) = 64 warps.
    assert occupancy(16, 0, 48).active_warps == 64


def test_per_block_register_limit():
    assert occupancy(64, 0, 1024).blocks_per_sm == 1           # 2048 x 32 warps = 65536: fits
    assert occupancy(72, 0, 1024).blocks_per_sm == 0           # 2304 x 32 = 73728 > 65536
    assert occupancy(256, 0, 32).blocks_per_sm == 0            # more than 255 per thread


def test_too_many_threads():
    assert occupancy(32, 0, 4096).blocks_per_sm == 0


def test_invalid_block_size():
    with pytest.raises(ValueError):
        occupancy(32, 0, 0)


def test_other_limits_are_used():
    small = Limits(max_threads_per_sm=1536, max_blocks_per_sm=16, regs_per_sm=65536, regs_per_block=65536,
                   smem_per_sm=100 * KIB, smem_per_block_optin=99 * KIB, smem_reserved_per_block=1024)
    assert occupancy(32, 0, 256).blocks_per_sm == 8
    assert occupancy(32, 0, 256, small).blocks_per_sm == 6     # 48 warps / 8


def test_device_limits_on_the_emulator_are_the_h200():
    import grader
    if grader.BACKEND.name != "emulator":
        pytest.skip("the emulator reports H200 limits; a real GPU reports its own")
    from grader.platform.devices import device_limits
    assert device_limits() == H200
    from grader.platform.devices import multiprocessor_count
    assert multiprocessor_count() == 132

"""The warptiling kernel's rules (solutions/warptiling.cu): which parameter
sets it can be compiled and run with, checked without compiling. The
autotuner (grader/autotune.py) and lab 6's checks share them.

    rule_violations(c, limits)   threads, divisibility of the block, warp and thread tiles, the copy
                                 mapping, shared memory and registers for MIN_BLOCKS blocks per SM
    violations(c, limits)        the same, then the bank conflicts of every shared-memory access
                                 pattern (the addresses modelled as the kernel makes them, the bank
                                 rule the emulator's: grader.emulator.analysis.bank_wavefronts)

c: a dict of grader.kernels.stages.WARPTILE_PARAMS; limits: a grader.platform.devices.Limits
(default: device 0's, the emulator's being the H200's).

And what a search calls for each configuration it keeps: WarptileTuner(source)
.check(c) (correct on small shapes, on the active backend) and .time(c) (the
median of 20 timed runs at 4096^3 on a GPU, inf elsewhere).
"""
from __future__ import annotations

import itertools
from functools import lru_cache

from grader.emulator.analysis import bank_wavefronts
from grader.kernels.stages import WARPTILE_PARAMS as PARAMS
from grader.kernels.stages import warptile_shared_bytes
from grader.platform import devices

REGISTER_OVERHEAD = 40        # addresses, indices, loop counters: measured 34-45 with ptxas -v


@lru_cache(maxsize=None)
def device_limits():
    """Shared memory and registers of an SM of device 0 (the emulator's: the H200's)."""
    return devices.device_limits()


# ---- constraints, checked before compiling ------------------------------------
def derived(c: dict) -> dict:
    wmiter = (c["WM"] * c["WN"]) // (32 * c["TM"] * c["TN"] * c["WNITER"]) if c["WNITER"] else 0
    d = {"WMITER": wmiter}
    if wmiter:
        d["WSUBM"] = c["WM"] // wmiter
        d["WSUBN"] = c["WN"] // c["WNITER"]
        d["LC"] = d["WSUBN"] // c["TN"] if c["TN"] else 0
    return d


def a_groups_per_thread(c: dict) -> int:
    """Groups of 4 floats of the A tile each thread loads (LA4 in the kernel)."""
    return -(-c["BM"] * c["BK"] // 4 // c["NUM_THREADS"])


def registers_needed(c: dict) -> int:
    """Accumulators, one k-step's fragments of A and B, the A tile in flight, and the rest."""
    d = derived(c)
    return (c["BM"] * c["BN"] // c["NUM_THREADS"] + d["WMITER"] * c["TM"] + c["WNITER"] * c["TN"]
            + 4 * a_groups_per_thread(c) + REGISTER_OVERHEAD)


def conflict_degree(accesses: list[tuple[int, int]], width: int) -> int:
    """Bank-conflict degree (1: none) of one warp-wide shared access: accesses
    are (lane, byte address) of the lanes taking part, all `width` bytes wide,
    under the emulator's bank rule."""
    return max(1, bank_wavefronts(dict(accesses), width).max_ways)


def bank_conflicts(c: dict) -> list[str]:
    """Every shared-memory access pattern of the kernel, warp by warp: the
    names of those with a conflict (empty: conflict free)."""
    d = derived(c)
    BM, BN, BK, NT = c["BM"], c["BN"], c["BK"], c["NUM_THREADS"]
    S = BM + 4
    as_addr = lambda k, m: 4 * (k * S + m)                       # noqa: E731
    bs_addr = lambda k, n: 4 * (BK * S) + 4 * (k * BN + n)         # noqa: E731 (Bs after As)
    bad = []

    def check(name, width, pattern):
        for w in range(NT // 32):
            for r in range(pattern_reps[name]):
                acc = [(lane, a) for lane in range(32) if (a := pattern(32 * w + lane, r)) is not None]
                deg = conflict_degree(acc, width) if acc else 1
                if deg > 1:
                    bad.append(f"{name}: {deg}-way (warp {w})")
                    return

    LB = BK * BN // NT
    pattern_reps = {}

    def a_group(t, r):      # (k, m) of group t + r NT of the A tile, as a_col and a_row in the kernel
        e = t + r * NT
        return 4 * ((e // 16) % (BK // 4)), e % 16 + 16 * (e // (4 * BK))

    groups = BM * BK // 4
    for j in range(4):      # store_a: 4-byte stores, one per element of a group; lanes past the tile idle
        name = f"As store (element {j})"
        pattern_reps[name] = a_groups_per_thread(c)
        check(name, 4, lambda t, r, j=j: (as_addr(a_group(t, r)[0] + j, a_group(t, r)[1])
                                          if t + r * NT < groups else None))
    pattern_reps["Bs copy, float4 path"] = LB // 4
    check("Bs copy, float4 path", 16,
          lambda t, r: bs_addr((t + r * NT) // (BN // 4), ((t + r * NT) % (BN // 4)) * 4))
    pattern_reps["Bs store, scalar path"] = LB
    check("Bs store, scalar path", 4, lambda t, r: bs_addr((t + r * NT) // BN, (t + r * NT) % BN))

    def offs(tid):
        warp, lane = tid // 32, tid % 32
        wr, wc = warp // (BN // c["WN"]), warp % (BN // c["WN"])
        return wr * c["WM"] + (lane // d["LC"]) * c["TM"], wc * c["WN"] + (lane % d["LC"]) * c["TN"]

    for wm, i in itertools.product(range(d["WMITER"]), range(0, c["TM"], 4)):
        name = f"As read (sub-tile {wm}, element {i})"
        pattern_reps[name] = 1
        check(name, 16, lambda t, r, wm=wm, i=i: as_addr(0, offs(t)[0] + wm * d["WSUBM"] + i))
    for wn, j in itertools.product(range(c["WNITER"]), range(0, c["TN"], 4)):
        name = f"Bs read (sub-tile {wn}, element {j})"
        pattern_reps[name] = 1
        check(name, 16, lambda t, r, wn=wn, j=j: bs_addr(0, offs(t)[1] + wn * d["WSUBN"] + j))
    return bad


def register_budget(c: dict, limits) -> int:
    """Registers a thread may use when MIN_BLOCKS blocks of NUM_THREADS threads
    share an SM's register file (a warp gets them in units of 256: 8 per thread)."""
    return min(limits.max_regs_per_thread, limits.regs_per_sm // (c["MIN_BLOCKS"] * c["NUM_THREADS"]) // 8 * 8)


def rule_violations(c: dict, limits=None) -> list[str]:
    """violations() without the bank-conflict model: the rules that lab 6's
    students write (threads, divisibility, the copy mapping, shared memory and
    registers for MIN_BLOCKS blocks per SM). Empty: every rule holds."""
    BM, BN, BK, WM, WN, WNITER, TM, TN, NT, STAGES, MIN_BLOCKS = (c[p] for p in PARAMS)
    L = limits or device_limits()
    why = []
    if NT > 1024 or NT % 32:
        return ["NUM_THREADS must be a multiple of 32, at most 1024"]
    if BM % WM or BN % WN or NT != 32 * (BM // WM) * (BN // WN):
        return ["NUM_THREADS must be 32 per WM x WN warp tile of the BM x BN block tile"]
    d = derived(c)
    if d["WMITER"] < 1 or (WM * WN) % (32 * TM * TN * WNITER) or WM % d["WMITER"] or WN % WNITER:
        return ["a warp tile must split into WMITER x WNITER sub-tiles of 32 lanes x TM x TN"]
    if d["WSUBN"] % TN or d["LC"] == 0 or 32 % d["LC"] or (32 // d["LC"]) * TM != d["WSUBM"]:
        return ["the 32 lanes must cover a WSUBM x WSUBN sub-tile exactly"]
    if TM % 4 or TN % 4:
        why.append("TM and TN must be multiples of 4 (float4 reads)")
    if BM % 32 or BN % 32 or BK % 8:
        why.append("BM and BN must be multiples of 32, BK of 8 (load maps, padding)")
    if (BK * BN // 4) % NT:
        why.append("the B tile (float4) must split evenly over the threads")
    if MIN_BLOCKS * (warptile_shared_bytes(c) + L.smem_reserved_per_block) > L.smem_per_sm:
        why.append(f"shared memory: {MIN_BLOCKS} x {warptile_shared_bytes(c)} B does not fit in an SM")
    budget = register_budget(c, L)
    if registers_needed(c) > budget:
        why.append(f"about {registers_needed(c)} registers per thread > {budget} "
                   f"({MIN_BLOCKS} blocks of {NT} threads per SM)")
    return why


def violations(c: dict, limits=None) -> list[str]:
    """Why the kernel cannot be built or run with c (empty: valid). Mirrors
    the static_asserts of solutions/warptiling.cu, plus the resource limits
    of `limits` (a devices.Limits; default: device 0's), then (when every
    other rule holds) the bank conflicts of its shared-memory accesses."""
    why = rule_violations(c, limits)
    if not why:
        why += [f"bank conflict, {b}" for b in bank_conflicts(c)]
    return why

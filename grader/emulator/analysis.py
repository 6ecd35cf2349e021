"""What the emulator's analysis mode reports: shared-memory bank conflicts and
global-memory requests and sectors (coalescing) per source line, both defined
like Nsight Compute's counters; shared-memory races; and out-of-bounds or
misaligned accesses (like compute-sanitizer memcheck).

    with grader.emulator.analyze() as report:
        kernel(..., block=..., grid=...)       # ordinary PyCUDA launches
    print(report)       # or report.bank_conflicts, .global_accesses, .races, .out_of_bounds
"""
from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

from .binding import runtime

RACE_KINDS = {0: "read after write", 1: "write after read", 2: "write after write",
              3: "bulk copy over an access", 4: "access before its bulk copy's phase",
              5: "store not fenced before a bulk copy", 6: "write to a bulk store's source before its wait",
              7: "bulk store of an unordered write", 8: "mbarrier used before its initialisation",
              9: "store not fenced before a wgmma", 10: "write to a wgmma's operand before its wait"}
FINDING_KINDS = {0: "out of bounds", 1: "misaligned"}


class _Uint3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    def tuple(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)


class _SiteStats(ctypes.Structure):
    _fields_ = [("pc", ctypes.c_size_t), ("store", ctypes.c_int), ("size", ctypes.c_int),
                ("requests", ctypes.c_ulonglong), ("wavefronts", ctypes.c_ulonglong),
                ("ideal_wavefronts", ctypes.c_ulonglong), ("max_ways", ctypes.c_int),
                ("worst_conflicts", ctypes.c_int), ("worst_lanes", ctypes.c_uint), ("worst_warp", ctypes.c_uint),
                ("worst_block", _Uint3), ("worst_addr", ctypes.c_size_t * 32)]


class _GlobalStats(ctypes.Structure):
    _fields_ = [("pc", ctypes.c_size_t), ("store", ctypes.c_int), ("size", ctypes.c_int),
                ("buffer", ctypes.c_longlong), ("requests", ctypes.c_ulonglong), ("sectors", ctypes.c_ulonglong),
                ("ideal_sectors", ctypes.c_ulonglong), ("bytes", ctypes.c_ulonglong), ("worst_excess", ctypes.c_int),
                ("worst_lanes", ctypes.c_uint), ("worst_warp", ctypes.c_uint), ("worst_block", _Uint3),
                ("worst_addr", ctypes.c_size_t * 32)]


class _Race(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("pc_a", ctypes.c_size_t), ("pc_b", ctypes.c_size_t),
                ("tid_a", ctypes.c_uint), ("tid_b", ctypes.c_uint), ("block", _Uint3),
                ("addr", ctypes.c_size_t), ("count", ctypes.c_ulonglong)]


class _Finding(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("store", ctypes.c_int), ("size", ctypes.c_int), ("pc", ctypes.c_size_t),
                ("tid", ctypes.c_uint), ("block", _Uint3), ("addr", ctypes.c_size_t),
                ("buffer", ctypes.c_longlong), ("offset", ctypes.c_longlong), ("shared", ctypes.c_int)]


@dataclass
class BankConflicts:
    """One shared-memory access site (a source line, load or store)."""
    kernel: str
    line: int
    op: str                  # "ld" or "st"
    width: int               # bytes per thread
    requests: int
    wavefronts: int
    ideal_wavefronts: int
    max_ways: int
    picture: str             # the worst request's lanes per bank

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal_wavefronts

    def describe(self) -> str:
        if not self.conflicts:
            return f"line {self.line} ({self.op}, {self.width} B): no bank conflicts in {self.requests} requests"
        return (f"line {self.line} ({self.op}, {self.width} B): {self.max_ways}-way bank conflict; "
                f"{self.wavefronts} wavefronts for {self.requests} requests (ideal {self.ideal_wavefronts})")


SECTOR = 32       # bytes: the unit in which L1 serves a global request


@dataclass
class GlobalAccesses:
    """One global-memory access site (a source line's loads or stores of one
    buffer): Nsight Compute's l1tex__t_requests_pipe_lsu_mem_global_op_{ld,st}.sum
    (warp-level requests) and l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum."""
    kernel: str
    line: int
    op: str                  # "ld" or "st"
    buffer: str              # the device allocation, named by the launch argument pointing into it
    width: int               # bytes per thread
    requests: int
    sectors: int
    ideal_sectors: int       # the sectors each request's distinct bytes would fill, contiguous and aligned
    bytes: int               # bytes the threads asked for
    picture: str             # the worst request's sectors and the lanes in each
    worst_excess: int = 0    # that request's sectors beyond its ideal

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def ideal_per_request(self) -> float:
        return self.ideal_sectors / self.requests if self.requests else 0.0

    @property
    def excess(self) -> int:
        """Sectors beyond what the bytes need (0: coalesced)."""
        return self.sectors - self.ideal_sectors

    def describe(self) -> str:
        what = "load" if self.op == "ld" else "store"
        text = (f"line {self.line} ({what} of {self.buffer}, {self.width} B): "
                f"{self.sectors_per_request:.4g} sectors per request "
                f"({self.sectors} sectors for {self.requests} requests")
        if not self.excess:
            return text + "; coalesced)"
        return text + f"; {self.ideal_per_request:.4g} per request would do)"


@dataclass
class Race:
    kernel: str
    kind: str
    line_a: int              # the earlier access
    line_b: int              # the access that conflicts with it
    thread_a: tuple[int, int, int]
    thread_b: tuple[int, int, int]
    block: tuple[int, int, int]
    count: int

    def describe(self) -> str:
        where = f"in '{self.kernel}', block {self.block} ({self.count} time(s))"
        if self.kind == RACE_KINDS[3]:
            return (f"shared-memory race {where}: the bulk copy on line {self.line_b} (thread {self.thread_b}) "
                    f"overwrites what line {self.line_a} (thread {self.thread_a}) accessed, and nothing orders that "
                    f"access before the copy: a stage refilled before its readers released it (with a "
                    f"__syncthreads() before the copy is issued, or an mbarrier they arrive on once done with it, "
                    f"which the producer waits on)")
        if self.kind == RACE_KINDS[4]:
            return (f"shared-memory race {where}: line {self.line_b} (thread {self.thread_b}) touches what the bulk "
                    f"copy on line {self.line_a} (thread {self.thread_a}) writes, with no wait for the mbarrier "
                    f"phase that copy completes on before it (a wait missing, on the wrong mbarrier or parity, or "
                    f"the stage refilled before this thread was done with it)")
        if self.kind == RACE_KINDS[5]:
            return (f"shared-memory race {where}: line {self.line_a} (thread {self.thread_a}) writes shared memory "
                    f"that the bulk copy on line {self.line_b} (thread {self.thread_b}) then reads or overwrites, with "
                    f"no fence_proxy_async() between them: the copy (the asynchronous proxy) may not see that store "
                    f"(fence after the stores, before the __syncthreads() or arrival that orders them before the copy)")
        if self.kind == RACE_KINDS[6]:
            return (f"shared-memory race {where}: line {self.line_b} (thread {self.thread_b}) writes shared memory "
                    f"that the bulk store on line {self.line_a} (thread {self.thread_a}) reads, and nothing orders the "
                    f"two: a write meant for that store needs a __syncthreads() between it and the store; a write "
                    f"meant for a later one, the store's wait (bulk_wait_group_read) and then a __syncthreads() "
                    f"before it")
        if self.kind == RACE_KINDS[7]:
            return (f"shared-memory race {where}: the bulk store on line {self.line_b} (thread {self.thread_b}) reads "
                    f"what line {self.line_a} (thread {self.thread_a}) writes, and nothing orders that write before "
                    f"the store (a __syncthreads() missing between the stores and the copy?)")
        if self.kind == RACE_KINDS[8]:
            return (f"shared-memory race {where}: line {self.line_b} (thread {self.thread_b}) uses the mbarrier that "
                    f"line {self.line_a} (thread {self.thread_a}) initialises, and nothing orders the initialisation "
                    f"before the use (fence_mbarrier_init() and a __syncthreads() after mbarrier_init())")
        if self.kind == RACE_KINDS[9]:
            return (f"shared-memory race {where}: line {self.line_a} (thread {self.thread_a}) writes shared memory "
                    f"that the wgmma on line {self.line_b} (thread {self.thread_b}) reads, with no fence_proxy_async() "
                    f"between them: the wgmma (the asynchronous proxy) may not see that store (fence after the stores, "
                    f"before the __syncthreads() that orders them before the wgmma)")
        if self.kind == RACE_KINDS[10]:
            return (f"shared-memory race {where}: line {self.line_b} (thread {self.thread_b}) writes shared memory "
                    f"that the wgmma on line {self.line_a} (thread {self.thread_a}) reads, and nothing orders the write "
                    f"after that wgmma is done: a wgmma may read its operands until its wait, so wgmma_wait_group() "
                    f"for it, then a __syncthreads(), before the write")
        return (f"shared-memory race ({self.kind}) in '{self.kernel}': line {self.line_a} (thread {self.thread_a}) "
                f"and line {self.line_b} (thread {self.thread_b}) of block {self.block} touch the same word with no "
                f"__syncthreads() between them ({self.count} time(s))")


@dataclass
class Finding:
    kernel: str
    kind: str                # "out of bounds" or "misaligned"
    op: str
    size: int
    line: int
    thread: tuple[int, int, int]
    block: tuple[int, int, int]
    address: int
    buffer: str
    offset: int
    shared: bool
    place: str = ""          # where a global address is among the device allocations (out of bounds)

    def describe(self) -> str:
        what = "read" if self.op == "ld" else "write"
        where = f"kernel '{self.kernel}', line {self.line}, block {self.block}, thread {self.thread}"
        if self.kind == "misaligned" and self.shared:
            return (f"{where}: misaligned address: a {self.size}-byte shared {what} at byte {self.offset} of the "
                    f"block's shared memory, which is not a multiple of {min(self.size, 16)}")
        if self.kind == "misaligned":
            return (f"{where}: misaligned address: a {self.size}-byte global {what} at 0x{self.address:x}, "
                    f"which is not a multiple of {min(self.size, 16)}")
        if self.shared:
            return (f"{where}: out-of-bounds {self.size}-byte shared {what}, outside the block's shared arrays "
                    f"({self.offset:+d} bytes from the start of its shared memory)")
        if not self.place:
            return (f"{where}: out-of-bounds {self.size}-byte {what} at 0x{self.address:x}: {self.offset:+d} bytes "
                    f"from the start of {self.buffer}")
        return f"{where}: out-of-bounds {self.size}-byte {what} at 0x{self.address:x}, {self.place}"


def place_among(address: int, size: int, ranges: list[tuple[int, int]], names: list[str]) -> str:
    """Where an access of `size` bytes at `address`, not inside any allocation,
    is relative to the allocations (start, size) named `names`: the one it runs
    off the end of, or the nearest below and above it; never "inside" one it is not in."""
    end = address + size
    for (start, n), name in zip(ranges, names):
        if start <= address < start + n:
            return (f"which starts {start + n - address} byte(s) before the end of {name}: its last "
                    f"{end - (start + n)} byte(s) are past the end")
    below = max(((start + n, name) for (start, n), name in zip(ranges, names) if start + n <= address), default=None)
    above = min(((start, name) for (start, n), name in zip(ranges, names) if start >= end), default=None)
    parts = ([f"{address - below[0]} bytes past the end of {below[1]}"] if below else []) + \
            ([f"{above[0] - end} bytes before the start of {above[1]}"] if above else [])
    return "not inside any device allocation" + (": " + "; ".join(parts) if parts else " (the launch has none)")


@dataclass
class Report:
    bank_conflicts: list[BankConflicts] = field(default_factory=list)
    global_accesses: list[GlobalAccesses] = field(default_factory=list)
    races: list[Race] = field(default_factory=list)
    out_of_bounds: list[Finding] = field(default_factory=list)
    launches: int = 0
    global_dropped: int = 0  # global accesses left out of the counts (a block past the runtime's request limit)
    barriers: int = 0        # __syncthreads() a whole block passed, summed over blocks and launches
    async_bytes: int = 0     # global bytes asynchronous copies (cp.async) read, also counted in the loads'

    @property
    def conflicts_ld(self) -> int:
        return sum(s.conflicts for s in self.bank_conflicts if s.op == "ld")

    @property
    def conflicts_st(self) -> int:
        return sum(s.conflicts for s in self.bank_conflicts if s.op == "st")

    def sectors(self, op: str, kernel: str | None = None) -> int:
        """Global-memory sectors of loads ("ld") or stores ("st"), of one kernel or all."""
        return sum(g.sectors for g in self.global_accesses if g.op == op and kernel in (None, g.kernel))

    def requests(self, op: str, kernel: str | None = None) -> int:
        """Global-memory warp requests of loads ("ld") or stores ("st"), of one kernel or all."""
        return sum(g.requests for g in self.global_accesses if g.op == op and kernel in (None, g.kernel))

    def worst(self) -> BankConflicts | None:
        conflicting = [s for s in self.bank_conflicts if s.conflicts]
        return max(conflicting, key=lambda s: (s.max_ways, s.conflicts)) if conflicting else None

    def __str__(self) -> str:
        rows = [f"{self.launches} launch(es) analysed",
                f"bank conflicts: {self.conflicts_ld} on loads, {self.conflicts_st} on stores"]
        rows += ["  " + s.describe() for s in sorted(self.bank_conflicts, key=lambda s: (s.kernel, s.line, s.op))]
        worst = self.worst()
        if worst:
            rows += [f"worst request, line {worst.line}:", worst.picture]
        rows += [f"global memory: {self.requests('ld')} load requests, {self.sectors('ld')} sectors; "
                 f"{self.requests('st')} store requests, {self.sectors('st')} sectors (32 B each)"]
        if self.global_dropped:
            rows += [f"  (partial: {self.global_dropped} accesses of blocks with very many requests not counted)"]
        rows += ["  " + g.describe()
                 for g in sorted(self.global_accesses, key=lambda g: (g.kernel, g.line, g.op, g.buffer))]
        uncoalesced = [g for g in self.global_accesses if g.excess]
        if uncoalesced:
            g = max(uncoalesced, key=lambda g: (g.excess / g.requests, g.sectors))
            rows += [f"worst global request, line {g.line}:", g.picture]
        rows += [f"races: {len(self.races)}"] + ["  " + r.describe() for r in self.races]
        rows += [f"out-of-bounds or misaligned accesses: {len(self.out_of_bounds)}"]
        rows += ["  " + f.describe() for f in self.out_of_bounds]
        return "\n".join(rows)


_active: list[Report] = []


@contextlib.contextmanager
def analyze():
    """Analyse every emulated launch inside the block."""
    report = Report()
    _active.append(report)
    runtime().emu_analysis_enable(1)
    try:
        yield report
    finally:
        _active.pop()
        runtime().emu_analysis_enable(1 if _active else 0)


def active() -> Report | None:
    return _active[-1] if _active else None


@dataclass(frozen=True)
class Wavefronts:
    """What one warp request costs under the bank rule."""
    wavefronts: int
    ideal: int               # one per phase with active lanes
    max_ways: int            # the most distinct words one bank serves in a phase (1: no conflict)


@lru_cache(maxsize=None)
def _bank_rule():
    fn = runtime().emu_bank_wavefronts
    fn.restype = ctypes.c_ulonglong
    fn.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(ctypes.c_int)]
    return fn


def bank_wavefronts(addresses: dict[int, int], size: int) -> Wavefronts:
    """The bank rule of the runtime (emu_bank_wavefronts in runtime/analysis.cpp,
    the one the analysis applies to every emulated request) for one warp
    request: `addresses` maps lane (0-31) -> byte offset in shared memory,
    every access `size` bytes (at most 16)."""
    if not 0 < size <= 16:
        raise ValueError(f"a shared-memory access is 1 to 16 bytes, not {size}")
    addr, lanes = (ctypes.c_size_t * 32)(), 0
    for lane, a in addresses.items():
        addr[lane] = a
        lanes |= 1 << lane
    ideal, ways = ctypes.c_ulonglong(), ctypes.c_int()
    wavefronts = _bank_rule()(addr, lanes, size, ctypes.byref(ideal), ctypes.byref(ways))
    return Wavefronts(int(wavefronts), ideal.value, ways.value)


def bank_picture(addresses: list[int], lanes: int, width: int, block: tuple | None = None,
                 warp: int | None = None) -> str:
    """The lanes of one warp request (of `warp` in `block`, when given) and the bank (4-byte word mod 32)
    each one starts in, with the busiest bank of each phase named."""
    active = [lane for lane in range(32) if lanes >> lane & 1]
    rows = [] if block is None or warp is None else [
        f"block {tuple(block)}, warp {warp} (threads {32 * warp}-{32 * warp + 31} in the block's linear order), "
        f"{len(active)} active lane(s):"]
    rows += ["lane " + " ".join(f"{lane:2d}" for lane in active),
            "bank " + " ".join(f"{addresses[lane] // 4 % 32:2d}" for lane in active)]
    per_phase = 32 if width <= 4 else 16 if width == 8 else 8
    for p0 in range(0, 32, per_phase):
        words: dict[int, dict[int, list[int]]] = {}
        for lane in (l for l in active if p0 <= l < p0 + per_phase):
            for word in range(addresses[lane] // 4, (addresses[lane] + max(width, 1) - 1) // 4 + 1):
                words.setdefault(word % 32, {}).setdefault(word, []).append(lane)
        if words:
            bank, distinct = max(words.items(), key=lambda kv: len(kv[1]))
            phase = f"lanes {p0}-{p0 + per_phase - 1}: " if per_phase < 32 else ""
            rows.append(f"{phase}bank {bank} holds {len(distinct)} distinct word(s), "
                        f"from lanes {', '.join(str(ls[0]) for ls in distinct.values())}")
    return "\n".join(rows)


@lru_cache(maxsize=None)
def _sector_rule():
    fn = runtime().emu_global_sectors
    fn.restype = ctypes.c_uint
    fn.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)]
    return fn


def global_sectors(addresses: dict[int, int], size: int) -> tuple[int, int]:
    """The sector rule of the runtime (emu_global_sectors in runtime/analysis.cpp)
    for one warp request: `addresses` maps lane (0-31) -> byte address, every
    access `size` bytes. Returns (sectors, ideal sectors)."""
    if size < 1:
        raise ValueError(f"an access is at least 1 byte, not {size}")
    addr, lanes = (ctypes.c_size_t * 32)(), 0
    for lane, a in addresses.items():
        addr[lane] = a
        lanes |= 1 << lane
    ideal = ctypes.c_uint()
    return int(_sector_rule()(addr, lanes, size, ctypes.byref(ideal))), ideal.value


def _lane_ranges(lanes: list[int]) -> str:
    runs: list[list[int]] = []
    for lane in lanes:
        if runs and lane == runs[-1][1] + 1:
            runs[-1][1] = lane
        else:
            runs.append([lane, lane])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def sector_picture(addresses: list[int], lanes: int, width: int, store: bool = False, rows: int = 6) -> str:
    """Which 32-byte sectors one warp request touched: one row per sector, its
    offset from the first, a mark per 4-byte word (# used, . fetched for
    nothing) and the lanes in it."""
    active = [lane for lane in range(32) if lanes >> lane & 1]
    if not active:
        return ""
    width = max(width, 1)
    sectors: dict[int, tuple[set[int], list[int]]] = {}
    for lane in active:
        a = addresses[lane]
        for sector in range(a // SECTOR, (a + width - 1) // SECTOR + 1):
            words, who = sectors.setdefault(sector, (set(), []))
            lo, hi = max(a, sector * SECTOR), min(a + width, (sector + 1) * SECTOR)
            words.update(range((lo - sector * SECTOR) // 4, (hi - 1 - sector * SECTOR) // 4 + 1))
            who.append(lane)
    first = min(sectors)
    used = len({a + i for lane in active for a in [addresses[lane]] for i in range(width)})
    verb = "wrote" if store else "read"
    out = [f"lanes {_lane_ranges(active)} {verb} {width} B each: {len(sectors)} sector(s) of {SECTOR} B "
           f"({len(sectors) * SECTOR} B moved for {used} B used)",
           "  offset  words     lanes"]
    ordered = sorted(sectors)
    for sector in ordered[:rows]:
        words, who = sectors[sector]
        marks = "".join("#" if w in words else "." for w in range(SECTOR // 4))
        out.append(f"  {(sector - first) * SECTOR:+6d}  {marks}  {_lane_ranges(sorted(set(who)))}")
    if len(ordered) > rows:
        gaps = {b - a for a, b in zip(ordered, ordered[1:])}
        step = f", {gaps.pop() * SECTOR} B apart" if len(gaps) == 1 else ""
        out.append(f"  ... {len(ordered) - rows} more sector(s){step}")
    return "\n".join(out)


def _thread(linear: int, block_dims: tuple[int, int, int]) -> tuple[int, int, int]:
    bx, by, _ = block_dims
    return (linear % bx, linear // bx % by, linear // (bx * by))


def collect(loaded, kernel_name: str, block_dims, buffer_names: list[str],
            buffer_ranges: list[tuple[int, int]]) -> list[Finding]:
    """Move the runtime's results for one launch into the active report;
    returns the launch's fatal findings (out of bounds, misaligned).
    `buffer_ranges` are the (start, size) of the allocations `buffer_names` name."""
    rt = runtime()
    report = active()
    lines = _LineMap(loaded)

    n = rt.emu_analysis_sites(None, 0)
    sites = (_SiteStats * n)()
    rt.emu_analysis_sites(sites, n)
    for s in sites:
        report.bank_conflicts.append(BankConflicts(
            kernel_name, lines(s.pc), "st" if s.store else "ld", s.size, s.requests, s.wavefronts,
            s.ideal_wavefronts, s.max_ways, bank_picture(list(s.worst_addr), s.worst_lanes, s.size,
                                                       s.worst_block.tuple(), int(s.worst_warp))))
    fn = rt.emu_analysis_global_sites
    fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_size_t]
    n = fn(None, 0)
    gsites = (_GlobalStats * n)()
    fn(gsites, n)
    for g in gsites:
        report.global_accesses.append(GlobalAccesses(
            kernel_name, lines(g.pc), "st" if g.store else "ld",
            buffer_names[g.buffer] if 0 <= g.buffer < len(buffer_names) else "no buffer", g.size, g.requests,
            g.sectors, g.ideal_sectors, g.bytes,
            sector_picture(list(g.worst_addr), g.worst_lanes, g.size, bool(g.store)), g.worst_excess))
    rt.emu_analysis_global_dropped.restype = ctypes.c_ulonglong
    report.global_dropped = int(rt.emu_analysis_global_dropped())
    rt.emu_analysis_barriers.restype = ctypes.c_ulonglong
    report.barriers += int(rt.emu_analysis_barriers())
    rt.emu_analysis_async_bytes.restype = ctypes.c_ulonglong
    report.async_bytes += int(rt.emu_analysis_async_bytes())
    n = rt.emu_analysis_races(None, 0)
    races = (_Race * n)()
    rt.emu_analysis_races(races, n)
    for r in races:
        report.races.append(Race(kernel_name, RACE_KINDS[r.kind], lines(r.pc_a), lines(r.pc_b),
                                 _thread(r.tid_a, block_dims), _thread(r.tid_b, block_dims), r.block.tuple(),
                                 r.count))
    n = rt.emu_analysis_findings(None, 0)
    found = (_Finding * n)()
    rt.emu_analysis_findings(found, n)
    findings = [Finding(kernel_name, FINDING_KINDS[f.kind], "st" if f.store else "ld", f.size, lines(f.pc),
                        _thread(f.tid, block_dims), f.block.tuple(), f.addr,
                        "shared memory" if f.shared else
                        buffer_names[f.buffer] if 0 <= f.buffer < len(buffer_names) else "no buffer",
                        f.offset, bool(f.shared),
                        place_among(f.addr, f.size, list(buffer_ranges), buffer_names)
                        if FINDING_KINDS[f.kind] == "out of bounds" and not f.shared else "")
                for f in found]
    report.out_of_bounds += findings
    report.launches += 1
    rt.emu_analysis_clear()
    _merge_sites(report)
    return findings


def _merge_sites(report: Report) -> None:
    """One record per kernel, line and op, whatever number of launches."""
    _merge_global(report)
    merged: dict[tuple, BankConflicts] = {}
    for s in report.bank_conflicts:
        key = (s.kernel, s.line, s.op)
        m = merged.get(key)
        if m is None:
            merged[key] = BankConflicts(**vars(s))
            continue
        if s.wavefronts - s.ideal_wavefronts > m.wavefronts - m.ideal_wavefronts:
            m.picture = s.picture
        m.requests += s.requests
        m.wavefronts += s.wavefronts
        m.ideal_wavefronts += s.ideal_wavefronts
        m.max_ways = max(m.max_ways, s.max_ways)
        m.width = max(m.width, s.width)
    report.bank_conflicts[:] = list(merged.values())


def _merge_global(report: Report) -> None:
    merged: dict[tuple, GlobalAccesses] = {}
    for g in report.global_accesses:
        key = (g.kernel, g.line, g.op, g.buffer)
        m = merged.get(key)
        if m is None:
            merged[key] = GlobalAccesses(**vars(g))
            continue
        if g.worst_excess > m.worst_excess:
            m.picture, m.worst_excess = g.picture, g.worst_excess
        m.requests += g.requests
        m.sectors += g.sectors
        m.ideal_sectors += g.ideal_sectors
        m.bytes += g.bytes
        m.width = max(m.width, g.width)
    report.global_accesses[:] = list(merged.values())


class _LineMap:
    """Code address -> line of the student's source (through addr2line)."""

    def __init__(self, loaded):
        self.path = str(loaded.built.library)
        self.base = loaded.base_address()

    def __call__(self, pc: int) -> int:
        return _line_of(self.path, pc - self.base - 1)


_line_servers: dict[str, subprocess.Popen] = {}
_SENTINEL = "0xffffffffffffffff"        # an address with no line: its answer ends each query's


def serve_lines(loaded) -> None:
    """Start addr2line for this module now, reading addresses on its input: a grading process that may
    start no program later (grader.platform.sandbox.forbid_new_programs) still finds lines."""
    path, tool = str(loaded.built.library), shutil.which("addr2line")
    if tool and path not in _line_servers:
        _line_servers[path] = subprocess.Popen([tool, "-e", path, "-i", "-a"], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _ask(server: subprocess.Popen, offset: int) -> str:
    server.stdin.write(f"{offset:#x}\n{_SENTINEL}\n")
    server.stdin.flush()
    rows = [server.stdout.readline()]           # the address itself
    while (row := server.stdout.readline()) and row.strip() != _SENTINEL:
        rows.append(row)
    server.stdout.readline()                    # the sentinel's "??:0"
    return "".join(rows[1:])


@lru_cache(maxsize=65536)
def _line_of(path: str, offset: int) -> int:
    tool = shutil.which("addr2line")
    if not tool or offset < 0:
        return 0
    server = _line_servers.get(path)
    out = _ask(server, offset) if server else subprocess.run([tool, "-e", path, "-i", hex(offset)],
                                                              capture_output=True, text=True).stdout
    for row in out.splitlines():
        name, _, line = row.rpartition(":")
        if name.endswith("kernel.cu"):
            digits = line.split(" ")[0]
            return int(digits) if digits.isdigit() else 0
    return 0

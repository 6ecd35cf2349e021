"""A kernel's speed on a GPU the course names, predicted without that GPU.

The emulator runs the kernel once, under its analysis, on a sample of the
timed launch: C of SAMPLE x SAMPLE (or one block tile, when larger), K of
SAMPLE, the same build, tiles and threads. It counts what decides an SGEMM
kernel's speed as Nsight Compute counts it: shared-memory wavefronts,
global-memory sectors (and those beyond what coalesced requests would need),
barriers, and the share of the loaded bytes that asynchronous copies (cp.async)
read. A tiled kernel's counts per FMA hardly change with the size, so
they are scaled to the timed launch (loads, shared memory and barriers with
M N K, stores with M N).

A model of the busiest SM turns the counts into cycles, round by round of
the blocks it holds at once: each resource's work at its throughput (the FMA
lanes of the schedulers that hold a warp, shared-memory wavefronts, L1
sectors, the sectors uncoalesced requests add), one block's barrier latency
(the other blocks held hide the rest; a barrier waits for the loads made
before it, not for the asynchronous copies a pipelined kernel issued a stage
earlier), and the stalls that too few warps per
scheduler leave unhidden. The parts are summed and scaled: they overlap, but
no kernel here overlaps them fully, and a sum fits the H200's times better
than a maximum or any power mean between. The throughputs nobody publishes
and the scale are calibrated on kernels timed on that GPU (prediction.json,
`python -m grader predict --calibrate`), which also keeps the spread of the
calibration's errors: the interval given with each prediction.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from grader.emulator import analyze
from grader.kernels import sgemm
from grader.kernels.stages import Stage, autotuned_for
from grader.platform.devices import Device

SAMPLE = 128
CALIBRATION_PATH = Path(__file__).resolve().parent / "prediction.json"
FMA_PER_SM_CYCLE = 128                  # FP32 lanes of an SM (Volta and later but the A100: 64)
WAVEFRONTS_PER_SM_CYCLE = 1             # shared memory: 32 banks of 4 bytes, one wavefront a cycle
# What each part of the model says, for a student: the resource its cycles are spent on.
RESOURCES = {"fma": "FP32 FMA throughput", "shared": "shared-memory bandwidth (wavefronts)",
             "l1": "L1 throughput for global memory (sectors)", "uncoalesced": "uncoalesced global accesses",
             "barriers": "memory latency exposed at barriers",
             "latency": "too few warps per SM to hide latency"}


# At most this many warps per scheduler, the model's misses are largest (too fast): a prediction says so,
# with the worst factor its calibration measured for such kernels.
FEW_WARPS = 1.0


@dataclass(frozen=True)
class Counts:
    """What one launch of the kernel does at the timed shape (sampled and scaled)."""
    M: int
    N: int
    K: int
    blocks: int
    threads: int                 # per block
    shared_bytes: int            # per block, static (known with nvcc) and dynamic
    registers: int               # per thread (0: unknown, no nvcc)
    shared_wavefronts: float
    load_sectors: float
    load_excess_sectors: float   # beyond what each request's bytes would fill
    store_sectors: float
    store_excess_sectors: float
    barriers: float              # __syncthreads() passed by whole blocks
    async_share: float = 0.0     # of the bytes global loads read, the share asynchronous copies (cp.async) read

    @property
    def fmas(self) -> int:
        return self.M * self.N * self.K


class WrongSample(Exception):
    """The kernel's result on the sampled launch is wrong: nothing to predict."""


def sample_shape(M: int, N: int, K: int, defines: dict | None = None) -> tuple[int, int, int]:
    """The sampled launch: SAMPLE (at least one block tile, BM x BN) in each direction, never more than the
    launch itself."""
    d = defines or {}
    return min(M, max(SAMPLE, d.get("BM", 0))), min(N, max(SAMPLE, d.get("BN", 0))), min(K, SAMPLE)


def graded_build(stage: Stage, gpu: str, M: int, N: int, K: int) -> Stage:
    """The stage as that GPU's performance check builds it at this size (the autotuned stage: its
    configuration for the GPU model and the shape's class)."""
    return autotuned_for(M, N, K, gpu) if stage.id == "autotuned" else stage


def count(stage: Stage, function, M: int, N: int, K: int, defines: dict | None = None) -> Counts:
    """The counts of `function` (an emulated kernel of the stage's signature, built with `defines`)
    launched for C = A B of M x K times K x N, from one analysed run of the sample launch, once C is
    right at the edges too (edges_right)."""
    merged = {**stage.defines, **(defines or {})}
    counts = scaled(sampled(stage, function, *sample_shape(M, N, K, merged), defines), stage, M, N, K, defines)
    edges_right(stage, function, defines)
    return counts


def edges_right(stage: Stage, function, defines: dict | None = None) -> None:
    """One launch where no dimension is a tile multiple (a partial tile on every edge): WrongSample
    when C is wrong there or the launch fails. A GPU's performance check times no kernel that fails its
    correctness check, though a tile-multiple timed size would hide a missing bounds check."""
    d = {**stage.defines, **(defines or {})}
    bm, bn = stage.block_tile(defines)
    m, n, k = bm + 3, bn + 5, 2 * int(d.get("BK", d.get("TILE", 8))) + 7
    A, B = sgemm.random_inputs(m, n, k, np.random.default_rng(1))
    try:
        with analyze():         # checks every access: a write past C is a failed launch, not a damaged heap
            C = sgemm.run(stage, A, B, function=function, defines=defines)
    except (sgemm.driver_of(function).Error, TypeError, ValueError) as e:
        raise WrongSample(f"its launch at M={m} N={n} K={k} failed") from e
    if not sgemm.compare(C, A, B).ok:
        raise WrongSample(f"its C is wrong at M={m} N={n} K={k}")


def sampled(stage: Stage, function, m: int, n: int, k: int, defines: dict | None = None) -> Counts:
    """The counts of one analysed run at m x n x k (random inputs, C checked against float64)."""
    A, B = sgemm.random_inputs(m, n, k, np.random.default_rng(0))
    launch = stage.launch(m, n, k, defines)
    with analyze() as report:
        C = sgemm.run(stage, A, B, function=function, defines=defines, launch=launch)
    if not sgemm.compare(C, A, B).ok:
        raise WrongSample(f"its C is wrong at M={m} N={n} K={k}")
    if report.global_dropped:
        raise WrongSample("its blocks make too many global requests for the analysis to count them")
    loads = [g for g in report.global_accesses if g.op == "ld"]
    stores = [g for g in report.global_accesses if g.op == "st"]
    static = int(function.shared_size_bytes) if getattr(function, "resources_known", False) else 0
    return Counts(m, n, k, blocks=math.prod(launch.grid), threads=math.prod(launch.block),
                  shared_bytes=static + int(launch.shared), registers=int(getattr(function, "num_regs", 0) or 0),
                  shared_wavefronts=sum(s.wavefronts for s in report.bank_conflicts),
                  load_sectors=sum(g.sectors for g in loads), load_excess_sectors=sum(g.excess for g in loads),
                  store_sectors=sum(g.sectors for g in stores), store_excess_sectors=sum(g.excess for g in stores),
                  barriers=report.barriers,
                  async_share=min(1.0, report.async_bytes / max(1, sum(g.bytes for g in loads))))


def scaled(c: Counts, stage: Stage, M: int, N: int, K: int, defines: dict | None = None) -> Counts:
    """Sampled counts scaled to the launch for M x N x K: what the k-loop does with M N K, stores with M N."""
    by_k, by_mn = (M * N * K) / (c.M * c.N * c.K), (M * N) / (c.M * c.N)
    launch = stage.launch(M, N, K, defines)
    return replace(c, M=M, N=N, K=K, blocks=math.prod(launch.grid),
                   shared_wavefronts=by_k * c.shared_wavefronts,
                   load_sectors=by_k * c.load_sectors, load_excess_sectors=by_k * c.load_excess_sectors,
                   store_sectors=by_mn * c.store_sectors, store_excess_sectors=by_mn * c.store_excess_sectors,
                   barriers=by_k * c.barriers)


def resident_blocks(c: Counts, device: Device) -> int:
    """Blocks an SM holds at once, roughly: by threads, shared memory and (when known) registers, without
    the allocation granularities the occupancy lab is about."""
    lim = device.limits
    fits = [lim.max_blocks_per_sm, lim.max_threads_per_sm // max(1, c.threads)]
    if c.shared_bytes:
        fits.append(lim.smem_per_sm // (c.shared_bytes + lim.smem_reserved_per_block))
    if c.registers:
        fits.append(lim.regs_per_sm // (c.registers * c.threads))
    return max(1, min(fits))


def warps_per_scheduler(c: Counts, device: Device, held: int | None = None) -> float:
    """Warps each of the SM's 4 schedulers holds when the SM holds `held` blocks (default: the busiest
    SM's first round)."""
    if held is None:
        held = min(resident_blocks(c, device), math.ceil(c.blocks / device.sm_count))
    return held * math.ceil(c.threads / 32) / 4


def cycles(c: Counts, device: Device, constants: dict) -> dict[str, float]:
    """Each resource's cycles on the busiest SM (before they are summed and scaled). It runs its blocks in
    rounds of as many as it holds at once; the last round may hold fewer, with fewer warps to hide stalls."""
    on_sm = math.ceil(c.blocks / device.sm_count)        # blocks the busiest SM runs
    resident = min(resident_blocks(c, device), on_sm)
    rounds = [resident] * (on_sm // resident) + ([on_sm % resident] if on_sm % resident else [])
    one = {   # one block's cycles at each resource's throughput
        "fma": c.fmas / FMA_PER_SM_CYCLE,
        "shared": c.shared_wavefronts / WAVEFRONTS_PER_SM_CYCLE,
        "l1": (c.load_sectors + c.store_sectors) / constants["l1"],
        "uncoalesced": (c.load_excess_sectors + c.store_excess_sectors) / constants["uncoalesced"],
        # a barrier waits for the loads its threads made since the last one, not for asynchronous copies,
        # which a pipelined kernel issued a stage or more earlier
        "barriers": c.barriers * constants["barriers"] * (1 - c.async_share),
    }
    one = {k: v / c.blocks for k, v in one.items()}
    parts = dict.fromkeys([*one, "latency"], 0.0)
    for held in rounds:
        # barrier latency is hidden by the other blocks held; each of the 4 schedulers hides one warp's
        # stalls behind its other warps: with few, less is hidden
        round_parts = {k: v * held / (held if k == "barriers" else 1) for k, v in one.items()}
        warps = warps_per_scheduler(c, device, held)
        round_parts["fma"] /= min(1.0, warps)       # a scheduler without a warp leaves its FMA lanes idle
        round_parts["latency"] = sum(round_parts.values()) * constants["latency"] / warps
        for k, v in round_parts.items():
            parts[k] += v
    return parts


@dataclass(frozen=True)
class Prediction:
    gpu: str
    seconds: float
    gflops: float
    low: float                   # GFLOPS: the calibration's spread of errors around `gflops`
    high: float
    limiter: str                 # the resource with the most cycles (RESOURCES' words)
    cublas_gflops: float | None  # cuBLAS at this shape on that GPU, where the calibration recorded it
    few_warps_overprediction: float | None = None   # the kernel holds few warps: how far such were off

    @property
    def ratio_to_cublas(self) -> float | None:
        return self.gflops / self.cublas_gflops if self.cublas_gflops else None

    def as_dict(self) -> dict:
        return {"gflops": self.gflops, "low": self.low, "high": self.high, "ratio_to_cublas": self.ratio_to_cublas,
                "limiter": self.limiter}

    def describe(self) -> str:
        ratio = f" ({self.ratio_to_cublas:.2f}x cuBLAS)" if self.cublas_gflops else ""
        text = (f"predicted on an {self.gpu.removeprefix('NVIDIA ')}: about {_round(self.gflops):,} GFLOPS{ratio}, "
                f"likely {_round(self.low):,}-{_round(self.high):,}, limited by {self.limiter}")
        if self.few_warps_overprediction:
            text += (f"; each scheduler holds at most {FEW_WARPS:g} warp of this kernel, and such kernels ran up to "
                     f"{self.few_warps_overprediction:.1f} times slower than predicted")
        return text


def _round(gflops: float) -> int:
    return int(round(gflops, -2 if gflops >= 1000 else -1))


def seconds(c: Counts, device: Device, constants: dict) -> tuple[float, dict[str, float]]:
    parts = cycles(c, device, constants)
    return constants["scale"] * sum(parts.values()) / (device.attribute("CLOCK_RATE") * 1e3), parts


def calibration(device: Device, path: Path | None = None) -> dict | None:
    """The device's calibrated constants, spread and cuBLAS figures (None: not calibrated for it)."""
    try:
        return json.loads(Path(path or CALIBRATION_PATH).read_text()).get(device.name)
    except (OSError, ValueError):
        return None


def predict(c: Counts, device: Device, calibrated: dict) -> Prediction:
    t, parts = seconds(c, device, calibrated["constants"])
    gflops = 2 * c.fmas / t / 1e9
    lo, hi = calibrated["spread"]              # log-ratios measured / predicted of the calibration
    cublas = calibrated.get("cublas_gflops", {}).get(f"{c.M}x{c.N}x{c.K}")
    few = calibrated.get("few_warps_overprediction") if warps_per_scheduler(c, device) <= FEW_WARPS else None
    return Prediction(device.name, t, gflops, gflops * math.exp(lo), gflops * math.exp(hi),
                      RESOURCES[max(parts, key=parts.get)], cublas, few)


def counts_data(c: Counts) -> dict:
    return asdict(c)


def counts_from(data: dict) -> Counts:
    return Counts(**{k: data[k] for k in Counts.__dataclass_fields__})

"""The stage table: what each stage of the course is and how it is launched.

Every kernel has the signature
    (int M, int N, int K, const float* A, const float* B, float* C)
with row-major A (M x K), B (K x N) and C (M x N); C = A B.
A stage's tile parameters are compile-time constants passed as -D options.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from grader.platform import devices
from grader.platform.backend import drivers
from grader.platform.compiler import SOLUTIONS_DIR

Dim3 = tuple[int, int, int]
LAUNCH_SETTINGS = frozenset({"SPLIT_K", "SMS"})   # defines only a launch rule reads (see split_slices)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Launch:
    grid: Dim3
    block: Dim3
    shared: int = 0


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    kernel: str
    launch_rule: Callable[[int, int, int, dict], Launch]
    defines: Mapping = field(default_factory=dict)
    bank_conflict_free: bool = False
    source_file: str | None = None   # default: solutions/<id>.cu

    @property
    def source_path(self) -> Path:
        return SOLUTIONS_DIR / (self.source_file or f"{self.id}.cu")

    def source(self) -> str:
        return self.source_path.read_text()

    def options(self, defines: dict | None = None) -> list[str]:
        """The -D options of the build (launch settings left out: they change no code)."""
        return [f"-D{k}={v}" for k, v in {**self.defines, **(defines or {})}.items() if k not in LAUNCH_SETTINGS]

    def launch(self, M: int, N: int, K: int, defines: dict | None = None) -> Launch:
        return self.launch_rule(M, N, K, {**self.defines, **(defines or {})})

    def block_tile(self, defines: dict | None = None) -> tuple[int, int]:
        """The rows and columns of C a block computes (32 x 32 for the one-thread-per-element stages)."""
        d = {**self.defines, **(defines or {})}
        return int(d.get("BM", d.get("TILE", 32))), int(d.get("BN", d.get("TILE", 32)))

    def tile_intensity(self) -> float:
        """FLOP per byte of global-memory traffic that the block tile implies when
        no cache helps: a BM x BN tile reads BM + BN floats per step of k for
        2 BM BN FLOPs (one element per thread, as in the naive kernel: 1 x 1)."""
        d = self.defines
        bm, bn = d.get("BM", d.get("TILE", 1)), d.get("BN", d.get("TILE", 1))
        return bm * bn / (2 * (bm + bn))


def _one_thread_per_element_naive(M, N, K, d) -> Launch:
    return Launch(grid=(cdiv(M, 32), cdiv(N, 32), 1), block=(32, 32, 1))


def _one_thread_per_element(M, N, K, d) -> Launch:
    return Launch(grid=(cdiv(N, 32), cdiv(M, 32), 1), block=(32, 32, 1))


def _square_tile(M, N, K, d) -> Launch:
    t = d["TILE"]
    return Launch(grid=(cdiv(N, t), cdiv(M, t), 1), block=(t, t, 1))


STAGES: list[Stage] = [
    Stage("naive", "Naive: one thread per element of C", "sgemm_naive", _one_thread_per_element_naive),
    Stage("coalesced", "Global-memory coalescing", "sgemm_coalesced", _one_thread_per_element),
    Stage("smem-tiling", "Shared-memory tiling", "sgemm_smem_tiling", _square_tile, {"TILE": 32}),
]


# ---- stages 4 and later: register blocking, then tuning ----------------------
def _blocktile_1d(M, N, K, d) -> Launch:
    """One thread per TM results of a column: BM*BN/TM threads."""
    return Launch(grid=(cdiv(N, d["BN"]), cdiv(M, d["BM"]), 1), block=(d["BM"] * d["BN"] // d["TM"], 1, 1))


def _blocktile_2d(M, N, K, d) -> Launch:
    """One thread per TM x TN results: BM*BN/(TM*TN) threads."""
    return Launch(grid=(cdiv(N, d["BN"]), cdiv(M, d["BM"]), 1),
                  block=(d["BM"] * d["BN"] // (d["TM"] * d["TN"]), 1, 1))


def warptile_shared_bytes(d) -> int:
    """The warptiling kernel's ring of STAGES tiles: As[BK][BM+4] and Bs[BK][BN] floats each."""
    return 4 * d["STAGES"] * d["BK"] * (d["BM"] + 4 + d["BN"])


def _warptile(M, N, K, d) -> Launch:
    """NUM_THREADS threads per BM x BN tile of C, blocks numbered down the
    columns of tiles, split_slices(...) blocks per tile along K (gridDim.z);
    and the copy pipeline's shared memory."""
    grid = (cdiv(M, d["BM"]), cdiv(N, d["BN"]))
    return Launch(grid=(*grid, split_slices(K, grid[0] * grid[1], d)), block=(d["NUM_THREADS"], 1, 1),
                  shared=warptile_shared_bytes(d))


# ---- the autotuned stage: one configuration per class of shapes ----------------
TUNED_CONFIGS_PATH = Path(__file__).resolve().parent / "tuned_configs.json"
WARPTILE_PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "NUM_THREADS", "STAGES", "MIN_BLOCKS")
SHAPE_CLASSES = ("large-square", "medium-square", "small-square", "tall-skinny", "short-wide", "large-k")
GRADED_CLASS = "large-square"        # the class of the graded size (4096^3): the stage "autotuned" itself
# The split-K workspace of the autotuned stage's builds, in floats (256 MiB of the module's global memory):
# gridDim.z x the tiles of C x BM x BN must fit (split_slices keeps to it); 5000^3 in two slices of 128 x 256
# tiles needs 52 million.
SPLITK_WORKSPACE = 1 << 26
MAX_SPLIT = 16                       # the most slices of K the autotuned stage cuts
SKINNY = 256                         # the widest output of the tall-skinny and short-wide classes


def shape_class(M: int, N: int, K: int) -> str:
    """Which tuned configuration C = A B (M x K times K x N) gets: few outputs
    and a long K ("large-k"), far more rows than columns and at most 256
    columns ("tall-skinny") or the reverse ("short-wide"), at most 1024 x 1024
    outputs ("small-square"), at most 2^23 (2896^2: 2048^3 is one wave of
    128 x 256 tiles on 132 SMs) ("medium-square"), else "large-square". How
    many slices of K the launch cuts is the wave model's (split_slices)."""
    if M * N <= 1 << 20 and K >= 4 * max(M, N):
        return "large-k"
    if M >= 8 * N and N <= SKINNY:
        return "tall-skinny"
    if N >= 8 * M and M <= SKINNY:
        return "short-wide"
    if M * N <= 1 << 20:
        return "small-square"
    return "medium-square" if M * N <= 1 << 23 else "large-square"


def split_slices(K: int, tiles: int, d) -> int:
    """gridDim.z of a warptiling launch: the slices of K (split-K), in builds with a workspace
    (d["SPLITK_WORKSPACE"] floats) only. At most d["SPLIT_K"] (default 1), never more than the BK-tiles of
    K or than the workspace holds, and never an empty slice (the kernel gives each slice
    ceil(k-tiles / slices) tiles). With d["SMS"], the SMs of the GPU, the count split_cost finds
    fastest; without, the most allowed."""
    want, room = int(d.get("SPLIT_K", 1)), int(d.get("SPLITK_WORKSPACE", 0))
    k_tiles = cdiv(K, d["BK"])
    most = min(want, k_tiles, room // (tiles * d["BM"] * d["BN"]))
    counts = sorted({cdiv(k_tiles, cdiv(k_tiles, s)) for s in range(1, max(1, most) + 1)})
    if "SMS" not in d:
        return counts[-1]
    slots = int(d["SMS"]) * int(d.get("MIN_BLOCKS", 1))
    return min(counts, key=lambda s: split_cost(tiles, s, k_tiles, slots, int(d["STAGES"])))


def split_defines(config: dict, sms: int | None = None) -> dict:
    """The split-K build of a configuration with the launch settings split_slices reads: at most MAX_SPLIT
    slices, the count the wave model picks on `sms` SMs (None: the most the workspace allows)."""
    return {**config, "SPLITK_WORKSPACE": SPLITK_WORKSPACE, "SPLIT_K": MAX_SPLIT, **({"SMS": sms} if sms else {})}


# The wave model's costs, in the time of one BK-tile of a block's main loop: from the middle of the range
# of values with which it picks a split within 2% of the fastest at every shape measured of at least 512 in
# one dimension (the H200's configurations at every split on an H100, whose 132 SMs and SASS are the H200's:
# results/nvidia-h100/splits.md and every-config/splits.md; tests/test_autotune_classes.py holds the model to
# them). Below that a launch's fixed costs rule, which the model leaves out.
FILL = 2.0          # a block's prologue and epilogue beyond its k-tiles (beyond STAGES - 1 tiles in flight)
PARTIAL = 1.0       # a block of a split tile writing its partial sums
REDUCE = 1.0        # the last block of a tile reading one partial tile


def split_cost(tiles: int, slices: int, k_tiles: int, slots: int, stages: int) -> float:
    """The time of C's tiles cut into `slices` slices of K on a GPU that runs `slots` blocks at once: the
    waves of blocks (a partial wave costs a whole one), each block's k-tiles and overheads, and the last
    block's sum of the partial tiles."""
    block = cdiv(k_tiles, slices) + FILL + stages - 1 + (PARTIAL if slices > 1 else 0.0)
    return cdiv(tiles * slices, slots) * block + (REDUCE * slices if slices > 1 else 0.0)


def _tuned_entry(gpu_name: str | None, path: Path | None, cls: str) -> dict:
    """The entry of tuned_configs.json for a GPU model (its own, else "default")
    and a shape class: a flat entry serves every class; a per-class one
    without this class gives its GRADED_CLASS entry."""
    if cls not in SHAPE_CLASSES:
        raise KeyError(f"no shape class '{cls}'; classes: {', '.join(SHAPE_CLASSES)}")
    configs = json.loads(Path(path or TUNED_CONFIGS_PATH).read_text())
    if gpu_name is None:
        drv, _ = drivers()                 # chooses the backend when nothing has yet
        gpu_name = drv.Device(0).name()    # a driver error here is a broken GPU: it surfaces
    entry = configs.get(gpu_name) if gpu_name else None
    if entry is None:
        entry = configs["default"]
    if "BM" not in entry:                  # per class
        entry = entry.get(cls) or entry[GRADED_CLASS]
    return entry


def tuned_config(gpu_name: str | None = None, path: Path | None = None, shape_class: str = GRADED_CLASS) -> dict:
    """The autotuned stage's -D values (WARPTILE_PARAMS) for a GPU model and a
    shape class, from tuned_configs.json: the entry named like the GPU when
    there is one, else "default". Without a name, the current device's (the
    emulator's name is never listed)."""
    entry = _tuned_entry(gpu_name, path, shape_class)
    return {k: int(entry[k]) for k in WARPTILE_PARAMS}


class _TunedDefines(Mapping):
    """The autotuned stage's defines, read from tuned_configs.json when first used
    (the GPU model is only known once a backend is chosen): the graded class's
    configuration (built without split-K)."""

    def __init__(self):
        self._values = None

    def _loaded(self) -> dict:
        if self._values is None:
            self._values = tuned_config()
        return self._values

    def __getitem__(self, k):
        return self._loaded()[k]

    def __iter__(self):
        return iter(self._loaded())

    def __len__(self):
        return len(self._loaded())

    def __repr__(self):
        return repr(self._loaded())


def autotuned_for(M: int, N: int, K: int, gpu_name: str | None = None, path: Path | None = None) -> Stage:
    """The autotuned stage as it runs C = A B of this shape: the tuned
    configuration of the shape's class (shape_class), and where the wave model
    cuts K into slices on the GPU model's SMs (split_slices), the split-K build
    (SPLITK_WORKSPACE) with the launch settings SPLIT_K and SMS. Without a
    split the build is the graded one: the split-K code, even unused, costs
    registers (results/nvidia-h200/shapes.md)."""
    cls = shape_class(M, N, K)
    defines = tuned_config(gpu_name, path, cls)
    device = devices.known(gpu_name) if gpu_name else None
    split_build = split_defines(defines, device.sm_count if device else devices.multiprocessor_count())
    if _warptile(M, N, K, split_build).grid[2] > 1:
        defines = split_build
    return replace(stage("autotuned"), defines=defines, title=f"{stage('autotuned').title} (class {cls})")


STAGES += [
    Stage("blocktile-1d", "1D blocktiling: TM results per thread", "sgemm_blocktile_1d", _blocktile_1d,
          {"BM": 64, "BN": 64, "BK": 8, "TM": 8}),
    Stage("blocktile-2d", "2D blocktiling: a TM x TN outer product per thread", "sgemm_blocktile_2d",
          _blocktile_2d, {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}),
    Stage("bank-conflict-free", "Bank-conflict-free shared memory: A transposed and padded",
          "sgemm_bank_conflict_free", _blocktile_2d, {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
          bank_conflict_free=True),
    Stage("vectorized", "Vectorized float4 loads, with a scalar fallback", "sgemm_vectorized", _blocktile_2d,
          {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, bank_conflict_free=True),
    Stage("double-buffering", "Double buffering: load the next tile while computing this one",
          "sgemm_double_buffering", _blocktile_2d, {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
          bank_conflict_free=True),
    Stage("warptiling", "Warptiling: block, warp and thread tiles; asynchronous copies", "sgemm_warptiling",
          _warptile, {"BM": 128, "BN": 256, "BK": 8, "WM": 64, "WN": 64, "WNITER": 2, "TM": 8, "TN": 4,
                      "NUM_THREADS": 256, "STAGES": 3, "MIN_BLOCKS": 1}, bank_conflict_free=True),
    # The warptiling kernel itself, with the parameters grader/autotune.py chose for the GPU model.
    Stage("autotuned", "Autotuned warptiling: parameters chosen per GPU model", "sgemm_warptiling", _warptile,
          _TunedDefines(), bank_conflict_free=True, source_file="warptiling.cu"),
]


def stage(stage_id: str) -> Stage:
    for s in STAGES:
        if s.id == stage_id:
            return s
    raise KeyError(f"no stage '{stage_id}'; stages: {', '.join(s.id for s in STAGES)}")

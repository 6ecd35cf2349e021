"""Emulator settings. The emulator reads no environment: whoever uses it
hands it its settings (`configure`; the grader's come from
grader.platform.settings), and code may change them while it runs (a grader
that permutes the thread order, or stops launches sooner)."""
from __future__ import annotations

import os
from pathlib import Path

_settings = {
    "timeout": 60.0,
    "seed": 0,
    "stopped": 0,
    "untrusted": False,
    "contexts": False,
    "cache": None,
    "nvcc": True,
    "memory": None,
    "runtime": None,
    "baselines": None,
    "headers": None,
    "launch_seconds": 0.0,
}


def configure(cache_dir: Path | None = None, nvcc: bool = True, launch_timeout: float = 60.0,
              device_memory: int | None = None, runtime: tuple[str, str] | None = None,
              baselines: list[list[str]] | None = None, headers: str | None = None) -> None:
    """Where builds are cached (default ~/.cache/grader-emulator), whether nvcc also compiles
    each source where it is installed, seconds one launch may run, bytes of device memory
    (default: the H200's, or the host's where that is less), a runtime library already
    built elsewhere: (its path, its SHA-256), loaded only when its bytes have that hash,
    the source policy's baseline imports found elsewhere (build.baseline_imports()), and
    the runtime's header precompiled elsewhere (build.precompiled_headers())."""
    _settings.update(cache=None if cache_dir is None else Path(cache_dir), nvcc=bool(nvcc),
                     timeout=float(launch_timeout), memory=device_memory, runtime=runtime, baselines=baselines,
                     headers=headers)


def prebuilt_runtime() -> tuple[str, str] | None:
    return _settings["runtime"]


def prebuilt_baselines() -> list[list[str]] | None:
    return _settings["baselines"]


def prebuilt_headers() -> str | None:
    return _settings["headers"]


def cache_dir() -> Path:
    """The build cache, created when first asked for."""
    path = _settings["cache"] or Path(os.path.expanduser("~/.cache")) / "grader-emulator"
    path.mkdir(parents=True, exist_ok=True)
    return path


def nvcc_wanted() -> bool:
    return _settings["nvcc"]


def contexts_required() -> bool:
    """Whether allocations and launches need a current context, as on a GPU
    (programs run by `python -m grader.emulator`; the grader's own use of the
    emulator makes none)."""
    return _settings["contexts"]


def require_contexts(on: bool) -> None:
    _settings["contexts"] = bool(on)


def untrusted_sources() -> bool:
    """Sources are refused unless they are device code only (grader.emulator.policy)."""
    return _settings["untrusted"]


def set_untrusted_sources(on: bool) -> None:
    _settings["untrusted"] = bool(on)


def launch_timeout() -> float:
    """Seconds one launch may run before it is stopped."""
    return _settings["timeout"]


def set_launch_timeout(seconds: float) -> None:
    _settings["timeout"] = float(seconds)


def launch_seconds() -> float:
    """Seconds this process's launches have run (not counting their builds)."""
    return _settings["launch_seconds"]


def add_launch_seconds(seconds: float) -> None:
    _settings["launch_seconds"] += seconds


def stopped_launches() -> int:
    """How many launches of this process were stopped at their time limit."""
    return _settings["stopped"]


def note_stopped_launch() -> None:
    _settings["stopped"] += 1


def thread_order_seed() -> int:
    """0 runs each block's threads in order; any other value permutes them."""
    return _settings["seed"]


def set_thread_order_seed(seed: int) -> None:
    _settings["seed"] = int(seed)


# ---- the emulated device: an H200 (sm_90), the GPU the course is calibrated on -------------
# The one table of its figures: the emulated driver answers cuDeviceGetAttribute from it, and
# everything that needs the H200's numbers without a GPU (grader.references.occupancy.H200, a lab's
# roofline) reads them through that driver's attributes or from here, never as literals.
# FP32 peak: 132 SMs x 128 lanes x 2 x 1.98 GHz = 66.9 TFLOP/s (grader.kernels.timing.fp32_peak_from).
# DRAM: 2 x 3.201 GHz x 6144 bits / 8 = 4.92 TB/s (grader.kernels.timing.dram_bandwidth_from; NVIDIA
# quotes 4.8 TB/s for the H200's HBM3e), as the H200's driver reports these two attributes.
DEVICE_NAME = "CPU emulator (sm_90, H200 limits)"
COMPUTE_CAPABILITY = (9, 0)
TOTAL_MEMORY = 141 * 10**9


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of the host's memory, which is the emulator's device memory."""
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, value = line.split(":", 1)
                fields[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    total = fields.get("MemTotal") or os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return fields.get("MemAvailable", total), total


def total_memory() -> int:
    """The emulated device's memory: the H200's, or the host's where that is less,
    or the configured bytes where those are less."""
    return min(TOTAL_MEMORY, _settings["memory"] or TOTAL_MEMORY, host_memory()[1])
DEVICE_ATTRIBUTES = {
    "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
    "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "TOTAL_CONSTANT_MEMORY": 65536, "WARP_SIZE": 32,
    "MAX_PITCH": 2**31 - 1, "MAX_REGISTERS_PER_BLOCK": 65536, "CLOCK_RATE": 1980000,
    "MULTIPROCESSOR_COUNT": 132, "MEMORY_CLOCK_RATE": 3201000, "GLOBAL_MEMORY_BUS_WIDTH": 6144,
    "L2_CACHE_SIZE": 52428800, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
    "COMPUTE_CAPABILITY_MAJOR": COMPUTE_CAPABILITY[0], "COMPUTE_CAPABILITY_MINOR": COMPUTE_CAPABILITY[1],
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
    # read on the H200 with PyCUDA's examples/dump_properties.py (results/emulator-compat.md)
    "GPU_OVERLAP": 1, "CAN_MAP_HOST_MEMORY": 1, "COMPUTE_MODE": 0, "CONCURRENT_KERNELS": 1, "ECC_ENABLED": 1,
    "ASYNC_ENGINE_COUNT": 3, "GLOBAL_L1_CACHE_SUPPORTED": 1, "CONCURRENT_MANAGED_ACCESS": 1,
    "COMPUTE_PREEMPTION_SUPPORTED": 1, "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 1,
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 0,
}

"""The grader's settings: every GRADER_* environment variable, read here and nowhere else.

    variable                   type    default                  what it does
    GRADER_BACKEND             str     auto                     where kernels run: auto (the GPU when PyCUDA imports
                                                                and a device answers), gpu, or emulator
    GRADER_THRESHOLDS          path    (none)                   a JSON file overriding keys of the performance
                                                                thresholds (grader/grading/checks/thresholds.json)
    GRADER_EMULATOR_CACHE      path    ~/.cache/grader-emulator the emulator's build cache (grading processes use a
                                                                private one of their own)
    GRADER_EMULATOR_NVCC       bool    1                        0: the emulator does not also compile with nvcc
    GRADER_EMULATOR_TIMEOUT    float   60                       seconds one emulated launch may run
    GRADER_EMULATOR_DEVICE_MEMORY int  the H200's (or less)     bytes of emulated device memory
    GRADER_GPU_LOCK            path    (none)                   the lock file of a GPU that workers share (class
                                                                grading sets it; on any backend, for the tests)
    GRADER_GPU_LOCK_LOG        path    (none)                   a file each holder of that lock appends its
                                                                interval to: `exclusive|shared START END PID`
    GRADER_GPU_LOCK_HELD       str     (none)                   set by the grader, not by hand: on a notebook's
                                                                kernel at autograde time, whose parent holds the
                                                                lock for it (`notebook`)

The environment is read once, when `current()` is first called. A process
the grader starts gets its settings in its job description (`to_dict()`,
`from_dict()`), not from inherited variables. The emulator reads no
environment: `configure_emulator()` hands it its part.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from grader import emulator

BACKENDS = ("auto", "gpu", "emulator")
# Set by the grader itself on every process of one class-grading attempt, to find them again (never a setting).
CLASS_JOB_MARK = "GRADER_CLASS_JOB"


def _default_cache() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "grader-emulator")


@dataclass(frozen=True)
class Settings:
    backend: str = "auto"
    thresholds: str | None = None
    emulator_cache: str = ""
    emulator_nvcc: bool = True
    emulator_timeout: float = 60.0
    emulator_memory: int | None = None
    gpu_lock: str | None = None
    gpu_lock_log: str | None = None
    gpu_lock_held: str | None = None

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"GRADER_BACKEND must be auto, gpu or emulator, not {self.backend!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Settings:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def with_(self, **changes) -> Settings:
        return replace(self, **changes)

    @property
    def reference_builds(self) -> str:
        """The folder of the reference solutions' builds, in the emulator cache: answers."""
        return os.path.join(self.emulator_cache, "reference-builds")

    def configure_emulator(self, runtime: tuple[str, str] | None = None,
                           baselines: list[list[str]] | None = None, headers: str | None = None) -> None:
        """Hand the emulator its settings (it reads no environment itself); `runtime`, `baselines` and
        `headers`: what a trusted process built, grader.grading.isolation.trusted_builds()."""
        emulator.configure(cache_dir=Path(self.emulator_cache), nvcc=self.emulator_nvcc,
                           launch_timeout=self.emulator_timeout, device_memory=self.emulator_memory,
                           runtime=runtime, baselines=baselines, headers=headers)


def _flag(value: str, name: str) -> bool:
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be 0 or 1, not {value!r}")


def from_environment(environ=os.environ) -> Settings:
    """The settings the environment gives (a bad value raises ValueError naming the variable)."""
    get = environ.get
    try:
        return Settings(backend=get("GRADER_BACKEND", "auto").strip().lower() or "auto",
                        thresholds=get("GRADER_THRESHOLDS") or None,
                        emulator_cache=get("GRADER_EMULATOR_CACHE") or _default_cache(),
                        emulator_nvcc=_flag(get("GRADER_EMULATOR_NVCC", "1"), "GRADER_EMULATOR_NVCC"),
                        emulator_timeout=float(get("GRADER_EMULATOR_TIMEOUT", "60")),
                        emulator_memory=int(get("GRADER_EMULATOR_DEVICE_MEMORY")) if get("GRADER_EMULATOR_DEVICE_MEMORY") else None,
                        gpu_lock=get("GRADER_GPU_LOCK") or None, gpu_lock_log=get("GRADER_GPU_LOCK_LOG") or None,
                        gpu_lock_held=get("GRADER_GPU_LOCK_HELD") or None)
    except ValueError as e:
        raise ValueError(f"grader settings: {e}") from None


_current: Settings | None = None


def current() -> Settings:
    """This process's settings (the environment's, read on the first call, unless `use()` set others)."""
    global _current
    if _current is None:
        use(from_environment())
    return _current


def use(settings: Settings, runtime: tuple[str, str] | None = None,
        baselines: list[list[str]] | None = None, headers: str | None = None) -> Settings:
    """Make `settings` this process's (a grading process: those of its job), and hand the emulator its part."""
    global _current
    _current = settings
    settings.configure_emulator(runtime, baselines, headers)
    return settings


def environment(settings: Settings) -> dict[str, str]:
    """The variables that give `settings` to a process the grader does not start with a job (a notebook
    kernel at autograde time, nbgrader's own commands)."""
    env = {"GRADER_BACKEND": settings.backend, "GRADER_EMULATOR_CACHE": settings.emulator_cache,
           "GRADER_EMULATOR_NVCC": "1" if settings.emulator_nvcc else "0",
           "GRADER_EMULATOR_TIMEOUT": repr(settings.emulator_timeout)}
    if settings.thresholds:
        env["GRADER_THRESHOLDS"] = settings.thresholds
    if settings.emulator_memory:
        env["GRADER_EMULATOR_DEVICE_MEMORY"] = str(settings.emulator_memory)
    if settings.gpu_lock:
        env["GRADER_GPU_LOCK"] = settings.gpu_lock
    if settings.gpu_lock_log:
        env["GRADER_GPU_LOCK_LOG"] = settings.gpu_lock_log
    return env

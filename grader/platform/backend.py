"""Choose where kernels run: real PyCUDA on a GPU, or the CPU emulator.

The setting GRADER_BACKEND (grader.platform.settings) says which: auto (the
default) takes the GPU when PyCUDA imports and a CUDA device answers; gpu
insists on it; emulator never tries.

Nothing happens on import. The choice is made once per process, when it is
first needed: by `current()` (the front-end's `grader.use_backend()`, which
also announces it, or the first compile through `grader.platform.compiler`). Choosing
the emulator installs it as `pycuda`, so that a student's own
`import pycuda.autoinit` then runs on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader import emulator
from grader.emulator.pycuda import compiler as emulated_compiler
from grader.emulator.pycuda import driver as emulated_driver
from grader.platform import settings


@dataclass(frozen=True)
class Backend:
    name: str      # "gpu" or "emulator"
    detail: str

    def __str__(self) -> str:
        return f"{self.name} ({self.detail})"

    def announcement(self) -> str:
        return f"grader: kernels run on the {self}"


_current: Backend | None = None


def _probe_gpu() -> tuple[bool, str]:
    # PyCUDA is an optional dependency (GPU machines only): imported here, when probing.
    try:
        import pycuda
        import pycuda.driver as drv
    except ImportError as e:       # not installed, or no libcuda to load
        return False, f"PyCUDA not importable: {e}"
    try:
        drv.init()
        if drv.Device.count() < 1:
            return False, "no CUDA device"
        return True, f"{drv.Device(0).name()}, PyCUDA {pycuda.VERSION_TEXT}"
    except drv.Error as e:         # the driver's own errors: no device, no driver, a busy device
        return False, f"no usable CUDA device: {e}"


def select(requested: str | None = None) -> Backend:
    """Choose a backend now (installing the emulator when it is the choice)."""
    requested = (requested or settings.current().backend).strip().lower()
    if requested not in settings.BACKENDS:
        raise ValueError(f"GRADER_BACKEND must be auto, gpu or emulator, not {requested!r}")
    if emulator.installed():
        return Backend("emulator", "CPU emulator, already installed")
    if requested != "emulator":
        ok, detail = _probe_gpu()
        if ok:
            return Backend("gpu", detail)
        if requested == "gpu":
            raise RuntimeError(f"GRADER_BACKEND=gpu but {detail}")
        why = detail
    else:
        why = "GRADER_BACKEND=emulator"
    emulator.install()
    return Backend("emulator", f"CPU emulator; {why}")


def current() -> Backend:
    """The backend of this process, chosen on the first call."""
    global _current
    if _current is None:
        _current = select()
    return _current


def use_remote() -> Backend:
    """In a student's process (grader.grading.student_process): kernels run in the grading process
    (grader.platform.remote, installed as `pycuda`)."""
    global _current
    _current = Backend("remote", "the grading process's device")
    return _current


def drivers(on_emulator: bool = False):
    """(pycuda.driver, SourceModule) of the current backend, or of the emulator
    even on a GPU machine (the analysis always runs there)."""
    if on_emulator:
        settings.current()        # the emulator configured before its first use
        return emulated_driver, emulated_compiler.SourceModule
    current()
    # `pycuda` is resolved now, not at import: the emulator's once current() installed it, else the real one.
    import pycuda.driver as driver
    if not getattr(driver, "EMULATED", False):
        import pycuda.autoprimaryctx  # noqa: F401  (a context shared with CuPy)
    from pycuda.compiler import SourceModule
    return driver, SourceModule


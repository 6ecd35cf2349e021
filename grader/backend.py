"""Choose where kernels run: real PyCUDA on a GPU, or the CPU emulator.

GRADER_BACKEND=auto (default) takes the GPU when PyCUDA imports and a CUDA
device answers; gpu insists on it; emulator never tries."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str      # "gpu" or "emulator"
    detail: str

    def __str__(self) -> str:
        return f"{self.name} ({self.detail})"


def _probe_gpu() -> tuple[bool, str]:
    try:
        import pycuda.driver as drv
        drv.init()
        if drv.Device.count() < 1:
            return False, "no CUDA device"
        import pycuda
        return True, f"{drv.Device(0).name()}, PyCUDA {pycuda.VERSION_TEXT}"
    except ImportError as e:
        return False, f"PyCUDA not importable: {e}"
    except Exception as e:  # the driver's own errors: no device, no driver
        return False, f"no usable CUDA device: {e}"


def select(requested: str | None = None) -> Backend:
    from . import emulator
    requested = (requested or os.environ.get("GRADER_BACKEND", "auto")).strip().lower()
    if requested not in ("auto", "gpu", "emulator"):
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


def announce(backend: Backend) -> None:
    sys.stdout.write(f"grader: kernels run on the {backend}\n")

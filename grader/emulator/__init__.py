"""A CPU emulator for PyCUDA programs.

`install()` makes `import pycuda...` resolve to the emulated modules in
`grader.emulator.pycuda` (driver, compiler, gpuarray, autoinit, ...), which
compile CUDA C with the host C++ compiler and run every CUDA thread as a
fiber, with real barriers and warp exchanges.
"""
from __future__ import annotations

import importlib
import sys

from .analysis import Report, analyze
from .config import (launch_timeout, set_launch_timeout, set_thread_order_seed, set_untrusted_sources, stopped_launches,
                     thread_order_seed)

SUBMODULES = ("driver", "compiler", "gpuarray", "autoinit", "autoprimaryctx", "tools")

__all__ = ["Report", "analyze", "install", "installed", "launch_timeout", "set_launch_timeout", "set_thread_order_seed",
           "set_untrusted_sources", "stopped_launches", "thread_order_seed"]


def installed() -> bool:
    return getattr(sys.modules.get("pycuda"), "VERSION_STATUS", None) == "emulated"


def install() -> None:
    """Make `pycuda` and its submodules the emulated ones (replacing any real
    PyCUDA modules already imported)."""
    if installed():
        return
    for name in [m for m in sys.modules if m == "pycuda" or m.startswith("pycuda.")]:
        del sys.modules[name]
    package = importlib.import_module(__name__ + ".pycuda")
    sys.modules["pycuda"] = package
    for sub in SUBMODULES:
        module = importlib.import_module(f"{__name__}.pycuda.{sub}")
        sys.modules[f"pycuda.{sub}"] = module
        setattr(package, sub, module)

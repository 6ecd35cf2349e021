"""A CPU emulator for PyCUDA programs.

`install()` makes `import pycuda...` resolve to the emulated modules in
`grader.emulator.pycuda` (driver, compiler, gpuarray, autoinit, ...), which
compile CUDA C with the host C++ compiler and run every CUDA thread as a
fiber, with real barriers and warp exchanges.
"""
from __future__ import annotations

import importlib
import sys

from . import config
from .analysis import Report, analyze
from .config import (
    configure,
    launch_seconds,
    launch_timeout,
    set_launch_timeout,
    set_thread_order_seed,
    set_untrusted_sources,
    stopped_launches,
    thread_order_seed,
)

SUBMODULES = ("driver", "compiler", "tools", "gpuarray", "elementwise", "reduction", "scan", "cumath", "curandom",
              "characterize", "autoinit", "autoprimaryctx")

__all__ = ["Report", "analyze", "configure", "install", "installed", "launch_seconds", "launch_timeout",
           "set_launch_timeout", "set_thread_order_seed",
           "set_untrusted_sources", "stopped_launches", "thread_order_seed"]


def installed() -> bool:
    return getattr(sys.modules.get("pycuda"), "VERSION_STATUS", None) == "emulated"


CONTEXT_MODULES = ("autoinit", "autoprimaryctx")


def install(contexts_like_a_gpu: bool = False) -> None:
    """Make `pycuda` and its submodules the emulated ones (replacing any real
    PyCUDA modules already imported). With `contexts_like_a_gpu`, as for a
    program run by `python -m grader.emulator`, there is no context until the
    program makes one (importing pycuda.autoinit, for example), and
    allocations and launches without one fail as on a GPU."""
    if installed():
        return
    config.require_contexts(contexts_like_a_gpu)
    for name in [m for m in sys.modules if m == "pycuda" or m.startswith("pycuda.")]:
        del sys.modules[name]
    package = importlib.import_module(__name__ + ".pycuda")
    sys.modules["pycuda"] = package
    for sub in SUBMODULES:
        if contexts_like_a_gpu and sub in CONTEXT_MODULES:
            continue        # imported from the package's folder when the program imports it
        module = importlib.import_module(f"{__name__}.pycuda.{sub}")
        sys.modules[f"pycuda.{sub}"] = module
        setattr(package, sub, module)

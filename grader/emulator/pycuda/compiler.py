"""Emulated `pycuda.compiler`: SourceModule compiles CUDA C for the CPU."""
from __future__ import annotations

import re

from ..binding import LoadedModule
from ..build import BuildError, build_module
from .driver import CompileError, Module, NotSupported, _require_context

DEFAULT_NVCC_FLAGS: list[str] = []


def _load(build_args: dict, analysis: bool = False) -> LoadedModule:
    try:
        return LoadedModule(build_module(**build_args, analysis=analysis))
    except BuildError as e:
        error = CompileError(f"{e}:\n{e.log}", e.command, stderr=e.log)
        error.emulator_only = e.emulator_only      # nvcc accepted the source, g++ did not
        error.refusals = e.refusals                # the source policy's findings, when it refused the source
        raise error from None


_RESOURCE_REPORT = re.compile(r"^\s*(ptxas info|\d+ bytes stack frame)")


class SourceModule(Module):
    """Same signature as PyCUDA's; `arch` is the architecture nvcc (where installed) checks the source
    for, as on a GPU (default: the H200's, sm_90; sm_90a for wgmma); `nvcc`, `keep`, `code` and
    `cache_dir` are accepted and have no effect on the CPU."""

    def __init__(self, source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,
                 cache_dir=None, include_dirs=None):
        _require_context("cuModuleLoadDataEx")
        options = [*(options or []), *(["-arch", arch] if arch else [])]
        build_args = dict(source=source, options=options, include_dirs=include_dirs, no_extern_c=no_extern_c)
        super().__init__(_load(build_args), lambda: _load(build_args, analysis=True))
        # What nvcc said beyond its resource report (PyCUDA would print it as a warning).
        self.compile_log = "\n".join(line for line in self._loaded.built.nvcc_log.splitlines()
                                     if line.strip() and not _RESOURCE_REPORT.match(line))


class DynamicModule:
    """Linking device code at run time (dynamic parallelism, cuLink) is not emulated."""

    def __init__(self, *args, **kwargs):
        raise NotSupported("dynamic parallelism and run-time linking (DynamicModule, DynamicSourceModule) are not "
                           "supported by the CPU emulator: launch kernels from the host")


class DynamicSourceModule(DynamicModule):
    pass

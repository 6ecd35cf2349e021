"""What a search of the warptiling kernel's configurations needs, besides the rules: a configuration as a
key and as a line, and a tuner that checks one on the active backend and times it on a GPU. Lab 06's search
and the autotuner use it; it holds no answer (the rules are grader/references/autotune_rules.py)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from grader.kernels import sgemm, timing
from grader.kernels.stages import WARPTILE_PARAMS as PARAMS
from grader.kernels.stages import stage
from grader.platform.backend import drivers
from grader.platform.compiler import CompileFailed, compile_kernels

CHECK_SHAPES = [(17, 33, 9), (130, 67, 250), (1, 129, 31)]     # M, N, K: no tile multiples, one single row
TIMED_SIZE = 4096                                               # M = N = K of a timing (the stages' graded size)


def config_key(c: dict) -> tuple:
    """A configuration as a hashable tuple of its WARPTILE_PARAMS values."""
    return tuple(int(c[p]) for p in PARAMS)


def is_config(c) -> bool:
    """Whether c holds every parameter as a number (what a search may hand back is anything)."""
    try:
        config_key(c)
        return True
    except (TypeError, KeyError, ValueError):
        return False


def describe(c: dict) -> str:
    """BM=128 BN=256 ...: a configuration as one line."""
    return " ".join(f"{p}={c[p]}" for p in PARAMS)


class WarptileTuner:
    """The two measurements a search of the warptiling kernel makes, on the
    kernel `source` (default: solutions/warptiling.cu) compiled with the -D
    values of a configuration c (compiled once per configuration, then kept):

        check(c) -> None when C = A B is right on CHECK_SHAPES (on the active
                    backend: the GPU, else the CPU emulator), else why (it does
                    not compile, a launch fails, the first wrong element)
        time(c)  -> the median time in seconds of one TIMED_SIZE^3 product
                    (grader.kernels.timing.time_kernel: 20 runs, L2 flushed before each),
                    or float('inf') when it cannot be timed: no GPU, or the
                    kernel does not compile or launch with c

    precompile(configs) builds many configurations at once with parallel nvcc
    processes (GPU only; a no-op on the emulator)."""

    def __init__(self, source: str | None = None, size: int = TIMED_SIZE, seed: int = 0):
        self.stage = stage("warptiling")
        self.source = source if source is not None else self.stage.source()
        self.size = size
        self.seed = seed
        self._functions: dict[tuple, object] = {}     # key -> Function, or the compile error's text
        self._modules = []                            # loaded cubins, kept alive
        self._buffers = None

    def function(self, c: dict):
        """The kernel compiled with c, or the compiler's message (a str)."""
        key = config_key(c)
        if key not in self._functions:
            try:
                functions, _ = compile_kernels(self.source, [self.stage.kernel], self.stage.options(c))
                self._functions[key] = functions[self.stage.kernel]
            except CompileFailed as e:
                self._functions[key] = f"does not compile: {str(e).strip()[:600]}"
        return self._functions[key]

    def precompile(self, configs, jobs: int | None = None) -> None:
        if not timing.on_gpu():
            return
        drv, _ = drivers()                   # with the context that the cubins are loaded into
        from pycuda.compiler import compile as nvcc_compile  # the GPU's PyCUDA: only here, on a GPU
        # Worker threads have no current context: name the target explicitly.
        arch = "sm_%d%d" % drv.Device(0).compute_capability()
        todo = list({config_key(c): c for c in configs if config_key(c) not in self._functions}.values())

        def build(c):
            try:
                return nvcc_compile(self.source, options=self.stage.options(c), arch=arch)
            except drv.CompileError as e:
                return e
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            cubins = list(pool.map(build, todo))
        for c, cubin in zip(todo, cubins):
            if isinstance(cubin, Exception):
                text = str(cubin).strip().splitlines()
                self._functions[config_key(c)] = f"does not compile: {text[-1] if text else type(cubin).__name__}"
            else:
                self._modules.append(drv.module_from_buffer(cubin))
                self._functions[config_key(c)] = self._modules[-1].get_function(self.stage.kernel)

    def check(self, c: dict) -> str | None:
        f = self.function(c)
        if isinstance(f, str):
            return f
        drv = sgemm.driver_of(f)
        rng = np.random.default_rng(self.seed)
        for M, N, K in CHECK_SHAPES:
            A, B = sgemm.random_inputs(M, N, K, rng)
            try:
                C = sgemm.run(self.stage, A, B, function=f, defines=c)
            except (drv.Error, TypeError, ValueError) as e:
                return f"M={M} N={N} K={K}: the launch failed: {type(e).__name__}: {e}"
            r = sgemm.compare(C, A, B)
            if not r.ok:
                return f"wrong result: {r.describe((M, N, K))}"
        return None

    def time(self, c: dict) -> float:
        if not timing.on_gpu():
            return float("inf")
        f = self.function(c)
        if isinstance(f, str):
            return float("inf")
        drv = sgemm.driver_of(f)
        n = self.size
        try:
            if self._buffers is None:
                A, B = sgemm.random_inputs(n, n, n, np.random.default_rng(self.seed))
                self._buffers = (drv.to_device(A), drv.to_device(B), drv.mem_alloc(n * n * 4))
            run = sgemm.launcher(f, self.stage.launch(n, n, n, c), n, n, n, *self._buffers)
            measured = timing.time_kernel(run)
        except (drv.Error, TypeError, ValueError):
            return float("inf")
        return measured.median_s if isinstance(measured, timing.Timing) else float("inf")

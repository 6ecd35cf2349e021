"""Shared fixtures. Tests run on whichever backend `import grader` selects:
the CPU emulator in CI, real PyCUDA on a GPU machine (GRADER_BACKEND=gpu)."""
import functools
import os
from pathlib import Path

import numpy as np
import pytest

import grader
from grader.grading import isolation
from grader.platform import interpreter

try:
    import nbgrader.api
except ImportError:     # the tests that need nbgrader skip themselves
    pass
else:
    # nbgrader asks `alembic heads` (a process of a second of CPU) for every gradebook it creates; the answer
    # is the same all run long.
    nbgrader.api.get_alembic_version = functools.cache(nbgrader.api.get_alembic_version)

ON_EMULATOR = grader.BACKEND.name == "emulator"
# The tests' own processes (hundreds: workers, autograde runs, `python -m grader`) as the grader's.
for _name, _value in interpreter.blas_threads(gpu=not ON_EMULATOR).items():
    os.environ.setdefault(_name, _value)

emulator_only = pytest.mark.skipif(not ON_EMULATOR, reason="checks emulator-specific behaviour "
                                   "(on a GPU this kernel would hang or fault the device)")
LONG = ("pipeline", "browser", "slurm")       # the markers of the tests that take minutes


def pytest_xdist_auto_num_workers(config):
    """-n auto: a worker more than the cores, as the long tests spend some of their time waiting (for a
    browser, a Slurm, a hub) and a core would idle; PYTEST_XDIST_AUTO_NUM_WORKERS still decides where set."""
    if not os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items):
    """The files holding long tests first, each file's tests in their order: pytest-xdist hands out whole files
    (--dist loadfile) in this order, so the short ones fill the workers at the end instead of one long file
    running alone."""
    long_files = {item.path for item in items if any(item.get_closest_marker(m) for m in LONG)}
    items.sort(key=lambda item: item.path not in long_files)


def warm_cache(folder: Path) -> Path:
    """`folder` made an emulator cache that holds what every process builds first (the runtime library, its
    precompiled header, the baseline builds; no reference's build), for a test whose subject is not a first run."""
    isolation.seed_cache(str(folder))
    return folder


@pytest.fixture(scope="session")
def cuda():
    """pycuda.driver with a context (the primary one, which CuPy shares)."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    return drv


@pytest.fixture(scope="session")
def source_module(cuda):
    from pycuda.compiler import SourceModule
    return SourceModule


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"random seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def grader_settings():
    """change(**fields): this process's grader settings with those fields changed, for one test."""
    from grader.platform import settings
    saved = settings.current()
    yield lambda **changes: settings.use(saved.with_(**changes))
    settings.use(saved)

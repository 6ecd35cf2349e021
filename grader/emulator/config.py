"""Emulator settings: environment variables give the defaults, code may
change them (for example a grader that permutes the thread order)."""
from __future__ import annotations

import os

_settings = {
    "timeout": float(os.environ.get("GRADER_EMULATOR_TIMEOUT", "60")),
    "seed": int(os.environ.get("GRADER_EMULATOR_THREAD_ORDER_SEED", "0")),
}


def launch_timeout() -> float:
    """Seconds one launch may run before it is stopped."""
    return _settings["timeout"]


def set_launch_timeout(seconds: float) -> None:
    _settings["timeout"] = float(seconds)


def thread_order_seed() -> int:
    """0 runs each block's threads in order; any other value permutes them."""
    return _settings["seed"]


def set_thread_order_seed(seed: int) -> None:
    _settings["seed"] = int(seed)

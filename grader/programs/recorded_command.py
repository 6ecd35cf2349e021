"""The command line a results file records: as typed from the repository root,
so that it can be copied and run again on another machine."""
from __future__ import annotations

import shlex
from pathlib import Path

from grader.platform import COURSE_ROOT, settings

ROOT = COURSE_ROOT


GPU_SETUP = "bash deploy/gpu-machine.sh"      # what a GPU machine runs first (PyCUDA)


def recorded_command(command: str, argv: list[str], backend: str | None = None, on_gpu: bool = False) -> str:
    """`[GRADER_BACKEND=...] python3 -m grader command args`, with paths inside
    the repository made relative to its root; the backend setting when it is not the default;
    `on_gpu`: after the GPU machine's set-up."""
    def relative(arg: str) -> str:
        path = Path(arg)
        if path.is_absolute() and path.resolve().is_relative_to(ROOT):
            return str(path.resolve().relative_to(ROOT))
        return arg

    backend = backend or settings.current().backend
    words = ([f"GRADER_BACKEND={backend}"] if backend != "auto" else []) + ["python3", "-m", "grader", command]
    line = " ".join(words + [shlex.quote(relative(a)) for a in argv])
    return f"{GPU_SETUP} && {line}" if on_gpu else line

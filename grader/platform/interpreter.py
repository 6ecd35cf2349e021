"""How the grader starts a Python process of its own: `python -I` (no PYTHON* variables, no user
site-packages, not the working folder: nothing a notebook planted is imported), with the import
path handed over in its job rather than inherited, so that it imports what this process imports
however the course and PyCUDA are installed (site-packages, a venv, conda, --user, PYTHONPATH)."""
from __future__ import annotations

import os
import sys

from grader.platform import COURSE_ROOT

# Reads the first line of stdin (a JSON job with "path"), puts that path first, then runs ENTRY(job).
_BOOT = ("import json, site, sys\n"
         "job = json.loads(sys.stdin.readline())\n"
         "for p in reversed(job['path']):\n"
         "    site.addsitedir(p) if p.endswith(('site-packages', 'dist-packages')) else None\n"
         "    sys.path.insert(0, p) if p not in sys.path else None\n"
         "from {module} import {function}\n"
         "sys.exit({function}(job))\n")


def blas_threads(gpu: bool) -> dict[str, str]:
    """The environment that sets numpy's BLAS threads in a process the grader starts (a grading process, a
    student's function, a notebook's kernel at autograde). Without a GPU it multiplies only small matrices,
    and an OpenBLAS with threads starts them (and lets them spin) in every process that imports numpy:
    about twice the CPU time of the import. On a GPU they stay, for the full-size products that check
    every timed output."""
    return {} if gpu else {"OPENBLAS_NUM_THREADS": "1"}


def import_path() -> list[str]:
    """Where this process imports from: the grader's own folder first, then every absolute folder of
    sys.path, not the working folder."""
    cwd = os.getcwd()
    found = [str(COURSE_ROOT)]
    for p in sys.path:
        if p and os.path.isabs(p) and os.path.isdir(p) and p != cwd and p not in found:
            found.append(p)
    return found


def command(module: str, function: str) -> list[str]:
    """A `python -I` command that reads a job line on stdin and returns `module.function(job)`."""
    return [sys.executable, "-I", "-c", _BOOT.format(module=module, function=function)]

"""Grading a class as a Slurm job array, for `python -m grader autograde --slurm`:
one array task per submission (grader.course.class_grading's `main`, which writes the
submission's result into its scratch folder), submitted with `sbatch --wait`;
the caller merges results as their files appear and when the array ends, and
cancels the array when it is interrupted.
"""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from grader.course.class_grading import ATTEMPTS, Job


def batch_script(course: Path, assignment: str, manifest: Path, count: int, out_dir: Path, gpu: bool,
                 timeout: float | None, max_parallel: int | None) -> str:
    throttle = f"%{max_parallel}" if max_parallel else ""
    lines = ["#!/bin/bash", f"#SBATCH --job-name=autograde-{assignment}", f"#SBATCH --array=0-{count - 1}{throttle}",
             f"#SBATCH --output={out_dir}/task-%A_%a.out"]
    if gpu:
        lines.append("#SBATCH --gres=gpu:1")
    if timeout:
        lines.append(f"#SBATCH --time={math.ceil((ATTEMPTS * timeout + 120) / 60)}")
    lines += [f"cd {shlex.quote(str(course))}",
              f"exec {shlex.quote(sys.executable)} -m grader.course.class_grading {shlex.quote(str(manifest))} "
              f'"$SLURM_ARRAY_TASK_ID"']
    return "\n".join(lines) + "\n"


def submit(course: Path, assignment: str, jobs: list[Job], template: Path, out_dir: Path, round_: int,
           gpu: bool, timeout: float | None, max_parallel: int | None, sbatch_args: list[str]) -> subprocess.Popen:
    """`sbatch --parsable --wait` of an array over `jobs`, running; its output goes to out_dir/sbatch-ROUND.*."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / f"manifest-{round_}.json"
    manifest.write_text(json.dumps({"course": str(course), "assignment": assignment, "template": str(template),
                                    "timeout": timeout, "jobs": [asdict(j) for j in jobs]}))
    script = out_dir / f"array-{round_}.sh"
    script.write_text(batch_script(course, assignment, manifest, len(jobs), out_dir, gpu, timeout, max_parallel))
    return subprocess.Popen(["sbatch", "--parsable", "--wait", *sbatch_args, str(script)], cwd=course,
                            stdout=open(out_dir / f"sbatch-{round_}.out", "w"),
                            stderr=open(out_dir / f"sbatch-{round_}.err", "w"), stdin=subprocess.DEVNULL)


def job_id(out_dir: Path, round_: int) -> str | None:
    """The array's job id, once sbatch has submitted it (`--parsable` prints ID or ID;CLUSTER)."""
    try:
        return (out_dir / f"sbatch-{round_}.out").read_text().strip().split(";")[0] or None
    except OSError:
        return None


def cancel(job: str, wait: float = 120) -> bool:
    """`scancel JOB`, then wait until none of its tasks is left in the queue (Slurm signals them, and kills
    them KillWait seconds later); whether Slurm said so within `wait` seconds."""
    deadline = time.monotonic() + wait
    try:
        subprocess.run(["scancel", job], capture_output=True, timeout=wait)
        while time.monotonic() < deadline:
            queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True,
                                    timeout=max(0.1, deadline - time.monotonic()))
            if (queued.returncode == 0 and not queued.stdout.strip()) or "Invalid job id" in queued.stderr:
                return True
            time.sleep(1)
    except (OSError, subprocess.TimeoutExpired):      # Slurm's commands gone, or its controller not answering
        pass
    return False

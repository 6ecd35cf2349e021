"""Run one check of one submission in a separate process with a time limit.

The child is `python -m grader.isolation`: it reads a job (JSON) on stdin,
chooses the backend the parent named, resolves the exercise and the check
through the one registry (grader.exercises), runs check(submission, seed)
and writes the CheckResult as JSON to a file named in the job. Its stdout and
stderr are captured here (kernel printf, compiler chatter, a crash's last
words) and kept in the result's `output`; nothing reaches this process's
stderr. A crash, a hang past the limit or anything else that leaves no
result becomes a failed CheckResult saying why, so the grader goes on with
the next check.

Layer: above the checks (imports the registry, the backend and the report).
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from . import backend, emulator, exercises
from .checks.common import DID_NOT_FINISH
from .report import FAILED, CheckResult

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_KEPT = 8000          # characters of captured output kept in a result


# What a grading process inherits from its parent's environment: where programs
# and the GPU driver are, the locale, and the grader's own settings. Nothing
# else (PYTHONPATH, PYTHONSTARTUP, LD_PRELOAD, ...: a notebook cell could set
# them to run its own code inside the grading process).
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CXX", "LD_LIBRARY_PATH",
             "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GRADER_THRESHOLDS",
             "GRADER_EMULATOR_NVCC", "VIRTUAL_ENV", "CONDA_PREFIX", "SYSTEMROOT")

_grading_cache: str | None = None


def grading_cache() -> str:
    """This process's private build cache (a fresh 0700 temporary folder,
    removed at exit): grading processes build into it and load only from it,
    never from the shared cache that notebook cells' own SourceModule builds use."""
    global _grading_cache
    if _grading_cache is None or not os.path.isdir(_grading_cache):
        _grading_cache = tempfile.mkdtemp(prefix="grader-cache-")
        atexit.register(shutil.rmtree, _grading_cache, True)
    return _grading_cache


def child_env(backend_name: str | None = None) -> dict:
    """The environment of a grading process, built by the grader (not inherited)."""
    env = {k: os.environ[k] for k in INHERITED if k in os.environ}
    env["PATH"] = env.get("PATH") or os.defpath
    env["PYTHONPATH"] = str(ROOT)
    env["GRADER_BACKEND"] = backend_name or backend.current().name
    env["GRADER_EMULATOR_CACHE"] = grading_cache()
    env["MPLBACKEND"] = "Agg"
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONNOUSERSITE"] = "1"
    return env


def child_command() -> list[str]:
    """`python -E -s`: no PYTHON* variables, no user site-packages; the grader
    from ROOT, put first on the path only after start-up (a sitecustomize.py
    planted anywhere on the parent's path is not imported)."""
    return [sys.executable, "-E", "-s", "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); from grader.isolation import _child; sys.exit(_child())"]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_check(exercise: str, check: str, submission: str, seed: int | None = None, timeout: float | None = None,
              backend_name: str | None = None) -> CheckResult:
    """The result of one check of the exercise on `submission` (text), computed in a fresh process."""
    spec = exercises.get(exercise).check(check)        # an unknown exercise or check: the caller's mistake
    timeout = float(timeout or spec.timeout)
    job = {"exercise": exercise, "check": check, "submission": submission, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        result_path = Path(tmp) / "result.json"
        job["result"] = str(result_path)
        job["launch_timeout"] = max(5.0, timeout * 0.8)
        proc = subprocess.Popen(child_command(), cwd=tmp, env=child_env(backend_name),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True)
        try:
            out, _ = proc.communicate(json.dumps(job), timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = proc.communicate()
        out = (out or "").strip()
        if timed_out:
            return CheckResult(check, FAILED, f"{DID_NOT_FINISH}: the grading process was stopped after "
                               f"{timeout:.0f} s: the kernel hangs or is far too slow ({spec.hang_hint})", 0.0,
                               details={"did_not_finish": True}, output=out[-4000:])
        if result_path.exists():
            try:
                result = CheckResult.from_dict(json.loads(result_path.read_text()))
            except (OSError, ValueError, TypeError) as e:      # a truncated or foreign file
                return CheckResult(check, FAILED, f"the grading process left an unreadable result: {e}", 0.0,
                                   output=out[-4000:])
            if out:
                result.output = ((result.output + "\n" + out).strip() if result.output else out)[-OUTPUT_KEPT:]
            return result
        code = proc.returncode
        why = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
        return CheckResult(check, FAILED, f"the grading process {why} without a result: the kernel crashed it "
                           "(see the captured output)", 0.0, output=out[-4000:])


def _child() -> int:
    import warnings
    warnings.simplefilter("ignore")
    job = json.loads(sys.stdin.read())
    chosen = backend.current()            # GRADER_BACKEND, as the parent chose it
    emulator.set_launch_timeout(job["launch_timeout"])
    try:
        check = exercises.get(job["exercise"]).check(job["check"])
        result = check.run(job["submission"], job.get("seed"))
        if emulator.stopped_launches():
            result.details["did_not_finish"] = True
    except Exception as e:   # the one broad except: no check should raise, so this is a grader bug
        result = CheckResult(job["check"], FAILED, f"grader error (a bug in the grader, not in your code; tell "
                             f"your instructor): {type(e).__name__}: {e}", 0.0,
                             output=traceback.format_exc()[-4000:])
    result.details.setdefault("backend", chosen.name)
    Path(job["result"]).write_text(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(_child())

"""Run one check on student code in a separate process with a time limit.

The child is `python -m grader.isolation`: it reads a job (JSON) on stdin,
runs grader.checks.get(check)(stage, source, seed) (or, for labs 3 and 4,
grader.graph.check_function(check)(source, seed)) and writes the
CheckResult as JSON to a file named in the job. Its stdout and stderr are
captured here (kernel printf, compiler chatter, a crash's last words) and
kept in the result's `output`; nothing reaches this process's stderr. A
crash, a hang past the limit or anything else that leaves no result becomes
a failed CheckResult saying why, so the grader goes on with the next check.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .report import FAILED, CheckResult

ROOT = Path(__file__).resolve().parent.parent
# Seconds per check (whole process: start, compile, every launch).
DEFAULT_TIMEOUTS = {"compiles": 120, "correctness": 240, "races": 240, "bank-conflicts": 240, "performance": 480}
_ANNOUNCE = "grader: kernels run on the "


def _backend_name() -> str:
    try:
        import grader
        return grader.BACKEND.name
    except Exception:
        return os.environ.get("GRADER_BACKEND", "auto")


def child_env(backend: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["GRADER_BACKEND"] = backend or _backend_name()
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONWARNINGS"] = "ignore"
    env.pop("NBGRADER_EXECUTION", None)
    return env


def _clean(output: str) -> str:
    return "\n".join(ln for ln in output.splitlines() if not ln.startswith(_ANNOUNCE)).strip()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_check(check: str, stage_id: str, source: str, seed: int | None = None, timeout: float | None = None,
              backend: str | None = None) -> CheckResult:
    """The named check's result, computed in a fresh process."""
    timeout = float(timeout or DEFAULT_TIMEOUTS.get(check, 240))
    job = {"check": check, "stage": stage_id, "source": source, "seed": seed}
    return run_in_child("grader.isolation", job, check, timeout, backend,
                        "an endless loop? a __syncthreads() some threads never reach?")


def run_in_child(module: str, job: dict, name: str, timeout: float, backend: str | None = None,
                 hang_hint: str = "an endless loop?") -> CheckResult:
    """Run `python -m module`, which reads `job` (JSON) on stdin and writes a
    CheckResult as JSON to job["result"]; a hang, a crash or no result
    becomes a failed CheckResult named `name`."""
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        result_path = Path(tmp) / "result.json"
        job = {**job, "result": str(result_path), "launch_timeout": max(5.0, timeout * 0.8)}
        proc = subprocess.Popen([sys.executable, "-m", module], cwd=tmp, env=child_env(backend),
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
        out = _clean(out or "")
        if timed_out:
            return CheckResult(name, FAILED, f"stopped after {timeout:.0f} s: the kernel hangs or is far too "
                               f"slow ({hang_hint})", 0.0, output=out[-4000:])
        if result_path.exists():
            try:
                result = CheckResult.from_dict(json.loads(result_path.read_text()))
            except Exception as e:
                return CheckResult(name, FAILED, f"the grading process left an unreadable result: {e}", 0.0,
                                   output=out[-4000:])
            if out:
                result.output = (result.output + "\n" + out).strip() if result.output else out
                result.output = result.output[-8000:]
            return result
        code = proc.returncode
        why = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
        return CheckResult(name, FAILED, f"the grading process {why} without a result: the kernel crashed it "
                           "(see the captured output)", 0.0, output=out[-4000:])


def _child() -> int:
    job = json.loads(sys.stdin.read())
    import grader
    from grader import checks
    from grader.stages import stage
    try:
        from grader import emulator
        emulator.set_launch_timeout(job.get("launch_timeout", 60.0))
    except Exception:
        pass
    try:
        if job.get("stage"):   # an SGEMM stage's check
            result = checks.get(job["check"])(stage(job["stage"]), job["source"], job.get("seed"))
        else:                  # a check of labs 3 and 4 (grader.graph)
            from grader.graph import check_function
            result = check_function(job["check"])(job["source"], job.get("seed"))
    except Exception as e:   # a grader bug, or something no check foresaw: a failure with the reason
        import traceback
        result = CheckResult(job["check"], FAILED, f"the check could not run: {type(e).__name__}: {e}", 0.0,
                             output=traceback.format_exc()[-4000:])
    result.details.setdefault("backend", grader.BACKEND.name)
    Path(job["result"]).write_text(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(_child())

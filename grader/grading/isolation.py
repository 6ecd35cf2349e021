"""Run one check of one submission in a separate, sandboxed process with a time limit.

The child is `python -E -s -c ...` (grader.grading.isolation._child): it reads a job
(JSON) on stdin, sets its own resource limits, chooses the backend the parent
named, refuses any source that is not device code only (the emulator's
policy, grader.emulator.policy), resolves the exercise and the check through
the one registry (grader.grading.registry), runs check(submission, seed) and writes
the result to a pipe (no file a kernel could rewrite). Every check of a
CUDA C exercise is split: the child returns only what the kernel did (C,
the analysis' records, timings) and the verdict is computed here, from
those outputs and the seed this process chose (a kernel that scribbled
over the child's memory cannot hand over a verdict). A Python exercise's
function runs in a process of its own (grader.grading.student_process), so the
child's verdict is out of its reach. Where
bubblewrap can make a sandbox, the child runs in it: the file system
read-only but for its private folder and the grading process's private build
cache, no network (sandbox_description() says what is in force, and why
not). Its environment is built here, not inherited. Its stdout and stderr
are captured here (kernel printf, compiler chatter, a crash's last words)
and kept in the result's `output`; nothing reaches this process's stderr. A
crash, a hang past the limit or anything else that leaves no result becomes
a failed CheckResult saying why, so the grader goes on with the next check.

Layer: above the checks (imports the registry, the backend and the report).
"""
from __future__ import annotations

import atexit
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from pathlib import Path

import numpy as np

from grader import emulator
from grader.grading import registry
from grader.grading.checks.common import DID_NOT_FINISH, HANG_FACTOR, HANG_FLOOR_S, end_process_past_budget, new_seed
from grader.grading.report import FAILED, CheckResult
from grader.kernels import timing
from grader.platform import backend, sandbox

ROOT = Path(__file__).resolve().parents[2]          # the repository: grader/ is inside it
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
    env["CUPY_CACHE_DIR"] = os.path.join(env["GRADER_EMULATOR_CACHE"], "cupy")    # writable in the sandbox
    env["MPLBACKEND"] = "Agg"
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONNOUSERSITE"] = "1"
    return env


def child_command() -> list[str]:
    """`python -E -s`: no PYTHON* variables, no user site-packages; the grader
    from ROOT, put first on the path only after start-up (a sitecustomize.py
    planted anywhere on the parent's path is not imported)."""
    return [sys.executable, "-E", "-s", "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); from grader.grading.isolation import _child; sys.exit(_child())"]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# ---- the sandbox -------------------------------------------------------------------------
# Resource limits of a grading process (set by the process itself, soft = hard,
# before it reads the submission): address space, CPU seconds beyond the
# check's time limit, open files, file size, no core files; processes where
# the kernel enforces RLIMIT_NPROC (not for root).
LIMITS = {"RLIMIT_AS": 32 << 30, "RLIMIT_NOFILE": 1024, "RLIMIT_FSIZE": 2 << 30, "RLIMIT_CORE": 0}
EXTRA_PROCESSES = 256          # RLIMIT_NPROC: the user's processes now, plus this many (the compiler's)


def sandbox_description() -> str:
    """Which mechanisms isolate a grading process here, and which are missing and why."""
    return "; ".join([sandbox.bubblewrap()[1], "resource limits (address space, CPU time, open files, file size, "
                      "processes) and an environment built by the grader",
                      "outputs returned over a pipe and judged by the grader's own process",
                      "a student's Python function called in a process of its own"])


def _user_processes() -> int:
    uid = os.getuid()
    try:
        return sum(1 for d in os.listdir("/proc") if d.isdigit() and os.stat(f"/proc/{d}").st_uid == uid)
    except OSError:
        return 0


def _apply_limits(cpu_seconds: float, gpu: bool = False) -> list[str]:
    """Set this process's resource limits; returns the ones that could not be set.
    On a GPU the address space stays unlimited: the CUDA driver reserves far
    more virtual memory than it uses, and fails under RLIMIT_AS."""
    missing = []
    limits = dict(LIMITS, RLIMIT_CPU=int(cpu_seconds) + 1, RLIMIT_NPROC=_user_processes() + EXTRA_PROCESSES)
    if gpu:
        limits.pop("RLIMIT_AS")
    for name, value in limits.items():
        what = getattr(resource, name, None)
        if what is None:
            missing.append(name)
            continue
        try:
            soft, hard = resource.getrlimit(what)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            missing.append(name)
    return missing


def run_check(exercise: str, check: str, submission: str, seed: int | None = None, timeout: float | None = None,
              backend_name: str | None = None) -> CheckResult:
    """The result of one check of the exercise on `submission` (text), computed in a fresh process."""
    spec = registry.get(exercise).check(check)        # an unknown exercise or check: the caller's mistake
    timeout = float(timeout or spec.timeout)
    seed = new_seed() if seed is None else int(seed)       # chosen here: a split check's outputs must match it
    job = {"exercise": exercise, "check": check, "submission": submission, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        env = child_env(backend_name)
        env["TMPDIR"] = tmp
        env["MPLCONFIGDIR"] = os.path.join(env["GRADER_EMULATOR_CACHE"], "matplotlib")
        read_fd, write_fd = os.pipe()
        job["result_fd"] = write_fd
        job["launch_timeout"] = max(5.0, timeout * 0.8)
        job["cpu_seconds"] = timeout + 60
        writable = [tmp, env["GRADER_EMULATOR_CACHE"]]
        if env["GRADER_BACKEND"] == "gpu":
            writable.append(str(timing.lock_dir()))     # the GPU's lock (grader.kernels.timing.gpu_lock)
        command = sandbox.wrap(child_command(), writable, tmp)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(read_fd, chunks), daemon=True)
        reader.start()
        try:
            proc = subprocess.Popen(command, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                    pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
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
        reader.join(timeout=10)
        out = (out or "").strip()
        if timed_out:
            return CheckResult(check, FAILED, f"{DID_NOT_FINISH}: the grading process was stopped after "
                               f"{timeout:.0f} s: the kernel hangs or is far too slow ({spec.hang_hint})", 0.0,
                               details={"did_not_finish": True}, output=out[-4000:])
        if chunks:
            try:
                result = _result(spec, b"".join(chunks), seed, env["GRADER_BACKEND"] == "gpu")
            except (UnicodeDecodeError, ValueError, TypeError, KeyError, OSError) as e:    # truncated or foreign
                return CheckResult(check, FAILED, f"the grading process left an unreadable result: {e}", 0.0,
                                   output=out[-4000:])
            if out:
                result.output = ((result.output + "\n" + out).strip() if result.output else out)[-OUTPUT_KEPT:]
            return result
        code = proc.returncode
        if code > 128:                      # a sandbox passes a killed child's signal on as 128 + signal
            code = 128 - code
        if code == -signal.SIGALRM:         # a GPU launch past its budget (checks.common.launch_budget)
            return CheckResult(check, FAILED, f"{DID_NOT_FINISH}: a launch ran past its budget on the GPU "
                               f"({HANG_FACTOR} x the reference kernel's time on the same launch, at least "
                               f"{HANG_FLOOR_S:g} s) and the grading process was stopped ({spec.hang_hint})", 0.0,
                               details={"did_not_finish": True}, output=out[-4000:])
        why = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
        return CheckResult(check, FAILED, f"the grading process {why} without a result: the kernel crashed it "
                           "(see the captured output)", 0.0, output=out[-4000:])


# What a grading process writes on its result pipe: b"J" and a CheckResult as
# JSON, or b"R" and an .npz archive of a split check's outputs ("meta", the
# collected metadata as JSON, and its arrays), read without pickle.
def _result(spec, data: bytes, seed: int, gpu: bool) -> CheckResult:
    if data[:1] == b"R" and spec.judge is not None:
        with np.load(io.BytesIO(data[1:]), allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files if k != "meta"}
            meta = json.loads(str(archive["meta"]))
        if meta.get("seed") != seed:
            raise ValueError(f"outputs for seed {meta.get('seed')!r}, not {seed}")
        result = spec.judge(meta, arrays, gpu)
        if meta.get("stopped_launches"):
            result.details["did_not_finish"] = True
        result.details.setdefault("backend", "gpu" if gpu else "emulator")
        return result
    if data[:1] == b"J":
        result = CheckResult.from_dict(json.loads(data[1:].decode()))
        if spec.judge is not None and result.status != FAILED:
            raise ValueError("a verdict where the check's outputs were expected")
        return result
    raise ValueError("neither a result nor a check's outputs")


def _outputs(meta: dict, arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
    return b"R" + buffer.getvalue()


def _read_all(fd: int, chunks: list) -> None:
    with os.fdopen(fd, "rb") as f:
        while data := f.read(1 << 16):
            chunks.append(data)


def _child() -> int:
    warnings.simplefilter("ignore")
    job = json.loads(sys.stdin.read())
    result_pipe = os.fdopen(job["result_fd"], "wb")
    _apply_limits(job["cpu_seconds"], gpu=os.environ.get("GRADER_BACKEND") == "gpu")
    chosen = backend.current()            # GRADER_BACKEND, as the parent chose it
    end_process_past_budget(chosen.name == "gpu")
    emulator.set_launch_timeout(job["launch_timeout"])
    emulator.set_untrusted_sources(True)  # device code only (grader.emulator.policy)
    try:
        check = registry.get(job["exercise"]).check(job["check"])
        if check.collect is not None:
            meta, arrays = check.collect(job["submission"], job.get("seed"))
            payload = _outputs(dict(meta, stopped_launches=bool(emulator.stopped_launches())), arrays)
        else:
            result = check.run(job["submission"], job.get("seed"))
            if emulator.stopped_launches():
                result.details["did_not_finish"] = True
            result.details.setdefault("backend", chosen.name)
            payload = b"J" + json.dumps(result.to_dict()).encode()
    except Exception as e:   # the one broad except: no check should raise, so this is a grader bug
        result = CheckResult(job["check"], FAILED, f"grader error (a bug in the grader, not in your code; tell "
                             f"your instructor): {type(e).__name__}: {e}", 0.0,
                             output=traceback.format_exc()[-4000:])
        payload = b"J" + json.dumps(result.to_dict()).encode()
    result_pipe.write(payload)
    result_pipe.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child())

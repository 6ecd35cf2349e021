"""One check of one submission: collect() in a separate, sandboxed process with a time limit, judge() here.

The grading process is `python -I` started with a job description on its
stdin (the exercise, the check, the submission, the seed this process chose,
the settings, the launch budgets, the import path): nothing it needs comes
from inherited variables, and nothing a notebook planted (a sitecustomize.py,
PYTHONPATH) is imported. It sets its own resource limits, chooses the backend
the job names, says it has started, and from then on runs only the check's
collect(), whose outputs (data: JSON and numpy arrays) it writes to a pipe.
The verdict is computed here from those outputs and the seed (a kernel that
scribbled over the grading process's memory cannot hand over a verdict).

What fails before the process has started (it cannot import PyCUDA or the
grader, or the sandbox cannot be made) is a grader error; a crash or a hang
after it is the submission's. A submission's builds go to a cache folder of
its own (no two submissions share one); the reference solutions' builds are
kept in the emulator's cache, which no submission's process can write; the
emulator's runtime library is built once here and handed over with its
SHA-256, which the process checks, and so are the imports of a trusted
kernel's builds, the source policy's baseline.

Launch budgets: a kernel launch is stopped once it has run HANG_FACTOR times
as long as the reference solution's same launch. The reference's times come
from a run of the same check on the reference solution, in a process of its
own, once per check and backend (grader.grading.checks.common.launch_budget);
where there are none, a GPU launch is stopped after HANG_UNKNOWN_S.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

from grader import emulator
from grader.emulator import build, policy
from grader.grading import answers, registry
from grader.grading.checks import host_calls
from grader.grading.checks.common import (
    DID_NOT_FINISH,
    HANG_FACTOR,
    HANG_FLOOR_S,
    HANG_UNKNOWN_S,
    arm_lock_down,
    end_process_past_budget,
    measured_budgets,
    new_seed,
    use_budgets,
)
from grader.grading.protocol import Context
from grader.grading.report import FAILED, NOT_GRADED, CheckResult
from grader.kernels import timing
from grader.platform import COURSE_ROOT, backend, interpreter, sandbox, settings
from grader.platform.settings import Settings

ROOT = COURSE_ROOT           # the folder holding the grader package
OUTPUT_KEPT = 8000          # characters of captured output kept in a result
GPU_WAIT_S = 1200.0         # waiting for the GPU's lock (other submissions timing), before a check's own time
STARTED = b"S"              # the grading process's first word on its pipe: it has started

# What a grading process inherits from its parent's environment: where programs and the GPU
# driver are, the locale. Nothing else (PYTHON*, LD_PRELOAD, ...: a notebook could set them).
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CXX", "LD_LIBRARY_PATH",
             "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "SYSTEMROOT")

# Resource limits of a grading process (set by the process itself, soft = hard, before it reads
# the submission): address space, CPU seconds beyond the check's time limit, open files, file
# size, no core files; processes where the kernel enforces RLIMIT_NPROC (not for root).
LIMITS = {"RLIMIT_AS": 32 << 30, "RLIMIT_NOFILE": 1024, "RLIMIT_FSIZE": 2 << 30, "RLIMIT_CORE": 0}
EXTRA_PROCESSES = 256          # RLIMIT_NPROC: the user's processes now, plus this many (the compiler's)


def sandbox_description() -> str:
    """Which mechanisms isolate a grading process here, and which are missing and why."""
    return "; ".join([sandbox.description(), "resource limits (address space, CPU time, open files, file size, "
                      "processes) and an environment built by the grader",
                      "on the emulator, once the submission is compiled, a seccomp filter: no new program, "
                      "process, mount or namespace",
                      "outputs returned over a pipe and judged by the grader's own process",
                      "a student's Python function called in a process of its own"])


# ---- folders --------------------------------------------------------------------------------
_folders: dict[str, str] = {}


def _private_folder(name: str) -> str:
    """A fresh 0700 folder of this process, removed at exit (one per name)."""
    if name not in _folders or not os.path.isdir(_folders[name]):
        _folders[name] = tempfile.mkdtemp(prefix=f"grader-{name}-")
        atexit.register(shutil.rmtree, _folders[name], True)
    return _folders[name]


def submission_cache(submission: str) -> str:
    """The build cache of one submission's grading processes: shared by that submission's checks,
    never by two submissions (what one writes there cannot reach another's grading)."""
    return _private_folder("cache-" + hashlib.sha256(submission.encode()).hexdigest()[:16])


def reference_cache() -> str:
    """The build cache of the reference solutions' grading processes, kept between processes (a class's
    autograde, a student's self-checks after a restart compile each reference once), beside the emulator's
    runtime in the emulator's cache: written only by the grader's processes and the references' grading
    processes, hidden from every other sandboxed process (its builds are answers)."""
    path = settings.current().reference_builds
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


_trusted: dict | None = None


def trusted_builds() -> dict:
    """What this process builds (or verifies) for its grading processes: the emulator's runtime library,
    "runtime": (path, SHA-256), "baselines": the imports of a trusted kernel's builds
    (grader.emulator.build.baseline_imports) and "headers": the folder of the runtime's precompiled header
    (read only there), kept in the emulator's cache between processes."""
    global _trusted
    if _trusted is None:
        settings.current()
        path = build.runtime_library()
        headers = build.precompiled_headers()
        _trusted = {"runtime": (str(path), hashlib.sha256(path.read_bytes()).hexdigest()),
                    "baselines": build.baseline_imports(), "headers": headers and str(headers)}
    return _trusted


def seed_cache(folder: str) -> None:
    """Start `folder`, the emulator cache of a process that runs student code (a notebook's kernel at
    autograde time), with this process's runtime library and baseline builds, which it would otherwise
    build again; never with the references' builds (those are answers). Where they cannot be built here, the
    folder starts empty (that process meets the same failure itself, in its own output)."""
    os.makedirs(folder, exist_ok=True)
    try:
        trusted_builds()
        for path in build.trusted_files():
            if path.exists() and path.is_relative_to(build.cache_dir()):
                dest = os.path.join(folder, path.relative_to(build.cache_dir()))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(path, dest)
    except (build.BuildError, OSError):
        pass


# ---- the parent's side ----------------------------------------------------------------------
def run_check(exercise: str, check: str, submission: str, seed: int | None = None, timeout: float | None = None,
              backend_name: str | None = None) -> CheckResult:
    """The result of one check of the exercise on `submission` (text): collected in a fresh process, judged here."""
    ex = registry.get(exercise)
    spec = ex.check(check)                  # an unknown exercise or check: the caller's mistake
    if spec.needs_answers and not answers.available():
        return CheckResult(check, NOT_GRADED, answers.GRADED_WHEN_SUBMITTED, 0.0)
    seed = new_seed() if seed is None else int(seed)
    chosen = backend_name or backend.current().name
    gpu = chosen == "gpu"
    job_settings = settings.current().with_(backend=chosen, emulator_cache=submission_cache(submission))
    budgets = reference_budgets(ex, gpu, job_settings)
    ctx = Context(ex.id, ex.stage, gpu, job_settings, budgets)
    outcome = _collect(ex.id, spec, submission, seed, job_settings, budgets, float(timeout or spec.timeout))
    if isinstance(outcome, CheckResult):
        return outcome
    meta, arrays, output = outcome
    result = spec.judge((meta, arrays), seed, ctx)
    if result.status == FAILED and spec.name in reference_failed(ex.id, gpu):
        result = CheckResult.grader_error(spec.name, "the course's reference solution fails this check on this "
                                          "machine too, so its failure says nothing of this submission",
                                          output=result.text())
    attempts = attempted(result.message)
    if attempts:
        result.details["refused"] = attempts         # listed for the instructor by autograde and regrade
    if meta.get("_stopped"):
        result.details["did_not_finish"] = True
    result.details.setdefault("backend", chosen)
    if output:
        result.output = ((result.output + "\n" + output).strip() if result.output else output)[-OUTPUT_KEPT:]
    return result


def attempted(message: str) -> list[str]:
    """What a result says the submission tried and was refused for (the source policy's kinds, an import
    of the grader's answers): [] for an honest submission."""
    return sorted(set(policy.refusal_kinds(message) + (["reaches-answers"] if host_calls.REACHES in message else [])))


_budgets: dict[tuple, dict] = {}
_reference_failed: dict[tuple, list] = {}


def reference_budgets(ex, gpu: bool, job_settings: Settings) -> dict:
    """The reference solution's seconds per launch-budget block of the exercise's checks, every check in one
    grading process, measured once for the references' cache ({} where there is no reference or it failed);
    the checks the reference itself fails there in reference_failed()."""
    key = (ex.id, gpu)
    if key not in _budgets:
        _budgets[key], _reference_failed[key] = {}, []
        timed = [c for c in ex.checks if c.timed_on_reference]
        try:
            reference = ex.reference() if ex.reference is not None and timed else None
        except OSError:                     # a copy of the course without its solutions: the budgets it ships
            reference = None
            _budgets[key] = shipped_budgets(gpu).get(ex.id, {})
        if reference is not None:
            _budgets[key], _reference_failed[key] = _measured_budgets(ex, reference, timed, gpu, job_settings)
    return _budgets[key]


def reference_failed(exercise: str, gpu: bool) -> list[str]:
    """The checks the reference solution failed in its own run here (reference_budgets): on a GPU, a driver or
    a grader that breaks the course's own kernel."""
    return _reference_failed.get((exercise, gpu), [])


def _measured_budgets(ex, reference: str, timed: list, gpu: bool, job_settings: Settings) -> tuple[dict, list]:
    """The reference's times and the checks it failed, from a grading process, kept in the references' cache,
    where the next process that grades with the same reference, grading code, runtime and device reads them."""
    identity = [ex.id, [c.name for c in timed], reference, _grading_code_digest(), trusted_builds()["runtime"][1],
                backend.current().detail if gpu else "emulator"]
    kept = Path(reference_cache(), f"budgets-{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]}.json")
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(kept.read_text())
        return dict(record["budgets"]), list(record["failed"])
    outcome = _collect(ex.id, None, reference, 0, job_settings.with_(emulator_cache=reference_cache()),
                       {}, sum(c.timeout for c in timed), measure=True)
    if isinstance(outcome, CheckResult):
        return {}, []
    meta = outcome[0]
    record = {"budgets": dict(meta.get("_budgets") or {}), "failed": list(meta.get("_reference_failed") or [])}
    with contextlib.suppress(OSError):          # best effort: the next process measures again
        build.atomic_write(kept, json.dumps(record).encode())
    return record["budgets"], record["failed"]


@functools.lru_cache(maxsize=1)
def _grading_code_digest() -> str:
    """What the launches a budget covers depend on: the checks' and the kernels' host code."""
    digest = hashlib.sha256()
    for folder in (Path(__file__).parent / "checks", Path(timing.__file__).parent):
        for path in sorted(folder.glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()


# PyCUDA's and CuPy's caches of compiled kernels, inside the build cache (the sandbox's to write).
COMPILER_CACHES = {"PYCUDA_CACHE_DIR": "pycuda", "CUPY_CACHE_DIR": "cupy"}
SHIPPED_BUDGETS = Path(__file__).resolve().parent / "reference_times.json"


def shipped_budgets(gpu: bool) -> dict:
    """{exercise: {budget key: seconds}} measured on the instructor's machine when the course was published
    without its solutions (python -m grader publish); {} where there is no such file."""
    try:
        return json.loads(SHIPPED_BUDGETS.read_text()).get("gpu" if gpu else "emulator", {})
    except (OSError, ValueError):
        return {}


def _times_kernels(exercise: str, spec) -> bool:
    """Whether the grading process times kernels: the check's field, or (the reference's run) any of its checks'."""
    if spec is not None:
        return spec.times_kernels
    return any(c.times_kernels for c in registry.get(exercise).checks if c.timed_on_reference)


def _collect(exercise: str, spec, submission: str, seed: int, job_settings: Settings, budgets: dict,
             timeout: float, measure: bool = False):
    """(meta, arrays, captured output) from a grading process, or the CheckResult saying why there are none.
    Where workers share the GPU, its lock is held here for the process (timing.held_for_child), before its
    time starts; the time it waits for the GPU alone is not counted."""
    name = spec.name if spec is not None else "reference"
    with contextlib.ExitStack() as held:
        try:
            lock = held.enter_context(timing.held_for_child(_times_kernels(exercise, spec), GPU_WAIT_S))
        except timing.GpuBusy as e:
            return CheckResult.grader_error(name, f"{e} (the grader's limit, not the kernel's: regrade later)")
        except Exception as e:      # noqa: BLE001 - the lock's file or the driver: the grader's failure, said so
            return CheckResult.grader_error(name, f"the GPU's lock could not be taken ({type(e).__name__}: {e})")
        return _collect_held(name, spec, exercise, submission, seed, job_settings, budgets, timeout, measure, lock)


def _collect_held(name: str, spec, exercise: str, submission: str, seed: int, job_settings: Settings,
                  budgets: dict, timeout: float, measure: bool, lock: timing.ChildLock):
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        env.update(PATH=env.get("PATH") or os.defpath, TMPDIR=tmp, HOME=tmp, MPLBACKEND="Agg",
                   PYTHONWARNINGS="ignore", MPLCONFIGDIR=os.path.join(tmp, "matplotlib"),
                   **{var: os.path.join(job_settings.emulator_cache, sub) for var, sub in COMPILER_CACHES.items()})
        env.update(interpreter.blas_threads(gpu=job_settings.backend == "gpu"))
        read_fd, write_fd = os.pipe()
        job = {"exercise": exercise, "check": None if spec is None else spec.name, "submission": submission, "seed": seed,
               "settings": job_settings.with_(gpu_lock_log=None).to_dict(),      # the lock's holders log, here
               "budgets": budgets, "measure": measure, "path": interpreter.import_path(),
               **trusted_builds(), "result_fd": write_fd, "launch_timeout": max(5.0, timeout * 0.8),
               "cpu_seconds": timeout + 60, "gpu_lock": lock.mode, "gpu_lock_pipe": lock.pipe}
        writable = [tmp, job_settings.emulator_cache]
        if job_settings.backend == "gpu" and lock.mode is None:
            writable.append(str(timing.lock_dir()))     # it takes the GPU's lock around its timed runs itself
        readable = [job["runtime"][0], *build.compiler_roots(),
                    *[p for p in (job["headers"], job_settings.thresholds) if p]]
        command = sandbox.wrap(child_command(), writable, tmp, hidden=sandbox.hidden_from_grading() + list(lock.hidden),
                               gpu=job_settings.backend == "gpu", readable=readable, nested=True)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(read_fd, chunks), daemon=True)
        reader.start()
        try:
            proc = subprocess.Popen(command, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                    pass_fds=(write_fd, *(lock.pipe or ())))
        except OSError as e:
            os.close(write_fd)
            return CheckResult.grader_error(name, f"the grading process could not be started ({e})")
        os.close(write_fd)
        out, timed_out = _communicate(proc, json.dumps(job) + "\n", timeout, lock)
        reader.join(timeout=10)
    hint = spec.hang_hint if spec is not None else ""
    return _outcome(name, hint, b"".join(chunks), quieted((out or "").strip()), proc.returncode, timed_out, timeout,
                    bool(budgets))


# PyCUDA's two lines, at exit, for each object it could not free once a failed launch had lost the context.
_CLEANUP = re.compile(r"^PyCUDA WARNING: a clean-up operation failed \(dead context maybe\?\)\n"
                      r"cu\w+ failed: [^\n]*(\n|$)", re.M)


def quieted(out: str) -> str:
    """A grading process's output with PyCUDA's clean-up complaints said once, with their number."""
    n = len(_CLEANUP.findall(out))
    if not n:
        return out
    return (_CLEANUP.sub("", out).strip() + f"\nPyCUDA could not free {n} object(s) at exit: the failed launch "
            "lost the context").strip()


def _communicate(proc, job: str, timeout: float, lock: timing.ChildLock) -> tuple[str, bool]:
    """The process's output, and whether it was stopped after `timeout` seconds of its own (waiting
    for the GPU alone not counted)."""
    start, given = time.monotonic(), job
    while True:
        try:
            out, _ = proc.communicate(given, timeout=max(0.1, start + timeout + lock.waited_s - time.monotonic()))
            return out, False
        except subprocess.TimeoutExpired:
            given = None
            if time.monotonic() >= start + timeout + lock.waited_s:
                break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return out, True


def _outcome(name: str, hang_hint: str, data: bytes, out: str, code: int, timed_out: bool, timeout: float,
             reference_timed: bool = True):
    if not data.startswith(STARTED):
        last = out.strip().splitlines()[-1] if out.strip() else f"it exited with status {code}"
        return CheckResult.grader_error(name, f"the grading process could not start ({last[:300]})",
                                        output=out[-4000:])
    data = data[len(STARTED):]
    if timed_out:
        return CheckResult(name, FAILED, f"{DID_NOT_FINISH}: the grading process was stopped after "
                           f"{timeout:.0f} s: the kernel hangs or is far too slow ({hang_hint})", 0.0,
                           details={"did_not_finish": True}, output=out[-4000:])
    if data[:1] == b"R":
        try:
            with np.load(io.BytesIO(data[1:]), allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files if k != "meta"}
                meta = json.loads(str(archive["meta"]))
            if not isinstance(meta, dict):
                raise ValueError("its outputs are not a dictionary")
        except (ValueError, TypeError, KeyError, OSError, EOFError) as e:     # truncated, or not ours
            return CheckResult(name, FAILED, f"the grading process left unreadable outputs ({e}): the "
                               "kernel may have overwritten its memory", 0.0, output=out[-4000:])
        return meta, arrays, out[-OUTPUT_KEPT:]
    if data[:1] == b"E":
        return CheckResult.grader_error(name, "the check itself failed", output=data[1:].decode(errors="replace"))
    if code is not None and code > 128:          # a sandbox passes a killed child's signal on as 128 + signal
        code = 128 - code
    if code == -signal.SIGSYS:                   # grader.platform.sandbox.forbid_new_programs
        return CheckResult(name, FAILED, f"the grading process was stopped: your kernel made {sandbox.FORBIDDEN}",
                           0.0, details={"refused": ["forbidden-system-call"]}, output=out[-4000:])
    if code == -signal.SIGALRM:                  # a GPU launch past its budget (checks.common.launch_budget)
        budget = (f"{HANG_FACTOR} x the reference kernel's time on the same launch, at least {HANG_FLOOR_S:g} s"
                  if reference_timed else f"{HANG_UNKNOWN_S:g} s: the reference's time is not known here")
        return CheckResult(name, FAILED, f"{DID_NOT_FINISH}: a launch ran past its budget on the GPU "
                           f"({budget}) and the grading process was stopped ({hang_hint})", 0.0,
                           details={"did_not_finish": True}, output=out[-4000:])
    why = f"was killed by {_signal_name(code)}" if code is not None and code < 0 else f"exited with status {code}"
    return CheckResult(name, FAILED, f"the grading process {why} while running your code, without a result: "
                       "the kernel crashed it (see the captured output)", 0.0, output=out[-4000:])


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _read_all(fd: int, chunks: list) -> None:
    with os.fdopen(fd, "rb") as f:
        while data := f.read(1 << 16):
            chunks.append(data)


# ---- the grading process's side -----------------------------------------------------------------
def child_command() -> list[str]:
    return interpreter.command("grader.grading.isolation", "child")


def _apply_limits(cpu_seconds: float, gpu: bool = False) -> list[str]:
    """Set this process's resource limits; returns the ones that could not be set.
    On a GPU the data segment is limited instead of the address space: the CUDA
    driver reserves far more virtual memory than it uses, and fails under RLIMIT_AS."""
    missing = []
    limits = dict(LIMITS, RLIMIT_CPU=int(cpu_seconds) + 1, RLIMIT_NPROC=_user_processes() + EXTRA_PROCESSES)
    if gpu:
        limits["RLIMIT_DATA"] = limits.pop("RLIMIT_AS")
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


def _user_processes() -> int:
    uid = os.getuid()
    try:
        return sum(1 for d in os.listdir("/proc") if d.isdigit() and os.stat(f"/proc/{d}").st_uid == uid)
    except OSError:
        return 0


def _outputs(meta: dict, arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
    return b"R" + buffer.getvalue()


def child(job: dict) -> int:
    """A grading process: start, say so, collect, write the outputs."""
    warnings.simplefilter("ignore")
    pipe = os.fdopen(job["result_fd"], "wb")
    job_settings = settings.use(Settings.from_dict(job["settings"]), runtime=tuple(job["runtime"]),
                                baselines=job["baselines"], headers=job["headers"])
    _apply_limits(job["cpu_seconds"], gpu=job_settings.backend == "gpu")
    for sub in COMPILER_CACHES.values():     # made here: a folder the grader made would not be the sandbox's to write
        os.makedirs(os.path.join(job_settings.emulator_cache, sub), exist_ok=True)
    chosen = backend.current()              # the backend the job names (GRADER_BACKEND=gpu insists on the GPU)
    if job.get("gpu_lock"):
        timing.held_by_parent(job["gpu_lock"], job.get("gpu_lock_pipe"))
    ex = registry.get(job["exercise"])
    checks = [ex.check(job["check"])] if job["check"] else [c for c in ex.checks if c.timed_on_reference]
    pipe.write(STARTED)
    pipe.flush()
    end_process_past_budget(chosen.name == "gpu")
    emulator.set_launch_timeout(job["launch_timeout"])
    emulator.set_untrusted_sources(not job["measure"])     # device code only (grader.emulator.policy)
    use_budgets(job["budgets"], measure=job["measure"])
    arm_lock_down(not job["measure"])           # the reference's own run compiles check after check
    ctx = Context(ex.id, ex.stage, chosen.name == "gpu", job_settings, job["budgets"])
    try:
        failed = []
        for check in checks:            # one check, or (timing the reference) every check that sets budgets
            meta, arrays = check.collect(job["submission"], int(job["seed"]), ctx)
            if job["measure"] and check.judge((meta, arrays), int(job["seed"]), ctx).status == FAILED:
                failed.append(check.name)           # the reference's own run: judged here, it is the course's code
        payload = _outputs(dict(meta, _stopped=bool(emulator.stopped_launches()), _budgets=measured_budgets(),
                                _reference_failed=failed), arrays)
    except Exception:       # the one broad except: no collect() should raise, so this is a bug in the grader
        payload = b"E" + traceback.format_exc()[-4000:].encode()
    pipe.write(payload)
    pipe.close()
    return 0

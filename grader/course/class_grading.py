"""One submission graded by nbgrader's own `nbgrader autograde`, in a scratch
copy of the course, for `python -m grader autograde` (grader.course.class_autograde).

The scratch course (STATE/scratch/STUDENT/) holds a copy of the course's
gradebook taken when the run began (the assignment's cells, and the student's
earlier manual grades, which nbgrader's SaveAutoGrades reads), a copy of the
submission, and a link to the course's source folder. nbgrader runs from the
course root (its nbgrader_config.py, its sys.path) with only
`CourseDirectory.root` and `CourseDirectory.db_url` moved to the scratch
copy, so each worker writes its own SQLite file and its own autograded
folder; the tool merges them into the course, one writer
(grader.course.gradebook_merge).

The notebook's kernel and the grading processes run in the sandbox of student
code (grader.platform.sandbox), which hides the real course's folders and
gradebook as well as the scratch copy's; GradeFromSource records the scores it
computed in the scratch course (RECORD), and the merge takes the scores from
there. The worker's nbgrader has a memory limit (WORKER_MEMORY).

Every process of an attempt carries GRADER_CLASS_JOB in its environment (the
Jupyter kernel starts a session of its own and outlives a killed nbgrader):
what is left of an attempt is found by that mark and killed.

`python -m grader.course.class_grading MANIFEST INDEX` grades job INDEX of a
manifest (a Slurm array task, grader.course.slurm_array).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.emulator.build import atomic_write
from grader.kernels import timing

JOB_MARK = "GRADER_CLASS_JOB"
STATE_FOLDER = "class-autograde"       # COURSE/class-autograde/ASSIGNMENT: scratch courses, ledger, summary
ATTEMPTS = 2                    # a submission that crashes, hangs or kills its worker is tried once more
INTERRUPTED = "the run was interrupted"
LOG_TAIL = 600                  # characters of nbgrader's error line kept as a failure's reason
EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception|Interrupt): ")


def course_directory(root: Path):
    """nbgrader's CourseDirectory of the course at `root`, with its nbgrader_config.py."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    config = Config()
    if (root / "nbgrader_config.py").exists():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return CourseDirectory(config=config, root=str(root))


def sqlite_path(db_url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(db_url[len(prefix):]) if db_url.startswith(prefix) else None


def snapshot_gradebook(db_url: str, dest: Path) -> None:
    """A consistent copy of the course's SQLite gradebook (SQLite's backup API)."""
    src_path = sqlite_path(db_url)
    if src_path is None or not src_path.exists():
        raise ValueError(f"the course gradebook must be an existing SQLite file (db_url = {db_url!r}): each "
                         f"worker grades into a copy of it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    src, out = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True), sqlite3.connect(tmp)
    try:
        src.backup(out)
    finally:
        src.close()
        out.close()
    os.replace(tmp, dest)


def files_hash(folder: Path) -> str:
    """sha256 of every file under `folder` (relative names and bytes), checkpoints left out."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and ".ipynb_checkpoints" not in p.parts:
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class Job:
    student: str
    key: str                # the submission's and the assignment's hashes: a change means grade again
    scratch: str


@dataclass
class Result:
    student: str
    key: str
    status: str             # "graded" or "failed"
    attempts: int
    seconds: float          # wall time of every attempt
    gpu: str                # CUDA_VISIBLE_DEVICES of the worker ("" for a CPU worker)
    started: float          # time.time() when the first attempt began, and when the last ended
    ended: float
    reason: str = ""
    flagged: list = field(default_factory=list)     # what the submission tried, or a score not computed

    @staticmethod
    def read(scratch: Path) -> "Result | None":
        try:
            return Result(**json.loads((scratch / "result.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _write_result(scratch: Path, result: Result) -> None:
    atomic_write(scratch / "result.json", json.dumps(asdict(result)).encode())


def prepare_scratch(course: Path, assignment: str, job: Job, template: Path) -> None:
    """STATE/scratch/STUDENT: the gradebook copy, the submission, the source folder (a link)."""
    cd = course_directory(course)
    scratch = Path(job.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copy(template, scratch / "gradebook.db")
    submitted = Path(cd.format_path(cd.submitted_directory, job.student, assignment))
    shutil.copytree(submitted, scratch / submitted.relative_to(course), symlinks=True)
    if not os.path.isabs(cd.source_directory):
        (scratch / cd.source_directory).symlink_to(course / cd.source_directory, target_is_directory=True)


_stopping = threading.Event()


def stop_attempts() -> None:
    """The run was interrupted: no attempt starts after this, and one starting now is killed at once."""
    _stopping.set()


def kill_marked(mark: str) -> None:
    """Kill every process whose environment carries GRADER_CLASS_JOB=mark."""
    import psutil  # comes with ipykernel (nbgrader)
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(JOB_MARK) == mark:
                p.kill()
        except (psutil.Error, OSError):
            continue


def _failure_reason(code: int, log: Path, timeout: float | None) -> str:
    if code is None:
        return f"no result within {timeout:g} s (the whole submission's limit): killed"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the nbgrader process was killed by {name} (a cell that kills its worker, or out of memory)"
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [line.strip() for line in text.splitlines()]
    # The exception that stopped it (`nbclient.exceptions.DeadKernelError: Kernel died`), else nbgrader's last error.
    raised = [line for line in lines if EXCEPTION_LINE.match(line)]
    errors = [line for line in lines if "ERROR" in line and "above traceback" not in line]
    detail = (raised or errors or lines or ["no output"])[-1][-LOG_TAIL:]
    if "DeadKernelError" in detail:
        detail += " (the notebook's Python stopped: a cell that exits, or crashes the interpreter)"
    return f"nbgrader autograde exited with {code}: {detail}"


RECORD = "from-source.json"      # GradeFromSource's scores and what the submission tried, in the scratch course
WORKER_MEMORY = 4 << 30          # bytes of data the worker's nbgrader may take (it reads the notebook)

# nbgrader dies with the thread that started it, when the tool is killed (the kernel
# follows: it exits when its parent does), and its memory is bounded (a soft limit: the
# kernel and the grading processes set their own); a prctl before exec, not a preexec_fn (threads).
WORKER_PREFIX = [sys.executable, "-c", "import ctypes, os, resource, signal, sys\n"
                 "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
                 f"resource.setrlimit(resource.RLIMIT_DATA, ({WORKER_MEMORY}, resource.RLIM_INFINITY))\n"
                 "os.execv(sys.argv[1], sys.argv[1:])"] if sys.platform == "linux" else []


def autograde_once(course: Path, assignment: str, job: Job, template: Path, gpu: str | None,
                   timeout: float | None, shared_gpu: bool = False) -> str | None:
    """One attempt: nbgrader autograde of the student in a fresh scratch course. None, or why it failed."""
    kill_marked(job.scratch)                # what a killed run may have left running there
    prepare_scratch(course, assignment, job, template)
    scratch = Path(job.scratch)
    env = dict(os.environ)
    env[JOB_MARK] = job.scratch
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])  # alembic
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if gpu and shared_gpu:      # the grader's processes hold the shared GPU's lock for what they start
        env.setdefault("GRADER_GPU_LOCK", str(timing.lock_dir() / f"class-gpu-{gpu}.lock"))
    command = [*WORKER_PREFIX, sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", job.student,
               "--force", f"--CourseDirectory.root={scratch}",
               f"--CourseDirectory.db_url=sqlite:///{scratch / 'gradebook.db'}",
               f"--SandboxedExecute.real_course={course}", f"--GradeFromSource.record={scratch / RECORD}"]
    log = scratch / "nbgrader.log"
    # Its own temporary folder, removed with what a killed kernel left there.
    with tempfile.TemporaryDirectory(prefix="grader-attempt-", ignore_cleanup_errors=True) as tmp, \
            open(log, "wb") as out:
        env["TMPDIR"] = tmp
        proc = subprocess.Popen(command, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            if _stopping.is_set():      # started as the run was interrupted, after its kill of marked processes
                return INTERRUPTED
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kill_marked(job.scratch)
    return None if code == 0 else _failure_reason(code, log, timeout)


def autograde(course: Path, assignment: str, job: Job, template: Path, gpu: str | None,
              timeout: float | None, shared_gpu: bool = False) -> Result:
    """Up to ATTEMPTS attempts; the result is also written to the scratch folder's result.json."""
    started = time.time()
    reason = None
    attempt = 0
    for attempt in range(1, ATTEMPTS + 1):
        reason = autograde_once(course, assignment, job, template, gpu, timeout, shared_gpu)
        if reason is None:
            break
        if _stopping.is_set():          # killed by the interrupt: not the submission's failure, not retried
            reason = INTERRUPTED
            break
    ended = time.time()
    result = Result(job.student, job.key, "failed" if reason else "graded", attempt, round(ended - started, 3),
                    os.environ.get("CUDA_VISIBLE_DEVICES", "") if gpu is None else gpu, started, ended,
                    reason or "")
    _write_result(Path(job.scratch), result)
    return result


def main(argv: list[str]) -> int:
    """A Slurm array task: grade job INDEX of MANIFEST (the GPU is the one Slurm gave the task)."""
    manifest = json.loads(Path(argv[0]).read_text())
    job = Job(**manifest["jobs"][int(argv[1])])
    r = autograde(Path(manifest["course"]), manifest["assignment"], job, Path(manifest["template"]), None,
                  manifest["timeout"])
    print(f"{r.student}: {r.status} in {r.seconds:.1f} s, {r.attempts} attempt(s) {r.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""python -m grader autograde COURSE_DIR ASSIGNMENT [--workers N] [--gpus LIST]
    [--slurm [--sbatch-arg ARG ...] [--max-parallel N]] [--timeout S] [--force] [--retry-failed] [--csv FILE]

A whole class through nbgrader's own `nbgrader autograde`, one process per
submission, several at a time, into one gradebook:

- locally, one worker per GPU (CUDA_VISIBLE_DEVICES set to that GPU alone), or
  --workers N sharing the GPUs (--gpus 0 --workers 8: eight on one GPU), where
  only what times kernels holds a GPU alone (grader.kernels.timing.gpu_lock);
  where there is no GPU, N CPU workers (the emulator grades everything but
  performance);
- with --slurm, a Slurm job array, one task per submission (--gres=gpu:1 when
  --gpus is given), submitted with `sbatch --wait`.

The gradebook: every worker grades in a scratch copy of the course with a
SQLite copy of the gradebook of its own, and this process, the only writer,
merges each result into the course's gradebook as it arrives (no database
server to run, on a CI machine or on a cluster's shared file system; no two
writers on one SQLite file). A submission that crashes, hangs past --timeout
or kills its worker is tried once more, then recorded as failed with the
reason (its cells flagged for manual grading). Each merged submission is
recorded with a hash of its files and of the assignment's source: running the
command again grades only what is new or changed; a run that was killed
loses no grade already merged, and the next run grades the rest.

At the end: per-submission time, GPU seconds, the slowest, the failures, what
each submission tried (FLAGGED: a refused source, a forbidden system call, code
naming the gradebook or mounts, a worker's score that is not the one computed),
also as CSV (COURSE_DIR/class-autograde/ASSIGNMENT/summary.csv unless --csv).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.course import class_grading, gradebook_merge, slurm_array
from grader.course.class_grading import Job, Result
from grader.emulator.build import atomic_write

DEFAULT_TIMEOUT = 1800.0        # seconds for one submission's autograde (nbgrader's own cell timeout is inside)


# ---- workers -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    name: str
    gpu: str                    # CUDA_VISIBLE_DEVICES for this worker: one GPU, or "" (none: the emulator)
    shared: bool = False        # other workers grade on the same GPU (its lock then spans their processes)


def visible_gpus() -> list[str]:
    """The GPUs nvidia-smi lists (their indices); none where there is no driver."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def slots(gpus: str, workers: int | None) -> list[Slot]:
    """One worker per GPU of `gpus` ("auto": every GPU nvidia-smi lists; "none"; or "0,1,..."), or
    `workers` workers taking the GPUs in turn (several on one GPU share it: only timing holds it alone,
    grader.kernels.timing.gpu_lock); with no GPU, `workers` CPU workers (default: one per core)."""
    ids = visible_gpus() if gpus == "auto" else [] if gpus == "none" else [g.strip() for g in gpus.split(",")]
    if any(not g or any(ch.isspace() for ch in g) for g in ids):
        raise ValueError(f"--gpus {gpus!r}: give GPU indices separated by commas, e.g. 0,1")
    twice = sorted({g for g in ids if ids.count(g) > 1})
    if twice:
        raise ValueError(f"--gpus {gpus!r} lists GPU {', '.join(twice)} twice: two timed runs would share it")
    if workers is not None and workers < 1:
        raise ValueError("--workers must be at least 1")
    if ids:
        if workers is None or workers == len(ids):
            return [Slot(f"gpu {g}", g) for g in ids]
        return [Slot(f"gpu {ids[i % len(ids)]} worker {i}", ids[i % len(ids)], workers > len(ids))
                for i in range(workers)]
    return [Slot(f"cpu {i}", "") for i in range(workers or os.cpu_count() or 1)]


def describe(workers: list[Slot]) -> str:
    """What the progress header says of the workers."""
    if not workers[0].gpu:
        return f"{len(workers)} CPU worker(s)"
    gpus = sorted({s.gpu for s in workers}, key=lambda g: [s.gpu for s in workers].index(g))
    if len(gpus) == len(workers):
        return ", ".join(s.name for s in workers)
    return f"{len(workers)} workers sharing GPU {', '.join(gpus)} (timing holds a GPU alone)"


# ---- what to grade -----------------------------------------------------------------------
class Ledger:
    """STATE/ledger.json: the last result of each student (with the key it was for),
    rewritten whole (atomically) after each merge."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.entries = {s: Result(**r) for s, r in json.loads(path.read_text()).items()}
        except (FileNotFoundError, ValueError, TypeError):      # none yet, or unreadable: grade everything
            self.entries = {}

    def current(self, job: Job) -> Result | None:
        r = self.entries.get(job.student)
        return r if r is not None and r.key == job.key else None

    def record(self, result: Result) -> None:
        self.entries[result.student] = result
        atomic_write(self.path, json.dumps({s: asdict(r) for s, r in sorted(self.entries.items())}, indent=1).encode())


def plan(course: Path, assignment: str, cd, state: Path) -> list[Job]:
    """Every submission of the assignment, with its key (a hash of its files and of the assignment's source)."""
    source = Path(cd.format_path(cd.source_directory, ".", assignment))
    if not source.is_dir():
        raise ValueError(f"no source folder {source} for assignment {assignment!r}")
    assignment_hash = class_grading.files_hash(source)
    submitted = Path(cd.format_path(cd.submitted_directory, "*", assignment))
    jobs = []
    for folder in sorted(submitted.parent.parent.glob(f"*/{submitted.name}")):
        student = folder.parent.name
        if student.startswith(".") or not folder.is_dir():
            continue
        key = hashlib.sha256(f"{assignment_hash} {class_grading.files_hash(folder)}".encode()).hexdigest()
        jobs.append(Job(student, key, str(state / "scratch" / student)))
    return jobs


# ---- one run -----------------------------------------------------------------------------
def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class Run:
    """Merges results into the course (the one writer) and prints a progress line for each."""

    def __init__(self, course: Path, assignment: str, cd, gb, ledger: Ledger, total: int):
        self.course, self.assignment, self.cd, self.gb, self.ledger = course, assignment, cd, gb, ledger
        self.total = total
        self.done: list[Result] = []
        self.t0 = time.monotonic()

    def _autograded(self, root: Path, student: str) -> Path:
        return root / Path(self.cd.format_path(self.cd.autograded_directory, student, self.assignment)).relative_to(
            self.course)

    def merge(self, job: Job, result: Result) -> None:
        scratch = Path(job.scratch)
        target = self._autograded(self.course, job.student)
        if result.status == "graded":
            try:
                staged = target.with_name(f".{target.name}.merging")
                shutil.rmtree(staged, ignore_errors=True)
                shutil.copytree(self._autograded(scratch, job.student), staged)
                result.flagged = gradebook_merge.merge_submission(
                    self.gb, f"sqlite:///{scratch / 'gradebook.db'}", self.assignment, job.student,
                    _record(scratch / class_grading.RECORD))
                shutil.rmtree(target, ignore_errors=True)
                os.replace(staged, target)
            except Exception as e:   # noqa: BLE001 - one submission's merge never stops the class
                self.gb.db.rollback()
                result.status, result.reason = "failed", f"merge into the course failed: {type(e).__name__}: {e}"
        if result.status != "graded":
            shutil.rmtree(target, ignore_errors=True)
            gradebook_merge.mark_failed(self.gb, self.assignment, job.student)
        self.ledger.record(result)
        self.done.append(result)
        self._progress(result)

    def _progress(self, r: Result) -> None:
        elapsed = time.monotonic() - self.t0
        left = self.total - len(self.done)
        eta = elapsed / len(self.done) * left        # the throughput so far, however many run at once
        width = len(str(self.total))
        where = f"gpu {r.gpu}" if r.gpu else "cpu"
        retry = f" ({r.attempts} attempts)" if r.attempts > 1 else ""
        print(f"[{len(self.done):>{width}}/{self.total}] {r.student:<20} {r.status:<6} {r.seconds:7.1f} s  "
              f"{where:<8}{retry} | elapsed {_clock(elapsed)}, ETA {_clock(eta)}", flush=True)


def _record(path: Path) -> dict:
    """GradeFromSource's record of a scratch course ({} when there is none: no cell scored)."""
    try:
        record = json.loads(path.read_text())
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def _grade(course: Path, assignment: str, template: Path, timeout: float | None, job: Job, slot: Slot):
    gpu = slot.gpu
    try:
        return class_grading.autograde(course, assignment, job, template, gpu, timeout, slot.shared)
    except Exception as e:   # noqa: BLE001 - preparing one scratch course never stops the class
        now = time.time()
        return Result(job.student, job.key, "failed", 1, 0.0, gpu or "", now, now,
                      f"could not grade: {type(e).__name__}: {e}")


@contextlib.contextmanager
def _terminate_as_interrupt():
    """`kill` (SIGTERM; a batch job's time limit sends it too) ends the run as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    on_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, on_term)


def run_local(run: Run, jobs: list[Job], workers: list[Slot], grade) -> None:
    todo: queue.Queue = queue.Queue()
    for j in jobs:
        todo.put(j)
    finished: queue.Queue = queue.Queue()

    def worker(slot: Slot) -> None:
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            finished.put((job, grade(job, slot)))

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in workers[:len(jobs)]]
    for t in threads:
        t.start()
    try:
        with _terminate_as_interrupt():
            for _ in jobs:
                run.merge(*finished.get())
    except BaseException:
        class_grading.stop_attempts()        # a worker whose attempt the kill below ends must not retry it
        while not todo.empty():
            todo.get_nowait()
        for j in jobs:
            class_grading.kill_marked(j.scratch)
        for t in threads:           # their attempts end now: what each made goes before the process does
            t.join(timeout=60)
        raise


def run_slurm(run: Run, jobs: list[Job], template: Path, state: Path, args) -> None:
    """Two rounds at most: a task that left no result at all (a lost node) is submitted once more."""
    pending = list(jobs)
    for round_ in (1, 2):
        for j in pending:
            (Path(j.scratch) / "result.json").unlink(missing_ok=True)
        proc = slurm_array.submit(run.course, run.assignment, pending, template, state / "slurm", round_,
                                  args.gpus != "none", args.timeout or None, args.max_parallel, args.sbatch_arg)
        print(f"sbatch: a Slurm array of {len(pending)} task(s) (round {round_}); waiting for it to end",
              flush=True)
        try:
            with _terminate_as_interrupt():
                while pending:
                    ended = proc.poll() is not None
                    for j in list(pending):
                        r = Result.read(Path(j.scratch))
                        if r is not None and r.key == j.key:
                            pending.remove(j)
                            run.merge(j, r)
                    if ended:
                        break
                    time.sleep(2)
        except BaseException:
            _cancel_array(proc, state / "slurm", round_)
            raise
        if not pending:
            if proc.poll() is None:     # every task has reported: sbatch --wait polls slowly, and ends no task
                proc.terminate()
            proc.wait()
            return
        if not (state / "slurm" / f"sbatch-{round_}.out").read_text().strip():     # no job id
            raise RuntimeError("sbatch did not submit the array: "
                               + (state / "slurm" / f"sbatch-{round_}.err").read_text().strip()[-1000:])
    for j in pending:
        now = time.time()
        run.merge(j, Result(j.student, j.key, "failed", 2, 0.0, "", now, now,
                            f"its Slurm task left no result twice (see {state / 'slurm'}/task-*.out)"))


def _cancel_array(proc: subprocess.Popen, out_dir: Path, round_: int) -> None:
    """The run was interrupted: its array's tasks must not go on grading (and writing) beside the next run's."""
    job = slurm_array.job_id(out_dir, round_)
    if job is None:                  # no id written yet: sbatch ends, before it submits or having said which
        proc.kill()
        proc.wait()
        job = slurm_array.job_id(out_dir, round_)
    if job is not None and slurm_array.cancel(job):
        print(f"scancel {job}: the array's tasks are cancelled", flush=True)
    elif job is not None:
        print(f"scancel {job}: Slurm did not confirm that its tasks ended; wait until `squeue -j {job}` lists "
              "none before running the same command again", flush=True)
    if proc.poll() is None:
        proc.terminate()
    proc.wait()


# ---- the summary -------------------------------------------------------------------------
FIELDS = ["student", "status", "attempts", "seconds", "gpu", "gpu_seconds", "score", "max_score", "reason",
          "flagged"]


def summary_rows(gb, assignment: str, jobs: list[Job], ledger: Ledger, graded_now: set[str]) -> list[dict]:
    from nbgrader.api import MissingEntry
    rows = []
    for j in jobs:
        r = ledger.entries.get(j.student)
        try:
            sub = gb.find_submission(assignment, j.student)
            score, max_score = sub.score, sub.max_score
        except MissingEntry:
            score = max_score = None
        status = r.status if r and j.student in graded_now else f"unchanged ({r.status})" if r else "not graded"
        rows.append({"student": j.student, "status": status, "attempts": r.attempts if r else 0,
                     "seconds": r.seconds if r else 0.0, "gpu": r.gpu if r else "",
                     "gpu_seconds": (r.seconds if r and r.gpu else 0.0), "score": score, "max_score": max_score,
                     "reason": r.reason if r else "", "flagged": "; ".join(r.flagged) if r else ""})
    return rows


def report(rows: list[dict], wall: float, csv_path: Path) -> str:
    now = [r for r in rows if not r["status"].startswith(("unchanged", "not graded"))]
    failed = [r for r in rows if "failed" in r["status"]]
    lines = [f"{len(rows)} submission(s): {sum(r['status'] == 'graded' for r in now)} graded now, "
             f"{sum(r['status'] == 'failed' for r in now)} failed now, {len(rows) - len(now)} unchanged since an "
             f"earlier run; wall {_clock(wall)}, worker time {_clock(sum(r['seconds'] for r in now))}, "
             f"GPU seconds {sum(r['gpu_seconds'] for r in now):.1f}"]
    slowest = sorted(now, key=lambda r: -r["seconds"])[:5]
    if slowest:
        lines.append("slowest: " + ", ".join(f"{r['student']} {r['seconds']:.1f} s" for r in slowest))
    for r in failed:
        lines.append(f"FAILED {r['student']} ({r['attempts']} attempt(s)): {r['reason']}")
    for r in rows:
        if r["flagged"]:
            lines.append(f"FLAGGED {r['student']}: {r['flagged']}")
    if failed:
        lines.append("(failed submissions have no automatic score; their cells are flagged for manual grading)")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    lines.append(f"summary: {csv_path}")
    return "\n".join(lines)


# ---- the command -------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m grader autograde", description=__doc__.split("\n\n")[1])
    p.add_argument("course", help="the course root (its nbgrader_config.py, gradebook and submitted/ folder)")
    p.add_argument("assignment")
    p.add_argument("--workers", type=int, default=None, help="workers: with GPUs, they take the GPUs in turn and "
                   "share them (only timing holds a GPU alone); without, CPU workers (default: one per GPU, or "
                   "per core)")
    p.add_argument("--gpus", default="auto", help="GPU indices (e.g. 0,1), one worker each unless --workers says "
                   "more; 'auto' (default): every GPU nvidia-smi lists; 'none': CPU workers. With --slurm: anything "
                   "but 'none' asks each task for --gres=gpu:1")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds one submission's autograde may take (default {DEFAULT_TIMEOUT:g}; 0: no limit)")
    p.add_argument("--force", action="store_true", help="grade every submission, changed or not")
    p.add_argument("--retry-failed", action="store_true", help="grade again the unchanged ones that failed")
    p.add_argument("--csv", default=None, help="where to write the summary (default: in the state folder)")
    p.add_argument("--slurm", action="store_true", help="grade as a Slurm job array (sbatch --wait)")
    p.add_argument("--sbatch-arg", action="append", default=[], help="passed to sbatch, e.g. --sbatch-arg=--partition=gpu")
    p.add_argument("--max-parallel", type=int, default=None, help="Slurm: at most this many tasks at once")
    args = p.parse_args(argv)
    if args.slurm and args.gpus == "auto":
        args.gpus = "none"              # the submitting machine's GPUs say nothing about the cluster's
    return args


def autograde_class(args: argparse.Namespace) -> int:
    course = Path(args.course).resolve()
    if not course.is_dir():
        raise ValueError(f"no course folder {course}")
    cd = class_grading.course_directory(course)
    state = course / class_grading.STATE_FOLDER / args.assignment
    state.mkdir(parents=True, exist_ok=True)
    with _the_only_run(state, args.assignment):
        return _grade_class(args, course, cd, state)


@contextlib.contextmanager
def _the_only_run(state: Path, assignment: str):
    """One run of an assignment at a time: two would grade in the same scratch folders and both write
    gradebook.db."""
    with open(state / "run.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"another `python -m grader autograde` of {assignment} is running on this course; "
                             "wait until it ends") from None
        yield


def _grade_class(args: argparse.Namespace, course: Path, cd, state: Path) -> int:
    from nbgrader.api import Gradebook, MissingEntry
    workers = [] if args.slurm else slots(args.gpus, args.workers)
    jobs = plan(course, args.assignment, cd, state)
    if not jobs:
        raise ValueError(f"no submissions of {args.assignment!r} in {course / cd.submitted_directory}")
    ledger = Ledger(state / "ledger.json")

    def needed(j: Job) -> bool:
        r = ledger.current(j)
        return args.force or r is None or (r.status == "failed" and args.retry_failed)

    todo = [j for j in jobs if needed(j)]
    template = state / "template.db"
    class_grading.snapshot_gradebook(cd.db_url, template)
    t0 = time.monotonic()
    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            gb.find_assignment(args.assignment)
        except MissingEntry:
            raise ValueError(f"assignment {args.assignment!r} is not in the gradebook: run "
                             f"`nbgrader generate_assignment {args.assignment}` first") from None
        where = "a Slurm array" if args.slurm else describe(workers)
        print(f"{args.assignment}: {len(jobs)} submission(s), {len(todo)} to grade, on {where}", flush=True)
        run = Run(course, args.assignment, cd, gb, ledger, len(todo))
        # Results a killed run left in the scratch folders, for these very files, are merged as they are.
        fresh = []
        for j in todo:
            r = None if args.force else Result.read(Path(j.scratch))
            if r is not None and r.key == j.key and r.status == "graded":
                run.merge(j, r)
            else:
                fresh.append(j)
        if fresh and args.slurm:
            run_slurm(run, fresh, template, state, args)
        elif fresh:
            run_local(run, fresh, workers, lambda job, slot: _grade(course, args.assignment, template,
                                                                     args.timeout or None, job, slot))
        rows = summary_rows(gb, args.assignment, jobs, ledger, {j.student for j in todo})
    print(report(rows, time.monotonic() - t0, Path(args.csv) if args.csv else state / "summary.csv"))
    return 1 if any("failed" in r["status"] for r in rows) else 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        return autograde_class(args)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}")
        return 2
    except KeyboardInterrupt:           # Ctrl-C or SIGTERM: run_local and run_slurm end what is under way first
        print("interrupted: what was graded is in the gradebook; the same command grades the rest", flush=True)
        return 130

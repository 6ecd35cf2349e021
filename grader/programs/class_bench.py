"""python -m grader class-bench [--students 32] [--workers 8] [--gpu 0] [--out FILE] [--work DIR]

A class of lab 02 submissions of every kind (grader.programs.class_submissions: correct, wrong, slow,
hanging, hostile) graded by `python -m grader autograde` twice, serially (--workers 1) and by
--workers workers sharing one GPU, each run in a copy of the same course. Both runs hold the GPU's
lock as workers sharing a GPU do (GRADER_GPU_LOCK, a file in the work folder): every grading
process's GPU work under it shared, each timed section alone. Written as markdown: each run's wall
time, the seconds the lock was held exclusively (timing) and whether a timed section overlapped any
other holder (its log, GRADER_GPU_LOCK_LOG), and per submission the score and the performance ratio
to cuBLAS in both runs. Exit status 1 when a score differs or is missing, or a timed section
overlapped. With --work, a bench stopped halfway keeps what it finished and goes on from there when
run again (a run's time then sums its segments', each up to its last graded submission). Without a GPU
the emulator grades (no performance points, no ratios, nothing timed)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.course.student import scratch_course, succeeded
from grader.emulator.build import atomic_write
from grader.platform import COURSE_ROOT
from grader.platform.backend import current
from grader.programs.class_submissions import KINDS, LAB, NOTEBOOK, class_kinds, hand_in
from grader.programs.recorded_command import recorded_command

RATIO_GOAL = 0.05           # the performance ratios of the two runs within 5 % of each other
PERFORMANCE_CELL = "smem-tiling-performance"
MEASURED = re.compile(r"(\d+) GFLOPS = [0-9.]+ x cuBLAS \((\d+) GFLOPS")
FINISHED = re.compile(r"^\[\s*\d+/\d+\] ")         # autograde's line for each submission it finished


def build_class(work: Path, students: int) -> None:
    """WORK/pristine: a course with lab 02 released and the class handed in, nothing graded."""
    kinds = class_kinds(students)
    pristine = work / "pristine"
    with scratch_course(LAB) as (course, api):
        succeeded(api.generate_assignment(LAB, force=True), "generate_assignment")
        for student, kind in kinds.items():
            hand_in(course, student, kind)
        shutil.copytree(course, pristine, symlinks=True)


def autograde_command(course: Path, gpu: str, workers: int) -> list[str]:
    return [sys.executable, "-m", "grader", "autograde", str(course), LAB, "--gpus", gpu, "--workers", str(workers)]


def grade(pristine: Path, run: Path, gpu: str, workers: int, lock: Path, key: dict) -> tuple[float, int, int]:
    """`python -m grader autograde` of a copy of the class at RUN/course (its output shown and kept in
    RUN/autograde.log): its wall time in seconds, its exit status and the segments it took. A run stopped
    halfway (a time limit) goes on where it stopped when asked again with the same key: its time is the sum of
    its segments', each counted up to its last finished submission (RUN/progress.json)."""
    course, progress = run / "course", run / "progress.json"
    earlier = json.loads(progress.read_text()) if progress.exists() else {}
    segments = earlier.get("segments", []) if earlier.get("key") == key else []
    if not segments:
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        shutil.copytree(pristine, course, symlinks=True)
    env = dict(os.environ, GRADER_GPU_LOCK=str(lock), GRADER_GPU_LOCK_LOG=str(run / "gpu-lock.log"),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))  # alembic
    command = autograde_command(course, gpu, workers)
    print(f"{run.name}: {' '.join(command[1:])}" + (f" (segment {len(segments) + 1})" if segments else ""), flush=True)
    t0 = time.monotonic()
    with open(run / "autograde.log", "a") as log, subprocess.Popen(
            command, cwd=COURSE_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:            # shown as it comes: a bench of a whole class runs for many minutes
            log.write(line)
            print(line, end="", flush=True)
            if FINISHED.match(line):
                atomic_write(progress, json.dumps({"key": key, "segments": segments + [time.monotonic() - t0]}).encode())
    segments.append(time.monotonic() - t0)
    return sum(segments), proc.returncode, len(segments)


def lock_intervals(log: Path) -> list[tuple[str, float, float]]:
    """(mode, start, end) of every holding of the GPU's lock in a run."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        mode, start, end, _pid = line.split()
        out.append((mode, float(start), float(end)))
    return out


def overlapping(intervals) -> int:
    """Pairs of holdings that overlap where one is exclusive: a timed section beside other GPU work."""
    return sum(1 for i, a in enumerate(intervals) for b in intervals[i + 1:]
               if "exclusive" in (a[0], b[0]) and a[1] < b[2] and b[1] < a[2])


def results(course: Path, students) -> dict[str, dict]:
    """{student: {score, ratio}}: the gradebook's score, and the ratio to cuBLAS the performance cell reports."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="sgemm-lab") as gb:
        for student in students:
            try:
                score = gb.find_submission(LAB, student).score
            except MissingEntry:
                score = None
            ratio = None
            path = course / "autograded" / student / LAB / f"{NOTEBOOK}.ipynb"
            if path.exists():
                nb = nbformat.read(str(path), as_version=4)
                for cell in nb.cells:
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == PERFORMANCE_CELL:
                        text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                                       for o in cell.get("outputs", []))
                        m = MEASURED.search(text)
                        ratio = int(m.group(1)) / int(m.group(2)) if m and int(m.group(2)) else None
            out[student] = {"score": score, "ratio": ratio}
    return out


def measured_run(work: Path, name: str, students: int, workers: int, gpu: str) -> dict:
    """One run of the class at WORK/NAME, or the one a killed bench finished there before (WORK/NAME/run.json)."""
    done = work / name / "run.json"
    key = {"students": students, "workers": workers, "gpu": gpu}
    if done.exists() and json.loads(done.read_text()).get("key") == key:
        print(f"{name}: finished by an earlier class-bench in {work}", flush=True)
        return json.loads(done.read_text())["run"]
    pristine, built = work / "pristine", work / "pristine.json"
    if not built.exists() or json.loads(built.read_text()) != {"students": students}:
        shutil.rmtree(pristine, ignore_errors=True)
        build_class(work, students)
        built.write_text(json.dumps({"students": students}))
    wall, code, segments = grade(pristine, work / name, gpu, workers, work / "gpu.lock", key)
    held = lock_intervals(work / name / "gpu-lock.log")
    run = {"workers": workers, "wall": wall, "segments": segments, "status": code, "overlaps": overlapping(held),
           "exclusive": sum(end - start for mode, start, end in held if mode == "exclusive"),
           "results": results(work / name / "course", class_kinds(students))}
    done.write_text(json.dumps({"key": key, "run": run}))
    return run


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def report(command: str, backend: str, kinds: dict, runs: dict) -> tuple[str, bool]:
    """The markdown, and whether the runs agree (every score there and equal, no timed section beside other
    GPU work)."""
    (s_name, serial), (p_name, parallel) = runs.items()
    rows, diffs, unequal = [], [], []
    for student, kind in kinds.items():
        a, b = serial["results"][student], parallel["results"][student]
        d = None
        if a["ratio"] and b["ratio"]:
            d = abs(b["ratio"] - a["ratio"]) / a["ratio"]
            diffs.append(d)
        if a["score"] != b["score"]:
            unequal.append(student)
        rows.append(f"| {student} | {kind} | {_num(a['score'], 'g')} | {_num(b['score'], 'g')} | "
                    f"{_num(a['ratio'], '.4f')} | {_num(b['ratio'], '.4f')} | {_num(d and 100 * d, '.2f')} |")
    overlaps = sum(r["overlaps"] for r in runs.values())
    ungraded = [s for r in runs.values() for s, got in r["results"].items() if got["score"] is None]
    lines = [f"# Class autograde on one GPU: serially and by {parallel['workers']} workers", "",
             f"Command (from the repository root): `{command}`", "",
             f"Backend: {backend}, {time.strftime('%Y-%m-%d')}. {os.cpu_count()} CPU cores. Lab {LAB}, {len(kinds)} submissions: "
             + ", ".join(f"{sum(k == kind for k in kinds.values())} {kind}" for kind in KINDS
                         if kind in kinds.values()) + " (grader/programs/class_submissions.py).", "",
             "| run | workers | wall (s) | GPU lock held exclusively (s) | timed sections beside other GPU work "
             "| autograde's exit status | submissions without a score |",
             "|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        missing = sum(got["score"] is None for got in r["results"].values())
        lines.append(f"| {name} | {r['workers']} | {r['wall']:.1f} | {r['exclusive']:.1f} | {r['overlaps']} | "
                     f"{r['status']} | {missing} |")
    lines += [f"\nThe {name} run was stopped and went on {r['segments'] - 1} time(s): its wall time is the sum of its "
              f"{r['segments']} segments', each counted up to its last finished submission."
              for name, r in runs.items() if r.get("segments", 1) > 1]
    lines += ["", f"Wall time, serial / parallel: {serial['wall'] / parallel['wall']:.2f} x.", "",
              f"Scores: equal in both runs for {len(kinds) - len(unequal)} of {len(kinds)} submissions"
              + (f"; different: {', '.join(unequal)}." if unequal else "."),
              f"Performance ratios to cuBLAS measured in both runs: {len(diffs)}; largest relative difference: "
              + (f"{100 * max(diffs):.2f} % (goal: within {100 * RATIO_GOAL:g} %)." if diffs else
                 "none measured (no GPU)."), "",
              "| student | kind | score serial | score parallel | ratio serial | ratio parallel | difference (%) |",
              "|---|---|---|---|---|---|---|", *rows, ""]
    return "\n".join(lines), not unequal and not ungraded and overlaps == 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader class-bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--students", type=int, default=32, help="submissions in the class (default 32)")
    p.add_argument("--workers", type=int, default=8, help="workers of the parallel run (default 8)")
    p.add_argument("--gpu", default="0", help="the GPU both runs grade on (default 0)")
    p.add_argument("--out", default=None, help="write the markdown there")
    p.add_argument("--work", default=None, help="keep the courses there (default: a folder removed at the end); "
                   "a bench run again there goes on where it stopped")
    args = p.parse_args(argv)
    if args.students < 1 or args.workers < 2:
        p.error("--students at least 1, --workers at least 2")
    backend = current()
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="class-bench-"))
    try:
        runs = {}
        for name, workers in (("serial", 1), ("parallel", args.workers)):
            runs[name] = measured_run(work, name, args.students, workers, args.gpu)
        kinds = class_kinds(args.students)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    command = recorded_command("class-bench", sys.argv[1:] if argv is None else argv, on_gpu=backend.name == "gpu")
    text, agree = report(command, str(backend), kinds, runs)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0 if agree else 1

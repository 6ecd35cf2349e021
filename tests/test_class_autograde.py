"""`python -m grader autograde`: a class of lab 1 submissions graded in parallel
(4 CPU workers; fake GPUs; a Slurm job array on a Slurm started here) gives,
cell by cell, the gradebook that serial `nbgrader autograde` gives; failures are
retried once and recorded; a killed run loses nothing and the next one
finishes it; an interrupted Slurm run cancels its array; an unchanged
submission is not graded twice.

The course and its submissions are made with tests/nbgrader_course.py.
Grading a lab 1 notebook on the emulator costs about 25 CPU seconds when its
kernels compile (two submissions here: every grading process builds them
afresh) and about 8 when they do not (kernel sources left None: the other ten),
so that the class of twelve is graded twice (serially, by 4 workers),
and parts of it again (by workers sharing a GPU, by Slurm), in a few
minutes on two cores.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")

from nbgrader_course import (  # noqa: E402
    REPO,
    failed_run,
    generate_assignment,
    gradebook,
    load_config,
    naive_without_bounds_check,
    new_course,
    points,
    submit,
)
from slurm_local import local_slurm  # noqa: E402

from grader.course import class_autograde  # noqa: E402

LAB, NB = "01-naive-coalesced", "naive-coalesced"

pytestmark = pytest.mark.pipeline
REF_SCORE = sum(p for cell, p in points(LAB).items() if not cell.endswith("-performance"))   # without a GPU: 15
ANSWERS = {"q-intensity": "AI_4096", "q-ridge": "RIDGE_H200", "q-naive-intensity": "AI_NAIVE",
           "q-sectors-naive": "SECTORS_NAIVE_A", "q-sectors-coalesced": "SECTORS_COALESCED_B"}


def _no_kernels(cells):
    """Kernel sources not written yet (None): the checks fail at once, nothing compiles."""
    for gid, var, stage in (("naive-kernel", "NAIVE_SOURCE", "naive"),
                            ("coalesced-kernel", "COALESCED_SOURCE", "coalesced")):
        cells[gid].source = f'{var} = None  # not written yet\ngrader.check("{stage}", {var})\n'


def _wrong(cells, *gids):
    for gid in gids:
        cells[gid].source = f"{ANSWERS[gid]} = 3.0\n"


def _answers_partial(cells):
    _no_kernels(cells)
    _wrong(cells, "q-naive-intensity", "q-sectors-naive", "q-sectors-coalesced")


def _answers_wrong(cells):
    _no_kernels(cells)
    _wrong(cells, *ANSWERS)


def _expressions(cells):
    _no_kernels(cells)
    cells["q-intensity"].source = "AI_4096 = 4096 / 6\n"
    cells["q-sectors-naive"].source = "SECTORS_NAIVE_A = 4 * 8\n"


def _syntax_error(cells):
    _no_kernels(cells)
    cells["q-ridge"].source = "RIDGE_H200 = (67 *\n"


def _answers_and(gid: str, code: str):
    """An edit: kernels not written yet (_no_kernels), and code added at the end of one answer cell."""
    def edit(cells):
        _no_kernels(cells)
        cells[gid].source += code
    return edit


_stderr = _answers_and("q-intensity", '\nimport sys\nprint("debug", AI_4096, file=sys.stderr)\n')
_extra_cell = _answers_and("q-ridge", "\nmy_scratch = [AI_4096, RIDGE_H200]\n")


# student -> edit (None: the reference). The first two compile their kernels.
def _unanswered(cells):
    _no_kernels(cells)
    for gid, var in ANSWERS.items():
        cells[gid].source = f"{var} = None  # YOUR ANSWER HERE\n"


CLASS = {"ref": None, "nobounds": naive_without_bounds_check, "unanswered": _unanswered,
         "answers-only": _no_kernels, "answers-partial": _answers_partial, "answers-wrong": _answers_wrong,
         "expressions": _expressions, "syntax-error": _syntax_error, "stderr": _stderr,
         "extra-cell": _extra_cell, "late": _no_kernels, "deleted-test": _no_kernels}
TIMESTAMPS = {"late": "2026-03-01 12:00:00.000000 UTC", "stderr": "2026-02-01 08:30:00.000000 UTC"}


def _env() -> dict:
    """This Python's scripts first on PATH (nbgrader calls `alembic`)."""
    return {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}


def _hand_in(course: Path, student: str, edit) -> Path:
    submit(course, LAB, student, edit)
    folder = course / "submitted" / student / LAB
    if student in TIMESTAMPS:
        (folder / "timestamp.txt").write_text(TIMESTAMPS[student])
    if student == "deleted-test":            # a test cell deleted: 0 points, needs manual grading
        path = folder / f"{NB}.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "q-ridge-test"]
        nbformat.write(nb, str(path))
    return folder


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """(pristine course with the class handed in and nothing graded, the same graded serially)."""
    base = tmp_path_factory.mktemp("class")
    pristine = base / "pristine"
    pristine.mkdir()
    new_course(pristine, [LAB])
    from nbgrader.apps import NbGraderAPI
    generate_assignment(NbGraderAPI(config=load_config(pristine)), LAB)
    for student, edit in CLASS.items():
        _hand_in(pristine, student, edit)
    serial = base / "serial"
    shutil.copytree(pristine, serial)
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", LAB, "--force"], cwd=serial, env=_env(),
                       capture_output=True, text=True, timeout=1800)
    print(f"serial nbgrader autograde of {len(CLASS)} submissions: {time.monotonic() - start:.0f} s")
    assert p.returncode == 0, failed_run(p)
    return pristine, serial


def _copy(course: Path, dest: Path, students=None) -> Path:
    shutil.copytree(course, dest, ignore=shutil.ignore_patterns(*(
        [s for s in CLASS if s not in students] if students else [])))
    return dest


def _autograde(course: Path, *args: str, env: dict | None = None, timeout: int = 1200):
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "grader", "autograde", str(course), LAB, *args], cwd=REPO,
                       env=env or _env(), capture_output=True, text=True, timeout=timeout)
    print(f"grader autograde {' '.join(args)}: {time.monotonic() - start:.0f} s\n{p.stdout}")
    return p


def gradebook_contents(course: Path, students=None) -> dict:
    """Everything autograde writes, per student: timestamp, late penalties, and each
    cell's auto_score, manual_score, needs_manual_grade, max_score and auto_comment."""
    out = {}
    with gradebook(course) as gb:
        for sub in gb.find_assignment(LAB).submissions:
            if students is not None and sub.student.id not in students:
                continue
            cells = {}
            for nb in sub.notebooks:
                cells[(nb.name, "late penalty")] = nb.late_submission_penalty
                for g in nb.grades:
                    cells[(nb.name, g.name)] = (g.auto_score, g.manual_score, g.needs_manual_grade, g.max_score)
                for c in nb.comments:
                    cells[(nb.name, c.name, "comment")] = c.auto_comment
            out[sub.student.id] = {"timestamp": sub.timestamp, "cells": cells, "score": sub.score}
    return out


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for student in want:
        assert got[student] == want[student], student


def _summary(course: Path) -> dict[str, dict]:
    with open(course / "class-autograde" / LAB / "summary.csv") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def _ledger(course: Path) -> dict:
    return json.loads((course / "class-autograde" / LAB / "ledger.json").read_text())


# ---- without grading anything ------------------------------------------------------------
def test_workers_and_gpus():
    assert [s.gpu for s in class_autograde.slots("none", 3)] == ["", "", ""]
    assert [s.gpu for s in class_autograde.slots("1,0", None)] == ["1", "0"]
    for bad, words in (("0,1,0", "twice"), ("0,,1", "indices"), ("0 1", "indices")):
        with pytest.raises(ValueError, match=words):
            class_autograde.slots(bad, None)
    assert [s.gpu for s in class_autograde.slots("0,1", 2)] == ["0", "1"]
    assert [s.gpu for s in class_autograde.slots("0", 3)] == ["0", "0", "0"]        # three workers share GPU 0
    assert all(s.shared for s in class_autograde.slots("0", 3))
    assert not any(s.shared for s in class_autograde.slots("0,1", None))             # one each: its own lock
    assert [s.gpu for s in class_autograde.slots("0,1", 3)] == ["0", "1", "0"]
    assert class_autograde.describe(class_autograde.slots("0", 3)).startswith("3 workers sharing GPU 0")
    with pytest.raises(ValueError, match="at least 1"):
        class_autograde.slots("0", 0)


def test_clear_errors(tmp_path, classes):
    pristine, _ = classes
    p = _autograde(tmp_path / "nowhere")
    assert p.returncode == 2 and "error: no course folder" in p.stdout and p.stderr == ""
    p = subprocess.run([sys.executable, "-m", "grader", "autograde", str(pristine), "no-such-lab"], cwd=REPO,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "error: no source folder" in p.stdout and p.stderr == "", p.stdout + p.stderr
    course = _copy(pristine, tmp_path / "course", ["ref"])
    state = course / "class-autograde" / LAB
    state.mkdir(parents=True)
    with open(state / "run.lock", "w") as held:              # a run of the assignment under way
        fcntl.flock(held, fcntl.LOCK_EX)
        p = _autograde(course)
    assert p.returncode == 2 and p.stdout.startswith(
        f"error: another `python -m grader autograde` of {LAB} is running on this course"), p.stdout + p.stderr


# ---- a class -----------------------------------------------------------------------------
def test_four_workers_give_the_serial_gradebook(classes, tmp_path):
    pristine, serial = classes
    course = _copy(pristine, tmp_path / "course")
    p = _autograde(course, "--workers", "4")
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    _assert_same(gradebook_contents(course), gradebook_contents(serial))
    want = gradebook_contents(serial)
    assert want["ref"]["score"] == REF_SCORE and want["unanswered"]["score"] == 0 and want["answers-only"]["score"] == 5
    assert want["deleted-test"]["cells"][(NB, "q-ridge-test")][2] is True          # needs manual grading
    for student in CLASS:                    # the autograded notebooks are in the course
        assert (course / "autograded" / student / LAB / f"{NB}.ipynb").exists(), student
    progress = [line for line in p.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == len(CLASS) and all("ETA" in line for line in progress), p.stdout
    rows = _summary(course)
    assert sorted(rows) == sorted(CLASS)
    assert all(r["status"] == "graded" and float(r["seconds"]) > 0 and r["gpu_seconds"] == "0.0"
               for r in rows.values()), rows
    assert float(rows["ref"]["score"]) == REF_SCORE and "slowest:" in p.stdout

    # Again: nothing is new. Then one submission changes, and only it is graded.
    p = _autograde(course, "--workers", "4")
    assert p.returncode == 0 and f"{len(CLASS)} submission(s), 0 to grade" in p.stdout, p.stdout
    _hand_in(course, "answers-wrong", _answers_partial)
    p = _autograde(course, "--workers", "4")
    assert p.returncode == 0 and f"{len(CLASS)} submission(s), 1 to grade" in p.stdout, p.stdout
    got = gradebook_contents(course)
    assert got["answers-wrong"] == {**want["answers-partial"], "timestamp": got["answers-wrong"]["timestamp"]}
    assert {s: got[s] for s in got if s != "answers-wrong"} == {s: want[s] for s in want if s != "answers-wrong"}
    assert _summary(course)["answers-wrong"]["status"] == "graded"
    assert _summary(course)["ref"]["status"] == "unchanged (graded)"


def test_two_workers_sharing_one_gpu_give_the_serial_gradebook(classes, tmp_path):
    """--gpus 0 --workers 2: two submissions graded at once on GPU 0, under its lock shared (on the emulator
    a lock file stands for the GPU's, and its holdings are logged; nothing is timed, so it is never held alone:
    tests/test_gpu_sharing.py holds timed sections)."""
    pristine, serial = classes
    students = ["ref", "answers-only"]
    course = _copy(pristine, tmp_path / "course", students)
    log = tmp_path / "held.log"
    env = {**_env(), "GRADER_GPU_LOCK": str(tmp_path / "gpu.lock"), "GRADER_GPU_LOCK_LOG": str(log)}
    p = _autograde(course, "--gpus", "0", "--workers", "2", env=env)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    assert "on 2 workers sharing GPU 0" in p.stdout, p.stdout
    _assert_same(gradebook_contents(course), gradebook_contents(serial, students))
    entries = _ledger(course)
    assert {r["gpu"] for r in entries.values()} == {"0"}
    spans = sorted((r["started"], r["ended"]) for r in entries.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans         # two at once on GPU 0
    held = [(m, float(s), float(e)) for m, s, e, _ in (line.split() for line in log.read_text().splitlines())]
    assert held and {h[0] for h in held} == {"shared"}, held
    holdings = sorted(h[1:] for h in held)
    assert any(b[0] < a[1] for a, b in zip(holdings, holdings[1:])), held      # held by two at once


@pytest.mark.slurm
def test_slurm_array_gives_the_serial_gradebook(classes, tmp_path):
    """Four of the class (a kernel compiled, a late one, a deleted test cell, a syntax error): what Slurm's
    array adds to the workers' grading is the same for any number of tasks."""
    pristine, serial = classes
    students = ["ref", "late", "deleted-test", "syntax-error"]
    course = _copy(pristine, tmp_path / "course", students)
    with local_slurm() as slurm:
        p = _autograde(course, "--slurm", "--sbatch-arg=--partition=no-such-partition", env={**_env(), **slurm.env})
        assert p.returncode == 2 and "error: sbatch did not submit the array: " in p.stdout, p.stdout + p.stderr
        assert "partition" in p.stdout.splitlines()[-1], p.stdout
        gpus = ["--gpus", "any"] if slurm.gpus else ["--gpus", "none"]
        p = _autograde(course, "--slurm", *gpus, env={**_env(), **slurm.env})
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr + slurm.logs()
    assert f"sbatch: a Slurm array of {len(students)} task(s)" in p.stdout
    _assert_same(gradebook_contents(course), gradebook_contents(serial, students))
    rows = _summary(course)
    assert all(r["status"] == "graded" for r in rows.values()), rows
    if slurm.gpus:                           # Slurm gave each task one of its (fake) GPUs
        assert all(r["gpu"] in slurm.gpus and float(r["gpu_seconds"]) > 0 for r in rows.values()), rows


# ---- failures, fake GPUs, a killed run ----------------------------------------------------
# answers only, and a cell that prints the GPU its worker was given
_probe = _answers_and("q-ridge", '\nimport os\nprint("CUDA_VISIBLE_DEVICES=" + os.environ["CUDA_VISIBLE_DEVICES"])\n')
_kills_its_worker = _answers_and("q-intensity", "\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n")
_hangs = _answers_and("q-intensity", "\nimport time\ntime.sleep(3600)\n")
_kernel_dies = _answers_and("q-intensity", "\nimport os\nos._exit(3)\n")


def _marked_processes(course: Path) -> list[int]:
    import psutil
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("GRADER_CLASS_JOB", "").startswith(str(course)):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def test_failures_fake_gpus_and_a_killed_run(classes, tmp_path):
    pristine, serial = classes
    good = ["answers-only", "answers-partial", "syntax-error"]
    course = _copy(pristine, tmp_path / "course", good)
    for student in ("answers-only", "answers-partial"):
        _hand_in(course, student, lambda cells, edit=CLASS[student]: (edit(cells), _probe(cells)))
    # Autograde grades from the notebook's text (grader.course.preprocessors): a kernel that dies ends its run, not
    # its grading; in the sandbox a cell cannot even reach its worker to kill it.
    from grader.platform.sandbox import mechanism
    survive = {"kernel-dies": _kernel_dies, **({"kills-worker": _kills_its_worker} if mechanism()[0] else {})}
    # Submissions are graded in the order of their students' names: the hanging one's comes last, so it starts
    # once the good ones have, and is still running when they are merged, however slow the machine.
    bad = {"waits": _hangs, **({} if mechanism()[0] else {"kills-worker": _kills_its_worker})}
    for student, edit in {**bad, **survive}.items():
        _hand_in(course, student, edit)
    gpus = ["--gpus", "7,3,5"]

    # A run killed once the good submissions are merged (the hanging one is still running, maybe more):
    # they stay, nothing is left running. (A good one takes 7 to 30 s on two busy cores.)
    killed_tmp = tmp_path / "killed-tmp"        # what the killed run cannot remove stays in the test's folder
    killed_tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "grader", "autograde", str(course), LAB, *gpus, "--timeout",
                             "300"], cwd=REPO, env={**_env(), "TMPDIR": str(killed_tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ledger = course / "class-autograde" / LAB / "ledger.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if ledger.exists() and set(good) <= {s for s, r in _ledger(course).items() if r["status"] == "graded"}:
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    out = proc.communicate()[0]
    recorded_before = _ledger(course)
    merged = {s for s, r in recorded_before.items() if r["status"] == "graded"}
    assert set(good) <= merged and "waits" not in recorded_before, out
    want = gradebook_contents(serial, good)
    got = gradebook_contents(course)
    assert {s: got[s] for s in merged & set(good)} == {s: want[s] for s in merged & set(good)}
    time.sleep(3)                            # a kernel notices its parent is gone within a second
    assert _marked_processes(course) == []

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _autograde(course, *gpus, "--timeout", "20", env={**_env(), "TMPDIR": str(tmp)})
    assert p.returncode == 1, p.stdout + p.stderr
    assert list(tmp.iterdir()) == []             # nor what a killed attempt's kernel made
    # (those that end early may have been recorded by the killed run; they are not graded again)
    total, recorded = len(good) + len(bad) + len(survive), len(recorded_before)
    assert f"{total} submission(s), {total - recorded} to grade" in p.stdout, p.stdout
    got = gradebook_contents(course)
    assert {s: got[s] for s in good} == want
    rows = _summary(course)
    assert all("failed" in rows[s]["status"] and rows[s]["attempts"] == "2" for s in bad), rows
    if "kills-worker" in bad:
        assert "killed by SIGKILL" in rows["kills-worker"]["reason"]
        assert "FAILED kills-worker (2 attempt(s))" in p.stdout
    assert rows["waits"]["status"] == "failed" and "no result within 20 s" in rows["waits"]["reason"]
    assert float(rows["waits"]["seconds"]) >= 40
    assert "FAILED waits" in p.stdout
    ledger_now = _ledger(course)
    for student in survive:                            # graded: their answers, like answers-only's
        assert ledger_now[student]["status"] == "graded", ledger_now[student]
        assert got[student]["score"] == want["answers-only"]["score"], (student, got[student])
    for student in bad:                                # no score, every graded cell flagged for a person
        cells = got[student]["cells"]
        assert all(v[0] is None and v[2] is True for k, v in cells.items() if len(k) == 2 and k[1] != "late penalty")
    assert _marked_processes(course) == []

    # Fake GPUs: each worker had one, the notebook saw it, and no two submissions overlapped on one.
    entries = _ledger(course)
    assert {r["gpu"] for r in entries.values()} <= {"7", "3", "5"}
    for student in ("answers-only", "answers-partial"):
        nb = nbformat.read(str(course / "autograded" / student / LAB / f"{NB}.ipynb"), as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert f"CUDA_VISIBLE_DEVICES={entries[student]['gpu']}\n" in text, student
    for gpu in ("7", "3", "5"):
        spans = sorted((r["started"], r["ended"]) for r in entries.values() if r["gpu"] == gpu)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (gpu, spans)


# ---- an interrupted Slurm run ------------------------------------------------------------
def _queued(slurm) -> list[str]:
    p = subprocess.run(["squeue", "-h", "-o", "%i %t"], env={**_env(), **slurm.env}, capture_output=True, text=True,
                       timeout=60)
    return p.stdout.split()


def _sigint_as_at_a_terminal() -> None:
    """Ctrl-C's signal as a command typed at a terminal gets it, not ignored as under a background job
    (`pytest &` passes SIGINT ignored to every process it starts, and Python leaves an ignored SIGINT so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slurm
def test_an_interrupted_slurm_run_cancels_its_array(classes, tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group), then `kill` (SIGTERM to the run alone), while the
    array's tasks grade: each time the array is cancelled before the run ends, and no task of it is left to
    grade beside the next run's."""
    pristine, _ = classes
    course = _copy(pristine, tmp_path / "course", ["answers-only"])
    _hand_in(course, "waits", _hangs)
    with local_slurm() as slurm:
        env = {**_env(), **slurm.env}
        for signum, group in ((signal.SIGINT, True), (signal.SIGTERM, False)):
            proc = subprocess.Popen([sys.executable, "-m", "grader", "autograde", str(course), LAB, "--slurm",
                                     "--gpus", "none"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                    preexec_fn=_sigint_as_at_a_terminal)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None and "R" not in _queued(slurm):
                time.sleep(0.5)
            assert "R" in _queued(slurm), (signum, proc.communicate()[0] + slurm.logs())
            (os.killpg if group else os.kill)(proc.pid, signum)
            out = proc.communicate(timeout=300)[0]
            assert proc.returncode == 130, (signum, out)
            assert "the array's tasks are cancelled" in out and out.rstrip().endswith(
                "interrupted: what was graded is in the gradebook; the same command grades the rest"), (signum, out)
            assert _queued(slurm) == [] and _marked_processes(course) == [], (signum, _queued(slurm), out)
            ledger = course / "class-autograde" / LAB / "ledger.json"
            assert not ledger.exists() or "waits" not in _ledger(course), out      # not recorded as its failure

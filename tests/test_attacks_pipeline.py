"""Submissions that attack the grader, graded with an honest one in one class of lab 0: by one `nbgrader
autograde` run and by `python -m grader autograde --workers 2`, with the grader as root and as an
ordinary user. Each scores exactly what its answers deserve, no other student's score changes, nobody
gets a manual score, nothing leaks into a notebook, and the instructor is told what each one tried.

  honest       the numeric answers and gflops() right (graded first: the attackers try to zero it)
  cell-attack  the same answers, and a cell that unmounts what hides the gradebook, remounts /
               read-write and gives itself full manual scores, then prints the source notebook (its
               hidden tests) and every other student's notebook it can find
  host-attack  the same answers, gflops() beside a class whose body does the same when the function
               is loaded (in the kernel, in the autograde's checks, in `grader regrade`), zeroing
               every score it can reach

Then `grader regrade` (as root, on the class graded serially): runs nothing of a notebook where it
could write the gradebook, finds no difference, says what each attacker tried, reads the notebook that
autograde graded (not one edited since), and names the student and cell of a score forged in the gradebook.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import warm_cache

pytest.importorskip("nbgrader")

from nbgrader_course import (  # noqa: E402
    REPO,
    autograded_notebook,
    cell_scores,
    failed_run,
    generate_assignment,
    gradebook,
    load_config,
    new_course,
    on_release,
    solution_cells,
    submit,
)

from grader.platform import sandbox  # noqa: E402

pytestmark = pytest.mark.pipeline

LAB, NB = "00-pycuda-by-hand", "pycuda-by-hand"
ANSWERED = ("q-blocks", "q-idle", "q-bytes", "q-gflops", "gflops")
# What every submission of the class deserves: the four numbers and gflops(); matmul and time_matmul blank.
DESERVED = {"q-blocks-test": 1.0, "q-idle-test": 1.0, "q-bytes-test": 1.0, "q-gflops-test": 1.0, "gflops-test": 1.0,
            "matmul-correct-test": 0.0, "matmul-float64-test": 0.0, "timing-form-test": 0.0,
            "timing-plausible-test": 0.0}
SECRET = "honest-students-own-words-5e1f"
ORDINARY_UID = 4242


def _payload(course: Path, indent: str = "") -> str:
    """What a hostile cell or class body runs: unmount, remount, write the gradebook, read the answers."""
    gb = str(course / "gradebook.db")
    lines = ["import ctypes as _c, glob as _g, sqlite3 as _s",
             "_libc = _c.CDLL(None, use_errno=True)",
             f"_libc.umount2({gb.encode()!r}, 2)",
             "_libc.mount(None, b'/', None, 32 | 4096, None)",
             "try:",
             f"    _db = _s.connect({gb!r}, timeout=2)",
             "    _db.execute('UPDATE grade SET manual_score = 12, auto_score = 0')",
             "    _db.commit()",
             "    print('FORGED')",
             "except Exception as _e:",
             "    print('no gradebook:', type(_e).__name__)",
             f"for _p in _g.glob({str(course)!r} + '/**/*.ipynb', recursive=True):",
             "    print('LEAK', _p, open(_p).read()[:100000])"]
    return "\n".join(indent + line for line in lines) + "\n"


def _answers(payload: str | None = None, gflops: str | None = None, words: str = ""):
    @on_release
    def edit(cells):
        answers = solution_cells(LAB)
        for gid in ANSWERED:
            cells[gid].source = answers[gid]
        if gflops:
            cells["gflops"].source = gflops
        cells["q-blocks"].source += words
    edit.extra_cells = [payload] if payload else []
    return edit


def make_class(course: Path) -> Path:
    """The course with lab 0 released and the three submissions handed in (the payloads aim at it)."""
    from nbgrader.apps import NbGraderAPI
    course.mkdir(parents=True)
    new_course(course, [LAB])
    generate_assignment(NbGraderAPI(config=load_config(course)), LAB)
    host = ("class Loaded:\n" + _payload(course, "    ") +
            "\n\ndef gflops(M, N, K, seconds):\n    return 2 * M * N * K / seconds / 1e9\n")
    for student, edit in (("a-honest", _answers(words=f"\n# {SECRET}\n")),
                          ("b-cell-attack", _answers(payload=_payload(course))),
                          ("c-host-attack", _answers(gflops=host))):
        submit(course, LAB, student, edit)
    return course


def _env(home: Path) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(REPO), "GRADER_BACKEND": "emulator", "HOME": str(home),
            "TMPDIR": str(home), "GRADER_EMULATOR_CACHE": str(warm_cache(home / "emulator-cache")),
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}


def run_grader(user: str, course: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`command` as the grader: root (this process), or an ordinary user who owns the course."""
    env = _env(course.parent / f"home-{user}")
    if user == "ordinary":
        if os.geteuid() != 0:
            pytest.skip("only root can run the grader as another user")
        if shutil.which("bwrap") is None:
            pytest.skip("an ordinary user's sandbox is bubblewrap's, and it is not installed")
        plan = sandbox.plan([str(course.parent)], str(cwd), uid=ORDINARY_UID, network=True)
        sandbox._give(str(course.parent), ORDINARY_UID)
        command = [sys.executable, "-I", str(sandbox.HELPER), json.dumps(plan), *command]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


def assert_deserved(course: Path) -> None:
    for student in ("a-honest", "b-cell-attack", "c-host-attack"):
        assert cell_scores(course, LAB, student) == DESERVED, student
    with gradebook(course) as gb:
        manual = [(s.student.id, g.name) for s in gb.find_assignment(LAB).submissions for nb in s.notebooks
                  for g in nb.grades if g.manual_score is not None]
    assert manual == []
    setup = next(c for c in autograded_notebook(course, LAB, "a-honest").cells if c.get("id") == "setup")
    assert [o for o in setup.outputs if o.output_type == "error"] == [], setup.outputs    # the grader imports
    for student in ("b-cell-attack", "c-host-attack"):
        printed = json.dumps([c.get("outputs", []) for c in autograded_notebook(course, LAB, student).cells])
        for leak in ("FORGED", "LEAK", SECRET, "HIDDEN TESTS"):
            assert leak not in printed, (student, leak)


@pytest.fixture(scope="module")
def serial_root(tmp_path_factory):
    """The class graded by one `nbgrader autograde` run, as root (or as whoever runs the tests)."""
    course = make_class(tmp_path_factory.mktemp("serial-root") / "course")
    p = run_grader("root", course, [sys.executable, "-m", "nbgrader", "autograde", LAB, "--force"], course)
    assert p.returncode == 0, failed_run(p)
    return course, p.stdout + p.stderr


@pytest.mark.parametrize("user", ["root", "ordinary"])
@pytest.mark.parametrize("how", ["nbgrader", "workers"])
def test_attacks_score_what_they_deserve(how, user, tmp_path, serial_root):
    if how == "nbgrader" and user == "root":
        course, log = serial_root
    else:
        course = make_class(tmp_path / "course")
        if how == "nbgrader":
            command, cwd = [sys.executable, "-m", "nbgrader", "autograde", LAB, "--force"], course
        else:
            command, cwd = [sys.executable, "-m", "grader", "autograde", str(course), LAB, "--workers", "2"], REPO
        p = run_grader(user, course, command, cwd)
        assert p.returncode == 0, failed_run(p)
        log = p.stdout + p.stderr
    assert_deserved(course)
    for student in ("b-cell-attack", "c-host-attack"):
        assert f"{student} tried something" in log or f"FLAGGED {student}" in log, log[-3000:]
    assert "FLAGGED a-honest" not in log and "a-honest tried" not in log
    if how == "workers":
        with open(course / "class-autograde" / LAB / "summary.csv") as f:
            flagged = {line.split(",")[0] for line in f.read().splitlines()[1:] if "uses" in line}
        assert flagged == {"b-cell-attack", "c-host-attack"}


def test_regrade_runs_nothing_that_writes_and_names_what_differs(serial_root, tmp_path):
    course, _ = serial_root
    course = Path(shutil.copytree(course, tmp_path / "course", symlinks=True))

    def regrade() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "grader", "regrade", str(course), LAB, "--differences"],
                              cwd=REPO, env=_env(tmp_path / "home"), capture_output=True, text=True, timeout=1800)

    # The payloads aim at the serial course's gradebook: point them at this copy's.
    for student in ("b-cell-attack", "c-host-attack"):
        for folder in ("submitted", "autograded"):
            path = course / folder / student / LAB / f"{NB}.ipynb"
            path.write_text(path.read_text().replace(str(serial_root[0]), str(course)))
    p = regrade()
    assert p.returncode == 0 and "0 score(s) differ" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
    tried = re.findall(r"^TRIED (\S+): (.*)$", p.stdout, re.M)          # the summary's lines, one per student
    assert sorted(student for student, _ in tried) == ["b-cell-attack", "c-host-attack"], p.stdout[-3000:]
    assert all("gradebook" in what and "mount" in what for _, what in tried), tried
    assert_deserved(course)

    # A submitted notebook edited after autograde: regrade reads the one autograde graded.
    submitted = course / "submitted" / "a-honest" / LAB / f"{NB}.ipynb"
    submitted.write_text(submitted.read_text().replace("GFLOPS_4096 = ", "GFLOPS_4096 = 1 + "))
    # A score forged in the gradebook: named with its student and cell.
    with gradebook(course) as gb:
        gb.find_grade("q-idle-test", NB, LAB, "a-honest").auto_score = 0.0
        gb.db.commit()
    p = regrade()
    assert p.returncode == 1, p.stdout[-3000:]
    assert "1 score(s) differ from the gradebook: a-honest/q-idle-test" in p.stdout, p.stdout[-3000:]


def test_the_class_merge_takes_scores_from_what_was_computed(serial_root, tmp_path):
    """A worker's gradebook with a score that GradeFromSource did not compute (something else wrote it),
    and a cell it did not score at all: the course gets the computed score, no automatic points for the
    other cell, both flagged for manual grading and named."""
    from grader.course import gradebook_merge
    course, _ = serial_root
    worker, target = tmp_path / "worker.db", tmp_path / "course.db"
    shutil.copy(course / "gradebook.db", worker)
    shutil.copy(course / "gradebook.db", target)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{worker}", course_id="sgemm-lab") as gb:
        gb.find_grade("q-idle-test", NB, LAB, "b-cell-attack").auto_score = 1.0
        gb.find_grade("gflops-test", NB, LAB, "b-cell-attack").auto_score = 1.0
        gb.db.commit()
    computed = {g: s for g, s in DESERVED.items() if g != "gflops-test"}
    computed["q-idle-test"] = 0.0
    with Gradebook(f"sqlite:///{target}", course_id="sgemm-lab") as gb:
        flagged = gradebook_merge.merge_submission(gb, f"sqlite:///{worker}", LAB, "b-cell-attack",
                                                   {NB: {"scores": computed, "tried": ["cell 3 uses mount"]}})
        idle = gb.find_grade("q-idle-test", NB, LAB, "b-cell-attack")
        gflops = gb.find_grade("gflops-test", NB, LAB, "b-cell-attack")
        blocks = gb.find_grade("q-blocks-test", NB, LAB, "b-cell-attack")
        assert (idle.auto_score, idle.needs_manual_grade) == (0.0, True)
        assert (gflops.auto_score, gflops.needs_manual_grade) == (0.0, True)
        assert (blocks.auto_score, blocks.needs_manual_grade) == (1.0, False)
    assert any("q-idle-test" in f and "computed 0" in f for f in flagged), flagged
    assert f"{NB}/cell 3 uses mount" in flagged

"""A temporary nbgrader course for the pipeline tests: the repository's
nbgrader_config.py and some labs copied in, the labs' release copies
generated, submissions handed in (the release copy filled from the source
notebook's solutions, then edited) and autograded; then what the gradebook
and the autograded notebooks say.

A submission's edit: None (the reference: every answer from the source
notebook), False (the blank release copy), or a function of the notebook's
cells by grade_id, which may carry `on_release` (edit the blank copy instead),
`drop` (grade_ids of cells to delete) and `extra_cells` (sources of code cells
to add at the end).

A submission's notebook runs in the sandboxed kernel (SandboxedExecute) only where a test needs it run
(its outputs, or what its cells do when run); the others are graded from their text alone, as autograde
grades every test cell after the run (GradeFromSource), so their scores and test cells' outputs are the
same.
"""
from __future__ import annotations

import atexit
import copy
import functools
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

import grader
from grader.course.static_values import code_cells, read_values
from grader.course.student import succeeded
from grader.grading import registry
from grader.grading.host_functions import source_from_cells
from grader.programs.check import kernel_source_from_notebook

REPO = Path(__file__).resolve().parent.parent
COURSE_ID = "sgemm-lab"


def failed_run(p) -> str:
    """What to show of a command that failed: its first traceback (nbgrader logs one long before its last
    line says which submission failed), then the end of its output."""
    out = p.stdout + p.stderr
    start = out.find("Traceback")
    return (out[start:start + 4000] + "\n...\n" if start >= 0 else "") + out[-2000:]


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def notebook_name(lab: str) -> str:
    """The name (without .ipynb) of the lab's one notebook."""
    (notebook,) = (REPO / "labs" / lab).glob("*.ipynb")
    return notebook.stem


def source_notebook(lab: str):
    return nbformat.read(str(REPO / "labs" / lab / f"{notebook_name(lab)}.ipynb"), as_version=4)


def points(lab: str) -> dict[str, float]:
    """The source notebook's graded cells and their points."""
    return {grade_id(c): c.metadata["nbgrader"]["points"] for c in source_notebook(lab).cells
            if c.metadata.get("nbgrader", {}).get("grade")}


def solution_cells(lab: str) -> dict[str, str]:
    """The source notebook's answer cells by grade_id, solutions included."""
    return {grade_id(c): c.source for c in source_notebook(lab).cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def load_config(course: Path):
    from traitlets.config.loader import PyFileConfigLoader
    c = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()   # raises on a broken config
    c.CourseDirectory.root = str(course)
    return c


def on_release(edit):
    """Mark an edit as one of the blank release copy (no answers filled in)."""
    edit.on_release = True
    return edit


def submit(course: Path, lab: str, student: str, edit=None) -> None:
    """Hand in the release copy with every answer cell filled in from the source notebook, then edit(cells)."""
    name = notebook_name(lab)
    nb = nbformat.read(str(course / "release" / lab / f"{name}.ipynb"), as_version=4)
    if getattr(edit, "on_release", False):
        edit({grade_id(c): c for c in nb.cells})
    elif edit is not False:
        sol = solution_cells(lab)
        for c in nb.cells:
            if grade_id(c) in sol:
                c.source = sol[grade_id(c)]
        if edit:
            edit({grade_id(c): c for c in nb.cells})
    nb.cells = [c for c in nb.cells if grade_id(c) not in getattr(edit, "drop", ())]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in getattr(edit, "extra_cells", [])]
    dest = course / "submitted" / student / lab
    dest.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest / f"{name}.ipynb"))


def replace(cell, old: str, new: str, once: bool = False) -> None:
    """Replace old (which must be in the cell; with once, exactly once) by new in a cell's source."""
    if once:
        assert cell.source.count(old) == 1, old
    else:
        assert old in cell.source, old
    cell.source = cell.source.replace(old, new)


@functools.lru_cache(maxsize=None)
def _empty_gradebook() -> Path:
    """An empty gradebook of the course, made once per process: nbgrader runs alembic (seconds of CPU)
    for every gradebook it creates."""
    from nbgrader.api import Gradebook
    folder = tempfile.mkdtemp(prefix="gradebook-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder, "gradebook.db")
    with Gradebook(f"sqlite:///{path}", course_id=COURSE_ID):
        pass
    return path


def new_course(course: Path, labs) -> Path:
    """The folder made a course: the repository's nbgrader_config.py, the labs' source notebooks and an
    empty gradebook."""
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy(_empty_gradebook(), course / "gradebook.db")
    for lab in labs:
        shutil.copytree(REPO / "labs" / lab, course / "labs" / lab,
                        ignore=shutil.ignore_patterns("*.py", "__pycache__", ".ipynb_checkpoints"))
    return course


def without_running(config):
    """The course's config with an autograde that grades the notebook as handed in, without running it
    (no SandboxedExecute): the other preprocessors as configured."""
    config = copy.deepcopy(config)
    steps = config.Autograde.autograde_preprocessors
    kept = [p for p in steps if not p.endswith(".SandboxedExecute")]
    assert len(kept) == len(steps) - 1, steps
    config.Autograde.autograde_preprocessors = kept
    return config


def generate_assignment(api, lab: str) -> None:
    r = api.generate_assignment(lab, force=True)
    succeeded(r, f"{lab}: generate_assignment")
    assert "Exception while loading config file" not in (r.get("log") or "")


@contextmanager
def grading_environment():
    """The notebooks' kernels import this repository's grader and use this process's backend; restored after."""
    old_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "GRADER_BACKEND")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in (old_env["PYTHONPATH"] or "").split(
        os.pathsep) if p])
    os.environ["GRADER_BACKEND"] = grader.BACKEND.name
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        yield
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def graded_course(course: Path, submissions: dict[str, dict], run=None):
    """For each lab of {lab: {student: edit}}: its release copy generated, every submission handed in, then each
    autograded (in the grading environment, kept until the end): the (lab, student) pairs in `run` (every one
    when None) run in the sandboxed kernel first, the others are graded from their text (without_running).
    Yields the NbGraderAPI and the seconds each autograde took, by (lab, student)."""
    from nbgrader.apps import NbGraderAPI
    with grading_environment():
        api = NbGraderAPI(config=load_config(course))
        from_text = NbGraderAPI(config=without_running(load_config(course)))
        seconds = {}
        for lab, edits in submissions.items():
            generate_assignment(api, lab)
            for student, edit in edits.items():
                submit(course, lab, student, edit)
            for student in edits:
                start = time.monotonic()
                runs = run is None or (lab, student) in run
                r = (api if runs else from_text).autograde(lab, student, force=True)
                seconds[(lab, student)] = time.monotonic() - start
                succeeded(r, f"{lab}/{student}: autograde")
        yield api, seconds


def lab_course(lab: str, submissions: dict, run=None):
    """A module-scoped fixture `course`: a course holding the lab alone, its submissions {student: edit}
    autograded (graded_course), the notebooks of the students in `run` (every one when None) run first."""
    @pytest.fixture(scope="module")
    def course(tmp_path_factory):
        """The course folder: the lab alone, its submissions autograded."""
        course = new_course(tmp_path_factory.mktemp("course"), [lab])
        with graded_course(course, {lab: submissions}, None if run is None else {(lab, s) for s in run}):
            yield course
    return course


@contextmanager
def gradebook(course: Path):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gb:
        yield gb


def cell_scores(course: Path, lab: str, student: str) -> dict[str, float]:
    """Each graded cell's score, by grade_id."""
    with gradebook(course) as gb:
        nb = gb.find_submission_notebook(notebook_name(lab), lab, student)
        return {g.name: g.score for g in nb.grades}


def submission_score(course: Path, lab: str, student: str) -> float:
    with gradebook(course) as gb:
        return gb.find_submission(lab, student).score


def autograded_notebook(course: Path, lab: str, student: str):
    return nbformat.read(str(course / "autograded" / student / lab / f"{notebook_name(lab)}.ipynb"), as_version=4)


def cell_output(course: Path, lab: str, student: str, cell: str, shown: bool = False, errors: bool = False) -> str:
    """What a cell (by grade_id, or id where it has none) of an autograded notebook printed; with shown, the
    values it displayed (text/plain) too, with errors the errors it raised ('name: value')."""
    found = next(c for c in autograded_notebook(course, lab, student).cells if (grade_id(c) or c.get("id")) == cell)
    parts = []
    for o in found.outputs:
        parts.append(o.get("text", ""))            # stream outputs only have text
        if shown:
            parts.append(str(o.get("data", {}).get("text/plain", "")))
        if errors and o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)


def stderr_in_graded_cells(course: Path, lab: str, student: str) -> list:
    """The stderr outputs of an autograded notebook's graded cells."""
    return [o for c in autograded_notebook(course, lab, student).cells if c.metadata.get("nbgrader", {}).get("grade")
            for o in c.outputs if o.output_type == "stream" and o.name == "stderr"]


def naive_without_bounds_check(cells) -> None:
    """A lab 1 submission (graded by two tests): the naive kernel without its bounds check."""
    replace(cells["naive-kernel"], "    if (row < M && col < N) {", "    {")


def reference_answer(lab: str, exercise: str) -> str:
    """The reference answer of an exercise: the source notebook's cell that grades it, as grader check reads
    it (a kernel's source, or a host function with what it uses from the notebook)."""
    notebook = next((REPO / "labs" / lab).glob("*.ipynb"))
    if registry.get(exercise).host_function is None:
        return kernel_source_from_notebook(notebook, exercise)[1]
    cells = [c.source for c in code_cells(nbformat.read(str(notebook), as_version=4))]
    return source_from_cells(cells, read_values(cells).values)

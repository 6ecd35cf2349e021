"""An nbgrader course's gradebook, read for `python -m grader regrade`: the
submitted notebooks of an assignment, each with its graded cells, their test
cells' sources (from the gradebook, not from the notebook, where a student
could have edited them) and the scores that autograding recorded.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class GradedCell:
    name: str              # nbgrader's grade_id
    max_score: float
    test_source: str       # the test cell as the instructor wrote it
    score: float | None    # what autograding recorded


@dataclass
class SubmittedNotebook:
    student: str
    name: str
    path: Path


@dataclass(frozen=True)
class CourseSettings:
    db_url: str
    course_id: str
    submitted_directory: str


def settings(course: Path) -> CourseSettings:
    """From the course's nbgrader_config.py (nbgrader's defaults without one)."""
    from traitlets.config.loader import PyFileConfigLoader  # traitlets comes with nbgrader (instructor extra)
    course = Path(course).resolve()
    cd = {}
    if (course / "nbgrader_config.py").exists():
        c = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        cd = c.CourseDirectory if "CourseDirectory" in c else {}
    return CourseSettings(cd.get("db_url") or f"sqlite:///{course / 'gradebook.db'}",
                          cd.get("course_id") or "default_course", cd.get("submitted_directory", "submitted"))


@contextlib.contextmanager
def opened(course: Path):
    from nbgrader.api import Gradebook  # nbgrader: the "instructor" extra
    s = settings(course)
    with Gradebook(s.db_url, course_id=s.course_id) as gb:
        yield gb


def submissions(gb, course: Path, assignment: str, students: list[str] | None = None) -> list[SubmittedNotebook]:
    """Every (student, notebook) submission of the assignment, in order; their
    cells are read by `graded_cells`."""
    course = Path(course).resolve()
    s = settings(course)
    a = gb.find_assignment(assignment)
    return [SubmittedNotebook(sub.student.id, nb.name,
                              course / s.submitted_directory / sub.student.id / assignment / f"{nb.name}.ipynb")
            for sub in sorted(a.submissions, key=lambda x: x.student.id)
            if not students or sub.student.id in students
            for nb in a.notebooks]


def graded_cells(gb, assignment: str, submission: SubmittedNotebook) -> list[GradedCell]:
    """The notebook's graded cells with their test sources and recorded scores.
    Raises nbgrader's MissingEntry when the gradebook lacks one."""
    nb = gb.find_notebook(submission.name, assignment)
    return [GradedCell(gc.name, gc.max_score, gb.find_source_cell(gc.name, nb.name, assignment).source,
                       gb.find_grade(gc.name, nb.name, assignment, submission.student).score)
            for gc in nb.grade_cells]

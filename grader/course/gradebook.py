"""An nbgrader course's gradebook, read for `python -m grader regrade`: the
notebooks autograde graded (the submitted ones where there are none), each
with its graded cells, their test cells' sources (from the gradebook, not
from the notebook, where a student could have edited them) and the scores
that autograding recorded; and what of a course no student's code may see
(`course_paths`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from grader.course import class_grading


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


@contextlib.contextmanager
def opened(course: Path):
    from nbgrader.api import Gradebook  # nbgrader: the "instructor" extra
    cd = class_grading.course_directory(Path(course).resolve())
    with Gradebook(cd.db_url, course_id=cd.course_id or "default_course") as gb:
        yield gb


def course_paths(cd) -> list[Path]:
    """What no student's code may see of a course (an nbgrader CourseDirectory): its gradebook, its source,
    release and solution folders, every student's submitted, autograded and feedback folders, and the
    class command's state (its scratch courses and ledger)."""
    root = Path(cd.root).resolve()
    folders = [cd.source_directory, cd.release_directory, cd.solution_directory, cd.submitted_directory,
               cd.autograded_directory, cd.feedback_directory, class_grading.STATE_FOLDER]
    db = class_grading.sqlite_path(cd.db_url)
    return [root / f for f in folders] + ([db] if db is not None else [])


def protected_paths(course: Path) -> list[Path]:
    return course_paths(class_grading.course_directory(Path(course).resolve()))


def _graded_notebook(cd, student: str, assignment: str, name: str) -> Path:
    """The notebook autograde graded (hidden tests restored, edited read-only cells put back), else the
    submitted one."""
    for folder in (cd.autograded_directory, cd.submitted_directory):
        path = Path(cd.format_path(folder, student, assignment)) / f"{name}.ipynb"
        if path.exists():
            return path
    return path


def submissions(gb, course: Path, assignment: str, students: list[str] | None = None) -> list[SubmittedNotebook]:
    """Every (student, notebook) submission of the assignment, in order; their
    cells are read by `graded_cells`."""
    cd = class_grading.course_directory(Path(course).resolve())
    a = gb.find_assignment(assignment)
    return [SubmittedNotebook(sub.student.id, nb.name, _graded_notebook(cd, sub.student.id, assignment, nb.name))
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

"""A worker's gradebook merged into the course's, for `python -m grader autograde`.

Each worker's `nbgrader autograde` wrote one student's submission into its own
SQLite copy of the course gradebook (grader.course.class_grading). What autograde
writes is copied into the course's gradebook, in one transaction per
submission, by the one process that writes it: the submission's timestamp,
each notebook's late penalty, each graded cell's auto_score and
needs_manual_grade, each cell's auto_comment. Manual scores and comments, extra
credit, flags and extensions are the graders' and stay as they are (nbgrader's
SaveAutoGrades already saw the manual scores in the worker's copy).
"""
from __future__ import annotations

import contextlib
import warnings


@contextlib.contextmanager
def _quiet():
    """nbgrader 0.9's add_submission makes SQLAlchemy 2 warn ("not in session",
    nbgrader's own autograde prints it too): not ours to show an instructor."""
    from sqlalchemy.exc import SAWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        yield


def merge_submission(course_gb, worker_db_url: str, assignment: str, student: str) -> None:
    """Copy the worker's autograde results of one submission into `course_gb` (an open Gradebook)."""
    from nbgrader.api import Gradebook
    with _quiet(), Gradebook(worker_db_url, course_gb.course_id) as worker:
        done = worker.find_submission(assignment, student)
        course_gb.update_or_create_student(student)
        target = course_gb.update_or_create_submission(assignment, student)
        target.timestamp = done.timestamp
        for nb in done.notebooks:
            into = course_gb.find_submission_notebook(nb.name, assignment, student)
            into.late_submission_penalty = nb.late_submission_penalty
            grades = {g.name: g for g in into.grades}
            for g in nb.grades:
                grades[g.name].auto_score = g.auto_score
                grades[g.name].needs_manual_grade = g.needs_manual_grade
            comments = {c.name: c for c in into.comments}
            for c in nb.comments:
                comments[c.name].auto_comment = c.auto_comment
        course_gb.db.commit()


def mark_failed(course_gb, assignment: str, student: str) -> None:
    """A submission that could not be graded: no automatic score, every graded
    cell flagged for manual grading (an earlier grade was for other files)."""
    with _quiet():
        course_gb.update_or_create_student(student)
        sub = course_gb.update_or_create_submission(assignment, student)
        for nb in sub.notebooks:
            for g in nb.grades:
                g.auto_score = None
                g.needs_manual_grade = True
        course_gb.db.commit()

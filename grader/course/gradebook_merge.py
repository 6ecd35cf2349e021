"""A worker's gradebook merged into the course's, for `python -m grader autograde`.

Each worker's `nbgrader autograde` wrote one student's submission into its own
SQLite copy of the course gradebook (grader.course.class_grading). What autograde
writes is copied into the course's gradebook, in one transaction per
submission, by the one process that writes it: the submission's timestamp,
each notebook's late penalty, each cell's auto_comment, and each graded cell's
score as GradeFromSource computed it (its record, written by the worker's
nbgrader, never by the student's processes). A graded cell it did not score
(a test cell deleted, or another kind of test) gets no automatic points and is
flagged for manual grading, whatever the worker's copy says; a worker's score
that differs from the record (something else wrote that copy) is flagged too.
Manual scores and comments, extra credit, flags and extensions are the
graders' and stay as they are.
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


def merge_submission(course_gb, worker_db_url: str, assignment: str, student: str, record: dict) -> list[str]:
    """Copy the worker's autograde results of one submission into `course_gb` (an open Gradebook), the
    scores from `record` (GradeFromSource's: {notebook: {"scores": {cell: score}, "tried": [...]}}).
    Returns what needs an instructor's eyes: what the submission tried, the cells whose score in the
    worker's copy is not the one computed."""
    from nbgrader.api import Gradebook
    flagged = []
    with _quiet(), Gradebook(worker_db_url, course_gb.course_id) as worker:
        done = worker.find_submission(assignment, student)
        course_gb.update_or_create_student(student)
        target = course_gb.update_or_create_submission(assignment, student)
        target.timestamp = done.timestamp
        for nb in done.notebooks:
            computed = record.get(nb.name, {})
            scores = computed.get("scores", {})
            flagged += [f"{nb.name}/{t}" for t in computed.get("tried", [])]
            into = course_gb.find_submission_notebook(nb.name, assignment, student)
            into.late_submission_penalty = nb.late_submission_penalty
            grades = {g.name: g for g in into.grades}
            for g in nb.grades:
                grade = grades[g.name]
                if g.name in scores:
                    grade.auto_score = scores[g.name]
                    grade.needs_manual_grade = grade.manual_score is not None or g.needs_manual_grade
                    if g.auto_score is None or abs(g.auto_score - scores[g.name]) > 1e-9:
                        grade.needs_manual_grade = True
                        flagged.append(f"{nb.name}/{g.name}: the worker's gradebook said {g.auto_score}, "
                                       f"computed {scores[g.name]:g}")
                else:
                    grade.auto_score = None if g.auto_score is None else 0.0
                    grade.needs_manual_grade = True
            comments = {c.name: c for c in into.comments}
            for c in nb.comments:
                comments[c.name].auto_comment = c.auto_comment
        course_gb.db.commit()
    return flagged


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

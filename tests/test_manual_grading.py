"""A cell autograde cannot grade is a person's to grade: GradeFromSource gives it 0 with the reason (a value
it cannot read from the text, a grader error: never the student's fault) and leaves it out of its record,
and SaveAutoGrades flags it for manual grading in the gradebook; the cells it graded are not flagged."""
from __future__ import annotations

import json

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from grader.course import regrade  # noqa: E402
from grader.course.preprocessors import GradeFromSource, SaveAutoGrades  # noqa: E402
from grader.grading.report import CheckReport, CheckResult  # noqa: E402

CELLS = {   # grade_id: the test cell
    "right-answer": "grader.grade_answer(AI, 8.0, points=2, rtol=0.01)",
    "unreadable": "grader.grade_answer(COMPUTED, 1.0, points=1)",
    "grader-fails": 'grader.grade("naive", KERNEL_SOURCE, "correctness", points=3)',
}


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("AI = 2 * 4.0\nCOMPUTED = some_function()\nKERNEL_SOURCE = '__global__'"))
    for grade_id, source in CELLS.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                     "points": 3, "schema_version": 3}
        nb.cells.append(cell)
    return nb


def test_cells_autograde_cannot_grade_go_to_a_person(tmp_path, monkeypatch):
    def failing_check(exercise, submission, checks, announce=True):
        return CheckReport(exercise, [CheckResult.grader_error(checks[0], "the grading process could not start")])

    monkeypatch.setattr(regrade.frontend, "check", failing_check)
    monkeypatch.setattr("grader.course.preprocessors.grade_from_source.protect_course", lambda config: None)
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db) as gb:
        gb.add_assignment("lab")
        gb.add_notebook("nb", "lab")
        for grade_id in CELLS:
            gb.add_grade_cell(grade_id, "nb", "lab", max_score=3, cell_type="code")
        gb.add_student("ada")
        gb.add_submission("lab", "ada")
    resources = {"nbgrader": {"notebook": "nb", "assignment": "lab", "student": "ada", "db_url": db}}
    record = tmp_path / "record.json"
    nb, resources = GradeFromSource(record=str(record)).preprocess(_notebook(), resources)
    nb, resources = SaveAutoGrades().preprocess(nb, resources)

    outputs = {c.metadata["nbgrader"]["grade_id"]: "".join(o.get("text", "") for o in c.outputs)
               for c in nb.cells if "nbgrader" in c.metadata}
    assert "grader error" in outputs["grader-fails"] and "not your code's fault" in outputs["grader-fails"]
    assert "could not read" in outputs["unreadable"]
    assert json.loads(record.read_text())["nb"]["scores"] == {"right-answer": 2.0}
    with Gradebook(db) as gb:
        grades = {g: gb.find_grade(g, "nb", "lab", "ada") for g in CELLS}
        assert grades["right-answer"].auto_score == 2 and not grades["right-answer"].needs_manual_grade
        for grade_id in ("unreadable", "grader-fails"):
            assert grades[grade_id].auto_score == 0 and grades[grade_id].needs_manual_grade, grade_id

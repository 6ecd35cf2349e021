"""SaveAutoGrades (autograde): nbgrader's, and a cell GradeFromSource could not grade (a value it
cannot read from the text, a grader error) is flagged for manual grading, whatever its 0 says."""
from __future__ import annotations

from nbgrader import preprocessors


class SaveAutoGrades(preprocessors.SaveAutoGrades):
    def _add_score(self, cell, resources) -> None:
        super()._add_score(cell, resources)
        if cell.metadata["nbgrader"]["grade_id"] in resources.get("grader", {}).get("manual", ()):
            grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                              self.assignment_id, self.student_id)
            grade.needs_manual_grade = True
            self.gradebook.db.commit()

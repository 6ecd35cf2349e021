"""GradeFromSource (autograde): every test cell graded from the notebook's text (its hidden test
restored by nbgrader, the student's values read without running them: grader.course.regrade), each
check in a fresh sandboxed process, that result written in place of what the cell printed. Whatever a
cell patched (numpy, the grader, the display hook) or planted (a build in a cache) cannot change a
score. What a submission tried (a refused source, a forbidden system call, code naming the gradebook or
mounts) goes to nbgrader's log, and with the scores to GradeFromSource.record when set."""
from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from grader.course.preprocessors.sandboxed_execute import protect_course
from grader.course.regrade import parse_test, regrade_at, tried_in_text
from grader.course.static_values import code_cells
from grader.emulator.build import atomic_write


class GradeFromSource(NbGraderPreprocessor):
    """Every graded test cell that calls grader.grade or grader.grade_answer
    scores what those calls give when recomputed from the notebook's text
    (grader.course.regrade.regrade_cell, checks in fresh sandboxed processes): its
    outputs become that diagnosis and that score. A cell it cannot grade (a value
    that cannot be read without running the notebook, a grader error) scores 0
    with the reason, is left out of the record and is flagged for manual grading
    (resources["grader"]["manual"], which SaveAutoGrades reads). Other test cells
    (an instructor's own asserts) keep nbgrader's verdict on their execution."""

    not_readable = Unicode(
        "0 points: the autograder grades this cell from your notebook's text, without running your code, and "
        "could not read what it grades ({why}). Write it as a literal, ordinary string operations on literals "
        "are fine, and ask your instructor to look at this cell.").tag(config=True)

    record = Unicode("", help="A JSON file where the scores computed here are recorded, by notebook and cell, "
                     "with what the submission tried (python -m grader autograde merges from it)").tag(config=True)

    def preprocess(self, nb, resources):
        protect_course(self.config)
        # nbgrader marks its own process as autograding too: here (trusted) the checks must run.
        saved = os.environ.pop("NBGRADER_EXECUTION", None)
        try:
            scores, manual, tried = self._grade(nb)
        finally:
            if saved is not None:
                os.environ["NBGRADER_EXECUTION"] = saved
        info = resources.get("nbgrader", {})
        student = info.get("student", "the submission")
        for what in tried:
            self.log.warning("%s tried something the grader stops: %s", student, what)
        for cell, why in manual.items():
            self.log.error("%s: cell %s is left for manual grading: %s", student, cell, why)
        resources.setdefault("grader", {})["manual"] = sorted(manual)
        if self.record:
            self._write_record(info.get("notebook", ""), scores, tried)
        return nb, resources

    def _grade(self, nb) -> tuple[dict, dict, list]:
        """Every test cell graded from the text: ({grade_id: score}, {grade_id: why it needs a person},
        what the submission tried)."""
        cells = code_cells(nb)
        scores, manual, tried = {}, {}, []
        for i, cell in enumerate(cells):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if not meta.get("grade") or meta.get("solution") or not parse_test(cell.source):
                continue
            r, _ = regrade_at(cells, i, cell.source)
            if r.score is None:
                manual[meta["grade_id"]] = r.note.replace("not recomputed: ", "")
                score = 0.0
                text = r.text or self.not_readable.format(why=manual[meta["grade_id"]])
            else:
                score, text = r.score, r.text
                scores[meta["grade_id"]] = float(score)
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n"),
                            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(score))},
                                                   execution_count=cell.get("execution_count"))]
            tried += [f"{meta['grade_id']}: {a}" for a in r.attempts]
        return scores, manual, tried + tried_in_text(cells)

    def _write_record(self, notebook: str, scores: dict, tried: list) -> None:
        path = Path(self.record)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        record[notebook] = {"scores": scores, "tried": tried}
        atomic_write(path, json.dumps(record).encode())

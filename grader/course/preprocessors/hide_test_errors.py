"""HideTestErrors (feedback): a graded test cell that raised shows a sentence instead of its
traceback, which would show the hidden test's lines."""
from __future__ import annotations

import re

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode


class HideTestErrors(NbGraderPreprocessor):
    """Feedback: a graded test cell that raised shows the student a sentence,
    never the traceback (IPython prints the failing lines of the hidden test,
    expected values included) nor anything the test wrote to stderr. (An
    NbGraderPreprocessor, as GradeFromSource: nbconvert's are disabled by default.)"""

    message = Unicode("this test failed with {ename}; the test's source and its expected values are hidden "
                      "(your score for this cell is above)").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            return cell, resources
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                outputs.append(nbformat.v4.new_output("stream", name="stdout", text=self.message.format(
                    ename=re.sub(r"[^\w.]", "", str(out.get("ename", "an error")))[:60]) + "\n"))
            elif out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue
            else:
                outputs.append(out)
        cell.outputs = outputs
        return cell, resources

"""nbgrader extensions for the SGEMM labs.

ClearCudaSolutions: the labs keep CUDA C in Python strings (KERNEL_SOURCE =
r'''...'''). A solution region whose delimiter lines are C++ comments
(`// BEGIN SOLUTION` ... `// END SOLUTION`) becomes `// YOUR CODE HERE`, so
the release copy still compiles (and fails the tests); a region delimited
with `### BEGIN SOLUTION` keeps nbgrader's Python stub
(`# YOUR CODE HERE` / `raise NotImplementedError()`).
"""
from __future__ import annotations

import re

from nbgrader.preprocessors import ClearSolutions
from traitlets import Unicode

CUDA_COMMENT = re.compile(r"^\s*//")


class ClearCudaSolutions(ClearSolutions):
    cuda_code_stub = Unicode("// YOUR CODE HERE", help="The stub for a solution region inside CUDA C source").tag(
        config=True)

    def _replace_solution_region(self, cell, language):
        lines = cell.source.split("\n")
        if cell.cell_type == "code":
            python_stub = self.code_stub[language].split("\n")
        else:
            python_stub = self.text_stub.split("\n")
        cuda_stub = self.cuda_code_stub.split("\n")
        new_lines = []
        in_solution = False
        replaced = False
        for line in lines:
            if self.begin_solution_delimeter in line:
                if in_solution:
                    self.log.error("Encountered nested begin solution statements. Cell contents are: \n%s",
                                   cell.source)
                    raise RuntimeError("encountered nested begin solution statements")
                in_solution = True
                replaced = True
                indent = re.match(r"\s*", line).group(0)
                stub = cuda_stub if cell.cell_type == "code" and CUDA_COMMENT.match(line) else python_stub
                new_lines.extend(indent + s for s in stub)
            elif self.end_solution_delimeter in line:
                in_solution = False
            elif not in_solution:
                new_lines.append(line)
        if in_solution:
            self.log.error("No end solution statement found. Cell contents are: \n%s", cell.source)
            raise RuntimeError("no end solution statement found")
        cell.source = "\n".join(new_lines)
        return replaced

"""ClearCudaSolutions: nbgrader's ClearSolutions for labs that keep CUDA C in Python strings
(KERNEL_SOURCE = r'''...'''). A solution region whose delimiter lines are C++ comments
(`// BEGIN SOLUTION` ... `// END SOLUTION`) becomes `// YOUR CODE HERE`, so the release copy still
compiles (and fails the tests); a Python region that only assigns names (a numeric question) becomes
`NAME = None  # YOUR ANSWER HERE`, so the release copy runs from top to bottom; any other Python region
keeps nbgrader's stub (`# YOUR CODE HERE` / `raise NotImplementedError()`)."""
from __future__ import annotations

import ast
import re
import textwrap

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
        new_lines = []
        region = None            # (indent, is CUDA, lines) while inside a solution region
        replaced = False
        for line in lines:
            if self.begin_solution_delimeter in line:
                if region is not None:
                    self.log.error("Encountered nested begin solution statements. Cell contents are: \n%s",
                                   cell.source)
                    raise RuntimeError("encountered nested begin solution statements")
                cuda = cell.cell_type == "code" and bool(CUDA_COMMENT.match(line))
                region = (re.match(r"\s*", line).group(0), cuda, [])
                replaced = True
            elif self.end_solution_delimeter in line and region is not None:
                indent, cuda, body = region
                stub = self.cuda_code_stub.split("\n") if cuda else (answer_stub(body) or python_stub)
                new_lines.extend(indent + s for s in stub)
                region = None
            elif region is not None:
                region[2].append(line)
            else:
                new_lines.append(line)
        if region is not None:
            self.log.error("No end solution statement found. Cell contents are: \n%s", cell.source)
            raise RuntimeError("no end solution statement found")
        cell.source = "\n".join(new_lines)
        return replaced


def answer_stub(body: list[str]) -> list[str] | None:
    """`NAME = None  # YOUR ANSWER HERE` for each name a region assigns, when the
    region only assigns names (a numeric question): the release copy then runs
    from top to bottom and its test cell says "not answered yet". None otherwise."""
    try:
        tree = ast.parse(textwrap.dedent("\n".join(body)))
    except SyntaxError:
        return None
    names = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        names.append(stmt.targets[0].id)
    return [f"{name} = None  # YOUR ANSWER HERE" for name in names] or None

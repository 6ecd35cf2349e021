"""Every lab's solution region is the reference kernel in solutions/, and the
committed notebooks are what labs/build_labs.py builds."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
LABS = REPO / "labs"
NOTEBOOKS = sorted(LABS.glob("*/*.ipynb"))


def _builder():
    spec = importlib.util.spec_from_file_location("build_labs", LABS / "build_labs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_strings(nb) -> list[tuple[str, str]]:
    """(variable, string) for every string literal holding a __global__ kernel in an answer cell."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        for stmt in ast.parse(cell.source).body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str) and "__global__" in stmt.value.value:
                found.append((stmt.targets[0].id, stmt.value.value))
    return found


def test_there_are_labs():
    assert {p.parent.name for p in NOTEBOOKS} >= {"01-naive-coalesced", "02-smem-tiling", "03-minimums",
                                                  "04-shortest-paths"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_solution_regions_are_the_reference_kernels(path):
    from grader.stages import STAGES
    build = _builder()
    nb = nbformat.read(str(path), as_version=4)
    kernels = kernel_strings(nb)
    assert kernels, f"{path}: no kernel cell"
    for var, text in kernels:
        assert build.BEGIN in text and build.END in text, f"{var}: no solution region"
        solution = build.strip_solution_markers(text)
        names = [s.id for s in STAGES if f"void {s.kernel}(" in solution]
        if not names:            # labs 3 and 4: grader.graph's kernels (top2, sgemm-top2, sssp)
            from grader.graph import KINDS
            names = [k for k, (_, kernels) in KINDS.items() if f"void {kernels[0]}(" in solution]
        assert len(names) == 1, f"{var}: which stage? {names}"
        reference = (REPO / "solutions" / f"{names[0]}.cu").read_text()
        assert solution == reference, (f"{path.name}: {var} differs from solutions/{names[0]}.cu; run "
                                       "python3 labs/build_labs.py")


def test_notebooks_are_built_from_build_labs():
    build = _builder()
    for path, text in build.build().items():
        assert path.exists(), f"{path} missing: run python3 labs/build_labs.py"
        assert path.read_text() == text, f"{path} is out of date: run python3 labs/build_labs.py"


def test_nbgrader_config_loads():
    pytest.importorskip("nbgrader")
    from traitlets.config.loader import PyFileConfigLoader
    c = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    assert c.CourseDirectory.source_directory == "labs"
    assert "grader.nbgrader_ext.ClearCudaSolutions" in c.GenerateAssignment.preprocessors
    assert "nbgrader.preprocessors.ClearSolutions" not in c.GenerateAssignment.preprocessors
    assert "nbgrader.preprocessors.ClearHiddenTests" in c.GenerateFeedback.preprocessors
    assert c.Execute.kernel_name == "python3" and c.Execute.timeout >= 300

"""The lab notebooks labs/<assignment>/<notebook>.ipynb are the source: an
instructor edits them in JupyterLab or nbgrader's Create Assignment. These
tests keep them honest: every kernel cell is the reference kernel in
solutions/ plus solution markers, every answer cell has its markers, every
graded cell has points and a grade_id of its own, and nothing is stored that
a save in JupyterLab would make noise of (outputs, execution counts)."""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
LABS = REPO / "labs"
NOTEBOOKS = sorted(LABS.glob("*/*.ipynb"))

# The solution markers of a kernel cell (CUDA comments inside the kernel string; nbgrader's
# ClearCudaSolutions, grader/course/preprocessors/, turns the region into `// YOUR CODE HERE`).
BEGIN, END = "// BEGIN SOLUTION", "// END SOLUTION"
CLEAR_OUTPUTS = "clear it in JupyterLab (Edit > Clear Outputs of All Cells) and save"


def strip_solution_markers(text: str) -> str:
    """The kernel string without its `// BEGIN SOLUTION` / `// END SOLUTION` lines."""
    return "".join(ln for ln in text.splitlines(keepends=True) if ln.strip() not in (BEGIN, END))


def read(path: Path):
    return nbformat.read(str(path), as_version=4)


def nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


# Given (locked) kernel cells that differ from solutions/ on purpose; every other given kernel is a reference.
VARIANTS = {"unpadded-kernel": "lab 4: the bank-conflict-free kernel without its padding, shown for its conflict report"}


def kernel_strings(nb, given: bool = False) -> list[tuple[str, str]]:
    """(variable, string) for every string literal holding a __global__ kernel in an answer cell
    (given: in a locked cell the student reads but does not write, variants excepted)."""
    found = []
    for cell in nb.cells:
        meta = nbgrader(cell)
        wanted = (meta.get("locked") and not meta.get("solution") and meta.get("grade_id") not in VARIANTS) \
            if given else meta.get("solution")
        if cell.cell_type != "code" or not wanted:
            continue
        for stmt in ast.parse(cell.source).body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str) and "__global__" in stmt.value.value:
                found.append((stmt.targets[0].id, stmt.value.value))
    return found


def reference_of(solution: str) -> str:
    """Which solutions/<name>.cu a kernel string is (by its kernel's name)."""
    from grader.kernels.stages import STAGES
    names = sorted({s.source_path.stem for s in STAGES if any(f"{c}{s.kernel}(" in solution for c in " \n")})
    if not names:            # labs 4, 7, 8 and 9: the kernels of grader.kernels' other modules
        from grader.kernels import sssp, top2, transpose
        from grader.programs.tensor_bench import KERNELS
        names = [Path(k.file).stem for k in (top2.TOP2, top2.FUSED, sssp.SSSP, transpose.TRANSPOSE,
                                             *(g.kernels for g in KERNELS.values()))
                 if any(f"{c}{k.names[0]}(" in solution for c in " \n")]
    assert len(names) == 1, f"which stage? {names}"
    return names[0]


def marker_problems(source: str) -> list[str]:
    """What is wrong with a solution cell's BEGIN/END SOLUTION markers (none: [])."""
    begins = [i for i, ln in enumerate(source.splitlines()) if "BEGIN SOLUTION" in ln]
    ends = [i for i, ln in enumerate(source.splitlines()) if "END SOLUTION" in ln]
    if not begins or not ends:
        return ["lacks a BEGIN SOLUTION or an END SOLUTION marker: nbgrader would replace the whole cell"]
    if len(begins) != len(ends) or any(not b < e for b, e in zip(begins, ends)) \
            or any(not e < b for e, b in zip(ends, begins[1:])):
        return [f"BEGIN/END SOLUTION markers out of pairs (BEGIN on lines {begins}, END on lines {ends})"]
    return []


def test_there_are_labs():
    assert {p.parent.name for p in NOTEBOOKS} >= {"01-naive-coalesced", "02-smem-tiling", "07-minimums",
                                                  "08-shortest-paths"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_solution_regions_are_the_reference_kernels(path):
    kernels = kernel_strings(read(path))
    given = kernel_strings(read(path), given=True)
    assert kernels or given, f"{path}: no kernel cell"
    for var, text in given:
        name = reference_of(text)
        assert text == (REPO / "solutions" / f"{name}.cu").read_text(), (
            f"{path.name}: the given kernel {var} differs from solutions/{name}.cu: change both together "
            "(or list its cell in VARIANTS, with why)")
    for var, text in kernels:
        assert BEGIN in text and END in text, f"{path.name}: {var} has no `{BEGIN}` ... `{END}` region"
        solution = strip_solution_markers(text)
        name = reference_of(solution)
        reference = (REPO / "solutions" / f"{name}.cu").read_text()
        assert solution == reference, (f"{path.name}: {var} (without its solution marker lines) differs from "
                                       f"solutions/{name}.cu: change both together")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_notebook_is_stored_clean(path):
    """nbformat v4, valid, no outputs or execution counts, a unique id on every cell, and written the way
    nbformat (and so JupyterLab) writes it: a save in JupyterLab gives a small diff."""
    nb = read(path)
    nbformat.validate(nb)
    assert nb.nbformat == 4, f"{path.name}: nbformat {nb.nbformat}, not 4"
    for i, cell in enumerate(nb.cells):
        where = f"{path.name}: cell {i} ({cell.get('id')})"
        assert cell.get("id"), f"{where} has no id"
        if cell.cell_type == "code":
            assert not cell.outputs, f"{where} stores outputs: {CLEAR_OUTPUTS}"
            assert cell.execution_count is None, f"{where} stores an execution count: {CLEAR_OUTPUTS}"
    ids = [c.id for c in nb.cells]
    assert len(ids) == len(set(ids)), f"{path.name}: cell ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}"
    assert path.read_text() == nbformat.writes(nb) + "\n", (
        f"{path.name} is not stored as nbformat writes it: open and save it in JupyterLab, or run "
        f"python3 -c \"import nbformat as n; n.write(n.read('{path.relative_to(REPO)}', 4), "
        f"'{path.relative_to(REPO)}')\"")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_nbgrader_cells(path):
    """Every solution code cell has BEGIN/END SOLUTION markers, every grade cell has points, and no two
    cells share a grade_id."""
    nb = read(path)
    problems, seen = [], {}
    for i, cell in enumerate(nb.cells):
        meta = nbgrader(cell)
        if not meta:
            continue
        gid = meta.get("grade_id")
        where = f"cell {i} ({gid})"
        if not gid:
            problems.append(f"{where}: nbgrader cell without a grade_id")
        elif gid in seen:
            problems.append(f"{where}: grade_id {gid!r} is also cell {seen[gid]}'s")
        else:
            seen[gid] = i
        if meta.get("solution") and cell.cell_type == "code":
            problems += [f"{where}: {p}" for p in marker_problems(cell.source)]
        if meta.get("grade"):
            points = meta.get("points")
            if not isinstance(points, (int, float)) or isinstance(points, bool) or points <= 0:
                problems.append(f"{where}: a grade cell with points {points!r} (needs a number > 0)")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_nbgrader_config_loads():
    pytest.importorskip("nbgrader")
    from traitlets.config.loader import PyFileConfigLoader
    c = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    assert c.CourseDirectory.source_directory == "labs"
    assert "grader.course.preprocessors.ClearCudaSolutions" in c.GenerateAssignment.preprocessors
    assert "nbgrader.preprocessors.ClearSolutions" not in c.GenerateAssignment.preprocessors
    assert "nbgrader.preprocessors.ClearHiddenTests" in c.GenerateFeedback.preprocessors
    assert c.Execute.kernel_name == "python3" and 10 <= c.Execute.timeout <= 120   # the notebook only runs
    steps = c.Autograde.autograde_preprocessors
    assert steps[0] == "grader.course.preprocessors.SandboxedExecute"
    assert steps.index("grader.course.preprocessors.GradeFromSource") < steps.index("grader.course.preprocessors.SaveAutoGrades")

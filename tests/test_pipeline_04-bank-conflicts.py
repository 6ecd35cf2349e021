"""Lab 4 (shared-memory banks, transposing and padding) through the whole
nbgrader pipeline, in a temporary course holding only this lab:
generate_assignment (no solution left in the release copy), autograde of the
reference (every point except performance on the emulator), of the blank
release copy and of broken submissions, each with its exact score per cell,
and `grader regrade` recomputing the graded cells.
"""
from __future__ import annotations

import re

import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
LAB, NB = "04-bank-conflicts", "bank-conflicts"

pytest.importorskip("nbgrader")

import grader  # noqa: E402
from grader.static_values import read_values  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"

QUESTIONS = ["q-column-32-test", "q-column-33-test", "q-stride-2-test", "q-float4-stride-2-test",
             "q-broadcast-test", "q-unpadded-ways-test", "q-pad-1-ways-test", "q-pad-test"]
KERNEL_CELLS = {"bank-conflict-free-correctness": 3, "bank-conflict-free-races": 2,
                "bank-conflict-free-bank-conflicts": 3, "bank-conflict-free-bank-conflicts-configs": 2,
                "bank-conflict-free-performance": 2,
                "transpose-correctness": 3, "transpose-races": 2, "transpose-bank-conflicts": 2}
FULL = {**{q: 1.0 for q in QUESTIONS}, **{k: float(v) for k, v in KERNEL_CELLS.items()}}
PERF = "bank-conflict-free-performance"


def _cells(**zero) -> dict[str, float]:
    """Every cell's points on a machine without a GPU (performance 0), except those named (their score)."""
    want = {**FULL, PERF: 0.0}
    for cell, score in zero.items():
        want[cell.replace("_", "-")] = score
    return want


# Per-cell scores on a machine without a GPU.
EXPECTED = {
    "ref": _cells(),
    "blank": {cell: 0.0 for cell in FULL},
    # the transposed store without padding: 8-way store conflicts, in every tile configuration
    "unpadded": _cells(bank_conflict_free_bank_conflicts=0, bank_conflict_free_bank_conflicts_configs=0),
    # the padding written as a number (128 + 4): right for BM = 128 only
    "hardcoded": _cells(bank_conflict_free_bank_conflicts_configs=0),
    # the transpose through a [32][32] tile: correct, but 32-way conflicts on the column reads
    "tile32": _cells(transpose_bank_conflicts=0),
    # the transpose without __syncthreads(): a race, wrong results, so no credit for conflict-freedom either
    "nosync": _cells(transpose_correctness=0, transpose_races=0, transpose_bank_conflicts=0),
}
# On a GPU the performance cell counts too: the reference SGEMM kernel's 2 points wherever the SGEMM cell is the
# reference at the stage's own configuration; the unpadded kernel's speed is not asserted.
GPU_PERF = {"ref": 2.0, "hardcoded": 2.0, "tile32": 2.0, "nosync": 2.0, "blank": 0.0}


def _replace(cell, old: str, new: str) -> None:
    assert old in cell.source, old
    cell.source = cell.source.replace(old, new)


PAD_DEFINE = "#define AS_STRIDE (BM + 4)"


def _unpadded(cells):
    _replace(cells["bank-conflict-free-kernel"], PAD_DEFINE, "#define AS_STRIDE BM")


def _hardcoded(cells):
    _replace(cells["bank-conflict-free-kernel"], PAD_DEFINE, "#define AS_STRIDE 132")


def _tile32(cells):
    _replace(cells["transpose-kernel"], "__shared__ float tile[TILE_DIM][TILE_DIM + 1];",
             "__shared__ float tile[TILE_DIM][TILE_DIM];")


def _nosync(cells):
    _replace(cells["transpose-kernel"], "    __syncthreads();\n", "")


SUBMISSIONS = {"ref": None, "blank": False, "unpadded": _unpadded, "hardcoded": _hardcoded, "tile32": _tile32,
               "nosync": _nosync}


def _load_config(course: Path):
    from traitlets.config.loader import PyFileConfigLoader
    c = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()   # raises on a broken config
    c.CourseDirectory.root = str(course)
    return c


def _solution_cells() -> dict[str, str]:
    nb = nbformat.read(str(REPO / "labs" / LAB / f"{NB}.ipynb"), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def _submit(course: Path, student: str, edit=None) -> None:
    """The release copy with every answer cell filled in from the source notebook, then edit(cells)."""
    nb = nbformat.read(str(course / "release" / LAB / f"{NB}.ipynb"), as_version=4)
    if edit is not False:
        sol = _solution_cells()
        for c in nb.cells:
            gid = c.metadata.get("nbgrader", {}).get("grade_id")
            if gid in sol:
                c.source = sol[gid]
        if edit:
            edit({c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells})
    dest = course / "submitted" / student / LAB
    dest.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest / f"{NB}.ipynb"))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(REPO / "labs" / LAB, course / "labs" / LAB, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    old_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "GRADER_BACKEND")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in (old_env["PYTHONPATH"] or "").split(
        os.pathsep) if p])
    os.environ["GRADER_BACKEND"] = grader.BACKEND.name
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from nbgrader.apps import NbGraderAPI
    api = NbGraderAPI(config=_load_config(course))
    r = api.generate_assignment(LAB, force=True)
    assert r["success"], r.get("error") or r.get("log")
    assert "Exception while loading config file" not in (r.get("log") or "")
    for student, edit in SUBMISSIONS.items():
        _submit(course, student, edit)
    for student in SUBMISSIONS:
        r = api.autograde(LAB, student, force=True)
        assert r["success"], f"{student}: {r.get('error') or r.get('log')}"
    yield course
    for k, v in old_env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _cell_scores(course: Path, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="sgemm-lab") as gb:
        nb = gb.find_submission_notebook(NB, LAB, student)
        return {g.name: g.score for g in nb.grades}


def test_the_notebook_has_the_cells_the_test_expects():
    nb = nbformat.read(str(REPO / "labs" / LAB / f"{NB}.ipynb"), as_version=4)
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == FULL


def test_release_has_no_solutions(course):
    text = (course / "release" / LAB / f"{NB}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "HIDDEN TESTS" not in text and "grader.grade(" not in text and "grader.grade_answer" not in text
    assert "// YOUR CODE HERE" in text and "= None  # YOUR ANSWER HERE" in text
    for solution_line in (PAD_DEFINE, "bank (4k + m) mod 32", "tile[TILE_DIM][TILE_DIM + 1]", "= tile[tx][ty];"):
        assert solution_line not in text, solution_line
    nb = nbformat.reads(text, as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    # the unpadded kernel is given whole, with its check, before the fix
    assert "#define AS_STRIDE BM " in cells["unpadded-kernel"]
    assert 'grader.check("bank-conflict-free", UNPADDED_SOURCE' in cells["unpadded-kernel"]
    assert list(cells).index("unpadded-kernel") < list(cells).index("bank-conflict-free-kernel")
    for kernel in ("bank-conflict-free-kernel", "transpose-kernel"):
        assert "// YOUR CODE HERE" in cells[kernel] and "raise NotImplementedError" not in cells[kernel]


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_per_cell(course, student):
    got = _cell_scores(course, student)
    want = dict(EXPECTED[student])
    if ON_GPU:
        if student in GPU_PERF:
            want[PERF] = GPU_PERF[student]
        else:
            want.pop(PERF)
            got.pop(PERF)
    assert got == pytest.approx(want), f"{student}: " + ", ".join(
        f"{k}: {got.get(k)} (expected {v})" for k, v in want.items() if got.get(k) != pytest.approx(v))


def test_reference_gets_every_point_but_performance(course):
    from nbgrader.api import Gradebook
    assert sum(EXPECTED["ref"].values()) == sum(FULL.values()) - KERNEL_CELLS[PERF] == 25
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="sgemm-lab") as gb:
        total = gb.find_submission(LAB, "ref").score
    assert total == pytest.approx(25 + (GPU_PERF["ref"] if ON_GPU else 0.0))


def _outputs(course: Path, student: str, cell_id: str) -> str:
    nb = nbformat.read(str(course / "autograded" / student / LAB / f"{NB}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id)
    parts = []
    for o in cell.outputs:
        parts.append(o.get("text", ""))
        parts.append(str(o.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_the_unpadded_report_shows_the_conflict(course):
    """The given unpadded kernel's report, as the student sees it running the cell (at autograde time no
    check runs inside the notebook): the store's line, 8-way, the bank picture."""
    nb = nbformat.read(str(course / "autograded" / "ref" / LAB / f"{NB}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "unpadded-kernel")
    source = read_values([cell.source]).values["UNPADDED_SOURCE"]
    text = grader.check("bank-conflict-free", source, ["bank-conflicts"], announce=False).text()
    assert "line 69 (store): 8-way bank conflict" in text, text
    # which bank depends on where the build places shared memory; the 8 lanes on one bank do not
    assert re.search(r"bank \d+ holds 8 distinct word\(s\), from lanes 0, 1, 2, 3, 4, 5, 6, 7", text), text
    assert "896 store bank conflicts" in text, text


def test_broken_submissions_are_told_why(course):
    text = _outputs(course, "hardcoded", "bank-conflict-free-bank-conflicts-configs")
    assert "BM=256 BN=64 BK=8 TM=8 TN=4" in text and "out-of-bounds" in text, text
    text = _outputs(course, "tile32", "transpose-bank-conflicts")
    assert "32-way bank conflict" in text, text
    text = _outputs(course, "nosync", "transpose-races")
    assert "race" in text and "__syncthreads()" in text, text
    if not ON_GPU:
        assert "not graded: no GPU" in _outputs(course, "ref", PERF)


def test_regrade_recomputes_every_cell(course):
    """Every graded cell of a submission that passes some checks and fails one (bank-conflicts-configs)."""
    from grader.regrade import format_rows, regrade
    rows = regrade(course, LAB, ["hardcoded"])
    text = format_rows(rows)
    assert rows and all(r.regraded is not None for r in rows), text
    assert not [r for r in rows if r.differs], text

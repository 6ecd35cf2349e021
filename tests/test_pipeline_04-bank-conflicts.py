"""Lab 4 (shared-memory banks, transposing and padding) through the whole
nbgrader pipeline, in a temporary course holding only this lab:
generate_assignment (no solution left in the release copy), autograde of the
reference (every point except performance on the emulator), of the blank
release copy and of broken submissions, each with its exact score per cell,
and `grader regrade` recomputing the graded cells.
"""
from __future__ import annotations

import re

import nbformat
import pytest
from nbgrader_course import (
    autograded_notebook,
    cell_output,
    cell_scores,
    grade_id,
    lab_course,
    points,
    replace,
    submission_score,
)

LAB, NB = "04-bank-conflicts", "bank-conflicts"

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

import grader  # noqa: E402
from grader.course.static_values import read_values  # noqa: E402

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


PAD_DEFINE = "#define AS_STRIDE (BM + 4)"


def _unpadded(cells):
    replace(cells["bank-conflict-free-kernel"], PAD_DEFINE, "#define AS_STRIDE BM")


def _hardcoded(cells):
    replace(cells["bank-conflict-free-kernel"], PAD_DEFINE, "#define AS_STRIDE 132")


def _tile32(cells):
    replace(cells["transpose-kernel"], "__shared__ float tile[TILE_DIM][TILE_DIM + 1];",
            "__shared__ float tile[TILE_DIM][TILE_DIM];")


def _nosync(cells):
    replace(cells["transpose-kernel"], "    __syncthreads();\n", "")


SUBMISSIONS = {"ref": None, "blank": False, "unpadded": _unpadded, "hardcoded": _hardcoded, "tile32": _tile32,
               "nosync": _nosync}


# The reference's notebook runs (its outputs are tested); the others are graded from their text.
course = lab_course(LAB, SUBMISSIONS, run=("ref",))


def test_the_notebook_has_the_cells_the_test_expects():
    assert points(LAB) == FULL


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
    got = cell_scores(course, LAB, student)
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
    assert sum(EXPECTED["ref"].values()) == sum(FULL.values()) - KERNEL_CELLS[PERF] == 25
    total = submission_score(course, LAB, "ref")
    assert total == pytest.approx(25 + (GPU_PERF["ref"] if ON_GPU else 0.0))


def _outputs(course, student: str, cell: str) -> str:
    return cell_output(course, LAB, student, cell, shown=True)


def test_the_unpadded_report_shows_the_conflict(course):
    """The given unpadded kernel's report, as the student sees it running the cell (at autograde time no
    check runs inside the notebook): the store's line, 8-way, the bank picture."""
    cell = next(c for c in autograded_notebook(course, LAB, "ref").cells if grade_id(c) == "unpadded-kernel")
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
    from grader.course.regrade import format_rows, regrade
    rows = regrade(course, LAB, ["hardcoded"])
    text = format_rows(rows)
    assert rows and all(r.regraded is not None for r in rows), text
    assert not [r for r in rows if r.differs], text

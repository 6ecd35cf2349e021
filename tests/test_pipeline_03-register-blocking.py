"""Lab 3 (register blocking and occupancy) through the whole nbgrader pipeline,
in a temporary course holding only this lab: generate_assignment (no solution
left in the release copy), autograde of the reference (every point except the
GPU-only ones on the emulator: performance and the CUDA occupancy API), of the
blank release copy and of broken submissions, each with its exact score per
graded cell, and `grader regrade` recomputing the graded cells.

Broken submissions:
  pastblock    the 2D kernel with the 1D kernel's thread mapping (tid % BN, tid / BN): each thread's 8 x 8
               register tile reaches columns up to 127 * 8 + 7, far past the 128-column block tile (and only
               rows 0..15 of it are computed): wrong, so not credited as race-free either
  nosync       the 1D kernel without the __syncthreads() between loading the tiles and computing: a race
  granularity  blocks_per_sm without the 256-register allocation unit (regs * 32 registers per warp)
  noshared     blocks_per_sm without the shared-memory limit
"""
from __future__ import annotations

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
    source_notebook,
    stderr_in_graded_cells,
)

from grader.platform.devices import H200

LAB, NB = "03-register-blocking", "register-blocking"

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

import grader  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"

QUESTIONS = ["q-global-naive-test", "q-global-smem-test", "q-global-1d-test", "q-global-2d-test",
             "q-shared-1d-test", "q-shared-2d-test"]
KERNEL_CELLS = {"blocktile-1d-correctness": 4, "blocktile-1d-races": 2, "blocktile-1d-performance": 2,
                "blocktile-2d-correctness": 4, "blocktile-2d-races": 2, "blocktile-2d-performance": 2,
                "blocks-per-sm-h200-limits": 3, "blocks-per-sm-cuda-occupancy-api": 1}
FULL = {**{q: 1.0 for q in QUESTIONS}, **{k: float(v) for k, v in KERNEL_CELLS.items()}}
GPU_ONLY = ("blocktile-1d-performance", "blocktile-2d-performance", "blocks-per-sm-cuda-occupancy-api")


def _cells(**changed) -> dict[str, float]:
    """Every cell's points on a machine without a GPU (the GPU-only cells 0), except those named (their score)."""
    want = {**FULL, **{cell: 0.0 for cell in GPU_ONLY}}
    for cell, score in changed.items():
        want[cell.replace("_", "-")] = float(score)
    return want


# Per-cell scores on a machine without a GPU.
EXPECTED = {
    "ref": _cells(),
    "blank": {cell: 0.0 for cell in FULL},
    "pastblock": _cells(blocktile_2d_correctness=0, blocktile_2d_races=0),
    "nosync": _cells(blocktile_1d_correctness=0, blocktile_1d_races=0),
    "granularity": _cells(blocks_per_sm_h200_limits=0),
    "noshared": _cells(blocks_per_sm_h200_limits=0),
}
# On a GPU the GPU-only cells count too: a kernel's performance where it is correct (the reference's speed), the
# occupancy-API test where blocks_per_sm follows the rules the probe kernels exercise (33, 45 and 57 registers
# make the allocation unit matter; dynamic shared memory up to 100000 bytes the shared-memory limit).
GPU_CELLS = {
    "ref": {"blocktile-1d-performance": 2, "blocktile-2d-performance": 2, "blocks-per-sm-cuda-occupancy-api": 1},
    "blank": {},
    "pastblock": {"blocktile-1d-performance": 2, "blocks-per-sm-cuda-occupancy-api": 1},
    "nosync": {"blocktile-2d-performance": 2, "blocks-per-sm-cuda-occupancy-api": 1},
    "granularity": {"blocktile-1d-performance": 2, "blocktile-2d-performance": 2},
    "noshared": {"blocktile-1d-performance": 2, "blocktile-2d-performance": 2},
}


def _pastblock(cells):
    replace(cells["blocktile-2d-kernel"], "const int threadCol = tid % (BN / TN);", "const int threadCol = tid % BN;")
    replace(cells["blocktile-2d-kernel"], "const int threadRow = tid / (BN / TN);", "const int threadRow = tid / BN;")


def _nosync(cells):
    replace(cells["blocktile-1d-kernel"], "        }\n        __syncthreads();\n\n#pragma unroll\n"
                                          "        for (int k = 0; k < BK; ++k) {\n",
            "        }\n\n#pragma unroll\n        for (int k = 0; k < BK; ++k) {\n")


def _granularity(cells):
    replace(cells["blocks-per-sm"], "regs_per_warp = round_up(regs_per_thread * WARP_SIZE, REG_ALLOC_UNIT)",
            "regs_per_warp = regs_per_thread * WARP_SIZE")


def _noshared(cells):
    replace(cells["blocks-per-sm"], "return min(by_warps, MAX_BLOCKS_PER_SM, by_registers, by_shared)",
            "return min(by_warps, MAX_BLOCKS_PER_SM, by_registers)")


SUBMISSIONS = {"ref": None, "blank": False, "pastblock": _pastblock, "nosync": _nosync,
               "granularity": _granularity, "noshared": _noshared}


# The reference's and the blank copy's notebooks run (their outputs are tested); the others are graded from
# their text.
course = lab_course(LAB, SUBMISSIONS, run=("ref", "blank"))


def _outputs(course, student: str, cell: str) -> str:
    return cell_output(course, LAB, student, cell, shown=True, errors=True)


def test_the_notebook_has_the_cells_the_test_expects():
    assert points(LAB) == FULL


def test_the_notebooks_limits_are_the_h200s():
    """The constants the student's blocks_per_sm uses are the ones the grader's calculator uses."""
    cell = next(c for c in source_notebook(LAB).cells if grade_id(c) == "h200-limits")
    values: dict = {}
    exec(cell.source, values)
    h200 = H200.limits
    assert (values["WARP_SIZE"], values["MAX_THREADS_PER_SM"], values["MAX_BLOCKS_PER_SM"], values["REGS_PER_SM"],
            values["REG_SUB_PARTITIONS"], values["REG_ALLOC_UNIT"], values["SMEM_PER_SM"],
            values["SMEM_RESERVED_PER_BLOCK"], values["SMEM_ALLOC_UNIT"]) == (
        h200.warp_size, h200.max_threads_per_sm, h200.max_blocks_per_sm, h200.regs_per_sm, h200.reg_sub_partitions,
        h200.reg_alloc_unit, h200.smem_per_sm, h200.smem_reserved_per_block, h200.smem_alloc_unit)


def test_release_has_no_solutions(course):
    text = (course / "release" / LAB / f"{NB}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "HIDDEN TESTS" not in text and "grader.grade(" not in text and "grader.grade_answer" not in text
    assert "// YOUR CODE HERE" in text and "= None  # YOUR ANSWER HERE" in text
    nb = nbformat.reads(text, as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    for kernel, var in (("blocktile-1d-kernel", "BLOCKTILE_1D_SOURCE"), ("blocktile-2d-kernel", "BLOCKTILE_2D_SOURCE")):
        src = cells[kernel]
        assert "// YOUR CODE HERE" in src and "raise NotImplementedError" not in src, kernel
        assert "__syncthreads" not in src and "acc[" not in src and "As[" not in src, kernel
        assert src.rstrip().endswith(f'grader.check("{kernel[:-len("-kernel")]}", {var})   # self-check: runs every '
                                     "time you run this cell"), kernel
    assert "__launch_bounds__(NUM_THREADS, 2)" in cells["blocktile-2d-kernel"]     # given: section 6 removes it
    occupancy = cells["blocks-per-sm"]
    assert "raise NotImplementedError()" in occupancy and 'grader.check("blocks-per-sm", blocks_per_sm)' in occupancy
    for gone in ("REG_ALLOC_UNIT)", "round_up", "by_shared", "REG_SUB_PARTITIONS //"):
        assert gone not in occupancy, gone
    for var in ("GLOBAL_PER_FMA_NAIVE", "GLOBAL_PER_FMA_SMEM", "GLOBAL_PER_FMA_1D", "GLOBAL_PER_FMA_2D",
                "SHARED_PER_FMA_1D", "SHARED_PER_FMA_2D"):
        assert f"{var} = None  # YOUR ANSWER HERE" in text, var


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_per_cell(course, student):
    got = cell_scores(course, LAB, student)
    want = dict(EXPECTED[student])
    if ON_GPU:
        want.update({cell: float(p) for cell, p in GPU_CELLS[student].items()})
    assert got == pytest.approx(want), f"{student}: " + ", ".join(
        f"{k}: {got.get(k)} (expected {v})" for k, v in want.items() if got.get(k) != pytest.approx(v))


def test_reference_gets_every_point_but_the_gpu_only_ones():
    assert sum(EXPECTED["ref"].values()) == sum(FULL.values()) - sum(KERNEL_CELLS[c] for c in GPU_ONLY) == 21
    assert sum(EXPECTED["ref"].values()) + sum(GPU_CELLS["ref"].values()) == sum(FULL.values()) == 26


def test_broken_submissions_are_told_why(course):
    text = _outputs(course, "pastblock", "blocktile-2d-correctness")     # threadRow = tid / BN: rows 0..15 only
    if ON_GPU:    # the overrun faults on a GPU; the emulator's block shared memory holds it: rows never written
        assert "outside the arrays" in text and "a tile index past its tile?" in text, text
    else:
        assert "first at row 16, column 0" in text and "never written" in text, text
    text = _outputs(course, "nosync", "blocktile-1d-races")
    assert "shared-memory race (read after write) in 'sgemm_blocktile_1d'" in text, text
    assert "no __syncthreads() between them" in text, text
    text = _outputs(course, "granularity", "blocks-per-sm-h200-limits")
    assert ("blocks_per_sm(regs_per_thread=33, smem_per_block=0, threads_per_block=256) returned 7; 6 blocks of 256 "
            "threads fit on one H200 SM") in text, text
    text = _outputs(course, "noshared", "blocks-per-sm-h200-limits")
    assert ("blocks_per_sm(regs_per_thread=32, smem_per_block=49152, threads_per_block=256) returned 8; 4 blocks of "
            "256 threads fit on one H200 SM") in text, text
    text = _outputs(course, "blank", "blocks-per-sm-h200-limits")
    assert "your function is not written yet" in text, text
    if not ON_GPU:
        for cell in GPU_ONLY:
            assert "not graded: no GPU" in _outputs(course, "ref", cell), cell


def test_the_release_copy_runs_from_top_to_bottom(course):
    """The blank copy raises in no cell: the unanswered questions say so, the display cells say what is missing."""
    nb = autograded_notebook(course, LAB, "blank")
    errors = [(grade_id(c) or c.get("id"), o.get("ename"))
              for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors


def test_ptxas_and_maxrregcount_cells_do_not_show_made_up_numbers(course):
    from grader.emulator import build
    text = _outputs(course, "ref", "ptxas-cell") + _outputs(course, "ref", "maxrregcount-cell")
    if ON_GPU or build.nvcc():
        assert "registers per thread (num_regs)" in text and "-maxrregcount=32" in text, text
        assert "not known here" not in text and "not measured here" not in text, text
    else:
        assert "not known here" in text and "not measured here" in text, text
        assert "num_regs)" not in text, text


def test_no_stderr_in_graded_cells(course):
    assert not stderr_in_graded_cells(course, LAB, "ref")


def test_regrade_recomputes_every_cell(course):
    from grader.course.regrade import format_rows, regrade
    rows = regrade(course, LAB, ["ref", "granularity"])
    text = format_rows(rows)
    assert rows and all(r.regraded is not None for r in rows), text
    assert not [r for r in rows if r.differs], text

"""Lab 06 (warptiling and autotuning) through the whole nbgrader pipeline, in a
fresh temporary course holding only this lab: generate_assignment (no solution
left in the release copy, which still compiles), autograde of the reference
(every point but the three GPU-only ones on the emulator), of the blank release
copy, and of broken submissions, each with its exact score per graded cell;
`grader regrade` recomputes the cells from their text.

Broken submissions:
  keepsinvalid  search() never calls reject_fn: it keeps a configuration over the register budget
  nocheck       search() never calls check_fn: it keeps a configuration that computes a wrong C
  nosmem        violations() forgets the shared-memory rule
  warpindex     thread_offsets() takes the warp's column modulo BM / WM instead of BN / WN: half the
                warp tiles of each block are computed twice, the other half never (an incorrect C)
  hardbk        compute_tile() loops over 8 steps of k, not BK: right with the stage's own BK = 8 only
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
    replace,
    source_notebook,
    stderr_in_graded_cells,
)

LAB, NB = "06-warptiling-autotuning", "warptiling-autotuning"

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

import grader  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"

POINTS = {"q-warps-test": 1, "q-results-test": 1, "q-fma-ratio-test": 1, "warptiling-correctness": 4,
          "warptiling-races": 2, "warptiling-bank-conflicts": 2, "warptiling-configs": 2, "warptiling-performance": 2,
          "q-smem-test": 1, "q-registers-test": 1, "violations-tiles": 3, "violations-resources": 3, "search-fake": 3,
          "autotuned-performance": 2, "search-tuned-performance": 2}
GPU_ONLY = {"warptiling-performance", "autotuned-performance", "search-tuned-performance"}


def _reference_cells() -> dict[str, float]:
    """Every cell's points, except the GPU-only ones' on the emulator."""
    return {g: (0.0 if g in GPU_ONLY and not ON_GPU else float(p)) for g, p in POINTS.items()}


def _with(**changed) -> dict[str, float]:
    cells = _reference_cells()
    cells.update({k.replace("_", "-"): float(v) for k, v in changed.items()})
    return cells


# Per cell: what each submission scores. On a GPU, a kernel must be correct before its speed counts
# (warpindex: 0 for both of its kernel's performance cells). The GPU search test times the reference
# kernel with the configuration a search chooses among real ones: there keepsinvalid still skips the
# invalid configurations, because check_fn fails on them (one does not compile, one does not launch),
# and nocheck meets no incorrect one, so both choose a valid, fast configuration and get its points.
EXPECTED = {
    "ref": _reference_cells(),
    "blank": {g: 0.0 for g in POINTS},
    "keepsinvalid": _with(search_fake=0),
    "nocheck": _with(search_fake=0),
    "nosmem": _with(violations_resources=0),
    "warpindex": _with(warptiling_correctness=0, warptiling_configs=0, warptiling_performance=0,
                       autotuned_performance=0),
    "hardbk": _with(warptiling_configs=0),
}


def _keepsinvalid(cells):
    replace(cells["search"], "        if reject_fn(config):              # invalid: never compiled\n"
                             "            continue\n", "")


def _nocheck(cells):
    replace(cells["search"], "        if check_fn(config) is not None:   # compiles, but wrong (or does not compile "
                             "or launch)\n            continue\n", "")


def _nosmem(cells):
    replace(cells["violations"], "    smem = 4 * STAGES * BK * (BM + 4 + BN)\n"
                                 "    if MIN_BLOCKS * (smem + limits.smem_reserved_per_block) > limits.smem_per_sm:\n"
                                 "        why.append(f\"shared memory: {MIN_BLOCKS} x ({smem} + "
                                 "{limits.smem_reserved_per_block}) bytes > \"\n"
                                 "                   f\"{limits.smem_per_sm} per SM\")\n", "")


def _warpindex(cells):
    replace(cells["warptiling-kernel"], "warpCol = warp % (BN / WN);", "warpCol = warp % (BM / WM);")


def _hardbk(cells):
    replace(cells["warptiling-kernel"], "    for (int k = 0; k < BK; ++k) {", "    for (int k = 0; k < 8; ++k) {")


SUBMISSIONS = {"ref": None, "blank": False, "keepsinvalid": _keepsinvalid, "nocheck": _nocheck, "nosmem": _nosmem,
               "warpindex": _warpindex, "hardbk": _hardbk}


# The reference's notebook runs (its outputs are tested); the others are graded from their text.
course = lab_course(LAB, SUBMISSIONS, run=("ref",))


def test_release_has_no_solutions(course):
    text = (course / "release" / LAB / f"{NB}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "HIDDEN TESTS" not in text and "grader.grade(" not in text
    nb = nbformat.reads(text, as_version=4)
    src = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    kernel = src["warptiling-kernel"]
    assert kernel.count("// YOUR CODE HERE") == 3 and 'grader.check("warptiling"' in kernel
    for gone in ("warpRow = warp / (BN / WN)", "aOff = warpRow * WM", "acc[i][j] += regA[i] * regB[j];",
                 "&As[k][aOff + wm * WSUBM + i]"):
        assert gone not in kernel, gone
    for given in ("void thread_offsets(int& aOff, int& bOff)", "__pipeline_memcpy_async", "store_a(ra, As[0]);",
                  "const int row = rowBase + aOff + wm * WSUBM + i;"):
        assert given in kernel, given
    for gid, name in (("violations", "autotune-violations"), ("search", "autotune-search")):
        assert "raise NotImplementedError()" in src[gid] and f'grader.check("{name}"' in src[gid], gid
    for gone in ("limits.smem_per_sm", "reject_fn(config)", "32 % LC"):
        assert gone not in src["violations"] + src["search"], gone
    for var in ("WARPS_PER_BLOCK", "RESULTS_PER_THREAD", "FMAS_PER_FLOAT", "SMEM_BYTES", "REGISTER_ESTIMATE"):
        assert f"{var} = None  # YOUR ANSWER HERE" in text, var


def test_release_kernel_compiles():
    """The student's starting kernel compiles (and computes a wrong C), so the first self-check says why."""
    cell = next(c for c in source_notebook(LAB).cells if grade_id(c) == "warptiling-kernel")
    lines, out, skip = cell.source.split('"""')[1].splitlines(keepends=True), [], False
    for ln in lines:
        if ln.strip() == "// BEGIN SOLUTION":
            out.append(ln.replace("BEGIN SOLUTION", "YOUR CODE HERE"))
            skip = True
        elif ln.strip() == "// END SOLUTION":
            skip = False
        elif not skip:
            out.append(ln)
    result = grader.check("warptiling", "".join(out), checks=["compiles", "correctness"], announce=False)
    assert [r.status for r in result.results] == ["passed", "failed"], result.text()


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_scores_per_cell(course, student):
    got = cell_scores(course, LAB, student)
    assert got == pytest.approx(EXPECTED[student]), f"{student}: {got}"


def test_broken_submissions_say_why(course):
    out = cell_output(course, LAB, "keepsinvalid", "search-fake")
    assert "which reject_fn rejects" in out and "an invalid configuration" in out, out
    out = cell_output(course, LAB, "nocheck", "search-fake")
    assert "an incorrect one (check_fn: wrong result" in out, out
    out = cell_output(course, LAB, "nosmem", "violations-resources")
    assert "you accepted it; the grader rejects it: shared memory:" in out and "(A100)" in out, out
    assert "limits.smem" not in out, out                      # the reason, never the rule as code
    out = cell_output(course, LAB, "warpindex", "warptiling-correctness")
    assert "M=1 N=129 K=31" in out, out
    out = cell_output(course, LAB, "hardbk", "warptiling-configs")
    assert "BK=16" in out and "elements of C wrong" in out and "written as a number" in out, out
    out = cell_output(course, LAB, "blank", "violations-tiles")
    assert "not written yet" in out, out
    if not ON_GPU:
        for gid in GPU_ONLY:
            assert "not graded: no GPU" in cell_output(course, LAB, "ref", gid), gid


def test_no_stderr_in_graded_cells(course):
    assert not stderr_in_graded_cells(course, LAB, "ref")


def test_the_search_runs_on_the_real_kernel(course):
    cell = next(c for c in autograded_notebook(course, LAB, "ref").cells if grade_id(c) == "search-demo")
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert "chosen: BM=128 BN=256" in text and "check_fn" in text, text
    assert not any(o.output_type == "error" for o in cell.outputs), cell.outputs


def test_regrade_recomputes_the_cells(course):
    from grader.course.regrade import format_rows, regrade
    rows = regrade(course, LAB, ["ref", "nosmem"])
    text = format_rows(rows)
    assert rows and all(r.regraded is not None for r in rows), text
    assert not any(r.differs for r in rows), text

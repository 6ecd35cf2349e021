"""Lab 4's new pieces: the transpose host driver and its three checks, the
bank-conflict-free stage's check under other tile configurations, and the
expected answers of the lab's bank questions against the emulator's bank rule
(grader.emulator.analysis.bank_wavefronts). Every check passes the reference
and fails a broken kernel."""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.emulator.analysis import bank_wavefronts
from grader.grading import registry
from grader.grading.checks import bank_conflicts_configs
from grader.grading.checks import padded_transpose as checks
from grader.grading.registry import run_here
from grader.grading.report import FAILED, PASSED
from grader.kernels import transpose
from grader.kernels.stages import stage

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "labs" / "04-bank-conflicts" / "bank-conflicts.ipynb"
TRANSPOSE = (REPO / "solutions" / "transpose.cu").read_text()
BCF = stage("bank-conflict-free")
PADDED = BCF.source()
PAD_DEFINE = "#define AS_STRIDE (BM + 4)"


def variant(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new)


TILE32 = variant(TRANSPOSE, "tile[TILE_DIM][TILE_DIM + 1]", "tile[TILE_DIM][TILE_DIM]")
NOSYNC = variant(TRANSPOSE, "    __syncthreads();\n", "")
NO_OUT_BOUNDS = variant(TRANSPOSE, "    if (x0 + ty < cols && y0 + tx < rows)\n", "")
SWAPPED = variant(TRANSPOSE, "= tile[tx][ty];", "= tile[ty][tx];")
DIRECT = variant(TRANSPOSE, "= tile[tx][ty];", "= in[(y0 + tx) * cols + x0 + ty];")   # no shared-memory reads


# ---- the host driver -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (1, 33), (70, 45), (64, 96)])
def test_the_reference_transposes(shape):
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    assert np.array_equal(transpose.transpose(x), x.T)


def test_launch_covers_in_with_32x32_tiles():
    lc = transpose.launch(rows=45, cols=70)
    assert lc.grid == (3, 2, 1) and lc.block == (32, 32, 1)


TRANSPOSE_CHECKS = ("transpose-correctness", "transpose-races", "transpose-bank-conflicts")


# ---- the transpose checks ------------------------------------------------------------------------------------
def test_the_reference_passes_every_transpose_check():
    for check in TRANSPOSE_CHECKS:
        r = run_here("transpose", check, TRANSPOSE, 1)
        assert r.status == PASSED, r.text()


def test_shapes_are_not_square_nor_tile_multiples():
    assert all(r != c for r, c in checks.SHAPES if (r, c) != (1, 1))
    assert sum(r % 32 != 0 or c % 32 != 0 for r, c in checks.SHAPES) >= 5
    assert any(r == 1 for r, _ in checks.SHAPES) and any(c == 1 for _, c in checks.SHAPES)


def test_correctness_fails_a_missing_bounds_check_and_a_wrong_index():
    r = run_here("transpose", "transpose-correctness", NO_OUT_BOUNDS, 1)
    assert r.status == FAILED and "wrote outside out" in r.message and "missing bounds check" in r.message, r.text()
    r = run_here("transpose", "transpose-correctness", SWAPPED, 1)
    assert r.status == FAILED and "elements of out wrong; first out[" in r.message, r.text()


def test_races_fails_a_missing_syncthreads():
    r = run_here("transpose", "transpose-races", NOSYNC, 1)
    assert r.status == FAILED and "shared-memory race" in r.message and "__syncthreads()" in r.message, r.text()
    r = run_here("transpose", "transpose-correctness", NOSYNC, 1)
    assert r.status == FAILED, r.text()
    if ON_EMULATOR:           # threads run one after another there: the tile is read before it is written
        assert "shared memory read before it is written" in r.message and "never written" not in r.message, r.text()


def test_races_credit_only_an_output_computed_from_the_input():
    """Every element written, none raced on, but the same out for any input: no credit for being race-free."""
    indices = variant(TRANSPOSE, "= tile[tx][ty];", "= (float)(y0 + tx - (x0 + ty));")
    r = run_here("transpose", "transpose-races", indices, 1)
    assert r.status == FAILED and r.message.endswith(
        "out is the same for other inputs (it does not depend on them): only a kernel that transposes is credited "
        "with being race-free (the transpose-correctness check says what is wrong)"), r.text()
    assert run_here("transpose", "transpose-races", TRANSPOSE, 1).status == PASSED


def test_a_race_is_said_alone_where_the_output_is_not_computed_either():
    """The race is what to fix first: "only a kernel that transposes is credited" is said only where no race
    or bad access was found."""
    racy_and_empty = variant(NOSYNC, "        out[(x0 + ty) * rows + y0 + tx] = tile[tx][ty];",
                             "        if (tile[tx][ty] == 12345.0f) out[(x0 + ty) * rows + y0 + tx] = 1.0f;")
    r = run_here("transpose", "transpose-races", racy_and_empty, 1)
    assert r.status == FAILED and "shared-memory race" in r.message, r.text()
    assert "credited" not in r.message and "never written" not in r.message, r.text()


def test_bank_conflicts_fails_a_32x32_tile_with_line_and_ways():
    assert run_here("transpose", "transpose-correctness", TILE32, 1).status == PASSED
    r = run_here("transpose", "transpose-bank-conflicts", TILE32, 1)
    line = next(i for i, ln in enumerate(TILE32.splitlines(), 1) if "= tile[tx][ty];" in ln)
    assert r.status == FAILED, r.text()
    assert f"line {line} (load): 32-way bank conflict" in r.message, r.text()
    assert "thread to bank" in r.message and "warp 0 (threads 0-31" in r.message, r.text()
    assert "bank 0 holds 32 distinct word(s)" in r.message, r.text()


def test_bank_conflicts_credits_only_a_correct_transpose_through_shared_memory():
    r = run_here("transpose", "transpose-bank-conflicts", DIRECT, 1)
    assert r.status == FAILED and "never loads from shared memory" in r.message, r.text()
    r = run_here("transpose", "transpose-bank-conflicts", NOSYNC, 1)
    assert r.status == FAILED and "only a correct transpose is credited" in r.message, r.text()
    blank = TRANSPOSE[:TRANSPOSE.index("{\n") + 2] + "    // YOUR CODE HERE\n}\n"
    for check in TRANSPOSE_CHECKS:
        assert run_here("transpose", check, blank, 1).status == FAILED


def test_a_source_that_does_not_compile_fails_every_check_saying_so():
    bad = variant(TRANSPOSE, "__syncthreads();", "__syncthreads()")
    for check in TRANSPOSE_CHECKS:
        r = run_here("transpose", check, bad, 1)
        assert r.status == FAILED and "does not compile" in r.message and "kernel.cu:" in r.message, r.text()


# ---- bank-conflicts-configs ----------------------------------------------------------------------------------
def test_the_exercise_grades_the_padding_under_other_configurations_before_performance():
    names = registry.get("bank-conflict-free").check_names
    assert names == ["compiles", "correctness", "races", "bank-conflicts", "bank-conflicts-configs", "performance"]
    assert registry.get("transpose").check_names == ["transpose-correctness", "transpose-races",
                                                      "transpose-bank-conflicts"]


def test_an_empty_kernel_earns_no_conflict_points():
    """No shared memory, no conflicts: the stage's bank-conflicts check credits only a kernel that computes C."""
    body = PADDED.index("    static_assert(BM % 32")
    empty = PADDED[:body] + "}\n"
    r = run_here("bank-conflict-free", "bank-conflicts", empty, 1)
    assert r.status == FAILED and "only a kernel that computes C is credited" in r.message, r.text()
    assert run_here("bank-conflict-free", "bank-conflicts", PADDED, 1).status == PASSED
    assert run_here(BCF, bank_conflicts_configs.CHECK, empty, 1).status == FAILED


def test_configs_differ_from_the_stage_in_every_tile_parameter_that_padding_can_depend_on():
    own = dict(BCF.defines)
    configs = bank_conflicts_configs.configs(BCF)
    assert len(configs) >= 2 and all(set(d) == set(own) and d != own for d in configs)
    for key in ("BM", "BK", "TM", "TN"):
        assert any(d[key] != own[key] for d in configs), key
    assert any(d["BM"] > own["BM"] for d in configs)          # a row length written as a number overflows


def test_configs_pass_the_reference():
    r = run_here(BCF, bank_conflicts_configs.CHECK, PADDED, 1)
    assert r.status == PASSED, r.text()
    assert r.message.count("C correct") == 2 * len(bank_conflicts_configs.configs(BCF))


@pytest.mark.parametrize("stride, expect", [
    ("BM", "8-way bank conflict"),                        # unpadded: fails in every configuration
    ("132", "BM=256 BN=64 BK=8 TM=8 TN=4:\n  M=293"),     # 128 + 4 as a number: overflows the rows with BM = 256
    ("(BM + BK / 2)", "2-way bank conflict"),             # right for BK = 8 only
])
def test_configs_fail_a_padding_tuned_to_one_shape(stride, expect):
    source = variant(PADDED, PAD_DEFINE, f"#define AS_STRIDE {stride}")
    r = run_here(BCF, bank_conflicts_configs.CHECK, source, 1)
    assert r.status == FAILED and expect in r.message, r.text()


def test_a_padding_tuned_to_one_shape_passes_the_stage_check_alone():
    """Why the configurations are needed: 128 + 4 written as a number passes the stage's own check."""
    from grader.grading.checks import bank_conflicts
    source = variant(PADDED, PAD_DEFINE, "#define AS_STRIDE 132")
    assert run_here(BCF, bank_conflicts.CHECK, source, 1).status == PASSED


# ---- the questions' expected answers, from the bank rule -----------------------------------------------------
def _ways(addresses: dict[int, int], size: int) -> int:
    return bank_wavefronts(addresses, size).max_ways


def _store_ways(stride: int) -> int:
    """The warp's store As[k][m], lane l: k = l mod 8, m = l / 8, rows of `stride` floats."""
    return _ways({lane: 4 * ((lane % 8) * stride + lane // 8) for lane in range(32)}, 4)


TRUTH = {
    "WAYS_COLUMN_32": _ways({lane: 4 * 32 * lane for lane in range(32)}, 4),
    "WAYS_COLUMN_33": _ways({lane: 4 * 33 * lane for lane in range(32)}, 4),
    "WAYS_STRIDE_2": _ways({lane: 4 * 2 * lane for lane in range(32)}, 4),
    "WAYS_FLOAT4_STRIDE_2": _ways({lane: 16 * 2 * lane for lane in range(32)}, 16),
    "WAYS_BROADCAST": _ways({lane: 4 * 7 for lane in range(32)}, 4),
    "WAYS_UNPADDED": _store_ways(128),
    "WAYS_PAD_1": _store_ways(128 + 1),
    "PAD_FLOATS": next(p for p in range(1, 64) if p % 4 == 0 and _store_ways(128 + p) == 1),
}


def _question_cells() -> dict[str, tuple[float, float, float]]:
    """{VAR: (expected, low, high)} from the notebook's test cells."""
    found = {}
    for cell in nbformat.read(str(NOTEBOOK), as_version=4).cells:
        if not cell.metadata.get("nbgrader", {}).get("grade") or "grade_answer" not in cell.source:
            continue
        calls = [n for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Call)]
        grade = next(c for c in calls if getattr(c.func, "attr", "") == "grade_answer")
        sanity = next(c for c in calls if getattr(c.func, "attr", "") == "sanity_check")
        var = grade.args[0].id
        found[var] = (ast.literal_eval(grade.args[1]), ast.literal_eval(sanity.args[1]),
                      ast.literal_eval(sanity.args[2]))
    return found


def test_the_truth_is_what_the_lab_says():
    assert TRUTH == {"WAYS_COLUMN_32": 32, "WAYS_COLUMN_33": 1, "WAYS_STRIDE_2": 2, "WAYS_FLOAT4_STRIDE_2": 2,
                     "WAYS_BROADCAST": 1, "WAYS_UNPADDED": 8, "WAYS_PAD_1": 4, "PAD_FLOATS": 4}
    # the padded store of the reference kernel is conflict-free, and so is its float4 alignment
    assert _store_ways(BCF.defines["BM"] + TRUTH["PAD_FLOATS"]) == 1


def test_question_answers_are_the_bank_rule():
    questions = _question_cells()
    assert set(questions) == set(TRUTH)
    for var, (expected, low, high) in questions.items():
        assert expected == TRUTH[var], var
        assert low <= expected <= high, var          # the visible plausibility check accepts the right answer

"""Common mistakes, each a small edit of a reference (a kernel of solutions/ or a function of a lab's source
notebook, edited here; lab 3's unwritten function in tests/mistakes/03/): the verdict of the checks that
should catch it, the key words of the cause they name (each said once), and words that would mislead."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from nbgrader_course import reference_answer

import grader
from grader.grading.checks import wrong_patterns
from grader.grading.registry import run_here
from grader.grading.report import FAILED, NOT_GRADED, CheckReport, CheckResult

MISTAKES = Path(__file__).resolve().parent / "mistakes"
SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
PRINTF = ("        C[row * N + col] = sum;\n",
          "        C[row * N + col] = sum;\n    if (row == 0 && col == 0) printf(\"C[0][0] = %f\\n\", sum);\n")
AS_STRIDE = "#define AS_STRIDE (BM + 4)             // floats per row of As: 4 (mod 32) banks apart"
# Each mistake: its reference (a kernel of solutions/, or a lab's answer in its source notebook: (lab, exercise))
# and the edits (as written there, as the mistake writes it).
MATMUL = ("00-pycuda-by-hand", "pycuda-matmul")
EDITS = {
    "00/b_not_converted.py": (MATMUL, ("    B = np.ascontiguousarray(B, dtype=np.float32)\n", "")),
    "00/block_grid_swapped.py": (MATMUL, ("block=block, grid=grid)", "block=grid, grid=block)")),
    "00/c_not_copied_back.py": (MATMUL, ("    return c_gpu.get()\n",
                                         "    C = np.zeros((M, N), np.float32)\n    return C\n")),
    "01/no_bounds_check.cu": (SOLUTIONS / "coalesced.cu", ("    if (row < M && col < N) {", "    {")),
    "02/printf_cstdio.cu": (SOLUTIONS / "smem-tiling.cu", ("", "#include <cstdio>\n"), PRINTF),
    "02/printf_stdio_h.cu": (SOLUTIONS / "smem-tiling.cu", ("", "#include <stdio.h>\n"), PRINTF),
    "03/mapping_1d.cu": (SOLUTIONS / "blocktile-2d.cu", (
        "    const int threadCol = tid % (BN / TN);   // columns threadCol*TN .. +TN-1 of the tile\n"
        "    const int threadRow = tid / (BN / TN);   // rows    threadRow*TM .. +TM-1\n",
        "    const int threadCol = tid % BN;\n    const int threadRow = tid / BN;\n")),
    "03/store_bound_off_by_one.cu": (SOLUTIONS / "blocktile-2d.cu", (
        "            if (row < M && col < N)", "            if (row < M - 1 && col < N)")),
    "04/as_stride_literal.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE 132")),
    "04/as_stride_plus_1.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE (BM + 1)")),
    "04/as_stride_unpadded.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE BM")),
    "04/transpose_tile_not_swapped.cu": (SOLUTIONS / "transpose.cu", ("= tile[tx][ty];", "= tile[ty][tx];")),
    "06/bk_literal.cu": (SOLUTIONS / "warptiling.cu", ("    for (int k = 0; k < BK; ++k) {",
                                                      "    for (int k = 0; k < 8; ++k) {")),
    "06/lane_layout_literal.cu": (SOLUTIONS / "warptiling.cu", (
        "const int laneRow = lane / LC, laneCol = lane % LC;", "const int laneRow = lane / 8, laneCol = lane % 8;")),
    "06/no_fragment_reload.cu": (SOLUTIONS / "warptiling.cu", (
        "        if (k > 0) load_fragments(As, Bs, k, aOff, bOff, regA, regB);\n", "")),
}


def source(file: str) -> str:
    """The mistake's source: its reference with its edits, or the function in tests/mistakes."""
    if file not in EDITS:
        return (MISTAKES / file).read_text()
    reference, *edits = EDITS[file]
    text = reference.read_text() if isinstance(reference, Path) else reference_answer(*reference)
    for old, new in edits:
        assert old in text, (file, old)
        text = text.replace(old, new, 1) if old else new + text
    return text


@dataclass(frozen=True)
class Mistake:
    file: str                   # a key of EDITS, or a file under tests/mistakes
    exercise: str
    check: str
    status: str
    said_once: tuple[str, ...] = ()     # key words of the diagnosis, each exactly once
    never: tuple[str, ...] = ()         # what would mislead
    order: tuple[str, ...] = ()         # said in this order (a picture after the configuration it shows)

    def __str__(self) -> str:
        return f"{self.file}:{self.check}"


CASES = [
    Mistake("00/block_grid_swapped.py", "pycuda-matmul", "matmul-correct", FAILED,
            said_once=("M=3 N=33000 K=5:", "swapped", "block=(1032, 1, 1)")),
    Mistake("00/c_not_copied_back.py", "pycuda-matmul", "matmul-correct", FAILED,
            said_once=("copied back", "every element of C is 0")),
    Mistake("00/b_not_converted.py", "pycuda-matmul", "matmul-float64", FAILED,
            said_once=("B went to the device as float64", "np.ascontiguousarray(B, dtype=np.float32)"),
            never=("np.ascontiguousarray(A",)),
    Mistake("01/no_bounds_check.cu", "coalesced", "correctness", FAILED,
            said_once=("a missing bounds check?",)),
    Mistake("03/blocks_per_sm_not_written.py", "blocks-per-sm", "h200-limits", FAILED,
            said_once=("your function is not written yet",), never=("raised NotImplementedError",)),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "correctness", FAILED,
            said_once=("line 84", "thread (0, 0, 0)", "misaligned", "16-byte shared read", "M=17 N=33 K=9"),
            never=("(nil)", "outside the arrays", "bounds check")),
    Mistake("04/as_stride_unpadded.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("extra shared-memory wavefronts", "BM=256 BN=64 BK=8 TM=8 TN=4:\n"),
            never=("written as a number",),
            order=("BM=64 BN=128 BK=16 TM=4 TN=8:\n", "block (0, 0, 0), warp 0", "BM=256 BN=64 BK=8 TM=8 TN=4:\n",
                   "block (0, 0, 0), warp 0 (threads 0-31")),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("breaks a vector access's alignment",), never=("written as a number",)),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "races", FAILED,
            said_once=("line 84", "misaligned", "byte 4612 of the block's shared memory"), never=("0x",)),
    Mistake("04/as_stride_literal.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("line 69", "thread (7, 0, 0)", "shared arrays", "BM=256 BN=64 BK=8 TM=8 TN=4:",
                       "0 load and 0 store bank conflicts"),
            never=("past the end of argument", "not inside any device allocation")),
    Mistake("03/mapping_1d.cu", "blocktile-2d", "correctness", FAILED,
            said_once=("row 16, columns 0..32 of C were never written", "a thread mapping")),
    Mistake("03/store_bound_off_by_one.cu", "blocktile-2d", "correctness", FAILED,
            said_once=("partial 128 x 128 tiles are wrong (row 256)", "the tile's edge", "a thread mapping")),
    Mistake("04/transpose_tile_not_swapped.cu", "transpose", "transpose-correctness", FAILED,
            said_once=("mirrors inside their 32 x 32 tile", "same index order")),
    Mistake("03/mapping_1d.cu", "blocktile-2d", "races", NOT_GRADED,
            said_once=("never written", "credited"), never=("race(s)",)),
    Mistake("06/no_fragment_reload.cu", "warptiling", "bank-conflicts-configs", FAILED,
            never=("written as a number", "belongs")),
    Mistake("06/bk_literal.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("differ in BN, BK,", "written as a number")),
    Mistake("06/lane_layout_literal.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("differ in TM, TN", "written as a number")),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_common_mistake_gets_its_cause_said_once(case: Mistake):
    r = run_here(case.exercise, case.check, source(case.file), 1)
    text = r.message
    assert r.status == case.status, text
    for words in case.said_once:
        assert len(re.findall(re.escape(words), text)) == 1, f"{words!r} not said exactly once:\n{text}"
    for words in case.never:
        assert words not in text, f"{words!r} misleads:\n{text}"
    at = 0
    for words in case.order:
        at = text.find(words, at)
        assert at >= 0, f"not in the order {case.order}:\n{text}"


@pytest.mark.parametrize("file", ["02/printf_cstdio.cu", "02/printf_stdio_h.cu"])
def test_a_kernel_that_prints_with_printf_is_graded_and_its_output_shown(file):
    report = grader.check("smem-tiling", source(file), ["correctness"], seed=1)
    assert report.passed("correctness"), report.text()
    assert "C[0][0] = " in report["correctness"].output and "refuse" not in report.text()


def test_output_captured_by_several_checks_is_shown_once():
    log = "kernel.cu:31: warning: unused variable 'unused'"
    results = [CheckResult.make(name, True, "fine", output=log) for name in ("compiles", "correctness", "races")]
    report = CheckReport("smem-tiling", results)
    assert report.text().count("unused variable") == 1
    assert report._repr_html_().count("unused variable") == 1


def test_a_pattern_is_suggested_only_where_it_is():
    rng = np.random.default_rng(0)
    want = rng.uniform(-1, 1, (40, 40)).astype(np.float32)
    assert wrong_patterns.transposed_in_tiles(want + 1, want) is None          # wrong everywhere, not mirrored
    bad = np.zeros((40, 40), bool)
    bad[3, 5] = bad[35, 35] = True
    assert wrong_patterns.partial_tiles_only(bad, (32, 32)) is None            # a whole tile is wrong too
    C = np.where(bad, np.float32(np.nan), want)
    assert wrong_patterns.unwritten_rectangle(C, bad) is None                 # computed NaN, not unwritten


@pytest.mark.skipif(grader.BACKEND.name != "emulator", reason="the emulator's own message for a CPU fault")
def test_a_fault_the_cpu_gives_no_address_for_is_not_reported_at_nil():
    """A misaligned float4 read of shared memory, run without the analysis (as the correctness check first does)."""
    from grader.emulator.pycuda import driver
    from grader.kernels import sgemm
    from grader.kernels.stages import stage
    A = B = np.ones((64, 64), np.float32)
    function = sgemm.compile_kernel(stage("bank-conflict-free"), source("04/as_stride_plus_1.cu"))
    with pytest.raises(driver.LaunchError) as err:
        sgemm.run(stage("bank-conflict-free"), A, B, function)
    assert "(nil)" not in str(err.value) and "misaligned" in str(err.value), str(err.value)

"""Lab 3's blocks_per_sm exercise (grader/grading/checks/blocks_per_sm.py): the
notebook's reference passes, every way of getting a rule wrong fails with the
first differing input and both answers (never the rule), odd return values
and exceptions are reported, and the GPU-only comparison with the CUDA
occupancy API is 'not graded' on the emulator and compares (leaving out what
the grader's own calculator disagrees on) where it runs."""
from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest

import grader
from grader.grading.checks import blocks_per_sm as of
from grader.grading.host_functions import source_from_cells
from grader.grading.protocol import Context
from grader.grading.registry import run_here
from grader.grading.report import FAILED, NOT_GRADED, PASSED

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "labs" / "03-register-blocking" / "register-blocking.ipynb"


def _notebook_source() -> str:
    """The limits cell and the blocks_per_sm cell of the notebook, as the grader rebuilds them (regrade's way)."""
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    limits = {}
    exec(cells["h200-limits"], limits)
    values = {k: v for k, v in limits.items() if k.isupper()}
    return source_from_cells([cells["blocks-per-sm"].split("grader.check(")[0]], values)


REFERENCE = _notebook_source()


def _broken(old: str, new: str) -> str:
    assert old in REFERENCE, old
    return REFERENCE.replace(old, new)


# The notebook's worked examples and the rules' boundaries, worked out by hand from the H200's limits.
HAND = {
    (40, 4096, 512): 3,      # the 1D reference: registers (12 warps per sub-partition, 48 per SM, 16 per block)
    (128, 8192, 256): 2,     # the 2D reference
    (129, 8192, 256): 1,     # 4128 -> 4352 per warp, 3 per sub-partition
    (33, 0, 256): 6,         # 1056 -> 1280 per warp (7 without the allocation unit)
    (40, 0, 64): 24,         # 12 warps per sub-partition (25 from 65536 // 1280)
    (32, 49152, 256): 4,     # 50176 bytes per block
    (32, 32256, 64): 7, (32, 32257, 64): 6,     # 33280 bytes; 33281 -> 33408
    (32, 76800, 32): 3, (32, 76801, 32): 2, (32, 77824, 32): 2,   # 77824 = 233472 / 3 with the reservation
    (72, 0, 1024): 0,        # 28 warps by registers < 32 per block
    (64, 0, 1024): 1,
    (16, 0, 32): 32, (16, 0, 48): 32,           # the block limit; a partial warp is a warp
    (32, 232448, 128): 1,    # 227 KiB + 1 KiB = the whole SM
    (1, 0, 1): 32, (255, 0, 256): 1, (255, 0, 288): 0,
}


@pytest.mark.parametrize("args", sorted(HAND))
def test_the_grader_calculator_agrees_with_the_worked_examples(args):
    assert of.expected(*args) == HAND[args]


def test_edge_cases_are_in_the_domain_and_cover_every_limit():
    limits = set()
    for regs, smem, threads in of.EDGE_CASES + of.random_cases(np.random.default_rng(1), 500):
        assert 1 <= regs <= of.MAX_REGS and 0 <= smem <= of.MAX_SMEM and 1 <= threads <= of.MAX_THREADS
        occ = grader.references.occupancy.occupancy(regs, smem, threads)
        limits.update(occ.limited_by or ("nothing fits",))
    assert limits >= {"warps", "blocks", "registers", "shared memory", "nothing fits"}


def test_random_cases_follow_the_seed():
    assert of.random_cases(np.random.default_rng(5), 50) == of.random_cases(np.random.default_rng(5), 50)
    assert of.random_cases(np.random.default_rng(5), 50) != of.random_cases(np.random.default_rng(6), 50)


def test_the_notebooks_reference_passes():
    r = run_here("blocks-per-sm", "h200-limits", REFERENCE, 7)
    assert r.status == PASSED and r.points == 1.0, r.text()
    assert f"right on all {len(of.EDGE_CASES) + of.RANDOM_CASES} inputs" in r.message


BROKEN = {
    "no allocation unit": (("regs_per_warp = round_up(regs_per_thread * WARP_SIZE, REG_ALLOC_UNIT)",
                            "regs_per_warp = regs_per_thread * WARP_SIZE"),
                           "blocks_per_sm(regs_per_thread=33, smem_per_block=0, threads_per_block=256) returned 7; "
                           "6 blocks of 256 threads fit on one H200 SM"),
    "whole register file": (("warps_per_sub_partition * REG_SUB_PARTITIONS // warps",
                             "REGS_PER_SM // regs_per_warp // warps"),
                            "blocks_per_sm(regs_per_thread=40, smem_per_block=0, threads_per_block=64) returned 25; "
                            "24 blocks of 64 threads fit on one H200 SM"),
    "no reservation": (("round_up(smem_per_block + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)",
                        "round_up(max(smem_per_block, 1), SMEM_ALLOC_UNIT)"),
                       "blocks_per_sm(regs_per_thread=32, smem_per_block=32257, threads_per_block=64) returned 7; "
                       "6 blocks of 64 threads fit on one H200 SM"),
    "no shared-memory rounding": (("round_up(smem_per_block + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)",
                                   "(smem_per_block + SMEM_RESERVED_PER_BLOCK)"),
                                  "blocks_per_sm(regs_per_thread=32, smem_per_block=32257, threads_per_block=64) "
                                  "returned 7; 6 blocks of 64 threads fit on one H200 SM"),
    "no shared-memory limit": (("min(by_warps, MAX_BLOCKS_PER_SM, by_registers, by_shared)",
                                "min(by_warps, MAX_BLOCKS_PER_SM, by_registers)"),
                               "blocks_per_sm(regs_per_thread=32, smem_per_block=49152, threads_per_block=256) "
                               "returned 8; 4 blocks of 256 threads fit on one H200 SM"),
    "no block limit": (("min(by_warps, MAX_BLOCKS_PER_SM, by_registers, by_shared)",
                        "min(by_warps, by_registers, by_shared)"),
                       "blocks_per_sm(regs_per_thread=16, smem_per_block=0, threads_per_block=32) returned 64; "
                       "32 blocks of 32 threads fit on one H200 SM"),
    "floor of the warps": (("warps = (threads_per_block + WARP_SIZE - 1) // WARP_SIZE",
                            "warps = max(1, threads_per_block // WARP_SIZE)"),
                           "blocks_per_sm(regs_per_thread=16, smem_per_block=0, threads_per_block=700) returned 3; "
                           "2 blocks of 700 threads fit on one H200 SM"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_wrong_rule_fails_naming_the_first_input(name):
    (old, new), first = BROKEN[name]
    r = run_here("blocks-per-sm", "h200-limits", _broken(old, new), 3)
    assert r.status == FAILED and r.points == 0.0, r.text()
    assert "inputs tried differ; the first:\n  " + first in r.message, r.message
    for rule_word in ("round", "sub-partition", "reserv", "granular", "256 registers", "1024 bytes"):
        assert rule_word not in r.message.lower(), (rule_word, r.message)


@pytest.mark.parametrize("body, said", [
    ("return None", "returned None (a missing return?): return the number of blocks, an int"),
    ("return 2.5", "returned 2.5: a number of blocks is a whole number (use // to divide)"),
    ("return True", "returned True"),
    ("return 'two'", "returned 'two'"),
    ("raise NotImplementedError", "threads_per_block=256): your function is not written yet"),
    ("raise NotImplementedError('why')", "raised NotImplementedError: why"),
    ("return 1 // (threads_per_block - threads_per_block)", "raised ZeroDivisionError"),
])
def test_odd_answers_are_reported(body, said):
    source = f"def blocks_per_sm(regs_per_thread, smem_per_block, threads_per_block):\n    {body}\n"
    r = run_here("blocks-per-sm", "h200-limits", source, 1)
    assert r.status == FAILED and said in r.message, r.message
    assert r.message.startswith("blocks_per_sm(regs_per_thread=32, smem_per_block=0, threads_per_block=256)"), \
        r.message


def test_integral_floats_and_numpy_integers_are_accepted():
    source = REFERENCE.replace("return min(", "return np.int64(1) * float(min(").replace(
        "by_registers, by_shared)", "by_registers, by_shared))")
    assert "import numpy as np" not in source
    r = run_here("blocks-per-sm", "h200-limits", "import numpy as np\n" + source, 2)
    assert r.status == PASSED, r.text()


def test_a_submission_without_the_function():
    r = run_here("blocks-per-sm", "h200-limits", "def blocks_per_SM(a, b, c):\n    return 1\n", 1)
    assert r.status == FAILED and "does not define blocks_per_sm(regs_per_thread, smem_per_block, " \
        "threads_per_block)" in r.message, r.message
    r = run_here("blocks-per-sm", "h200-limits", "def blocks_per_sm(:\n", 1)
    assert r.status == FAILED and "SyntaxError" in r.message, r.message


@pytest.mark.skipif(grader.BACKEND.name == "gpu", reason="on a GPU the API is asked")
def test_the_cuda_check_is_not_graded_without_a_gpu():
    r = run_here("blocks-per-sm", "cuda-occupancy-api", REFERENCE, 1)
    assert r.status == NOT_GRADED and r.points == 0 and "not graded: no GPU" in r.message


def test_the_cuda_check_compares_with_the_api_and_leaves_out_disagreements():
    """The judging of what a GPU collected: the API's answers are the grader's, except one case where the 'API'
    says something else (left out, named) and one where it failed (left out)."""
    cases, left_out = [], []
    for regs in (33, 128):
        for threads in of.BLOCK_THREADS:
            for dynamic in of.DYNAMIC_SHARED:
                args = [regs, 8192 + dynamic, threads]
                if (regs, threads, dynamic) == (128, 1024, 0):
                    left_out.append(f"regs {regs}, {threads} threads: cuOccupancyMaxActiveBlocksPerMultiprocessor "
                                    "failed with CUresult 1")
                    continue
                cases.append([args, 99 if (regs, threads, dynamic) == (33, 96, 0) else of.expected(*args)])
    ctx = Context("blocks-per-sm", gpu=True)

    def judged(source: str):
        ns: dict = {}
        exec(source, ns)
        answers = [ns["blocks_per_sm"](*args) for args, _ in cases]
        return of.judge_cuda(({"cases": cases, "left_out": left_out, "answers": answers}, {}), 1, ctx)

    r = judged(REFERENCE)
    assert r.status == PASSED, r.text()
    assert r.details == {"inputs": len(cases) - 1, "differ": 0, "left_out": 2}
    assert "2 input(s) left out" in r.message and "the CUDA API says 99, the grader's calculator 16" in r.message
    assert "CUresult 1" in r.message

    r = judged(_broken("regs_per_warp = round_up(regs_per_thread * WARP_SIZE, REG_ALLOC_UNIT)",
                       "regs_per_warp = regs_per_thread * WARP_SIZE"))
    assert r.status == FAILED, r.text()
    assert r.message.startswith("against the CUDA occupancy API"), r.message
    assert ("the first:\n  blocks_per_sm(regs_per_thread=33, smem_per_block=8192, threads_per_block=64) returned 25; "
            "24 blocks of 64 threads fit on one H200 SM") in r.message, r.message

    r = of.judge_cuda(({"not_graded": "limits"}, {}), 1, ctx)
    assert r.status == NOT_GRADED and "not the H200's" in r.message


def test_through_the_front_end():
    """grader.check and grader.grade run both checks in their own processes, from the submission's text."""
    report = grader.check("blocks-per-sm", REFERENCE, seed=11, announce=False)
    assert report["h200-limits"].status == PASSED, report["h200-limits"].text()
    assert report["cuda-occupancy-api"].status == (PASSED if grader.BACKEND.name == "gpu" else NOT_GRADED)
    broken = _broken("by_registers, by_shared)", "by_registers)")
    assert grader.grade("blocks-per-sm", broken, "h200-limits", points=3) == 0.0

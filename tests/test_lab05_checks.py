"""The checks lab 5 adds (grader/checks/alignment.py, and bank-conflicts
credited only for a kernel that computes C) and their registration: each passes
the reference kernels and fails a broken one, saying why."""
from __future__ import annotations

import pytest

from grader.grading import registry
from grader.grading.checks import alignment, bank_conflicts, races
from grader.grading.registry import run_here
from grader.kernels.stages import stage

VEC, DB = stage("vectorized"), stage("double-buffering")
POINTER_TEST = ("    const bool vec = ((K | N) & 3) == 0 &&\n"
                "        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |\n"
                "          reinterpret_cast<unsigned long long>(C)) & 15) == 0;\n")


def variant(st, new_condition: str) -> str:
    source = st.source()
    assert source.count(POINTER_TEST) == 1
    return source.replace(POINTER_TEST, f"    const bool vec = {new_condition};\n")


def case_lines(message: str) -> dict[str, str]:
    """The alignment report's line per case, by the case's description."""
    return {c.describe(): next(ln for ln in message.splitlines() if ln.startswith(c.describe() + ":"))
            for c in alignment.CASES}


def test_the_cases_cover_tails_and_offset_views():
    assert any(c.K % 4 and not any(c.offsets) for c in alignment.CASES)
    assert any(c.N % 4 and not any(c.offsets) for c in alignment.CASES)
    for i in range(3):        # each of A, B, C alone off a 16-byte boundary, with K and N multiples of 4
        assert any(c.offsets[i] and sum(map(bool, c.offsets)) == 1 and not (c.K % 4 or c.N % 4)
                   for c in alignment.CASES)
    assert all(c.M % 128 and c.N % 128 for c in alignment.CASES)       # never tile multiples


@pytest.mark.parametrize("st", [VEC, DB], ids=lambda s: s.id)
def test_alignment_passes_the_references(st):
    r = run_here(st, alignment.CHECK, st.source(), 3)
    assert r.passed, r.message
    assert r.message.startswith(f"correct in all {len(alignment.CASES)} cases")
    assert "fallback" not in r.message


def test_alignment_fails_a_float4_path_without_fallback():
    r = run_here(VEC, alignment.CHECK, variant(VEC, "true"), 3)
    assert not r.passed
    lines = case_lines(r.message)
    assert lines["M=67 N=68 K=28, A, B, C 16-byte aligned"].endswith(": correct")     # the float4 path itself
    k_line = lines["M=67 N=68 K=27, A, B, C 16-byte aligned"]
    assert "misaligned 16-byte read of A" in k_line and "K = 27 is not a multiple of 4" in k_line, k_line
    assert "only one row in 4" in k_line
    assert "N = 37 is not a multiple of 4" in lines["M=67 N=37 K=28, A, B, C 16-byte aligned"]
    assert r.message.count("the float4 path needs a fallback") == 1         # said once, at the end


def test_alignment_names_each_misaligned_pointer():
    r = run_here(VEC, alignment.CHECK, variant(VEC, "((K | N) & 3) == 0"), 3)        # shapes tested, pointers not
    assert not r.passed
    lines = case_lines(r.message)
    for pointer, op in (("A", "read"), ("B", "read"), ("C", "write")):
        offsets = tuple(int(p == pointer) for p in "ABC")
        line = lines[alignment.Case(67, 68, 28, offsets).describe()]
        assert f"misaligned 16-byte {op} of {pointer}" in line, line
        assert f"{pointer} starts 4 bytes past a 16-byte boundary (a view 1 float into its allocation)" in line
        assert "address 4 bytes past a multiple of 16" in line
    assert lines["M=67 N=68 K=27, A, B, C 16-byte aligned"].endswith(": correct")
    assert r.message.startswith("wrong in 3 of 7 cases")


def test_alignment_catches_a_forgotten_c_in_double_buffering():
    only_ab = ("((K | N) & 3) == 0 && ((reinterpret_cast<unsigned long long>(A) | "
               "reinterpret_cast<unsigned long long>(B)) & 15) == 0")
    r = run_here(DB, alignment.CHECK, variant(DB, only_ab), 3)
    assert not r.passed
    wrong = [ln for ln in r.message.splitlines()[1:] if not ln.endswith(": correct") and "fallback" not in ln]
    assert len(wrong) == 1 and "misaligned 16-byte write of C" in wrong[0], r.message


def test_alignment_reports_a_kernel_that_does_not_compile():
    r = run_here(VEC, alignment.CHECK, VEC.source().replace("const bool vec", "const bool vec vec"), 3)
    assert not r.passed and "does not compile" in r.message


def test_races_run_the_float4_path():
    """A __syncthreads() missing only from the float4 path's loop is found (on the races check's shape whose
    N and K are multiples of 4), at the lines that race."""
    source = VEC.source()
    vec_loop = "load_tiles(true, M, N, K, A, B, rowBase, colBase, k0, As, Bs);\n            __syncthreads();\n"
    assert source.count(vec_loop) == 1
    r = run_here(VEC, races.CHECK, source.replace(vec_loop, vec_loop.replace("__syncthreads();", ""), 1), 3)
    assert not r.passed
    assert r.message.startswith("M=36 N=40 K=20") and "race(s) on shared or global memory" in r.message, r.message
    described = [ln for ln in r.message.splitlines() if "touch the same word" in ln]
    assert described and len(described) == len(set(described)), r.message      # each race said once


def test_bank_conflicts_need_a_kernel_that_computes_c():
    empty = VEC.source()
    start = empty.index("    // float4 path: every row")
    end = empty.rindex("}")
    r = run_here(VEC, bank_conflicts.CHECK, empty[:start] + empty[end:], None)
    assert not r.passed
    assert "0 load and 0 store bank conflicts" in r.message
    assert "only a kernel that computes C is credited" in r.message
    assert run_here(VEC, bank_conflicts.CHECK, VEC.source(), None).passed


def test_registration():
    for st in (VEC, DB):
        ex = registry.get(st.id)
        assert ex.check_names == ["compiles", "correctness", "alignment", "races", "bank-conflicts", "performance"]
        assert ex.check("alignment") is alignment.CHECK and ex.stage == st
        assert ex.check("bank-conflicts") is bank_conflicts.CHECK
    assert "alignment" not in registry.get("bank-conflict-free").check_names

"""Lab 5 (float4 loads and double buffering) through the nbgrader pipeline, in
a temporary course holding only this lab: generate_assignment (no solution
left), autograde of the reference (every point but performance on a machine
without a GPU), of the blank release copy, and of three broken submissions,
each with its exact score per graded cell:

  nofallback  the float4 path always (vec = true): K % 4 != 0 and offset views
              read misaligned float4 (correctness, alignment, races lost)
  shapesonly  vec tests K % 4 and N % 4 but not the pointers: right on every
              shape, misaligned on views of A, B, C (alignment lost)
  nosync      double buffering without the barrier between the two buffers:
              a race, and wrong results (every double-buffering cell lost)
"""
from __future__ import annotations

import nbformat
import pytest
from nbgrader_course import cell_output, cell_scores, lab_course, points, replace, submission_score

LAB, NB = "05-float4-double-buffering", "float4-double-buffering"

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline

import grader  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"

QUESTIONS = ("q-float4-bytes-test", "q-loads-per-thread-test", "q-aligned-rows-test", "q-smem-two-buffers-test",
             "q-staging-registers-test", "q-overlap-fma-test")
POINTS = {
    **{q: 1 for q in QUESTIONS},
    "vectorized-correctness": 3, "vectorized-alignment": 3, "vectorized-races": 1, "vectorized-bank-conflicts": 1,
    "vectorized-performance": 2,
    "double-buffering-correctness": 3, "double-buffering-alignment": 2, "double-buffering-races": 2,
    "double-buffering-bank-conflicts": 1, "double-buffering-performance": 2,
}
PERFORMANCE = ("vectorized-performance", "double-buffering-performance")
VECTORIZED = [c for c in POINTS if c.startswith("vectorized-") and c not in PERFORMANCE]
DOUBLE = [c for c in POINTS if c.startswith("double-buffering-") and c not in PERFORMANCE]


def _full(*lost: str) -> dict[str, float]:
    """Every cell's points on a machine without a GPU (performance 0), less the cells named."""
    return {c: 0.0 if c in lost or c in PERFORMANCE else float(p) for c, p in POINTS.items()}


# Per graded cell, on a machine without a GPU.
EXPECTED = {
    "ref": _full(),
    "blank": {c: 0.0 for c in POINTS},
    # K % 4 != 0 shapes read the next row (wrong) and misaligned float4 (the races check's analysis sees them);
    # the bank-conflict shape (128 x 128 x 32, aligned) takes the float4 path and is right.
    "nofallback": _full("vectorized-correctness", "vectorized-alignment", "vectorized-races"),
    "shapesonly": _full("vectorized-alignment"),
    "nosync": _full(*DOUBLE),
}
# What a GPU adds: performance, for each kernel that passes its correctness check.
GPU_PERF = {"ref": PERFORMANCE, "blank": (), "nofallback": ("double-buffering-performance",),
            "shapesonly": PERFORMANCE, "nosync": ("vectorized-performance",)}

VEC_CONDITION = ("    const bool vec = ((K | N) & 3) == 0 &&\n"
                 "        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |\n"
                 "          reinterpret_cast<unsigned long long>(C)) & 15) == 0;\n")


def _nofallback(cells):
    replace(cells["vectorized-kernel"], VEC_CONDITION, "    const bool vec = true;   // float4 everywhere\n", once=True)


def _shapesonly(cells):
    replace(cells["vectorized-kernel"], VEC_CONDITION, "    const bool vec = ((K | N) & 3) == 0;\n", once=True)


def _nosync(cells):
    replace(cells["double-buffering-kernel"],
            "            store_shared(ra, rb, As[(t + 1) % 2], Bs[(t + 1) % 2]);\n        __syncthreads();\n",
            "            store_shared(ra, rb, As[(t + 1) % 2], Bs[(t + 1) % 2]);\n", once=True)


SUBMISSIONS = {"ref": None, "blank": False, "nofallback": _nofallback, "shapesonly": _shapesonly, "nosync": _nosync}


# The reference's notebook runs (its outputs are tested); the others are graded from their text.
course = lab_course(LAB, SUBMISSIONS, run=("ref",))


def test_points_are_as_documented():
    assert points(LAB) == POINTS


def test_release_has_no_solutions(course):
    text = (course / "release" / LAB / f"{NB}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "HIDDEN TESTS" not in text and "grader.grade(" not in text
    assert "= None  # YOUR ANSWER HERE" in text
    nb = nbformat.reads(text, as_version=4)
    kernels = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-kernel")}
    assert set(kernels) == {"vectorized-kernel", "double-buffering-kernel"}
    # The vectorized kernel's float4 loads and its vec test are gone; the double-buffering kernel keeps them (given).
    assert "reinterpret_cast<const float4*>(&A[gr * K + gc])" not in kernels["vectorized-kernel"]
    assert "const bool vec =" not in kernels["vectorized-kernel"]
    assert "compute_tile(As[t % 2]" not in kernels["double-buffering-kernel"]
    assert all(k.count("// YOUR CODE HERE") == 2 for k in kernels.values())


@pytest.mark.parametrize("student", sorted(SUBMISSIONS))
def test_cell_scores(course, student):
    want = dict(EXPECTED[student])
    if ON_GPU:
        for cell in GPU_PERF[student]:
            want[cell] = float(POINTS[cell])
    got = cell_scores(course, LAB, student)
    assert got == pytest.approx(want), {c: (got.get(c), want[c]) for c in want if got.get(c) != want[c]}


def test_totals(course):
    ref = submission_score(course, LAB, "ref")
    assert ref == pytest.approx(sum(POINTS.values()) - (0 if ON_GPU else 4))     # 26 points, 4 of them performance


def test_alignment_message_names_the_pointer(course):
    text = cell_output(course, LAB, "shapesonly", "vectorized-alignment")
    for pointer, line in (("A", "read of A"), ("B", "read of B"), ("C", "write of C")):
        assert f"{pointer} starts 4 bytes past a 16-byte boundary" in text and line in text, text
    assert "the float4 path needs a fallback" in text, text
    text = cell_output(course, LAB, "nofallback", "vectorized-alignment")
    assert "K = 27 is not a multiple of 4" in text and "N = 37 is not a multiple of 4" in text, text


def test_race_message(course):
    text = cell_output(course, LAB, "nosync", "double-buffering-races")
    assert "race" in text, text


def test_performance_not_graded_without_gpu(course):
    if ON_GPU:
        pytest.skip("a GPU grades performance")
    for cell in PERFORMANCE:
        assert "not graded: no GPU" in cell_output(course, LAB, "ref", cell)

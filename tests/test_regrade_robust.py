"""Regrade never dies: static evaluation is bounded (a memory bomb or a
100,000-term sum is a cell it cannot recompute, not the end of the run), honest
sources built with ordinary string operations are read, one broken notebook
costs its own row only; feedback never shows a failed hidden test's lines."""
from __future__ import annotations

import time

import nbformat
import pytest

from grader.course.static_values import read_values

pytest.importorskip("nbgrader")

KERNEL = "__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) {}"


def test_a_memory_bomb_is_not_evaluated():
    start = time.monotonic()
    v = read_values(['PAD = "x" * 10**12\n', 'BIG = "x" * 999_999 + "y" * 999_999\n',
                     'W = "{:>99999999}".format(1)\n', 'P = "%99999999d" % 1\n', 'N = 10**60 * 10**60 * 10**60 * 10**60 * 10**60 * 10**60 * 10**60 * 10**60\n',
                     'R = ("x" * 900_000).replace("", "yy")\n', 'OK = 2 ** 10\n'])
    assert time.monotonic() - start < 5
    for name in ("PAD", "BIG", "W", "P", "N", "R"):
        assert name not in v.values and name in v.unknown, name
    assert v.values["OK"] == 1024


def test_a_huge_sum_is_a_cell_not_a_crash():
    v = read_values(["X = " + "+".join(["1"] * 100_000) + "\n", "Y = 3\n"])
    assert v.values["Y"] == 3 and "X" not in v.values
    assert any("not read" in s for s in v.suspicious) and "too large to grade" in v.unknown["X"]


def test_honest_sources_built_with_string_operations():
    cells = [
        'import textwrap\nTILE = 32\n',
        'BODY = "    C[0] = 0.0f;"\n',
        'HEAD = f"#define TILE {TILE}\\n"\n',
        'SOURCE = HEAD + textwrap.dedent("""\n    ' + KERNEL + '\n""").replace("{}", "{\\n" + BODY + "\\n}").strip()\n',
        'OTHER = "-".join(["a", "b"]).upper() + "%d" % 7 + "{}x".format(TILE)\n',
    ]
    v = read_values(cells)
    assert v.values["SOURCE"].startswith("#define TILE 32\n__global__ void sgemm_naive(")
    assert "C[0] = 0.0f;" in v.values["SOURCE"]
    assert v.values["OTHER"] == "A-B732x"


def _course(tmp_path, cells_by_student: dict):
    """A minimal course: one graded cell `t` grading SOURCE as 'naive' correctness, in a gradebook."""
    from nbgrader.api import Gradebook
    course = tmp_path / "course"
    (course / "source" / "a").mkdir(parents=True)
    test = 'grader.grade("naive", SOURCE, "correctness", points=1)'
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="c") as gb:
        gb.add_assignment("a")
        gb.add_student("_")
        gb.add_notebook("nb", "a")
        gb.add_grade_cell("t", "nb", "a", max_score=1, cell_type="code")
        gb.add_source_cell("t", "nb", "a", source=test, cell_type="code", locked=True, checksum="x")
        for student, cells in cells_by_student.items():
            gb.add_student(student)
            nb = nbformat.v4.new_notebook()
            nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
            t = nbformat.v4.new_code_cell(test)
            t.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "solution": False}
            nb.cells.append(t)
            d = course / "submitted" / student / "a"
            d.mkdir(parents=True)
            nbformat.write(nb, str(d / "nb.ipynb"))
            gb.add_submission("a", student)
    return course


def test_regrade_survives_the_memory_bomb_and_a_broken_notebook(tmp_path, monkeypatch):
    from grader.course import regrade
    from grader.grading import frontend
    from grader.grading.report import CheckReport, CheckResult
    monkeypatch.setattr(frontend, "check", lambda ex, src, checks, **k: CheckReport(ex, [CheckResult(
        checks[0], "passed", "", 1.0)]))
    course = _course(tmp_path, {
        "bomb": ['PAD = "x" * 10**12\n', f'SOURCE = """{KERNEL}"""\n'],
        "deep": ["X = " + "+".join(["1"] * 100_000) + "\n", f'SOURCE = """{KERNEL}"""\n'],
        "built": [f'SOURCE = """{KERNEL}""".replace("{{}}", "{{ }}")\n'],
        "broken": [f'SOURCE = """{KERNEL}"""\n'],
    })
    (course / "submitted" / "broken" / "a" / "nb.ipynb").write_text("{ not json")
    rows = regrade.regrade(course, "a")
    by = {r.student: r for r in rows}
    assert set(by) == {"bomb", "deep", "built", "broken"}, rows
    for s in ("bomb", "deep", "built"):
        assert by[s].regraded == 1, (s, by[s].note)
    assert by["broken"].regraded is None and "not recomputed" in by["broken"].note


def test_feedback_hides_a_failed_tests_traceback():
    from grader.course.preprocessors import HideTestErrors
    cell = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert np.allclose(AI_4096, 682.666)\n")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "q", "points": 1}
    cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="682.666",
                                           traceback=["assert np.allclose(AI_4096, 682.666)"]),
                    nbformat.v4.new_output("stream", name="stderr", text="line with 682.666"),
                    nbformat.v4.new_output("stream", name="stdout", text="[FAIL] your answer is not right\n")]
    out, _ = HideTestErrors().preprocess_cell(cell, {}, 0)
    text = nbformat.writes(nbformat.v4.new_notebook(cells=[out]))
    assert "682.666\\n" not in text.split('"outputs"')[1] and "AssertionError" in text
    assert all(o.get("name") != "stderr" and o.output_type != "error" for o in out.outputs)

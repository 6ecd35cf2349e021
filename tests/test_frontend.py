"""The one grading front-end: compile errors in one format, the `check`
command's JSON, numeric answers, host functions graded from their source."""
from __future__ import annotations

import json
import linecache
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import grader
from grader.grading import host_functions, registry
from grader.grading.report import CheckReport
from grader.kernels import top2
from grader.platform.compiler import normalise_log

REPO = Path(__file__).resolve().parent.parent
NAIVE = (REPO / "solutions" / "naive.cu").read_text()
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _with_error_on_line(source: str, marker: str) -> tuple[str, int]:
    lines = source.splitlines()
    i = next(n for n, line in enumerate(lines) if marker in line)
    lines.insert(i + 1, "        undeclared_name = 1;")
    return "\n".join(lines) + "\n", i + 2          # 1-based line of the inserted statement


@pytest.mark.parametrize("compiler", ["nvcc where it is on PATH", "g++ only"])
def test_compile_error_one_format_student_line_said_once(compiler, grader_settings):
    if compiler == "g++ only":
        grader_settings(emulator_nvcc=False)
    source, line = _with_error_on_line(NAIVE, "float sum = 0.0f;")
    r = registry.run_here("naive", "compiles", source, 1)
    assert not r.passed
    assert f"kernel.cu:{line}: error:" in r.message, r.message
    assert "kernel.cu(" not in r.message and f"kernel.cu:{line}:" in r.message
    assert r.message.count("does not compile") == 1, r.message


def test_real_pycuda_log_is_shifted_to_the_students_lines():
    """PyCUDA compiles 'extern "C" {' + source: nvcc's line 11 is the student's 10."""
    log = ('/tmp/tmpab12/kernel.cu(11): error: identifier "x" is undefined\n          x = 1;\n          ^\n\n'
           '1 error detected in the compilation of "/tmp/tmpab12/kernel.cu".\n')
    assert normalise_log(log, line_offset=1).splitlines()[0] == 'kernel.cu:10: error: identifier "x" is undefined'
    assert normalise_log("kernel.cu:7:12: error: expected ';'") == "kernel.cu:7: error: expected ';'"


def test_cli_check_json_is_only_json():
    p = subprocess.run([sys.executable, "-m", "grader", "check", str(REPO / "solutions" / "naive.cu"), "--stage",
                        "naive", "--checks", "compiles", "--json"], capture_output=True, text=True, env=ENV,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    report = json.loads(p.stdout)                   # nothing but the JSON on stdout
    assert report["exercise"] == "naive" and report["backend"] == grader.BACKEND.name
    assert CheckReport.from_dict(report).passed("compiles")
    piped = subprocess.run(f"{sys.executable} -m grader check solutions/naive.cu --stage naive --checks compiles "
                           f"--json | {sys.executable} -c 'import json,sys; json.load(sys.stdin)'", shell=True,
                           env=ENV, cwd=REPO, timeout=300)
    assert piped.returncode == 0


def test_report_round_trip():
    r = grader.check("naive", "not CUDA", ["compiles"], seed=3)
    back = CheckReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.text() == r.text() and back.exercise == "naive"


def test_grade_answer_never_shows_the_expected_value(capsys):
    assert grader.grade_answer(682.7, 682.6666, points=1, rtol=0.01) == 1.0
    assert grader.grade_answer(3, 682.6666, points=2, rtol=0.01) == 0.0
    assert grader.grade_answer("682", 682.6666, points=2, rtol=0.01) == 0.0
    assert grader.grade_answer(float("nan"), 682.6666, points=2, rtol=0.01) == 0.0
    out = capsys.readouterr().out
    assert "[PASS]" in out and "[FAIL]" in out and "682.66" not in out


# ---- host functions ----------------------------------------------------------------------------
CELL = '''
import numpy as np
from grader.kernels import top2

def helper(c, n):
    return top2.top2_keys(SourceModule(TOP2_SOURCE).get_function("top2"), c, n)

def minimums(A, B):
    c, M, N = top2.sgemm_on_device(A, B)
    k1, k2 = helper(c, M * N)
    c.free()
    return top2.unpack(k1, N), top2.unpack(k2, N)
'''


def _notebook_function(source: str, extra: dict):
    """A function defined in a notebook cell: module __main__, its source in linecache (as IPython does)."""
    filename = "<ipython-input-7-0123456789ab>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__", **extra}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["minimums"]


def test_host_function_graded_from_its_source_in_a_fresh_process():
    grader.use_backend(announce=False)
    from pycuda.compiler import SourceModule
    fn = _notebook_function(CELL, {"TOP2_SOURCE": top2.TOP2.solution(), "SourceModule": SourceModule})
    text = host_functions.function_source(fn)
    assert "TOP2_SOURCE = " in text and "def helper(" in text and "import grader.kernels.top2 as top2" in text
    report = grader.check("minimums-host", fn, seed=5)
    assert report.passed("host-transfers"), report.text()
    assert grader.grade("minimums-host", text, "host-transfers", points=2) == 2.0


def test_host_function_with_a_global_that_cannot_be_sent():
    fn = _notebook_function("def minimums(A, B):\n    return DATA.sum()\n", {"DATA": np.zeros(3)})
    with pytest.raises(host_functions.NotSendable, match="DATA"):
        host_functions.function_source(fn)


def test_host_source_from_cells_keeps_definitions_and_literals_only():
    cells = ["import numpy as np\nprint('side effect')\nX = 3", CELL]
    text = host_functions.source_from_cells(cells, {"TOP2_SOURCE": "src", "X": 3})
    assert "print(" not in text and "def minimums(" in text and "TOP2_SOURCE = 'src'" in text


# ---- regrade, cell by cell (no nbgrader needed) ------------------------------------------------
def test_regrade_cell_recomputes_answers_and_says_when_it_cannot():
    from grader.course.regrade import regrade_cell
    from grader.course.static_values import read_values
    cells = ["AI = 2 * 4096**3 / (4 * 3 * 4096**2)", "WRONG = 3", "COMPUTED = some_function()"]
    values = read_values(cells)
    right = regrade_cell("grader.grade_answer(AI, 682.6666, points=2, rtol=0.01)", cells, values)
    assert right.score == 2 and "right" in right.note
    wrong = regrade_cell("grader.grade_answer(WRONG, 682.6666, points=2, rtol=0.01)", cells, values)
    assert wrong.score == 0
    for test in ("grader.grade_answer(COMPUTED, 1.0, points=1)", "assert AI > 0",
                 'grader.grade("minimums-host", minimums, "host-transfers", points=2)',
                 'grader.grade("naive", NO_SUCH_SOURCE, "correctness", points=3)'):
        r = regrade_cell(test, cells, values)
        assert r.score is None and r.note.startswith("not recomputed:"), (test, r)


def test_sanity_check_says_missing_wrong_type_implausible_and_plausible(capsys):
    import grader
    assert not grader.sanity_check(None, 50, 5000, "FLOP/byte")
    assert not grader.sanity_check("682", 50, 5000, "FLOP/byte")
    assert not grader.sanity_check(682_666.7, 50, 5000, "FLOP/byte")
    assert not grader.sanity_check(float("nan"), 50, 5000, "FLOP/byte")
    assert grader.sanity_check(682.7, 50, 5000, "FLOP/byte")
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert out.err == "" and len(lines) == 5
    assert "not answered yet" in lines[0] and "finite number" in lines[1]
    assert "outside the plausible range 50 to 5000 FLOP/byte" in lines[2] and "finite number" in lines[3]
    assert "in the plausible range" in lines[4]


def test_an_answer_cell_shows_its_line_and_no_out_value():
    """Ending a notebook cell, sanity_check's verdict displays nothing (no `Out: False` under the line)."""
    from IPython.core.interactiveshell import InteractiveShell  # IPython: with the notebook extras

    import grader
    formatter = InteractiveShell.instance().display_formatter
    assert formatter.format(grader.sanity_check(None, 50, 5000)) == ({}, {})
    assert formatter.format(grader.sanity_check(682.7, 50, 5000)) == ({}, {})


def test_release_answers_are_none_so_the_copy_runs_top_to_bottom():
    from grader.course.preprocessors import answer_stub
    assert answer_stub(["AI = 2 * 4096**3 / (4 * 3 * 4096**2)"]) == ["AI = None  # YOUR ANSWER HERE"]
    assert answer_stub(["A = 1", "B = A + 1"]) == ["A = None  # YOUR ANSWER HERE", "B = None  # YOUR ANSWER HERE"]
    assert answer_stub(["    c, M, N = top2.sgemm_on_device(A, B)", "    return c"]) is None     # code: nbgrader's stub
    assert answer_stub(["x.y = 3"]) is None


def test_nothing_is_graded_inside_a_notebook_at_autograde_time(monkeypatch, capsys):
    """The notebook's own grade calls earn nothing at autograde: GradeFromSource grades its text."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert grader.grade("naive", "not even CUDA", "correctness", points=3) == 0.0
    assert grader.grade_answer(32, 32, points=1) == 0.0
    report = grader.check("naive", "not even CUDA", announce=False)
    out = capsys.readouterr().out
    assert out.count("the checks run outside this notebook") == 2 and "[PASS]" not in out
    assert not report.results[0].passed and "outside this notebook" in report.text()


def test_a_nan_is_called_never_written_only_when_it_is_the_poison():
    from grader.kernels import sgemm
    C = sgemm.poisoned((2, 2))
    C[0, 0] = np.float32(np.inf) * 0
    assert "never written" in sgemm.value_hint(C[1, 1]) and sgemm.never_written(C).sum() == 3
    assert "computed" in sgemm.value_hint(C[0, 0]) and "never" not in sgemm.value_hint(C[0, 0])
    assert sgemm.value_hint(np.float32(1.5)) == ""

"""The whole nbgrader pipeline on the labs, in a temporary course directory,
in-process (NbGraderAPI): generate_assignment, autograde of the reference
solution (every lab), the blank release copy and broken submissions (labs 1
and 2; in lab 1 a correct coalesced kernel in the naive index order, which
only the coalescing check catches), generate_feedback, and `grader regrade`,
which recomputes every graded cell of every lab. On a machine without a GPU
the performance tests are "not graded: no GPU" and score 0: the reference
gets every other point.
"""
from __future__ import annotations

import os
import shutil
import sys
from html import escape as html_escape

import nbformat
import pytest
from nbgrader_course import (
    REPO,
    autograded_notebook,
    cell_output,
    cell_scores,
    grade_id,
    gradebook,
    graded_course,
    load_config,
    naive_without_bounds_check,
    new_course,
    on_release,
    points,
    replace,
    source_notebook,
    stderr_in_graded_cells,
    submission_score,
)

LAB1, NB1 = "01-naive-coalesced", "naive-coalesced"
LAB2, NB2 = "02-smem-tiling", "smem-tiling"
LAB3, NB3 = "07-minimums", "minimums"
LAB4, NB4 = "08-shortest-paths", "shortest-paths"
LAB5, NB5 = "09-tensor-cores-hopper", "tensor-cores-hopper"

pytestmark = pytest.mark.pipeline
NOTEBOOK = {LAB1: NB1, LAB2: NB2, LAB3: NB3, LAB4: NB4, LAB5: NB5}

pytest.importorskip("nbgrader")

import grader  # noqa: E402

ON_GPU = grader.BACKEND.name == "gpu"
PERF = {LAB1: 2.0, LAB2: 2.0, LAB5: 5.0}          # performance points per lab
QUESTIONS = {LAB1: 5.0, LAB2: 3.0}
TOTAL = {LAB1: 17.0, LAB2: 11.0}
COALESCING = 2.0                       # lab 1's coalescing cell (stage coalesced)

# Lab 2 per-check points: correctness 4, races 2, performance 2.
EXPECTED = {
    # (assignment, student): score on a machine without a GPU
    (LAB1, "ref"): TOTAL[LAB1] - PERF[LAB1],
    (LAB1, "ref-from-text"): TOTAL[LAB1] - PERF[LAB1],
    (LAB1, "blank"): 0.0,
    (LAB1, "nobounds"): TOTAL[LAB1] - PERF[LAB1] - 3 - 1,   # naive: correctness and races (out of bounds)
    (LAB1, "naiveorder"): TOTAL[LAB1] - PERF[LAB1] - COALESCING,   # correct, race-free, uncoalesced
    (LAB2, "ref"): TOTAL[LAB2] - PERF[LAB2],
    (LAB2, "blank"): 0.0,
    (LAB2, "nobounds"): QUESTIONS[LAB2],                      # wrong off tile multiples + out of bounds
    (LAB2, "nosync"): QUESTIONS[LAB2],                        # a race: wrong, and the analysis finds it
    (LAB2, "swapped"): QUESTIONS[LAB2] + 2,                   # wrong, but race-free
    (LAB2, "stderr"): TOTAL[LAB2] - PERF[LAB2],               # stderr in an answer cell costs nothing
    (LAB2, "tamper"): TOTAL[LAB2] - PERF[LAB2] - QUESTIONS[LAB2],   # wrong answers; patching grade_answer earns nothing
    (LAB2, "hang"): QUESTIONS[LAB2],                          # stopped within its budget, once
    (LAB2, "poison"): 0.0,            # a blank copy that plants the reference's build in the shared cache
    (LAB2, "blank-after-poison"): 0.0,                        # ... and a blank notebook graded after it
    (LAB2, "oob-write"): QUESTIONS[LAB2],                     # a store far past C: wrong, and a fault
    (LAB2, "exit"): TOTAL[LAB2] - PERF[LAB2],                 # its work is all there, graded from its text
    (LAB2, "deleted-tests"): TOTAL[LAB2] - PERF[LAB2] - 2,    # the deleted races cell scores 0
    (LAB2, "reads-solutions"): 0.0,                           # the answers are out of reach, and not its text
    (LAB2, "patches-numpy"): 0.0,
    (LAB2, "patches-grader"): 0.0,
    (LAB2, "hides-results"): 0.0,
    (LAB2, "poisons-env"): 0.0,
    (LAB2, "forges"): 0.0,                                    # host code refused: does not compile
    (LAB2, "string-built"): TOTAL[LAB2] - PERF[LAB2],
    (LAB2, "memory-bomb"): TOTAL[LAB2] - PERF[LAB2],
}


EXPECTED.update({(lab, "ref"): sum(points(lab).values()) for lab in (LAB3, LAB4)})      # no performance cells
EXPECTED.update({(LAB5, "ref"): sum(points(LAB5).values()) - PERF[LAB5],
                 (LAB5, "wrong-stride"): sum(points(LAB5).values()) - PERF[LAB5] - 3})   # the wgmma kernel's C
# Performance points a GPU adds: every correct kernel's. A kernel must pass the
# correctness check before its speed counts, so the broken ones add nothing.
GPU_PERF = {(LAB1, "ref"): PERF[LAB1], (LAB1, "ref-from-text"): PERF[LAB1], (LAB1, "nobounds"): 1.0,   # its coalesced kernel is the reference
            (LAB1, "naiveorder"): 1.0,     # the naive kernel's; the uncoalesced one is too slow (0.010 of cuBLAS)
            (LAB2, "ref"): PERF[LAB2], (LAB2, "stderr"): PERF[LAB2], (LAB2, "tamper"): PERF[LAB2],
            (LAB2, "exit"): PERF[LAB2], (LAB2, "deleted-tests"): PERF[LAB2], (LAB2, "string-built"): PERF[LAB2],
            (LAB2, "memory-bomb"): PERF[LAB2], (LAB5, "ref"): PERF[LAB5],
            (LAB5, "wrong-stride"): 3.0}           # the three wmma kernels'; the wrong wgmma kernel is not timed


def _naive_order(cells):
    """The coalesced stage with threadIdx.x moving the row again: still C = A B
    under the coalesced launch (blockIdx.x still picks the columns), but a warp
    reads 32 rows of A and writes 32 rows of C."""
    k = cells["coalesced-kernel"]
    replace(k, "const int col = blockIdx.x * blockDim.x + threadIdx.x;",
            "const int col = blockIdx.x * blockDim.x + threadIdx.y;")
    replace(k, "const int row = blockIdx.y * blockDim.y + threadIdx.y;",
            "const int row = blockIdx.y * blockDim.y + threadIdx.x;")


def _nobounds_tiled(cells):
    k = cells["smem-tiling-kernel"]
    replace(k, "(row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f", "A[row * K + k0 + tx]")
    replace(k, "(k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f", "B[(k0 + ty) * N + col]")
    replace(k, "    if (row < M && col < N)\n        C[row * N + col] = sum;", "    C[row * N + col] = sum;")


def _nosync(cells):
    k = cells["smem-tiling-kernel"]
    replace(k, "            sum += As[ty][k] * Bs[k][tx];\n        __syncthreads();\n",
            "            sum += As[ty][k] * Bs[k][tx];\n")


def _swapped(cells):
    replace(cells["smem-tiling-kernel"], "sum += As[ty][k] * Bs[k][tx];", "sum += As[k][ty] * Bs[k][tx];")


def _stderr(cells):
    k = cells["smem-tiling-kernel"]
    # a variable the compiler warns about, and a debugging print to stderr
    replace(k, "    float sum = 0.0f;\n", "    float sum = 0.0f;\n    int unused_debug = 42;\n")
    k.source += '\nimport sys\nprint("debug: kernel source has", len(TILED_SOURCE), "characters", file=sys.stderr)\n'


def _tamper(cells):
    for gid, wrong in (("q-reduction", "LOAD_REDUCTION = 3"), ("q-smem", "SMEM_BYTES = 1"),
                       ("q-tiled-intensity", "AI_TILED = 1000.0")):
        cells[gid].source = wrong + "\n"
    cells["q-reduction"].source += "import grader\ngrader.grade_answer = lambda *a, points=1, **k: float(points)\n"


def _hang(cells):
    replace(cells["smem-tiling-kernel"], "    float sum = 0.0f;\n",
            "    float sum = 0.0f;\n    volatile int spin = 1;\n    while (spin) { }\n")


def _poison(cells):
    """The build-cache attack, from the blank release copy: the reference's
    build copied over the build of this (blank) source in the shared cache."""
    cells["smem-tiling-kernel"].source += (
        "\nimport shutil as _sh\nimport grader.platform.compiler as _gc\nfrom grader import stages as _st\n"
        "from grader.emulator import build as _b\n_opts = _st.stage('smem-tiling').options()\n"
        "_stub = _b.cache_dir() / _b.build_module(TILED_SOURCE, options=_opts).library.name\n"
        "_ref = _b.cache_dir() / _b.build_module((_gc.SOLUTIONS_DIR / 'smem-tiling.cu').read_text(), "
        "options=_opts).library.name\n"
        "_sh.copy(_ref, _stub); _sh.copy(_ref.with_suffix('.json'), _stub.with_suffix('.json'))\n")


on_release(_poison)


def _oob_write(cells):
    """The reference kernel, plus one store a million floats past the end of C."""
    replace(cells["smem-tiling-kernel"], "        C[row * N + col] = sum;",
            "        C[row * N + col] = sum;\n    if (row == 0 && col == 0) C[M * N + 1000000] = 1.0f;")


def _exit(cells):
    """Every answer right, then the kernel killed by a cell (os._exit) before the test cells run."""
    cells["smem-tiling-kernel"].source += "\nimport os\nos._exit(0)\n"


def _deleted_tests(cells):
    """The reference with the races test cell deleted (nbgrader scores a missing test 0)."""


_deleted_tests.drop = ["smem-tiling-races"]


@on_release
def _reads_solutions(cells):
    cells["smem-tiling-kernel"].source = (
        "import grader.platform.compiler\nTILED_SOURCE = (grader.platform.compiler.SOLUTIONS_DIR / 'smem-tiling.cu').read_text()\n"
        "grader.check('smem-tiling', TILED_SOURCE)\n")


# The attacks below go into an answer cell: nbgrader restores locked cells (setup) before it runs a notebook.
@on_release
def _patches_numpy(cells):
    cells["q-reduction"].source += "\nnp.allclose = lambda *a, **k: True\nnp.isnan = lambda x: np.zeros(np.shape(x), bool)\n"


@on_release
def _patches_grader(cells):
    cells["q-reduction"].source += ("\ngrader.grade = lambda *a, points=1, **k: float(points)\n"
                              "grader.grading.frontend.grade = grader.grade\n"
                              "grader.grade_answer = lambda *a, points=1, **k: float(points)\n")


@on_release
def _hides_results(cells):
    """No result shown: nbgrader gives a test cell that shows nothing and raises nothing full points."""
    cells["q-reduction"].source += ("\nimport sys\nsys.displayhook = lambda value: None\n"
                              "get_ipython().ast_node_interactivity = 'none'\n"
                              "sys.excepthook = lambda *a: None\nget_ipython().showtraceback = lambda *a, **k: None\n")


@on_release
def _poisons_environment(cells):
    """A sitecustomize.py on the PYTHONPATH of every process the notebook starts: the grader patched there."""
    cells["q-reduction"].source += (
        "\nimport os, pathlib\n_d = pathlib.Path(os.getcwd()) / '_site'\n_d.mkdir(exist_ok=True)\n"
        "(_d / 'sitecustomize.py').write_text('import grader.grading.report as r\\nr.CheckResult.fraction = property(lambda s: 1.0)\\n')\n"
        "os.environ['PYTHONPATH'] = str(_d) + os.pathsep + os.environ.get('PYTHONPATH', '')\n")


@on_release
def _forges(cells):
    """Native code in the kernel source: a host destructor that would rewrite the check's result."""
    cells["smem-tiling-kernel"].source = cells["smem-tiling-kernel"].source.replace(
        "__global__ void", "#include <cstdio>\n__attribute__((destructor)) static void forge() { "
        "FILE* f = fopen(\"/tmp/forged\", \"w\"); if (f) fclose(f); }\n__global__ void", 1)


def _wrong_stride(cells):
    """Lab 9's wgmma kernel with B's descriptor stepping 512 bytes between groups of 8 rows of K, not 1024."""
    replace(cells["ws-wgmma-kernel"], "BK * 128, 1024), kt > 0", "BK * 128, 512), kt > 0")


def _string_built(cells):
    """The reference, built with ordinary string operations (an honest student's style)."""
    k = cells["smem-tiling-kernel"]
    replace(k, 'TILED_SOURCE = r"""', 'TILED_SOURCE = (r"""')
    replace(k, '"""\ngrader.check', '""".replace("#define TILE 32", "#define TILE " + str(32)) + "\\n")\ngrader.check')


def _memory_bomb(cells):
    """Every answer right, and cells a static evaluator must not follow: a terabyte string, a 100,000-term sum."""


_memory_bomb.extra_cells = ['PAD = "x" * 10**12', "BIG = " + " + ".join(["1"] * 100000)]


SUBMISSIONS = {
    LAB1: {"ref": None, "ref-from-text": None, "blank": False, "nobounds": naive_without_bounds_check,
           "naiveorder": _naive_order},
    LAB2: {"ref": None, "blank": False, "nobounds": _nobounds_tiled, "nosync": _nosync, "swapped": _swapped,
           "stderr": _stderr, "tamper": _tamper, "hang": _hang, "poison": _poison, "blank-after-poison": False,
           "oob-write": _oob_write, "exit": _exit, "deleted-tests": _deleted_tests, "reads-solutions": _reads_solutions,
           "patches-numpy": _patches_numpy, "patches-grader": _patches_grader, "hides-results": _hides_results,
           "poisons-env": _poisons_environment, "forges": _forges, "string-built": _string_built,
           "memory-bomb": _memory_bomb},
    LAB3: {"ref": None},
    LAB4: {"ref": None},
    LAB5: {"ref": None, "wrong-stride": _wrong_stride},
}
# The notebooks that run in the sandboxed kernel: each lab's reference, and the submissions whose cells do
# something when run (print to stderr, patch the grader, plant a build, end the kernel, take memory). The
# others are graded from their text alone: the scores and test cells' outputs do not depend on a run.
RUN = {(LAB1, "ref"), (LAB3, "ref"), (LAB4, "ref"), (LAB5, "ref")} | {(LAB2, s) for s in (
    "ref", "stderr", "tamper", "poison", "exit", "reads-solutions", "patches-numpy", "patches-grader", "hides-results",
    "poisons-env", "memory-bomb")}


TIMES: dict[tuple[str, str], float] = {}     # seconds of each submission's autograde


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = new_course(tmp_path_factory.mktemp("course"), SUBMISSIONS)
    with graded_course(course, SUBMISSIONS, RUN) as (api, seconds):
        TIMES.update(seconds)
        yield course, api


def test_a_hanging_submission_costs_seconds(course):
    print("autograde seconds per submission:", {f"{a}/{s}": round(t, 1) for (a, s), t in TIMES.items()})
    if not ON_GPU:
        assert TIMES[(LAB2, "hang")] < 60, TIMES
    cells = cell_scores(course[0], LAB2, "hang")
    assert cells["smem-tiling-correctness"] == 0 and cells["smem-tiling-races"] == 0


def test_a_cell_that_overflows_the_compiler_costs_no_time_limit(course):
    """IPython never replies to a cell whose compilation overflows the stack (the memory bomb's 100,000-term
    sum): the autograde finds it before the kernel, instead of waiting out the cell's time limit."""
    limit = load_config(course[0]).Execute.timeout
    assert TIMES[(LAB2, "memory-bomb")] < limit, TIMES
    bomb = next(c for c in autograded_notebook(course[0], LAB2, "memory-bomb").cells if c.source.startswith("BIG = "))
    assert [o.ename for o in bomb.outputs] == ["RecursionError"], bomb.outputs


def test_a_notebook_graded_from_its_text_gets_the_grades_of_one_that_ran(course):
    """What the submissions graded without a run rely on: the reference, run or not, gets the same score and
    the same output in every graded cell (performance aside: a GPU's timings differ between two runs)."""
    course_dir, _ = course
    assert cell_scores(course_dir, LAB1, "ref-from-text") == cell_scores(course_dir, LAB1, "ref")
    for cell in points(LAB1):
        if not cell.endswith("-performance"):
            assert (cell_output(course_dir, LAB1, "ref-from-text", cell, shown=True)
                    == cell_output(course_dir, LAB1, "ref", cell, shown=True)), cell
    unrun = [c for c in autograded_notebook(course_dir, LAB1, "ref-from-text").cells
             if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]
    assert unrun and not any(c.outputs for c in unrun)      # it was not run: only graded cells have outputs


def test_release_has_no_solutions(course):
    course, _ = course
    for assignment, name in ((LAB1, NB1), (LAB2, NB2)):
        text = (course / "release" / assignment / f"{name}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
        assert "HIDDEN TESTS" not in text and "grader.grade(" not in text
        assert "// YOUR CODE HERE" in text and "= None  # YOUR ANSWER HERE" in text
        for body_line in ("sum += A[row * K + k] * B[k * N + col];", "__syncthreads();", "As[ty][tx] ="):
            assert body_line not in text
        nb = nbformat.reads(text, as_version=4)
        kernels = [c.source for c in nb.cells if c.cell_type == "code" and "__global__" in c.source]
        assert kernels and all("// YOUR CODE HERE" in k and "raise NotImplementedError" not in k for k in kernels)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_scores(course, key):
    course_dir, _ = course
    assignment, student = key
    want = EXPECTED[key] + (GPU_PERF.get(key, 0.0) if ON_GPU else 0.0)
    got = submission_score(course_dir, assignment, student)
    assert got == pytest.approx(want), (f"{assignment}/{student}: {got} points, expected {want}; cells: "
                                        f"{cell_scores(course_dir, assignment, student)}")


# Lab 2, every submission, cell by cell (without a GPU: performance scores 0): questions (3 cells of 1),
# correctness 4, races 2. What each one's real work deserves, whatever its cells did to the notebook's Python.
Q, K = ("q-reduction-test", "q-smem-test", "q-tiled-intensity-test"), ("smem-tiling-correctness", "smem-tiling-races")


def _cells(questions: float, correctness: float, races: float | None) -> dict:
    cells = {**dict.fromkeys(Q, questions), K[0]: correctness, "smem-tiling-performance": 0.0}
    return cells if races is None else {**cells, K[1]: races}


LAB2_CELLS = {
    "ref": _cells(1, 4, 2), "blank": _cells(0, 0, 0), "nobounds": _cells(1, 0, 0), "nosync": _cells(1, 0, 0),
    "swapped": _cells(1, 0, 2), "stderr": _cells(1, 4, 2), "tamper": _cells(0, 4, 2), "hang": _cells(1, 0, 0),
    "poison": _cells(0, 0, 0), "blank-after-poison": _cells(0, 0, 0), "oob-write": _cells(1, 0, 0),
    "exit": _cells(1, 4, 2), "deleted-tests": _cells(1, 4, None), "reads-solutions": _cells(0, 0, 0),
    "patches-numpy": _cells(0, 0, 0), "patches-grader": _cells(0, 0, 0), "hides-results": _cells(0, 0, 0),
    "poisons-env": _cells(0, 0, 0), "forges": _cells(0, 0, 0), "string-built": _cells(1, 4, 2),
    "memory-bomb": _cells(1, 4, 2)}


def test_every_submission_of_the_hostile_class_cell_by_cell(course):
    assert set(LAB2_CELLS) == set(SUBMISSIONS[LAB2])
    for student, want in LAB2_CELLS.items():
        got = cell_scores(course[0], LAB2, student)
        if ON_GPU:
            got.pop("smem-tiling-performance")
            want = {k: v for k, v in want.items() if k != "smem-tiling-performance"}
        if student == "deleted-tests":
            assert got.pop(K[1], 0) == 0, got            # nbgrader: a missing test cell scores 0
        assert got == want, (student, got)


def test_which_cells_lose_points(course):
    course_dir, _ = course
    cells = cell_scores(course_dir, LAB2, "nosync")
    assert cells["smem-tiling-correctness"] == 0 and cells["smem-tiling-races"] == 0
    cells = cell_scores(course_dir, LAB2, "swapped")
    assert cells["smem-tiling-correctness"] == 0 and cells["smem-tiling-races"] == 2
    cells = cell_scores(course_dir, LAB1, "nobounds")
    assert cells["naive-correctness"] == 0 and cells["naive-races"] == 0
    assert cells["coalesced-correctness"] == 3 and cells["coalesced-races"] == 1
    assert cells["coalesced-coalescing"] == COALESCING
    cells = cell_scores(course_dir, LAB1, "naiveorder")
    assert cells["coalesced-correctness"] == 3 and cells["coalesced-races"] == 1
    assert cells["coalesced-coalescing"] == 0
    assert cell_scores(course_dir, LAB1, "ref")["coalesced-coalescing"] == COALESCING
    if not ON_GPU:
        for student in ("ref", "stderr", "tamper"):
            assert cell_scores(course_dir, LAB2, student)["smem-tiling-performance"] == 0


def test_performance_reported_not_graded_without_gpu(course):
    if ON_GPU:
        pytest.skip("a GPU grades performance")
    course_dir, _ = course
    text = cell_output(course_dir, LAB2, "ref", "smem-tiling-performance")
    assert "not graded: no GPU" in text and "predicted on an H200: about" in text, text
    assert not stderr_in_graded_cells(course_dir, LAB2, "ref")


def test_coalescing_names_the_uncoalesced_lines(course):
    """The naive index order's report: 32 sectors per request for A and for C, with the picture."""
    course_dir, _ = course
    text = cell_output(course_dir, LAB1, "naiveorder", "coalesced-coalescing", shown=True)
    assert "load from A: 32 sectors per warp request" in text, text
    assert "store to C: 32 sectors per warp request" in text, text
    assert "1024 B moved for 128 B used" in text, text
    text = cell_output(course_dir, LAB1, "ref", "coalesced-coalescing", shown=True)
    assert "load from B: 4 sectors per warp request" in text and "uncoalesced" not in text, text
    # The figure cell: at autograde time no check runs inside the notebook, and it says so (no error).
    cell = next(c for c in autograded_notebook(course_dir, LAB1, "ref").cells if grade_id(c) == "roofline-estimated")
    assert not [o for o in cell.outputs if o.output_type == "error" or o.get("name") == "stderr"], cell.outputs
    assert "at autograde time the checks run outside this notebook" in "".join(o.get("text", "") for o in cell.outputs)
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.outputs


def _hidden_lines(assignment: str) -> list[str]:
    """The lines of the source notebook's hidden tests (what feedback must never show)."""
    lines = []
    for c in source_notebook(assignment).cells:
        inside = False
        for line in c.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    assert lines
    return lines


HIDDEN_LINES = {LAB2: _hidden_lines(LAB2)}


def test_feedback_hides_hidden_tests(course):
    course_dir, api = course
    for student in SUBMISSIONS[LAB2]:
        r = api.generate_feedback(LAB2, student, force=True)
        assert r["success"], r.get("log")
        html = next((course_dir / "feedback" / student / LAB2).glob("*.html")).read_text()
        assert "grader.grade(" not in html and "BEGIN HIDDEN TESTS" not in html, student
        for line in HIDDEN_LINES[LAB2]:
            assert html_escape(line) not in html and line not in html, (student, line)
    for student in SUBMISSIONS[LAB2]:          # no graded cell shows an error (a traceback shows test lines)
        nb = autograded_notebook(course_dir, LAB2, student)
        assert not [o for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
                    for o in c.outputs if o.output_type == "error" or o.get("name") == "stderr"], student


def test_regrade_agrees_with_autograde(course):
    """Autograde graded every cell from the notebook's text: a clean regrade finds no difference, still
    names the patching cells, and survives the memory bomb."""
    from grader.course.regrade import format_rows, regrade
    course_dir, _ = course
    rows = regrade(course_dir, LAB2)
    text = format_rows(rows)
    assert not [r for r in rows if r.differs], text
    assert any("grader.grade_answer" in r.note for r in rows if r.student == "tamper"), text
    not_recomputed = {r.student: r.note for r in rows if r.cell == "smem-tiling-races" and not r.recomputed}
    assert set(not_recomputed) == {"deleted-tests", "reads-solutions"}, text
    assert "missing from the notebook" in not_recomputed["deleted-tests"], text
    assert "TILED_SOURCE has no static string value" in not_recomputed["reads-solutions"], text
    if not ON_GPU:
        for s in SUBMISSIONS[LAB2]:
            assert sum(r.regraded or 0 for r in rows if r.student == s) == pytest.approx(EXPECTED[(LAB2, s)]), (s, text)


def test_regrade_cli(course):
    """The command, on two students (every one is regraded in-process above): no difference, nothing on stderr."""
    import subprocess
    course_dir, _ = course
    p = subprocess.run([sys.executable, "-m", "grader", "regrade", str(course_dir), LAB2, "--differences",
                        "--student", "ref", "--student", "tamper"],
                       capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                           [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])},
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "DIFFERS" not in p.stdout and "0 score(s) differ" in p.stdout
    assert p.stderr == ""


# One graded result per lab, changed in the gradebook: a kernel check, a kernel
# check, the host function, a kernel of lab 8; regrade recomputes every cell.
TAMPERED = {LAB1: "naive-races", LAB2: "smem-tiling-correctness", LAB3: "host-function-test",
            LAB4: "sssp-sssp-path"}


def test_regrade_recomputes_every_cell_of_every_lab(course, tmp_path):
    from grader.course.regrade import format_rows, regrade
    course_dir, _ = course
    copy = tmp_path / "course"
    shutil.copytree(course_dir, copy, ignore=shutil.ignore_patterns("autograded", "feedback", "release"))
    with gradebook(copy) as gb:
        for assignment, cell in TAMPERED.items():
            grade = gb.find_grade(cell, NOTEBOOK[assignment], assignment, "ref")
            assert grade.score > 0, (assignment, cell, grade.score)
            grade.auto_score = grade.score / 2
            gb.db.commit()
    for assignment, cell in TAMPERED.items():
        rows = regrade(copy, assignment, ["ref"])
        text = format_rows(rows)
        assert rows and all(r.regraded is not None for r in rows), text      # every graded cell recomputed
        assert {r.cell for r in rows if r.differs} == {TAMPERED[assignment]}, text
        assert "not recomputed" not in text, text
    # A notebook that cannot be read is one row saying so; the other students are still regraded.
    (copy / "submitted" / "blank" / LAB2 / f"{NB2}.ipynb").write_text("{ not json")
    rows = regrade(copy, LAB2, ["blank", "ref"])
    broken = [r for r in rows if r.student == "blank"]
    assert len(broken) == 1 and broken[0].regraded is None and "not recomputed" in broken[0].note, broken
    assert [r.cell for r in rows if r.student == "ref" and r.differs] == [TAMPERED[LAB2]]

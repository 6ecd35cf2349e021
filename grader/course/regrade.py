"""`python -m grader regrade COURSE_DIR ASSIGNMENT`: grade every submission
again, independently of the notebooks' own Python, and list every score that
differs from the gradebook.

Each graded cell's test comes from the gradebook (not from the notebook), and
what it grades is read from the submitted notebook's cells *without running
them* (grader.course.static_values):

- grader.grade(EXERCISE, VAR, CHECK, points=P): a kernel exercise grades the
  string literal VAR; a host exercise ("minimums-host") grades the function
  VAR, rebuilt from the cells' imports, definitions and literals
  (grader.grading.host_functions.source_from_cells). Either way in a fresh process
  per check, through the same front-end as the notebook (grader.grading.frontend);
- grader.grade_answer(VAR, EXPECTED, points=P, rtol=...): VAR's literal value
  (a number or arithmetic of numbers) against EXPECTED.

A cell that cannot be recomputed (another kind of test, a value that is not a
literal) says so in its row's note, and the summary counts such cells; a
notebook that cannot be read is one row saying why, and the others go on.
Assignments to attributes of numpy, grader, sys, ... are listed as
suspicious: a notebook that patched them to earn points shows up.
"""
from __future__ import annotations

import ast
import contextlib
import re
import resource
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import gradebook
from grader.course.static_values import (
    NotebookValues,
    NotStatic,
    call_name,
    code_cells,
    grade_id,
    parse,
    read_values,
    readable,
    static_value,
)
from grader.grading import frontend, registry
from grader.grading.host_functions import source_from_cells
from grader.grading.report import GRADER_ERROR
from grader.platform import sandbox

READ_MEMORY = 2 << 30        # bytes of memory reading one notebook's values may take (MemoryError past it)
# Words of a notebook's code that a lab never needs and an attack on the grader does.
TRIED = re.compile(r"\b(gradebook|sqlite3?|ctypes|mount|umount|setuid|ptrace|nsenter|unshare|/proc/\d|/proc/self/"
                   r"(root|fd|mem)|os\.(fork|exec\w*|kill|setuid)|subprocess)\b")


# ---- what a test cell tests ----------------------------------------------------------------
@dataclass
class ExerciseTest:
    exercise: str
    variable: str
    check: str
    points: float


@dataclass
class AnswerTest:
    variable: str
    expected: float
    points: float
    rtol: float
    atol: float


def _arguments(node: ast.Call, names: tuple[str, ...], defaults: dict) -> dict:
    """Positional and keyword arguments of a call, by parameter name."""
    args = dict(zip(names, node.args))
    args.update({k.arg: k.value for k in node.keywords if k.arg})
    missing = [n for n in names if n not in args and n not in defaults]
    if missing:
        raise NotStatic(f"{call_name(node)}(...) without {', '.join(missing)}")
    return {**defaults, **args}


def parse_test(source: str) -> list:
    """The grader.grade(...) and grader.grade_answer(...) calls of a test cell."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        if name == "grade":
            a = _arguments(node, ("exercise", "submission", "check_name", "points"), {})
            if isinstance(a["submission"], ast.Name):
                found.append(ExerciseTest(static_value(a["exercise"], {}), a["submission"].id,
                                          static_value(a["check_name"], {}), float(static_value(a["points"], {}))))
        elif name == "grade_answer":
            a = _arguments(node, ("value", "expected", "points", "rtol", "atol"),
                           {"rtol": ast.Constant(1e-5), "atol": ast.Constant(0.0)})
            if isinstance(a["value"], ast.Name):
                found.append(AnswerTest(a["value"].id, float(static_value(a["expected"], {})),
                                        float(static_value(a["points"], {})), float(static_value(a["rtol"], {})),
                                        float(static_value(a["atol"], {}))))
    return found


# ---- grading a test cell independently ---------------------------------------------------
@dataclass
class Regraded:
    score: float | None             # None: not recomputed (the note says why)
    note: str = ""
    text: str = ""                  # what the test cell prints: each check's diagnosis
    attempts: list = field(default_factory=list)    # what a check says the submission tried (attempts_of)


def attempts_of(result) -> list[str]:
    """What a check's result says the submission tried and was stopped for: the kinds of
    grader.grading.isolation.attempted (the source policy's refusals, an import of the answers), and
    the sandbox's (a forbidden system call)."""
    return [str(kind) for kind in (result.details or {}).get("refused") or []]


@contextlib.contextmanager
def memory_ceiling(extra: int = READ_MEMORY):
    """Inside, this process may take at most `extra` more bytes of data (a soft RLIMIT_DATA, restored
    after): a notebook's text read past it raises MemoryError instead of taking the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        with open("/proc/self/status") as f:
            used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError):
        yield
        return
    limit = used + extra if hard == resource.RLIM_INFINITY else min(hard, used + extra)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _defines(cells: list[str], name: str) -> bool:
    for src in cells:
        try:
            tree = ast.parse(src)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name for s in tree.body):
            return True
    return False


def _regrade_exercise(t: ExerciseTest, cells: list[str], values: NotebookValues) -> tuple:
    """(score or None, note, the cell's text, what the submission tried)."""
    try:
        ex = registry.get(t.exercise)
        ex.check(t.check)
    except KeyError as e:
        return None, f"not recomputed: {e.args[0]}", "", []
    if ex.host_function is not None:
        if t.variable != ex.host_function or not _defines(cells, t.variable):
            return None, (f"not recomputed: no top-level def {ex.host_function}(...) in the cells before the "
                          "test"), "", []
        submission = source_from_cells(cells, values.values)
    else:
        submission = values.values.get(t.variable)
        if not isinstance(submission, str):
            why = values.unknown.get(t.variable, "never assigned")
            return None, f"not recomputed: {t.variable} has no static string value ({why})", "", []
    report = frontend.check(t.exercise, submission, [t.check], announce=False)
    r = report[t.check]
    tried = [f"{t.check}: {kind}" for kind in attempts_of(r)]
    if r.status == GRADER_ERROR:
        return None, f"not recomputed: {r.message.splitlines()[0]}", report.cell_text(t.check), tried
    return round(t.points * r.fraction, 3), f"{t.check}: {r.status}", report.cell_text(t.check), tried


def _unanswered(cells: list[str], name: str) -> bool:
    """The last top-level assignment to `name` is `name = None` (the release copy's stub)."""
    last = None
    for src in cells:
        tree = parse(src)
        if isinstance(tree, str):
            continue
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                last = stmt.value
    return isinstance(last, ast.Constant) and last.value is None


def _regrade_answer(t: AnswerTest, cells: list[str], values: NotebookValues) -> tuple:
    if _unanswered(cells, t.variable):
        return 0.0, f"{t.variable} = None: not answered", f"[FAIL] not answered: {t.variable} is None", []
    v = values.values.get(t.variable)
    if v is None or isinstance(v, str):
        why = values.unknown.get(t.variable, "never assigned") if v is None else "a string"
        return None, f"not recomputed: {t.variable} has no literal numeric value ({why})", "", []
    ok, verdict = frontend.answer_verdict(v, t.expected, t.rtol, t.atol)
    if ok:
        return t.points, f"{t.variable} = {v:g}: right", verdict, []
    return 0.0, f"{t.variable} = {v:g}, expected {t.expected:g}", verdict, []


def regrade_cell(test_source: str, cells: list[str], values: NotebookValues) -> Regraded:
    """The score of one graded cell, recomputed; `cells`: the code cells before it."""
    tests = parse_test(test_source)
    if not tests:
        return Regraded(None, "not recomputed: the test calls neither grader.grade nor grader.grade_answer "
                              "(grade this cell by hand)")
    score, notes, texts, attempts = 0.0, [], [], []
    for t in tests:
        s, note, text, tried = (_regrade_exercise(t, cells, values) if isinstance(t, ExerciseTest)
                                else _regrade_answer(t, cells, values))
        notes.append(note)
        texts.append(text)
        attempts += tried
        score = None if s is None or score is None else score + s
    return Regraded(score, "; ".join(notes), "\n".join(t for t in texts if t), attempts)


@dataclass
class Row:
    student: str
    notebook: str
    cell: str
    gradebook: float | None
    regraded: float | None
    max_score: float
    note: str
    tried: list = field(default_factory=list)     # what the submission tried (attempts_of), and where

    @property
    def differs(self) -> bool:
        if self.regraded is None or self.gradebook is None:
            return False
        return abs(self.regraded - self.gradebook) > 1e-6

    @property
    def recomputed(self) -> bool:
        return self.regraded is not None


def regrade_at(cells: list, index: int, test_source: str) -> tuple[Regraded, NotebookValues]:
    """`test_source` regraded from the code cells before cells[index] (their text, not run), and what
    was read from them."""
    before = [c.source for c in cells[:index]]
    try:
        with memory_ceiling():
            values = read_values(before)
    except MemoryError:
        return Regraded(None, f"not recomputed: reading the notebook's values took more than "
                              f"{READ_MEMORY >> 30} GiB of memory"), NotebookValues()
    return regrade_cell(test_source, readable(before), values), values


def tried_in_text(cells: list) -> list[str]:
    """The words of TRIED in the code cells a student wrote (a lab needs none of them; the course's own
    read-only cells are not the student's)."""
    found = []
    for i, cell in enumerate(cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
            continue
        for word in dict.fromkeys(m.group(0) for m in TRIED.finditer(cell.source)):
            found.append(f"cell {i + 1} uses {word}")
    return found


def regrade_notebook(sub: gradebook.SubmittedNotebook, graded: list[gradebook.GradedCell]) -> list[Row]:
    import nbformat  # an optional dependency at this layer: only regrade reads notebooks
    with memory_ceiling():
        nb = nbformat.read(str(sub.path), as_version=4)
    cells = code_cells(nb)
    ids = [grade_id(c) for c in cells]
    rows = []
    for gc in sorted(graded, key=lambda g: ids.index(g.name) if g.name in ids else len(ids)):
        if gc.name not in ids:
            rows.append(Row(sub.student, sub.name, gc.name, gc.score, None, gc.max_score,
                            "not recomputed: the graded cell is missing from the notebook (grade it by hand)"))
            continue
        r, values = regrade_at(cells, ids.index(gc.name), gc.test_source)
        note = r.note
        if values.suspicious:
            note += " | suspicious: " + "; ".join(values.suspicious[:3])
        rows.append(Row(sub.student, sub.name, gc.name, gc.score, r.score, gc.max_score, note, r.attempts))
    words = tried_in_text(cells)
    if words:
        rows.append(Row(sub.student, sub.name, "(notebook)", None, None, 0, "its code: " + "; ".join(words[:5]),
                        words))
    return rows


def regrade(course_dir: str | Path, assignment: str, students: list[str] | None = None) -> list[Row]:
    """Every graded cell of every submission: the gradebook's score and the regraded one, from the notebook
    autograde graded (the submitted one where there is none). The checks run in sandboxed processes that
    see none of the course's grades or students' folders."""
    course = Path(course_dir).resolve()
    rows: list[Row] = []
    sandbox.protect(gradebook.protected_paths(course))
    with gradebook.opened(course) as gb:
        for sub in gradebook.submissions(gb, course, assignment, students):
            if not sub.path.exists():
                rows.append(Row(sub.student, sub.name, "(notebook)", None, None, 0, f"not recomputed: missing "
                                f"{sub.path}"))
                continue
            try:
                rows += regrade_notebook(sub, gradebook.graded_cells(gb, assignment, sub))
            except Exception as e:   # noqa: BLE001 - one notebook, whatever it holds, never stops the class
                rows.append(Row(sub.student, sub.name, "(notebook)", None, None, 0,
                                f"not recomputed: {type(e).__name__}: {str(e)[:200]}"))
    return rows


def format_rows(rows: list[Row], only_differences: bool = False) -> str:
    out = []
    diffs = [r for r in rows if r.differs]
    for r in rows:
        if only_differences and not r.differs and r.recomputed and not r.tried:
            continue
        gbs = "-" if r.gradebook is None else f"{r.gradebook:g}"
        rgs = "-" if r.regraded is None else f"{r.regraded:g}"
        mark = "DIFFERS" if r.differs else "TRIED  " if r.tried else "       " if r.recomputed else "NOT RECOMPUTED"
        out.append(f"{mark} {r.student:<12} {r.notebook:<18} {r.cell:<28} gradebook {gbs:>5} regraded {rgs:>5} "
                   f"/ {r.max_score:g}   {r.note}")
    not_recomputed = [r for r in rows if not r.recomputed and not (r.cell == "(notebook)" and r.tried)]
    out.append(f"{len(diffs)} score(s) differ from the gradebook" + (
        ": " + ", ".join(sorted({f'{r.student}/{r.cell}' for r in diffs})) if diffs else ""))
    tried: dict[str, list[str]] = {}
    for r in rows:
        for what in r.tried:
            tried.setdefault(r.student, []).append(what if r.cell == "(notebook)" else f"{r.cell}: {what}")
    for student, what in sorted(tried.items()):
        out.append(f"TRIED {student}: " + "; ".join(what[:6]))
    if not_recomputed:
        out.append(f"{len(not_recomputed)} cell(s) not recomputed (see their notes)")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print("usage: python -m grader regrade COURSE_DIR ASSIGNMENT [--differences] [--student ID ...]")
        return 2
    course, assignment = argv[0], argv[1]
    only = "--differences" in argv
    students = [argv[i + 1] for i, a in enumerate(argv) if a == "--student" and i + 1 < len(argv)]
    print(frontend.use_backend(announce=False).announcement())
    try:
        rows = regrade(course, assignment, students or None)
    except (OSError, ValueError) as e:        # no such course or gradebook; MissingEntry: no such assignment
        print(f"error: {type(e).__name__}: {e}")
        return 2
    print(format_rows(rows, only))
    return 1 if any(r.differs for r in rows) else 0

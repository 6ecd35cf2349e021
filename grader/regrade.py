"""Grade submissions again, independently of the notebooks' own Python.

`python -m grader regrade COURSE_DIR ASSIGNMENT` reads every submitted
notebook without running it: the kernel sources and numeric answers are
taken from the cells *statically* (string literals, arithmetic of numbers),
each test cell's source comes from nbgrader's gradebook (not from the
notebook), kernels are graded in fresh processes (grader.isolation) and
answers are compared with the test's expected value. Every score that
differs from the gradebook's is listed: a notebook that patched numpy,
grader or the grader's cache to earn points it should not have shows up.

`python -m grader check FILE --stage ID` grades one .cu file or a
notebook's kernel the same way, without nbgrader.
"""
from __future__ import annotations

import ast
import json
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path

# ---- reading notebooks statically ---------------------------------------------------------
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"float": float, "int": int, "abs": abs, "min": min, "max": max, "round": round}
_GUARDED = ("numpy", "np", "grader", "builtins", "math", "sys")


class NotStatic(ValueError):
    """An expression that is not a literal or arithmetic of literals."""


def static_value(node: ast.AST, env: dict):
    """The value of a literal / arithmetic expression (names from env)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise NotStatic(f"name '{node.id}' has no static value")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = static_value(node.left, env), static_value(node.right, env)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
            raise NotStatic("exponent too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](static_value(node.operand, env))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS \
            and not node.keywords:
        return _CALLS[node.func.id](*[static_value(a, env) for a in node.args])
    raise NotStatic(f"'{ast.unparse(node)}' is not a number, a string or arithmetic of them")


@dataclass
class NotebookValues:
    """Names assigned static values by the code cells up to a point, and
    suspicious assignments (to attributes of numpy, grader, ...)."""
    values: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict)          # name -> why it has no static value
    suspicious: list = field(default_factory=list)


def _target_root(t: ast.AST) -> str | None:
    while isinstance(t, (ast.Attribute, ast.Subscript)):
        t = t.value
    return t.id if isinstance(t, ast.Name) else None


def read_values(cells: list[str]) -> NotebookValues:
    out = NotebookValues()
    for i, src in enumerate(cells):
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            out.suspicious.append(f"cell {i}: not valid Python ({e.msg}, line {e.lineno})")
            continue
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _target_root(t) in _GUARDED:
                    out.suspicious.append(f"cell {i}: assigns {ast.unparse(t)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                out.suspicious.append(f"cell {i}: calls {ast.unparse(node)[:80]}")
        for stmt in tree.body:                    # top-level assignments only, in order
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                try:
                    out.values[name] = static_value(stmt.value, out.values)
                    out.unknown.pop(name, None)
                except (NotStatic, ArithmeticError, TypeError, ValueError) as e:
                    out.values.pop(name, None)
                    out.unknown[name] = str(e)
    return out


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


# ---- what a test cell tests ----------------------------------------------------------------
@dataclass
class KernelTest:
    stage: str
    variable: str
    check: str
    points: float


@dataclass
class AnswerTest:
    variable: str
    expected: float
    rtol: float
    atol: float


def parse_test(source: str) -> list:
    """grader.grade(...) calls and np.allclose(VAR, value, rtol=...) asserts in a test cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
        try:
            if name == "grade" and len(node.args) >= 3:
                stage, var, check = node.args[:3]
                kw = {k.arg: k.value for k in node.keywords}
                pts = node.args[3] if len(node.args) > 3 else kw.get("points")
                found.append(KernelTest(static_value(stage, {}), var.id, static_value(check, {}),
                                        float(static_value(pts, {}))))
            elif name in ("allclose", "isclose") and len(node.args) >= 2 and isinstance(node.args[0], ast.Name):
                kw = {k.arg: k.value for k in node.keywords}
                found.append(AnswerTest(node.args[0].id, float(static_value(node.args[1], {})),
                                        float(static_value(kw["rtol"], {})) if "rtol" in kw else 1e-5,
                                        float(static_value(kw["atol"], {})) if "atol" in kw else 1e-8))
        except (NotStatic, AttributeError, KeyError, TypeError, ValueError):
            continue
    return found


# ---- grading a test cell independently ---------------------------------------------------
@dataclass
class Regraded:
    score: float | None             # None: not recomputable
    note: str = ""


def regrade_cell(test_source: str, max_score: float, values: NotebookValues, cache: dict) -> Regraded:
    from .isolation import run_check
    tests = parse_test(test_source)
    if not tests:
        return Regraded(None, "not recomputed: not a grader.grade or allclose test")
    kernel = [t for t in tests if isinstance(t, KernelTest)]
    answers = [t for t in tests if isinstance(t, AnswerTest)]
    score, notes = 0.0, []
    for t in kernel:
        source = values.values.get(t.variable)
        if not isinstance(source, str):
            why = values.unknown.get(t.variable, "never assigned")
            notes.append(f"{t.variable}: no string literal to grade ({why})")
            continue
        key = (t.stage, source, t.check)
        if key not in cache:
            cache[key] = run_check(t.check, t.stage, source)
        r = cache[key]
        score += round(t.points * r.fraction, 3)
        notes.append(f"{t.check}: {r.status}")
    if answers:
        ok = True
        for t in answers:
            v = values.values.get(t.variable)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                ok = False
                notes.append(f"{t.variable}: no static number ({values.unknown.get(t.variable, 'never assigned')})")
            elif not abs(v - t.expected) <= t.atol + t.rtol * abs(t.expected):
                ok = False
                notes.append(f"{t.variable} = {v:g}, expected {t.expected:g}")
            else:
                notes.append(f"{t.variable} = {v:g}: right")
        if ok:
            score += max_score - sum(t.points for t in kernel)
    return Regraded(min(score, max_score), "; ".join(notes))


@dataclass
class Row:
    student: str
    notebook: str
    cell: str
    gradebook: float | None
    regraded: float | None
    max_score: float
    note: str

    @property
    def differs(self) -> bool:
        if self.regraded is None or self.gradebook is None:
            return False
        return abs(self.regraded - self.gradebook) > 1e-6


def regrade(course_dir: str | Path, assignment: str, students: list[str] | None = None) -> list[Row]:
    """Every grade cell of every submission: the gradebook's score and the regraded one."""
    import nbformat
    from nbgrader.api import Gradebook
    from traitlets.config.loader import PyFileConfigLoader
    course = Path(course_dir).resolve()
    cfg_path = course / "nbgrader_config.py"
    c = PyFileConfigLoader(cfg_path.name, path=str(course)).load_config() if cfg_path.exists() else None
    url = None
    course_id = ""
    if c is not None:
        url = c.CourseDirectory.get("db_url") if "CourseDirectory" in c else None
        course_id = c.CourseDirectory.get("course_id", "") if "CourseDirectory" in c else ""
        submitted_dir = c.CourseDirectory.get("submitted_directory", "submitted") if "CourseDirectory" in c \
            else "submitted"
    else:
        submitted_dir = "submitted"
    url = url or f"sqlite:///{course / 'gradebook.db'}"
    rows: list[Row] = []
    cache: dict = {}
    with Gradebook(url, course_id=course_id or "default_course") as gb:
        a = gb.find_assignment(assignment)
        for sub in sorted(a.submissions, key=lambda s: s.student.id):
            student = sub.student.id
            if students and student not in students:
                continue
            for nb_rec in a.notebooks:
                path = course / submitted_dir / student / assignment / f"{nb_rec.name}.ipynb"
                if not path.exists():
                    rows.append(Row(student, nb_rec.name, "(notebook)", None, None, 0, f"missing: {path}"))
                    continue
                nb = nbformat.read(str(path), as_version=4)
                cells = code_cells(nb)
                ids = [grade_id(cl) for cl in cells]
                for gc in sorted(nb_rec.grade_cells, key=lambda g: ids.index(g.name) if g.name in ids else 10**6):
                    upto = ids.index(gc.name) if gc.name in ids else len(cells)
                    values = read_values([cl.source for cl in cells[:upto]])
                    test_source = gb.find_source_cell(gc.name, nb_rec.name, assignment).source
                    r = regrade_cell(test_source, gc.max_score, values, cache)
                    grade = gb.find_grade(gc.name, nb_rec.name, assignment, student)
                    note = r.note
                    if values.suspicious:
                        note += " | suspicious: " + "; ".join(values.suspicious[:3])
                    rows.append(Row(student, nb_rec.name, gc.name, grade.score, r.score, gc.max_score, note))
    return rows


def format_rows(rows: list[Row], only_differences: bool = False) -> str:
    out = []
    diffs = [r for r in rows if r.differs]
    for r in rows:
        if only_differences and not r.differs:
            continue
        gbs = "-" if r.gradebook is None else f"{r.gradebook:g}"
        rgs = "-" if r.regraded is None else f"{r.regraded:g}"
        mark = "DIFFERS" if r.differs else "       "
        out.append(f"{mark} {r.student:<12} {r.notebook:<18} {r.cell:<28} gradebook {gbs:>5} regraded {rgs:>5} "
                   f"/ {r.max_score:g}   {r.note}")
    out.append(f"{len(diffs)} score(s) differ from the gradebook" + (
        ": " + ", ".join(sorted({f'{r.student}/{r.cell}' for r in diffs})) if diffs else ""))
    return "\n".join(out)


# ---- kernel sources from a notebook, for `python -m grader check` -------------------------
def kernel_source_from_notebook(path: str | Path, stage_id: str) -> tuple[str, str]:
    """(variable name, source) of the stage's kernel in a notebook: the string
    passed with this stage to grader.check / grader.grade, or the only
    string variable named *_SOURCE."""
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    cells = [c.source for c in code_cells(nb)]
    values = read_values(cells)
    candidates = []
    for src in cells:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("check", "grade") and len(node.args) >= 2 \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == stage_id \
                    and isinstance(node.args[1], ast.Name):
                candidates.append(node.args[1].id)
    if not candidates:
        candidates = [k for k, v in values.values.items() if k.endswith("_SOURCE") and isinstance(v, str)]
        if len(candidates) != 1:
            raise ValueError(f"{path}: cannot tell which string is the '{stage_id}' kernel (found "
                             f"{', '.join(candidates) or 'no *_SOURCE strings'})")
    var = candidates[0]
    src = values.values.get(var)
    if not isinstance(src, str):
        raise ValueError(f"{path}: {var} is not a string literal ({values.unknown.get(var, 'never assigned')})")
    return var, src


def main_check(argv: list[str]) -> int:
    import argparse

    class P(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)
    p = P(prog="python -m grader check", add_help=False)
    p.add_argument("file")
    p.add_argument("--stage", required=True)
    p.add_argument("--checks", default="")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true")
    try:
        args = p.parse_args(argv)
    except ValueError as e:
        print(f"{e}\nusage: python -m grader check FILE(.cu|.ipynb) --stage ID [--checks a,b] [--seed N] [--json]")
        return 2
    from .notebook import check
    from .stages import stage
    try:
        stage(args.stage)
        path = Path(args.file)
        if path.suffix == ".ipynb":
            var, source = kernel_source_from_notebook(path, args.stage)
            print(f"{path}: grading {var} as stage '{args.stage}'")
        else:
            source = path.read_text()
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {e}")
        return 2
    report = check(args.stage, source, [c for c in args.checks.split(",") if c] or None, seed=args.seed)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text())
    return 0 if report.ok else 1


def main_regrade(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print("usage: python -m grader regrade COURSE_DIR ASSIGNMENT [--differences] [--student ID ...]")
        return 2
    course, assignment = argv[0], argv[1]
    only = "--differences" in argv
    students = [argv[i + 1] for i, a in enumerate(argv) if a == "--student" and i + 1 < len(argv)]
    try:
        rows = regrade(course, assignment, students or None)
    except Exception as e:
        print(f"error: {type(e).__name__}: {e}")
        return 2
    print(format_rows(rows, only))
    return 1 if any(r.differs for r in rows) else 0

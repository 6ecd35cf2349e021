"""Reading a notebook's code cells without running them: the values that
names get from literals and arithmetic of literals (a kernel's source string,
a numeric answer), and assignments that patch numpy, grader, sys, ...

Layer: CLI support (standard library only).
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"float": float, "int": int, "abs": abs, "min": min, "max": max, "round": round}
GUARDED = ("numpy", "np", "grader", "builtins", "math", "sys")


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
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _target_root(t) in GUARDED:
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
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.values.pop(stmt.name, None)
                out.unknown[stmt.name] = "a definition, not a literal"
    return out


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def call_name(node: ast.Call) -> str:
    """`grade` for grader.grade(...) or grade(...)."""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")

"""Reading a notebook's code cells without running them: the values that
names get from literals and arithmetic of literals (a kernel's source string,
a numeric answer), and assignments that patch numpy, grader, sys, ...
"""
from __future__ import annotations

import ast
import operator
import re
import textwrap
from dataclasses import dataclass, field

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"float": float, "int": int, "abs": abs, "min": min, "max": max, "round": round, "str": str,
          "len": len}
GUARDED = ("numpy", "np", "grader", "builtins", "math", "sys")


class NotStatic(ValueError):
    """An expression that is not a literal or arithmetic of literals."""


MAX_STRING = 1_000_000          # characters of a string value
MAX_INT_DIGITS = 400            # digits of an integer value
MAX_NODES = 20_000              # syntax-tree nodes of one expression
_STR_METHODS = {"replace", "strip", "lstrip", "rstrip", "format", "join", "upper", "lower", "removeprefix",
                "removesuffix"}
_WIDE = re.compile(r"\d{7,}")       # a field width or precision of a million or more


def _bounded(value):
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise NotStatic(f"a string of more than {MAX_STRING} characters")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_INT_DIGITS:
        raise NotStatic(f"an integer of more than {MAX_INT_DIGITS} digits")
    if isinstance(value, (list, tuple)) and sum(len(v) if isinstance(v, str) else 1 for v in value) > MAX_STRING:
        raise NotStatic("a sequence too large")
    return value


def _size(value) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 1


def static_value(node: ast.AST, env: dict):
    """The value of a literal / arithmetic expression (names from env), with
    ordinary string operations (concatenation, repetition, %, f-strings,
    .replace/.strip/.format/.join/..., textwrap.dedent), every value bounded
    in size (a notebook cannot make this run out of memory or time)."""
    if sum(1 for _ in zip(range(MAX_NODES + 1), ast.walk(node))) > MAX_NODES:
        raise NotStatic(f"an expression of more than {MAX_NODES} parts")
    return _value(node, env)


def _value(node: ast.AST, env: dict):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise NotStatic(f"name '{node.id}' has no static value")
    if isinstance(node, (ast.Tuple, ast.List)):
        return _bounded(tuple(_value(e, env) for e in node.elts))
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                spec = _narrow(_value(v.format_spec, env)) if v.format_spec else ""
                inner = _value(v.value, env)
                inner = {115: str, 114: repr, 97: ascii}.get(v.conversion, lambda x: x)(inner)
                parts.append(format(inner, spec))
            else:
                parts.append(_value(v, env))
            _bounded("".join(parts) if sum(map(len, parts)) > MAX_STRING else "")
        return _bounded("".join(parts))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _value(node.left, env), _value(node.right, env)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
            raise NotStatic("exponent too large")
        if isinstance(node.op, ast.Mult) and {type(left), type(right)} & {str, tuple}:
            n = right if isinstance(left, (str, tuple)) else left
            seq = left if isinstance(left, (str, tuple)) else right
            if isinstance(n, int) and n * _size(seq) > MAX_STRING:
                raise NotStatic(f"a string of more than {MAX_STRING} characters")
        if isinstance(node.op, ast.Add) and _size(left) + _size(right) > MAX_STRING:
            raise NotStatic(f"a string of more than {MAX_STRING} characters")
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            return _bounded(_narrow(left) % right)
        return _bounded(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, env))
    if isinstance(node, ast.Call) and not node.keywords:
        f = node.func
        if isinstance(f, ast.Name) and f.id in _CALLS:
            return _bounded(_CALLS[f.id](*[_value(a, env) for a in node.args]))
        if (isinstance(f, ast.Name) and f.id == "dedent") or (
                isinstance(f, ast.Attribute) and f.attr == "dedent" and isinstance(f.value, ast.Name)
                and f.value.id == "textwrap"):
            return textwrap.dedent(_str(_value(node.args[0], env))) if len(node.args) == 1 else _not(node)
        if isinstance(f, ast.Attribute) and f.attr in _STR_METHODS:
            target = _str(_value(f.value, env))
            args = [_value(a, env) for a in node.args]
            if f.attr == "format":
                _narrow(target)
            if f.attr == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
                if (len(target) // max(1, len(args[0])) + 1) * len(args[1]) + len(target) > MAX_STRING:
                    raise NotStatic(f"a string of more than {MAX_STRING} characters")
            result = getattr(target, f.attr)(*args)
            return _bounded(result)
    return _not(node)


def _narrow(fmt):
    if isinstance(fmt, str) and _WIDE.search(fmt):
        raise NotStatic("a format with a field width of a million or more")
    return fmt


def unparse(node: ast.AST, limit: int = 80) -> str:
    try:
        return ast.unparse(node)[:limit]
    except (RecursionError, ValueError):
        return type(node).__name__


def _str(value) -> str:
    if not isinstance(value, str):
        raise NotStatic("a string method on something that is not a string")
    return value


def _not(node: ast.AST):
    raise NotStatic(f"'{unparse(node)}' is not a number, a string or arithmetic of them")


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
        tree = parse(src)
        if isinstance(tree, str):
            out.suspicious.append(f"cell {i}: {tree}")
            continue
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _target_root(t) in GUARDED:
                    out.suspicious.append(f"cell {i}: assigns {unparse(t)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                out.suspicious.append(f"cell {i}: calls {unparse(node)}")
        for stmt in tree.body:                    # top-level assignments only, in order
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                try:
                    out.values[name] = static_value(stmt.value, out.values)
                    out.unknown.pop(name, None)
                except (NotStatic, ArithmeticError, TypeError, ValueError, LookupError, RecursionError,
                        MemoryError) as e:
                    out.values.pop(name, None)
                    out.unknown[name] = str(e)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.values.pop(stmt.name, None)
                out.unknown[stmt.name] = "a definition, not a literal"
    return out


def parse(src: str):
    """The cell's syntax tree, or a string saying why there is none (invalid, or too deep to parse)."""
    try:
        return ast.parse(src)
    except SyntaxError as e:
        return f"not valid Python ({e.msg}, line {e.lineno})"
    except (RecursionError, MemoryError, ValueError) as e:
        return f"not read ({type(e).__name__}: too large or too deeply nested)"


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def call_name(node: ast.Call) -> str:
    """`grade` for grader.grade(...) or grade(...)."""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")

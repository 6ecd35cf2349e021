"""Reading a notebook's code cells without running them: the values that
names get from literals and arithmetic of literals (a kernel's source string,
a numeric answer), and assignments that patch numpy, grader, sys, ...
"""
from __future__ import annotations

import ast
import operator
import re
import string
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


class TooLarge(NotStatic):
    """A value (or a cell) past the bounds: computing it would take the grader's own time and memory."""


# Every value computed here is bounded, in the grader's own process: a notebook cannot make
# reading it take more than seconds or more than a few times MAX_STRING of memory.
MAX_STRING = 1_000_000          # characters of a string value (or of a tuple written out)
MAX_INT_BITS = 1_400            # an integer value: about 420 digits
MAX_EXPONENT = 64               # of a power
MAX_NODES = 20_000              # syntax-tree nodes of one expression
MAX_DEPTH = 100                 # nesting of one expression
# A cell is parsed only within these bounds (parsing takes about 10 us and 1 kB per syntax-tree
# node: a million `1,` is half a minute and a gigabyte). The course's notebooks hold up to 40 kB
# and 5,000 parts in all.
MAX_CELL = 1_000_000            # characters of a cell that is read
MAX_CELL_PARTS = 100_000        # punctuation and line ends of a cell that is read (about its tokens)
MAX_CELLS_TOTAL = 5_000_000     # characters of all the cells read
MAX_PARTS_TOTAL = 200_000       # parts of all the cells read
_PART_CHARS = ",;()[]{}=+-*/%<>.:'\"\n@&|^~"
_STR_METHODS = {"replace", "strip", "lstrip", "rstrip", "format", "join", "upper", "lower", "removeprefix",
                "removesuffix"}
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[diouxXeEfFgGcrsa%]")


def _weight(value) -> int:
    """An upper bound on the characters of str(value) (what formatting it can produce)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, tuple):
        total = 2
        for v in value:
            total += _weight(v) + 2
            if total > MAX_STRING:
                break
        return total
    return 24                   # a float


def _bounded(value):
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise TooLarge(f"an integer of more than {MAX_INT_BITS} bits")
    if _weight(value) > MAX_STRING:
        raise TooLarge(f"more than {MAX_STRING} characters")
    return value


def _fits(size: int) -> None:
    if size > MAX_STRING:
        raise TooLarge(f"more than {MAX_STRING} characters")


def _field_size(spec: str) -> int:
    """The most a format field with this spec adds to its value's text: its width and precision,
    and the digits of a float written without an exponent ('f' of 1e308)."""
    if "{" in spec or "*" in spec:
        raise NotStatic("a width or precision that is not a literal")
    return 320 + sum(int(n) for n in re.findall(r"\d+", spec))


def _percent(fmt: str, args):
    """fmt % args, once its size is known to be bounded."""
    values = args if isinstance(args, tuple) else (args,)
    size = len(fmt) + sum(_weight(v) for v in values)
    for m in _PERCENT.finditer(fmt):
        size += _field_size((m.group(1) or "") + "." + (m.group(2) or ""))
    _fits(size)
    return fmt % args


def _format(fmt: str, args: list):
    """fmt.format(*args), once its size is known to be bounded."""
    size, auto = len(fmt), 0
    for _, name, spec, _ in string.Formatter().parse(fmt):
        if name is None:
            continue
        if name == "":
            name, auto = str(auto), auto + 1
        if not name.isdigit():
            raise NotStatic("a format field other than {} or {N}")
        size += _field_size(spec or "") + _weight(args[int(name)])
    _fits(size)
    return fmt.format(*args)


def static_value(node: ast.AST, env: dict):
    """The value of a literal / arithmetic expression (names from env), with
    ordinary string operations (concatenation, repetition, %, f-strings,
    .replace/.strip/.format/.join/..., textwrap.dedent), every value bounded
    in size (a notebook cannot make this run out of memory or time)."""
    nodes, stack = 0, [(node, 1)]
    while stack:
        n, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise TooLarge(f"an expression of more than {MAX_NODES} parts")
        if depth > MAX_DEPTH:
            raise TooLarge(f"an expression nested more than {MAX_DEPTH} deep")
        stack += [(c, depth + 1) for c in ast.iter_child_nodes(n)]
    return _value(node, env)


def _value(node: ast.AST, env: dict):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return _bounded(node.value)
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise NotStatic(f"name '{node.id}' has no static value")
    if isinstance(node, (ast.Tuple, ast.List)):
        return _bounded(tuple(_value(e, env) for e in node.elts))
    if isinstance(node, ast.JoinedStr):
        parts, size = [], 0
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                spec = _str(_value(v.format_spec, env)) if v.format_spec else ""
                inner = _value(v.value, env)
                _fits(size + _field_size(spec) + _weight(inner))
                inner = {115: str, 114: repr, 97: ascii}.get(v.conversion, lambda x: x)(inner)
                parts.append(format(inner, spec))
            else:
                parts.append(_value(v, env))
            size += len(parts[-1])
            _fits(size)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _value(node.left, env), _value(node.right, env)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and isinstance(left, (int, float)):
            if abs(right) > MAX_EXPONENT or (isinstance(left, int) and isinstance(right, int) and right > 0
                                             and left.bit_length() * right > MAX_INT_BITS):
                raise TooLarge("a power too large")
        if isinstance(node.op, ast.Mult) and {type(left), type(right)} & {str, tuple}:
            n, seq = (right, left) if isinstance(left, (str, tuple)) else (left, right)
            if isinstance(n, int):
                _fits(n * _weight(seq))
        if isinstance(node.op, ast.Add) and isinstance(left, (str, tuple)):
            _fits(_weight(left) + _weight(right))
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            return _bounded(_percent(left, right))
        return _bounded(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, env))
    if isinstance(node, ast.Call) and not node.keywords:
        f = node.func
        if isinstance(f, ast.Name) and f.id in _CALLS:
            args = [_value(a, env) for a in node.args]
            if f.id == "round" and len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > MAX_INT_BITS:
                raise TooLarge("a number of digits too large to round to")
            return _bounded(_CALLS[f.id](*args))
        if (isinstance(f, ast.Name) and f.id == "dedent") or (
                isinstance(f, ast.Attribute) and f.attr == "dedent" and isinstance(f.value, ast.Name)
                and f.value.id == "textwrap"):
            return textwrap.dedent(_str(_value(node.args[0], env))) if len(node.args) == 1 else _not(node)
        if isinstance(f, ast.Attribute) and f.attr in _STR_METHODS:
            target = _str(_value(f.value, env))
            args = [_value(a, env) for a in node.args]
            if f.attr == "format":
                return _bounded(_format(target, args))
            if f.attr == "join" and len(args) == 1 and isinstance(args[0], (tuple, str)):
                _fits(len(target) * len(args[0]) + _weight(args[0]))
            if f.attr == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
                _fits((len(target) // max(1, len(args[0])) + 1) * len(args[1]) + len(target))
            return _bounded(getattr(target, f.attr)(*args))
    return _not(node)


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


def _parts(src: str) -> int:
    """About the number of tokens of a cell (over-counting inside string literals)."""
    return sum(src.count(c) for c in _PART_CHARS) if len(src) <= MAX_CELL else MAX_CELL_PARTS + 1


def readable(cells: list[str]) -> list[str]:
    """The cells as the grader reads them from the text: a cell past the bounds (MAX_CELL,
    MAX_CELL_PARTS, or the totals of the cells read before it) is read as empty."""
    out, chars, parts = [], 0, 0
    for src in cells:
        n = _parts(src)
        if len(src) <= MAX_CELL and n <= MAX_CELL_PARTS and chars + len(src) <= MAX_CELLS_TOTAL \
                and parts + n <= MAX_PARTS_TOTAL:
            chars, parts = chars + len(src), parts + n
            out.append(src)
        else:
            out.append("")
    return out


_ASSIGNED = re.compile(r"([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)")
MAX_UNREAD_LINES = 200_000      # line starts looked at for the names that cells not read assign


def _assigned(src: str, budget: list[int]):
    """The names assigned at the start of the lines of a cell that is not parsed (budget[0]: lines left)."""
    pos = 0
    while pos >= 0 and budget[0] > 0:
        budget[0] -= 1
        if m := _ASSIGNED.match(src, pos):
            yield m.group(1)
        pos = src.find("\n", pos)
        pos = pos + 1 if pos >= 0 else -1


def read_values(cells: list[str]) -> NotebookValues:
    out = NotebookValues()
    budget = [MAX_UNREAD_LINES]
    for i, (src, kept) in enumerate(zip(cells, readable(cells))):
        if kept != src:
            why = f"cell {i} holds {len(src):,} characters, more than the grader reads from a notebook's text"
            out.suspicious.append(f"cell {i}: not read ({len(src):,} characters)")
            for name in _assigned(src, budget):
                out.values.pop(name, None)
                out.unknown[name] = f"the value of {name} is too large to grade from the text ({why})"
            continue
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
                except TooLarge as e:
                    out.values.pop(name, None)
                    out.unknown[name] = f"the value of {name} is too large to grade from the text ({e})"
                except (NotStatic, ArithmeticError, TypeError, ValueError, LookupError, RecursionError,
                        MemoryError) as e:
                    out.values.pop(name, None)
                    out.unknown[name] = str(e)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.values.pop(stmt.name, None)
                out.unknown[stmt.name] = "a definition, not a literal"
    return out


def parse(src: str):
    """The cell's syntax tree, or a string saying why there is none (invalid, too large or too deep)."""
    if len(src) > MAX_CELL or _parts(src) > MAX_CELL_PARTS:
        return (f"not read ({len(src)} characters: the grader reads at most {MAX_CELL} characters and about "
                f"{MAX_CELL_PARTS} tokens per cell)")
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

"""A student's host function (Python calling kernels, lab 7's `minimums(A, B)`)
as text, so that it is graded like a kernel: in a fresh process, from source.

Why text: a function object cannot cross a process boundary, and a grading
process that runs the student's code must be a fresh one (a crash, a hang or a
patched numpy there costs that check only). So

- in a notebook, `grader.check("minimums-host", minimums)` turns the function
  into a self-contained module with `function_source`: its own source (from
  inspect, which finds a notebook cell's text through IPython's linecache),
  preceded by what it uses from the notebook's globals: modules as imports,
  objects of importable modules as from-imports, strings and numbers as
  literals, other functions of the notebook by their own source;
- `python -m grader regrade` builds the same kind of module from the
  submitted notebook's cells with `source_from_cells`, without running them:
  the imports, definitions and literal assignments (no other statements) of
  the cells up to the test cell;
- the student's own process (grader.grading.student_process, started by the grading
  process, which keeps the check) loads it with `load_function`.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import linecache
import textwrap
import types

SUBMISSION_FILE = "<your host function>"
EMULATED_PYCUDA = "grader.emulator.pycuda"


class NotSendable(TypeError):
    """The function uses something of the notebook that cannot be written as source."""


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _public(module: str) -> str:
    """The name code imports a module by: the emulator installed as `pycuda` is `pycuda` (in the process
    that runs a student's function, `pycuda` is the grading process's device)."""
    return "pycuda" + module[len(EMULATED_PYCUDA):] if module.startswith(EMULATED_PYCUDA) else module


def _importable(obj) -> tuple[str, str] | None:
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not name or module == "__main__" or "." in name:
        return None
    if module.startswith(EMULATED_PYCUDA):
        return _public(module), name
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return (module, name) if found is obj else None


def _definition(obj) -> str:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as e:
        raise NotSendable(f"the source of {getattr(obj, '__name__', obj)!r} cannot be found ({e}): define it "
                          "in a notebook cell or a file") from None


def function_source(function) -> str:
    """A module that defines `function` under its name, with what it uses from
    its globals. Raises NotSendable for a global that cannot be written."""
    if not isinstance(function, types.FunctionType):
        raise TypeError(f"expected a Python function, not {type(function).__name__}")
    head, defs, seen = [], [], set()

    def visit(fn) -> None:
        for name in sorted(_global_names(fn.__code__)):
            if name in seen or name not in fn.__globals__:
                continue                                   # a builtin, a local or an attribute name
            seen.add(name)
            value = fn.__globals__[name]
            if isinstance(value, types.ModuleType):
                module = _public(value.__name__)
                head.append(f"import {module}" if module == name else f"import {module} as {name}")
            elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
                head.append(f"{name} = {value!r}")
            elif (where := _importable(value)) is not None:
                head.append(f"from {where[0]} import {where[1]}" + (f" as {name}" if where[1] != name else ""))
            elif isinstance(value, types.FunctionType):
                visit(value)
                defs.append(_definition(value) if value.__name__ == name
                            else f"{_definition(value)}\n{name} = {value.__name__}")
            elif inspect.isclass(value):
                defs.append(_definition(value))
            else:
                raise NotSendable(f"{fn.__name__} uses the global {name!r} ({type(value).__name__}), which "
                                  "cannot be sent to the grading process: create it inside the function")

    seen.add(function.__name__)
    visit(function)
    body = _definition(function)
    if function.__name__ != function.__code__.co_name:
        body += f"\n{function.__name__} = {function.__code__.co_name}"
    return "\n".join(head + [""] + defs + [body]) + "\n"


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def source_from_cells(cells: list[str], values: dict) -> str:
    """A module from notebook cells, without running them: their imports and
    definitions, and `values` (names with a literal value, see
    grader.course.static_values) as assignments. Statements that do anything else
    are left out."""
    head = [f"{name} = {value!r}" for name, value in values.items()
            if value is None or isinstance(value, (bool, int, float, str))]
    parts = []
    for src in cells:
        try:
            tree = ast.parse(src)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        parts += [ast.unparse(stmt) for stmt in tree.body if isinstance(stmt, _KEPT)]
    return "\n".join(head + parts) + "\n"


def load_function(source: str, name: str):
    """Run a submission's module text in a fresh namespace and return `name`.
    Whatever the student's code raises propagates (the check reports it)."""
    linecache.cache[SUBMISSION_FILE] = (len(source), None, source.splitlines(True), SUBMISSION_FILE)
    namespace = {"__name__": "submission"}
    exec(compile(source, SUBMISSION_FILE, "exec"), namespace)
    function = namespace.get(name)
    if not callable(function):
        raise NameError(f"the submission defines no function '{name}'")
    return function

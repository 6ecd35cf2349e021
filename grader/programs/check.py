"""`python -m grader check FILE --exercise ID [--checks a,b] [--seed N] [--json]`:
grade a .cu file, or the kernel of a notebook, the way a notebook's
grader.check does (each check in its own process). Exit status 1 when a
check fails, 3 when the grader itself failed (a grader error: not the
submission's fault), 2 for a wrong command line. With --json, stdout holds
only the report as JSON (the backend inside it). `--stage` is the same option
as `--exercise`.
"""
from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

from grader.course.static_values import call_name, code_cells, read_values, readable
from grader.grading import frontend, registry

GRADER_FAILED = 3
USAGE = ("usage: python -m grader check FILE(.cu|.ipynb) --exercise ID [--checks a,b] [--seed N] [--json]\n"
         "exercises: " + ", ".join(registry.EXERCISES))


def kernel_source_from_notebook(path: str | Path, exercise: str) -> tuple[str, str]:
    """(variable name, source) of the exercise's kernel in a notebook: the
    string passed with this exercise to grader.check / grader.grade, or the
    only string variable named *_SOURCE."""
    import nbformat  # reading notebooks: only this command and regrade need it
    nb = nbformat.read(str(path), as_version=4)
    cells = [c.source for c in code_cells(nb)]
    values = read_values(cells)
    candidates = []
    for src in readable(cells):
        try:
            tree = ast.parse(src)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and call_name(node) in ("check", "grade") and len(node.args) >= 2 \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == exercise \
                    and isinstance(node.args[1], ast.Name):
                candidates.append(node.args[1].id)
    if not candidates:
        candidates = [k for k, v in values.values.items() if k.endswith("_SOURCE") and isinstance(v, str)]
        if len(candidates) != 1:
            raise ValueError(f"{path}: cannot tell which string is the '{exercise}' kernel (found "
                             f"{', '.join(candidates) or 'no *_SOURCE strings'})")
    var = candidates[0]
    src = values.values.get(var)
    if not isinstance(src, str):
        raise ValueError(f"{path}: {var} is not a string literal ({values.unknown.get(var, 'never assigned')})")
    return var, src


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def main(argv: list[str]) -> int:
    p = _Parser(prog="python -m grader check", add_help=False)
    p.add_argument("file")
    p.add_argument("--exercise", "--stage", dest="exercise", required=True)
    p.add_argument("--checks", default="")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true")
    try:
        args = p.parse_args(argv)
    except ValueError as e:
        print(f"{e}\n{USAGE}")
        return 2
    try:
        exercise = registry.get(args.exercise)
        checks = [c for c in args.checks.split(",") if c] or None
        for c in checks or ():
            exercise.check(c)
        path = Path(args.file)
        if path.suffix == ".ipynb":
            var, source = kernel_source_from_notebook(path, exercise.id)
            if not args.json:
                print(f"{path}: grading {var} as '{exercise.id}'")
        else:
            source = path.read_text()
    except (KeyError, ValueError, OSError) as e:
        message = e.args[0] if isinstance(e, KeyError) else e
        print(json.dumps({"error": str(message)}) if args.json else f"error: {message}")
        return 2
    report = frontend.check(exercise.id, source, checks, seed=args.seed, announce=not args.json)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text())
    return GRADER_FAILED if report.grader_failed else 0 if report.ok else 1

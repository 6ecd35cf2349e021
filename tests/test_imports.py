"""The grader's layers import one way, and importing a module does nothing.

Layers (README, "Architecture"): emulator -> backend -> kernels and host
drivers -> checks -> front-end -> CLI and notebook glue. The import graph is
read statically (every import statement of every module, those inside
functions included), so an import deferred into a function to hide a loop is
a loop here too.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "grader"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The grader modules that `module` imports anywhere in its text."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for t in targets:
            while t and t not in MODULES:          # `import grader.x.y` names grader.x.y; a name of a module: it
                t = t.rpartition(".")[0]
            if t and t != module:
                found.add(t)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def find_cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_the_graph_is_read():
    assert "grader.platform.backend" in GRAPH["grader.platform.compiler"]
    assert "grader.grading.registry" in GRAPH["grader.grading.frontend"]
    assert "grader.grading.checks.minimums" in GRAPH["grader.grading.registry"]


def test_no_import_loops():
    cycle = find_cycle()
    assert cycle is None, "import loop: " + " -> ".join(cycle)


# Programs that measure the emulator with the course's kernels (python -m grader.programs.emulator_bench,
# python -m grader.programs.emulator_validate): they stand above the grader, nothing imports them.
EMULATOR_PROGRAMS = {"grader.programs.emulator_bench", "grader.programs.emulator_validate"}


def test_the_emulator_imports_nothing_of_the_grader_above_it():
    for m, targets in GRAPH.items():
        if m.startswith("grader.emulator") and m not in EMULATOR_PROGRAMS:
            assert all(t.startswith("grader.emulator") for t in targets), (m, targets)
    assert not any(p in targets for p in EMULATOR_PROGRAMS for targets in GRAPH.values())


# The layers, bottom up; a module may import its own layer and those below.
LAYERS = [
    ("emulator", lambda m: m.startswith("grader.emulator") and m not in EMULATOR_PROGRAMS or m == "grader.programs.recorded_command"),
    ("backend", lambda m: m in ("grader.platform.backend", "grader.platform.compiler")),
    ("kernels and host drivers", lambda m: m in ("grader.kernels.stages", "grader.kernels.sgemm", "grader.kernels.top2",
                                                  "grader.kernels.sssp", "grader.kernels.transfers", "grader.kernels.host_log",
                                                  "grader.grading.host_functions", "grader.grading.student_process", "grader.platform.sandbox", "grader.kernels.timing", "grader.references.occupancy",
                                                  "grader.grading.report", "grader.kernels.transpose", "grader.references.autotune_rules")),
    ("checks", lambda m: m.startswith("grader.grading.checks") or m == "grader.grading.registry"),
    ("front-end", lambda m: m in ("grader.grading.isolation", "grader.grading.frontend", "grader")),
    ("CLI and programs", lambda m: True),
]


def layer(module: str) -> int:
    return next(i for i, (_, member) in enumerate(LAYERS) if member(module))


def test_layers_import_one_way():
    upward = [f"{m} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
              for m, targets in sorted(GRAPH.items()) for t in sorted(targets) if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


# Modules that are entry points: importing them is what they are for.
ENTRY_POINTS = {"grader.emulator.pycuda.autoinit", "grader.emulator.pycuda.autoprimaryctx"}
PROBE = """
import importlib, io, json, sys, contextlib
name = sys.argv[1]
before = sys.modules.get("pycuda")
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        importlib.import_module(name)
except ModuleNotFoundError as e:
    if e.name.split(".")[0] == "grader":
        raise
    print(json.dumps({"skipped": f"optional dependency {e.name} missing"}))
    raise SystemExit(0)
print(json.dumps({"printed": out.getvalue(), "pycuda_changed": sys.modules.get("pycuda") is not before}))
"""


@pytest.mark.parametrize("module", sorted(set(MODULES) - ENTRY_POINTS))
def test_importing_does_nothing(module):
    p = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, cwd=REPO,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    result = json.loads(p.stdout.strip().splitlines()[-1])
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert result["printed"] == "", f"importing {module} printed {result['printed']!r}"
    assert not result["pycuda_changed"], f"importing {module} changed sys.modules['pycuda']"

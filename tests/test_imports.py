"""The architecture holds: import-linter's contracts (pyproject.toml: the layers as folders, the
emulator independent of the grader) are kept, the README's Architecture section names every layer of
the contract, and importing any module does nothing (prints nothing, leaves `pycuda` alone)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "grader"
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_import_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    p = subprocess.run([lint, "--no-cache"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "BROKEN" not in p.stdout and p.stdout.count("KEPT") == len(CONTRACTS), p.stdout


def test_the_readme_states_the_layers_of_the_contract():
    architecture = re.search(r"^## Architecture\n(.*?)^## ", (REPO / "README.md").read_text(), re.S | re.M).group(1)
    layers = next(c["layers"] for c in CONTRACTS if c["type"] == "layers")
    missing = [layer for layer in layers if f"`{layer.replace('.', '/')}/`" not in architecture]
    assert not missing, f"README's Architecture section does not name {missing}"
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(layer.split(".")[1] for layer in layers) == folders, "every package of grader/ is a layer"


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

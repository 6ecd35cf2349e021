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
# One process imports the third-party packages the grader uses (the slow part of every import), then
# forks once per module: each child imports its module into a process that holds no module of the
# grader, with its stdout and stderr (Python's and the file descriptors') caught, and says what happened.
PROBE = """
import atexit, contextlib, importlib, io, json, os, sys, tempfile, traceback
for heavy in ("numpy", "traitlets", "nbformat", "nbconvert", "nbgrader.apps", "jupyter_client"):
    try:
        importlib.import_module(heavy)
    except ImportError:
        pass
results = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        caught = tempfile.TemporaryFile()
        os.dup2(caught.fileno(), 1)
        os.dup2(caught.fileno(), 2)
        before, out = sys.modules.get("pycuda"), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                importlib.import_module(name)
                atexit._run_exitfuncs()
            result = {"printed": out.getvalue(), "pycuda_changed": sys.modules.get("pycuda") is not before}
        except ModuleNotFoundError as e:
            result = ({"error": traceback.format_exc()} if e.name.split(".")[0] == "grader"
                      else {"skipped": f"optional dependency {e.name} missing"})
        except BaseException:
            result = {"error": traceback.format_exc()}
        sys.stdout.flush()
        sys.stderr.flush()
        caught.seek(0)
        result["written"] = caught.read().decode(errors="replace")
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    results[name] = json.loads(data) if data else {"error": "the process importing it died"}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported() -> dict:
    """What importing each module did, by name (PROBE)."""
    modules = sorted(set(MODULES) - ENTRY_POINTS)
    p = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, cwd=REPO,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=600)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", sorted(set(MODULES) - ENTRY_POINTS))
def test_importing_does_nothing(module, imported):
    result = imported[module]
    assert "error" not in result, result["error"]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert result["printed"] == "" and result["written"] == "", \
        f"importing {module} printed {result['printed'] + result['written']!r}"
    assert not result["pycuda_changed"], f"importing {module} changed sys.modules['pycuda']"

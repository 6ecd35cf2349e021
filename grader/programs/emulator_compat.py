"""Run PyCUDA's own tests against the emulator and count what passes; run
PyCUDA's examples and compare what they print with a GPU's.

    python -m grader emulator-compat PYCUDA_SOURCE [--files test_driver.py ...] [--device-memory-gb 4] [-v]
    python -m grader emulator-compat PYCUDA_SOURCE --examples [--with-autoinit] [--real] [--json FILE]
                                                   [--compare GPU.json]

PYCUDA_SOURCE is an unpacked PyCUDA source distribution (it is not part of
this repository), for example:

    pip download --no-binary :all: --no-deps --no-build-isolation pycuda -d /tmp/pycuda
    tar xzf /tmp/pycuda/pycuda-*.tar.gz -C /tmp/pycuda
    python -m grader emulator-compat /tmp/pycuda/pycuda-2026.1

(--no-build-isolation needs setuptools and wheel installed: pip prepares the
sdist's metadata.) Each test file runs under pytest in a process of its own,
with `pycuda` being the emulator (this module is the pytest plugin that
installs it). A test counts as

- passed;
- not supported: it failed on something the emulator refuses by design
  (pycuda.driver.NotSupported: textures, cubins, ...);
- failed: any other failure or error;
- skipped: the test skipped itself (texture references were removed in CUDA
  12, not enough device memory, ...), as it would on a GPU; not counted.

The emulated device reports --device-memory-gb of memory (default 4), so the
tests written for large GPUs skip themselves instead of filling this host.

--examples runs each of examples/*.py and examples/from-wiki/*.py (under
`python -m grader.emulator`, or plain Python with --real, on a GPU machine
with PyCUDA), with --with-autoinit after `import pycuda.autoinit` (most of
PyCUDA 2026.1's examples lost that import and fail without a context, on a
GPU too). Each example's exit status, last error line and printed lines go
to --json; --compare GPU.json puts a GPU's run of the same examples beside.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader import emulator
from grader.platform import COURSE_ROOT, settings

FILES = ("test_driver.py", "test_gpuarray.py", "test_cumath.py")
OUTCOMES = ("passed", "failed", "not supported", "skipped")
NOT_SUPPORTED_MARK = "NotSupported"


def pytest_configure(config) -> None:
    """Loaded by pytest (-p grader.programs.emulator_compat): `pycuda` is the emulator,
    with contexts as on a GPU (PyCUDA's tests make and pop their own), configured by the settings
    this process was started with."""
    settings.current()
    emulator.install(contexts_like_a_gpu=True)


@dataclass
class Result:
    file: str
    test: str
    outcome: str
    reason: str = ""


def _reason(element) -> str:
    text = (element.get("message") or element.text or "").strip()
    return " ".join(text.splitlines()[:1])[:200] if text else ""


def run_file(source: Path, name: str, device_memory_gb: float, timeout: float) -> list[Result]:
    """Runs one of PyCUDA's test files on the emulator; one Result per test."""
    repo = COURSE_ROOT
    with tempfile.TemporaryDirectory(prefix="pycuda-compat-") as tmp:
        report = Path(tmp, "report.xml")
        run_settings = settings.current().with_(emulator_memory=int(device_memory_gb * 2**30), emulator_timeout=30.0)
        env = dict(os.environ, PYTHONPATH=str(repo), **settings.environment(run_settings))
        cmd = [sys.executable, "-m", "pytest", str(source / "test" / name), "-p", "grader.programs.emulator_compat",
               "-p", "no:cacheprovider", "-q", "-o", "addopts=", f"--junitxml={report}", f"--rootdir={tmp}"]
        try:
            proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [Result(name, "(the whole file)", "failed", f"did not finish within {timeout:.0f} s")]
        if not report.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return [Result(name, "(the whole file)", "failed", f"pytest exited with {proc.returncode}: "
                           + " | ".join(tail))]
        return [_classify(name, case) for case in ET.parse(report).getroot().iter("testcase")]


def _classify(name: str, case) -> Result:
    test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}".lstrip(":")
    for tag in ("failure", "error"):
        element = case.find(tag)
        if element is not None:
            text = (element.get("message") or "") + (element.text or "")
            outcome = "not supported" if NOT_SUPPORTED_MARK in text else "failed"
            return Result(name, test, outcome, _reason(element))
    skipped = case.find("skipped")
    if skipped is not None:
        return Result(name, test, "skipped", _reason(skipped))
    return Result(name, test, "passed")


def table(results: list[Result], files) -> str:
    counts = {f: Counter(r.outcome for r in results if r.file == f) for f in files}
    total = Counter(r.outcome for r in results)
    width = max(len(f) for f in list(files) + ["total"])
    lines = [f"{'file':{width}s}  " + "  ".join(f"{o:>13s}" for o in OUTCOMES)]
    for f in list(files) + ["total"]:
        c = total if f == "total" else counts[f]
        lines.append(f"{f:{width}s}  " + "  ".join(f"{c[o]:13d}" for o in OUTCOMES))
    return "\n".join(lines)


# ---- examples --------------------------------------------------------------------
_WRAPPER = """import sys, runpy
{autoinit}sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_example(path: Path, real: bool, with_autoinit: bool, timeout: float) -> dict:
    """One example in a fresh process and folder: its exit status, the last line
    of its error output and its first printed lines."""
    repo = COURSE_ROOT
    with tempfile.TemporaryDirectory(prefix="pycuda-example-") as tmp:
        wrapper = Path(tmp, "run_example.py")
        wrapper.write_text(_WRAPPER.format(autoinit="import pycuda.autoinit\n" if with_autoinit else ""))
        cmd = [sys.executable] + ([] if real else ["-m", "grader.emulator"]) + [str(wrapper), str(path)]
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
            [str(repo)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        try:
            proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": "timeout", "error": f"did not finish within {timeout:.0f} s", "stdout": []}
    errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith((" ", "Traceback"))]
    return {"rc": proc.returncode, "error": errors[-1][:300] if proc.returncode and errors else "",
            "stdout": proc.stdout.splitlines()[:20]}


def examples(source: Path) -> list[Path]:
    return sorted((source / "examples").glob("*.py")) + sorted((source / "examples" / "from-wiki").glob("*.py"))


def _error_kind(error: str) -> str:
    """The exception's name, without the module path (pycuda._driver.LogicError ~ pycuda.driver.LogicError)."""
    return error.split(":", 1)[0].rsplit(".", 1)[-1] if error else ""


def examples_table(ours: dict, gpu: dict | None) -> str:
    lines = []
    for name, r in ours.items():
        status = "ok" if r["rc"] == 0 else f"exit {r['rc']}"
        line = f"{name:34s} {status:9s} {r['error'][:110]}"
        if gpu is not None and name in gpu:
            g = gpu[name]
            same = (r["rc"] == 0) == (g["rc"] == 0) and _error_kind(r["error"]) == _error_kind(g["error"])
            line += f"\n{'':34s} GPU: {'ok' if g['rc'] == 0 else 'exit ' + str(g['rc']):9s} {g['error'][:110]}" \
                    f"\n{'':34s} {'same outcome' if same else 'DIFFERENT outcome'}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="an unpacked PyCUDA source distribution (it holds test/)")
    parser.add_argument("--files", nargs="+", default=list(FILES), help=f"test files (default: {' '.join(FILES)})")
    parser.add_argument("--device-memory-gb", type=float, default=4.0,
                        help="memory the emulated device reports (default 4)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per test file (default 3600)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every test, not only the failures")
    parser.add_argument("--examples", action="store_true", help="run PyCUDA's examples instead of its tests")
    parser.add_argument("--with-autoinit", action="store_true", help="import pycuda.autoinit before each example")
    parser.add_argument("--real", action="store_true", help="run the examples with the real PyCUDA (on a GPU)")
    parser.add_argument("--json", type=Path, help="write the examples' results here")
    parser.add_argument("--compare", type=Path, help="a --json file of the same examples run on a GPU")
    parser.add_argument("--jobs", type=int, default=1, help="examples run at once (default 1)")
    parser.add_argument("--timeout-example", type=float, default=120, help="seconds per example (default 120)")
    args = parser.parse_args(argv)
    args.source = args.source.resolve()
    if args.examples:
        found = examples(args.source)
        if not found:
            parser.error(f"{args.source / 'examples'} holds no examples")
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            runs = pool.map(lambda p: run_example(p, args.real, args.with_autoinit, args.timeout_example), found)
            ours = {str(p.relative_to(args.source / "examples")): r for p, r in zip(found, runs)}
        if args.json:
            args.json.write_text(json.dumps(ours, indent=1))
        gpu = json.loads(args.compare.read_text()) if args.compare else None
        print(examples_table(ours, gpu))
        ok = sum(r["rc"] == 0 for r in ours.values())
        print(f"\n{ok} of {len(ours)} examples ran to the end")
        return 0
    missing = [f for f in args.files if not (args.source / "test" / f).is_file()]
    if missing:
        parser.error(f"{args.source / 'test'} has no {', '.join(missing)}: give the folder of an unpacked PyCUDA "
                     "source distribution (see --help for how to get one)")
    results: list[Result] = []
    for name in args.files:
        results += run_file(args.source, name, args.device_memory_gb, args.timeout)
    print(table(results, args.files))
    shown = results if args.verbose else [r for r in results if r.outcome in ("failed", "not supported")]
    if shown:
        print()
        for r in shown:
            print(f"{r.outcome:13s}  {r.file}::{r.test}" + (f": {r.reason}" if r.reason else ""))
    counts = Counter(r.outcome for r in results)
    counted = counts["passed"] + counts["failed"] + counts["not supported"]
    print(f"\n{counts['passed']} passed, {counts['failed'] + counts['not supported']} failed "
          f"({counts['not supported']} of them not supported by the emulator), {counts['skipped']} skipped; "
          f"pass rate {counts['passed'] / max(counted, 1):.0%} of the {counted} tests that ran")
    return 0


"""The course as students get it (python -m grader publish): a repository with every lab's released notebook
and the grader, and no answer: no solution kernel, no line of a solution region or hidden test, no expected
value, no reference function. In a fresh clone and a fresh venv, following its README, the self-checks run:
the reference answers pass (or say "graded when you submit"), a broken answer per lab fails with its
diagnosis, and no output shows a hidden expected value; a hosted notebook's first cell installs the course."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader_course import reference_answer

from grader.course import publish

pytestmark = pytest.mark.pipeline

REPO = Path(__file__).resolve().parent.parent
SOURCE_NOTEBOOKS = sorted((REPO / "labs").glob("*/*.ipynb"))
BEGIN, END = "BEGIN SOLUTION", "END SOLUTION"


def _regions(source: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines inside begin/end regions, lines outside them) of a cell."""
    inside, outside, within = [], [], False
    for line in source.splitlines():
        if begin in line:
            within = True
        elif end in line:
            within = False
        else:
            (inside if within else outside).append(line.strip())
    return inside, outside


def _answers() -> tuple[list[list[str]], str, dict[str, list[float]]]:
    """(each solution region's and hidden test's lines, all the text the course shows outside them, and
    {lab: the hidden tests' expected values})."""
    secret, shown, expected = [], [], {}
    for path in SOURCE_NOTEBOOKS:
        for cell in nbformat.read(str(path), as_version=4).cells:
            solution, rest = _regions(cell.source, BEGIN, END)
            hidden, rest = _regions("\n".join(rest), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
            secret += [solution, hidden]
            shown += rest
            for line in hidden:
                call = re.match(r"grader\.grade_answer\(\w+, ([^,]+),", line)
                if call:
                    expected.setdefault(path.parent.name, []).append(float(ast.literal_eval(call.group(1))))
    return [s for s in secret if s], "\n".join(shown), expected


def _stripped(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines())


@pytest.fixture(scope="module")
def distribution(tmp_path_factory) -> Path:
    out = publish.publish(tmp_path_factory.mktemp("published") / "sgemm-lab", url=None, budgets=False)
    subprocess.run(["git", "init", "-q", "-b", "main", str(out)], check=True)
    subprocess.run(["git", "-C", str(out), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(out), "-c", "user.name=course", "-c", "user.email=course@example.org",
                    "commit", "-qm", "the course"], check=True)
    return out


def test_the_distribution_holds_no_answer(distribution):
    files = [p for p in distribution.rglob("*") if p.is_file() and ".git" not in p.parts]
    names = {str(p.relative_to(distribution)) for p in files}
    assert not any(n.startswith(("solutions", "grader/references", "tests", "results")) for n in names), names
    assert "nbgrader_config.py" not in names and not any(n.startswith("grader/course/preprocessors") for n in names)
    secret, shown, _ = _answers()
    notebooks = "\n".join(p.read_text() for p in files if p.suffix == ".ipynb")
    telling = {line for region in secret for line in region
               if len(line) >= 16 and not line.startswith(("//", "#")) and line not in shown}
    assert len(telling) > 100                               # the test can fail: there are answers to look for
    found = sorted(line for line in telling if line in notebooks or line in (distribution / "README.md").read_text())
    assert not found, f"answers in the released notebooks or the README: {found[:10]}"
    # The grader's code is public: it may share a line with an answer (`start, end = drv.Event(), drv.Event()`),
    # never a solution's body (three of its lines in a row).
    code = _stripped("\n".join(p.read_text() for p in files if p.suffix == ".py"))
    bodies = ["\n".join(region[i:i + 3]) for region in secret for i in range(len(region) - 2)
              if sum(len(line) >= 8 for line in region[i:i + 3]) == 3]
    assert len(bodies) > 100
    copied = [b for b in bodies if b in code]
    assert not copied, f"solution code in the grader: {copied[:3]}"
    def defined_in(paths) -> set[str]:
        return {m.group(1) for p in paths for m in re.finditer(r"^def (\w+)", p.read_text(), re.M)}

    elsewhere = defined_in(p for p in (REPO / "grader").rglob("*.py") if "references" not in p.parts)
    references = defined_in((REPO / "grader" / "references").glob("*.py")) - elsewhere
    assert {"occupancy", "rule_violations", "gflops_of", "minimums"} <= references
    defined = {m.group(1) for p in files if p.suffix == ".py" for m in re.finditer(r"^def (\w+)", p.read_text(), re.M)}
    assert not references & defined, references & defined
    for nb in distribution.glob("labs/*/*.ipynb"):
        assert "grade_answer(" not in nb.read_text(), nb


def test_its_notebooks_are_the_released_ones(distribution):
    for lab in sorted(p.name for p in (REPO / "labs").iterdir() if p.is_dir()):
        released = list((distribution / "labs" / lab).glob("*.ipynb"))
        assert released, lab
        text = released[0].read_text()
        assert "// YOUR CODE HERE" in text or "raise NotImplementedError()" in text or "YOUR ANSWER HERE" in text
        assert "COURSE_URL = None" in text


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def clone(distribution, tmp_path_factory) -> tuple[Path, Path]:
    """The published README's steps, word for word: clone, a fresh venv, install (the lab extra)."""
    here = tmp_path_factory.mktemp("student")
    subprocess.run(["git", "clone", "-q", str(distribution), str(here / "sgemm-lab")], check=True)
    python = _venv(here / ".venv")
    readme = (here / "sgemm-lab" / "README.md").read_text()
    assert 'python3 -m pip install -e ".[lab]"' in readme and "python3 -m grader student 00-pycuda-by-hand" in readme
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", ".[lab]"], cwd=here / "sgemm-lab", check=True)
    return here / "sgemm-lab", python


# One broken answer per lab and what its diagnosis must say; the reference answers come from the course's
# own source notebooks, pasted in as a student would.
BROKEN = {
    "00-pycuda-by-hand": ("pycuda-matmul", "grid = ((N + block[0] - 1) // block[0], (M + block[1] - 1) // block[1], 1)",
                          "grid = (N // block[0], M // block[1], 1)", "one block short"),
    "01-naive-coalesced": ("coalesced", "if (row < M && col < N)", "if (true)", "outside"),
    "02-smem-tiling": ("smem-tiling", "__syncthreads();", "", "race(s) on"),
    "03-register-blocking": ("blocktile-1d", "__syncthreads();", "", "race(s) on"),
    "04-bank-conflicts": ("transpose", "__syncthreads();", "", "race(s) on"),
    "05-float4-double-buffering": ("vectorized", "__syncthreads();", "", "race(s) on"),
    "06-warptiling-autotuning": ("warptiling", "__syncthreads();", "", "race(s) on"),
    "07-minimums": ("top2", "__syncthreads();", "", "race(s) on"),
    "08-shortest-paths": ("sssp", "__syncthreads();", "", "race(s) on"),
    "09-tensor-cores-hopper": ("warp-specialized-wgmma", "if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % STAGES]);",
                               "mbarrier_arrive(&empty[s]);", "race(s) on"),
}


@pytest.mark.parametrize("lab", sorted(BROKEN))
def test_self_checks_in_a_fresh_clone(clone, lab, tmp_path):
    where, python = clone
    exercise, old, new, says = BROKEN[lab]
    _, _, expected = _answers()
    reference = reference_answer(lab, exercise)
    assert old in reference, (lab, old)
    outputs = []
    for source, broken in ((reference, False), (reference.replace(old, new, 1), True)):
        path = tmp_path / ("broken" if broken else "reference")
        path.write_text(source)
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GRADER_BACKEND": "emulator",
               "GRADER_EMULATOR_CACHE": str(where.parent / "emulator-cache")}   # the student's, kept between labs
        p = subprocess.run([str(python), "-m", "grader", "check", str(path), "--exercise", exercise, "--json"],
                           cwd=where, env=env, capture_output=True, text=True, timeout=900)
        report = json.loads(p.stdout)
        statuses = {r["name"]: r["status"] for r in report["results"]}
        outputs.append(p.stdout)
        if broken:
            assert p.returncode == 1 and "failed" in statuses.values(), (lab, statuses)
            assert says in p.stdout, (lab, p.stdout[-3000:])
        else:
            assert p.returncode == 0 and set(statuses.values()) <= {"passed", "not graded"}, (lab, p.stdout[-3000:])
    for value in expected.get(lab, []):
        shown = f"{value:.6g}"
        digits = shown.lstrip("-0.").replace(".", "")
        if (not value.is_integer() and len(digits) >= 3) or value >= 1000:  # 256 or 0.5 are everywhere (shapes, C)
            assert not any(re.search(rf"(?<![\d.]){re.escape(shown)}(?!\d)", out) for out in outputs), (lab, shown)


def test_a_hosted_notebook_installs_the_course_in_its_first_cell(distribution, tmp_path):
    """A fresh environment with only Jupyter, the released notebook and the course as a git URL."""
    python = _venv(tmp_path / "jupyter")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "nbclient", "ipykernel", "nbformat"], check=True)
    released = next((distribution / "labs" / "00-pycuda-by-hand").glob("*.ipynb"))
    notebook = tmp_path / released.name
    notebook.write_text(released.read_text())
    publish.set_url(notebook, f"git+file://{distribution}")
    nb = nbformat.read(str(notebook), as_version=4)
    first_check = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "grader.check(" in c.source)
    nb.cells = nb.cells[:first_check + 1]
    nbformat.write(nb, str(notebook))
    runner = ("import sys, nbformat\nfrom nbclient import NotebookClient\n"
              "nb = nbformat.read(sys.argv[1], as_version=4)\n"
              "NotebookClient(nb, timeout=900, kernel_name='python3').execute()\n"
              "print(nbformat.writes(nb))\n")
    env = {"PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path),
           "GRADER_EMULATOR_CACHE": str(tmp_path / "cache")}
    p = subprocess.run([str(python), "-c", runner, str(notebook)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ran = nbformat.reads(p.stdout, as_version=4)
    text = "\n".join(str(o) for c in ran.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "kernels run on the emulator" in text and "not written yet" in text, text[-3000:]

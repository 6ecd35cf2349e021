"""python -m grader publish OUT [--url URL] [--github OWNER/REPO]: the course as students get it.

OUT becomes a complete repository for students, to push where they clone it (or to hand out as a
zip): the released notebook of every lab (nbgrader's generate_assignment: no solution, no hidden
test), the grader package without what gives an answer away (grader/references, the instructor's
nbgrader steps and programs), the launch budgets of the reference solutions measured here (the
solutions themselves stay here), pyproject.toml, environment.yml, and a README made of this
README's introduction and its student part. With --url, each notebook's first cell installs the
course from there when it is opened where the course is not installed (a hosted notebook).

What a student cannot learn from it: the solutions, the hidden tests and their expected values, the
reference functions. What they can: how each self-check checks (its code is in grader/grading).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import nbformat

from grader.course.student import labs, released_notebooks
from grader.grading import isolation, registry
from grader.platform import COURSE_ROOT, backend, settings

# What stays with the instructor: the answers, nbgrader's autograde side, the programs that need the solutions.
INSTRUCTOR_ONLY = (
    "grader/references",
    "grader/course/preprocessors",
    *(f"grader/course/{m}.py" for m in ("regrade", "gradebook", "gradebook_merge",
                                        "class_autograde", "class_grading", "slurm_array", "publish")),
    *(f"grader/programs/{m}.py" for m in ("autograde_labs", "autotune", "bench", "bench_graphs", "class_bench",
                                          "class_submissions", "emulator_bench",
                                          "emulator_validate", "emulator_compat", "numba_tiled",
                                          "recorded_command")),
)
COPIED = ("pyproject.toml", "environment.yml", ".gitignore")
URL_LINE = re.compile(r"^COURSE_URL = .*$", re.M)
STUDENT_PART = re.compile(r"<!-- student part -->\n(.*?)<!-- end of the student part -->", re.S)


def _ignored(folder: str, names: list[str]) -> set[str]:
    here = Path(folder).relative_to(COURSE_ROOT)
    return {n for n in names if n in ("__pycache__", ".ipynb_checkpoints") or str(here / n) in INSTRUCTOR_ONLY}


def readme(url: str | None, github: str | None) -> str:
    """The distribution's README: this README's introduction and its student part, with the clone URL."""
    text = (COURSE_ROOT / "README.md").read_text()
    intro = text[:text.index("\n## ")]
    part = STUDENT_PART.search(text).group(1)
    if url:
        part = part.replace("<the published repository URL>", url.removeprefix("git+"))
    lines = [intro.rstrip(), "", part.strip(), "", "## The labs", ""]
    for lab in labs():
        for nb in released_notebooks(lab):
            link = (f" ([open in Colab](https://colab.research.google.com/github/{github}/blob/main/labs/{lab}/"
                    f"{nb.name}))" if github else "")
            lines.append(f"- `labs/{lab}/{nb.name}`{link}")
    return "\n".join(lines) + "\n"


def set_url(notebook: Path, url: str | None) -> None:
    """The notebook's first code cell installs the course from `url` where it is not installed."""
    nb = nbformat.read(str(notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and URL_LINE.search(cell.source):
            cell.source = URL_LINE.sub(f"COURSE_URL = {url!r}", cell.source, count=1)
            break
    nbformat.write(nb, str(notebook))


def measured_budgets() -> dict:
    """{backend: {exercise: {budget key: seconds}}}: the reference solutions' launch times, measured here."""
    chosen = backend.current().name
    found = {}
    for ex in registry.EXERCISES.values():
        if ex.reference is not None:
            found[ex.id] = isolation.reference_budgets(ex, chosen == "gpu", settings.current())
    return {chosen: found}


def publish(out: Path, url: str | None = None, github: str | None = None, budgets: bool = True) -> Path:
    """Write the student distribution into `out` (a new or empty folder)."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: publish into a new folder (or empty it first)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(COURSE_ROOT / "grader", out / "grader", ignore=_ignored)
    for name in COPIED:
        if (COURSE_ROOT / name).exists():
            shutil.copy(COURSE_ROOT / name, out / name)
    for lab in labs():
        (out / "labs" / lab).mkdir(parents=True)
        for nb in released_notebooks(lab):
            shutil.copy(nb, out / "labs" / lab / nb.name)
            set_url(out / "labs" / lab / nb.name, url)
    (out / "README.md").write_text(readme(url, github))
    if budgets:
        (out / isolation.SHIPPED_BUDGETS.relative_to(COURSE_ROOT)).write_text(json.dumps(measured_budgets(),
                                                                                       indent=1) + "\n")
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m grader publish", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="a new folder: the repository students clone")
    p.add_argument("--url", help="where students install the course from (pip: git+https://... of the published "
                                 "repository); each notebook's first cell installs it in a hosted notebook")
    p.add_argument("--github", metavar="OWNER/REPO", help="the published repository on GitHub: the README links "
                                                          "each lab to Colab")
    args = p.parse_args(argv)
    try:
        out = publish(Path(args.out), args.url, args.github)
    except (FileExistsError, ModuleNotFoundError) as e:
        print(e)
        return 1
    print(f"wrote {out}: push it to the repository students clone")
    return 0

"""python -m grader student LAB [--to DIR] [--force]: a student's copy of a lab.

In the course repository it runs nbgrader's generate_assignment (the course's
own preprocessors: kernel bodies become `// YOUR CODE HERE`, hidden tests are
removed) in a scratch course folder, so nothing is left in the repository but
the copy itself; in the student distribution (python -m grader publish), whose
labs/ hold the released notebooks already, it copies those. The copy goes to
`student/LAB/` by default. A copy that is already there is the student's work:
it is kept unless --force.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grader.platform import COURSE_ROOT

ROOT = COURSE_ROOT
LABS = ROOT / "labs"
# The student distribution has no nbgrader configuration: its labs/ hold the released notebooks.
DISTRIBUTION = not (ROOT / "nbgrader_config.py").exists()
_released: dict[str, list[Path]] = {}


def labs() -> list[str]:
    return sorted(p.name for p in LABS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


@contextlib.contextmanager
def scratch_course(*lab_names: str):
    """(course folder, NbGraderAPI) of a temporary course holding these labs, with
    the repository's nbgrader_config.py; removed afterwards."""
    from nbgrader.apps import NbGraderAPI  # an optional dependency (the "lab" extra)
    from traitlets.config.loader import PyFileConfigLoader

    with tempfile.TemporaryDirectory(prefix="sgemm-lab-") as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for lab in lab_names:
            shutil.copytree(LABS / lab, course / "labs" / lab)
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        config.CourseDirectory.root = str(course)
        # nbgrader runs `alembic` from PATH: this Python's scripts, even from a venv not activated
        path = os.environ.get("PATH", "")
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
        try:
            yield course, NbGraderAPI(config=config)
        finally:
            os.environ["PATH"] = path


def succeeded(result: dict, what: str) -> None:
    """Raise unless an NbGraderAPI call succeeded, with its log (where nbgrader writes the cause) and its error."""
    if not result["success"]:
        raise RuntimeError(f"{what} failed:\n{result.get('log') or ''}\n{result.get('error') or ''}".rstrip())


def released_notebooks(lab: str) -> list[Path]:
    """The released notebooks of `lab`: nbgrader's generate_assignment output (made once per process, in a
    folder removed at exit), or in the student distribution the notebooks of labs/LAB."""
    if DISTRIBUTION:
        return sorted((LABS / lab).glob("*.ipynb"))
    if lab not in _released:
        folder = Path(tempfile.mkdtemp(prefix=f"released-{lab}-"))
        atexit.register(shutil.rmtree, folder, True)
        with scratch_course(lab) as (course, api):
            succeeded(api.generate_assignment(lab, force=True), "nbgrader's copy for students")
            for nb in (course / "release" / lab).glob("*.ipynb"):
                shutil.copy(nb, folder / nb.name)
        _released[lab] = sorted(folder.glob("*.ipynb"))
    return _released[lab]


def make_copy(lab: str, dest: Path, force: bool = False) -> list[Path]:
    """Write the student copy of `lab` into dest/lab; the notebooks written."""
    target = dest / lab
    if target.exists() and any(target.glob("*.ipynb")) and not force:
        raise FileExistsError(f"{target} already holds a copy (your work?): open it, or pass --force "
                              "to replace it with a fresh one")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for nb in released_notebooks(lab):
        shutil.copy(nb, target / nb.name)
        written.append(target / nb.name)
    return written


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m grader student",
                                description="Make a student's copy of a lab, ready to open in JupyterLab.")
    p.add_argument("lab", help="one of: " + ", ".join(labs()))
    p.add_argument("--to", default="student", help="folder for the copies (default: student)")
    p.add_argument("--force", action="store_true", help="replace an existing copy (its work is lost)")
    args = p.parse_args(argv)
    if args.lab not in labs():
        print(f"no lab '{args.lab}'; labs: {', '.join(labs())}")
        return 2
    try:
        written = make_copy(args.lab, Path(args.to), args.force)
    except ModuleNotFoundError as e:
        print(f"{e.name} is missing: install the student tools with  python3 -m pip install -e \".[lab]\"")
        return 2
    except (FileExistsError, RuntimeError) as e:
        print(e)
        return 1
    for nb in written:
        print(f"wrote {nb}")
    print(f"open it:  jupyter lab {written[0]}" if written else "the lab has no notebook")
    return 0

"""The grading processes find what the instructor's Python finds, however the course and its packages are
installed (a venv, PYTHONPATH, the user site), while ignoring what a notebook could plant; and when a
grading process cannot start or import what it needs, the result is the grader's error, never the
student's: no points, a message that names the import and says it is not the student's fault, and an
exit status of its own."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import warm_cache

from grader.course.student import succeeded
from grader.grading import isolation
from grader.grading.report import FAILED, GRADER_ERROR
from grader.platform import interpreter
from grader.programs import check

REPO = Path(__file__).resolve().parent.parent
NAIVE = str(REPO / "solutions" / "naive.cu")
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"          # the interpreter without this venv
SITE = sysconfig.get_paths()["purelib"]                          # where this venv's packages are


def test_a_grading_process_that_cannot_import_its_packages_is_a_grader_error(monkeypatch, capsys):
    """A grading process whose interpreter finds no packages (`-S`, and an import path without them)."""
    without_packages = [p for p in interpreter.import_path() if "-packages" not in p]
    started = interpreter.command
    monkeypatch.setattr(interpreter, "import_path", lambda: without_packages)
    monkeypatch.setattr(interpreter, "command", lambda module, function: [started(module, function)[0], "-S",
                                                                          *started(module, function)[1:]])
    result = isolation.run_check("naive", "correctness", Path(NAIVE).read_text(), seed=1)
    assert result.status == GRADER_ERROR and result.points == 0, result.message
    assert "No module named 'numpy'" in result.message and "not your code's fault" in result.message
    assert "crashed" not in result.message and "kernel" not in result.message.split("fault")[0]
    assert check.main([NAIVE, "--exercise", "naive", "--checks", "correctness", "--seed", "2"]) == 3
    out = capsys.readouterr().out
    assert "ERR!" in out and "grader error" in out


def _check_from_elsewhere(env: dict, tmp_path) -> subprocess.CompletedProcess:
    """`python -m grader check` with the interpreter that has no venv, from another folder."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GRADER_BACKEND": "emulator",
           "GRADER_EMULATOR_CACHE": str(warm_cache(tmp_path / "cache")), **env}
    return subprocess.run([str(BASE_PYTHON), "-m", "grader", "check", NAIVE, "--exercise", "naive", "--checks",
                           "compiles,correctness,races", "--seed", "3"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a virtual environment to stand apart from")
def test_a_course_installed_through_pythonpath_is_graded(tmp_path):
    p = _check_from_elsewhere({"PYTHONPATH": os.pathsep.join([str(REPO), SITE])}, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[PASS] correctness" in p.stdout and "[PASS] races" in p.stdout


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a virtual environment to stand apart from")
def test_a_course_installed_in_the_user_site_is_graded(tmp_path):
    base = tmp_path / "userbase"
    user_site = Path(subprocess.run([str(BASE_PYTHON), "-c", "import site; print(site.getusersitepackages())"],
                                    env={"PYTHONUSERBASE": str(base)}, capture_output=True, text=True,
                                    check=True).stdout.strip())
    user_site.mkdir(parents=True)
    (user_site / "course.pth").write_text(f"{REPO}\n{SITE}\n")       # what `pip install --user` leaves behind
    p = _check_from_elsewhere({"PYTHONUSERBASE": str(base)}, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[PASS] correctness" in p.stdout


def test_a_sitecustomize_in_the_working_folder_is_not_imported(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text("raise SystemExit('planted')\n")
    (tmp_path / "numpy.py").write_text("raise SystemExit('planted')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(tmp_path) not in interpreter.import_path()
    result = isolation.run_check("naive", "compiles", Path(NAIVE).read_text(), seed=1)
    assert result.passed, result.message


def test_a_check_the_reference_solution_fails_here_too_is_the_graders_error(monkeypatch):
    """On a machine where the course's own kernel fails a check (a driver, a GPU, a grader that breaks it),
    a submission failing that check is not blamed: the reference's run, which times the launch budgets,
    judges the reference too. A check the reference passes still fails the submission as usual."""
    naive = Path(NAIVE).read_text()
    doubled = naive.replace("C[row * N + col] = sum;", "C[row * N + col] = 2 * sum;", 1)
    assert doubled != naive
    get = isolation.registry.get
    broken = dataclasses.replace(get("naive"), reference=lambda: doubled)
    monkeypatch.setattr(isolation.registry, "get", lambda name: broken if name == "naive" else get(name))
    monkeypatch.setattr(isolation, "_budgets", {})
    monkeypatch.setattr(isolation, "_reference_failed", {})
    result = isolation.run_check("naive", "correctness", doubled, seed=1)
    assert isolation.reference_failed("naive", False) == ["correctness"], isolation._reference_failed
    assert result.status == GRADER_ERROR and "reference solution fails this check" in result.message, result.text()
    assert "elements wrong" in result.output                # what the submission got, for the instructor
    races = isolation.run_check("naive", "races", doubled.replace("C[row * N + col] =", "C[0] =", 1), seed=1)
    assert races.status == FAILED, races.text()


def test_a_failed_nbgrader_call_says_the_cause_nbgrader_logged():
    """nbgrader's API puts the cause in its log; its error says only to see the traceback above."""
    failed = {"success": False, "log": "FileNotFoundError: [Errno 2] No such file or directory: 'alembic'",
              "error": "NbGraderException: Please see the the above traceback for details"}
    with pytest.raises(RuntimeError, match=r"(?s)^generate_assignment failed:\n.*'alembic'.*above traceback"):
        succeeded(failed, "generate_assignment")
    succeeded({"success": True, "log": "", "error": ""}, "generate_assignment")

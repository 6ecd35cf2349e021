"""The repository is about the course: no text about the work that made it
(its tickets, its scratch checkouts, a machine's private set-up folder), and
every command that results/ records can be run from the repository root (its
module is in the package, its script or folder in the repository)."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.__main__ import COMMANDS

REPO = Path(__file__).resolve().parent.parent
# Written with a class in each word, so that this file does not match itself.
HISTORY = r"i[s]sue ?#?[0-9]+|w[o]rktree|\.d[e]vice/"
DEPLOY = "bash deploy/gpu-machine.sh && "
STARTS = re.compile(r"(?:python3? -m |GRADER_BACKEND=)")
PYTHON = re.compile(r"\bpython3? (?:-m (?P<module>[\w.]+)(?: (?P<command>[\w-]+))?|(?P<script>[\w./-]+\.py)\b)")
TEST_PATH = re.compile(r"(?<!\S)(tests(?:/[\w.-]+)*/?)")
BASH = re.compile(r"\bbash (?P<script>[\w./-]+\.sh)\b")


def test_no_development_history_in_the_repository():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout")
    found = subprocess.run(["git", "grep", "--untracked", "-I", "-n", "-i", "-E", HISTORY, "--", "."],
                           cwd=REPO, capture_output=True, text=True, check=False)
    assert found.returncode == 1 and not found.stdout, \
        f"text about the development process (rewrite it to say what is true of the course):\n{found.stdout}"


def code_texts(markdown: str) -> list[str]:
    """Every command-like text of a Markdown file: the lines of fenced and
    indented code blocks (continuation lines joined) and the inline code spans."""
    texts, fenced, pending = [], False, ""
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " "
                continue
            texts.append(pending)
            pending = ""
        else:
            texts += re.findall(r"`([^`]+)`", line)
    return texts


def recorded_commands(markdown: str) -> list[str]:
    """The commands that start with `python3 -m`/`python -m` or `GRADER_BACKEND=`
    (after the GPU machine's set-up, `bash deploy/gpu-machine.sh && `)."""
    commands = []
    for text in code_texts(markdown):
        text = text.removeprefix(DEPLOY)
        if STARTS.match(text):
            commands.append(text)
    return commands


def module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:        # a parent package is missing
        return False


def problems(command: str) -> list[str]:
    found = []
    runs = list(PYTHON.finditer(command))
    if not runs:
        found.append("runs no Python module or script")
    for run in runs:
        module, script = run.group("module"), run.group("script")
        if module == "pytest":
            found += [f"no {path} in the repository" for path in TEST_PATH.findall(command[run.end():])
                      if not (REPO / path).exists()]
        elif module is not None and not (module.split(".")[0] == "grader" and module_exists(module)):
            found.append(f"no module {module} in the package")
        elif module == "grader" and run.group("command") not in COMMANDS:
            found.append(f"no command {run.group('command')} of python -m grader")
        if script is not None and not (REPO / script).is_file():
            found.append(f"no script {script} in the repository")
    found += [f"no script {m.group('script')} in the repository" for m in BASH.finditer(command)
              if not (REPO / m.group("script")).is_file()]
    return found


RESULTS = sorted((REPO / "results").rglob("*.md"))


@pytest.mark.parametrize("path", RESULTS, ids=[str(p.relative_to(REPO)) for p in RESULTS])
def test_recorded_commands_run_from_the_repository_root(path):
    commands = recorded_commands(path.read_text())
    wrong = {c: p for c in commands if (p := problems(c))}
    assert not wrong, "\n".join(f"{path.relative_to(REPO)}: `{c}`: {', '.join(p)}" for c, p in wrong.items())


def test_the_command_check_can_fail():
    markdown = ("Command: `GRADER_BACKEND=gpu python3 -m grader.bench --out x`\n\n"
                "`python3 -m grader benchmark`\n\n"
                "```\nbash deploy/gpu-machine.sh && python3 -m grader bench \\\n    --budget 30\n"
                "GRADER_BACKEND=gpu ncu -o x python3 results/no-such-script.py\n```\n\n"
                "    python3 -m pytest tests\n\n`python3 -m pytest -m gpu tests/test_no_such_file.py`\n")
    commands = recorded_commands(markdown)
    assert commands == ["GRADER_BACKEND=gpu python3 -m grader.bench --out x",
                        "python3 -m grader benchmark",
                        "python3 -m grader bench --budget 30",
                        "GRADER_BACKEND=gpu ncu -o x python3 results/no-such-script.py",
                        "python3 -m pytest tests", "python3 -m pytest -m gpu tests/test_no_such_file.py"]
    assert [problems(c) for c in commands] == [["no module grader.bench in the package"],
                                               ["no command benchmark of python -m grader"], [],
                                               ["no script results/no-such-script.py in the repository"],
                                               [], ["no tests/test_no_such_file.py in the repository"]]

"""The student's experience of the labs, in a real browser.

The student copies of the nine labs (`python -m grader student`: nbgrader
generate_assignment in a temporary course directory) are opened in one
JupyterLab, served on 127.0.0.1 with GRADER_BACKEND=emulator, and driven
through Debian's Chromium with Playwright, as a student would.

Lab 1 whole: every answer cell is filled in the notebook editor with the
reference (taken at test time from the source notebook's solution regions),
then Run > Run All Cells. The assertions read the rendered page: the naive
kernel's self-check table says "passed" for correctness and races and "not
graded: no GPU" for performance, and no cell shows stderr or a traceback. A
screenshot of the self-check is written to results/tmp/browser/lab1-self-check.png.

Each lab with a typical mistake (one page per lab): the setup cell runs, then
one answer cell is filled with the reference edited as tests/test_mistakes.py
edits it (a mistake of that catalogue) and run alone; its self-check must name
the mistake (key words on the page) and show no traceback.

How the cells are filled: each answer cell's editor (CodeMirror) is focused
by a click, its text selected with Ctrl+A and replaced by the whole answer
in one keyboard text insertion (Playwright's keyboard.insert_text, what a
paste does), not key by key: typed key by key, CodeMirror's auto-indentation
re-indents every new line of a kernel, and typing ~1,500 characters one key
at a time is slow on two cores. The editor's text is then read back from the
DOM and compared with the answer.

Needs Chromium (/usr/bin/chromium: apt-get install chromium) and Playwright
for Python (pip install playwright; its own browser download is not used),
nbgrader and JupyterLab. Without them the test is skipped, except in CI
(CI set), where it fails: CI installs them (.ci/run, the test extra).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from ports import free_port

REPO = Path(__file__).resolve().parent.parent
LAB, NB = "01-naive-coalesced", "naive-coalesced"
LABS = sorted(p.parent.name for p in (REPO / "labs").glob("*/*.ipynb"))
# Per lab: a mistake of tests/test_mistakes.py's EDITS, the exercise whose answer cell it goes into, and the
# words of the diagnosis its self-check must show.
TYPED_MISTAKES = {
    "00-pycuda-by-hand": ("00/gflops_no_factor_2.py", "pycuda-gflops", "an FMA (multiply-add) is 2 FLOP"),
    "01-naive-coalesced": ("01/rows_cols_swapped.cu", "coalesced", "which index does threadIdx.x move?"),
    "02-smem-tiling": ("02/no_zero_fill.cu", "smem-tiling", "a load that does not fill with zeros past K?"),
    "03-register-blocking": ("03/blocktile_1d_no_zero_fill.cu", "blocktile-1d", "not a multiple of BK = 8"),
    "04-bank-conflicts": ("04/transpose_tile_not_swapped.cu", "transpose", "the same index order?"),
    "05-float4-double-buffering": ("05/float4_always.cu", "vectorized", "K = 27 is not a multiple of 4"),
    "06-warptiling-autotuning": ("06/warp_row_col_swapped.cu", "warptiling", "the warp's row and column swapped"),
    "07-minimums": ("07/scalar_tail_skipped.cu", "top2", "the scalar tail not read?"),
    "08-shortest-paths": ("08/bottom_halo_not_loaded.cu", "sssp", "a halo cell not loaded"),
    "09-tensor-cores-hopper": ("09/tile_not_synced.cu", "wmma-tiled", "with no __syncthreads() between them"),
}

pytestmark = pytest.mark.browser
SHOT = REPO / "results" / "tmp" / "browser" / "lab1-self-check.png"
FAILED_SHOT = SHOT.with_name("lab1-failed.png")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "sgemm-lab-browser-test"

# Bounds (seconds); typically it all takes under a minute on 2 cores, and at
# most about 6 minutes: the server starts, the page opens with an idle
# kernel, Run All Cells ends (the self-checks compile kernels with g++).
SERVER_START = 60
PAGE_READY = 90
RUN_ALL = 180
RUN_CELL = 120              # one cell: the setup, or a self-check
ACTION = 30                 # one click or keyboard action

BEGIN = re.compile(r"^\s*(//|###)\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*(//|###)\s*END SOLUTION\s*$")
STUB_LINES = {"// YOUR CODE HERE", "# YOUR CODE HERE", "raise NotImplementedError()"}


def _missing() -> list[str]:
    missing = []
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        missing.append(f"Chromium ({CHROMIUM}; apt-get install chromium)")
    for module, what in (("playwright.sync_api", "Playwright (pip install playwright)"),
                         ("nbgrader", "nbgrader (pip install -e '.[test]')"),
                         ("jupyterlab", "JupyterLab (comes with nbgrader)")):
        try:
            __import__(module)
        except ImportError:
            missing.append(what)
    return missing


@pytest.fixture(scope="module")
def requirements():
    missing = _missing()
    if missing:
        reason = "the browser test needs " + ", ".join(missing)
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(reason + " - CI installs them (.ci/run), so their absence is a failure here", pytrace=False)
        pytest.skip(reason)


# -- the notebook's answers, from the source notebook's solution regions

def _filled(source: str) -> str:
    """The cell as a student who wrote the reference leaves it: the solution
    regions' text in place, the delimiter lines gone."""
    return "\n".join(line for line in source.split("\n") if not (BEGIN.match(line) or END.match(line)))


def _outside_regions(source: str) -> list[str]:
    out, inside = [], False
    for line in source.split("\n"):
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif not inside:
            out.append(line.rstrip())
    return out


def _without_stubs(text: str) -> list[str]:
    return [line.rstrip() for line in text.split("\n")
            if line.strip() not in STUB_LINES and not line.rstrip().endswith("= None  # YOUR ANSWER HERE")]


def _notebook(lab: str) -> str:
    """The name of a lab's notebook, without .ipynb."""
    return next((REPO / "labs" / lab).glob("*.ipynb")).stem


def _answers(lab: str = LAB) -> list[str]:
    """The source notebook's cells with solution regions, in order."""
    nb = nbformat.read(str(REPO / "labs" / lab / f"{_notebook(lab)}.ipynb"), as_version=4)
    return [c.source for c in nb.cells
            if c.cell_type == "code" and any(BEGIN.match(line) for line in c.source.split("\n"))]


# -- the instructor's release copy, and JupyterLab serving it

@pytest.fixture(scope="module")
def release(requirements, tmp_path_factory) -> Path:
    """The student copies of every lab, made as the README tells a student (`python -m grader student`)."""
    from grader.course.student import make_copy
    folder = tmp_path_factory.mktemp("student")
    for lab in LABS:
        make_copy(lab, folder)
        text = (folder / lab / f"{_notebook(lab)}.ipynb").read_text()
        assert "YOUR CODE HERE" in text and "BEGIN SOLUTION" not in text
    return folder


@pytest.fixture(scope="module")
def lab_server(release, tmp_path_factory):
    """JupyterLab on 127.0.0.1, rooted at the release folder, on the emulator; stopped whatever happens."""
    home = tmp_path_factory.mktemp("jupyter")
    settings = home / "lab-settings"
    # Every cell in the DOM (no windowing), and no news or update prompts over the page.
    for plugin, values in (("@jupyterlab/notebook-extension/tracker", {"windowingMode": "none"}),
                           ("@jupyterlab/apputils-extension/notification",
                            {"fetchNews": "false", "checkForUpdates": False})):
        f = settings / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)            # the kernel's inline backend, as a student's
    env.update({
        "GRADER_BACKEND": "emulator",
        "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),       # the python3 kernel is this Python's ipykernel
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
    })
    port = free_port()
    log = open(home / "jupyterlab.log", "w+b")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={release}",
         "--ServerApp.allow_remote_access=False"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),   # CI runs as root
        cwd=release, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def server_log() -> str:
        log.flush()
        return (home / "jupyterlab.log").read_text(errors="replace")[-4000:]

    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with status {proc.returncode}:\n{server_log()}", pytrace=False)
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within {SERVER_START} s:\n{server_log()}", pytrace=False)
            time.sleep(0.5)
        yield url, server_log
    finally:
        _stop(proc)
        log.close()


def _descendants(pid: int) -> list[int]:
    """The processes below pid (Linux /proc; elsewhere none are known)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop(proc: subprocess.Popen) -> None:
    """Stop JupyterLab: SIGTERM to its process group (it shuts its kernels down),
    then SIGKILL to that group and to every process it started (jupyter_client
    starts each kernel in a session of its own, with the grader's check
    processes below it), those that are still there."""
    below = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        pass
    for kill in ([lambda: os.killpg(proc.pid, signal.SIGKILL)]
                 + [lambda p=p: os.kill(p, signal.SIGKILL) for p in below]):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture(scope="module")
def browser(lab_server, tmp_path_factory):
    from playwright.sync_api import sync_playwright
    executable = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=executable, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser, lab_server):
    """A page of its own for one test; its notebook's kernel shut down after it (two cores)."""
    page = browser.new_page()
    try:
        yield page
    finally:
        page.close()
        url, _ = lab_server
        with urllib.request.urlopen(f"{url}/api/sessions?token={TOKEN}", timeout=10) as r:
            sessions = json.load(r)
        for session in sessions:
            request = urllib.request.Request(f"{url}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(request, timeout=30).close()


# -- the page, read through the DOM

CELL_STATE = """() => {
    const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell')];
    const prompts = cells.map(c => (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '');
    const outs = [...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')];
    const stderr = outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr'
                                   || /Traceback \\(most recent call last\\)/.test(o.textContent))
                       .map(o => o.textContent.slice(0, 2000));
    const ind = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return {prompts, stderr, kernel: ind ? ind.getAttribute('data-status') : null};
}"""

EDITORS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell')]
    .map(c => c.querySelectorAll('.cm-content .cm-line').length > 0)"""

EDITOR_TEXT = """cell => [...cell.querySelectorAll('.cm-content .cm-line')].map(l => l.textContent).join('\\n')"""

TABLES = """() => [...document.querySelectorAll('.jp-Notebook .sgemm-grader')].map(div => ({
    title: (div.querySelector('p') || div).textContent,
    rows: [...div.querySelectorAll('tbody tr')].map(tr => [...tr.children].map(td => td.textContent.trim()))
}))"""


def _code_cells(notebook: Path) -> int:
    """How many code cells the student copy has (what the page must show)."""
    nb = nbformat.read(str(notebook), as_version=4)
    return sum(c.cell_type == "code" for c in nb.cells)


def _wait(page, predicate, timeout: float, what: str, state=CELL_STATE):
    deadline = time.monotonic() + timeout
    while True:
        s = page.evaluate(state)
        verdict = predicate(s)
        if verdict:
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not in time; the page's state: {s}")
        time.sleep(0.5)


def test_student_runs_lab1_in_jupyterlab(page, lab_server, release):
    FAILED_SHOT.unlink(missing_ok=True)        # from an earlier run
    try:
        _student_session(page, *lab_server, release)
    except BaseException:
        FAILED_SHOT.parent.mkdir(parents=True, exist_ok=True)
        try:
            page.screenshot(path=str(FAILED_SHOT))
            print(f"the page when the test failed: {FAILED_SHOT}")
        except Exception as e:             # the browser may be gone: the failure itself matters
            print(f"no screenshot of the failure: {e}")
        raise


def _open(page, url: str, notebook: Path, lab: str):
    """Open a lab's notebook; (its code cells, how many) once the kernel is idle and every editor rendered."""
    ready_by = time.monotonic() + PAGE_READY      # one bound for opening the notebook, all steps together
    page.set_default_timeout(ACTION * 1000)
    # A workspace of its own: the layout JupyterLab saved for another notebook does not open it again.
    page.goto(f"{url}/lab/workspaces/{lab}/tree/{lab}/{notebook.name}?token={TOKEN}", wait_until="domcontentloaded",
              timeout=PAGE_READY * 1000)
    code_cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-CodeCell")
    code_cells.first.wait_for(state="visible", timeout=max(1, ready_by - time.monotonic()) * 1000)
    _wait(page, lambda s: s["kernel"] == "idle", ready_by - time.monotonic(),
          "the kernel starts (execution indicator idle)")
    n = _code_cells(notebook)
    _wait(page, lambda s: s == [True] * n, ready_by - time.monotonic(), f"the {n} code cells' editors render",
          state=EDITORS)
    return code_cells, n


def _student_session(page, url, server_log, release):
    t0 = time.monotonic()
    code_cells, n = _open(page, url, release / LAB / f"{NB}.ipynb", LAB)
    print(f"JupyterLab open, kernel idle after {time.monotonic() - t0:.1f} s")

    # -- fill every answer cell in the editor, as a student would
    answers = _answers()
    assert answers, "no solution regions (// BEGIN SOLUTION, ### BEGIN SOLUTION) in the source notebook"
    stubs = [i for i in range(code_cells.count())
             if re.search(r"YOUR (CODE|ANSWER) HERE", code_cells.nth(i).evaluate(EDITOR_TEXT))]
    assert len(stubs) == len(answers), (
        f"the student copy has {len(stubs)} answer cells (YOUR CODE/ANSWER HERE), the source notebook "
        f"{len(answers)} cells with solution regions")
    for i, source in zip(stubs, answers):
        cell = code_cells.nth(i)
        shown = cell.evaluate(EDITOR_TEXT)
        assert _without_stubs(shown) == _outside_regions(source), (
            f"code cell {i} of the student copy does not match the source cell outside its solution regions:\n"
            f"{shown}\n--- source ---\n{source}")
        answer = _filled(source)
        cell.locator(".cm-content").click()
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(answer)
        page.keyboard.press("Escape")              # back to command mode
        typed = cell.evaluate(EDITOR_TEXT)
        assert typed.rstrip() == answer.rstrip(), (
            f"code cell {i} reads, after editing:\n{typed}\n--- wanted ---\n{answer}")
    print(f"{len(answers)} answer cells filled after {time.monotonic() - t0:.1f} s")

    # -- Run > Run All Cells
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item:visible", has_text=re.compile(r"^Run All Cells")).first.click()

    def done(s):
        if s["stderr"]:
            return True                            # stop waiting: the assertions below say what
        return (s["kernel"] == "idle" and len(s["prompts"]) == n
                and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in s["prompts"]))
    try:
        state = _wait(page, done, RUN_ALL, "Run All Cells finishes (every code cell numbered, kernel idle)")
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- JupyterLab's log ---\n{server_log()}") from None
    print(f"Run All Cells done after {time.monotonic() - t0:.1f} s")

    # -- what the page shows
    assert not state["stderr"], "cells show stderr or a traceback:\n" + "\n---\n".join(state["stderr"])
    tables = page.evaluate(TABLES)
    naive = [t for t in tables if re.search(r"\bnaive\b", t["title"]) and "coalesced" not in t["title"]]
    assert len(naive) == 1, f"one self-check table for the naive kernel, found: {[t['title'] for t in tables]}"
    rows = {r[0]: r[1:] for r in naive[0]["rows"] if r}
    assert {"correctness", "races", "performance"} <= rows.keys(), rows
    assert rows["correctness"][0] == "passed", rows["correctness"]
    assert rows["races"][0] == "passed", rows["races"]
    assert rows["performance"][0] == "not graded", rows["performance"]
    assert "not graded: no GPU" in " ".join(rows["performance"]), rows["performance"]
    assert "predicted on an H200: about" in " ".join(rows["performance"]), rows["performance"]
    for check, (status, *_) in rows.items():
        assert status in ("passed", "not graded"), f"{check}: {rows[check]}"
    for t in tables:                           # the reference passes every self-check on the page
        failed = [r for r in t["rows"] if len(r) > 1 and r[1] not in ("passed", "not graded")]
        assert not failed, f"{t['title']}: {failed}"

    # -- a picture of it
    table = page.locator(".jp-Notebook .sgemm-grader").nth(tables.index(naive[0]))
    table.scroll_into_view_if_needed()
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    cell = table.locator("xpath=ancestor::div[contains(concat(' ', normalize-space(@class), ' '), ' jp-Cell ')][1]")
    cell.screenshot(path=str(SHOT))          # the self-check cell: its code and the table
    print(f"screenshot: {SHOT}")
    print(f"the whole student session took {time.monotonic() - t0:.1f} s")


# -- each lab with a typical mistake typed into one answer cell

OUTPUT_TEXT = """cell => [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent).join('\\n')"""


def _typed_answer(lab: str, mistake: str, exercise: str) -> str:
    """The answer cell of `exercise`, filled with the reference and edited as the mistake edits it."""
    from test_mistakes import EDITS
    call = f'grader.check("{exercise}"'
    cell = next(c for c in _answers(lab) if call in c)
    text = _filled(cell)
    for old, new in EDITS[mistake][1:]:
        assert old and old in text, f"{mistake}: {old!r} is not in the answer cell of {exercise}"
        text = text.replace(old, new, 1)
    return text


def _run_cell(page, cell, prompt: int, what: str) -> None:
    """Run one cell (selected by a click on its prompt, then Run > Run Selected Cell: a key press can reach the
    page before the editor has the focus) and wait for its prompt to read [prompt] and the kernel idle. A run
    that never reached the cell (its prompt still [ ] after ACTION seconds, which a busy machine has shown
    once in many runs) is asked for once more, as a student would."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    started = cell.locator(".jp-InputArea-prompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for attempt in (1, 2):
        cell.locator(".jp-InputPrompt").click()
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-item:visible", has_text=re.compile(r"^Run Selected Cell")).first.click()
        try:
            started.wait_for(timeout=ACTION * 1000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise AssertionError(f"{what}: Run Selected Cell did not start the cell, twice") from None
            print(f"{what}: the run did not reach the cell; asked again")
    cell.locator(".jp-InputArea-prompt", has_text=f"[{prompt}]").wait_for(timeout=RUN_CELL * 1000)
    _wait(page, lambda s: s["kernel"] == "idle", RUN_CELL, f"{what} runs (kernel idle)")


@pytest.mark.parametrize("lab", LABS)
def test_a_typed_mistake_gets_its_diagnosis_on_the_page(page, lab_server, release, lab):
    shot = SHOT.with_name(f"{lab}-mistake-failed.png")
    shot.unlink(missing_ok=True)
    try:
        _typed_mistake_session(page, lab_server, release, lab)
    except BaseException:
        shot.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):       # the browser may be gone: the failure itself matters
            page.screenshot(path=str(shot))
        raise


def _typed_mistake_session(page, lab_server, release, lab):
    mistake, exercise, words = TYPED_MISTAKES[lab]
    url, server_log = lab_server
    t0 = time.monotonic()
    notebook = release / lab / f"{_notebook(lab)}.ipynb"
    code_cells, n = _open(page, url, notebook, lab)
    # The cells' text from the file: an editor renders only the lines in view (every cell is in the DOM).
    texts = [c.source for c in nbformat.read(str(notebook), as_version=4).cells if c.cell_type == "code"]
    setup = next(i for i, t in enumerate(texts) if "grader.use_backend()" in t)
    target = next(i for i, t in enumerate(texts) if f'grader.check("{exercise}"' in t)
    _run_cell(page, code_cells.nth(setup), 1, "the setup cell")
    cell = code_cells.nth(target)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(_typed_answer(lab, mistake, exercise))     # the words below show it arrived whole
    page.keyboard.press("Escape")              # back to command mode
    try:
        _run_cell(page, cell, 2, f"the self-check of {exercise}")
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- JupyterLab's log ---\n{server_log()}") from None
    shown = cell.evaluate(OUTPUT_TEXT)
    state = page.evaluate(CELL_STATE)
    assert not state["stderr"], "cells show stderr or a traceback:\n" + "\n---\n".join(state["stderr"])
    assert words in shown, f"{lab}, {mistake}: {words!r} is not in the self-check's output:\n{shown}"
    print(f"{lab}: {mistake} diagnosed on the page after {time.monotonic() - t0:.1f} s")

"""A term's flow through JupyterHub, in a real browser: lab 1 handed out,
done, collected, autograded and returned with nbgrader's exchange.

A local JupyterHub runs deploy/jupyterhub_config.py (the shipped file) with
the test's overrides: DummyAuthenticator with a password instead of PAM,
ports on 127.0.0.1, its state, the exchange and nbgrader's global config
(deploy/nbgrader_config.py, then the test's exchange folder over it) in a
temporary folder. Its LocalProcessSpawner starts each user's JupyterLab as
that user's Unix account, which is how nbgrader's exchange knows who
submits: the test creates three accounts (useradd; it must run as root,
as CI does) with private homes, and deletes them at the end. The
instructor's home holds a copy of the course (nbgrader_config.py, labs/,
grader/, solutions/); every user's Python finds the course package in a
shared copy without the source notebooks, as if installed.

Through Chromium (Playwright), each person logs in on the hub's login page:
- the instructor, in a JupyterLab terminal: nbgrader generate_assignment and
  release_assignment for lab 1;
- each student, in the Assignments tab (Nbgrader > Assignment List): fetch,
  open the notebook, run its setup cell (it imports the grader and says
  where kernels run), fill every answer cell in the editor (one with the
  reference answers, one with the naive kernel's bounds check removed and a
  wrong first answer), save, submit;
- the instructor: nbgrader collect, `python -m grader autograde . LAB` (the
  sandboxed autograde of nbgrader_config.py), generate_feedback,
  release_feedback;
- each student: Fetch Feedback, "(view feedback)", the feedback page opened
  in JupyterLab.
The assertions read the feedback pages: each shows its student's score, the
gradebook's; the reference outscores the broken submission, which loses
exactly the points of the cells it broke; no page shows a hidden test or a
hidden expected value. Screenshots: results/tmp/jupyterhub/.

Needs, besides what tests/test_browser.py needs: JupyterHub (pip install
jupyterhub), configurable-http-proxy (npm install -g
configurable-http-proxy), root (useradd), and a Python environment that
other users can run (not under /root or a private folder). Without them the
test is skipped, except in CI (CI set), where it fails: .ci/run installs them.
"""
from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import nbformat
import pytest
from nbgrader_course import cell_scores, notebook_name, points, source_notebook, submission_score
from ports import free_port
from test_browser import CHROMIUM, CHROMIUM_ARGS, EDITOR_TEXT, _answers, _filled, _stop
from test_browser import _missing as _browser_missing

import grader

pytestmark = [pytest.mark.browser, pytest.mark.pipeline]

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
LAB = "01-naive-coalesced"
NB = notebook_name(LAB)
SHOTS = REPO / "results" / "tmp" / "jupyterhub"
PASSWORD = secrets.token_urlsafe(12)

# Bounds (seconds), on 2 busy cores.
HUB_START = 60
SPAWN = 150                 # login to an open JupyterLab (the server starts)
ACTION = 30                 # one click or keyboard action
RELEASE = 180               # generate_assignment + release_assignment
GRADE = 900                 # collect + autograde of two submissions + feedback

# The broken submission: the naive kernel without its bounds check, and a wrong first answer.
BOUNDS_CHECK = "    if (row < M && col < N) {"
WRONG_ANSWER = "AI_4096 = 100.0"
BROKEN_CELLS = ("naive-correctness", "naive-races", "q-intensity-test")
TIMED = "naive-performance"     # on a GPU the broken kernel, being wrong, loses it too


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _absent(reason: str):
    if _ci():
        pytest.fail(reason + " - CI provides it (.ci/run), so its absence is a failure here", pytrace=False)
    pytest.skip(reason)


def _missing() -> list[str]:
    missing = _browser_missing()
    try:
        import jupyterhub  # noqa: F401  (optional: checked here, the hub runs in its own process)
    except ImportError:
        missing.append("JupyterHub (pip install -e '.[test]')")
    if not shutil.which("configurable-http-proxy"):
        missing.append("configurable-http-proxy (npm install -g configurable-http-proxy)")
    if os.geteuid() != 0 or not (shutil.which("useradd") and shutil.which("userdel")):
        missing.append("root with useradd/userdel (the hub starts each user's server as their Unix account)")
    return missing


# -- the machine: Unix accounts, a course, an exchange

def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)} exited with {p.returncode}:\n{p.stdout}{p.stderr}"
    return p


def _lab_settings(home: Path) -> None:
    """Every cell in the DOM (no windowing), no news or update prompts over the page."""
    for plugin, values in (("@jupyterlab/notebook-extension/tracker", {"windowingMode": "none"}),
                           ("@jupyterlab/apputils-extension/notification",
                            {"fetchNews": "false", "checkForUpdates": False})):
        f = home / ".jupyter" / "lab" / "user-settings" / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids:
            found.append(int(status.parent.name))
    return found


@contextmanager
def _accounts(top: Path, names: list[str]):
    """Unix accounts with private homes under top/home; deleted afterwards, with any process left to them."""
    made = []
    try:
        for name in names:
            home = top / "home" / name
            _run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", "--user-group", name])
            made.append(name)
            home.chmod(0o700)
            _lab_settings(home)
            _run(["chown", "-R", f"{name}:{name}", str(home)])
        yield {name: top / "home" / name for name in names}
    finally:
        for pid in _processes_of({pwd.getpwnam(name).pw_uid for name in made}):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


def _copy(names: list[str], to: Path) -> None:
    to.mkdir()
    to.chmod(0o755)
    for name in names:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, to / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy(REPO / name, to / name)


def _installed_course(top: Path) -> Path:
    """The course as every user's Python finds it (deploy/README.md): the grader package and the reference
    kernels its checks compile; not the source notebooks."""
    _copy(["grader", "solutions"], top / "course")
    return top / "course"


def _course(home: Path, owner: str) -> Path:
    """The instructor's copy of the course, private to them."""
    _copy(["nbgrader_config.py", "labs", "grader", "solutions"], home / "sgemm-lab")
    _run(["chown", "-R", f"{owner}:{owner}", str(home / "sgemm-lab")])
    return home / "sgemm-lab"


# -- the hub

HUB_CONFIG = """\
load_subconfig({shipped!r})
# The test's overrides: a password for everyone, its own ports and folders, the course's grader package.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {users!r}
c.Authenticator.admin_users = {{{instructor!r}}}
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = "{state}/jupyterhub-proxy.pid"
c.Spawner.environment.update({environment!r})
"""


@contextmanager
def _hub(top: Path, users: list[str], instructor: str, installed: Path):
    """JupyterHub on 127.0.0.1, its users' Python finding the course in `installed` (the hub's URL and a
    function giving its log's tail); stopped whatever happens."""
    state = top / "hub"
    state.mkdir(mode=0o700)
    exchange = top / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)                    # as deploy/nbgrader_config.py says
    shipped, override = top / "etc" / "jupyter", top / "etc" / "jupyter-test"
    shipped.mkdir(parents=True)
    override.mkdir()
    shutil.copy(DEPLOY / "nbgrader_config.py", shipped)
    (override / "nbgrader_config.py").write_text(f"c.Exchange.root = {str(exchange)!r}\n")
    for d in (top / "etc", shipped, override):
        d.chmod(0o755)
    port = free_port()
    config = state / "jupyterhub_config.py"
    config.write_text(HUB_CONFIG.format(
        shipped=str(DEPLOY / "jupyterhub_config.py"), password=PASSWORD, users=set(users), instructor=instructor,
        port=port, hub_port=free_port(), api_port=free_port(), state=state,
        environment={"JUPYTER_CONFIG_PATH": os.pathsep.join([str(override), str(shipped)]),
                     "PYTHONPATH": str(installed),
                     "GRADER_BACKEND": grader.BACKEND.name}))
    log_path = state / "jupyterhub.log"
    log = open(log_path, "w+b")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def hub_log() -> str:
        log.flush()
        return log_path.read_text(errors="replace")[-6000:]

    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HUB_START
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterHub exited with status {proc.returncode}:\n{hub_log()}", pytrace=False)
            try:
                with urllib.request.urlopen(f"{url}/hub/api/", timeout=5) as r:
                    if r.status == 200:
                        break
            except (OSError, http.client.HTTPException):     # not up yet, or another server holds the port
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterHub did not answer within {HUB_START} s:\n{hub_log()}", pytrace=False)
            time.sleep(0.5)
        yield url, hub_log
    finally:
        _stop(proc)                         # and every process below it: the proxy, the users' servers
        log.close()


# -- people in the browser

def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def _log_in(browser, url: str, name: str):
    """A browser context of its own for `name`, logged in on the hub's page (the hub then starts the server)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(ACTION * 1000)
    page.goto(f"{url}/hub/login", wait_until="domcontentloaded")
    page.fill("#username_input", name)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    return page


def _lab_open(page, name: str) -> None:
    """Wait for the user's JupyterLab, which the hub opens once their server has started."""
    page.wait_for_url(re.compile(rf"/user/{re.escape(name)}/lab"), timeout=SPAWN * 1000)
    page.locator(".jp-LabShell").wait_for(state="visible", timeout=SPAWN * 1000)
    page.locator(".jp-DirListing-content").wait_for(state="visible", timeout=SPAWN * 1000)


def _menu(page, *path: str) -> None:
    """Click through the main menu: _menu(page, "File", "New", "Terminal")."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^{re.escape(path[0])}$")).click()
    for label in path[1:]:
        page.locator(".lm-Menu:visible .lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(label)}$")).last.click()


def _terminal(page, home: Path, step: str, command: str, timeout: float) -> str:
    """Type `command` into the open JupyterLab terminal as its user; its output (also in ~/STEP.log) once it
    ends; fails with that output when it exits non-zero."""
    status, log = home / f"{step}.status", home / f"{step}.log"
    page.locator(".jp-Terminal .xterm-screen").last.click()
    page.keyboard.type(f"({command}) 2>&1 | tee ~/{step}.log; echo ${{PIPESTATUS[0]}} > ~/{step}.status")
    page.keyboard.press("Enter")
    try:
        _wait_for(lambda: status.is_file() and status.read_text().strip(), timeout, f"the terminal's {step}")
    except AssertionError as e:
        raise AssertionError(f"{e}; its output so far:\n{log.read_text()[-4000:] if log.is_file() else ''}") from None
    output = log.read_text()
    assert status.read_text().strip() == "0", f"{step} failed in the instructor's terminal:\n{output[-6000:]}"
    return output


def _assignments(page):
    """The Assignments tab (Nbgrader > Assignment List), its lists loaded."""
    tab = page.locator(".lm-TabBar-tab", has_text=re.compile(r"^Assignments$"))
    if tab.count():                          # its lists are current: each action reloads them
        tab.first.click()
    else:
        _menu(page, "Nbgrader", "Assignment List")
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for(state="visible")
    _wait_for(lambda: not panel.locator(".list_loading:visible").count(), ACTION, "the assignment lists load")
    return panel


def _run_setup_cell(page) -> None:
    """Run the notebook's first cell (it imports the course's grader) as a student would: Shift+Enter,
    pressed again while the cell shows no sign of running (JupyterLab drops a run asked for before the
    notebook's kernel connection is up), and taking the kernel JupyterLab offers where it asks which one (it
    does when the kernel's start is slow)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # optional, as in test_term_through_jupyterhub
    cell = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-CodeCell").first
    prompt = cell.locator(".jp-InputArea-prompt")
    kernel_dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    deadline, presses = time.monotonic() + SPAWN, 0
    while not re.fullmatch(r"\[(\d+|\*)\]:", prompt.text_content().strip()):
        assert time.monotonic() < deadline, f"the setup cell did not run within {SPAWN} s ({presses} tries)"
        if kernel_dialog.count():
            kernel_dialog.locator(".jp-mod-accept").click()
        try:
            cell.locator(".cm-content").click(timeout=5000)
        except PlaywrightTimeout:       # the dialog came over the cell: the next round answers it
            continue
        page.keyboard.press("Shift+Enter")
        presses += 1
        try:
            _wait_for(lambda: re.fullmatch(r"\[(\d+|\*)\]:", prompt.text_content().strip()), 10, "a run")
        except AssertionError:
            pass
    _wait_for(lambda: re.fullmatch(r"\[\d+\]:", prompt.text_content().strip()), SPAWN, "the setup cell ends")
    output = cell.locator(".jp-OutputArea")
    try:            # the page may number the cell before it draws the cell's output
        _wait_for(lambda: output.inner_text().strip(), 10, "the setup cell's output")
    except AssertionError:
        pass        # none came: the assertion below shows what the cell shows
    shown = output.inner_text()
    assert re.fullmatch(rf"grader: kernels run on the {grader.BACKEND.name}\b.*", shown.strip()), (
        f"the setup cell shows:\n{shown}")
    print(f"the setup cell ran ({presses} Shift+Enter)")


def _fill(page, answers: list[str]) -> None:
    """Every answer cell of the open notebook replaced by its answer, in one keyboard insertion each."""
    cells = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-CodeCell")
    cells.first.wait_for(state="visible")
    stubs = _wait_for(lambda: [i for i in range(cells.count())
                               if re.search(r"YOUR (CODE|ANSWER) HERE", cells.nth(i).evaluate(EDITOR_TEXT))],
                      ACTION, "the notebook's answer cells render")
    assert len(stubs) == len(answers), f"the fetched copy has {len(stubs)} answer cells, the source {len(answers)}"
    for i, answer in zip(stubs, answers):
        cells.nth(i).locator(".cm-content").click()
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(answer)
        page.keyboard.press("Escape")
        typed = cells.nth(i).evaluate(EDITOR_TEXT)
        assert typed.rstrip() == answer.rstrip(), f"answer cell {i} reads, after editing:\n{typed}"


def _saved(notebook: Path) -> set[str]:
    return {c.source.rstrip() for c in nbformat.read(str(notebook), as_version=4).cells}


def _submit(page, home: Path, answers: list[str]) -> None:
    """Fetch lab 1 in the Assignments tab, fill it in, save it, submit it."""
    panel = _assignments(page)
    released = panel.locator("#released_assignments_list .list_item", has_text=LAB)
    released.locator("button", has_text="fetch").click()
    fetched = panel.locator("#fetched_assignments_list .list_item", has_text=LAB).first
    fetched.wait_for(state="visible")
    fetched.locator(".assignment-notebooks-link").click()
    fetched.locator(".assignment-notebooks a", has_text=re.compile(rf"^{re.escape(NB)}$")).click()
    _run_setup_cell(page)
    _fill(page, answers)
    page.keyboard.press("Control+s")
    notebook = home / LAB / f"{NB}.ipynb"
    _wait_for(lambda: _saved(notebook) >= {a.rstrip() for a in answers}, ACTION, f"the answers saved in {notebook}")
    panel = _assignments(page)
    panel.locator("#fetched_assignments_list .list_item", has_text=LAB).locator("button", has_text="Submit").click()
    panel.locator("#submitted_assignments_list .list_item", has_text=LAB).first.wait_for(state="visible")


def _role(name: str) -> str:
    """right, broken or prof: a user name without its run's suffix (names of screenshots)."""
    return name.rsplit("-", 1)[0]


def _feedback(page, name: str) -> str:
    """Fetch the feedback in the Assignments tab and open it in JupyterLab; the page's text."""
    panel = _assignments(page)
    panel.locator("#submitted_assignments_list .list_item", has_text=LAB).locator(
        "button", has_text="Fetch Feedback").click()
    panel.locator("#submitted_assignments_list a", has_text="view feedback").first.click()
    page.locator(".jp-DirListing-item", has_text=f"{NB}.html").dblclick()
    body = page.frame_locator(".jp-HTMLViewer:visible iframe").locator("body")
    body.locator("h4", has_text="Score").first.wait_for(state="visible")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"feedback-{_role(name)}.png"))
    return body.inner_text()


# -- the term

def _answers_of(broken: bool) -> list[str]:
    answers = [_filled(a) for a in _answers()]
    if broken:
        (kernel,) = [i for i, a in enumerate(answers) if "sgemm_naive" in a]
        assert answers[kernel].count(BOUNDS_CHECK) == 1, answers[kernel]
        answers[kernel] = answers[kernel].replace(BOUNDS_CHECK, "    {")
        (question,) = [i for i, a in enumerate(answers) if re.search(r"^AI_4096 = ", a, re.MULTILINE)]
        answers[question] = re.sub(r"^AI_4096 = .*$", WRONG_ANSWER, answers[question], flags=re.MULTILINE)
    return answers


def _hidden_lines() -> list[str]:
    """Every line of the source notebook's hidden tests."""
    lines, inside = [], False
    for cell in source_notebook(LAB).cells:
        for line in cell.source.split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    return lines


def test_term_through_jupyterhub():
    missing = _missing()
    if missing:
        _absent("the JupyterHub test needs " + ", ".join(missing))
    from playwright.sync_api import sync_playwright  # optional: present once _missing() says so

    t0 = time.monotonic()
    suffix = secrets.token_hex(3)
    right, broken, instructor = f"right-{suffix}", f"broken-{suffix}", f"prof-{suffix}"   # new Unix accounts
    with ExitStack() as stack:
        top = Path(tempfile.mkdtemp(prefix="sgemm-hub-"))
        stack.callback(shutil.rmtree, top, ignore_errors=True)
        (top / "home").mkdir()
        for d in (top, top / "home"):
            d.chmod(0o755)
        homes = stack.enter_context(_accounts(top, [right, broken, instructor]))
        try:
            probe = subprocess.run([sys.executable, "-c", "import jupyterhub, nbgrader, jupyterlab"], user=right,
                                   cwd=homes[right], capture_output=True, text=True)
            why = probe.stderr.strip()[-300:] if probe.returncode else ""
        except OSError as e:               # the interpreter itself is out of their reach
            why = str(e)
        if why:
            _absent(f"the JupyterHub test needs a Python environment that other users can run ({sys.executable} "
                    f"as {right}: {why})")
        course = _course(homes[instructor], instructor)
        installed = _installed_course(top)
        url, hub_log = stack.enter_context(_hub(top, [right, broken, instructor], instructor, installed))
        print(f"hub up after {time.monotonic() - t0:.1f} s")
        browser = stack.enter_context(sync_playwright()).chromium.launch(
            executable_path=CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium"),
            headless=True, args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        pages = {}
        try:
            _term(browser, url, homes, course, right, broken, instructor, pages, t0)
        except BaseException:
            SHOTS.mkdir(parents=True, exist_ok=True)
            for name, page in pages.items():
                try:
                    page.screenshot(path=str(SHOTS / f"failed-{_role(name)}.png"))
                except Exception as e:          # the browser may be gone: the failure itself matters
                    print(f"no screenshot of {name}'s page: {e}")
            print(f"--- JupyterHub's log ---\n{hub_log()}")
            raise
    print(f"the whole term took {time.monotonic() - t0:.1f} s")


def _term(browser, url, homes, course, right, broken, instructor, pages, t0):
    # Everyone logs in at once: the students' servers start while the instructor releases the lab.
    for name in (instructor, right, broken):
        pages[name] = _log_in(browser, url, name)
    prof = pages[instructor]
    _lab_open(prof, instructor)
    _menu(prof, "File", "New", "Terminal")
    prof.locator(".jp-Terminal .xterm-screen").last.wait_for(state="visible")
    _terminal(prof, homes[instructor], "release",
              f"cd ~/{course.name} && nbgrader generate_assignment {LAB} && nbgrader release_assignment {LAB}",
              RELEASE)
    print(f"lab released after {time.monotonic() - t0:.1f} s")

    for name in (right, broken):
        _lab_open(pages[name], name)
        _submit(pages[name], homes[name], _answers_of(broken=name == broken))
        print(f"{name} submitted after {time.monotonic() - t0:.1f} s")

    graded = _terminal(prof, homes[instructor], "grade",
                       f"cd ~/{course.name} && nbgrader collect {LAB} && python -m grader autograde . {LAB} && "
                       f"nbgrader generate_feedback {LAB} && nbgrader release_feedback {LAB}", GRADE)
    print(f"graded and feedback released after {time.monotonic() - t0:.1f} s; the autograde said:\n"
          + "\n".join(line for line in graded.splitlines() if not line.startswith("[")))

    shown = {name: _feedback(pages[name], name) for name in (right, broken)}
    print(f"feedback opened after {time.monotonic() - t0:.1f} s")

    # -- what the students see
    score = {}
    for name, text in shown.items():
        m = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", text)
        assert m, f"{name}'s feedback page shows no score:\n{text[:2000]}"
        score[name] = float(m[1])
        assert float(m[2]) == sum(points(LAB).values()), text[:500]
        assert score[name] == pytest.approx(submission_score(course, LAB, name), abs=0.01), (
            f"{name}'s page says {m[0]}, the gradebook {submission_score(course, LAB, name)}")
        leaked = [line for line in ["BEGIN HIDDEN TESTS", "grade_answer("] + _hidden_lines() if line in text]
        assert not leaked, f"{name}'s feedback shows hidden test text: {leaked}"
    assert score[right] > score[broken], score
    expected_value = re.search(r"grade_answer\(AI_4096, ([\d.]+)", "\n".join(_hidden_lines()))[1]
    assert expected_value[:6] not in shown[broken], f"the broken feedback shows the expected {expected_value}"

    # -- what the gradebook says: the broken submission loses exactly the cells it broke
    worth = points(LAB)
    cells = {name: cell_scores(course, LAB, name) for name in (right, broken)}
    for cell in BROKEN_CELLS:
        assert cells[right][cell] == worth[cell] and cells[broken][cell] == 0, (cell, cells)
    same = [c for c in worth if c not in BROKEN_CELLS + (TIMED,)]
    assert [cells[right][c] for c in same] == [cells[broken][c] for c in same], cells

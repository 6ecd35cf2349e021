"""The sandbox of every process that runs a student's code (grader.platform.sandbox), with the grader as
root (the namespaces it makes itself) and as an ordinary user (bubblewrap): no privilege inside, hidden
paths hidden in every form, nothing written outside its own folders, no process outside reachable;
the seccomp filter of a grading process on the emulator; the autograde kernel's sandbox."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import warm_cache

from grader.platform import sandbox, settings

REPO = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).with_name("sandbox_probe.py")
ORDINARY_UID = 4242           # a user with no account: the grader run as someone who is not root


def _sandbox_or_fail():
    tool, why = sandbox.mechanism()
    if tool is None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(why)
        pytest.skip(why)


def as_grader(user: str, tmp: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """Python `code` run as the grader: this process's user ("root"), or an ordinary user (a root test
    makes one: uid ORDINARY_UID, `tmp` its only writable folder)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp / "home"), TMPDIR=str(tmp / "home"))
    (tmp / "home").mkdir(exist_ok=True)
    command = [sys.executable, "-c", code, *args]
    if user == "ordinary":
        if os.geteuid() != 0:
            pytest.skip("only root can run the grader as another user")
        if shutil.which("bwrap") is None:
            pytest.skip("an ordinary user's sandbox is bubblewrap's, and it is not installed")
        plan = sandbox.plan([str(tmp)], str(tmp), uid=ORDINARY_UID, network=True)
        for path in plan["writable"]:
            sandbox._give(path, ORDINARY_UID)
        command = [sys.executable, "-I", str(sandbox.HELPER), json.dumps(plan), *command]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("user", ["root", "ordinary"])
def test_a_sandboxed_process_has_no_privilege(user, tmp_path):
    """Whoever the grader runs as, what a hostile submission tries inside fails: it is uid 65534 with no
    capability; it cannot unmount what hides the gradebook, remount / read-write, write or chmod outside
    its folder, see a hidden file or folder (directly, through a symbolic link, through /proc/self/root),
    signal or trace a process outside; a user namespace of its own changes none of that."""
    if user == "root" and os.geteuid() != 0:
        pytest.skip("the grader is not root here")
    _sandbox_or_fail()
    tmp_path.chmod(0o755)                        # pytest makes it 0700: uid 65534 could not even look
    course = tmp_path / "course"
    (course / "students" / "bob").mkdir(parents=True)
    (course / "students" / "bob" / "answer.txt").write_text("bob's answer")
    (course / "gradebook.db").write_text("grades")
    (course / "outside.txt").write_text("untouched")
    (course / "link").symlink_to(course / "gradebook.db")
    own = tmp_path / "own"
    own.mkdir()
    outsider = subprocess.Popen(["sleep", "300"])
    arg = json.dumps({"hidden_file": str(course / "gradebook.db"), "hidden_dir": str(course / "students"),
                      "link": str(course / "link"), "outside_file": str(course / "outside.txt"),
                      "writable": str(own), "pid": outsider.pid})
    code = ("import subprocess, sys\nfrom grader.platform import sandbox\n"
            f"command = sandbox.wrap([sys.executable, {str(PROBE)!r}, sys.argv[1]], [{str(own)!r}], {str(own)!r}, "
            f"hidden=[{str(course / 'gradebook.db')!r}, {str(course / 'students')!r}], readable=[{str(tmp_path)!r}])\n"
            "print(sandbox.description(), file=sys.stderr)\n"
            "p = subprocess.run(command, capture_output=True, text=True)\n"
            "print(p.stdout, end='')\nprint(p.stderr, file=sys.stderr)\n")
    try:
        p = as_grader(user, tmp_path, code, arg)
    finally:
        outsider.kill()
        outsider.wait()
    assert p.stdout.strip(), p.stderr
    said = json.loads(p.stdout)
    assert ("bubblewrap" if user == "ordinary" else "namespaces made by the grader as root") in p.stderr, p.stderr
    assert said["uid"] == sandbox.UNPRIVILEGED and said["cap_eff"] == "0000000000000000", said
    assert said["no_new_privs"] == "1"
    for what in ("read_hidden_file", "read_through_link", "read_through_proc_root"):
        assert said[what] == ["ok", ""], (what, said[what])
    assert said["list_hidden_dir"] == ["ok", []]
    for what in ("umount_hidden", "remount_root_rw", "write_outside", "write_tmp", "chmod_outside",
                 "signal_outside", "ptrace_outside"):
        assert said[what][0] == "denied", (what, said[what])
    assert said["write_own"] == ["ok", 1] and (own / "mine").read_text() == "x"
    assert said["nested_namespace"].strip() == ""
    assert set(said["dev"][1]) <= {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                                   "stdout", "tty", "urandom", "zero", ".empty"}
    assert (course / "gradebook.db").read_text() == "grades"
    assert (course / "outside.txt").read_text() == "untouched"
    assert oct((course / "outside.txt").stat().st_mode)[-3:] != "777"


def test_what_student_code_and_grading_processes_must_not_see(tmp_path, monkeypatch):
    """The answers are hidden from student code; the reference solutions' builds and the course layer's paths
    (a course's gradebook, source folder, students' folders, the class state) from every sandboxed process."""
    pytest.importorskip("nbgrader")
    from grader.course import gradebook
    monkeypatch.setattr(sandbox, "_protected", [])
    course = tmp_path / "course"
    for folder in ("labs", "submitted", "autograded", "feedback", "class-autograde"):
        (course / folder).mkdir(parents=True)
    (course / "gradebook.db").write_text("")
    (course / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.source_directory = "labs"\n')
    sandbox.protect(gradebook.protected_paths(course))
    protected = {str(course / f) for f in ("labs", "submitted", "autograded", "feedback", "class-autograde",
                                           "gradebook.db")}
    builds = {os.path.realpath(settings.current().reference_builds)}
    assert set(sandbox.hidden_from_grading()) == protected | builds
    answers = {str(REPO / "solutions"), str(REPO / "labs"), str(REPO / "grader" / "references")}
    assert set(sandbox.hidden_from_student_code()) == protected | answers | builds


@pytest.mark.parametrize("user", ["root", "ordinary"])
def test_the_reference_builds_are_seen_only_by_the_process_that_writes_them(user, tmp_path):
    """The reference solutions' builds in the emulator cache (answers: a notebook run at autograde could print
    them into its feedback) are hidden from a student's code and from a submission's grading process; the
    references' own grading process, which writes them there, sees them."""
    if user == "root" and os.geteuid() != 0:
        pytest.skip("the grader is not root here")
    _sandbox_or_fail()
    tmp_path.chmod(0o755)
    cache = tmp_path / "cache"           # seen in the sandbox as ~/.cache/grader-emulator is (not in a private /tmp)
    builds = cache / "reference-builds"
    builds.mkdir(parents=True)
    builds.chmod(0o755)                          # anyone may read it: only the sandbox hides it
    (builds / "kernel-reference.so").write_text("compiled answer")
    own = tmp_path / "own"
    own.mkdir()
    code = ("import os, subprocess, sys\n"
            f"os.environ['GRADER_EMULATOR_CACHE'] = {str(cache)!r}\n"
            "from grader.platform import sandbox\n"
            "read = [sys.executable, '-I', '-c', 'import os, sys; f = sys.argv[1]; '\n"
            "        'print(open(f).read() if os.path.exists(f) else \"hidden\")', "
            f"{str(builds / 'kernel-reference.so')!r}]\n"
            f"for who, hidden, writable in (('student', sandbox.hidden_from_student_code(), [{str(own)!r}]),\n"
            f"                              ('grading', sandbox.hidden_from_grading(), [{str(own)!r}]),\n"
            f"                              ('reference', sandbox.hidden_from_grading(), [{str(own)!r}, {str(builds)!r}])):\n"
            f"    p = subprocess.run(sandbox.wrap(read, writable, {str(own)!r}, hidden=hidden, readable=[{str(cache)!r}]),\n"
            "                       capture_output=True, text=True)\n"
            "    print(who, p.stdout.strip() or p.stderr.strip()[-300:])\n")
    p = as_grader(user, tmp_path, code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["student hidden", "grading hidden", "reference compiled answer"], p.stdout


# A hostile student function: it reads an answer and the grader's key, and says what it found.
PRYING = """def gflops(M, N, K, seconds):
    found = []
    for path in ({answer!r}, {key!r}):
        try:
            found.append(open(path).read()[:40])
        except OSError as e:
            found.append(type(e).__name__)
    raise ValueError("FOUND " + " | ".join(found))
"""
# Run as the grader: the function as a notebook runs it at autograde (the sandbox of student code), then graded.
PRY = """import os, subprocess, sys
os.environ["HOME"] = sys.argv[3]
os.environ["GRADER_EMULATOR_CACHE"] = sys.argv[4]
from grader.grading.isolation import run_check
from grader.platform import sandbox
source = open(sys.argv[2]).read()
work = os.environ["TMPDIR"]
ran = subprocess.run(sandbox.wrap([sys.executable, "-I", "-c", source + "gflops(1, 1, 1, 1.0)"], [work], work,
                                  hidden=sandbox.hidden_from_student_code()), capture_output=True, text=True)
print("NOTEBOOK", ran.stderr.strip().splitlines()[-1])
said = run_check("pycuda-gflops", "gflops-formula", source, seed=1).text()
print("FUNCTION", "FOUND FileNotFoundError | FileNotFoundError" in said, "Stage 1" in said, "PRIVATE" in said)
"""


@pytest.mark.parametrize("user", ["root", "ordinary"])
def test_student_code_sees_neither_the_answers_nor_the_graders_home(user, tmp_path):
    """Graded by root or by an ordinary user (whose sandbox reads what that user can), a student's code finds
    neither an answer nor the grader's home folder (its keys, tokens, Jupyter's connection files): run as a
    notebook at autograde (the sandbox of student code), and graded as a student's function (in a sandbox its
    grading process makes inside its own)."""
    if user == "root" and os.geteuid() != 0:
        pytest.skip("the grader is not root here")
    if os.geteuid() != 0:
        pytest.skip("the home folder, outside the private /tmp, is made under /run by root")
    _sandbox_or_fail()
    tmp_path.chmod(0o755)
    home = Path(tempfile.mkdtemp(prefix="grader-test-home-", dir="/run"))    # where a home is: not in /tmp
    try:
        key = home / ".ssh" / "id_ed25519"
        key.parent.mkdir(mode=0o700)
        key.write_text("PRIVATE KEY")
        key.chmod(0o600)
        if user == "ordinary":
            for path in (home, key.parent, key):
                os.chown(path, ORDINARY_UID, ORDINARY_UID)
        function = tmp_path / "gflops.py"
        function.write_text(PRYING.format(answer=str(REPO / "solutions" / "naive.cu"), key=str(key)))
        (tmp_path / "pry.py").write_text(PRY)
        p = as_grader(user, tmp_path, "import sys; exec(open(sys.argv[1]).read())", str(tmp_path / "pry.py"),
                      str(function), str(home), str(warm_cache(tmp_path / "cache")))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-2:] == ["NOTEBOOK ValueError: FOUND FileNotFoundError | FileNotFoundError",
                                          "FUNCTION True False False"], p.stdout


# ---- the seccomp filter ------------------------------------------------------------------------------
CALLS = {
    "fork": "os.fork()",
    "a program": "subprocess.run(['true'])",
    "execve": "os.execv('/bin/true', ['true'])",
    "mount": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
    "ptrace": "libc.ptrace(16, os.getppid(), None, None)",
    "setuid": "os.setuid(os.getuid())",
    "unshare": "libc.unshare(0x00020000)",
}


@pytest.mark.parametrize("call", list(CALLS))
def test_after_the_filter_a_process_is_killed_for_a_forbidden_call(call):
    code = ("import ctypes, os, subprocess, threading\nimport numpy as np\nfrom grader.platform import sandbox\n"
            "libc = ctypes.CDLL(None, use_errno=True)\nsandbox.forbid_new_programs()\n"
            "t = threading.Thread(target=lambda: np.dot(np.ones((200, 200)), np.ones((200, 200))))\n"
            "t.start(); t.join()\nprint('threads still start', flush=True)\n" + CALLS[call] + "\nprint('not stopped')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == -signal.SIGSYS, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "threads still start\n"


FORKING_KERNEL = r'''
extern "C" int fork(void);
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) C[0] = (float)fork();
}
'''


def test_device_code_that_starts_a_process_is_stopped_and_reported(tmp_path):
    """A kernel calling fork() (a trusted build without nvcc: the policy and nvcc would refuse it first) in a grading
    process that has compiled it is killed by the filter; the grader says why, and flags the attempt."""
    from grader.grading import isolation
    from grader.grading.report import FAILED
    code = ("import sys\nfrom grader.platform import settings\nfrom grader.grading import registry\n"
            "from grader.grading.checks import common\nfrom grader.grading.protocol import Context\n"
            f"settings.use(settings.current().with_(backend='emulator', emulator_nvcc=False, "
            f"emulator_cache={str(tmp_path)!r}))\n"
            "common.arm_lock_down()\nexercise = registry.get('naive')\n"
            "exercise.check('correctness').collect(sys.argv[1], 1, Context('naive', exercise.stage))\n"
            "print('not stopped')\n")
    p = subprocess.run([sys.executable, "-c", code, FORKING_KERNEL], capture_output=True, text=True, cwd=REPO,
                       timeout=600, env=dict(os.environ, GRADER_BACKEND="emulator", TMPDIR=str(tmp_path)))
    assert p.returncode == -signal.SIGSYS and "not stopped" not in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])
    result = isolation._outcome("correctness", "", isolation.STARTED, "", -signal.SIGSYS, False, 60)
    assert result.status == FAILED and result.points == 0 and "system call" in result.message
    assert result.details["refused"] == ["forbidden-system-call"]


# ---- the autograde kernel -------------------------------------------------------------------------------
def test_the_autograde_kernel_sees_no_answer_and_writes_nowhere(tmp_path):
    """nbgrader's kernel at autograde time (grader.course.preprocessors.SandboxedKernelManager): the answers,
    the course's gradebook and every student's folder look empty, nbgrader's exchange is hidden; what it
    writes goes to a copy of its folder, never into the course."""
    pytest.importorskip("nbgrader")
    import asyncio

    from traitlets.config import Config

    from grader.course.preprocessors import SandboxedKernelManager, protect_course
    _sandbox_or_fail()
    course = tmp_path / "course"
    own = course / "autograded" / "alice" / "A"
    other = course / "autograded" / "bob" / "A"
    for d in (own, other, course / "source" / "A"):
        d.mkdir(parents=True)
    (own / "data.txt").write_text("mine to read")
    (other / "bob.ipynb").write_text("{}")
    (course / "gradebook.db").write_text("grades")
    exchange = tmp_path / "exchange"
    (exchange / "sgemm-lab" / "inbound").mkdir(parents=True)
    c = Config()
    c.CourseDirectory.root = str(course)
    c.Exchange.root = str(exchange)
    protect_course(c)
    assert str(exchange) in sandbox.hidden_from_student_code()     # every student's submissions
    probe = ("import json, os\n"
             "def attempt(f):\n    try:\n        return f()\n    except OSError as e:\n        return e.strerror\n"
             f"print(json.dumps([attempt(lambda: os.listdir({str(REPO / 'solutions')!r})), "
             f"attempt(lambda: os.listdir({str(other.parent.parent)!r})), attempt(lambda: os.listdir({str(course / 'source')!r})), "
             f"attempt(lambda: open({str(course / 'gradebook.db')!r}).read())]))\n"
             "print(open('data.txt').read(), os.getuid())\n"
             "open('mine.txt', 'w').write('ok')\n"
             f"print(attempt(lambda: open({str(course / 'planted.txt')!r}, 'w')))\n")

    async def run() -> str:
        km = SandboxedKernelManager(kernel_name="python3", config=c)
        await km.start_kernel(cwd=str(own))
        kc = km.client()
        kc.start_channels()
        out = []
        try:
            await kc.wait_for_ready(timeout=120)
            await kc.execute_interactive(probe, timeout=60, output_hook=lambda m: out.append(
                m["content"].get("text") or m["content"].get("evalue") or ""))
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
        return "".join(out)

    out = asyncio.run(run())
    seen, own_file, planted = out.splitlines()
    assert all(x in ([], "", "No such file or directory") for x in json.loads(seen)), out
    assert own_file == f"mine to read {sandbox.UNPRIVILEGED}" and planted in ("Read-only file system",
                                                                           "No such file or directory"), out
    assert not (own / "mine.txt").exists() and not (course / "planted.txt").exists()
    assert (course / "gradebook.db").read_text() == "grades" and (REPO / "solutions" / "naive.cu").exists()


def test_a_kernel_that_never_answers_is_started_again(tmp_path, monkeypatch):
    """A kernel that never answers its first message (its ports taken by another process before it bound
    them) costs the run one more start, not the notebook's outputs; neither start leaves its private folder."""
    pytest.importorskip("nbgrader")
    import nbformat
    from traitlets.config import Config

    from grader.course.preprocessors import sandboxed_execute
    starts = []
    real = sandboxed_execute.SandboxedKernelManager._async_pre_start_kernel

    async def first_exits(self, **kw):         # as a kernel whose port was taken does
        cmd, kw = await real(self, **kw)
        starts.append(cmd)
        return ([sys.executable, "-c", "raise SystemExit(1)"] if len(starts) == 1 else cmd), kw

    monkeypatch.setattr(sandboxed_execute.SandboxedKernelManager, "_async_pre_start_kernel", first_exits)
    made, mkdtemp = [], tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **kw: made.append(mkdtemp(*a, **kw)) or made[-1])
    c = Config()
    c.CourseDirectory.root = str(tmp_path / "course")
    (tmp_path / "work").mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nb, _ = sandboxed_execute.SandboxedExecute(config=c).preprocess(nb, {"metadata": {"path": str(tmp_path / "work")}})
    assert len(starts) == 2 and nb.cells[0].outputs[0]["text"] == "42\n", nb.cells[0].outputs
    kernels = [folder for folder in made if os.path.basename(folder).startswith("grader-kernel-")]
    assert len(kernels) == 2 and not any(os.path.exists(folder) for folder in kernels), made

def test_a_student_function_finds_no_answer_to_put_in_its_feedback():
    """A host function whose exception carries whatever it can read of the solutions and the source notebooks
    (the checks show a student's exception text): it finds nothing, so its feedback holds no answer."""
    _sandbox_or_fail()
    from grader.grading.registry import run_here
    source = ("import glob\n\ndef gflops(M, N, K, seconds):\n"
              f"    found = [open(p).read() for d in ({str(REPO / 'solutions')!r}, {str(REPO / 'labs')!r})\n"
              "             for p in glob.glob(d + '/**/*.*', recursive=True)]\n"
              "    raise ValueError(f'{len(found)} files: ' + ' '.join(found)[:20000])\n")
    result = run_here("pycuda-gflops", "gflops-formula", source, 1)
    assert not result.passed
    assert "0 files: " in result.message, result.message[:2000]
    assert "BEGIN SOLUTION" not in result.message and "__global__" not in result.message

"""Grading trusts nothing a notebook can write: the emulator's builds are keyed
and verified on load, each submission's grading processes build into a private
cache of its own (grader.grading.isolation.submission_cache), and a grading
process gets its import path and settings from its job, not its environment."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import emulator_only

import grader
from grader.emulator import build
from grader.grading import isolation
from grader.grading.report import CheckResult
from grader.platform import sandbox

REPO = Path(__file__).resolve().parent.parent
STUB = """__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    // YOUR CODE HERE
}
"""


def _entry(source: str) -> tuple[Path, Path, str]:
    lib = build.cache_dir() / build.build_module(source).library.name
    key = lib.name[len("kernel-"):-len(".so")]
    return lib, lib.with_suffix(".json"), key


def _poison(forge_key: bool) -> tuple[Path, bytes]:
    """What the hostile cell did: the reference's build copied over the stub's
    cached build in the shared cache (with forge_key, its key and SHA-256
    rewritten to the stub's, so that it passes verification). Returns the
    stub's library path and the reference's bytes as planted."""
    stub_lib, stub_meta, stub_key = _entry(STUB)
    ref_lib, ref_meta, ref_key = _entry((REPO / "solutions" / "naive.cu").read_text())
    data = ref_lib.read_bytes()
    meta = json.loads(ref_meta.read_text())
    if forge_key:
        assert len(ref_key) == len(stub_key)
        data = data.replace(ref_key.encode(), stub_key.encode())
        meta.update(key=stub_key, sha256=__import__("hashlib").sha256(data).hexdigest())
    stub_lib.write_bytes(data)
    stub_meta.write_text(json.dumps(meta))
    return stub_lib, data


@emulator_only
def test_a_build_copied_over_another_is_rebuilt_not_loaded():
    stub_lib, planted = _poison(forge_key=False)
    loaded = build.build_module(STUB).library
    again = build.cache_dir() / loaded.name
    assert again == stub_lib and again.read_bytes() != planted and loaded.read_bytes() == again.read_bytes()
    assert build.verified(again, again.name[len("kernel-"):-len(".so")], again.with_suffix(".json"))
    assert loaded.parent != build.cache_dir()          # what is loaded is a private copy


@emulator_only
def test_a_forked_process_copies_what_it_loads_into_a_folder_of_its_own(tmp_path):
    """Children forked from a process that has loaded a build (a process pool's workers) copy a library
    into folders of their own inside the parent's, which the parent removes as it ends: two of them
    writing the same one into the parent's own folder rewrote a file the other had loaded, and it
    crashed. (In a process of its own: this one may hold threads, which fork does not copy.)"""
    code = ("import os\nfrom grader.emulator import build\n"
            f"stub = {STUB!r}\n"
            "print(build.build_module(stub).library.parent.parent, flush=True)\n"
            "if os.fork() == 0:\n"
            "    print(build.build_module(stub + '// a build the parent has not loaded').library.parent.parent)\n"
            "    os._exit(0)\n"
            "os.wait()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                       env=dict(os.environ, GRADER_BACKEND="emulator", TMPDIR=str(tmp_path)))
    parents, childs = p.stdout.split()
    assert Path(childs).parent == Path(parents) and Path(parents).name.startswith("grader-loaded-"), p.stdout
    assert not Path(parents).exists(), p.stderr


@emulator_only
def test_the_folder_of_a_killed_process_goes_with_the_next_process_that_loads_a_build(tmp_path):
    """A process killed after loading a build (a hanging kernel restarted) runs no exit handler: its folder
    of private copies stays until the next process that loads a build removes it; a live process's stays."""
    load = ("import os, sys\nfrom grader.emulator import build\n"
            f"print(build.build_module({STUB!r}).library.parent.parent, flush=True)\n")
    env = dict(os.environ, GRADER_BACKEND="emulator", TMPDIR=str(tmp_path))

    def start(then: str) -> tuple[subprocess.Popen, Path]:
        p = subprocess.Popen([sys.executable, "-c", load + then], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=REPO, env=env)
        return p, Path(p.stdout.readline().strip())

    killed, killed_folder = start("os.kill(os.getpid(), 9)")
    assert killed.wait(timeout=300) == -9 and killed_folder.is_dir()
    alive, alive_folder = start("sys.stdin.read()")
    assert not killed_folder.exists() and alive_folder.is_dir()
    later, later_folder = start("")
    assert later.wait(timeout=300) == 0 and alive_folder.is_dir() and not later_folder.exists()
    alive.communicate("", timeout=60)
    assert alive.returncode == 0 and not alive_folder.exists()


@emulator_only
@pytest.mark.parametrize("forge_key", [False, True])
def test_a_poisoned_shared_cache_earns_no_points(forge_key):
    """The build-cache attack: a cell plants the reference's build under the
    stub's key in the shared cache; a blank notebook graded afterwards gets 0."""
    _poison(forge_key)
    report = grader.check("naive", STUB, ["correctness"], seed=1, fresh=True, announce=False)
    assert not report["correctness"].passed, report.text()
    assert isolation.submission_cache(STUB) != str(build.cache_dir())


def test_grading_processes_get_their_settings_from_the_job_not_the_environment(monkeypatch):
    """The grading process starts with `python -I` (no PYTHON* variables, no user site, not the working
    folder) and its import path and settings in the job; each submission builds into a private cache of
    its own, never shared with another submission."""
    assert "-I" in isolation.child_command()
    cache, other = Path(isolation.submission_cache(STUB)), Path(isolation.submission_cache(STUB + " "))
    assert cache.is_dir() and (cache.stat().st_mode & 0o077) == 0 and cache != other     # private: 0700
    assert isolation.submission_cache(STUB) == str(cache)
    monkeypatch.chdir(cache)
    path = grader.platform.interpreter.import_path()
    assert path[0] == str(isolation.ROOT) and str(cache) not in path and "" not in path


@emulator_only
def test_a_grading_process_without_a_gpu_starts_no_blas_threads(monkeypatch):
    """Its environment is made, not inherited: the one variable that keeps numpy's OpenBLAS to one thread
    is set there, whatever this process's environment says."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    started, real_popen = [], subprocess.Popen

    def popen(command, *args, **kw):
        if "grader.grading.isolation" not in " ".join(command):
            return real_popen(command, *args, **kw)
        started.append(kw["env"])
        raise OSError("not started")

    monkeypatch.setattr(subprocess, "Popen", popen)
    result = isolation.run_check("naive", "correctness", STUB, seed=1)
    assert result.status == "grader error" and started
    assert all(env.get("OPENBLAS_NUM_THREADS") == "1" for env in started), started


@emulator_only
def test_a_sitecustomize_on_the_path_does_not_reach_grading(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(
        "import grader.grading.report as r\n"
        "r.CheckResult.__post_init__ = lambda self: (setattr(self, 'status', 'passed'), "
        "setattr(self, 'points', self.max_points))\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    report = grader.check("naive", STUB, ["correctness"], seed=2, fresh=True, announce=False)
    assert not report["correctness"].passed


# ---- the trust boundary: device code only, a sandboxed child, the result over a pipe ----------
FORGE = r"""#include <stdio.h>
#include <string.h>
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) { }

/* After the check writes result.json (in the working directory), rewrite it as passed. */
__attribute__((destructor)) static void forge(void)
{
    FILE* f = fopen("result.json", "r+");
    if (!f) return;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    char* p = strstr(buf, "\"failed\"");
    if (p) { memcpy(p, "\"passed\"", 8); }
    rewind(f); fwrite(buf, 1, n, f); fclose(f);
}
"""

# No refused construct in the source: a declaration of a C library function and a
# device variable whose initializer calls it when the module loads. The imports say it.
IMPORTS_UNLINK = r"""extern "C" int unlink(const char*);
__device__ int boom = unlink("result.json");
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) { }
"""


def test_every_reference_and_lab_kernel_is_accepted():
    for f in sorted((REPO / "solutions").glob("*.cu")):
        assert build.refusals(f.read_text()) == [], f.name


@pytest.mark.parametrize("source, refused", [
    ("__global__ void k() { asm volatile(\"syscall\"); }", "inline assembly"),
    ("__global__ void k() {}\nint host_helper(int x) { return x; }", "`host_helper` is a host function"),
    ("__attribute__((constructor)) static void init() {}", "`constructor` attribute"),
    ("#include <unistd.h>\n__global__ void k() {}", "#include opens unistd.h"),
    ("struct T { int host() { return 1; } };", "`host` is a host function"),
])
def test_host_only_constructs_are_refused(source, refused):
    found = [str(f) for f in build.refusals(source)]
    assert any(refused in f for f in found), found


def test_device_code_is_accepted():
    ok = """#include <cuda_pipeline.h>
template <int B> __device__ __forceinline__ float twice(float x) { return 2 * x; }
struct Frag { float v[4]; __device__ float sum() const { return v[0] + v[1]; } };
__host__ __device__ inline int cdiv(int a, int b) { return (a + b - 1) / b; }
extern "C" { __global__ void k(float* p) { auto f = [](float x) { return x; }; p[0] = f(twice<1>(1.0f)); } }
"""
    assert build.refusals(ok) == []


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600)


@emulator_only
def test_the_forging_source_is_refused_and_fails(tmp_path):
    """The forgery: a host destructor rewrote the check's result file. Now
    refused before it is compiled, with what and why; `grader check` exits 1."""
    forge = tmp_path / "forge.cu"
    forge.write_text(FORGE)
    p = _cli("check", str(forge), "--exercise", "naive")
    assert p.returncode == 1, p.stdout + p.stderr
    for named in ("refuses this source", "`destructor` attribute", "`forge` is a host function"):
        assert named in p.stdout, (named, p.stdout)
    assert "[PASS] correctness" not in p.stdout


@emulator_only
def test_a_library_importing_c_library_calls_is_refused():
    report = grader.check("naive", IMPORTS_UNLINK, ["compiles", "correctness"], seed=1, fresh=True, announce=False)
    assert not report["compiles"].passed and "unlink" in report["compiles"].message, report.text()
    assert not report["correctness"].passed


def test_the_sandbox_says_what_it_uses():
    text = isolation.sandbox_description()
    assert "resource limits" in text and "pipe" in text and "seccomp" in text
    tool, why = sandbox.mechanism()
    assert (tool is None) == why.startswith("no sandbox")


def test_a_grading_process_limits_its_resources():
    code = ("import resource; from grader.grading import isolation; missing = isolation._apply_limits(100); "
            "print(resource.getrlimit(resource.RLIMIT_CPU)[1], resource.getrlimit(resource.RLIMIT_NOFILE)[1], "
            "resource.getrlimit(resource.RLIMIT_AS)[1], missing)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    cpu, nofile, address_space, missing = p.stdout.split(maxsplit=3)
    assert int(cpu) == 101 and int(nofile) <= 1024 and int(address_space) <= 32 << 30 and missing.strip() == "[]"


def test_the_verdict_on_correctness_is_computed_from_outputs_in_the_parent():
    """The grading process returns only what the kernel computed; the parent makes the inputs again from
    its own seed and judges. Outputs for another seed, or a verdict in place of outputs, earn nothing."""
    import numpy as np

    from grader.grading.checks import correctness
    from grader.grading.protocol import Context
    from grader.grading.report import PASSED
    from grader.kernels import sgemm
    ctx = Context("naive", grader.kernels.stages.stage("naive"))
    meta, arrays = {"log": "", "compile_error": None, "shapes": []}, {}
    rng = np.random.default_rng(7)
    for i, (M, N, K) in enumerate(correctness.shapes(False)):
        A, B = sgemm.random_inputs(M, N, K, rng)
        meta["shapes"].append({"failure": None})
        arrays.update({f"C{i}": (A.astype(np.float64) @ B).astype(np.float32), f"before{i}": np.empty(0, np.int64),
                       f"after{i}": np.empty(0, np.int64)})
    outcome = isolation._outcome("correctness", "", isolation.STARTED + isolation._outputs(meta, arrays), "", 0,
                                 False, 60)
    assert correctness.judge(outcome[:2], 7, ctx).status == PASSED
    assert not correctness.judge(outcome[:2], 8, ctx).passed            # the parent chose seed 8
    arrays["C2"] = arrays["C2"] + 1
    wrong = correctness.judge((meta, arrays), 7, ctx)
    assert not wrong.passed and "M=1 N=129 K=31" in wrong.message
    forged = b"J" + json.dumps(CheckResult("correctness", "passed", "forged", 1.0).to_dict()).encode()
    refused = isolation._outcome("correctness", "", isolation.STARTED + forged, "", 0, False, 60)
    assert isinstance(refused, CheckResult) and not refused.passed and refused.points == 0


def test_every_check_is_judged_in_the_parent():
    """Every check of every exercise is a collect and a judge: nothing the grading process writes on its pipe
    but outputs is read as a result, so a passing verdict written there (what native code that reached the
    pipe could forge) earns nothing."""
    from grader.grading import registry
    passing = isolation.STARTED + b"J" + json.dumps(CheckResult("x", "passed", "forged", 1.0).to_dict()).encode()
    for exercise in registry.EXERCISES.values():
        for check in exercise.checks:
            assert callable(check.collect) and callable(check.judge), (exercise.id, check.name)
            result = isolation._outcome(check.name, check.hang_hint, passing, "", 0, False, 60)
            assert isinstance(result, CheckResult) and result.status != "passed", (exercise.id, check.name)


FORGING_FUNCTION = '''
def gflops(M, N, K, seconds):
    import json, os
    forged = {"name": "gflops-formula", "status": "passed", "message": "forged", "points": 1.0}
    for fd in range(3, 256):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, b"J" + json.dumps(forged).encode())
        except OSError:
            pass
    os._exit(0)
'''

REACHING_FUNCTION = '''
def gflops(M, N, K, seconds):
    import os
    parent = os.getppid()
    try:
        fds = os.listdir(f"/proc/{parent}/fd")
    except OSError as e:
        fds = type(e).__name__
    raise RuntimeError(f"parent {parent}: {fds}")
'''


def test_a_python_function_that_writes_a_verdict_on_every_pipe_and_exits_earns_nothing():
    """Forging, from Python: the function runs in a process of its own, which holds no pipe of
    the grading process; what it writes on its own pipe is unreadable, and its exit is named."""
    result = isolation.run_check("pycuda-gflops", "gflops-formula", FORGING_FUNCTION, seed=1)
    assert not result.passed and result.points == 0 and "forged" not in result.message, result.message
    assert "ProcessEnded" in result.message and "wrong on 5 of 5 inputs" in result.message


def test_a_python_function_cannot_reach_the_grading_process():
    """Neither its pid (bubblewrap, or unshare for root: a process namespace of its own) nor its open files
    (the grading process is non-dumpable)."""
    result = isolation.run_check("pycuda-gflops", "gflops-formula", REACHING_FUNCTION, seed=1)
    assert not result.passed
    said = result.message.split("raised RuntimeError: ", 1)[1].splitlines()[0]
    assert said.endswith(("PermissionError", "FileNotFoundError")) or said.startswith("parent 1:"), said


def test_values_cross_to_and_from_the_students_process_as_data():
    import numpy as np

    from grader.grading import student_process
    from grader.platform import wire
    from grader.platform.devices import H200
    source = ("import numpy as np\n"
              "class Mine:\n    pass\n"
              "def echo(*args, **kwargs):\n"
              "    if kwargs.get('call'):\n        return kwargs['call'](args[0] + 1)\n"
              "    if kwargs.get('object'):\n        return Mine()\n"
              "    if kwargs.get('fail'):\n        raise NotImplementedError('not yet')\n"
              "    return args, kwargs\n")
    echo = student_process.load(source, "echo")
    value = (np.arange(6, dtype=np.float32).reshape(2, 3), np.int64(5), {"k": (1, 2.5, None, "s")}, H200.limits)
    args, kwargs = echo(*value, flag=True)
    assert np.array_equal(args[0], value[0]) and args[0].dtype == np.float32 and args[1] == 5
    assert args[2] == value[2] and kwargs == {"flag": True}
    assert isinstance(args[3], wire.Opaque)        # the grader's dataclasses go there, never come back
    assert echo(41, call=lambda x: x * 2) == 84                 # a function passed runs here, called back
    assert type(echo(object=True)).__name__ == "Mine"
    with pytest.raises(NotImplementedError, match="not yet"):
        echo(fail=True)
    with pytest.raises(NameError):
        student_process.load("x = 1\n", "echo")

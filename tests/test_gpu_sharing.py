"""Grading processes sharing one GPU (grader.grading.isolation, grader.kernels.timing): the trusted
parent holds the GPU's lock shared for each grading process and, at the request of one whose check
times kernels, exclusively around each timed section; the process itself can neither see the lock nor
release it. On the emulator, with a lock file standing for the GPU's (GRADER_GPU_LOCK) and its
holdings logged."""
import fcntl
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.grading import isolation
from grader.kernels import timing
from grader.platform import sandbox, settings

REPO = Path(__file__).resolve().parent.parent
REFERENCE = (REPO / "solutions" / "smem-tiling.cu").read_text()
TIMED = """
import json, sys, time
from grader.kernels import timing
timing.held_by_parent("shared", json.loads(sys.argv[1]))
for _ in range(2):
    time.sleep(0.3)                     # GPU work beside other submissions'
    with timing.gpu_lock(wait_s=60):
        time.sleep(0.4)                 # timed alone
"""
GRADER = """
import json, subprocess, sys
from grader.kernels import timing
with timing.held_for_child(times=True, wait_s=60) as lock:
    child = subprocess.Popen([sys.executable, "-c", %r, json.dumps(lock.pipe)], pass_fds=lock.pipe)
    sys.exit(child.wait())
""" % TIMED


def holdings(log: Path) -> list[tuple[str, float, float, int]]:
    return [(m, float(s), float(e), int(p)) for m, s, e, p in (line.split() for line in log.read_text().splitlines())]


def overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_a_timed_section_holds_the_gpu_alone_and_only_while_it_times(tmp_path):
    lock, log = tmp_path / "gpu.lock", tmp_path / "held.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), GRADER_GPU_LOCK=str(lock), GRADER_GPU_LOCK_LOG=str(log))
    graders = [subprocess.Popen([sys.executable, "-c", GRADER], env=env) for _ in range(3)]
    assert all(g.wait(timeout=120) == 0 for g in graders)
    held = holdings(log)
    exclusive = [h for h in held if h[0] == "exclusive"]
    assert len(exclusive) == 6 and all(end - start >= 0.4 for _, start, end, _ in exclusive), held
    assert {h[3] for h in held} == {g.pid for g in graders}            # held by the parents, never by a child
    assert not [(a, b) for a in exclusive for b in held if a is not b and overlap(a, b)]
    shared = [h for h in held if h[0] == "shared"]
    assert any(overlap(a, b) for a in shared for b in shared if a[3] != b[3])      # they did grade at once
    for g in graders:       # each one's time outside its timed sections was shared, not exclusive
        spans = sorted(h[1:3] for h in held if h[3] == g.pid)
        assert sum(end - start for start, end in spans) >= 2 * 0.3 + 2 * 0.4


@pytest.fixture
def real_lock():
    """A lock file where the GPUs' are (outside /tmp, which a sandbox has of its own anyway)."""
    lock = timing.lock_dir() / f"test-{uuid.uuid4().hex}.lock"
    yield lock
    for path in (lock, lock.with_name(lock.name + ".gate")):
        path.unlink(missing_ok=True)


def refused(lock: Path, how: int) -> bool:
    other = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(other, how | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(other)


def sandboxed(probe: str, args, work: Path, held: timing.ChildLock) -> list[str]:
    """A Python probe as a grading process runs: in the sandbox, the parent's lock hidden."""
    return sandbox.wrap([sys.executable, "-I", "-c", probe, *map(str, args)], [str(work)], str(work),
                        hidden=sandbox.hidden_from_grading() + list(held.hidden))


def test_a_grading_process_can_neither_see_nor_release_its_parents_lock(monkeypatch, tmp_path, real_lock):
    lock = real_lock
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(lock)))
    probe = ("import fcntl, os, sys\npath = sys.argv[1]\ntry:\n    fd = os.open(path, os.O_RDONLY)\n"
             "except OSError as e:\n    print('unseen', type(e).__name__)\nelse:\n    fcntl.flock(fd, fcntl.LOCK_UN)\n"
             "    print('inode', os.fstat(fd).st_ino)\n")
    work = tmp_path / "work"
    work.mkdir()
    with timing.held_for_child(times=True) as held:
        assert held.mode == "shared" and held.pipe and str(lock) in held.hidden
        seen = subprocess.run(sandboxed(probe, [lock], work, held), capture_output=True, text=True,
                              timeout=60).stdout.split()
        assert seen and (seen[0] == "unseen" or int(seen[1]) != os.stat(lock).st_ino), seen
        assert refused(lock, fcntl.LOCK_EX), "the lock was released"      # still held: one that would time waits


def test_a_sandboxed_grading_process_gets_the_gpu_alone_over_its_pipe(monkeypatch, tmp_path, real_lock):
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(real_lock)))
    probe = ("import os, sys\nask, answer = int(sys.argv[1]), int(sys.argv[2])\n"
             "os.write(ask, b'X'); print(os.read(answer, 1).decode(), flush=True)\nsys.stdin.readline()\n"
             "os.write(ask, b'S'); print(os.read(answer, 1).decode(), flush=True)\n")
    work = tmp_path / "work"
    work.mkdir()
    with timing.held_for_child(times=True) as held:
        child = subprocess.Popen(sandboxed(probe, held.pipe, work, held), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, pass_fds=held.pipe)
        assert child.stdout.readline().strip() == "G"
        assert refused(real_lock, fcntl.LOCK_SH)             # alone: not even shared beside it
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "G"
        assert child.wait(timeout=60) == 0
        assert not refused(real_lock, fcntl.LOCK_SH) and refused(real_lock, fcntl.LOCK_EX)     # shared again


def test_the_parent_holds_the_lock_and_tells_the_grading_process(monkeypatch, tmp_path):
    lock, log = tmp_path / "gpu.lock", tmp_path / "held.log"
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(lock), gpu_lock_log=str(log)))
    jobs = []
    real = isolation._collect_held
    monkeypatch.setattr(isolation, "_collect_held", lambda *a: jobs.append(a[-1]) or real(*a))
    assert isolation.run_check("smem-tiling", "performance", REFERENCE).details.get("backend") == "emulator"
    assert isolation.run_check("smem-tiling", "compiles", REFERENCE).passed
    (timed, untimed) = jobs[-2:]
    assert timed.mode == untimed.mode == "shared" and timed.pipe and not untimed.pipe
    assert all(str(lock) in held.hidden for held in jobs)
    assert {pid for *_, pid in holdings(log)} == {os.getpid()}      # held here, never by the grading process


def test_a_lock_that_cannot_be_taken_is_the_graders_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(tmp_path / "no" / "gpu.lock")))
    result = isolation.run_check("smem-tiling", "compiles", REFERENCE)
    assert result.status == "grader error" and "the GPU's lock could not be taken" in result.message, result

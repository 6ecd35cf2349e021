"""Grading processes sharing one GPU (grader.grading.isolation, grader.kernels.timing): the trusted
parent holds the GPU's lock for each grading process, exclusively for a check that times kernels,
shared otherwise, and the process itself can neither see the lock nor release it. On the emulator,
with a lock file standing for the GPU's (GRADER_GPU_LOCK) and its holdings logged."""
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
GRADING = """
from pathlib import Path
from grader.grading import isolation
source = Path(%r).read_text()
for check in ("compiles", "performance", "compiles", "performance", "compiles"):
    isolation.run_check("smem-tiling", check, source)
"""


def holdings(log: Path) -> list[tuple[str, float, float, int]]:
    return [(m, float(s), float(e), int(p)) for m, s, e, p in (line.split() for line in log.read_text().splitlines())]


def overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_timing_checks_hold_the_gpu_alone_and_the_others_share_it(tmp_path):
    lock, log = tmp_path / "gpu.lock", tmp_path / "held.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), GRADER_GPU_LOCK=str(lock), GRADER_GPU_LOCK_LOG=str(log))
    script = GRADING % str(REPO / "solutions" / "smem-tiling.cu")
    workers = [subprocess.Popen([sys.executable, "-c", script], env=env) for _ in range(2)]
    assert all(w.wait(timeout=600) == 0 for w in workers)
    held = holdings(log)
    exclusive = [h for h in held if h[0] == "exclusive"]
    assert len(exclusive) == 4 and {h[3] for h in held} == {w.pid for w in workers}
    assert not [(a, b) for a in exclusive for b in held if a is not b and overlap(a, b)]
    shared = [h for h in held if h[0] == "shared"]
    assert any(overlap(a, b) for a in shared for b in shared if a[3] != b[3])      # the two did grade at once


@pytest.fixture
def real_lock():
    """A lock file where the GPUs' are (outside /tmp, which a sandbox has of its own anyway)."""
    lock = timing.lock_dir() / f"test-{uuid.uuid4().hex}.lock"
    yield lock
    for path in (lock, lock.with_name(lock.name + ".gate")):
        path.unlink(missing_ok=True)


def test_a_grading_process_can_neither_see_nor_release_its_parents_lock(monkeypatch, tmp_path, real_lock):
    lock = real_lock
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(lock)))
    probe = ("import fcntl, os, sys\npath = sys.argv[1]\ntry:\n    fd = os.open(path, os.O_RDONLY)\n"
             "except OSError as e:\n    print('unseen', type(e).__name__)\nelse:\n    fcntl.flock(fd, fcntl.LOCK_UN)\n"
             "    print('inode', os.fstat(fd).st_ino)\n")
    work = tmp_path / "work"
    work.mkdir()
    with timing.held_for_child(exclusive=True) as (mode, hidden):
        assert mode == "exclusive" and str(lock) in hidden
        command = sandbox.wrap([sys.executable, "-I", "-c", probe, str(lock)], [str(work)], str(work),
                               hidden=sandbox.hidden_from_grading() + hidden)
        seen = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout.split()
        assert seen and (seen[0] == "unseen" or int(seen[1]) != os.stat(lock).st_ino), seen
        other = os.open(lock, os.O_RDONLY)
        try:                                            # still held: another holder is refused
            try:
                import fcntl
                fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
                raise AssertionError("the lock was released")
            except BlockingIOError:
                pass
        finally:
            os.close(other)


def test_the_parent_holds_the_lock_and_tells_the_grading_process(monkeypatch, tmp_path):
    lock, log = tmp_path / "gpu.lock", tmp_path / "held.log"
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(lock), gpu_lock_log=str(log)))
    jobs = []
    real = isolation._collect_held
    monkeypatch.setattr(isolation, "_collect_held", lambda *a: jobs.append(a[-2:]) or real(*a))
    assert isolation.run_check("smem-tiling", "performance", REFERENCE).details.get("backend") == "emulator"
    assert isolation.run_check("smem-tiling", "compiles", REFERENCE).passed
    assert [mode for mode, _ in jobs][-2:] == ["exclusive", "shared"]
    assert all(str(lock) in paths for _, paths in jobs)
    assert {pid for *_, pid in holdings(log)} == {os.getpid()}      # held here, never by the grading process


def test_a_lock_that_cannot_be_taken_is_the_graders_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(tmp_path / "no" / "gpu.lock")))
    result = isolation.run_check("smem-tiling", "compiles", REFERENCE)
    assert result.status == "grader error" and "the GPU's lock could not be taken" in result.message, result

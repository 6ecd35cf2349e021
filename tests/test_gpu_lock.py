"""The GPU's lock (grader.kernels.timing.gpu_lock): processes grading at once
never time at the same time. Two real processes, a fake timed section, no GPU."""
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.kernels import timing

REPO = Path(__file__).resolve().parent.parent
SECTION = """
import sys, time
from grader.kernels import timing
path, log, shared = sys.argv[1], sys.argv[2], sys.argv[3] == "shared"
for _ in range(3):
    with timing.gpu_lock(path, shared=shared):
        start = time.monotonic()
        time.sleep(0.2)                     # the timed section
        end = time.monotonic()
    with open(log, "a") as f:
        f.write(f"{start} {end}\\n")
    time.sleep(0.01)
"""


def sections(tmp_path: Path, mode: str) -> list[tuple[float, float]]:
    """The (start, end) of every timed section of two processes started together."""
    lock, log = tmp_path / "gpu.lock", tmp_path / "sections.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", SECTION, str(lock), str(log), mode], env=env)
             for _ in range(2)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    return sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())


def overlaps(spans) -> int:
    return sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])


def test_two_processes_never_time_at_once(tmp_path):
    spans = sections(tmp_path, "exclusive")
    assert len(spans) == 6 and overlaps(spans) == 0


def test_shared_holders_do_overlap(tmp_path):
    """The same two processes under the shared lock: the measurement above can see an overlap."""
    spans = sections(tmp_path, "shared")
    assert len(spans) == 6 and overlaps(spans) > 0


def test_the_lock_waits_no_longer_than_asked_and_nests(tmp_path):
    lock = tmp_path / "gpu.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(lock)!r}, os.O_RDONLY | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('held', flush=True)\ntime.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(timing.GpuBusy, match="busy timing other submissions for 0.3 s"):
            with timing.gpu_lock(lock, wait_s=0.3):
                pass
        assert 0.3 <= time.monotonic() - started < 5
        with timing.gpu_lock(lock, shared=True):        # shared beside shared: granted
            pass
    finally:
        holder.kill()
        holder.wait()
    with timing.gpu_lock(lock, wait_s=1):
        with timing.gpu_lock(lock, wait_s=1):           # a lock inside a lock this process holds: the same one
            pass


def test_lock_files_live_where_every_grading_process_can_open_them():
    assert timing.LOCK_DIR.parent in (Path("/run/lock"), Path("/tmp"))
    folder = timing.lock_dir()
    assert folder.is_dir() and os.stat(folder).st_mode & 0o1777 == 0o1777


def _holder(lock: Path, mode: str) -> subprocess.Popen:
    """A process that takes the lock (through gpu_lock) and says so on stdout; it holds it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom grader.kernels import timing\n"
                             f"with timing.gpu_lock({str(lock)!r}, shared={mode == 'shared'}):\n"
                             "    print('held', flush=True)\n    time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    return proc


def _wait_until_gate_held(lock: Path, within_s: float = 60) -> None:
    """Until a process waits at the lock's gate (however slowly it starts on a busy machine)."""
    deadline = time.monotonic() + within_s
    fd = os.open(lock.with_name(lock.name + ".gate"), os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            fcntl.flock(fd, fcntl.LOCK_UN)
            time.sleep(0.05)
    finally:
        os.close(fd)
    raise AssertionError(f"no process waited at the gate within {within_s} s")


def test_a_waiting_timer_keeps_new_shared_holders_out(tmp_path):
    """Shared holders coming and going cannot starve a process waiting to time: once it waits, no new one enters."""
    lock = tmp_path / "gpu.lock"
    reader = _holder(lock, "shared")
    timer = None
    try:
        assert reader.stdout.readline().strip() == "held"
        timer = _holder(lock, "exclusive")
        _wait_until_gate_held(lock)                      # the timer waits for the reader
        with pytest.raises(timing.GpuBusy):
            with timing.gpu_lock(lock, wait_s=0.5, shared=True):
                pass
        reader.kill()
        reader.wait()
        assert timer.stdout.readline().strip() == "held"
    finally:
        for proc in (reader, timer):
            if proc is not None:
                proc.kill()
                proc.wait()
    with timing.gpu_lock(lock, wait_s=1, shared=True):
        pass


def test_a_process_whose_parent_holds_the_lock_opens_nothing(monkeypatch, tmp_path):
    missing = tmp_path / "not-here" / "gpu.lock"       # a folder it cannot see
    monkeypatch.setattr(timing, "_held", None)
    monkeypatch.setattr(timing, "_parent", None)
    timing.held_by_parent(timing.SHARED)
    with timing.gpu_lock(missing, shared=True):
        pass
    assert not missing.parent.exists()
    with pytest.raises(RuntimeError, match="times_kernels"):        # no pipe to ask for the GPU alone over
        with timing.gpu_lock(missing):
            pass


def test_each_holding_is_logged_where_asked(monkeypatch, tmp_path):
    from grader.platform import settings
    log = tmp_path / "held.log"
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock_log=str(log)))
    with timing.gpu_lock(tmp_path / "gpu.lock", shared=True):
        pass
    with timing.gpu_lock(tmp_path / "gpu.lock"):
        with timing.gpu_lock(tmp_path / "gpu.lock"):       # inside: not a holding of its own
            pass
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [line[0] for line in lines] == ["shared", "exclusive"]
    assert all(float(start) <= float(end) and int(pid) == os.getpid() for _, start, end, pid in lines)


def test_a_notebook_whose_parent_holds_the_lock_times_under_it(monkeypatch, tmp_path):
    """At autograde time the notebook's run holds the lock shared (SandboxedExecute): the notebook's own
    timings, shown and never graded, neither wait for it nor fail."""
    from grader.platform import settings
    monkeypatch.setattr(timing, "_held", None)
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock_held=timing.NOTEBOOK))
    timing.held_for_notebook()
    missing = tmp_path / "not-here" / "gpu.lock"
    with timing.gpu_lock(missing, wait_s=0.1):
        pass
    monkeypatch.setattr(settings, "_current", settings.current().with_(gpu_lock=str(missing)))
    with timing.held_for_child(times=True, wait_s=0.1) as held:      # a check the notebook runs: the same
        assert held.mode == timing.NOTEBOOK and not held.pipe
    assert not missing.parent.exists()

"""A class run interrupted (Ctrl-C, or `kill`'s SIGTERM) while its workers grade: each worker's attempt is killed, ends (what it
made removed) before the run does, and is not retried as a failed attempt would be."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import class_autograde, class_grading

REPO = Path(__file__).resolve().parent.parent

# Two workers, three submissions; an attempt is a marked process that sleeps (a stand-in for nbgrader's),
# logged as it starts and ends; the run is interrupted once both are under way.
RUN = r"""
import os, signal, subprocess, sys, threading, time
from pathlib import Path
from grader.course import class_autograde, class_grading

log, scratch, signum = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGINT, signal.default_int_handler)    # as at a terminal; not inherited as ignored, as
                                                            # it is under a background job's (`pytest &`)


def attempt(course, assignment, job, template, gpu, timeout, shared_gpu=False):
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         env={**os.environ, class_grading.JOB_MARK: job.scratch}, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with log.open("a") as f:
        f.write(f"start {job.student}\n")      # once its process runs: the interrupt's kill finds it
    code = p.wait()
    time.sleep(0.5)                         # its cleanup (a real attempt removes its folders) takes time
    with log.open("a") as f:
        f.write(f"end {job.student} {code}\n")
    return None if code == 0 else "killed"


class_grading.autograde_once = attempt
jobs = [class_grading.Job(f"s{i}", "key", str(scratch / f"s{i}")) for i in range(3)]
for j in jobs:
    os.makedirs(j.scratch)
workers = [class_autograde.Slot("a", ""), class_autograde.Slot("b", "")]


def interrupt_once_both_run():
    while log.read_text().count("start") < 2 if log.exists() else True:
        time.sleep(0.05)
    os.kill(os.getpid(), signum)


class Merged:
    def merge(self, job, result):
        print("merged", job.student, flush=True)


threading.Thread(target=interrupt_once_both_run, daemon=True).start()
try:
    class_autograde.run_local(Merged(), jobs, workers,
                              lambda job, slot: class_autograde._grade(scratch, "lab", scratch, None, job, slot))
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_ends_its_attempts_and_starts_no_other(tmp_path, signum):
    log = tmp_path / "attempts.log"
    try:
        p = subprocess.run([sys.executable, "-c", RUN, str(log), str(tmp_path), str(int(signum))], cwd=REPO,
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        for student in ("s0", "s1", "s2"):
            class_grading.kill_marked(str(tmp_path / student))      # an attempt started after the interrupt
    assert p.stdout.strip() == "interrupted", p.stdout + p.stderr
    lines = log.read_text().splitlines()
    assert sorted(lines) == ["end s0 -9", "end s1 -9", "start s0", "start s1"], lines


def test_an_interrupted_run_says_how_to_go_on(monkeypatch, capsys):
    """No traceback at the terminal: a line, and the exit status of a run ended by Ctrl-C."""
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(class_autograde, "autograde_class", interrupted)
    assert class_autograde.main(["course", "lab"]) == 130
    assert capsys.readouterr().out == ("interrupted: what was graded is in the gradebook; the same command grades "
                                       "the rest\n")

"""The Slurm array's id and its cancel, against stand-ins for sbatch's output and Slurm's commands (the real
ones: tests/test_class_autograde.py, on a local Slurm)."""
import os
import stat

from grader.course import slurm_array


def _commands(folder, squeue: str) -> None:
    """scancel that does nothing, and squeue that runs SQUEUE (a shell command), first on PATH."""
    for name, body in (("scancel", "exit 0"), ("squeue", squeue)):
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_job_id_is_what_sbatch_parsable_printed(tmp_path):
    assert slurm_array.job_id(tmp_path, 1) is None                    # not submitted yet
    (tmp_path / "sbatch-1.out").write_text("")
    assert slurm_array.job_id(tmp_path, 1) is None
    (tmp_path / "sbatch-1.out").write_text("4242\n")
    assert slurm_array.job_id(tmp_path, 1) == "4242"
    (tmp_path / "sbatch-2.out").write_text("4243;grading\n")            # ID;CLUSTER on a federation
    assert slurm_array.job_id(tmp_path, 2) == "4243"


def test_cancel_says_whether_slurm_confirmed_the_tasks_ended(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for squeue, confirmed in (("exit 0", True),                                       # the queue has none
                              ("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1", True),
                              ("echo 4242_1; exit 0", False),                         # a task still there
                              ("echo 'Unable to contact slurm controller' >&2; exit 1", False),
                              ("exec sleep 120", False)):                             # a controller not answering
        _commands(tmp_path, squeue)
        assert slurm_array.cancel("4242", wait=30 if confirmed else 1) is confirmed, squeue

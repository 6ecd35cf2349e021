"""A real Slurm on this machine for the tests: munged, slurmctld and slurmd
(Debian's munge and slurm-wlm packages) on localhost, configured in a
temporary folder (its own munge key and socket, its own ports, its own state),
stopped at the end. Where mknod is allowed, the node has 4 fake GPUs (character
devices with /dev/null's numbers) so that `--gres=gpu:1` is scheduled and Slurm
sets CUDA_VISIBLE_DEVICES per task.

Slurm missing: the test is skipped, except in CI (CI=true: .ci/run installs the
packages), where it fails.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")


@dataclass
class LocalSlurm:
    folder: Path
    env: dict
    gpus: list[str]

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                       for p in sorted((self.folder / "log").glob("*.log")))


def _fake_gpus(dev: Path, count: int) -> list[str]:
    dev.mkdir()
    try:
        for i in range(count):
            os.mknod(dev / f"gpu{i}", 0o666 | 0o020000, os.makedev(1, 3))
    except OSError:
        return []
    return [str(i) for i in range(count)]


def _config(folder: Path, host: str, gpus: list[str]) -> str:
    user = getpass.getuser()
    gres = f" Gres=gpu:{len(gpus)}" if gpus else ""
    return "\n".join([
        "ClusterName=grading", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", f"SlurmUser={user}", f"SlurmdUser={user}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={folder}/munge/socket",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/log/slurmctld.log", f"SlurmdLogFile={folder}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none", "ReturnToService=2",
        "GresTypes=gpu",
        # 4 tasks at once, as many as the local test's --workers 4, whatever the cores (config_overrides)
        "SlurmdParameters=config_overrides",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={max(4, os.cpu_count() or 1)}{gres} State=UNKNOWN",
        "PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


def _stop(pid_file: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text().strip()), 15)


@contextlib.contextmanager
def local_slurm():
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        message = f"Slurm is not installed ({', '.join(missing)} missing: apt-get install slurmctld slurmd slurm-client munge)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"   # noqa: E731
    # munged wants every folder above its socket open to all (pytest's are 0700), and a short path.
    folder = Path(tempfile.mkdtemp(prefix="grader-slurm-"))
    folder.chmod(0o755)
    for sub in ("munge", "state", "spool", "log"):
        (folder / sub).mkdir()
    key = folder / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    gpus = _fake_gpus(folder / "dev", 4)
    (folder / "slurm.conf").write_text(_config(folder, host, gpus))
    (folder / "gres.conf").write_text(f"Name=gpu File={folder}/dev/gpu[0-{len(gpus) - 1}]\n" if gpus else "")
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    slurm = LocalSlurm(folder, {"SLURM_CONF": env["SLURM_CONF"]}, gpus)
    started = []
    try:
        subprocess.run([sbin("munged"), f"--key-file={key}", f"--socket={folder}/munge/socket",
                        f"--pid-file={folder}/munge/pid", f"--log-file={folder}/log/munged.log",
                        f"--seed-file={folder}/munge/seed"], check=True, env=env, timeout=30)
        started.append(folder / "munge" / "pid")
        subprocess.run([sbin("slurmctld"), "-i"], check=True, env=env, timeout=30)
        started.append(folder / "slurmctld.pid")
        subprocess.run([sbin("slurmd")], check=True, env=env, timeout=30)
        started.append(folder / "slurmd.pid")
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True,
                                   timeout=30).stdout.strip()
            if state == "idle":
                break
            time.sleep(1)
        assert state == "idle", f"the local Slurm node is {state!r}, not idle:{slurm.logs()}"
        yield slurm
    finally:
        for pid_file in reversed(started):
            _stop(pid_file)
        time.sleep(1)
        shutil.rmtree(folder, ignore_errors=True)

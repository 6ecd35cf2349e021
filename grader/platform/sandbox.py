"""bubblewrap, as the grader uses it: a process that sees the whole file system
read-only but for the folders it is given, has no network, and lives in its
own process namespace (it can neither see nor signal the processes outside);
probed once per process, with the reason when it cannot be used.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

_state: tuple[str | None, str] | None = None


def bwrap_args(writable: list[str], chdir: str) -> list[str]:
    """The options of a sandbox in which only `writable` can be written."""
    args = ["--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc"]
    for folder in writable:
        args += ["--bind", folder, folder]
    return args + ["--unshare-net", "--unshare-ipc", "--unshare-pid", "--die-with-parent", "--chdir", chdir]


def bubblewrap() -> tuple[str | None, str]:
    """(the bwrap program, or None, and why): probed once per process by running Python in it."""
    global _state
    if _state is None:
        tool = shutil.which("bwrap")
        if tool is None:
            _state = (None, "bubblewrap is not installed (apt-get install bubblewrap): grading processes "
                            "can write wherever this user can and reach the network")
        else:
            with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
                try:
                    p = subprocess.run([tool, *bwrap_args([tmp], tmp), sys.executable, "-E", "-s", "-c", "pass"],
                                       capture_output=True, text=True, timeout=30)
                    ok, why = p.returncode == 0, p.stderr.strip()[:200]
                except (OSError, subprocess.TimeoutExpired) as e:
                    ok, why = False, str(e)
            _state = (tool, "bubblewrap: read-only file system but for a private folder, no network, "
                            "its own process namespace") if ok \
                else (None, f"bubblewrap cannot create a sandbox here ({why}; unprivileged user namespaces off?): "
                            "grading processes can write wherever this user can and reach the network")
    return _state


def wrap(command: list[str], writable: list[str], chdir: str) -> list[str]:
    """`command` inside a sandbox where bubblewrap works. Else, for root (a container without
    bubblewrap, whom non-dumpable processes do not stop), at least a process namespace of its own
    (util-linux's unshare); else `command` as it is. Wrapped, a command killed by a signal exits
    with 128 + the signal's number."""
    tool, _ = bubblewrap()
    if tool:
        return [tool, *bwrap_args(writable, chdir), *command]
    unshare = shutil.which("unshare")
    if unshare and hasattr(os, "geteuid") and os.geteuid() == 0:
        # A shell as the namespace's process 1 (which the kernel spares default-action signals), the
        # command its child: a SIGALRM past a GPU launch's budget must end the command.
        return [unshare, "--pid", "--fork", "--mount-proc", "--kill-child", "/bin/sh", "-c", '"$@"; exit $?', "sh",
                *command]
    return command

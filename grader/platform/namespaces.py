"""`python -I namespaces.py PLAN COMMAND...`: COMMAND as an unprivileged user in namespaces of its own,
for a grader that runs as root (grader.platform.sandbox says when; PLAN is its JSON).

Root makes the namespaces itself and then stops being root, because a user
namespace made by root (bubblewrap's) maps the sandbox to kernel uid 0: no
capabilities, but still the owner of every file and socket root owns. Here:

- new mount, PID and IPC namespaces (and network, unless PLAN allows it);
- every mount remounted read-only; a private, read-only /tmp (and /var/tmp, and
  the temporary folder); /dev with only null, zero, full, random, urandom, tty,
  a private /dev/shm, and the NVIDIA device nodes when PLAN asks for the GPU;
- each `hidden` path replaced by an empty folder or an empty file; each
  `readable` path the unprivileged user could not reach (a Python under
  /root) bound back, read-only, on an empty skeleton of its parents; each
  `writable` folder bound writable;
- a fresh /proc of the new PID namespace;
- then the command's process becomes PLAN's uid and gid with no supplementary
  groups, no capabilities (bounding and ambient sets emptied) and
  no_new_privs, and execs COMMAND.

Mounts made by root in this namespace are locked for a process that makes a
user namespace of its own later: it cannot unmount them to see what is
below, nor make a read-only one writable. Process 1 of the namespace is this
helper (the kernel spares process 1 the signals it does not handle; the
command, process 2, gets SIGALRM and SIGINT as usual); it ends with its
parent, and the namespace's every process with it.

Standard library only: it runs before the grader can be imported.
"""
import ctypes
import json
import os
import signal
import stat
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 38, 47, 4
MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
               "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target: str, fstype, flags: int, data=None) -> None:
    _call(libc.mount(None if source is None else source.encode(), target.encode(),
                     None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
                     None if data is None else data.encode()), f"mount {target}")


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, its per-mount flags) of every mount of this namespace."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")       # spaces come as \040
            flags = 0
            for option in fields[5].split(","):
                flags |= MOUNT_FLAGS.get(option, 0)
            found.append((point, flags))
    return found


def _fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _make(path: str, directory: bool) -> None:
    """A mount point at `path` (inside a tmpfs this helper mounted)."""
    if directory:
        os.makedirs(path, exist_ok=True)
    elif not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o444))


def _bind(fd: int, target: str, writable: bool, device: bool = False) -> None:
    _make(target, stat.S_ISDIR(os.fstat(fd).st_mode))
    mount(_fd_path(fd), target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if device else MS_NODEV)
          | (0 if writable else MS_RDONLY))


def set_up(plan: dict) -> None:
    """Every mount of the plan (in this process's new mount namespace, as root)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    opened = {p: os.open(p, os.O_PATH) for p in plan["writable"] + plan["readable"]}
    devices = [f"/dev/{d}" for d in DEVICES] + list(plan["devices"])
    device_fds = {d: os.open(d, os.O_PATH) for d in devices if os.path.exists(d)}
    for point, flags in _mount_points():
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            if not point.startswith(("/proc/", "/sys/")):   # replaced (/proc) or kernel-owned, read-only to uid 65534
                raise
    made = []                              # the tmpfs mounts made here, read-only once populated

    def tmpfs(path: str, mode: str = "0755") -> None:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=1m")
        made.append(path)

    for path in plan["private"]:
        tmpfs(path)
    for path in plan["masks"]:            # the home folder, parents uid 65534 cannot enter (a Python under /root)
        tmpfs(path)
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=1m")
    made.append("/dev")
    empty = "/dev/.empty"
    _make(empty, directory=False)
    for device, fd in device_fds.items():
        _bind(fd, device, writable=True, device=True)
    os.makedirs("/dev/shm")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    for path in plan["readable"]:
        _bind(opened[path], path, writable=False)
    for path in plan["hidden"]:
        if os.path.isdir(path):
            tmpfs(path)
        elif os.path.lexists(path):
            mount(empty, path, None, MS_BIND)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in plan["writable"]:
        _bind(opened[path], path, writable=True)
    for path in made:
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (0 if path == "/dev" else MS_NODEV))
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def become(uid: int, gid: int) -> None:
    """This process as uid/gid, for good: no groups, no capabilities, no way to gain privileges."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    os.setgroups([])
    for cap in range(last + 1):
        _call(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping a capability")
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)            # the permitted and effective capabilities go with uid 0
    _call(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _status(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _die_with(parent: int) -> None:
    _call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    if os.getppid() != parent:
        os._exit(137)


def _init(plan: dict, command: list[str]) -> None:
    """Process 1 of the new PID namespace: the mounts, then the command as its child, reaped until it ends."""
    _die_with(0)                           # its parent is outside the namespace: no pid here
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # an interrupt is the command's (its process group's)
    try:
        set_up(plan)
    except OSError as e:
        print(f"grader sandbox: {e}", file=sys.stderr)
        os._exit(125)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            _die_with(me)
            os.chdir(plan["chdir"])
            become(plan["uid"], plan["gid"])
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execvp(command[0], command)
        except OSError as e:
            print(f"grader sandbox: {command[0]}: {e}", file=sys.stderr)
        os._exit(126)
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(_status(status))


def main(argv: list[str]) -> int:
    plan, command = json.loads(argv[0]), argv[1:]
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if plan["network"] else CLONE_NEWNET)
    _die_with(os.getppid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _call(libc.unshare(flags), "unshare")
    except OSError as e:
        print(f"grader sandbox: {e}", file=sys.stderr)
        return 125
    child = os.fork()
    if child == 0:
        _init(plan, command)
    _, status = os.waitpid(child, 0)
    return _status(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

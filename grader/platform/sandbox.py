"""The sandbox of every process that runs a student's code or device code: a
notebook's kernel at autograde time, a grading process, a student's Python
function. Inside it a process has no privilege, whoever the grader runs as:

- it runs as uid 65534 with no capabilities and no_new_privs. As root the
  grader makes the namespaces itself and then drops to that uid for real
  (grader/platform/namespaces.py): a user namespace made by root maps the
  sandbox to kernel uid 0, the owner of all root's files and sockets. As
  another user, bubblewrap maps uid 65534 to that user (who can read what
  that user can), drops every capability and forbids further user
  namespaces, except to a grading process (`nested`), which makes the
  sandbox of a student's Python itself;
- its own mount, PID and IPC namespaces (and network, unless asked): it can
  neither see, signal nor trace a process outside; mounts are locked, so it
  can neither unmount what hides a path nor make a read-only mount writable;
- the file system read-only but for `writable`; /tmp and /var/tmp private and
  read-only; the home folder of the user running the grader (keys, tokens,
  Jupyter's connection files) empty but for what the process needs there: its
  Python and imports, the course, its compilers; /dev minimal (the NVIDIA
  device nodes only with `gpu`), a private /dev/shm;
- every path in `hidden` replaced by an empty folder or file; a symbolic link
  to it leads there too (paths are resolved), and so does /proc/PID/root (its
  own PID namespace). Another hard link to a hidden file is not found.

`hidden_from_student_code()` and `hidden_from_grading()` say what each kind
of process must not see (the answers, the reference solutions' builds, and
what the course layer `protect`s: the course's gradebook, source folder,
other students' folders). What a process may write, it sees.

How the sandbox is made here is probed once per process by running Python in
it; `description()` says what is in force, and why not where it is not.
`forbid_new_programs()` is the seccomp filter of a grading process that runs
device code natively (the emulator): see its docstring.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import platform
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.platform import COURSE_ROOT, settings

UNPRIVILEGED = 65534                      # uid and gid of everything sandboxed ("nobody")
HELPER = Path(__file__).with_name("namespaces.py")
# The reference solutions, the source notebooks (hidden tests) and the grader's answers (grader.grading.answers
# imports them only when a check needs them: the grader imports without them).
ANSWERS = (COURSE_ROOT / "solutions", COURSE_ROOT / "labs", COURSE_ROOT / "grader" / "references")

_state: tuple[str | None, str] | None = None
_protected: list[str] = []
_empty: str | None = None


# ---- who sees what -----------------------------------------------------------------------------
def protect(paths) -> None:
    """Hide these paths (the course layer's: a gradebook, a source folder, students' folders) from every
    sandboxed process this process starts."""
    for p in _resolved(paths):
        if p not in _protected:
            _protected.append(p)


def hidden_from_student_code() -> list[str]:
    """What a process running a student's code (a notebook's kernel, a student's function) must not see:
    the answers (ANSWERS, the reference solutions' builds) and everything protected."""
    answers = _resolved(ANSWERS) + _reference_builds()
    return answers + [p for p in _protected if p not in answers]


def hidden_from_grading() -> list[str]:
    """What a grading process must not see: the reference solutions' builds and everything protected. It
    reads the answers' sources itself (the reference kernels it compiles and times), and runs a student's
    Python in a process that does not."""
    builds = _reference_builds()
    return builds + [p for p in _protected if p not in builds]


def _reference_builds() -> list[str]:
    """The emulator cache's folder of the reference solutions' builds (settings.reference_builds), made
    here if missing: one made after a sandbox started would be seen in it. Only the references' own
    grading processes, which write there, see it."""
    path = settings.current().reference_builds
    with contextlib.suppress(OSError):
        os.makedirs(path, mode=0o700, exist_ok=True)
    return _resolved([path])


def _resolved(paths) -> list[str]:
    found = []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.lexists(real) and real not in found:
            found.append(real)
    return found


# ---- the plan of one sandbox ---------------------------------------------------------------------
def _outermost(paths: list[str]) -> list[str]:
    return [p for p in paths if not _under(p, [o for o in paths if o != p])]


def _private_temps() -> list[str]:
    return _outermost(_resolved(["/tmp", "/var/tmp", tempfile.gettempdir()]))


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _enterable(st: os.stat_result, uid: int, gid: int) -> bool:
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return bool((st.st_mode >> shift) & 1)


def _blocking_parent(path: str, uid: int, gid: int) -> str | None:
    """The first folder on the way to `path` that uid cannot enter, or None."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = str(Path(*parts[:i]))
        try:
            if not _enterable(os.stat(folder), uid, gid):
                return folder
        except OSError:
            return None
    return None


def _interpreter_paths() -> list[str]:
    """What a sandboxed Python of this installation reads: its prefixes, its import path, the course root."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             str(COURSE_ROOT)]
    found += [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    return _resolved(found)


def _home(temps: list[str], writable: list[str]) -> list[str]:
    """The home folder of the user running the grader (its keys, tokens, other courses): $HOME's and the
    password database's, where each is one to mask: not /, not in a private /tmp, not a folder the process
    writes."""
    found = [os.path.expanduser("~")]
    with contextlib.suppress(KeyError):
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    return _outermost([h for h in _resolved(found)
                       if os.path.isdir(h) and h != "/" and not _under(h, temps + writable)])


def _library_paths() -> list[str]:
    return [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if os.path.isabs(p)]


def plan(writable, chdir: str, hidden=(), gpu: bool = False, network: bool = False, readable=(),
         uid: int = UNPRIVILEGED, nested: bool = False) -> dict:
    """The sandbox as data (grader/platform/namespaces.py reads it). `readable`: paths the process needs
    besides the interpreter's and its libraries'; those uid cannot reach, that lie in a private /tmp or in
    the masked home folder, are bound back. `nested`: the process may make sandboxes of its own (a
    grading process, for a student's Python)."""
    temps = _private_temps()
    writable = _resolved(writable)
    home = _home(temps, writable)
    masks, bound = list(home), []
    for path in _resolved([*readable, *_interpreter_paths(), *_library_paths()]):
        if _under(path, writable) or any(_under(h, [path]) for h in home):    # never the whole home (a cwd)
            continue
        blocking = None if _under(path, temps) else _blocking_parent(path, uid, uid)
        if blocking is not None:
            masks = _outermost([*masks, blocking])
        if blocking is not None or _under(path, temps + masks):
            bound.append(path)
    bound = _outermost(bound)
    hidden = [h for h in _outermost(_resolved(hidden)) if not _under(h, writable)]     # what it writes, it sees
    return {"writable": writable, "readable": bound, "hidden": hidden, "private": temps,
            "masks": masks, "devices": sorted(glob.glob("/dev/nvidia*")) if gpu else [], "network": network,
            "chdir": os.path.realpath(chdir), "uid": uid, "gid": uid, "nested": nested}


def _bwrap_args(p: dict) -> list[str]:
    """bubblewrap's options for plan `p` (run as an ordinary user: its user namespace maps uid 65534 to it)."""
    args = ["--unshare-user", "--uid", str(p["uid"]), "--gid", str(p["gid"]), "--cap-drop", "ALL",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    if not p["nested"]:
        args.append("--disable-userns")
    if not p["network"]:
        args.append("--unshare-net")
    for device in p["devices"]:
        args += ["--dev-bind", device, device]
    made = list(p["private"]) + list(p["masks"])
    for folder in made:
        args += ["--tmpfs", folder]
    for path in p["readable"]:
        args += ["--ro-bind", path, path]
    for path in p["hidden"]:
        if _under(path, p["private"]) and not _under(path, p["readable"] + p["writable"]):
            continue                       # not there anyway
        if os.path.isdir(path):
            args += ["--tmpfs", path]
            made.append(path)
        else:
            args += ["--ro-bind", _empty_file(), path]
    for path in p["writable"]:
        args += ["--bind", path, path]
    for folder in made:
        args += ["--remount-ro", folder]
    return args + ["--chdir", p["chdir"]]


def _empty_file() -> str:
    global _empty
    if _empty is None or not os.path.exists(_empty):
        fd, _empty = tempfile.mkstemp(prefix="grader-empty-")
        os.close(fd)
        os.chmod(_empty, 0o444)
    return _empty


def _give(folder: str, uid: int) -> None:
    """Make `folder` (and what it holds) uid's, so that a sandboxed process can write there (as root)."""
    st = os.stat(folder)
    if st.st_mode & stat.S_IWOTH or st.st_uid == uid:
        return
    os.chown(folder, uid, uid)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def _command(p: dict, command: list[str], tool: str) -> list[str]:
    if tool == "namespaces":
        for folder in p["writable"]:
            _give(folder, p["uid"])
        return [sys.executable, "-I", str(HELPER), json.dumps(p), *command]
    return [shutil.which("bwrap"), *_bwrap_args(p), *command]


def wrap(command: list[str], writable, chdir: str, hidden=(), gpu: bool = False, network: bool = False,
         readable=(), nested: bool = False) -> list[str]:
    """`command` in a sandbox where only `writable` can be written and `hidden` cannot be seen (see the
    module's docstring); `command` as it is where no sandbox can be made (description() says why).
    Wrapped, a command killed by a signal exits with 128 + the signal's number."""
    tool, _ = mechanism()
    if tool is None:
        return list(command)
    return _command(plan(writable, chdir, hidden, gpu, network, readable, nested=nested), list(command), tool)


def mechanism() -> tuple[str | None, str]:
    """("namespaces" or "bubblewrap", what is in force), or (None, why there is no sandbox); probed once
    per process by running Python in the sandbox."""
    global _state
    if _state is None:
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        tool = "namespaces" if root else "bubblewrap" if shutil.which("bwrap") else None
        if tool is None:
            _state = (None, "no sandbox: bubblewrap is not installed (apt-get install bubblewrap), so processes "
                            "running students' code run as this user, can read what it can and reach the network")
            return _state
        with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
            probe = [sys.executable, "-I", "-c", f"import os, sys; sys.exit(os.getuid() != {UNPRIVILEGED})"]
            try:
                p = subprocess.run(_command(plan([tmp], tmp), probe, tool), capture_output=True, text=True,
                                   timeout=60)
                ok, why = p.returncode == 0, (p.stderr.strip() or f"exit status {p.returncode}")[-300:]
            except (OSError, subprocess.TimeoutExpired) as e:
                ok, why = False, str(e)
        if ok and root:
            _state = (tool, f"namespaces made by the grader as root, then uid {UNPRIVILEGED} without capabilities "
                            "(no_new_privs, empty bounding set): read-only file system but for the process's own "
                            "folders, the answers, the course's gradebook, other students' folders and the home folder "
                            "hidden, private /tmp and /dev, its own PID, IPC and network namespaces")
        elif ok:
            _state = (tool, f"bubblewrap: uid {UNPRIVILEGED} in a user namespace mapped to this user, no "
                            "capabilities, no further user namespaces for student code, read-only file system but "
                            "for the process's own folders, the answers, the course's gradebook, other students' "
                            "folders and this user's home folder hidden, private /tmp and /dev, its own PID, IPC and "
                            "network namespaces")
        elif root:
            _state = (None, f"no sandbox: the grader runs as root and cannot make namespaces here ({why}; a "
                            "container without CAP_SYS_ADMIN?), so processes running students' code run as root")
        else:
            _state = (None, f"no sandbox: bubblewrap cannot create one here ({why}; unprivileged user "
                            "namespaces off?), so processes running students' code run as this user")
    return _state


def description() -> str:
    return mechanism()[1]


# ---- the seccomp filter of a grading process -------------------------------------------------------
# System call numbers (x86_64, aarch64) of what device code has no business doing: new programs and
# processes, mounts and namespaces, tracing or reading another process, loading kernel code, changing
# identity.
_ARCHES = {
    "x86_64": (0xC000003E, 317, 56, 435, {
        "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "unshare": 272, "setns": 308, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "kexec_load": 246, "kexec_file_load": 320, "bpf": 321, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "setuid": 105, "setgid": 106, "setreuid": 113,
        "setregid": 114, "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123, "setgroups": 116,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442}),
    "aarch64": (0xC00000B7, 277, 220, 435, {
        "execve": 221, "execveat": 281, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97,
        "setns": 268, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kexec_load": 104,
        "kexec_file_load": 294, "bpf": 280, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "setuid": 146, "setgid": 144, "setreuid": 145, "setregid": 143, "setresuid": 147, "setresgid": 149,
        "setfsuid": 151, "setfsgid": 152, "setgroups": 159, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442}),
}
KILL, ALLOW, ENOSYS_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000 | 38     # SECCOMP_RET_*
CLONE_THREAD = 0x00010000
FORBIDDEN = "a system call device code never makes (a new program or process, a mount, tracing another process)"
_locked = False


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def _filter(arch: str) -> list[tuple[int, int, int, int]]:
    audit, _, clone, clone3, numbers = _ARCHES[arch]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [(load, 0, 0, 4), (jeq, 1, 0, audit), (ret, 0, 0, KILL), (load, 0, 0, 0)]
    if arch == "x86_64":
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, KILL)]             # the x32 calls
    prog += [(jeq, 0, 1, clone3), (ret, 0, 0, ENOSYS_ERRNO)]           # its flags cannot be read: C libraries
    prog += [(jeq, 0, 4, clone), (load, 0, 0, 16), (jset, 1, 0, CLONE_THREAD),   # fall back to clone
             (ret, 0, 0, KILL), (ret, 0, 0, ALLOW)]                     # a thread, not a new process
    for number in numbers.values():
        prog += [(jeq, 0, 1, number), (ret, 0, 0, KILL)]
    return prog + [(ret, 0, 0, ALLOW)]


def forbid_new_programs() -> None:
    """From now on, this process (every thread) is killed by SIGSYS when any of its threads starts a
    program or a process, mounts, makes a namespace, traces or reads another process, loads kernel
    code or changes identity; threads still start. For a grading process once it has compiled what it
    will run: on the emulator the student's device code is native code in this process, and the
    emulator's policy (grader/emulator/policy.py) is the first barrier, this the second. A small
    classic-BPF program through prctl and seccomp(2), with ctypes: the machines that grade need no
    library for it (libseccomp's Python binding is not on PyPI, and the GPU machine reaches no
    registry). Raises OSError where the kernel refuses it, NotImplementedError on another architecture."""
    global _locked
    if _locked:
        return
    arch = platform.machine()
    if arch not in _ARCHES or not sys.platform.startswith("linux"):
        raise NotImplementedError(f"no seccomp filter for {arch}")
    instructions = [_Instruction(*i) for i in _filter(arch)]
    array = (_Instruction * len(instructions))(*instructions)
    program = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:                                   # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, program): every thread, at once
    if libc.syscall(_ARCHES[arch][1], 1, 1, ctypes.byref(program)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
    _locked = True

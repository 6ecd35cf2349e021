"""Run inside a sandbox by tests/test_sandbox.py: tries what a hostile submission would, prints what happened
as JSON. argv: a JSON object {"hidden_file", "hidden_dir", "link", "outside_file", "writable", "pid"}."""
import ctypes
import json
import os
import subprocess
import sys

arg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
out = {}


def attempt(name, f):
    try:
        out[name] = ["ok", f()]
    except OSError as e:
        out[name] = ["denied", e.strerror]


def mount_call(source, target, fstype, flags):
    if libc.mount(source, target.encode(), fstype, ctypes.c_ulong(flags), None) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def umount(target):
    if libc.umount2(target.encode(), 2) != 0:          # MNT_DETACH
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


status = dict(line.split(":", 1) for line in read("/proc/self/status").splitlines() if ":" in line)
out["uid"], out["cap_eff"], out["no_new_privs"] = os.getuid(), status["CapEff"].strip(), status["NoNewPrivs"].strip()
attempt("read_hidden_file", lambda: read(arg["hidden_file"]))
attempt("list_hidden_dir", lambda: os.listdir(arg["hidden_dir"]))
attempt("read_through_link", lambda: read(arg["link"]))
attempt("read_through_proc_root", lambda: read("/proc/self/root" + arg["hidden_file"]))
attempt("umount_hidden", lambda: umount(arg["hidden_file"]))
attempt("remount_root_rw", lambda: mount_call(None, "/", None, 32 | 4096))          # MS_REMOUNT | MS_BIND
attempt("write_outside", lambda: open(arg["outside_file"], "w").write("x"))
attempt("write_tmp", lambda: open("/tmp/planted", "w").write("x"))
attempt("chmod_outside", lambda: os.chmod(arg["outside_file"], 0o777))
attempt("write_own", lambda: open(os.path.join(arg["writable"], "mine"), "w").write("x"))
attempt("signal_outside", lambda: os.kill(arg["pid"], 0))
attempt("ptrace_outside", lambda: None if libc.ptrace(16, arg["pid"], None, None) == 0 else
        (_ for _ in ()).throw(OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))))   # PTRACE_ATTACH
attempt("dev", lambda: sorted(os.listdir("/dev")))
# A user namespace of its own (where it may be made) gives capabilities there, not over the mounts it got.
p = subprocess.run(["unshare", "-U", "-r", "-m", "sh", "-c", f"umount -l {arg['hidden_file']}; "
                    f"mount -o remount,rw,bind /; cat {arg['hidden_file']}; echo > {arg['outside_file']}"],
                   capture_output=True, text=True)
out["nested_namespace"] = p.stdout
print(json.dumps(out))

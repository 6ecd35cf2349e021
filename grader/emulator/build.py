"""Compile CUDA C for the emulator: the host C++ compiler builds a shared
library; where nvcc is on PATH it also compiles the source for a real GPU,
catching CUDA-only mistakes and reporting real register and shared-memory use.

Both results are cached by a key, a hash of everything that goes into them
(source, options, compiler, runtime), and verified on load: the key is
compiled into the library itself (BUILD_KEY_MARK + key, read from the file's
bytes before anything loads it) and the metadata next to it records the key
and the library's SHA-256. A library copied over another key's entry, or
edited, is rebuilt, never loaded; what is loaded is a private copy of the
verified bytes (_private_copy). Graders configure a private cache folder
of their own (grader.grading.isolation), so that nothing a notebook
writes into the shared cache is ever loaded by a grading process."""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import config, policy

RUNTIME_DIR = Path(__file__).parent / "runtime"
STUB_INCLUDE_DIR = RUNTIME_DIR / "include"
PYCUDA_INCLUDE_DIR = RUNTIME_DIR / "pycuda-include"   # PyCUDA's own headers, for nvcc and the host compiler alike
RUNTIME_SOURCES = ("runtime.cpp", "fiber.cpp", "analysis.cpp")
RUNTIME_HEADERS = ("emu_abi.h", "cuda_emu.h", "fiber.h", "runtime.h", "analysis.h")
RUNTIME_EXPORTS = "exports.map"          # the symbols kernels and ctypes see; the rest is local
RUNTIME_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-U_FORTIFY_SOURCE")
# Analysis builds: a hook before every load and store, and line numbers;
# no scalar replacement, so that a float4 load stays one 16-byte access.
ANALYSIS_FLAGS = ("-O1", "-gdwarf-4", "-fno-tree-sra", "-fsanitize=kernel-address", "--param", "asan-instrumentation-with-call-threshold=0",
                  "--param", "asan-globals=0", "--param", "asan-stack=0")
SOURCE_NAME = policy.SOURCE_NAME
NVCC_DEPENDENCIES = "kernel.d"          # the files nvcc's device pass opened (its preprocessor's -MD)
NVCC_ARCH = "sm_90"             # the H200's, which PyCUDA compiles for there unless SourceModule is given an arch
_ARCH_OPTION = re.compile(r"^(?:-arch|--gpu-architecture)(?:=(.+))?$")
BUILD_KEY_MARK = b"GRADER-EMU-BUILD-KEY:"
# A module's references to its own functions and variables bind inside it:
# otherwise a kernel or __device__ function named like an exported C library
# symbol (step, index, sleep, read, ...) would resolve to the library's.
MODULE_LINK_FLAGS = ("-Wl,-Bsymbolic",)
# A local variable never initialised holds a pattern (GCC's 0xFE bytes: about -1.7e38 as a float), not what the
# thread run before on the same stack left there: on a GPU each thread has registers of its own.
LOCALS_PATTERN = "-ftrivial-auto-var-init=pattern"


class BuildError(Exception):
    """The kernel source does not compile; `log` holds the compiler's message."""

    def __init__(self, message: str, log: str, command: list[str] | None = None, emulator_only: bool = False,
                 refusals: list[policy.Finding] | None = None):
        super().__init__(message)
        self.log = log
        self.command = command
        self.emulator_only = emulator_only     # nvcc accepts the source: a limit of the emulator
        self.refusals = refusals or []         # the source policy's findings (policy.Finding), when it refused


@dataclass
class KernelResources:
    """What ptxas reports for one kernel (from nvcc, when it is available)."""
    registers: int = 0
    shared_bytes: int = 0
    local_bytes: int = 0
    const_bytes: int = 0
    spill_bytes: int = 0


@dataclass
class BuiltModule:
    library: Path
    nvcc_log: str = ""
    resources: dict[str, KernelResources] = field(default_factory=dict)
    nvcc_checked: bool = False
    nvcc_outside: list[str] | None = None      # files nvcc opened outside the toolkit and the system's headers


def cache_dir() -> Path:
    return config.cache_dir()


def cxx() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"


def nvcc() -> str | None:
    if not config.nvcc_wanted():
        return None
    return shutil.which("nvcc")


def compiler_roots() -> list[str]:
    """The installation folders of the compilers a build runs (bin/..): what a sandboxed build must see."""
    tools = [shutil.which(cxx()), shutil.which("nvcc")]       # nvcc: PyCUDA's too, on a GPU
    return [str(Path(os.path.realpath(t)).parent.parent) for t in tools if t]


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode() if not isinstance(part, bytes) else part)
        h.update(b"\0")
    return h.hexdigest()[:24]


@functools.lru_cache(maxsize=None)
def _common_flags(compiler: str) -> tuple[str, ...]:
    """The flags of every kernel build; LOCALS_PATTERN where the compiler knows it (GCC 12+, clang)."""
    try:
        known = subprocess.run([compiler, LOCALS_PATTERN, "-x", "c++", "-fsyntax-only", "-"], input="",
                               capture_output=True, timeout=60).returncode == 0
    except OSError:
        known = False
    return ("-std=gnu++17", "-fPIC", "-fstack-clash-protection", "-fno-strict-aliasing", "-U_FORTIFY_SOURCE",
            *((LOCALS_PATTERN,) if known else ()))


@functools.lru_cache(maxsize=None)
def _compiler_id(cmd: str) -> str:
    try:
        return subprocess.run([cmd, "--version"], capture_output=True, text=True, timeout=60).stdout.split("\n")[0]
    except OSError:
        return cmd


def atomic_write(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all (written beside it, then renamed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_definition(key: str, name: str) -> str:
    """C source of a string holding the build key, kept in the library (`used`)."""
    return (f'extern "C" __attribute__((used, visibility("hidden"))) const char {name}[] = '
            f'"{BUILD_KEY_MARK.decode()}{key}";\n')


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified_bytes(lib: Path, key: str, meta: Path | None = None) -> bytes | None:
    """The cached library's bytes when it is the build of `key`: the key
    compiled into it, and (with `meta`) the key and the library's SHA-256
    recorded there; None otherwise."""
    try:
        data = lib.read_bytes()
        if BUILD_KEY_MARK + key.encode() + b"\0" not in data:
            return None
        if meta is None:
            return data
        recorded = json.loads(meta.read_text())
        ok = recorded.get("key") == key and recorded.get("sha256") == hashlib.sha256(data).hexdigest()
        return data if ok else None
    except (OSError, ValueError, AttributeError):
        return None


def verified(lib: Path, key: str, meta: Path | None = None) -> bool:
    return _verified_bytes(lib, key, meta) is not None


_loaded_dir: str | None = None
_private: dict[str, Path] = {}


def _forget_private_copies() -> None:
    """In a forked child (a process pool's worker): its copies go to a folder inside its parent's, which
    goes with the parent's; written into the parent's own, a library would rewrite the file that the
    parent, or a sibling, has loaded."""
    global _loaded_dir
    if _loaded_dir is not None:
        _loaded_dir = os.path.join(_loaded_dir, f"child-{os.getpid()}")
    _private.clear()


os.register_at_fork(after_in_child=_forget_private_copies)


def _remove_folder(folder: str, owner: int) -> None:
    if os.getpid() == owner:        # a forked child inherits the handler, not the folder
        shutil.rmtree(folder, True)     # unlinking a loaded library is safe


_OWNER = "owner.lock"       # locked by the process that made the folder, until it ends, however it ends


def _new_loaded_dir() -> str:
    """This process's folder of private copies. It first removes the folders of processes that ended
    without removing theirs (killed: a hanging notebook kernel restarted), which a lock no process holds
    any more tells apart; a forked child holds its parent's lock."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "grader-loaded-*")):
        _remove_if_abandoned(folder)
    folder = tempfile.mkdtemp(prefix="grader-loaded-")
    fd = os.open(os.path.join(folder, "new.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)             # fd never closed: the lock lasts as long as the process
    os.rename(os.path.join(folder, "new.lock"), os.path.join(folder, _OWNER))     # seen by others once locked
    return folder


def _remove_if_abandoned(folder: str) -> None:
    try:
        fd = os.open(os.path.join(folder, _OWNER), os.O_RDWR)
    except OSError:
        return                      # not yet locked, or not this user's
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shutil.rmtree(folder, True)
    except OSError:
        pass                        # its owner lives
    finally:
        os.close(fd)


def _private_copy(data: bytes, name: str) -> Path:
    """The verified bytes in a file of this process's own, which is what gets
    loaded: a cache entry rewritten later (or between verification and
    loading) can neither change nor crash a module this process has loaded."""
    global _loaded_dir
    digest = hashlib.sha256(data).hexdigest()
    path = _private.get(digest)
    if path is not None and path.exists():
        return path
    if _loaded_dir is not None and not os.path.isdir(_loaded_dir):
        with contextlib.suppress(OSError):      # a forked child's, unless its parent's folder is gone
            os.mkdir(_loaded_dir)
    if _loaded_dir is None or not os.path.isdir(_loaded_dir):
        _loaded_dir = _new_loaded_dir()
        atexit.register(_remove_folder, _loaded_dir, os.getpid())
    folder = Path(_loaded_dir, digest[:24])
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    _private[digest] = path
    return path


class _Started:
    """A command started in the background (no thread: a build may come from a
    thread that outlives the main script, when no new thread pool can start)."""

    def __init__(self, cmd: list[str], cwd: str, timeout: float = 300):
        self.cmd, self.timeout = cmd, timeout
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> subprocess.CompletedProcess:
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return subprocess.CompletedProcess(self.cmd, 1, "", f"{self.cmd[0]} did not finish within "
                                                                 f"{self.timeout:.0f} s\n")
        return subprocess.CompletedProcess(self.cmd, self.proc.returncode, out, err)


def _run(cmd: list[str], cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return _Started(cmd, cwd, timeout).result()


def _runtime_key() -> str:
    sources = b"".join((RUNTIME_DIR / f).read_bytes() for f in RUNTIME_SOURCES + RUNTIME_HEADERS + (RUNTIME_EXPORTS,))
    return _digest(sources, RUNTIME_FLAGS, _compiler_id(cxx()))


def runtime_library() -> Path:
    """The runtime shared library: the prebuilt one configured (config.configure(runtime=...)) when its
    bytes have the recorded SHA-256, else built once per cache folder and source version."""
    prebuilt = config.prebuilt_runtime()
    if prebuilt is not None:
        try:
            data = Path(prebuilt[0]).read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() == prebuilt[1]:
            return _private_copy(data, Path(prebuilt[0]).name)
    key = _runtime_key()
    lib = cache_dir() / f"libcudaemu-{key}.so"
    meta = lib.with_suffix(".json")
    data = _verified_bytes(lib, key, meta) if lib.exists() else None
    if data is not None:
        return _private_copy(data, lib.name)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "libcudaemu.so"
        Path(tmp, "build_key.cpp").write_text(_key_definition(key, "emu_runtime_build_key"))
        cmd = [cxx(), *RUNTIME_FLAGS, f"-Wl,--version-script={RUNTIME_DIR / RUNTIME_EXPORTS}",
               *[str(RUNTIME_DIR / f) for f in RUNTIME_SOURCES], str(Path(tmp, "build_key.cpp")), "-o", str(out)]
        proc = _run(cmd, tmp)
        if proc.returncode != 0:
            raise BuildError("the emulator runtime does not compile", proc.stderr, cmd)
        data = out.read_bytes()
        atomic_write(lib, data)
        atomic_write(meta, json.dumps({"key": key, "sha256": hashlib.sha256(data).hexdigest()}).encode())
    return _private_copy(data, lib.name)


def _header_bytes() -> bytes:
    """The runtime's headers and the course's: what every build and every verdict of the policy reads."""
    return _read_headers(RUNTIME_DIR, STUB_INCLUDE_DIR, PYCUDA_INCLUDE_DIR)


@functools.lru_cache(maxsize=None)
def _read_headers(runtime: Path, *folders: Path) -> bytes:
    return b"".join((runtime / f).read_bytes() for f in RUNTIME_HEADERS) + b"".join(
        p.read_bytes() for d in folders for p in sorted(d.iterdir()))


@functools.lru_cache(maxsize=None)
def _policy_bytes() -> bytes:
    return Path(policy.__file__).read_bytes()


# ---- the runtime's header, precompiled -------------------------------------------
# Every build starts by parsing cuda_emu.h and the standard headers it includes, about half the compile
# of a small kernel. A compile that finds cuda_emu.h.gch before cuda_emu.h on its include path uses it
# where it matches the compile's options and macros, and reads the header itself where it does not.
HEADER_KINDS = {"runs": ("-O2",), "analysed": ANALYSIS_FLAGS}


def precompiled_headers() -> Path | None:
    """The folder of cuda_emu.h precompiled for each kind of build (HEADER_KINDS), in the cache: the one
    configured (config.configure(headers=...)) where there is one, else built here when missing, except in
    a process handed its runtime (a grading process, which is handed its headers too or goes without)."""
    given = config.prebuilt_headers()
    if given is not None:
        return Path(given)
    if config.prebuilt_runtime() is not None:
        return None
    key = _digest(_header_bytes(), HEADER_KINDS, _common_flags(cxx()), _compiler_id(cxx()))
    folder = cache_dir() / f"headers-{key}"
    for kind, extra_flags in HEADER_KINDS.items():
        if not os.path.exists(folder / kind / "cuda_emu.h.gch"):
            _precompile(folder / kind, extra_flags)
    return folder


def _precompile(folder: Path, extra_flags) -> None:
    """cuda_emu.h.gch in `folder`, compiled with the flags of a build without options (none where that
    fails, or where this process cannot write the cache: the builds then read the header)."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            out = Path(tmp, "cuda_emu.h.gch")
            proc = _run([cxx(), "-x", "c++-header", *_flags(extra_flags, [], []), str(RUNTIME_DIR / "cuda_emu.h"),
                         "-o", str(out)], tmp)
            if proc.returncode == 0:
                os.replace(out, folder / out.name)


def _header_flags(extra_flags) -> list[str]:
    """The include flag that puts the precompiled runtime header for these flags first, where there is one
    this process can read."""
    folder = precompiled_headers()
    kind = next(k for k, flags in HEADER_KINDS.items() if flags == tuple(extra_flags))
    pch = folder / kind / "cuda_emu.h.gch" if folder else None
    return [f"-I{pch.parent}"] if pch and os.access(pch, os.R_OK) else []


# ---- from user source to a translation unit ---------------------------------

_EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?P<decl>[^;\[\]]*?)\s*(?P<name>\w+)\s*\[\s*\]\s*;")
_ALIGN = re.compile(r"__align__\s*\(\s*\w+\s*\)|alignas\s*\(\s*\w+\s*\)|__attribute__\s*\(\(.*?\)\)")


def _rewrite_dynamic_shared(source: str) -> str:
    """`extern __shared__ T name[];` becomes a pointer to the launch's dynamic
    shared memory (same line, so line numbers stay the student's)."""
    def repl(m: re.Match) -> str:
        decl = _ALIGN.sub("", m.group("decl")).strip()
        return f"__EMU_DYNAMIC_SHARED({decl}, {m.group('name')});"
    return _EXTERN_SHARED.sub(repl, source)


_SHARED_DECL = re.compile(r"(?<!extern )\b__shared__\s+(?P<type>[\w\s:<>,*()]*?)\s*\b(?P<name>\w+)\s*"
                          r"(?P<dims>(?:\[[^\]\[;]*\]\s*)*);")


def _rewrite_shared(source: str) -> str:
    """`__shared__ T name[dims];` becomes __EMU_SHARED_VAR (cuda_emu.h), on the
    same line; declarations it does not recognise stay as they are. Every build
    compiles this same text (cuda_emu.h tells the analysis build's expansion
    apart), so that a source cannot tell an analysis build from the one that runs."""
    def repl(m: re.Match) -> str:
        type_ = m.group("type").strip()
        if not type_ or "(" in _ALIGN.sub("", type_):
            return m.group(0)
        return f"__EMU_SHARED_VAR({type_}, {_ALIGN.sub('', type_).strip()}, {m.group('name')}, {m.group('dims')});"
    return _SHARED_DECL.sub(repl, source)


def _user_unit(source: str, no_extern_c: bool) -> str:
    body = _rewrite_shared(_rewrite_dynamic_shared(source))
    head = '#include "cuda_emu.h"\n'
    if not no_extern_c:
        head += 'extern "C" {\n'
    tail = "\n}\n" if not no_extern_c else "\n"
    return f'{head}#line 1 "{SOURCE_NAME}"\n{body}{tail}'


_DEFINE_OPTS = re.compile(r"^-(D|U|I)(.*)$")


def host_flags(options: list[str], include_dirs: list[str]) -> list[str]:
    """The options that mean the same to the host compiler: -D, -U, -I."""
    flags: list[str] = []
    it = iter(options)
    for opt in it:
        m = _DEFINE_OPTS.match(opt)
        if m:
            value = m.group(2) or next(it, "")
            flags.append(f"-{m.group(1)}{value}")
    flags += [f"-I{d}" for d in include_dirs]
    return flags


@dataclass
class Declarations:
    kernels: list[str]      # C++ expressions naming kernels: "sgemm", "tiled<32>"
    variables: list[str]    # __constant__ and __device__ variables


def _statement_start(text: str, pos: int) -> int:
    return max(text.rfind(";", 0, pos), text.rfind("}", 0, pos), text.rfind("{", 0, pos)) + 1


def _user_part(preprocessed: str) -> str:
    """The preprocessed unit from `#line 1 "kernel.cu"` on."""
    start = preprocessed.find(f'\n# 1 "{SOURCE_NAME}"\n')
    return preprocessed[start:] if start >= 0 else preprocessed


def scan_declarations(preprocessed: str) -> Declarations:
    """Find kernels and device variables in the preprocessed user code."""
    text = _user_part(preprocessed)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    text = re.sub(r"^#.*$", "", text, flags=re.M)
    kernels: list[str] = []
    for m in re.finditer(r"__EMU_GLOBAL__", text):
        before = text[_statement_start(text, m.start()):m.start()]
        rest = text[m.end():]
        if re.search(r"\btemplate\s*$", before):         # explicit instantiation
            inst = re.match(r"[^;(]*?\b(\w+\s*<[^;()]*>)\s*\(", rest)
            if inst:
                kernels.append(re.sub(r"\s+", "", inst.group(1)))
            continue
        if re.search(r"\btemplate\s*<", before):          # a template: only instances are kernels
            continue
        decl = re.match(r"[^;(){}]*?\b(\w+)\s*\(", rest)
        if decl and decl.group(1) not in kernels:
            kernels.append(decl.group(1))
    variables: list[str] = []
    for m in re.finditer(r"__EMU_(VARIABLE|DEVICE)__", text):
        before = text[_statement_start(text, m.start()):m.start()]
        if re.search(r"\bextern\b", before):
            continue
        rest = text[m.end():]
        stop = re.search(r"[;=({]", rest)
        if not stop or stop.group(0) in "({" or re.search(r"\boperator\s*$", rest[:stop.start()]):
            continue            # a function (operator= included), not a variable
        head = re.sub(r"\[[^\]]*\]", "", rest[:stop.start()]).replace("__EMU_VARIABLE__", "").replace("__EMU_DEVICE__", "")
        names = re.findall(r"\b(\w+)\s*$", head)
        if names and names[0] not in variables:
            variables.append(names[0])
    return Declarations(kernels, variables)


def registration_code(decl: Declarations) -> str:
    kernels = ",\n    ".join(f'emu::kernel_entry("{k}", &{k})' for k in decl.kernels)
    variables = ",\n    ".join(f'emu::GlobalEntry{{"{v}", (void*)&{v}, sizeof({v})}}' for v in decl.variables)
    return f"""
#line 1 "<emulator: kernel registration>"
extern char __start_emu_shared[] __attribute__((weak));
extern char __stop_emu_shared[] __attribute__((weak));
{"static const emu::KernelEntry emu_kernels[] = {" + kernels + "};" if decl.kernels else ""}
{"static const emu::GlobalEntry emu_globals[] = {" + variables + "};" if decl.variables else ""}
extern "C" const emu::ModuleInfo* __emu_module_info(void) {{
    static const emu::ModuleInfo info = {{emu::kAbiVersion,
        {len(decl.kernels)}, {"emu_kernels" if decl.kernels else "nullptr"},
        {len(decl.variables)}, {"emu_globals" if decl.variables else "nullptr"},
        __start_emu_shared, __stop_emu_shared}};
    return &info;
}}
"""


def _clean_log(log: str, workdir: str) -> str:
    return log.replace(workdir + os.sep, "").replace(str(RUNTIME_DIR) + os.sep, "<emulator>/")


# ---- nvcc --------------------------------------------------------------------

def parse_ptxas(log: str) -> dict[str, KernelResources]:
    result: dict[str, KernelResources] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            current = result.setdefault(m.group(1), KernelResources())
            continue
        if current is None:
            continue
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line):
            current.local_bytes, current.spill_bytes = int(m.group(1)), int(m.group(2))
        if m := re.search(r"Used (\d+) registers", line):
            current.registers = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                current.shared_bytes = int(s.group(1))
            if c := re.search(r"(\d+) bytes cmem\[0\]", line):
                current.const_bytes = int(c.group(1))
    return result


def _nvcc_command(tool: str, options: list[str], include_dirs: list[str]) -> list[str]:
    """nvcc for the architecture the options name (their last -arch; sm_90a for wgmma), else NVCC_ARCH."""
    arch, passthrough, it = NVCC_ARCH, [], iter(options)
    for o in it:
        if m := _ARCH_OPTION.match(o):
            arch = m.group(1) or next(it, arch)
        elif o in ("-code", "-o"):
            next(it, None)
        elif not re.match(r"^(-code=|--cubin)", o):
            passthrough.append(o)
    return [tool, "--cubin", f"-arch={arch}", "-Xptxas", "-v", *passthrough,
            *[f"-I{d}" for d in include_dirs], f"-I{PYCUDA_INCLUDE_DIR}",
            # The device pass's preprocessor lists what it opens: nvcc's own -MD preprocesses the source a
            # second time, as a host pass would (a --cubin has none).
            "-Xcompiler", f"-MD,-MF{NVCC_DEPENDENCIES}", "-o", "kernel.cubin", SOURCE_NAME]


def _nvcc_outside(nvcc_dir: Path, tool: str, include_dirs: list[str]) -> list[str] | None:
    """The files nvcc opened outside its toolkit, the system's headers and the include
    directories (None when it wrote no list: it stopped in the preprocessor)."""
    deps = nvcc_dir / NVCC_DEPENDENCIES
    if not deps.exists():
        return None
    toolkit = Path(os.path.realpath(tool)).parent.parent
    roots = [str(toolkit), "/usr/include", "/usr/lib/gcc", str(PYCUDA_INCLUDE_DIR), str(nvcc_dir), *include_dirs]
    return policy.outside(deps.read_text(), str(nvcc_dir), roots)


# ---- the source policy: the build's own preprocessor, three ways ---------------------------------

def _flags(extra_flags, options: list[str], include_dirs: list[str]) -> list[str]:
    return [*_common_flags(cxx()), *extra_flags, f"-I{RUNTIME_DIR}", f"-I{STUB_INCLUDE_DIR}", f"-I{PYCUDA_INCLUDE_DIR}",
            *host_flags(options, include_dirs)]


def _write_sources(tmp: str, source: str, no_extern_c: bool) -> None:
    """The files of a build folder before anything is compiled: the student's source as written (for the
    compilers' excerpts) and the module's unit (the user code, before the registration is added)."""
    Path(tmp, SOURCE_NAME).write_text(source)
    Path(tmp, "unit.cpp").write_text(_user_unit(source, no_extern_c))


_verdicts: dict[str, list[policy.Finding]] = {}   # the policy's verdicts on this process's sources
_scans: dict[str, str] = {}      # the policy's marked view of a source it accepted: the builds' declaration scan


def refusals(source: str, options: list[str] | None = None, no_extern_c: bool = False) -> list[policy.Finding]:
    """Why the policy refuses `source` (grader.emulator.policy), from the build's
    preprocessor run over the build's unit, in a folder laid out as the build's:
    as the grader reads it (EMU_SCAN), as the build that runs compiles it and as
    the analysis build does. Remembered for the process's later builds, and kept in
    the cache beside the builds for the later processes that use that cache (a
    submission's other checks): whoever could rewrite it there could rewrite the builds."""
    options = [str(o) for o in (options or [])]
    key = _source_key(source, options, no_extern_c)
    if key not in _verdicts:
        kept = _kept_verdict(key)
        if kept is None:
            views = {"marked": ("-O2", "-DEMU_SCAN"), "runs": ("-O2",), "analysed": ANALYSIS_FLAGS}
            with tempfile.TemporaryDirectory(prefix="emu-build-") as tmp:
                _write_sources(tmp, source, no_extern_c)
                jobs = {name: _Started([cxx(), "-E", "-H", *_flags(extra, options, []), "unit.cpp"], tmp)
                        for name, extra in views.items()}
                runs = {name: job.result() for name, job in jobs.items()}
                read = {name: policy.read_view(p.stdout, p.stderr, p.returncode == 0, tmp) for name, p in runs.items()}
            findings = policy.refusals(source, own_headers=STUB_INCLUDE_DIR, **read)
            kept = findings, None if findings else _user_part(runs["marked"].stdout)
            with contextlib.suppress(OSError):      # a cache this process cannot write: the next decides again
                atomic_write(cache_dir() / f"verdict-{key}.json", json.dumps(
                    {"key": key, "findings": [[f.kind, f.line, f.text] for f in kept[0]], "scan": kept[1]}).encode())
        _verdicts[key] = kept[0]
        if kept[1] is not None:
            _scans[key] = kept[1]
    return _verdicts[key]


def _kept_verdict(key: str) -> tuple[list[policy.Finding], str | None] | None:
    """(findings, the marked view's user part) from the cache's record of the policy's verdict, if any."""
    try:
        data = json.loads((cache_dir() / f"verdict-{key}.json").read_text())
        findings = [policy.Finding(str(kind), line if isinstance(line, int) else None, str(text))
                    for kind, line, text in data["findings"]]
        scan = data["scan"]
        if data["key"] != key or (scan is None) != bool(findings) or not (scan is None or isinstance(scan, str)):
            return None
        return findings, scan
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _source_key(source: str, options: list[str], no_extern_c: bool) -> str:
    """The key of the policy's verdict on a source: the source, its options, the compiler and what the
    verdict is read with (the policy, the runtime's and the course's headers)."""
    return _digest(source, options, no_extern_c, _compiler_id(cxx()), _policy_bytes(), _header_bytes())


# ---- the build ---------------------------------------------------------------

def build_module(source: str, options: list[str] | None = None, include_dirs: list[str] | None = None,
                 no_extern_c: bool = False, analysis: bool = False) -> BuiltModule:
    """Compile `source` into an emulator module (cached). An analysis build
    calls the runtime's hooks on every memory access (analysis.cpp); nvcc has
    already checked that source in the ordinary build."""
    options = [str(o) for o in (options or [])]
    include_dirs = [str(Path(d).resolve()) for d in (include_dirs or [])]
    untrusted = config.untrusted_sources()
    if untrusted:
        if include_dirs or any(o.startswith("-I") for o in options):
            _refuse([policy.Finding("include", None, "the grader refuses include directories for a graded source")])
        _refuse(refusals(source, options, no_extern_c))
    built = _build_module(source, options, include_dirs, no_extern_c, analysis)
    if untrusted:
        try:
            policy.check_library(built.library, _baseline_imports(no_extern_c, analysis))
        except policy.Refused as e:
            raise BuildError("the grader refuses this source", str(e), refusals=e.findings) from None
    return built


def _refuse(findings: list[policy.Finding]) -> None:
    if findings:
        raise BuildError("the grader refuses this source", policy.refusal_text(findings), refusals=findings)


_baselines: dict = {}
BASELINE_KINDS = ((False, False), (False, True), (True, False), (True, True))   # (no_extern_c, analysis)


def baseline_imports() -> list[list[str]]:
    """What a trusted kernel's builds import on this toolchain, one list per BASELINE_KINDS: found once
    by a trusted process and handed to the processes that build untrusted sources
    (config.configure(baselines=...)), which then build no baseline of their own."""
    return [sorted(_baseline_imports(*kind)) for kind in BASELINE_KINDS]


def _baseline_imports(no_extern_c: bool, analysis: bool) -> frozenset:
    """What a trusted kernel's build imports on this toolchain (grader.emulator.policy.BASELINE_SOURCE)."""
    key = (no_extern_c, analysis)
    if key not in _baselines:
        given = config.prebuilt_baselines()
        if given is not None:
            _baselines[key] = frozenset(given[BASELINE_KINDS.index(key)])
        else:
            built = _build_module(policy.BASELINE_SOURCE, [], [], no_extern_c, analysis)
            _baselines[key] = frozenset(policy.imported_symbols(built.library))
    return _baselines[key]


def _module_key(source: str, options: list[str], include_dirs: list[str], no_extern_c: bool, analysis: bool) -> str:
    tool = None if analysis else nvcc()
    return _digest(source, options, include_dirs, no_extern_c, ANALYSIS_FLAGS if analysis else ("-O2",),
                   MODULE_LINK_FLAGS, _common_flags(cxx()), _header_bytes(), runtime_library().name,
                   _compiler_id(cxx()), tool and _compiler_id(tool))


def trusted_files() -> list[Path]:
    """The cache's files of the builds every process makes first, built here when missing: the runtime
    library, its precompiled header and the baseline kernel's builds (public code, no answer), for a fresh
    cache to start from."""
    baseline_imports()
    headers = precompiled_headers()
    names = [f"libcudaemu-{_runtime_key()}"] + [f"kernel-{_module_key(policy.BASELINE_SOURCE, [], [], *kind)}"
                                                 for kind in BASELINE_KINDS]
    return ([cache_dir() / f"{name}{suffix}" for name in names for suffix in (".so", ".json")] +
            (sorted(headers.glob("*/cuda_emu.h.gch")) if headers else []))


def _build_module(source: str, options: list[str], include_dirs: list[str], no_extern_c: bool,
                  analysis: bool) -> BuiltModule:
    extra_flags = ANALYSIS_FLAGS if analysis else ("-O2",)
    tool = None if analysis else nvcc()
    key = _module_key(source, options, include_dirs, no_extern_c, analysis)
    lib = cache_dir() / f"kernel-{key}.so"
    meta = cache_dir() / f"kernel-{key}.json"
    data = _verified_bytes(lib, key, meta) if lib.exists() and meta.exists() else None
    if data is not None:
        built = _load_meta(_private_copy(data, lib.name), meta)
        _refuse_nvcc_outside(built.nvcc_outside)
        return built

    # nvcc works in a folder of its own: what it writes there cannot tell a build from another.
    with tempfile.TemporaryDirectory(prefix="emu-build-") as tmp, \
            tempfile.TemporaryDirectory(prefix="emu-nvcc-") as nvcc_dir:
        flags = _flags(extra_flags, options, include_dirs)
        _write_sources(tmp, source, no_extern_c)
        nvcc_job = None
        if tool:
            Path(nvcc_dir, SOURCE_NAME).write_text(
                source if no_extern_c else f'extern "C" {{\n#line 1 "{SOURCE_NAME}"\n{source}\n}}\n')
            nvcc_job = _Started(_nvcc_command(tool, options, include_dirs), nvcc_dir)
        scanned = None if include_dirs else _scans.get(_source_key(source, options, no_extern_c))
        scan = None if scanned else _run([cxx(), "-E", "-DEMU_SCAN", *flags, "unit.cpp"], tmp)
        host = None
        if scanned or scan.returncode == 0:
            decl = scan_declarations(scanned or scan.stdout)
            Path(tmp, "unit.cpp").write_text(_user_unit(source, no_extern_c) +
                                             registration_code(decl) +
                                             _key_definition(key, "__emu_build_key"))
            cmd = [cxx(), "-shared", *_header_flags(extra_flags), *flags, *MODULE_LINK_FLAGS, "unit.cpp", "-o",
                   "kernel.so"]
            host = _run(cmd, tmp)
        nvcc_proc = nvcc_job.result() if nvcc_job else None

        host_ok = host is not None and host.returncode == 0
        host_log = _clean_log((host or scan).stderr, tmp)
        nvcc_log = _clean_log(nvcc_proc.stdout + nvcc_proc.stderr, nvcc_dir) if nvcc_proc else ""
        nvcc_outside = _nvcc_outside(Path(nvcc_dir), tool, include_dirs) if nvcc_proc else []
        _refuse_nvcc_outside(nvcc_outside)
        if nvcc_proc and nvcc_proc.returncode != 0:
            raise BuildError("nvcc could not compile the kernel", nvcc_log, nvcc_proc.args)
        if not host_ok:
            why = ("the emulator cannot compile this kernel (nvcc accepts it)" if nvcc_proc
                   else "the kernel does not compile")
            raise BuildError(why, host_log, (host or scan).args, emulator_only=nvcc_proc is not None)
        built = Path(tmp, "kernel.so").read_bytes()
        atomic_write(lib, built)
        resources = parse_ptxas(nvcc_log) if nvcc_proc else {}
        atomic_write(meta, json.dumps({
            "key": key, "sha256": hashlib.sha256(built).hexdigest(),
            "nvcc_log": nvcc_log, "nvcc_checked": nvcc_proc is not None, "nvcc_outside": nvcc_outside,
            "resources": {k: vars(v) for k, v in resources.items()},
        }).encode())
    return _load_meta(_private_copy(built, lib.name), meta)


def _refuse_nvcc_outside(files: list[str] | None) -> None:
    """nvcc's compile of an untrusted source opened a file outside the toolkit and the system's headers
    (a cubin never runs here, but what nvcc says about such a file would reach the student)."""
    if files and config.untrusted_sources():
        _refuse([policy.Finding("include", None, f"nvcc's compile of your source opens {os.path.basename(files[0])}"
                                f": only CUDA, math and stdio headers may be included ({policy.INCLUDES_HINT})")])


def _load_meta(lib: Path, meta: Path) -> BuiltModule:
    data = json.loads(meta.read_text())
    return BuiltModule(lib, data["nvcc_log"],
                       {k: KernelResources(**v) for k, v in data["resources"].items()},
                       data["nvcc_checked"], data.get("nvcc_outside"))

"""What the emulator accepts from a source it does not trust (a submission
being graded): device code only.

The emulator compiles CUDA C as host C++ and runs it natively in the grading
process, so anything only host code could use would run there too. A
submission is refused, with the line and the reason, when it has

- a function defined outside __device__ / __global__ (a host function:
  kernels never need one, and only host code could call it);
- `asm` (inline assembly: system calls without the C library);
- `__attribute__((constructor))`, `destructor` or `init_priority` (code
  that runs when the module is loaded or unloaded, outside any launch);
- an #include outside ALLOWED_INCLUDES, token pasting (`##`) or a #pragma
  other than `unroll` (ways to spell the above without writing them);
- a kernel launch (`<<<`) or a CUDA runtime call (`cuda...(`) in device
  code: dynamic parallelism, whose work would run outside the launch the
  grader checks and times (device_launch_refusals; on a GPU too, through
  grader.platform.compiler: nvcc refuses it anyway without -rdc, which the
  grader never passes, in words a student cannot act on);

and, once built, when the library imports a symbol outside the allow-list
(the emulator runtime, the C math library, what GCC itself emits): no file,
process, network or memory-mapping call can be reached.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ALLOWED_INCLUDES = frozenset({
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h",
    "math_constants.h", "device_launch_parameters.h", "device_functions.h", "sm_20_atomic_functions.h",
    "assert.h", "cassert", "stdint.h", "cstdint", "float.h", "cfloat", "math.h", "cmath", "limits.h",
    "climits", "stddef.h", "cstddef"})

_MATH = ("sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10 expm1 log log2 log10 "
         "log1p logb ilogb pow sqrt cbrt hypot fabs fmin fmax fma fmod remainder remquo floor ceil round trunc "
         "rint nearbyint lround llround lrint llrint copysign erf erfc lgamma tgamma frexp ldexp scalbn scalbln "
         "modf nextafter fdim sincos").split()
ALLOWED_SYMBOLS = frozenset(
    [f for m in _MATH for f in (m, m + "f")] +
    ["__gmon_start__", "_ITM_registerTMCloneTable", "_ITM_deregisterTMCloneTable", "__cxa_finalize",
     "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_pure_virtual", "__start_emu_shared",
     "__stop_emu_shared", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "memcpy", "memset",
     "memmove", "__stack_chk_fail", "__popcountdi2", "__popcountsi2", "__clzdi2", "__ctzdi2", "__ffsdi2",
     "__muldc3", "__mulsc3", "__divdc3", "__divsc3", "__powisf2", "__powidf2",
     # What newer toolchains add on their own (g++ 13, glibc 2.38+: Ubuntu 24.04, the H200 machine):
     # C++ exception support and the C23 names of the strto* parsers. No kernel can call them.
     "__gxx_personality_v0", "__cxa_begin_catch", "__cxa_end_catch", "__cxa_rethrow",
     "__cxa_allocate_exception", "__cxa_free_exception", "__cxa_throw", "_ZSt9terminatev"] +
    [f"__isoc23_{f}" for f in ("strtol", "strtoul", "strtoll", "strtoull", "strtoimax", "strtoumax")])
ALLOWED_PREFIXES = ("__emu_", "emu_", "__asan_", "_ZN3emu", "_Unwind_")
_ATOMIC = re.compile(r"^_Z\d+atomic\w*$")


class Refused(Exception):
    """The source or its build is refused; the message says what and why."""


def _blank(text: str) -> str:
    """Comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


_TRANSPARENT = re.compile(r'^\s*(extern\s*"\s*"|namespace\b[\w\s:]*)\s*$')
_NOT_NAMES = {"__attribute__", "__declspec", "alignas", "__align__", "decltype", "__launch_bounds__"}
_CLASS = re.compile(r"\b(struct|class|union|enum)\b")


def source_refusals(source: str) -> list[str]:
    """Why `source` is refused (empty when it is device code only), one line per finding."""
    found: list[str] = []
    raw_lines = source.splitlines()
    text = _blank(source)
    for m in re.finditer(r"^[ \t]*#[ \t]*(\w+)(.*)$", text, re.M):
        directive, rest = m.group(1), m.group(2)
        line = _line(text, m.start())
        if directive == "include":
            name = re.search(r"[<\"]\s*([^>\"]*?)\s*[>\"]", raw_lines[line - 1])
            header = name.group(1) if name else rest.strip()
            if header not in ALLOWED_INCLUDES:
                found.append(f"line {line}: #include <{header}>: only CUDA and math headers may be included "
                             "(cuda_pipeline.h, math_constants.h, cmath, cstdint, ...)")
        elif directive == "pragma" and not re.match(r"\s*unroll\b", rest):
            found.append(f"line {line}: #pragma{rest}: only '#pragma unroll' is accepted")
        if "##" in m.group(0):
            found.append(f"line {line}: token pasting (##): kernels do not need it, and it can spell what is refused")
    for m in re.finditer(r"\b(asm|__asm|__asm__)\b", text):
        found.append(f"line {_line(text, m.start())}: `{m.group(1)}`: inline assembly is not accepted (it can "
                     "make system calls; a kernel needs none)")
    for m in re.finditer(r"\b(constructor|destructor|init_priority)\b", text):
        if re.search(r"(__attribute__\s*\(\(|\[\[)[^;{}]*$", text[max(0, m.start() - 200):m.start()]):
            found.append(f"line {_line(text, m.start())}: `{m.group(1)}` attribute: code that runs when the "
                         "module is loaded or unloaded is host code, which the grader does not run")
    found += _host_functions(text)
    return found + device_launch_refusals(source)


def device_launch_refusals(source: str) -> list[str]:
    """Kernel launches and CUDA runtime calls in `source`, one line per finding."""
    text = _blank(source)
    found = [f"line {_line(text, m.start())}: `<<<`: a kernel launched from a kernel (dynamic parallelism) is not "
             "accepted: its work would run outside the launch the grader checks and times; compute your part of "
             "the output in this kernel's own threads" for m in re.finditer(r"<<<", text)]
    found += [f"line {_line(text, m.start())}: `{m.group(1)}`: the CUDA runtime called from a kernel (launches, "
              "streams, device-wide synchronisation) is not accepted: a kernel needs none of it"
              for m in re.finditer(r"\b(cuda[A-Z]\w*)\s*\(", text)]
    return found


def check_device_launches(source: str) -> None:
    """Refused when `source` launches kernels or calls the CUDA runtime from device code."""
    problems = device_launch_refusals(source)
    if problems:
        raise Refused("the grader refuses this source:\n" + "\n".join(f"kernel.cu:{p[5:]}" for p in problems))


def _host_functions(text: str) -> list[str]:
    """Function definitions at namespace or class scope without __device__ or __global__."""
    found = []
    code = re.sub(r"^[ \t]*#.*$", lambda m: " " * len(m.group(0)), text, flags=re.M)
    stack: list[str] = []          # "ns" (namespace, extern "C"), "class", "skip" (a body or an initializer)
    head_start = 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        inside = stack[-1] if stack else "ns"
        if c == "{":
            if inside == "skip":
                stack.append("skip")
            else:
                head = code[head_start:i]
                flat = " ".join(head.split())
                if _TRANSPARENT.match(flat):
                    stack.append("ns")
                elif "(" in flat and not flat.rstrip().endswith("=") and "=" not in flat.split("(")[0] \
                        and not _CLASS.match(flat.strip()):
                    if not re.search(r"\b(__device__|__global__)\b", flat):
                        name = [w for w in re.findall(r"([~\w:]+)\s*\(", flat) if w not in _NOT_NAMES]
                        what = name[0] if name else flat[:40]
                        found.append(f"line {_line(code, head_start + len(head) - len(head.lstrip()))}: "
                                     f"`{what}` is a host function (defined without __device__ or __global__): "
                                     "the grader runs device code only")
                    stack.append("skip")
                elif _CLASS.search(flat) and "=" not in flat:
                    stack.append("class")
                else:
                    stack.append("skip")
            head_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            head_start = i + 1
        elif c == ";" and inside != "skip":
            head_start = i + 1
        elif c == ":" and inside == "class" and re.search(r"\b(public|private|protected)\s*$", code[head_start:i]):
            head_start = i + 1
        i += 1
    return found


def check_source(source: str) -> None:
    problems = source_refusals(source)
    if problems:
        raise Refused("the grader refuses this source (it only runs device code on the CPU emulator):\n"
                      + "\n".join(f"kernel.cu:{p[5:]}" if p.startswith("line ") else p for p in problems))


def imported_symbols(library: Path) -> list[str]:
    """The undefined dynamic symbols of a shared library (nm -D), without versions."""
    proc = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        raise Refused(f"cannot list the symbols the built module imports (nm: {proc.stderr.strip()[:200]})")
    return sorted({line.split()[-1].split("@")[0] for line in proc.stdout.splitlines() if line.strip()})


def symbol_allowed(name: str) -> bool:
    return name in ALLOWED_SYMBOLS or name.startswith(ALLOWED_PREFIXES) or bool(_ATOMIC.match(name))


# A trusted kernel that uses what the course's kernels use (shared memory, barriers, float4, shuffles,
# atomics, math, printf). Whatever its build imports, the toolchain and the emulator's runtime put there
# (g++ 13 with glibc 2.39 imports malloc, pthread_mutex_lock, __tls_get_addr, ... that g++ 12 does not),
# so a student's build may import it too.
BASELINE_SOURCE = r"""
__device__ float helper(float x) { return sqrtf(x) + expf(x) + powf(x, 1.5f); }
__global__ void grader_baseline(int n, const float* a, float* out, int* counter)
{
    __shared__ float tile[64];
    __shared__ float4 tile4[8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x % 64] = i < n ? a[i] : 0.0f;
    if (threadIdx.x < 8)
        tile4[threadIdx.x] = reinterpret_cast<const float4*>(a)[threadIdx.x];
    __syncthreads();
    float v = helper(tile[(threadIdx.x + 1) % 64]) + tile4[threadIdx.x % 8].x;
    v += __shfl_down_sync(0xffffffff, v, 1);
    atomicAdd(counter, 1);
    atomicMin(counter + 1, i);
    atomicAdd(out, v);
    if (i < n)
        out[i] = fmaxf(v, __int_as_float(0));
    if (i == 0)
        printf("%d %f\n", i, v);
}
"""


def check_library(library: Path, baseline: frozenset = frozenset()) -> None:
    """Refused unless every symbol the module imports is allowed here or imported by the baseline's build."""
    bad = [s for s in imported_symbols(library) if not symbol_allowed(s) and s not in baseline]
    if bad:
        raise Refused("the grader refuses this source: the compiled module calls functions a kernel never "
                      f"needs ({', '.join(bad[:12])}): only the emulator runtime and the math library are "
                      "allowed")

"""What the emulator accepts from a source it does not trust (a submission
being graded): device code only.

The emulator compiles CUDA C as host C++ and runs it natively in the grading
process, so anything only host code could use would run there too. The
decision is taken on what the compiler sees, not on the text: build.py runs
the build's own preprocessor, with the build's own flags, over the build's
translation unit, and this module reads its output (comments gone, macros
expanded, digraphs, line splices and token pasting resolved) and the list of
files it opened (-H). A source is refused, with its line and the reason, when

- the compile opens a file the emulator's own headers do not (an #include of
  anything but the CUDA, math and stdio headers, however it is spelled);
- its tokens hold `asm` (inline assembly: system calls without the C library);
- an attribute runs code when the module is loaded or unloaded (constructor,
  destructor, init_priority, ifunc, a section other than shared memory) or
  turns the analysis' instrumentation off (no_sanitize*, ...);
- a function is defined outside __device__ / __global__ (a host function:
  kernels never need one, and only host code could call it);
- a #pragma other than `unroll`;
- a kernel launch (`<<<`) or a CUDA runtime call (`cuda...(`) in device code:
  dynamic parallelism, whose work would run outside the launch the grader
  checks and times;
- the source reads differently in the build that runs and in the analysis
  build (it tests __SANITIZE_ADDRESS__, ...), or differently when the grader
  reads it (it tests how __global__ is spelled there): the analysis must see
  the code that runs;

and, once built, when the library imports a symbol outside the allow-list
(the emulator runtime, the C math library, what GCC itself emits): no file,
process, network or memory-mapping call can be reached.

Each refusal has a kind (Finding.kind), written at the end of its line as
`[refused: KIND]` so that it survives as text: refusal_kinds(text) reads them.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCE_NAME = "kernel.cu"
INCLUDES_HINT = "cuda_pipeline.h, math_constants.h, cmath, cstdint, cstdio, ..."

# ---- findings -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One reason to refuse a source: its kind (machine-readable), the student's line, what and why."""
    kind: str
    line: int | None
    text: str

    def __str__(self) -> str:
        where = f"{SOURCE_NAME}:{self.line}: " if self.line else ""
        return f"{where}{self.text} [refused: {self.kind}]"


class Refused(Exception):
    """The source or its build is refused; the message says what and why."""

    def __init__(self, message: str, findings: list[Finding] = ()):
        super().__init__(message)
        self.findings = list(findings)


def refusal_text(findings: list[Finding]) -> str:
    return ("the grader refuses this source (it only runs device code on the CPU emulator):\n"
            + "\n".join(str(f) for f in findings))


def refusal_kinds(text: str) -> list[str]:
    """The kinds of the refusals written in a message (an autograde can list what a submission tried)."""
    return re.findall(r"\[refused: ([\w-]+)\]", text)


# ---- reading the preprocessor's output ----------------------------------------------------------

@dataclass(frozen=True)
class Token:
    text: str       # digraphs written as the tokens they stand for
    line: int       # the student's line (where a macro was used, for what it expands to)


@dataclass
class View:
    """One preprocessor run over the build's translation unit: the tokens of the
    student's source (what macros expand to included, #pragma lines as one token
    each), and the files the run opened."""
    ok: bool
    tokens: list[Token] = field(default_factory=list)
    prelude: set[str] = field(default_factory=set)       # files opened before the student's source
    included: dict[str, int] = field(default_factory=dict)   # file opened from the student's source -> line
    opened: list[str] = field(default_factory=list)      # every file the run opened (-H)


_MARKER = re.compile(r'# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)\s*$')
_DIGRAPHS = {"<:": "[", ":>": "]", "<%": "{", "%>": "}", "%:": "#", "%:%:": "##"}
_PUNCT = sorted(["%:%:", "...", "<=>", "<<=", ">>=", "->*", "::", "##", "->", "++", "--", "<<", ">>", "<=", ">=",
                 "==", "!=", "&&", "||", "*=", "/=", "%=", "+=", "-=", "&=", "^=", "|=", ".*", "<:", ":>", "<%",
                 "%>", "%:"], key=len, reverse=True)
_UCN = r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"
_TOKEN = re.compile(rf"""
    (?P<nl>\n)
  | (?P<space>[ \t\r\f\v]+)
  | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^ ()\\\t\v\f\n"]{{0,16}})\((?s:.*?)\)(?P=delim)")
  | (?P<literal>(?:u8|[uUL])?(?:"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[\w.'])*)
  | (?P<name>(?:[A-Za-z_$]|[^\x00-\x7f]|{_UCN})(?:[\w$]|[^\x00-\x7f]|{_UCN})*)
  | <::(?![:>])
  | (?P<punct>{"|".join(re.escape(p) for p in _PUNCT)})
  | (?P<other>.)
""", re.X)


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


@functools.lru_cache(maxsize=4096)
def _real(folder: str, path: str) -> str:
    return os.path.realpath(os.path.join(folder, path))


def read_view(output: str, header_tree: str, ok: bool, folder: str) -> View:
    """What one run of `g++ -E -H` in `folder` says: `output` its stdout, `header_tree` its stderr."""
    view = View(ok)
    view.opened = [_real(folder, m.group(1)) for m in re.finditer(r"^\.+ (.+)$", header_tree, re.M)]
    stack: list[str] = []           # the files entered (line markers with flag 1), innermost last
    student = False                 # past the `#line 1 "kernel.cu"` that starts the student's source
    chain: list[str] = []           # files entered from the student's source, until its #include returns
    line, pos, n = 1, 0, len(output)
    while pos < n:
        if output.startswith("#", pos):              # GCC writes a directive only at a line's start
            end = output.find("\n", pos)
            end = n if end < 0 else end
            directive = output[pos:end]
            pos = end + 1
            m = _MARKER.match(directive)
            if not m:
                if student and not stack:
                    view.tokens.append(Token(" ".join(directive.split()), line))
                line += 1
                continue
            line, name, flags = int(m.group(1)), _real(folder, _unescape(m.group(2))), m.group(3).split()
            if "1" in flags:
                if student:
                    chain.append(name)
                else:
                    view.prelude.add(name)
                stack.append(name)
            elif "2" in flags and stack:
                stack.pop()
                if not stack and chain:             # back in the student's source, after its #include
                    for f in chain:
                        view.included.setdefault(f, line - 1)
                    chain = []
            elif not stack and _unescape(m.group(2)) == SOURCE_NAME:
                student = True
            continue
        if not (student and not stack):
            nxt = output.find("\n#", pos)
            pos = n if nxt < 0 else nxt + 1
            continue
        pos, line = _tokens(output, pos, line, view.tokens)
    return view


def _tokens(text: str, pos: int, line: int, out: list[Token]) -> tuple[int, int]:
    """Tokens from `pos` up to the next line that starts with '#'; (where it stopped, its line)."""
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        kind = m.lastgroup
        if kind == "nl":
            line += 1
            pos = m.end()
            if text.startswith("#", pos):
                break
            continue
        if kind != "space":
            tok = m.group(0)
            out.append(Token(_DIGRAPHS.get(tok, tok) if kind == "punct" else ("<" if kind is None else tok), line))
            if kind is None:                        # `<::` not followed by : or >: `<` then `::`
                out.append(Token("::", line))
            line += tok.count("\n") if kind == "raw" else 0
        pos = m.end()
    return pos, line


# ---- judging the tokens -----------------------------------------------------------------------

MARKS = frozenset({"__EMU_GLOBAL__", "__EMU_DEVICE__", "__EMU_VARIABLE__"})   # cuda_emu.h under EMU_SCAN
_ASM = frozenset({"asm", "__asm", "__asm__"})
_LOAD_TIME = frozenset({"constructor", "destructor", "init_priority", "ifunc"})
_SANITIZER = ("no_sanitize", "no_address_safety_analysis", "disable_sanitizer_instrumentation")
_SHARED_SECTION = '"emu_shared"'      # cuda_emu.h's __shared__
_NOT_NAMES = frozenset({"__attribute__", "__attribute", "__declspec", "alignas", "decltype", "sizeof", "noexcept",
                        "throw", "operator"})
_CLASS_KEYS = frozenset({"struct", "class", "union", "enum"})


def refusals(source: str, marked: View, runs: View, analysed: View, own_headers: Path) -> list[Finding]:
    """Why `source` is refused (empty when it is device code only), from three preprocessor
    runs of its translation unit: `marked` as the grader reads it (EMU_SCAN: kernels and
    device functions marked), `runs` as the build that runs compiles it, `analysed` as the
    analysis build does. `own_headers`: the emulator's CUDA headers."""
    lines = source.splitlines()
    found = device_launches(source) + emulator_names(source) + _opened(lines, (runs, analysed, marked),
                                                                        Path(own_headers))
    if not runs.ok:
        return found                         # it does not compile: the compiler says why
    found += _differences(runs, analysed, marked)
    if found:
        return found
    tokens = [t for t in marked.tokens if not t.text.startswith("#")]
    found += [Finding("pragma", t.line, f"`{t.text}`: only '#pragma unroll' is accepted")
              for t in marked.tokens if t.text.startswith("#") and not re.match(r"#pragma unroll\b", t.text)]
    seen = set()
    for t in tokens:
        if t.text in _ASM and t.line not in seen:
            seen.add(t.line)
            spelled = _spelling(lines, t.line, t.text, source)
            found.append(Finding("asm", t.line, f"inline assembly (`{t.text}`{spelled}) is not accepted: it can "
                                 "make system calls, and a kernel needs none"))
    found += _attributes(tokens, lines, source)
    found += _host_functions(tokens)
    return sorted(found, key=lambda f: f.line or 0)


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def emulator_names(source: str) -> list[Finding]:
    """Names of the emulator's own headers in the source (a test of whether it is being emulated, which would
    let the build that is analysed differ from the one a GPU runs)."""
    text = _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)
    return [Finding("detects-grader", text.count("\n", 0, m.start()) + 1, f"`{m.group(0)}` is a name of the "
                    "grader's emulator: code that tests for it is not accepted (the analysis must see the code a GPU "
                    "runs)") for m in re.finditer(r"\b(?:__EMU|EMU_|__emu_|emu_)\w*", text)]


def device_launches(source: str) -> list[Finding]:
    """Kernels launched from kernels (`<<<`) and CUDA runtime calls, read from the text (the host compiler
    cannot even parse `<<<`): dynamic parallelism, whose work would run outside the launch the grader checks
    and times (nvcc refuses it anyway without -rdc, which the grader never passes, in words a student
    cannot act on)."""
    text = _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)
    found = [Finding("device-launch", text.count("\n", 0, m.start()) + 1, "`<<<`: a kernel launched from a kernel "
                     "(dynamic parallelism) is not accepted: its work would run outside the launch the grader checks "
                     "and times; compute your part of the output in this kernel's own threads")
             for m in re.finditer(r"<<<", text)]
    found += [Finding("device-launch", text.count("\n", 0, m.start()) + 1, f"`{m.group(1)}`: the CUDA runtime "
                      "called from a kernel (launches, streams, device-wide synchronisation) is not accepted: a "
                      "kernel needs none of it") for m in re.finditer(r"\b(cuda[A-Z]\w*)\s*\(", text)]
    return found


def _opened(lines: list[str], views, own_headers: Path) -> list[Finding]:
    """A file opened from the student's source that the emulator's own headers do not open."""
    own = os.path.realpath(own_headers) + os.sep
    found, lines_seen, files_seen = [], set(), set()
    for view in views:
        for path in view.opened:
            if path in view.prelude or path.startswith(own) or path in files_seen:
                continue
            files_seen.add(path)
            line = view.included.get(path)
            if line in lines_seen:
                continue                     # what the refused file includes in turn
            lines_seen.add(line)
            found.append(Finding("include", line, f"#include opens {os.path.basename(path)}"
                                 f"{_spelling(lines, line, 'include', '')}: only CUDA, math and stdio headers "
                                 f"may be included ({INCLUDES_HINT})"))
    return found


def _spelling(lines: list[str], line: int | None, word: str, source: str) -> str:
    """How `word` came to be on `line` when it is not written there as such."""
    if not line or line > len(lines):
        return ""
    text = lines[line - 1]
    written = re.search(rf"(?<![\w$]){re.escape(word)}(?![\w$])", text)
    if word == "include":
        written = re.match(r"\s*#\s*include", text)
    if written:
        return ""
    if text.rstrip().endswith("\\") or (line > 1 and lines[line - 2].rstrip().endswith("\\")):
        return ", written across a line splice"
    if "%:" in text:
        return ", spelled with a digraph"
    if "??=" in text:
        return ", spelled with a trigraph"
    if "%:%:" in source:
        return ", built by token pasting with %:%:"
    if "##" in source:
        return ", built by token pasting"
    return ", spelled through a macro"


def _differences(runs: View, analysed: View, marked: View) -> list[Finding]:
    """The analysis build and the grader's reading must see the tokens of the build that runs."""
    found = []
    for other, kind, who, why in (
            (analysed, "detects-analysis", "the grader's analysis",
             "code that detects the analysis is not accepted: the analysis must see the code that runs"),
            (marked, "detects-grader", "the grader's reading of it",
             "code that detects how the grader compiles it is not accepted")):
        if not other.ok:
            found.append(Finding(kind, None, f"your source compiles for running but not under {who}: {why}"))
            continue
        theirs = [t for t in other.tokens if t.text not in MARKS] if other is marked else other.tokens
        i = next((i for i, (a, b) in enumerate(zip(runs.tokens, theirs)) if a.text != b.text),
                 min(len(runs.tokens), len(theirs)))
        if i == len(runs.tokens) == len(theirs):
            continue
        line = (runs.tokens[i] if i < len(runs.tokens) else theirs[i]).line
        found.append(Finding(kind, line, f"your source compiles differently under {who} (`{_excerpt(theirs, i)}` "
                             f"where the build that runs reads `{_excerpt(runs.tokens, i)}`): {why}"))
    return found


def _excerpt(tokens: list[Token], i: int) -> str:
    """Up to three tokens from tokens[i], on its line."""
    text = " ".join(t.text for t in tokens[i:i + 3] if t.line == tokens[i].line) if i < len(tokens) else ""
    return (text[:40] + " ...") if len(text) > 40 else (text or "nothing")


def _group_end(tokens: list[Token], i: int) -> int:
    """The index past the bracket group that opens at tokens[i]."""
    open_, close = tokens[i].text, {"(": ")", "[": "]"}[tokens[i].text]
    depth = 0
    for j in range(i, len(tokens)):
        depth += (tokens[j].text == open_) - (tokens[j].text == close)
        if depth == 0:
            return j + 1
    return len(tokens)


def _attribute_groups(tokens: list[Token]):
    """(start, end) of each `__attribute__((...))` and `[[...]]` in `tokens`."""
    i = 0
    while i < len(tokens):
        t = tokens[i].text
        if t in ("__attribute__", "__attribute") and i + 1 < len(tokens) and tokens[i + 1].text == "(":
            end = _group_end(tokens, i + 1)
            yield i, end
            i = end
        elif t == "[" and i + 1 < len(tokens) and tokens[i + 1].text == "[":
            end = _group_end(tokens, i)
            yield i, end
            i = end
        else:
            i += 1


def _attributes(tokens: list[Token], lines: list[str], source: str) -> list[Finding]:
    found = []
    for start, end in _attribute_groups(tokens):
        for j in range(start + 1, end):
            name = tokens[j].text.strip("_")
            line = tokens[j].line
            if name in _LOAD_TIME:
                found.append(Finding("load-time-code", line, f"`{name}` attribute: code that runs when the module "
                                     "is loaded or unloaded is host code, which the grader does not run"))
            elif name == "section" and [t.text for t in tokens[j + 1:j + 4]] != ["(", _SHARED_SECTION, ")"]:
                found.append(Finding("load-time-code", line, "`section` attribute: placing code or data in a "
                                     "section of your choice can make the loader run it; kernels never need it"))
            elif name.startswith(_SANITIZER):
                found.append(Finding("sanitizer-attribute", line, f"`{name}` attribute"
                                     f"{_spelling(lines, line, tokens[j].text, source)}: it hides code from the "
                                     "grader's analysis (bank conflicts, races, out-of-bounds accesses), which "
                                     "must see every memory access"))
    return found


def _without_attributes(tokens: list[Token]) -> list[Token]:
    out, last = [], 0
    for start, end in _attribute_groups(tokens):
        out += tokens[last:start]
        last = end
    return out + tokens[last:]


def _host_functions(tokens: list[Token]) -> list[Finding]:
    """Function definitions at namespace or class scope without __device__ or __global__."""
    found = []
    stack: list[str] = []          # "ns" (namespace, extern "C"), "class", "skip" (a body or an initializer)
    head: list[Token] = []         # the tokens since the last ; { or } of this scope
    for tok in tokens:
        t = tok.text
        inside = stack[-1] if stack else "ns"
        if t == "{":
            if inside == "skip":
                stack.append("skip")
            else:
                kind = _scope(_without_attributes(head))
                if kind == "function" and not MARKS & {h.text for h in head}:
                    found.append(Finding("host-function", head[0].line, f"`{_function_name(head)}` is a host "
                                         "function (defined without __device__ or __global__): the grader runs "
                                         "device code only"))
                stack.append(kind if kind in ("ns", "class") else "skip")
            head = []
        elif t == "}":
            if stack:
                stack.pop()
            head = []
        elif inside != "skip":
            if t == ";" or (t == ":" and inside == "class" and head
                            and head[-1].text in ("public", "private", "protected")):
                head = []
            else:
                head.append(tok)
    return found


def _scope(head: list[Token]) -> str:
    """What the `{` after `head` opens: "ns", "class", "function" or "other"."""
    texts = [h.text for h in head]
    if (len(texts) == 2 and texts[0] == "extern" and texts[1].startswith('"')) or "namespace" in texts[:2]:
        return "ns"
    if "(" in texts and "=" not in texts[:texts.index("(")] and texts[-1] != "=" and texts[0] not in _CLASS_KEYS:
        return "function"
    if _CLASS_KEYS & set(texts) and "=" not in texts:
        return "class"
    return "other"


def _function_name(head: list[Token]) -> str:
    texts = [h.text for h in _without_attributes(head)]
    for i, t in enumerate(texts[:-1]):
        if texts[i + 1] == "(" and re.match(r"[\w$]", t) and t not in _NOT_NAMES and t not in MARKS:
            j = i - 1 if i and texts[i - 1] == "~" else i
            while j >= 2 and texts[j - 1] == "::":
                j -= 2
            return "".join(texts[j:i + 1])
    return " ".join(texts)[:40]


# ---- nvcc's compile (a cubin: nothing of it runs in this process) --------------------------------

def outside(dependencies: str, folder: str, roots: list[str]) -> list[str]:
    """The files of a make-style dependency list (nvcc -MD, written in `folder`) under none of `roots`."""
    files = re.split(r":(?:\s|$)", dependencies.replace("\\\n", " "), maxsplit=1)[-1]      # after "target:"
    paths = [_real(folder, n.replace("\\ ", " ")) for n in re.split(r"(?<!\\)\s+", files.strip()) if n]
    prefixes = tuple(os.path.realpath(r) + os.sep for r in roots)
    return [p for p in paths if not p.startswith(prefixes)]


# ---- the compiled module -------------------------------------------------------------------------

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
        finding = Finding("imports", None, f"the compiled module calls functions a kernel never needs "
                          f"({', '.join(bad[:12])}): only the emulator runtime and the math library are allowed")
        raise Refused(refusal_text([finding]), [finding])

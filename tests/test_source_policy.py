"""The source policy decides on what the compiler sees (grader.emulator.policy): each
spelling that once passed the text-based policy, as a submission of its own, is
refused with its line and its kind; what CUDA's samples write (printf with
<cstdio>) is accepted; a trusted source is not checked at all."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import emulator_only

from grader import emulator
from grader.emulator import build, policy
from grader.kernels.stages import STAGES

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "solutions" / "blocktile-1d.cu"
# As the red team wrote it: relative to the build's folder (a fresh one in the temporary directory).
RELATIVE = os.path.relpath(SOLUTION, Path(tempfile.gettempdir(), "emu-build-x"))
KERNEL = "__global__ void k(float* p) { p[threadIdx.x] = 1.0f; }\n"


def _has_feature_detects_asan() -> bool:
    """Whether this g++ has __has_feature(address_sanitizer) (GCC 14 and later): only then can a source
    tell the analysis build by it."""
    probe = "#if defined(__has_feature)\n#if __has_feature(address_sanitizer)\nyes\n#endif\n#endif\n"
    out = subprocess.run([build.cxx(), "-E", "-P", "-x", "c++", "-fsanitize=kernel-address", "-"], input=probe,
                         capture_output=True, text=True, timeout=60).stdout
    return "yes" in out


REFUSED = [
    # (name, source, kind, line, words the message must hold)
    ("digraph include", f'%:include "{SOLUTION}"\n', "include", 1,
     ["#include opens blocktile-1d.cu", "spelled with a digraph"]),
    ("digraph include, relative", f'\n%:include "{RELATIVE}"\n', "include", 2, ["#include opens blocktile-1d.cu"]),
    ("line-splice include", f'#\\\ninclude "{SOLUTION}"\n', "include", 2, ["written across a line splice"]),
    ("macro include", f'#define F "{SOLUTION}"\n#include F\n', "include", 2, ["#include opens blocktile-1d.cu"]),
    ("include of itself", "#include __FILE__\n" + KERNEL, "include", 1, ["#include opens kernel.cu"]),
    ("system header", "#include <unistd.h>\n" + KERNEL, "include", 1, ["#include opens unistd.h"]),
    ("runtime internals", '#include "analysis.h"\n' + KERNEL, "include", 1, ["#include opens analysis.h"]),
    ("asm pasted with %:%:", "%:define CAT(a, b) a %:%: b\n__global__ void k() { CAT(as, m)(\"syscall\"); }\n",
     "asm", 2, ["inline assembly (`asm`", "token pasting with %:%:"]),
    ("__asm__ pasted with ##", "#define CAT(a, b) a ## b\n\n__global__ void k() { CAT(__as, m__)(\"nop\"); }\n",
     "asm", 3, ["`__asm__`", "token pasting"]),
    ("asm from a macro", "#define A __asm\n__global__ void k() {\n    A volatile(\"nop\");\n}\n", "asm", 3,
     ["`__asm`", "spelled through a macro"]),
    ("asm across a line splice", "__global__ void k() { as\\\nm(\"nop\"); }\n", "asm", 1, ["line splice"]),
    ("asm behind a raw string holding a line marker",
     '__device__ const char* s = R"x(\n# 1 "/usr/include/c++/12/cmath" 1 3\n)x";\n'
     '__global__ void k() { asm("nop"); }\n',
     "asm", 4, ["inline assembly"]),
    ("padding under __SANITIZE_ADDRESS__",
     "#ifdef __SANITIZE_ADDRESS__\n#define PAD 1\n#else\n#define PAD 0\n#endif\n"
     "__global__ void k(float* p)\n{\n    __shared__ float t[32][32 + PAD];\n"
     "    t[threadIdx.x][0] = p[0];\n    __syncthreads();\n    p[threadIdx.x] = t[0][threadIdx.x];\n}\n",
     "detects-analysis", 8, ["compiles differently under the grader's analysis", "`1 ] ;`", "`0 ] ;`"]),
    ("__SANITIZE_ADDRESS__ pasted", "#define CAT(a, b) a ## b\n#if CAT(__SANITIZE_, ADDRESS__)\n"
     "__global__ void k(float* p) { p[0] = 1; }\n#else\n__global__ void k(float* p) { p[0] = 2; }\n#endif\n",
     "detects-analysis", 5, ["code that detects the analysis is not accepted"]),
    ("#error under the analysis", "#ifdef __SANITIZE_ADDRESS__\n#error no\n#endif\n" + KERNEL, "detects-analysis",
     None, ["compiles for running but not under the grader's analysis"]),
    ("no_sanitize_address", "__device__ __attribute__((no_sanitize_address)) float get(const float* t, int i)\n"
     "{ return t[i]; }\n" + KERNEL, "sanitizer-attribute", 1, ["`no_sanitize_address` attribute", "analysis"]),
    ("__no_sanitize_address__", "__device__ __attribute__((__no_sanitize_address__))\n"
     "float f(float* t) { return *t; }\n" + KERNEL, "sanitizer-attribute", 1, ["`no_sanitize_address` attribute"]),
    ("[[gnu::no_sanitize]]", "\n[[gnu::no_sanitize(\"address\")]] __device__ float f(float* t) { return *t; }\n"
     + KERNEL, "sanitizer-attribute", 2, ["`no_sanitize` attribute"]),
    ("no_address_safety_analysis", "__device__ __attribute__((no_address_safety_analysis)) float f(float* t) "
     "{ return *t; }\n" + KERNEL, "sanitizer-attribute", 1, ["`no_address_safety_analysis` attribute"]),
    ("no_sanitize pasted", "#define NS(x) __attribute__((no_ ## x))\n"
     "__device__ NS(sanitize_address) float f(float* t) { return *t; }\n" + KERNEL,
     "sanitizer-attribute", 2, ["`no_sanitize_address` attribute, built by token pasting"]),
    ("EMU_SCAN tested",
     "#ifdef EMU_SCAN\n__global__ void k() {}\n#else\nint host() { return 1; }\n#endif\n", "detects-grader", 1,
     ["`EMU_SCAN` is a name of the grader's emulator"]),
    ("an emulator macro tested",
     "#ifdef __EMU_CPU__\n#define PAD 0\n#else\n#define PAD 1\n#endif\n" + KERNEL, "detects-grader", 1,
     ["`__EMU_CPU__` is a name of the grader's emulator"]),
    ("__global__ stringified",
     "#define S(x) #x\n#define X(x) S(x)\n__device__ const char* s = X(__global__);\n" + KERNEL, "detects-grader", 3,
     ["`\"__EMU_GLOBAL__\"", "`\"\"", "detects how the grader compiles it"]),
    ("__constructor__", "__attribute__((__constructor__)) static __device__ void init() {}\n" + KERNEL,
     "load-time-code", 1, ["`constructor` attribute"]),
    ("[[gnu::destructor]]", "[[gnu::destructor]] __device__ void fini() {}\n" + KERNEL, "load-time-code", 1,
     ["`destructor` attribute"]),
    ("section .init_array", "__device__ void f() {}\n__device__ void (*p)() __attribute__((section(\".init_array\"))) "
     "= f;\n" + KERNEL, "load-time-code", 2, ["`section` attribute"]),
    ("_Pragma", KERNEL + '_Pragma("GCC optimize(\\"O0\\")")\n' + KERNEL.replace("k(", "k2("), "pragma", 2,
     ["`#pragma GCC optimize(\"O0\")`", "only '#pragma unroll'"]),
    ("host function from a macro", "#define H int helper(int x) { return x; }\n" + KERNEL + "H\n", "host-function", 3,
     ["`helper` is a host function"]),
]


@pytest.mark.parametrize("name, source, kind, line, words", REFUSED, ids=[r[0] for r in REFUSED])
def test_each_spelling_is_refused_with_its_line_and_kind(name, source, kind, line, words):
    found = [f for f in build.refusals(source) if f.kind == kind]
    assert found, [str(f) for f in build.refusals(source)]
    text = str(found[0])
    assert found[0].line == line and text.startswith(f"kernel.cu:{line}: " if line else ""), text
    for w in words:
        assert w in text, (w, text)
    assert policy.refusal_kinds(policy.refusal_text(found)) == [kind] * len(found)


def test_has_feature_is_refused_where_the_compiler_has_it():
    source = ("#if defined(__has_feature)\n#if __has_feature(address_sanitizer)\n#define PAD 1\n#endif\n#endif\n"
              "#ifndef PAD\n#define PAD 0\n#endif\n__global__ void k(float* p) { p[0] = PAD; }\n")
    kinds = [f.kind for f in build.refusals(source)]
    assert kinds == (["detects-analysis"] if _has_feature_detects_asan() else []), kinds


def test_a_trigraph_include_opens_nothing():
    """g++ -std=gnu++17 does not honour trigraphs: `??=include` is not a directive, so the
    file is never opened and the source does not compile."""
    source = f'??=include "{SOLUTION}"\n' + KERNEL
    assert [f for f in build.refusals(source) if f.kind == "include"] == []
    with pytest.raises(build.BuildError) as e:
        build.build_module(source)
    assert "sgemm_blocktile" not in e.value.log


def test_every_solution_is_accepted_whatever_its_stage_options():
    for stage in STAGES:
        source = (REPO / "solutions" / (stage.source_file or f"{stage.id}.cu")).read_text()
        assert build.refusals(source, stage.options()) == [], stage.id


def test_what_the_policy_reads_is_the_preprocessed_source():
    view = policy.read_view('# 0 "unit.cpp"\n# 1 "x.h" 1\nint asm;\n# 2 "unit.cpp" 2\n# 1 "kernel.cu"\n'
                            'a <: %:%: %> <::b R"d(\n# 1 "y.h" 1\n)d" c\n#pragma unroll 4\n', ". x.h\n", True, "/")
    assert [(t.text, t.line) for t in view.tokens] == [
        ("a", 1), ("[", 1), ("##", 1), ("}", 1), ("<", 1), ("::", 1), ("b", 1),
        ('R"d(\n# 1 "y.h" 1\n)d"', 1), ("c", 3), ("#pragma unroll 4", 4)]
    assert view.prelude == {"/x.h"} and view.opened == ["/x.h"] and view.included == {}


# ---- what is accepted, and what a trusted source may do --------------------------------------

@pytest.fixture
def untrusted():
    emulator.set_untrusted_sources(True)
    yield
    emulator.set_untrusted_sources(False)


PRINTF = """#include <cstdio>
#include <stdio.h>
__global__ void hello(int v) { if (threadIdx.x == 1) printf("hello from thread %d: %d\\n", threadIdx.x, v); }
"""


@emulator_only
def test_printf_with_cstdio_is_accepted_and_printed(cuda, source_module, capfd, untrusted):
    mod = source_module(PRINTF)
    mod.get_function("hello")(np.int32(42), block=(4, 1, 1))
    cuda.Context.synchronize()
    assert "hello from thread 1: 42" in capfd.readouterr().out


@emulator_only
def test_cstdio_does_not_reach_the_c_library(untrusted, grader_settings):
    """<cstdio> declares fopen, but the imports of the built module are still checked
    (without nvcc, which would refuse a host function called from a kernel first)."""
    grader_settings(emulator_nvcc=False)
    source = "#include <cstdio>\n__global__ void k() { FILE* f = fopen(\"/tmp/x\", \"w\"); if (f) fclose(f); }\n"
    with pytest.raises(build.BuildError) as e:
        build.build_module(source)
    assert "fopen" in e.value.log and [f.kind for f in e.value.refusals] == ["imports"]


@emulator_only
def test_a_process_handed_the_baseline_builds_none_of_its_own(untrusted, grader_settings, monkeypatch):
    """Grading processes get the baseline imports from the grader (grader.grading.isolation.trusted_builds)
    instead of building the baseline kernel in their own caches; the imports are still checked."""
    given = build.baseline_imports()
    grader_settings(emulator_nvcc=False).configure_emulator(baselines=given)
    monkeypatch.setattr(build, "_baselines", {})
    built = []
    real = build._build_module
    monkeypatch.setattr(build, "_build_module", lambda source, *a: built.append(source) or real(source, *a))
    build.build_module(KERNEL)
    with pytest.raises(build.BuildError) as e:
        build.build_module("#include <cstdio>\n__global__ void k() { FILE* f = fopen(\"/tmp/x\", \"w\"); }\n")
    assert [f.kind for f in e.value.refusals] == ["imports"]
    assert policy.BASELINE_SOURCE not in built and len(built) == 2


def test_a_later_process_on_the_same_cache_reads_the_verdict_instead_of_preprocessing(grader_settings, tmp_path,
                                                                                       monkeypatch):
    """A submission's checks run in processes of their own on one cache: the first keeps the policy's verdict
    there, the later ones read it (no preprocessor run), and a record that is not the verdict of that source
    is decided again."""
    def new_process():
        monkeypatch.setattr(build, "_verdicts", {})
        monkeypatch.setattr(build, "_scans", {})

    grader_settings(emulator_cache=str(tmp_path))
    refused, accepted = "__global__ void k() { asm(\"nop\"); }\n", KERNEL
    new_process()
    first = {s: build.refusals(s) for s in (refused, accepted)}
    assert [f.kind for f in first[refused]] == ["asm"] and first[accepted] == []
    files = {s: tmp_path / f"verdict-{build._source_key(s, [], False)}.json" for s in (refused, accepted)}
    assert all(f.exists() for f in files.values())

    new_process()
    with monkeypatch.context() as m:
        m.setattr(build, "_Started", lambda *a, **k: pytest.fail("the preprocessor ran again"))
        assert {s: build.refusals(s) for s in (refused, accepted)} == first
    key = build._source_key(accepted, [], False)
    assert list(build._scans) == [key] and "void k(float* p)" in build._scans[key]      # the builds' scan

    files[refused].write_text(files[accepted].read_text())          # the accepted verdict, copied over
    new_process()
    assert [f.kind for f in build.refusals(refused)] == ["asm"]


@emulator_only
def test_a_refusal_reaches_pycuda_with_its_kinds(cuda, source_module, untrusted):
    with pytest.raises(cuda.CompileError) as e:
        source_module("__global__ void k() { asm(\"nop\"); }\n")
    assert [f.kind for f in e.value.refusals] == ["asm"] and "[refused: asm]" in e.value.stderr


@emulator_only
def test_a_trusted_source_is_not_checked():
    emulator.set_untrusted_sources(False)
    build.build_module("int host_side() { return 1; }\n__global__ void k() { asm volatile(\"\" ::: \"memory\"); }\n")


@emulator_only
@pytest.mark.skipif(build.nvcc() is None, reason="nvcc is not on PATH")
def test_what_only_nvcc_would_open_is_refused(untrusted):
    """The emulator defines what nvcc defines (__NVCC__, ...): a file included only for nvcc is opened, and
    refused, by the emulator's own preprocessor run too."""
    source = f'#ifdef __NVCC__\n#include "{SOLUTION}"\n#endif\n' + KERNEL
    with pytest.raises(build.BuildError) as e:
        build.build_module(source)
    assert "opens blocktile-1d.cu" in e.value.log
    assert [f.kind for f in e.value.refusals] == ["include"]


@emulator_only
@pytest.mark.skipif(build.nvcc() is None, reason="nvcc is not on PATH")
def test_nvcc_lists_what_its_device_pass_opens(tmp_path):
    """The files nvcc's compile opened are those of its device pass (__CUDA_ARCH__ defined), the pass whose
    messages a student reads."""
    header = tmp_path / "only_on_the_device.h"
    header.write_text("#define ON_THE_DEVICE 1\n")
    built = build.build_module(f'#ifdef __CUDA_ARCH__\n#include "{header}"\n#endif\n' + KERNEL)
    assert built.nvcc_outside == [str(header.resolve())]


@emulator_only
def test_a_blank_submission_including_the_reference_scores_nothing(tmp_path):
    """What a student sees from `python -m grader check` (lab 03's blank submission earned 12/26)."""
    submission = tmp_path / "kernel.cu"
    submission.write_text(f'// my kernel\n%:include "{SOLUTION}"\n')
    p = subprocess.run([sys.executable, "-m", "grader", "check", str(submission), "--exercise", "blocktile-1d",
                        "--checks", "compiles,correctness"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "kernel.cu:2: #include opens blocktile-1d.cu, spelled with a digraph" in p.stdout, p.stdout
    assert "[PASS]" not in p.stdout, p.stdout

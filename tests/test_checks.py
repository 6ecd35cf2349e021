"""The grader's checks on their own: correctness, races, bank conflicts,
performance, thresholds, isolation and the report (emulator in CI)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import warm_cache

import grader
from grader.grading.checks import correctness, performance, thresholds
from grader.grading.isolation import run_check
from grader.grading.protocol import Context
from grader.grading.registry import run_here
from grader.grading.report import FAILED, GRADER_ERROR, NOT_GRADED, PASSED, CheckReport, CheckResult
from grader.kernels.stages import Stage, stage
from grader.programs import tensor_bench

REPO = Path(__file__).resolve().parent.parent
ON_EMULATOR = grader.BACKEND.name == "emulator"
TILED = (REPO / "solutions" / "smem-tiling.cu").read_text()
NAIVE = (REPO / "solutions" / "naive.cu").read_text()


def variant(old: str, new: str, text: str = TILED) -> str:
    assert old in text, old
    return text.replace(old, new)


SWAPPED = variant("sum += As[ty][k] * Bs[k][tx];", "sum += As[k][ty] * Bs[k][tx];")
NOSYNC = variant("            sum += As[ty][k] * Bs[k][tx];\n        __syncthreads();\n",
                 "            sum += As[ty][k] * Bs[k][tx];\n")
NOBOUNDS = variant("    if (row < M && col < N)\n        C[row * N + col] = sum;", "    C[row * N + col] = sum;",
                   variant("(k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f", "B[(k0 + ty) * N + col]",
                           variant("(row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f", "A[row * K + k0 + tx]")))
BLANK = TILED[:TILED.index("{\n    __shared__")] + "{\n    // YOUR CODE HERE\n}\n"
TRANSPOSED = variant("sum += As[ty][k] * Bs[k][tx];", "sum += As[k][ty] * Bs[k][tx];",
                     variant("As[ty][tx] = (row < M", "As[tx][ty] = (row < M"))


def run(name: str, source: str, stage_id: str = "smem-tiling") -> CheckResult:
    return run_here(stage_id, name, source, 1234)


# ---- correctness -------------------------------------------------------------------------
def test_correctness_passes_reference():
    r = run("correctness", TILED)
    assert r.status == PASSED and r.points == 1.0, r.message
    assert "random seed 1234" in r.message and r.details["seed"] == 1234


def test_correctness_names_shape_and_first_wrong_element_with_heatmap():
    r = run("correctness", SWAPPED)
    assert r.status == FAILED and r.points == 0
    assert "M=17 N=33 K=9" in r.message and "first at row 0, column 0: expected" in r.message
    assert r.figure and len(r.figure) > 100          # base64 PNG
    assert "<img" in CheckReport("smem-tiling", [r])._repr_html_()


def test_correctness_guard_zones_catch_writes_past_c():
    r = run("correctness", NOBOUNDS)
    assert r.status == FAILED
    assert "wrote outside C" in r.message and "after its end" in r.message
    M, N, K = correctness.shapes(not ON_EMULATOR)[-1]     # a tile multiple: right
    assert f"M={M} N={N} K={K}: all {M * N} elements correct" in r.message


def test_correctness_blank_kernel_names_unwritten_elements():
    r = run("correctness", BLANK)
    assert r.status == FAILED and "never written" in r.message


def test_compile_error_has_line_numbers():
    r = run("compiles", variant("float sum = 0.0f;", "float sum = 0.0f"))
    assert r.status == FAILED and "kernel.cu" in r.message and "does not compile" in r.message


# ---- races -------------------------------------------------------------------------------
def test_races_pass_reference_and_swapped():
    for src in (TILED, SWAPPED):
        r = run("races", src)
        assert r.status == PASSED, r.message


def test_races_find_missing_syncthreads():
    r = run("races", NOSYNC)
    assert r.status == FAILED
    assert "race" in r.message and "__syncthreads()" in r.message


def test_races_find_out_of_bounds():
    r = run("races", NOBOUNDS)
    assert r.status == FAILED and "out-of-bounds" in r.message and "line " in r.message


def test_races_do_not_credit_a_kernel_that_computes_nothing():
    r = run("races", BLANK)
    assert r.status == FAILED and "never written" in r.message and "race(s)" not in r.message
    zeros = BLANK.replace("// YOUR CODE HERE", "int row = blockIdx.y * blockDim.y + threadIdx.y, "
                          "col = blockIdx.x * blockDim.x + threadIdx.x;\n    if (row < M && col < N) C[row * N + col] = 0;")
    r = run("races", zeros)
    assert r.status == FAILED and "C is 0 everywhere: only a kernel that computes C" in r.message, r.message
    r = run("races", zeros.replace("C[row * N + col] = 0;", "C[row * N + col] = row - col;"))
    assert r.status == FAILED and r.message.endswith(
        "C is the same for other A and B (it does not depend on them): only a kernel that computes C is credited "
        "with being race-free (the correctness check says what is wrong)"), r.message
    r = run("races", SWAPPED)          # wrong, but computed from A and B: race-free, and credited
    assert r.status == PASSED, r.text()


# ---- bank conflicts ----------------------------------------------------------------------
def _conflict_free_tiled() -> Stage:
    s = stage("smem-tiling")
    return Stage("smem-tiling", s.title, s.kernel, s.launch_rule, dict(s.defines), bank_conflict_free=True)


def test_bank_conflicts_information_only_where_not_required():
    r = run("bank-conflicts", TRANSPOSED)
    assert r.status == NOT_GRADED and "32-way" in r.message


def test_bank_conflicts_fail_a_stage_that_must_be_conflict_free():
    from grader.grading.checks import bank_conflicts
    s = _conflict_free_tiled()
    ok = run_here(s, bank_conflicts.CHECK, TILED)
    assert ok.status == PASSED, ok.message
    bad = run_here(s, bank_conflicts.CHECK, TRANSPOSED)
    assert bad.status == FAILED and bad.points == 0
    assert "32-way" in bad.message and "line 22" in bad.message and "bank" in bad.message
    assert "lane" in bad.message       # the picture


# ---- performance and thresholds ------------------------------------------------------------
@pytest.mark.skipif(not ON_EMULATOR, reason="the emulator refuses to time")
def test_performance_not_graded_without_gpu_but_predicted():
    r = run("performance", TILED)
    assert r.status == NOT_GRADED and r.points == 0 and "not graded: no GPU" in r.message
    assert "M=4096 N=4096 K=4096 predicted on an H200: about " in r.message
    assert r.message.endswith("this stage needs >= 0.1 x cuBLAS") and r.details["predicted"]["gflops"] > 0
    assert CheckReport("smem-tiling", [r]).points("performance", 2) == 0.0
    wrong = run("performance", SWAPPED)
    assert wrong.status == NOT_GRADED and wrong.points == 0
    assert wrong.message.endswith("no prediction of its speed: the kernel must compute C first (the correctness "
                                  "check says what is wrong)")
    unguarded = run("performance", NOBOUNDS)       # right at 4096, which is a multiple of its tile
    assert unguarded.status == NOT_GRADED and unguarded.message == wrong.message
    faulting = run("performance", variant("C[row * N + col] = sum;", "C[row * N + col - (1 << 28)] = sum;"))
    assert faulting.status == NOT_GRADED and faulting.points == 0
    assert "no prediction of its speed: its sampled launch failed: " in faulting.message, faulting.message


@pytest.mark.skipif(not ON_EMULATOR, reason="stands the emulator in for a GPU")
def test_a_wrong_kernel_is_not_timed_and_is_told_why(monkeypatch):
    """On a GPU the performance check runs the correctness shapes again before timing; a wrong C there fails it."""
    monkeypatch.setattr(correctness, "LARGE_GPU", correctness.LARGE_EMULATOR)     # the emulator's seconds
    ctx = Context("smem-tiling", stage("smem-tiling"), gpu=True)
    outputs = correctness.collect(SWAPPED, 1234, ctx)
    r = performance.judge(({"correctness": outputs[0], "log": ""}, outputs[1]), 1234, ctx)
    assert r.status == FAILED and r.points == 0 and r.message == performance.WRONG_BEFORE_TIMING, r.text()
    assert "C differs from one run to the next: a race?" in r.message


def test_thresholds_table_and_overrides(tmp_path, grader_settings):
    t = thresholds.load()
    stage_ids = {s.id for s in __import__("grader.kernels.stages", fromlist=["STAGES"]).STAGES}
    assert set(t["stages"]) == stage_ids | set(tensor_bench.KERNELS)     # + the tensor GEMMs
    assert thresholds.for_stage("naive").fraction_of_cublas == 0.007
    assert thresholds.for_stage("naive").size == (4096, 4096, 4096)
    db = thresholds.for_stage("double-buffering")
    assert db.fraction_of_previous == 0.88 and db.previous == "vectorized" and db.fraction_of_cublas is None
    over = tmp_path / "over.json"
    over.write_text(json.dumps({"stages": {"naive": {"min_fraction_of_cublas": 0.01, "size": [1024, 512, 256]}}}))
    grader_settings(thresholds=str(over))
    t = thresholds.for_stage("naive")
    assert t.fraction_of_cublas == 0.01 and t.size == (1024, 512, 256)
    assert thresholds.for_stage("coalesced").fraction_of_cublas == 0.06          # untouched
    t = thresholds.for_stage("naive", thresholds.load({"stages": {"naive": {"min_fraction_of_cublas": 0.02}}}))
    assert t.fraction_of_cublas == 0.02 and t.size == (1024, 512, 256)


# ---- isolation -----------------------------------------------------------------------------
def test_isolation_reports_a_hang_and_goes_on():
    hang = variant("        float sum = 0.0f;\n", "        float sum = 0.0f;\n        while (clock64() >= 0) { }\n", NAIVE)   # never false, not provably
    r = run_check("naive", "correctness", hang, seed=1, timeout=6)
    assert r.status == FAILED and r.points == 0
    assert "stopped after 6 s" in r.message or "time limit" in r.message
    r2 = run_check("naive", "compiles", hang, seed=1)       # the next check runs normally
    assert r2.status == PASSED


def test_a_grading_process_that_dies_after_starting_fails_the_check(tmp_path, monkeypatch):
    """A grading process that dies while it runs the submission (here: a stand-in that says it has
    started, then segfaults itself) is a failed check, with what it printed."""
    import sys
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nread -r job\nfd=$(printf '%s' \"$job\" | sed 's/.*\"result_fd\": \\([0-9]*\\).*/\\1/')\n"
                    "printf S > /dev/fd/$fd\necho about to crash\nkill -SEGV $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    r = run_check("naive", "correctness", NAIVE, seed=1, timeout=60)
    assert r.status == FAILED and r.points == 0
    assert "SIGSEGV" in r.message and "about to crash" in r.output, r


def test_a_grading_process_that_cannot_start_is_a_grader_error(tmp_path, monkeypatch):
    """One that dies before it has started (it cannot import what it needs) is the grader's failure,
    never the kernel's, and scores nothing."""
    import sys
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'pycuda'\"\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    r = run_check("naive", "correctness", NAIVE, seed=1, timeout=60)
    assert r.status == GRADER_ERROR and r.points == 0 and r.fraction == 0
    assert "could not start" in r.message and "No module named 'pycuda'" in r.message, r.message
    assert "not your code's fault" in r.message and "crashed" not in r.message


def test_the_reference_is_built_once_for_every_process(tmp_path):
    """The reference solution's builds (run for the launch budgets) are kept in the emulator's cache: a
    second grading program compiles none of them again, and that folder is the grader's alone."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "GRADER_EMULATOR_CACHE": str(warm_cache(tmp_path / "cache"))}
    code = ("import sys; from grader.grading.isolation import run_check, reference_cache\n"
            "r = run_check('naive', 'correctness', sys.stdin.read(), seed=1)\n"
            "print(r.status, reference_cache())\n")

    def grade() -> tuple[Path, dict]:
        p = subprocess.run([sys.executable, "-c", code], input=NAIVE, capture_output=True, text=True, env=env,
                           cwd=REPO, timeout=300)
        assert p.returncode == 0 and p.stdout.startswith(PASSED), p.stdout + p.stderr
        folder = Path(p.stdout.split()[-1])
        return folder, {f.name: f.stat().st_mtime_ns for f in folder.glob("kernel-*")}

    folder, first = grade()
    assert first and folder.parent == tmp_path / "cache" and folder.stat().st_mode & 0o077 == 0, (folder, first)
    assert grade()[1] == first


def test_a_notebook_kernel_starts_from_the_graders_runtime_and_baseline_builds(tmp_path):
    """The emulator cache a notebook's kernel gets at autograde time holds the grader's runtime library, its
    precompiled header and baseline builds, which that kernel then uses as they are, and no reference
    solution's build."""
    import os
    import subprocess
    import sys

    from grader.grading import isolation
    seeded = tmp_path / "kernel-cache"
    isolation.seed_cache(str(seeded))
    before = {str(f.relative_to(seeded)): f.stat().st_mtime_ns for f in seeded.rglob("*") if f.is_file()}
    assert sum(n.startswith("libcudaemu-") for n in before) == 2 and len(before) == 12, before
    assert sum(n.endswith("/cuda_emu.h.gch") for n in before) == 2, before
    env = {**os.environ, "GRADER_EMULATOR_CACHE": str(seeded)}
    p = subprocess.run([sys.executable, "-c", "from grader.grading import isolation; isolation.trusted_builds()"],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert {str(f.relative_to(seeded)): f.stat().st_mtime_ns for f in seeded.rglob("*") if f.is_file()} == before


def test_check_writes_nothing_to_stderr_and_renders(capfd):
    warned = variant("        float sum = 0.0f;\n", "        float sum = 0.0f;\n        int unused = 1;\n", NAIVE)
    report = grader.check("naive", warned, ["compiles", "correctness", "races", "performance"], seed=7)
    out, err = capfd.readouterr()
    assert err == ""
    assert report.passed("correctness") and report.passed("races")
    assert report.points("correctness", 3) == 3.0
    html = report._repr_html_()
    for name in ("compiles", "correctness", "races", "performance"):
        assert name in html
    assert "random seed 7" in report.text()


def test_a_compile_failure_skips_the_other_checks():
    report = grader.check("naive", "this is not CUDA", ["compiles", "correctness", "races"], seed=1)
    assert [r.status for r in report] == [FAILED, FAILED, FAILED]
    assert "does not compile" in report["correctness"].message


def test_grade_returns_partial_credit_float(capsys):
    assert grader.grade("naive", NAIVE, "correctness", points=3) == 3.0
    assert "[PASS] correctness" in capsys.readouterr().out


def test_cli_check_on_a_cu_file_and_a_notebook():
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-m", "grader", "check", str(REPO / "solutions" / "naive.cu"), "--stage",
                        "naive", "--checks", "compiles,correctness"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0 and "[PASS] correctness" in p.stdout and p.stderr == "", p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-m", "grader", "check", str(REPO / "labs" / "02-smem-tiling" /
                        "smem-tiling.ipynb"), "--stage", "smem-tiling", "--checks", "correctness"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert p.returncode == 0 and "TILED_SOURCE" in p.stdout, p.stdout + p.stderr


def test_pycudas_clean_up_complaints_after_a_lost_context_are_said_once():
    from grader.grading.isolation import quieted
    noise = "".join("PyCUDA WARNING: a clean-up operation failed (dead context maybe?)\ncuMemFree failed: unspecified "
                    "launch failure\n" for _ in range(17))
    out = quieted("C[0][0] = 1.5\n" + noise + "PyCUDA WARNING: a clean-up operation failed (dead context maybe?)\n"
                  "cuModuleUnload failed: unspecified launch failure")
    assert out == "C[0][0] = 1.5\nPyCUDA could not free 18 object(s) at exit: the failed launch lost the context", out
    assert quieted("C[0][0] = 1.5") == "C[0][0] = 1.5"

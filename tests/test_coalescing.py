"""Global-memory coalescing on the emulator: the sector rule, the analysis's
per-line requests and sectors (as Nsight Compute counts them), the
`--analyze` printout and the coalescing check of lab 1."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.emulator import analysis as emu_analysis
from grader.grading import registry
from grader.grading.checks import coalescing
from grader.grading.registry import run_here
from grader.grading.report import FAILED, NOT_GRADED, PASSED
from grader.kernels import sgemm, stages

REPO = Path(__file__).resolve().parent.parent
NAIVE = (REPO / "solutions" / "naive.cu").read_text()
COALESCED = (REPO / "solutions" / "coalesced.cu").read_text()
COL_X = "const int col = blockIdx.x * blockDim.x + threadIdx.x;"
ROW_Y = "const int row = blockIdx.y * blockDim.y + threadIdx.y;"
# The coalesced stage with threadIdx.x moving the row: correct, race-free, uncoalesced.
NAIVE_ORDER = COALESCED.replace(COL_X, COL_X.replace("threadIdx.x", "threadIdx.y")).replace(
    ROW_Y, ROW_Y.replace("threadIdx.y", "threadIdx.x"))


@pytest.mark.parametrize("lanes, size, sectors, ideal", [
    ({i: 4 * i for i in range(32)}, 4, 4, 4),                      # 32 consecutive floats
    ({i: 8 * i for i in range(32)}, 4, 8, 4),                      # stride 2
    ({i: 128 * i for i in range(32)}, 4, 32, 4),                   # stride 32: one sector per lane
    ({i: 28 for i in range(32)}, 4, 1, 1),                         # one float for the whole warp
    ({i: 4 * i + 4 for i in range(32)}, 4, 5, 4),                  # one float off: a fifth sector
    ({i: 16 * i for i in range(32)}, 16, 16, 16),                  # float4
    ({i: 16 * i + 16 for i in range(32)}, 16, 17, 16),             # float4, one float4 off
    ({i: 32 * i for i in range(32)}, 16, 32, 16),                  # float4, stride 2
    ({i: 4 * i for i in range(16)}, 4, 2, 2),                      # half a warp
    ({0: 30}, 4, 2, 1),                                            # one misaligned float across a boundary
])
def test_sector_rule(lanes, size, sectors, ideal):
    assert emu_analysis.global_sectors({k: 4096 + v for k, v in lanes.items()}, size) == (sectors, ideal)


def _analyse(stage_id: str, source: str, shape=(128, 128, 128)):
    st = stages.stage(stage_id)
    A, B = sgemm.random_inputs(*shape, np.random.default_rng(3))
    fn = sgemm.compile_kernel(st, source)
    with emu_analysis.analyze() as report:
        C = sgemm.run(st, A, B, function=fn)
    assert sgemm.compare(C, A, B).ok
    return {(coalescing.array_name(g.buffer), g.op): g for g in report.global_accesses}, report


def test_naive_kernel_reads_a_with_32_sectors_per_request():
    lines, report = _analyse("naive", NAIVE)
    M = N = K = 128
    warps = M * N // 32
    assert set(lines) == {("A", "ld"), ("B", "ld"), ("C", "st")}
    a, b, c = lines["A", "ld"], lines["B", "ld"], lines["C", "st"]
    assert (a.requests, a.sectors, a.ideal_sectors) == (warps * K, 32 * warps * K, 4 * warps * K)
    assert (b.requests, b.sectors) == (warps * K, warps * K)          # the warp shares one B value
    assert (c.requests, c.sectors) == (warps, 32 * warps)
    assert a.line == b.line and c.line == a.line + 1
    assert report.sectors("ld") == a.sectors + b.sectors and report.requests("st") == warps
    assert "32 sector(s) of 32 B (1024 B moved for 128 B used)" in a.picture
    assert f"{K * 4} B apart" in a.picture                            # one row of A between lanes


def test_coalesced_kernel_reads_b_with_4_sectors_per_request():
    lines, _ = _analyse("coalesced", COALESCED, shape=(96, 64, 48))
    warps, K = 96 * 64 // 32, 48
    a, b, c = lines["A", "ld"], lines["B", "ld"], lines["C", "st"]
    assert (b.requests, b.sectors, b.excess) == (warps * K, 4 * warps * K, 0)
    assert (a.requests, a.sectors) == (warps * K, warps * K)
    assert (c.requests, c.sectors, c.excess) == (warps, 4 * warps, 0)


def test_tiled_kernel_counts_one_request_per_warp_and_tile():
    lines, report = _analyse("smem-tiling", (REPO / "solutions" / "smem-tiling.cu").read_text())
    warps, tiles = 128 * 128 // 32, 128 // 32
    assert lines["A", "ld"].requests == warps * tiles and lines["A", "ld"].sectors == 4 * warps * tiles
    assert report.bank_conflicts and report.conflicts_ld == 0         # the shared side still counted


def test_analyze_command_prints_sectors(tmp_path):
    script = tmp_path / "strided.py"
    script.write_text(
        "import numpy as np\nimport pycuda.autoinit\nimport pycuda.driver as drv\n"
        "from pycuda.compiler import SourceModule\n"
        "mod = SourceModule('__global__ void k(const float* a, float* b) { int i = threadIdx.x; b[i] = a[4 * i]; }')\n"
        "a = drv.to_device(np.ones(512, np.float32)); b = drv.mem_alloc(512)\n"
        "mod.get_function('k')(a, b, block=(32, 1, 1))\n")
    p = subprocess.run([sys.executable, "-m", "grader.emulator", "--analyze", str(script)], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "global memory: 1 load requests, 16 sectors; 1 store requests, 4 sectors" in p.stdout, p.stdout
    assert "16 sectors per request (16 sectors for 1 requests; 4 per request would do)" in p.stdout, p.stdout
    assert "worst global request" in p.stdout and "#..." in p.stdout, p.stdout


def test_registered_for_lab_1_only():
    assert registry.get("coalesced").check_names == ["compiles", "correctness", "races", "bank-conflicts",
                                                      "coalescing", "performance"]
    assert "coalescing" in registry.get("naive").check_names
    assert "coalescing" not in registry.get("smem-tiling").check_names


def test_check_passes_the_coalesced_kernel():
    r = run_here(stages.stage("coalesced"), coalescing.CHECK, COALESCED)
    assert r.status == PASSED and r.points == 1.0, r.message
    assert "load from B: 4 sectors per warp request" in r.message
    assert "load from A: 1 sector per warp request" in r.message and "uncoalesced" not in r.message


def test_check_fails_the_naive_index_order():
    r = run_here(stages.stage("coalesced"), coalescing.CHECK, NAIVE_ORDER)
    assert r.status == FAILED and r.points == 0.0
    assert "line 11, load from A: 32 sectors per warp request" in r.message, r.message
    assert "store to C: 32 sectors per warp request" in r.message
    assert "uncoalesced, 4 per request would do" in r.message
    assert "worst request (line 11, A)" in r.message and "which index does threadIdx.x move?" in r.message
    assert r.html and "<pre>" in r.html


def test_check_reports_but_does_not_grade_the_naive_stage():
    r = run_here(stages.stage("naive"), coalescing.CHECK, NAIVE)
    assert r.status == NOT_GRADED and "information only" in r.message
    assert "load from A: 32 sectors per warp request" in r.message


def test_check_credits_only_a_kernel_that_computes_c():
    empty = COALESCED.split("{", 1)[0] + "{\n}\n"
    r = run_here(stages.stage("coalesced"), coalescing.CHECK, empty)
    assert r.status == FAILED and "no global memory" in r.message
    wrong = COALESCED.replace("C[row * N + col] = sum;", "C[row * N + col] = 2.0f * sum;")
    r = run_here(stages.stage("coalesced"), coalescing.CHECK, wrong)
    assert r.status == FAILED and "but C is wrong" in r.message


def test_check_reports_a_compile_error():
    r = run_here(stages.stage("coalesced"), coalescing.CHECK, COALESCED.replace("float sum", "flot sum"))
    assert r.status == FAILED and "does not compile" in r.message


# Nsight Compute on the H200 (results/nvidia-h200/validation.md): (ld requests, ld sectors, st requests, st sectors).
MEASURED = {"ld_stride_1": (8, 32, 8, 32), "ld_stride_2": (8, 64, 8, 32), "ld_stride_32": (8, 256, 8, 32),
            "ld_broadcast": (8, 8, 8, 32), "ld_misaligned_float": (8, 40, 8, 32), "ld_half_warp": (8, 16, 8, 16),
            "ld_float2": (8, 64, 8, 32), "ld_float4": (8, 128, 8, 32), "ld_float4_offset": (8, 136, 8, 32),
            "ld_float4_stride_2": (8, 256, 8, 32), "ld_gather": (16, 286, 8, 32), "st_stride_32": (8, 32, 8, 256),
            "st_misaligned_float": (8, 32, 8, 40), "st_float4": (8, 32, 8, 128)}


@pytest.fixture(scope="module")
def validation_counts():
    from grader.programs import emulator_validate as validate
    return {name: tuple(counts[k] for k in validate.SECTOR_KEYS)
            for name, counts in validate.emulator_results().items()}


@pytest.mark.parametrize("kernel", sorted(MEASURED))
def test_global_patterns_match_nsight_compute(validation_counts, kernel):
    assert validation_counts[kernel] == MEASURED[kernel]


def test_validation_table_replaces_only_its_section():
    from grader.programs import emulator_validate as validate
    text = "# title\n\nbank table\n\n## notes\n\nhand-written\n"
    once = validate.replace_table(text, "| t1 |", "cmd1")
    assert once.startswith(text.rstrip("\n")) and "| t1 |" in once and "cmd1" in once
    twice = validate.replace_table(once + "\nmore notes after\n", "| t2 |", "cmd2")
    assert "| t1 |" not in twice and "cmd1" not in twice and "| t2 |" in twice
    assert "hand-written" in twice and "more notes after" in twice and twice.count("## Global memory") == 1


def test_a_block_with_very_many_requests_is_counted_partly_not_without_bound():
    """A block's requests wait in memory until it ends: past the runtime's limit
    (2^18 per block) the rest are left out of the counts, and said to be."""
    from grader.emulator.pycuda import compiler, driver
    n, limit = 300_000, 1 << 18
    f = compiler.SourceModule("__global__ void sum(const float* in, float* out, int n) {\n"
                              "    float s = 0.0f;\n    for (int k = 0; k < n; ++k) s += in[k];\n"
                              "    out[threadIdx.x] = s;\n}\n").get_function("sum")
    a, out = driver.to_device(np.ones(n, np.float32)), driver.mem_alloc(32 * 4)
    with emu_analysis.analyze() as report:
        f(a, out, np.int32(n), block=(32, 1, 1))
    assert report.requests("ld") == limit and report.sectors("ld") == limit      # one float a request: 1 sector
    assert report.global_dropped == 32 * (n - limit) + 32                          # and the final store
    assert "partial" in str(report)
    result = np.empty(32, np.float32)
    driver.memcpy_dtoh(result, out)
    assert (result == n).all()

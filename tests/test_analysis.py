"""The emulator's analysis: bank conflicts (the expected numbers follow from
the hardware rule: 32 banks of 4 bytes, broadcast of a shared word, 8-byte
accesses per half-warp and 16-byte per quarter-warp; results/h200/validation.md
holds Nsight Compute's numbers for the same kernels), races, and out-of-bounds
or misaligned accesses. The analysis runs on the emulator on any machine."""
import subprocess
import sys

import numpy as np
import pytest

from grader.emulator import analyze
from grader.emulator.pycuda import compiler, driver
from grader.kernels import sgemm, stages
from grader.programs import emulator_validate as validate


@pytest.fixture(scope="module")
def patterns():
    return compiler.SourceModule(validate.PATTERNS, no_extern_c=True)


def _analyse(function, *args, **launch):
    with analyze() as report:
        function(*args, **launch)
    return report


def _buffers():
    data = np.random.default_rng(0).random(8192, dtype=np.float32)
    return driver.to_device(data), driver.mem_alloc(8192 * 4)


def test_transpose_through_padded_tile(patterns):
    d_in, d_out = _buffers()
    plain = _analyse(patterns.get_function("transpose_32x32"), d_in, d_out, block=(32, 32, 1))
    padded = _analyse(patterns.get_function("transpose_32x33"), d_in, d_out, block=(32, 32, 1))
    # Nsight Compute on the H200: 992 and 0 (shared/notes/emulator.md)
    assert (plain.conflicts_ld, plain.conflicts_st) == (992, 0)
    assert (padded.conflicts_ld, padded.conflicts_st) == (0, 0)
    worst = plain.worst()
    source_line = validate.PATTERNS.splitlines().index("    out[y * 32 + x] = t[x][y];") + 1
    assert worst.line == source_line and worst.op == "ld" and worst.max_ways == 32
    assert worst.requests == 32 and worst.wavefronts == 1024 and worst.ideal_wavefronts == 32
    assert "32 distinct word(s)" in worst.picture


@pytest.mark.parametrize("kernel, conflicts_ld, conflicts_st", [
    ("read_stride_1", 0, 0),
    ("read_stride_2", 8 * 1, 0),          # 8 warps, 2-way: 2 wavefronts for an ideal 1
    ("read_stride_32", 8 * 31, 0),        # 32-way
    ("read_broadcast", 0, 0),
    ("read_float2", 0, 0),                # 16 lanes x 8 bytes fill the 32 banks once per half-warp
    ("read_float2_stride_2", 8 * 2, 0),   # 2-way in each half-warp
    ("read_float4", 0, 0),
    ("read_float4_stride_2", 8 * 4, 0),   # 2-way in each quarter-warp
    ("write_stride_32", 8 * 31, 8 * 31),
])
def test_access_patterns(patterns, kernel, conflicts_ld, conflicts_st):
    d_in, d_out = _buffers()
    report = _analyse(patterns.get_function(kernel), d_in, d_out, block=(256, 1, 1))
    assert (report.conflicts_ld, report.conflicts_st) == (conflicts_ld, conflicts_st)
    reads = [s for s in report.bank_conflicts if s.op == "ld"]
    assert sum(s.requests for s in reads) == 8        # one request per warp: nothing lost, nothing split


def _stage_variant(stage_id: str, old: str, new: str = "") -> str:
    source = stages.stage(stage_id).source()
    assert old in source
    return source.replace(old, new, 1)


def _line_of(source: str, text: str, occurrence: int = 0) -> int:
    lines = [i + 1 for i, line in enumerate(source.splitlines()) if text in line]
    return lines[occurrence]


def _sgemm_races(source: str, shape=(64, 64, 64)):
    stage = stages.stage("smem-tiling")
    f = compiler.SourceModule(source, options=stage.options()).get_function(stage.kernel)
    A, B = sgemm.random_inputs(*shape, np.random.default_rng(2))
    a, b, c = driver.to_device(A), driver.to_device(B), driver.mem_alloc(shape[0] * shape[1] * 4)
    launch = stage.launch(*shape)
    with analyze() as report:
        f(np.int32(shape[0]), np.int32(shape[1]), np.int32(shape[2]), a, b, c, block=launch.block, grid=launch.grid)
    return report


@pytest.mark.parametrize("stride, size, lanes, wavefronts, ideal, max_ways", [
    (4, 4, 32, 1, 1, 1),          # consecutive words
    (8, 4, 32, 2, 1, 2),          # stride 2: 2-way
    (0, 4, 32, 1, 1, 1),          # one word for every lane: broadcast
    (128, 4, 32, 32, 1, 32),      # stride 32: 32-way
    (8, 8, 32, 2, 2, 1),          # float2: half-warps
    (16, 8, 32, 4, 2, 2),         # float2 at stride 2: 2-way in each half-warp
    (16, 16, 32, 4, 4, 1),        # float4: quarter-warps
    (32, 16, 32, 8, 4, 2),        # float4 at stride 2: 2-way in each quarter-warp
    (128, 4, 1, 1, 1, 1),         # one active lane
])
def test_the_bank_rule_for_one_request(stride, size, lanes, wavefronts, ideal, max_ways):
    """The runtime's rule as autotune calls it (grader.emulator.analysis.bank_wavefronts)."""
    from grader.emulator.analysis import Wavefronts, bank_wavefronts
    got = bank_wavefronts({lane: stride * lane for lane in range(lanes)}, size)
    assert got == Wavefronts(wavefronts, ideal, max_ways)
    assert bank_wavefronts({}, 4) == Wavefronts(0, 0, 0)
    with pytest.raises(ValueError):
        bank_wavefronts({0: 0}, 32)


def test_race_missing_barrier_after_the_loads():
    source = _stage_variant("smem-tiling", "        __syncthreads();\n        for (int k = 0;", "        for (int k = 0;")
    report = _sgemm_races(source)
    assert report.races
    loads, compute = _line_of(source, "As[ty][tx] ="), _line_of(source, "sum += As[ty][k]")
    lines = {(r.line_a, r.line_b) for r in report.races}
    assert (loads, compute) in lines or (compute, loads) in lines or \
        (_line_of(source, "Bs[ty][tx] ="), compute) in lines


def test_race_missing_barrier_at_the_end_of_the_loop():
    source = _stage_variant("smem-tiling", "            sum += As[ty][k] * Bs[k][tx];\n        __syncthreads();",
                            "            sum += As[ty][k] * Bs[k][tx];")
    report = _sgemm_races(source)
    compute = _line_of(source, "sum += As[ty][k]")
    loads = {_line_of(source, "As[ty][tx] ="), _line_of(source, "Bs[ty][tx] =")}
    assert any({r.line_a, r.line_b} & loads and compute in (r.line_a, r.line_b) for r in report.races), report


def test_race_in_tree_reduction_without_barriers():
    mod = compiler.SourceModule(validate.BUGS, no_extern_c=True)
    d_in, d_out = _buffers()
    report = _analyse(mod.get_function("racy_reduction"), d_in, d_out, block=(256, 1, 1))
    line = _line_of(validate.BUGS, "s[t] += s[t + stride]")
    assert report.races and all(line in (r.line_a, r.line_b) for r in report.races)
    assert "no __syncthreads()" in report.races[0].describe()


HALVES = """
#include <cstdint>
extern "C" __global__ void halves(const uint16_t* in, uint16_t* out)
{
    __shared__ uint16_t tile[256];
    const int t = threadIdx.x;
    tile[t] = in[t];
    tile[t] = tile[t] + 1;
    BARRIER
    out[t] = tile[t ^ 1];
}
"""


@pytest.mark.parametrize("barrier", ["__syncthreads();", ""])
def test_threads_on_the_two_halves_of_a_word_race_only_on_each_others_half(barrier):
    """16-bit elements, one a thread: neighbours share a word. Each writing and updating its own is no race;
    reading the neighbour's before the barrier is one."""
    source = HALVES.replace("BARRIER", barrier)
    mod = compiler.SourceModule(source, no_extern_c=True)
    d_in, d_out = _buffers()
    races = _analyse(mod.get_function("halves"), d_in, d_out, block=(256, 1, 1)).races
    if barrier:
        assert races == [], [r.describe() for r in races]
    else:
        assert races and all(_line_of(source, "out[t] =") in (r.line_a, r.line_b) for r in races), \
            [r.describe() for r in races]


def test_warp_synchronised_exchange_is_not_a_race():
    mod = compiler.SourceModule("""
    __global__ void k(float* out) {
        __shared__ float s[32];
        s[threadIdx.x] = threadIdx.x;
        __syncwarp();
        out[threadIdx.x] = s[(threadIdx.x + 1) % 32];
    }""")
    report = _analyse(mod.get_function("k"), driver.mem_alloc(128), block=(32, 1, 1))
    assert not report.races


def _warptiling(source: str, shape=(70, 260, 52)):
    """Run the warptiling stage (asynchronous copies) under the analysis: (correct?, report)."""
    stage = stages.stage("warptiling")
    f = compiler.SourceModule(source, options=stage.options()).get_function(stage.kernel)
    A, B = sgemm.random_inputs(*shape, np.random.default_rng(3))
    with analyze() as report:
        C = sgemm.run(stage, A, B, function=f)
    return sgemm.compare(C, A, B).ok, report


def test_race_asynchronous_copies_without_barrier():
    source = _stage_variant("warptiling", "__syncthreads();                         // ... and everyone's", "//")
    _, report = _warptiling(source)
    wait = _line_of(source, "__pipeline_wait_prior")
    reads = {_line_of(source, "&As[k][aOff"), _line_of(source, "&Bs[k][bOff")}
    reads |= {line - 1 for line in reads}         # a statement over two lines may be reported at its first
    assert any(wait in (r.line_a, r.line_b) and {r.line_a, r.line_b} & reads for r in report.races), report.races


def test_asynchronous_copies_never_waited_for_give_wrong_results():
    ok, _ = _warptiling(_stage_variant("warptiling", "__pipeline_wait_prior(STAGES - 2);"))
    assert not ok


@pytest.mark.parametrize("shape", [(70, 50, 40), (70, 52, 44)], ids=["scalar-path", "float4-path"])
@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.id)
def test_reference_kernels_are_clean(stage, shape):
    f = compiler.SourceModule(stage.source(), options=stage.options()).get_function(stage.kernel)
    A, B = sgemm.random_inputs(*shape, np.random.default_rng(3))
    with analyze() as report:
        C = sgemm.run(stage, A, B, function=f)
    assert sgemm.compare(C, A, B).ok
    assert not report.races, report
    assert not report.out_of_bounds, report
    if stage.bank_conflict_free:
        assert report.conflicts_ld == 0 and report.conflicts_st == 0, report


def test_out_of_bounds_read_is_reported_with_its_line():
    source = _stage_variant("smem-tiling", "(row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f",
                            "A[row * K + k0 + tx]")
    stage = stages.stage("smem-tiling")
    f = compiler.SourceModule(source, options=stage.options()).get_function(stage.kernel)
    A, B = sgemm.random_inputs(17, 33, 9, np.random.default_rng(4))
    with analyze() as report:
        with pytest.raises(driver.LaunchError) as err:
            sgemm.run(stage, A, B, function=f)
    finding = report.out_of_bounds[0]
    assert finding.kind == "out of bounds" and finding.op == "ld"
    assert finding.line == _line_of(source, "As[ty][tx] =")
    assert finding.buffer.startswith("argument 3 (const float*")
    assert err.value.kind == "fault" and f"line {finding.line}" in str(err.value)


def test_out_of_bounds_write_says_where_it_is_among_the_allocations():
    """A write past the end of C is said to be past the end of C, by how much,
    and not inside any allocation; never "from the start of" an argument it is
    not in (the message used to read "+N bytes from the start of argument 0")."""
    mod = compiler.SourceModule("""
    __global__ void past(float* C, int n, int extra) {
        if (threadIdx.x == 5) C[n + extra] = 1.0f;
    }""")
    n = 1 << 18                                   # 1 MB: a mapping of its own, so the bytes after it are no one's
    C = driver.mem_alloc(4 * n)
    with analyze() as report:
        with pytest.raises(driver.LaunchError) as err:
            mod.get_function("past")(C, np.int32(n), np.int32(64), block=(32, 1, 1))
    message = str(err.value)
    assert "out-of-bounds 4-byte write" in message and "thread (5, 0, 0)" in message
    assert "not inside any device allocation: 256 bytes past the end of argument 0 (float*, a 1048576-byte " \
           "buffer)" in message, message
    assert "from the start of" not in message
    assert report.out_of_bounds[0].place in message


def test_a_pointer_given_as_an_integer_names_its_argument():
    """PyCUDA passes numpy.uintp(int(allocation)) to a pointer parameter as the pointer itself."""
    mod = compiler.SourceModule("""
    __global__ void past(float* C, int n) {
        if (threadIdx.x == 5) C[n] = 1.0f;
    }""")
    n = 1 << 18
    C = driver.mem_alloc(4 * n)
    with analyze():
        with pytest.raises(driver.LaunchError) as err:
            mod.get_function("past")(np.uintp(int(C)), np.int32(n), block=(32, 1, 1))
    assert "0 bytes past the end of argument 0 (float*, a 1048576-byte buffer)" in str(err.value), str(err.value)


def test_place_among_allocations():
    from grader.emulator.analysis import place_among
    ranges, names = [(1000, 100), (5000, 40)], ["A", "B"]
    assert place_among(1096, 8, ranges, names) == \
        "which starts 4 byte(s) before the end of A: its last 4 byte(s) are past the end"
    assert place_among(1200, 4, ranges, names) == \
        "not inside any device allocation: 100 bytes past the end of A; 3796 bytes before the start of B"
    assert place_among(16, 4, ranges, names) == "not inside any device allocation: 980 bytes before the start of A"
    assert place_among(9000, 4, ranges, names) == "not inside any device allocation: 3960 bytes past the end of B"
    assert place_among(9000, 4, [], []) == "not inside any device allocation (the launch has none)"


def test_misaligned_vector_access():
    mod = compiler.SourceModule(validate.BUGS, no_extern_c=True)
    d_in, d_out = _buffers()
    with analyze() as report:
        with pytest.raises(driver.LaunchError, match="misaligned address"):
            mod.get_function("misaligned_float4")(d_in, d_out, block=(32, 1, 1))
    assert report.out_of_bounds[0].line == _line_of(validate.BUGS, "reinterpret_cast<const float4*>(in + 1)")


def test_analysis_of_128_cubed_sgemm_is_fast():
    import time
    stage = stages.stage("smem-tiling")
    f = compiler.SourceModule(stage.source(), options=stage.options()).get_function(stage.kernel)
    A, B = sgemm.random_inputs(128, 128, 128, np.random.default_rng(5))
    with analyze():
        sgemm.run(stage, A, B, function=f)       # builds the analysis variant
    start = time.perf_counter()
    with analyze() as report:
        sgemm.run(stage, A, B, function=f)
    assert time.perf_counter() - start < 10
    assert sum(s.requests for s in report.bank_conflicts if s.op == "ld") == 128 * 128 // 32 * 4 * 64


def test_command_line_analysis(tmp_path):
    script = tmp_path / "racy.py"
    script.write_text(
        "import numpy as np, pycuda.autoinit, pycuda.driver as drv\n"
        "from pycuda.compiler import SourceModule\n"
        "from grader.programs import emulator_validate as validate\n"
        "f = SourceModule(validate.BUGS, no_extern_c=True).get_function('racy_reduction')\n"
        "f(drv.In(np.ones(256, np.float32)), drv.Out(np.zeros(1, np.float32)), block=(256, 1, 1))\n")
    proc = subprocess.run([sys.executable, "-m", "grader.emulator", "--analyze", str(script)],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "races: 1" in proc.stdout and "write after read" in proc.stdout

"""wgmma in the course's Hopper header: a warpgroup multiplies a 64 x K strip of A by an N x K strip of B
(both bf16, K-major core matrices in shared memory, 16 columns of K at a time) into FP32 accumulators, each
thread's where PTX documents them, and wgmmas issued back to back on the same accumulators add up; operands
a tensor copy with the 128-byte swizzle landed are read through descriptors of that swizzle. The emulator computes a thread's part at the wait that completes its
group: before that wait its accumulators hold NaN, a store the wgmma reads without a proxy fence is a race
named by both lines, and so is a write to an operand before the wgmma that reads it has completed; nvcc
accepts the GPU's header for sm_90a."""
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.emulator.build import PYCUDA_INCLUDE_DIR
from grader.kernels import bf16
from grader.kernels.sgemm import WGMMA_IN_FLIGHT_BITS, value_hint

# Core matrix (r / 8, k / 8) of a 16-wide slice of K at (r / 8) SBO + (k / 8) LBO bytes: SBO 256, LBO 128.
STRIP = """#include "hopper.cuh"
#define CORE(r, k) (((r) / 8) * 128 + ((k) / 8) * 64 + ((r) % 8) * 8 + (k) % 8)
#define PAIR(x) (*(uint32_t*)(&(x)))
__global__ void strip(const uint16_t* a, const uint16_t* bt, float* c, int K)
{
    __shared__ __align__(128) uint16_t As[64 * 16];
    __shared__ __align__(128) uint16_t Bs[NCOL * 16];
    const int t = threadIdx.x;
    float d[NCOL / 2];
    for (int i = 0; i < NCOL / 2; ++i) d[i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = t; i < 64 * 8; i += 128)           // two elements a thread, side by side in a core matrix
            PAIR(As[CORE(i / 8, 2 * (i % 8))]) = PAIR(a[(i / 8) * K + k0 + 2 * (i % 8)]);
        for (int i = t; i < NCOL * 8; i += 128)
            PAIR(Bs[CORE(i / 8, 2 * (i % 8))]) = PAIR(bt[(i / 8) * K + k0 + 2 * (i % 8)]);
        fence_proxy_async();
        __syncthreads();
        wgmma_fence();
        WGMMA(d, wgmma_descriptor(As, 128, 256), wgmma_descriptor(Bs, 128, 256), 1);
        wgmma_commit_group();
        wgmma_wait_group(0);
        __syncthreads();
    }
    const int warp = t / 32, lane = t % 32;
    for (int i = 0; i < NCOL / 2; ++i)
        c[(16 * warp + lane / 4 + 8 * ((i / 2) % 2)) * NCOL + 2 * (lane % 4) + i % 2 + 8 * (i / 4)] = d[i];
}
"""


# The whole of K in shared memory at once (SBO 8 rows of KT elements), then one wgmma per 16 columns of K into
# the same accumulators, back to back in one group: each adds to what the one before it computes.
CHAIN = """#include "hopper.cuh"
#define KT 48
#define CORE(r, k) (((r) / 8) * (KT * 8) + ((k) / 8) * 64 + ((r) % 8) * 8 + (k) % 8)
#define PAIR(x) (*(uint32_t*)(&(x)))
__global__ void chain(const uint16_t* a, const uint16_t* bt, float* c)
{
    __shared__ __align__(128) uint16_t As[64 * KT];
    __shared__ __align__(128) uint16_t Bs[64 * KT];
    const int t = threadIdx.x;
    for (int i = t; i < 64 * KT / 2; i += 128) {
        PAIR(As[CORE(i / (KT / 2), 2 * (i % (KT / 2)))]) = PAIR(a[2 * i]);
        PAIR(Bs[CORE(i / (KT / 2), 2 * (i % (KT / 2)))]) = PAIR(bt[2 * i]);
    }
    fence_proxy_async();
    __syncthreads();
    float d[32];
    wgmma_fence();
    for (int s = 0; s < KT / 16; ++s)           // the first adds to nothing (scale_d 0): d starts undefined
        wgmma_m64n64k16_bf16(d, wgmma_descriptor(As + 128 * s, 128, KT * 16), wgmma_descriptor(Bs + 128 * s, 128,
                             KT * 16), s > 0);
    wgmma_commit_group();
    wgmma_wait_group(0);
    const int warp = t / 32, lane = t % 32;
    for (int i = 0; i < 32; ++i)
        c[(16 * warp + lane / 4 + 8 * ((i / 2) % 2)) * 64 + 2 * (lane % 4) + i % 2 + 8 * (i / 4)] = d[i];
}
"""


def _edited(source: str, changes: dict) -> str:
    for old, new in changes.items():
        assert old in source, old
        source = source.replace(old, new, 1)
    return source


def _source(n: int, **changes) -> str:
    return _edited(STRIP.replace("NCOL", str(n)).replace("WGMMA", f"wgmma_m64n{n}k16_bf16"), changes)


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _run(cuda, source_module, source: str, n: int, K: int, analyze: bool = False):
    """(C of the kernel, A B in float64, the races found where `analyze`)."""
    rng = np.random.default_rng(7)
    A = rng.integers(-4, 5, (64, K)).astype(np.float32)        # small integers: bf16 and every sum exact
    Bt = rng.integers(-4, 5, (n, K)).astype(np.float32)
    C = np.full((64, n), np.nan, np.float32)
    kernel = source_module(source, include_dirs=[str(PYCUDA_INCLUDE_DIR)], arch="sm_90a").get_function("strip")
    args = (cuda.In(bf16.to_bits(A)), cuda.In(bf16.to_bits(Bt)), cuda.Out(C), np.int32(K))
    if not analyze:
        kernel(*args, block=(128, 1, 1), grid=(1, 1))
        return C, A.astype(np.float64) @ Bt.T.astype(np.float64), []
    from grader.emulator import analyze as analysis
    with analysis() as report:
        kernel(*args, block=(128, 1, 1), grid=(1, 1))
    return C, A.astype(np.float64) @ Bt.T.astype(np.float64), report.races


@pytest.mark.parametrize("n", [8, 64, 256])
def test_a_warpgroup_multiplies_its_strips_into_the_documented_accumulators(cuda, source_module, n):
    C, expected, _ = _run(cuda, source_module, _source(n), n, K=48)
    assert np.array_equal(C, expected), np.argwhere(C != expected)[:8]


def _chain(cuda, source_module, source: str = CHAIN):
    """(C of CHAIN or a variant of it, A B in float64)."""
    rng = np.random.default_rng(11)
    A, Bt = (rng.integers(-4, 5, shape).astype(np.float32) for shape in ((64, 48), (64, 48)))
    C = np.full((64, 64), np.nan, np.float32)
    kernel = source_module(source, include_dirs=[str(PYCUDA_INCLUDE_DIR)], arch="sm_90a").get_function("chain")
    kernel(cuda.In(bf16.to_bits(A)), cuda.In(bf16.to_bits(Bt)), cuda.Out(C), block=(128, 1, 1), grid=(1, 1))
    return C, A.astype(np.float64) @ Bt.T.astype(np.float64)


def test_wgmmas_in_flight_on_the_same_accumulators_add_up_in_the_order_issued(cuda, source_module):
    C, expected = _chain(cuda, source_module)
    assert np.array_equal(C, expected), np.argwhere(C != expected)[:8]


def test_wgmmas_adding_to_accumulators_set_before_them_keep_them_across_a_wait_that_completes_nothing(
        cuda, source_module):
    C, expected = _chain(cuda, source_module, _edited(CHAIN, {
        "    float d[32];\n": "    float d[32];\n    for (int i = 0; i < 32; ++i) d[i] = 1.0f;\n",
        "s > 0);": "1);",
        "    wgmma_wait_group(0);\n": "    wgmma_wait_group(1);\n    wgmma_wait_group(0);\n"}))
    assert np.array_equal(C, expected + 1), np.argwhere(C != expected + 1)[:8]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the architecture is nvcc's to check")
def test_wgmma_needs_the_architecture_sm_90a_as_on_the_gpu(cuda, source_module):
    """SourceModule's default architecture is the device's, sm_90, where wgmma does not exist."""
    with pytest.raises(cuda.CompileError) as e:
        source_module(_source(8), include_dirs=[str(PYCUDA_INCLUDE_DIR)])
    said = f"{e.value} {getattr(e.value, 'stderr', '')}"
    assert "not supported on .target 'sm_90'" in said, said


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_strip_in_order_has_no_race(cuda, source_module):
    C, expected, races = _run(cuda, source_module, _source(64), 64, K=32, analyze=True)
    assert np.array_equal(C, expected) and races == [], [r.describe() for r in races]


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the accumulators hold whatever the tensor cores left")
def test_accumulators_read_before_the_wait_hold_no_result(cuda, source_module):
    source = _source(64, **{"        wgmma_wait_group(0);\n        __syncthreads();\n    }\n": "    }\n",
                            "= d[i];\n": "= d[i];\n    wgmma_wait_group(0);\n"})
    C, _, _ = _run(cuda, source_module, source, 64, K=16)
    assert (C.view(np.uint32) == WGMMA_IN_FLIGHT_BITS).all()     # the NaN the grader names
    assert "read before a wgmma_wait_group() completed it" in value_hint(C[0, 0])


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the wgmma's result is lost without a word")
def test_a_thread_that_ends_with_a_wgmma_in_flight_is_stopped_at_its_line(cuda, source_module):
    source = _source(64, **{"        wgmma_wait_group(0);\n": ""})
    with pytest.raises(cuda.LaunchError) as e:
        _run(cuda, source_module, source, 64, K=32)
    assert f"the wgmma on line {_line(source, 'wgmma_m64n64k16_bf16(')} was still in flight when its thread " \
           "ended" in str(e.value), str(e.value)


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the accumulators hold whatever the tensor cores left")
def test_a_wait_that_leaves_one_group_pending_completes_the_older_one(cuda, source_module):
    """The strip's wgmma into d, then one into e, in two groups: after wgmma_wait_group(1), d is the product
    and e holds no result yet (warps 2 and 3 write e's rows)."""
    source = _source(8, **{
        "    float d[8 / 2];\n": "    float d[8 / 2], e[8 / 2];\n",
        "        wgmma_commit_group();\n        wgmma_wait_group(0);\n":
            "        wgmma_commit_group();\n"
            "        wgmma_m64n8k16_bf16(e, wgmma_descriptor(As, 128, 256), wgmma_descriptor(Bs, 128, 256), 0);\n"
            "        wgmma_commit_group();\n        wgmma_wait_group(1);\n",
        "    const int warp": "    for (int i = 0; i < 4 && t >= 64; ++i) d[i] = e[i];\n    wgmma_wait_group(0);\n"
                          "    const int warp"})
    C, expected, _ = _run(cuda, source_module, source, 8, K=16)
    assert np.array_equal(C[:32], expected[:32]) and (C[32:].view(np.uint32) == WGMMA_IN_FLIGHT_BITS).all(), C


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_store_the_wgmma_reads_without_a_proxy_fence_is_a_race_named_by_both_lines(cuda, source_module):
    source = _source(64, **{"        fence_proxy_async();\n": ""})
    _, _, races = _run(cuda, source_module, source, 64, K=32, analyze=True)
    assert {(r.kind, r.line_a, r.line_b) for r in races} >= {
        ("store not fenced before a wgmma", _line(source, "PAIR(As[CORE("), _line(source, "wgmma_m64n64k16_bf16("))}, \
        [r.describe() for r in races]
    assert "no fence_proxy_async() between them" in races[0].describe()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_an_operand_overwritten_before_its_wgmma_completed_is_a_race(cuda, source_module):
    """The wait moved after the next strip's stores: the wgmma may still be reading the strip they overwrite."""
    source = _source(64, **{"        wgmma_wait_group(0);\n        __syncthreads();\n": "",
                            "    const int warp": "    wgmma_wait_group(0);\n    const int warp"})
    _, _, races = _run(cuda, source_module, source, 64, K=32, analyze=True)
    overwrites = [r for r in races if r.kind == "write to a wgmma's operand before its wait"]
    assert {(r.line_a, r.line_b) for r in overwrites} == {
        (_line(source, "wgmma_m64n64k16_bf16("), _line(source, line)) for line in ("PAIR(As[CORE(", "PAIR(Bs[CORE(")}, \
        [r.describe() for r in races]
    assert "wgmma_wait_group() for it, then a __syncthreads(), before the write" in overwrites[0].describe()


# Both operands as 64 x 64 boxes of a tensor copy with the 128-byte swizzle (rows of 64 elements of K, each
# row's 16-byte chunks permuted by its index mod 8), read by wgmma through descriptors of the same swizzle:
# one k16 slice at a time, 32 bytes further along the rows (SBO 1024: 8 rows of 128 bytes).
SWIZZLED = """#include "hopper.cuh"
__global__ void swizzled(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, float* c)
{
    __shared__ __align__(1024) uint16_t As[64 * 64];
    __shared__ __align__(1024) uint16_t Bs[64 * 64];
    __shared__ uint64_t full;
    const int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&full, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) {
        fence_proxy_tensormap(&a_map);
        fence_proxy_tensormap(&b_map);
        mbarrier_arrive_expect_tx(&full, sizeof(As) + sizeof(Bs));
        tma_load_2d(As, &a_map, 0, 0, &full);
        tma_load_2d(Bs, &b_map, 0, 0, &full);
    }
    mbarrier_wait_parity(&full, 0);
    float d[32];
    wgmma_fence();
    for (int s = 0; s < 4; ++s)
        wgmma_m64n64k16_bf16(d, wgmma_descriptor_swizzle128(As + 16 * s, 0, 1024),
                             wgmma_descriptor_swizzle128(Bs + 16 * s, 0, 1024), s > 0);
    wgmma_commit_group();
    wgmma_wait_group(0);
    const int warp = t / 32, lane = t % 32;
    for (int i = 0; i < 32; ++i)
        c[(16 * warp + lane / 4 + 8 * ((i / 2) % 2)) * 64 + 2 * (lane % 4) + i % 2 + 8 * (i / 4)] = d[i];
}
"""


def test_wgmma_reads_operands_a_swizzled_tensor_copy_laid_out(cuda, source_module):
    from grader.kernels.tensor_map import tensor_map_2d
    rng = np.random.default_rng(13)
    A, Bt = (rng.integers(-4, 5, (64, 64)).astype(np.float32) for _ in range(2))
    a, bt = cuda.to_device(bf16.to_bits(A)), cuda.to_device(bf16.to_bits(Bt))
    C = np.full((64, 64), np.nan, np.float32)
    kernel = source_module(SWIZZLED, include_dirs=[str(PYCUDA_INCLUDE_DIR)], arch="sm_90a").get_function("swizzled")
    kernel(tensor_map_2d(int(a), (64, 64), (64, 64), np.uint16, swizzle=128, bfloat16=True),
           tensor_map_2d(int(bt), (64, 64), (64, 64), np.uint16, swizzle=128, bfloat16=True),
           cuda.Out(C), block=(128, 1, 1), grid=(1, 1))
    expected = A.astype(np.float64) @ Bt.T.astype(np.float64)
    assert np.array_equal(C, expected), np.argwhere(C != expected)[:8]


# B N-major (K x N, row-major as the course stores it), no swizzle: 16-byte chunks of 8 columns at one k, 8
# values of k in a core matrix; LBO 128 bytes between the two halves of the slice of K, SBO 256 between groups
# of 8 columns.
NMAJOR = STRIP.replace("#define PAIR(x)", """#define NCORE(k, n) (((n) / 8) * 128 + ((k) / 8) * 64 + ((k) % 8) * 8 + (n) % 8)
#define PAIR(x)""").replace(
    """            PAIR(Bs[CORE(i / 8, 2 * (i % 8))]) = PAIR(bt[(i / 8) * K + k0 + 2 * (i % 8)]);""",
    """            PAIR(Bs[NCORE(i / (NCOL / 2), 2 * (i % (NCOL / 2)))]) = PAIR(bt[(k0 + i / (NCOL / 2)) * NCOL + 2 * (i % (NCOL / 2))]);""").replace("WGMMA(d,", "WGMMA_NMAJOR(d,")


def test_a_warpgroup_multiplies_an_n_major_b(cuda, source_module):
    """The strip with B given as K x N: SBO steps along N, LBO along K."""
    n, K = 64, 48
    source = NMAJOR.replace("NCOL", str(n)).replace("WGMMA_NMAJOR", f"wgmma_m64n{n}k16_bf16_nmajor")
    rng = np.random.default_rng(5)
    A, B = rng.integers(-4, 5, (64, K)).astype(np.float32), rng.integers(-4, 5, (K, n)).astype(np.float32)
    C = np.full((64, n), np.nan, np.float32)
    kernel = source_module(source, include_dirs=[str(PYCUDA_INCLUDE_DIR)], arch="sm_90a").get_function("strip")
    kernel(cuda.In(bf16.to_bits(A)), cuda.In(bf16.to_bits(B)), cuda.Out(C), np.int32(K), block=(128, 1, 1),
           grid=(1, 1))
    expected = A.astype(np.float64) @ B.astype(np.float64)
    assert np.array_equal(C, expected), np.argwhere(C != expected)[:8]


# A as in SWIZZLED; B N-major, 64 x 128 (K x N), as two 64 x 64 boxes of a tensor copy with the 128-byte swizzle
# (rows of 64 columns at one k), LBO 8192 bytes between them; one k16 slice is 16 rows further (2048 bytes).
SWIZZLED_NMAJOR = _edited(SWIZZLED, {
    "uint16_t Bs[64 * 64];": "uint16_t Bs[64 * 128];",
    "        tma_load_2d(Bs, &b_map, 0, 0, &full);\n": "        tma_load_2d(Bs, &b_map, 0, 0, &full);\n"
                                                     "        tma_load_2d(Bs + 64 * 64, &b_map, 64, 0, &full);\n",
    "float d[32];": "float d[64];",
    """        wgmma_m64n64k16_bf16(d, wgmma_descriptor_swizzle128(As + 16 * s, 0, 1024),
                             wgmma_descriptor_swizzle128(Bs + 16 * s, 0, 1024), s > 0);""":
    """        wgmma_m64n128k16_bf16_nmajor(d, wgmma_descriptor_swizzle128(As + 16 * s, 0, 1024),
                                     wgmma_descriptor_swizzle128(Bs + 16 * 64 * s, 8192, 1024), s > 0);""",
    "    for (int i = 0; i < 32; ++i)\n        c[(16 * warp + lane / 4 + 8 * ((i / 2) % 2)) * 64 +":
    "    for (int i = 0; i < 64; ++i)\n        c[(16 * warp + lane / 4 + 8 * ((i / 2) % 2)) * 128 +"})


def test_wgmma_reads_an_n_major_b_a_swizzled_tensor_copy_laid_out(cuda, source_module):
    from grader.kernels.tensor_map import tensor_map_2d
    rng = np.random.default_rng(17)
    A, B = rng.integers(-4, 5, (64, 64)).astype(np.float32), rng.integers(-4, 5, (64, 128)).astype(np.float32)
    a, b = cuda.to_device(bf16.to_bits(A)), cuda.to_device(bf16.to_bits(B))
    C = np.full((64, 128), np.nan, np.float32)
    kernel = source_module(SWIZZLED_NMAJOR, include_dirs=[str(PYCUDA_INCLUDE_DIR)], arch="sm_90a").get_function(
        "swizzled")
    kernel(tensor_map_2d(int(a), (64, 64), (64, 64), np.uint16, swizzle=128, bfloat16=True),
           tensor_map_2d(int(b), (64, 128), (64, 64), np.uint16, swizzle=128, bfloat16=True),
           cuda.Out(C), block=(128, 1, 1), grid=(1, 1))
    expected = A.astype(np.float64) @ B.astype(np.float64)
    assert np.array_equal(C, expected), np.argwhere(C != expected)[:8]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("source", [_source(n) for n in (8, 16, 32, 64, 128, 256)] + [
    NMAJOR.replace("NCOL", str(n)).replace("WGMMA_NMAJOR", f"wgmma_m64n{n}k16_bf16_nmajor") for n in (8, 256)] + [
    CHAIN, SWIZZLED, SWIZZLED_NMAJOR], ids=[f"n{n}" for n in (8, 16, 32, 64, 128, 256)] + [
    "nmajor-n8", "nmajor-n256", "chain", "swizzled", "swizzled-nmajor"])
def test_nvcc_accepts_every_width_and_layout_of_the_gpu_header(tmp_path, source):
    (tmp_path / "kernel.cu").write_text(source)
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90a", f"-I{PYCUDA_INCLUDE_DIR}", "-o", str(tmp_path / "k.cubin"),
                        str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr

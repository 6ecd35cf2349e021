"""A warp-specialized tensor-core GEMM (solutions/warp-specialized-wmma.cu): a producer warp streams boxes of
A and B through a ring of mbarrier-guarded stages with tensor copies, four consumer warps multiply them
with wmma. It matches the exact product of its bfloat16 inputs within float32 accumulation, at shapes
whose sides are no multiple of its tiles, on either backend; on the emulator the race analysis finds
nothing in it, and names the stage refilled too early when the producer does not wait for its consumers;
the source policy accepts it and nvcc compiles it for sm_90. As an exercise (warp-specialized), the
reference passes its checks and the usual mistakes fail with their line and cause."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.emulator.build import PYCUDA_INCLUDE_DIR
from grader.kernels import bf16
from grader.kernels.tensor_map import tensor_map_2d

SOURCE = (Path(__file__).resolve().parent.parent / "solutions" / "warp-specialized-wmma.cu").read_text()
BM, BN, BK, THREADS = 64, 64, 32, 160
EMPTY_WAIT = "            if (kt >= STAGES) mbarrier_wait_parity(&empty[s], (kt / STAGES - 1) % 2);\n"


def _gemm(cuda, source_module, M: int, N: int, K: int, source: str = SOURCE, analysed: bool = False):
    """(A, B as bfloat16 bits, C, the analysis's races or None)."""
    rng = np.random.default_rng(M * 7 + N * 3 + K)
    A = bf16.to_bits(rng.standard_normal((M, K), dtype=np.float32))
    B = bf16.to_bits(rng.standard_normal((K, N), dtype=np.float32))
    d_a, d_b = cuda.to_device(A), cuda.to_device(B)
    C = np.full((M, N), np.nan, np.float32)
    kernel = source_module(source, no_extern_c=True, include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("gemm_bf16")
    args = (tensor_map_2d(int(d_a), A.shape, (BM, BK), np.uint16, bfloat16=True),
            tensor_map_2d(int(d_b), B.shape, (BK, BN), np.uint16, bfloat16=True),
            cuda.Out(C), np.int32(M), np.int32(N), np.int32(K))
    launch = dict(block=(THREADS, 1, 1), grid=(-(-N // BN), -(-M // BM)))
    if not analysed:
        kernel(*args, **launch)
        return A, B, C, None
    from grader.emulator import analyze
    with analyze() as report:
        kernel(*args, **launch)
    return A, B, C, report.races


@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (96, 80, 72), (128, 192, 256)])
def test_the_warp_specialized_gemm_matches_the_exact_product(cuda, source_module, M, N, K):
    A, B, C, _ = _gemm(cuda, source_module, M, N, K)
    exact, tolerance = bf16.product_and_tolerance(A, B)
    error = np.abs(C - exact)
    assert np.all(error <= tolerance), (np.argwhere(~(error <= tolerance))[:5], float(np.nanmax(error)))


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_its_race_analysis_is_clean_and_names_a_stage_refilled_too_early(cuda, source_module):
    *_, races = _gemm(cuda, source_module, 96, 80, 72, analysed=True)
    assert races == [], [r.describe() for r in races]
    eager = SOURCE.replace(EMPTY_WAIT, "")
    assert eager != SOURCE
    A, B, C, races = _gemm(cuda, source_module, 64, 64, 128, source=eager, analysed=True)   # one tile past the ring
    copies = {i for i, line in enumerate(eager.splitlines(), 1) if "tma_load_2d(" in line}
    assert races and all(r.kind in ("bulk copy over an access", "access before its bulk copy's phase") for r in races)
    assert {r.line_b if r.kind == "bulk copy over an access" else r.line_a for r in races} <= copies, \
        [r.describe() for r in races]


def test_a_graded_source_like_it_is_accepted():
    from grader.emulator import build
    assert build.refusals(SOURCE, no_extern_c=True) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_compiles_it_for_sm_90(tmp_path):
    (tmp_path / "gemm.cu").write_text(SOURCE)
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", f"-I{PYCUDA_INCLUDE_DIR}", "-o", str(tmp_path / "gemm.cubin"),
                        str(tmp_path / "gemm.cu")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


# ---- the exercise's checks (grader.grading.checks.tensor_cores) ----------------------------------------
def _variant(old: str, new: str) -> str:
    assert old in SOURCE
    return SOURCE.replace(old, new, 1)


def test_the_reference_passes_every_check():
    from grader.grading.registry import run_here
    for check in ("tensor-gemm-correctness", "tensor-gemm-races"):
        r = run_here("warp-specialized", check, SOURCE, 1)
        assert r.passed, r.text()


def test_an_emulated_kernel_gets_the_emulators_tensor_map_where_the_backend_is_the_gpu(monkeypatch):
    # the races check runs on the emulator on GPU machines too: the driver's map would mean nothing there
    from grader.grading.registry import run_here
    from grader.kernels import tensor_map
    from grader.platform import backend
    monkeypatch.setattr(tensor_map.backend, "current", lambda: backend.Backend("gpu", "a GPU, as on a GPU machine"))
    monkeypatch.setattr(tensor_map, "_encode_on_gpu", lambda *a: pytest.fail("the driver's tensor map was made"))
    r = run_here("warp-specialized", "tensor-gemm-races", SOURCE, 1)
    assert r.passed, r.text()


def test_a_kernel_that_multiplies_nothing_is_not_credited_with_being_race_free():
    """The student's copy before any work: no copies, no mma; the zeroed fragments stored."""
    from grader.grading.registry import run_here
    blank = _variant("        for (int kt = 0; kt < tiles; ++kt) {\n            const int s = kt % STAGES;\n            "
                     "mbarrier_wait_parity(&full[s]", "        for (int kt = 0; kt < 0; ++kt) {\n            const int s = "
                     "kt % STAGES;\n            mbarrier_wait_parity(&full[s]")
    blank = blank.replace("        for (int kt = 0; kt < tiles; ++kt) {\n", "        for (int kt = 0; kt < 0; ++kt) {\n", 1)
    r = run_here("warp-specialized", "tensor-gemm-races", blank, 1)
    assert not r.passed and "C is 0 everywhere: only a kernel that computes C is credited" in r.message, r.text()


def test_the_shapes_are_multiples_of_8_and_mostly_not_of_the_tiles():
    from grader.grading.checks import tensor_cores
    assert all(n % 8 == 0 for shape in tensor_cores.SHAPES for n in shape)
    assert sum(M % BM or N % BN or K % BK for M, N, K in tensor_cores.SHAPES) >= 3


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis and the deadlock's words are the emulator's")
def test_a_producer_that_does_not_wait_for_its_consumers_is_named():
    from grader.grading.registry import run_here
    eager = _variant(EMPTY_WAIT, "")
    r = run_here("warp-specialized", "tensor-gemm-races", eager, 1)
    assert not r.passed and "shared-memory race" in r.message, r.text()
    copies = [i for i, line in enumerate(eager.splitlines(), 1) if "tma_load_2d(" in line]
    assert any(f"bulk copy on line {line}" in r.message for line in copies), r.text()
    r = run_here("warp-specialized", "tensor-gemm-correctness", eager, 1)
    assert not r.passed and "deadlocked on an mbarrier" in r.message and "__syncthreads()" not in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_mbarriers_used_before_their_initialisation_is_ordered_are_named():
    from grader.grading.registry import run_here
    unsynced = _variant("        fence_mbarrier_init();\n    }\n    __syncthreads();\n",
                        "        fence_mbarrier_init();\n    }\n")
    # the emulator's thread order hides it from the results
    assert run_here("warp-specialized", "tensor-gemm-correctness", unsynced, 1).passed
    r = run_here("warp-specialized", "tensor-gemm-races", unsynced, 1)
    assert not r.passed and "a __syncthreads() after mbarrier_init()" in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU a wait on the wrong parity may never end")
def test_a_wrong_parity_fails_correctness():
    from grader.grading.registry import run_here
    wrong = _variant("mbarrier_wait_parity(&full[s], (kt / STAGES) % 2);",
                     "mbarrier_wait_parity(&full[s], (kt / STAGES + 1) % 2);")
    r = run_here("warp-specialized", "tensor-gemm-correctness", wrong, 1)
    assert not r.passed, r.text()

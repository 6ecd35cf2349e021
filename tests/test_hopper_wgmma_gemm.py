"""The wgmma GEMM of the Hopper lab (solutions/warp-specialized-wgmma.cu), as the exercise
warp-specialized-wgmma grades it: a producer warp's swizzled tensor copies through a ring of three stages, two
consumer warpgroups whose wgmmas read A K-major and B N-major by descriptor. The reference passes both checks;
a stage released before its wgmmas completed is a race naming the copies and the wgmma, a B descriptor with a
wrong stride gives a wrong C, and a copy through a tensor map its thread did not fence is named."""
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ON_EMULATOR

from grader.emulator.build import PYCUDA_INCLUDE_DIR
from grader.grading.registry import run_here

SOURCE = (Path(__file__).resolve().parent.parent / "solutions" / "warp-specialized-wgmma.cu").read_text()
RELEASE = "            if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % STAGES]);"


def _variant(old: str, new: str) -> str:
    assert old in SOURCE
    return SOURCE.replace(old, new, 1)


def _lines(source: str, text: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), 1) if text in line}


def test_the_reference_passes_every_check():
    for check in ("wgmma-gemm-correctness", "wgmma-gemm-races"):
        r = run_here("warp-specialized-wgmma", check, SOURCE, 1)
        assert r.passed, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU it is timed")
def test_its_speed_is_not_graded_without_a_gpu():
    from grader.grading.report import NOT_GRADED
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-performance", SOURCE, 1)
    assert r.status == NOT_GRADED and r.points == 0 and r.message.startswith("not graded: no GPU"), r.text()


@pytest.mark.gpu
@pytest.mark.skipif(ON_EMULATOR, reason="needs a GPU")
def test_on_a_gpu_the_reference_is_fast_enough():
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-performance", SOURCE, 1)
    assert r.passed and "x cuBLAS" in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_stage_released_before_its_wgmmas_completed_is_a_race_naming_the_copies_and_the_wgmma():
    early = _variant(RELEASE, "            mbarrier_arrive(&empty[s]);")
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-races", early, 1)
    assert not r.passed and "a stage refilled before its readers released it" in r.message, r.text()
    wgmma = min(_lines(early, "WGMMA(d,"))
    assert any(f"bulk copy on line {c}" in r.message and f"what line {wgmma} " in r.message
               for c in _lines(early, "tma_load_2d(")), r.text()


def test_a_b_descriptor_with_the_wrong_stride_between_groups_of_k_gives_a_wrong_c():
    wrong = _variant("BK * 128, 1024), kt > 0", "BK * 128, 512), kt > 0")
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-correctness", wrong, 1)
    assert not r.passed and "elements of C wrong" in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the accumulators hold whatever the registers held")
def test_a_kernel_whose_solution_regions_are_blank_gets_no_point_and_hears_of_its_accumulators_never_initialised():
    """The student's copy before any work: no copies, no wgmma, the accumulators stored as they were."""
    blank = _variant("            const int s = kt % STAGES;\n            mbarrier_wait_parity(&full[s]", "            continue;\n"
                     "            const int s = kt % STAGES;\n            mbarrier_wait_parity(&full[s]")
    blank = blank.replace("        for (int kt = 0; kt < tiles; ++kt) {\n            const int s = kt % STAGES;\n            if (kt >= "
                          "STAGES)", "        for (int kt = 0; kt < 0; ++kt) {\n            const int s = kt % STAGES;\n"
                          "            if (kt >= STAGES)", 1)
    for check in ("wgmma-gemm-correctness", "wgmma-gemm-races"):
        r = run_here("warp-specialized-wgmma", check, blank, 1)
        assert not r.passed and r.message.count("a local variable never initialised") == 1, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the accumulators hold whatever the registers held")
def test_a_first_wgmma_that_adds_to_accumulators_never_set_is_named():
    adds = _variant("BK * 128, 1024), kt > 0 || k > 0);", "BK * 128, 1024), 1);")
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-correctness", adds, 1)
    assert not r.passed and r.message.count("a local variable never initialised") == 1, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the emulator's words")
def test_a_copy_through_a_tensor_map_its_thread_did_not_fence_is_named():
    unfenced = _variant("        fence_proxy_tensormap(&b_map);\n", "")
    r = run_here("warp-specialized-wgmma", "wgmma-gemm-correctness", unfenced, 1)
    line = min(_lines(unfenced, "tma_load_2d(Bs"))
    assert not r.passed and f"the tensor copy on line {line} reads a tensor map its thread has not fenced" \
        in r.message and "fence_proxy_tensormap(&map)" in r.message, r.text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_compiles_it_for_sm_90a_without_spills(tmp_path):
    (tmp_path / "gemm.cu").write_text(SOURCE)
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90a", "--resource-usage", f"-I{PYCUDA_INCLUDE_DIR}", "-o",
                        str(tmp_path / "gemm.cubin"), str(tmp_path / "gemm.cu")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "0 bytes spill stores" in p.stdout + p.stderr, p.stdout + p.stderr

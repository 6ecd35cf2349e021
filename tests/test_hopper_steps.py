"""The first two steps of the Hopper lab: wmma on tiles the threads copy (solutions/wmma-tiled.cu, exercise
wmma-tiled) and tensor copies through a ring of mbarrier stages refilled after a __syncthreads()
(solutions/tma-ring.cu, exercise tma-ring). Each reference passes its checks; a missing __syncthreads() is a
race named by its lines and its likely cause, a wait on the wrong parity a deadlock named by its line, a copy
no thread waits for (a refill past the last step) and a copy through an unfenced tensor map are named, not
taken for deadlocks; nvcc compiles both for sm_90. On a GPU that has no tensor copies, a kernel with them is
checked on the emulator and its speed is not graded; a GPU's hang of a kernel with mbarriers is said to be a
wait on a phase."""
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ON_EMULATOR

from grader.emulator.build import PYCUDA_INCLUDE_DIR
from grader.grading import protocol
from grader.grading.checks import tensor_cores
from grader.grading.registry import run_here
from grader.grading.report import NOT_GRADED
from grader.kernels import tensor_gemm
from grader.platform import devices

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
TILED = (SOLUTIONS / "wmma-tiled.cu").read_text()
RING = (SOLUTIONS / "tma-ring.cu").read_text()
RING_SYNC = "        __syncthreads();                       // every warp has read stage s: it may be refilled\n"


def _variant(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new, 1)


def _lines(source: str, text: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), 1) if text in line}


@pytest.mark.parametrize("exercise, prefix, source", [("wmma-tiled", "wmma-gemm", TILED),
                                                       ("tma-ring", "tma-gemm", RING)])
def test_the_reference_passes_every_check(exercise, prefix, source):
    for check in ("correctness", "races"):
        r = run_here(exercise, f"{prefix}-{check}", source, 1)
        assert r.passed, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_tile_read_before_every_thread_copied_its_part_is_a_race_naming_both_lines():
    """(Without the other __syncthreads(), the next tile's copy over this one: tests/test_mistakes.py.)"""
    unsynced = _variant(TILED, "        __syncthreads();\n        for (int k = 0;", "        for (int k = 0;")
    r = run_here("wmma-tiled", "wmma-gemm-races", unsynced, 1)
    assert not r.passed and "with no __syncthreads() between them" in r.message, r.text()
    assert any(f"line {a} " in r.message and f"line {b} " in r.message for a in _lines(unsynced, "As[r * BK + c]")
               for b in _lines(unsynced, "wmma::load_matrix_sync(a[i]")), r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_stage_refilled_without_the_syncthreads_after_its_multiplication_is_named():
    eager = _variant(RING, RING_SYNC, "")
    r = run_here("tma-ring", "tma-gemm-races", eager, 1)
    assert not r.passed and "a stage refilled before its readers released it (with a __syncthreads()" in r.message, \
        r.text()
    assert any(f"bulk copy on line {c}" in r.message for c in _lines(eager, "tma_load_2d(")), r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU a wait on the wrong parity may never end")
def test_a_wait_on_the_wrong_parity_is_a_deadlock_on_its_line():
    wrong = _variant(RING, "(kt / STAGES) % 2", "(kt / STAGES + 1) % 2")
    r = run_here("tma-ring", "tma-gemm-correctness", wrong, 1)
    line = min(_lines(wrong, "mbarrier_wait_parity(&full[s]"))
    assert not r.passed and "deadlocked on an mbarrier" in r.message and f"on line {line} " in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the block may end first, or not")
def test_a_refill_past_the_last_step_is_a_copy_never_waited_for_named_by_its_line():
    unguarded = _variant(RING, "if (t == 0 && kt + STAGES < tiles)", "if (t == 0)")
    r = run_here("tma-ring", "tma-gemm-correctness", unguarded, 1)
    line = min(_lines(unguarded, "tma_load_2d("))
    assert not r.passed and f"the copy on line {line} into shared memory was never waited for" in r.message, r.text()
    assert "deadlock" not in r.message, r.text()


@pytest.mark.skipif(not ON_EMULATOR, reason="the emulator's words")
def test_a_copy_through_an_unfenced_map_is_named_and_not_called_a_deadlock():
    unfenced = _variant(RING, "        fence_proxy_tensormap(&b_map);\n", "")
    for check in ("tma-gemm-correctness", "tma-gemm-races"):
        r = run_here("tma-ring", check, unfenced, 1)
        assert not r.passed and "reads a tensor map its thread has not fenced" in r.message, r.text()
        assert "deadlock" not in r.message and "__syncthreads()" not in r.message, r.text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("source", [TILED, RING], ids=["wmma-tiled", "tma-ring"])
def test_nvcc_compiles_it_for_sm_90(tmp_path, source):
    (tmp_path / "gemm.cu").write_text(source)
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", f"-I{PYCUDA_INCLUDE_DIR}", "-o", str(tmp_path / "gemm.cubin"),
                        str(tmp_path / "gemm.cu")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(not ON_EMULATOR, reason="stands a fake GPU in for this one")
def test_on_a_gpu_without_tensor_copies_the_ring_is_checked_on_the_emulator_and_its_speed_not_graded(monkeypatch):
    # device 0: a GPU with wmma but no tensor copies
    monkeypatch.setattr(devices, "name_and_capability", lambda device=None: ("NVIDIA GeForce RTX 4090", (8, 9)))
    correctness, _, speed = tensor_cores.TMA_RING_CHECKS
    ctx = protocol.Context("tma-ring", gpu=True)
    r = protocol.run_here(correctness, RING, 1, ctx)
    assert r.passed and "run on the CPU emulator: this GPU (NVIDIA GeForce RTX 4090, compute capability 8.9) " \
        "cannot run this kernel: tensor copies and mbarrier transaction counts need compute capability 9.0" in \
        r.text(), r.text()
    r = protocol.run_here(speed, RING, 1, ctx)
    assert r.status == NOT_GRADED and r.message.endswith("its speed counts on the course's Hopper GPU"), r.text()
    assert tensor_gemm.WMMA_TILED.lacks((8, 9)) is None and tensor_gemm.TMA_RING.lacks((10, 0)) is None
    assert "Hopper's alone" in tensor_gemm.WGMMA.lacks((10, 0)) and tensor_gemm.WGMMA.lacks((9, 0)) is None


def test_a_hang_of_a_kernel_with_mbarriers_is_said_to_be_a_wait_on_a_phase():
    """On a GPU a wait on a phase that never completes (or that a refill moved past) hangs until the budget."""
    ring = tensor_cores.TMA_RING_CHECKS + tensor_cores.CHECKS + tensor_cores.WGMMA_CHECKS
    assert all("an mbarrier wait on a phase that never completes" in c.hang_hint for c in ring)
    assert all("__syncthreads()" in c.hang_hint for c in tensor_cores.WMMA_TILED_CHECKS)

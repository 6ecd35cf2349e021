"""Known ways to fake a fast SGEMM kernel, each a submission for the coalesced
stage in tests/cheats/ (its first lines say what it does and what stops it),
graded as real submissions are: each check in a sandboxed grading process
(grader.grading.isolation.run_check).

Everywhere (CI, on the emulator): every cheat that compiles is right on every
shape of the correctness check, so only the timing protocol can stop it
(grader.kernels.timing; tests/test_timing_protocol.py plays each cheat against
it without a GPU); the two that launch work from a kernel are refused when
compiled, with the reason. On a GPU (`-m gpu`): the performance check gives
every cheat no points and says why, the honest kernel keeps its points, and
the cheats that keep C right when the same buffers are launched again are
shown to be real: timed over the same buffers, as the old protocol did, they
look far faster than the honest kernel."""
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import grader
from grader.emulator import policy
from grader.grading.isolation import run_check
from grader.grading.report import FAILED, PASSED

CHEATS_DIR = Path(__file__).resolve().parent / "cheats"
HONEST = Path(__file__).resolve().parent.parent / "solutions" / "coalesced.cu"
EXERCISE = "coalesced"
ON_GPU = grader.BACKEND.name == "gpu"
needs_gpu = pytest.mark.skipif(not ON_GPU, reason="needs a GPU (GRADER_BACKEND=gpu)")


@dataclass(frozen=True)
class Cheat:
    file: str
    stopped_by: str                 # the mechanism of grader.kernels.timing that stops it
    message: str                    # what the performance check says (a regular expression)
    real_over_same_buffers: bool = False    # keeps C right when launched again on the same buffers
    alone_is_slow: bool = False     # its own full launch is slower than the honest kernel's: compared with
                                    # itself over two C buffers in turn (the buffers never the last launch's)

    def source(self) -> str:
        return (CHEATS_DIR / self.file).read_text()


CHEATS = [
    Cheat("replay_pointer_cache.cu", "C poisoned with NaN before every run; every run checked",
          r"run 2 of \d+: .*never written.*keep state between launches", True),
    Cheat("spin_clock64.cu", "C poisoned with NaN before every run; every run checked",
          r"run 2 of \d+: .*never written.*keep state between launches", True),
    Cheat("replay_shape_cache.cu", "new inputs every run", r"run 2 of \d+: \d+ wrong element.*keep state", True),
    Cheat("launch_counter.cu", "every run checked, warm-ups included", r"run 2 of \d+: .*never written", True),
    Cheat("half_now_rest_later.cu", "C poisoned before every run; every element checked",
          r"run 2 of \d+: .*never written", True, alone_is_slow=True),
    Cheat("shape_detect.cu", "every run at the timed shape checked", r"run 1 of \d+: .*never written"),
    Cheat("lazy_partial.cu", "every element checked", r"run 1 of \d+: .*row 32, column 0.*never written"),
    Cheat("nan_outputs.cu", "NaN and Inf fail !(|C - C_ref| <= tol)", r"run 1 of \d+: .*a NaN the kernel computed"),
    Cheat("writes_inputs.cu", "inputs made again from their keys before cuBLAS runs",
          r"run 1 of \d+: \d+ wrong element.*kernel 0\b"),
    Cheat("reduced_precision.cu", "the RMS error against FP32 arithmetic's",
          r"run 1 of \d+: every element is within the tolerance.*TF32"),
    Cheat("reads_reference.cu", "cuBLAS's product made after the launch, its buffer NaN meanwhile",
          r"run 1 of \d+: .*never written|a launch failed"),     # a probe outside memory faults
]
REFUSED = [("dynamic_parallelism.cu", r"kernel\.cu:\d+: `<<<`: a kernel launched from a kernel"),
           ("device_stream.cu", r"kernel\.cu:\d+: `cudaStreamCreateWithFlags`: the CUDA runtime called from a kernel")]


def test_every_cheat_file_is_listed():
    listed = {c.file for c in CHEATS} | {f for f, _ in REFUSED}
    assert listed == {p.name for p in CHEATS_DIR.glob("*.cu")}
    for path in CHEATS_DIR.glob("*.cu"):
        assert path.read_text().startswith("// Cheat: ") and "// Stopped by: " in path.read_text()


@pytest.mark.parametrize("cheat", CHEATS, ids=[c.file for c in CHEATS])
def test_only_the_timing_protocol_can_stop_it(cheat):
    """Right on every shape the correctness check tries, so that it reaches the performance check."""
    result = run_check(EXERCISE, "correctness", cheat.source(), seed=1)
    assert result.status == PASSED, result.message


def test_the_policy_names_the_line_of_each_launch_from_device_code():
    source = ("// not this one: child<<<1, 1>>>(c);\n"
              "__global__ void k(float* c)\n{\n"
              "    child<<<1, 1>>>(c);\n"
              "    cudaDeviceSynchronize();\n"
              "    c[0] = cuda::std::min(1.0f, c[1]);     // a cuda:: name is not a runtime call\n}\n")
    found = policy.device_launches(source)
    assert [f.line for f in found] == [4, 5], found
    assert "`<<<`" in found[0].text and "`cudaDeviceSynchronize`" in found[1].text


@pytest.mark.parametrize("file, reason", REFUSED, ids=[f for f, _ in REFUSED])
def test_launching_work_from_a_kernel_is_refused_when_compiled(file, reason):
    result = run_check(EXERCISE, "compiles", (CHEATS_DIR / file).read_text())
    assert result.status == FAILED and re.search(reason, result.message), result.message


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("cheat", CHEATS, ids=[c.file for c in CHEATS])
def test_no_cheat_gets_performance_points(cheat):
    result = run_check(EXERCISE, "performance", cheat.source())
    assert result.status == FAILED and result.points == 0, result.message
    assert re.search(cheat.message, result.message), f"stopped by: {cheat.stopped_by}\n{result.message}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("file, reason", REFUSED, ids=[f for f, _ in REFUSED])
def test_work_launched_from_a_kernel_gets_no_performance_points(file, reason):
    result = run_check(EXERCISE, "performance", (CHEATS_DIR / file).read_text())
    assert result.status == FAILED and result.points == 0 and re.search(reason, result.message), result.message


@pytest.mark.gpu
@needs_gpu
def test_the_honest_kernel_keeps_its_points():
    result = run_check(EXERCISE, "performance", HONEST.read_text())
    assert result.status == PASSED and result.points == 1, result.message
    assert "each run on fresh inputs and checked" in result.message


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("cheat", [c for c in CHEATS if c.real_over_same_buffers],
                         ids=[c.file for c in CHEATS if c.real_over_same_buffers])
def test_the_cheat_is_real_over_the_same_buffers(cheat):
    """The old protocol: check C once, time the same A, B and C again, check C at the end. Each of these
    cheats passes both checks and looks far faster than the honest kernel (or than itself when the buffers
    change): what they exploit is real."""
    import cupy as cp  # optional: GPU machines only

    from grader.kernels import sgemm, timing
    from grader.kernels.stages import stage

    st = stage(EXERCISE)
    M = N = K = 4096
    A = cp.random.uniform(-1, 1, (M, K), dtype=cp.float32)
    B = cp.random.uniform(-1, 1, (K, N), dtype=cp.float32)
    expected = A @ B
    tol = sgemm.tolerance(cp.abs(A) @ cp.abs(B), K)
    medians = {}
    baseline = cheat.source() if cheat.alone_is_slow else HONEST.read_text()
    for name, source, buffers in (("baseline", baseline, 2 if cheat.alone_is_slow else 1),
                                  ("cheat", cheat.source(), 1)):
        function = sgemm.compile_kernel(st, source)
        Cs = [cp.full((M, N), cp.nan, dtype=cp.float32) for _ in range(buffers)]
        runs = [sgemm.launcher(function, st.launch(M, N, K), M, N, K, A.data.ptr, B.data.ptr, C.data.ptr)
                for C in Cs]
        turn = itertools.count()
        run = runs[0] if buffers == 1 else (lambda: runs[next(turn) % buffers]())
        for one in runs:
            one()
        assert all(bool((cp.abs(C - expected) <= tol).all()) for C in Cs), f"{name}: wrong on its first launch"
        medians[name] = timing.time_kernel(run).median_s
        assert all(bool((cp.abs(C - expected) <= tol).all()) for C in Cs), f"{name}: wrong after the timed runs"
    assert medians["cheat"] < 0.75 * medians["baseline"], medians

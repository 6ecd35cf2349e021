"""The timing protocol (grader.kernels.timing.run_rounds, measure_sgemms) with
a NumPy stand-in for the GPU: what a kernel finds on the device at each launch,
what is checked after it, and which mechanism stops each known way of faking
a fast kernel. No GPU needed; tests/test_cheats.py runs real kernels on one.
On a GPU (`-m gpu`): the device draws the inputs of the formula, and the
protocol measures an honest kernel and cuBLAS as timing the same buffers did."""
import secrets

import numpy as np
import pytest

import grader
from grader.kernels import sgemm, timing
from grader.kernels.sgemm import POISON_BITS, never_written
from grader.kernels.stages import stage

needs_gpu = pytest.mark.skipif(grader.BACKEND.name != "gpu", reason="needs a GPU (GRADER_BACKEND=gpu)")

M, N, K = 37, 53, 300          # not tile multiples, not square
KERNEL_S, CUBLAS_S = 1e-3, 4e-4
TOTAL = timing.WARMUP + timing.MIN_REPEAT


def uniform(key: int, shape) -> np.ndarray:
    """timing.UNIFORM_SOURCE in NumPy (tests/test_cheats.py compares it with the GPU's)."""
    i = np.arange(1, int(np.prod(shape)) + 1, dtype=np.uint64)
    z = np.uint64(key) + i * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (((z >> np.uint64(40)).astype(np.int64) - 2**23).astype(np.float32) * np.float32(2.0**-23)).reshape(shape)


class FakeGpu:
    """timing.Workload's interface in NumPy, with a clock that launches advance
    and a log of what happened, in order."""

    def __init__(self, cublas_error: float = 0.0, shape=(M, N, K)):
        self.M, self.N, self.K = m, n, k = shape
        self.bf16 = False
        self.A = np.empty((m, k), np.float32)
        self.B = np.empty((k, n), np.float32)
        self.C = np.empty((m, n), np.float32)
        self.C_ref = np.empty((m, n), np.float32)
        self.clock = 0.0
        self.log: list = []
        self.keys: list = []
        self.cublas_error = cublas_error

    def fill_inputs(self, keys):
        self.A[:] = uniform(keys[0], self.A.shape)
        self.B[:] = uniform(keys[1], self.B.shape)
        self.keys.append(keys)
        self.log.append("inputs")

    def poison(self, name):
        getattr(self, name).view(np.uint32).fill(POISON_BITS)
        self.log.append(f"poison {name}")

    def kernel(self, function, launch):
        return function

    def cublas(self):
        self.C_ref[:] = self.A @ self.B + np.float32(self.cublas_error)
        self.clock += CUBLAS_S
        self.log.append("cublas")

    def timed(self, launch):
        self.log.append("flush")
        start = self.clock
        launch()
        return start, self.clock

    @staticmethod
    def seconds(events):
        return events[1] - events[0]


class Kernel:
    """A fake kernel: C = A B in KERNEL_S, unless a subclass cheats."""
    name = "kernel"

    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu
        self.launches = 0
        self.seen = []          # what was on the device at each launch

    def __call__(self):
        g = self.gpu
        self.launches += 1
        self.seen.append({"C poisoned": bool(never_written(g.C).all()),
                          "C_ref poisoned": bool(never_written(g.C_ref).all()),
                          "keys": g.keys[-1]})
        g.log.append(self.name)
        self.compute(g)

    def compute(self, g):
        g.C[:] = g.A @ g.B
        g.clock += KERNEL_S


class Replay(Kernel):
    """Computes on its first launch, then writes back what it computed then (a cache keyed by the buffers)."""
    def compute(self, g):
        if self.launches == 1:
            super().compute(g)
            self.saved = g.C.copy()
        else:
            g.C[:] = self.saved


class FirstLaunchOnly(Kernel):
    """Computes on its first launch only, then writes nothing (it spins until the time looks plausible)."""
    def compute(self, g):
        if self.launches == 1:
            super().compute(g)
        else:
            g.clock += KERNEL_S / 50


class EveryNth(Kernel):
    """Computes on every 4th launch only."""
    def compute(self, g):
        if self.launches % 4 == 1:
            super().compute(g)


class HalfNow(Kernel):
    """Computes half of C and would finish the rest on the next launch."""
    def compute(self, g):
        g.C[: g.M // 2] = (g.A @ g.B)[: g.M // 2]
        g.clock += KERNEL_S / 2


class OneNaN(Kernel):
    """Right everywhere but one element, a NaN."""
    def compute(self, g):
        super().compute(g)
        g.C[g.M - 1, g.N - 2] = np.nan


class ReadsReference(Kernel):
    """Copies cuBLAS's product instead of computing one."""
    def compute(self, g):
        g.C[:] = g.C_ref


class ZeroesItsInputs(Kernel):
    """Writes C = 0 and zeroes A, so that a product of A and B made after it would be 0 too."""
    def compute(self, g):
        g.C[:] = 0
        g.A[:] = 0


class ReducedPrecision(Kernel):
    """Rounds A and B to 10 mantissa bits first (what TF32 and FP16 tensor cores do)."""
    def compute(self, g):
        def tf32(x):
            return ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
        g.C[:] = tf32(g.A) @ tf32(g.B)
        g.clock += KERNEL_S / 8


def test_an_honest_kernel_is_timed_on_fresh_inputs_into_a_poisoned_output():
    gpu = FakeGpu()
    kernel = Kernel(gpu)
    timings = timing.run_rounds(gpu, [kernel])
    assert [t.runs for t in timings] == [timing.MIN_REPEAT] * 2
    assert timings[0].median_s == pytest.approx(KERNEL_S) and timings[1].median_s == pytest.approx(CUBLAS_S)
    assert kernel.launches == TOTAL
    assert all(s["C poisoned"] and s["C_ref poisoned"] for s in kernel.seen)       # nothing to copy or keep
    round_keys = [s["keys"] for s in kernel.seen]
    assert len({k for pair in round_keys for k in pair}) == 2 * TOTAL              # never the same inputs twice
    # One round: inputs; C and C_ref poisoned; the L2 flushed before the kernel; inputs made again (undoing any
    # write into them); cuBLAS after the kernel (A B A B), its output poisoned and the L2 flushed before it.
    one = ["inputs", "poison C_ref", "poison C", "flush", "kernel", "inputs", "poison C_ref", "flush", "cublas"]
    assert gpu.log == one * TOTAL


def test_a_reference_kernel_runs_in_the_same_rounds_after_cublas():
    gpu = FakeGpu()
    submission, reference = Kernel(gpu), Kernel(gpu)
    reference.name = "reference"
    timings = timing.run_rounds(gpu, [submission, reference])
    assert len(timings) == 3 and reference.launches == TOTAL
    assert [e for e in gpu.log if e in ("kernel", "cublas", "reference")] == ["kernel", "cublas", "reference"] * TOTAL
    assert all(s["C poisoned"] for s in reference.seen)


# Each cheat, and the first run at which the protocol stops it (1 = its first launch).
CHEATS = [
    (Replay, 2, "fresh inputs every run: a replayed product is wrong"),
    (FirstLaunchOnly, 2, "C poisoned before every run: an output never written is NaN"),
    (EveryNth, 2, "every run checked, warm-ups included"),
    (HalfNow, 1, "every element checked"),
    (OneNaN, 1, "NaN fails the comparison"),
    (ReadsReference, 1, "cuBLAS's product is made after the kernel; C_ref holds NaN while it runs"),
    (ZeroesItsInputs, 1, "inputs made again from their keys before cuBLAS runs"),
    (ReducedPrecision, 1, "the RMS error against FP32 arithmetic's"),
]


@pytest.mark.parametrize("cheat, stopped_at, mechanism", CHEATS, ids=[c[0].__name__ for c in CHEATS])
def test_each_cheat_is_stopped_at_its_first_wrong_run(cheat, stopped_at, mechanism):
    gpu = FakeGpu()
    with pytest.raises(timing.WrongOutput) as e:
        timing.run_rounds(gpu, [cheat(gpu)])
    assert e.value.who == 0
    assert f"run {stopped_at} of {TOTAL}" in str(e.value), mechanism
    if stopped_at > 1:
        assert "keep state between launches" in str(e.value)


@pytest.mark.parametrize("wrong_launch", range(1, TOTAL + 1))
def test_every_run_is_checked(wrong_launch):
    """A kernel wrong at one launch only, whichever it is, is caught at that run."""
    class WrongOnce(Kernel):
        def compute(self, g):
            super().compute(g)
            if self.launches == wrong_launch:
                g.C[3, 5] += 1.0

    gpu = FakeGpu()
    with pytest.raises(timing.WrongOutput, match=f"run {wrong_launch} of {TOTAL}: .*row 3, column 5"):
        timing.run_rounds(gpu, [WrongOnce(gpu)])


def test_the_messages_name_the_element_and_why():
    gpu = FakeGpu()
    with pytest.raises(timing.WrongOutput) as e:
        timing.run_rounds(gpu, [FirstLaunchOnly(gpu)])
    assert "never written" in str(e.value) and "row 0, column 0" in str(e.value)
    gpu = FakeGpu(shape=(16, 24, 4096))      # at K = 4096, 10-bit inputs pass the tolerance of every element
    with pytest.raises(timing.WrongOutput) as e:
        timing.run_rounds(gpu, [ReducedPrecision(gpu)])
    assert "TF32" in str(e.value) and "every element is within the tolerance" in str(e.value)


def test_a_wrong_cublas_is_caught_by_the_float64_samples():
    gpu = FakeGpu(cublas_error=0.5)
    with pytest.raises(timing.WrongOutput, match="cuBLAS's product is wrong at row") as e:
        timing.run_rounds(gpu, [Kernel(gpu)])
    assert e.value.who == 1
    gpu = FakeGpu(cublas_error=0.5)
    with pytest.raises(timing.WrongOutput, match="cuBLAS's product is wrong") as e:
        timing.run_rounds(gpu, [])          # cuBLAS timed alone
    assert e.value.who == 0


def test_honest_fp32_products_pass_the_precision_check():
    rng = np.random.default_rng(0)
    for k in (1, 7, 300, 4096):
        A, B = uniform(k, (64, k)), uniform(k + 1, (k, 48))
        exact = A.astype(np.float64) @ B.astype(np.float64)
        running = np.zeros((64, 48), np.float32)
        for j in rng.permutation(k):             # a plain running sum, in any order
            running += A[:, j:j + 1] * B[j:j + 1, :]
        for got in (A @ B, running):
            assert timing.precision_ratio(got, exact, k) < timing.MAX_PRECISION_RATIO / 4


def test_a_run_over_the_budget_is_skipped_after_one_round():
    class Slow(Kernel):
        def compute(self, g):
            super().compute(g)
            g.clock += 10.0

    gpu = FakeGpu()
    kernel = Slow(gpu)
    skipped = timing.run_rounds(gpu, [kernel], budget_s=100.0)
    assert isinstance(skipped, timing.NotTimed) and str(skipped).startswith("skipped: one run takes 10.00")
    assert kernel.launches == 1
    with pytest.raises(ValueError, match="at least 20"):
        timing.run_rounds(gpu, [kernel], repeat=19)


@pytest.fixture
def fake_gpu_backend(monkeypatch, tmp_path):
    """measure_sgemms as on a GPU, with the lock in tmp_path."""
    monkeypatch.setattr(timing, "on_gpu", lambda: True)
    monkeypatch.setattr(timing, "lock_path", lambda device=None: tmp_path / "gpu.lock")
    return FakeGpu()


def test_measurements_say_what_happened(fake_gpu_backend):
    gpu = fake_gpu_backend
    flops = 2.0 * M * N * K
    ok, ref = timing.measure_sgemms([(Kernel(gpu), None), (Kernel(gpu), None)], gpu, peak_flops=1e15)
    assert ok.status == "ok" and ok.gflops == pytest.approx(flops / KERNEL_S / 1e9)
    assert ok.cublas_gflops == pytest.approx(flops / CUBLAS_S / 1e9) and "cuBLAS interleaved" in ok.detail
    wrong, stopped = timing.measure_sgemms([(Replay(gpu), None), (Kernel(gpu), None)], gpu, peak_flops=1e15)
    assert wrong.status == "wrong" and "run 2 of" in wrong.detail and wrong.gflops is None
    assert stopped.status == "not timed" and "kernel 1 of 2 was wrong" in stopped.detail
    fast = timing.measure_sgemm(Kernel(gpu), None, gpu, peak_flops=flops / KERNEL_S / 2)
    assert fast.status == "impossible" and "above the FP32 peak" in fast.detail
    gpu.cublas_error = 0.5
    broken = timing.measure_sgemm(Kernel(gpu), None, gpu, peak_flops=1e15)
    assert broken.status == "error" and "not of the kernel" in broken.detail


def test_a_workload_compiles_the_checks_before_the_gpu_is_held_alone(fake_gpu_backend, monkeypatch):
    """CuPy compiles a round's kernels at their first call (seconds, with a new submission's empty cache):
    make_workload runs them once, so that none is compiled while the GPU's lock keeps other graders off."""
    made = []
    monkeypatch.setattr(timing, "Workload", lambda M, N, K, bf16: made.append(FakeGpu(shape=(M, N, K))) or made[-1])
    monkeypatch.setattr(timing, "gpu_lock", lambda **_: pytest.fail("the GPU's lock taken to compile"))
    w = timing.make_workload(M, N, K)
    assert made == [w] and (w.M, w.N, w.K) == (M, N, K)
    assert w.log == ["inputs", "poison C_ref", "flush", "cublas"]
    assert (w.C == w.C_ref).all()               # the kernel's output checked once, against cuBLAS's


def test_a_busy_gpu_is_the_graders_limit(fake_gpu_backend, tmp_path):
    import fcntl
    import os
    fd = os.open(tmp_path / "gpu.lock", os.O_RDONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)        # another process would hold it so
    try:
        m = timing.measure_sgemm(Kernel(fake_gpu_backend), None, fake_gpu_backend, peak_flops=1e15, lock_wait_s=0.2)
    finally:
        os.close(fd)
    assert m.status == "busy" and "regrade later" in m.detail


@pytest.mark.gpu
@needs_gpu
def test_the_device_draws_the_inputs_of_the_formula():
    w = timing.make_workload(65, 33, 129)
    keys = (secrets.randbits(64), secrets.randbits(64))
    w.fill_inputs(keys)
    A, B = w.A.get(), w.B.get()
    assert (A == uniform(keys[0], (65, 129))).all() and (B == uniform(keys[1], (129, 33))).all()
    assert A.min() >= -1 and A.max() < 1 and abs(float(A.mean())) < 0.05 and len(np.unique(A)) > 0.99 * A.size


@pytest.mark.gpu
@needs_gpu
def test_the_protocol_measures_what_timing_the_same_buffers_did():
    """New inputs, poison and checks between the runs cost an honest kernel and cuBLAS no speed: within
    3% of 20 runs over the same buffers with nothing between them (the published figures' old way)."""
    import cupy as cp  # optional: GPU machines only

    st, (M, N, K) = stage("warptiling"), (4096, 4096, 4096)
    function, launch = sgemm.compile_kernel(st), st.launch(M, N, K)
    new = timing.measure_sgemm(function, launch, timing.make_workload(M, N, K))
    assert new.status == "ok", new.detail
    A = cp.random.uniform(-1, 1, (M, K), dtype=cp.float32)
    B = cp.random.uniform(-1, 1, (K, N), dtype=cp.float32)
    C, C_ref = cp.empty((M, N), cp.float32), cp.empty((M, N), cp.float32)
    run = sgemm.launcher(function, launch, M, N, K, A.data.ptr, B.data.ptr, C.data.ptr)
    old = timing.time_kernels([run, lambda: cp.matmul(A, B, out=C_ref)])
    assert new.gflops == pytest.approx(timing.gflops(M, N, K, old[0]), rel=0.03)
    assert new.cublas_gflops == pytest.approx(timing.gflops(M, N, K, old[1]), rel=0.03)

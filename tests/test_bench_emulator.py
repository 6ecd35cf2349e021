"""grader.programs.bench and grader.kernels.timing without a GPU: correctness only, every timing
function refusing with "not timed: no GPU", nothing on stderr."""
import time

import pytest

import grader
from grader.kernels import stages, timing
from grader.platform import devices
from grader.programs import bench

pytestmark = pytest.mark.skipif(grader.BACKEND.name != "emulator",
                                reason="emulator behaviour (on a GPU bench.main runs the real benchmark)")


def test_bench_checks_stages_without_timing(capsys):
    t0 = time.perf_counter()
    rc = bench.main(["--stages", "naive,smem-tiling"])
    out, err = capsys.readouterr()
    assert rc == 0, out
    assert err == ""
    assert time.perf_counter() - t0 < 60
    rows = [line for line in out.splitlines() if line.startswith("| naive ") or line.startswith("| smem-tiling ")]
    perf_rows = [r for r in rows if "| yes " in r]
    assert len(perf_rows) == 2
    for row in perf_rows:
        assert row.count(timing.NO_GPU) == 3          # GFLOPS, cuBLAS GFLOPS, ratio
    assert "blocks/SM (ours)" in out and "not checked: no GPU" in out
    assert "2/2 stage(s) correct" in out


BROKEN = r"""
__global__ void sgemm_broken(int M, int N, int K, const float* A, const float* B, float* C) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M - 1 && col < N) {          // forgets the last row: it stays NaN
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
"""


def test_bench_fails_on_a_wrong_stage(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken.cu").write_text(BROKEN)
    monkeypatch.setattr(stages, "SOLUTIONS_DIR", tmp_path)
    rule = lambda M, N, K, d: stages.Launch((stages.cdiv(N, 16), stages.cdiv(M, 16), 1), (16, 16, 1))  # noqa: E731
    monkeypatch.setattr(stages, "STAGES", [stages.Stage("broken", "deliberately wrong", "sgemm_broken", rule)])
    rc = bench.main([])
    out, err = capsys.readouterr()
    assert rc == 1, out
    assert err == ""
    assert "| broken " in out and "| NO " in out and "wrong element" in out


def test_bench_usage_errors(capsys):
    assert bench.main(["--stages", "no-such-stage"]) == 2
    assert bench.main(["--repeat", "5"]) == 2
    assert bench.main(["--sizes", "12x3"]) == 2
    out, err = capsys.readouterr()
    assert err == "" and "no stage 'no-such-stage'" in out and "at least 20" in out


def test_perf_refuses_without_a_gpu():
    assert not timing.on_gpu()
    refusals = [timing.time_kernel(lambda: None), timing.gflops(1024, 1024, 1024, 1e-3),
                timing.cublas_sgemm_time(64, 64, 64), timing.fp32_peak(), timing.make_workload(64, 64, 64),
                timing.memory_bandwidth()]
    for r in refusals:
        assert isinstance(r, timing.NotTimed) and not r and str(r) == "not timed: no GPU"
    m = timing.measure_sgemm(None, None, timing.NOT_TIMED)
    assert m.status == "not timed" and m.gflops is None and m.ratio is None


def test_perf_pure_helpers():
    assert devices.fp32_peak_from(132, 9, 0, 1_980_000) == pytest.approx(66.9e12, rel=1e-3)
    assert devices.fp32_lanes_per_sm(8, 0) == 64 and devices.fp32_lanes_per_sm(8, 6) == 128
    with pytest.raises(timing.ImpossibleResult):
        timing.check_plausible(70_000.0, 66.9e12, "kernel")
    timing.check_plausible(50_000.0, 66.9e12, "cuBLAS")
    assert timing.arithmetic_intensity(4096, 4096, 4096) == pytest.approx(4096 / 6)
    assert devices.dram_bandwidth_from(3_201_000, 6144) == pytest.approx(4.917e12, rel=1e-3)   # H200: 4.8 TB/s spec
    # the H100 and H200 at their reported 1.98 GHz: 1,070 TFLOPS (NVIDIA quotes 989 at 1.83 GHz)
    assert devices.bf16_tensor_peak_from(132, 9, 0, 1_980_000) == pytest.approx(1.0705e15, rel=1e-3)
    with pytest.raises(timing.ImpossibleResult, match="above the BF16 tensor-core peak"):
        timing.check_plausible(1.1e6, 1.0705e15, "kernel", "BF16 tensor-core")
    with pytest.raises(ValueError, match="unknown for compute capability 7.5"):
        devices.bf16_tensor_peak_from(40, 7, 5, 1_590_000)


def test_device_peaks_of_the_emulated_h200():
    # From the emulated device's attributes, not timed: the roofline's ceilings without a GPU; the device
    # table's H200 says the same.
    fp32, dram = devices.device_peaks()
    assert fp32 == pytest.approx(66.9e12, rel=1e-3) and dram == pytest.approx(4.917e12, rel=1e-3)
    assert devices.H200.peaks() == pytest.approx((fp32, dram))


def test_recorded_command_is_relative_to_the_repository():
    from grader.programs.recorded_command import ROOT, recorded_command
    argv = ["--out", str(ROOT / "results" / "x"), "--sizes", "1024,4000x3000x2000", "--note", "two words"]
    assert (recorded_command("bench", argv, backend="gpu") ==
            "GRADER_BACKEND=gpu python3 -m grader bench --out results/x --sizes 1024,4000x3000x2000 "
            "--note 'two words'")
    assert recorded_command("bench-graphs", ["--out", "/elsewhere/out"], backend="auto") == \
        "python3 -m grader bench-graphs --out /elsewhere/out"
    assert recorded_command("bench", [], backend="auto", on_gpu=True) == \
        "bash deploy/gpu-machine.sh && python3 -m grader bench"


def test_the_sweep_holds_every_kind_of_shape_and_its_summary_keeps_small_ones_apart():
    shapes = bench.parse_args(["--sizes", "sweep"]).shapes
    assert len(set(shapes)) == len(shapes) >= 24
    assert {(1536,) * 3, (4097,) * 3, (4095,) * 3, (1009,) * 3, (2039, 3001, 1511), (100,) * 3} <= set(shapes)
    records = [{"stage": "autotuned", "M": m, "N": n, "K": k, "ratio": r}
               for (m, n, k), r in (((4096,) * 3, 1.0), ((1536,) * 3, 0.64), ((100,) * 3, 0.5))]
    records.append({"stage": "warptiling", "M": 4096, "N": 4096, "K": 4096, "ratio": 0.1})
    assert bench.autotuned_summary(records) == (
        "Autotuned, 2 shapes of at least 512 in every dimension: geometric mean 0.800 x cuBLAS, lowest 0.640.\n"
        "Autotuned, 1 smaller shapes: lowest 0.500 x cuBLAS.")

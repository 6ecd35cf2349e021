"""The speed model (grader.kernels.prediction): counts sampled on the emulator and scaled to the timed launch,
the calibrated H200 model against the H200's own ordering of the stages, and `python -m grader predict`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from grader.kernels import prediction
from grader.kernels.stages import STAGES, stage
from grader.platform import devices
from grader.platform.compiler import compile_kernels

REPO = Path(__file__).resolve().parent.parent
H200 = devices.H200
SIZE = (4096, 4096, 4096)


def emulated(st, source: str | None = None):
    functions, _ = compile_kernels(source or st.source(), [st.kernel], st.options(), on_emulator=True)
    return functions[st.kernel]


def test_counts_per_fma_do_not_depend_on_the_size():
    st = stage("blocktile-2d")
    function = emulated(st)
    big, other = prediction.count(st, function, *SIZE), prediction.count(st, function, 2048, 1024, 8192)
    for field in ("shared_wavefronts", "load_sectors", "barriers"):
        assert getattr(big, field) / big.fmas == pytest.approx(getattr(other, field) / other.fmas), field
        assert getattr(big, field) > 0, field
    assert big.store_sectors / (4096 * 4096) == pytest.approx(other.store_sectors / (2048 * 1024))
    assert (big.blocks, other.blocks) == (32 * 32, 8 * 16) and big.threads == 256


def test_the_bytes_copied_asynchronously_are_counted_and_their_barriers_cost_nothing():
    """The warptiling kernel copies B's tiles by cp.async and loads A's through registers: two thirds of
    its bytes at 128 x 256 tiles; the vectorized stage copies none. A barrier waits for the synchronous
    loads before it: the model charges barriers for that share of the bytes only."""
    shares = {sid: prediction.count(stage(sid), emulated(stage(sid)), 1024, 1024, 1024)
              for sid in ("vectorized", "warptiling")}
    bm, bn = stage("warptiling").block_tile()
    assert (bm, bn) == (128, 256)
    assert shares["warptiling"].async_share == pytest.approx(bn / (bm + bn))
    assert shares["vectorized"].async_share == 0
    constants = {"l1": 1.0, "uncoalesced": 1.0, "barriers": 1.0, "latency": 0.0, "scale": 1.0}
    c = shares["warptiling"]
    assert prediction.cycles(c, H200, constants)["barriers"] == pytest.approx(
        prediction.cycles(replace(c, async_share=0.0), H200, constants)["barriers"] * bm / (bm + bn))


def test_a_wrong_kernel_is_not_predicted():
    st = stage("coalesced")
    wrong = st.source().replace("C[row * N + col] = sum", "C[row * N + col] = 2.0f * sum")
    assert wrong != st.source()
    with pytest.raises(prediction.WrongSample, match="its C is wrong at M=128 N=128 K=128"):
        prediction.count(st, emulated(st, wrong), *SIZE)


def test_a_kernel_wrong_only_off_tile_multiples_is_not_predicted():
    """The GPU's performance check times no kernel that fails its correctness check; a missing bounds check
    hides at the tile-multiple sizes the model samples, so the prediction launches it at a partial tile too."""
    st = stage("coalesced")
    unguarded = st.source().replace("    if (row < M && col < N) {", "    {")
    assert unguarded != st.source()
    with pytest.raises(prediction.WrongSample, match="at M=35 N=37 K=23"):
        prediction.count(st, emulated(st, unguarded), *SIZE)


@pytest.fixture(scope="module")
def predicted() -> dict[str, prediction.Prediction]:
    calibrated = prediction.calibration(H200)
    assert calibrated is not None, "grader/kernels/prediction.json has no H200 entry"
    out = {}
    for st in STAGES:
        built = prediction.graded_build(st, H200.name, *SIZE)
        out[st.id] = prediction.predict(prediction.count(built, emulated(built), *SIZE), H200, calibrated)
    return out


def test_the_stages_come_out_in_the_order_the_h200_puts_them(predicted):
    measured = {r["stage"]: r["gflops"] for r in json.loads((REPO / "results/nvidia-h200/bench.json").read_text())
                ["results"] if (r["M"], r["N"], r["K"]) == SIZE and r.get("gflops")}
    ids = sorted(measured, key=measured.get)
    for slower, faster in zip(ids, ids[1:]):
        if measured[faster] > 1.02 * measured[slower]:        # warptiling and autotuned: one kernel, 0.2 % apart
            assert predicted[faster].gflops > predicted[slower].gflops, (slower, faster, predicted)


def test_a_prediction_names_its_limit_and_interval(predicted):
    naive, tiled = predicted["naive"], predicted["smem-tiling"]
    assert naive.limiter in (prediction.RESOURCES["l1"], prediction.RESOURCES["uncoalesced"])
    assert tiled.limiter == prediction.RESOURCES["shared"]
    for p in predicted.values():
        assert p.low < p.gflops < p.high and p.cublas_gflops > 40000
    text = predicted["vectorized"].describe()
    assert text.startswith("predicted on an H200: about ") and "x cuBLAS), likely " in text
    assert "warp" not in text and predicted["vectorized"].few_warps_overprediction is None


def test_the_interval_holds_the_middle_eight_tenths_of_the_fitted_kernels():
    """A prediction's "likely low-high": of the kernels the model was fitted to (results/nvidia-h200/
    prediction.md, predicted against measured), a tenth ran slower than their low end and a tenth faster
    than their high end."""
    lo, hi = prediction.calibration(H200)["spread"]
    fitted = [row.split("|") for row in (REPO / "results/nvidia-h200/prediction.md").read_text().splitlines()
              if row.count("|") == 8 and row.split("|")[3].strip() == "fitted"]
    measured, predicted = (np.array([float(r[i]) for r in fitted]) for i in (4, 5))
    assert len(fitted) > 200
    assert np.mean(measured < predicted * np.exp(lo)) == pytest.approx(0.1, abs=0.02)
    assert np.mean(measured > predicted * np.exp(hi)) == pytest.approx(0.1, abs=0.02)


def test_a_kernel_with_few_warps_per_scheduler_is_told_how_far_such_were_off():
    """Blocks of 64 threads, one per SM (C of 512 x 512 in 64 x 64 tiles): the model's worst misses."""
    calibrated = prediction.calibration(H200)
    st = stage("blocktile-2d")
    defines = {"BM": 64, "BN": 64}
    functions, _ = compile_kernels(st.source(), [st.kernel], st.options(defines), on_emulator=True)
    counts = prediction.count(st, functions[st.kernel], 512, 512, 8192, defines)
    assert (counts.blocks, counts.threads) == (64, 64) and prediction.warps_per_scheduler(counts, H200) == 0.5
    p = prediction.predict(counts, H200, calibrated)
    assert p.few_warps_overprediction == calibrated["few_warps_overprediction"] > 1.2
    assert p.describe().endswith(f"; each scheduler holds at most 1 warp of this kernel, and such kernels ran up "
                                 f"to {p.few_warps_overprediction:.1f} times slower than predicted")


def test_schedulers_without_a_warp_leave_their_fma_lanes_idle():
    """An SM's four schedulers each issue to their own 32 FMA lanes: one warp a block, one block an SM, uses
    a quarter of them; four warps or more use them all."""
    def fma_cycles(threads: int) -> float:
        c = prediction.Counts(M=4096, N=4096, K=4096, blocks=H200.sm_count, threads=threads, shared_bytes=0,
                              registers=0, shared_wavefronts=0, load_sectors=0, load_excess_sectors=0,
                              store_sectors=0, store_excess_sectors=0, barriers=0)
        constants = {"l1": 1.0, "uncoalesced": 1.0, "barriers": 1.0, "latency": 0.0, "scale": 1.0}
        return prediction.cycles(c, H200, constants)["fma"]
    assert fma_cycles(32) == 4 * fma_cycles(128) == 4 * fma_cycles(256) == 2 * fma_cycles(64)


def test_predict_prints_json_alone_within_30_seconds():
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "grader", "predict", str(REPO / "solutions" / "warptiling.cu"),
                        "--exercise", "warptiling", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert time.monotonic() - start < 30
    data = json.loads(p.stdout)
    assert set(data) == {"gflops", "low", "high", "ratio_to_cublas", "limiter"}
    assert data["low"] < data["gflops"] < data["high"] and 0 < data["ratio_to_cublas"] < 2


def test_held_out_kernels_are_timed_only_on_a_gpu_and_never_fitted(tmp_path):
    from grader.programs import predict
    p = subprocess.run([sys.executable, "-m", "grader", "predict", "--measure", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "GRADER_BACKEND": "emulator"})
    assert p.returncode == 2 and "on a GPU" in p.stdout, p.stdout + p.stderr
    for name in ("bench.json", "autotune.json"):
        (tmp_path / name).write_text((REPO / "results" / "nvidia-h200" / name).read_text())
    sid, defines = predict.HELD_OUT[0]
    (tmp_path / "held-out.json").write_text(json.dumps({"results": [
        {"stage": sid, "defines": defines, "M": 1024, "N": 1024, "K": 1024, "status": "ok", "gflops": 5000.0,
         "cublas_gflops": 30000.0},
        {"stage": sid, "defines": defines, "M": 2048, "N": 2048, "K": 2048, "status": "wrong", "gflops": None,
         "cublas_gflops": None}]}))
    rows = [r for r in predict._records(tmp_path, H200.name) if r["kernel"] == predict.kernel_name(sid, defines)]
    assert [(r["M"], r["fitted"], r["gflops"]) for r in rows] == [(1024, False, 5000.0)]
    assert rows[0]["stage"].id == sid and rows[0]["defines"] == defines

"""The calibration rule of grader/grading/checks/thresholds.json: each stage's threshold is
at most 1/1.3 of its reference kernel's ratio on the H200 (recorded in
results/nvidia-h200/bench.json), so that a correct kernel of the stage has
headroom, and so is each tensor-core exercise's, from its reference's ratio to
cuBLAS's BF16 GEMM (results/nvidia-h200/tensor-bench.json, or the H100's until the H200 has one); and
bench.json records every default shape side by side."""
import json
from pathlib import Path

import pytest

from grader.grading.checks import thresholds
from grader.programs import bench, tensor_bench

REPO = Path(__file__).resolve().parent.parent
BENCH = json.loads((REPO / "results" / "nvidia-h200" / "bench.json").read_text())
TENSOR_RECORD = next((p for gpu in ("nvidia-h200", "nvidia-h100")
                      for p in [REPO / "results" / gpu / "tensor-bench.json"] if p.exists()), None)
TENSOR_BENCH = json.loads(TENSOR_RECORD.read_text()) if TENSOR_RECORD else None
TENSOR_EXERCISES = tuple(tensor_bench.KERNELS)
HEADROOM = 1.3


def ratio(stage: str, size) -> float:
    rows = [r for r in BENCH["results"] if r["stage"] == stage and [r["M"], r["N"], r["K"]] == list(size)]
    rows += [r for r in (TENSOR_BENCH or {"results": []})["results"]
             if r["exercise"] == stage and [r["M"], r["N"], r["K"]] == list(size)]
    assert rows and rows[0]["status"] == "ok", f"no measurement of {stage} at {size} in a bench's record"
    return rows[0]["ratio"]


@pytest.mark.parametrize("stage", sorted(thresholds.load()["stages"]))
def test_thresholds_leave_headroom(stage):
    if stage in TENSOR_EXERCISES and TENSOR_BENCH is None:
        pytest.skip("no record of the tensor-core references' ratios yet: `python -m grader tensor-bench --out "
                    "results/nvidia-h100` on a GPU")
    t = thresholds.for_stage(stage)
    if t.fraction_of_cublas is not None:
        assert t.fraction_of_cublas <= ratio(stage, t.size) / HEADROOM
    else:
        assert t.fraction_of_previous <= ratio(stage, t.size) / ratio(t.previous, t.size) / HEADROOM


def test_bench_records_every_default_shape_side_by_side():
    recorded = {(r["M"], r["N"], r["K"]) for r in BENCH["results"] if r["stage"] == "autotuned"}
    assert {bench.parse_shape(s) for s in bench.DEFAULT_SIZES.split(",")} <= recorded
    assert all("cuBLAS interleaved" in r["detail"] for r in BENCH["results"] if r["status"] == "ok")

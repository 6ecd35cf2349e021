"""The autotuned stage by shape: the shape classes, the split of K a launch
makes, the per-class entries of tuned_configs.json, and the split-K kernel
itself (correct on awkward shapes, the same bits in every run, and a broken
reduction caught) on whatever backend is active."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from grader.kernels import sgemm, stages
from grader.kernels.stages import SPLITK_WORKSPACE, autotuned_for, shape_class, split_slices

SPLIT_BUILD = {**stages.tuned_config("default"), "SPLITK_WORKSPACE": SPLITK_WORKSPACE}
RESULTS = Path(__file__).resolve().parent.parent / "results" / "nvidia-h100"


@pytest.mark.parametrize("shape, cls", [
    ((1024, 1024, 1024), "small-square"), ((2048, 2048, 2048), "medium-square"),
    ((4096, 4096, 4096), "large-square"), ((8192, 8192, 8192), "large-square"),
    ((4000, 3000, 2000), "large-square"), ((512, 512, 8192), "large-k"), ((8192, 128, 8192), "tall-skinny"),
    ((128, 8192, 8192), "short-wide"), ((17, 33, 9), "small-square"), ((40, 36, 300), "large-k"),
    ((16384, 512, 1024), "medium-square"), ((512, 16384, 1024), "medium-square")])   # more than 256 wide
def test_shape_classes(shape, cls):
    assert shape_class(*shape) == cls


def test_split_slices_never_empty_and_within_the_workspace():
    d = {**SPLIT_BUILD, "BK": 16}
    for K in range(1, 400, 7):
        for want in (1, 2, 3, 4, 6, 8, 16):
            s = split_slices(K, 4, {**d, "SPLIT_K": want})
            k_tiles = -(-K // 16)
            per = -(-k_tiles // s)                       # as the kernel cuts K
            assert 1 <= s <= min(want, k_tiles)
            assert (s - 1) * per < k_tiles, (K, want, s)   # the last slice has a tile of K
    assert split_slices(8192, 4, {**d, "SPLIT_K": 8}) == 8
    assert split_slices(8192, 4, {k: v for k, v in d.items() if k != "SPLITK_WORKSPACE"} | {"SPLIT_K": 8}) == 1
    tiles = SPLITK_WORKSPACE // (d["BM"] * d["BN"])        # a grid that fills the workspace alone: no split
    assert split_slices(8192, tiles, {**d, "SPLIT_K": 8}) == 1


def test_tuned_entries_per_class(tmp_path):
    flat = {"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "WNITER": 1, "TM": 8, "TN": 4, "NUM_THREADS": 128,
            "STAGES": 2, "MIN_BLOCKS": 1}
    big = {**flat, "BM": 128, "BN": 128, "WM": 64, "WN": 64, "WNITER": 2}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"default": flat, "GPU A": {"large-square": big, "large-k": flat}}))
    assert stages.tuned_config("GPU B", path, "large-k") == flat               # a flat entry serves every class
    assert stages.tuned_config("GPU A", path) == big                            # the graded class by default
    assert stages.tuned_config("GPU A", path, "tall-skinny") == big             # no entry: the graded class's
    with pytest.raises(KeyError, match="no shape class"):
        stages.tuned_config("GPU A", path, "huge")
    st = autotuned_for(512, 512, 8192, "GPU A", path)    # 64 tiles; GPU A is no device of the table: this one's SMs
    assert st.launch(512, 512, 8192).grid[2] > 1 and "-DSPLITK_WORKSPACE=%d" % SPLITK_WORKSPACE in st.options()
    assert not any("SPLIT_K=" in o or "SMS=" in o for o in st.options())     # launch settings, not -D
    plain = autotuned_for(4096, 4096, 4096, "GPU A", path)
    assert plain.launch(4096, 4096, 4096).grid == (32, 32, 1) and not any("SPLITK" in o for o in plain.options())


def test_the_h200_entries_split_where_tiles_leave_a_wave_part_empty():
    for shape in [(512, 512, 8192), (8192, 128, 8192), (128, 8192, 8192), (1536, 1536, 1536), (3000, 3000, 3000)]:
        assert autotuned_for(*shape, gpu_name="NVIDIA H200").launch(*shape).grid[2] > 1, shape
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048)]:       # 3.9, 15.5 and 1 waves
        st = autotuned_for(*shape, gpu_name="NVIDIA H200")
        assert st.launch(*shape).grid[2] == 1 and not any("SPLITK" in o for o in st.options()), shape
    assert stages.tuned_config("NVIDIA H200") == stages.tuned_config("NVIDIA H200", shape_class="large-square")


def test_the_wave_model_counts_a_partial_wave_as_a_whole_one():
    d = {**SPLIT_BUILD, "BM": 128, "BN": 256, "BK": 8, "STAGES": 3, "MIN_BLOCKS": 1, "SPLIT_K": 16, "SMS": 132}
    assert split_slices(1536, 72, d) > 1                  # 1536^3: 72 tiles leave 60 of 132 SMs idle
    assert split_slices(1536, 72, {**d, "SMS": 72}) == 1  # ... on 72 SMs, one full wave
    assert split_slices(4096, 528, {**d, "SMS": 132}) == 1    # 4 full waves
    s = split_slices(1536, 72, d)
    assert 72 * s / (-(-72 * s // 132) * 132) > 0.8       # its waves are mostly full
    assert split_slices(1536, 72, {k: v for k, v in d.items() if k != "SMS"}) == 16   # no SMs given: the most


SHAPES = [(130, 67, 250), (17, 33, 9), (1, 129, 31), (64, 300, 129), (33, 40, 777)]


def _split_stage(split: int):
    return dataclasses.replace(stages.stage("autotuned"), defines={**SPLIT_BUILD, "SPLIT_K": split})


def test_split_k_is_correct_and_deterministic():
    rng = np.random.default_rng(7)
    st = _split_stage(8)
    f = sgemm.compile_kernel(st)
    for M, N, K in SHAPES:
        assert st.launch(M, N, K).grid[2] > 1 or K <= SPLIT_BUILD["BK"]
        A, B = sgemm.random_inputs(M, N, K, rng)
        C = sgemm.run(st, A, B, function=f)            # C starts as NaN
        assert sgemm.compare(C, A, B).ok, sgemm.compare(C, A, B).describe((M, N, K))
        again = sgemm.run(st, A, B, function=f)         # the counters were left at 0: a second launch is right too
        assert np.array_equal(C.view(np.uint32), again.view(np.uint32))


def test_a_reduction_that_drops_a_slice_is_caught():
    source = stages.stage("autotuned").source()
    broken = source.replace("for (int z = 0; z < (int)gridDim.z; ++z) {", "for (int z = 1; z < (int)gridDim.z; ++z) {")
    assert broken != source
    st = _split_stage(4)
    f = sgemm.compile_kernel(st, source=broken)
    A, B = sgemm.random_inputs(130, 67, 250, np.random.default_rng(1))
    assert not sgemm.compare(sgemm.run(st, A, B, function=f), A, B).ok


def test_split_k_passes_the_graders_correctness_and_race_checks():
    from grader.grading.checks import correctness, races
    from grader.grading.registry import run_here
    from grader.grading.report import PASSED
    st = _split_stage(8)
    for check in (correctness, races):
        r = run_here(st, check.CHECK, st.source(), 3)
        assert r.status == PASSED, r.message


def _recorded_splits():
    """The recorded times of the H200's configurations at every split of K (on an H100: 132 SMs, as the H200),
    by (shape, configuration), without the shapes under 512 in every dimension (launch latency rules there)."""
    groups = {}
    for path in (RESULTS / "splits.json", RESULTS / "every-config" / "splits.json"):
        for r in json.loads(path.read_text()):
            if r["gflops"] and max(r["shape"]) >= 512:
                groups.setdefault((tuple(r["shape"]), r["config"]), {})[r["split"]] = r["gflops"]
    return groups


def test_the_wave_model_picks_the_split_measured_fastest():
    groups = _recorded_splits()
    assert len(groups) >= 40
    for (shape, cls), gflops in groups.items():
        d = {**stages.tuned_config("NVIDIA H200", shape_class=cls), "SPLITK_WORKSPACE": SPLITK_WORKSPACE,
             "SPLIT_K": stages.MAX_SPLIT, "SMS": 132}
        M, N, K = shape
        picked = split_slices(K, stages.cdiv(M, d["BM"]) * stages.cdiv(N, d["BN"]), d)
        assert gflops[picked] >= 0.98 * max(gflops.values()), (shape, cls, picked, gflops)

"""The autotuner's constraints (checked before anything is compiled) and a
short run of the sweep itself on whatever backend is active."""
from grader.kernels import stages
from grader.programs import autotune


def _config(**changes):
    return {**stages.tuned_config("default"), **changes}


def test_the_default_configuration_is_valid():
    assert autotune.violations(_config()) == []


def test_a_bank_conflict_is_found_before_compiling():
    # Thread tiles 8 wide: a quarter-warp's float4 reads of Bs are 32 bytes apart, 2-way conflicts.
    why = autotune.violations(_config(WNITER=1, TN=8))
    assert any("bank conflict" in w and "Bs read" in w for w in why), why


def test_resource_limits():
    assert any("registers" in w for w in autotune.violations(_config(MIN_BLOCKS=2)))    # 128 accumulators
    assert any("shared memory" in w for w in autotune.violations(_config(BK=32, STAGES=4, MIN_BLOCKS=2)))
    assert any("32 per WM x WN" in w for w in autotune.violations(_config(NUM_THREADS=128)))


def test_sweep_runs_and_checks_its_winner(capsys):
    assert autotune.main(["--classes", "large-k,small-square", "--shape", "64x48x300", "--limit", "2", "--dry-run",
                          "--repeats", "10"]) == 0
    out = capsys.readouterr().out
    assert "large-k: winner checked on" in out and "small-square: winner checked on" in out and "dry run" in out


def test_each_configuration_is_timed_with_the_split_its_launch_cuts():
    c = _config(BK=16)                                               # 128 x 256 tiles
    assert autotune.launch_split((4096, 4096, 4096), c, 132) == 1     # 512 tiles: 3.9 waves on 132 SMs
    assert autotune.launch_split((512, 512, 8192), c, 132) == 16      # 8 tiles: 16 slices are 128 blocks
    assert autotune.launch_split((512, 512, 8192), c, 16) == 2        # ... on 16 SMs, 16 blocks
    M, N, K = 1536, 1536, 1536                                        # 72 tiles: as the stage launches it
    assert autotune.launch_split((M, N, K), c, 132) == stages.split_slices(
        K, 72, {**c, "SPLIT_K": stages.MAX_SPLIT, "SPLITK_WORKSPACE": stages.SPLITK_WORKSPACE, "SMS": 132}) > 1


def test_unknown_class_is_a_usage_error(capsys):
    import pytest
    with pytest.raises(SystemExit):
        autotune.main(["--classes", "huge", "--dry-run"])
    assert "unknown shape class" in capsys.readouterr().err

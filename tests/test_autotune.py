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


def test_split_candidates():
    c = _config(BK=16)                                               # 128 x 256 tiles
    assert autotune.split_candidates((4096, 4096, 4096), c, 132) == [1]          # 512 tiles: the GPU is full
    assert autotune.split_candidates((512, 512, 8192), c, 132) == [1, 2, 3, 4, 6, 8, 12, 16]   # 8 tiles
    assert autotune.split_candidates((512, 512, 1024), c, 132) == [1, 2, 3, 4]   # slices of K >= 256


def test_unknown_class_is_a_usage_error(capsys):
    import pytest
    with pytest.raises(SystemExit):
        autotune.main(["--classes", "huge", "--dry-run"])
    assert "unknown shape class" in capsys.readouterr().err

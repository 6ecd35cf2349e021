"""The autotuner's constraints (checked before anything is compiled) and a
short run of the sweep itself on whatever backend is active."""
from grader import autotune, stages


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
    assert autotune.main(["--size", "64", "--limit", "2", "--dry-run", "--repeats", "10"]) == 0
    out = capsys.readouterr().out
    assert "winner checked on" in out and "dry run" in out

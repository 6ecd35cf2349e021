"""The hidden lists of lab 06's autotuning checks, and what a right search chooses from them: the
configurations violations() is judged on, the fake search spaces with their fixed verdicts and times,
and the real candidates timed on a GPU. Instructor side only (grader/references)."""
from __future__ import annotations

import dataclasses

from grader.kernels.stages import tuned_config
from grader.kernels.warptile_tuner import config_key, is_config
from grader.platform.devices import H200
from grader.references.autotune_rules import rule_violations


def _default() -> dict:
    return tuned_config("default")


def _with(**changes) -> dict:
    return {**_default(), **changes}


def _bk16() -> dict:
    """BK = 16 in two stages: the H200's fastest for 4096^3 with the branching main loop, not the present one
    (results/nvidia-h200/shapes.md); the lists below want it beside the default, not equal to it."""
    return _with(BK=16, STAGES=2)


SMALL = {"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "WNITER": 1, "TM": 8, "TN": 4, "NUM_THREADS": 128,
         "STAGES": 2, "MIN_BLOCKS": 1}
TWO_BLOCKS = {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 64, "WNITER": 2, "TM": 8, "TN": 4, "NUM_THREADS": 128,
              "STAGES": 3, "MIN_BLOCKS": 2}
NARROW = {"BM": 128, "BN": 64, "BK": 8, "WM": 64, "WN": 32, "WNITER": 1, "TM": 8, "TN": 4, "NUM_THREADS": 128,
          "STAGES": 3, "MIN_BLOCKS": 1}


def tile_configs() -> list[dict]:
    """The hidden list of rules-tiles: valid ones, and each tile rule broken
    (mostly alone; tests/test_autotune_search.py checks which rules each breaks)."""
    return [
        _default(), _bk16(), dict(SMALL), dict(TWO_BLOCKS), _with(WNITER=4), _with(TM=16), _with(TN=8),
        _with(NUM_THREADS=100),                                              # threads
        _with(BM=256, WM=32, WN=32, WNITER=1, NUM_THREADS=2048),            # threads
        _with(BM=96), _with(WN=32), _with(BN=128),                           # one warp per warp tile
        _with(WNITER=4, TN=8), _with(BM=32, WM=16),                          # sub-tiles
        _with(WM=16, WN=256, WNITER=1),                                      # lanes
        _with(BM=96, WM=48, TM=6),                                           # float4
        _with(BK=12),                                                        # tile sizes
        _with(BN=64, WN=16, WNITER=1), _with(BM=256, BN=64, WM=32),          # loads that do not divide evenly
    ]


def resource_configs() -> list[dict]:
    """The hidden list of rules-resources: tile-valid configurations that fit, or not, in shared
    memory (depending on the GPU) and registers."""
    return [
        _default(), _bk16(), dict(SMALL), dict(TWO_BLOCKS),
        _with(BK=32, STAGES=4),                 # 198656 B: fits the H200 only
        _with(BK=32, STAGES=5),                 # 248320 B: fits none
        _with(BK=16, STAGES=5),                 # 124160 B: not the L4
        _with(BM=64, BK=32, NUM_THREADS=128, MIN_BLOCKS=2),       # 2 x 124416 B
        {**TWO_BLOCKS, "STAGES": 4},            # 2 x 66560 B: not the L4
        _with(MIN_BLOCKS=2),                    # 196 registers > 128
        _with(BM=256, NUM_THREADS=512),         # 196 registers > 128
        _with(WN=256, NUM_THREADS=64),          # 640 registers > 255
        _with(BK=32, STAGES=5, MIN_BLOCKS=2),   # both
    ]


@dataclasses.dataclass
class FakeSpace:
    """Candidates with a fixed verdict, correctness and time each."""
    title: str
    candidates: list[dict]
    wrong: dict                 # key -> what check_fn says
    ms: dict                    # key -> milliseconds (inf: cannot be timed)
    calls: list = dataclasses.field(default_factory=list)

    def reject_fn(self, c):
        self.calls.append(("reject_fn", c))
        return rule_violations(c, H200.limits) if is_config(c) else ["not a configuration"]

    def check_fn(self, c):
        self.calls.append(("check_fn", c))
        return self.wrong.get(config_key(c)) if is_config(c) else "not a configuration"

    def time_fn(self, c):
        self.calls.append(("time_fn", c))
        return self.ms.get(config_key(c), float("inf")) / 1e3 if is_config(c) else float("inf")

    def expected(self) -> dict | None:
        good = [c for c in self.candidates if not rule_violations(c, H200.limits) and config_key(c) not in self.wrong]
        best = None
        for c in good:
            if best is None or self.ms[config_key(c)] < self.ms[config_key(best)]:
                best = c
        return best


def fake_spaces() -> list[FakeSpace]:
    invalid_smem = _with(BK=32, STAGES=5)
    invalid_regs = _with(MIN_BLOCKS=2)
    wrong_one = _with(STAGES=4)
    a = [_with(STAGES=2), invalid_smem, wrong_one, _bk16(), invalid_regs, dict(SMALL), dict(NARROW), _default()]
    ms_a = dict(zip(map(config_key, a), (3.0, 1.0, 1.5, 2.2, 1.2, 2.6, 4.0, 2.4)))
    # What check_fn says. A configuration over the register budget compiles and runs (ptxas spills
    # registers to memory): only the rules catch it. One over the shared memory fails to launch.
    wrong = {config_key(wrong_one): "wrong result: M=17 N=33 K=9: element (0, 5) is 1.25, expected 0.75",
             config_key(invalid_smem): "M=17 N=33 K=9: the launch failed: LaunchError: too much shared memory"}
    b = [invalid_smem, wrong_one, dict(NARROW), _bk16()]
    c = [invalid_regs, wrong_one, invalid_smem]
    return [FakeSpace("8 configurations, times from a fixed table", a, wrong, ms_a),
            FakeSpace("4 configurations, nothing can be timed (time_fn gives inf, as without a GPU)", b, wrong,
                      {config_key(x): float("inf") for x in b}),
            FakeSpace("3 configurations, none valid and correct", c, wrong, {config_key(x): 1.0 for x in c})]


def gpu_candidates() -> list[dict]:
    """What the GPU check searches: two invalid configurations and three valid ones of different speeds
    (on the H200, with the kernel's branching main loop, results/nvidia-h200/autotune.json: about 0.58,
    0.89 and 0.93 of cuBLAS)."""
    return [dict(NARROW), _with(BK=32, STAGES=5), _default(), _with(NUM_THREADS=128), _bk16()]

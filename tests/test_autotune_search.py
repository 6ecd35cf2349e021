"""Lab 6's checks of the student's search (grader/grading/checks/autotuning.py) and
the rules they grade against (grader/references/autotune_rules.py): the reference
functions pass, and each kind of broken function fails with a message that
names the configuration and the grader's reason. Pure Python: no kernel is
compiled (the GPU-only check says "not graded" here)."""
from __future__ import annotations

import pytest

from grader.grading.checks import autotuning as at
from grader.grading.registry import run_here
from grader.grading.report import NOT_GRADED, PASSED
from grader.kernels.stages import warptile_shared_bytes
from grader.kernels.warptile_tuner import config_key
from grader.platform import devices
from grader.references import autotune_search as search_lists
from grader.references.autotune_rules import (
    PARAMS,
    derived,
    register_budget,
    registers_needed,
    rule_violations,
)

H200 = devices.H200.limits

VIOLATIONS = '''
def violations(config, limits):
    BM, BN, BK = config["BM"], config["BN"], config["BK"]
    WM, WN, WNITER = config["WM"], config["WN"], config["WNITER"]
    TM, TN = config["TM"], config["TN"]
    NT, STAGES, MIN_BLOCKS = config["NUM_THREADS"], config["STAGES"], config["MIN_BLOCKS"]
    if NT % 32 or NT > 1024:
        return ["threads"]
    if BM % WM or BN % WN or NT != 32 * (BM // WM) * (BN // WN):
        return ["warps"]
    lanes_tile = 32 * TM * TN * WNITER
    WMITER = (WM * WN) // lanes_tile
    if WMITER < 1 or (WM * WN) % lanes_tile or WM % WMITER or WN % WNITER:
        return ["sub-tiles"]
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    LC = WSUBN // TN
    if WSUBN % TN or LC == 0 or 32 % LC or (32 // LC) * TM != WSUBM:
        return ["lanes"]
    why = []
    if TM % 4 or TN % 4:  # FLOAT4
        why.append("float4")
    if BM % 32 or BN % 32 or BK % 8:  # SIZES
        why.append("sizes")
    if (BK * BN // 4) % NT:  # LOADS
        why.append("loads")
    smem = 4 * STAGES * BK * (BM + 4 + BN)
    if MIN_BLOCKS * (smem + limits.smem_reserved_per_block) > limits.smem_per_sm:  # SMEM
        why.append("shared memory")
    regs = BM * BN // NT + WMITER * TM + WNITER * TN + 4 * -(-(BM * BK // 4) // NT) + 40
    if regs > min(limits.max_regs_per_thread, limits.regs_per_sm // (MIN_BLOCKS * NT) // 8 * 8):  # REGS
        why.append("registers")
    return why
'''

SEARCH = '''
def search(candidates, reject_fn, check_fn, time_fn):
    best, best_time = None, None
    for config in candidates:
        if reject_fn(config):  # REJECT
            continue
        if check_fn(config) is not None:  # CHECK
            continue
        t = time_fn(config)
        if best is None or t < best_time:
            best, best_time = config, t
    return best
'''


def _without(source: str, marker: str) -> str:
    """The source with the `if` line that carries `# marker` made never true (its body stays)."""
    lines = source.splitlines()
    hits = [i for i, ln in enumerate(lines) if f"# {marker}" in ln]
    assert len(hits) == 1, marker
    indent, _, comment = lines[hits[0]].partition("if ")
    lines[hits[0]] = f"{indent}if False:  # {marker}"
    return "\n".join(lines) + "\n"


def _categories(c: dict, limits) -> set[str]:
    """Every rule that fails, each evaluated on its own (where it can be)."""
    BM, BN, BK, WM, WN, WNITER, TM, TN, NT, STAGES, MB = (c[p] for p in PARAMS)
    bad = set()
    if NT > 1024 or NT % 32:
        bad.add("threads")
    if BM % WM or BN % WN or NT != 32 * (BM // WM) * (BN // WN):
        bad.add("warps")
    d = derived(c)
    if d["WMITER"] < 1 or (WM * WN) % (32 * TM * TN * WNITER) or WM % d["WMITER"] or WN % WNITER:
        bad.add("sub-tiles")
    if d["WMITER"] >= 1:
        if d["WSUBN"] % TN or d["LC"] == 0 or 32 % d["LC"] or (32 // d["LC"]) * TM != d["WSUBM"]:
            bad.add("lanes")
        if registers_needed(c) > register_budget(c, limits):
            bad.add("registers")
    if TM % 4 or TN % 4:
        bad.add("float4")
    if BM % 32 or BN % 32 or BK % 8:
        bad.add("sizes")
    if (BK * BN // 4) % NT:
        bad.add("loads")
    if MB * (warptile_shared_bytes(c) + limits.smem_reserved_per_block) > limits.smem_per_sm:
        bad.add("shared memory")
    return bad


TILE_RULES = {"threads", "warps", "sub-tiles", "lanes", "float4", "sizes", "loads"}


def test_the_hidden_tile_list_tests_each_tile_rule_and_no_resource_rule():
    seen = set()
    for c in search_lists.tile_configs():
        bad = _categories(c, H200)
        if bad & TILE_RULES:
            seen |= bad & TILE_RULES
            if len(bad & TILE_RULES) == 1:
                seen.add(("alone", *(bad & TILE_RULES)))
        else:
            assert not bad and not rule_violations(c, H200), (c, bad)     # valid: every resource fits too
    assert seen >= TILE_RULES
    assert {("alone", r) for r in TILE_RULES - {"threads"}} <= seen        # threads never comes alone (registers)
    assert sum(not rule_violations(c, H200) for c in search_lists.tile_configs()) >= 5


def test_the_hidden_resource_list_is_tile_valid_and_depends_on_the_gpu():
    verdicts = {}
    for c in search_lists.resource_configs():
        for name, limits in at.DEVICES:
            bad = _categories(c, limits)
            assert not bad & TILE_RULES, (c, bad)
            verdicts.setdefault(config_key(c), set()).add(frozenset(bad))
    kinds = set().union(*verdicts.values())
    assert {frozenset(), frozenset({"shared memory"}), frozenset({"registers"}),
            frozenset({"shared memory", "registers"})} <= kinds
    assert any(len(v) > 1 for v in verdicts.values())            # a verdict that differs between GPUs
    assert len({config_key(c) for c in search_lists.resource_configs()}) == len(search_lists.resource_configs())


def test_reference_functions_pass():
    for check in ("rules-tiles", "rules-resources"):
        r = run_here("autotune-violations", check, VIOLATIONS, 1)
        assert r.status == PASSED and "all" in r.message, r.message
    r = run_here("autotune-search", "search-fake-space", SEARCH, 1)
    assert r.status == PASSED, r.message


@pytest.mark.parametrize("marker, fails", [
    ("FLOAT4", "rules-tiles"), ("SIZES", "rules-tiles"), ("LOADS", "rules-tiles"),
    ("SMEM", "rules-resources"), ("REGS", "rules-resources")])
def test_each_forgotten_rule_fails_its_check_only(marker, fails):
    source = _without(VIOLATIONS, marker)
    results = {c: run_here("autotune-violations", c, source, 1) for c in ("rules-tiles", "rules-resources")}
    assert results[fails].status != PASSED
    assert "you accepted it; the grader rejects it" in results[fails].message
    other = ({"rules-tiles", "rules-resources"} - {fails}).pop()
    assert results[other].status == PASSED, results[other].message


def test_a_forgotten_shared_memory_rule_names_the_configuration_and_the_reason():
    r = run_here("autotune-violations", "rules-resources", _without(VIOLATIONS, "SMEM"), 1)
    assert "BK=32" in r.message and "STAGES=5" in r.message and "shared memory: 1 x 248320 B" in r.message
    assert "(A100)" in r.message and "(L4)" in r.message and "smem_per_sm" not in r.message


def test_hard_coded_h200_limits_fail_on_the_other_gpus():
    source = VIOLATIONS.replace("limits.smem_per_sm", "233472")
    assert run_here("autotune-violations", "rules-tiles", source, 1).status == PASSED
    r = run_here("autotune-violations", "rules-resources", source, 1)
    assert r.status != PASSED and "(H200)" not in r.message and "(A100)" in r.message


def test_rejecting_a_valid_configuration_fails():
    source = VIOLATIONS.replace('    if TM % 4 or TN % 4:', '    if TM % 4 or TN % 8:')
    r = run_here("autotune-violations", "rules-tiles", source, 1)
    assert r.status != PASSED and "you rejected it (float4); the grader accepts it" in r.message


def test_malformed_or_unwritten_violations():
    assert "not written yet" in run_here("autotune-violations", "rules-tiles", "def violations(c, l):\n    raise NotImplementedError()\n").message
    r = run_here("autotune-violations", "rules-tiles", "def violations(c, l):\n    return c['NUM_THREADS'] > 1024\n")
    assert r.status != PASSED and "return a list of reasons" in r.message
    r = run_here("autotune-violations", "rules-tiles", "def violations(c, l):\n    return [] if 1024 // (c['WM'] - 16) else []\n")
    assert r.status != PASSED and "raised ZeroDivisionError" in r.message
    r = run_here("autotune-violations", "rules-tiles", "from grader.references.autotune_rules import rule_violations as violations\n")
    assert r.status != PASSED and "reaches into the grader itself (grader.references.autotune_rules" in r.message
    r = run_here("autotune-violations", "rules-tiles", "import importlib\n"
                 "g = importlib.import_module('grader.references.autotune_rules')\n"
                 "def violations(c, l):\n    return g.rule_violations(c, l)\n")
    assert r.status != PASSED and "reaches into the grader itself" in r.message


def test_an_unwritten_search_says_so_once():
    r = run_here("autotune-search", "search-fake-space", "def search(candidates, reject_fn, check_fn, time_fn):\n    raise NotImplementedError()\n")
    assert r.status != PASSED and r.message.count("not written yet") == 1, r.message


def test_a_search_that_keeps_an_invalid_configuration_fails():
    r = run_here("autotune-search", "search-fake-space", _without(SEARCH, "REJECT"), 1)
    assert r.status != PASSED
    assert "which reject_fn rejects" in r.message and "reject a configuration before compiling it" in r.message
    assert "an invalid configuration (reject_fn: about 196 registers per thread > 128" in r.message


def test_a_search_that_keeps_a_wrong_configuration_fails():
    r = run_here("autotune-search", "search-fake-space", _without(SEARCH, "CHECK"), 1)
    assert r.status != PASSED and "an incorrect one (check_fn: wrong result" in r.message


def test_a_search_that_compiles_before_rejecting_fails_even_with_the_right_answer():
    source = SEARCH.replace("        if reject_fn(config):  # REJECT\n            continue\n"
                            "        if check_fn(config) is not None:  # CHECK\n            continue\n",
                            "        if check_fn(config) is not None:\n            continue\n"
                            "        if reject_fn(config):\n            continue\n")
    r = run_here("autotune-search", "search-fake-space", source, 1)
    assert r.status != PASSED and "called check_fn (which compiles the kernel)" in r.message


@pytest.mark.parametrize("change, says", [
    (("t < best_time", "t > best_time"), "slower"),                        # keeps the slowest
    (("t < best_time", "t <= best_time"), "nothing can be timed"),         # the last of equal times
    (("    return best\n", "    return best or {}\n"), "return one of the candidates"),
])
def test_wrong_choices_fail(change, says):
    source = SEARCH.replace(*change)
    assert source != SEARCH
    r = run_here("autotune-search", "search-fake-space", source, 1)
    assert r.status != PASSED and says in r.message, r.message


def test_the_fake_spaces_hide_the_answer_behind_an_invalid_and_a_wrong_configuration():
    space = search_lists.fake_spaces()[0]
    by_time = sorted(space.candidates, key=lambda c: space.ms[config_key(c)])
    assert rule_violations(by_time[0], H200) and config_key(by_time[2]) in space.wrong
    assert config_key(space.expected()) == config_key(by_time[3])
    assert search_lists.fake_spaces()[2].expected() is None


def test_the_gpu_check_is_not_graded_without_a_gpu():
    import grader
    if grader.BACKEND.name == "gpu":
        pytest.skip("graded on a GPU")
    assert run_here("autotune-search", "search-tuned-performance", SEARCH, 1).status == NOT_GRADED


def test_the_gpu_candidates():
    from grader.references.autotune_rules import violations
    valid = [c for c in search_lists.gpu_candidates() if not violations(c, H200)]
    assert len(valid) == 3 and len(search_lists.gpu_candidates()) == 5


def test_the_tuner_checks_a_configuration_on_the_backend():
    """What the notebook's search and the GPU check call: a right kernel passes, a wrong warp index does not."""
    import grader
    from grader.kernels.stages import stage, tuned_config
    from grader.kernels.warptile_tuner import WarptileTuner
    grader.use_backend(announce=False)
    c = tuned_config("default")
    assert WarptileTuner().check(c) is None
    broken = stage("warptiling").source().replace("warpCol = warp % (BN / WN);", "warpCol = warp % (BM / WM);")
    tuner = WarptileTuner(broken)
    assert "wrong result: M=1 N=129 K=31" in tuner.check(c)
    assert tuner.check({**c, "BK": 12}).startswith("does not compile")        # a static_assert
    if grader.BACKEND.name != "gpu":
        assert tuner.time(c) == float("inf")

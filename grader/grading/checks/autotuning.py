"""Lab 6 checks: the autotuning search the student writes in Python
(labs/06-warptiling-autotuning), graded from its source like lab 7's host
function (grader.grading.host_functions).

    run_rules_tiles(source, seed)      violations(config, limits) on a hidden list of configurations
                                       under the H200's limits: the same verdict (valid or not) as
                                       grader.references.autotune_rules.rule_violations for the tile rules (threads,
                                       one warp per warp tile, sub-tiles, lanes, float4, tile sizes, loads
                                       that divide evenly); every configuration there fits in shared
                                       memory and registers, or breaks a tile rule as well
    run_rules_resources(source, seed)  the same for shared memory and registers, on tile-valid
                                       configurations under the limits of three GPUs (H200, A100, L4)
    run_search_fake(source, seed)      search(candidates, reject_fn, check_fn, time_fn) on small fake
                                       spaces with a fixed fake timer: the fastest configuration that
                                       reject_fn accepts and check_fn finds correct (the first such one
                                       when nothing can be timed, None when there is none), and never
                                       check_fn or time_fn (which compile) on a rejected configuration
    run_search_gpu(source, seed)       on a GPU: the student's search over GPU_CANDIDATES with the
                                       grader's rules (bank conflicts included), correctness check and
                                       timer (grader.references.autotune_rules.WarptileTuner); the configuration it
                                       chooses, in solutions/warptiling.cu, timed against the autotuned
                                       stage's threshold. Not graded without a GPU.

A failed rules check names each configuration judged wrongly and the reason
the grader gives, never the rule as code.
"""
from __future__ import annotations

import ast
import dataclasses

from grader.grading import student_process
from grader.grading.checks import performance
from grader.grading.checks.common import function_check
from grader.grading.protocol import Context, run_here
from grader.grading.report import FAILED, NOT_GRADED, CheckResult
from grader.kernels import timing
from grader.kernels.stages import stage, tuned_config
from grader.platform.devices import A100, H200, L4
from grader.references.autotune_rules import (
    PARAMS,
    WarptileTuner,
    config_key,
    describe,
    device_limits,
    rule_violations,
    violations,
)

VIOLATIONS, SEARCH = "violations", "search"
SHOWN = 6                     # wrong verdicts listed in a message

# The H200 and two GPUs with less shared memory per SM (the device table's limits).
DEVICES = (("H200", H200.limits), ("A100", A100.limits), ("L4", L4.limits))


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
    """The hidden list of run_rules_tiles: valid ones, and each tile rule broken
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
    """The hidden list of run_rules_resources: tile-valid configurations that fit, or not, in shared
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


# ---- the student's functions, from the submission's text --------------------------------------
RULE_NAMES = {"violations", "rule_violations", "register_budget", "registers_needed", "derived",
              "a_groups_per_thread", "bank_conflicts", "candidates"}


def _uses_grader_rules(source: str) -> str | None:
    """The grader's own rules (grader.references.autotune_rules, grader.programs.autotune), when the submission imports or calls them."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if "autotune" in a.name}
        elif isinstance(node, ast.ImportFrom) and "autotune" in (node.module or ""):
            for a in node.names:
                if a.name in RULE_NAMES or a.name == "*":
                    return f"{node.module}.{a.name}"
        elif isinstance(node, ast.ImportFrom):
            aliases |= {a.asname or a.name for a in node.names if "autotune" in a.name}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in RULE_NAMES:
            owner = ast.unparse(node.value)
            if "autotune" in owner or owner.split(".")[0] in aliases:
                return f"{owner}.{node.attr}"
    return None


def _load(source: str, name: str, check: str, seed):
    used = _uses_grader_rules(source)
    if used:
        return CheckResult.make(check, False, f"your code uses the grader's own rules ({used}): write {name}() "
                                "yourself, from the rules in the notebook", details={"seed": seed})
    try:
        return student_process.load(source, name)
    except Exception as e:              # the student's Python, run as a module: anything it raises is theirs
        return CheckResult.make(check, False, f"your code does not define {name}(...): {type(e).__name__}: {e}",
                                details={"seed": seed})


def _raised(e: Exception) -> str:
    if isinstance(e, NotImplementedError) and not str(e):
        return "your function is not written yet (it raises NotImplementedError: replace that line with your code)"
    return f"raised {type(e).__name__}: {e}"


# ---- violations ---------------------------------------------------------------------------------
def _rules(source: str, seed, name: str, cases: list[tuple[str, object, dict]], what: str) -> CheckResult:
    function = _load(source, VIOLATIONS, name, seed)
    if isinstance(function, CheckResult):
        return function
    wrong, raised, right = [], [], 0
    for device, limits, c in cases:
        want = rule_violations(c, limits)
        try:
            got = function(dict(c), limits)
        except Exception as e:          # the student's Python
            if isinstance(e, NotImplementedError) and not str(e):
                return CheckResult.make(name, False, _raised(e), details={"seed": seed})
            raised.append(f"{describe(c)} ({device}): your violations() {_raised(e)}"
                          + (f"; the grader rejects it: {want[0]}" if want else "; the grader accepts it"))
            continue
        if not isinstance(got, (list, tuple)):
            return CheckResult.make(name, False, f"violations({describe(c)}, limits) returned {got!r} "
                                    f"({type(got).__name__}): return a list of reasons, empty when the "
                                    "configuration is valid", details={"seed": seed})
        if bool(got) == bool(want):
            right += 1
        elif want:
            wrong.append(f"{describe(c)} ({device}): you accepted it; the grader rejects it: {'; '.join(want)}")
        else:
            wrong.append(f"{describe(c)} ({device}): you rejected it ({'; '.join(map(str, got))}); the grader "
                         "accepts it: every rule holds")
    total = len(cases)
    wrong = raised + wrong                                      # what your function raised, first
    if not wrong:
        return CheckResult.make(name, True, f"the right verdict on all {total} hidden configurations ({what})",
                                details={"seed": seed})
    lines = wrong[:SHOWN] + ([f"... and {len(wrong) - SHOWN} more"] if len(wrong) > SHOWN else [])
    return CheckResult.make(name, False, f"{right} of {total} hidden configurations judged right ({what}); "
                            "wrong:\n" + "\n".join(lines), details={"seed": seed})


def run_rules_tiles(source: str, seed: int | None = None) -> CheckResult:
    return _rules(source, seed, "rules-tiles", [("H200", H200, c) for c in tile_configs()],
                  "threads, warp tiles, sub-tiles, lanes, float4, tile sizes, loads; H200 limits")


def run_rules_resources(source: str, seed: int | None = None) -> CheckResult:
    return _rules(source, seed, "rules-resources",
                  [(d, L, c) for d, L in DEVICES for c in resource_configs()],
                  "shared memory and registers; limits of the H200, the A100 and the L4")


# ---- search on fake spaces ----------------------------------------------------------------------
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
        return rule_violations(c, H200) if _is_config(c) else ["not a configuration"]

    def check_fn(self, c):
        self.calls.append(("check_fn", c))
        return self.wrong.get(config_key(c)) if _is_config(c) else "not a configuration"

    def time_fn(self, c):
        self.calls.append(("time_fn", c))
        return self.ms.get(config_key(c), float("inf")) / 1e3 if _is_config(c) else float("inf")

    def expected(self) -> dict | None:
        good = [c for c in self.candidates if not rule_violations(c, H200) and config_key(c) not in self.wrong]
        best = None
        for c in good:
            if best is None or self.ms[config_key(c)] < self.ms[config_key(best)]:
                best = c
        return best


def _is_config(c) -> bool:
    try:
        config_key(c)
        return True
    except (TypeError, KeyError, ValueError):
        return False


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


def _name(c) -> str:
    return describe(c) if _is_config(c) else repr(c)


def run_search_fake(source: str, seed: int | None = None) -> CheckResult:
    name = "search-fake-space"
    function = _load(source, SEARCH, name, seed)
    if isinstance(function, CheckResult):
        return function
    lines, ok = [], True
    for space in fake_spaces():
        want = space.expected()
        try:
            got = function([dict(c) for c in space.candidates], space.reject_fn, space.check_fn, space.time_fn)
        except Exception as e:          # the student's Python
            if isinstance(e, NotImplementedError) and not str(e):
                return CheckResult.make(name, False, _raised(e), details={"seed": seed})
            ok = False
            lines.append(f"{space.title}: your search {_raised(e)}")
            continue
        problems = []
        compiled = [(fn, c) for fn, c in space.calls if fn != "reject_fn" and _is_config(c)
                    and rule_violations(c, H200)]
        if compiled:
            fn, c = compiled[0]
            problems.append(f"it called {fn} (which compiles the kernel) on {describe(c)}, which reject_fn "
                            f"rejects ({rule_violations(c, H200)[0]}): reject a configuration before compiling it")
        if got is not None and not _is_config(got):
            problems.append(f"it returned {got!r}: return one of the candidates (a dict), or None")
        elif (None if got is None else config_key(got)) != (None if want is None else config_key(want)):
            why = ""
            if got is not None and rule_violations(got, H200):
                why = f" - an invalid configuration (reject_fn: {rule_violations(got, H200)[0]})"
            elif got is not None and config_key(got) in space.wrong:
                why = f" - an incorrect one (check_fn: {space.wrong[config_key(got)]})"
            elif got is not None and space.ms.get(config_key(got)) is not None and want is not None \
                    and space.ms[config_key(got)] > space.ms[config_key(want)]:
                why = (f" - slower ({space.ms[config_key(got)]:g} ms) than the expected one "
                       f"({space.ms[config_key(want)]:g} ms)")
            problems.append(f"it returned {'None' if got is None else describe(got)}{why}; expected "
                            f"{'None (no configuration is valid and correct)' if want is None else describe(want)}")
        if problems:
            ok = False
            lines.append(f"{space.title}: " + "; ".join(problems))
        else:
            lines.append(f"{space.title}: right ({'None' if want is None else describe(want)})")
    head = ("your search keeps the fastest valid, correct configuration" if ok else
            "your search does not keep the right configuration") + \
        " (expected: the fastest candidate that reject_fn accepts and check_fn finds correct; the first such " \
        "one when nothing can be timed; None when there is none)"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines), details={"seed": seed})


# ---- search on the GPU --------------------------------------------------------------------------
def gpu_candidates() -> list[dict]:
    """What the GPU check searches: two invalid configurations and three valid ones of different speeds
    (on the H200, with the kernel's branching main loop, results/nvidia-h200/autotune.json: about 0.58,
    0.89 and 0.93 of cuBLAS)."""
    return [dict(NARROW), _with(BK=32, STAGES=5), _default(), _with(NUM_THREADS=128), _bk16()]


def run_search_gpu(source: str, seed: int | None = None) -> CheckResult:
    name = "search-tuned-performance"
    if not timing.on_gpu():
        return CheckResult(name, NOT_GRADED, "not graded: no GPU (your search's choice is only timed, and its "
                           "points only given, when the grader runs on a GPU)", 0.0)
    function = _load(source, SEARCH, name, seed)
    if isinstance(function, CheckResult):
        return function
    limits = device_limits()
    cands = gpu_candidates()
    tuner = WarptileTuner(seed=0 if seed is None else int(seed))
    tuner.precompile([c for c in cands if not violations(c, limits)])
    rejected = []

    def reject_fn(c):
        why = violations(c, limits)
        if why:
            rejected.append(c)
        return why
    try:
        chosen = function([dict(c) for c in cands], reject_fn, tuner.check, tuner.time)
    except Exception as e:              # the student's Python
        text = _raised(e)
        return CheckResult.make(name, False, text if text.startswith("your") else f"your search {text}",
                                details={"seed": seed})
    if chosen is None or not _is_config(chosen):
        return CheckResult.make(name, False, f"your search returned {chosen!r} from {len(cands)} candidates, "
                                "among them valid and correct ones: nothing to time", details={"seed": seed})
    chosen = {p: int(chosen[p]) for p in PARAMS}
    why = violations(chosen, limits)
    if why:
        return CheckResult.make(name, False, f"your search chose {describe(chosen)}, which the grader's rules "
                                f"reject ({why[0]})", details={"seed": seed})
    st = dataclasses.replace(stage("autotuned"), defines=chosen)
    result = run_here(performance.CHECK, stage("warptiling").source(), seed, Context("autotuned", st, timing.on_gpu()))
    result.name = name
    result.message = (f"your search chose {describe(chosen)} from {len(cands)} candidates; its kernel "
                      f"(solutions/warptiling.cu), against the autotuned stage's threshold:\n" + result.message)
    if result.status == NOT_GRADED:
        result.status = FAILED
    return result


VIOLATIONS_CHECKS = (function_check("rules-tiles", run_rules_tiles, 120),
                     function_check("rules-resources", run_rules_resources, 120))
SEARCH_CHECKS = (function_check("search-fake-space", run_search_fake, 120),
                 function_check("search-tuned-performance", run_search_gpu, 600))

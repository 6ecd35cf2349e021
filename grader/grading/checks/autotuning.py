"""Lab 6 checks: the autotuning search the student writes in Python (labs/06-warptiling-autotuning),
graded from its source like every host function (grader.grading.checks.host_calls).

    rules-tiles                violations(config, limits) on a hidden list of configurations under the H200's
                               limits: the same verdict (valid or not) as the grader's rules for the tile rules
                               (threads, one warp per warp tile, sub-tiles, lanes, float4, tile sizes, loads that
                               divide evenly); every configuration there fits in shared memory and registers, or
                               breaks a tile rule as well
    rules-resources            the same for shared memory and registers, on tile-valid configurations under the
                               limits of three GPUs (H200, A100, L4)
    search-fake-space          search(candidates, reject_fn, check_fn, time_fn) on small fake spaces with a fixed
                               fake timer: the fastest configuration that reject_fn accepts and check_fn finds
                               correct (the first such one when nothing can be timed, None when there is none),
                               and never check_fn or time_fn (which compile) on a rejected configuration
    search-tuned-performance   on a GPU: the student's search over real candidates with the grader's rules (bank
                               conflicts included), correctness check and timer; the configuration it chooses,
                               in the warptiling kernel, timed against the autotuned stage's threshold. Not graded
                               without a GPU.

The hidden lists and the right choices are the grader's (grader.references.autotune_search). A failed rules
check names each configuration judged wrongly and the reason the grader gives, never the rule as code.
"""
from __future__ import annotations

import dataclasses

from grader.grading import answers
from grader.grading.checks import host_calls, performance
from grader.grading.checks.host_calls import Call
from grader.grading.protocol import FUNCTION_HANG, Check, Context, Outputs
from grader.grading.report import FAILED, NOT_GRADED, CheckResult
from grader.kernels.stages import WARPTILE_PARAMS as PARAMS
from grader.kernels.stages import stage
from grader.kernels.warptile_tuner import WarptileTuner, config_key, describe, is_config
from grader.platform.devices import A100, H200, L4, device_limits

VIOLATIONS, SEARCH = "violations", "search"
SHOWN = 6                     # wrong verdicts listed in a message

# The H200 and two GPUs with less shared memory per SM (the device table's limits).
DEVICES = (("H200", H200.limits), ("A100", A100.limits), ("L4", L4.limits))


def _not_written(call: Call) -> bool:
    return bool(call.raised) and call.raised[0] == "NotImplementedError" and not call.raised[1]


def _collect(source: str, name: str, argument_lists) -> Outputs:
    """The student's function called on each argument list (stopping once it says it is not written yet)."""
    function = host_calls.load(source, name)
    if isinstance(function, str):
        return {"load_error": function}, {}
    arrays, calls = {}, []
    for i, args in enumerate(argument_lists):
        call = host_calls.call(function, *args)
        calls.append(call.to_data(arrays, f"value{i}"))
        if _not_written(call):
            break
    return {"calls": calls}, arrays


def _calls(outputs: Outputs) -> list[Call] | str:
    meta, arrays = outputs
    return meta["load_error"] if meta.get("load_error") else [Call.from_data(d, arrays) for d in meta.get("calls", [])]


# ---- violations ---------------------------------------------------------------------------------
def _rules(c: dict, limits) -> list[str]:
    """The grader's own verdict: why c breaks a rule (grader.references.autotune_rules), [] when it breaks none."""
    return answers.module("autotune_rules").rule_violations(c, limits)


def _violations(c: dict, limits) -> list[str]:
    """The grader's rules and the bank conflicts they predict, what the GPU search's reject_fn answers."""
    return answers.module("autotune_rules").violations(c, limits)


def _lists():
    return answers.module("autotune_search")


def _rules_cases(name: str) -> list[tuple[str, object, dict]]:
    if name == "rules-tiles":
        return [("H200", H200.limits, c) for c in _lists().tile_configs()]
    return [(d, L, c) for d, L in DEVICES for c in _lists().resource_configs()]


def _collect_rules(name: str):
    def collect(source: str, seed: int, ctx: Context) -> Outputs:
        return _collect(source, VIOLATIONS, [(dict(c), limits) for _, limits, c in _rules_cases(name)])
    return collect


def _judge_rules(name: str, what: str):
    def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
        calls = _calls(outputs)
        if isinstance(calls, str):
            return CheckResult.make(name, False, calls)
        cases = _rules_cases(name)
        if calls and _not_written(calls[-1]):
            return CheckResult.make(name, False, calls[-1].raised_text())
        if len(calls) != len(cases):
            return CheckResult.make(name, False, "the grading process returned no answer for every configuration")
        wrong, raised, right = [], [], 0
        for call, (device, limits, c) in zip(calls, cases):
            want = _rules(c, limits)
            if call.raised:
                raised.append(f"{describe(c)} ({device}): your violations() raised {call.raised[0]}: {call.raised[1]}"
                              + (f"; the grader rejects it: {want[0]}" if want else "; the grader accepts it"))
                continue
            got = call.value
            if not isinstance(got, (list, tuple)):
                return CheckResult.make(name, False, f"violations({describe(c)}, limits) returned {got!r} "
                                        f"({type(got).__name__}): return a list of reasons, empty when the "
                                        "configuration is valid")
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
            return CheckResult.make(name, True, f"the right verdict on all {total} hidden configurations ({what})")
        lines = wrong[:SHOWN] + ([f"... and {len(wrong) - SHOWN} more"] if len(wrong) > SHOWN else [])
        return CheckResult.make(name, False, f"{right} of {total} hidden configurations judged right ({what}); "
                                "wrong:\n" + "\n".join(lines))
    return judge


# ---- search on fake spaces ----------------------------------------------------------------------
def _name(c) -> str:
    return describe(c) if is_config(c) else repr(c)


def collect_search_fake(source: str, seed: int, ctx: Context) -> Outputs:
    """search() on each fake space; the grader's callbacks (here) log what it asked."""
    function = host_calls.load(source, SEARCH)
    if isinstance(function, str):
        return {"load_error": function}, {}
    arrays, runs = {}, []
    for i, space in enumerate(_lists().fake_spaces()):
        call = host_calls.call(function, [dict(c) for c in space.candidates], space.reject_fn, space.check_fn,
                               space.time_fn)
        asked = [[fn, c if isinstance(c, dict) and is_config(c) else repr(c)[:200]] for fn, c in space.calls]
        runs.append({"call": call.to_data(arrays, f"value{i}"), "asked": asked})
        if _not_written(call):
            break
    return {"runs": runs}, arrays


def judge_search_fake(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "search-fake-space"
    meta, arrays = outputs
    if meta.get("load_error"):
        return CheckResult.make(name, False, meta["load_error"])
    runs = meta.get("runs", [])
    spaces = _lists().fake_spaces()
    if runs and _not_written(Call.from_data(runs[-1]["call"], arrays)):
        return CheckResult.make(name, False, host_calls.NOT_WRITTEN)
    if len(runs) != len(spaces):
        return CheckResult.make(name, False, "the grading process returned no answer for every search space")
    lines, ok = [], True
    for run, space in zip(runs, spaces):
        call, want = Call.from_data(run["call"], arrays), space.expected()
        if call.raised:
            ok = False
            lines.append(f"{space.title}: your search raised {call.raised[0]}: {call.raised[1]}")
            continue
        got, problems = call.value, []
        compiled = [(fn, c) for fn, c in run["asked"] if fn != "reject_fn" and is_config(c)
                    and _rules(c, H200.limits)]
        if compiled:
            fn, c = compiled[0]
            problems.append(f"it called {fn} (which compiles the kernel) on {describe(c)}, which reject_fn "
                            f"rejects ({_rules(c, H200.limits)[0]}): reject a configuration before "
                            "compiling it")
        if got is not None and not is_config(got):
            problems.append(f"it returned {got!r}: return one of the candidates (a dict), or None")
        elif (None if got is None else config_key(got)) != (None if want is None else config_key(want)):
            why = ""
            if got is not None and _rules(got, H200.limits):
                why = f" - an invalid configuration (reject_fn: {_rules(got, H200.limits)[0]})"
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
    return CheckResult.make(name, ok, head + "\n" + "\n".join(lines))


# ---- search on the GPU --------------------------------------------------------------------------
def _searched_stage(chosen: dict):
    return dataclasses.replace(stage("autotuned"), defines=chosen)


def collect_search_gpu(source: str, seed: int, ctx: Context) -> Outputs:
    """On a GPU: the configuration the student's search chooses among real candidates (with the grader's
    rules, correctness check and timer as its callbacks), and that configuration's performance outputs."""
    if not ctx.gpu:
        return {}, {}
    function = host_calls.load(source, SEARCH)
    if isinstance(function, str):
        return {"load_error": function}, {}
    limits = device_limits()
    cands = _lists().gpu_candidates()
    tuner = WarptileTuner(seed=seed)
    tuner.precompile([c for c in cands if not _violations(c, limits)])
    call = host_calls.call(function, [dict(c) for c in cands], lambda c: _violations(c, limits), tuner.check,
                           tuner.time)
    arrays: dict = {}
    meta = {"call": call.to_data(arrays, "chosen"), "candidates": len(cands)}
    chosen = call.value
    if call.raised or not is_config(chosen) or _violations({p: int(chosen[p]) for p in PARAMS}, limits):
        return meta, arrays
    chosen = {p: int(chosen[p]) for p in PARAMS}
    meta["chosen"] = chosen
    st = _searched_stage(chosen)
    meta["performance"], arrays = performance.collect(stage("warptiling").source(), seed,
                                                      dataclasses.replace(ctx, stage=st))
    return meta, arrays


def judge_search_gpu(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "search-tuned-performance"
    meta, arrays = outputs
    if not ctx.gpu:
        return CheckResult(name, NOT_GRADED, "not graded: no GPU (your search's choice is only timed, and its "
                           "points only given, when the grader runs on a GPU)", 0.0)
    if meta.get("load_error"):
        return CheckResult.make(name, False, meta["load_error"])
    call = Call.from_data(meta["call"], arrays)
    if call.raised:
        text = call.raised_text()
        return CheckResult.make(name, False, text if text.startswith("your function is not") else
                                f"your search raised {call.raised[0]}: {call.raised[1]}")
    chosen = call.value
    if chosen is None or not is_config(chosen):
        return CheckResult.make(name, False, f"your search returned {chosen!r} from {meta['candidates']} "
                                "candidates, among them valid and correct ones: nothing to time")
    if "chosen" not in meta:
        why = _violations({p: int(chosen[p]) for p in PARAMS}, H200.limits)
        return CheckResult.make(name, False, f"your search chose {describe(chosen)}, which the grader's rules "
                                f"reject ({why[0] if why else 'on this GPU'})")
    chosen = meta["chosen"]
    result = performance.judge((meta.get("performance", {}), arrays), seed,
                               dataclasses.replace(ctx, stage=_searched_stage(chosen)))
    result.name = name
    result.message = (f"your search chose {describe(chosen)} from {meta['candidates']} candidates; its kernel "
                      f"(the warptiling stage's), against the autotuned stage's threshold:\n" + result.message)
    if result.status == NOT_GRADED:
        result.status = FAILED
    return result


VIOLATIONS_CHECKS = (
    Check("rules-tiles", _collect_rules("rules-tiles"), _judge_rules(
        "rules-tiles", "threads, warp tiles, sub-tiles, lanes, float4, tile sizes, loads; H200 limits"), 120,
        FUNCTION_HANG, needs_answers=True),
    Check("rules-resources", _collect_rules("rules-resources"), _judge_rules(
        "rules-resources", "shared memory and registers; limits of the H200, the A100 and the L4"), 120,
        FUNCTION_HANG, needs_answers=True))
SEARCH_CHECKS = (Check("search-fake-space", collect_search_fake, judge_search_fake, 120, FUNCTION_HANG,
                       needs_answers=True),
                 Check("search-tuned-performance", collect_search_gpu, judge_search_gpu, 600, FUNCTION_HANG,
                       needs_answers=True, times_kernels=True))

"""What the checks share: compiling a stage's kernel (through the one
compile-and-capture, grader.platform.compiler), launching with guard zones around C,
readable launch failures, the "does not compile" result, random seeds.

Every check is a function of (submission, seed), the exercise's own
parameters (an SGEMM stage) bound by the registry, grader.grading.registry; it
returns a grader.grading.report.CheckResult and never raises for anything the
student's code does.
"""
from __future__ import annotations

import contextlib
import re
import signal
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from grader import emulator
from grader.grading.checks import emulator_tools as analysis
from grader.grading.report import CheckResult
from grader.kernels import sgemm
from grader.kernels.sgemm import driver_of, launch_kernel
from grader.kernels.stages import Launch, Stage
from grader.platform import sandbox
from grader.platform.compiler import CompileFailed, Kernels, compile_kernels

# The bit pattern written around C: a signalling NaN no float arithmetic produces.
GUARD_BITS = np.uint32(0x7FBADBAD)
DOES_NOT_COMPILE = "the kernel does not compile:"
DID_NOT_FINISH = "the kernel did not finish"

# A launch of the student's kernel is stopped once it has run HANG_FACTOR times
# as long as the reference solution's same launch (the same check's same
# `launch_budget` block, timed in a trusted process before: Context.budgets),
# and never before HANG_FLOOR_S seconds. On the emulator the launch alone is
# stopped; on a GPU a launch cannot be, so the grading process is ended by
# SIGALRM (end_process_past_budget), which grader.grading.isolation reports as
# a kernel that did not finish. Where the reference's time is not known (a copy
# of the course without its solutions, on a GPU it ships no times for), a GPU
# launch is ended after HANG_UNKNOWN_S: every checked launch of the course takes
# well under a second on a GPU (the emulator has its own per-launch limit).
HANG_FACTOR = 100
HANG_FLOOR_S = 5.0
HANG_UNKNOWN_S = 10.0
_budgets: dict[str, float] = {}
_measured: dict[str, float] | None = None
_budget_text = ""
_alarm = False


def end_process_past_budget(on: bool = True) -> None:
    """In a grading process on a GPU: a launch past its budget ends the process (SIGALRM)."""
    global _alarm
    _alarm = on and hasattr(signal, "setitimer")
    if _alarm:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)      # not inherited as ignored: it must end the process


def budget_seconds(reference_seconds: float) -> float:
    return max(HANG_FLOOR_S, HANG_FACTOR * reference_seconds)


def use_budgets(budgets: dict[str, float], measure: bool = False) -> None:
    """The reference's seconds per budget key for this process's launches; with `measure` (the
    reference solution's own run), record them instead (measured_budgets())."""
    global _budgets, _measured
    _budgets = dict(budgets)
    _measured = {} if measure else None


def measured_budgets() -> dict[str, float]:
    return dict(_measured or {})


def budget_key(key) -> str:
    return "/".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))


@contextlib.contextmanager
def launch_budget(key, emulated: bool = True):
    """The launches inside run within budget_seconds(the reference's time for the same block); in the
    reference's own run, the block is timed instead."""
    global _budget_text
    name = budget_key(key)
    if _measured is not None:       # the launches' own time on the emulator (not the builds a block may make)
        clock = emulator.launch_seconds if emulated else time.perf_counter
        start = clock()
        try:
            yield None
        finally:
            _measured[name] = max(_measured.get(name, 0.0), clock() - start)
        return
    ref = _budgets.get(name)
    if not emulated:
        if not _alarm:
            yield None
            return
        budget = HANG_UNKNOWN_S if ref is None else budget_seconds(ref)
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            yield budget
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return
    old = emulator.launch_timeout()
    budget = old if ref is None else min(old, budget_seconds(ref))
    _budget_text = (f"stopped after {budget:.1f} s" + ("" if ref is None else
                    f" ({HANG_FACTOR} x the reference kernel's {ref * 1e3:.1f} ms on the same launch, "
                    f"at least {HANG_FLOOR_S:g} s)"))
    emulator.set_launch_timeout(budget)
    try:
        yield budget
    finally:
        emulator.set_launch_timeout(old)


def compile_function(stage: Stage, source: str, on_emulator: bool = False):
    """(the stage's kernel as a Function, compiler log). Raises CompileFailed."""
    functions, log = compile_kernels(source, [stage.kernel], stage.options(), on_emulator)
    return functions[stage.kernel], log


def does_not_compile(name: str, error: CompileFailed | str, seed: int | None = None) -> CheckResult:
    """The failed result of a check whose source does not compile (said once, with the compiler's log)."""
    return CheckResult.make(name, False, f"{DOES_NOT_COMPILE}\n{error}",
                            details={} if seed is None else {"seed": seed})


def not_compiled(name: str, meta: dict, seed: int | None = None) -> CheckResult | None:
    """does_not_compile() when collect() found the source does not compile, else None."""
    return None if meta.get("compile_error") is None else does_not_compile(name, meta["compile_error"], seed)


def start_stage_collect(stage: Stage, source: str, on_emulator: bool = False, analysed: bool | None = None):
    """How collect() of an SGEMM stage's check starts: (meta with the compiler's log or error,
    the stage's kernel as a Function, or None when the source does not compile). From then on a
    grading process on the emulator starts no program (lock_down); `analysed` (default: on_emulator):
    the check may launch under the analysis."""
    meta = {"log": "", "compile_error": None}
    try:
        function, meta["log"] = compile_function(stage, source, on_emulator)
    except CompileFailed as e:
        meta["compile_error"] = str(e)
        return meta, None
    lock_down([function], analysed=on_emulator if analysed is None else analysed)
    return meta, function


def start_collect(kernels: Kernels, source: str, on_emulator: bool = False, prepare=None):
    """How collect() of a check of labs 4, 7 and 8 starts: (meta with the compiler's log or
    error, {kernel: Function} or None when the source does not compile). `prepare()`, when the
    source compiles: what the check's drivers compile later (a reference kernel), compiled now,
    before lock_down."""
    meta = {"log": "", "compile_error": None}
    try:
        functions, meta["log"] = kernels.compile(source, on_emulator=on_emulator)
    except CompileFailed as e:
        meta["compile_error"] = str(e)
        return meta, None
    if prepare is not None:
        prepare()
    lock_down(list(functions.values()), analysed=on_emulator)
    return meta, functions


_lock_armed = False


def arm_lock_down(on: bool = True) -> None:
    """In a grading process that runs a submission (not the reference's budget run): lock_down takes effect."""
    global _lock_armed
    _lock_armed = on


def lock_down(functions, analysed: bool = False) -> None:
    """Once a check has compiled everything it will run: where its device code runs as native code in
    this process (the emulator), the process may start no program from now on
    (grader.platform.sandbox.forbid_new_programs), so an analysed module's build and line lookup are made
    first. On a GPU, device code cannot make system calls. A compile after this fails: compile first."""
    if not _lock_armed or not any(getattr(driver_of(f), "EMULATED", False) for f in functions):
        return
    if analysed:
        for f in functions:
            f.prepare_analysis()
    sandbox.forbid_new_programs()


def run_guarded(driver, function, launch: Launch, A: np.ndarray, B: np.ndarray, guard: int | None = None):
    """C = A B with C poisoned and `guard` floats of GUARD_BITS before and after it in the same allocation
    (grader.kernels.sgemm.run_guarded). Returns (C, offsets of changed guard floats before C (negative),
    offsets of those after its end)."""
    M, K = A.shape
    N = B.shape[1]
    if guard is None:
        guard = max(4096, 128 * N + 128)          # a whole row of tiles hanging over the end
    a = driver.to_device(np.ascontiguousarray(A, dtype=np.float32))
    b = driver.to_device(np.ascontiguousarray(B, dtype=np.float32))
    C, before, after = sgemm.run_guarded(driver, M * N, guard, GUARD_BITS,
                                         lambda c: launch_kernel(function, launch, M, N, K, a, b, c), (a, b))
    return C.reshape(M, N), before, after


def launch_failure(driver, e: Exception) -> str:
    """A readable reason why a launch (or the copies around it) raised `e`."""
    kind = getattr(e, "kind", None)
    if isinstance(e, getattr(driver, "LaunchError", ())) or kind is not None:
        why = {"deadlock": deadlock_cause(str(e)),
               "refused": "the emulator stopped the kernel",      # its message says why
               "timeout": f"{DID_NOT_FINISH}: {_budget_text or 'it ran past its time limit'}",
               "fault": fault_cause(str(e)),
               "trap": "the kernel trapped (assert or __trap)"}.get(kind, "the launch failed")
        return f"{why}: {e}"
    text = str(e)
    # Real CUDA reports a fault at the next synchronising call, as the driver's words:
    if "illegal memory access" in text or "misaligned address" in text:
        return ("the kernel read or wrote memory outside the arrays, or at a misaligned address (a missing bounds "
                f"check? a tile index past its tile?): {text}")
    if "unspecified launch failure" in text or "illegal instruction" in text:
        return f"the kernel faulted on the GPU: {text}"
    return f"{type(e).__name__}: {e}"


def deadlock_cause(text: str) -> str:
    """What an emulated deadlock's message (which says where each thread waits) suggests, in a student's words."""
    if "wait on an mbarrier" in text and "wait at __syncthreads()" not in text:
        return ("the threads of a block deadlocked on an mbarrier (a wait for a phase that never completes: the "
                "wrong parity, an arrival count or announced bytes that never come, or a stage the producer "
                "refilled before its consumers released it?)")
    return "the threads of a block deadlocked (a __syncthreads() that not every thread reaches?)"


def fault_cause(text: str) -> str:
    """What an emulated fault's message says happened, in a student's words."""
    if "misaligned" in text:
        return "the kernel faulted (a row length or an offset that breaks a vector access's alignment?)"
    if "shared arrays" in text:
        return "the kernel faulted (an index past the end of a shared array?)"
    if "stack overflow" in text or "arithmetic fault" in text or "illegal instruction" in text:
        return "the kernel faulted"
    if re.search(r"out-of-bounds \d+-byte (global )?read", text):
        # A read past an input's end is as often an index or a loop bound (K where N belongs) as a missing check.
        return ("the kernel read memory outside the arrays (a missing bounds check, or an index or a loop bound "
                "that runs past the end of an array?)")
    return "the kernel read or wrote memory outside the arrays (a missing bounds check?)"


def did_not_finish(e: Exception) -> bool:
    """The launch was stopped at its time limit (the kernel hangs or is far too slow)."""
    return getattr(e, "kind", None) == "timeout"


def launch_errors(driver) -> tuple[type[BaseException], ...]:
    """What launching student code can raise: the driver's errors (a fault, a
    deadlock, a timeout), and TypeError or ValueError for arguments that do not
    fit the kernel's parameters. Anything else is a grader error."""
    return (driver.Error, TypeError, ValueError)


def guard_problems(before, after, n: int, name: str, said: set | None = None) -> list[str]:
    """What writes into the guard zones around an output of n floats say (nothing: []); the likely cause
    once per check (`said`: the hints a check has given, this one added)."""
    if not len(before) and not len(after):
        return []
    where = []
    if len(before):
        where.append(f"{len(before)} float(s) before {name} (first at offset {int(before[-1])})")
    if len(after):
        where.append(f"{len(after)} float(s) after its end (first at {name}[{n + int(after[0])}], past the last "
                     f"element {name}[{n - 1}])")
    hint = "" if said is not None and "bounds" in said else " - a missing bounds check?"
    if said is not None:
        said.add("bounds")
    return [f"wrote outside {name}: " + " and ".join(where) + hint]


@dataclass(frozen=True)
class GuardedCase:
    """One shape of a check that runs a kernel into a guarded output (sgemm.run_guarded)."""
    label: str                   # "M=96 N=80 K=72"
    shape: tuple                 # the output's
    name: str                    # the output's name: "C", "out"
    compare: Callable            # compare(output, said) -> what is wrong with it, or None
    correct: str                 # what a correct output says


def collect_guarded(check: str, runs, gpu: bool, drv) -> tuple[list[dict], dict]:
    """Each of `runs` (callables returning an output and its guard zones' changes, sgemm.run_guarded) within
    the launch budget of (check, its index): ([{"failure": why or None}], {"out{i}", "before{i}", "after{i}"}).
    Stops after a hang, and on a GPU after any fault (the context is gone)."""
    ran, arrays = [], {}
    for i, run in enumerate(runs):
        try:
            with launch_budget((check, i), emulated=not gpu):
                out, before, after = run()
        except launch_errors(drv) as e:
            ran.append({"failure": launch_failure(drv, e)})
            if gpu or did_not_finish(e):
                break
            continue
        ran.append({"failure": None})
        arrays.update({f"out{i}": out, f"before{i}": before, f"after{i}": after})
    return ran, arrays


def judge_guarded(ran: list[dict], arrays: dict, cases: list[GuardedCase]) -> tuple[bool, list[str]]:
    """What collect_guarded returned, case by case: (every output correct, a line per case run)."""
    ok, lines, said, failed_first = True, [], set(), {}
    for i, case in enumerate(cases):
        if i >= len(ran):
            ok = False
            if any(r.get("failure") for r in ran):
                break                # the rest was not run after a fault or a hang
            lines.append(f"{case.label}: the grading process returned no result for this shape")
            continue
        if ran[i].get("failure"):
            ok = False
            failure = ran[i]["failure"]          # a cause that stops every shape alike is said once
            lines.append(f"{case.label}: the same as {failed_first[failure]}" if failure in failed_first
                         else f"{case.label}: {failure}")
            failed_first.setdefault(failure, case.label)
            continue
        out = returned_matrix(arrays.get(f"out{i}"), case.shape)
        if out is None:
            ok = False
            lines.append(f"{case.label}: the grading process returned no {case.name} of this shape")
            continue
        problems = guard_problems(np.asarray(arrays.get(f"before{i}", [])), np.asarray(arrays.get(f"after{i}", [])),
                                  out.size, case.name, said)
        wrong = case.compare(out, said)
        problems += [wrong] if wrong else []
        ok = ok and not problems
        lines.append(f"{case.label}: " + ("; ".join(problems) if problems else case.correct))
    return ok, lines


ORDER_SEEDS = (0x5EED1, 0xC0FFEE)      # the permuted thread orders a races check runs beside the normal one


def collect_in_orders(check: str, launch, on_other_inputs, where: tuple = ()) -> tuple[dict, dict]:
    """launch() -> (output or None, why it failed or None): analysed in the normal thread order, then, when
    that gave an output, in each of ORDER_SEEDS' orders until one fails, then on_other_inputs() (the same
    launch on other inputs: an output computed from them changes). The launches' budgets are keyed by
    (check, "analysed" or "plain", *where). Returns ({"failure", "report", "orders": [{"seed", "failure"}]},
    {"out0", "out<seed>", "other"})."""
    meta, arrays = {}, {}
    with launch_budget((check, "analysed", *where)), analysis.thread_order(0), analysis.analysis() as report:
        out, meta["failure"] = launch()
    meta["report"] = analysis.report_data(report)
    meta["orders"] = []
    if out is not None:
        arrays["out0"] = out
        for seed in ORDER_SEEDS:
            with launch_budget((check, "plain", *where)), analysis.thread_order(seed):
                out, failure = launch()
            meta["orders"].append({"seed": seed, "failure": failure})
            if failure:
                return meta, arrays
            arrays[f"out{seed}"] = out
        with launch_budget((check, "plain", *where)):
            out, _ = on_other_inputs()
        if out is not None:
            arrays["other"] = out
    return meta, arrays


def other_inputs_rng(seed: int) -> np.random.Generator:
    """The generator of a race check's other inputs ([seed, 1]: a seed [seed, 0] is the seed itself)."""
    return np.random.default_rng([seed, 1])


def not_credited(shows: str, does: str, check: str) -> str:
    """Why a race check gives no credit to a kernel in which it found no race: `shows` that it computed nothing."""
    return f"{shows}: only a kernel that {does} is credited with being race-free (the {check} check says what is wrong)"


def computed_nothing(out: np.ndarray, other: np.ndarray | None, output: str, inputs: str = "inputs") -> str | None:
    """What shows that a race check's output (the normal thread order's) was not computed from the inputs, or
    None: elements never written, one value everywhere (the inputs are random: no kernel that computes
    anything gives that), or the same output from other inputs (`other`)."""
    unwritten = int(sgemm.never_written(out).sum())
    if unwritten:
        return f"{unwritten} element(s) of {output} were never written"
    if np.array_equal(out, np.full_like(out, out.flat[0]), equal_nan=True):
        return f"{output} is {out.flat[0]:.6g} everywhere{sgemm.value_hint(out.flat[0], output)}"
    if other is not None and np.array_equal(other, out, equal_nan=True):
        return f"{output} is the same for other {inputs} (it does not depend on them)"
    return None


def in_orders_problems(meta: dict, arrays: dict, shape: tuple, output: str, races_head: str, order_cause: str,
                       shown: int = 3) -> list[str]:
    """What is wrong in what collect_in_orders returned: the normal order's failure, the races and the
    out-of-bounds accesses the analysis found (each description once, the first `shown`; an access the
    failure names is not said again), outputs that differ between thread orders."""
    report = analysis.report_from(meta.get("report", {}))
    failure = meta.get("failure")
    problems = [f"normal thread order: {failure}"] if failure else []
    races = list(report.races)
    if races:           # races told apart only by where they touch read the same: each said once
        problems.append(f"{len(races)} {races_head}:\n  " + "\n  ".join(_distinct(races, shown)))
    unsaid = [d for d in _distinct(report.out_of_bounds, shown) if d not in (failure or "")]
    if unsaid:
        problems.append(f"{len(report.out_of_bounds)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(unsaid))
    first = returned_matrix(arrays.get("out0"), shape)
    if first is not None:
        problems += analysis.order_problems(first, meta.get("orders", []),
                                            lambda s: returned_matrix(arrays.get(f"out{s}"), shape),
                                            len(ORDER_SEEDS), output, order_cause)
    elif not failure:
        problems.append(f"the grading process returned no {output}")
    return problems


def _distinct(records, shown: int) -> list[str]:
    """The first `shown` different descriptions (two arrays touched by the same lines read alike)."""
    return list(dict.fromkeys(analysis.describe(r) for r in records))[:shown]


def judge_in_orders(name: str, seed: int, meta: dict, arrays: dict, label: str, shape: tuple, output: str,
                    races_head: str, order_cause: str, does: str, shown: int = 3) -> CheckResult:
    """The verdict on what collect_in_orders returned (meta: with the compile's): passed when the analysed run
    found no race and no out-of-bounds access, every order gave the same output and that output was computed
    from the inputs (computed_nothing).
    `races_head` follows the count of races ("race(s) on shared memory, e.g."), `order_cause` says what a
    difference between orders suggests, `does` what a kernel that is credited does ("computes C")."""
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    problems = in_orders_problems(meta, arrays, shape, output, races_head, order_cause, shown)
    first = returned_matrix(arrays.get("out0"), shape)
    shows = first is not None and computed_nothing(first, returned_matrix(arrays.get("other"), shape), output)
    if shows and not problems:
        problems.append(not_credited(shows, does, name.removesuffix("races") + "correctness"))
    head, log = f"{label}, random seed {seed}", meta.get("log", "")
    if problems:
        return CheckResult.make(name, False, f"{head}:\n" + "\n".join(problems), details={"seed": seed}, output=log)
    return CheckResult.make(name, True, f"{head}: no races, no out-of-bounds accesses, the same {output} in "
                            f"{len(ORDER_SEEDS) + 1} thread orders", details={"seed": seed}, output=log)


def returned_matrix(value, shape: tuple) -> np.ndarray | None:
    """A float32 array of this shape, as a grading process returned it, or None (missing or malformed)."""
    if value is None:
        return None
    value = np.asarray(value)
    return value if value.shape == tuple(shape) and value.dtype == np.float32 else None


def new_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)


"""Bank conflicts and correctness of an SGEMM stage under other tile
configurations (-D values) than the stage's own, so that a kernel tuned to
one shape (a padding that only works for BM = 128, a row length written as a
number) does not pass by luck. Always on the emulator (its analysis counts the
conflicts): for each configuration, C = A B on shapes that are not tile
multiples, C NaN-poisoned inside guard zones, every element checked, and every
shared-memory request of the launches served without a bank conflict.

Registered for the bank-conflict-free stage (lab 4) and the warptiling stage
(lab 6). Also the conflict report that lab 4's checks share: `conflict_report(report)`.
"""
from __future__ import annotations

import html as _html

import numpy as np

from grader.grading.checks import analysed_launch, wrong_patterns
from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks.common import (
    launch_budget,
    launch_errors,
    launch_failure,
    lock_down,
    returned_matrix,
    run_guarded,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm
from grader.platform.backend import drivers
from grader.platform.compiler import CompileFailed, compile_kernels

NAME = "bank-conflicts-configs"
SHOW = 3

# Valid for the bank-conflict-free stage (BM, BN multiples of 32, BK of 8, TM, TN of 4, the tiles of A and B
# split over whole warps), each unlike the stage's (128, 128, 8, 8, 8) in BM, BK and TM or TN. For the
# warptiling stage, two of the H200's tuned configurations (grader/kernels/tuned_configs.json: small squares and
# tall-skinny shapes), unlike its own in BM or BN, BK, the warp tile, the threads and the stages; and one with
# other thread tiles (TM=4, TN=8: 4 lanes across a sub-tile, not 8), which the tuned ones all share.
CONFIGS = {
    "bank-conflict-free": ({"BM": 64, "BN": 128, "BK": 16, "TM": 4, "TN": 8},
                           {"BM": 256, "BN": 64, "BK": 8, "TM": 8, "TN": 4}),
    "warptiling": ({"BM": 64, "BN": 256, "BK": 16, "WM": 32, "WN": 64, "WNITER": 2, "TM": 8, "TN": 4,
                    "NUM_THREADS": 256, "STAGES": 2, "MIN_BLOCKS": 1},
                   {"BM": 128, "BN": 128, "BK": 8, "WM": 64, "WN": 64, "WNITER": 2, "TM": 8, "TN": 4,
                    "NUM_THREADS": 128, "STAGES": 2, "MIN_BLOCKS": 2},
                   {"BM": 64, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "WNITER": 2, "TM": 4, "TN": 8,
                    "NUM_THREADS": 128, "STAGES": 2, "MIN_BLOCKS": 2}),
}


def configs(stage) -> tuple[dict, ...]:
    return CONFIGS[stage.id]


def shapes(d: dict) -> list[tuple[int, int, int]]:
    """Two blocks in each direction, the second one partial, and a partial last step of K; one thin shape."""
    return [(d["BM"] + 37, d["BN"] + 19, 2 * d["BK"] + 5), (3, 2 * d["BN"] + 5, d["BK"] + 3)]


COUNTED_AS = " (extra shared-memory wavefronts, as Nsight Compute counts them)"


def _once(lines: list[str], phrase: str) -> list[str]:
    """The lines with `phrase` left out after its first occurrence."""
    first = next((i for i, line in enumerate(lines) if phrase in line), None)
    return [line if i == first else line.replace(phrase, "") for i, line in enumerate(lines)]


def conflicting(report) -> list:
    """The access sites (source line, load or store) that took more wavefronts than ideal, worst first."""
    return sorted((r for r in report.bank_conflicts if r.wavefronts > r.ideal_wavefronts),
                  key=lambda r: (-r.max_ways, r.ideal_wavefronts - r.wavefronts, r.line))


def conflict_report(report, show: int = 4, label: str = "") -> tuple[bool, str, str | None, dict]:
    """(conflict-free, text, html or None, details) for the launches analysed in `report`:
    each conflicting line with its n-way and wavefronts, the worst request's bank picture
    (`label`: what the pictures belong to, a configuration)."""
    records = conflicting(report)
    ld, st = int(report.conflicts_ld), int(report.conflicts_st)
    lines = [f"{ld} load and {st} store bank conflicts{COUNTED_AS}"]
    for r in records[:show]:
        lines.append(f"line {r.line} ({'load' if r.op == 'ld' else 'store'}): {r.max_ways}-way bank conflict, "
                     f"{r.wavefronts} wavefronts for {r.requests} requests where {r.ideal_wavefronts} would do")
    if records:
        lines.append(f"worst request (line {records[0].line}), thread to bank:\n{records[0].picture}")
    html = "".join(f"<pre>{_html.escape(label)}line {r.line}, {r.max_ways}-way:\n{_html.escape(r.picture)}</pre>"
                   for r in records[:2]) or None
    return ld + st == 0 and not records, "\n".join(lines), html, {"conflicts_ld": ld, "conflicts_st": st}


def _defines(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())


UNWRITTEN = "C not written everywhere"     # a mark in `said`, never said itself


def _warp_grid(d: dict) -> tuple[int, int]:
    """(rows, columns) of warps in a block of this configuration."""
    return int(d["BM"]) // int(d["WM"]), int(d["BN"]) // int(d["WN"])


def _suspects(failed: list[dict], passed: list[dict], unwritten: bool) -> str:
    """A likely cause, only where the configurations show it: the tile parameters in which every failing
    configuration differs from every passing one; with parts of C never written (`unwritten`), a warp grid
    that is square in every passing configuration and not in any failing one."""
    if unwritten and passed and all("WM" in d and "WN" in d for d in failed + passed) and \
            all(_warp_grid(d)[0] != _warp_grid(d)[1] for d in failed) and \
            all(_warp_grid(d)[0] == _warp_grid(d)[1] for d in passed):
        rows, cols = _warp_grid(failed[0])
        return (f" - it passes where a block's warps form a square grid (BM / WM = BN / WN) and fails where they "
                f"form {rows} row(s) of {cols}: the warp's row and column swapped (the row is warp / (BN / WN))?")
    params = [p for p in failed[0] if passed and all(f[p] not in {q[p] for q in passed} for f in failed)]
    if not params:
        return ""
    return (f" - it passes with {'; '.join(_defines(d) for d in passed)}, and the failing ones differ in "
            f"{', '.join(params)}: is a size written as a number where {' or '.join(params)} belongs, or a "
            "padding that only works for one value?")


def _compile_config(stage, source: str, d: dict):
    """The kernel built with one configuration's values, or its compiler error (str)."""
    try:
        return compile_kernels(source, [stage.kernel], stage.options(d), on_emulator=True)[0][stage.kernel]
    except CompileFailed as e:
        return str(e)


def _collect_config(stage, function, d: dict, rng, driver, index: int, arrays: dict) -> dict:
    """One configuration's launches, nothing judged (C and its guards per shape go into `arrays`)."""
    if isinstance(function, str):
        return {"compile_error": function}
    data = {"shapes": []}
    with analysis.thread_order(0), analysis.analysis() as report:
        for j, (M, N, K) in enumerate(shapes(d)):
            A, B = sgemm.random_inputs(M, N, K, rng)
            try:
                with launch_budget((NAME, stage.id, index, j)):
                    C, before, after = run_guarded(driver, function, stage.launch(M, N, K, d), A, B)
            except launch_errors(driver) as e:      # the message names the line, block and thread
                data["shapes"].append({"failure": launch_failure(driver, e)})
                break
            data["shapes"].append({"failure": None})
            arrays.update({f"C{index}_{j}": C, f"before{index}_{j}": before, f"after{index}_{j}": after})
    data["report"] = analysis.report_data(report)
    return data


def _judge_config(d: dict, data: dict, rng, index: int, arrays: dict,
                  said: set) -> tuple[bool, list[str], str | None]:
    """(passed, lines, html) for one configuration; `said`: the hints already given (wrong_patterns.once)."""
    head = _defines(d)
    if data.get("compile_error") is not None:
        return False, [f"{head}: the kernel does not compile with these values:\n{data['compile_error']}"], None
    ok, lines, failed_launch = True, [f"{head}:"], False
    ran = list(data.get("shapes", []))
    for j, (M, N, K) in enumerate(shapes(d)):
        shape = f"  M={M} N={N} K={K}"
        A, B = sgemm.random_inputs(M, N, K, rng)
        if j >= len(ran):
            ok = False
            lines.append(f"{shape}: the grading process returned nothing for this shape")
            break
        if ran[j].get("failure"):
            ok, failed_launch = False, True
            lead, sep, rest = ran[j]["failure"].partition(": cuLaunchKernel failed: ")
            if sep and lead in said:        # the likely cause was said for another configuration
                lines.append(f"{shape}: {rest}")
            else:
                said.add(lead)
                lines.append(f"{shape}: {ran[j]['failure']}")
            break
        C = returned_matrix(arrays.get(f"C{index}_{j}"), (M, N))
        if C is None:
            ok = False
            lines.append(f"{shape}: the grading process returned no C")
            continue
        before, after = (np.asarray(arrays.get(f"{k}{index}_{j}", np.empty(0))) for k in ("before", "after"))
        problems = []
        if len(before) or len(after):
            problems.append(f"wrote outside C ({len(before)} float(s) before it, {len(after)} after its end)")
        cmp = sgemm.compare(C, A, B)
        if sgemm.never_written(C).any():
            said.add(UNWRITTEN)
        if not cmp.ok:
            r, c, want, got = cmp.first
            nan = sgemm.value_hint(C[r, c])
            problems.append(f"{cmp.wrong} of {M * N} elements of C wrong; first at row {r}, column {c}: "
                            f"expected {want:.6g}, got {got:.6g}" + "".join(wrong_patterns.once([nan and (nan, nan)],
                                                                                                said)))
        if problems:
            ok = False
            lines.append(f"{shape}: " + "; ".join(problems))
        else:
            lines.append(f"{shape}: C correct")
    report = analysis.report_from(data.get("report", {}))
    oob = list(report.out_of_bounds)
    if oob and not failed_launch:
        ok = False
        lines.append(f"  {len(oob)} out-of-bounds or misaligned access(es), e.g.:\n    "
                     + "\n    ".join(analysis.describe(f) for f in oob[:SHOW]))
    free, text, html, _ = conflict_report(report, label=f"{head}: ")
    if failed_launch and free:          # nothing ran to its end: no count to report
        return False, lines, None
    not_tiled = analysed_launch.shared_tiling_problem(report, *shapes(d)) if free and not failed_launch else None
    ok = ok and free and not not_tiled
    lines.append("  " + text.replace("\n", "\n    ") + (f"; but {not_tiled}" if not_tiled else ""))
    return ok, lines, html



def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """Every configuration's launches, nothing judged."""
    driver, _ = drivers(on_emulator=True)
    rng = np.random.default_rng(seed)
    arrays: dict = {}
    built = [_compile_config(ctx.stage, source, d) for d in configs(ctx.stage)]      # every build first
    lock_down([f for f in built if not isinstance(f, str)], analysed=True)
    meta = {"configs": [_collect_config(ctx.stage, function, d, rng, driver, i, arrays)
                        for i, (d, function) in enumerate(zip(configs(ctx.stage), built))]}
    return meta, arrays


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs: the inputs made again from the seed."""
    meta, arrays = outputs
    stage = ctx.stage
    rng = np.random.default_rng(seed)
    ok_all, lines, html, failed, passed, said = True, [], None, [], [], set()
    collected = list(meta.get("configs", []))
    for i, d in enumerate(configs(stage)):
        data = collected[i] if i < len(collected) else {"shapes": []}
        ok, more, picture = _judge_config(d, data, rng, i, arrays, said)
        lines += more
        if not ok:
            ok_all = False
            failed.append(d)
            html = html or picture
        else:
            passed.append(d)
    lines = _once(_once(lines, COUNTED_AS), analysed_launch.NOT_TILED_WHY)
    own = _defines(dict(stage.defines))
    if ok_all:
        head = (f"correct and free of bank conflicts with {len(configs(stage))} other tile configurations too "
                f"(the stage's own is {own}; random seed {seed})")
    else:
        head = (f"wrong or bank-conflicting with {'; '.join(_defines(d) for d in failed)} (the stage's own "
                f"configuration is {own}){_suspects(failed, passed, UNWRITTEN in said)} (random seed {seed})")
    return CheckResult.make(NAME, ok_all, head + "\n" + "\n".join(lines), html=html, details={"seed": seed})


CHECK = Check(NAME, collect, judge, timeout=240)

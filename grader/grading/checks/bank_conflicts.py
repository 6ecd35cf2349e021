"""Shared-memory bank conflicts from the emulator's analysis. Graded for
stages marked bank_conflict_free (any conflict fails, with the source line,
the n-way and the bank picture; and only a kernel that computes C is
credited: an empty kernel has no conflicts); reported for information elsewhere."""
from __future__ import annotations

import html as _html

from grader.grading.checks import analysed_launch
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import FAILED, NOT_GRADED, PASSED, CheckResult

NAME = "bank-conflicts"


def shape(stage) -> tuple[int, int, int]:
    big = "BM" in stage.defines or "NUM_THREADS" in stage.defines
    return (128, 128, 32) if big else (64, 64, 32)



def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the kernel did, nothing judged: C and the analysis' shared-memory records of one launch."""
    return analysed_launch.collect(NAME, ctx.stage, source, shape(ctx.stage))


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs."""
    meta, arrays = outputs
    stage = ctx.stage
    graded = bool(stage.bank_conflict_free)
    M, N, K = shape(stage)
    judged = analysed_launch.outputs(NAME, meta, arrays, (M, N, K), graded)
    if isinstance(judged, CheckResult):
        return judged
    report, computed, log = judged
    records = sorted((r for r in report.bank_conflicts if r.wavefronts > r.ideal_wavefronts),
                     key=lambda r: (-r.max_ways, r.ideal_wavefronts - r.wavefronts, r.line))
    ld, st = int(report.conflicts_ld), int(report.conflicts_st)
    details = {"conflicts_ld": ld, "conflicts_st": st}
    lines = [f"M={M} N={N} K={K}: {ld} load and {st} store bank conflicts "
             "(extra shared-memory wavefronts, as Nsight Compute counts them)"]
    for r in records[:4]:
        lines.append(f"line {r.line} ({'load' if r.op == 'ld' else 'store'}): {r.max_ways}-way bank conflict, "
                     f"{r.wavefronts} wavefronts for {r.requests} requests where {r.ideal_wavefronts} would do")
    html = ""
    if records:
        html = "".join(f"<pre>line {r.line}, {r.max_ways}-way:\n{_html.escape(r.picture)}</pre>" for r in records[:2])
    text = "\n".join(lines)
    if records:
        text += f"\nworst request (line {records[0].line}), thread to bank:\n{records[0].picture}"
    if not graded:
        return CheckResult(NAME, NOT_GRADED, "not graded for this stage (information only)\n" + text, 0.0,
                           html=html or None, details=details, output=log)
    not_tiled = analysed_launch.shared_tiling_problem(report, (M, N, K))
    if ld + st == 0 and not records and not computed.ok:
        text += (f"\nbut C is wrong ({computed.describe((M, N, K))}): only a kernel that computes C is credited "
                 "with being free of bank conflicts")
    elif ld + st == 0 and not records and not_tiled:
        text += f"\nbut {not_tiled}"
    ok = ld + st == 0 and not records and computed.ok and not not_tiled
    return CheckResult(NAME, PASSED if ok else FAILED, text, 1.0 if ok else 0.0, html=html or None,
                       details=details, output=log)


CHECK = Check(NAME, collect, judge, timeout=240)

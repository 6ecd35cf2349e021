"""Global-memory coalescing from the emulator's analysis: the 32-byte sectors
each warp request of every load and store line touches (Nsight Compute's
l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st} per request). Graded for the
stages in GRADED (no line may need much more than the sectors its bytes fill,
and the kernel must compute C); reported for information on the others it is
registered for. Always counted on the emulator, so the grade is the same on a
laptop and on a GPU."""
from __future__ import annotations

import html as _html
import re

from grader.grading.checks import analysed_launch
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import FAILED, NOT_GRADED, PASSED, CheckResult

NAME = "coalescing"
GRADED = {"coalesced"}
# Rows of A, B and C start on 32-byte sectors (N and K are multiples of 8
# floats), so a coalesced warp access needs exactly the sectors its bytes fill;
# M = 96 keeps every warp of the naive order full (32 rows a warp).
SHAPE = (96, 64, 48)
# A line is uncoalesced when its requests touch more than this many times the
# sectors their bytes would fill (the naive index order: 8 times).
TOLERANCE = 1.25
ARRAYS = {3: "A", 4: "B", 5: "C"}     # the SGEMM kernel's pointer arguments (M, N, K, A, B, C)


def array_name(buffer: str) -> str:
    """'A', 'B' or 'C' for the emulator's name of an SGEMM launch buffer."""
    m = re.match(r"argument (\d+) ", buffer)
    return ARRAYS.get(int(m.group(1)), buffer) if m else buffer


def uncoalesced(record) -> bool:
    return record.sectors > TOLERANCE * record.ideal_sectors


def describe(record) -> str:
    what = f"line {record.line}, {'load from' if record.op == 'ld' else 'store to'} {array_name(record.buffer)}"
    spr = record.sectors_per_request
    text = (f"{what}: {spr:.3g} sector{'s' if spr != 1 else ''} per warp request "
            f"({record.sectors} sectors for {record.requests} requests)")
    if uncoalesced(record):
        return text + f": uncoalesced, {record.ideal_per_request:.3g} per request would do"
    if record.ideal_sectors == record.requests and record.bytes > 32 * record.requests:
        same = "read the same value" if record.op == "ld" else "write the same address"
        return text + f": one sector serves the whole warp (its lanes {same})"
    return text + ": coalesced"




def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """What the kernel did, nothing judged: C and the analysis' global-memory records of one launch."""
    return analysed_launch.collect(NAME, ctx.stage, source, SHAPE)


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs."""
    meta, arrays = outputs
    graded = ctx.stage.id in GRADED
    M, N, K = SHAPE
    judged = analysed_launch.outputs(NAME, meta, arrays, SHAPE, graded)
    if isinstance(judged, CheckResult):
        return judged
    report, computed, log = judged
    records = sorted(report.global_accesses, key=lambda r: (r.line, r.op, array_name(r.buffer)))
    bad = sorted((r for r in records if uncoalesced(r)), key=lambda r: -r.sectors / max(r.ideal_sectors, 1))
    details = {"requests_ld": report.requests("ld"), "sectors_ld": report.sectors("ld"),
               "requests_st": report.requests("st"), "sectors_st": report.sectors("st"),
               "lines": [{"line": r.line, "op": r.op, "array": array_name(r.buffer), "requests": r.requests,
                          "sectors": r.sectors, "ideal_sectors": r.ideal_sectors} for r in records]}
    lines = [f"M={M} N={N} K={K}: global-memory sectors (32 B) per warp request, as Nsight Compute counts them:"]
    lines += ["  " + describe(r) for r in records] or ["  the kernel reads and writes no global memory"]
    moved = 32 * (details["sectors_ld"] + details["sectors_st"])
    if moved:
        details["l1_bytes"], details["flop"] = moved, 2 * M * N * K
        lines.append(f"estimated on the emulator: {moved} bytes of sectors for 2 M N K = {2 * M * N * K} FLOP, "
                     f"{2 * M * N * K / moved:.3g} FLOP/byte at L1 (whole sectors, no cache reuse)")
    if bad:
        r = bad[0]
        lines.append(f"worst request (line {r.line}, {array_name(r.buffer)}), the sectors one warp touched:\n"
                     f"{r.picture}")
        lines.append("neighbouring lanes of a warp (threadIdx.x and threadIdx.x + 1) should touch neighbouring "
                     "addresses: which index does threadIdx.x move?")
    html = "".join(f"<pre>line {r.line}, {array_name(r.buffer)}:\n{_html.escape(r.picture)}</pre>" for r in bad[:2])
    text = "\n".join(lines)
    if not graded:
        return CheckResult(NAME, NOT_GRADED, "not graded for this stage (information only)\n" + text, 0.0,
                           html=html or None, details=details, output=log)
    if not bad and not computed.ok:
        text += (f"\nbut C is wrong ({computed.describe((M, N, K))}): only a kernel that computes C is credited "
                 "with coalesced accesses")
    ok = not bad and bool(records) and computed.ok
    return CheckResult(NAME, PASSED if ok else FAILED, text, 1.0 if ok else 0.0, html=html or None,
                       details=details, output=log)


CHECK = Check(NAME, collect, judge, timeout=240)

"""Shared-memory bank conflicts from the emulator's analysis. Graded for
stages marked bank_conflict_free (any conflict fails, with the source line,
the n-way and the bank picture; and only a kernel that computes C is
credited: an empty kernel has no conflicts); reported for information elsewhere."""
from __future__ import annotations

import html as _html

import numpy as np

from .. import sgemm
from ..backend import drivers
from ..compiler import CompileFailed
from ..report import FAILED, NOT_GRADED, PASSED, CheckResult
from . import emulator_tools as analysis
from .common import (compile_function, did_not_finish, does_not_compile, launch_budget, launch_errors, launch_failure,
                     returned_matrix)

NAME = "bank-conflicts"


def shape(stage) -> tuple[int, int, int]:
    big = "BM" in stage.defines or "NUM_THREADS" in stage.defines
    return (128, 128, 32) if big else (64, 64, 32)


def run(stage, source: str, seed: int | None = None) -> CheckResult:
    """The check in one process (tests, tools): judge(collect(...))."""
    return judge(stage, *collect(stage, source, seed), gpu=False)


def collect(stage, source: str, seed: int | None = None) -> tuple[dict, dict]:
    """What the kernel did, nothing judged: C and the analysis' shared-memory records of one launch."""
    meta = {"seed": seed, "log": "", "compile_error": None, "failure": None, "stopped": False}
    driver, _ = drivers(on_emulator=True)
    try:
        function, meta["log"] = compile_function(stage, source, on_emulator=True)
    except CompileFailed as e:
        meta["compile_error"] = str(e)
        return meta, {}
    M, N, K = shape(stage)
    A, B = _inputs(stage)
    launch = stage.launch(M, N, K)
    a, b = driver.to_device(A), driver.to_device(B)
    c = driver.to_device(sgemm.poisoned((M, N)))

    def analysed_reference():
        reference = compile_function(stage, stage.source(), on_emulator=True)[0]
        c_ref = driver.to_device(sgemm.poisoned((M, N)))
        with analysis.thread_order(0), analysis.analysis():
            sgemm.launch_kernel(reference, launch, M, N, K, a, b, c_ref)

    with launch_budget((NAME, stage.id, M, N, K), analysed_reference), \
            analysis.thread_order(0), analysis.analysis() as report:
        try:
            sgemm.launch_kernel(function, launch, M, N, K, a, b, c)
        except launch_errors(driver) as e:
            meta["failure"], meta["stopped"] = launch_failure(driver, e), did_not_finish(e)
            return meta, {}
    C = np.empty((M, N), dtype=np.float32)
    driver.memcpy_dtoh(C, c)
    meta["report"] = analysis.report_data(report)
    return meta, {"C": C}


def _inputs(stage):
    M, N, K = shape(stage)
    return sgemm.random_inputs(M, N, K, np.random.default_rng(0))


def judge(stage, meta: dict, arrays: dict, gpu: bool) -> CheckResult:
    """The verdict on collect()'s outputs."""
    graded = bool(stage.bank_conflict_free)
    M, N, K = shape(stage)
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"])
    if meta.get("failure"):
        return CheckResult(NAME, FAILED if graded else NOT_GRADED, f"M={M} N={N} K={K}: {meta['failure']}", 0.0,
                           details={"did_not_finish": True} if meta.get("stopped") else {})
    log = meta.get("log", "")
    report = analysis.report_from(meta.get("report", {}))
    C = returned_matrix(arrays.get("C"), (M, N))
    A, B = _inputs(stage)
    computed = sgemm.compare(C if C is not None else sgemm.poisoned((M, N)), A, B)
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
    if ld + st == 0 and not records and not computed.ok:
        text += (f"\nbut C is wrong ({computed.describe((M, N, K))}): only a kernel that computes C is credited "
                 "with being free of bank conflicts")
    ok = ld + st == 0 and not records and computed.ok
    return CheckResult(NAME, PASSED if ok else FAILED, text, 1.0 if ok else 0.0, html=html or None,
                       details=details, output=log)

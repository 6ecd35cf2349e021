"""The float4 path and its fallback (the vectorized stage and later): C = A B
where a float4 access would be misaligned, always on the emulator's analysis
(also on GPU machines: there a misaligned access ends the context, here it
names the pointer, the line and the thread).

A float4 load or store (LDG.128 / STG.128: 16 bytes, one instruction) needs
an address that is a multiple of 16. A row-major matrix's rows are 16-byte
aligned only when its first element is and its row length is a multiple of 4
floats. So the cases, each a shape that is not a tile multiple:
  - everything aligned, K and N multiples of 4: the float4 path itself;
  - K % 4 != 0 (rows of A start 4 K bytes apart): the fallback for A;
  - N % 4 != 0: the fallback for B and C;
  - A, B or C a view one float into its allocation (address % 16 == 4), the
    others aligned, K and N multiples of 4: the fallback for the pointers;
  - K % 4 != 0 and all three views 4, 8 and 12 bytes off at once.
A kernel passes when every case gives the right C (against float64, the
tolerance of the correctness check) with no misaligned or out-of-bounds
access and nothing written outside C.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks import wrong_patterns
from grader.grading.checks.common import (
    GUARD_BITS,
    does_not_compile,
    fault_cause,
    launch_budget,
    launch_errors,
    launch_failure,
    start_stage_collect,
)
from grader.grading.protocol import Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm
from grader.platform.backend import drivers

NAME = "alignment"
GUARD = 64                   # poisoned floats before and after C (16-byte multiples)
FALLBACK = ("A float4 access (16 bytes in one instruction, LDG.128 / STG.128) needs an address that is a "
            "multiple of 16, so the float4 path needs a fallback: take it only when K % 4 == 0, N % 4 == 0 and "
            "A, B and C all start on a 16-byte boundary (address % 16 == 0), else the scalar path.")


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int
    offsets: tuple[int, int, int] = (0, 0, 0)     # floats past a 16-byte boundary: A, B, C

    @property
    def takes_float4(self) -> bool:
        """K and N multiples of 4 and every pointer 16-byte aligned: the float4 path must be taken."""
        return self.K % 4 == 0 and self.N % 4 == 0 and not any(self.offsets)

    def describe(self) -> str:
        views = [f"{p} {4 * o} bytes past a 16-byte boundary" for p, o in zip("ABC", self.offsets) if o]
        return f"M={self.M} N={self.N} K={self.K}, " + (", ".join(views) if views else "A, B, C 16-byte aligned")


CASES = (
    Case(67, 68, 28),                    # the float4 path
    Case(67, 68, 27),                    # K % 4 != 0
    Case(67, 37, 28),                    # N % 4 != 0
    Case(67, 68, 28, (1, 0, 0)),         # A a view one float into its allocation
    Case(67, 68, 28, (0, 1, 0)),         # B
    Case(67, 68, 28, (0, 0, 1)),         # C
    Case(45, 36, 30, (1, 2, 3)),         # K % 4 != 0 and every pointer off, by 4, 8, 12 bytes
)


def _floats(n: int) -> str:
    return f"{n} float" + ("" if n == 1 else "s")


def why_misaligned(case: Case, pointer: str) -> str:
    """Why `pointer` (A, B or C) has addresses that are not multiples of 16 in this case."""
    off = case.offsets["ABC".index(pointer)]
    reasons = []
    if off:
        reasons.append(f"{pointer} starts {4 * off} bytes past a 16-byte boundary (a view {_floats(off)} into its "
                       "allocation)")
    dim, n = ("K", case.K) if pointer == "A" else ("N", case.N)
    if n % 4:
        every = 4 // np.gcd(n, 4)
        reasons.append(f"{dim} = {n} is not a multiple of 4: the rows of {pointer} start {4 * n} bytes apart, so "
                       f"only one row in {every} starts on a 16-byte boundary")
    return " and ".join(reasons) or f"{pointer} and its rows are 16-byte aligned here: a wrong index?"


def describe_finding(case: Case, finding, buffers: dict[str, tuple[int, int]]) -> tuple[str, bool]:
    """(one finding of the analysis, named by the matrix it touched; whether it is a misaligned access of A, B or C)."""
    pointer = next((p for p, (start, size) in buffers.items() if start <= finding.address < start + size), None)
    what = "read" if finding.op == "ld" else "write"
    where = f"line {finding.line} (block {finding.block}, thread {finding.thread})"
    if finding.kind == "misaligned" and pointer is not None and not finding.shared:
        return (f"{where}: a misaligned {finding.size}-byte {what} of {pointer}, at an address "
                f"{finding.address % 16} bytes past a multiple of 16 - {why_misaligned(case, pointer)}"), True
    return analysis.describe(finding), False


def _alloc(driver, floats: int):
    """A device buffer of `floats` floats, every one the guard pattern."""
    host = np.full(floats, GUARD_BITS, dtype=np.uint32)
    return driver.to_device(host), host


def collect_case(driver, function, stage, case: Case, rng, index: int) -> tuple[dict, np.ndarray | None]:
    """One case's launch, nothing judged: (the analysis' findings, the launch failure and where A, B and C
    lay; C with its guard zones as uint32, when the launch ran without findings)."""
    M, N, K = case.M, case.N, case.K
    oa, ob, oc = case.offsets
    A, B = sgemm.random_inputs(M, N, K, rng)
    a = driver.to_device(np.concatenate([np.zeros(oa, np.float32), A.ravel(), np.zeros(4, np.float32)]))
    b = driver.to_device(np.concatenate([np.zeros(ob, np.float32), B.ravel(), np.zeros(4, np.float32)]))
    c, host = _alloc(driver, GUARD + oc + M * N + GUARD)
    first_c = GUARD + oc
    driver.memcpy_htod(int(c) + 4 * first_c, sgemm.poisoned(M * N))
    pointers = {"A": int(a) + 4 * oa, "B": int(b) + 4 * ob, "C": int(c) + 4 * first_c}
    data = {"buffers": {"A": (int(a), 4 * (oa + A.size + 4)), "B": (int(b), 4 * (ob + B.size + 4)),
                        "C": (int(c), 4 * host.size)}, "failure": None}
    with analysis.thread_order(0), analysis.analysis() as report:
        try:
            with launch_budget((NAME, stage.id, index)):
                sgemm.launch_kernel(function, stage.launch(M, N, K), M, N, K, *pointers.values())
        except launch_errors(driver) as e:
            data["failure"] = launch_failure(driver, e)
    data["report"] = analysis.report_data(report)
    if not report.out_of_bounds and not data["failure"]:
        driver.memcpy_dtoh(host, c)
    else:
        host = None
    for alloc in (a, b, c):
        with contextlib.suppress(driver.Error):
            alloc.free()
    return data, host


def judge_case(case: Case, data: dict, host, rng, said: set) -> tuple[list[str], bool]:
    """(what went wrong in one case (nothing: []), whether an access of A, B or C was misaligned); a likely
    cause is said once per check (`said`: the causes said so far, this case's added)."""
    M, N, K = case.M, case.N, case.K
    A, B = sgemm.random_inputs(M, N, K, rng)
    buffers = {p: tuple(v) for p, v in data.get("buffers", {}).items()}
    report = analysis.report_from(data.get("report", {}))
    findings = report.out_of_bounds
    problems, misaligned = [], False
    if case.takes_float4 and not findings and not data.get("failure"):
        scalar = sorted({f"{'A' if r.buffer.startswith('argument 3 ') else 'B'} (line {r.line}, {r.width} bytes)"
                         for r in report.global_accesses if r.op == "ld" and r.width != 16
                         and r.buffer.startswith(("argument 3 ", "argument 4 "))})
        if scalar:
            problems.append(f"the float4 path was not taken where it can be: loads of {', '.join(scalar)} are not "
                            "16-byte (this check credits a kernel whose aligned loads of A and B are float4)")
    if findings:
        described = [describe_finding(case, f, buffers) for f in findings[:2]]
        problems += [text if m else "".join(wrong_patterns.once([(fault_cause(text), f"{fault_cause(text)}: ")],
                                                                said)) + text for text, m in described]
        misaligned = any(m for _, m in described)
        if len(findings) > 2:
            problems.append(f"and {len(findings) - 2} more")
    elif data.get("failure"):
        problems.append(data["failure"])
    if problems:
        return problems, misaligned
    first_c = GUARD + case.offsets[2]
    bits = None if host is None else np.asarray(host)
    if bits is None or bits.dtype != np.uint32 or bits.shape != (first_c + M * N + GUARD,):
        return ["the grading process returned no C for this case"], False
    outside = np.flatnonzero(np.r_[bits[:first_c], bits[first_c + M * N:]] != GUARD_BITS)
    if len(outside):
        problems.append(f"wrote {len(outside)} float(s) outside C - a missing bounds check?")
    C = bits[first_c:first_c + M * N].view(np.float32).reshape(M, N)
    cmp = sgemm.compare(C, A, B)
    if not cmp.ok:
        r, col, want, got = cmp.first
        nan = sgemm.value_hint(C[r, col])
        problems.append(f"{cmp.wrong} of {M * N} elements wrong; first at row {r}, column {col}: expected "
                        f"{want:.6g}, got {got:.6g}" + "".join(wrong_patterns.once([nan and (nan, nan)], said)))
    return problems, misaligned



def collect(source: str, seed: int, ctx: Context) -> Outputs:
    """Every case's launch, nothing judged."""
    stage = ctx.stage
    meta, function = start_stage_collect(stage, source, on_emulator=True)
    meta["cases"] = []
    if function is None:
        return meta, {}
    driver, _ = drivers(on_emulator=True)
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, case in enumerate(CASES):
        data, host = collect_case(driver, function, stage, case, rng, i)
        meta["cases"].append(data)
        if host is not None:
            arrays[f"C{i}"] = host
    return meta, arrays


def judge(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """The verdict on collect()'s outputs: the inputs made again from the seed."""
    meta, arrays = outputs
    if meta.get("compile_error") is not None:
        return does_not_compile(NAME, meta["compile_error"], seed)
    rng = np.random.default_rng(seed)
    collected = list(meta.get("cases", []))
    lines, failed, misaligned, said = [], 0, False, set()
    for i, case in enumerate(CASES):
        if i < len(collected):
            problems, m = judge_case(case, collected[i], arrays.get(f"C{i}"), rng, said)
        else:
            problems, m = ["the grading process returned nothing for this case"], False
        failed += bool(problems)
        misaligned |= m
        lines.append(f"{case.describe()}: " + ("; ".join(problems) if problems else "correct"))
    head = (f"correct in all {len(CASES)} cases" if not failed else f"wrong in {failed} of {len(CASES)} cases") + \
        f" (K or N not multiples of 4, A, B, C views off 16-byte boundaries; emulator analysis, random seed {seed})"
    text = head + "\n" + "\n".join(lines) + ("\n" + FALLBACK if misaligned else "")
    return CheckResult.make(NAME, not failed, text, details={"seed": seed}, output=meta.get("log", ""))


CHECK = Check(NAME, collect, judge, timeout=240)

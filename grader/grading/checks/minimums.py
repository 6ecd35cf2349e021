"""Lab 7 checks: the top-2 reduction (solutions/top2.cu), the fused SGEMM +
top-2 (solutions/sgemm-top2.cu) and a host function minimums(A, B).

    top2-exact                    exact against numpy on adversarial arrays (ties, both minimums in one
                                  thread / warp / block, in the scalar tail, at index 0 and the last index,
                                  1 x 2, 1 x N, M x 1, non-multiples) and after a GPU SGEMM
    top2-races                    emulator analysis (races, out-of-bounds) and permuted thread orders; no
                                  credit to a kernel whose keys are unwritten or the same for other inputs
    sgemm-top2-exact              the fused kernel: C correct and its two minimums exact
    sgemm-top2-races              as top2-races for the fused kernel
    host-transfers                minimums(A, B), called in a process of its own: the two minimums right,
                                  at most HOST_BYTES bytes copied device -> host (the copies recorded by
                                  the grading process, which does the function's device calls)

Each is a Check (grader.grading.protocol): collect_X runs in the sandboxed grading
process and returns what the kernel did; judge_X gives the verdict from those
outputs and the seed, in the grader's own process.
"""
from __future__ import annotations

import numpy as np

from grader.grading.checks import emulator_tools as analysis
from grader.grading.checks import host_calls, wrong_patterns
from grader.grading.checks.common import (
    ORDER_SEEDS,
    does_not_compile,
    launch_budget,
    launch_errors,
    launch_failure,
    not_credited,
    other_inputs_rng,
    returned_matrix,
    start_collect,
)
from grader.grading.protocol import FUNCTION_HANG, Check, Context, Outputs
from grader.grading.report import CheckResult
from grader.kernels import sgemm, top2
from grader.kernels.sgemm import driver_of
from grader.platform.backend import drivers

HOST_BYTES = 64      # two 8-byte keys and a few flags
HOST_FUNCTION = "minimums"


def _fmt(m) -> str:
    return f"(value {m[0]:.7g}, row {m[1]}, col {m[2]})"


def adversarial(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """(description, non-negative float32 M x N array) pairs."""
    cases = []

    def base(M, N):
        return rng.uniform(0.5, 1.0, (M, N)).astype(np.float32)

    x = base(1, 2); cases.append(("1 x 2", x))
    x = base(1, 2); x[0, 1] = x[0, 0]; cases.append(("1 x 2, equal values (tie: both cells)", x))
    x = base(1, 1000); cases.append(("1 x 1000", x))
    x = base(777, 1); cases.append(("777 x 1", x))
    x = base(37, 53); x.flat[0] = 0.1; x.flat[-1] = 0.2; cases.append(("37 x 53, minimums at index 0 and the "
                                                                          "last index", x))
    x = base(37, 53); x.flat[-1] = 0.1; x.flat[-2] = 0.2; cases.append(("37 x 53, minimums at the last two "
                                                                          "indices (the scalar tail)", x))
    x = base(61, 67); x.flat[4 * 100] = 0.2; x.flat[4 * 100 + 2] = 0.1
    cases.append(("61 x 67, both minimums in one float4 (one thread)", x))
    x = base(61, 67); x.flat[4 * 96 + 5] = 0.1; x.flat[4 * 96 + 70] = 0.1
    cases.append(("61 x 67, equal minimums in one warp", x))
    x = base(61, 67); x.flat[4 * 256 + 3] = 0.3; x.flat[4 * 256 + 900] = 0.1
    cases.append(("61 x 67, both minimums in one block, different warps", x))
    n = 123 * 91
    x = base(123, 91); x.flat[n - 7] = 0.2; x.flat[n - 300] = 0.2
    cases.append(("123 x 91, tie in the last (partial) block", x))
    x = np.full((33, 35), 0.75, np.float32); cases.append(("33 x 35, all equal (indices 0 and 1)", x))
    x = rng.integers(0, 4, (150, 149)).astype(np.float32) / 4; cases.append(("150 x 149, many ties "
                                                                              "(values 0, 0.25, 0.5, 0.75)", x))
    x = base(300, 300); i, j = rng.choice(x.size, 2, replace=False); x.flat[i] = 0.01; x.flat[j] = 0.02
    cases.append(("300 x 300 (many blocks), random positions", x))
    x = base(300, 300); x.flat[5] = 0.0; x.flat[89_999] = 0.0; cases.append(("300 x 300, two zeros", x))
    return cases


def unwritten(keys: tuple[int, int]) -> str | None:
    """What says that a key was never written, or None."""
    if top2.EMPTY_KEY not in keys:
        return None
    return f"{'no minimum' if keys[0] == top2.EMPTY_KEY else 'no second minimum'} was written (key still ~0)"


def compare(got: tuple[int, int], x: np.ndarray, what: str) -> str | None:
    """None when the keys are the two minimums of x, else what is wrong."""
    M, N = x.shape
    want = top2.reference_top2(x, N)
    k1, k2 = got
    if unwritten(got):
        return f"{what}: {unwritten(got)}; expected {_fmt(want[0])} and {_fmt(want[1])}"
    g1, g2 = top2.unpack(k1, N), top2.unpack(k2, N)
    if (k1 & 0xFFFFFFFF) >= M * N or (k2 & 0xFFFFFFFF) >= M * N:
        return f"{what}: an index outside the array: got {_fmt(g1)} and {_fmt(g2)}"
    if k1 == k2:
        return (f"{what}: the same cell twice {_fmt(g1)}: the second minimum must be at a different position "
                f"(expected {_fmt(want[0])} and {_fmt(want[1])})")
    if (g1, g2) != want:
        return f"{what}: expected {_fmt(want[0])} and {_fmt(want[1])}, got {_fmt(g1)} and {_fmt(g2)}"
    return None


def _want_keys(x: np.ndarray) -> list[int]:
    N = x.shape[1]
    return [int(np.float32(v).view(np.uint32)) << 32 | (r * N + c) for v, r, c in top2.reference_top2(x, N)]


def tail_unread(got: tuple[int, int], x: np.ndarray) -> str | None:
    """Every minimum missing from the keys lies in the scalar tail (the last n % 4 elements): that, said."""
    missed = [k for k in _want_keys(x) if k not in got]
    if not missed or any((k & 0xFFFFFFFF) < 4 * (x.size // 4) for k in missed):
        return None
    return (f"the missing minimum lies in the last {x.size % 4} element(s), after the float4 body: the scalar tail "
            "not read?")


def second_lost(got: tuple[int, int], x: np.ndarray) -> bool:
    """The minimum right, the second larger than it should be."""
    want = _want_keys(x)
    return got[0] == want[0] and got[1] != top2.EMPTY_KEY and got[1] > want[1]


SECOND_LOST = ("the minimum is right, the second larger than expected in every wrong input: a key dropped on its way "
               "to second place (a key that loses against the first, such as the old first when a smaller one "
               "replaces it, must still be offered to the second)?")


# After a GPU SGEMM (A, B uniform in [0, 1)): C stays on the device.
TOP2_SGEMM_SHAPE = (130, 97, 40)


def _keys(value) -> tuple[int, int] | None:
    """Two keys as the grading process returned them, or None."""
    try:
        k1, k2 = (int(k) for k in value)
        return k1, k2
    except (TypeError, ValueError):
        return None


def _reference_c_problem(C, A, B, what: str) -> str | None:
    """The grader's own SGEMM result as the grading process returned it: wrong or missing is a grader error."""
    if C is None or not sgemm.compare(C, A, B).ok:
        return f"{what}: the grading process returned no right C from the reference SGEMM"
    return None


def collect_top2(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(top2.TOP2, source)
    if fns is None:
        return meta, {}
    rng = np.random.default_rng(seed)
    drv = driver_of(fns["top2"])
    cases = adversarial(rng)
    M, N, K = TOP2_SGEMM_SHAPE
    A, B = top2.inputs(M, N, K, rng)

    def keys(functions, x):
        xd = drv.to_device(np.ascontiguousarray(x))
        found = top2.top2_keys(functions["top2"], xd, x.size)
        xd.free()
        return found

    meta["cases"] = []
    try:
        for i, (what, x) in enumerate(cases):
            with launch_budget(("top2-exact", i), emulated=not ctx.gpu):
                meta["cases"].append({"keys": list(keys(fns, x))})
        c, _, _ = top2.sgemm_on_device(A, B)
        C = np.empty((M, N), np.float32)
        drv.memcpy_dtoh(C, c)
        with launch_budget(("top2-exact", "sgemm"), emulated=not ctx.gpu):
            meta["sgemm_keys"] = list(top2.top2_keys(fns["top2"], c, M * N))
        c.free()
    except launch_errors(drv) as e:
        meta["cases"].append({"failure": launch_failure(drv, e)})
        return meta, {}
    return meta, {"C": C}


def judge_top2(outputs: Outputs, seed: int, ctx: Context, name: str = "top2-exact") -> CheckResult:
    meta, arrays = outputs
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    rng = np.random.default_rng(seed)
    lines, ok, wrong = [], True, []         # wrong: (line, keys, input) of each wrong input
    cases = adversarial(rng)
    ran = list(meta.get("cases", []))
    for i, (what, x) in enumerate(cases):
        if i >= len(ran):
            ok = False
            lines.append(f"{what}: the grading process returned no keys")
            break
        if ran[i].get("failure"):
            ok = False
            lines.append(f"{what}: {ran[i]['failure']}")
            break
        keys = _keys(ran[i].get("keys"))
        problem = compare(keys, x, what) if keys else f"{what}: the grading process returned no keys"
        if problem:
            ok = False
            lines.append(problem)
            wrong.append((len(lines) - 1, keys, x))
    # A likely cause is said only where it explains every wrong input (a blank kernel's is neither).
    tails = [keys and tail_unread(keys, x) for _, keys, x in wrong]
    if wrong and all(tails):
        lines[wrong[0][0]] += f" - {tails[0]}"
    elif wrong and all(keys and second_lost(keys, x) for _, keys, x in wrong):
        lines[wrong[0][0]] += f" - {SECOND_LOST}"
    M, N, K = TOP2_SGEMM_SHAPE
    A, B = top2.inputs(M, N, K, rng)
    if ok:
        what = f"C = A B, M={M} N={N} K={K}"
        C = returned_matrix(arrays.get("C"), (M, N))
        keys = _keys(meta.get("sgemm_keys"))
        problem = _reference_c_problem(C, A, B, what) or \
            (compare(keys, C, what) if keys else f"{what}: the grading process returned no keys")
        if problem:
            ok = False
            lines.append(problem)
    head = (f"the two minimums are exact on all {len(cases) + 1} inputs" if ok else "wrong") + \
        f" (random seed {seed}; ties to the smaller row-major index)"
    return CheckResult.make(name, ok, head + ("\n" + "\n".join(lines) if lines else ""),
                            details={"seed": seed}, output=meta.get("log", ""))


def _collect_races(kernels, source: str, seed, launch) -> tuple[dict, dict]:
    """Emulator analysis of one launch plus permuted thread orders, then one launch on other inputs (minimums
    computed from the inputs change); launch(fns, rng, other) -> keys."""
    meta, fns = start_collect(kernels, source, on_emulator=True)
    if fns is None:
        return meta, {}
    drv = drivers(on_emulator=True)[0]

    try:
        with launch_budget((kernels.file, "races", "analysed")), analysis.thread_order(0), \
                analysis.analysis() as report:
            meta["keys"] = list(launch(fns, np.random.default_rng(seed)))
        meta["report"] = analysis.report_data(report)
        meta["orders"] = []
        for s in ORDER_SEEDS:
            with launch_budget((kernels.file, "races", "plain")), analysis.thread_order(s):
                keys = launch(fns, np.random.default_rng(seed))
            meta["orders"].append({"seed": s, "keys": list(keys)})
        with launch_budget((kernels.file, "races", "plain")):
            meta["other"] = list(launch(fns, other_inputs_rng(seed), True))
    except launch_errors(drv) as e:
        meta["failure"] = launch_failure(drv, e)
    return meta, {}


MERGE_RACE = "a missing __syncthreads() between the warps' writes to shared memory and warp 0's reads?"
FUSED_RACE = ("a missing __syncthreads() after a tile's loads, after its products, or between the warps' writes to "
              "shared memory and warp 0's reads?")


def _judge_races(meta: dict, seed: int, name: str, hint: str) -> CheckResult:
    log = meta.get("log", "")
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    if meta.get("failure"):
        return CheckResult.make(name, False, meta["failure"], details={"seed": seed}, output=log)
    problems = []
    report = analysis.report_from(meta.get("report", {}))
    races, oob = list(report.races), list(report.out_of_bounds)
    if races:
        problems.append(f"{len(races)} race(s) on shared or global memory - {hint} e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in races[:3]))
    if oob:
        problems.append(f"{len(oob)} out-of-bounds or misaligned access(es), e.g.:\n  "
                        + "\n  ".join(analysis.describe(r) for r in oob[:3]))
    keys0 = _keys(meta.get("keys"))
    orders = list(meta.get("orders", []))
    if keys0 is None or len(orders) != len(ORDER_SEEDS):
        problems.append("the grading process did not return the keys of every thread order")
    else:
        for order in orders:
            keys = _keys(order.get("keys"))
            if keys != keys0:
                problems.append(f"the result depends on the order in which threads run (thread order seed "
                                f"{int(order['seed']):#x}): keys {keys0} in the normal order, {keys} permuted - a "
                                "missing __syncthreads()?")
                break
    if not problems:                    # no race found: credited only if the minimums were computed
        nothing = unwritten(keys0)
        if not nothing and _keys(meta.get("other")) == keys0:
            nothing = "the same minimums for other inputs (they do not depend on them)"
        if nothing:
            problems.append(not_credited(nothing, "computes the two minimums", name.removesuffix("races") + "exact"))
    if problems:
        return CheckResult.make(name, False, "\n".join(problems), details={"seed": seed}, output=log)
    return CheckResult.make(name, True, "no races, no out-of-bounds accesses, the same minimums in 3 thread "
                            "orders", details={"seed": seed}, output=log)


def _launch_top2(fns, rng, other: bool = False):
    drv = drivers(on_emulator=True)[0]
    x = rng.uniform(0.5, 1.0, 6007).astype(np.float32)
    x[[2999, 6000] if other else [17, 2100]] = 0.1
    xd = drv.to_device(x)
    keys = top2.top2_keys(fns["top2"], xd, x.size, blocks=3)
    xd.free()
    return keys


def collect_top2_races(source: str, seed: int, ctx: Context) -> Outputs:
    return _collect_races(top2.TOP2, source, seed, _launch_top2)


def judge_top2_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    return _judge_races(outputs[0], seed, "top2-races", MERGE_RACE)


def fused_cases(rng):
    cases = []
    for M, N, K in [(1, 2, 5), (1, 70, 9), (67, 1, 13), (45, 39, 37), (100, 130, 20)]:
        A, B = top2.inputs(M, N, K, rng)
        cases.append((f"M={M} N={N} K={K}", A, B))
    A, B = top2.inputs(70, 90, 11, rng)
    A[[40, 9]] = 0.0                      # two zero rows of C: 180 tied zeros
    cases.append(("M=70 N=90 K=11, rows 9 and 40 of C zero (ties)", A, B))
    A, B = top2.inputs(64, 64, 8, rng)
    B[:, 63] = 0.0                        # the last column of C zero
    cases.append(("M=64 N=64 K=8, last column of C zero", A, B))
    A, B = top2.inputs(40, 20, 100, rng)  # more tiles of K than of M or N: a loop over k that stops at either shows
    cases.append(("M=40 N=20 K=100", A, B))
    return cases


def collect_fused(source: str, seed: int, ctx: Context) -> Outputs:
    meta, fns = start_collect(top2.FUSED, source)
    if fns is None:
        return meta, {}
    drv = driver_of(fns["sgemm_top2"])
    cases = fused_cases(np.random.default_rng(seed))
    meta["cases"], arrays = [], {}
    for i, (_, A, B) in enumerate(cases):
        try:
            with launch_budget(("sgemm-top2-exact", i), emulated=not ctx.gpu):
                k1, k2, C = top2.fused_keys(fns["sgemm_top2"], A, B, keep_c=True)
        except launch_errors(drv) as e:
            meta["cases"].append({"failure": launch_failure(drv, e)})
            break
        meta["cases"].append({"keys": [k1, k2]})
        arrays[f"C{i}"] = C
    return meta, arrays


def judge_fused(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, arrays = outputs
    name = "sgemm-top2-exact"
    if meta.get("compile_error") is not None:
        return does_not_compile(name, meta["compile_error"], seed)
    lines, ok, said = [], True, set()
    cases = fused_cases(np.random.default_rng(seed))
    ran = list(meta.get("cases", []))
    for i, (what, A, B) in enumerate(cases):
        if i >= len(ran):
            ok = False
            lines.append(f"{what}: the grading process returned nothing for this shape")
            break
        if ran[i].get("failure"):
            ok = False
            lines.append(f"{what}: {ran[i]['failure']}")
            break
        M, N = A.shape[0], B.shape[1]
        C = returned_matrix(arrays.get(f"C{i}"), (M, N))
        if C is None:
            ok = False
            lines.append(f"{what}: the grading process returned no C")
            continue
        cmp = sgemm.compare(C, A, B)
        if not cmp.ok:
            ok = False
            hint = sgemm.value_hint(cmp.first[3])
            early = wrong_patterns.sum_stops_early(C, A, B, sgemm.wrong_elements(C, A, B)[0])
            lines.append(f"{what}: C itself is wrong: {cmp.describe((M, N, A.shape[1]))}"
                         + wrong_patterns.appended(wrong_patterns.once([hint and (hint, hint), early], said)))
            continue
        keys = _keys(ran[i].get("keys"))
        problem = compare(keys, C, what) if keys else f"{what}: the grading process returned no keys"
        if problem:
            ok = False
            lines.append(problem)
    head = (f"C and its two minimums exact on all {len(cases)} shapes" if ok else "wrong") + \
        f" (random seed {seed})"
    return CheckResult.make(name, ok, head + ("\n" + "\n".join(lines) if lines else ""),
                            details={"seed": seed}, output=meta.get("log", ""))


def _launch_fused(fns, rng, other: bool = False):
    A, B = top2.inputs(45, 39, 37, rng)
    k1, k2, _ = top2.fused_keys(fns["sgemm_top2"], A, B)
    return k1, k2


def collect_fused_races(source: str, seed: int, ctx: Context) -> Outputs:
    return _collect_races(top2.FUSED, source, seed, _launch_fused)


def judge_fused_races(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    return _judge_races(outputs[0], seed, "sgemm-top2-races", FUSED_RACE)


TOP2_CHECKS = (Check("top2-exact", collect_top2, judge_top2, timeout=300),
               Check("top2-races", collect_top2_races, judge_top2_races, timeout=300))
FUSED_CHECKS = (Check("sgemm-top2-exact", collect_fused, judge_fused, timeout=300),
                Check("sgemm-top2-races", collect_fused_races, judge_fused_races, timeout=300))


HOST_SHAPES = [(1, 2, 3), (131, 77, 45), (256, 300, 64)]


def _host_inputs(seed: int):
    rng = np.random.default_rng(seed)
    return [top2.inputs(M, N, K, rng) for M, N, K in HOST_SHAPES]


def collect_host(source: str, seed: int, ctx: Context) -> Outputs:
    """minimums(A, B) called on each shape, what it did on the device recorded here."""
    function = host_calls.load(source, HOST_FUNCTION)
    if isinstance(function, str):
        return {"load_error": function}, {}
    arrays: dict = {}
    calls = [host_calls.call(function, A, B, watch=True).to_data(arrays, f"value{i}")
             for i, (A, B) in enumerate(_host_inputs(seed))]
    return {"calls": calls}, arrays


def judge_host(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    """Right minimums ((value, row, col) twice) of C = A B (grader.kernels.top2.product), and at most
    HOST_BYTES copied back from the device."""
    name = "host-transfers"
    meta, arrays = outputs
    if meta.get("load_error"):
        return CheckResult.make(name, False, meta["load_error"], details={"seed": seed})
    calls = [host_calls.Call.from_data(d, arrays) for d in meta.get("calls", [])]
    inputs = _host_inputs(seed)
    if len(calls) != len(inputs):
        return CheckResult.make(name, False, "the grading process returned no result for every shape")
    lines, ok, said = [], True, False
    for call, (A, B) in zip(calls, inputs):
        M, K = A.shape
        N = B.shape[1]
        shape = f"M={M} N={N} K={K}"
        want = top2.reference_top2(top2.product(A, B), N)
        if call.raised:
            ok = False
            lines.append(f"{shape}: {call.raised_text()}")
            continue
        got = call.value
        try:
            got = tuple((float(v), int(r), int(cc)) for v, r, cc in got)
        except (TypeError, ValueError):
            ok = False
            lines.append(f"{shape}: expected ((value, row, col), (value, row, col)), got {got!r}")
            continue
        copies = call.log.of("dtoh")
        nbytes = sum(e.nbytes for e in copies)
        if nbytes > HOST_BYTES:
            ok = False
            lines.append(f"{shape}: {nbytes} bytes came back from the device in {len(copies)} copies (limit "
                         f"{HOST_BYTES}: the two keys and a few flags)" + ("" if said else " - the reduction must "
                         "run on the GPU, not in a loop over C on the host"))
            said = True
        elif len(got) != 2 or got[0][1:] != want[0][1:] or got[1][1:] != want[1][1:]:
            ok = False
            lines.append(f"{shape}: expected {_fmt(want[0])} and {_fmt(want[1])}, got "
                         + " and ".join(_fmt(g) for g in got[:2]))
        else:
            lines.append(f"{shape}: right, {nbytes} bytes from the device")
    return CheckResult.make(name, ok, ("right, and only the keys came back" if ok else "wrong") +
                            f" (random seed {seed})\n" + "\n".join(lines), details={"seed": seed})


HOST_CHECKS = (Check("host-transfers", collect_host, judge_host, timeout=300, hang_hint=FUNCTION_HANG),)

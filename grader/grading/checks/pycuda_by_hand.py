"""Lab 0 checks ("PyCUDA by hand"): the student's own host code, called on random shapes that are not
multiples of the 32 x 32 block, while grader.kernels.host_log records (in the grading process) what it
does on the device.

    matmul-correct    matmul(A, B) -> C right (sgemm tolerance) on float32 inputs of several shapes,
                      computed by a launch of sgemm_coalesced; a wrong C is explained from the recorded
                      launch (the rows/columns no thread covered: a grid one block short, or swapped) and
                      copies (float64)
    matmul-float64    matmul on float64 inputs (what np.random.rand gives): right, so the function
                      converted them to float32 before copying
    gflops-formula    gflops(M, N, K, seconds) against the formula (grader.references.host_functions)
    timing-form       time_matmul(A, B, warmup=W, runs=R): W untimed launches before the first event, R
                      runs each of one launch between two recorded events, each end event synchronised
                      before time_since, and the median of those R times returned in seconds (on the
                      emulator too: its events measure wall-clock time)
    timing-plausible  on a GPU: that median within a factor PLAUSIBLE_FACTOR of the grader's own median for
                      the same kernel and shape (grader.kernels.timing); not graded on the emulator
"""
from __future__ import annotations

import math
import numbers
import statistics

import numpy as np

from grader.grading import answers
from grader.grading.checks import host_calls
from grader.grading.checks.host_calls import Call
from grader.grading.protocol import FUNCTION_HANG, Check, Context, Outputs
from grader.grading.report import NOT_GRADED, CheckResult
from grader.kernels import sgemm, timing
from grader.kernels.host_log import KERNEL, HostLog, reference_seconds
from grader.kernels.stages import cdiv
from grader.platform.wire import Opaque

MATMUL, GFLOPS, TIMING = "matmul", "gflops", "time_matmul"
# M, N, K: no multiple of 32; the last needs more than 1024 blocks in x, so that block and grid swapped
# ask for a block of more than 1024 threads (a launch failure) instead of computing C all the same.
SHAPES = [(70, 100, 37), (33, 65, 129), (1, 45, 3), (129, 1, 64), (97, 250, 20), (3, 33000, 5)]
FLOAT64_SHAPE = (45, 70, 29)
TIMING_SHAPE_EMULATOR = (70, 45, 33)
TIMING_SHAPE_GPU = (2000, 1500, 1000)    # ~1 ms for the coalesced kernel on an H200 (5.3 TFLOPS at 4096^3)
WARMUP, RUNS = 2, 7                      # what the form check asks time_matmul for
PLAUSIBLE_FACTOR = 2.0
MAX_THREADS_PER_BLOCK = 1024


def _shape(M, N, K) -> str:
    return f"M={M} N={N} K={K}"


def _dims_ok(launch) -> bool:
    """The launch's grid and block were 3 ints each (as recorded)."""
    return all(isinstance(d, tuple) and len(d) == 3 and all(isinstance(v, int) for v in d)
               for d in (launch.grid, launch.block))


def _raised(call: Call, shape: tuple[int, int] | None = None) -> str:
    """What the exception says, and what the recorded launch (of C's `shape`, M x N) suggests about it."""
    text, log = call.raised_text(), call.log
    if "invalid type on parameter" in call.raised[1]:
        text += (" - a kernel's int parameters must be passed as numpy.int32(M), numpy.int32(N), numpy.int32(K) "
                 "(a Python int has no fixed size)")
    launches = log.launches()
    last = launches[-1] if launches else None
    if last is not None and not _dims_ok(last):
        text += (f" - your last launch had block={last.block}, grid={last.grid}: each must be a tuple of 3 ints, "
                 "e.g. block=(32, 32, 1)")
    elif last is not None and math.prod(last.block) > MAX_THREADS_PER_BLOCK:
        if shape is not None and _swapped(last, *shape):
            text += (f" - block and grid look swapped (your last launch had block={last.block}, grid={last.grid}): "
                     "block is the threads of one block, grid the number of blocks")
        elif "threads" not in text:
            text += (f" - your last launch had block={last.block}: {math.prod(last.block)} threads, where a block has "
                     f"at most {MAX_THREADS_PER_BLOCK}")
    elif last is not None and last.grid and min(last.grid) < 1:
        b = (last.block or (32, 32, 1))[0]
        text += (f" - your last launch had grid={last.grid}: a grid dimension of 0, which floor division "
                 f"gives when M or N is smaller than the block (ceil division: (N + {b} - 1) // {b})")
    return text


def _swapped(launch, M: int, N: int) -> bool:
    """The launch's block is the grid that its grid, taken as a block, would need for an M x N C."""
    gx, gy = launch.grid[0], launch.grid[1]
    return min(gx, gy) > 0 and tuple(launch.block[:2]) == (cdiv(N, gx), cdiv(M, gy))


# ---- what went wrong in C --------------------------------------------------------------------------
def _ranges(lo: int, hi: int, what: str) -> str:
    return f"{what} {lo}" if hi == lo else f"{what} {lo}..{hi}"


def _axis_cause(n: int, blocks: int, threads: int, axis: str, dim: str) -> str:
    """Why grid `axis` has too few blocks for n elements (what the numbers show, nothing more)."""
    need = cdiv(n, threads)
    word = "column" if axis == "x" else "row"
    short = need - blocks
    floor = f"; {dim} // {threads} = {n // threads} rounds down" if blocks == n // threads else ""
    many = "one block short" if short == 1 else f"{short} blocks short"
    return (f"the grid is {many} in {axis}: {n} {word}s need ceil({n} / {threads}) = {need} blocks of {threads}, "
            f"({dim} + {threads} - 1) // {threads}{floor}")


def explain_wrong(bad: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray, log: HostLog) -> str:
    """A wrong C explained from what the host code did: the first wrong element,
    then the causes the log supports (and only those)."""
    M, K = A.shape
    N = B.shape[1]
    cmp = sgemm.compare(C, A, B)
    lines = [cmp.describe((M, N, K))]
    launches = log.launches()
    if not launches:
        lines.append(f"no launch of {KERNEL} was seen while your function ran")
    elif len(launches) == 1 and _dims_ok(launches[0]):
        (gx, gy, _), (bx, by, _) = launches[0].grid, launches[0].block
        cols, rows = gx * bx, gy * by
        if cols < N or rows < M:
            r, c = np.indices((M, N))
            uncovered = (r >= rows) | (c >= cols)
            parts = ([_ranges(rows, M - 1, "rows" if M - 1 > rows else "row")] if rows < M else []) + \
                    ([_ranges(cols, N - 1, "columns" if N - 1 > cols else "column")] if cols < N else [])
            were = "were" if len(parts) > 1 or ".." in parts[0] else "was"
            where = (f"your launch block={launches[0].block}, grid={launches[0].grid} has threads for rows "
                     f"0..{rows - 1} ({gy} x {by}) and columns 0..{cols - 1} ({gx} x {bx}) only (M={M}, N={N})")
            if (gx, gy) == (cdiv(M, bx), cdiv(N, by)) != (cdiv(N, bx), cdiv(M, by)):
                causes = [f"grid=({gx}, {gy}) is the block counts of the M={M} rows in x and of the N={N} columns "
                          "in y: swapped - grid x must count blocks along the N columns (col = blockIdx.x * "
                          "blockDim.x + threadIdx.x) and grid y along the M rows"]
            else:
                causes = ([_axis_cause(N, gx, bx, "x", "N")] if cols < N else []) + \
                         ([_axis_cause(M, gy, by, "y", "M")] if rows < M else [])
            if np.array_equal(bad, uncovered):
                lines.append(f"{' and '.join(parts)} of C {were} never written: {where}")
            else:
                inside = int((bad & ~uncovered).sum())
                lines.append(f"{' and '.join(parts)} of C had no thread: {where}"
                             + (f"; and {inside} element(s) inside the covered part are wrong too" if inside else ""))
            lines += causes
    elif len(launches) > 1:
        lines.append(f"{KERNEL} was launched {len(launches)} times in one call (once is enough: one thread per "
                     "element of C)")
    lines += _dtype_causes(A, B, (M, N), log)
    if bad.all() and np.all(np.abs(C) <= 1e-30):
        lines.append("every element of C is 0: was C copied back from the device into the array you return "
                     "(c_gpu.get(), or drv.memcpy_dtoh)?")
    return "\n  ".join(lines)


def _dtype_causes(A: np.ndarray, B: np.ndarray, c_shape: tuple, log: HostLog) -> list[str]:
    found = []
    for e in log.of("htod"):
        if e.dtype == "float32":
            continue
        size = int(np.prod(e.shape)) if e.shape else 0
        which = " or ".join(n for n, x in (("A", A), ("B", B)) if x.size == size) or "an array"
        found.append(f"{which} went to the device as {e.dtype} ({e.nbytes} bytes, {e.nbytes // max(size, 1)} "
                     f"an element): the kernel reads float (4 bytes an element), so it reads those bytes as "
                     f"other numbers - convert first: np.ascontiguousarray({which if which in 'AB' else 'A'}, "
                     "dtype=np.float32)")
    for e in log.of("dtoh"):
        if e.dtype != "float32":
            found.append(f"C came back into a {e.dtype} array of shape {e.shape} ({e.nbytes} bytes): the kernel "
                         f"writes float (4 bytes an element) - allocate C as np.float32")
    return found


def _as_matrix(C, shape: tuple) -> tuple[np.ndarray | None, str]:
    if type(C).__name__ in ("GPUArray", "DeviceAllocation"):
        return None, (f"your function returned a {type(C).__name__}: copy C back to the host (c_gpu.get()) and "
                      "return that")
    if isinstance(C, Opaque):
        return None, f"your function returned {C!r} ({type(C).__name__}), not a numpy array"
    try:
        C = np.asarray(C)
    except Exception as e:       # an object numpy cannot convert: say what it was
        return None, f"your function returned {type(C).__name__}, not a numpy array ({e})"
    if C.shape != shape:
        return None, f"expected a numpy array of shape {shape} (M x N), got {type(C).__name__} of shape {C.shape}"
    if not np.issubdtype(C.dtype, np.floating):
        return None, f"expected a float32 array, got dtype {C.dtype}"
    return C, ""


def _inputs(seed: int, float64: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    if float64:
        M, N, K = FLOAT64_SHAPE
        return [(rng.random((M, K)), rng.random((K, N)))]         # float64, like np.random.rand
    return [sgemm.random_inputs(M, N, K, rng) for M, N, K in SHAPES]


def _collect_calls(source: str, name: str, argument_lists, watch: bool = True) -> Outputs:
    """The student's function called on each (args, kwargs), each call as data."""
    function = host_calls.load(source, name)
    if isinstance(function, str):
        return {"load_error": function}, {}
    arrays: dict = {}
    calls = [host_calls.call(function, *args, watch=watch, **kwargs).to_data(arrays, f"value{i}")
             for i, (args, kwargs) in enumerate(argument_lists)]
    return {"calls": calls}, arrays


def _calls(outputs: Outputs, n: int) -> list[Call] | str:
    """The collected calls, or what the student reads when there are none."""
    meta, arrays = outputs
    if meta.get("load_error"):
        return meta["load_error"]
    calls = [Call.from_data(d, arrays) for d in meta.get("calls", [])]
    return calls if len(calls) == n else "the grading process returned no result for every call"


def _one_case(call: Call, A: np.ndarray, B: np.ndarray) -> tuple[bool, str]:
    M, K = A.shape
    N = B.shape[1]
    if call.raised:
        return False, f"{_shape(M, N, K)}: {_raised(call, (M, N))}"
    C, problem = _as_matrix(call.value, (M, N))
    if C is None:
        return False, f"{_shape(M, N, K)}: {problem}"
    bad, _ = sgemm.wrong_elements(C, A, B)
    if bad.any():
        return False, explain_wrong(bad, A, B, C, call.log)
    launches = call.log.launches()
    if not launches:
        return False, (f"{_shape(M, N, K)}: C is right, but your function launched no kernel: compute it on the GPU "
                       f"with {KERNEL}")
    how = f" (block={launches[0].block}, grid={launches[0].grid})" if len(launches) == 1 else ""
    return True, f"{_shape(M, N, K)}: all elements correct{how}"


def _said_once(results: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    """Each shape's lines with the causes already given for an earlier shape left out."""
    seen, out = set(), []
    for ok, text in results:
        first, *causes = text.split("\n  ")
        out.append((ok, "\n  ".join([first] + [c for c in causes if c not in seen])))
        seen.update(causes)
    return out


def collect_matmul(source: str, seed: int, ctx: Context, float64: bool = False) -> Outputs:
    return _collect_calls(source, MATMUL, [((A, B), {}) for A, B in _inputs(seed, float64)])


def judge_matmul(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "matmul-correct"
    cases = _inputs(seed, False)
    calls = _calls(outputs, len(cases))
    if isinstance(calls, str):
        return CheckResult.make(name, False, calls, details={"seed": seed})
    results = _said_once([_one_case(c, A, B) for c, (A, B) in zip(calls, cases)])
    ok = all(r[0] for r in results)
    head = (f"C = A B right on all {len(SHAPES)} shapes" if ok else
            f"failed on {sum(not r[0] for r in results)} of {len(SHAPES)} shapes") + \
        f" (float32 inputs, no dimension a multiple of 32; random seed {seed})"
    return CheckResult.make(name, ok, head + "\n" + "\n".join(r[1] for r in results), details={"seed": seed})


def collect_matmul_float64(source: str, seed: int, ctx: Context) -> Outputs:
    return collect_matmul(source, seed, ctx, float64=True)


def judge_matmul_float64(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "matmul-float64"
    (A, B), = _inputs(seed, True)
    calls = _calls(outputs, 1)
    if isinstance(calls, str):
        return CheckResult.make(name, False, calls, details={"seed": seed})
    ok, line = _one_case(calls[0], A, B)
    head = ("right for float64 inputs: your function converts them to float32 before the copy" if ok else
            "failed on float64 inputs (what np.random.rand gives)") + \
        f" (random seed {seed})"
    return CheckResult.make(name, ok, head + "\n" + line, details={"seed": seed})


# ---- GFLOPS ----------------------------------------------------------------------------------------
GFLOPS_CASES = [(1000, 700, 500, 2.5e-3), (4096, 4096, 4096, 0.026), (1, 1, 1, 1e-6), (33, 65, 129, 0.5),
                (2000, 1500, 1000, 1.3e-3)]


def collect_gflops(source: str, seed: int, ctx: Context) -> Outputs:
    return _collect_calls(source, GFLOPS, [(case, {}) for case in GFLOPS_CASES], watch=False)


def judge_gflops(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "gflops-formula"
    calls = _calls(outputs, len(GFLOPS_CASES))
    if isinstance(calls, str):
        return CheckResult.make(name, False, calls)
    lines, wrong, said = [], 0, set()
    for call, (M, N, K, s) in zip(calls, GFLOPS_CASES):
        problem = _gflops_problem(call, M, N, K, s, answers.module("host_functions").gflops_of(M, N, K, s))
        wrong += problem is not None
        if problem and problem[1] not in said:         # a ratio's likely cause, said on its first input
            said.add(problem[1])
            problem = (problem[0] + (f" ({problem[1]})" if problem[1] else ""), "")
        lines.append(problem[0] if problem else f"gflops({M}, {N}, {K}, {s:g}): right")
    head = "right on all inputs" if not wrong else f"wrong on {wrong} of {len(GFLOPS_CASES)} inputs"
    return CheckResult.make(name, not wrong, head + "\n" + "\n".join(lines))


def _gflops_problem(call: Call, M, N, K, s, want) -> tuple[str, str] | None:
    """(what is wrong with one answer, its likely cause or ""), or None; never the expected value, which a
    question asks for."""
    what = f"gflops({M}, {N}, {K}, {s:g})"
    if call.raised:
        return (f"{what}: {call.raised_text()}" if call.raised[0] == "NotImplementedError" else
                f"{what} raised {call.raised[0]}: {call.raised[1]}"), ""
    got = call.value
    if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(float(got)):
        return f"{what} returned {got!r}: expected a finite number", ""
    if math.isclose(float(got), want, rel_tol=1e-6):
        return None
    ratio = float(got) / want
    hints = {0.5: "half: an FMA (multiply-add) is 2 FLOP, so C = A B takes 2 M N K FLOP",
             1e3: "1000x too much: GFLOPS are 1e9 FLOP per second (1e6 would be MFLOPS)",
             1e-3: "1000x too little: seconds, not milliseconds, and 1e9 FLOP per GFLOP"}
    why = next((h for r, h in hints.items() if math.isclose(ratio, r, rel_tol=1e-6)), "")
    return f"{what} returned {float(got):.6g}, which is not 2 M N K / seconds / 1e9", why


# ---- timing ----------------------------------------------------------------------------------------
def _timing_inputs(seed: int, on_gpu: bool):
    M, N, K = TIMING_SHAPE_GPU if on_gpu else TIMING_SHAPE_EMULATOR
    return sgemm.random_inputs(M, N, K, np.random.default_rng(seed))


def _timing_value(call: Call) -> tuple[float | None, str | None]:
    """(the seconds returned, or what is wrong with the call)."""
    if call.raised:
        text = _raised(call)
        if any(w in call.raised[1] for w in ("time_since", "ElapsedTime", "not ready")):
            text += (" - read an event's time only after end.synchronize(): a launch returns before the "
                     "kernel has run")
        return None, text
    value = call.value
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(float(value)) \
            or float(value) <= 0:
        return None, f"time_matmul returned {value!r}: expected a positive number of seconds"
    return float(value), None


def form_problems(value: float, log: HostLog, warmup: int = WARMUP, runs: int = RUNS) -> list[str]:
    """What is wrong with the way a call time_matmul(A, B, warmup, runs) that
    returned `value` timed the kernel ([] when nothing)."""
    launches = log.launches()
    if not launches:
        return [f"your function launched no kernel ({KERNEL})"]
    if not log.of("record"):
        return [f"no CUDA event was recorded ({len(launches)} launch(es) of {KERNEL}): a launch returns "
                "as soon as the kernel is queued, so a clock read around it (time.perf_counter) measures the launch "
                "call, not the kernel; record a start and an end drv.Event() around each timed launch, "
                "end.synchronize(), then end.time_since(start)"]
    timed = log.timed_runs()
    if not timed:
        return ["events were recorded but no time was read from them: end.time_since(start) (milliseconds)"]
    problems = []
    if len(timed) != runs:
        problems.append(f"runs={runs} asks for {runs} timed runs; your function read {len(timed)} time(s) with "
                        "time_since")
    uneven = [i for i, t in enumerate(timed) if t.launches != 1]
    if uneven:
        i = uneven[0]
        problems.append(f"each timed run must be one launch between its start and end event: run {i + 1} had "
                        f"{timed[i].launches} launch(es) between them")
    unsynced = [i for i, t in enumerate(timed) if not t.synchronized]
    if unsynced:
        problems.append(f"run {unsynced[0] + 1}'s time was read before its end event was synchronised: call "
                        "end.synchronize() before end.time_since(start) (a launch and a record return at once; "
                        "on a GPU the time is not known, or wrong, until the end event has happened)")
    first_timed = min(min(t.start_at, t.end_at) for t in timed)
    before = sum(e.position < first_timed for e in launches)
    if before < warmup:
        problems.append(f"warmup={warmup} asks for {warmup} untimed launches before the first event is recorded; "
                        f"your function made {before} (the first launch also loads the module and warms the GPU's "
                        "clocks and caches: it is slower)")
    seconds = [t.ms / 1e3 for t in timed]
    median = statistics.median(seconds)
    if not math.isclose(value, median, rel_tol=1e-6):
        if math.isclose(value, median * 1e3, rel_tol=1e-6):
            problems.append(f"you returned {value:.4g}, the median in milliseconds (time_since's unit): return "
                            f"seconds, {median:.4g}")
        elif math.isclose(value, statistics.fmean(seconds), rel_tol=1e-6):
            problems.append(f"you returned the mean of your {len(seconds)} times ({value:.4g} s); return the "
                            f"median ({median:.4g} s): one slow run (another process, a clock change) moves the "
                            "mean, not the median")
        else:
            problems.append(f"you returned {value:.4g}; the median of the {len(seconds)} time(s) your function "
                            f"read with time_since is {median:.4g} s")
    return problems


def collect_timing(source: str, seed: int, ctx: Context) -> Outputs:
    A, B = _timing_inputs(seed, ctx.gpu)
    meta, arrays = _collect_calls(source, TIMING, [((A, B), {"warmup": WARMUP, "runs": RUNS})])
    if ctx.gpu and not meta.get("load_error"):
        meta["reference_s"] = reference_seconds(A, B)      # the grader's own time of the same kernel and shape
    return meta, arrays


def judge_timing_form(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "timing-form"
    A, B = _timing_inputs(seed, ctx.gpu)
    M, K = A.shape
    what = f"time_matmul(A, B, warmup={WARMUP}, runs={RUNS}) with {_shape(M, B.shape[1], K)}"
    calls = _calls(outputs, 1)
    if isinstance(calls, str):
        return CheckResult.make(name, False, calls, details={"seed": seed})
    value, error = _timing_value(calls[0])
    if error:
        return CheckResult.make(name, False, f"{what}: {error}", details={"seed": seed})
    problems = form_problems(value, calls[0].log)
    if problems:
        return CheckResult.make(name, False, f"{what} returned {value:.4g} s, but:\n" + "\n".join(problems),
                                details={"seed": seed})
    clock = "" if ctx.gpu else " (on the emulator events measure the CPU's wall-clock time, not a GPU's)"
    return CheckResult.make(name, True, f"{what}: {WARMUP} warm-up launches, {RUNS} timed runs of one launch each "
                            f"between synchronised events, median {value:.4g} s returned{clock}",
                            details={"seed": seed, "seconds": value})


def judge_timing_plausible(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    name = "timing-plausible"
    if not ctx.gpu:
        return CheckResult(name, NOT_GRADED, "not graded: no GPU (on the emulator events measure the CPU's "
                           "wall-clock time; timing-form grades how you time)", 0.0)
    A, B = _timing_inputs(seed, True)
    M, K = A.shape
    N = B.shape[1]
    calls = _calls(outputs, 1)
    if isinstance(calls, str):
        return CheckResult.make(name, False, calls, details={"seed": seed})
    value, error = _timing_value(calls[0])
    if error:
        return CheckResult.make(name, False, f"{_shape(M, N, K)}: {error}", details={"seed": seed})
    ref = outputs[0].get("reference_s")
    if not isinstance(ref, (int, float)) or ref <= 0:
        return CheckResult.grader_error(name, "the grader could not time the reference kernel")
    measured = [t.ms / 1e3 for t in calls[0].log.timed_runs()]
    if measured and not math.isclose(value, statistics.median(measured), rel_tol=1e-6):
        return CheckResult.make(name, False, f"{_shape(M, N, K)}: you returned {value:.4g} s, but the times your "
                                f"function read from its events have the median {statistics.median(measured):.4g} s",
                                details={"seed": seed})
    ratio = value / ref
    text = (f"{_shape(M, N, K)}: your median {value * 1e3:.4g} ms, the grader's {ref * 1e3:.4g} ms for the same "
            f"kernel and shape (median of {timing.MIN_REPEAT} runs timed with events, L2 flushed before each): ratio "
            f"{ratio:.3g}, allowed 1/{PLAUSIBLE_FACTOR:g} to {PLAUSIBLE_FACTOR:g}")
    ok = 1 / PLAUSIBLE_FACTOR <= ratio <= PLAUSIBLE_FACTOR
    if not ok:
        if 300 <= ratio <= 3000:
            text += " - about 1000x: milliseconds? time_since returns milliseconds; return seconds"
        elif ratio < 1 / PLAUSIBLE_FACTOR:
            text += (" - far less than the kernel takes: did you time only the launch call (it returns before the "
                     "kernel has run), or read the time before end.synchronize()?")
        else:
            text += " - far more than the kernel takes: copies or compilation inside the timed region?"
    return CheckResult.make(name, ok, text, details={"seed": seed, "seconds": value, "reference_s": ref,
                                                     "ratio": ratio})


def _check(name: str, collect, judge, timeout: float = 300.0, times_kernels: bool = False) -> Check:
    return Check(name, collect, judge, timeout, FUNCTION_HANG, times_kernels=times_kernels)


MATMUL_CHECKS = (_check("matmul-correct", collect_matmul, judge_matmul),
                 _check("matmul-float64", collect_matmul_float64, judge_matmul_float64))
GFLOPS_CHECKS = (Check("gflops-formula", collect_gflops, judge_gflops, 300.0, FUNCTION_HANG, needs_answers=True),)
# Both time the reference kernel (reference_seconds) beside the student's own timed runs.
TIMING_CHECKS = (_check("timing-form", collect_timing, judge_timing_form, times_kernels=True),
                 _check("timing-plausible", collect_timing, judge_timing_plausible, times_kernels=True))

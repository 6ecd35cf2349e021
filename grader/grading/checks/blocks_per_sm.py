"""Lab 3's host-function exercise: the student's
blocks_per_sm(regs_per_thread, smem_per_block, threads_per_block), the number
of blocks of a kernel that fit on one SM of the H200, graded from its source
(grader.grading.host_functions) like any host function.

    h200-limits         against grader.references.occupancy.occupancy(...).blocks_per_sm with the H200's limits
                             (grader.platform.devices.H200) on EDGE_CASES (each rule at and next to its boundary)
                             and RANDOM_CASES random inputs of the domain below; the message names the first
                             input where the two differ and both answers, never the rule
    cuda-occupancy-api  on a GPU whose limits are the H200's: against the CUDA occupancy API
                             (cuOccupancyMaxActiveBlocksPerMultiprocessor, grader.platform.devices.cuda_blocks_per_sm)
                             for the blocktile-2d kernel built with several register caps, at several block
                             sizes and dynamic shared-memory sizes; inputs where grader.references.occupancy itself
                             differs from the API are left out and named. Not graded on the emulator.

Domain (the notebook states it): 1 <= regs_per_thread <= 255, 0 <= smem_per_block <= 232448 (227 KiB, the most
one block may use), 1 <= threads_per_block <= 1024.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from grader.grading import answers
from grader.grading.checks import host_calls
from grader.grading.protocol import FUNCTION_HANG, Check, Context, Outputs
from grader.grading.report import NOT_GRADED, CheckResult
from grader.kernels.stages import stage
from grader.platform import devices
from grader.platform.backend import drivers

HOST_FUNCTION = "blocks_per_sm"
TABLE, CUDA = "h200-limits", "cuda-occupancy-api"
MAX_REGS, MAX_SMEM, MAX_THREADS = 255, 232448, 1024
RANDOM_CASES = 3000
MORE_SHOWN = 3                # differing inputs listed after the first

# (regs_per_thread, smem_per_block, threads_per_block): every rule at its boundary and one step past it.
EDGE_CASES = [
    (32, 0, 256), (33, 0, 256), (40, 0, 64), (40, 0, 512), (40, 4096, 512), (128, 8192, 256), (128, 0, 256),
    (24, 0, 96), (32, 0, 64), (64, 0, 1024), (72, 0, 1024), (65, 0, 1024), (255, 0, 256), (255, 0, 288),
    (255, 0, 1024), (8, 0, 1024), (32, 0, 1000), (32, 0, 1024), (16, 0, 32), (16, 0, 33), (16, 0, 48), (16, 0, 700),
    (1, 0, 1), (1, 0, 1024), (32, 49152, 256), (32, 32256, 64), (32, 32257, 64), (32, 76800, 32),
    (32, 76801, 32), (32, 77824, 32), (32, 115712, 32), (32, 115713, 32), (32, 232448, 128), (32, 232448, 1024),
    (32, 7000, 64), (168, 0, 128), (96, 20000, 384), (48, 0, 320), (56, 6000, 160),
]


def _call(args) -> str:
    return f"{HOST_FUNCTION}(regs_per_thread={args[0]}, smem_per_block={args[1]}, threads_per_block={args[2]})"


def _blocks(n: int) -> str:
    return f"{n} block" + ("" if n == 1 else "s")


def random_cases(rng: np.random.Generator, n: int = RANDOM_CASES) -> list[tuple[int, int, int]]:
    """n inputs of the domain: register counts and block sizes that kernels use, and any at all;
    no shared memory, a little, or up to the per-block maximum."""
    common_regs = np.array([16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 168, 200, 232, 255])
    cases = []
    for _ in range(n):
        regs = int(rng.choice(common_regs)) if rng.random() < 0.4 else int(rng.integers(1, MAX_REGS + 1))
        u = rng.random()
        smem = 0 if u < 0.3 else int(rng.integers(0, 64 * 1024 + 1)) if u < 0.65 else int(rng.integers(0, MAX_SMEM + 1))
        threads = 32 * int(rng.integers(1, MAX_THREADS // 32 + 1)) if rng.random() < 0.5 \
            else int(rng.integers(1, MAX_THREADS + 1))
        cases.append((regs, smem, threads))
    return cases


def expected(regs: int, smem: int, threads: int, limits: devices.Limits = devices.H200.limits) -> int:
    return answers.module("occupancy").occupancy(regs, smem, threads, limits).blocks_per_sm


def _answers(function, inputs) -> list:
    """The function's answer to each input, as data; the calls stop at the first one that raises."""
    found = []
    for args in inputs:
        call = host_calls.call(function, *args)
        if call.raised:
            found.append({"raised": list(call.raised)})
            break
        value = call.value
        found.append(value if isinstance(value, numbers.Real) and not isinstance(value, bool)
                     else {"other": [type(value).__name__, repr(value)[:200]]})
    return found


def _answer(args, found) -> tuple[int | None, str]:
    """(the function's answer as an int, '') or (None, what is wrong with it)."""
    if isinstance(found, dict) and "raised" in found:
        kind, message = found["raised"]
        if kind == "NotImplementedError" and not message:
            return None, f"{_call(args)}: {host_calls.NOT_WRITTEN}"
        return None, f"{_call(args)} raised {kind}: {message}"
    if isinstance(found, dict):
        kind, text = found["other"]
        hint = " (a missing return?)" if kind == "NoneType" else ""
        return None, f"{_call(args)} returned {text}{hint}: return the number of blocks, an int"
    if not math.isfinite(float(found)) or float(found) != int(found):
        return None, f"{_call(args)} returned {found!r}: a number of blocks is a whole number (use // to divide)"
    return int(found), ""


def _compare(cases: list[tuple[tuple[int, int, int], int]], answers: list) -> tuple[list[str], str]:
    """(a line per differing input, in order; the first error that stopped the comparison or '')."""
    differ = []
    for (args, want), found in zip(cases, answers):
        got, error = _answer(args, found)
        if error:
            return differ, error
        if got != want:
            differ.append(f"{_call(args)} returned {got}; {_blocks(want)} of {args[2]} threads fit "
                          "on one H200 SM")
    if len(answers) < len(cases) and not differ:
        return differ, "the grading process returned no answer for every input"
    return differ, ""


def _failure(differ: list[str], error: str, total: int) -> str:
    if error and not differ:
        return error
    lines = [f"{len(differ)} of the {total} inputs tried differ; the first:", "  " + differ[0]]
    if len(differ) > 1:
        lines.append("others:")
        lines += ["  " + d for d in differ[1:1 + MORE_SHOWN]]
    if error:
        lines.append("and then: " + error)
    return "\n".join(lines)


def _load(source: str):
    function = host_calls.load(source, HOST_FUNCTION)
    if isinstance(function, str):
        return None, {"load_error": function.replace(f"{HOST_FUNCTION}(...)", f"{HOST_FUNCTION}(regs_per_thread, "
                                                     "smem_per_block, threads_per_block)")}
    return function, None


def _inputs(seed: int) -> list[tuple[int, int, int]]:
    return EDGE_CASES + random_cases(np.random.default_rng(seed))


def collect_table(source: str, seed: int, ctx: Context) -> Outputs:
    function, failed = _load(source)
    return (failed, {}) if failed else ({"answers": _answers(function, _inputs(seed))}, {})


def judge_table(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, _ = outputs
    if meta.get("load_error"):
        return CheckResult.make(TABLE, False, meta["load_error"], details={"seed": seed})
    cases = [(args, expected(*args)) for args in _inputs(seed)]
    differ, error = _compare(cases, meta.get("answers", []))
    details = {"seed": seed, "inputs": len(cases), "differ": len(differ)}
    if differ or error:
        return CheckResult.make(TABLE, False, _failure(differ, error, len(cases)), details=details)
    return CheckResult.make(TABLE, True, f"right on all {len(cases)} inputs ({len(EDGE_CASES)} chosen at the rules' "
                            f"boundaries, {len(cases) - len(EDGE_CASES)} random; random seed {seed})",
                            details=details)


# ---- on a GPU: the CUDA occupancy API ---------------------------------------------------------------------
# -maxrregcount values (0: no cap, the kernel's own 128): register counts that are not multiples of 8 (33, 45, 57:
# 1056, 1440, 1824 registers per warp, rounded up to 1280, 1536, 2048) so that the allocation unit matters.
REG_CAPS = (33, 45, 57, 100, 0)
BLOCK_THREADS = (32, 64, 96, 128, 256, 384, 512, 1024)
DYNAMIC_SHARED = (0, 12345, 50000, 100000)
PROBE_STAGE = "blocktile-2d"


def probe_source() -> str:
    """The blocktile-2d reference without its __launch_bounds__ (nvcc ignores -maxrregcount for a kernel
    that has them), so that each register cap gives a kernel of another size."""
    return stage(PROBE_STAGE).source().replace("__launch_bounds__(NUM_THREADS, 2)", "")


def _probe_kernels() -> list[tuple]:
    """(what, cubin, Function loaded from that cubin, its Module) for each register cap."""
    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile

    st = stage(PROBE_STAGE)
    source, built = probe_source(), []
    for cap in REG_CAPS:
        options = st.options() + ([f"-maxrregcount={cap}"] if cap else [])
        cubin = nvcc_compile(source, options=options)
        module = drv.module_from_buffer(cubin)
        built.append((f"{PROBE_STAGE} " + (f"-maxrregcount={cap}" if cap else "(no register cap)"), cubin,
                      module.get_function(st.kernel), module))
    return built


def collect_cuda(source: str, seed: int, ctx: Context) -> Outputs:
    """On an H200: the probe kernels' resources, the CUDA occupancy API's answers and the function's."""
    if not ctx.gpu:
        return {"not_graded": "no GPU"}, {}
    drivers()                                         # the context the module and the API calls use
    if devices.device_limits() != devices.H200.limits:
        return {"not_graded": "limits"}, {}
    function, failed = _load(source)
    if failed:
        return failed, {}
    kernel = stage(PROBE_STAGE).kernel
    try:
        probes = _probe_kernels()
    except Exception as e:             # nvcc or the driver on the grading machine: not the student's doing
        return {"probe_error": f"{type(e).__name__}: {e}"}, {}
    cases, left_out = [], []
    for what, cubin, fn, _module in probes:
        regs, static = devices.function_resources(fn)
        for threads in BLOCK_THREADS:
            for dynamic in DYNAMIC_SHARED:
                if static + dynamic > MAX_SMEM:
                    continue
                try:
                    cases.append([[regs, static + dynamic, threads], devices.cuda_blocks_per_sm(cubin, kernel,
                                                                                               threads, dynamic)])
                except (RuntimeError, OSError) as e:
                    left_out.append(f"{what}, {threads} threads, {dynamic} dynamic bytes: {e}")
    return {"cases": cases, "left_out": left_out,
            "answers": _answers(function, [tuple(args) for args, _ in cases])}, {}


def judge_cuda(outputs: Outputs, seed: int, ctx: Context) -> CheckResult:
    meta, _ = outputs
    if meta.get("not_graded") == "no GPU" or not ctx.gpu:
        return CheckResult(CUDA, NOT_GRADED, "not graded: no GPU (the CUDA occupancy API needs one; "
                           f"{TABLE} grades your function against the same rules)", 0.0)
    if meta.get("not_graded"):
        return CheckResult(CUDA, NOT_GRADED, "not graded: this GPU's limits are not the H200's, which "
                           f"{HOST_FUNCTION} is written for", 0.0)
    if meta.get("load_error"):
        return CheckResult.make(CUDA, False, meta["load_error"])
    if meta.get("probe_error"):
        return CheckResult.grader_error(CUDA, f"the probe kernels could not be built here ({meta['probe_error']})")
    cases, answers, left_out = [], [], list(meta.get("left_out", []))
    for (args, cuda), found in zip(meta.get("cases", []), meta.get("answers", []) + [None] * len(meta["cases"])):
        args = tuple(args)
        ours = expected(*args)
        if ours != cuda:
            left_out.append(f"{_call(args)}: the CUDA API says {cuda}, the grader's calculator {ours}")
            continue
        cases.append((args, cuda))
        answers.append(found)
    answers = [a for a in answers if a is not None]
    note = ("" if not left_out else f"\n{len(left_out)} input(s) left out (the grader's own calculator or the API "
            "could not be compared there):\n  " + "\n  ".join(left_out[:5]))
    if not cases:
        return CheckResult.grader_error(CUDA, "no input where the grader's calculator and the CUDA occupancy API "
                                        "agree" + note)
    differ, error = _compare(cases, answers)
    details = {"inputs": len(cases), "differ": len(differ), "left_out": len(left_out)}
    if differ or error:
        return CheckResult.make(CUDA, False, "against the CUDA occupancy API (cuOccupancyMaxActiveBlocksPerMultipro"
                                "cessor) on this GPU: " + _failure(differ, error, len(cases)) + note, details=details)
    return CheckResult.make(CUDA, True, f"agrees with the CUDA occupancy API on all {len(cases)} inputs (the "
                            f"{PROBE_STAGE} kernel built with {len(REG_CAPS)} register caps, "
                            f"{len(BLOCK_THREADS)} block sizes, {len(DYNAMIC_SHARED)} dynamic shared-memory sizes)"
                            + note, details=details)


CHECKS = (Check(TABLE, collect_table, judge_table, 120, FUNCTION_HANG, needs_answers=True),
          Check(CUDA, collect_cuda, judge_cuda, 300, FUNCTION_HANG, needs_answers=True))

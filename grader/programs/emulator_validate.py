"""The emulator's analysis against the hardware's own tools, side by side:
Nsight Compute's shared-memory bank-conflict counters and its global-memory
request and sector counters (coalescing), and compute-sanitizer's racecheck
and memcheck, on the same kernels.

    python -m grader emulator-validate --out results/h200      # on a GPU machine with ncu
    python -m grader emulator-validate --emulator-only         # anywhere
    python -m grader emulator-validate --sectors --out DIR     # only the global-memory table

It writes validation.md (the tables and the command) and validation.json;
--sectors replaces only the global-memory table (between its markers) in an
existing validation.md, and its entry in validation.json.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from grader.emulator import analyze
from grader.emulator.pycuda import compiler, driver
from grader.kernels import sgemm, stages
from grader.programs.recorded_command import recorded_command

# Shared-memory patterns: each kernel fills s[] from global memory, waits, and
# reads it back with the pattern in its name (one block of 256 threads).
PATTERNS = r"""
#define FILL(T, N) __shared__ T s[N]; \
    for (int i = threadIdx.x; i < N * (int)sizeof(T) / 4; i += blockDim.x) ((float*)s)[i] = in[i]; __syncthreads();
extern "C" __global__ void transpose_32x32(const float* in, float* out) {
    __shared__ float t[32][32];
    int x = threadIdx.x, y = threadIdx.y;
    t[y][x] = in[y * 32 + x];
    __syncthreads();
    out[y * 32 + x] = t[x][y];
}
extern "C" __global__ void transpose_32x33(const float* in, float* out) {
    __shared__ float t[32][33];
    int x = threadIdx.x, y = threadIdx.y;
    t[y][x] = in[y * 32 + x];
    __syncthreads();
    out[y * 32 + x] = t[x][y];
}
extern "C" __global__ void read_stride_1(const float* in, float* out) {
    FILL(float, 8192)
    out[threadIdx.x] = s[threadIdx.x];
}
extern "C" __global__ void read_stride_2(const float* in, float* out) {
    FILL(float, 8192)
    out[threadIdx.x] = s[2 * threadIdx.x];
}
extern "C" __global__ void read_stride_32(const float* in, float* out) {
    FILL(float, 8192)
    out[threadIdx.x] = s[32 * threadIdx.x];
}
extern "C" __global__ void read_broadcast(const float* in, float* out) {
    FILL(float, 8192)
    out[threadIdx.x] = s[7];
}
extern "C" __global__ void read_float2(const float* in, float* out) {
    FILL(float2, 1024)
    float2 v = s[threadIdx.x];
    out[threadIdx.x] = v.x + v.y;
}
extern "C" __global__ void read_float2_stride_2(const float* in, float* out) {
    FILL(float2, 1024)
    float2 v = s[2 * threadIdx.x];
    out[threadIdx.x] = v.x + v.y;
}
extern "C" __global__ void read_float4(const float* in, float* out) {
    FILL(float4, 1024)
    float4 v = s[threadIdx.x];
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void read_float4_stride_2(const float* in, float* out) {
    FILL(float4, 1024)
    float4 v = s[2 * threadIdx.x];
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void write_stride_32(const float* in, float* out) {
    __shared__ float s[8192];
    s[32 * threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[32 * ((threadIdx.x + 1) % blockDim.x)];
}
"""

# Global-memory patterns: one block of 256 threads (8 warps), i = threadIdx.x;
# each kernel also stores out[i] (8 requests of 4 sectors) unless it says otherwise.
GLOBALS = r"""
extern "C" __global__ void ld_stride_1(const float* in, float* out) {
    int i = threadIdx.x; out[i] = in[i];
}
extern "C" __global__ void ld_stride_2(const float* in, float* out) {
    int i = threadIdx.x; out[i] = in[2 * i];
}
extern "C" __global__ void ld_stride_32(const float* in, float* out) {
    int i = threadIdx.x; out[i] = in[32 * i];
}
extern "C" __global__ void ld_broadcast(const float* in, float* out) {
    int i = threadIdx.x; out[i] = in[7];
}
extern "C" __global__ void ld_misaligned_float(const float* in, float* out) {
    int i = threadIdx.x; out[i] = in[i + 1];
}
extern "C" __global__ void ld_half_warp(const float* in, float* out) {
    int i = threadIdx.x; if (i % 32 < 16) out[i] = in[i];
}
extern "C" __global__ void ld_float2(const float* in, float* out) {
    int i = threadIdx.x; float2 v = reinterpret_cast<const float2*>(in)[i]; out[i] = v.x + v.y;
}
extern "C" __global__ void ld_float4(const float* in, float* out) {
    int i = threadIdx.x; float4 v = reinterpret_cast<const float4*>(in)[i]; out[i] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void ld_float4_offset(const float* in, float* out) {
    int i = threadIdx.x; float4 v = reinterpret_cast<const float4*>(in)[i + 1]; out[i] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void ld_float4_stride_2(const float* in, float* out) {
    int i = threadIdx.x; float4 v = reinterpret_cast<const float4*>(in)[2 * i]; out[i] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void ld_gather(const float* in, float* out, const int* idx) {
    int i = threadIdx.x; out[i] = in[idx[i]];
}
extern "C" __global__ void st_stride_32(const float* in, float* out) {
    int i = threadIdx.x; out[32 * i] = in[i];
}
extern "C" __global__ void st_misaligned_float(const float* in, float* out) {
    int i = threadIdx.x; out[i + 1] = in[i];
}
extern "C" __global__ void st_float4(const float* in, float* out) {
    int i = threadIdx.x; reinterpret_cast<float4*>(out)[i] = make_float4(in[i], in[i], in[i], in[i]);
}
"""
GLOBAL_KERNELS = ("ld_stride_1", "ld_stride_2", "ld_stride_32", "ld_broadcast", "ld_misaligned_float", "ld_half_warp",
                  "ld_float2", "ld_float4", "ld_float4_offset", "ld_float4_stride_2", "ld_gather", "st_stride_32",
                  "st_misaligned_float", "st_float4")

# Kernels with a bug each: a reduction without barriers, an out-of-bounds
# read, a misaligned float4 read.
BUGS = r"""
extern "C" __global__ void racy_reduction(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = in[t];
    for (int stride = 128; stride > 0; stride /= 2)
        if (t < stride) s[t] += s[t + stride];       // no __syncthreads() in the loop
    if (t == 0) out[0] = s[0];
}
extern "C" __global__ void out_of_bounds_read(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i + 64];                            // runs 64 floats past the end of in[n]
}
extern "C" __global__ void misaligned_float4(const float* in, float* out) {
    float4 v = reinterpret_cast<const float4*>(in + 1)[threadIdx.x];
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
"""

NCU_METRICS = ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
               "smsp__sass_inst_executed_op_shared_ld.sum",
               "smsp__sass_inst_executed_op_shared_st.sum"]
NCU_KEYS = ("conflicts_ld", "conflicts_st", "requests_ld", "requests_st")
# Global memory, per kernel: warp-level requests and 32-byte sectors of loads and stores.
SECTOR_METRICS = ["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                  "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"]
SECTOR_KEYS = ("g_requests_ld", "g_sectors_ld", "g_requests_st", "g_sectors_st")
FAULTING = ("out_of_bounds_read", "misaligned_float4")
SGEMM_SHAPE = (128, 128, 128)
TABLE_BEGIN, TABLE_END = "<!-- global-memory table: written by grader.programs.emulator_validate -->", "<!-- end of table -->"


def _launches(drv, SourceModule):
    """(name, thunk) for every validation kernel, on the given PyCUDA."""
    patterns = SourceModule(PATTERNS, no_extern_c=True, options=["-lineinfo"])
    globals_ = SourceModule(GLOBALS, no_extern_c=True, options=["-lineinfo"])
    bugs = SourceModule(BUGS, no_extern_c=True, options=["-lineinfo"])
    data = np.random.default_rng(0).random(8192, dtype=np.float32)
    d_in, d_out = drv.to_device(data), drv.mem_alloc(8192 * 4)
    small = drv.to_device(data[:256])
    d_idx = drv.to_device(np.random.default_rng(2).permutation(8192)[:256].astype(np.int32))
    result = []
    for name in ("transpose_32x32", "transpose_32x33"):
        result.append((name, lambda f=patterns.get_function(name): f(d_in, d_out, block=(32, 32, 1))))
    for name in ("read_stride_1", "read_stride_2", "read_stride_32", "read_broadcast", "read_float2",
                 "read_float2_stride_2", "read_float4", "read_float4_stride_2", "write_stride_32"):
        result.append((name, lambda f=patterns.get_function(name): f(d_in, d_out, block=(256, 1, 1))))
    for name in GLOBAL_KERNELS:
        extra = (d_idx,) if name == "ld_gather" else ()
        result.append((name, lambda f=globals_.get_function(name), x=extra: f(d_in, d_out, *x, block=(256, 1, 1))))
    A, B = sgemm.random_inputs(*SGEMM_SHAPE, np.random.default_rng(1))
    for stage in stages.STAGES:
        if any(name == stage.kernel for name, _ in result):
            continue  # the autotuned stage runs the warptiling kernel again
        fn = SourceModule(stage.source(), options=stage.options() + ["-lineinfo"]).get_function(stage.kernel)
        result.append((stage.kernel, lambda st=stage, fn=fn: sgemm.run(st, A, B, function=fn)))
    result.append(("racy_reduction", lambda f=bugs.get_function("racy_reduction"): f(d_in, d_out, block=(256, 1, 1))))
    result.append(("out_of_bounds_read", lambda f=bugs.get_function("out_of_bounds_read"):
                   f(small, d_out, np.int32(256), block=(256, 1, 1))))
    result.append(("misaligned_float4", lambda f=bugs.get_function("misaligned_float4"):
                   f(d_in, d_out, block=(32, 1, 1))))
    return result


def emulator_results() -> dict[str, dict]:
    """The emulator's analysis of every validation kernel."""
    out = {}
    for name, launch in _launches(driver, compiler.SourceModule):
        error = ""
        with analyze() as report:
            try:
                launch()
            except driver.LaunchError as e:
                error = str(e)
        out[name] = {
            "conflicts_ld": report.conflicts_ld, "conflicts_st": report.conflicts_st,
            "requests_ld": sum(s.requests for s in report.bank_conflicts if s.op == "ld"),
            "requests_st": sum(s.requests for s in report.bank_conflicts if s.op == "st"),
            "races": [r.describe() for r in report.races],
            "memory_errors": [f.describe() for f in report.out_of_bounds] or ([error] if error else []),
            "g_requests_ld": report.requests("ld"), "g_sectors_ld": report.sectors("ld"),
            "g_requests_st": report.requests("st"), "g_sectors_st": report.sectors("st"),
            "global_lines": [g.describe() for g in sorted(report.global_accesses, key=lambda g: (g.line, g.op))],
        }
    return out


def run_on_gpu(only: list[str] | None) -> None:
    """Launch the kernels on the real GPU (the process ncu or a sanitizer watches)."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule
    for name, launch in _launches(drv, SourceModule):
        if only and name not in only:
            continue
        try:
            launch()
            drv.Context.synchronize()
        except drv.Error as e:
            print(f"{name}: {e}")
            return  # a faulted context cannot launch again


def ncu_results(metrics: dict[str, str]) -> dict[str, dict]:
    """{kernel: {key: value summed over its launches}} for the metrics {ncu name: key}."""
    cmd = ["ncu", "--clock-control", "none", "--csv", "--page", "raw", "--metrics", ",".join(metrics),
           sys.executable, "-m", "grader.programs.emulator_validate", "--run-on-gpu", "--skip", ",".join(FAULTING)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GRADER_BACKEND": "gpu"})
    rows = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    if not rows:
        raise RuntimeError(f"ncu gave no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    table = list(csv.reader(io.StringIO("\n".join(rows))))
    header, body = table[0], table[2:]  # table[1]: units
    name_col = header.index("Kernel Name")
    out: dict[str, dict] = {}
    for row in body:
        kernel = re.sub(r"\(.*$", "", row[name_col]).split("<")[0].strip()
        kernel = kernel.split(" ")[-1]
        entry = out.setdefault(kernel, dict.fromkeys(metrics.values(), 0))
        for metric, key in metrics.items():
            entry[key] += int(float(row[header.index(metric)].replace(",", "")))
    return out


def sector_table(emu: dict[str, dict], hw: dict[str, dict]) -> str:
    """Global-memory requests and sectors per kernel, the emulator's beside Nsight Compute's."""
    rows = ["| kernel | emulator ld requests / sectors | ncu ld requests / sectors | emulator st requests / sectors "
            "| ncu st requests / sectors |", "|---|---|---|---|---|"]

    def pair(d: dict, op: str) -> str:
        return f"{d.get(f'g_requests_{op}', '-')} / {d.get(f'g_sectors_{op}', '-')}"

    for name, e in emu.items():
        if name in FAULTING:
            continue
        h = hw.get(name, {})
        mark = "" if not h or all(e[k] == h.get(k) for k in SECTOR_KEYS) else " **differs**"
        rows.append(f"| {name}{mark} | {pair(e, 'ld')} | {pair(h, 'ld')} | {pair(e, 'st')} | {pair(h, 'st')} |")
    return "\n".join(rows)


def replace_table(text: str, table: str, command: str) -> str:
    """`text` (a validation.md) with the global-memory table between its markers
    replaced, or a new section at its end."""
    block = f"{TABLE_BEGIN}\nCommand: `{command}`\n\n{table}\n{TABLE_END}"
    if TABLE_BEGIN in text and TABLE_END in text:
        head, rest = text.split(TABLE_BEGIN, 1)
        return head + block + rest.split(TABLE_END, 1)[1]
    return (text.rstrip("\n") + "\n\n## Global memory: requests and sectors (coalescing)\n\n"
            f"SGEMM stages at {SGEMM_SHAPE}; the patterns run one block of 256 threads.\n\n{block}\n")


def sanitizer_results(tool: str, kernels: list[str]) -> dict[str, str]:
    out = {}
    for kernel in kernels:
        cmd = ["compute-sanitizer", "--tool", tool, sys.executable, "-m", "grader.programs.emulator_validate",
               "--run-on-gpu", "--only", kernel]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GRADER_BACKEND": "gpu"})
        text = proc.stdout + proc.stderr
        summary = re.findall(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: .*)", text)
        first = re.search(r"========= (Error|Warning|Invalid|Race|Misaligned)[^\n]*\n(=+ [^\n]*\n){0,3}", text)
        out[kernel] = "; ".join(summary) + (("\n" + first.group(0).strip()) if first else "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="folder for validation.md and validation.json")
    parser.add_argument("--emulator-only", action="store_true")
    parser.add_argument("--sectors", action="store_true",
                        help="only the global-memory table, replaced in an existing OUT/validation.md")
    parser.add_argument("--run-on-gpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)
    parser.add_argument("--skip", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_on_gpu:
        names = [n for n in args.only.split(",") if n]
        skip = set(args.skip.split(","))
        if skip - {""}:
            import pycuda.autoprimaryctx  # noqa: F401
            import pycuda.driver as drv
            from pycuda.compiler import SourceModule
            names = [n for n, _ in _launches(drv, SourceModule) if n not in skip]
        run_on_gpu(names)
        return 0

    emu = emulator_results()
    command = recorded_command("emulator-validate", list(sys.argv[1:] if argv is None else argv))
    if args.sectors:
        return _sectors_only(emu, args, command)
    hw = {} if args.emulator_only else ncu_results(dict(zip(NCU_METRICS + SECTOR_METRICS, NCU_KEYS + SECTOR_KEYS)))
    races = {} if args.emulator_only else sanitizer_results("racecheck", ["racy_reduction", "sgemm_smem_tiling"])
    memory = {} if args.emulator_only else sanitizer_results("memcheck", ["out_of_bounds_read", "misaligned_float4"])
    rows = ["| kernel | emulator ld conflicts | ncu ld conflicts | emulator st conflicts | ncu st conflicts | "
            "emulator ld / st requests | ncu shared ld / st instructions |", "|---|---|---|---|---|---|---|"]
    for name, e in emu.items():
        h = hw.get(name, {})
        rows.append(f"| {name} | {e['conflicts_ld']} | {h.get('conflicts_ld', '-')} | {e['conflicts_st']} | "
                    f"{h.get('conflicts_st', '-')} | {e['requests_ld']} / {e['requests_st']} | "
                    f"{h.get('requests_ld', '-')} / {h.get('requests_st', '-')} |")
    rows += ["", "| kernel | emulator | compute-sanitizer |", "|---|---|---|"]
    for name in ("racy_reduction", "sgemm_smem_tiling", "out_of_bounds_read", "misaligned_float4"):
        found = emu[name]["races"] + emu[name]["memory_errors"]
        tool = races.get(name) or memory.get(name) or "-"
        rows.append(f"| {name} | {'<br>'.join(found) or 'nothing found'} | {tool.replace(chr(10), '<br>')} |")
    table = "\n".join(rows)
    sectors = sector_table(emu, hw)
    print(table + "\n\n" + sectors)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        text = (f"# Emulator analysis vs Nsight Compute and compute-sanitizer\n\n"
                f"Command: `{command}`\n\nSGEMM stages at {SGEMM_SHAPE}.\n\n{table}\n")
        (out / "validation.md").write_text(replace_table(text, sectors, command))
        (out / "validation.json").write_text(json.dumps({"emulator": emu, "ncu": hw, "racecheck": races,
                                                          "memcheck": memory}, indent=1))
    return 0


def _sectors_only(emu: dict[str, dict], args, command: str) -> int:
    hw = {} if args.emulator_only else ncu_results(dict(zip(SECTOR_METRICS, SECTOR_KEYS)))
    table = sector_table(emu, hw)
    print(table)
    if args.out:
        out = Path(args.out)
        md, js = out / "validation.md", out / "validation.json"
        md.write_text(replace_table(md.read_text() if md.exists() else "", table, command))
        data = json.loads(js.read_text()) if js.exists() else {}
        data["sectors"] = {"emulator": {k: {key: v[key] for key in (*SECTOR_KEYS, "global_lines")}
                                        for k, v in emu.items()}, "ncu": hw}
        js.write_text(json.dumps(data, indent=1))
    return 0


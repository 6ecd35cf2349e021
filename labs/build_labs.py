"""Build the nbgrader source notebooks of the labs from this (reviewable) file.

    python3 labs/build_labs.py            # writes labs/<assignment>/<notebook>.ipynb
    python3 labs/build_labs.py --check    # exit 1 when a written notebook differs

Each kernel cell holds the stage's reference kernel from solutions/<stage>.cu,
with its body between `// BEGIN SOLUTION` and `// END SOLUTION` (the release
copy gets `// YOUR CODE HERE` there: see grader/nbgrader_ext.py);
tests/test_labs_match_solutions.py fails when the two drift apart.

Points: hidden test cells call grader.grade(stage, SOURCE, check, points),
which runs the check in a separate process and returns the points earned.
Performance points are only given when autograding runs on a GPU; on a
machine without one the performance check says "not graded: no GPU" and
scores 0 (see README, "Grading").
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

LABS = Path(__file__).resolve().parent
ROOT = LABS.parent
SOLUTIONS = ROOT / "solutions"
BEGIN, END = "// BEGIN SOLUTION", "// END SOLUTION"

# The H200 numbers the labs reason with (the emulator reports the same device).
H200 = {"sms": 132, "lanes": 128, "clock_ghz": 1.98, "hbm_tbs": 4.8}
PEAK_TFLOPS = H200["sms"] * H200["lanes"] * 2 * H200["clock_ghz"] / 1e3     # 66.9


def with_solution_markers(source: str) -> str:
    """The kernel file with its body (between the kernel's opening and closing
    brace lines) wrapped in solution markers."""
    lines = source.rstrip("\n").split("\n")
    sig = next(i for i, ln in enumerate(lines) if ln.startswith("__global__"))
    open_ = next(i for i in range(sig, len(lines)) if lines[i].strip() == "{")
    close = max(i for i, ln in enumerate(lines) if ln.strip() == "}")
    body = lines[open_ + 1:close]
    out = lines[:open_ + 1] + ["    " + BEGIN] + body + ["    " + END] + lines[close:]
    return "\n".join(out) + "\n"


def strip_solution_markers(text: str) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if ln.strip() not in (BEGIN, END))


# ---- cells --------------------------------------------------------------------------------
def _meta(grade_id: str, *, grade=False, solution=False, locked=False, points=None) -> dict:
    nb = {"grade": grade, "solution": solution, "locked": locked, "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        nb["points"] = points
    return {"nbgrader": nb}


def md(text: str, grade_id: str | None = None):
    cell = new_markdown_cell(text.strip("\n"))
    if grade_id:
        cell.metadata.update(_meta(grade_id, locked=True))
    return cell


def readonly(code: str, grade_id: str):
    cell = new_code_cell(code.strip("\n"))
    cell.metadata.update(_meta(grade_id, locked=True))
    return cell


def plain(code: str):
    return new_code_cell(code.strip("\n"))


def answer(code: str, grade_id: str):
    cell = new_code_cell(code.strip("\n"))
    cell.metadata.update(_meta(grade_id, solution=True))
    return cell


def tests(code: str, grade_id: str, points: float):
    cell = new_code_cell(code.strip("\n"))
    cell.metadata.update(_meta(grade_id, grade=True, locked=True, points=points))
    return cell


def kernel_cell(variable: str, stage_id: str, grade_id: str):
    src = with_solution_markers((SOLUTIONS / f"{stage_id}.cu").read_text())
    assert '"""' not in src and not src.rstrip().endswith("\\")
    return answer(f'{variable} = r"""{src}"""\n', grade_id)


def kernel_tests(variable: str, stage_id: str, prefix: str, points: dict[str, float]) -> list:
    what = {"correctness": "the kernel computes C = A B on several shapes, including ones that are not tile "
                           "multiples, without writing outside C",
            "races": "no races and no out-of-bounds accesses (emulator analysis), and the same C whatever the "
                     "order in which the threads of a block run",
            "performance": "GFLOPS against cuBLAS on the same GPU (only graded on a GPU: on a machine without "
                           "one this test scores 0 and says \"not graded: no GPU\")"}
    cells = []
    for check, p in points.items():
        cells.append(tests(f"""
# Hidden test ({p:g} point{'s' if p != 1 else ''}): {what[check]}.
### BEGIN HIDDEN TESTS
grader.grade("{stage_id}", {variable}, "{check}", points={p:g})
### END HIDDEN TESTS
""", f"{prefix}-{check}", p))
    return cells


def question(variable: str, grade_id: str, solution_expr: str, expected: float, rtol: float, hint: str):
    return [
        answer(f"""
# {hint}
# Answer with a number or an arithmetic expression of numbers.
### BEGIN SOLUTION
{variable} = {solution_expr}
### END SOLUTION
""", grade_id),
        tests(f"""
# Hidden test (1 point): {variable} within {rtol * 100:g} %.
assert {variable} is not None
### BEGIN HIDDEN TESTS
assert np.allclose({variable}, {expected!r}, rtol={rtol!r}), "{variable} is not right yet"
### END HIDDEN TESTS
""", f"{grade_id}-test", 1),
    ]


SETUP = """
import numpy as np
import grader          # picks the backend: the GPU when there is one, else the CPU emulator
print("backend:", grader.BACKEND)
"""

GRADING_NOTE = """
### How this notebook is graded

* **Self-check** cells (`grader.check(...)`) run every check and show the diagnosis; run them as often as you like.
* **Hidden tests** (autograded, with points) run the same checks in a separate process, on fresh random inputs:
  *correctness* (several shapes that are not multiples of any tile, plus a large one; C starts as NaN and is
  surrounded by guard zones that must stay untouched), *races* (the emulator's race and out-of-bounds analysis,
  and a re-run with the threads in a different order) and *performance* (GFLOPS against cuBLAS).
* **Performance points are only given on a GPU.** Where there is no GPU (your laptop, CI), the
  performance check says *not graded: no GPU* and that test scores 0. Your instructor autogrades on a GPU.
* Anything a graded cell writes to stderr makes that cell worth 0 - the grader captures compiler warnings
  for you; don't print to stderr yourself.
* Answers to the questions: a number or an arithmetic expression of numbers (they are re-checked independently).
"""


# ---- lab 1: naive and coalesced ----------------------------------------------------------
def lab1():
    cells = [
        md("""
# Lab 1 - SGEMM, naive and coalesced

We compute **C = A B** in single precision (SGEMM) with row-major `A` (M x K), `B` (K x N) and `C` (M x N).
Every kernel in this course has the signature

```c
__global__ void kernel(int M, int N, int K, const float* A, const float* B, float* C);
```

In this lab one thread computes one element of `C`: it walks along a row of `A` and down a column of `B`.
First the obvious mapping of threads to elements (stage **naive**), then the one that lets a warp's 32 memory
accesses merge into a few transactions (stage **coalesced**).
""", "intro"),
        md(GRADING_NOTE, "grading-note"),
        readonly(SETUP, "setup"),
        md(f"""
## How fast could SGEMM be? Arithmetic intensity and the roofline

SGEMM does `2 M N K` floating-point operations (one multiply and one add per term). If every matrix crossed
the memory bus exactly once it would move `4 (M K + K N + M N)` bytes. Their ratio is the **arithmetic
intensity** (FLOP per byte). For square matrices of size `n` it is `2 n^3 / (12 n^2) = n / 6`: it grows with `n`.

The **roofline**: a kernel of intensity `I` cannot exceed `min(peak FLOP/s, I x bandwidth)`. On the H200 the
course is calibrated on: {H200['sms']} SMs x {H200['lanes']} FP32 lanes x 2 FLOP (an FMA) x {H200['clock_ghz']} GHz
= **{PEAK_TFLOPS:.1f} TFLOP/s**, and HBM3e at **{H200['hbm_tbs']} TB/s**. The intensity at which the two limits meet is the
*ridge point*: below it a kernel is memory-bound, above it compute-bound.
""", "roofline-md"),
        *question("AI_4096", "q-intensity", "2 * 4096**3 / (4 * (3 * 4096**2))", 4096 / 6, 0.01,
                  "Q1: the arithmetic intensity (FLOP/byte) of SGEMM with M = N = K = 4096, minimal traffic."),
        *question("RIDGE_H200", "q-ridge", f"{PEAK_TFLOPS:.4g}e12 / {H200['hbm_tbs']}e12",
                  PEAK_TFLOPS / H200["hbm_tbs"], 0.02,
                  "Q2: the H200's ridge point in FLOP/byte (FP32 peak / HBM bandwidth, numbers above)."),
        md("""
The naive kernel below reads, for every multiply-add, one float of `A` and one of `B` - 8 bytes for 2 FLOP -
and keeps nothing for reuse in fast memory (caches help it somewhat, but it is not designed for them).
"""),
        *question("AI_NAIVE", "q-naive-intensity", "2 / 8", 0.25, 0.01,
                  "Q3: the arithmetic intensity (FLOP/byte) of one inner-loop step of the naive kernel, "
                  "if both loads went to DRAM."),
        readonly(f"""
# The roofline of the H200 (FP32), with where the kernels of this lab sit.
import matplotlib.pyplot as plt
peak, bw = {PEAK_TFLOPS:.4g}e12, {H200['hbm_tbs']}e12
I = np.logspace(-2, 4, 200)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(I, np.minimum(peak, I * bw) / 1e12, label="roofline")
ax.axvline(peak / bw, color="gray", linestyle=":", label=f"ridge point {{peak / bw:.1f}} FLOP/B")
for name, x in [("naive / coalesced, every load from DRAM", 0.25), ("SGEMM 4096^3, minimal traffic", 4096 / 6)]:
    ax.plot([x], [min(peak, x * bw) / 1e12], "o", label=name)
ax.set_xlabel("arithmetic intensity (FLOP/byte)")
ax.set_ylabel("TFLOP/s bound")
ax.legend(fontsize=7)
plt.show()
""", "roofline-figure"),
        md("""
## Stage 1: naive

Thread `(threadIdx.x, threadIdx.y)` of block `(blockIdx.x, blockIdx.y)` computes element
`row = blockIdx.x * blockDim.x + threadIdx.x`, `col = blockIdx.y * blockDim.y + threadIdx.y` of `C`.
The grader launches 32 x 32 threads per block and a grid of `(ceil(M / 32), ceil(N / 32))` blocks, so threads
past the edge of `C` exist whenever `M` or `N` is not a multiple of 32: **they must not read or write anything**.

Write the kernel body:
"""),
        kernel_cell("NAIVE_SOURCE", "naive", "naive-kernel"),
        plain("""
# Self-check: every check, with its diagnosis (run it as often as you like).
grader.check("naive", NAIVE_SOURCE)
"""),
        *kernel_tests("NAIVE_SOURCE", "naive", "naive", {"correctness": 3, "races": 1, "performance": 1}),
        md("""
## Stage 2: coalesced

A warp is 32 threads with consecutive `threadIdx.x`. When they load 32 consecutive floats, the hardware
serves them with one 128-byte request (four 32-byte *sectors*); when they load 32 floats from 32 different rows,
it needs 32 sectors for 128 useful bytes. In the naive kernel `threadIdx.x` selects the *row*: a warp's load of
`A[row * K + k]` touches 32 rows.
"""),
        *question("SECTORS_NAIVE_A", "q-sectors-naive", "32", 32, 0.001,
                  "Q4: how many 32-byte sectors does one warp's load of A[row * K + k] touch in the naive kernel?"),
        *question("SECTORS_COALESCED_B", "q-sectors-coalesced", "32 * 4 // 32", 4, 0.001,
                  "Q5: in the coalesced kernel (threadIdx.x selects the column), how many 32-byte sectors does "
                  "one warp's load of B[k * N + col] touch?"),
        md("""
Now swap the roles: `col = blockIdx.x * blockDim.x + threadIdx.x`, `row = blockIdx.y * blockDim.y + threadIdx.y`.
The grader launches a grid of `(ceil(N / 32), ceil(M / 32))` blocks of 32 x 32 threads.
"""),
        kernel_cell("COALESCED_SOURCE", "coalesced", "coalesced-kernel"),
        plain("""
# Self-check.
grader.check("coalesced", COALESCED_SOURCE)
"""),
        *kernel_tests("COALESCED_SOURCE", "coalesced", "coalesced", {"correctness": 3, "races": 1, "performance": 1}),
    ]
    return cells


# ---- lab 2: shared-memory tiling ------------------------------------------------------------
def lab2():
    cells = [
        md("""
# Lab 2 - SGEMM with shared-memory tiling

The coalesced kernel still loads every element of `A` and `B` from global memory `N` and `M` times. Here a
block of `TILE x TILE` threads computes a `TILE x TILE` tile of `C`. It walks along `K` in steps of `TILE`:
each step, every thread loads **one** element of the `A` tile and one of the `B` tile into shared memory, the
block waits (`__syncthreads()`), every thread then reads `TILE` values of each tile from shared memory, and
the block waits again before the tiles are overwritten.
""", "intro"),
        md(GRADING_NOTE, "grading-note"),
        readonly(SETUP, "setup"),
        md("""
## Data reuse

In the coalesced kernel each thread issues `2 K` global loads for its `2 K` FLOP. With tiling, each thread
issues 2 global loads per step of `TILE` multiply-adds, so `2 K / TILE` in all.
"""),
        *question("LOAD_REDUCTION", "q-reduction", "32", 32, 0.001,
                  "Q1: with TILE = 32, by what factor does tiling cut the global loads per thread?"),
        *question("SMEM_BYTES", "q-smem", "2 * 32 * 32 * 4", 8192, 0.001,
                  "Q2: how many bytes of shared memory does one block use for its two tiles (TILE = 32, float)?"),
        md("""
## Arithmetic intensity of a tiled step

Each step a block moves two `TILE x TILE` tiles of floats from global memory (`8 TILE^2` bytes) and performs
`TILE^2` dot products of length `TILE` (`2 TILE^3` FLOP): intensity `TILE / 4` against global memory.
On the roofline, that moves the kernel from 0.25 FLOP/byte to the right - and bigger tiles help more, until
shared memory and registers run out (the next labs).
"""),
        *question("AI_TILED", "q-tiled-intensity", "2 * 32**3 / (8 * 32**2)", 8, 0.01,
                  "Q3: the arithmetic intensity (FLOP/byte, against global memory) of one step with TILE = 32."),
        readonly("""
# Global-memory intensity of one tiled step against the tile size, with the H200's ridge point.
import matplotlib.pyplot as plt
tiles = np.array([1, 2, 4, 8, 16, 32])
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(tiles, tiles / 4, "o-", label="TILE / 4")
ax.axhline(66.9 / 4.8, color="gray", linestyle=":", label="H200 ridge point (13.9 FLOP/B)")
ax.set_xscale("log", base=2)
ax.set_xlabel("TILE")
ax.set_ylabel("FLOP per byte of global memory")
ax.legend(fontsize=8)
plt.show()
""", "tile-figure"),
        md("""
## The kernel

The grader launches blocks of `TILE x TILE` threads (TILE = 32, passed as `-DTILE=32`) and a grid of
`(ceil(N / TILE), ceil(M / TILE))` blocks. `M`, `N` and `K` need not be multiples of `TILE`: load zeros for
elements outside `A` or `B`, and make sure **every thread reaches every `__syncthreads()`** (a barrier inside
`if (row < M)` deadlocks). Then write `C` only where `row < M` and `col < N`.
"""),
        kernel_cell("TILED_SOURCE", "smem-tiling", "smem-tiling-kernel"),
        plain("""
# Self-check.
grader.check("smem-tiling", TILED_SOURCE)
"""),
        *kernel_tests("TILED_SOURCE", "smem-tiling", "smem-tiling", {"correctness": 4, "races": 2, "performance": 2}),
    ]
    return cells


# ---- labs 3 and 4: the two minimums of C, shortest paths on its grid graph ----------------------
def with_function_markers(source: str) -> str:
    """Every __global__ and __device__ function body (between its "{" line and the next "}" line at
    column 0) wrapped in solution markers; signatures and comments stay visible."""
    lines = source.rstrip("\n").split("\n")
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].startswith(("__global__", "__device__")):
            j = i + 1
            while lines[j].strip() != "{":
                out.append(lines[j])
                j += 1
            close = next(k for k in range(j + 1, len(lines)) if lines[k] == "}")
            out += [lines[j], "    " + BEGIN] + lines[j + 1:close] + ["    " + END, lines[close]]
            i = close + 1
            continue
        i += 1
    return "\n".join(out) + "\n"


def graph_kernel_cell(variable: str, solution_file: str, grade_id: str):
    src = with_function_markers((SOLUTIONS / solution_file).read_text())
    assert '"""' not in src and not src.rstrip().endswith("\\")
    return answer(f'{variable} = r"""{src}"""\n', grade_id)


def graph_tests(variable: str, kind: str, points: dict[str, float], what: dict[str, str]) -> list:
    return [tests(f"""
# Hidden test ({p:g} point{'s' if p != 1 else ''}): {what[check]}.
### BEGIN HIDDEN TESTS
grader.grade_graph("{kind}", {variable}, "{check}", points={p:g})
### END HIDDEN TESTS
""", f"{kind}-{check}", p) for check, p in points.items()]


DEFINITIONS = """
**Definitions (used by every check).**

- Inputs A (M x K) and B (K x N) with entries uniform in [0, 1), so C = A·B is non-negative; C is computed on
  the GPU by an SGEMM stage (the reference `smem-tiling` kernel, through `grader.graph.sgemm_on_device`).
- The two minimums: the two smallest entries of C at distinct positions, as (value, row, col); ties go to the
  smaller row-major index. Only these two values and their indices (and a few flags) may travel back to the host.
- The graph: one vertex per cell of C; edges join 4-neighbours; entering cell v costs C[v]. Sources: the two
  minimum cells. Output: the two distance maps (M x N, float32), the cost of the shortest path from the first
  minimum to the second, and that path as a list of cells.
- Convention: the edge u -> v weighs C[v]; the source's own cost is not counted (its distance is 0), so a
  path's cost is the sum of C over every cell of the path except the first.
"""


def lab3():
    return [
        md("""
# Lab 3 - The two minimums of C: a parallel top-2 reduction

Finding the smallest entries of a matrix that lives on the GPU must not mean copying it to the host and looping
over it there: C = A·B of size 16384 x 16384 is 1 GiB. Here you write a **top-2 reduction** that runs entirely on
the GPU (threads, then warps with shuffles, then the block in shared memory, then the grid with 64-bit atomics),
then **fuse** it into the SGEMM epilogue, and finally the host function that ties it together and reads back 16 bytes.
""", "intro"),
        md(DEFINITIONS, "definitions"),
        md(GRADING_NOTE.replace("correctness", "exactness"), "grading-note"),
        readonly(SETUP, "setup"),
        md("""
## Keys: value and index in one 64-bit integer

For non-negative floats the IEEE-754 bit patterns order like unsigned integers. So
`key = (float bits << 32) | index` (an `unsigned long long`) orders by value first and index second: the smallest
key is the smallest value with ties to the smaller index, and two positions never share a key. `atomicMin` on
such keys merges candidates from different blocks in one instruction.
"""),
        *question("KEY_HALF", "q-key", "0.5", 0.5, 1e-6,
                  "Q1: which float has the bits 0x3F000000 (the upper half of the key 0x3F00000000000007)?"),
        *question("TOP2_BYTES_16K", "q-bytes", "4 * 16384**2", 4 * 16384 ** 2, 1e-6,
                  "Q2: how many bytes must the top-2 reduction read from global memory for a 16384 x 16384 C?"),
        *question("TOP2_TIME_US", "q-time", f"4 * 16384**2 / {H200['hbm_tbs']}e12 * 1e6",
                  4 * 16384 ** 2 / (H200["hbm_tbs"] * 1e12) * 1e6, 0.02,
                  "Q3: the least time in microseconds to read them at the H200's 4.8 TB/s."),
        md("""
## The top-2 kernel

`top2(const float* x, int n, unsigned long long* out)` is launched with blocks of 256 threads and any number of
blocks; `out[0]` and `out[1]` hold `~0ull` before the launch and must hold the two smallest keys after it. Write
the helper functions and the kernel. The checks use adversarial inputs: ties, both minimums in one thread, warp or
block, in the last partial block, at index 0 and at the last index, shapes 1x2, 1xN, Mx1.
"""),
        graph_kernel_cell("TOP2_SOURCE", "top2.cu", "top2-kernel"),
        plain("""
# Self-check: every check, with its diagnosis.
grader.check_graph("top2", TOP2_SOURCE)
"""),
        *graph_tests("TOP2_SOURCE", "top2", {"top2-exact": 3, "top2-races": 1},
                     {"top2-exact": "the two minimums exact against numpy on adversarial inputs and after a GPU SGEMM",
                      "top2-races": "no races (a missing __syncthreads()?) or out-of-bounds accesses, and the same "
                                    "result in any thread order (emulator analysis)"}),
        md("""
## Fused: SGEMM whose epilogue finds the block's top-2

The separate reduction reads C once more after the SGEMM wrote it. In the fused kernel each thread still holds its
element of C in a register after the tiled SGEMM loop (stage 3): form its key there, merge in the warp, in the
block, and into `out` with atomics. Launch: blocks of 32 x 32 threads, a grid of (ceil(N/32), ceil(M/32)).
"""),
        graph_kernel_cell("FUSED_SOURCE", "sgemm-top2.cu", "sgemm-top2-kernel"),
        plain("""
grader.check_graph("sgemm-top2", FUSED_SOURCE)
"""),
        *graph_tests("FUSED_SOURCE", "sgemm-top2", {"sgemm-top2-exact": 2, "sgemm-top2-races": 1},
                     {"sgemm-top2-exact": "C correct and its two minimums exact, ties included",
                      "sgemm-top2-races": "no races or out-of-bounds accesses, any thread order"}),
        md("""
## The host function

Write `minimums(A, B)`: compute C on the GPU with `grader.graph.sgemm_on_device(A, B)` (it returns the device
allocation of C and M, N), find the two minimums with your `top2` kernel, and return
`((value, row, col), (value, row, col))`. The check counts the bytes copied from the device while your function
runs (`memcpy_dtoh`, `GPUArray.get`, `drv.Out`): at most 64 bytes, so no loop over C on the host.
"""),
        answer("""
import pycuda.driver as drv
from pycuda.compiler import SourceModule
from grader import graph

def minimums(A, B):
    ### BEGIN SOLUTION
    top2 = SourceModule(TOP2_SOURCE).get_function("top2")
    c, M, N = graph.sgemm_on_device(A, B)
    k1, k2 = graph.top2_keys(top2, c, M * N)
    c.free()
    return graph.unpack(k1, N), graph.unpack(k2, N)
    ### END SOLUTION
""", "host-function"),
        tests("""
# Hidden test (2 points): the two minimums right, at most 64 bytes back from the device.
### BEGIN HIDDEN TESTS
_report = grader.check_host_minimums(minimums)
print(_report.text())
_report.points("host-transfers", 2)
### END HIDDEN TESTS
""", "host-function-test", 2),
        readonly("""
# C with its two minimums marked.
import matplotlib.pyplot as plt
_rng = np.random.default_rng(0)
A, B = grader.graph.inputs(96, 128, 16, _rng)
(m1, m2) = minimums(A, B)
C = A.astype(np.float64) @ B
fig, ax = plt.subplots(figsize=(6, 4.5))
im = ax.imshow(C, cmap="viridis")
ax.plot([m1[2]], [m1[1]], "r*", markersize=14, label=f"first minimum {m1[0]:.3f}")
ax.plot([m2[2]], [m2[1]], "w*", markersize=14, label=f"second minimum {m2[0]:.3f}")
ax.legend(fontsize=8)
fig.colorbar(im, ax=ax, label="C")
plt.show()
""", "minimums-figure"),
    ]


def lab4():
    return [
        md("""
# Lab 4 - Shortest paths on the grid of C

C becomes a graph: one vertex per cell, edges between 4-neighbours, entering cell v costs C[v]. From each of the
two minimums of C (lab 3) we compute a **distance map**, then the **shortest path** from the first minimum to the
second - all on the GPU; the host only relaunches the relaxation kernel until a round changes nothing (one 4-byte
flag per round) and reads back the outputs.
""", "intro"),
        md(DEFINITIONS, "definitions"),
        md(GRADING_NOTE.replace("correctness", "distances"), "grading-note"),
        readonly(SETUP, "setup"),
        md("""
## How many sweeps?

A plain Bellman-Ford sweep (one launch, every cell relaxed once from its neighbours) moves the frontier one cell.
With A, B uniform in [0, 1), C is nearly constant and the shortest paths are nearly monotone staircases of about
M + N cells. Relaxing a 32 x 32 tile in shared memory until it stops changing moves the frontier a whole tile per
launch.
"""),
        *question("SWEEPS_PLAIN_4096", "q-sweeps", "4096 + 4096", 8192, 0.05,
                  "Q1: about how many plain sweeps for a 4096 x 4096 C, sources in a corner?"),
        *question("SWEEPS_TILED_4096", "q-tiled-sweeps", "(4096 + 4096) / 32", 256, 0.05,
                  "Q2: about how many tiled launches (32 x 32 tiles) for the same C?"),
        md("""
## The kernels

`sssp_relax(M, N, C, dist, stamp, round, last_round)`: blocks of 32 x 32 threads, a grid of (ceil(N/32),
ceil(M/32)). `dist` is updated in place; `stamp[t]` is the last round in which tile t changed (-1: never). Visit a
tile only when it or a 4-neighbour tile changed in round `round - 1` or later; relax it in shared memory until
nothing changes; when something changed, write it back, set `stamp` and `*last_round = round`.
The host (`grader.graph.sssp_distances`) sets dist to +inf and 0 at the source, then launches rounds 1, 2, ...
until `*last_round` stays below the round.

`sssp_path(M, N, C, dist, source, target, path, max_len, length)`: one warp walks from `target` to `source`
along the neighbour with the smallest distance (ties to the smaller index) and writes the path, source first;
`*length` = its number of cells (negative or 0 when the walk got lost).
"""),
        graph_kernel_cell("SSSP_SOURCE", "sssp.cu", "sssp-kernel"),
        plain("""
grader.check_graph("sssp", SSSP_SOURCE)
"""),
        *graph_tests("SSSP_SOURCE", "sssp", {"sssp-distances": 3, "sssp-path": 2},
                     {"sssp-distances": "both distance maps against scipy's Dijkstra in float64 (relative tolerance "
                                        "2^-22 (M + N + 2)), and converged",
                      "sssp-path": "the path is 4-connected, starts and ends at the minimums, and its cost equals "
                                   "the reported distance and Dijkstra's"}),
        readonly("""
# The two distance maps, and the path drawn on C.
import matplotlib.pyplot as plt
_rng = np.random.default_rng(0)
A, B = grader.graph.inputs(96, 128, 16, _rng)
out = grader.graph.shortest_paths(A, B, SSSP_SOURCE)
C = A.astype(np.float64) @ B
(m1, m2), path = out["minimums"], np.array(out["path"])
fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
for ax, d, m, title in ((axes[0], out["dist1"], m1, "distance from minimum 1"),
                        (axes[1], out["dist2"], m2, "distance from minimum 2")):
    fig.colorbar(ax.imshow(d, cmap="magma"), ax=ax)
    ax.plot([m[2]], [m[1]], "c*", markersize=12)
    ax.set_title(title)
fig.colorbar(axes[2].imshow(C, cmap="viridis"), ax=axes[2])
axes[2].plot(path[:, 1], path[:, 0], "r-", linewidth=2)
axes[2].set_title(f"shortest path, cost {out['cost']:.2f}")
plt.show()
""", "paths-figure"),
        *question("PATH_CELLS_MIN", "q-path-cells", "95 + 127 + 1", 223, 1e-6,
                  "Q3: the fewest cells (both ends included) a 4-connected path from (0, 0) to (95, 127) can have."),
    ]


LAB_BUILDERS = {("01-naive-coalesced", "naive-coalesced.ipynb"): lab1,
                ("02-smem-tiling", "smem-tiling.ipynb"): lab2,
                ("03-minimums", "minimums.ipynb"): lab3,
                ("04-shortest-paths", "shortest-paths.ipynb"): lab4}


def build() -> dict[Path, str]:
    out = {}
    for (assignment, name), make in LAB_BUILDERS.items():
        cells = make()
        for i, cell in enumerate(cells):     # stable ids: the build is reproducible
            cell.id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell-{i:02d}"
        nb = new_notebook(cells=cells, metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"}})
        nbformat.validate(nb)
        out[LABS / assignment / name] = nbformat.writes(nb) + "\n"
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in build().items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python3 labs/build_labs.py): " + ", ".join(str(p.relative_to(ROOT)) for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

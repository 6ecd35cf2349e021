"""Common mistakes, each a small edit of a reference (a kernel of solutions/ or a function of a lab's source
notebook, edited here; lab 3's unwritten function in tests/mistakes/03/): the verdict of the checks that
should catch it, the key words of the cause they name (each said once), and words that would mislead."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import ON_EMULATOR
from nbgrader_course import reference_answer

import grader
from grader.grading.checks import wrong_patterns
from grader.grading.registry import run_here
from grader.grading.report import FAILED, CheckReport, CheckResult
from grader.kernels import sgemm

MISTAKES = Path(__file__).resolve().parent / "mistakes"
SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
PRINTF = ("        C[row * N + col] = sum;\n",
          "        C[row * N + col] = sum;\n    if (row == 0 && col == 0) printf(\"C[0][0] = %f\\n\", sum);\n")
AS_STRIDE = "#define AS_STRIDE (BM + 4)             // floats per row of As: 4 (mod 32) banks apart"
# Each mistake: its reference (a kernel of solutions/, or a lab's answer in its source notebook: (lab, exercise))
# and the edits (as written there, as the mistake writes it).
MATMUL = ("00-pycuda-by-hand", "pycuda-matmul")
GFLOPS = ("00-pycuda-by-hand", "pycuda-gflops")
TIMING = ("00-pycuda-by-hand", "pycuda-timing")
MINIMUMS = ("07-minimums", "minimums-host")
COALESCED, SMEM, BLOCKTILE_1D = SOLUTIONS / "coalesced.cu", SOLUTIONS / "smem-tiling.cu", SOLUTIONS / "blocktile-1d.cu"
VECTORIZED, DOUBLE_BUFFERING = SOLUTIONS / "vectorized.cu", SOLUTIONS / "double-buffering.cu"
TOP2, FUSED, SSSP = SOLUTIONS / "top2.cu", SOLUTIONS / "sgemm-top2.cu", SOLUTIONS / "sssp.cu"
WS_WMMA, WS_WGMMA = SOLUTIONS / "warp-specialized-wmma.cu", SOLUTIONS / "warp-specialized-wgmma.cu"
SMEM_LOADS = ("As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;",
              "Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;")
EDITS = {
    "00/b_not_converted.py": (MATMUL, ("    B = np.ascontiguousarray(B, dtype=np.float32)\n", "")),
    "00/block_grid_swapped.py": (MATMUL, ("block=block, grid=grid)", "block=grid, grid=block)")),
    "00/c_not_copied_back.py": (MATMUL, ("    return c_gpu.get()\n",
                                         "    C = np.zeros((M, N), np.float32)\n    return C\n")),
    "01/no_bounds_check.cu": (SOLUTIONS / "coalesced.cu", ("    if (row < M && col < N) {", "    {")),
    "02/printf_cstdio.cu": (SOLUTIONS / "smem-tiling.cu", ("", "#include <cstdio>\n"), PRINTF),
    "02/printf_stdio_h.cu": (SOLUTIONS / "smem-tiling.cu", ("", "#include <stdio.h>\n"), PRINTF),
    "03/mapping_1d.cu": (SOLUTIONS / "blocktile-2d.cu", (
        "    const int threadCol = tid % (BN / TN);   // columns threadCol*TN .. +TN-1 of the tile\n"
        "    const int threadRow = tid / (BN / TN);   // rows    threadRow*TM .. +TM-1\n",
        "    const int threadCol = tid % BN;\n    const int threadRow = tid / BN;\n")),
    "03/store_bound_off_by_one.cu": (SOLUTIONS / "blocktile-2d.cu", (
        "            if (row < M && col < N)", "            if (row < M - 1 && col < N)")),
    "04/as_stride_literal.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE 132")),
    "04/as_stride_plus_1.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE (BM + 1)")),
    "04/as_stride_unpadded.cu": (SOLUTIONS / "bank-conflict-free.cu", (AS_STRIDE, "#define AS_STRIDE BM")),
    "04/transpose_tile_not_swapped.cu": (SOLUTIONS / "transpose.cu", ("= tile[tx][ty];", "= tile[ty][tx];")),
    "00/gflops_no_factor_2.py": (GFLOPS, ("return 2 * M * N * K / seconds", "return M * N * K / seconds")),
    "00/timing_not_synchronised.py": (TIMING, ("        end.synchronize()\n", "")),
    "01/rows_cols_swapped.cu": (COALESCED, (
        "    const int col = blockIdx.x * blockDim.x + threadIdx.x;\n    const int row = blockIdx.y * blockDim.y + threadIdx.y;",
        "    const int row = blockIdx.x * blockDim.x + threadIdx.x;\n    const int col = blockIdx.y * blockDim.y + threadIdx.y;")),
    "01/k_loop_to_n.cu": (COALESCED, ("for (int k = 0; k < K; ++k)", "for (int k = 0; k < N; ++k)")),
    "01/a_row_stride_n.cu": (COALESCED, ("A[row * K + k]", "A[row * N + k]")),
    "01/sum_not_initialised.cu": (COALESCED, ("float sum = 0.0f;", "float sum;")),
    "02/no_sync_after_loads.cu": (SMEM, ("        __syncthreads();\n        for", "        for")),
    "02/no_sync_after_products.cu": (SMEM, ("Bs[k][tx];\n        __syncthreads();", "Bs[k][tx];")),
    "02/no_zero_fill.cu": (SMEM, (SMEM_LOADS[0], "if (row < M && k0 + tx < K) As[ty][tx] = A[row * K + k0 + tx];"),
                           (SMEM_LOADS[1], "if (k0 + ty < K && col < N) Bs[ty][tx] = B[(k0 + ty) * N + col];")),
    "02/tile_loop_to_n.cu": (SMEM, ("k0 < K; k0 += TILE", "k0 < N; k0 += TILE")),
    "03/blocktile_1d_no_zero_fill.cu": (BLOCKTILE_1D, (
        "As[r][c] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;", "if (gr < M && gc < K) As[r][c] = A[gr * K + gc];"), (
        "Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;", "if (gr < K && gc < N) Bs[r][c] = B[gr * N + gc];")),
    "03/blocktile_1d_last_tile_left_out.cu": (BLOCKTILE_1D, ("k0 < K; k0 += BK", "k0 < K - BK; k0 += BK")),
    "05/float4_always.cu": (VECTORIZED, ("const bool vec = ((K | N) & 3) == 0 &&", "const bool vec = true ||")),
    "05/float4_b_unguarded.cu": (VECTORIZED, ("if (gr < K && gc < N) b = *reinterpret_cast", "b = *reinterpret_cast")),
    "05/store_into_buffer_read.cu": (DOUBLE_BUFFERING, ("store_shared(ra, rb, As[(t + 1) % 2], Bs[(t + 1) % 2]);",
                                                        "store_shared(ra, rb, As[t % 2], Bs[t % 2]);")),
    "05/buffer_not_toggled.cu": (DOUBLE_BUFFERING, ("compute_tile(As[t % 2], Bs[t % 2],", "compute_tile(As[0], Bs[0],")),
    "05/no_sync_per_step.cu": (DOUBLE_BUFFERING, ("Bs[(t + 1) % 2]);\n        __syncthreads();", "Bs[(t + 1) % 2]);")),
    "06/warp_row_col_swapped.cu": (SOLUTIONS / "warptiling.cu", (
        "warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);", "warpRow = warp % (BN / WN), warpCol = warp / (BN / WN);")),
    "07/no_sync_before_block_merge.cu": (TOP2, ("s2[warp] = k2; }\n    __syncthreads();", "s2[warp] = k2; }")),
    "07/scalar_tail_skipped.cu": (TOP2, ("    for (int i = 4 * n4 + first; i < n; i += stride)\n"
                                         "        insert(make_key(x[i], i), k1, k2);\n", "")),
    "07/fused_no_sync_after_loads.cu": (FUSED, ("        __syncthreads();\n        for", "        for")),
    "07/fused_sum_not_initialised.cu": (FUSED, ("float sum = 0.0f;", "float sum;")),
    "07/fused_tile_loop_to_n.cu": (FUSED, ("k0 < K; k0 += TILE", "k0 < N; k0 += TILE")),
    "07/old_minimum_not_offered.cu": (TOP2, ("            atomicMin(&out[1], old > k1 ? old : k1);\n", "")),
    "07/host_copies_c_back.py": (MINIMUMS, ("    k1, k2 = top2.top2_keys(top2_kernel, c, M * N)\n",
                                            "    C = np.empty((M, N), np.float32)\n    drv.memcpy_dtoh(C, c)\n"
                                            "    k1, k2 = top2.top2_keys(top2_kernel, c, M * N)\n")),
    "08/no_sync_after_loads.cu": (SSSP, ("    __syncthreads();\n\n    // Relax", "\n    // Relax")),
    "08/bottom_halo_not_loaded.cu": (SSSP, (
        "    if (ty == TILE - 1) d[TILE + 1][tx + 1] = (row + 1 < M && col < N) ? dist[(row + 1) * N + col] : INF;\n", "")),
    "08/stamp_not_written.cu": (SSSP, ("            stamp[by * tilesX + bx] = round;\n", "")),
    "08/every_tile_skipped.cu": (SSSP, ("if (recent < round - 1)", "if (recent < round)")),
    "09/tile_not_synced.cu": (SOLUTIONS / "wmma-tiled.cu", ("        }\n        __syncthreads();\n    }\n",
                                                           "        }\n    }\n")),
    "09/stage_released_early.cu": (WS_WGMMA, (
        "            if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % STAGES]);", "            mbarrier_arrive(&empty[s]);")),
    "09/stage_never_released.cu": (WS_WMMA, ("            mbarrier_arrive(&empty[s]);\n", "")),
    "09/no_final_wait.cu": (WS_WGMMA, ("        wgmma_wait_group(0);\n", "")),
    "09/read_before_wait.cu": (WS_WMMA, ("            mbarrier_wait_parity(&full[s], (kt / STAGES) % 2);\n", "")),
    "09/wrong_parity.cu": (WS_WMMA, ("mbarrier_wait_parity(&full[s], (kt / STAGES) % 2);",
                                     "mbarrier_wait_parity(&full[s], (kt / STAGES + 1) % 2);")),
    "09/refilled_before_released.cu": (WS_WMMA, (
        "            if (kt >= STAGES) mbarrier_wait_parity(&empty[s], (kt / STAGES - 1) % 2);\n", "")),
    "09/map_not_fenced.cu": (WS_WGMMA, ("        fence_proxy_tensormap(&b_map);\n", "")),
    "09/descriptor_stride.cu": (WS_WGMMA, ("BK * 128, 1024), kt > 0", "BK * 128, 512), kt > 0")),
    "06/bk_literal.cu": (SOLUTIONS / "warptiling.cu", ("    for (int k = 0; k < BK; ++k) {",
                                                      "    for (int k = 0; k < 8; ++k) {")),
    "06/lane_layout_literal.cu": (SOLUTIONS / "warptiling.cu", (
        "const int laneRow = lane / LC, laneCol = lane % LC;", "const int laneRow = lane / 8, laneCol = lane % 8;")),
    "06/fragments_not_read.cu": (SOLUTIONS / "warptiling.cu", (
        "*reinterpret_cast<const float4*>(&As[k][aOff + wm * WSUBM + i]);", "make_float4(0.0f, 0.0f, 0.0f, 0.0f);"), (
        "*reinterpret_cast<const float4*>(&Bs[k][bOff + wn * WSUBN + j]);", "make_float4(0.0f, 0.0f, 0.0f, 0.0f);")),
    "06/no_fragment_reload.cu": (SOLUTIONS / "warptiling.cu", (
        "        if (k > 0) load_fragments(As, Bs, k, aOff, bOff, regA, regB);\n", "")),
}


def source(file: str) -> str:
    """The mistake's source: its reference with its edits, or the function in tests/mistakes."""
    if file not in EDITS:
        return (MISTAKES / file).read_text()
    reference, *edits = EDITS[file]
    text = reference.read_text() if isinstance(reference, Path) else reference_answer(*reference)
    for old, new in edits:
        assert old in text, (file, old)
        text = text.replace(old, new, 1) if old else new + text
    return text


@dataclass(frozen=True)
class Mistake:
    file: str                   # a key of EDITS, or a file under tests/mistakes
    exercise: str
    check: str
    status: str
    said_once: tuple[str, ...] = ()     # key words of the diagnosis, each exactly once
    never: tuple[str, ...] = ()         # what would mislead
    order: tuple[str, ...] = ()         # said in this order (a picture after the configuration it shows)

    def __str__(self) -> str:
        return f"{self.file}:{self.check}"


CASES = [
    Mistake("00/block_grid_swapped.py", "pycuda-matmul", "matmul-correct", FAILED,
            said_once=("M=3 N=33000 K=5:", "swapped", "block=(1032, 1, 1)")),
    Mistake("00/c_not_copied_back.py", "pycuda-matmul", "matmul-correct", FAILED,
            said_once=("copied back", "every element of C is 0")),
    Mistake("00/b_not_converted.py", "pycuda-matmul", "matmul-float64", FAILED,
            said_once=("B went to the device as float64", "np.ascontiguousarray(B, dtype=np.float32)"),
            never=("np.ascontiguousarray(A",)),
    Mistake("01/no_bounds_check.cu", "coalesced", "correctness", FAILED,
            said_once=("a missing bounds check?",)),
    Mistake("03/blocks_per_sm_not_written.py", "blocks-per-sm", "h200-limits", FAILED,
            said_once=("your function is not written yet",), never=("raised NotImplementedError",)),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "correctness", FAILED,
            said_once=("line 84", "thread (0, 0, 0)", "misaligned", "16-byte shared read", "M=17 N=33 K=9"),
            never=("(nil)", "outside the arrays", "bounds check")),
    Mistake("04/as_stride_unpadded.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("extra shared-memory wavefronts", "BM=256 BN=64 BK=8 TM=8 TN=4:\n"),
            never=("written as a number",),
            order=("BM=64 BN=128 BK=16 TM=4 TN=8:\n", "block (0, 0, 0), warp 0", "BM=256 BN=64 BK=8 TM=8 TN=4:\n",
                   "block (0, 0, 0), warp 0 (threads 0-31")),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("breaks a vector access's alignment",), never=("written as a number",)),
    Mistake("04/as_stride_plus_1.cu", "bank-conflict-free", "races", FAILED,
            said_once=("line 84", "misaligned", "byte 4612 of the block's shared memory"), never=("0x",)),
    Mistake("04/as_stride_literal.cu", "bank-conflict-free", "bank-conflicts-configs", FAILED,
            said_once=("line 69", "thread (7, 0, 0)", "shared arrays", "BM=256 BN=64 BK=8 TM=8 TN=4:",
                       "0 load and 0 store bank conflicts"),
            never=("past the end of argument", "not inside any device allocation")),
    Mistake("03/mapping_1d.cu", "blocktile-2d", "correctness", FAILED,
            said_once=("row 16, columns 0..32 of C were never written", "a thread mapping")),
    Mistake("03/store_bound_off_by_one.cu", "blocktile-2d", "correctness", FAILED,
            said_once=("partial 128 x 128 tiles are wrong (row 256)", "the tile's edge", "a thread mapping")),
    Mistake("04/transpose_tile_not_swapped.cu", "transpose", "transpose-correctness", FAILED,
            said_once=("mirrors inside their 32 x 32 tile", "same index order")),
    Mistake("03/mapping_1d.cu", "blocktile-2d", "races", FAILED,
            said_once=("never written", "credited"), never=("race(s)",)),
    Mistake("00/gflops_no_factor_2.py", "pycuda-gflops", "gflops-formula", FAILED,
            said_once=("an FMA (multiply-add) is 2 FLOP",), never=("5286",)),      # never the 4096 question's answer
    Mistake("00/timing_not_synchronised.py", "pycuda-timing", "timing-form", FAILED,
            said_once=("call end.synchronize() before end.time_since(start)",)),
    Mistake("01/rows_cols_swapped.cu", "coalesced", "correctness", FAILED,
            said_once=("M=17 N=33 K=9: 17 of 561", "column 32 of C were never written", "a thread mapping that leaves them out?")),
    Mistake("01/rows_cols_swapped.cu", "coalesced", "coalescing", FAILED,
            said_once=("load from A: 32 sectors per warp request", "which index does threadIdx.x move?")),
    Mistake("01/k_loop_to_n.cu", "coalesced", "races", FAILED,
            said_once=("line 11", "past the end of argument 4", "a loop bound that runs past the end of an array?"),
            never=("a missing bounds check?",)),
    Mistake("01/a_row_stride_n.cu", "coalesced", "races", FAILED,
            said_once=("line 11", "past the end of argument 3", "an index or a loop bound"),
            never=("a missing bounds check?",)),
    Mistake("02/no_sync_after_loads.cu", "smem-tiling", "races", FAILED,
            said_once=("line 25 (thread (1, 0, 0))", "a missing __syncthreads()?")),
    Mistake("02/no_sync_after_products.cu", "smem-tiling", "races", FAILED,
            said_once=("line 22 (thread (0, 0, 0)) and line 26 (thread (1, 0, 0))", "a missing __syncthreads()?")),
    Mistake("02/no_zero_fill.cu", "smem-tiling", "correctness", FAILED,
            said_once=("shared memory read before it is written", "not a multiple of BK = 32",
                       "right on M=256 N=384 K=128", "a load that does not fill with zeros past K?")),
    Mistake("02/tile_loop_to_n.cu", "smem-tiling", "correctness", FAILED,
            said_once=("M=130 N=67 K=250: 8703 of 8710", "the sum over k = 0..95 only (K = 250)",
                       "the loop over k stops early")),
    Mistake("03/blocktile_1d_no_zero_fill.cu", "blocktile-1d", "correctness", FAILED,
            said_once=("not a multiple of BK = 8", "a load that does not fill with zeros past K?")),
    Mistake("03/blocktile_1d_last_tile_left_out.cu", "blocktile-1d", "correctness", FAILED,
            said_once=("the sum over k = 0..7 only (K = 9)", "the last, partial tile of K included?"),
            never=("a bound of M or N",)),
    Mistake("05/float4_always.cu", "vectorized", "alignment", FAILED,
            said_once=("K = 27 is not a multiple of 4", "C starts 4 bytes past a 16-byte boundary",
                       "take it only when K % 4 == 0")),
    Mistake("05/float4_always.cu", "vectorized", "correctness", FAILED,
            said_once=("line 52", "breaks a vector access's alignment")),
    Mistake("05/float4_b_unguarded.cu", "vectorized", "alignment", FAILED,
            said_once=("M=67 N=68 K=28, A, B, C 16-byte aligned: the kernel read memory outside the arrays",
                       "line 61", "16-byte read")),
    Mistake("05/store_into_buffer_read.cu", "double-buffering", "races", FAILED,
            said_once=("M=36 N=40 K=20", "the next tile stored into the buffer being read")),
    Mistake("05/buffer_not_toggled.cu", "double-buffering", "races", FAILED,
            said_once=("the next tile stored into the buffer being read",)),
    Mistake("05/no_sync_per_step.cu", "double-buffering", "alignment", FAILED,
            said_once=("wrong in 7 of 7 cases", "shared memory read before it is written")),
    Mistake("06/warp_row_col_swapped.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("form 2 row(s) of 4", "the warp's row and column swapped"), never=("written as a number",)),
    Mistake("07/no_sync_before_block_merge.cu", "top2", "top2-races", FAILED,
            said_once=("line 88 (thread (1, 0, 0)) and line 85", "a missing __syncthreads() between the warps' writes")),
    Mistake("07/no_sync_before_block_merge.cu", "top2", "top2-exact", FAILED, never=("second place", "not read?")),
    Mistake("07/fused_no_sync_after_loads.cu", "sgemm-top2", "sgemm-top2-races", FAILED,
            said_once=("a missing __syncthreads() after a tile's loads",)),
    Mistake("07/fused_sum_not_initialised.cu", "sgemm-top2", "sgemm-top2-exact", FAILED,
            said_once=("(a local variable never initialised",)),
    Mistake("07/fused_tile_loop_to_n.cu", "sgemm-top2", "sgemm-top2-exact", FAILED,
            said_once=("M=40 N=20 K=100: C itself is wrong", "the sum over k = 0..31 only (K = 100)")),
    Mistake("07/scalar_tail_skipped.cu", "top2", "top2-exact", FAILED,
            said_once=("1 x 2: no minimum was written", "the scalar tail not read?")),
    Mistake("07/old_minimum_not_offered.cu", "top2", "top2-exact", FAILED,
            said_once=("the minimum is right, the second larger", "must still be offered to the second")),
    Mistake("07/host_copies_c_back.py", "minimums-host", "host-transfers", FAILED,
            said_once=("M=131 N=77 K=45: 40364 bytes", "the reduction must run on the GPU")),
    Mistake("08/no_sync_after_loads.cu", "sssp", "sssp-races", FAILED,
            said_once=("between loading the tile and relaxing it",)),
    Mistake("08/no_sync_after_loads.cu", "sssp", "sssp-distances", FAILED,
            said_once=("no tile relaxed anything", "the tile read before its threads loaded it?")),
    Mistake("08/bottom_halo_not_loaded.cu", "sssp", "sssp-distances", FAILED,
            said_once=("lie on the edges of 32 x 32 tiles", "a halo cell not loaded"),
            never=("a sweep too few",)),
    Mistake("08/stamp_not_written.cu", "sssp", "sssp-distances", FAILED,
            said_once=("a stamp or last_round not written",), never=("a sweep too few",)),
    Mistake("08/every_tile_skipped.cu", "sssp", "sssp-distances", FAILED,
            said_once=("every distance but the source's is still +inf",)),
    Mistake("08/every_tile_skipped.cu", "sssp", "sssp-path", FAILED,
            said_once=("M=1 N=2 K=4, M=1 N=70 K=8", "no path came back")),
    Mistake("09/tile_not_synced.cu", "wmma-tiled", "wmma-gemm-races", FAILED,
            said_once=("race(s) on shared memory, e.g.", "(write after read) in 'gemm_wmma': line 45"),
            never=("mbarrier", "stage")),
    Mistake("09/stage_released_early.cu", "warp-specialized-wgmma", "wgmma-gemm-races", FAILED,
            said_once=("race(s) on shared memory, e.g.", "the bulk copy on line 53 (thread (256, 0, 0)) overwrites what "
                       "line 63")),
    Mistake("09/stage_never_released.cu", "warp-specialized", "tensor-gemm-correctness", FAILED,   # each phase by its waits
            said_once=("1 thread(s) wait on an mbarrier on line 46 for its phase of parity 0 (the phase in progress has "
                       "parity 0: 128 of its 128 arrival(s)", "on line 58 for its phase of parity 1 (the phase in "
                       "progress has parity 1: 1 of its 1 arrival(s)")),
    Mistake("09/no_final_wait.cu", "warp-specialized-wgmma", "wgmma-gemm-correctness", FAILED,
            said_once=("the wgmma on line 63 was still in flight when its thread ended",), never=("uninitialised",)),
    Mistake("09/read_before_wait.cu", "warp-specialized", "tensor-gemm-races", FAILED,     # most frequent race first
            said_once=("line 61 (thread (0, 0, 0)) touches what the bulk copy on line 48 (thread (128, 0, 0)) writes, "
                       "with no wait for the mbarrier phase that copy completes on",),
            order=("with no wait for the mbarrier phase", "a stage refilled before its readers released it")),
    Mistake("09/wrong_parity.cu", "warp-specialized", "tensor-gemm-correctness", FAILED,
            said_once=("the wait on line 58 asks for the phase of parity 1, which passes at once",),
            never=("ended without a wait",)),
    Mistake("09/refilled_before_released.cu", "warp-specialized", "tensor-gemm-races", FAILED,
            said_once=("a stage the producer refilled before its consumers released it?",)),
    Mistake("06/fragments_not_read.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("bank conflicts are graded on a kernel whose tiles of A and B go through shared memory",)),
    Mistake("06/no_fragment_reload.cu", "warptiling", "bank-conflicts-configs", FAILED,
            never=("written as a number", "belongs")),
    Mistake("06/bk_literal.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("differ in BN, BK,", "written as a number")),
    Mistake("06/lane_layout_literal.cu", "warptiling", "bank-conflicts-configs", FAILED,
            said_once=("differ in TM, TN", "written as a number")),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_common_mistake_gets_its_cause_said_once(case: Mistake):
    r = run_here(case.exercise, case.check, source(case.file), 1)
    text = r.message
    assert r.status == case.status, text
    for words in case.said_once:
        assert len(re.findall(re.escape(words), text)) == 1, f"{words!r} not said exactly once:\n{text}"
    for words in case.never:
        assert words not in text, f"{words!r} misleads:\n{text}"
    at = 0
    for words in case.order:
        at = text.find(words, at)
        assert at >= 0, f"not in the order {case.order}:\n{text}"


@pytest.mark.parametrize("file", ["02/printf_cstdio.cu", "02/printf_stdio_h.cu"])
def test_a_kernel_that_prints_with_printf_is_graded_and_its_output_shown(file):
    report = grader.check("smem-tiling", source(file), ["correctness"], seed=1)
    assert report.passed("correctness"), report.text()
    assert "C[0][0] = " in report["correctness"].output and "refuse" not in report.text()


def test_output_captured_by_several_checks_is_shown_once():
    log = "kernel.cu:31: warning: unused variable 'unused'"
    results = [CheckResult.make(name, True, "fine", output=log) for name in ("compiles", "correctness", "races")]
    report = CheckReport("smem-tiling", results)
    assert report.text().count("unused variable") == 1
    assert report._repr_html_().count("unused variable") == 1


def test_a_likely_cause_several_checks_meet_is_said_once():
    cause = " (a missing bounds check, or an index or a loop bound that runs past the end of an array?)"
    fault = "the kernel read memory outside the arrays{}: line 11, thread (0, 0, 0): out-of-bounds 4-byte read"
    results = [CheckResult.make(name, False, f"{shape}: " + fault.format(cause))
               for name, shape in (("races", "M=45 N=39 K=37"), ("coalescing", "M=96 N=64 K=48"))]
    report = CheckReport("coalesced", results)
    for shown in (report.text(), report._repr_html_()):
        assert shown.count(cause.strip()) == 1 and shown.count("line 11, thread (0, 0, 0)") == 2, shown
    assert report["coalescing"].message.count(cause) == 1       # each check's own message keeps it


@pytest.mark.parametrize("file, exercise, cause", [
    ("01/k_loop_to_n.cu", "coalesced", "a loop bound that runs past the end of an array?"),
    ("08/stamp_not_written.cu", "sssp", "a stamp or last_round not written"),
])
def test_the_self_check_of_a_typical_mistake_fits_on_a_screen(file, exercise, cause):
    text = grader.check(exercise, source(file), seed=1).text()
    assert text.count(cause) == 1 and len(text.splitlines()) <= 40, text


def test_a_pattern_is_suggested_only_where_it_is():
    rng = np.random.default_rng(0)
    want = rng.uniform(-1, 1, (40, 40)).astype(np.float32)
    assert wrong_patterns.transposed_in_tiles(want + 1, want) is None          # wrong everywhere, not mirrored
    bad = np.zeros((40, 40), bool)
    bad[3, 5] = bad[35, 35] = True
    assert wrong_patterns.partial_tiles_only(bad, (32, 32)) is None            # a whole tile is wrong too
    C = np.where(bad, np.float32(np.nan), want)
    assert wrong_patterns.unwritten_rectangle(C, bad) is None                 # computed NaN, not unwritten
    bad[3, :] = True
    written = np.where(bad, want + 1, want)
    C = written.copy()
    C[3, 5] = C[35, 35] = sgemm.poisoned(())                                  # two never written
    assert wrong_patterns.partly_unwritten(C, bad, (3, 0))[1].startswith("2 of the wrong elements were never written")
    assert wrong_patterns.partly_unwritten(C, bad, (3, 5)) is None            # the first shown says it itself
    assert wrong_patterns.partly_unwritten(written, bad, (3, 0)) is None      # every wrong element written


@pytest.mark.skipif(grader.BACKEND.name != "emulator", reason="the emulator's own message for a CPU fault")
def test_a_fault_the_cpu_gives_no_address_for_is_not_reported_at_nil():
    """A misaligned float4 read of shared memory, run without the analysis (as the correctness check first does)."""
    from grader.emulator.pycuda import driver
    from grader.kernels.stages import stage
    A = B = np.ones((64, 64), np.float32)
    function = sgemm.compile_kernel(stage("bank-conflict-free"), source("04/as_stride_plus_1.cu"))
    with pytest.raises(driver.LaunchError) as err:
        sgemm.run(stage("bank-conflict-free"), A, B, function)
    assert "(nil)" not in str(err.value) and "misaligned" in str(err.value), str(err.value)


@pytest.mark.skipif(grader.BACKEND.name != "emulator", reason="the emulator's pattern for a local never initialised")
def test_a_sum_never_initialised_is_named_and_not_taken_for_a_race():
    """Threads run one after another on one stack: a local would hold what the thread before left there, and the
    result would depend on the threads' order. It holds a pattern instead, which the correctness check names; the
    race check finds no race, and credits no C that is one value everywhere."""
    text = source("01/sum_not_initialised.cu")
    r = run_here("coalesced", "correctness", text, 1)
    assert not r.passed and r.message.count("a local variable never initialised") == 1, r.text()
    r = run_here("coalesced", "races", text, 1)
    assert r.status == FAILED and "C is -1.69474e+38 everywhere" in r.message and "race(s)" not in r.message


# The Hopper lab's mistakes, each with the exercise that grades it.
HOPPER = {"09/tile_not_synced.cu": "wmma-tiled", "09/read_before_wait.cu": "warp-specialized",
          "09/wrong_parity.cu": "warp-specialized", "09/refilled_before_released.cu": "warp-specialized",
          "09/stage_never_released.cu": "warp-specialized", "09/stage_released_early.cu": "warp-specialized-wgmma",
          "09/map_not_fenced.cu": "warp-specialized-wgmma", "09/descriptor_stride.cu": "warp-specialized-wgmma",
          "09/no_final_wait.cu": "warp-specialized-wgmma"}


@pytest.mark.gpu
@pytest.mark.skipif(ON_EMULATOR, reason="needs a GPU")
@pytest.mark.parametrize("file", HOPPER)
def test_on_a_gpu_a_hopper_mistake_fails_its_exercise(file, tmp_path):
    """Checked as a student checks it. The GPU's own run of a race may come out right; the checks that run on the
    emulator then catch it. Prints each check's verdict (results/nvidia-h100/hopper-mistakes.md)."""
    path = tmp_path / Path(file).name
    path.write_text(source(file))
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "grader", "check", str(path), "--exercise", HOPPER[file], "--json"],
                         capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    assert run.returncode == 1, run.stdout + run.stderr
    report = CheckReport.from_dict(json.loads(run.stdout))
    assert any(r.status == FAILED for r in report.results), report.text()
    verdicts = ", ".join(f"{r.name} {r.status}" for r in report.results)
    print(f"\n{file} ({HOPPER[file]}, {seconds:.0f} s): {verdicts}")

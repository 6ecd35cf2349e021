"""A class of lab 02 (02-smem-tiling) submissions of every kind a class hands in, for class-bench:
each kind an edit of the solved notebook's cells (by grade_id)."""
from __future__ import annotations

import shutil
from pathlib import Path

from grader.course.student import LABS

LAB, NOTEBOOK = "02-smem-tiling", "smem-tiling"
KERNEL = "smem-tiling-kernel"
BODY_START, BODY_END = "    // BEGIN SOLUTION\n", "    // END SOLUTION\n"

# One element of C per thread, no shared memory: correct, and slower than tiling.
NAIVE_BODY = """    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k)
            sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
"""
# The same with the thread's row and column swapped: neighbouring threads read rows K apart (uncoalesced).
STRIDED_BODY = NAIVE_BODY.replace("TILE + threadIdx.y", "TILE + threadIdx.X").replace(
    "TILE + threadIdx.x", "TILE + threadIdx.y").replace("threadIdx.X", "threadIdx.x")

# Notebook cells a hostile student adds (they run in the sandboxed kernel at autograde time).
LOCK_GRAB = """import fcntl, glob, os, time
taken = []
for path in glob.glob("/run/lock/grader-gpu/*") + glob.glob("/tmp/grader-gpu-locks/*"):
    try:
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken.append(path)
    except OSError as e:
        print("could not take", path, e)
print("GPU locks taken:", taken)
time.sleep(20 if backend.name == "gpu" else 2)   # the emulator times nothing
"""
GPU_HOG = """import time
import numpy as np
import pycuda.autoprimaryctx
import pycuda.driver as cuda
from pycuda import gpuarray
from pycuda.compiler import SourceModule
n = 2048 if backend.name == "gpu" else 64
hog = SourceModule(TILED_SOURCE).get_function("sgemm_smem_tiling")
a = gpuarray.to_gpu(np.ones((n, n), np.float32))
c = gpuarray.empty((n, n), np.float32)
end, launches = time.time() + 20, 0
while time.time() < end:
    hog(np.int32(n), np.int32(n), np.int32(n), a, a, c, block=(32, 32, 1), grid=(n // 32, n // 32, 1))
    cuda.Context.synchronize()
    launches += 1
print("launches while others grade:", launches)
"""


def _body(cells, body: str) -> None:
    src = cells[KERNEL].source
    start, end = src.index(BODY_START) + len(BODY_START), src.index(BODY_END)
    cells[KERNEL].source = src[:start] + body + src[end:]


def _replace(cells, old: str, new: str) -> None:
    if old not in cells[KERNEL].source:
        raise ValueError(f"the solved kernel has no {old!r}: the lab changed, change class_submissions too")
    cells[KERNEL].source = cells[KERNEL].source.replace(old, new)


def _no_bounds_check(cells):
    _replace(cells, "(row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f", "A[row * K + k0 + tx]")
    _replace(cells, "(k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f", "B[(k0 + ty) * N + col]")
    _replace(cells, "    if (row < M && col < N)\n        C[", "    C[")


def _hangs(cells):
    # A volatile alone nvcc removes; the clock is read anew each time.
    _replace(cells, "    float sum = 0.0f;\n", "    float sum = 0.0f;\n    volatile int spin = 1;\n"
             "    while (spin && clock64() >= 0) { }\n")


def _wrong_answers(cells):
    for gid, wrong in (("q-reduction", "LOAD_REDUCTION = 3"), ("q-smem", "SMEM_BYTES = 1"),
                       ("q-tiled-intensity", "AI_TILED = 1000.0")):
        cells[gid].source = wrong + "\n"


def _tamper(cells):
    _wrong_answers(cells)
    cells["q-reduction"].source += "import grader\ngrader.grade_answer = lambda *a, points=1, **k: float(points)\n"


def _cell(code: str):
    def edit(cells):
        cells[KERNEL].source += "\n" + code
    return edit


# kind -> (what it is, the edit); the class takes them in this order, again and again.
KINDS = {
    "correct": ("the reference solution", None),
    "hangs": ("a kernel that spins forever", _hangs),
    "lock-grab": ("correct; a cell tries to take every GPU lock and holds on for 20 s (2 s on the emulator)",
                  _cell(LOCK_GRAB)),
    "naive-strided": ("correct, slow: one element per thread, uncoalesced", lambda c: _body(c, STRIDED_BODY)),
    "no-bounds-check": ("wrong where M, N or K are not multiples of TILE", _no_bounds_check),
    "gpu-hog": ("correct; a cell keeps the GPU busy for 20 s with its own launches", _cell(GPU_HOG)),
    "naive": ("correct, slower: one element per thread, coalesced", lambda c: _body(c, NAIVE_BODY)),
    "wrong-answers": ("correct kernel, wrong numeric answers", _wrong_answers),
    "tamper": ("wrong answers, and a cell that patches grader.grade_answer", _tamper),
}
ORDER = ["correct", "hangs", "lock-grab", "naive-strided", "correct", "no-bounds-check", "gpu-hog", "naive",
         "correct", "wrong-answers", "tamper", "correct"]


def class_kinds(students: int) -> dict[str, str]:
    """{student: kind} for a class of this size: the kinds in ORDER, again and again."""
    return {f"s{i:02d}-{ORDER[i % len(ORDER)]}": ORDER[i % len(ORDER)] for i in range(students)}


def hand_in(course: Path, student: str, kind: str) -> None:
    """The released notebook with every answer cell solved, then the kind's edit, as submitted/STUDENT/LAB."""
    import nbformat

    def gid(cell):
        return cell.metadata.get("nbgrader", {}).get("grade_id")

    source = nbformat.read(str(LABS / LAB / f"{NOTEBOOK}.ipynb"), as_version=4)
    solved = {gid(c): c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(str(course / "release" / LAB / f"{NOTEBOOK}.ipynb"), as_version=4)
    for c in nb.cells:
        if gid(c) in solved:
            c.source = solved[gid(c)]
    edit = KINDS[kind][1]
    if edit is not None:
        edit({gid(c): c for c in nb.cells if gid(c)})
    dest = course / "submitted" / student / LAB
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    nbformat.write(nb, str(dest / f"{NOTEBOOK}.ipynb"))

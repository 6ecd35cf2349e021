"""Every reference kernel computes C = A B on non-square shapes that are not
tile multiples, every element checked against float64, output poisoned with
NaN before the launch; deliberately broken kernels must fail the same check."""
import numpy as np
import pytest

from grader.kernels import sgemm, stages

SHAPES = [(1, 1, 1), (17, 33, 9), (128, 64, 96), (257, 129, 65), (1, 70, 3), (70, 1, 130)]


@pytest.fixture(scope="module")
def kernels(cuda):
    return {}


def _kernel(kernels, stage):
    if stage.id not in kernels:
        kernels[stage.id] = sgemm.compile_kernel(stage)
    return kernels[stage.id]


@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_reference_kernel_is_correct(kernels, stage, shape, rng):
    A, B = sgemm.random_inputs(*shape, rng)
    C = sgemm.run(stage, A, B, function=_kernel(kernels, stage))
    result = sgemm.compare(C, A, B)
    assert result.ok, f"{stage.id}: {result.describe(shape)}"


def _broken(stage_id: str, old: str, new: str) -> str:
    source = stages.stage(stage_id).source()
    assert old in source, f"the broken variant no longer applies to solutions/{stage_id}.cu"
    return source.replace(old, new)


BROKEN = {
    # Both loads unchecked: the padding of the last tile is garbage times
    # garbage (with only one unchecked it is garbage times zero, which is an
    # out-of-bounds read that only the analysis catches).
    "no bounds check on the tile loads": ("smem-tiling", _broken(
        "smem-tiling",
        "Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;",
        "Bs[ty][tx] = B[(k0 + ty) * N + col];").replace(
        "As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;",
        "As[ty][tx] = A[row * K + k0 + tx];")),
    "swapped row and column": ("coalesced", _broken(
        "coalesced", "C[row * N + col] = sum;", "C[col * M + row] = sum;")),
    "result never stored for the last row": ("naive", _broken(
        "naive", "if (row < M && col < N) {", "if (row < M - 1 && col < N) {")),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_broken_kernel_fails(cuda, case, rng):
    stage_id, source = BROKEN[case]
    stage = stages.stage(stage_id)
    function = sgemm.compile_kernel(stage, source=source)
    failures = []
    for shape in [(17, 33, 9), (257, 129, 65)]:
        A, B = sgemm.random_inputs(*shape, rng)
        failures.append(not sgemm.compare(sgemm.run(stage, A, B, function=function), A, B).ok)
    assert any(failures), f"'{case}' passed the correctness check"


def test_compare_treats_nan_as_wrong():
    A = np.ones((2, 3), np.float32)
    B = np.ones((3, 2), np.float32)
    C = np.full((2, 2), 3.0, np.float32)
    assert sgemm.compare(C, A, B).ok
    C[1, 0] = np.nan
    result = sgemm.compare(C, A, B)
    assert not result.ok and result.wrong == 1 and result.first[:2] == (1, 0)

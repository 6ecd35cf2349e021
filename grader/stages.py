"""The stage table: what each stage of the course is and how it is launched.

Every kernel has the signature
    (int M, int N, int K, const float* A, const float* B, float* C)
with row-major A (M x K), B (K x N) and C (M x N); C = A B.
A stage's tile parameters are compile-time constants passed as -D options.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SOLUTIONS_DIR = Path(__file__).resolve().parent.parent / "solutions"

Dim3 = tuple[int, int, int]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Launch:
    grid: Dim3
    block: Dim3
    shared: int = 0


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    kernel: str
    launch_rule: Callable[[int, int, int, dict], Launch]
    defines: dict = field(default_factory=dict)
    bank_conflict_free: bool = False

    @property
    def source_path(self) -> Path:
        return SOLUTIONS_DIR / f"{self.id}.cu"

    def source(self) -> str:
        return self.source_path.read_text()

    def options(self, defines: dict | None = None) -> list[str]:
        return [f"-D{k}={v}" for k, v in {**self.defines, **(defines or {})}.items()]

    def launch(self, M: int, N: int, K: int, defines: dict | None = None) -> Launch:
        return self.launch_rule(M, N, K, {**self.defines, **(defines or {})})


def _one_thread_per_element_naive(M, N, K, d) -> Launch:
    return Launch(grid=(cdiv(M, 32), cdiv(N, 32), 1), block=(32, 32, 1))


def _one_thread_per_element(M, N, K, d) -> Launch:
    return Launch(grid=(cdiv(N, 32), cdiv(M, 32), 1), block=(32, 32, 1))


def _square_tile(M, N, K, d) -> Launch:
    t = d["TILE"]
    return Launch(grid=(cdiv(N, t), cdiv(M, t), 1), block=(t, t, 1))


STAGES: list[Stage] = [
    Stage("naive", "Naive: one thread per element of C", "sgemm_naive", _one_thread_per_element_naive),
    Stage("coalesced", "Global-memory coalescing", "sgemm_coalesced", _one_thread_per_element),
    Stage("smem-tiling", "Shared-memory tiling", "sgemm_smem_tiling", _square_tile, {"TILE": 32}),
]


def stage(stage_id: str) -> Stage:
    for s in STAGES:
        if s.id == stage_id:
            return s
    raise KeyError(f"no stage '{stage_id}'; stages: {', '.join(s.id for s in STAGES)}")

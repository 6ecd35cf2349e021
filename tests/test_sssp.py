"""Lab 8: shortest paths on the grid graph of C (solutions/sssp.cu) pass every
check; an SSSP that stops one sweep early fails with the expected message."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import grader
from grader.grading.checks import shortest_paths as checks
from grader.grading.protocol import Check
from grader.grading.registry import run_here
from grader.kernels import sssp, top2
from grader.kernels.host_log import recording
from grader.platform.backend import drivers

SSSP = sssp.SSSP.solution()


def test_dijkstra_convention():
    C = np.array([[1, 2], [3, 4]], np.float32)
    d = sssp.dijkstra(C, 0)
    assert d.tolist() == [[0, 2], [3, 6]]          # entering v costs C[v]; the source's own cost is not counted


@pytest.mark.parametrize("seed", [1, 2696578306])
def test_the_largest_shapes_put_both_sources_in_a_bottom_corner(seed):
    """So that distances cross tile edges upward and sideways on every seed: a kernel that never loads one
    side of its halo is wrong everywhere, not only on the seeds whose sources happen to lie low."""
    rng = np.random.default_rng(seed)
    corners = []
    for i, (M, N, K) in enumerate(checks.SHAPES):
        A, B = checks.inputs(i, rng)
        assert A.shape == (M, K) and B.shape == (K, N)
        if i in checks.PLANTED:
            (_, r1, c1), (_, r2, c2) = top2.reference_top2(A @ B, N)
            row, col = checks.PLANTED[i]
            assert r1 == M - 1 and c1 == col % N and (r2 == M - 1 or c2 == col % N), (i, r1, c1, r2, c2)
            corners.append(col % N)
    assert corners == [0, checks.SHAPES[5][1] - 1]


def test_distances_pass():
    r = run_here("sssp", "sssp-distances", SSSP, 7)
    assert r.passed, r.text()


def test_path_passes():
    r = run_here("sssp", "sssp-path", SSSP, 7)
    assert r.passed, r.text()


def test_stopping_one_sweep_early_fails():
    early = Check("sssp-distances", partial(checks.collect_distances, stop_early=True), checks.judge_distances)
    r = run_here("sssp", early, SSSP, 7)
    assert not r.passed
    assert "not converged: one more Bellman-Ford sweep still lowers" in r.message, r.message


def test_broken_path_fails():
    wrong_start = SSSP.replace("int v = target, len = 0;", "int v = target, len = 0; source = target;")
    r = run_here("sssp", "sssp-path", wrong_start, 7)
    assert not r.passed and "not at the first minimum" in r.message, r.message


def test_races_pass_and_a_missing_barrier_is_named():
    r = run_here("sssp", "sssp-races", SSSP, 7)
    assert r.passed, r.text()
    first = "    __syncthreads();\n\n    // Relax inside the tile"
    assert first in SSSP
    r = run_here("sssp", "sssp-races", SSSP.replace(first, "\n    // Relax inside the tile", 1), 7)
    assert not r.passed and "race(s) on shared memory" in r.message and "loading the tile" in r.message, r.message


def test_races_do_not_credit_a_kernel_that_computes_no_distance():
    """The relaxation kernel as handed out (an empty body) has no race, and no credit for it."""
    start = SSSP.index("{", SSSP.index("__global__ void sssp_relax("))
    end = SSSP.index("\n}\n", start)
    r = run_here("sssp", "sssp-races", SSSP[:start] + "{" + SSSP[end:], 7)
    assert not r.passed, r.text()
    assert r.message.startswith("no distance was computed (every cell but the source is still +inf): only a kernel "
                                "that computes the distances is credited with being race-free (the sssp-distances "
                                "check says what is wrong)"), r.message


def test_shortest_paths_transfers():
    rng = np.random.default_rng(1)
    A, B = top2.inputs(40, 50, 8, rng)
    with recording(drivers()[0]) as log:
        out = sssp.shortest_paths(A, B)
    M, N = 40, 50
    limit = 2 * 4 * M * N + 16 + 4 * (len(out["path"]) + 1) + 4 * (sum(out["rounds"]) + 2)
    assert 0 < sum(e.nbytes for e in log.of("dtoh")) <= limit


def test_check_isolated_report():
    report = grader.check("sssp", SSSP, checks=["sssp-path"], seed=3)
    assert report.passed("sssp-path"), report.text()

"""What the pattern of wrong elements in an output suggests, worded as a suggestion: said only when the
pattern is there (a wrong hint costs more than none). Each returns (kind, text) or None; a check says
each kind once, for the first shape it fits (`once`)."""
from __future__ import annotations

import numpy as np

from grader.kernels.sgemm import never_written, tolerance


def _span(lo: int, hi: int, word: str) -> str:
    return f"{word} {lo}" if lo == hi else f"{word}s {lo}..{hi}"


def once(hints, said: set) -> list[str]:
    """The texts of the hints (kind, text) whose kind is not in `said` yet; their kinds are added to it."""
    new = [(kind, text) for kind, text in (h for h in hints if h) if kind not in said]
    said.update(kind for kind, _ in new)
    return [text for _, text in new]


def appended(texts: list[str]) -> str:
    """Hint texts as they follow a wrong element: a value's note in parentheses, a likely cause after " - "."""
    return "".join(t if t.startswith(" (") else f" - {t}" for t in texts)


def partial_tiles_only(bad: np.ndarray, tile: tuple[int, int]) -> tuple[str, str] | None:
    """Only elements in the last, partial tiles (of `tile` = (rows, columns)) are wrong, while whole tiles
    exist and are right."""
    M, N = bad.shape
    full_r, full_c = M - M % tile[0], N - N % tile[1]
    if not full_r or not full_c or (full_r == M and full_c == N) or bad[:full_r, :full_c].any():
        return None
    edges = ([_span(full_r, M - 1, "row")] if bad[full_r:, :full_c].any() else []) + \
            ([_span(full_c, N - 1, "column")] if bad[:full_r, full_c:].any() else [])
    where = " and ".join(edges) or f"rows {full_r}.., columns {full_c}.."
    return "partial tiles", (f"only the last, partial {tile[0]} x {tile[1]} tiles are wrong ({where}), the whole tiles right: the "
            "tile's edge - a bounds check, or a load that does not fill with zeros past the end of the matrix?")


def unwritten_rectangle(values: np.ndarray, bad: np.ndarray, name: str = "C") -> tuple[str, str] | None:
    """The wrong elements are exactly a rectangle, never written, and not the whole output."""
    if not bad.any() or bad.all() or not never_written(values[bad]).all():
        return None
    rows, cols = np.flatnonzero(bad.any(axis=1)), np.flatnonzero(bad.any(axis=0))
    r0, r1, c0, c1 = int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])
    if not bad[r0:r1 + 1, c0:c1 + 1].all() or int(bad.sum()) != (r1 - r0 + 1) * (c1 - c0 + 1):
        return None
    return "unwritten rectangle", (f"{_span(r0, r1, 'row')}, {_span(c0, c1, 'column')} of {name} were never written, the rest right: no "
            "thread writes there (a bounds check, or a thread mapping that leaves them out?)")


def partly_unwritten(values: np.ndarray, bad: np.ndarray, first: tuple[int, int], name: str = "C") \
        -> tuple[str, str] | None:
    """The first wrong element was written, and others never were: said, since its value suggests otherwise."""
    unwritten = int((never_written(values) & bad).sum())
    if not unwritten or never_written(values[first]):
        return None
    return "partly unwritten", (f"{unwritten} of the wrong elements were never written (they still hold the NaN "
                                f"{name} was poisoned with before the launch)")


def transposed_in_tiles(out: np.ndarray, want: np.ndarray, tile: int = 32) -> tuple[str, str] | None:
    """Every wrong element holds what its mirror within its own tile should: each tile transposed twice."""
    rows, cols = want.shape
    r, c = np.indices(want.shape)
    base_r, base_c = r - r % tile, c - c % tile
    mr, mc = base_r + (c - base_c), base_c + (r - base_r)
    inside = (mr < rows) & (mc < cols)
    bad = want.view(np.uint32) != out.view(np.uint32)
    mirrored = want[np.where(inside, mr, 0), np.where(inside, mc, 0)]
    checked = bad & inside            # a mirror outside the matrix (a partial tile) shows nothing
    if not bad.any() or 2 * int(checked.sum()) < int(bad.sum()) or \
            not (mirrored.view(np.uint32)[checked] == out.view(np.uint32)[checked]).all():
        return None
    return "mirrored in tiles", (f"the wrong elements hold the values of their mirrors inside their {tile} x {tile} tile (row and column "
            "swapped there): the shared tile written and read with the same index order?")


def sum_stops_early(C: np.ndarray, A: np.ndarray, B: np.ndarray, bad: np.ndarray) -> tuple[str, str] | None:
    """Every wrong element of C = A B is the sum over k < k' only, for one k' < K: the loop over k stopped early."""
    K = A.shape[1]
    if not bad.any() or not np.isfinite(C[bad]).all() or bad.size * K > 20_000_000:
        return None
    a, b = A[bad.any(axis=1)].astype(np.float64), B[:, bad.any(axis=0)].astype(np.float64)
    sub_bad, got = bad[np.ix_(bad.any(axis=1), bad.any(axis=0))], C[np.ix_(bad.any(axis=1), bad.any(axis=0))]
    partial, size = np.zeros(sub_bad.shape), np.zeros(sub_bad.shape)
    for k in range(K - 1):
        partial += np.outer(a[:, k], b[k])
        size += np.abs(np.outer(a[:, k], b[k]))
        if (np.abs(got - partial)[sub_bad] <= tolerance(size, K)[sub_bad]).all():
            return "sum stops early", (f"the wrong elements are the sum over k = 0..{k} only (K = {K}): the loop over "
                                       "k stops early (its bound: K, and the last, partial tile of K included?)")
    return None


def partial_k_tiles(shapes: list[tuple[int, int, int]], wrong: list[bool], bk: int) -> str | None:
    """C is wrong on exactly the shapes whose K is not a multiple of the tile's depth `bk`."""
    partial = [K % bk != 0 for _, _, K in shapes]
    if all(partial) or not any(partial) or partial != wrong:
        return None
    right = ", ".join(f"M={M} N={N} K={K}" for (M, N, K), p in zip(shapes, partial) if not p)
    return (f"wrong on every shape whose K is not a multiple of BK = {bk}, right on {right}: the last, partial tile "
            "of K - a load that does not fill with zeros past K?")

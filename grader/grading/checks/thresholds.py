"""Performance thresholds: thresholds.json (beside this module) merged with
instructor overrides (the setting GRADER_THRESHOLDS, a JSON file with the
same layout holding only the keys it changes, or a dict passed in)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grader.platform import settings

DEFAULT_PATH = Path(__file__).resolve().parent / "thresholds.json"


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load(overrides: dict | str | Path | None = None, path: str | Path | None = None) -> dict:
    """The merged table: defaults, then the GRADER_THRESHOLDS setting's file, then `overrides`."""
    table = json.loads(Path(path or DEFAULT_PATH).read_text())
    for extra in (settings.current().thresholds, overrides):
        if extra is None:
            continue
        if not isinstance(extra, dict):
            extra = json.loads(Path(extra).read_text())
        table = _merge(table, extra)
    return table


@dataclass(frozen=True)
class Threshold:
    stage: str
    size: tuple[int, int, int]
    fraction_of_cublas: float | None
    fraction_of_previous: float | None
    previous: str | None
    partial_credit_from: float

    def describe(self) -> str:
        if self.fraction_of_previous is not None:
            return f">= {self.fraction_of_previous:g} x the '{self.previous}' reference kernel"
        return f">= {self.fraction_of_cublas:g} x cuBLAS"


def for_stage(stage_id: str, table: dict | None = None) -> Threshold:
    table = table if table is not None else load()
    entry = table.get("stages", {}).get(stage_id)
    if entry is None:
        raise KeyError(f"no performance threshold for stage '{stage_id}' in thresholds.json")
    size = tuple(int(x) for x in entry.get("size", table.get("default_size", [4096] * 3)))
    if len(size) != 3:
        raise ValueError(f"size for '{stage_id}' must be [M, N, K], not {size}")
    frac = entry.get("min_fraction_of_cublas")
    prev_frac = entry.get("min_fraction_of_previous")
    if (frac is None) == (prev_frac is None):
        raise ValueError(f"stage '{stage_id}': give exactly one of min_fraction_of_cublas, "
                         "min_fraction_of_previous")
    if prev_frac is not None and not entry.get("previous"):
        raise ValueError(f"stage '{stage_id}': min_fraction_of_previous needs 'previous'")
    return Threshold(stage_id, size, None if frac is None else float(frac),
                     None if prev_frac is None else float(prev_frac), entry.get("previous"),
                     float(entry.get("partial_credit_from", table.get("partial_credit_from", 1.0))))

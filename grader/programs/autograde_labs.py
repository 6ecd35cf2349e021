"""python -m grader autograde-labs [--labs 00-pycuda-by-hand,...] [--out DIR]

Every lab's reference submission (its source notebook) through nbgrader's own
generate_assignment and autograde, in a scratch course: the score against the
lab's total, the cells that lost points, and the seconds autograde took. On a
GPU the reference must get every point, performance included; without one,
every point but performance (README, "Grading")."""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from grader.course.student import LABS, labs, scratch_course, succeeded
from grader.platform.backend import current
from grader.programs.recorded_command import recorded_command


def autograde_reference(lab: str) -> dict:
    """{lab, score, max, seconds, lost: {cell: (score, max)}} for the lab's reference."""
    from nbgrader.api import Gradebook
    with scratch_course(lab) as (course, api):
        succeeded(api.generate_assignment(lab, force=True), f"{lab}: generate_assignment")
        submitted = course / "submitted" / "reference" / lab
        submitted.mkdir(parents=True)
        for nb in (LABS / lab).glob("*.ipynb"):
            shutil.copy(nb, submitted / nb.name)
        t0 = time.perf_counter()
        succeeded(api.autograde(lab, "reference", force=True), f"{lab}: autograde")
        seconds = time.perf_counter() - t0
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="sgemm-lab") as gb:
            sub = gb.find_submission(lab, "reference")
            lost = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades
                    if g.score < g.max_score}
            return {"lab": lab, "score": sub.score, "max": sub.max_score, "seconds": seconds, "lost": lost}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader autograde-labs", description=__doc__.split("\n\n")[0])
    p.add_argument("--labs", default="", help="lab folders, comma-separated (default: all)")
    p.add_argument("--out", default=None, help="write autograde-labs.md there")
    args = p.parse_args(argv)
    chosen = [x for x in args.labs.split(",") if x] or labs()
    rows = ["| lab | score | autograde seconds | cells that lost points |", "|---|---|---|---|"]
    for lab in chosen:
        r = autograde_reference(lab)
        lost = ", ".join(f"{name} {s:g}/{m:g}" for name, (s, m) in sorted(r["lost"].items())) or "none"
        rows.append(f"| {lab} | {r['score']:g} / {r['max']:g} | {r['seconds']:.1f} | {lost} |")
        print(rows[-1], flush=True)
    backend = current()
    command = recorded_command("autograde-labs", sys.argv[1:] if argv is None else argv,
                               on_gpu=backend.name == "gpu")
    text = (f"# Autograde of every lab's reference submission\n\n"
            f"Command (from the repository root, with the course's `instructor` extra installed): `{command}`\n\n"
            f"Backend: {backend}, {time.strftime('%Y-%m-%d')}. Each graded cell is graded from the notebook's "
            "text in a sandboxed grading process; on a GPU every timed run of a performance check is on fresh "
            "inputs and checked.\n\n" + "\n".join(rows) + "\n")
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "autograde-labs.md").write_text(text)
    return 0


"""What the grader hands back: one CheckResult per check, gathered in a
CheckReport (what grader.check returns; not the emulator's analysis report).

A CheckResult is plain data (it crosses process boundaries as JSON, see
grader.grading.isolation); a CheckReport renders as HTML in Jupyter and as text
elsewhere, and turns a check's result into nbgrader points.
"""
from __future__ import annotations

import base64
import html as _html
import io
import re
from dataclasses import asdict, dataclass, field

PASSED, FAILED, NOT_GRADED = "passed", "failed", "not graded"
# The grader itself failed (it could not start a grading process, import what it needs, or
# make its sandbox): the check scores nothing, and a person must look; never the student's fault.
GRADER_ERROR = "grader error"
STATUSES = (PASSED, FAILED, NOT_GRADED, GRADER_ERROR)


@dataclass
class CheckResult:
    name: str                     # "correctness", "races", "bank-conflicts", "performance", ...
    status: str                   # passed / failed / not graded / grader error
    message: str = ""             # the diagnosis, plain text
    points: float = 0.0           # earned, out of max_points
    max_points: float = 1.0
    html: str | None = None       # optional extra HTML (tables, an embedded heatmap)
    figure: str | None = None     # optional PNG, base64
    details: dict = field(default_factory=dict)   # numbers for programs (gflops, ratio, seed, ...)
    output: str = ""              # what the kernel or compiler printed, captured

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def fraction(self) -> float:
        """Earned share of the check's points, 0..1 (0 when not graded)."""
        if self.status in (NOT_GRADED, GRADER_ERROR) or not self.max_points:
            return 0.0
        return max(0.0, min(1.0, self.points / self.max_points))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CheckResult":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def grader_error(cls, name: str, why: str, output: str = "") -> "CheckResult":
        """The grader failed, not the submission: said so, 0 points, for a person to look at."""
        return cls(name, GRADER_ERROR, f"grader error: {why}; this is not your code's fault (tell your "
                   "instructor)", 0.0, details={"grader_error": True}, output=output)

    @classmethod
    def make(cls, name: str, ok: bool, message: str, **kw) -> "CheckResult":
        """passed with full points, or failed with none."""
        return cls(name, PASSED if ok else FAILED, message, points=1.0 if ok else 0.0, **kw)

    def text(self, output: bool = True, message: str | None = None) -> str:
        """The result as text; `output`: with the captured output; `message`: in place of its own."""
        mark = {PASSED: "PASS", FAILED: "FAIL", NOT_GRADED: "----", GRADER_ERROR: "ERR!"}[self.status]
        head = f"[{mark}] {self.name}: {self.status}"
        body = "\n".join("    " + line for line in (self.message if message is None else message).splitlines())
        out = head + ("\n" + body if body else "")
        if output and self.output.strip():
            out += "\n    captured output:\n" + "\n".join("      " + ln for ln in self.output.strip().splitlines()[:40])
        return out


_COLORS = {PASSED: "#1a7f37", FAILED: "#cf222e", NOT_GRADED: "#6e7781", GRADER_ERROR: "#9a6700"}


class CheckReport:
    """The results of grader.check(exercise, submission) for one submission."""

    def __init__(self, exercise: str, results: list[CheckResult], backend: str = ""):
        self.exercise = exercise
        self.results = list(results)
        self.backend = backend
        seeds = {r.details.get("seed") for r in self.results} - {None}
        self.seed = seeds.pop() if len(seeds) == 1 else None     # the seed to rerun with, when there is one

    # -- access
    def __getitem__(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"no check '{name}' in this report (checks: {', '.join(r.name for r in self.results)})")

    def __iter__(self):
        return iter(self.results)

    def passed(self, name: str | None = None) -> bool:
        """True when the named check passed (or, without a name, when every
        graded check passed and none failed)."""
        if name is not None:
            return self[name].passed
        return all(r.status not in (FAILED, GRADER_ERROR) for r in self.results)

    @property
    def grader_failed(self) -> bool:
        """A check could not be run because the grader failed (not the submission)."""
        return any(r.status == GRADER_ERROR for r in self.results)

    @property
    def ok(self) -> bool:
        return self.passed()

    def points(self, name: str, out_of: float) -> float:
        """nbgrader partial credit: the named check's share of `out_of` points,
        as a float (a test cell ending in this expression scores that much)."""
        return round(float(out_of) * self[name].fraction, 3)

    def grade_cell(self, name: str, out_of: float) -> float:
        """What an nbgrader test cell does with one check: print its diagnosis
        (stdout, never stderr) and return the points earned."""
        print(self.cell_text(name))
        return self.points(name, out_of)

    def cell_text(self, name: str) -> str:
        """One check's diagnosis, with the seed to rerun it (once: most messages already name it)."""
        text = self[name].text()
        if self.seed is not None and f"seed {self.seed}" not in text:
            text += f"\n(random seed {self.seed})"
        return text

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "backend": self.backend, "seed": self.seed,
                "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, d: dict) -> "CheckReport":
        """The report that to_dict (or `python -m grader check --json`) wrote."""
        return cls(d["exercise"], [CheckResult.from_dict(r) for r in d["results"]], d.get("backend", ""))

    # -- rendering
    def text(self) -> str:
        head = f"grader.check('{self.exercise}') on the {self.backend or 'current backend'}"
        if self.seed is not None:
            head += f", random seed {self.seed}"
        shown = _first_outputs(self.results)
        return "\n".join([head] + [r.text(output=i in shown, message=m)
                                  for i, (r, m) in enumerate(zip(self.results, _asides_once(self.results)))])

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        e = _html.escape
        rows = []
        shown = _first_outputs(self.results)
        for i, (r, message) in enumerate(zip(self.results, _asides_once(self.results))):
            color = _COLORS[r.status]
            msg = e(message).replace("\n", "<br>")
            extra = r.html or ""
            if r.figure:
                extra += f'<br><img alt="{e(r.name)}" src="data:image/png;base64,{r.figure}">'
            if i in shown:
                extra += ("<details><summary>captured output</summary><pre>"
                          f"{e(r.output.strip()[:4000])}</pre></details>")
            rows.append(
                f'<tr><td style="text-align:left;font-weight:bold">{e(r.name)}</td>'
                f'<td style="text-align:left;color:{color};font-weight:bold">{e(r.status)}</td>'
                f'<td style="text-align:left">{msg}{extra}</td></tr>')
        title = f"grader.check('{e(self.exercise)}') on the {e(self.backend or 'current backend')}"
        if self.seed is not None:
            title += f" &mdash; random seed {self.seed}"
        return (f'<div class="sgemm-grader"><p><b>{title}</b></p>'
                '<table><thead><tr><th style="text-align:left">check</th><th style="text-align:left">status'
                '</th><th style="text-align:left">diagnosis</th></tr></thead><tbody>'
                + "".join(rows) + "</tbody></table></div>")


# A parenthesis of a diagnosis long enough to be a hint or an explanation, not a value: "(a missing bounds check?)".
_ASIDE = re.compile(r" \([^()\n]{24,}\)")


def _asides_once(results: list[CheckResult]) -> list[str]:
    """The messages, each long parenthesis said in an earlier check's message left out (a fault that several
    checks meet has its likely cause said once)."""
    said: set[str] = set()
    messages = []
    for r in results:
        asides = set(_ASIDE.findall(r.message))
        messages.append(_ASIDE.sub(lambda m: "" if m.group(0) in said else m.group(0), r.message))
        said |= asides
    return messages


def _first_outputs(results: list[CheckResult]) -> set[int]:
    """The indices of the results whose captured output is shown: the first of each different one (the same
    compiler log is captured by every check that compiles the source)."""
    seen, shown = set(), set()
    for i, r in enumerate(results):
        text = r.output.strip()
        if text and text not in seen:
            seen.add(text)
            shown.add(i)
    return shown


def png_base64(fig) -> str:
    """A matplotlib Figure as base64 PNG (Agg canvas, no pyplot, nothing printed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: only when there is a figure
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")

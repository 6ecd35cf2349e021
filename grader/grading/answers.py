"""The grader's answers (the modules of grader/references), where this copy of the course holds them.

The instructor's course does; the student distribution (python -m grader publish) does not, so that no
answer travels with the self-checks. A check that needs them (Check.needs_answers) says there that it is
graded when the work is submitted, and never passes."""
from __future__ import annotations

import importlib
import importlib.util

GRADED_WHEN_SUBMITTED = ("graded when you submit: this check compares with the course's own answers, which are "
                         "not part of your copy of the course")


def available() -> bool:
    return importlib.util.find_spec("grader.references") is not None


def module(name: str):
    """grader.references.<name> (ModuleNotFoundError where this copy of the course holds no answers)."""
    return importlib.import_module(f"grader.references.{name}")

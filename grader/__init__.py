"""The SGEMM teaching lab's grader.

Importing it does nothing but define the front-end (grader.grading.frontend):

    grader.use_backend()                                   choose where kernels run, once, and say so
    grader.check(exercise, submission, checks=None, ...)   every check, a CheckReport
    grader.grade(exercise, submission, check, points)      one hidden test cell: the points earned
    grader.grade_answer(value, expected, points, rtol=...) a numeric question: the points earned
    grader.sanity_check(value, low, high, unit)            a numeric question's visible check (prints)

The backend is chosen when it is first needed (a compile, a check, or
use_backend()); then plain PyCUDA code runs either on the GPU or on the CPU
emulator. `grader.BACKEND` is that choice (reading it makes it).
"""
from grader.grading.frontend import check, grade, grade_answer, sanity_check, use_backend
from grader.platform.backend import current as _current_backend

__all__ = ["check", "grade", "grade_answer", "sanity_check", "use_backend", "BACKEND"]


def __getattr__(name: str):
    if name == "BACKEND":                 # lazily: reading it chooses the backend (without announcing it)
        return _current_backend()
    raise AttributeError(f"module 'grader' has no attribute '{name}'")

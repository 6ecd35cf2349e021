"""The SGEMM teaching lab's grader.

Importing it picks the backend (see grader.backend): after `import grader`,
plain PyCUDA code runs either on the GPU or on the CPU emulator.
"""
from . import backend as _backend

BACKEND = _backend.select()
_backend.announce(BACKEND)
from .notebook import check, grade  # noqa: E402,F401  (grader.check(stage_id, KERNEL_SOURCE) in notebooks)
from .graph import check_graph, check_host_minimums, grade_graph  # noqa: E402,F401  (labs 3 and 4)

"""The course's nbgrader preprocessors, one per module (named in nbgrader_config.py).

Release: ClearCudaSolutions. Autograde trusts nothing a notebook's cells do: SandboxedExecute runs
them in the sandbox of student code, GradeFromSource then grades every test cell from the notebook's
text, SaveAutoGrades flags what it could not grade for a person. Feedback: HideTestErrors."""
from grader.course.preprocessors.clear_cuda_solutions import ClearCudaSolutions, answer_stub
from grader.course.preprocessors.grade_from_source import GradeFromSource
from grader.course.preprocessors.hide_test_errors import HideTestErrors
from grader.course.preprocessors.sandboxed_execute import SandboxedExecute, SandboxedKernelManager, protect_course
from grader.course.preprocessors.save_auto_grades import SaveAutoGrades

__all__ = ["ClearCudaSolutions", "GradeFromSource", "HideTestErrors", "SandboxedExecute", "SandboxedKernelManager",
           "SaveAutoGrades", "answer_stub", "protect_course"]

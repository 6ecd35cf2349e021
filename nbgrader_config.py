"""nbgrader configuration for the SGEMM labs (course root: this directory).

Source notebooks live in labs/<assignment>/, edited directly (JupyterLab or Create Assignment).
Grading needs a GPU for the performance points; see README ("Grading").
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

c = get_config()  # noqa: F821  (nbgrader provides it)

c.CourseDirectory.source_directory = "labs"
c.CourseDirectory.course_id = "sgemm-lab"

# Written out: ClearSolutions replaced by the CUDA-aware one (grader/course/preprocessors/).
c.GenerateAssignment.preprocessors = [
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.InstantiateTests",
    "nbgrader.preprocessors.LockCells",
    "grader.course.preprocessors.ClearCudaSolutions",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.SaveCells",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Autograde trusts nothing the notebook's cells do (grader/course/preprocessors/): they run in a sandboxed
# kernel, and every test cell is graded again from the notebook's text before the grades are saved.
c.Autograde.autograde_preprocessors = [
    "grader.course.preprocessors.SandboxedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "grader.course.preprocessors.GradeFromSource",
    "nbgrader.preprocessors.LimitOutput",
    "grader.course.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Students must not see the hidden tests in their feedback, nor a failed test's traceback (it shows them).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "grader.course.preprocessors.HideTestErrors",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# Seconds per cell at autograde time. Nothing is graded inside the notebook then (the checks, timing
# included, run in GradeFromSource), so a cell only runs the student's own code: a cell that hangs costs
# this much and its output, never its grade.
c.Execute.timeout = 30
c.Execute.raise_on_iopub_timeout = False   # a busy cell runs to its time limit, then the next one
c.Execute.kernel_name = "python3"

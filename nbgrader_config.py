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

# Written out: ClearSolutions replaced by the CUDA-aware one (grader/nbgrader_ext.py).
c.GenerateAssignment.preprocessors = [
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.InstantiateTests",
    "nbgrader.preprocessors.LockCells",
    "grader.nbgrader_ext.ClearCudaSolutions",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.SaveCells",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Students must not see the hidden tests in their feedback, nor a failed test's traceback (it shows them).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "grader.nbgrader_ext.HideTestErrors",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# One cell may compile a kernel, check it on several shapes and time it against
# cuBLAS (median of >= 20 runs at 4096^3 for the slowest kernels): minutes, not 30 s.
c.Execute.timeout = 900
c.Execute.kernel_name = "python3"

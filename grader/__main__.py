"""python -m grader COMMAND ...

Students and instructors:
  check FILE --exercise ID [--checks a,b] [--seed N] [--json]   grade a .cu file or a notebook's kernel
  predict FILE --exercise ID [--gpu NAME] [--json]           its GFLOPS on the H200, predicted without a GPU
  student LAB [--to DIR] [--force]                           a student's copy of a lab (student/LAB/)
  autograde COURSE_DIR ASSIGNMENT [--workers N] [--gpus LIST] [--slurm ...]
                                                             nbgrader's autograde of a whole class, in parallel
  regrade COURSE_DIR ASSIGNMENT [--differences] [--student ID]
                                                             grade again from the cells' text; list what differs
  publish OUT [--url URL] [--github OWNER/REPO]              the course as students get it, without its answers
Maintainers (results/ records what they print):
  bench            every reference stage through the grader: GFLOPS against cuBLAS on a GPU
  bench-graphs     labs 7 and 8 (top-2, shortest paths) against their baselines
  tensor-bench     the Hopper lab's tensor-core GEMMs against cuBLAS's BF16 GEMM on a GPU
  autotune         choose the warptiling kernel's configurations for the GPU at hand
  autograde-labs   every lab's reference through nbgrader, timed
  class-bench      a class of lab 02 graded serially and by workers sharing one GPU: times, scores, ratios
  emulator-bench   the emulator's speed against numba's CUDA simulator
  emulator-validate  the emulator's analysis against Nsight Compute and compute-sanitizer (GPU)
  emulator-compat  PyCUDA's own tests and examples on the emulator

Each command takes --help. Exit status: 0 when everything passed, 1 when something failed, 2 for a wrong
command line, 3 when the grader itself failed.
"""
import importlib
import sys

COMMANDS = {
    "check": "grader.programs.check",
    "predict": "grader.programs.predict",
    "student": "grader.course.student",
    "autograde": "grader.course.class_autograde",
    "regrade": "grader.course.regrade",
    "publish": "grader.course.publish",
    "bench": "grader.programs.bench",
    "bench-graphs": "grader.programs.bench_graphs",
    "tensor-bench": "grader.programs.tensor_bench",
    "autotune": "grader.programs.autotune",
    "autograde-labs": "grader.programs.autograde_labs",
    "class-bench": "grader.programs.class_bench",
    "emulator-bench": "grader.programs.emulator_bench",
    "emulator-validate": "grader.programs.emulator_validate",
    "emulator-compat": "grader.programs.emulator_compat",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"unknown command '{command}'\n{__doc__}")
        return 2
    # Only the command asked for is imported (bench pulls in the timing code, autograde nbgrader).
    try:
        program = importlib.import_module(COMMANDS[command])
    except ModuleNotFoundError as e:
        if e.name != COMMANDS[command]:
            raise
        print(f"'{command}' is the instructor's: it is not part of this copy of the course")
        return 2
    return program.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

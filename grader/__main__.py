"""python -m grader COMMAND ...

  bench    every reference stage through the grader: the stage table, with
           GFLOPS against cuBLAS on a GPU, correctness only on the emulator
  check    FILE --exercise ID [--checks a,b] [--seed N] [--json]: grade a .cu file or a
           notebook's kernel (each check in its own process); exit 1 when a check fails
  student  LAB [--to DIR] [--force]: a student's copy of a lab (student/LAB/), to
           open in JupyterLab
  regrade  COURSE_DIR ASSIGNMENT [--differences] [--student ID]: grade nbgrader
           submissions again from their cells' text, in clean processes, and list
           every score that differs from the gradebook; exit 1 when any differs
  autograde COURSE_DIR ASSIGNMENT [--workers N] [--gpus LIST] [--slurm ...]: nbgrader's
           autograde of every submission, in parallel (one worker per GPU, or CPU
           workers, or a Slurm job array), into one gradebook; only what is new or
           changed; a summary (CSV too); exit 1 when a submission failed
"""
import sys

from grader.course.class_autograde import main as autograde
from grader.course.regrade import main as regrade
from grader.course.student import main as student
from grader.grading.frontend import use_backend
from grader.programs.bench import main as bench
from grader.programs.check import main as check


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    # Each command's module is imported when it is the one asked for (bench pulls in the timing code).
    if command == "bench":
        use_backend()
        return bench(rest)
    if command == "check":
        return check(rest)
    if command == "student":
        return student(rest)
    if command == "regrade":
        return regrade(rest)
    if command == "autograde":
        return autograde(rest)
    print(f"unknown command '{command}'\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

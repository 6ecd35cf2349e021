"""Run a PyCUDA script on the emulator.

    python -m grader.emulator SCRIPT [ARGS...]
    python -m grader.emulator --analyze SCRIPT [ARGS...]   # then print bank conflicts, global-memory
                                                          # sectors per request, races, bad accesses
"""
import runpy
import sys

from . import analyze, install


def main(argv: list[str]) -> int:
    analysing = bool(argv) and argv[0] == "--analyze"
    argv = argv[1:] if analysing else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    install(contexts_like_a_gpu=True)
    sys.argv = argv
    if not analysing:
        runpy.run_path(argv[0], run_name="__main__")
        return 0
    with analyze() as report:
        try:
            runpy.run_path(argv[0], run_name="__main__")
        finally:
            print("\n== emulator analysis ==")
            print(report)
    return 1 if report.races or report.out_of_bounds else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

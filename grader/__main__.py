"""python -m grader COMMAND ...

  bench    every reference stage through the grader: the stage table, with
           GFLOPS against cuBLAS on a GPU, correctness only on the emulator
"""
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "bench":
        from .bench import main as bench
        return bench(rest)
    print(f"unknown command '{command}'\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

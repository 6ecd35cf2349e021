"""Reading a notebook's values from its text (grader.course.static_values) is bounded in
the grader's own process: every value in size, every cell in what is parsed; a bound
that is hit says which value and why, and ordinary values are still read exactly."""
from __future__ import annotations

import time
import tracemalloc

import pytest

from grader.course import static_values as sv

TOO_LARGE = [
    ("round(5, -2 * 10**7)", "round"),
    ("round(5, -3 * 10**7)", "round"),
    ("round(5.0, 10**9)", "round"),
    ("10**400", "power"),
    ("(2**60)**30", "power"),
    ("2**1000", "power"),
    ("int('9' * 400) * int('9' * 400)", "bits"),
    ("int('9' * 4000)", "bits"),
    ("'a' * 10**7", "characters"),
    ("('a' * 900_000,) * 2", "characters"),
    ("'%.900000f%.900000f' % (1.0, 2.0)", "characters"),
    ("'{0}{0}{0}{0}'.format('a' * 300_000)", "characters"),
    ("'{:>999999}{:>999999}'.format(1, 2)", "characters"),
    ("'-'.join(('a' * 600_000, 'b' * 600_000))", "characters"),
    ("'ab' * 400_000 + 'c' * 300_000", "characters"),
    ("('a' * 400_000).replace('a', 'bcd')", "characters"),
    ("-" * 150 + "1", "nested"),
    ("[" * 150 + "1" + "]" * 150, "nested"),
    ("(" + "1, " * 30_000 + ")", "parts"),
]


@pytest.mark.parametrize("expr, why", TOO_LARGE)
def test_a_value_past_the_bounds_is_too_large_to_grade(expr, why):
    start = time.thread_time()   # this thread's CPU time: neither a busy machine nor another thread inflates it
    values = sv.read_values([f"X = {expr}\nY = 42\n"])
    assert time.thread_time() - start < 2, expr
    assert "X" not in values.values and values.values["Y"] == 42
    reason = values.unknown["X"]
    assert reason.startswith("the value of X is too large to grade from the text"), reason
    assert why in reason, reason


def test_values_built_from_other_bounded_values_are_bounded_too():
    cells = ["S = 'a' * 300_000\nT = (S,) * 3\nU = (T,) * 1000\n",
             "V = str(U)\nW = f'{S}{S}{S}{S}'\nZ = f'{T!r}{T!r}'\n"]
    values = sv.read_values(cells)
    assert len(values.values["S"]) == 300_000 and len(values.values["T"]) == 3
    for name in ("U", "W", "Z"):
        assert "too large to grade" in values.unknown[name], (name, values.unknown)
    assert values.unknown["V"] == "name 'U' has no static value"


@pytest.mark.parametrize("expr", ["'%*d' % (5, 1)", "'{:{}}'.format(1, 5)", "'{0.real}'.format(1)"])
def test_a_width_that_is_not_a_literal_is_not_static(expr):
    values = sv.read_values([f"X = {expr}\n"])
    assert "X" not in values.values and "too large" not in values.unknown["X"]


def test_ordinary_values_are_read_exactly():
    exprs = ["'%d x %d = %5.2f' % (3, 4, 12.0)", "'{} and {:>6}'.format('a', 'b')", "f'{3:04d}-{\"x\"!r}'",
             "'\\n'.join(('a', 'b', 'c'))", "2**64 - 1", "round(2.675, 2)", "round(123456, -3)",
             "-(7 // 2) + 10 % 4", "('%s' % 'k') * 3", "max(1, 2.5)", "'  pad '.strip().upper()"]
    values = sv.read_values([f"X{i} = {e}" for i, e in enumerate(exprs)])
    for i, e in enumerate(exprs):
        assert values.values[f"X{i}"] == eval(e), e


def test_a_kernel_source_built_with_format_is_read():
    cell = ('BODY = "C[i] = A[i] + B[i];"\n'
            'KERNEL = """\n__global__ void add(const float* A, const float* B, float* C)\n{\n'
            '    int i = blockIdx.x * %d + threadIdx.x;\n    %s\n}\n""" % (256, BODY)\n')
    src = sv.read_values([cell]).values["KERNEL"]
    assert "blockIdx.x * 256 + threadIdx.x" in src and "C[i] = A[i] + B[i];" in src


def test_cells_past_the_bounds_are_not_parsed_and_say_why():
    huge = "BIG = '" + "a" * (sv.MAX_CELL + 10) + "'\n"
    tokens = "MANY = [" + "1," * (sv.MAX_CELL_PARTS + 10) + "]\n"
    start = time.thread_time()
    values = sv.read_values([huge, tokens, "SMALL = 'kernel'\n"])
    assert time.thread_time() - start < 5
    assert values.values == {"SMALL": "kernel"}
    for name in ("BIG", "MANY"):
        assert values.unknown[name].startswith(f"the value of {name} is too large to grade from the text (cell ")
    assert [s.split(":")[0] for s in values.suspicious] == ["cell 0", "cell 1"]
    assert sv.readable([huge, tokens, "x = 1"]) == ["", "", "x = 1"]
    assert isinstance(sv.parse(tokens), str) and "not read" in sv.parse(tokens)


def test_many_large_literal_cells_are_read_in_seconds_and_bounded_memory():
    """Fifty cells of 2 MB of literals (100 MB in all; the red team's notebook held 200 MB)."""
    cells = [f"X{i} = '" + chr(97 + i % 26) * 2_000_000 + "'\n" for i in range(50)] + ["K = 'kernel'\n"]
    tracemalloc.start()
    start = time.thread_time()
    values = sv.read_values(cells)
    elapsed = time.thread_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert values.values["K"] == "kernel" and "too large" in values.unknown["X7"]
    assert elapsed < 10 and peak < 50e6, (elapsed, peak)


def test_the_total_read_is_bounded():
    cells = [f"Y{i} = '" + "b" * 900_000 + "'\n" for i in range(8)]
    values = sv.read_values(cells)
    kept = sv.MAX_CELLS_TOTAL // len(cells[0])
    assert [bool(s) for s in sv.readable(cells)] == [True] * kept + [False] * (8 - kept)
    assert sorted(values.values) == [f"Y{i}" for i in range(kept)]
    assert "too large to grade" in values.unknown[f"Y{kept}"]

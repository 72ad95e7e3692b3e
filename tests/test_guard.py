"""The guard of the test suite (``python -m tests.guard``) finds what it is for, and finds nothing here."""

from __future__ import annotations

from pathlib import Path

from tests import guard

FLAGGED = """
import pytest

def helper_that_only_prints(x):
    print(x)

def test_calls_only(reader):
    reader.read_rows(0, 1)

def test_prints(reader):
    helper_that_only_prints(reader)

def test_count_of_rows(got, query):
    assert got[0]["n"] >= 0
    assert query.count("1") >= 0
    assert 0 <= len(query.rows)

def test_true():
    assert True

def test_same(x):
    assert x.rows == x.rows

class TestGroup:
    def test_nothing(self):
        pass
"""

CLEAN = """
import pytest

def check_rows(rows):
    assert rows

def local_helper(rows):
    check_rows(rows)

def test_direct(x):
    assert x == 1

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_named_helper(rows):
    check_rows(rows)

def test_module_helper(rows):
    local_helper(rows)

def test_qt(qtbot, win):
    qtbot.waitUntil(win.settled)

def test_offsets(err, data):
    assert 0 <= err.offset <= len(data)

def test_cache(compile_layout, schema):
    assert compile_layout(schema) is compile_layout(schema)

def test_counts(query):
    assert query.count("1") >= 1
"""


def test_guard_flags_tests_without_assertions_and_assertions_that_cannot_fail() -> None:
    found = guard.check_source(FLAGGED, Path("t.py"))
    got = sorted((f.test, f.problem.split(":")[0]) for f in found)
    assert got == sorted(
        [
            ("test_calls_only", "asserts nothing (no assert, raises or asserting helper)"),
            ("test_prints", "asserts nothing (no assert, raises or asserting helper)"),
            ("TestGroup.test_nothing", "asserts nothing (no assert, raises or asserting helper)"),
            ("test_count_of_rows", "cannot fail"),
            ("test_count_of_rows", "cannot fail"),
            ("test_count_of_rows", "cannot fail"),
            ("test_true", "cannot fail"),
            ("test_same", "cannot fail"),
        ]
    )
    assert [f.line for f in found if f.test == "test_count_of_rows"] == [14, 15, 16]


def test_guard_accepts_asserts_raises_helpers_and_qtbot_waits() -> None:
    assert guard.check_source(CLEAN, Path("t.py")) == []


TRIVIALLY_TRUE = """
import time

def check_rows(rows):
    print(rows)

def test_literal_list(x):
    assert [x]

def test_literal_tuple(x):
    assert (x, 1)

def test_literal_str():
    assert "rows decode"

def test_literal_number():
    assert 5

def test_or_true(x):
    assert x == 1 or True

def test_true_or(x):
    assert True or x == 1

def test_len_above_minus_one(rows):
    assert len(rows) > -1

def test_len_at_least_zero(rows):
    assert len(rows) >= 0

def test_minus_one_below_len(rows):
    assert -1 < len(rows)

def test_nested_never_called(rows):
    def inner():
        assert rows == [1]

def test_check_helper_that_does_not_assert(rows):
    check_rows(rows)

def test_check_helper_defined_nowhere(rows):
    check_elsewhere(rows)

def test_wall_clock(run):
    t = time.perf_counter()
    run()
    assert time.perf_counter() - t < 5

def test_wall_clock_through_names(run):
    start = time.monotonic()
    run()
    elapsed = time.monotonic() - start
    assert elapsed < 5.0

def test_wall_clock_in_a_conjunction(run):
    t0 = time.time()
    assert run() and time.time() - t0 <= 1
"""

CLEAN_FORMS = """
import time

def check_rows(rows):
    assert rows == [1]

def test_nested_called(rows):
    def inner():
        assert rows == [1]
    inner()

def test_nested_handed_over(qtbot, rows):
    def settled():
        assert rows == [1]
    qtbot.waitUntil(settled)

def test_shared_helper(rows):
    seeds.check_seed("unsaferow", rows)

def test_local_check_helper(rows):
    check_rows(rows)

def test_library_assert_helper(frame):
    assert_frame_equal(frame, frame.copy())

def test_a_timeout_is_no_bound(poll):
    deadline = time.monotonic() + 60
    while not poll():
        assert time.monotonic() < deadline, "timed out"

def test_counts_that_can_fail(rows):
    assert len(rows) > 0 and len(rows) >= 1 and [r for r in rows]
    assert rows or rows is None
"""


def test_guard_flags_each_trivially_true_form() -> None:
    found = guard.check_source(TRIVIALLY_TRUE, Path("t.py"), {"check_seed": True})
    got = sorted((f.test, f.problem.split(":")[0]) for f in found)
    nothing = "asserts nothing (no assert, raises or asserting helper)"
    assert got == sorted(
        [
            ("test_literal_list", "cannot fail"),
            ("test_literal_tuple", "cannot fail"),
            ("test_literal_str", "cannot fail"),
            ("test_literal_number", "cannot fail"),
            ("test_or_true", "cannot fail"),
            ("test_true_or", "cannot fail"),
            ("test_len_above_minus_one", "cannot fail"),
            ("test_len_at_least_zero", "cannot fail"),
            ("test_minus_one_below_len", "cannot fail"),
            ("test_nested_never_called", nothing),
            ("test_nested_never_called", "cannot fail"),
            ("test_check_helper_that_does_not_assert", nothing),
            ("test_check_helper_defined_nowhere", nothing),
            ("test_wall_clock", "wall clock"),
            ("test_wall_clock_through_names", "wall clock"),
            ("test_wall_clock_in_a_conjunction", "wall clock"),
        ]
    )
    nested = [f.problem for f in found if f.test == "test_nested_never_called" and f.problem != nothing]
    assert nested == ["cannot fail: it is in inner, which the test never calls"]


def test_guard_accepts_called_helpers_timeouts_and_counts_that_can_fail() -> None:
    assert guard.check_source(CLEAN_FORMS, Path("t.py"), {"check_seed": True}) == []
    # without the helper modules' functions, a check_* call the file does not define is not taken on trust
    found = guard.check_source(CLEAN_FORMS, Path("t.py"), {})
    assert [f.test for f in found] == ["test_shared_helper"]


def test_guard_reads_helper_modules_and_resolves_their_helpers(tmp_path: Path) -> None:
    (tmp_path / "_helpers.py").write_text(
        "def check_ok(x):\n    assert x == 1\n\ndef check_silent(x):\n    print(x)\n\n"
        "def oracle(x):\n    assert [x]\n    return x\n"
    )
    (tmp_path / "test_x.py").write_text(
        "from _helpers import check_ok, check_silent\n\n"
        "def test_ok():\n    check_ok(1)\n\ndef test_silent():\n    check_silent(1)\n"
    )
    found = guard.check([tmp_path])
    assert sorted((f.path.name, f.test, f.problem.split(":")[0]) for f in found) == [
        ("_helpers.py", "oracle", "cannot fail"),
        ("test_x.py", "test_silent", "asserts nothing (no assert, raises or asserting helper)"),
    ]
    assert guard.main([str(tmp_path)]) == 1


def test_the_suite_passes_its_guard() -> None:
    findings = guard.check([guard.TESTS])
    assert findings == [], "\n".join(map(str, findings))
    assert len(guard.files_under([guard.TESTS])) > 40  # the guard read the suite, generator tests included
    helpers = {p.relative_to(guard.TESTS).as_posix() for p in guard.helpers_under([guard.TESTS])}
    assert {"_gui.py", "oracle.py", "fuzz/seeds.py", "fuzz/independent.py"} <= helpers
    assert not any(h.startswith("benchmarks/") for h in helpers)
    assert guard.main([str(guard.TESTS)]) == 0

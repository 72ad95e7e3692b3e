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


def test_the_suite_passes_its_guard() -> None:
    findings = guard.check([guard.TESTS])
    assert findings == [], "\n".join(map(str, findings))
    assert len(guard.files_under([guard.TESTS])) > 40  # the guard read the suite, generator tests included
    assert guard.main([str(guard.TESTS)]) == 0

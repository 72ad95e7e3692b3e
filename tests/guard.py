"""A check of the test suite itself: every test asserts something, and nothing it asserts is true by form.

    python -m tests.guard [FILE_OR_FOLDER ...]      # default: tests/

Run by ``scripts/test.sh`` before pytest; exits 1 and lists what it found. Two rules, read from the
source with :mod:`ast` (nothing is imported or run):

1. **A test asserts.** A test function (``test_*`` at module level or in a ``Test*`` class) must contain
   an ``assert``, a ``pytest.raises``/``pytest.warns``/``pytest.fail`` call, a qtbot wait
   (``waitSignal``, ``waitUntil``, ...), or a call to a helper that asserts: a function whose name
   starts with ``assert``, ``check_``, ``expect_`` or ``verify_``, or a function of the same file
   that (itself or through such calls) asserts.
2. **No assertion that cannot fail.** ``assert True`` (any true constant), ``x == x`` (the same
   expression, without calls, on both sides of ``==``, ``<=``, ``>=``, ``is``), and ``>= 0`` / ``0 <=`` on a count
   (``len(...)``, ``.count(...)``, ``sum(...)`` of lengths, a name or key naming a count or a
   number of rows), which holds for any count.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: Prefixes of helpers taken to assert (``assert_frame_equal``, ``check_rows``, ``expect_error``...).
ASSERTING_PREFIXES = ("assert", "check_", "expect_", "verify_")
#: pytest and qtbot calls that fail the test by themselves.
ASSERTING_CALLS = frozenset(
    {
        "raises",
        "warns",
        "fail",
        "deprecated_call",
        "waitSignal",
        "waitSignals",
        "waitUntil",
        "waitCallback",
        "waitExposed",
        "waitActive",
        "assertNotEmitted",
    }
)
#: Words in a name (or string key) that make ``>= 0`` on it a statement about a count.
COUNT_WORDS = ("count", "len", "size", "rows", "num", "total", "n")


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    test: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.test}: {self.problem}"


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _direct_assert(node: ast.AST, helpers: set[str]) -> bool:
    """``node`` (a function) asserts by itself or through an asserting helper."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert):
            return True
        if isinstance(sub, ast.Call):
            name = _call_name(sub)
            if name in ASSERTING_CALLS or name.startswith(ASSERTING_PREFIXES) or name in helpers:
                return True
    return False


def _asserting_helpers(tree: ast.Module) -> set[str]:
    """Names of the file's functions (any level) that assert, directly or through each other."""
    functions = {
        n.name: n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("test_")
    }
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, fn in functions.items():
            if name not in found and _direct_assert(fn, found):
                found.add(name)
                changed = True
    return found


def _is_count(node: ast.AST) -> bool:
    """``node`` is a count: ``len(x)``, ``x.count(...)``, ``sum(...)`` of such, or named like one."""
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in ("len", "count"):
            return True
        if name == "sum" and node.args:
            inner = node.args[0]
            if isinstance(inner, (ast.GeneratorExp, ast.ListComp)):
                return _is_count(inner.elt) or (isinstance(inner.elt, ast.Constant) and inner.elt.value == 1)
            return False
        return False
    word = ""
    if isinstance(node, ast.Name):
        word = node.id
    elif isinstance(node, ast.Attribute):
        word = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        word = str(node.slice.value)
    parts = word.lower().replace("-", "_").split("_")
    return any(p in COUNT_WORDS for p in parts) or word.lower().startswith(("num", "count", "n_"))


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _cannot_fail(test: ast.expr) -> str | None:
    """Why the asserted expression ``test`` is true whatever the code under test does (or ``None``)."""
    if isinstance(test, ast.Constant):
        return f"asserts the constant {test.value!r}" if test.value else None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            reason = _cannot_fail(value)
            if reason:
                return reason
        return None
    if not isinstance(test, ast.Compare):
        return None
    left = test.left
    for op, right in zip(test.ops, test.comparators, strict=True):
        # the same expression twice, calls aside (``f(x) is f(x)`` tests a cache, ``f(x) == f(x)`` determinism)
        same = ast.dump(left) == ast.dump(right) and not any(isinstance(n, ast.Call) for n in ast.walk(left))
        if same and isinstance(op, (ast.Eq, ast.LtE, ast.GtE, ast.Is)):
            return f"compares {ast.unparse(left)} with itself"
        if isinstance(op, ast.GtE) and _is_zero(right) and _is_count(left):
            return f"{ast.unparse(left)} >= 0 holds for any count"
        if isinstance(op, ast.LtE) and _is_zero(left) and _is_count(right):
            return f"0 <= {ast.unparse(right)} holds for any count"
        left = right
    return None


def _tests(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test_"):
                    yield f"{node.name}.{sub.name}", sub


def check_source(source: str, path: Path) -> list[Finding]:
    """The findings of both rules in one test file's source."""
    tree = ast.parse(source, str(path))
    helpers = _asserting_helpers(tree)
    out: list[Finding] = []
    for name, fn in _tests(tree):
        if not _direct_assert(fn, helpers):
            out.append(
                Finding(path, fn.lineno, name, "asserts nothing (no assert, raises or asserting helper)")
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            reason = _cannot_fail(node.test)
            if reason:
                owner = _owner(tree, node)
                out.append(Finding(path, node.lineno, owner, f"cannot fail: {reason}"))
    return sorted(out, key=lambda f: f.line)


def _owner(tree: ast.Module, node: ast.AST) -> str:
    best = "<module>"
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.lineno <= getattr(
            node, "lineno", 0
        ):
            if (fn.end_lineno or fn.lineno) >= getattr(node, "lineno", 0):
                best = fn.name
    return best


def files_under(paths: Iterable[Path]) -> list[Path]:
    """The ``test_*.py`` files under ``paths`` (files given by name are taken as they are)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("test_*.py") if ".cache" not in q.parts))
        else:
            out.append(p)
    return out


def check(paths: Iterable[Path]) -> list[Finding]:
    """The findings of both rules in every test file under ``paths``."""
    out: list[Finding] = []
    for path in files_under(paths):
        out.extend(check_source(path.read_text(encoding="utf-8"), path))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or [TESTS]
    findings = check(paths)
    files = len(files_under(paths))
    for finding in findings:
        print(finding)
    if findings:
        print(f"tests.guard: {len(findings)} problem(s) in {files} test files", file=sys.stderr)
        return 1
    print(f"tests.guard: {files} test files, every test asserts, no assertion that cannot fail")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

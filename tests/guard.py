"""A check of the test suite itself: every test asserts something, and nothing it asserts is true by form.

    python -m tests.guard [FILE_OR_FOLDER ...]      # default: tests/

Run by ``scripts/test.sh`` before pytest; exits 1 and lists what it found. Read from the source with
:mod:`ast` (nothing is imported or run), in the test files (``test_*.py``) and the helper modules beside
them (every other ``.py`` under ``tests/`` but the benchmarks, whose timings are their point):

1. **A test asserts.** A test function (``test_*`` at module level or in a ``Test*`` class) must contain
   an ``assert``, a ``pytest.raises``/``pytest.warns``/``pytest.fail`` call, a qtbot wait
   (``waitSignal``, ``waitUntil``, ...), or a call to a helper that asserts: a function of the same file
   or of a helper module that (itself or through such calls) asserts. A helper named ``check_*``,
   ``expect_*``, ``verify_*`` or ``assert*`` counts only if it asserts; ``assert*`` defined outside the
   suite (``assert_frame_equal``, ``assertEqual``) is taken at its word. An ``assert`` inside a nested
   function the test never names (calls, or hands to something that calls it) does not count, and is
   itself a finding.
2. **No assertion that cannot fail.** ``assert True`` and any other true constant or non-empty literal
   (``assert [1]``, ``assert (x, y)``, ``assert "text"``), an ``or`` with such an operand (``x or True``),
   ``x == x`` (the same expression, without calls, on both sides of ``==``, ``<=``, ``>=``, ``is``), and
   ``>= 0`` / ``> -1`` (or ``0 <=`` / ``-1 <``) on a count (``len(...)``, ``.count(...)``, ``sum(...)`` of
   lengths, a name or key naming a count or a number of rows), which holds for any count.
3. **No wall-clock bound.** An assertion comparing a difference of ``time.time()``,
   ``time.perf_counter()`` or ``time.monotonic()`` readings (directly or through names assigned from
   them) passes or fails with the machine's load: speed is measured in ``tests/benchmarks/``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: Prefixes of helpers named as if they assert: they count only if they do.
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
#: Clock readings whose differences are wall-clock times.
CLOCKS = frozenset({"time", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "default_timer"})
#: Folders under ``tests/`` whose modules the guard does not read (benchmarks time things on purpose).
SKIPPED_FOLDERS = ("benchmarks", ".cache", "corpus", "regressions")

Function = ast.FunctionDef | ast.AsyncFunctionDef


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


@dataclass
class Helpers:
    """What the suite's own functions do: names defined (per module and in helper modules) and which
    of them assert."""

    local: dict[str, bool]
    shared: dict[str, bool]

    def asserts(self, name: str) -> bool:
        if name in ASSERTING_CALLS:
            return True
        if name in self.local:
            return self.local[name]
        if name in self.shared:
            return self.shared[name]
        return name.startswith("assert")  # a library's assert_frame_equal, unittest's assertEqual


def _functions(tree: ast.AST) -> dict[str, list[Function]]:
    out: dict[str, list[Function]] = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("test_"):
            out.setdefault(n.name, []).append(n)
    return out


def _uncalled_nested(fn: Function) -> list[Function]:
    """Functions defined inside ``fn`` (at any depth) that nothing in ``fn`` names outside themselves
    and that carry no decorator (a decorator registers them)."""
    out: list[Function] = []
    nested = [
        n
        for n in ast.walk(fn)
        if n is not fn and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.decorator_list
    ]
    for inner in nested:
        own = {id(n) for n in ast.walk(inner)}
        named = any(
            isinstance(n, ast.Name) and n.id == inner.name and id(n) not in own for n in ast.walk(fn)
        ) or any(
            isinstance(n, ast.Attribute) and n.attr == inner.name and id(n) not in own for n in ast.walk(fn)
        )
        if not named:
            out.append(inner)
    return out


@cache
def _walk_reached(fn: Function) -> tuple[ast.AST, ...]:
    """The nodes of ``fn``, but those of nested functions it never names."""
    skipped = {id(n) for inner in _uncalled_nested(fn) for n in ast.walk(inner)}
    return tuple(n for n in ast.walk(fn) if id(n) not in skipped)


def _direct_assert(node: Function, helpers: Helpers) -> bool:
    """``node`` (a function) asserts by itself or through an asserting helper."""
    for sub in _walk_reached(node):
        if isinstance(sub, ast.Assert):
            return True
        if isinstance(sub, ast.Call) and helpers.asserts(_call_name(sub)):
            return True
    return False


def _asserting(functions: dict[str, list[Function]], known: dict[str, bool]) -> dict[str, bool]:
    """Which of ``functions`` assert, directly or through each other (or through ``known``)."""
    found = {name: False for name in functions}
    changed = True
    while changed:
        changed = False
        helpers = Helpers(found, known)
        for name, defs in functions.items():
            if not found[name] and any(_direct_assert(fn, helpers) for fn in defs):
                found[name] = True
                changed = True
    return found


@cache
def _parsed(source: str, name: str) -> ast.Module:
    """``source`` parsed once per run (the helpers' caches hold on to its nodes)."""
    return ast.parse(source, name)


def shared_helpers(paths: Iterable[Path]) -> dict[str, bool]:
    """The functions of the helper modules in ``paths``, and whether each asserts."""
    functions: dict[str, list[Function]] = {}
    for path in paths:
        for name, defs in _functions(_parsed(path.read_text(encoding="utf-8"), str(path))).items():
            functions.setdefault(name, []).extend(defs)
    return _asserting(functions, {})


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


def _number(node: ast.AST) -> float | None:
    """The value of a number literal (``-1`` included), else ``None``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return node.value
    return None


def _below_any_count(bound: ast.AST, strict: bool) -> bool:
    """Every count is ``> bound`` (``strict``) or ``>= bound``."""
    value = _number(bound)
    return value is not None and (value < 0 if strict else value <= 0)


def _true_literal(test: ast.expr) -> str | None:
    if isinstance(test, ast.Constant):
        return f"asserts the constant {test.value!r}" if test.value else None
    if isinstance(test, (ast.List, ast.Tuple, ast.Set)) and test.elts:
        return f"asserts the non-empty literal {ast.unparse(test)}"
    if isinstance(test, ast.Dict) and test.keys:
        return f"asserts the non-empty literal {ast.unparse(test)}"
    if isinstance(test, ast.JoinedStr) and any(isinstance(v, ast.Constant) and v.value for v in test.values):
        return f"asserts the non-empty string {ast.unparse(test)}"
    return None


def _cannot_fail(test: ast.expr) -> str | None:
    """Why the asserted expression ``test`` is true whatever the code under test does (or ``None``)."""
    literal = _true_literal(test)
    if literal:
        return literal
    if isinstance(test, ast.BoolOp):
        reasons = [_cannot_fail(value) for value in test.values]
        if isinstance(test.op, ast.And):
            return next((r for r in reasons if r), None)
        for value, reason in zip(test.values, reasons, strict=True):
            if reason:
                return f"an `or` with an operand that cannot fail ({reason}): {ast.unparse(value)}"
        return None
    if not isinstance(test, ast.Compare):
        return None
    left = test.left
    for op, right in zip(test.ops, test.comparators, strict=True):
        # the same expression twice, calls aside (``f(x) is f(x)`` tests a cache, ``f(x) == f(x)`` determinism)
        same = ast.dump(left) == ast.dump(right) and not any(isinstance(n, ast.Call) for n in ast.walk(left))
        if same and isinstance(op, (ast.Eq, ast.LtE, ast.GtE, ast.Is)):
            return f"compares {ast.unparse(left)} with itself"
        if (
            isinstance(op, (ast.GtE, ast.Gt))
            and _is_count(left)
            and _below_any_count(right, isinstance(op, ast.Gt))
        ):
            return f"{ast.unparse(left)} {'>' if isinstance(op, ast.Gt) else '>='} {ast.unparse(right)} holds for any count"
        if (
            isinstance(op, (ast.LtE, ast.Lt))
            and _is_count(right)
            and _below_any_count(left, isinstance(op, ast.Lt))
        ):
            return f"{ast.unparse(left)} {'<' if isinstance(op, ast.Lt) else '<='} {ast.unparse(right)} holds for any count"
        left = right
    return None


def _is_clock(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and _call_name(node) in CLOCKS
        and (isinstance(node.func, ast.Attribute) or _call_name(node) != "time")
    )


@cache
def _clock_names(fn: ast.AST) -> tuple[set[str], set[str]]:
    """Names ``fn`` assigns clock readings to, and names it assigns their differences to."""
    readings: set[str] = set()
    deltas: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if _has_delta(node.value, readings, deltas):
                    new = names - deltas
                    deltas |= new
                elif any(
                    _is_clock(n) or (isinstance(n, ast.Name) and n.id in readings)
                    for n in ast.walk(node.value)
                ):
                    new = names - readings
                    readings |= new
                else:
                    new = set()
                changed |= bool(new)
    return readings, deltas


def _has_delta(expr: ast.AST, readings: set[str], deltas: set[str]) -> bool:
    for n in ast.walk(expr):
        if isinstance(n, ast.Name) and n.id in deltas:
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
            if any(_is_clock(m) or (isinstance(m, ast.Name) and m.id in readings) for m in ast.walk(n)):
                return True
    return False


def _wall_clock_bound(test: ast.expr, scope: ast.AST) -> str | None:
    if not any(isinstance(n, ast.Name) or _is_clock(n) for n in ast.walk(test)):
        return None
    readings, deltas = _clock_names(scope)
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and _has_delta(node, readings, deltas):
            return f"a wall-clock bound ({ast.unparse(node)}) passes or fails with the machine's load"
    return None


def _tests(tree: ast.Module) -> Iterator[tuple[str, Function]]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test_"):
                    yield f"{node.name}.{sub.name}", sub


def check_source(source: str, path: Path, shared: dict[str, bool] | None = None) -> list[Finding]:
    """The findings of the three rules in one file's source (``shared``: the helper modules' functions)."""
    tree = _parsed(source, str(path))
    known = shared or {}
    helpers = Helpers(_asserting(_functions(tree), known), known)
    out: list[Finding] = []
    for name, fn in _tests(tree):
        if not _direct_assert(fn, helpers):
            out.append(
                Finding(path, fn.lineno, name, "asserts nothing (no assert, raises or asserting helper)")
            )
        for inner in _uncalled_nested(fn):
            for node in ast.walk(inner):
                if isinstance(node, ast.Assert):
                    out.append(
                        Finding(
                            path,
                            node.lineno,
                            name,
                            f"cannot fail: it is in {inner.name}, which the test never calls",
                        )
                    )
    scopes = _scopes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            scope = scopes.get(id(node))
            reason = _cannot_fail(node.test) or _wall_clock_bound(node.test, scope or tree)
            if reason:
                owner = scope.name if scope is not None else "<module>"
                kind = "wall clock" if reason.startswith("a wall-clock") else "cannot fail"
                out.append(Finding(path, node.lineno, owner, f"{kind}: {reason}"))
    return sorted(out, key=lambda f: f.line)


def _scopes(tree: ast.Module) -> dict[int, Function]:
    """The innermost function holding each node (by ``id``)."""
    out: dict[int, Function] = {}
    for fn in ast.walk(tree):  # outer functions come before the functions they hold
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                out[id(node)] = fn
    return out


def _skipped(path: Path) -> bool:
    return any(part in SKIPPED_FOLDERS for part in path.parts)


def files_under(paths: Iterable[Path]) -> list[Path]:
    """The ``test_*.py`` files under ``paths`` (files given by name are taken as they are)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("test_*.py") if not _skipped(q.relative_to(p))))
        else:
            out.append(p)
    return out


def helpers_under(paths: Iterable[Path]) -> list[Path]:
    """The helper modules under ``paths``: every other ``.py`` file (benchmarks aside)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(
                sorted(
                    q
                    for q in p.rglob("*.py")
                    if not q.name.startswith("test_") and not _skipped(q.relative_to(p))
                )
            )
    return out


def check(paths: Iterable[Path]) -> list[Finding]:
    """The findings in every test file and helper module under ``paths``."""
    paths = list(paths)
    helpers = helpers_under(paths) or helpers_under([TESTS])
    shared = shared_helpers(helpers)
    out: list[Finding] = []
    for path in files_under(paths) + helpers_under(paths):
        out.extend(check_source(path.read_text(encoding="utf-8"), path, shared))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or [TESTS]
    findings = check(paths)
    files = len(files_under(paths)) + len(helpers_under(paths))
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"tests.guard: {len(findings)} problem(s) in {files} test files and helper modules",
            file=sys.stderr,
        )
        return 1
    print(
        f"tests.guard: {files} test files and helper modules, every test asserts, no assertion that cannot fail"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

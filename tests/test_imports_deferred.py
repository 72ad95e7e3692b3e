"""An import inside a function only where it defers a heavy or optional library (docs/architecture.md).

Every other import sits at the top of its module, where import-linter, the cycle check and a reader see
it. A function-level ``import`` or ``from ... import`` in ``app/``, ``readers/`` or ``viewers/`` must
(a) say what it defers with a ``# deferred: ...`` comment on one of its lines and (b) import only a
module of :data:`HEAVY` or :data:`PULLS_IN_HEAVY`. A statelens module is listed with the heavy library
its module-level imports pull in, and that is checked too, so an entry cannot outlive its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Libraries a function may import: each is slow to import or optional (one line of reason each).
HEAVY = {
    "pyspark": "the Spark backend only; pulls in py4j and its JVM gateway",
    "pyarrow": "~100 ms; banned at module level (ruff banned-module-level-imports)",
    "pandas": "~150 ms; banned at module level (ruff banned-module-level-imports)",
    "duckdb": "~150 ms; statelens sql and its Arrow views only",
    "numba": "loads LLVM; the compiled record walks only (readers/_format/kernels.py)",
    "polars": "optional: to_polars() of a scan or a fleet only (readers.arrow_values.to_polars)",
    "rocksdict": "a native RocksDB library; RocksDB stores only",
    "fastavro": "slow to import; Avro-encoded state only",
    "fsspec": "slow to import (~20-90 ms, asyncio with it); opening a storage URL only",
    "asyncio": "~40 ms (ssl, sockets); a remote filesystem's coroutines only",
    "crc32c": "~40 ms (it loads importlib.metadata and its command line); row checksums only",
    "importlib.metadata": "40-140 ms; statelens --version only",
    "PySide6": "Qt: the launcher imports app.gui.main for every command, which stays Qt-free",
    "pyqtgraph": "Qt plotting; loads PySide6 and numpy",
}

#: statelens modules a function may import, with the library of :data:`HEAVY` (or superqt, the Qt
#: widgets library) their module-level imports pull in.
PULLS_IN_HEAVY = {
    "statelens.readers._format.kernels": "numba",
    "statelens.readers._format.unsaferow_arrow": "pyarrow",
    "statelens.app.gui.window": "PySide6",
    "statelens.app.gui.errors": "PySide6",
    "statelens.app.gui.prune_dialog": "superqt",
    "statelens.viewers.theme": "pyqtgraph",
}


def _modules() -> dict[str, Path]:
    """Every module of the product by its ``statelens.`` name."""
    out = {}
    for package in ("app", "readers", "viewers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["statelens", *parts])] = path
    return out


MODULES = _modules()


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads: ``from x import y`` loads ``x``, and ``x.y`` when that is a
    statelens module."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [base, *(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)]


def _allowed(module: str) -> bool:
    if module in PULLS_IN_HEAVY:
        return True
    return any(module == lib or module.startswith(lib + ".") for lib in HEAVY)


def _not_allowed(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of an import that no allow-list has: ``from x import y`` is allowed when ``x`` is, or
    when every ``x.y`` is (``from importlib import metadata``, ``from statelens.app.gui import errors``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if not _allowed(a.name)]
    base = node.module or ""
    if _allowed(base):
        return []
    subs = [f"{base}.{a.name}" for a in node.names]
    if all(_allowed(m) for m in subs):
        return []
    return [m for m in subs if m in MODULES and not _allowed(m)] or [base]


def violations(source: str, where: str) -> list[str]:
    """Each function-level import of ``source`` that lacks its ``# deferred:`` comment or imports a
    module outside the allow-lists, as ``where:line: what``."""
    lines = source.splitlines()
    found: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                text = lines[child.lineno - 1].strip()
                end = child.end_lineno or child.lineno
                if not any("# deferred:" in line for line in lines[child.lineno - 1 : end]):
                    found.append(f"{where}:{child.lineno}: no '# deferred:' comment: {text}")
                for module in _not_allowed(child):
                    found.append(f"{where}:{child.lineno}: {module} is not heavy: import it at the top")
            visit(
                child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            )

    visit(ast.parse(source), False)
    return found


def test_function_level_imports_only_defer_heavy_libraries() -> None:
    assert len(MODULES) > 80  # the whole product was read
    found = [v for name, path in MODULES.items() for v in violations(path.read_text(encoding="utf-8"), name)]
    assert found == []


def _module_level_imports(tree: ast.Module, name: str) -> set[str]:
    """Modules imported when ``name`` is imported: its body and module-level ``if``/``try`` blocks,
    not ``if TYPE_CHECKING:``, and the packages above it."""
    out = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update(_targets(node))
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return out


@pytest.mark.parametrize(("module", "library"), sorted(PULLS_IN_HEAVY.items()))
def test_each_listed_statelens_module_pulls_in_its_heavy_library(module: str, library: str) -> None:
    """Following module-level imports from ``module`` (through statelens modules) reaches ``library``."""
    assert module in MODULES
    seen: set[str] = set()
    todo = [module]
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in _module_level_imports(ast.parse(MODULES[name].read_text(encoding="utf-8")), name):
            if imported in MODULES:
                todo.append(imported)
            else:
                reached.add(imported)
    assert any(m == library or m.startswith(library + ".") for m in reached), sorted(reached)


def test_the_check_finds_planted_violations() -> None:
    planted = (
        "import json\n"
        "def f():\n"
        "    import csv  # deferred: a plain stdlib module\n"
        "    from statelens.readers import model  # deferred: not heavy\n"
        "    import pyarrow as pa\n"
        "    from statelens.readers._format import kernels  # deferred: kernels imports numba\n"
        "    import duckdb  # deferred: duckdb (heavy)\n"
        "    def g():\n"
        "        from statelens.app.gui.window import MainWindow\n"
        "    return pa, csv, model, kernels, duckdb, g\n"
    )
    assert violations(planted, "m") == [
        "m:3: csv is not heavy: import it at the top",
        "m:4: statelens.readers.model is not heavy: import it at the top",
        "m:5: no '# deferred:' comment: import pyarrow as pa",
        "m:9: no '# deferred:' comment: from statelens.app.gui.window import MainWindow",
    ]

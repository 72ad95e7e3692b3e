"""No import cycles anywhere in statelens, not even inside one package (docs/architecture.md): the graph
of the installed package's imports (grimp, the graph import-linter checks its contracts on) has no
strongly connected component of more than one module."""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_package_has_no_import_cycles() -> None:
    graph = grimp.build_graph("statelens", include_external_packages=False)
    assert len(graph.modules) > 50  # the whole package was read
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(m)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.c", imported="a.d")
    assert _cycles(graph) == [["a.b", "a.c"]]


def test_the_main_window_only_assembles() -> None:
    """``MainWindow`` wires menus, tabs and docks and routes to the tabs' controllers; what a tab loads
    and what its actions do lives in its own module under ``app/gui/controllers/`` (docs/architecture.md).
    A window module past 600 lines (or a class past 500) is taking a tab's behaviour back."""
    import ast
    from pathlib import Path

    from statelens.app.analysis.views import VIEWS

    gui = Path(__file__).resolve().parents[1] / "app" / "gui"
    source = (gui / "window.py").read_text(encoding="utf-8")
    assert source.count("\n") <= 600
    (window,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "MainWindow"]
    assert window.end_lineno is not None and window.end_lineno - window.lineno + 1 <= 500
    assert [v for v in VIEWS if not (gui / "controllers" / f"{v}.py").is_file()] == []

"""One doorway to state: outside ``readers/`` nothing fetches a store reader, and nothing reads stored
records around :class:`readers.scan.StateScan`.

An AST walk over ``app/`` and ``viewers/`` (the import contracts cannot see it: store readers arrive as
return values, not imports). A fetch is a call of a method that hands out a store's files or raw records
(``files_of``, ``store_files``/``family_files`` of a backend that reads files, ``store`` on a backend,
``store_reader``/``column_family_reader`` on a checkpoint),
or of a private format reader's own walk (``walk_partition``, ``decode_pairs``, ``read_raw``, ...). A
planted fetch fails the check (the last test), so the check cannot pass vacuously.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Methods that hand out a store reader, whatever the receiver.
FETCHES = {
    "store_reader",
    "column_family_reader",
    "column_families",
    "files_of",
    "store_files",
    "family_files",
}
#: ``.store(...)`` is a fetch on a backend; on an operator's description it names a store (metadata).
BACKEND_NAMES = ("backend", "native", "chooser")
#: What only a store reader answers: reading stored records around the scan.
AROUND = {
    "walk_partition",
    "decode_pairs",
    "read_raw",
    "iter_raw_changes",
    "iter_version_arrays",
    "live_arrays",
    "read_variable",
    "read_timers_raw",
}

#: ``path: number of fetches still there``; a migration deletes its line. Keep it shrinking.
ALLOWED: dict[str, int] = {}


def _receiver(node: ast.expr) -> str:
    """The text of a call's receiver, lowercased (``self.native``, ``native_backend(ckpt)``)."""
    return ast.unparse(node).lower()


def fetches(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of every store-reader fetch or around-the-scan read in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in FETCHES or name in AROUND:
            found.append((node.lineno, ast.unparse(func)))
        elif (
            name == "store"
            and isinstance(func, ast.Attribute)
            and any(b in _receiver(func.value) for b in BACKEND_NAMES)
        ):
            found.append((node.lineno, ast.unparse(func)))
    return found


def _sources() -> list[Path]:
    return sorted(p for top in ("app", "viewers") for p in (ROOT / top).rglob("*.py"))


def test_no_store_reader_outside_readers() -> None:
    counted = {}
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        got = fetches(path.read_text())
        if got:
            counted[rel] = got
    over = {
        rel: got for rel, got in counted.items() if len(got) > ALLOWED.get(rel, 0)
    }  # a new fetch, or one in a file that had none
    assert not over, (
        "store readers fetched outside readers/ (read through readers.scan.StateScan): "
        + "; ".join(f"{rel}:{line} {call}" for rel, got in over.items() for line, call in got)
    )
    stale = {rel: n for rel, n in ALLOWED.items() if len(counted.get(rel, [])) < n}
    assert not stale, f"fewer fetches than allowed: lower ALLOWED to what is left: {stale}"


def test_the_protocol_hands_out_no_store_reader() -> None:
    """What a consumer holds is a backend; its files are reached only by readers' own scans."""
    from statelens.readers.backends import NativeBackend, StateBackend
    from statelens.readers.backends.spark import SparkBackend

    for cls in (StateBackend, NativeBackend, SparkBackend):
        assert not {"store", "column_families", "live_records", "reads_files"} & set(dir(cls)), cls


def test_a_planted_fetch_fails_the_check() -> None:
    planted = [
        "def f(backends, op):\n    return backends.for_store(op).store(op, 'default')\n",
        "def f(ckpt):\n    return native_backend(ckpt).column_families(0)\n",
        "def f(ckpt):\n    return ckpt.store_reader(0).read_raw(0, 1)\n",
        "def f(reader):\n    return list(walk_partition(reader, 0, []))\n",
        "def f(self):\n    return self.native.store(0, 'left')\n",
        "from statelens.readers.backends.base import files_of\n"
        "def f(backend):\n    return files_of(backend, 0).read_raw(0, 1)\n",
        "def f(chooser):\n    return chooser.native.store_files(0).versions()\n",
    ]
    for source in planted:
        assert fetches(source), source
    assert not fetches("def f(ckpt):\n    return ckpt.operator(0).store('default').schema\n")

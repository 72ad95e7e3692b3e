"""No analysis, command, window, view or reader asks which backend it has: behaviour follows the
capabilities the backend protocol states (``StateBackend.capabilities``, ``store()`` raising
``FilesUnavailableError``), never a backend's name, class, attributes or a ``reads_files`` flag; and
outside ``readers/`` nothing asks which store format (provider) a store has. A grep over the source, so
an identity branch that comes back fails here with its file and line."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What asks a backend (or a state source built on one) which one it is.
PATTERNS = {
    "reads_files flag": re.compile(r"\breads_files\b"),
    "backend name compared": re.compile(r"""\.name\s*(==|!=)\s*["'](spark|native)["']"""),
    # (``args.backend``, the user's --backend option, is a request, not a backend)
    "result's backend compared": re.compile(r"""(?<!args)\.backend\s*(==|!=)\s*["'](spark|native)["']"""),
    "one backend picked by attribute": re.compile(r"(?<![.\w])(backends|chooser)\.(spark|native)\b"),
    "backend class tested": re.compile(r"isinstance\([^)]*\b(Native|Spark)(Backend|Source)\b"),
    "backend attribute probed": re.compile(r"hasattr\(\s*(self\.|source\.)?(backend|backends|chooser)\b"),
    "per-backend state source": re.compile(r"\b(Native|Spark)Source\b"),
    # (outside readers/ only: the readers are where the formats are known)
    "store format compared": re.compile(r"""\bprovider\s*(==|!=)\s*["'](hdfs|rocksdb)["']"""),
}
#: Patterns that hold outside ``readers/`` only.
OUTSIDE_READERS = {"store format compared"}

#: ``path: (pattern names allowed there, why)``. Keep it short.
ALLOWED = {
    "readers/backends/__init__.py": (
        {"one backend picked by attribute", "backend name compared"},
        "BackendChooser is the one place that picks a backend (--backend native|spark|auto)",
    ),
    "app/analysis/doctor.py": (
        {"one backend picked by attribute", "backend name compared", "store format compared"},
        "the cross-check compares Spark's reading with the native one when --backend spark is asked; "
        "the health checks read each format's files",
    ),
    "app/analysis/sql.py": ({"one backend picked by attribute"}, "--in-spark asks for Spark SQL by name"),
    "app/cli/prune.py": ({"one backend picked by attribute"}, "repartition is a Spark job by definition"),
    "app/analysis/expired_result.py": (
        {"result's backend compared"},
        "wording only: OperatorExpiry.describe says which engine read",
    ),
    "app/explore.py": ({"result's backend compared"}, "wording only: says which engine read"),
    "app/gui/controllers/backends.py": (
        {"backend name compared"},
        "self.name is the user's choice (a request, as args.backend)",
    ),
    "viewers/browser.py": (
        {"store format compared"},
        "wording only: a store's label names a provider but HDFS",
    ),
}


def _sources() -> list[Path]:
    return [p for d in ("readers", "app", "viewers") for p in sorted((ROOT / d).rglob("*.py"))]


def test_no_branch_on_which_backend_answers() -> None:
    found = []
    read = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert {
        "readers/scan.py",
        "app/gui/window.py",
        "app/gui/controllers/browser.py",
        "viewers/browser.py",
    } <= read
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        allowed = ALLOWED.get(rel, (set(), ""))[0]
        if rel.startswith("readers/"):
            allowed = allowed | OUTSIDE_READERS
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in PATTERNS.items():
                if what not in allowed and pattern.search(line):
                    found.append(f"{rel}:{n}: {what}: {line.strip()}")
    assert found == [], "ask the backend's capabilities instead:\n" + "\n".join(found)


def test_allow_list_is_still_needed() -> None:
    """Every allow-list entry still matches something: a stale entry would hide a future branch."""
    stale = []
    for rel, (allowed, _why) in ALLOWED.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        stale += [f"{rel}: {what}" for what in sorted(allowed) if not PATTERNS[what].search(text)]
    assert stale == [], stale


def test_the_patterns_catch_the_branches_they_name() -> None:
    """The grep is not vacuous: each pattern matches the branch it stands for."""
    samples = {
        "reads_files flag": "if not backend.reads_files:",
        "backend name compared": 'if backend.name == "spark":',
        "result's backend compared": 'if g.backend == "native":',
        "one backend picked by attribute": "backend = chooser.native",
        "backend class tested": "if isinstance(source, SparkSource):",
        "backend attribute probed": 'hasattr(source.backend, "stream_history_query")',
        "per-backend state source": "return NativeSource(reader)",
        "store format compared": 'if st.provider != "hdfs":',
    }
    assert set(samples) == set(PATTERNS)
    for what, line in samples.items():
        assert PATTERNS[what].search(line), what
    innocent = ["backend.capabilities.engine_queries", "from statelens.readers.backends.spark import x"]
    innocent.append('if args.backend == "native":')
    innocent.append("rows.append([s.store_name, s.provider, s.codec])")
    assert not any(p.search(line) for p in PATTERNS.values() for line in innocent)

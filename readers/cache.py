"""A local cache of decoded state: one Parquet file per store partition version, reused on reopen.

Decoding a large version costs seconds; opening a Parquet file of it costs milliseconds. Entries live
under the user's cache folder (``platformdirs.user_cache_dir("statelens")/state``, or
``$STATELENS_CACHE_DIR``), never inside the checkpoint or next to it: the checkpoint is evidence and
may be read-only or on S3.

An entry's name is a hash of everything its rows depend on: the checkpoint's location, the store,
partition and version, the key/value schemas, the cache format, and the identity (path, size and
ETag or modification time) of every state file the version is rebuilt from. A rewritten, grown or
replaced file gives a different name, so a stale entry is never found (it ages out). An entry that
cannot be read back (truncated, damaged, not written under its own name) is deleted and rebuilt, never
shown; pages carry checksums, verified on every read.

Writes go to a temporary file in the cache folder and are renamed into place, so a desktop app and
a command line sharing the cache never see half an entry. The cache is capped in bytes; when a write
passes the cap, the least recently used entries (by modification time, refreshed on every hit) go.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from statelens.readers.lru import LRUFolder

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CACHE_ENV", "DEFAULT_MAX_BYTES", "CacheInfo", "StateCache", "default_cache_dir"]

log = logging.getLogger(__name__)

CACHE_ENV = "STATELENS_CACHE_DIR"
MAX_BYTES_ENV = "STATELENS_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
#: Bump when the layout of cached tables changes: older entries are then never found.
FORMAT = 1
_SUFFIX = ".parquet"
_KEY_META = b"statelens_cache_key"  # each entry names itself: a file under another name is not shown


def default_cache_dir() -> Path:
    """``$STATELENS_CACHE_DIR``, else the platform's user cache folder for statelens, ``/state``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()

    return Path(platformdirs.user_cache_dir("statelens", appauthor=False)) / "state"


@dataclass(frozen=True)
class CacheInfo:
    """What the cache holds: its folder, entries, bytes and cap."""

    path: Path
    entries: int
    bytes: int
    max_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "entries": self.entries,
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
        }


class StateCache:
    """Decoded state tables kept as Parquet files, keyed by the identity of their sources.

    Parameters
    ----------
    root : path, optional
        The cache folder (default :func:`default_cache_dir`); created on first write.
    max_bytes : int, optional
        Size cap (default ``$STATELENS_CACHE_MAX_BYTES`` or 4 GiB).
    """

    def __init__(self, root: str | Path | None = None, max_bytes: int | None = None):
        env_cap = os.environ.get(MAX_BYTES_ENV)
        cap = max_bytes if max_bytes is not None else int(env_cap) if env_cap else DEFAULT_MAX_BYTES
        self.root = Path(root) if root is not None else default_cache_dir()
        # The folder, its cap and eviction (shared with the mirror of remote files, readers.mirror).
        self.files = LRUFolder(self.root, cap, _SUFFIX, "statelens cache")
        self.hits = 0
        self.misses = 0
        self.rebuilt = 0

    @property
    def max_bytes(self) -> int:
        return self.files.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self.files.max_bytes = value

    @property
    def _pinned(self) -> dict[Path, int]:
        return self.files._pinned

    # -- keys ----------------------------------------------------------------------------------------
    @staticmethod
    def key(parts: dict[str, Any], sources: Iterable[tuple[str, int, str]]) -> str:
        """The entry name for a table described by ``parts`` and built from ``sources``.

        Parameters
        ----------
        parts : dict
            JSON-serialisable description: checkpoint location, store, partition, version, schemas...
        sources : iterable of (path, size, version tag)
            Every file the table is rebuilt from.
        """
        doc = {"format": FORMAT, "parts": parts, "sources": sorted(sources)}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:40]

    def _path(self, key: str) -> Path:
        return self.files.path(key)

    # -- use -----------------------------------------------------------------------------------------
    def get(self, key: str, expected: pa.Schema | None = None) -> pa.Table | None:
        """The cached table, or ``None`` when absent or unreadable (a damaged entry, or one whose
        schema is not ``expected``, is removed)."""
        import pyarrow as pa  # deferred: pyarrow (heavy)
        import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

        path = self._path(key)
        if not path.exists():
            return None
        try:
            table = pq.read_table(path, memory_map=True, page_checksum_verification=True)
            meta = dict(table.schema.metadata or {})
            if meta.pop(_KEY_META, None) != key.encode():
                raise ValueError("it is not the entry of this name (written by something else)")
            if expected is not None and not table.schema.equals(expected, check_metadata=False):
                raise ValueError(f"its columns are {table.schema.names}, not the expected ones")
            table = table.replace_schema_metadata(meta or None)
        except (OSError, pa.ArrowException, ValueError) as err:
            log.warning("statelens cache: %s is unreadable (%s); rebuilding it", path, err)
            self.rebuilt += 1
            self.files.unlink(path)
            return None
        self.files.touch(path)  # least recently used = oldest modification time
        return table

    def put(self, key: str, table: pa.Table) -> None:
        """Store ``table`` under ``key`` (atomically), then evict past the cap. Failures only warn:
        the cache is an optimisation, never a reason for a read to fail."""
        import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

        meta = {**(table.schema.metadata or {}), _KEY_META: key.encode()}
        self.files.write(
            key,
            lambda tmp: pq.write_table(
                table.replace_schema_metadata(meta), tmp, compression="zstd", write_page_checksum=True
            ),
        )

    def get_or_build(
        self, key: str, build: Callable[[], pa.Table], expected: pa.Schema | None = None
    ) -> pa.Table:
        """The cached table for ``key``, or ``build()``'s, which is then cached."""
        table = self.get(key, expected)
        if table is not None:
            with self.files.lock:
                self.hits += 1
            return table
        with self.files.lock:
            self.misses += 1
        table = build()
        self.put(key, table)
        return table

    def entry(
        self, key: str, build: Callable[[], pa.Table], expected: pa.Schema | None = None
    ) -> tuple[Path | None, pa.Table]:
        """:meth:`get_or_build`'s table and the file of its entry, for a query that reads the entry in
        place (pin it meanwhile: :meth:`pin`). The file is None when the entry cannot be written (no
        room, read-only cache folder): the caller keeps the table in memory instead.
        """
        table = self.get_or_build(key, build, expected)
        path = self._path(key)
        return (path if path.exists() else None), table

    def pin(self, paths: Iterable[Path]) -> None:
        """Keep these entries from eviction by this process until :meth:`unpin` (counted: pins nest)."""
        self.files.pin(paths)

    def unpin(self, paths: Iterable[Path]) -> None:
        self.files.unpin(paths)

    # -- housekeeping --------------------------------------------------------------------------------
    def evict(self) -> int:
        """Remove least recently used entries until the cache fits its cap; returns how many went."""
        return self.files.evict()

    def info(self) -> CacheInfo:
        """Entries and bytes held."""
        n, nbytes = self.files.held()
        return CacheInfo(self.root, n, nbytes, self.max_bytes)

    def clear(self) -> int:
        """Remove every entry (and stale temporary files); returns how many entries went."""
        return self.files.clear()

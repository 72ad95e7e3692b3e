"""A folder of files under a size cap, least recently used out: what the decoded-state cache
(:mod:`readers.cache`) and the mirror of remote files (:mod:`readers.mirror`) keep their entries in.

Entries live at ``<root>/<key[:2]>/<key><suffix>``, are written atomically (a temporary file renamed into
place), and are touched when read, so the oldest modification time is the least recently used. The folder
is scanned (and evicted) only when the bytes written since the last scan may pass the cap or
:data:`RESCAN_S` went by (other processes write too), not at every write: 200 writes rescanning 20,000
files cost 0.5 s of a 2M-key version. Failures to write or remove only warn: a cache is an optimisation,
never a reason for a read to fail.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Seconds after which a write scans the folder again even when this process' writes fit the cap.
RESCAN_S = 10.0
_TMP = ".tmp-"


class LRUFolder:
    """Entries in a folder under ``max_bytes``, least recently used out.

    Parameters
    ----------
    root : Path
        The folder (created on first write).
    max_bytes : int
        The cap.
    suffix : str
        The entries' file name suffix (``.parquet``, or none).
    label : str
        Names the folder in warnings (``statelens cache``, ``statelens mirror``).
    """

    def __init__(self, root: Path, max_bytes: int, suffix: str = "", label: str = "statelens cache"):
        self.root = root
        self.max_bytes = max_bytes
        self.suffix = suffix
        self.label = label
        self.lock = threading.Lock()
        self._pinned: dict[Path, int] = {}  # entries read in place: never evicted meanwhile
        self._estimate: int | None = None  # bytes held as of the last scan plus what was written since
        self._scanned_at = 0.0

    def path(self, key: str) -> Path:
        """Where the entry ``key`` lives."""
        return self.root / key[:2] / (key + self.suffix)

    def touch(self, path: Path) -> None:
        """Mark an entry used now (it was read)."""
        try:
            os.utime(path)
        except OSError:
            pass  # evicted meanwhile by another process: its bytes are read already

    def write(self, key: str, fill: Callable[[str], Any]) -> Path | None:
        """Write entry ``key`` atomically (``fill(tmp_path)`` writes the file), then evict past the cap;
        the entry's path, or None (with a warning) when it could not be written."""
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP, suffix=self.suffix, dir=path.parent)
            os.close(fd)
            try:
                fill(tmp)
                os.replace(tmp, path)
            finally:
                self.unlink(Path(tmp))
        except OSError as err:
            log.warning("%s: cannot write %s (%s)", self.label, path, err)
            return None
        with self.lock:
            if self._estimate is not None:
                self._estimate += _size(path)
            due = (
                self._estimate is None
                or self._estimate > self.max_bytes
                or time.monotonic() - self._scanned_at > RESCAN_S
            )
            if due:  # before evicting, so other writers do not start a scan of their own meanwhile
                self._scanned_at = time.monotonic()
                self._estimate = self._estimate or 0
        if due:
            self.evict()
        return path

    def pin(self, paths: Iterable[Path]) -> None:
        """Keep these entries from eviction by this process until :meth:`unpin` (counted: pins nest)."""
        with self.lock:
            for p in paths:
                self._pinned[Path(p)] = self._pinned.get(Path(p), 0) + 1

    def unpin(self, paths: Iterable[Path]) -> None:
        with self.lock:
            for p in paths:
                left = self._pinned.get(Path(p), 0) - 1
                if left > 0:
                    self._pinned[Path(p)] = left
                else:
                    self._pinned.pop(Path(p), None)

    def entries(self) -> list[tuple[float, int, Path]]:
        """``(modification time, size, path)`` of every entry (temporary files left out)."""
        out: list[tuple[float, int, Path]] = []
        if not self.root.is_dir():
            return out
        for sub in os.scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(sub.path):
                if e.name.startswith(_TMP) or not e.name.endswith(self.suffix):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed by another process meanwhile
                out.append((st.st_mtime, st.st_size, Path(e.path)))
        return out

    def evict(self) -> int:
        """Remove least recently used entries until the folder fits its cap; returns how many went."""
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = 0
        with self.lock:
            pinned = set(self._pinned)
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if path in pinned:
                continue
            self.unlink(path)
            total -= size
            removed += 1
        with self.lock:
            self._estimate = total
            self._scanned_at = time.monotonic()
        return removed

    def held(self) -> tuple[int, int]:
        """Entries and bytes held."""
        entries = self.entries()
        return len(entries), sum(size for _, size, _ in entries)

    def clear(self) -> int:
        """Remove every entry (and stale temporary files); returns how many entries went."""
        n = 0
        if not self.root.is_dir():
            return 0
        for sub in os.scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(sub.path):
                if e.name.startswith(_TMP) or e.name.endswith(self.suffix):
                    n += not e.name.startswith(_TMP)
                    self.unlink(Path(e.path))
        with self.lock:
            self._estimate = None
        return n

    def unlink(self, path: Path) -> None:
        """Remove a file; a failure only warns."""
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("%s: cannot remove %s (%s)", self.label, path, err)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

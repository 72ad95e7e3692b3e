"""Read-only access to a checkpoint folder through fsspec (local paths, ``file://``, ``s3://``...).

The wrapper offers listing, stat and read methods only: nothing in statelens can write, rename or
delete inside a checkpoint through it. The whole tree is listed once (one recursive ``find``, which
is a single paginated listing on object stores) and served from that cache; small files can be
fetched in parallel where latency dominates (object stores).
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from readers.errors import MissingFileError, NotACheckpointError, StatelensError, StorageError, redact

#: Parallel reads for object stores; local disks gain nothing from threads for small files.
REMOTE_READ_WORKERS = 16


@dataclass(frozen=True)
class FileEntry:
    """One listed file or folder, with its path relative to the checkpoint root."""

    path: str
    size_bytes: int
    is_dir: bool

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


def _split_url(url: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as err:
        raise StorageError(f"cannot open {redact(url)}: {err}", path=url) from err
    return fs, root.rstrip("/") or "/"


class CheckpointFS:
    """A read-only, listing-cached view of one checkpoint folder.

    Parameters
    ----------
    url : str
        Local path, ``file://`` URL or any fsspec URL (``s3://bucket/prefix``).
    storage_options : dict, optional
        Passed to fsspec (credentials come from the usual places when omitted).

    Raises
    ------
    NotACheckpointError
        When the path does not exist or is not a folder.
    StorageError
        When the storage cannot be reached or listed.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        if "://" not in url:
            url = os.path.abspath(os.path.expanduser(url))
        self.url = url
        self._fs, self._root = _split_url(url, storage_options)
        self._protocol = self._fs.protocol if isinstance(self._fs.protocol, str) else self._fs.protocol[0]
        self._lock = threading.Lock()
        self._entries: dict[str, FileEntry] = {}
        self._children: dict[str, list[FileEntry]] = {}
        self._list_tree()

    # -- listing -------------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """True when the checkpoint is on the local disk."""
        return self._protocol in ("file", "local")

    @property
    def display_root(self) -> str:
        """The checkpoint location without credentials, for messages."""
        return redact(self.url)

    def _list_tree(self) -> None:
        try:
            if not self._fs.isdir(self._root):
                if self._fs.exists(self._root):
                    raise NotACheckpointError("is a file, not a checkpoint folder", path=self.display_root)
                raise NotACheckpointError("no such folder", path=self.display_root)
            found = self._fs.find(self._root, withdirs=True, detail=True)
        except StatelensError:
            raise
        except (OSError, ValueError, RuntimeError) as err:
            raise StorageError(f"cannot list: {err}", path=self.display_root) from err
        prefix = self._root.rstrip("/") + "/"
        self._children[""] = []
        for full, info in sorted(found.items()):
            full = full.rstrip("/")
            if not full.startswith(prefix):
                continue
            rel = full[len(prefix):]
            entry = FileEntry(rel, int(info.get("size") or 0), info.get("type") == "directory")
            self._entries[rel] = entry
            if entry.is_dir:
                self._children.setdefault(rel, [])
        for rel, entry in self._entries.items():
            parent = posixpath.dirname(rel)
            self._children.setdefault(parent, []).append(entry)

    def exists(self, path: str) -> bool:
        """True when ``path`` (relative to the root) was listed."""
        return path in self._entries or path == ""

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a listed folder."""
        return path == "" or (path in self._entries and self._entries[path].is_dir)

    def list_dir(self, path: str = "") -> list[FileEntry]:
        """Entries directly inside folder ``path`` (empty when it does not exist)."""
        return list(self._children.get(path.rstrip("/"), []))

    def entry(self, path: str) -> FileEntry:
        """The listing entry of ``path``.

        Raises
        ------
        MissingFileError
            When ``path`` was not listed.
        """
        try:
            return self._entries[path]
        except KeyError:
            raise MissingFileError("file not found in the checkpoint", path=path) from None

    def walk_files(self, path: str = "") -> Iterable[FileEntry]:
        """Every file (not folder) under ``path``, in sorted path order."""
        prefix = path.rstrip("/") + "/" if path else ""
        for rel, entry in self._entries.items():
            if not entry.is_dir and rel.startswith(prefix):
                yield entry

    def total_files(self) -> int:
        """Number of files in the whole checkpoint."""
        return sum(1 for e in self._entries.values() if not e.is_dir)

    # -- reading -------------------------------------------------------------------------------------
    def full_path(self, path: str) -> str:
        """The storage path of a relative path (for messages, never for writing)."""
        return posixpath.join(self._root, path) if path else self._root

    def read_bytes(self, path: str) -> bytes:
        """Read one whole file.

        Raises
        ------
        MissingFileError
            When the file is not in the checkpoint.
        StorageError
            When the storage fails to return it.
        """
        if path not in self._entries:
            raise MissingFileError("file not found in the checkpoint", path=path)
        try:
            return bytes(self._fs.cat_file(self.full_path(path)))
        except FileNotFoundError as err:
            raise MissingFileError("file disappeared after listing", path=path) from err
        except (OSError, ValueError, RuntimeError) as err:
            raise StorageError(f"cannot read: {redact(str(err))}", path=path) from err

    def read_many(
        self, paths: Iterable[str], on_done: Callable[[str], None] | None = None
    ) -> dict[str, bytes | StatelensError]:
        """Read several files; a failure is returned in place of that file's bytes.

        Parameters
        ----------
        paths : iterable of str
            Relative paths.
        on_done : callable, optional
            Called with each path once it is read (for progress).

        Returns
        -------
        dict
            Path to bytes, or to the :class:`StatelensError` that reading it raised.
        """
        paths = list(paths)

        def one(p: str) -> tuple[str, bytes | StatelensError]:
            try:
                result: bytes | StatelensError = self.read_bytes(p)
            except StatelensError as err:
                result = err
            if on_done is not None:
                on_done(p)
            return p, result

        if self.is_local or len(paths) < 4:
            return dict(one(p) for p in paths)
        with ThreadPoolExecutor(max_workers=REMOTE_READ_WORKERS) as pool:
            return dict(pool.map(one, paths))

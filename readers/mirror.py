"""A local mirror of files read from remote checkpoints, so the next read of the same file is local.

Every file :class:`readers.fs.CheckpointFS` reads from remote storage (S3, GCS...) is kept under the
user's cache folder (``$STATELENS_MIRROR_DIR``, else ``files/`` beside the decoded-state cache's
``state/``, or inside ``$STATELENS_CACHE_DIR`` when that is set), never inside the checkpoint. An entry is named by a hash of
the checkpoint's location (without credentials), the file's path in it, its listed size and its ETag
(or the change marker the storage lists), so a rewritten file is a new entry and a stale one is never
read: it ages out. Entries are written to a temporary file and renamed into place (a desktop app and a
command line share the folder); one whose size is not the listed one is removed and read again from
the storage. The mirror is capped in bytes (``$STATELENS_MIRROR_MAX_BYTES``, default 4 GiB): past the
cap the least recently used entries go (by modification time, refreshed on every hit).
``$STATELENS_MIRROR=0`` turns it off; so does ``--no-cache`` on the command line.

:func:`iter_copy_checkpoint` copies a whole checkpoint into a folder of the user's choosing
(``statelens mirror``), for a post-mortem archive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from statelens.readers.cache import CACHE_ENV, default_cache_dir
from statelens.readers.errors import (
    ChecksumError,
    ReadCancelledError,
    RefusedError,
    StatelensError,
    UsageError,
)
from statelens.readers.lru import LRUFolder
from statelens.readers.model import Progress

if TYPE_CHECKING:
    from collections.abc import Iterable

    from statelens.readers.model import FileEntry


class CheckpointSource(Protocol):
    """What copying a checkpoint needs of :class:`readers.fs.CheckpointFS` (named structurally, so this
    module, which the filesystem layer uses, does not import it back)."""

    @property
    def is_local(self) -> bool: ...

    @property
    def display_root(self) -> str: ...

    def full_path(self, path: str) -> str: ...

    def walk_files(self, path: str = "") -> Iterable[FileEntry]: ...

    def read_ahead(self, paths: Iterable[str]) -> None: ...

    def cancel_read_ahead(self) -> None: ...

    def read_bytes(self, path: str, *, cancelled: Callable[[], bool] | None = None) -> bytes: ...


__all__ = [
    "MIRROR_DIR_ENV",
    "MIRROR_ENV",
    "CopyResult",
    "FileMirror",
    "MirrorInfo",
    "default_mirror_dir",
    "iter_copy_checkpoint",
    "mirror_enabled",
]

log = logging.getLogger(__name__)

MIRROR_ENV = "STATELENS_MIRROR"
MIRROR_DIR_ENV = "STATELENS_MIRROR_DIR"
MAX_BYTES_ENV = "STATELENS_MIRROR_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
#: Bump when entries' naming changes: older entries are then never found.
FORMAT = 1
_TMP = ".tmp-"


def mirror_enabled() -> bool:
    """False when ``$STATELENS_MIRROR`` is ``0``, ``off``, ``false`` or ``no``."""
    return os.environ.get(MIRROR_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def default_mirror_dir() -> Path:
    """``$STATELENS_MIRROR_DIR``, else ``files/`` in the decoded-state cache's folder."""
    env = os.environ.get(MIRROR_DIR_ENV)
    if env:
        return Path(env).expanduser()

    if os.environ.get(CACHE_ENV):  # the decoded-state cache's own folder: the mirror goes inside it
        return default_cache_dir() / "files"
    return default_cache_dir().parent / "files"  # beside state/ in the user's cache folder


@dataclass(frozen=True)
class MirrorInfo:
    """What the mirror holds: its folder, files, bytes and cap."""

    path: Path
    files: int
    bytes: int
    max_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "files": self.files, "bytes": self.bytes, "max_bytes": self.max_bytes}


class FileMirror:
    """Remote files kept on the local disk, keyed by location, path, size and ETag.

    Parameters
    ----------
    root : path, optional
        The mirror folder (default :func:`default_mirror_dir`); created on first write.
    max_bytes : int, optional
        Size cap (default ``$STATELENS_MIRROR_MAX_BYTES`` or 4 GiB).

    Attributes
    ----------
    hits, writes : int
        Files served and files written by this instance.
    """

    def __init__(self, root: str | Path | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else default_mirror_dir()
        env_cap = os.environ.get(MAX_BYTES_ENV)
        cap = max_bytes if max_bytes is not None else int(env_cap) if env_cap else DEFAULT_MAX_BYTES
        # The folder, its cap and eviction (shared with the decoded-state cache, readers.cache).
        self.files = LRUFolder(self.root, cap, "", "statelens mirror")
        self.hits = 0
        self.writes = 0

    @property
    def max_bytes(self) -> int:
        return self.files.max_bytes

    @staticmethod
    def key(location: str, entry: FileEntry) -> str | None:
        """The entry name of a listed file, or None when the listing gave no change marker (then the
        file is never mirrored: a rewrite could not be told apart)."""
        if not entry.version_tag:
            return None
        doc = [FORMAT, location, entry.path, entry.size_bytes, entry.version_tag]
        return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:40]

    def _path(self, key: str) -> Path:
        return self.files.path(key)

    def has(self, location: str, entry: FileEntry) -> bool:
        """Whether the file is mirrored (with its listed size)."""
        key = self.key(location, entry)
        if key is None:
            return False
        try:
            return self._path(key).stat().st_size == entry.size_bytes
        except OSError:
            return False

    def get(self, location: str, entry: FileEntry) -> bytes | None:
        """The mirrored bytes of a listed file, or None when absent (an entry of the wrong size is removed).

        Parameters
        ----------
        location : str
            The checkpoint's location without credentials (:attr:`readers.fs.CheckpointFS.display_root`).
        entry : FileEntry
            The file as listed.
        """
        key = self.key(location, entry)
        if key is None:
            return None
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) != entry.size_bytes:
            log.warning(
                "statelens mirror: %s holds %d bytes, not %d; reading it again",
                path,
                len(data),
                entry.size_bytes,
            )
            self.files.unlink(path)
            return None
        self.files.touch(path)  # least recently used = oldest modification time
        with self.files.lock:
            self.hits += 1
        return data

    def put(self, location: str, entry: FileEntry, data: bytes) -> None:
        """Keep a file's bytes (atomically), then evict past the cap. Failures only warn: the mirror is an
        optimisation, never a reason for a read to fail."""
        key = self.key(location, entry)
        if key is None or len(data) != entry.size_bytes:
            return
        if self.files.write(key, lambda tmp: Path(tmp).write_bytes(data)) is not None:
            with self.files.lock:
                self.writes += 1

    # -- housekeeping --------------------------------------------------------------------------------
    def evict(self) -> int:
        """Remove least recently used files until the mirror fits its cap; returns how many went."""
        return self.files.evict()

    def info(self) -> MirrorInfo:
        """Files and bytes held."""
        n, nbytes = self.files.held()
        return MirrorInfo(self.root, n, nbytes, self.max_bytes)

    def clear(self) -> int:
        """Remove every file (and stale temporary files); returns how many files went."""
        return self.files.clear()


# -- copying a whole checkpoint --------------------------------------------------------------------------
@dataclass
class CopyResult:
    """What :func:`iter_copy_checkpoint` did."""

    target: Path
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0  # already in the target with the listed size (a resumed copy)
    verified: int = 0  # checked against an MD5 ETag as well as the listed size
    failed: list[Any] = field(default_factory=list)  # StatelensError per file that could not be copied

    def to_json(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "copied": self.copied,
            "copied_bytes": self.copied_bytes,
            "skipped": self.skipped,
            "verified_md5": self.verified,
            "failed": [err.to_json() for err in self.failed],
        }


def _md5_etag(entry: FileEntry) -> str | None:
    """The MD5 hex digest an S3 ETag is, for objects uploaded in one part (multipart ETags end in ``-N``)."""
    if not entry.version_tag.startswith("ETag="):
        return None
    etag = entry.version_tag[5:].strip('"').lower()
    return etag if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag) else None


def refuse_overlap(fs: CheckpointSource, target: Path) -> None:
    """Refuse a local ``target`` folder that is the checkpoint, lies inside it, or holds it: a copy
    written there could land in the checkpoint's own files.

    Raises
    ------
    RefusedError
        Naming the folder and the checkpoint.
    """
    if not fs.is_local:
        return
    source = os.path.realpath(fs.full_path(""))
    real = os.path.realpath(target)
    if real == source or real.startswith(source.rstrip(os.sep) + os.sep):
        raise RefusedError(
            f"{target} is inside the checkpoint {fs.display_root}: statelens never writes there"
        )
    if source.startswith(real.rstrip(os.sep) + os.sep):
        raise RefusedError(f"{target} holds the checkpoint {fs.display_root}: statelens never writes there")


def write_file_atomic(dest: Path, data: bytes) -> None:
    """Write ``dest`` whole or not at all: a temporary name in its folder (created if needed), then a
    rename, as Spark's ``CheckpointFileManager.createAtomic`` writes; the file is readable by all (0644
    under the usual umask), as Spark's are."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TMP, dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def iter_copy_checkpoint(
    fs: CheckpointSource,
    target: str | Path,
    cancelled: Callable[[], bool] | None = None,
    *,
    skip: Callable[[str], bool] | None = None,
) -> Generator[Progress, None, CopyResult]:
    """Copy every file of a checkpoint into a local folder, many requests at a time; resumable.

    Files already in ``target`` with their listed size are kept (a copy stopped half-way goes on where
    it stopped: each file is written to a temporary name and renamed, so a file there is whole). Every
    file read is checked against its listed size and, on S3, its listed ETag (``If-Match``), and
    against the ETag's MD5 where the object was uploaded in one part. A file that cannot be read or
    does not match is reported and left out; the others are copied.

    Parameters
    ----------
    fs : CheckpointSource
        The checkpoint (opened without the mirror: the copy is the local copy).
    target : path
        A local folder, created if needed; never inside the checkpoint.
    cancelled : callable, optional
        Stops the copy between files (what is copied stays; run again to resume).
    skip : callable, optional
        Paths (relative to the root) for which it returns True are left out of the copy.

    Yields
    ------
    Progress
        Per file.

    Returns
    -------
    CopyResult

    Raises
    ------
    RefusedError
        When ``target`` is inside a local checkpoint or holds it (:func:`refuse_overlap`).
    UsageError
        When ``target`` is a file.
    ReadCancelledError
        When cancelled.
    """
    target = Path(target).expanduser().absolute()
    refuse_overlap(fs, target)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is a file, not a folder")
    result = CopyResult(target)
    entries = [e for e in fs.walk_files() if skip is None or not skip(e.path)]
    todo: list[FileEntry] = []
    for entry in entries:
        try:
            if (target / entry.path).stat().st_size == entry.size_bytes:
                result.skipped += 1
                continue
        except OSError:
            pass
        todo.append(entry)
    fs.read_ahead(e.path for e in todo)
    total = len(entries)
    done = result.skipped
    try:
        for entry in todo:
            if cancelled is not None and cancelled():
                raise ReadCancelledError("copy cancelled; run it again to resume", path=entry.path)
            yield Progress(done, total, entry.path)
            done += 1
            try:
                data = fs.read_bytes(entry.path, cancelled=cancelled)
                md5 = _md5_etag(entry)
                if md5 is not None:
                    if hashlib.md5(data, usedforsecurity=False).hexdigest() != md5:
                        raise ChecksumError(
                            f"MD5 of the {len(data)} bytes read is not the object's ETag {md5}",
                            path=entry.path,
                        )
                    result.verified += 1
            except ReadCancelledError:
                raise
            except StatelensError as err:
                result.failed.append(err)
                continue
            write_file_atomic(target / entry.path, data)
            result.copied += 1
            result.copied_bytes += len(data)
    finally:
        fs.cancel_read_ahead()
    yield Progress(total, total, "")
    return result

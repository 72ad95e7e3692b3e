"""Finding every Structured Streaming checkpoint below a root folder or prefix (``statelens fleet``).

A checkpoint is a folder holding ``offsets/`` and ``commits/`` (``docs/format.md`` §1), or a ``metadata``
file whose JSON names a query ``id`` (a query that has not planned a batch yet). The search lists each
folder once, through :meth:`readers.fs.CheckpointFS.list_prefix` (one ``ls``: on an object store one
paginated listing of that prefix, never a request per file), the folders of one level many at a time.
It never lists inside a checkpoint (its ``state/``, ``sources/``, ``offsets/``, ``commits/``) on its
own, nor folders deeper than ``max_depth`` that are not checkpoints. On S3 a folder that is not a
checkpoint is listed whole (one recursive listing, 1,000 keys a request) when that takes no more requests
than it has subfolders; the checkpoints below it are then found with every file of theirs, which they
open with instead of a listing of their own. A folder that cannot be listed is reported
with its error and the search goes on; only a root that cannot be listed ends it.

Qt-free and read-only: listings and the reads of small ``metadata`` files only.
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from statelens.readers.errors import ReadCancelledError, StatelensError
from statelens.readers.fs import CheckpointFS
from statelens.readers.model import FileEntry

__all__ = ["DEFAULT_MAX_DEPTH", "Discovery", "FoundCheckpoint", "iter_discover"]

#: Folder levels below the root searched for checkpoints (the root is level 0).
DEFAULT_MAX_DEPTH = 6
#: Folders listed at once (listings are I/O: on an object store each is a round trip).
DEFAULT_LIST_JOBS = 16


@dataclass(frozen=True)
class FoundCheckpoint:
    """A checkpoint found below the root, or a folder that could not be searched.

    Attributes
    ----------
    url : str
        Where to open it (the root's URL or path joined with ``path``; credentials of the root kept).
    path : str
        Relative to the root ("" when the root is the checkpoint).
    display : str
        ``url`` without credentials, for messages and reports.
    error : StatelensError or None
        Set when the folder ``path`` could not be listed or its ``metadata`` read: it may hold checkpoints.
    entries : tuple of FileEntry, optional
        Every file of the checkpoint (paths relative to it), when the search listed them already (a
        recursive listing of a folder above it): opening it then needs no listing of its own.
    """

    url: str
    path: str
    display: str
    error: StatelensError | None = None
    entries: tuple[FileEntry, ...] | None = None


#: What listing a folder tells: (folder, is a checkpoint, folders to search with their depths, error,
#: checkpoints found below it with their files).
Visit = tuple[
    str, bool, list[tuple[str, int]], "StatelensError | None", list[tuple[str, tuple[FileEntry, ...]]]
]


@dataclass
class Discovery:
    """What a search cost: folders listed (those that failed included) and ``metadata`` files read (one
    request each on an object store, retries aside)."""

    listings: int = 0
    metadata_reads: int = 0


def _join(base: str, rel: str) -> str:
    if not rel:
        return base
    if "://" not in base:
        return os.path.join(base, rel)
    return base.rstrip("/") + "/" + rel


def _names(entries: list[FileEntry]) -> tuple[set[str], set[str]]:
    dirs = {e.name for e in entries if e.is_dir}
    files = {e.name for e in entries if not e.is_dir}
    return dirs, files


def _query_id(data: bytes) -> str | None:
    """The query id of a ``metadata`` file (``{"id": "..."}``, §2.1), or None when it is not one."""
    try:
        first = data.decode("utf-8").strip().splitlines()[0] if data.strip() else ""
        obj = json.loads(first) if first else None
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("id"), str) and obj["id"]:
        return str(obj["id"])
    return None


def _tree_checkpoints(
    rel: str, depth: int, files: list[FileEntry], max_depth: int
) -> tuple[list[tuple[str, tuple[FileEntry, ...]]], list[tuple[str, int]]]:
    """The checkpoints below ``rel`` (at ``depth``) in a recursive listing of it (``files`` relative to
    it): (path, its files) for each, and the folders to search as usual (those with a ``metadata`` file
    but no ``offsets/`` and ``commits/``, read one at a time), each with its depth."""
    dirs: dict[str, set[str]] = {}
    names: dict[str, set[str]] = {}
    for e in files:
        parent, _, name = e.path.rpartition("/")
        names.setdefault(parent, set()).add(name)
        while parent:
            up, _, sub = parent.rpartition("/")
            dirs.setdefault(up, set()).add(sub)
            parent = up
    under: dict[str, list[FileEntry]] = {}
    found: list[tuple[str, tuple[FileEntry, ...]]] = []
    search: list[tuple[str, int]] = []
    checkpoints: list[str] = []
    stack = [(sub, depth + 1) for sub in sorted(dirs.get("", ()))]
    while stack:
        folder, level = stack.pop()
        subs = dirs.get(folder, set())
        if "offsets" in subs and "commits" in subs:
            checkpoints.append(folder)
        elif "metadata" in names.get(folder, ()):
            search.append((posixpath.join(rel, folder) if rel else folder, level))
        elif level < max_depth:
            stack.extend((posixpath.join(folder, s), level + 1) for s in sorted(subs))
    tops = set(checkpoints)
    for e in files:  # each file to the checkpoint it is in (a checkpoint is never inside another here)
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            top = "/".join(parts[:i])
            if top in tops:
                under.setdefault(top, []).append(
                    FileEntry(e.path[len(top) + 1 :], e.size_bytes, False, e.version_tag, e.modified_ms)
                )
                break
    for folder in sorted(checkpoints):
        found.append((posixpath.join(rel, folder) if rel else folder, tuple(under.get(folder, ()))))
    return found, search


def iter_discover(
    root: str,
    storage_options: dict[str, Any] | None = None,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    jobs: int = DEFAULT_LIST_JOBS,
    cancelled: Callable[[], bool] | None = None,
    stats: Discovery | None = None,
) -> Iterator[FoundCheckpoint]:
    """Every checkpoint below ``root``, each once, as found (level by level; within a level in the order
    the listings finish), then nothing else.

    Parameters
    ----------
    root : str
        A local folder or any fsspec URL (``s3://bucket/prefix``).
    storage_options : dict, optional
        fsspec options.
    max_depth : int
        Deepest folder level listed (the root is 0): a checkpoint at ``root/team/job`` is at level 2.
    jobs : int
        Folders listed at once.
    cancelled : callable, optional
        Stops the search (:class:`ReadCancelledError`).
    stats : Discovery, optional
        Counts the listings and reads made.

    Yields
    ------
    FoundCheckpoint
        A checkpoint, or (``error`` set) a folder that could not be listed.

    Raises
    ------
    NotACheckpointError
        When the root does not exist or is a file.
    StorageError
        When the root cannot be listed.
    ReadCancelledError
    """
    stats = stats if stats is not None else Discovery()
    fs = CheckpointFS(root, storage_options, cancelled=cancelled, mirror=False, keep_bytes=0, listed=False)
    base = fs.url
    counting = threading.Lock()
    seen_local: set[str] = set()  # real paths of local folders listed: a link back up is not followed twice

    def found(
        rel: str, error: StatelensError | None = None, entries: tuple[FileEntry, ...] | None = None
    ) -> FoundCheckpoint:
        shown = posixpath.join(fs.display_root, rel) if rel else fs.display_root
        return FoundCheckpoint(_join(base, rel), rel, shown, error, entries)

    def visit(rel: str, depth: int = 0) -> Visit:
        """List ``rel``: (rel, is a checkpoint, folders to search with their depths, error, checkpoints
        found below it by a recursive listing)."""
        with counting:
            stats.listings += 1  # a listing that fails counts too: it was a request
        entries = fs.list_prefix(rel, cancelled=cancelled)
        dirs, files = _names(entries)
        if "offsets" in dirs and "commits" in dirs:
            return rel, True, [], None, []
        if "metadata" in files:
            with counting:
                stats.metadata_reads += 1
            try:
                data = fs.read_bytes(
                    posixpath.join(rel, "metadata") if rel else "metadata", cancelled=cancelled
                )
            except ReadCancelledError:
                raise
            except StatelensError as err:
                return rel, False, [], err, []
            if _query_id(data) is not None:
                return rel, True, [], None, []
        subs = [e.path for e in entries if e.is_dir]
        if fs.is_local:
            fresh = []
            for s in subs:
                real = os.path.realpath(fs.full_path(s))
                with counting:
                    if real not in seen_local:  # two links to one folder: it is searched once
                        seen_local.add(real)
                        fresh.append(s)
            subs = fresh
        if subs and depth < max_depth and not fs.is_local:
            # One recursive listing of the whole folder when it takes no more pages than the folders below
            # have members (each would cost a listing of its own, each checkpoint one more): a folder of
            # checkpoints costs its keys / 1,000 requests, and each checkpoint's listing comes with it.
            tree, pages = fs.list_tree(rel, len(subs), cancelled=cancelled)
            with counting:
                stats.listings += pages
            if tree is not None:
                ckpts, search = _tree_checkpoints(rel, depth, tree, max_depth)
                return rel, False, search, None, ckpts
        return rel, False, [(s, depth + 1) for s in subs], None, []

    if fs.is_local:
        seen_local.add(os.path.realpath(fs.full_path("")))
    rel, is_ckpt, subs, err, ckpts = visit("")  # the root: its errors end the search
    if err is not None:
        yield found(rel, err)
        return
    if is_ckpt:
        yield found("")
        return
    for path, files in ckpts:
        yield found(path, entries=files)
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="statelens-discover") as pool:
        pending: dict[Future[Visit], tuple[str, int]] = {}
        queue = [item for item in subs if item[1] <= max_depth]
        while queue or pending:
            while queue and len(pending) < max(1, jobs) * 2:
                rel, depth = queue.pop(0)
                pending[pool.submit(visit, rel, depth)] = (rel, depth)
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f][0]):
                rel, depth = pending.pop(fut)
                try:
                    _, is_ckpt, subs, err, ckpts = fut.result()
                except ReadCancelledError:
                    for other in pending:
                        other.cancel()
                    raise
                except StatelensError as listing_error:
                    yield found(rel, listing_error)
                    continue
                if err is not None:
                    yield found(rel, err)
                elif is_ckpt:
                    yield found(rel)
                else:
                    for path, files in ckpts:
                        yield found(path, entries=files)
                    if depth < max_depth:
                        queue.extend(item for item in subs if item[1] <= max_depth)

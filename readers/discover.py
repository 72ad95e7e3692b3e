"""Finding every Structured Streaming checkpoint below a root folder or prefix (``statelens fleet``).

A checkpoint is a folder holding ``offsets/`` and ``commits/`` (``docs/format.md`` §1), or a ``metadata``
file whose JSON names a query ``id`` (a query that has not planned a batch yet). The search lists each
folder once, through :meth:`readers.fs.CheckpointFS.list_prefix` (one ``ls``: on an object store one
paginated listing of that prefix, never a request per file), the folders of one level many at a time.
It never lists inside a checkpoint (its ``state/``, ``sources/``, ``offsets/``, ``commits/``), nor
folders deeper than ``max_depth`` that are not checkpoints. A folder that cannot be listed is reported
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
    """

    url: str
    path: str
    display: str
    error: StatelensError | None = None


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

    def found(rel: str, error: StatelensError | None = None) -> FoundCheckpoint:
        shown = posixpath.join(fs.display_root, rel) if rel else fs.display_root
        return FoundCheckpoint(_join(base, rel), rel, shown, error)

    def visit(rel: str) -> tuple[str, bool, list[str], StatelensError | None]:
        """List ``rel``: (rel, is a checkpoint, subfolders to search, error)."""
        with counting:
            stats.listings += 1  # a listing that fails counts too: it was a request
        entries = fs.list_prefix(rel, cancelled=cancelled)
        dirs, files = _names(entries)
        if "offsets" in dirs and "commits" in dirs:
            return rel, True, [], None
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
                return rel, False, [], err
            if _query_id(data) is not None:
                return rel, True, [], None
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
        return rel, False, subs, None

    if fs.is_local:
        seen_local.add(os.path.realpath(fs.full_path("")))
    rel, is_ckpt, subs, err = visit("")  # the root: its errors end the search
    if err is not None:
        yield found(rel, err)
        return
    if is_ckpt:
        yield found("")
        return
    level = [(s, 1) for s in subs]
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="statelens-discover") as pool:
        pending: dict[Future[tuple[str, bool, list[str], StatelensError | None]], tuple[str, int]] = {}
        queue = [item for item in level if item[1] <= max_depth]
        while queue or pending:
            while queue and len(pending) < max(1, jobs) * 2:
                rel, depth = queue.pop(0)
                pending[pool.submit(visit, rel)] = (rel, depth)
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f][0]):
                rel, depth = pending.pop(fut)
                try:
                    _, is_ckpt, subs, err = fut.result()
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
                elif depth < max_depth:
                    queue.extend((s, depth + 1) for s in subs)

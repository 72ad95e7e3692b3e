"""Sizes of a store beside :class:`readers.scan.StateScan`, with its error policy: rows, key + value bytes
and file bytes of every partition at every version (:func:`iter_sizes`, what ``growth`` folds), and the
state files no partition's newest version needs (:func:`superseded_state_files`, from the listing).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from statelens.readers.errors import UsageError
from statelens.readers.scan import StateScan

if TYPE_CHECKING:
    from statelens.readers.checkpoint import Checkpoint
    from statelens.readers.model import StateFile

__all__ = ["PartitionSizes", "iter_sizes", "superseded_state_files"]


@dataclass
class PartitionSizes:
    """One partition: its live rows, their key plus value bytes as stored and the bytes of the files written
    for it, by version (oldest first; none when nothing could be read: the error is in the scan's
    ``problems``), and when asked the live records at the last version (as :meth:`StateScan.iter_live`)."""

    partition_id: int
    rows: dict[int, int] = field(default_factory=dict)
    state_bytes: dict[int, int] = field(default_factory=dict)
    file_bytes: dict[int, int] = field(default_factory=dict)
    live: tuple[Any, Any, Any, Any, Any] | None = None


def iter_sizes(scan: StateScan, *, live: bool = False) -> Iterator[PartitionSizes]:
    """Each partition of a ``stats`` scan at every version, in partition order, counted from every
    version's records at once where the files allow (HDFS deltas and RocksDB changelogs replayed as
    arrays, zips one by one; a big store a few partitions at once), else replayed version by version
    (the scan's ``replay`` kind: a file that cannot be read goes to ``problems`` and ``unreadable``).

    Raises
    ------
    BackendUnavailableError
        At once: a store the native readers cannot read, or ``FilesUnavailableError`` on a backend that
        reads decoded rows (Spark: its ``iter_stats`` counts rows and file bytes, not key + value bytes).
    """
    if scan.kind != "stats" or {scan.version, scan.start_version, scan.end_version} != {None}:
        raise UsageError("sizes are counted by a stats scan over every version")
    return _sizes(scan, scan._files(), live)


def _sizes(scan: StateScan, reader: Any, live: bool) -> Iterator[PartitionSizes]:
    for pid, arrays in reader.iter_version_arrays(scan.partition_ids(), scan.cancelled):
        if scan.cancelled is not None and scan.cancelled():
            return
        if arrays is None:
            yield _walk(scan, reader, pid, live)
            continue
        versions, counts, nbytes, last = arrays
        yield PartitionSizes(
            pid,
            dict(zip(versions, map(int, counts), strict=True)),
            dict(zip(versions, map(int, nbytes), strict=True)),
            {v: reader.bytes_on_disk(pid, v) for v in versions},
            last if live else None,
        )


def _walk(scan: StateScan, reader: Any, pid: int, live: bool) -> PartitionSizes:
    out = PartitionSizes(pid)
    replay = replace(scan, kind="replay", partitions=[pid])
    state: Mapping[bytes, bytes] | None = None
    for step in replay.iter_replay(sizes=True):
        out.rows[step.version], out.state_bytes[step.version] = len(step.state), step.state_bytes or 0
        out.file_bytes[step.version] = reader.bytes_on_disk(pid, step.version)
        state = step.state
    scan.problems.extend(replay.problems)
    scan.unreadable.extend(replay.unreadable)
    out.live = _as_arrays(state) if live and state is not None else None
    return out


def _as_arrays(state: Mapping[bytes, bytes]) -> tuple[Any, Any, Any, Any, Any]:
    """A raw state as one buffer (each key, then its value) and offset arrays, in the state's order."""
    pieces = list(itertools.chain.from_iterable(state.items()))
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    starts = np.cumsum(lengths) - lengths
    return b"".join(pieces), starts[0::2], lengths[0::2], starts[1::2], lengths[1::2]


def superseded_state_files(ckpt: Checkpoint) -> list[StateFile]:
    """The HDFS deltas and snapshots older than the newest snapshot each partition's newest version is
    rebuilt from (``docs/format.md`` §3.4–§3.5): Spark keeps ``minBatchesToRetain`` versions on purpose,
    but these files are not needed to read the newest state. From the listing; nothing is read.
    """
    parts: dict[tuple[int, str, int], list[StateFile]] = {}
    for op, store, sf in ckpt.iter_state_files():
        if sf.kind in ("delta", "snapshot"):
            parts.setdefault((op, store, sf.partition_id), []).append(sf)
    out: list[StateFile] = []
    for files in parts.values():
        latest = max(f.version for f in files)
        deltas = {f.version for f in files if f.kind == "delta"}
        snapshots = sorted((f.version for f in files if f.kind == "snapshot"), reverse=True)
        base = next((s for s in snapshots if all(v in deltas for v in range(s + 1, latest + 1))), 0)
        out.extend(f for f in files if f.version < base or (f.version == base and f.kind == "delta"))
    return out

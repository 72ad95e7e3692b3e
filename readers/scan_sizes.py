"""What a store's versions hold and what its files weigh, beside :class:`readers.scan.StateScan` and with
its error policy: rows, key + value bytes (records as stored) and file bytes of every partition at every
version (:func:`iter_sizes`, what ``growth`` folds), and the state files no partition's newest version
needs (:func:`superseded_state_files`, from the listing alone).

Rows and bytes are counted from every version's records at once where the store reader can
(``StoreReaderBase.iter_version_arrays``: HDFS deltas and RocksDB changelogs replayed as arrays with no
Python object per record, RocksDB zips counted one by one, a big store a few partitions at once); else
the partition is replayed version by version (the scan's ``replay`` kind), which reports a file that
cannot be read: its error goes to the scan's ``problems``, the partition (from that version) to its
``unreadable``, and the replay restarts at the next version it can rebuild.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from statelens.readers.errors import UsageError
from statelens.readers.scan import StateScan, Unreadable, _PartitionReplay

if TYPE_CHECKING:
    from statelens.readers.checkpoint import Checkpoint
    from statelens.readers.model import StateFile

__all__ = ["PartitionSizes", "iter_sizes", "superseded_state_files"]


@dataclass
class PartitionSizes:
    """One partition at every version :func:`iter_sizes` read, oldest first.

    Attributes
    ----------
    partition_id : int
    versions, rows, state_bytes, file_bytes : list of int
        Each version, its live rows, their key plus value bytes as stored, and the bytes of the files
        written for it (``<v>.delta`` / ``<v>.snapshot``, ``<v>.changelog`` / ``<v>.zip``). Empty when
        no version could be read (the error is in the scan's ``problems``).
    live : tuple, optional
        With ``live``: the live records at the last version as stored, ``(buffer, key_start, key_len,
        value_start, value_len)`` (as :meth:`StateScan.iter_live` gives them).
    """

    partition_id: int
    versions: list[int]
    rows: list[int]
    state_bytes: list[int]
    file_bytes: list[int]
    live: tuple[Any, Any, Any, Any, Any] | None = None


def iter_sizes(scan: StateScan, *, live: bool = False) -> Iterator[PartitionSizes]:
    """Rows, key + value bytes and file bytes of every version of each partition of a ``stats`` scan (its
    ``partitions``, default all), in partition order, with the scan's error policy (``strict`` raises).

    Parameters
    ----------
    scan : StateScan
        Kind ``stats``, no version bounds (every version is counted).
    live : bool
        Also hand out each partition's live records at its last version (:attr:`PartitionSizes.live`).

    Raises
    ------
    FilesUnavailableError
        The backend reads decoded rows through an engine (Spark): its ``iter_stats`` counts rows and file
        bytes, not key + value bytes. Raised here, before any partition is read.
    BackendUnavailableError
        A store the native readers cannot read.
    """
    if scan.kind != "stats" or {scan.version, scan.start_version, scan.end_version} != {None}:
        raise UsageError("sizes are counted by a stats scan over every version")
    return _sizes(scan, scan._files(), live)


def _sizes(scan: StateScan, reader: Any, live: bool) -> Iterator[PartitionSizes]:
    for pid, arrays in reader.iter_version_arrays(scan.partition_ids(), scan.cancelled):
        if scan.cancelled is not None and scan.cancelled():
            return
        if arrays is not None:
            versions, counts, nbytes, last = arrays
            yield PartitionSizes(
                pid,
                list(versions),
                list(map(int, counts)),
                list(map(int, nbytes)),
                [reader.bytes_on_disk(pid, v) for v in versions],
                last if live else None,
            )
            continue
        yield _walk(scan, reader, pid, live)


def _walk(scan: StateScan, reader: Any, pid: int, live: bool) -> PartitionSizes:
    """One partition replayed version by version, where it cannot be counted at once (or a file of it
    cannot be read)."""
    out = PartitionSizes(pid, [], [], [], [])
    known = len(scan.problems)
    state: dict[bytes, bytes] | None = None
    for step in _PartitionReplay(reader, pid, scan.problems, sizes=True).advance(None, scan.cancelled):
        out.versions.append(step.version)
        out.rows.append(len(step.state))
        out.state_bytes.append(step.state_bytes or 0)
        out.file_bytes.append(reader.bytes_on_disk(pid, step.version))
        state = step.state
    for err in scan.problems[known:]:
        if scan.strict:
            raise err
        scan.unreadable.append(Unreadable(pid, err.context.get("version"), err))
    if live and state is not None:
        out.live = _as_arrays(state)
    return out


def _as_arrays(state: dict[bytes, bytes]) -> tuple[Any, Any, Any, Any, Any]:
    """A raw state as one buffer and offset arrays, each key followed by its value, in the state's order."""
    lengths = np.fromiter(map(len, itertools.chain.from_iterable(state.items())), np.int64, 2 * len(state))
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    buf = b"".join(itertools.chain.from_iterable(state.items()))
    return buf, starts[0::2], lengths[0::2], starts[1::2], lengths[1::2]


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

"""What every state store reader shares, whatever the provider (HDFS-backed or RocksDB).

A reader covers all partitions of one store. Subclasses know their files: they rebuild the raw state of
a partition at a version (:meth:`StoreReaderBase.read_raw`), list one version's changes
(:meth:`StoreReaderBase.iter_raw_changes`) and walk versions for statistics. The inventory, the
decoding of raw UnsafeRow pairs into rows and changes, and the error-tolerant statistics loop are here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from statelens.readers._format.keyids import PaddedKeys
from statelens.readers._format.records import RecordIndex, SizedLayout, SizeRuns, gather_bytes
from statelens.readers._format.unsaferow import RowLayout, compile_layout, decode_rows
from statelens.readers.arrow_values import binary_array, first_appearances, first_of_ids, key_ids, numpy_array
from statelens.readers.errors import (
    BackendUnavailableError,
    MissingFileError,
    SchemaMismatchError,
    StatelensError,
    UsageError,
)
from statelens.readers.fs import CheckpointFS, PartitionReadAhead
from statelens.readers.model import PartitionVersionStats, StateChange, StateFile, StateRow, StoreSchema
from statelens.readers.parallel import in_order
from statelens.readers.values import rows_to_arrow, state_row_schema, to_arrow_type

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from statelens.readers.cache import StateCache

#: Raw state of one partition at one version: key bytes -> value bytes.
RawState = dict[bytes, bytes]

#: The same, columnar: ``(buffer, key_start, key_len, value_start, value_len)`` (int64 numpy arrays;
#: the bytes of key ``i`` are ``buffer[key_start[i] : key_start[i] + key_len[i]]``).
RawArrays = tuple[Any, Any, Any, Any, Any]
#: One partition at every version: ``(versions, rows, key + value bytes, live records at the last)``.
VersionArrays = tuple[list[int], Any, Any, RawArrays]
#: One partition's live rows at every version: ``(versions, rows)``.
VersionRows = tuple[list[int], Any]


#: Compressed bytes of the files a replay (:class:`ReplayRecords`) checks and cuts at once.
FILE_GROUP_BYTES = 16 * 1024 * 1024

#: Bytes of state files from which :meth:`StoreReaderBase.big` says a store is big: then partitions are
#: replayed as arrays on threads (measured on HDFS stores, two threads against one: the 36 MB of a
#: 2M-key store 0.50 against 0.45 s, the 514 MB of a 20M-key store 2.3 against 3.7 s).
BIG_STORE_BYTES = 64 * 1024 * 1024


def file_groups(files: list[StateFile]) -> Iterator[list[StateFile]]:
    """Consecutive files in groups of up to :data:`FILE_GROUP_BYTES` (at least one file each)."""
    group: list[StateFile] = []
    size = 0
    for sf in files:
        if group and size + sf.size_bytes > FILE_GROUP_BYTES:
            yield group
            group, size = [], 0
        group.append(sf)
        size += sf.size_bytes
    if group:
        yield group


@dataclass
class ReplayRecords:
    """A partition's records in replay order, every version at once: those of the files that rebuild
    its first version, then of each later delta (HDFS) or changelog (RocksDB), with no Python object per
    record. Each file's records are framed as in a delta (``docs/format.md`` §3.2; a RocksDB changelog
    v1 is framed alike, §4.4), so one key is the same bytes in every file.

    Filled by a reader (:meth:`add_sized`, :meth:`add_indexed`), then counted: :meth:`version_rows`,
    :meth:`version_arrays`.
    """

    versions: list[int]  # the versions replayed
    tags: list[int]  # per file: the index of the version it belongs to
    pieces: list[Any] = field(default_factory=list)  # keys with their size word in front (key_ids' pieces)
    counts: list[int] = field(default_factory=list)  # records of each file
    puts: list[Any] = field(default_factory=list)  # per file: True / False (all records), or a mask
    layouts: list[Any] = field(default_factory=list)  # per file: (key size, value size) or its index
    datas: list[bytes] = field(default_factory=list)  # the decompressed files (kept on request)

    def add_sized(self, keys: Any, counts: list[int], layouts: list[SizedLayout]) -> None:
        """A run of files cut without a walk record by record (:func:`readers._format.records.sized_prefix`):
        their keys, each file's number of records and its layout."""
        self.pieces.append(keys)
        self.counts.extend(counts)
        for layout in layouts:
            self.puts.append(layout.puts() if isinstance(layout, SizeRuns) else layout[1] >= 0)
        self.layouts.extend(layouts)

    def add_indexed(self, data: bytes, idx: RecordIndex) -> None:
        """One file's records from its index: its keys with their size word in front, and which are
        puts (True or False for all of them, else a boolean mask)."""

        put = idx.val_len >= 0
        starts, lens = idx.key_start - 4, idx.key_len + 4
        padded = PaddedKeys.gather(data, starts, lens)  # numpy rows (no pyarrow), unless mostly padding
        self.pieces.append(binary_array(data, starts, lens) if padded is None else padded)
        self.counts.append(idx.count)
        self.puts.append(True if put.all() else put)
        self.layouts.append(idx)

    def all_puts(self) -> bool:
        return all(p is True for p in self.puts)

    def put_mask(self) -> Any:
        """Whether each record is a put, as one boolean array."""

        if not self.puts:
            return np.zeros(0, dtype=bool)
        return np.concatenate(
            [np.full(n, p) if isinstance(p, bool) else p for n, p in zip(self.counts, self.puts, strict=True)]
        )

    def positions(self) -> tuple[Any, Any, Any, Any]:
        """Key start, key length, value start and value length (-1: a remove) of every record in the
        kept files laid end to end."""

        n = len(self.counts)
        if not n:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty
        # Files of fixed-width rows (most) are laid out at once, as fixed_width_index lays out one:
        # record i of a file at key_start = file offset + 4 + i * stride; indexed files are copied in.
        counts = np.asarray(self.counts, dtype=np.int64)
        sizes = np.fromiter(map(len, self.datas), dtype=np.int64, count=n)
        offsets = np.zeros(n, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        firsts = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        klens = np.zeros(n, dtype=np.int64)
        vlens = np.zeros(n, dtype=np.int64)
        indexed: list[int] = []
        for j, layout in enumerate(self.layouts):
            if isinstance(layout, (RecordIndex, SizeRuns)):
                indexed.append(j)
            else:
                klens[j], vlens[j] = layout
        strides = 8 + klens + np.maximum(vlens, 0)
        file_of = np.repeat(np.arange(n, dtype=np.int64), counts)
        at = np.arange(len(file_of), dtype=np.int64) - firsts[file_of]
        key_start = offsets[file_of] + 4 + at * strides[file_of]
        key_len = klens[file_of]
        val_start = key_start + key_len + 4
        val_len = vlens[file_of]
        for j in indexed:
            idx = self.layouts[j]
            if isinstance(idx, SizeRuns):
                idx = idx.index
            rows = slice(int(firsts[j]), int(firsts[j] + counts[j]))
            key_start[rows] = idx.key_start + offsets[j]
            key_len[rows] = idx.key_len
            val_start[rows] = idx.val_start + offsets[j]
            val_len[rows] = idx.val_len
        return key_start, key_len, val_start, val_len

    def version_rows(self) -> VersionRows:
        """Live rows after each version: without removes the distinct keys so far (from each key's first
        record, :func:`readers.arrow_values.first_appearances`), else the records grouped by the ids of
        their keys (:func:`counts_by_key`)."""

        nv = len(self.versions)
        if self.all_puts():
            return self.versions, distinct_so_far(first_appearances(self.pieces), self.tags, self.counts, nv)
        ids = key_ids(self.pieces)
        tag = np.repeat(np.asarray(self.tags, dtype=np.int64), self.counts)
        rows, _, _ = counts_by_key(ids, self.put_mask(), None, tag, nv)
        return self.versions, rows

    def version_arrays(self, key_skip: int = 0, value_skip: int = 0) -> VersionArrays:
        """Rows and key + value bytes after each version, and the live records at the last (the files
        must have been kept). Without removes and with one record size, the rows are the distinct keys
        so far, the bytes the rows times that size and the live records each key's last; otherwise the
        records are grouped by key and each one changes the rows and bytes by what it adds over the
        key's record before it (:func:`counts_by_key`).

        ``key_skip`` and ``value_skip`` bytes at the start of each key and each put's value are not the
        row's (RocksDB's version byte, and a row checksum's header): they are neither counted nor part
        of the live records handed out.
        """

        versions, nv = self.versions, len(self.versions)
        kstart, klen, vstart, vlen = self.positions()
        buf = self.datas[0] if len(self.datas) == 1 else b"".join(self.datas)
        if not len(kstart):
            zeros = np.zeros(nv, dtype=np.int64)
            return versions, zeros, zeros.copy(), (b"", kstart, klen, vstart, vlen)
        ids = key_ids(self.pieces)
        if key_skip or value_skip:
            put = vlen >= 0
            kstart, klen = kstart + key_skip, klen - key_skip
            vstart, vlen = np.where(put, vstart + value_skip, vstart), np.where(put, vlen - value_skip, vlen)
        size = klen + np.maximum(vlen, 0)
        if self.all_puts() and (size == size[0]).all():
            rows = distinct_so_far(first_of_ids(ids), self.tags, self.counts, nv)
            live = np.sort(last_per_id(ids))
            nbytes = rows * int(size[0])
        else:
            put = vlen >= 0
            tag = np.repeat(np.asarray(self.tags, dtype=np.int64), self.counts)
            rows, nbytes, live = counts_by_key(ids, put, np.where(put, size, 0), tag, nv)
        return versions, rows, nbytes, (buf, kstart[live], klen[live], vstart[live], vlen[live])


def distinct_so_far(first: Any, tags: list[int], counts: list[int], nv: int) -> Any:
    """The distinct keys among the records up to each tag's last, from whether each record is its key's
    first (:func:`readers.arrow_values.first_appearances`): a running count."""

    ends = np.cumsum(np.bincount(tags, weights=counts, minlength=nv)).astype(np.int64)
    seen = np.zeros(nv, dtype=np.int64)
    some = ends > 0
    if some.any():
        seen[some] = np.cumsum(first, dtype=np.int64)[ends[some] - 1]
    return seen


def counts_by_key(key_id: Any, put: Any, size: Any | None, tag: Any, nv: int) -> tuple[Any, Any, Any]:
    """Live rows and bytes after each tag's records, and the live records' indexes at the end
    (ascending), from each record's key id, whether it is a put, its key + value bytes (``size``; None:
    bytes are not counted, zeros come back) and its tag: the records are sorted by key, each key's in
    replay order, and each one changes the counts by what it adds over the key's record before it."""

    order = np.argsort(key_id, kind="stable")  # by key, each key's records in replay order
    same = np.zeros(len(order), dtype=bool)
    same[1:] = key_id[order][1:] == key_id[order][:-1]
    put = put[order]
    before_put = np.zeros(len(order), dtype=bool)
    before_put[1:] = put[:-1]
    before_put &= same
    at = tag[order]
    rows = np.cumsum(np.bincount(at, weights=put.astype(np.int64) - before_put, minlength=nv))
    nbytes = np.zeros(nv, dtype=np.int64)
    if size is not None:
        size = size[order]
        before_size = np.zeros(len(order), dtype=np.int64)
        before_size[1:] = size[:-1]
        before_size[~before_put] = 0
        nbytes = np.cumsum(np.bincount(at, weights=size - before_size, minlength=nv))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = ~same[1:]
    return rows.astype(np.int64), nbytes.astype(np.int64), np.sort(order[last & put])


def last_per_id(ids: Any) -> Any:
    """The index of the last record of each key id (ids numbered from 0 in order of first appearance,
    :func:`readers.arrow_values.key_ids`), in id order."""

    last = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int64)
    np.maximum.at(last, ids, np.arange(len(ids), dtype=np.int64))
    return last


def diff_raw(old: RawState, new: RawState) -> list[tuple[bytes, bytes | None]]:
    """The changes from raw state ``old`` to ``new``: a remove (``None``) for every key gone, then a put
    for every key added or whose value bytes changed, each with its value in ``new``."""
    out: list[tuple[bytes, bytes | None]] = [(k, None) for k in old if k not in new]
    out.extend((k, v) for k, v in new.items() if old.get(k) != v)
    return out


class PartitionInventory(Protocol):
    """The files of one store partition by version (``deltas`` hold changes, ``snapshots`` full states)."""

    partition_id: int
    directory: str
    deltas: dict[int, StateFile]
    snapshots: dict[int, StateFile]

    def readable_versions(self) -> list[int]: ...

    def latest_version(self) -> int: ...


class StoreReaderBase:
    """Inventory, decoding and statistics common to the store readers.

    Parameters
    ----------
    fs : CheckpointFS
        The checkpoint.
    operator_id, store_name : int, str
        Which store (for messages and results).
    partitions : dict
        Files per partition id.
    schema : StoreSchema or None
        Key/value schema; without it rows cannot be decoded (raw reads still work).
    codec : str
        The codec recorded in the offsets conf (a hint; the magic bytes decide).
    long_value_fields : frozenset of int
        Value field positions stored as int64 whatever their declared type (FMGWS v1 timeout).
    """

    provider = ""
    #: Decode only ``floor(len / 8) * 8`` value bytes (HDFS: Spark < 2.3 appended 4 stray bytes, §3.3).
    floor_values_to_8 = False

    def __init__(
        self,
        fs: CheckpointFS,
        operator_id: int,
        store_name: str,
        partitions: dict[int, Any],
        schema: StoreSchema | None,
        codec: str,
        long_value_fields: frozenset[int] = frozenset(),
        row_checksum: bool = False,
    ):
        self.fs = fs
        self.operator_id = operator_id
        self.store_name = store_name
        self.partitions = partitions
        self.schema = schema
        self.codec = codec
        self.long_value_fields = long_value_fields
        self.row_checksum = row_checksum
        #: Errors a walk met without losing a version (a damaged changelog of a version whose snapshot
        #: loads): :meth:`iter_stats` hands them on after the partition.
        self.deferred_errors: list[StatelensError] = []

    # -- inventory -----------------------------------------------------------------------------------
    def partition_ids(self) -> list[int]:
        return sorted(self.partitions)

    def versions(self, partition_id: int | None = None) -> list[int]:
        """Readable versions of one partition, or of any partition when ``partition_id`` is None."""
        if partition_id is not None:
            return self._partition(partition_id).readable_versions()
        out: set[int] = set()
        for pf in self.partitions.values():
            out.update(pf.readable_versions())
        return sorted(out)

    def latest_version(self) -> int:
        return max((pf.latest_version() for pf in self.partitions.values()), default=0)

    def delta_versions(self, partition_id: int) -> list[int]:
        """Versions of one partition whose changes are on disk (a delta or a changelog)."""
        return sorted(self._partition(partition_id).deltas)

    def change_versions(self, partition_id: int) -> list[int]:
        """Versions of one partition whose changes can be had: recorded on disk (a delta or a changelog)
        or derived (:meth:`raw_changes`) from the difference with the version before, where both can be
        rebuilt (version 1 from the empty state), as in RocksDB stores written without changelog
        checkpointing (every Spark 3.4 RocksDB store; ``docs/format.md`` §5)."""
        pf = self._partition(partition_id)
        readable = set(pf.readable_versions())
        out = set(pf.deltas)
        out.update(v for v in readable if v == 1 or v - 1 in readable)
        return sorted(out)

    def changes_derived(self, partition_id: int, version: int) -> bool:
        """True when :meth:`raw_changes` derives ``version``'s changes (no delta or changelog of it)."""
        return version not in self._partition(partition_id).deltas

    def change_versions_between(self, partition_id: int, start: int, end: int) -> list[int]:
        """The versions ``start .. end`` whose changes :meth:`raw_changes` gives, from the first that can
        be had (older ones are gone with the store's retention).

        Raises
        ------
        MissingFileError
            A version inside the range whose changes can be neither read nor derived (a missing delta
            or changelog and a version before it that cannot be rebuilt), naming the file; never an
            empty answer in its place.
        """
        have = self.change_versions(partition_id)
        if not have:
            return []
        lo = max(start, have[0]) if start < have[0] and end >= have[0] else start
        want = [v for v in range(lo, end + 1) if v <= have[-1]]
        missing = sorted(set(want) - set(have))
        if missing:
            pf = self._partition(partition_id)
            m = missing[0]
            suffix = "delta" if self.provider == "hdfs" else "changelog"
            lost = m if m not in pf.readable_versions() else m - 1
            raise MissingFileError(
                f"the changes of version {m} can be neither read nor derived: no {suffix} of it, and "
                f"version {lost} cannot be rebuilt (no snapshot of it and no unbroken chain of changes)",
                path=f"{pf.directory}/{m}.{suffix}",
                **self._ctx(partition_id, m),
            )
        return want

    def raw_changes(self, partition_id: int, version: int) -> list[tuple[bytes, bytes | None]]:
        """The changes that turned version ``version - 1`` of a partition into ``version`` (``None``
        value = remove): the delta's or changelog's records in file order where the store has one,
        else derived from the two whole versions (every removed key, then every key added or changed,
        with the value it holds at ``version``; see :meth:`changes_derived`). The one place the change
        feed comes from, whoever asks.

        Raises
        ------
        MissingFileError
            Neither a delta/changelog nor both versions to compare.
        """
        if version in self._partition(partition_id).deltas:
            return list(self.iter_raw_changes(partition_id, version))
        self.change_versions_between(partition_id, version, version)  # raises, naming the file
        old = self.read_raw(partition_id, version - 1) if version > 1 else {}
        return diff_raw(old, self.read_raw(partition_id, version))

    def _partition(self, partition_id: int) -> Any:
        try:
            return self.partitions[partition_id]
        except KeyError:
            have = ", ".join(map(str, self.partition_ids()))
            raise UsageError(
                f"store {self.store_name!r} of operator {self.operator_id} has no partition {partition_id}; "
                f"partitions: {have}"
            ) from None

    def _ctx(self, partition_id: int, version: int) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "partition_id": partition_id,
            "version": version,
        }

    def _replay_plan(
        self, partition_id: int, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, bool]]:
        """Readable versions of a partition, oldest first, each with whether its delta (changelog)
        continues the version yielded before it (apply it) or the state must be rebuilt. Stops when
        ``cancelled`` says so."""
        pf = self._partition(partition_id)
        previous: int | None = None
        for v in pf.readable_versions():
            if cancelled is not None and cancelled():
                return
            yield v, previous is not None and v == previous + 1 and v in pf.deltas
            previous = v

    def _read_ahead(self, kind: Any, partition_id: int, files: Callable[[int], list[StateFile]]) -> None:
        """On remote storage, start fetching the files this read (``kind``) of ``partition_id`` needs
        (``files``), and those of the same read of the next partitions once partitions are read one
        after another (:class:`readers.fs.PartitionReadAhead`). Nothing on the local disk."""
        if self.fs.is_local:
            return
        ahead = self.__dict__.get("_ahead")
        if ahead is None:
            ahead = self.__dict__.setdefault("_ahead", PartitionReadAhead(self.fs, self.partition_ids()))
        ahead.touch(kind, partition_id, lambda pid: [sf.path for sf in files(pid)])

    def has_snapshot(self, partition_id: int, version: int) -> bool:
        """True when ``version`` of the partition has its own snapshot (HDFS ``.snapshot``, RocksDB zip)."""
        return version in self._partition(partition_id).snapshots

    def check_snapshot(self, partition_id: int, version: int) -> None:
        """Check the snapshot a restart would load for ``version``, where a walk passes over it by
        applying changes instead (so every command that reads a version meets a damaged snapshot of it,
        as Spark's load of that version does). A no-op where the check would cost a full read (HDFS
        snapshots).

        Raises
        ------
        StatelensError
            The snapshot cannot be opened, naming the file.
        """

    # -- what subclasses provide ---------------------------------------------------------------------
    def _replay_versions(self, partition_id: int) -> list[int] | None:
        """The partition's readable versions when one replay of its files covers them all: rows without
        checksums (those are checked record by record), no gap, and a delta or changelog for every version
        after the first; else None (the walk goes version by version)."""
        if self.row_checksum:
            return None
        pf = self._partition(partition_id)
        versions = self.versions(partition_id)
        if not versions or versions != list(range(versions[0], versions[-1] + 1)):
            return None
        if any(v not in pf.deltas for v in versions[1:]):
            return None
        return versions

    def read_raw(self, partition_id: int, version: int) -> RawState:
        """The raw key/value UnsafeRow bytes of one partition at one version."""
        raise NotImplementedError

    def iter_raw_changes(self, partition_id: int, version: int) -> Iterator[tuple[bytes, bytes | None]]:
        """One version's records in file order (``None`` value = remove)."""
        raise NotImplementedError

    def version_arrays(self, partition_id: int) -> VersionArrays | None:
        """Rows and key + value bytes of a partition at every version and its live records at the last,
        computed without a Python object per record; None where a reader has no such path (the scan's
        ``replay`` kind then)."""
        return None

    def iter_version_arrays(
        self, partition_ids: list[int], cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, VersionArrays | None]]:
        """:meth:`version_arrays` of each partition in order; None where it does not apply or a file
        cannot be read (walk that partition instead, which reports the file). On
        :meth:`_version_arrays_workers` threads, a few partitions ahead."""

        for pid, arrays, _ in in_order(
            self.version_arrays, partition_ids, self._version_arrays_workers(), cancelled
        ):
            yield pid, arrays

    def _version_arrays_workers(self) -> int | None:
        """Threads :meth:`iter_version_arrays` uses (None: :data:`readers.parallel.WORKERS`); one, unless
        a reader's :meth:`version_arrays` lets go of Python's lock."""
        return 1

    def big(self) -> bool:
        """Whether the store's state files (deltas and snapshots, changelogs and zips) hold at least
        :data:`BIG_STORE_BYTES`: then a reader that replays partitions as arrays
        (:class:`ReplayRecords`) runs a few at once (their Arrow hashing lets go of Python's lock and
        outweighs the per-file Python; on smaller stores two threads only trade the lock)."""
        got = self.__dict__.get("_store_bytes")
        if got is None:
            got = self.__dict__["_store_bytes"] = sum(
                f.size_bytes
                for pf in self.partitions.values()
                for f in (*pf.deltas.values(), *pf.snapshots.values())
            )
        return bool(got >= BIG_STORE_BYTES)

    def _iter_partition_stats(
        self, pid: int, cancelled: Callable[[], bool] | None
    ) -> Iterator[PartitionVersionStats]:
        raise NotImplementedError

    @staticmethod
    def apply_records(state: RawState, keys: list[bytes], values: list[bytes | None]) -> None:
        """Replay one file's records onto a raw state, in file order (``None`` value = remove)."""
        if None not in values:
            state.update(zip(keys, values, strict=True))  # type: ignore[arg-type]  # puts only: C-speed upsert
            return
        for key, value in zip(keys, values, strict=True):
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value

    # -- decoded rows --------------------------------------------------------------------------------
    def physical_rocksdb(self) -> Any:
        """The reader of the RocksDB store whose files hold this store (itself, or the physical store of
        a column family), for file checks; None for HDFS stores."""
        return None

    def element_grouping(self) -> tuple[str | None, Callable[[bytes], bytes] | None]:
        """How raw entries group into keys: ``(kind, raw key -> grouping key bytes)``; ``(None, None)``
        when every raw entry is a key of its own (all but list/map state variables, join format 4)."""
        return None, None

    def layouts(self) -> tuple[RowLayout, RowLayout]:
        """The compiled UnsafeRow layouts of keys and values (raises SchemaMismatchError without a schema)."""
        if self.schema is None:
            raise SchemaMismatchError(
                "no schema file for this store; rows cannot be decoded",
                path=f"state/{self.operator_id}",
                operator_id=self.operator_id,
                store_name=self.store_name,
            )
        return (
            compile_layout(self.schema.key_schema),
            compile_layout(self.schema.value_schema, long_fields=self.long_value_fields),
        )

    def decode_pairs(
        self, pairs: list[tuple[bytes, bytes | None]], path: str
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
        """Decode raw (key, value) UnsafeRow pairs; a ``None`` value (a remove) stays ``None``."""

        key_layout, value_layout = self.layouts()
        keys = [k for k, _ in pairs]
        klen = np.fromiter((len(k) for k in keys), dtype=np.int64, count=len(keys))
        kstart = np.concatenate(([0], np.cumsum(klen)[:-1])) if len(keys) else klen
        dkeys = decode_rows(b"".join(keys), kstart, klen, key_layout, path=path)
        present = [i for i, (_, v) in enumerate(pairs) if v is not None]
        vals: list[bytes] = [pairs[i][1] for i in present]  # type: ignore[misc]
        vlen = np.fromiter((len(v) for v in vals), dtype=np.int64, count=len(vals))
        vstart = np.concatenate(([0], np.cumsum(vlen)[:-1])) if len(vals) else vlen
        decoded_len = (vlen // 8) * 8 if self.floor_values_to_8 else vlen
        dvals = decode_rows(b"".join(vals), vstart, decoded_len, value_layout, path=path)
        out: list[tuple[tuple[Any, ...], tuple[Any, ...] | None]] = [(k, None) for k in dkeys]
        for i, dv in zip(present, dvals, strict=True):
            out[i] = (dkeys[i], dv)
        return out

    def read_rows(self, partition_id: int, version: int) -> list[StateRow]:
        """Decoded state of one partition at one version."""
        raw = self.read_raw(partition_id, version)
        path = f"{self._partition(partition_id).directory}/{version}"
        decoded = self.decode_pairs(list(raw.items()), path)
        return [StateRow(partition_id, k, v) for k, v in decoded]

    #: Key and value bytes are plain UnsafeRows: :meth:`read_arrow` decodes them column by column.
    columnar = True
    #: Change records are too: :meth:`read_changes_arrow` decodes them column by column.
    columnar_changes = True

    def read_arrow(
        self,
        partition_id: int,
        version: int,
        *,
        unique_names: bool = False,
        cache: StateCache | None = None,
        raw: bool = False,
    ) -> pa.Table:
        """One partition at one version as an Arrow table ``partition int32, key struct, value struct``.

        The values equal :meth:`read_rows` converted with :func:`readers.values.rows_to_arrow` (schema
        :func:`readers.values.state_row_schema`), but plain UnsafeRow stores are decoded straight into
        Arrow columns (:mod:`readers._format.unsaferow_arrow`), with no Python object per row. With ``cache``,
        a version decoded before from the same files is read back from the cache instead. With ``raw``,
        two more columns ``key_bytes, value_bytes`` (binary) hold each row's raw key and value rows as
        :meth:`read_raw` gives them (never cached).

        Raises
        ------
        BackendUnavailableError
            ``raw`` on a store whose rows are not plain UnsafeRows (column families, Avro).
        """
        if raw:
            return self._decode_arrow(partition_id, version, unique_names, raw=True)
        if cache is None:
            return self._decode_arrow(partition_id, version, unique_names)
        key = self.cache_key(cache, partition_id, version, {"unique_names": unique_names})
        return cache.get_or_build(key, lambda: self._decode_arrow(partition_id, version, unique_names))

    def arrow_entry(
        self, partition_id: int, version: int, cache: StateCache, unique_names: bool = False
    ) -> tuple[Path | None, pa.Table]:
        """:meth:`read_arrow`'s table of one partition version and the cache file holding it (decoded and
        written first when absent): for queries that read state in place (DuckDB). The file is None
        when the cache cannot hold it."""
        key = self.cache_key(cache, partition_id, version, {"unique_names": True} if unique_names else {})
        return cache.entry(key, lambda: self._decode_arrow(partition_id, version, unique_names))

    def cache_key(self, cache: StateCache, partition_id: int, version: int, what: dict[str, Any]) -> str:
        """The cache entry name of a table derived from one partition's files up to ``version`` (the
        version itself, or e.g. the diff of two versions), described by ``what`` over the version's own
        description: rebuilt whenever one of those files changes."""
        parts = {**self._cache_parts(partition_id, version, False), **what}
        return cache.key(parts, self._sources(partition_id, version))

    def _arrow_types(self, unique_names: bool, changes: bool) -> tuple[Any, Any, Any]:
        """Arrow key type, value type and the empty table of this store's rows (computed once)."""
        memo = self.__dict__.setdefault("_arrow_type_memo", {})
        got = memo.get((unique_names, changes))
        if got is None:
            assert self.schema is not None
            schema = state_row_schema(self.schema.key_schema, self.schema.value_schema, changes=changes)
            got = memo[(unique_names, changes)] = (
                to_arrow_type(self.schema.key_schema, unique_names=unique_names),
                to_arrow_type(self.schema.value_schema, unique_names=unique_names),
                rows_to_arrow([], schema, unique_names=unique_names),
            )
        return got

    def _cache_parts(self, partition_id: int, version: int, unique_names: bool) -> dict[str, Any]:
        assert self.schema is not None
        return {
            "checkpoint": self.fs.display_root,
            "reader": type(self).__name__,
            "operator": self.operator_id,
            "store": self.store_name,
            "partition": partition_id,
            "version": version,
            "unique_names": unique_names,
            "key_schema": self.schema.key_schema.json(),
            "value_schema": self.schema.value_schema.json(),
            "long_value_fields": sorted(self.long_value_fields),
            "row_checksum": self.row_checksum,
        }

    def _sources(self, partition_id: int, version: int) -> list[tuple[str, int, str]]:
        """Identity of every file a version may be rebuilt from: all files of the partition's folder
        (SSTs and sidecars included) except the state files of later versions."""
        pf = self._partition(partition_id)
        later = {sf.path for files in (pf.deltas, pf.snapshots) for v, sf in files.items() if v > version}
        out: list[tuple[str, int, str]] = []
        folders = [pf.directory]
        while folders:
            for e in self.fs.list_dir(folders.pop()):
                if e.is_dir:
                    folders.append(e.path)
                elif e.path not in later:
                    out.append((e.path, e.size_bytes, e.version_tag))
        return out

    def _rows_arrow(self, partition_id: int, version: int, unique_names: bool) -> pa.Table:
        """:meth:`read_arrow` through :meth:`read_rows` (Python rows converted by Arrow)."""

        self.layouts()  # no schema: SchemaMismatchError
        assert self.schema is not None
        rows = [(r.partition_id, r.key, r.value) for r in self.read_rows(partition_id, version)]
        schema = state_row_schema(self.schema.key_schema, self.schema.value_schema)
        return rows_to_arrow(rows, schema, unique_names=unique_names)

    def _decode_arrow(
        self, partition_id: int, version: int, unique_names: bool, raw: bool = False
    ) -> pa.Table:
        """Decode one partition version column by column (per row where the rows are not plain UnsafeRows);
        with ``raw``, also the stored ``key_bytes`` and ``value_bytes`` of every row, in the same order."""
        if not self.columnar:
            if raw:
                raise BackendUnavailableError(
                    "raw key and value bytes are read from plain UnsafeRow stores only, not from "
                    f"{type(self).__name__}",
                    operator_id=self.operator_id,
                    store_name=self.store_name,
                )
            return self._rows_arrow(partition_id, version, unique_names)
        from statelens.readers._format.unsaferow_arrow import decode_arrow  # deferred: loads pyarrow

        key_layout, value_layout = self.layouts()

        buf, kstart, klen, vstart, vlen = self._raw_arrays(partition_id, version)
        path = f"{self._partition(partition_id).directory}/{version}"
        dlen = (vlen // 8) * 8 if self.floor_values_to_8 else vlen
        key_type, value_type, _ = self._arrow_types(unique_names, False)
        table = self._state_table(
            partition_id,
            decode_arrow(buf, kstart, klen, key_layout, key_type, path=path),
            decode_arrow(buf, vstart, dlen, value_layout, value_type, path=path),
            unique_names,
        )
        return _with_stored_bytes(table, buf, kstart, klen, vstart, vlen) if raw else table

    def _state_table(
        self, partition_id: int, keys: pa.Array, values: pa.Array, unique_names: bool
    ) -> pa.Table:
        """The table ``partition, key, value`` of decoded key and value columns (field types as decoded:
        an FMGWS v1 long stays 64-bit)."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        _, _, empty = self._arrow_types(unique_names, False)
        part = numpy_array(np.full(len(keys), partition_id, dtype=np.int32))
        fields = [empty.schema.field(0)] + [
            f if f.type == c.type else f.with_type(c.type)
            for f, c in zip(list(empty.schema)[1:], (keys, values), strict=True)
        ]
        return pa.Table.from_arrays([part, keys, values], schema=pa.schema(fields))

    def live_arrays(self, partition_id: int, version: int) -> RawArrays:
        """The live records of one partition at one version as ``(buffer, key_start, key_len, value_start,
        value_len)`` (int64 arrays), the bytes :meth:`read_raw` gives; without a Python object per record
        where the reader replays its files as arrays (HDFS stores)."""
        return self._raw_arrays(partition_id, version)

    def _raw_arrays(self, partition_id: int, version: int) -> RawArrays:
        """The live records of one partition at one version as one buffer and offset arrays.

        This default joins :meth:`read_raw`'s bytes; a reader that can replay its files without a
        Python object per record overrides it.
        """

        raw = self.read_raw(partition_id, version)
        n = len(raw)
        klen = np.fromiter(map(len, raw.keys()), dtype=np.int64, count=n)
        vlen = np.fromiter(map(len, raw.values()), dtype=np.int64, count=n)
        total_k = int(klen.sum())
        kstart = np.zeros(n, dtype=np.int64)
        np.cumsum(klen[:-1], out=kstart[1:])
        vstart = np.full(n, total_k, dtype=np.int64)
        np.cumsum(vlen[:-1], out=vstart[1:])
        vstart[1:] += total_k
        buf = b"".join(raw.keys()) + b"".join(raw.values())
        return buf, kstart, klen, vstart, vlen

    def read_changes_arrow(self, partition_id: int, version: int, *, unique_names: bool = False) -> pa.Table:
        """The put/remove records of one version as Arrow: ``version, partition, change, key, value``
        (``value`` null for a remove), equal to :meth:`read_changes` through ``rows_to_arrow``."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        key_layout, value_layout = self.layouts()
        assert self.schema is not None
        if not self.columnar_changes:
            rows = [
                (c.version, c.partition_id, c.change, c.key, c.value, c.derived)
                for c in self.read_changes(partition_id, version)
            ]
            schema = state_row_schema(self.schema.key_schema, self.schema.value_schema, changes=True)
            return rows_to_arrow(rows, schema, unique_names=unique_names)
        from statelens.readers._format.unsaferow_arrow import decode_arrow  # deferred: loads pyarrow

        buf, kstart, klen, vstart, vlen = self._raw_change_arrays(partition_id, version)
        path = f"{self._partition(partition_id).directory}/{version}"
        n = len(kstart)
        key_type, value_type, empty = self._arrow_types(unique_names, True)
        keys = decode_arrow(buf, kstart, klen, key_layout, key_type, path=path)
        puts = np.flatnonzero(vlen >= 0)
        lengths = (vlen[puts] // 8) * 8 if self.floor_values_to_8 else vlen[puts]
        values = decode_arrow(buf, vstart[puts], lengths, value_layout, value_type, path=path, records=puts)
        if len(puts) != n:  # removes: a null value in their place
            take = np.full(n, -1, dtype=np.int64)
            take[puts] = np.arange(len(puts), dtype=np.int64)
            values = values.take(pa.array(take, mask=take < 0))
        change = pa.DictionaryArray.from_arrays(
            pa.array((vlen < 0).astype(np.int8)), pa.array(["put", "remove"])
        )
        arrays = [
            pa.array(np.full(n, version, dtype=np.int64)),
            pa.array(np.full(n, partition_id, dtype=np.int32)),
            change.cast(pa.string()),
            keys,
            values,
            pa.array(np.full(n, self.changes_derived(partition_id, version), dtype=np.bool_)),
        ]
        fields = [
            f if f.type == a.type else f.with_type(a.type)
            for f, a in zip(list(empty.schema), arrays, strict=True)
        ]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _raw_change_arrays(self, partition_id: int, version: int) -> RawArrays:
        """One version's change records as one buffer and offset arrays (value length -1: a remove)."""

        pairs = self.raw_changes(partition_id, version)
        n = len(pairs)
        keys = [k for k, _ in pairs]
        values = [v if v is not None else b"" for _, v in pairs]
        klen = np.fromiter(map(len, keys), dtype=np.int64, count=n)
        vlen = np.fromiter(map(len, values), dtype=np.int64, count=n)
        total_k = int(klen.sum())
        kstart = np.zeros(n, dtype=np.int64)
        np.cumsum(klen[:-1], out=kstart[1:])
        vstart = np.full(n, total_k, dtype=np.int64)
        np.cumsum(vlen[:-1], out=vstart[1:])
        vstart[1:] += total_k
        vlen[[i for i, (_, v) in enumerate(pairs) if v is None]] = -1
        return b"".join(keys) + b"".join(values), kstart, klen, vstart, vlen

    def read_changes(self, partition_id: int, version: int) -> list[StateChange]:
        """Decoded put/remove records of one version (written by batch ``version-1``)."""
        pairs = self.raw_changes(partition_id, version)
        pf = self._partition(partition_id)
        derived = self.changes_derived(partition_id, version)
        path = f"{pf.directory}/{version}" if derived else pf.deltas[version].path
        decoded = self.decode_pairs(pairs, path)
        return [
            StateChange(version, partition_id, "put" if v is not None else "remove", k, v, derived)
            for k, v in decoded
        ]

    # -- statistics ----------------------------------------------------------------------------------
    def iter_stats(
        self,
        cancelled: Callable[[], bool] | None = None,
        on_error: Callable[[StatelensError], None] | None = None,
    ) -> Iterator[PartitionVersionStats]:
        """Rows and on-disk bytes of every partition at every readable version (streams versions).

        With ``on_error``, a file that cannot be read ends that partition's walk (the error is passed
        on) and the other partitions are still walked; without it the error is raised.
        """
        for pid, arrays in self._stats_plan(cancelled):
            try:
                if arrays is None:  # walked: reads what it can, raises the file's error
                    yield from self._iter_partition_stats(pid, cancelled)
                else:
                    pf = self._partition(pid)
                    versions, rows = arrays
                    for i, v in enumerate(versions):
                        yield PartitionVersionStats(
                            self.operator_id, self.store_name, v, pid, int(rows[i]), self._on_disk(pf, v)
                        )
            except StatelensError as err:
                if on_error is None:
                    raise
                on_error(err)
            deferred, self.deferred_errors = self.deferred_errors, []
            for late in deferred:
                if on_error is None:
                    raise late
                on_error(late)
            if cancelled is not None and cancelled():
                return

    def _stats_plan(self, cancelled: Callable[[], bool] | None) -> Iterator[tuple[int, VersionRows | None]]:
        """Each partition for :meth:`iter_stats`, with its rows at every version when counted without
        a walk, or None to walk it."""
        for pid in self.partition_ids():
            yield pid, None

    @staticmethod
    def _on_disk(pf: PartitionInventory, version: int) -> int:
        """Bytes of the files written for one version (delta/changelog and snapshot/zip)."""
        return sum(f.size_bytes for f in (pf.deltas.get(version), pf.snapshots.get(version)) if f is not None)

    def bytes_on_disk(self, partition_id: int, version: int) -> int:
        """Bytes of the files one partition wrote for ``version`` (delta/changelog and snapshot/zip)."""
        return self._on_disk(self._partition(partition_id), version)


def _with_stored_bytes(table: pa.Table, buf: Any, kstart: Any, klen: Any, vstart: Any, vlen: Any) -> pa.Table:
    """``table`` with two more columns, ``key_bytes`` and ``value_bytes`` (large binary): each row's key
    and value as stored, gathered from ``buf`` (:data:`RawArrays`)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    u8 = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    for name, start, length in (("key_bytes", kstart, klen), ("value_bytes", vstart, vlen)):
        offsets = np.zeros(len(length) + 1, dtype=np.int64)
        np.cumsum(length, out=offsets[1:])
        data = gather_bytes(u8, start, length, offsets)
        column = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(length), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        table = table.append_column(name, column)
    return table

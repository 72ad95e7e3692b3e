"""HDFS-backed state store: ``<v>.delta`` / ``<v>.snapshot`` files of one store, all partitions.

Written by ``HDFSBackedStateStoreProvider`` (Spark 2.2 to 4.x, the default provider). Follows
``docs/format.md`` §3: version ``v`` is rebuilt from the newest snapshot ``s <= v``
plus the deltas ``s+1 .. v`` (put = upsert, remove = delete); version ``v`` is written by batch
``v-1``. Replay works on raw key bytes; only the survivors are decoded (§3.4).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from statelens.readers._format.codecs import decompress
from statelens.readers._format.records import (
    RecordIndex,
    scan_records,
    sized_prefix,
    slices,
    uniform_keys,
    value_slices,
)
from statelens.readers._format.rowchecksum import strip_hdfs
from statelens.readers._format.store_base import (
    RawArrays,
    RawState,
    ReplayRecords,
    StoreReaderBase,
    VersionArrays,
    VersionRows,
    file_groups,
    last_per_id,
)
from statelens.readers.arrow_values import key_ids
from statelens.readers.errors import MissingFileError, StatelensError
from statelens.readers.fs import CheckpointFS
from statelens.readers.model import PartitionVersionStats, StateFile
from statelens.readers.parallel import in_order

_STATE_FILE_RE = re.compile(r"^(\d+)\.(delta|snapshot)$")


def sniff_state_file_name(name: str) -> tuple[int, str] | None:
    """Return ``(version, kind)`` for ``<digits>.delta`` / ``<digits>.snapshot``, else ``None``.

    Spark's own rule (``HDFSBackedStateStoreProvider.fetchFiles``): exactly two dot-separated parts, so
    ``1.delta.crc`` (Spark 4.1+ checksum sidecars) and hidden temp files are not state files.
    """
    m = _STATE_FILE_RE.match(name)
    if not m:
        return None
    return int(m.group(1)), m.group(2)


@dataclass
class PartitionFiles:
    """The state files of one partition of one store, by version."""

    partition_id: int
    directory: str
    deltas: dict[int, StateFile] = field(default_factory=dict)
    snapshots: dict[int, StateFile] = field(default_factory=dict)

    def readable_versions(self) -> list[int]:
        """Versions that can be rebuilt from the files present (a base and an unbroken delta chain)."""
        bases = sorted(self.snapshots) if self.snapshots else []
        out: set[int] = set()
        starts = ([0] if 1 in self.deltas else []) + bases
        for start in starts:
            if start > 0:
                out.add(start)
            v = start + 1
            while v in self.deltas:
                out.add(v)
                v += 1
        return sorted(out)

    def latest_version(self) -> int:
        return max([*self.deltas, *self.snapshots], default=0)


def list_partition_files(fs: CheckpointFS, directory: str, partition_id: int) -> PartitionFiles:
    """Collect the delta and snapshot files of one store partition folder."""
    pf = PartitionFiles(partition_id, directory)
    for entry in fs.list_dir(directory):
        if entry.is_dir:
            continue
        parsed = sniff_state_file_name(entry.name)
        if parsed is None:
            continue
        version, kind = parsed
        sf = StateFile(entry.path, partition_id, version, kind, entry.size_bytes)
        (pf.deltas if kind == "delta" else pf.snapshots)[version] = sf
    return pf


class HDFSStoreReader(StoreReaderBase):
    """Reads every partition of one HDFS-backed store (see :class:`readers._format.store_base.StoreReaderBase`)."""

    provider = "hdfs"
    floor_values_to_8 = True
    #: The partition :meth:`check_file` last announced the files of (remote storage).
    _checking: int | None = None

    def files(self) -> list[StateFile]:
        out: list[StateFile] = []
        for pid in self.partition_ids():
            out.extend(self._partition_files(pid))
        return out

    def _partition_files(self, partition_id: int) -> list[StateFile]:
        """One partition's deltas, then its snapshots, by version (the order of :meth:`files`)."""
        pf = self._partition(partition_id)
        return [*(pf.deltas[v] for v in sorted(pf.deltas)), *(pf.snapshots[v] for v in sorted(pf.snapshots))]

    # -- integrity -----------------------------------------------------------------------------------
    def check_file(self, sf: StateFile, sample_rows: int) -> tuple[str, StatelensError] | None:
        """Check one state file the way a read would use it: it decompresses and its records scan
        (stage ``scan``); the first ``sample_rows`` rows carry valid row checksums where the store writes
        them (``row_checksum``) and decode against the store's schema (``schema``). None when it is
        sound, else the first stage that failed and its error (naming the file).

        On remote storage the first file checked in a partition announces the partition's files (and,
        once checks go from partition to partition, the next partitions'), so a check of every file in
        the order of :meth:`files` has many requests in flight instead of one file at a time."""
        if self._checking != sf.partition_id:
            self._checking = sf.partition_id
            self._read_ahead("check", sf.partition_id, self._partition_files)
        try:
            data, idx = self._index(sf)
        except StatelensError as err:
            return "scan", err
        if self.schema is None or idx.count == 0:
            return None
        m = min(idx.count, sample_rows)
        mv = memoryview(data)
        ks, kl, vs, vl = (a[:m].tolist() for a in (idx.key_start, idx.key_len, idx.val_start, idx.val_len))
        keys = [bytes(mv[ks[i] : ks[i] + kl[i]]) for i in range(m)]
        values = [bytes(mv[vs[i] : vs[i] + vl[i]]) if vl[i] >= 0 else None for i in range(m)]
        if self.row_checksum:  # each row starts with its CRC-32C (Spark 4.3)
            try:
                keys, values = strip_hdfs(keys, values, sf.path)
            except StatelensError as err:
                return "row_checksum", err
        try:
            self.decode_pairs(list(zip(keys, values, strict=True)), sf.path)
        except StatelensError as err:
            return "schema", err
        return None

    # -- raw records ---------------------------------------------------------------------------------
    def _index(self, sf: StateFile, data: bytes | None = None) -> tuple[bytes, RecordIndex]:
        """Decompress one state file (unless ``data`` is its decompressed bytes) and index its records;
        errors carry the store context."""
        if data is None:
            data = self._decompressed(sf)
        with self._in_context(sf):
            return data, scan_records(data, sf.path, allow_removes=sf.kind == "delta")

    def _decompressed(self, sf: StateFile) -> bytes:
        """The decompressed bytes of one state file; errors carry the store context."""
        try:  # not _in_context: this runs once per file of every count (a context manager is ~2 us)
            return decompress(self.fs.read_bytes(sf.path), sf.path, self.codec)
        except StatelensError as err:
            err.context.update(self._ctx(sf.partition_id, sf.version))
            raise

    def _replay_files(self, partition_id: int) -> list[StateFile]:
        """The files a replay of every version of a partition reads, in order (all of them, by version,
        where :meth:`_version_files` does not apply)."""
        plan = self._version_files(partition_id)
        if plan is not None:
            return plan[1]
        pf = self._partition(partition_id)
        return sorted((*pf.deltas.values(), *pf.snapshots.values()), key=lambda sf: (sf.version, sf.kind))

    @contextlib.contextmanager
    def _in_context(self, sf: StateFile) -> Iterator[None]:
        """Errors raised inside name this store, partition and version."""
        try:
            yield
        except StatelensError as err:
            err.context.update(self._ctx(sf.partition_id, sf.version))
            raise

    def _pairs(self, sf: StateFile) -> tuple[list[bytes], list[bytes | None]]:
        """Keys and values (``None`` = remove) of one state file, in file order."""
        data, idx = self._index(sf)
        keys = slices(data, idx.key_start, idx.key_len)
        values = value_slices(data, idx.val_start, idx.val_len)
        if self.row_checksum:
            with self._in_context(sf):
                return strip_hdfs(keys, values, sf.path)
        return keys, values

    def _records(self, sf: StateFile) -> Iterator[tuple[bytes, bytes | None]]:
        keys, values = self._pairs(sf)
        return zip(keys, values, strict=True)

    def _base_for(self, pf: PartitionFiles, version: int) -> int:
        """Newest snapshot ``<= version`` whose delta chain up to ``version`` is complete, else 0."""
        for s in sorted((s for s in pf.snapshots if s <= version), reverse=True):
            if all(v in pf.deltas for v in range(s + 1, version + 1)):
                return s
        return 0

    def read_raw(self, partition_id: int, version: int) -> RawState:
        """The raw key/value bytes of one partition at one version.

        Raises
        ------
        MissingFileError
            When no snapshot plus unbroken delta chain reaches ``version``.
        """
        state: RawState = {}
        self._read_ahead(("chain", version), partition_id, lambda pid: self._chain(pid, version))
        for sf in self._chain(partition_id, version):
            self._apply(state, sf)
        return state

    def _chain(self, partition_id: int, version: int) -> list[StateFile]:
        """The files that rebuild ``version``: the newest usable snapshot, then the deltas after it."""
        pf = self._partition(partition_id)
        if version == 0:
            return []
        base = self._base_for(pf, version)
        missing = [v for v in range(base + 1, version + 1) if v not in pf.deltas]
        if missing:
            raise MissingFileError(
                f"cannot rebuild version {version}: {missing[0]}.delta is missing and no snapshot covers it",
                path=f"{pf.directory}/{missing[0]}.delta",
                **self._ctx(partition_id, version),
            )
        return ([pf.snapshots[base]] if base else []) + [pf.deltas[v] for v in range(base + 1, version + 1)]

    def _raw_change_arrays(self, partition_id: int, version: int) -> RawArrays:
        """The records of ``<version>.delta`` straight from its index (no object per record)."""
        if self.row_checksum:
            return super()._raw_change_arrays(partition_id, version)
        pf = self._partition(partition_id)
        if version not in pf.deltas:
            raise MissingFileError(
                f"no delta file for version {version}",
                path=f"{pf.directory}/{version}.delta",
                **self._ctx(partition_id, version),
            )
        data, idx = self._index(pf.deltas[version])
        return data, idx.key_start, idx.key_len, idx.val_start, idx.val_len

    def _raw_arrays(self, partition_id: int, version: int) -> RawArrays:
        """Replay the files of one version without a Python object per record.

        The decompressed files are laid end to end (:meth:`_read_records`); unless it is one snapshot,
        the last record of each key wins, found from the keys' ids; removed keys drop out. Rows come in
        the order of each key's first record (``read_raw``'s order, except for a key removed and put
        again, which keeps its first place).
        """
        if self.row_checksum:  # records carry checksums to verify and strip: the per-record path
            return super()._raw_arrays(partition_id, version)

        files = self._chain(partition_id, version)
        self._read_ahead(("chain", version), partition_id, lambda pid: self._chain(pid, version))
        replay = self._read_records(files, [version], [0] * len(files), keep=True)
        kstart, klen, vstart, vlen = replay.positions()
        if not len(kstart):
            return b"", kstart, klen, vstart, vlen
        buf = replay.datas[0] if len(replay.datas) == 1 else b"".join(replay.datas)
        if len(files) > 1 or files[0].kind != "snapshot" or not replay.all_puts():  # a key put twice
            last = last_per_id(key_ids(replay.pieces))  # in the order of each key's first record
            keep = last[vlen[last] >= 0]
            kstart, klen, vstart, vlen = kstart[keep], klen[keep], vstart[keep], vlen[keep]
        return buf, kstart, klen, vstart, vlen

    def version_arrays(self, partition_id: int) -> VersionArrays | None:
        """Rows and key + value bytes of one partition at every readable version, and its live records at
        the last, with no Python object per record (what ``growth``'s walk computes record by record).

        Every record of the files that rebuild the first version, then of each later delta, is tagged
        with its version and its key numbered (:meth:`_replay_records`), then counted
        (:meth:`readers._format.store_base.ReplayRecords.version_arrays`). None when this does not apply: row
        checksums (checked per record), or versions with a gap or rebuilt from a later snapshot (the
        walk starts over there). A file that cannot be read raises.
        """
        replay = self._replay_records(partition_id, keep=True)
        return None if replay is None else replay.version_arrays()

    def version_rows(self, partition_id: int) -> VersionRows | None:
        """Live rows of one partition at every readable version, counted from the ids of its records'
        keys (:meth:`_replay_records`, :meth:`readers._format.store_base.ReplayRecords.version_rows`), with no
        Python object per record: what ``growth``'s walk over a set of keys counts. None where
        :meth:`version_arrays` does not apply. A file that cannot be read raises.
        """
        replay = self._replay_records(partition_id, keep=False)
        return None if replay is None else replay.version_rows()

    def _replay_records(self, partition_id: int, keep: bool) -> ReplayRecords | None:
        """The records of a partition's replay of every readable version, in order
        (:meth:`_version_files`; None where that does not apply): their keys as pieces for
        :func:`readers.arrow_values.key_ids`, each file's number of records and puts, and with ``keep``
        the decompressed files and where their records are. Files of fixed-width rows, and files of a few
        record sizes, are checked and cut a run of files at a time
        (:func:`readers._format.records.sized_prefix`), other files indexed one by one."""
        plan = self._version_files(partition_id)
        if plan is None:
            return None
        versions, files, tags = plan
        self._read_ahead("replay", partition_id, self._replay_files)
        return self._read_records(files, versions, tags, keep)

    def _read_records(
        self, files: list[StateFile], versions: list[int], tags: list[int], keep: bool
    ) -> ReplayRecords:
        """The records of ``files`` in order, each file of version ``versions[tags[i]]``
        (:meth:`_replay_records`)."""
        out = ReplayRecords(versions, tags)
        for group in file_groups(files):
            datas = [self._decompressed(sf) for sf in group]
            removes = [sf.kind == "delta" for sf in group]
            at = 0
            while at < len(group):  # runs of files of fixed-width rows of one key size, cut at once
                run, taken = sized_prefix(datas[at:], removes[at:])
                if run is not None:
                    out.add_sized(*run)
                else:  # variable-width rows: indexed
                    out.add_indexed(*self._index(group[at], datas[at]))
                    taken = 1
                at += taken
            if keep:
                out.datas.extend(datas)
        return out

    def _version_files(self, partition_id: int) -> tuple[list[int], list[StateFile], list[int]] | None:
        """The readable versions of a partition, the files that replay them in order (those that rebuild
        the first version, then each later delta) and each file's version index; None for row checksums
        (checked per record) or versions with a gap or rebuilt from a later snapshot (the walk starts
        over there)."""
        versions = self._replay_versions(partition_id)
        if versions is None:
            return None
        pf = self._partition(partition_id)
        chain = self._chain(partition_id, versions[0])
        files = [*chain, *(pf.deltas[v] for v in versions[1:])]
        return versions, files, [0] * len(chain) + list(range(1, len(versions)))

    def _apply(self, state: RawState, sf: StateFile) -> None:
        self.apply_records(state, *self._pairs(sf))

    def iter_raw_changes(self, partition_id: int, version: int) -> Iterator[tuple[bytes, bytes | None]]:
        """The records of ``<version>.delta`` in file order (``None`` value = remove)."""
        pf = self._partition(partition_id)
        if version not in pf.deltas:
            raise MissingFileError(
                f"no delta file for version {version}",
                path=f"{pf.directory}/{version}.delta",
                **self._ctx(partition_id, version),
            )
        return self._records(pf.deltas[version])  # an iterator over the file's lists (no generator frame)

    def iter_versions_raw(
        self, partition_id: int, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, RawState, int]]:
        """Walk every readable version of a partition once, oldest first, in bounded memory.

        Yields ``(version, state, bytes_on_disk)`` where ``state`` is the live raw map (do not keep it
        across iterations) and ``bytes_on_disk`` the size of the files written for that version.
        """
        pf = self._partition(partition_id)
        self._read_ahead("replay", partition_id, self._replay_files)
        state: RawState = {}
        for v, continues in self._replay_plan(partition_id, cancelled):
            if continues:
                self._apply(state, pf.deltas[v])
            else:
                state = self.read_raw(partition_id, v)
            yield v, state, self._on_disk(pf, v)

    def _apply_keys(self, live: set[bytes], sf: StateFile) -> None:
        """Apply one file to a set of live keys (values are not sliced: growth needs counts only)."""
        if self.row_checksum:  # removed keys carry a checksum prefix: take the checked path
            for key, value in zip(*self._pairs(sf), strict=True):
                if value is None:
                    live.discard(key)
                else:
                    live.add(key)
            return
        data = self._decompressed(sf)
        uniform = uniform_keys(data, allow_removes=sf.kind == "delta")  # fixed-width rows: no index needed
        if uniform is not None:
            keys, removes = uniform
            if removes:
                live.difference_update(keys)
            else:
                live.update(keys)
            return
        data, idx = self._index(sf, data)
        keys = slices(data, idx.key_start, idx.key_len)
        removed = idx.val_len < 0
        if not removed.any():
            live.update(keys)
            return
        for key, gone in zip(keys, removed.tolist(), strict=True):
            if gone:
                live.discard(key)
            else:
                live.add(key)

    def _version_arrays_workers(self) -> int | None:
        """Partitions on :data:`readers.parallel.WORKERS` threads for a :meth:`big` store, else one."""
        return None if self.big() else 1

    def _stats_plan(self, cancelled: Callable[[], bool] | None) -> Iterator[tuple[int, VersionRows | None]]:
        """Partitions are counted from their keys' ids (:meth:`version_rows`); one that cannot be (or
        whose file cannot be read) is walked, which reads what it can and reports the file."""

        for pid, rows, _ in in_order(self.version_rows, self.partition_ids(), 1, cancelled):
            yield pid, rows

    def _iter_partition_stats(
        self, pid: int, cancelled: Callable[[], bool] | None
    ) -> Iterator[PartitionVersionStats]:
        pf = self.partitions[pid]
        self._read_ahead("replay", pid, self._replay_files)
        live: set[bytes] = set()
        for v, continues in self._replay_plan(pid, cancelled):
            if continues:
                self._apply_keys(live, pf.deltas[v])
            else:
                live = set(self.read_raw(pid, v))
            yield PartitionVersionStats(
                self.operator_id, self.store_name, v, pid, len(live), self._on_disk(pf, v)
            )

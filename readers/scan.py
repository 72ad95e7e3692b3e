"""One scan of state: what (a store), which versions, which partitions, which kind (rows at a version, the
change feed between versions, or rows and on-disk bytes per partition and version), with one error policy; the output format is chosen last (Arrow, record
batches, pandas, polars, DuckDB, Python rows), as uproot's ``library=`` and polars' ``scan_*().collect()``.

The scan reads through a :class:`readers.backends.base.StateBackend` (native decoder or Spark), so both
backends answer the same way. Change derivation (recorded changes where the store has them, the difference
of consecutive versions where it has none) lives in the store readers
(:meth:`readers._format.store_base.StoreReaderBase.raw_changes`); the scan owns what happens to a partition whose
files cannot be read: its error (file, offset, what is wrong) goes into :attr:`StateScan.problems` and the
partition into :attr:`StateScan.unreadable`, never an empty answer in its place; with ``strict`` (or a
partition asked for alone) it is raised.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from statelens.readers._format.store_base import diff_raw
from statelens.readers.arrow_values import to_polars
from statelens.readers.backends.base import files_of
from statelens.readers.errors import (
    BackendUnavailableError,
    SchemaMismatchError,
    StatelensError,
    UsageError,
)
from statelens.readers.parallel import in_order
from statelens.readers.replay_state import CompactState
from statelens.readers.scan_fields import field_reader
from statelens.readers.values import rows_to_arrow, state_row_schema

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from statelens.readers.backends.base import StateBackend
    from statelens.readers.cache import StateCache
    from statelens.readers.model import PartitionVersionStats, StateChange, StateRow, StoreSchema

__all__ = [
    "STATS_COLUMNS",
    "Replay",
    "ReplayStep",
    "ScanKind",
    "ScanPart",
    "StateScan",
    "Unreadable",
]

ScanKind = Literal["rows", "changes", "stats", "replay", "timers"]

#: The columns of a ``stats`` scan's tables, in order.
STATS_COLUMNS = ("version", "partition", "rows", "bytes")
T = TypeVar("T")


@dataclass(frozen=True)
class Unreadable:
    """A partition (at a version, or over a range of versions) the scan could not read, and why."""

    partition_id: int | None
    version: int | None
    error: StatelensError

    def __str__(self) -> str:
        at = f" version {self.version}" if self.version is not None else ""
        where = f"partition {self.partition_id}" if self.partition_id is not None else "the store"
        return f"{where}{at}: {self.error}"


@dataclass(frozen=True)
class ScanPart:
    """What a scan read of one partition (:meth:`StateScan.iter_parts`).

    Attributes
    ----------
    partition_id : int
    version : int
        Rows: the version read; changes: the last version of the feed read.
    tables : list of pyarrow.Table
        Rows: one table (``partition, key, value``); changes: one per version (``version, partition,
        change, key, value, derived``).
    cache_file : pathlib.Path, optional
        With ``in_place``: the cache's Parquet file that also holds this partition's rows, to be read where
        it is (drop ``tables`` then, to keep them out of memory).
    """

    partition_id: int
    version: int
    tables: list[pa.Table]
    cache_file: Path | None = None


@dataclass
class StateScan:
    """The state of one store, read partition by partition through a backend.

    Parameters
    ----------
    backend : StateBackend
        Who reads (the native decoder or Spark).
    operator_id : int
        The stateful operator.
    store_name : str, optional
        The store (default: the operator's first).
    kind : {"rows", "changes", "stats"}
        ``rows``: the state at ``version`` (default each partition's latest); ``changes``: the change
        feed of versions ``start_version .. end_version`` (default every version whose changes can be
        had), recorded or derived (the ``derived`` column says which); ``stats``: live rows and on-disk
        bytes of every partition at every readable version (or ``version`` only, or ``start_version ..
        end_version``), counted without decoding where the backend can (:meth:`iter_stats`).
    version, start_version, end_version : int, optional
        Which versions (Spark's numbering: version ``v`` is the state after batch ``v - 1``).
    partitions : sequence of int, optional
        Which partitions (default all).
    strict : bool
        Raise the first error instead of collecting it (also when a single partition was asked for).
    raw : bool
        Rows only: add the stored ``key_bytes`` and ``value_bytes`` (binary) of every row, for rewriting
        state and proving a rewrite byte for byte (native backend; plain UnsafeRow stores).
    cache : readers.cache.StateCache, optional
        Rows only: where decoded versions are kept and found again (backends that keep no cache ignore it).
    cancelled : callable, optional
        Polled between partitions.

    Attributes
    ----------
    problems : list of StatelensError
        Every located error met so far (file, offset, what is wrong).
    unreadable : list of Unreadable
        The partitions they made unreadable, left out of the answer.
    """

    backend: StateBackend
    operator_id: int
    store_name: str | None = None
    kind: ScanKind = "rows"
    version: int | None = None
    start_version: int | None = None
    end_version: int | None = None
    partitions: Sequence[int] | None = None
    strict: bool = False
    raw: bool = False
    cache: StateCache | None = None
    cancelled: Callable[[], bool] | None = None
    problems: list[StatelensError] = field(default_factory=list, init=False)
    unreadable: list[Unreadable] = field(default_factory=list, init=False)
    _empty: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("rows", "changes", "stats", "replay", "timers"):
            raise UsageError(
                f"unknown scan kind {self.kind!r}; choose rows, changes, stats, replay or timers"
            )
        if self.kind == "rows" and (self.start_version is not None or self.end_version is not None):
            raise UsageError("start_version/end_version select changes; give version for rows")
        if self.raw and self.kind != "rows":
            raise UsageError("raw bytes are read with rows, not changes")
        if self.kind in ("stats", "replay") and self.cache is not None:
            raise UsageError(f"a cache keeps decoded rows; a {self.kind} scan reads without one")

    # -- what is read -------------------------------------------------------------------------------
    def partition_ids(self) -> list[int]:
        """The partitions this scan reads, in order."""
        if self.partitions is not None:
            return list(self.partitions)
        return list(self.backend.partition_ids(self.operator_id, self.store_name))

    @property
    def ok(self) -> bool:
        """True when every partition read so far was read whole."""
        return not self.problems

    def _versions(self, pid: int | None) -> tuple[int, int]:
        """``(start, end)`` of one partition's read (or all partitions' with ``pid`` None): the change
        feed's range, or the rows' version twice; unset bounds are 1 and the latest version."""
        first, last = (
            (self.start_version, self.end_version) if self.kind == "changes" else (self.version,) * 2
        )
        if first is not None and last is not None:
            return first, last
        latest = self.backend.latest_version(self.operator_id, self.store_name, pid)
        if self.kind == "changes":
            return (first if first is not None else 1), (last if last is not None else latest)
        return latest, latest

    def _read(self, pid: int, in_place: bool = False) -> ScanPart:
        b, op, store = self.backend, self.operator_id, self.store_name
        start, end = self._versions(pid)
        if self.kind == "changes":
            return ScanPart(pid, end, b.read_changes_arrow(op, store, start, end, pid, unique_names=True))
        if self.raw:
            return ScanPart(pid, end, [b.read_arrow(op, store, end, pid, unique_names=True, raw=True)])
        if in_place and self.cache is not None:
            path, table = b.arrow_entry(op, store, end, pid, self.cache, unique_names=True)
            return ScanPart(pid, end, [table], path)
        return ScanPart(pid, end, [b.read_arrow(op, store, end, pid, unique_names=True, cache=self.cache)])

    def _per_partition(self, read: Callable[[int], T], threads: int = 1) -> Iterator[T]:
        """``read(pid)`` of each partition in order, with the scan's error policy: a partition whose
        read raises is recorded (:attr:`problems`, :attr:`unreadable`) and left out, or the error raised
        (``strict``, or that partition asked for alone). Read whole before it is given, so a damaged file
        never leaves half a partition in the answer. ``threads`` > 1 reads that many partitions at once
        (:func:`readers.parallel.in_order`; answered in order all the same)."""
        pids = self.partition_ids()
        alone = self.partitions is not None and len(pids) == 1
        for pid, got, err in in_order(read, pids, workers=threads, cancelled=self.cancelled):
            if err is not None:
                if self.strict or alone:
                    raise err
                self._unreadable(pid, err)
                continue
            yield got  # type: ignore[misc]

    def iter_parts(self, *, in_place: bool = False, threads: int = 1) -> Iterator[ScanPart]:
        """What was read of each partition, in partition order, with the scan's error policy
        (:meth:`_per_partition`): the version read and its Arrow tables.

        Parameters
        ----------
        in_place : bool
            Rows with a ``cache``: a partition the cache holds (or can hold) as a file comes with that file
            (:attr:`ScanPart.cache_file`, to be read where it is, e.g. by DuckDB; pin it meanwhile).
        threads : int
            Partitions read at once (decoding lets go of the GIL), still given in partition order.
        """
        if in_place and self.kind != "rows":
            raise UsageError("in_place reads rows, not changes")
        if self.kind == "stats":
            raise UsageError("a stats scan has no parts: read iter_stats() or an output (to_arrow...)")
        if self.kind == "replay":
            raise UsageError("a replay scan's versions are iter_replay() or replay()")
        for part in self._per_partition(lambda pid: self._read(pid, in_place), threads):
            if part.tables and self._empty is None:
                self._empty = part.tables[0].slice(0, 0)  # the columns, for an answer without rows
            yield part

    def iter_live(self) -> Iterator[tuple[int, int, tuple[Any, Any, Any, Any, Any]]]:
        """Rows as stored, not decoded: ``(partition, version, (buffer, key_start, key_len, value_start,
        value_len))`` per partition, in partition order, with the scan's error policy
        (:meth:`_per_partition`); for weighing keys by their bytes (the native backend).

        Raises
        ------
        FilesUnavailableError
            The backend reads decoded rows through an engine (Spark).
        """
        if self.kind != "rows":
            raise UsageError(f"stored records are read with rows, not {self.kind}")
        files = self._files()  # on a backend that reads no files: raised at once

        def read(pid: int) -> tuple[int, int, tuple[Any, Any, Any, Any, Any]]:
            version = self._versions(pid)[1]
            return pid, version, files.live_arrays(pid, version)

        yield from self._per_partition(read)

    # -- stored records, replayed -------------------------------------------------------------------
    def _files(self) -> Any:
        """The store's files, on a backend that reads files (``capabilities.raw_records``; else
        ``FilesUnavailableError``)."""
        return files_of(self.backend, self.operator_id, self.store_name)

    def iter_replay(self, *, sizes: bool = False) -> Iterator[ReplayStep]:
        """Every version of every partition (``start_version .. end_version``, default all), replayed
        from the files oldest first, one partition in memory at a time (kind ``replay``).

        A file that cannot be read goes to :attr:`problems` (its partition, from that version, to
        :attr:`unreadable`) and the partition's replay restarts at the next version it can rebuild; with
        ``strict`` it is raised.

        Parameters
        ----------
        sizes : bool
            Keep :attr:`ReplayStep.state_bytes` (key plus value bytes) up to date.

        Raises
        ------
        FilesUnavailableError
            The backend reads decoded rows through an engine (Spark).
        """
        if self.kind != "replay":
            raise UsageError(f"iter_replay replays a replay scan, not {self.kind}")
        for pid in self.partition_ids():
            replay = Replay(self, sizes, [pid], compact=False)  # one partition at a time: dicts
            known = len(self.problems)
            yield from replay.advance()
            if self.strict and len(self.problems) > known:
                raise self.problems[known]

    def replay(self, *, sizes: bool = False) -> Replay:
        """This store's replay, to be fed version by version (:meth:`Replay.advance`) and resumed where it
        stopped: every partition's state stays in memory between calls (kind ``replay``), compactly
        (:class:`readers.replay_state.CompactState`: a store of millions of keys in a few hundred MB)."""
        if self.kind != "replay":
            raise UsageError(f"replay() replays a replay scan, not {self.kind}")
        return Replay(self, sizes, compact=True)

    @property
    def schema(self) -> StoreSchema | None:
        """The schema the store's files are decoded with (``capabilities.raw_records``)."""
        return self._files().schema  # type: ignore[no-any-return]

    def versions(self, partition_id: int | None) -> list[int]:
        """The versions one partition's (or with None any partition's) files can rebuild, ascending."""
        return list(self._files().versions(partition_id))

    def decode(
        self, partition_id: int, pairs: Sequence[tuple[bytes, bytes | None]], version: int | None = None
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
        """Decode stored ``(key bytes, value bytes)`` pairs of one partition as the store's schema reads
        them (a ``None`` value stays ``None``); ``version`` only names the file in an error."""
        path = f"state/{self.operator_id}/{partition_id}" + (f"/{version}" if version is not None else "")
        return self._files().decode_pairs(list(pairs), path)

    def field_reader(
        self, side: Literal["key", "value"], path: tuple[int, ...]
    ) -> Callable[[bytes], int | None]:
        """A function reading one integer field (positional ``path``) of stored key or value bytes, as
        :meth:`iter_replay` gives them, without decoding the rest (:mod:`readers.scan_fields`)."""
        return field_reader(self._files(), side, path)

    def element_grouping(self) -> tuple[str | None, Callable[[bytes], bytes] | None]:
        """How stored records group into keys: ``(kind, key bytes -> grouping key bytes)`` (``list``,
        ``map`` or join ``values``), or ``(None, None)`` when every record is a key of its own."""
        return self._files().element_grouping()  # type: ignore[no-any-return]

    def iter_tables(self) -> Iterator[pa.Table]:
        """Arrow tables, one per partition (rows, stats) or per partition and version (changes), in
        partition order, with the scan's error policy (:meth:`_per_partition`, :meth:`iter_stats`)."""
        if self.kind == "stats":
            yield from self._stats_tables()
            return
        for part in self.iter_parts():
            yield from (t for t in part.tables if t.num_rows)

    def _records(self, pid: int | None) -> Iterator[StateRow | StateChange]:
        b, op, store = self.backend, self.operator_id, self.store_name
        start, end = self._versions(pid)
        if self.kind == "changes":
            return b.iter_changes(op, store, start, end, pid)
        return b.iter_rows(op, store, end, pid)

    def iter_records(self) -> Iterator[Any]:
        """Decoded rows (:class:`readers.model.StateRow`) or changes (:class:`readers.model.StateChange`)
        as Python values, in partition order, with the same error policy as :meth:`iter_tables`. A
        backend whose every read is a job over the store (``capabilities.partition_reads`` False: Spark)
        answers every partition in one job: its error is raised. Kind ``timers``: ``(partition, grouping
        key, expiry ms)`` of every timer registered at ``version`` (default the operator's latest)."""
        if self.kind in ("stats", "replay"):
            raise UsageError(f"a {self.kind} scan's records are iter_{self.kind}()")
        if self.kind == "timers":
            b, op = self.backend, self.operator_id
            version = self.version if self.version is not None else b.latest_version(op)
            for pid in self.partitions if self.partitions is not None else [None]:
                yield from b.read_timers(op, version, pid)
            return
        if not self.backend.capabilities.partition_reads and self.partitions is None:
            yield from self._records(None)
            return
        for records in self._per_partition(lambda pid: list(self._records(pid))):
            yield from records

    def collect(self) -> list[Any]:
        """:meth:`iter_records` as a list. An engine (``capabilities.partition_reads`` False) reads a
        version's rows in one collected job, the one job a cancel stops (the desktop browser's read)."""
        if self.kind == "rows" and not self.backend.capabilities.partition_reads:
            pids = self.partitions
            if pids is None or len(pids) == 1:
                version = self.version if self.version is not None else self._versions(None)[1]
                pid = pids[0] if pids is not None else None
                return list(self.backend.read_rows(self.operator_id, self.store_name, version, pid))
        return list(self.iter_records())

    def iter_entries(self) -> Iterator[tuple[Any, ...]]:
        """The entries of a transformWithState state variable (``store_name``): rows ``(partition, key,
        value, user_key)`` at ``version`` (default the operator's latest), or changes ``(version,
        partition, change, key, value, user_key)`` of ``start_version .. end_version``; ``user_key`` is
        a map state's user key (None for the other variables)."""
        if self.kind not in ("rows", "changes") or self.store_name is None:
            raise UsageError("a state variable's entries are read by a rows or changes scan of that variable")
        b, op, name = self.backend, self.operator_id, self.store_name
        for pid in self.partitions if self.partitions is not None else [None]:
            if self.kind == "rows":
                version = self.version if self.version is not None else b.latest_version(op)
                yield from b.read_state_variable(op, name, version, pid)
            else:
                last = self.end_version if self.end_version is not None else b.latest_version(op)
                first = self.start_version if self.start_version is not None else 1
                yield from b.read_state_variable_changes(op, name, first, last, pid)

    def iter_stats(self) -> Iterator[PartitionVersionStats]:
        """Live rows and on-disk bytes of each partition at each version asked for (kind ``stats``), in
        partition order then version order, counted by the backend without decoding where it can (the
        native readers count keys; Spark runs one job over the store's change feed).

        A file that cannot be read ends its partition's count there: the error goes to :attr:`problems`
        and the partition (from that version) to :attr:`unreadable`, and the other partitions are still
        counted; with ``strict`` the error is raised. A store the backend cannot count at all (an engine
        that cannot be reached, a store it does not read) raises, as a row scan does: never an empty
        answer.
        """
        if self.kind != "stats":
            raise UsageError(f"iter_stats counts a stats scan, not {self.kind}")
        wanted = None if self.partitions is None else set(self.partitions)
        first, last = (
            (self.version, self.version)
            if self.version is not None
            else (self.start_version, self.end_version)
        )
        stats = self.backend.iter_stats(
            self.operator_id, self.store_name, on_error=None if self.strict else self._stats_error
        )
        for st in stats:
            if self.cancelled is not None and self.cancelled():
                return
            if wanted is not None and st.partition_id not in wanted:
                continue
            if (first is not None and st.version < first) or (last is not None and st.version > last):
                continue
            yield st

    def _stats_error(self, err: StatelensError) -> None:
        pid = err.context.get("partition_id")
        if pid is not None and self.partitions is not None and pid not in self.partitions:
            return  # a partition not asked for
        self.problems.append(err)
        self.unreadable.append(Unreadable(pid, err.context.get("version"), err))

    def _stats_tables(self) -> Iterator[pa.Table]:
        """:meth:`iter_stats` as one Arrow table per partition (columns :data:`STATS_COLUMNS`)."""
        import pyarrow as pa  # deferred: pyarrow, only for Arrow output

        schema = pa.schema([(name, pa.int64()) for name in STATS_COLUMNS])
        self._empty = schema.empty_table()
        columns: list[list[int]] = [[] for _ in STATS_COLUMNS]
        current: int | None = None
        for st in self.iter_stats():
            if st.partition_id != current and columns[0]:
                yield pa.table(columns, schema=schema)
                columns = [[] for _ in STATS_COLUMNS]
            current = st.partition_id
            for column, value in zip(columns, (st.version, st.partition_id, st.rows, st.bytes), strict=True):
                column.append(value)
        if columns[0]:
            yield pa.table(columns, schema=schema)

    def _unreadable(self, pid: int | None, err: StatelensError) -> None:
        self.problems.append(err)
        self.unreadable.append(Unreadable(pid, err.context.get("version", self.version), err))

    # -- output, chosen last ------------------------------------------------------------------------
    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Arrow record batches, a partition at a time (memory: one partition's columns)."""
        for table in self.iter_tables():
            yield from table.to_batches()

    def to_arrow(self) -> pa.Table:
        """Every partition's rows in one Arrow table (columns: ``partition, key, value``; for changes
        ``version, partition, change, key, value, derived``; for stats :data:`STATS_COLUMNS`)."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        tables = list(self.iter_tables())
        if tables:
            return pa.concat_tables(tables, promote_options="permissive")
        if self._empty is not None:  # read, and nothing in it: an empty table with the columns
            return self._empty
        if self.unreadable:
            raise StatelensError(
                "no partition of this store could be read: " + "; ".join(map(str, self.unreadable[:3])),
                operator_id=self.operator_id,
                store_name=self.store_name,
            )
        raise StatelensError(
            "this store has no partitions to read", operator_id=self.operator_id, store_name=self.store_name
        )

    def to_pylist(self) -> list[dict[str, Any]]:
        """Rows as Python dicts (keys and values as dicts of their fields)."""
        return self.to_arrow().to_pylist()

    def to_pandas(self) -> Any:
        """A pandas DataFrame (``to_arrow().to_pandas()``)."""
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """A polars DataFrame (needs polars installed).

        Raises
        ------
        BackendUnavailableError
            polars is not installed (the message says how to install it).
        """
        return to_polars(self.to_arrow())

    def to_spark(self) -> Any:
        """Spark's own DataFrame of the same rows (or change feed), lazy, read where Spark runs (a
        cluster or Spark Connect): on the Spark backend only.

        Raises
        ------
        BackendUnavailableError
            The scan reads with the native decoder.
        UsageError
            A stats scan (its counts are not rows of a DataFrame).
        """
        if self.kind not in ("rows", "changes"):
            raise UsageError(f"a {self.kind} scan is not rows of a DataFrame: use rows or changes")
        if self.backend.engine is None:
            raise BackendUnavailableError(
                "a Spark DataFrame comes from Spark's own readers: open the checkpoint with backend='spark' "
                "(statelens.open(path, backend='spark', spark=spark))"
            )
        return self.backend.engine.dataframe(
            self.operator_id,
            self.store_name,
            changes=self.kind == "changes",
            version=self.version,
            start_version=self.start_version,
            end_version=self.end_version,
            partitions=list(self.partitions) if self.partitions is not None else None,
        )

    def to_parquet(self, url: str) -> int:
        """Write the rows (or change feed) as Parquet at ``url`` without collecting them here, in the
        columns of :meth:`to_arrow`: a backend reading partitions writes one file, a partition at a time;
        an engine (Spark) writes a folder of part files where it runs. A partition that cannot be read is
        recorded (:attr:`problems`) and left out, as in every output. Returns the rows written.

        Raises
        ------
        UsageError
            A stats or replay scan, several partitions chosen (one or all), or a change feed of some
            versions but not all (one version, or all).
        """
        if self.kind not in ("rows", "changes"):
            raise UsageError(f"a {self.kind} scan is not written as Parquet rows; use to_arrow()")
        if self.partitions is not None and len(self.partitions) != 1:
            raise UsageError("Parquet output reads one partition or all of them")
        version = self.version
        if self.kind == "changes":
            if self.start_version != self.end_version:
                raise UsageError("a Parquet change feed is of one version (start = end) or of every version")
            version = self.start_version
        engine = self.backend.engine
        if not self.backend.capabilities.partition_reads and engine is not None:
            return engine.write_parquet(
                self.operator_id,
                self.store_name,
                url,
                version=version,
                changes=self.kind == "changes",
                partition_id=self.partitions[0] if self.partitions is not None else None,
            )
        import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

        writer: Any = None
        written = 0
        try:
            for table in self.iter_tables():
                if writer is None:
                    writer = pq.ParquetWriter(url, table.schema)
                writer.write_table(table.cast(writer.schema) if table.schema != writer.schema else table)
                written += table.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:  # no rows at all: an empty file with the columns
            pq.write_table(self._empty if self._empty is not None else self._no_rows(), url)
        return written

    def _no_rows(self) -> pa.Table:
        """The empty table of this store's rows (or changes), typed from its schema file."""
        schema = self.schema
        if schema is None:
            raise SchemaMismatchError(
                "this store has no readable schema file, so its rows cannot be typed",
                path=f"state/{self.operator_id}/0/_metadata/schema",
            )
        row_schema = state_row_schema(schema.key_schema, schema.value_schema, changes=self.kind == "changes")
        return rows_to_arrow([], row_schema, unique_names=True)

    def to_duckdb(self, connection: Any, name: str = "state") -> Any:
        """Register the rows as DuckDB view ``name`` on ``connection`` and return the relation."""
        connection.register(name, self.to_arrow())
        return connection.table(name)


# -- the replay of raw versions (growth, expired, a key's history) ---------------------------------------
RawChanges = list[tuple[bytes, "bytes | None"]]


def _raw_bytes(state: Mapping[bytes, bytes]) -> int:
    """Key plus value bytes of a raw state."""
    return sum(len(k) + len(x) for k, x in state.items())


def _put_all(state: MutableMapping[bytes, bytes], changes: RawChanges, count_bytes: bool) -> int | None:
    """Replay a file of puts only, each key once (most deltas), with C-level loops; returns the change
    in key + value bytes (0 when not counted), or None (nothing done) when the file removes a key or
    puts one twice: then the records are replayed one by one."""
    batch = dict(changes)
    if len(batch) != len(changes) or None in batch.values():
        return None
    grown = 0
    if count_bytes:
        olds = list(map(state.get, batch))
        present = list(map(operator.is_not, olds, itertools.repeat(None)))
        grown = sum(map(len, batch)) + sum(map(len, batch.values()))  # type: ignore[arg-type]
        grown -= sum(map(len, itertools.compress(batch, present)))
        grown -= sum(map(len, itertools.compress(olds, present)))  # type: ignore[arg-type]
    state.update(batch)  # type: ignore[arg-type]
    return grown


def _held(state: dict[bytes, bytes], compact: bool) -> MutableMapping[bytes, bytes]:
    """A whole state read as a dict, as the replay keeps it: the dict itself, or (``compact``) its
    records in arrays (:class:`readers.replay_state.CompactState`)."""
    if not compact:
        return state
    return CompactState(state)


@dataclass
class ReplayStep:
    """One version of one partition, as a replay reaches it (:meth:`StateScan.iter_replay`).

    Attributes
    ----------
    partition_id, version : int
    state : mapping of bytes to bytes
        The partition's live records as stored (key bytes to value bytes) after ``version``: the replay's
        own map, changed in place by the next step; copy what must outlive the step. A dict in
        :meth:`StateScan.iter_replay`; in a :meth:`StateScan.replay` that keeps every partition between
        calls, a :class:`readers.replay_state.CompactState` (the records in arrays, not Python objects).
    changes : list of (bytes, bytes or None), or None
        The records that turned the previous version into this one (a ``None`` value is a remove):
        recorded (a delta or changelog), or the difference of the two whole states where nothing
        records them (RocksDB without changelog checkpointing); ``None`` when the state was rebuilt
        whole (the first version read, or after a gap or a file that could not be read).
    state_bytes : int or None
        Key plus value bytes of ``state`` (replays asked ``sizes=True``), kept up to date change by change.
    """

    partition_id: int
    version: int
    state: Mapping[bytes, bytes]
    changes: RawChanges | None
    state_bytes: int | None = None


class _PartitionReplay:
    """One partition's replay, oldest version first, resumable: :meth:`advance` reads only the versions
    after the last one reached (the next delta or changelog onto the state in memory), so feeding a
    partition version by version costs what each version wrote.

    A file that cannot be read goes to ``problems`` (each message once) and the replay restarts at the
    next version it can rebuild whole (a snapshot), as Spark's load would.
    """

    def __init__(
        self,
        reader: Any,
        partition_id: int,
        problems: list[StatelensError],
        sizes: bool,
        compact: bool = False,
    ):
        self.reader = reader
        self.partition_id = partition_id
        self.problems = problems
        self.sizes = sizes
        self.compact = compact  # keep the state in arrays (a replay kept between calls)
        self.state: MutableMapping[bytes, bytes] = _held({}, compact)
        self.current: int | None = None  # the version ``state`` is at (None: nothing read, or lost)
        self.reached: int | None = None  # the newest version fed, read or not
        self.nbytes = 0
        self._reported: set[str] = set()

    def advance(
        self, until: int | None = None, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[ReplayStep]:
        """Every readable version after the last one fed, up to ``until`` (default the newest).

        A compact replay fed several versions at once (catching up) replays them onto a dict, as
        :meth:`StateScan.iter_replay` does, and packs the state into arrays again when it is done: one
        partition's dict at a time, and the C-level dict updates of :func:`_put_all`."""
        reader, pid = self.reader, self.partition_id
        deltas = set(reader.delta_versions(pid))
        todo = [
            v
            for v in reader.versions(pid)
            if not (self.reached is not None and v <= self.reached) and not (until is not None and v > until)
        ]
        unpacked = self.compact and len(todo) > 1
        if unpacked and not isinstance(self.state, dict):
            self.state = dict(self.state.items())
        try:
            for v in todo:
                if cancelled is not None and cancelled():
                    return
                self.reached = v
                step = self._step(v, v in deltas, unpacked)
                if step is not None:
                    yield step
        finally:
            if unpacked and isinstance(self.state, dict):
                self.state = _held(self.state, True)

    def _step(self, v: int, has_delta: bool, unpacked: bool = False) -> ReplayStep | None:
        reader, pid, state = self.reader, self.partition_id, self.state
        changes: RawChanges | None
        try:
            if self.current is not None and v == self.current + 1 and has_delta:
                reader.check_snapshot(pid, v)  # a damaged snapshot of v: v unreadable, as in Spark
                changes = list(reader.iter_raw_changes(pid, v))
                grown = _put_all(state, changes, self.sizes)
                if grown is not None:
                    self.nbytes += grown
                else:
                    for key, value in changes:
                        old = state.pop(key, None) if value is None else state.get(key)
                        if old is not None:
                            self.nbytes -= len(key) + len(old)
                        if value is not None:
                            state[key] = value
                            self.nbytes += len(key) + len(value)
            elif self.current is not None and v == self.current + 1:
                # The version before was just read but no delta/changelog continues it (RocksDB without
                # changelog checkpointing: a zip per version, as every Spark 3.4 RocksDB store): the
                # changes are what differs between the two whole states.
                new = reader.read_raw(pid, v)
                changes = diff_raw(state if isinstance(state, dict) else dict(state.items()), new)
                self._whole(new, unpacked)
            else:
                self._whole(reader.read_raw(pid, v), unpacked)
                changes = None
        except StatelensError as err:
            if str(err) not in self._reported:
                self._reported.add(str(err))
                self.problems.append(err)
            self.current = None
            self.state = _held({}, self.compact and not unpacked)
            if not reader.has_snapshot(pid, v):
                return None
            try:  # a damaged delta or changelog of a version that has its own snapshot: load that
                self._whole(reader.read_raw(pid, v), unpacked)
            except StatelensError:
                return None
            changes = None
        self.current = v
        return ReplayStep(pid, v, self.state, changes, self.nbytes if self.sizes else None)

    def _whole(self, state: dict[bytes, bytes], unpacked: bool = False) -> None:
        self.nbytes = _raw_bytes(state) if self.sizes else 0
        self.state = _held(state, self.compact and not unpacked)


class Replay:
    """A store's replay that can be fed version by version and resumed where it stopped
    (:meth:`StateScan.replay`): each partition's state stays in memory between calls, so a version
    committed since the last :meth:`advance` costs what it wrote, not the store.

    With ``compact`` (the default; :meth:`StateScan.iter_replay`, which holds one partition at a time,
    keeps dicts) the states are held in arrays
    (:class:`readers.replay_state.CompactState`, 16 bytes a record over its key and value bytes, where
    a dict takes some 120): a store of millions of keys can be followed in a few hundred MB.

    Attributes
    ----------
    positions : dict of int to int
        Each partition's newest version fed so far.
    """

    def __init__(
        self,
        scan: StateScan,
        sizes: bool,
        partitions: Sequence[int] | None = None,
        compact: bool = True,
    ):
        self._scan = scan
        self._sizes = sizes
        self._compact = compact
        self._partitions = partitions
        self._parts: dict[int, _PartitionReplay] = {}

    @property
    def positions(self) -> dict[int, int]:
        return {pid: p.reached for pid, p in self._parts.items() if p.reached is not None}

    def advance(self, until: int | None = None) -> Iterator[ReplayStep]:
        """The versions after each partition's last one fed, up to ``until`` (default the newest), in
        partition order then version order; files that cannot be read go to the scan's problems."""
        scan = self._scan
        reader = scan._files()
        for pid in self._partitions if self._partitions is not None else scan.partition_ids():
            if scan.cancelled is not None and scan.cancelled():
                return
            part = self._parts.get(pid)
            if part is None:
                part = self._parts[pid] = _PartitionReplay(
                    reader, pid, scan.problems, self._sizes, self._compact
                )
                if scan.start_version is not None:
                    part.reached = scan.start_version - 1  # replay from start_version
            last = until if until is not None else scan.end_version
            known = len(scan.problems)
            yield from part.advance(last, scan.cancelled)
            for err in scan.problems[known:]:
                scan.unreadable.append(Unreadable(pid, err.context.get("version"), err))

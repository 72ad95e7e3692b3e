"""The native backend: statelens' own decoders, no JVM (the default).

Same contract as :mod:`readers.backends.spark` (:class:`readers.backends.base.StateBackend`): rows,
changes and per-partition statistics of one store, as :mod:`readers.model` types or Arrow, state versions
numbered as Spark does (version ``v`` = after batch ``v-1``). It also hands out what only files answer
(:meth:`NativeBackend.store`, :meth:`NativeBackend.column_families`): the one place outside ``readers``
where store readers are reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from statelens.readers.backends.base import Capabilities
from statelens.readers.errors import BackendUnavailableError, StatelensError
from statelens.readers.model import PartitionVersionStats, StateChange, StateRow

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from statelens.readers._format.rocksdb_store import RocksDBColumnFamilyReader
    from statelens.readers.backends.spark_engine import SparkEngine
    from statelens.readers.cache import StateCache
    from statelens.readers.checkpoint import Checkpoint, StoreReader


class NativeBackend:
    """Reads state with the native decoders of an opened :class:`~readers.checkpoint.Checkpoint`."""

    name = "native"
    capabilities = Capabilities(engine_queries=False, partition_reads=True, raw_records=True)
    engine: SparkEngine | None = (
        None  # no engine here: queries run where Spark runs (capabilities.engine_queries False)
    )

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt

    def describe(self) -> str:
        """One line for the user: which backend answered."""
        return "native decoder"

    # -- what only files answer ------------------------------------------------------------------------
    def store_files(self, operator_id: int, store_name: str | None = None) -> StoreReader:
        """The files of one store and their raw records: partitions, versions and the files behind them,
        raw key/value bytes (``read_raw``, ``iter_raw_changes``), decoding of chosen pairs. For the
        analyses that need bytes (growth's key + value bytes, the heaviest keys, zombie detection on raw
        keys, doctor's file checks).

        Raises
        ------
        BackendUnavailableError
            transformWithState stores, read per state variable (:meth:`column_families`).
        UsageError
            Unknown operator or store.
        """
        return self.ckpt.store_reader(operator_id, store_name)

    def family_files(self, operator_id: int) -> RocksDBColumnFamilyReader:
        """The state variables and timers of a transformWithState operator (RocksDB column families)."""
        return self.ckpt.column_family_reader(operator_id)

    def can_read(self, operator_id: int, store_name: str | None = None) -> bool:
        """True when the native decoders can decode this store (provider and schema known)."""
        try:
            reader = self.ckpt.store_reader(operator_id, store_name)
        except StatelensError:
            return False
        return reader.schema is not None

    def partition_ids(self, operator_id: int, store_name: str | None = None) -> list[int]:
        return self.ckpt.store_reader(operator_id, store_name).partition_ids()

    def latest_version(
        self, operator_id: int, store_name: str | None = None, partition_id: int | None = None
    ) -> int:
        """Newest readable version (of one partition, or of any); with neither store nor partition, of an
        operator with several stores (a join, transformWithState variables), its stores' newest."""
        stores = self.ckpt.operator(operator_id).stores
        whole_operator = store_name is None and partition_id is None
        if whole_operator and len(stores) > 1:
            return max((max(s.versions, default=0) for s in stores), default=0)
        try:
            reader = self.ckpt.store_reader(operator_id, store_name)
        except BackendUnavailableError:
            if not whole_operator:
                raise
            return max((max(s.versions, default=0) for s in stores), default=0)
        versions = reader.versions(partition_id)
        return versions[-1] if versions else 0

    def read_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> list[StateRow]:
        """Decoded rows of one store at ``version`` (all partitions, or one)."""
        return list(self.iter_rows(operator_id, store_name, version, partition_id))

    def iter_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> Iterator[StateRow]:
        """:meth:`read_rows`, a partition at a time."""
        reader = self.ckpt.store_reader(operator_id, store_name)
        for pid in [partition_id] if partition_id is not None else reader.partition_ids():
            yield from reader.read_rows(pid, version)

    def iter_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> Iterator[StateChange]:
        """:meth:`read_changes`, a partition and version at a time."""
        reader = self.ckpt.store_reader(operator_id, store_name)
        for pid in [partition_id] if partition_id is not None else reader.partition_ids():
            for v in reader.change_versions_between(pid, start_version, end_version):
                yield from reader.read_changes(pid, v)

    def read_arrow(
        self,
        operator_id: int,
        store_name: str | None,
        version: int,
        partition_id: int,
        *,
        unique_names: bool = False,
        cache: StateCache | None = None,
        raw: bool = False,
    ) -> pa.Table:
        """One partition of one store at ``version`` as Arrow: ``partition int32, key struct, value struct``.

        Plain UnsafeRow stores are decoded column by column, with no Python object per row; with
        ``cache``, a version decoded before from the same files is read back from it. ``raw`` adds the
        ``key_bytes`` and ``value_bytes`` columns (the stored rows, for rewriting and byte-level proof).
        """
        return self.ckpt.store_reader(operator_id, store_name).read_arrow(
            partition_id, version, unique_names=unique_names, cache=cache, raw=raw
        )

    def arrow_entry(
        self,
        operator_id: int,
        store_name: str | None,
        version: int,
        partition_id: int,
        cache: StateCache,
        *,
        unique_names: bool = False,
    ) -> tuple[Path | None, pa.Table]:
        """:meth:`read_arrow` with ``cache``, and the cache file that holds the table (None when the cache
        cannot hold it), for queries that read the state in place (DuckDB); pin the file meanwhile."""
        return self.ckpt.store_reader(operator_id, store_name).arrow_entry(
            partition_id, version, cache, unique_names=unique_names
        )

    def read_changes_arrow(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int,
        *,
        unique_names: bool = False,
    ) -> list[pa.Table]:
        """The change feed of one partition, versions ``start_version .. end_version``, one Arrow table
        per version: ``version, partition, change, key, value``."""
        reader = self.ckpt.store_reader(operator_id, store_name)
        return [
            reader.read_changes_arrow(partition_id, v, unique_names=unique_names)
            for v in reader.change_versions_between(partition_id, start_version, end_version)
        ]

    def read_state_variable(
        self, operator_id: int, name: str, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, Any, Any]]:
        """Entries of one transformWithState variable: ``(partition, key, value, user_key)``."""
        cf = self.ckpt.column_family_reader(operator_id)
        pids = [partition_id] if partition_id is not None else cf.partition_ids()
        out: list[tuple[int, Any, Any, Any]] = []
        for pid in pids:
            out.extend(
                (r.partition_id, r.key, r.value, r.user_key) for r in cf.read_variable(pid, version, name)
            )
        return out

    def read_state_variable_changes(
        self,
        operator_id: int,
        name: str,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[tuple[int, int, str, Any, Any, Any]]:
        """Changes of one transformWithState variable: ``(version, partition, change, key, value, user_key)``."""
        cf = self.ckpt.column_family_reader(operator_id)
        pids = [partition_id] if partition_id is not None else cf.partition_ids()
        out: list[tuple[int, int, str, Any, Any, Any]] = []
        for pid in pids:
            for v in cf.delta_versions(pid):
                if start_version <= v <= end_version:
                    out.extend(
                        (v, r.partition_id, change, r.key, r.value, r.user_key)
                        for change, r in cf.read_variable_changes(pid, v, name)
                    )
        return out

    def read_timers(
        self, operator_id: int, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, int]]:
        """Registered timers of a transformWithState operator: ``(partition, grouping key, expiry ms)``."""
        cf = self.ckpt.column_family_reader(operator_id)
        pids = [partition_id] if partition_id is not None else cf.partition_ids()
        out: list[tuple[int, Any, int]] = []
        for pid in pids:
            out.extend(cf.read_timers(pid, version))
        return out

    def read_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[StateChange]:
        """Put/remove records of versions ``start_version .. end_version`` (inclusive)."""
        return list(self.iter_changes(operator_id, store_name, start_version, end_version, partition_id))

    def iter_stats(
        self,
        operator_id: int,
        store_name: str | None = None,
        on_error: Callable[[StatelensError], None] | None = None,
    ) -> Iterator[PartitionVersionStats]:
        """Rows and on-disk bytes of every partition at every readable version."""
        yield from self.ckpt.store_reader(operator_id, store_name).iter_stats(on_error=on_error)

    def cancel(self) -> None:
        """Nothing to do: native reads stop through their job's ``cancelled`` callback."""

    def close(self) -> None:
        """Nothing to release."""

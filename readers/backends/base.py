"""The one doorway to state: what every backend answers, typed.

Consumers (the command line, the analyses, the app) read state only through a :class:`StateBackend`
handed out by :class:`readers.backends.BackendChooser`, never through a store reader: the native
backend (:mod:`readers.backends.native`) decodes files itself, the Spark backend
(:mod:`readers.backends.spark`) asks Spark's ``statestore`` source. Both number versions as Spark
does (version ``v`` = the state after batch ``v-1``) and return :mod:`readers.model` types or Arrow
tables.

Every backend implements every method of :class:`StateBackend`; what goes beyond it is declared, never a
method that raises: a backend that reads the checkpoint's files (``capabilities.raw_records``) is also a
:class:`FileBackend`, whose store files the scans of ``readers/`` reach through :func:`files_of` (nothing
outside ``readers/`` does: ``tests/test_one_doorway.py``); a backend with an engine has
:attr:`StateBackend.engine` (:mod:`readers.backends.spark_engine`). An analysis asks the capability,
never the backend's name or class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from statelens.readers.errors import FilesUnavailableError

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from statelens.readers._format.rocksdb_store import RocksDBColumnFamilyReader
    from statelens.readers.backends.spark_engine import SparkEngine
    from statelens.readers.cache import StateCache
    from statelens.readers.checkpoint import StoreReader
    from statelens.readers.errors import StatelensError
    from statelens.readers.model import PartitionVersionStats, StateChange, StateRow


@dataclass(frozen=True)
class Capabilities:
    """What a backend does beyond the rows, changes and statistics every backend reads.

    Attributes
    ----------
    engine_queries : bool
        Has an engine (:attr:`StateBackend.engine`) that runs an analysis's SQL over a store's rows and
        history where it runs, and gives Spark DataFrames of them: only the answer comes to this process.
    partition_reads : bool
        Reading one partition alone costs that partition (files); False when every read is a job over
        the store (an engine), so a whole store is best read in one call.
    raw_records : bool
        Reads the stored records themselves (raw key and value bytes, the files of each version): what
        :class:`readers.scan.StateScan`'s ``replay`` kind, ``iter_live`` and ``decode`` need.
    """

    engine_queries: bool
    partition_reads: bool
    raw_records: bool = False


@runtime_checkable
class StateBackend(Protocol):
    """Rows, changes and statistics of the stores of one checkpoint.

    Attributes
    ----------
    name : str
        ``native`` or ``spark``: for the user (``describe``), never for routing.
    capabilities : Capabilities
        What this backend does beyond reading rows and changes (asked instead of its name).
    engine : readers.backends.spark_engine.SparkEngine or None
        Where an analysis runs its own SQL over the checkpoint's frames (``capabilities.engine_queries``);
        None on a backend without an engine.
    """

    name: str
    capabilities: Capabilities

    @property
    def engine(self) -> SparkEngine | None: ...

    def describe(self) -> str:
        """One line for the user: which backend answered."""
        ...

    def can_read(self, operator_id: int, store_name: str | None = None) -> bool:
        """True when this backend can read the store."""
        ...

    def partition_ids(self, operator_id: int, store_name: str | None = None) -> list[int]: ...

    def latest_version(
        self, operator_id: int, store_name: str | None = None, partition_id: int | None = None
    ) -> int:
        """Newest readable version (of one partition, or of any); 0 when there is none."""
        ...

    def read_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> list[StateRow]:
        """Decoded rows of one store at ``version`` (all partitions, or one)."""
        ...

    def iter_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> Iterator[StateRow]:
        """:meth:`read_rows`, streamed: memory for a batch of rows, not the store."""
        ...

    def iter_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> Iterator[StateChange]:
        """:meth:`read_changes`, streamed."""
        ...

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
        """One partition at ``version`` as Arrow: ``partition int32, key struct, value struct``; with
        ``raw`` also ``key_bytes, value_bytes`` (backends that read files only)."""
        ...

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
        cannot hold it, or the backend keeps no cache), for queries that read the state in place."""
        ...

    def read_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[StateChange]:
        """Put/remove records of versions ``start_version .. end_version`` (inclusive)."""
        ...

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
        """The change feed of one partition, one Arrow table per version:
        ``version, partition, change, key, value``."""
        ...

    def iter_stats(
        self,
        operator_id: int,
        store_name: str | None = None,
        on_error: Callable[[StatelensError], None] | None = None,
    ) -> Iterator[PartitionVersionStats]:
        """Rows and on-disk bytes of every partition at every readable version."""
        ...

    def read_state_variable(
        self, operator_id: int, name: str, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, Any, Any]]:
        """Entries of one transformWithState variable: ``(partition, key, value, user_key)``."""
        ...

    def read_state_variable_changes(
        self,
        operator_id: int,
        name: str,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[tuple[int, int, str, Any, Any, Any]]:
        """Changes of one transformWithState variable: ``(version, partition, change, key, value, user_key)``."""
        ...

    def read_timers(
        self, operator_id: int, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, int]]:
        """Registered timers of a transformWithState operator: ``(partition, grouping key, expiry ms)``."""
        ...

    def cancel(self) -> None:
        """Stop the reads in flight (from another thread); later reads still work."""
        ...

    def close(self) -> None:
        """Release what the backend holds (a Spark session it started)."""
        ...


@runtime_checkable
class FileBackend(StateBackend, Protocol):
    """A backend that reads the checkpoint's files (``capabilities.raw_records``): the store readers behind
    the scan's raw kinds (``replay``, ``iter_live``, ``decode``) and its siblings (``scan_files``,
    ``scan_sizes``, ``scan_diff``, ``rewrite``). Reached inside ``readers/`` only, through
    :func:`files_of`."""

    def store_files(self, operator_id: int, store_name: str | None = None) -> StoreReader:
        """The files of one store and their raw records."""
        ...

    def family_files(self, operator_id: int) -> RocksDBColumnFamilyReader:
        """The files of a transformWithState operator's state variables and timers."""
        ...


def files_of(backend: StateBackend, operator_id: int, store_name: str | None = None) -> StoreReader:
    """The files of one store, on a backend that reads them (``capabilities.raw_records``).

    Raises
    ------
    FilesUnavailableError
        The backend reads decoded rows through an engine (Spark).
    BackendUnavailableError
        A store the native readers cannot open (e.g. an unknown encoding).
    """
    if not backend.capabilities.raw_records:
        raise FilesUnavailableError(
            f"{backend.describe()} reads decoded rows, not the state files and raw bytes of operator "
            f"{operator_id}: they are read by the native backend (--backend native)",
            operator_id=operator_id,
            store_name=store_name,
        )
    return cast(FileBackend, backend).store_files(operator_id, store_name)

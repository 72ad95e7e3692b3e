"""The one doorway to state: what every backend answers, typed.

Consumers (the command line, the analyses, the app) read state only through a :class:`StateBackend`
handed out by :class:`readers.backends.BackendChooser`, never through a store reader: the native
backend (:mod:`readers.backends.native`) decodes files itself, the Spark backend
(:mod:`readers.backends.spark`) asks Spark's ``statestore`` source. Both number versions as Spark
does (version ``v`` = the state after batch ``v-1``) and return :mod:`readers.model` types or Arrow
tables.

What only files can answer (the raw bytes of keys and values, the state files of a version, their
integrity) is not part of this protocol: it is the native backend's :meth:`NativeBackend.store
<readers.backends.native.NativeBackend.store>` and
:meth:`~readers.backends.native.NativeBackend.column_families`, and an analysis asks for it by
:attr:`StateBackend.reads_files`, never by a backend's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.readers.cache import StateCache
    from statelens.readers.errors import StatelensError
    from statelens.readers.model import PartitionVersionStats, StateChange, StateRow


@runtime_checkable
class StateBackend(Protocol):
    """Rows, changes and statistics of the stores of one checkpoint.

    Attributes
    ----------
    name : str
        ``native`` or ``spark``: for the user (``describe``), not for routing.
    reads_files : bool
        True when the backend decodes the checkpoint's files itself, so the raw bytes of keys and
        values and the state files behind each version are available (the native backend); False
        when another engine answers with decoded rows (Spark).
    """

    name: str
    reads_files: bool

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

    def write_parquet(
        self,
        operator_id: int,
        store_name: str | None,
        url: str,
        *,
        version: int | None = None,
        changes: bool = False,
        partition_id: int | None = None,
        on_error: Callable[[StatelensError], None] | None = None,
    ) -> int:
        """Write one store's rows at ``version`` (or its change feed) as Parquet, in ``rows --format
        parquet``'s columns, without collecting the rows to this process; returns the rows written. The
        native backend writes one file; Spark writes a folder of part files where it runs."""
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

    def dataframe(
        self,
        operator_id: int,
        store_name: str | None,
        *,
        changes: bool = False,
        version: int | None = None,
        start_version: int | None = None,
        end_version: int | None = None,
        partitions: list[int] | None = None,
    ) -> Any:
        """Spark's own DataFrame of one store's rows (or change feed), lazy, where Spark runs; raises
        ``BackendUnavailableError`` on a backend that is not Spark."""
        ...

    def cancel(self) -> None:
        """Stop the reads in flight (from another thread); later reads still work."""
        ...

    def close(self) -> None:
        """Release what the backend holds (a Spark session it started)."""
        ...

"""Qt-free session state of the desktop app: the shared selection, the loaded checkpoint and the jobs.

Everything here runs without Qt so it can be tested headless and reused by other front ends:

* :class:`SelectionState` is the one observable selection (batch, operator, store, partition, version,
  key) that every view watches; views never call each other.
* :class:`LoadedCheckpoint` holds an opened checkpoint with where it came from.
* ``iter_*`` generators are the long jobs the GUI runs through ``app/gui/workers.py``: they yield
  :class:`~readers.model.Progress` records and return their result (the state browser's are in
  :mod:`app.state_table`; what stores hold is :mod:`app.store_roles`, display columns :mod:`app.columns`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from statelens.app.columns import display_time_columns as display_time_columns
from statelens.app.state_table import StateTable as StateTable
from statelens.app.store_roles import StoreRole as StoreRole
from statelens.app.store_roles import describe_state as describe_state
from statelens.app.store_roles import store_roles
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import Checkpoint, iter_open_checkpoint
from statelens.readers.errors import UsageError
from statelens.readers.model import OperatorInfo, OperatorKind, Progress, StoreInfo

#: Callback of a :class:`SelectionState` observer: receives ``{field: new_value}`` of what changed.
SelectionCallback = Callable[[dict[str, Any]], None]


class SelectionState:
    """The shared, observable selection every view follows.

    Attributes
    ----------
    batch_id, operator_id, partition_id, version : int or None
        ``partition_id`` None means every partition.
    store_name : str or None
    key : JsonObject or None
        The selected key, in the JSON form of ``statelens rows`` (``readers.values.JsonObject``).
    key_partition_id : int or None
        The partition holding ``key`` (a key is picked in "all partitions" tables too).
    """

    FIELDS = ("batch_id", "operator_id", "store_name", "partition_id", "version", "key", "key_partition_id")

    def __init__(self) -> None:
        self.batch_id: int | None = None
        self.operator_id: int | None = None
        self.store_name: str | None = None
        self.partition_id: int | None = None
        self.version: int | None = None
        self.key: Any = None
        self.key_partition_id: int | None = None
        self._callbacks: list[SelectionCallback] = []

    def connect(self, callback: SelectionCallback) -> None:
        """Call ``callback(changes)`` after every change.

        Parameters
        ----------
        callback : callable
            Receives a dict of the fields that changed and their new values.
        """
        if callback not in self._callbacks:
            self._callbacks.append(callback)

    def disconnect(self, callback: SelectionCallback) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored.

        Parameters
        ----------
        callback : callable
            A callback given to :meth:`connect`.
        """
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def disconnect_all(self) -> None:
        """Forget every observer (the window does this when it closes)."""
        self._callbacks.clear()

    def update(self, **changes: Any) -> dict[str, Any]:
        """Set some fields and notify observers of those that really changed.

        Parameters
        ----------
        **changes
            Field names from :attr:`FIELDS` and their new values.

        Returns
        -------
        dict
            The fields that changed (empty when nothing did; observers are then not called).

        Raises
        ------
        UsageError
            For a name that is not a selection field.
        """
        unknown = set(changes) - set(self.FIELDS)
        if unknown:
            raise UsageError(
                f"not selection fields: {', '.join(sorted(unknown))}; fields: {', '.join(self.FIELDS)}"
            )
        changed = {k: v for k, v in changes.items() if getattr(self, k) != v}
        for k, v in changed.items():
            setattr(self, k, v)
        if changed:
            for callback in list(self._callbacks):
                callback(changed)
        return changed

    def select_batch(self, batch_id: int) -> dict[str, Any]:
        """Select a batch and the state version it wrote (``version = batch_id + 1``); the key stays.

        Parameters
        ----------
        batch_id : int

        Returns
        -------
        dict
            The fields that changed.
        """
        return self.update(batch_id=batch_id, version=batch_id + 1)

    def select_store(self, operator_id: int | None, store_name: str | None) -> dict[str, Any]:
        """Select an operator's store; the key is cleared.

        Parameters
        ----------
        operator_id : int or None
        store_name : str or None

        Returns
        -------
        dict
            The fields that changed.
        """
        return self.update(operator_id=operator_id, store_name=store_name, key=None, key_partition_id=None)

    def snapshot(self) -> dict[str, Any]:
        """The current values of every field."""
        return {k: getattr(self, k) for k in self.FIELDS}

    def reset(self) -> dict[str, Any]:
        """Clear every field (a new checkpoint was opened).

        Returns
        -------
        dict
            The fields that changed.
        """
        return self.update(**{k: None for k in self.FIELDS})


@dataclass
class LoadedCheckpoint:
    """An opened checkpoint and where it came from.

    Attributes
    ----------
    url : str
        What the user asked to open (path or fsspec URL).
    checkpoint : readers.checkpoint.Checkpoint
    is_sample : bool
        True for the sample bundled with statelens.
    """

    url: str
    checkpoint: Any
    is_sample: bool = False

    @property
    def location(self) -> str:
        """The checkpoint's location with credentials removed."""
        return str(self.checkpoint.location)

    def decodable_stores(self) -> list[tuple[OperatorInfo, StoreInfo]]:
        """Every ``(operator, store)`` with a schema whose files the native readers can open (HDFS and
        RocksDB stores; RocksDB column families, which only Spark reads, are left out)."""
        native = native_backend(self.checkpoint)
        return [
            (op, s)
            for op in self.checkpoint.operators
            for s in op.stores
            if s.schema is not None and native.can_read(op.operator_id, s.store_name)
        ]

    def store_roles(self) -> dict[tuple[int, str], StoreRole]:
        """What each store holds (:func:`store_roles`): transformWithState variables, join stores."""
        return store_roles(self.checkpoint)

    def store_sizes(self) -> dict[tuple[int, str], int]:
        """Bytes of every store's state files (deltas, snapshots, changelogs, zips), from the listing:
        how big each store is without reading any state (a column family: its store folder's)."""
        ckpt = self.checkpoint
        listed: dict[tuple[int, str], int] = {}
        for op_id, name, sf in ckpt.iter_state_files():
            listed[(op_id, name)] = listed.get((op_id, name), 0) + sf.size_bytes
        return {
            (op.operator_id, s.store_name): listed.get(
                (op.operator_id, ckpt.physical_store(op.operator_id, s.store_name)), 0
            )
            for op in ckpt.operators
            for s in op.stores
        }

    def rows_sides(self) -> frozenset[tuple[int, str]]:
        """The stores holding a stream-stream join's buffered rows (each side's ``keyWithIndexToValue``
        store; the side's ``keyToNumValues`` store only counts them), as ``(operator_id, store_name)``.

        Returns
        -------
        frozenset
            Empty when the checkpoint has no join.
        """
        return frozenset(
            (op.operator_id, s.store_name)
            for op in self.checkpoint.operators
            if op.kind == OperatorKind.JOIN
            for s in op.stores
            if s.store_name.endswith("keyWithIndexToValue")
        )

    def default_store(self) -> tuple[int, str] | None:
        """The store the browser opens on, as ``(operator_id, store_name)``: the biggest decodable one
        (most bytes of state files, a stand-in for rows that reads no state); of a join, the
        ``keyWithIndexToValue`` side, which holds the buffered rows (the other stores index them,
        :meth:`rows_sides`)."""
        stores = self.decodable_stores()
        if not stores:
            return None
        sizes = self.store_sizes()
        rows_sides = self.rows_sides()

        def weight(item: tuple[OperatorInfo, StoreInfo]) -> tuple[bool, int]:
            key = (item[0].operator_id, item[1].store_name)
            return key in rows_sides, sizes.get(key, 0)

        op, s = max(stores, key=weight)  # the first of equals: the walk order
        return op.operator_id, s.store_name


# -- jobs: opening ---------------------------------------------------------------------------------------
def iter_load_checkpoint(
    url: str,
    is_sample: bool = False,
    cancelled: Callable[[], bool] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Generator[Progress, None, LoadedCheckpoint]:
    """Open a checkpoint, yielding progress, and return it.

    Parameters
    ----------
    url : str
        Local path or fsspec URL.
    is_sample : bool
        Whether this is the bundled sample.
    cancelled : callable, optional
        Polled by the storage layer; the job runner passes its worker's quit flag.
    storage_options : dict, optional
        fsspec storage options (``--storage-option``), e.g. an S3 endpoint.

    Yields
    ------
    Progress

    Returns
    -------
    LoadedCheckpoint

    Raises
    ------
    NotACheckpointError, StorageError
        As :func:`readers.checkpoint.iter_open_checkpoint`.
    """

    yield Progress(0, 0, f"listing {url}")
    # ``cancelled`` reaches the storage layer, so a stalled listing or read (S3) stops within a second.
    gen = cast(
        "Generator[Progress | Checkpoint, None, None]",
        iter_open_checkpoint(url, storage_options, cancelled=cancelled),
    )
    try:
        for item in gen:
            if isinstance(item, Checkpoint):
                return LoadedCheckpoint(url, item, is_sample)
            yield item
    finally:
        gen.close()
    raise AssertionError("iter_open_checkpoint ended without a checkpoint")  # pragma: no cover


# -- growth --------------------------------------------------------------------------------------------
#: Growth metrics the GUI plots, from :class:`app.analysis.growth.StoreGrowth` attribute names.
GROWTH_METRICS = ("rows", "state_bytes", "file_bytes")


def growth_arrays(store: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Matrices of one store's growth for plotting.

    Parameters
    ----------
    store : app.analysis.growth.StoreGrowth

    Returns
    -------
    partition_ids : numpy.ndarray
        int64, one per row of the matrices.
    versions : numpy.ndarray
        int64, one per column.
    metrics : dict of str to numpy.ndarray
        ``rows``, ``state_bytes`` (key + value bytes held) and ``file_bytes`` (delta + snapshot files
        written for the version): float64 partitions × versions, NaN where the partition cannot be
        rebuilt at that version.
    """

    pids = sorted(store.rows) or list(store.partitions)
    versions = list(store.versions)
    col = {v: j for j, v in enumerate(versions)}
    metrics: dict[str, Any] = {}
    for name in GROWTH_METRICS:
        table = getattr(store, name)
        matrix = np.full((len(pids), len(versions)), np.nan)
        for i, pid in enumerate(pids):
            for v, value in table.get(pid, {}).items():
                j = col.get(v)
                if j is not None:
                    matrix[i, j] = value
        metrics[name] = matrix
    return np.array(pids, dtype=np.int64), np.array(versions, dtype=np.int64), metrics

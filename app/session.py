"""Qt-free session state of the desktop app: the shared selection, the loaded checkpoint and the jobs.

Everything here runs without Qt so it can be tested headless and reused by other front ends:

* :class:`SelectionState` is the one observable selection (batch, operator, store, partition, version,
  key) that every view watches; views never call each other.
* :class:`LoadedCheckpoint` holds an opened checkpoint with where it came from.
* ``iter_*`` generators are the long jobs the GUI runs through ``app/gui/workers.py``: they yield
  :class:`~readers.model.Progress` records and return their result.
* :func:`format_value` turns a decoded Spark value into display text (plain text, never markup).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from statelens.app.analysis._common import row_converter
from statelens.app.state_query import DiffRow, QueryStateTable, diff_rows
from statelens.readers.arrow_values import ArrowStateRows, numbers
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import Checkpoint, iter_open_checkpoint
from statelens.readers.errors import SchemaMismatchError, StatelensError, UsageError
from statelens.readers.model import OperatorInfo, OperatorKind, Progress, StoreInfo, TimeColumn
from statelens.readers.parallel import in_order
from statelens.readers.textfmt import ranges as _ranges
from statelens.readers.values import rows_to_arrow

#: Callback of a :class:`SelectionState` observer: receives ``{field: new_value}`` of what changed.
SelectionCallback = Callable[[dict[str, Any]], None]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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

    def hdfs_stores(self) -> list[tuple[OperatorInfo, StoreInfo]]:
        """Every ``(operator, store)`` of the HDFS-backed provider."""
        return [(op, s) for op in self.checkpoint.operators for s in op.stores if s.provider == "hdfs"]

    def decodable_stores(self) -> list[tuple[OperatorInfo, StoreInfo]]:
        """Every ``(operator, store)`` with a schema whose files the native readers can open (HDFS and
        RocksDB stores; RocksDB column families, which only Spark reads, are left out)."""
        out = []
        native = native_backend(self.checkpoint)
        for op in self.checkpoint.operators:
            for s in op.stores:
                if s.schema is None:
                    continue
                try:
                    native.store(op.operator_id, s.store_name)
                except StatelensError:
                    continue
                out.append((op, s))
        return out

    def store_roles(self) -> dict[tuple[int, str], StoreRole]:
        """What each store holds (:func:`store_roles`): transformWithState variables, join stores."""
        return store_roles(self.checkpoint)

    def store_sizes(self) -> dict[tuple[int, str], int]:
        """Bytes of every store's state files (deltas, snapshots, changelogs, zips), from the listing:
        how big each store is without reading any state. 0 for stores the native readers cannot list."""
        out: dict[tuple[int, str], int] = {}
        native = native_backend(self.checkpoint)
        for op in self.checkpoint.operators:
            for s in op.stores:
                size = 0
                try:
                    reader = native.store(op.operator_id, s.store_name)
                    for pid in reader.partition_ids():
                        pf = reader.partitions[pid]
                        size += sum(f.size_bytes for f in (*pf.deltas.values(), *pf.snapshots.values()))
                except StatelensError:
                    size = 0
                out[(op.operator_id, s.store_name)] = size
        return out

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


# -- what each store holds -------------------------------------------------------------------------------
#: Group of transformWithState stores the user declared (``getValueState``...), listed first.
GROUP_VARIABLES = "state variables"
#: Group of Spark's own column families of a transformWithState operator (``$ttl_*``, timers...).
GROUP_INTERNAL = "Spark's internal column families"

_TWS_TYPES = {
    "ValueState": "one value per grouping key",
    "ListState": "a list per grouping key, one row per element",
    "MapState": "a map per grouping key, one row per user key",
}
#: Prefix of an internal family -> (short text, description); ``{}`` is the variable it serves.
_TWS_INTERNAL = {
    "$ttl_": (
        "TTL index of {}",
        "(expiration ms, key) of every entry of {} with a TTL; Spark scans it to remove expired entries",
    ),
    "$min_": ("earliest TTL expiry of {}", "the earliest expiration (ms) among each key's elements of {}"),
    "$count_": ("TTL element count of {}", "the number of elements of {} per key, kept for its TTL"),
    "$rowCounter_": ("list size of {}", "the number of elements of the list {} per key"),
}
_TIMER_FAMILIES = {
    "$procTimers_keyToTimestamp": ("processing-time timers by key", "registered timers: (key, expiry ms)"),
    "$procTimers_timestampToKey": (
        "processing-time timers by time",
        "registered timers: (expiry ms, key), the order Spark fires them in",
    ),
    "$eventTimers_keyToTimestamp": ("event-time timers by key", "registered timers: (key, expiry ms)"),
    "$eventTimers_timestampToKey": (
        "event-time timers by time",
        "registered timers: (expiry ms, key), the order Spark fires them in",
    ),
}
#: Join store suffix -> (short text, description) for ``left-``/``right-`` stores (every state format).
_JOIN_STORES = {
    "keyToNumValues": ("rows per key", "how many rows of this side each join key holds"),
    "keyWithIndexToValue": ("buffered rows by key and index", "the buffered input rows of this side"),
    "keyWithTsToValues": (
        "buffered rows by key and event time",
        "the buffered input rows of this side, keyed by join key and event time (µs)",
    ),
    "tsWithKey": ("keys by event time", "join keys ordered by event time (µs): the index Spark evicts with"),
}


@dataclass(frozen=True)
class StoreRole:
    """What one store holds, for labels and tooltips (transformWithState variables, join stores).

    Attributes
    ----------
    text : str
        Short: ``ValueState``, ``MapState · TTL``, ``internal: TTL index of ttlv``, ``left: rows per key``.
    description : str
        One sentence for tooltips.
    group : str or None
        :data:`GROUP_VARIABLES` or :data:`GROUP_INTERNAL` for transformWithState stores, else None.
    internal : bool
        One of Spark's own column families (``$...``), not declared by the user.
    column_family_of : str or None
        The RocksDB store this is a virtual column family of (None: a store of its own).
    """

    text: str
    description: str
    group: str | None = None
    internal: bool = False
    column_family_of: str | None = None


def store_role(op: OperatorInfo, store: StoreInfo, physical: str | None = None) -> StoreRole | None:
    """What a store of ``op`` holds, when there is more to say than its name (None otherwise).

    Parameters
    ----------
    op : readers.model.OperatorInfo
    store : readers.model.StoreInfo
    physical : str, optional
        The store folder it lives in (``Checkpoint.physical_store``): another name means a column family.

    Returns
    -------
    StoreRole or None
    """

    cf = physical if physical is not None and physical != store.store_name else None
    name = store.store_name
    if op.kind == OperatorKind.TRANSFORM_WITH_STATE:
        declared = {
            str(v.get("stateName")): v
            for v in op.properties.get("stateVariables") or []
            if isinstance(v, dict)
        }
        meta = declared.get(name, {})
        vtype = str(meta.get("stateVariableType") or "")
        if name in _TIMER_FAMILIES:
            short, long = _TIMER_FAMILIES[name]
            return StoreRole(f"internal: {short}", f"Spark's {short}: {long}", GROUP_INTERNAL, True, cf)
        if name.startswith("$"):
            for prefix, (short, long) in _TWS_INTERNAL.items():
                if name.startswith(prefix):
                    var = name[len(prefix) :]
                    return StoreRole(
                        f"internal: {short.format(var)}",
                        f"Spark's {long.format(var)}",
                        GROUP_INTERNAL,
                        True,
                        cf,
                    )
            return StoreRole("internal", "one of Spark's internal column families", GROUP_INTERNAL, True, cf)
        if vtype in _TWS_TYPES:
            ttl = bool(meta.get("ttlEnabled", False))
            text = vtype + (" · TTL" if ttl else "")
            description = f"{vtype} {name!r}: {_TWS_TYPES[vtype]}" + (
                "; entries expire after their TTL (ttlExpirationMs)" if ttl else ""
            )
            return StoreRole(text, description, GROUP_VARIABLES, False, cf)
        return StoreRole(
            "column family",
            f"column family {name!r} (not a declared state variable)",
            GROUP_INTERNAL,
            True,
            cf,
        )
    if op.kind == OperatorKind.JOIN:
        side, _, kind = name.partition("-")
        if side in ("left", "right") and kind in _JOIN_STORES:
            short, long = _JOIN_STORES[kind]
            return StoreRole(f"{side}: {short}", f"{side} side: {long}", None, False, cf)
    return None


def store_roles(ckpt: Any) -> dict[tuple[int, str], StoreRole]:
    """:func:`store_role` of every store of a checkpoint that has one.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    dict
        ``(operator_id, store_name) -> StoreRole``.
    """
    out: dict[tuple[int, str], StoreRole] = {}
    for op in ckpt.operators:
        for s in op.stores:
            role = store_role(op, s, ckpt.physical_store(op.operator_id, s.store_name))
            if role is not None:
                out[(op.operator_id, s.store_name)] = role
    return out


def describe_operator(op: OperatorInfo, conf: dict[str, str] | None = None) -> str:
    """One line on what a stateful operator is and what its stores hold (the Overview's State line).

    Parameters
    ----------
    op : readers.model.OperatorInfo
    conf : dict, optional
        The session conf (the join state format comes from it).

    Returns
    -------
    str
        e.g. ``operator 0: transformWithState (transformWithStateInPandasExec, timeMode ProcessingTime):
        4 state variables (cnt, ttll, ttlm, ttlv) and 8 internal column families``.
    """

    details = [op.operator_name] if op.operator_name and op.operator_name != op.kind.value else []
    stores = [s.store_name for s in op.stores]
    if op.kind == OperatorKind.TRANSFORM_WITH_STATE:
        mode = op.properties.get("timeMode")
        if mode:
            details.append(f"timeMode {mode}")
        user = [n for n in stores if not n.startswith("$")]
        internal = len(stores) - len(user)
        what = f"{len(user)} state variable{'s' if len(user) != 1 else ''} ({', '.join(user)})"
        if internal:
            what += f" and {internal} internal column famil{'ies' if internal != 1 else 'y'}"
    else:
        if op.kind == OperatorKind.JOIN and conf and conf.get("spark.sql.streaming.join.stateFormatVersion"):
            details.append(f"state format {conf['spark.sql.streaming.join.stateFormatVersion']}")
        what = f"{len(stores)} store{'s' if len(stores) != 1 else ''} ({', '.join(stores)})"
    head = f"operator {op.operator_id}: {op.kind.value}" + (f" ({', '.join(details)})" if details else "")
    return f"{head}: {what}"


def describe_state(ckpt: Any) -> list[str]:
    """Lines on the checkpoint's state for the Overview: each operator, then how rows are stored.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    list of str
        :func:`describe_operator` of each operator, then notes on row checksums and Avro encoding.
    """
    conf = dict(getattr(ckpt, "conf", {}) or {})
    lines = [describe_operator(op, conf) for op in ckpt.operators]
    if not ckpt.operators:
        return lines
    if conf.get("spark.sql.streaming.stateStore.rowChecksum.enabled", "").lower() == "true":
        lines.append(
            "row checksums on (stateStore.rowChecksum.enabled): every row's CRC-32C is checked while decoding"
        )
    if conf.get("spark.sql.streaming.stateStore.encodingFormat", "unsaferow") != "unsaferow":
        lines.append(
            f"state encoded as {conf['spark.sql.streaming.stateStore.encodingFormat']} "
            "(stateStore.encodingFormat)"
        )
    return lines


#: Integer fields Spark keeps times in, by operator kind: field name -> unit (top-level fields only).
_TIME_FIELDS = {
    "transformWithState": {"ttlExpirationMs": "ms", "expirationMs": "ms", "expiryTimestampMs": "ms"},
    "join": {"__event_time": "us"},
}


def display_time_columns(op: OperatorInfo) -> tuple[Any, ...]:
    """The operator's time columns plus integer fields that hold times, to show them as UTC times.

    transformWithState keeps TTL expirations and timers as epoch milliseconds
    (``ttlExpirationMs``, ``expirationMs``, ``expiryTimestampMs``), joins in state format 4 the event time
    of a key in microseconds (``__event_time``). The raw number stays the sort key.

    Parameters
    ----------
    op : readers.model.OperatorInfo

    Returns
    -------
    tuple of readers.model.TimeColumn
        ``op.time_columns`` first; the added ones have role ``display``.
    """

    names = _TIME_FIELDS.get(op.kind.value, {})
    out = list(op.time_columns)
    have = {(t.store_name, t.side, tuple(t.path)) for t in out}
    for s in op.stores:
        if s.schema is None:
            continue
        for side, struct in (("key", s.schema.key_schema), ("value", s.schema.value_schema)):
            for i, f in enumerate(list(getattr(struct, "fields", None) or [])):
                unit = names.get(f.name)
                if unit is None or _type_name(f.dataType) != "long" or (s.store_name, side, (i,)) in have:
                    continue
                out.append(TimeColumn(s.store_name, side, (i,), f.name, unit, "display"))
    return tuple(out)


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


# -- jobs: state browser ---------------------------------------------------------------------------------
class DisplayColumn(Sequence[str]):
    """One display column over decoded records, formatted on demand (plain text).

    A million-row store is never turned into text as a whole: the table model asks for the cells it
    shows; sorting and filtering (in a worker) format the rest when they need it.

    Parameters
    ----------
    records : sequence
        The rows of the table (e.g. :class:`~readers.model.StateRow`).
    getter : callable
        Record to cell value.
    formatter : callable
        Cell value to display text.
    """

    def __init__(self, records: Sequence[Any], getter: Callable[[Any], Any], formatter: Callable[[Any], str]):
        self._records = records
        self._get = getter
        self._fmt = formatter

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._fmt(self._get(r)) for r in self._records[i]]
        return self._fmt(self._get(self._records[i]))

    def __iter__(self) -> Any:
        get, fmt = self._get, self._fmt
        return (fmt(get(r)) for r in self._records)


class ValueColumn(Sequence[Any]):
    """Sort keys of a numeric column over decoded records: numbers, None for null (computed on demand)."""

    def __init__(self, records: Sequence[Any], getter: Callable[[Any], Any]):
        self._records = records
        self._get = getter

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(r) for r in self._records[i]]
        return self._get(self._records[i])

    def __iter__(self) -> Any:
        get = self._get
        return (get(r) for r in self._records)


@dataclass
class StateTable:
    """Decoded rows of one store at one version (or a diff of two versions), as lazy display columns.

    Attributes
    ----------
    headers : list of str
        ``partition``, then ``key.<field>``..., then ``value.<field>``... (a diff starts with
        ``change`` and ends with ``value before``).
    columns : list of Sequence[str]
        Display text per column (plain text, formatted on demand).
    sort_keys : list of Sequence
        Per column: ints/floats (None for null) when the column is numeric, else the display text.
    keys : Sequence
        The key of each row in the JSON form of ``statelens rows`` (a ``JsonObject``), converted on
        demand; it is what :class:`SelectionState` holds as ``key``.
    records : list
        The decoded rows (``StateRow``, or ``DiffRow`` for a diff), for typed export.
    total_rows : int
        Rows in the state.
    notes : list of str
        Partitions skipped (version not readable there), for the status line.
    problems : list of StatelensError
        Partitions whose files could not be read.
    backend : str
        Which backend answered (``native decoder``, ``Spark 4.x on local[*]``).
    compare_version : int or None
        For a diff: the version compared against (``version`` is the newer one).
    query : app.state_query.QueryStateTable or None
        For a version too large to hold: its rows, queried a page at a time (``columns``,
        ``sort_keys``, ``keys`` and ``records`` are then empty).
    """

    operator_id: int
    store_name: str
    partition_id: int | None
    version: int
    headers: list[str]
    columns: list[Sequence[str]]
    sort_keys: list[Sequence[Any]]
    keys: Sequence[Any]
    records: Sequence[Any] = ()
    total_rows: int = 0
    notes: list[str] = field(default_factory=list)
    problems: list[StatelensError] = field(default_factory=list)
    backend: str = "native decoder"
    compare_version: int | None = None
    key_schema: Any = None
    value_schema: Any = None
    query: Any = None  # app.state_query.QueryStateTable: rows left on disk, paged by DuckDB

    @property
    def is_diff(self) -> bool:
        return self.compare_version is not None


def _type_name(dtype: Any) -> str:
    try:
        return str(dtype.typeName())
    except (AttributeError, TypeError):
        return ""


_NUMERIC = {
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "decimal",
    "date",
    "timestamp",
    "timestamp_ntz",
}


def format_value(value: Any, dtype: Any = None) -> str:
    """Display text of one decoded Spark value (see ``readers.model.VALUE_REPRESENTATION``).

    Timestamps show as ISO-8601 UTC, dates as ISO dates, binary as hex, structs as ``{name: value}``.
    The result is plain text: callers must never render it as markup (keys are untrusted).

    Parameters
    ----------
    value : Any
        The decoded value.
    dtype : pyspark.sql.types.DataType, optional
        Its Spark type; without it the Python type decides.

    Returns
    -------
    str
    """
    if value is None:
        return "null"
    name = _type_name(dtype)
    if name in ("timestamp", "timestamp_ntz") and isinstance(value, int):
        text = _format_micros(value)
        if text is None:
            return f"{value} µs"
        return text + ("Z" if name == "timestamp" else "")
    if name == "date" and isinstance(value, int):
        try:
            return (_EPOCH + dt.timedelta(days=value)).date().isoformat()
        except OverflowError:
            return f"{value} days"
    if name == "struct" or (dtype is None and isinstance(value, tuple) and not hasattr(value, "_fields")):
        fields = list(getattr(dtype, "fields", None) or [])
        parts = []
        for i, v in enumerate(value):
            f = fields[i] if i < len(fields) else None
            label = f.name if f is not None else str(i)
            parts.append(f"{label}: {format_value(v, f.dataType if f is not None else None)}")
        return "{" + ", ".join(parts) + "}"
    if name == "array" or (dtype is None and isinstance(value, list) and not _is_pairs(value)):
        et = getattr(dtype, "elementType", None)
        return "[" + ", ".join(format_value(v, et) for v in value) + "]"
    if name == "map" or (dtype is None and _is_pairs(value)):
        kt, vt = getattr(dtype, "keyType", None), getattr(dtype, "valueType", None)
        return "{" + ", ".join(f"{format_value(k, kt)}: {format_value(v, vt)}" for k, v in value) + "}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return "0x" + raw[:64].hex() + ("…" if len(raw) > 64 else "")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        # Control characters would break the one-line cell; show them escaped.
        return value if value.isprintable() else value.encode("unicode_escape").decode("ascii")
    return str(value)


def _is_pairs(value: Any) -> bool:
    return (
        isinstance(value, list) and all(isinstance(x, tuple) and len(x) == 2 for x in value) and bool(value)
    )


def _sort_key(value: Any, dtype: Any) -> Any:
    name = _type_name(dtype)
    if name in _NUMERIC and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if name == "decimal" and value is not None:
        return float(value)
    return None


#: Nested structs are flattened into one column per leaf field down to this depth.
MAX_FLATTEN_DEPTH = 3


def _field_columns(
    prefix: str, schema: Any, path: tuple[int, ...] = (), depth: int = 0
) -> list[tuple[str, Any, tuple[int, ...]]]:
    """``(name, dtype, path)`` per display column; struct fields become ``prefix.struct.field`` columns."""
    out: list[tuple[str, Any, tuple[int, ...]]] = []
    for i, f in enumerate(list(getattr(schema, "fields", None) or [])):
        name = f"{prefix}.{f.name}"
        if (
            _type_name(f.dataType) == "struct"
            and depth < MAX_FLATTEN_DEPTH
            and getattr(f.dataType, "fields", None)
        ):
            out.extend(_field_columns(name, f.dataType, (*path, i), depth + 1))
        else:
            out.append((name, f.dataType, (*path, i)))
    return out


def _at(row: tuple[Any, ...] | None, path: tuple[int, ...]) -> Any:
    value: Any = row
    for i in path:
        if value is None:
            return None
        value = value[i]
    return value


@dataclass(frozen=True)
class ColumnSpec:
    """How one display column is read from a record and shown."""

    header: str
    getter: Callable[[Any], Any]
    formatter: Callable[[Any], str]
    numeric: bool
    dtype: Any = None
    unit: str | None = None  # "ms"/"us" for integer time columns (event times, timeouts)
    side: str = ""  # "partition", "key" or "value": where the column is in an Arrow state table
    path: tuple[int, ...] = ()  # field positions inside the key or value struct


def sort_getter(spec: ColumnSpec) -> Callable[[Any], Any]:
    """Record to sort key of a numeric column: the number (decimals as floats), None for null.

    Parameters
    ----------
    spec : ColumnSpec

    Returns
    -------
    callable
    """
    get, dtype = spec.getter, spec.dtype
    if dtype is None:
        return get

    def key(record: Any) -> Any:
        return _sort_key(get(record), dtype)

    return key


def _cell_formatter(dtype: Any, unit: str | None) -> Callable[[Any], str]:
    if unit is None:
        return lambda cell: format_value(cell, dtype)

    def fmt(cell: Any) -> str:
        if isinstance(cell, int) and not isinstance(cell, bool):
            return _format_time_number(cell, unit)
        return format_value(cell, dtype)

    return fmt


def _getter(side: str, path: tuple[int, ...]) -> Callable[[Any], Any]:
    if side == "key":
        if len(path) == 1:
            i = path[0]
            return lambda r: r.key[i] if r.key is not None else None
        return lambda r: _at(r.key, path)
    if side == "before":
        return lambda r: _at(r.before, path)
    if len(path) == 1:
        i = path[0]
        return lambda r: r.value[i] if r.value is not None else None
    return lambda r: _at(r.value, path)


def state_columns(schema: Any, store_name: str, time_columns: Sequence[Any] = ()) -> list[ColumnSpec]:
    """Display columns of a store's rows: ``partition``, the flattened key, then the flattened value.

    Integer columns named by ``time_columns`` (event times, timeout timestamps) show as UTC times with
    the raw number kept for sorting; ``-1`` timeouts show as ``-1 (no timeout)``. A transformWithState
    map state's composite key shows as ``key.<field>`` and ``user_key.<field>`` columns, as
    ``statelens rows --state-var`` names them.

    Parameters
    ----------
    schema : readers.model.StoreSchema
    store_name : str
        Time columns of other stores are ignored.
    time_columns : sequence of readers.model.TimeColumn

    Returns
    -------
    list of ColumnSpec
        Over records with ``partition_id``, ``key`` and ``value`` attributes.
    """
    units = {(t.side, tuple(t.path)): t.unit for t in time_columns if t.store_name == store_name}
    map_state = _is_map_state_key(schema)
    specs = [ColumnSpec("partition", lambda r: r.partition_id, str, True, side="partition")]
    for side, sch in (("key", schema.key_schema), ("value", schema.value_schema)):
        for name, dtype, path in _field_columns(side, sch):
            numeric = _type_name(dtype) in _NUMERIC
            get = _getter(side, path)
            unit = units.get((side, path))
            header = _map_key_header(name) if side == "key" and map_state else name
            specs.append(
                ColumnSpec(header, get, _cell_formatter(dtype, unit), numeric, dtype, unit, side, path)
            )
    return specs


def _is_map_state_key(schema: Any) -> bool:
    """A transformWithState map state's composite key: ``key struct<grouping key>, userKey struct<...>``."""
    if getattr(schema, "user_key_schema", None) is None:
        return False
    names = [f.name for f in list(getattr(schema.key_schema, "fields", None) or [])]
    return names == ["key", "userKey"]


def _map_key_header(name: str) -> str:
    """``key.key.user`` -> ``key.user`` and ``key.userKey.mk`` -> ``user_key.mk`` (as ``rows --state-var``)."""
    for prefix, shown in (("key.key", "key"), ("key.userKey", "user_key")):
        if name == prefix:
            return shown
        if name.startswith(prefix + "."):
            return shown + name[len(prefix) :]
    return name


def _build_table(
    records: Sequence[Any], specs: Sequence[ColumnSpec], key_schema: Any
) -> tuple[list[str], list[Sequence[str]], list[Sequence[Any]], Sequence[Any]]:
    columns: list[Sequence[str]] = []
    sort_keys: list[Sequence[Any]] = []
    for spec in specs:
        col = DisplayColumn(records, spec.getter, spec.formatter)
        columns.append(col)
        if spec.numeric:
            sort_keys.append(ValueColumn(records, sort_getter(spec)))
        else:
            sort_keys.append(col)

    convert = row_converter(key_schema)
    keys = ValueColumn(records, lambda r: convert(r.key))
    return [s.header for s in specs], columns, sort_keys, keys


class _PresortedKeys(Sequence[Any]):
    """Sort keys read one by one from ``base``, ordered at once by ``order`` (Arrow, in a worker)."""

    def __init__(self, base: Sequence[Any], order: Callable[[], Any]):
        self._base = base
        self._order = order

    def __len__(self) -> int:
        return len(self._base)

    def __getitem__(self, i: Any) -> Any:
        return self._base[i]

    def __iter__(self) -> Any:
        return iter(self._base)

    def ascending_order(self) -> Any:
        """Row positions in ascending order, as ``viewers.tables.row_order`` sorts these keys."""
        return self._order()


class _ArrowTextColumn(Sequence[str]):
    """Display text of a plain column (text shown as is, integers) cut from its Arrow array by runs;
    single cells come from ``base`` (the records)."""

    def __init__(self, leaf: Any, base: Sequence[str], kind: str):
        self._leaf = leaf
        self._base = base
        self._kind = kind

    def __len__(self) -> int:
        return len(self._base)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self._base))
            if step != 1:
                return self._base[i]
            return _arrow_text(self._leaf.slice(start, max(stop - start, 0)), self._kind)
        return self._base[i]

    def __iter__(self) -> Any:
        step = 65_536
        for start in range(0, len(self), step):
            yield from self[start : start + step]

    def contains(self, needle: str) -> Any:
        """Rows whose display text contains ``needle`` (ASCII, case-insensitive, as the filter folds
        case), in one vectorised pass over the Arrow array."""
        import pyarrow as pa  # deferred: pyarrow (heavy)
        import pyarrow.compute as pc  # deferred: pyarrow (heavy)

        arr = self._leaf
        if self._kind == "int":
            arr = pc.cast(arr, pa.string())
        texts = pc.fill_null(arr, "null")
        return pc.match_substring(texts, needle, ignore_case=True).to_numpy(zero_copy_only=False)


def _arrow_text(arr: Any, kind: str) -> list[str]:
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    if kind == "int":
        arr = pc.cast(arr, pa.string())
    return list(pc.fill_null(arr, "null").to_pylist())


def _arrow_columns(
    records: Any, specs: Sequence[ColumnSpec], columns: list[Sequence[str]], sort_keys: list[Sequence[Any]]
) -> tuple[list[Sequence[str]], list[Sequence[Any]]]:
    """Columns of an Arrow-backed table that sort (and format, by runs) from their Arrow arrays: numbers,
    times, dates and printable text. Others keep the per-row path; the results are the same."""
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    tables = getattr(records, "tables", None)
    if tables is None:
        return columns, sort_keys
    columns, sort_keys = list(columns), list(sort_keys)
    for c, spec in enumerate(specs):
        if spec.side not in ("partition", "key", "value"):
            continue
        index = {"partition": 0, "key": 1, "value": 2}[spec.side]
        chunks = [t.column(index) for t in tables]
        if not chunks:
            continue
        leaf = pa.chunked_array([ch for col in chunks for ch in col.chunks], type=chunks[0].type)
        for i in spec.path:
            leaf = pc.struct_field(leaf, [i])
        t = leaf.type
        is_int = pa.types.is_integer(t)
        if spec.numeric and (
            is_int or pa.types.is_floating(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t)
        ):
            sort_keys[c] = _PresortedKeys(sort_keys[c], functools.partial(_numeric_order, leaf))
            if (
                is_int
                and spec.unit is None
                and _type_name(spec.dtype) not in ("date", "timestamp", "timestamp_ntz")
            ):
                columns[c] = _ArrowTextColumn(leaf, columns[c], "int")
        elif pa.types.is_string(t) and pc.all(pc.utf8_is_printable(leaf)).as_py() is not False:
            columns[c] = text = _ArrowTextColumn(leaf, columns[c], "text")
            sort_keys[c] = _PresortedKeys(text, functools.partial(_text_order, leaf))
    return columns, sort_keys


def _text_order(leaf: Any) -> Any:
    """Ascending positions of printable text (nulls show, and sort, as ``null``), ties in row order.

    Sorted by DuckDB (byte order of the UTF-8 text, as Arrow's ``sort_indices``, on every core: 0.35 s
    for 2M keys against Arrow's 1.1 s on one); Arrow answers if DuckDB cannot.
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    texts = pc.fill_null(leaf, "null")
    try:
        import duckdb  # deferred: duckdb (heavy)

        table = pa.table({"t": texts, "i": pa.array(np.arange(len(texts), dtype=np.int64))})
        con = duckdb.connect()
        try:
            con.register("texts", table)
            order = con.sql("SELECT i FROM texts ORDER BY t, i").to_arrow_table()
        finally:
            con.close()
        return numbers(order.column(0))
    except Exception:  # noqa: BLE001 - DuckDB missing or out of memory: Arrow sorts it
        return numbers(pc.sort_indices(texts))


def _numeric_order(leaf: Any) -> Any:
    """Ascending positions: numbers by value, nulls (and NaN) first, ties in row order."""
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    t = leaf.type
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        values = pc.cast(leaf, pa.float64()).to_numpy(zero_copy_only=False)
        isnull = np.isnan(values)
        values = np.where(isnull, 0.0, values)
    else:
        ints = pa.chunked_array(
            [
                ch.view(pa.int64())
                if ch.type.bit_width == 64
                else pc.cast(ch.view(pa.int32()) if pa.types.is_date32(ch.type) else ch, pa.int64())
                for ch in leaf.chunks
            ],
            pa.int64(),
        )
        isnull = ints.is_null().to_numpy(zero_copy_only=False)
        values = pc.fill_null(ints, 0).to_numpy(zero_copy_only=False)
    return np.lexsort((values, ~isnull))


def _require_schema(reader: Any) -> Any:
    schema = reader.schema
    if schema is None:
        raise SchemaMismatchError(
            "this store has no schema file, so its rows cannot be decoded",
            path=f"state/{reader.operator_id}",
            operator_id=reader.operator_id,
            store_name=reader.store_name,
        )
    return schema


def iter_state_table(
    reader: Any,
    version: int,
    partition_id: int | None = None,
    max_rows: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
    cache: Any = None,
    paged_over: int | None = None,
) -> Generator[Progress, None, StateTable]:
    """Decode one store at one version into lazy display columns.

    Parameters
    ----------
    reader : readers._format.hdfs_store.HDFSStoreReader or readers._format.rocksdb_store.RocksDBStoreReader
    version : int
        State version (written by batch ``version - 1``).
    partition_id : int, optional
        One partition; every partition when None (partitions where ``version`` cannot be rebuilt are
        listed in ``notes``; partitions whose files fail are listed in ``problems``).
    max_rows : int, optional
        Keep at most this many rows (all by default: the table pages through them).
    time_columns : sequence of readers.model.TimeColumn
        The operator's time columns (those of other stores are ignored).
    cancelled : callable, optional
        Returns True when the work should stop early.
    cache : readers.cache.StateCache, optional
        Where decoded versions are kept and found again.
    paged_over : int, optional
        With ``cache``: a version of more rows than this is not held in memory but left in the cache
        and served a page at a time by DuckDB (the table's ``query``, see :mod:`app.state_query`).

    Yields
    ------
    Progress
        One per partition.

    Returns
    -------
    StateTable

    Raises
    ------
    UsageError
        When the store has no such partition or the version is not readable in any partition.
    StatelensError
        When the one requested partition cannot be read (bad or missing file).
    """
    schema = _require_schema(reader)
    pids = _partitions(reader, partition_id)
    notes: list[str] = []
    problems: list[StatelensError] = []
    what = f"decoding operator {reader.operator_id} {reader.store_name} version {version}"
    readable, skipped = _readable(reader, pids, (version,))
    # Large versions stay in the cache (one Parquet file per partition) for DuckDB to page through.
    in_cache = paged_over is not None and cache is not None and max_rows is None

    def decode(pid: int) -> tuple[Any, Any]:
        if in_cache:
            return reader.arrow_entry(pid, version, cache)
        return None, reader.read_arrow(pid, version, cache=cache)  # columns; rows are made a page at a time

    files, parts, total = yield from _gather(
        decode,
        readable,
        len(pids),
        what,
        partition_id,
        problems,
        cancelled,
        paged_over if in_cache else None,
        lambda pid: reader.read_arrow(pid, version, cache=cache),
    )
    _check_skipped(reader, version, partition_id, pids, skipped, notes)
    specs = state_columns(schema, reader.store_name, time_columns)
    if files:
        yield Progress(len(pids), len(pids), what)
        return _paged_table(
            reader, partition_id, version, files, specs, schema, total, notes, problems, cache
        )
    tables: list[Any] = []
    kept = 0
    for part in parts:
        room = part.num_rows if max_rows is None else max(max_rows - kept, 0)
        if room:
            tables.append(part.slice(0, room))
            kept += min(room, part.num_rows)
    if total > kept:
        notes.append(f"showing the first {kept:,} of {total:,} rows")
    records = ArrowStateRows(tables, schema.key_schema, schema.value_schema)
    yield Progress(len(pids), len(pids), what)
    headers, columns, sort_keys, keys = _build_table(records, specs, schema.key_schema)
    columns, sort_keys = _arrow_columns(records, specs, columns, sort_keys)
    return StateTable(
        reader.operator_id,
        reader.store_name,
        partition_id,
        version,
        headers,
        columns,
        sort_keys,
        keys,
        records,
        total,
        notes,
        problems,
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
    )


def iter_backend_table(
    backend: Any,
    store: StoreInfo,
    version: int,
    partition_id: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, StateTable]:
    """Read one store at one version through a backend (``readers.backends``) into display columns.

    The Spark backend answers in one job (cancelled through its job group); the table is the same
    shape as :func:`iter_state_table`'s.

    Parameters
    ----------
    backend : readers.backends.native.NativeBackend or readers.backends.spark.SparkBackend
    store : readers.model.StoreInfo
    version : int
    partition_id : int, optional
    time_columns : sequence of readers.model.TimeColumn
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    StateTable

    Raises
    ------
    StatelensError
        As the backend's ``read_rows`` (``UsageError`` for versions Spark cannot read,
        ``BackendUnavailableError`` without PySpark or Java).
    """
    if store.schema is None:
        raise UsageError(
            f"store {store.store_name!r} of operator {store.operator_id} has no schema: rows cannot be decoded"
        )
    what = f"reading operator {store.operator_id} {store.store_name} version {version} through {backend.name}"
    yield Progress(0, 0, what)  # one job with no steps to count: a busy indicator
    rows = backend.read_rows(store.operator_id, store.store_name, version, partition_id)
    if cancelled is not None and cancelled():
        rows = []
    rows.sort(key=lambda r: r.partition_id)
    yield Progress(1, 1, what)
    specs = state_columns(store.schema, store.store_name, time_columns)
    headers, columns, sort_keys, keys = _build_table(rows, specs, store.schema.key_schema)
    return StateTable(
        store.operator_id,
        store.store_name,
        partition_id,
        version,
        headers,
        columns,
        sort_keys,
        keys,
        rows,
        len(rows),
        [],
        [],
        backend.describe(),
        key_schema=store.schema.key_schema,
        value_schema=store.schema.value_schema,
    )


def _readable(reader: Any, pids: Sequence[int], versions: Sequence[int]) -> tuple[list[int], list[int]]:
    """The partitions where every one of ``versions`` can be read (version 0, empty, always can), and the
    others."""
    readable: list[int] = []
    skipped: list[int] = []
    for pid in pids:
        have = reader.versions(pid)
        (skipped if any(v != 0 and v not in have for v in versions) else readable).append(pid)
    return readable, skipped


def _gather(
    work: Callable[[int], tuple[Any, Any]],
    readable: Sequence[int],
    count: int,
    what: str,
    partition_id: int | None,
    problems: list[StatelensError],
    cancelled: Callable[[], bool] | None,
    paged_over: int | None,
    reread: Callable[[int], Any],
    seen: Callable[[Any], None] | None = None,
) -> Generator[Progress, None, tuple[list[Any], list[Any], int]]:
    """Every readable partition's Arrow table, from ``work(pid) -> (cache file or None, table)`` run on
    threads (answered in order; each table also given to ``seen``). A partition whose files fail is a
    problem, raised when it is the only partition asked for.

    Returns ``(files, tables, rows)``: when every partition is in the cache and more than ``paged_over``
    rows came, the cache files (for DuckDB to page) and no table; else no file and the tables in
    partition order. Tables are held while the rows stay within ``paged_over`` (or the cache cannot
    take them); those let go are read again with ``reread(pid)`` if they are needed after all.
    """
    answered: list[int] = []
    files: list[Any] = []
    tables: dict[int, Any] = {}
    total = 0
    all_cached = True

    def paged() -> bool:
        return all_cached and paged_over is not None and total > paged_over

    yield Progress(0, count, what)
    for done, (pid, got, err) in enumerate(in_order(work, readable, cancelled=cancelled), 1):
        yield Progress(done, count, f"{what}, partition {pid}")
        if err is not None:
            if partition_id is not None:
                raise err
            problems.append(err)
            continue
        assert got is not None
        path, table = got
        total += table.num_rows
        if seen is not None:
            seen(table)
        answered.append(pid)
        if path is None:
            all_cached = False  # the cache cannot hold it: the version stays in memory
        else:
            files.append(path)
        tables[pid] = table
        if paged():
            tables.clear()  # the cache holds them
    if files and paged():
        return files, [], total
    return [], [tables[pid] if pid in tables else reread(pid) for pid in answered], total


def _paged_table(
    reader: Any,
    partition_id: int | None,
    version: int,
    files: list[Any],
    specs: list[ColumnSpec],
    schema: Any,
    total: int,
    notes: list[str],
    problems: list[StatelensError],
    cache: Any,
    compare_version: int | None = None,
) -> StateTable:
    """A :class:`StateTable` whose rows (or differences, with ``compare_version``) stay in the cache's
    ``files``, queried a page at a time by DuckDB."""
    query = QueryStateTable(
        files, specs, schema.key_schema, schema.value_schema, total, cache, diff=compare_version is not None
    )
    return StateTable(
        reader.operator_id,
        reader.store_name,
        partition_id,
        version,
        query.headers,
        [],
        [],
        [],
        (),
        total,
        notes,
        problems,
        compare_version=compare_version,
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
        query=query,
    )


def _partitions(reader: Any, partition_id: int | None) -> list[int]:
    if partition_id is not None and partition_id not in reader.partition_ids():
        raise UsageError(
            f"store {reader.store_name!r} of operator {reader.operator_id} has no partition {partition_id}",
            operator_id=reader.operator_id,
        )
    return list(reader.partition_ids()) if partition_id is None else [partition_id]


def _check_skipped(
    reader: Any,
    version: int,
    partition_id: int | None,
    pids: Sequence[int],
    skipped: Sequence[int],
    notes: list[str],
) -> None:
    if not skipped:
        return
    if len(skipped) == len(pids):
        have = reader.versions(partition_id)
        span = f"{have[0]}–{have[-1]}" if have else "none"
        raise UsageError(
            f"version {version} cannot be rebuilt in {'partition ' + str(partition_id) if partition_id is not None else 'any partition'} "
            f"of operator {reader.operator_id} store {reader.store_name!r}; readable versions: {span}",
            operator_id=reader.operator_id,
            store_name=reader.store_name,
            version=version,
        )
    notes.append(f"version {version} not readable in partitions {_ranges(skipped)}")


def iter_state_diff(
    reader: Any,
    old_version: int,
    new_version: int,
    partition_id: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
    cache: Any = None,
    paged_over: int | None = None,
) -> Generator[Progress, None, StateTable]:
    """The rows added, changed and removed between two versions of one store.

    Compares the raw key and value bytes of both versions per partition (UnsafeRow bytes of equal
    values are equal), then decodes only the rows that differ.

    Parameters
    ----------
    reader : store reader
    old_version, new_version : int
        The versions to compare (``new_version`` is shown as the table's version).
    partition_id : int, optional
        One partition, or every partition readable at both versions.
    time_columns : sequence of readers.model.TimeColumn
    cancelled : callable, optional
    cache : readers.cache.StateCache, optional
    paged_over : int, optional
        With ``cache``: each partition's differences are kept in the cache (one Parquet file per
        partition and pair of versions, reused on reopen), and a diff of more rows than this is
        served from there a page at a time by DuckDB (the table's ``query``), not held in memory.

    Yields
    ------
    Progress

    Returns
    -------
    StateTable
        Columns ``change``, ``partition``, key and value fields (the newer value; the old one for
        removed rows) and ``value before`` for changed rows.

    Raises
    ------
    UsageError
        Unknown partition, or a version readable in no partition.
    """
    schema = _require_schema(reader)
    pids = _partitions(reader, partition_id)
    notes: list[str] = []
    problems: list[StatelensError] = []
    what = f"comparing versions {old_version} and {new_version} of operator {reader.operator_id} {reader.store_name}"
    readable, skipped = _readable(reader, pids, (old_version, new_version))
    in_cache = paged_over is not None and cache is not None
    diff_schema = _diff_schema(schema)
    counts = {"added": 0, "changed": 0, "removed": 0}

    def differences(pid: int) -> Any:
        """One partition's differences as an Arrow table (``change, partition, key, value, before``)."""

        old = reader.read_raw(pid, old_version)
        new = reader.read_raw(pid, new_version)
        added = [k for k in new if k not in old]
        removed = [k for k in old if k not in new]
        changed = [k for k, v in new.items() if k in old and old[k] != v]
        path = f"state/{reader.operator_id}/{pid}/{new_version}"
        dec_new = reader.decode_pairs([(k, new[k]) for k in (*added, *changed)], path)
        dec_old = reader.decode_pairs([(k, old[k]) for k in (*removed, *changed)], path)
        rows = [DiffRow("added", pid, key, value) for key, value in dec_new[: len(added)]]
        rows.extend(DiffRow("removed", pid, key, value) for key, value in dec_old[: len(removed)])
        rows.extend(
            DiffRow("changed", pid, key, value, before)
            for (key, value), (_, before) in zip(dec_new[len(added) :], dec_old[len(removed) :], strict=True)
        )
        return rows_to_arrow(rows, diff_schema)

    def key_of(pid: int) -> str:
        return reader.cache_key(cache, pid, new_version, {"table": "diff", "old_version": old_version})

    def compare(pid: int) -> tuple[Any, Any]:
        if in_cache:
            return cache.entry(key_of(pid), lambda: differences(pid))
        return None, differences(pid)

    def reread(pid: int) -> Any:
        table = cache.get(key_of(pid))
        return differences(pid) if table is None else table

    def tally(table: Any) -> None:
        for change, n in _change_counts(table).items():
            counts[change] += n

    files, parts, total = yield from _gather(
        compare,
        readable,
        len(pids),
        what,
        partition_id,
        problems,
        cancelled,
        paged_over if in_cache else None,
        reread,
        tally,
    )
    _check_skipped(reader, new_version, partition_id, pids, skipped, notes)
    notes.insert(0, ", ".join(f"{n:,} {c}" for c, n in counts.items()))
    yield Progress(len(pids), len(pids), what)
    value_fmt = _cell_formatter(schema.value_schema, None)
    specs = [
        ColumnSpec("change", lambda r: r.change, str, False, side="change"),
        *state_columns(schema, reader.store_name, time_columns),
        ColumnSpec(
            "value before",
            lambda r: r.before,
            lambda v: "" if v is None else value_fmt(v),
            False,
            schema.value_schema,
            side="before",
        ),
    ]
    if files:
        return _paged_table(
            reader,
            partition_id,
            new_version,
            files,
            specs,
            schema,
            total,
            notes,
            problems,
            cache,
            old_version,
        )
    records = [r for part in parts for r in diff_rows(part, schema.key_schema, schema.value_schema)]
    headers, columns, sort_keys, keys = _build_table(records, specs, schema.key_schema)
    return StateTable(
        reader.operator_id,
        reader.store_name,
        partition_id,
        new_version,
        headers,
        columns,
        sort_keys,
        keys,
        records,
        len(records),
        notes,
        problems,
        compare_version=old_version,
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
    )


def _diff_schema(schema: Any) -> Any:
    """Spark schema of a diff table: ``change, partition, key, value, before``."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    return T.StructType(
        [
            T.StructField("change", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("key", schema.key_schema),
            T.StructField("value", schema.value_schema),
            T.StructField("before", schema.value_schema),
        ]
    )


def _change_counts(table: Any) -> dict[str, int]:
    """Rows per kind of change in a diff table."""
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    counts = pc.value_counts(table.column("change").combine_chunks())
    return {str(c["values"]): int(c["counts"]) for c in counts.to_pylist()}


def _format_time_number(value: int, unit: str) -> str:
    """An integer time column (``ms`` or ``us`` since the epoch) as UTC text; negatives mean none."""
    if value < 0:
        return f"{value} (no timeout)" if value == -1 else str(value)
    text = _format_micros(value * 1000 if unit == "ms" else value)
    return str(value) if text is None else text + "Z"


def _format_micros(micros: int) -> str | None:
    """``YYYY-MM-DD HH:MM:SS.mmm`` (``.ffffff`` when there are sub-millisecond digits), UTC; None if out of range."""
    try:
        text = (_EPOCH + dt.timedelta(microseconds=micros)).strftime("%Y-%m-%d %H:%M:%S.%f")
    except OverflowError:
        return None
    return text[:-3] if micros % 1000 == 0 else text

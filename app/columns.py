"""Display columns of decoded state (Qt-free): a store's flattened key and value fields, their text made on
demand (:func:`format_value`: plain text, never markup; times as UTC) and sort keys, from Arrow arrays where
they can be.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from statelens.app.analysis._common import row_converter
from statelens.readers.arrow_values import numbers
from statelens.readers.model import OperatorInfo, TimeColumn

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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

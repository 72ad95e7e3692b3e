"""JSON, CSV and Arrow/Parquet forms of decoded Spark values: the output contract of ``statelens rows``.

Decoded values arrive in the representation of :data:`readers.model.VALUE_REPRESENTATION` (what
:mod:`readers._format.unsaferow` returns). This module turns them, guided by their Spark SQL type, into:

**JSON** (:func:`to_json_value`, :func:`row_to_json`; written as JSON lines by ``app.output.dumps_jsonl``)

=============================  ===============================================================
Spark type                     JSON
=============================  ===============================================================
boolean, byte..long            ``true``/``false``, integers
float, double                  numbers (float with the shortest digits that round-trip as a
                               32-bit float, as Java's ``Float.toString``); NaN and infinities
                               as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
string, char, varchar          strings
binary, variant, geometry,     base64 (standard alphabet, padded); variant/geometry/geography
geography                      are their opaque UnsafeRow payload (docs/format.md §6.6)
date                           ``"YYYY-MM-DD"``
timestamp                      ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` (UTC, always six digits)
timestamp_ntz                  the same without ``Z``
time                           ``"HH:MM:SS.ffffff"``
decimal(p, s)                  a plain string with exactly ``s`` decimals, never an exponent
interval day to second         integer microseconds
interval year to month         integer months
interval (calendar)            ``{"months": m, "days": d, "microseconds": us}``
struct                         an object with Spark's field names, in order, **repeats kept**
array                          a list
map                            a list of ``[key, value]`` lists, in stored order
void                           ``null``
=============================  ===============================================================

Dates and timestamps are computed with integer arithmetic on the proleptic Gregorian calendar, so
every value Spark can store formats exactly (pre-1970, year 1, years past 9999). Years outside
0000..9999 follow ``java.time``'s ISO format: a sign and at least four digits (``+10000-01-01``,
``-0001-12-31``).

JSON objects are :class:`JsonObject`: an ordered list of ``(key, value)`` pairs, because struct field
names repeat (aggregation buffers are ``sum, sum, count``; docs/format.md §5.4). ``app.output.dumps_jsonl`` writes
repeated keys in order; ``json.loads(line, object_pairs_hook=list)`` gives them all back.

**CSV** (written by ``app.output``: ``flatten_row``, ``flat_columns``, ``csv_cell``): structs are flattened into
dotted column names (``key.window.start``), everything else nested (arrays, maps, intervals) is one
cell of JSON text. Repeated names are kept, in order.

**Arrow / Parquet** (:func:`to_arrow_type`, :func:`to_arrow_array`, :func:`rows_to_arrow`; pyarrow is
imported lazily). Arrow and pyarrow's Parquet writer/reader accept repeated struct field names, but
other readers do not: Spark itself fails to read such a file (``incompatible types: optional double
sum != optional int64 sum``) and pyarrow cannot turn such a struct into Python dicts or pandas. So
``unique_names=True`` (use it for Parquet) renames the second and later fields of a name to
``name_2``, ``name_3``... (skipping names already taken) and keeps Spark's name in the field's
metadata under ``spark_name``. Timestamps become ``timestamp[us, UTC]``, timestamp_ntz
``timestamp[us]``, day-time intervals ``duration[us]``, year-month intervals ``int32`` (months),
calendar intervals ``struct<months, days, microseconds>``, maps ``map``, void ``null``.
``app.output.write_parquet`` always makes names unique; :func:`state_row_schema` is the schema of an exported
state row (``partition, key, value``).
"""

from __future__ import annotations

import base64
import functools
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "JsonObject",
    "to_json_value",
    "row_to_json",
    "json_converter",
    "format_date",
    "format_timestamp",
    "format_time",
    "format_decimal",
    "to_arrow_type",
    "to_arrow_array",
    "rows_to_arrow",
    "state_row_schema",
]


class JsonObject(list):  # type: ignore[type-arg]
    """A JSON object as an ordered list of ``(key, value)`` pairs; keys may repeat.

    Compares equal to the list of pairs ``json.loads(text, object_pairs_hook=list)`` returns.
    """

    __slots__ = ()

    def keys(self) -> list[str]:
        return [k for k, _ in self]

    def values(self) -> list[Any]:  # type: ignore[override]
        return [v for _, v in self]

    def __repr__(self) -> str:
        return f"JsonObject({list.__repr__(self)})"


# ---------------------------------------------------------------------------------------------------
# Scalars

_US_PER_SECOND = 1_000_000
_US_PER_DAY = 86_400 * _US_PER_SECOND
_NS_PER_US = 1_000


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01, proleptic Gregorian (H. Hinnant's algorithm)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def _year(year: int) -> str:
    if 0 <= year <= 9999:
        return f"{year:04d}"
    return f"+{year}" if year > 9999 else f"-{-year:04d}"


@functools.lru_cache(maxsize=8192)
def format_date(days: int) -> str:
    """``YYYY-MM-DD`` of a Spark date (days since 1970-01-01).

    Parameters
    ----------
    days : int
        Days since the epoch; any int32 (and beyond) is exact.

    Returns
    -------
    str
        ISO-8601 date, proleptic Gregorian; years outside 0..9999 carry a sign as in ``java.time``.
    """
    y, m, d = _civil_from_days(days)
    return f"{_year(y)}-{m:02d}-{d:02d}"


def format_timestamp(micros: int, *, utc: bool = True) -> str:
    """ISO-8601 text of a Spark timestamp (microseconds since the epoch).

    Parameters
    ----------
    micros : int
        Microseconds since 1970-01-01T00:00:00 (UTC for ``timestamp``, wall clock for ``timestamp_ntz``).
    utc : bool
        Append ``Z`` (``timestamp``); ``False`` for ``timestamp_ntz``.

    Returns
    -------
    str
        ``YYYY-MM-DDTHH:MM:SS.ffffff`` plus ``Z`` when ``utc``; exact for every int64.
    """
    days, rem = divmod(micros, _US_PER_DAY)
    seconds, frac = divmod(rem, _US_PER_SECOND)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{format_date(days)}T{hours:02d}:{minutes:02d}:{seconds:02d}.{frac:06d}"
    return text + "Z" if utc else text


def format_time(nanos: int) -> str:
    """``HH:MM:SS.ffffff`` of a Spark ``time`` (nanoseconds since midnight; nine digits if sub-µs).

    Parameters
    ----------
    nanos : int
        Nanoseconds since midnight.

    Returns
    -------
    str
        The time of day.
    """
    seconds, frac = divmod(nanos, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    digits = f"{frac // _NS_PER_US:06d}" if frac % _NS_PER_US == 0 else f"{frac:09d}"
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{digits}"


def format_decimal(value: Decimal | int | str, scale: int) -> str:
    """Plain-text decimal with exactly ``scale`` decimals, as Spark shows ``decimal(p, scale)``.

    Parameters
    ----------
    value : decimal.Decimal
        The value (``int`` and ``str`` are accepted too).
    scale : int
        The type's scale; a negative scale (legacy Spark) gives an integer.

    Returns
    -------
    str
        No exponent ever (``Decimal('1E+2')`` → ``"100"``); ``"1.00"`` for 1 at scale 2. A value with
        more decimals than ``scale`` (not produced by the decoder) is written exactly, in full.
    """
    d = value if isinstance(value, Decimal) else Decimal(value)
    if not d.is_finite():
        return str(d)
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    unscaled = int("".join(map(str, digits)) or "0")
    if sign:
        unscaled = -unscaled
    shift = exp + max(scale, 0)
    if shift < 0:
        unscaled, rest = divmod(unscaled, 10**-shift)
        if rest:
            return format(d, "f")
        shift = 0
    unscaled *= 10**shift
    if scale <= 0:
        return str(unscaled)
    text = str(abs(unscaled)).rjust(scale + 1, "0")
    return f"{'-' if unscaled < 0 else ''}{text[:-scale]}.{text[-scale:]}"


def _float_json(v: float) -> float | str:
    if math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def _float32_json(v: float) -> float | str:
    if math.isfinite(v):
        # The shortest decimal that reads back as the same float32 (Java's Float.toString digits).
        return float(str(np.float32(v)))
    return _float_json(v)


def _b64(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")


# ---------------------------------------------------------------------------------------------------
# Compiled converters


_Conv = Callable[[Any], Any]
_CACHE: dict[str, _Conv] = {}
_CACHE_LOCK = threading.Lock()
#: The converter of each schema object seen (by identity, before building its JSON text for ``_CACHE``);
#: bounded, as callers may build new type objects for every call.
_BY_ID: dict[int, tuple[DataType, _Conv]] = {}
_BY_ID_MAX = 4096


def _identity(v: Any) -> Any:
    return v


def _compile(dt: DataType) -> _Conv:
    """A function value → JSON-ready value for type ``dt`` (``None`` passes through)."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, T.UserDefinedType):
        return _compile(dt.sqlType())
    if isinstance(dt, T.StructType):
        names = [f.name for f in dt.fields]
        convs = [_compile(f.dataType) for f in dt.fields]
        pairs = list(zip(names, convs, strict=True))

        def struct(v: Any) -> Any:
            if v is None:
                return None
            return JsonObject(
                [(name, None if x is None else conv(x)) for (name, conv), x in zip(pairs, v, strict=True)]
            )

        return struct
    if isinstance(dt, T.ArrayType):
        elem = _compile(dt.elementType)
        if elem is _identity:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [None if x is None else elem(x) for x in v]
    if isinstance(dt, T.MapType):
        kc, vc = _compile(dt.keyType), _compile(dt.valueType)
        return lambda v: (
            None
            if v is None
            else [[None if k is None else kc(k), None if x is None else vc(x)] for k, x in v]
        )
    if isinstance(dt, T.DecimalType):
        scale = dt.scale
        return lambda v: None if v is None else format_decimal(v, scale)
    if isinstance(dt, T.DoubleType):
        return lambda v: None if v is None else _float_json(v)
    if isinstance(dt, T.FloatType):
        return lambda v: None if v is None else _float32_json(v)
    if isinstance(dt, T.TimestampType):
        return lambda v: None if v is None else format_timestamp(v, utc=True)
    if isinstance(dt, T.TimestampNTZType):
        return lambda v: None if v is None else format_timestamp(v, utc=False)
    if isinstance(dt, T.DateType):
        return lambda v: None if v is None else format_date(v)
    if isinstance(dt, T.CalendarIntervalType):
        return lambda v: (
            None if v is None else JsonObject([("months", v[0]), ("days", v[1]), ("microseconds", v[2])])
        )
    binary: tuple[type, ...] = (T.BinaryType, T.VariantType)
    for extra in ("GeometryType", "GeographyType"):
        if hasattr(T, extra):
            binary += (getattr(T, extra),)
    if isinstance(dt, binary):
        return lambda v: None if v is None else _b64(bytes(v))
    time_type = getattr(T, "TimeType", None)
    if time_type is not None and isinstance(dt, time_type):
        return lambda v: None if v is None else format_time(v)
    if isinstance(dt, T.NullType):
        return lambda v: None
    # boolean, integral types, strings (incl. char/varchar/collated), ANSI intervals (int µs / months)
    return _identity


def json_converter(data_type: DataType) -> Callable[[Any], Any]:
    """The compiled (cached) converter behind :func:`to_json_value` for one type.

    Parameters
    ----------
    data_type : pyspark.sql.types.DataType
        The type of the values to convert (a ``StructType`` for whole rows).

    Returns
    -------
    callable
        ``value -> JSON-ready value``; use it in loops over many rows.
    """
    seen = _BY_ID.get(id(data_type))
    if seen is not None and seen[0] is data_type:  # the same schema object again: no JSON text to build
        return seen[1]
    key = data_type.json()
    conv = _CACHE.get(key)
    if conv is None:
        conv = _compile(data_type)
        with _CACHE_LOCK:
            conv = _CACHE.setdefault(key, conv)
    if len(_BY_ID) < _BY_ID_MAX:
        _BY_ID[id(data_type)] = (data_type, conv)  # keeps the object alive, so its id is not reused
    return conv


def to_json_value(value: Any, data_type: DataType) -> Any:
    """JSON-ready form of one decoded value (see the module docstring for the rules).

    Parameters
    ----------
    value : Any
        A value in the representation of ``VALUE_REPRESENTATION``.
    data_type : pyspark.sql.types.DataType
        Its Spark SQL type.

    Returns
    -------
    Any
        ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` or :class:`JsonObject`.
    """
    return json_converter(data_type)(value)


def row_to_json(row: Sequence[Any] | None, schema: StructType) -> JsonObject | None:
    """A decoded row (positional tuple) as a :class:`JsonObject` with Spark's field names.

    Parameters
    ----------
    row : tuple or None
        One value per field of ``schema``.
    schema : pyspark.sql.types.StructType
        The row's schema; repeated field names are kept, in order.

    Returns
    -------
    JsonObject or None
        ``None`` for a ``None`` row (e.g. the value of a removal).
    """
    return json_converter(schema)(row)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------------
# Arrow / Parquet


def dedupe_names(names: Iterable[str]) -> list[str]:
    """Rename repeats ``name_2``, ``name_3``... skipping names that are already taken."""
    names = list(names)
    taken = set(names)
    seen: dict[str, int] = {}
    out = []
    for name in names:
        count = seen.get(name, 0) + 1
        seen[name] = count
        if count == 1:
            out.append(name)
            continue
        n = count
        candidate = f"{name}_{n}"
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        out.append(candidate)
    return out


def to_arrow_type(data_type: DataType, *, unique_names: bool = False) -> pa.DataType:
    """The Arrow type for a Spark SQL type, matching the decoded representation.

    Parameters
    ----------
    data_type : pyspark.sql.types.DataType
        Any Spark SQL type (UDTs map to their ``sqlType``).
    unique_names : bool
        Rename repeated struct field names (``sum``, ``sum_2``; Spark's name kept in field metadata
        ``spark_name``). Use it for Parquet: other readers, Spark included, reject repeats.

    Returns
    -------
    pyarrow.DataType
        See the module docstring for the mapping.

    Raises
    ------
    TypeError
        For a type with no Arrow equivalent.
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    dt = data_type
    if isinstance(dt, T.UserDefinedType):
        return to_arrow_type(dt.sqlType(), unique_names=unique_names)
    if isinstance(dt, T.StructType):
        names = [f.name for f in dt.fields]
        arrow_names = dedupe_names(names) if unique_names else names
        return pa.struct(
            [
                pa.field(
                    an,
                    to_arrow_type(f.dataType, unique_names=unique_names),
                    nullable=True,  # state can hold nulls a schema calls impossible
                    metadata={"spark_name": f.name} if an != f.name else None,
                )
                for an, f in zip(arrow_names, dt.fields, strict=True)
            ]
        )
    if isinstance(dt, T.ArrayType):
        return pa.list_(to_arrow_type(dt.elementType, unique_names=unique_names))
    if isinstance(dt, T.MapType):
        return pa.map_(
            to_arrow_type(dt.keyType, unique_names=unique_names),
            to_arrow_type(dt.valueType, unique_names=unique_names),
        )
    if isinstance(dt, T.DecimalType):
        if dt.scale < 0:  # legacy negative scale: Parquet has none, the values are integers
            return pa.decimal128(min(38, dt.precision - dt.scale), 0)
        return pa.decimal128(dt.precision, dt.scale)
    if isinstance(dt, T.CalendarIntervalType):
        return pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])
    simple: list[tuple[tuple[type, ...], pa.DataType]] = [
        ((T.BooleanType,), pa.bool_()),
        ((T.ByteType,), pa.int8()),
        ((T.ShortType,), pa.int16()),
        ((T.IntegerType, T.YearMonthIntervalType), pa.int32()),
        ((T.LongType,), pa.int64()),
        ((T.FloatType,), pa.float32()),
        ((T.DoubleType,), pa.float64()),
        ((T.StringType, T.CharType, T.VarcharType), pa.string()),
        ((T.BinaryType, T.VariantType), pa.binary()),
        ((T.DateType,), pa.date32()),
        ((T.TimestampType,), pa.timestamp("us", tz="UTC")),
        ((T.TimestampNTZType,), pa.timestamp("us")),
        ((T.DayTimeIntervalType,), pa.duration("us")),
        ((T.NullType,), pa.null()),
    ]
    for extra, arrow in (
        ("TimeType", pa.time64("ns")),
        ("GeometryType", pa.binary()),
        ("GeographyType", pa.binary()),
    ):
        if hasattr(T, extra):
            simple.append(((getattr(T, extra),), arrow))
    for classes, arrow in simple:
        if isinstance(dt, classes):
            return arrow
    raise TypeError(f"no Arrow type for Spark type {dt.simpleString()}")


def to_arrow_array(values: Sequence[Any], data_type: DataType, *, unique_names: bool = False) -> pa.Array:
    """An Arrow array of decoded values (structs as tuples, maps as lists of pairs).

    Parameters
    ----------
    values : sequence
        Values in the representation of ``VALUE_REPRESENTATION``.
    data_type : pyspark.sql.types.DataType
        Their Spark SQL type.
    unique_names : bool
        As for :func:`to_arrow_type`.

    Returns
    -------
    pyarrow.Array
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)

    arrow_type = to_arrow_type(data_type, unique_names=unique_names)
    if not len(values):
        # the same empty array: Arrow converting a Python sequence imports pandas (~0.3 s) on first use,
        # which a store's empty table (its schema, made before any row is decoded) does not need
        return pa.nulls(0, arrow_type)
    return pa.array(values, type=arrow_type)


def rows_to_arrow(
    rows: Sequence[Sequence[Any]], schema: StructType, *, unique_names: bool = False
) -> pa.Table:
    """A ``pyarrow.Table`` with one column per field of ``schema``.

    Parameters
    ----------
    rows : sequence of tuples
        Decoded rows (positional). To export state, use a schema like
        ``partition_id int, key struct<...>, value struct<...>`` and rows ``(p, key, value)``.
    schema : pyspark.sql.types.StructType
        The rows' schema.
    unique_names : bool
        Rename repeated names, top-level columns included (needed for Parquet, see the module docs).

    Returns
    -------
    pyarrow.Table
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)

    names = [f.name for f in schema.fields]
    arrow_names = dedupe_names(names) if unique_names else names
    fields = []
    arrays = []
    for i, (an, f) in enumerate(zip(arrow_names, schema.fields, strict=True)):
        arr = to_arrow_array([r[i] for r in rows], f.dataType, unique_names=unique_names)
        arrays.append(arr)
        fields.append(
            pa.field(an, arr.type, nullable=True, metadata={"spark_name": f.name} if an != f.name else None)
        )
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def state_row_schema(
    key_schema: StructType, value_schema: StructType, *, changes: bool = False
) -> StructType:
    """Schema of one exported state row, in the field order of ``statelens rows`` documents.

    Parameters
    ----------
    key_schema, value_schema : pyspark.sql.types.StructType
        The store's key and value schemas.
    changes : bool
        ``False``: ``partition int, key, value``; ``True`` (a change feed):
        ``version long, partition int, change string, key, value, derived boolean`` (``derived``: the
        store recorded no change of that version and the change is the difference with the version
        before, see :meth:`readers._format.store_base.StoreReaderBase.raw_changes`).

    Returns
    -------
    pyspark.sql.types.StructType
        Use it with :func:`rows_to_arrow`/:func:`write_parquet` (rows ``(partition, key, value)``) or
        with :func:`flatten_row`/:func:`flat_columns` on the documents, so every CSV row has the same
        columns.
    """
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    fields = [T.StructField("key", key_schema), T.StructField("value", value_schema)]
    head = [T.StructField("partition", T.IntegerType())]
    if changes:
        head = [T.StructField("version", T.LongType()), *head, T.StructField("change", T.StringType())]
        fields.append(T.StructField("derived", T.BooleanType()))
    return T.StructType(head + fields)

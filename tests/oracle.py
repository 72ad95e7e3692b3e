"""Ground truth for the tests: what Spark's own state data sources say about a checkpoint.

Reads through ``spark.read.format("statestore")`` / ``"state-metadata"`` and converts every value to
statelens' representation (:data:`readers.model.VALUE_REPRESENTATION`), exactly and schema-directed:

* Rows are collected *without* PySpark's ``fromInternal`` conversion (see :func:`_collect_internal`),
  so timestamps/timestamp_ntz arrive as the int microseconds Spark stores, dates as int days,
  intervals as int µs / int months — no time-zone or float rounding involved.
* ``interval`` (CalendarInterval) cannot cross to Python at all, so it is rewritten on the Spark side
  into ``struct<months, days, microseconds>`` and turned into :class:`readers.model.CalendarInterval`.
* Structs become positional tuples (aggregation buffers repeat field names), arrays lists, maps lists
  of ``(key, value)`` tuples **sorted** (Spark hands maps over as hash maps, so the stored order is lost;
  compare maps order-insensitively, e.g. with :func:`canonical`).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from readers.model import CalendarInterval
from tests.spark_checkpoints import spark_session as _spark_session

__all__ = [
    "canonical",
    "convert",
    "read_change_feed",
    "read_state",
    "read_state_metadata",
    "spark_session",
]


def spark_session() -> Any:
    """The process-wide SparkSession (the same one the checkpoint generator uses)."""
    return _spark_session()


# --------------------------------------------------------------------------------------------------
# Readers


def _state_reader(spark: Any, checkpoint: Path | str, operator_id: int) -> Any:
    return spark.read.format("statestore").option("operatorId", str(operator_id))


def read_state(
    spark: Any,
    checkpoint: Path | str,
    operator_id: int = 0,
    store_name: str | None = None,
    batch_id: int | None = None,
    join_side: str | None = None,
) -> list[tuple[int, tuple[Any, ...], tuple[Any, ...]]]:
    """``(partition_id, key, value)`` of every state row Spark's ``statestore`` source returns.

    ``batch_id`` defaults to the last committed batch (Spark's default). Sorted by partition then key.
    """
    reader = _state_reader(spark, checkpoint, operator_id)
    if store_name is not None:
        reader = reader.option("storeName", store_name)
    if batch_id is not None:
        reader = reader.option("batchId", str(batch_id))
    if join_side is not None:
        reader = reader.option("joinSide", join_side)
    df = reader.load(str(checkpoint))
    rows = _collect_converted(df, ["partition_id", "key", "value"])
    out = [(r[0], r[1], r[2]) for r in rows]
    out.sort(key=lambda r: (r[0], _sort_key(r[1]), _sort_key(r[2])))
    return out


def read_change_feed(
    spark: Any,
    checkpoint: Path | str,
    operator_id: int,
    store_name: str | None = None,
    start_batch: int = 0,
    end_batch: int | None = None,
) -> list[tuple[int, str, int, tuple[Any, ...], tuple[Any, ...] | None]]:
    """``(batch_id, change_type, partition_id, key, value)`` from the change feed.

    ``change_type`` is Spark's: ``update`` for a put, ``delete`` (value ``None``) for a remove.
    Sorted by batch, partition, then key (Spark's order within a delta is not preserved).
    """
    reader = (
        _state_reader(spark, checkpoint, operator_id)
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", str(start_batch))
    )
    if end_batch is not None:
        reader = reader.option("changeEndBatchId", str(end_batch))
    if store_name is not None:
        reader = reader.option("storeName", store_name)
    df = reader.load(str(checkpoint))
    rows = _collect_converted(df, ["batch_id", "change_type", "partition_id", "key", "value"])
    out = [(r[0], r[1], r[2], r[3], r[4]) for r in rows]
    out.sort(key=lambda r: (r[0], r[2], _sort_key(r[3]), r[1], _sort_key(r[4])))
    return out


def read_state_metadata(spark: Any, checkpoint: Path | str) -> list[dict[str, Any]]:
    """Rows of Spark's ``state-metadata`` source (incl. the hidden ``_numColsPrefixKey``) as dicts."""
    df = spark.read.format("state-metadata").load(str(checkpoint))
    df = df.select(*df.columns, "_numColsPrefixKey")
    out = [row.asDict() for row in df.collect()]
    out.sort(key=lambda d: (d["operatorId"], d["stateStoreName"]))
    return out


# --------------------------------------------------------------------------------------------------
# Conversion


def _collect_converted(df: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    schema = df.select(*columns).schema
    prepared = df.select(*[_prepare(df[c], schema[c].dataType).alias(c) for c in columns])
    return [
        tuple(convert(v, f.dataType) for v, f in zip(row, schema.fields, strict=True))
        for row in _collect_internal(prepared)
    ]


_RAW_LOCK = threading.Lock()


@contextlib.contextmanager
def _raw_rows() -> Iterator[None]:
    # The JVM pickles each row as a call of pyspark.sql.types._create_row_inbound_converter(schema)
    # applied to the *internal* values; PySpark's converter then runs fromInternal (timestamps to
    # local datetimes, and no support at all for year-month intervals). Swapping it for the identity
    # keeps the internal values, which are exactly statelens' representation.
    import pyspark.sql.types as T

    with _RAW_LOCK:
        original = T._create_row_inbound_converter
        T._create_row_inbound_converter = lambda _dt: lambda *values: values
        try:
            yield
        finally:
            T._create_row_inbound_converter = original


def _collect_internal(df: Any) -> list[tuple[Any, ...]]:
    from pyspark.sql import Row

    with _raw_rows():
        rows = df.collect()
    if rows and isinstance(rows[0], Row):  # pragma: no cover - PySpark changed its pickling
        raise RuntimeError("could not collect internal values: PySpark still built Row objects")
    return [tuple(r) for r in rows]


def _has_calendar_interval(dt: Any) -> bool:
    from pyspark.sql import types as T

    if isinstance(dt, T.CalendarIntervalType):
        return True
    if isinstance(dt, T.StructType):
        return any(_has_calendar_interval(f.dataType) for f in dt.fields)
    if isinstance(dt, T.ArrayType):
        return _has_calendar_interval(dt.elementType)
    if isinstance(dt, T.MapType):
        return _has_calendar_interval(dt.keyType) or _has_calendar_interval(dt.valueType)
    return False


def _renamed(dt: Any) -> Any:
    """Same type with struct fields renamed ``_0, _1, ...`` (unique), recursively."""
    from pyspark.sql import types as T

    if isinstance(dt, T.StructType):
        return T.StructType(
            [T.StructField(f"_{i}", _renamed(f.dataType), f.nullable) for i, f in enumerate(dt.fields)]
        )
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_renamed(dt.elementType), dt.containsNull)
    if isinstance(dt, T.MapType):
        return T.MapType(_renamed(dt.keyType), _renamed(dt.valueType), dt.valueContainsNull)
    return dt


def _prepare(col: Any, dt: Any) -> Any:
    """Spark-side rewrite: every CalendarInterval becomes struct<months int, days int, microseconds long>."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not _has_calendar_interval(dt):
        return col
    if isinstance(dt, T.CalendarIntervalType):
        part = lambda unit: F.extract(F.lit(unit), col)  # noqa: E731
        months = part("YEAR").cast("int") * 12 + part("MONTH").cast("int")
        micros = (
            part("HOUR").cast("long") * 3_600_000_000
            + part("MINUTE").cast("long") * 60_000_000
            + (part("SECOND") * 1_000_000).cast("long")
        )
        converted = F.struct(
            months.alias("months"), part("DAY").cast("int").alias("days"), micros.alias("microseconds")
        )
        return F.when(col.isNull(), F.lit(None)).otherwise(converted)
    if isinstance(dt, T.StructType):
        renamed = col.cast(_renamed(dt))
        fields = [
            _prepare(renamed.getField(f"_{i}"), f.dataType).alias(f"_{i}") for i, f in enumerate(dt.fields)
        ]
        return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(dt, T.ArrayType):
        return F.transform(col, lambda x: _prepare(x, dt.elementType))
    if isinstance(dt, T.MapType):
        if _has_calendar_interval(dt.keyType):
            raise NotImplementedError("map keys of type interval")
        return F.transform_values(col, lambda _k, v: _prepare(v, dt.valueType))
    raise AssertionError(dt)  # pragma: no cover


def convert(value: Any, dt: Any) -> Any:
    """One internal value (as collected by :func:`_collect_internal`) → statelens' representation."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(dt, T.StructType):
        return tuple(convert(v, f.dataType) for v, f in zip(value, dt.fields, strict=True))
    if isinstance(dt, T.ArrayType):
        return [convert(v, dt.elementType) for v in value]
    if isinstance(dt, T.MapType):
        items = [(convert(k, dt.keyType), convert(v, dt.valueType)) for k, v in value.items()]
        items.sort(key=lambda kv: _sort_key(kv[0]))
        return items
    if isinstance(dt, T.CalendarIntervalType):
        months, days, micros = value
        return CalendarInterval(int(months), int(days), int(micros))
    if isinstance(dt, T.BinaryType):
        return bytes(value)
    if isinstance(dt, T.BooleanType):
        return bool(value)
    if isinstance(dt, (T.FloatType, T.DoubleType)):
        return float(value)
    if isinstance(dt, T.DecimalType):
        return value if isinstance(value, Decimal) else Decimal(value)
    if isinstance(
        dt,
        (
            T.ByteType,
            T.ShortType,
            T.IntegerType,
            T.LongType,
            T.DateType,
            T.TimestampType,
            T.TimestampNTZType,
            T.DayTimeIntervalType,
            T.YearMonthIntervalType,
        ),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected an internal int for {dt.simpleString()}, got {value!r}")
        return int(value)
    if isinstance(dt, T.StringType):
        return str(value)
    if isinstance(dt, T.NullType):
        return None
    raise NotImplementedError(f"no conversion for {dt.simpleString()}: {value!r}")


def canonical(value: Any, dt: Any = None) -> Any:
    """A form that compares equal when two decoded values are equal.

    NaN becomes the string ``"NaN"`` (NaN != NaN, also inside tuples). With the Spark ``dt`` of the
    value, maps (lists of ``(key, value)``) are sorted by key, so a decoder's stored order and the
    oracle's sorted order compare equal; without ``dt`` only NaN is normalised.
    """
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if dt is not None and isinstance(dt, T.MapType):
        items = [(canonical(k, dt.keyType), canonical(v, dt.valueType)) for k, v in value]
        return sorted(items, key=lambda kv: _sort_key(kv[0]))
    if isinstance(value, CalendarInterval):
        return value
    if isinstance(value, tuple):
        if dt is not None and isinstance(dt, T.StructType):
            return tuple(canonical(v, f.dataType) for v, f in zip(value, dt.fields, strict=True))
        return tuple(canonical(v) for v in value)
    if isinstance(value, list):
        elem = dt.elementType if dt is not None and isinstance(dt, T.ArrayType) else None
        return [canonical(v, elem) for v in value]
    return value


def _sort_key(v: Any) -> tuple[Any, ...]:
    """A total order over decoded values (None first, NaN after numbers), for stable sorting only."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, v)
    if isinstance(v, (int, float, Decimal)):
        if isinstance(v, float) and math.isnan(v):
            return (2, 1, 0)
        return (2, 0, v)
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, (bytes, bytearray)):
        return (4, bytes(v))
    if isinstance(v, (tuple, list)):
        return (5, tuple(_sort_key(x) for x in v))
    return (6, repr(v))

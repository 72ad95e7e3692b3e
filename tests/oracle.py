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

import math
from pathlib import Path
from typing import Any

from statelens.readers.backends.spark import collect_converted, convert, sort_key
from statelens.readers.model import CalendarInterval
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
# Conversion: the PySpark backend's exact conversion (internal values, schema-directed) is the one used.

_collect_converted = collect_converted
_sort_key = sort_key


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

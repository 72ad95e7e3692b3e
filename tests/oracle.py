"""Ground truth for the tests: what Spark's own state data sources say about a checkpoint, as plain Python.

Written for the tests alone and sharing no code with ``readers/``: the only statelens name it imports is
the model's plain :class:`~statelens.readers.model.CalendarInterval`, so a conversion bug in the product
(its decoders or its Spark backend) cannot hide in its own oracle.

Reads ``spark.read.format("statestore")`` (state rows, ``readChangeFeed``, transformWithState variables
by ``stateVarName``, ``readRegisteredTimers``) and ``"state-metadata"``. Values leave Spark as Arrow
(``DataFrame.toArrow``: Spark's own JVM-side Arrow writer, not the pickled rows PySpark's ``collect``
rebuilds), and become statelens' representation (:data:`statelens.readers.model.VALUE_REPRESENTATION`)
by the rules below, walking the Spark type beside each value:

* Before leaving Spark, each column is cast (a cast only renames or changes leaf types): struct fields
  become ``_0, _1, ...`` (aggregation buffers repeat names, which Arrow refuses), every field, element
  and map value nullable (PySpark's Arrow schema would refuse a null struct's non-null fields), a calendar interval
  becomes its string (``"1 years 2 months 3 days 4 hours 5 minutes 6.000007 seconds"``, parsed here), a
  year-month interval first its count of months (``INTERVAL MONTH``) and then that count as ``bigint``,
  and ``void`` (always null; an empty ``map()`` has ``void`` keys, which Arrow refuses) a string.
* In Arrow, timestamps (with or without time zone) and day-time intervals are cast to their int64
  microseconds and dates to their int32 days: the stored numbers, no calendar arithmetic involved.
* Structs become positional tuples, arrays lists, maps lists of ``(key, value)`` **in the order Spark
  hands them over** (its in-memory map, read from the stored row; :func:`canonical` sorts them when a
  test compares maps order-insensitively), binary ``bytes``, decimals ``Decimal``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from statelens.readers.model import CalendarInterval
from tests.spark_checkpoints import spark_session as _spark_session

__all__ = [
    "canonical",
    "collect",
    "committed_batches",
    "order_key",
    "Reads",
    "read_change_feed",
    "read_family",
    "read_state",
    "read_state_metadata",
    "read_state_variable",
    "read_state_variable_changes",
    "read_timers",
    "row_counts",
    "spark_session",
    "state_types",
    "state_variables",
    "stored_numbers",
]


def spark_session() -> Any:
    """The process-wide SparkSession (the same one the checkpoint generator uses)."""
    return _spark_session()


# --------------------------------------------------------------------------------------------------
# Readers

#: Row, change and entry tuples of this module's readers.
Row = tuple[int, Any, Any]


def read_state(
    spark: Any,
    checkpoint: Path | str,
    operator_id: int = 0,
    store_name: str | None = None,
    batch_id: int | None = None,
    join_side: str | None = None,
) -> list[Row]:
    """``(partition_id, key, value)`` of every state row Spark's ``statestore`` source returns.

    ``batch_id`` defaults to the last committed batch (Spark's default). Sorted by partition then key.
    """
    options = {"operatorId": operator_id, "storeName": store_name, "batchId": batch_id, "joinSide": join_side}
    rows = _read(spark, checkpoint, options, ["partition_id", "key", "value"])
    return sorted(rows, key=lambda r: (r[0], order_key(r[1]), order_key(r[2])))


def read_change_feed(
    spark: Any,
    checkpoint: Path | str,
    operator_id: int,
    store_name: str | None = None,
    start_batch: int = 0,
    end_batch: int | None = None,
) -> list[tuple[int, str, int, Any, Any]]:
    """``(batch_id, change_type, partition_id, key, value)`` from the change feed.

    ``change_type`` is Spark's: ``update`` for a put, ``delete`` (value ``None``) for a remove.
    Sorted by batch, partition, then key (Spark's order within a delta is not preserved).
    """
    options = {
        "operatorId": operator_id,
        "storeName": store_name,
        "readChangeFeed": "true",
        "changeStartBatchId": start_batch,
        "changeEndBatchId": end_batch,
    }
    rows = _read(spark, checkpoint, options, ["batch_id", "change_type", "partition_id", "key", "value"])
    return sorted(rows, key=lambda r: (r[0], r[2], order_key(r[3]), r[1], order_key(r[4])))


def read_state_variable(
    spark: Any, checkpoint: Path | str, operator_id: int, name: str, batch_id: int | None = None
) -> list[tuple[int, Any, Any, Any]]:
    """Entries of one transformWithState state variable as Spark shows them (``stateVarName``):
    ``(partition_id, grouping key, value, user key)``.

    Spark flattens list state into one row per element (``list_element``) and map state into one row
    per entry (``user_map_key``, ``user_map_value``); the user key is ``None`` but for map state.
    Sorted by partition, key, user key, value.
    """
    options = {"operatorId": operator_id, "stateVarName": name, "batchId": batch_id}
    return sorted(_variable_rows(spark, checkpoint, options, ["partition_id", "key"]), key=_entry_order)


def read_state_variable_changes(
    spark: Any,
    checkpoint: Path | str,
    operator_id: int,
    name: str,
    start_batch: int = 0,
    end_batch: int | None = None,
) -> list[tuple[int, str, int, Any, Any, Any]]:
    """The change feed of one state variable: ``(batch_id, change_type, partition_id, key, value,
    user key)``, shaped as :func:`read_state_variable`'s entries. Sorted."""
    options = {
        "operatorId": operator_id,
        "stateVarName": name,
        "readChangeFeed": "true",
        "changeStartBatchId": start_batch,
        "changeEndBatchId": end_batch,
    }
    rows = _variable_rows(spark, checkpoint, options, ["batch_id", "change_type", "partition_id", "key"])
    return sorted(rows, key=lambda r: (r[0], r[2], order_key(r[3]), order_key(r[5]), r[1], order_key(r[4])))


def read_timers(
    spark: Any, checkpoint: Path | str, operator_id: int, batch_id: int | None = None
) -> list[tuple[int, Any, int]]:
    """Registered timers of a transformWithState operator (``readRegisteredTimers``):
    ``(partition_id, grouping key, expiration timestamp in ms)``, sorted."""
    options = {"operatorId": operator_id, "readRegisteredTimers": "true", "batchId": batch_id}
    rows = _read(spark, checkpoint, options, ["partition_id", "key", "expiration_timestamp_ms"])
    return sorted(rows, key=lambda r: (r[0], order_key(r[1]), r[2]))


def state_variables(spark: Any, checkpoint: Path | str, operator_id: int = 0) -> dict[str, str]:
    """``{name: stateVariableType}`` of a transformWithState operator, from ``state-metadata``'s
    ``operatorProperties`` (``ValueState``, ``ListState``, ``MapState``, ``TimerState``); empty for
    other operators."""
    return {v["stateName"]: v["stateVariableType"] for v in _declared(spark, checkpoint, operator_id)}


def _declared(spark: Any, checkpoint: Path | str, operator_id: int) -> list[dict[str, Any]]:
    (row,) = [m for m in read_state_metadata(spark, checkpoint) if m["operatorId"] == operator_id]
    return list(json.loads(row["operatorProperties"] or "{}").get("stateVariables", []))


class Reads:
    """Spark's answers already read for one checkpoint (state variables, timers, by batch), so that
    several families derived from one read (:func:`read_family`) cost one Spark job."""

    def __init__(self, spark: Any, checkpoint: Path | str, operator_id: int = 0):
        self.spark, self.checkpoint, self.operator_id = spark, checkpoint, operator_id
        declared = _declared(spark, checkpoint, operator_id)
        self.variables = {v["stateName"]: v["stateVariableType"] for v in declared}
        self.ttl = {v["stateName"] for v in declared if v.get("ttlEnabled")}
        self._got: dict[tuple[Any, ...], Any] = {}

    def variable(self, name: str, batch_id: int | None) -> list[tuple[int, Any, Any, Any]]:
        key = ("variable", name, batch_id)
        if key not in self._got:
            self._got[key] = read_state_variable(
                self.spark, self.checkpoint, self.operator_id, name, batch_id
            )
        return self._got[key]  # type: ignore[no-any-return]

    def timers(self, batch_id: int | None) -> list[tuple[int, Any, int]]:
        key = ("timers", batch_id)
        if key not in self._got:
            self._got[key] = read_timers(self.spark, self.checkpoint, self.operator_id, batch_id)
        return self._got[key]  # type: ignore[no-any-return]


def read_family(reads: Reads, family: str, batch_id: int | None = None) -> list[Row]:
    """``(partition_id, key, value)`` of one column family of a transformWithState store, in the shape
    statelens gives a family read as a store, from what Spark's reader shows (docs/format.md §7.7):

    * a value state variable: ``(key, value)``; list state: ``(key, element)`` per element; map state:
      ``((key, user key), value)`` per entry (:func:`read_state_variable`);
    * ``$procTimers_keyToTimestamp`` / ``$eventTimers_keyToTimestamp``: ``((key, expiry ms), (None,))``
      per registered timer, and their by-time indexes ``..._timestampToKey``: ``((expiry ms, key),
      (None,))`` (:func:`read_timers`);
    * ``$ttl_<variable>``, the TTL index: ``((expiration ms, element key), (None,))``, the element key
      being the grouping key (value and list state; a list by the earliest expiration of its elements)
      or ``(key, user key)`` (map state); ``$min_<list>``: ``(key, (earliest expiration,))``;
      ``$count_<list>``: ``(key, (elements,))``; ``$rowCounter_<list>``: ``(key, (elements,))`` of a
      list without TTL, none with TTL (where ``$count_<list>`` counts).

    Sorted like :func:`read_state`. Any other family raises ``KeyError``. ``reads`` holds the Spark
    reads of the operator's checkpoint (one per source and batch).
    """
    variables = reads.variables
    prefix, _, name = family.partition("_")
    if family in variables and variables[family] != "TimerState":
        rows: list[Row] = [
            (p, k if u is None else (k, u), v) for p, k, v, u in reads.variable(family, batch_id)
        ]
    elif prefix in ("$procTimers", "$eventTimers"):
        timers = reads.timers(batch_id)
        if name == "keyToTimestamp":
            rows = [(p, (k, t), (None,)) for p, k, t in timers]
        elif name == "timestampToKey":
            rows = [(p, (t, k), (None,)) for p, k, t in timers]
        else:
            raise KeyError(family)
    elif prefix in ("$ttl", "$min", "$count", "$rowCounter") and name in variables:
        entries = reads.variable(name, batch_id)
        if variables[name] == "ListState":
            lists: dict[tuple[int, Any], list[int]] = {}
            for p, k, v, _ in entries:  # the expiration (a TTL list's last value field) of each element
                lists.setdefault((p, k), []).append(v[-1])
            counts = [(p, k, (len(ts),)) for (p, k), ts in lists.items()]
            rows = {
                "$ttl": [(p, (min(ts), k), (None,)) for (p, k), ts in lists.items()],
                "$min": [(p, k, (min(ts),)) for (p, k), ts in lists.items()],
                "$count": counts,
                "$rowCounter": [] if name in reads.ttl else counts,
            }[prefix]
        elif prefix == "$ttl":
            rows = [(p, (v[-1], k if u is None else (k, u)), (None,)) for p, k, v, u in entries]
        else:
            raise KeyError(family)
    else:
        raise KeyError(family)
    return sorted(rows, key=lambda r: (r[0], order_key(r[1]), order_key(r[2])))


def row_counts(
    spark: Any, checkpoint: Path | str, operator_id: int, store_name: str | None, batch_ids: list[int]
) -> dict[tuple[int, int], int]:
    """``{(partition_id, batch_id): rows}`` of one store after each of ``batch_ids``: one ``statestore``
    read per batch, counted by Spark in one job (partitions without rows are absent)."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not batch_ids:
        return {}
    with _session_for(spark, checkpoint):
        frames = [
            _reader(spark, {"operatorId": operator_id, "storeName": store_name, "batchId": b})
            .load(str(checkpoint))
            .select("partition_id", F.lit(b).alias("batch_id"))
            for b in batch_ids
        ]
        union = reduce(lambda a, b: a.unionAll(b), frames)
        counted = union.groupBy("partition_id", "batch_id").count().toArrow().to_pylist()
    return {(r["partition_id"], r["batch_id"]): r["count"] for r in counted}


def state_types(
    spark: Any, checkpoint: Path | str, operator_id: int = 0, store_name: str | None = None
) -> tuple[Any, Any]:
    """Spark's types of one store's ``key`` and ``value`` columns (for :func:`canonical`)."""
    options = {"operatorId": operator_id, "storeName": store_name}
    with _session_for(spark, checkpoint):
        schema = _reader(spark, options).load(str(checkpoint)).schema
    return schema["key"].dataType, schema["value"].dataType


def committed_batches(checkpoint: Path | str) -> list[int]:
    """Ids of the batches with a commit file (``commits/<id>``), in order: the batches Spark reads."""
    return sorted(int(f.name) for f in (Path(checkpoint) / "commits").iterdir() if f.name.isdigit())


def read_state_metadata(spark: Any, checkpoint: Path | str) -> list[dict[str, Any]]:
    """Rows of Spark's ``state-metadata`` source (incl. the hidden ``_numColsPrefixKey``) as dicts."""
    df = spark.read.format("state-metadata").load(str(checkpoint))
    df = df.select(*df.columns, "_numColsPrefixKey")
    out = [row.asDict() for row in df.collect()]
    out.sort(key=lambda d: (d["operatorId"], d["stateStoreName"]))
    return out


def collect(df: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    """``columns`` of ``df``, each row a tuple of plain values (see the module docstring), in Spark's order."""
    schema = df.select(*columns).schema
    sent = df.select(
        *[
            df[f.name]
            .cast(_sendable(f.dataType, months_first=True))
            .cast(_sendable(f.dataType))
            .alias(f.name)
            for f in schema.fields
        ]
    )
    table = sent.toArrow()
    columns_out = []
    for i, f in enumerate(schema.fields):
        arrow = table.column(i)
        values = arrow.cast(stored_numbers(arrow.type)).to_pylist()
        columns_out.append([_plain(v, f.dataType) for v in values])
    return list(zip(*columns_out, strict=True)) if columns_out else []


def _reader(spark: Any, options: dict[str, Any]) -> Any:
    reader = spark.read.format("statestore")
    for name, value in options.items():
        if value is not None and not (name == "storeName" and value == "default"):
            reader = reader.option(name, str(value))
    return reader


def _read(spark: Any, checkpoint: Path | str, options: dict[str, Any], columns: list[str]) -> list[Any]:
    with _session_for(spark, checkpoint):
        return collect(_reader(spark, options).load(str(checkpoint)), columns)


def _variable_rows(
    spark: Any, checkpoint: Path | str, options: dict[str, Any], head: list[str]
) -> list[tuple[Any, ...]]:
    with _session_for(spark, checkpoint):
        df = _reader(spark, options).load(str(checkpoint))
        if "user_map_key" in df.columns:
            return collect(df, [*head, "user_map_value", "user_map_key"])
        value = "list_element" if "list_element" in df.columns else "value"
        return [(*r, None) for r in collect(df, [*head, value])]


def _entry_order(r: tuple[Any, ...]) -> tuple[Any, ...]:
    return (r[0], order_key(r[1]), order_key(r[3]), order_key(r[2]))


@contextlib.contextmanager
def _session_for(spark: Any, checkpoint: Path | str) -> Iterator[None]:
    """Spark reads a checkpoint of state format v2 (commits carry ``stateUniqueIds``) only when told to
    (docs/format.md §10.4): the setting holds while the read runs and is removed after."""
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    commits = Path(checkpoint) / "commits"
    v2 = commits.is_dir() and any(
        "stateUniqueIds" in json.loads(line)
        for f in commits.iterdir()
        if f.name.isdigit()
        for line in f.read_text().splitlines()[1:]
        if line.strip()
    )
    if not v2:
        yield
        return
    spark.conf.set(key, "2")
    try:
        yield
    finally:
        spark.conf.unset(key)


# --------------------------------------------------------------------------------------------------
# Spark values -> plain Python


def _sendable(dt: Any, months_first: bool = False) -> Any:
    """The type a column of ``dt`` is cast to before it leaves Spark (see the module docstring); with
    ``months_first``, the intermediate type whose year-month intervals count months."""
    from pyspark.sql import types as T

    if isinstance(dt, T.StructType):
        return T.StructType(
            [
                T.StructField(f"_{i}", _sendable(f.dataType, months_first), True)
                for i, f in enumerate(dt.fields)
            ]
        )
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_sendable(dt.elementType, months_first), True)
    if isinstance(dt, T.MapType):
        return T.MapType(_sendable(dt.keyType, months_first), _sendable(dt.valueType, months_first), True)
    if isinstance(dt, T.YearMonthIntervalType):
        month = T.YearMonthIntervalType.MONTH
        return T.YearMonthIntervalType(month, month) if months_first else T.LongType()
    if isinstance(dt, (T.CalendarIntervalType, T.NullType)) and not months_first:
        return T.StringType()
    return dt


def stored_numbers(t: Any) -> Any:
    """Arrow type ``t`` with timestamps and durations as int64 and dates as int32, at every depth."""
    import pyarrow as pa

    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(stored_numbers(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(stored_numbers(t.key_type)),
            t.item_field.with_type(stored_numbers(t.item_type)),
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        field = t.value_field.with_type(stored_numbers(t.value_type))
        return pa.list_(field) if pa.types.is_list(t) else pa.large_list(field)
    return t


_INTERVAL_UNIT = re.compile(r"(-?\d+(?:\.\d+)?) (years|months|days|hours|minutes|seconds)")
_MICROS = {"hours": 3_600_000_000, "minutes": 60_000_000, "seconds": 1_000_000}


def _calendar_interval(text: str) -> CalendarInterval:
    """Spark's string of a calendar interval (``CalendarInterval.toString``) as its three numbers."""
    months = days = micros = 0
    parts = _INTERVAL_UNIT.findall(text)
    if " ".join(f"{n} {u}" for n, u in parts) != text:
        raise AssertionError(f"not a calendar interval as Spark writes it: {text!r}")
    for number, unit in parts:
        if unit == "years":
            months += 12 * int(number)
        elif unit == "months":
            months += int(number)
        elif unit == "days":
            days += int(number)
        else:
            exact = Decimal(number) * _MICROS[unit]
            if exact != int(exact):
                raise AssertionError(f"finer than a microsecond: {text!r}")
            micros += int(exact)
    return CalendarInterval(months, days, micros)


def _plain(value: Any, dt: Any) -> Any:
    """One value as Arrow gave it (after the casts above) -> statelens' representation, by Spark type."""
    from pyspark.sql import types as T

    if value is None:
        return None
    assert not isinstance(dt, T.NullType), value
    if isinstance(dt, T.StructType):
        items = list(value.values())  # fields _0, _1, ...: positional
        return tuple(_plain(v, f.dataType) for v, f in zip(items, dt.fields, strict=True))
    if isinstance(dt, T.ArrayType):
        return [_plain(v, dt.elementType) for v in value]
    if isinstance(dt, T.MapType):
        return [(_plain(k, dt.keyType), _plain(v, dt.valueType)) for k, v in value]
    if isinstance(dt, T.CalendarIntervalType):
        return _calendar_interval(value)
    if isinstance(dt, T.BinaryType):
        return bytes(value)
    if isinstance(dt, T.DecimalType):
        assert isinstance(value, Decimal), value
        return value
    if isinstance(dt, (T.FloatType, T.DoubleType)):
        assert isinstance(value, float), value
        return value
    if isinstance(dt, T.BooleanType):
        assert isinstance(value, bool), value
        return value
    if isinstance(dt, T.StringType):
        assert isinstance(value, str), value
        return value
    assert isinstance(value, int) and not isinstance(value, bool), (dt, value)
    return value  # integral types, dates (days), timestamps (µs), ANSI intervals (µs, months)


# --------------------------------------------------------------------------------------------------
# Comparing


def order_key(v: Any) -> tuple[Any, ...]:
    """A total order over plain values (None first, NaN after the numbers), for sorting only."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, v)
    if isinstance(v, (int, float, Decimal)):
        return (2, 1, 0) if isinstance(v, float) and math.isnan(v) else (2, 0, v)
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return (4, bytes(v))
    if isinstance(v, (tuple, list)):
        return (5, tuple(order_key(x) for x in v))
    return (6, repr(v))


def canonical(value: Any, dt: Any = None) -> Any:
    """A form that compares equal when two decoded values are equal.

    NaN becomes the string ``"NaN"`` (NaN != NaN, also inside tuples). With the Spark ``dt`` of the
    value, maps (lists of ``(key, value)``) are sorted by key, so two orders of one map compare equal;
    without ``dt`` only NaN is normalised.
    """
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if dt is not None and isinstance(dt, T.MapType):
        items = [(canonical(k, dt.keyType), canonical(v, dt.valueType)) for k, v in value]
        return sorted(items, key=lambda kv: order_key(kv[0]))
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

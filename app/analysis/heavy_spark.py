"""The heaviest keys of :mod:`app.analysis.heavy` as a Spark SQL query: keys weighed where Spark runs, only
each partition's top keys come back.

Spark's ``statestore`` source returns decoded rows, not the bytes the state store holds, so the weight
of a key is computed from its decoded values: the size of its **UnsafeRow** encoding (docs/format.md §5),
which is exactly what an HDFS-backed store, or a RocksDB store without column families, holds for the key
and the value (native readers strip RocksDB's version byte; a row checksum is not part of the weight):

* a row of ``n`` fields: a null bitset of ``ceil(n / 64)`` words, one 8-byte slot per field, then the
  variable-length part of each non-null field: strings and binaries rounded up to 8 bytes, a nested
  struct its own row, an array or map its own encoding; a calendar interval and a decimal of precision
  above 18 always take 16 bytes (even when null: Spark keeps room to update them in place);
* an array of ``m`` elements: 8 bytes (its length), a null bitset of ``ceil(m / 64)`` words, the
  elements' fixed part (``m`` times the element size: 1, 2, 4 or 8 bytes for primitives, an 8-byte
  offset and size for the others) rounded up to 8, then each non-null element's variable part;
* a map: 8 bytes, then its key array and its value array.

Each key's weight is computed exactly (the tests compare every key of several stores with the native
decoder). Of keys tied in weight at a partition's cut, Spark keeps the smallest JSON text of the key;
the native decoder the smallest key bytes: the sizes and the keys above the cut are the same, the keys
chosen among equal weights at the cut may differ. Stores whose weight is not the UnsafeRow size
(transformWithState's column families, Avro rows, lists and maps weighed per grouping key, state
format 4 joins) and types outside the formula (decimals above 18 digits inside arrays or maps,
variants) are weighed natively.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from statelens.readers.backends.spark import unique_struct
from statelens.readers.model import Progress

_PRIMITIVE_SIZES = {
    "BooleanType": 1,
    "ByteType": 1,
    "ShortType": 2,
    "IntegerType": 4,
    "FloatType": 4,
    "DateType": 4,
    "YearMonthIntervalType": 4,
    "LongType": 8,
    "DoubleType": 8,
    "TimestampType": 8,
    "TimestampNTZType": 8,
    "DayTimeIntervalType": 8,
    "NullType": 8,
}


def _round8(expr: str) -> str:
    return f"((({expr}) + 7) DIV 8 * 8)"


def _fixed(dt: Any) -> bool:
    """A type held entirely in its 8-byte slot of a row."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, T.DecimalType):
        return dt.precision <= 18
    return type(dt).__name__ in _PRIMITIVE_SIZES


def row_size_sql(struct: Any, unique: Any, expr: str) -> str | None:
    """Spark SQL for the UnsafeRow size in bytes of the non-null struct ``expr`` of type ``struct``, whose
    field names in the query are those of ``unique`` (the same type with repeated names made unique);
    None when a type is outside the formula."""
    n = len(struct.fields)
    parts = [str(((n + 63) // 64) * 8 + 8 * n)]
    for f, u in zip(struct.fields, unique.fields, strict=True):
        var = _var_sql(f.dataType, u.dataType, f"{expr}.`{u.name}`", in_row=True)
        if var is None:
            return None
        if var != "0":
            parts.append(var)
    return "(" + " + ".join(parts) + ")"


def _var_sql(dt: Any, unique: Any, expr: str, in_row: bool) -> str | None:
    """The bytes a value of type ``dt`` takes after the fixed part of its row or array (0 when none)."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if _fixed(dt):
        return "0"
    if isinstance(dt, T.DecimalType):  # precision above 18: 16 bytes reserved in a row, even when null
        return "16" if in_row else None
    if isinstance(dt, (T.StringType, T.CharType, T.VarcharType)):
        return f"coalesce({_round8(f'octet_length({expr})')}, 0)"
    if isinstance(dt, T.BinaryType):
        return f"coalesce({_round8(f'length({expr})')}, 0)"
    if isinstance(dt, T.CalendarIntervalType):  # a row reserves its 16 bytes even when null (updatable)
        return "16" if in_row else f"(CASE WHEN {expr} IS NULL THEN 0 ELSE 16 END)"
    if isinstance(dt, T.StructType):
        inner = row_size_sql(dt, unique, expr)
        return None if inner is None else f"(CASE WHEN {expr} IS NULL THEN 0 ELSE {inner} END)"
    if isinstance(dt, T.ArrayType):
        inner = _array_sql(dt.elementType, unique.elementType, expr)
        return None if inner is None else f"(CASE WHEN {expr} IS NULL THEN 0 ELSE {inner} END)"
    if isinstance(dt, T.MapType):
        keys = _array_sql(dt.keyType, unique.keyType, f"map_keys({expr})")
        values = _array_sql(dt.valueType, unique.valueType, f"map_values({expr})")
        if keys is None or values is None:
            return None
        return f"(CASE WHEN {expr} IS NULL THEN 0 ELSE 8 + {keys} + {values} END)"
    return None


def _array_sql(element: Any, unique: Any, expr: str) -> str | None:
    """The UnsafeArrayData size of the non-null array ``expr``."""
    n = f"size({expr})"
    width = _PRIMITIVE_SIZES.get(type(element).__name__, 8)
    parts = [f"8 + (({n} + 63) DIV 64) * 8", _round8(f"{width} * {n}")]
    if not _fixed(element):
        var = _var_sql(element, unique, "x", in_row=False)
        if var is None:
            return None
        parts.append(f"aggregate(transform({expr}, x -> CAST({var} AS BIGINT)), 0L, (a, b) -> a + b)")
    return "(" + " + ".join(parts) + ")"


#: The heaviest keys of each partition: {state} is the store's rows at one version (``p, key, value``).
_TOP = """
WITH w AS (SELECT p, key, CAST(<KEY_SIZE> + <VALUE_SIZE> AS BIGINT) AS b FROM {state}),
r AS (
  SELECT p, key, b, row_number() OVER (PARTITION BY p ORDER BY b DESC, to_json(key)) AS rn,
         count(*) OVER (PARTITION BY p) AS keys
  FROM w
)
SELECT p, key, b, keys FROM r WHERE rn <= <N> ORDER BY p, rn
"""

#: Every key's weight (the tests compare them with the native decoder's).
_ALL = "SELECT p, key, CAST(<KEY_SIZE> + <VALUE_SIZE> AS BIGINT) AS b FROM {state}"


def weight_sql(schema: Any) -> tuple[str, str] | None:
    """``(key size, value size)`` as Spark SQL over the ``key``/``value`` columns of
    :meth:`readers.backends.spark_engine.SparkFrames.state`; None when a type is outside the formula."""

    key = row_size_sql(schema.key_schema, unique_struct(schema.key_schema), "key")
    value = row_size_sql(schema.value_schema, unique_struct(schema.value_schema), "value")
    if key is None or value is None:
        return None
    return key, f"(CASE WHEN value IS NULL THEN 0 ELSE {value} END)"


def _sql(text: str, sizes: tuple[str, str], n: int = 0) -> str:
    return text.replace("<KEY_SIZE>", sizes[0]).replace("<VALUE_SIZE>", sizes[1]).replace("<N>", str(n))


def top_keys_in_spark(
    backend: Any, operator_id: int, store_name: str, version: int, sizes: tuple[str, str], n: int
) -> Generator[Progress, None, list[tuple[int, Any, int, int]]]:
    """Each partition's ``n`` heaviest keys at ``version``, weighed in Spark: ``(partition, key, bytes,
    keys in the partition)``, heaviest first within a partition. Raises StatelensError when Spark cannot
    read the store or run the query."""
    yield Progress(0, 1, f"heaviest keys: operator {operator_id} {store_name} in Spark")
    rows = backend.engine.query(
        f"heaviest keys of operator {operator_id} {store_name}",
        lambda f: {"state": f.state(operator_id, store_name, version)},
        _sql(_TOP, sizes, n),
        ["p", "key", "b", "keys"],
    )
    return [(int(p), key, int(b), int(keys)) for p, key, b, keys in rows]


def key_weights_in_spark(
    backend: Any, operator_id: int, store_name: str, version: int, sizes: tuple[str, str]
) -> list[tuple[int, Any, int]]:
    """Every key's weight at ``version``: ``(partition, key, bytes)`` (for tests: all of them come back)."""
    rows = backend.engine.query(
        "key weights",
        lambda f: {"state": f.state(operator_id, store_name, version)},
        _sql(_ALL, sizes),
        ["p", "key", "b"],
    )
    return [(int(p), key, int(b)) for p, key, b in rows]

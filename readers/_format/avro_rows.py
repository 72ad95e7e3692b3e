"""Avro-encoded state rows (``spark.sql.streaming.stateStore.encodingFormat=avro``, docs/format.md §4.3, §7.7.4).

Spark's ``AvroStateEncoder`` writes each key or value row as Avro binary of a record built from the
row's Spark schema, after the state encoding version byte ``00`` and a ``schemaId:u16 LE`` (the schema id
of the column family in the v3 schema file); the prefix part of a prefix-scan key has no schema id.

The Avro writer schema follows Spark's ``SchemaConverters.toAvroTypeWithDefaults``: every top-level field
is a union ``["null", T]``, nested fields are unions when nullable. Verified byte for byte against Spark
4.3.0's reader on a transformWithStateInPandas checkpoint (value, list and map state). The binary
decoding itself is ``fastavro``'s.
"""

from __future__ import annotations

import io
import itertools
import struct
from typing import Any

from statelens.readers.errors import CorruptFileError, StatelensError, UnsupportedVersionError

__all__ = ["avro_schema", "decode_avro", "split_schema_id"]

_U16_LE = struct.Struct("<H")
_names = itertools.count()


def _avro_type(dt: Any, path: str) -> Any:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, T.BooleanType):
        return "boolean"
    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.DateType)):
        return "int"
    if isinstance(dt, (T.LongType, T.TimestampType, T.TimestampNTZType)):
        return "long"  # microseconds, as the UnsafeRow decoder returns them
    if isinstance(dt, T.FloatType):
        return "float"
    if isinstance(dt, T.DoubleType):
        return "double"
    if isinstance(dt, T.StringType):
        return "string"
    if isinstance(dt, T.BinaryType):
        return "bytes"
    if isinstance(dt, T.NullType):
        return "null"
    if isinstance(dt, T.StructType):
        return _record(dt, path, top=False)
    if isinstance(dt, T.ArrayType):
        item = _avro_type(dt.elementType, path)
        if not dt.containsNull and _takes_no_bytes(item):
            # A block count alone would make any number of elements (2**62 from 10 bytes): refused, so
            # that every element decoded costs at least one byte of the row.
            raise UnsupportedVersionError(
                f"Avro-encoded state with a {dt.simpleString()} column (elements of no bytes) is not decoded "
                "natively; use --backend spark",
                path,
            )
        return {"type": "array", "items": ["null", item] if dt.containsNull else item}
    raise UnsupportedVersionError(
        f"Avro-encoded state with a {dt.simpleString()} column is not decoded natively; use --backend spark",
        path,
    )


def _takes_no_bytes(avro_type: Any) -> bool:
    """Values of this Avro type are encoded in zero bytes: ``null``, or records of such fields only."""
    if avro_type == "null":
        return True
    return (
        isinstance(avro_type, dict)
        and avro_type.get("type") == "record"
        and all(_takes_no_bytes(f["type"]) for f in avro_type["fields"])
    )


def _record(schema: Any, path: str, top: bool) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for f in schema.fields:
        t = _avro_type(f.dataType, path)
        if t == "null":
            fields.append({"name": f"f{len(fields)}", "type": "null"})
        elif top or f.nullable:
            fields.append({"name": f"f{len(fields)}", "type": ["null", t], "default": None})
        else:
            fields.append({"name": f"f{len(fields)}", "type": t})
    return {"type": "record", "name": f"r{next(_names)}", "fields": fields}


def avro_schema(schema: Any, path: str) -> Any:
    """The parsed Avro writer schema of rows of a Spark ``StructType``."""
    from fastavro import parse_schema  # deferred: fastavro (slow import)

    return parse_schema(_record(schema, path, top=True))


def _to_tuple(value: Any, dt: Any) -> Any:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if value is None:
        return None
    if isinstance(dt, T.StructType):
        return tuple(_to_tuple(value[f"f{i}"], f.dataType) for i, f in enumerate(dt.fields))
    if isinstance(dt, T.ArrayType):
        return [_to_tuple(v, dt.elementType) for v in value]
    return value


def split_schema_id(row: bytes, path: str) -> tuple[int, bytes]:
    """``schemaId:u16 LE`` + Avro bytes (after the version byte) -> ``(schema id, Avro bytes)``."""
    if len(row) < 2:
        raise CorruptFileError(f"Avro row of {len(row)} bytes has no schema id", path)
    return _U16_LE.unpack_from(row)[0], row[2:]


def decode_avro(rows: list[bytes], schema: Any, path: str) -> list[tuple[Any, ...]]:
    """Decode Avro binary rows (no version byte, no schema id) of one Spark schema into tuples.

    Raises
    ------
    CorruptFileError
        Bytes that are not Avro of this schema, or that do not end where the record does.
    """
    from fastavro import schemaless_reader  # deferred: fastavro (slow import)

    parsed = avro_schema(schema, path)
    out: list[tuple[Any, ...]] = []
    for n, row in enumerate(rows):
        buf = io.BytesIO(row)
        try:
            record = schemaless_reader(buf, parsed, None)
        except StatelensError:
            raise
        except Exception as err:  # noqa: BLE001 - fastavro raises EOFError, ValueError, IndexError...
            raise CorruptFileError(
                f"Avro row {n} ({row[:12].hex(' ')}...) does not decode: {err}", path
            ) from err
        if buf.tell() != len(row):
            raise CorruptFileError(
                f"Avro row {n} ends after {buf.tell()} of its {len(row)} bytes: not written with this schema",
                path,
            )
        out.append(_to_tuple(record, schema))
    return out

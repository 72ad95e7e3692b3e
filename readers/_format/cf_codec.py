"""Column family keys and values of RocksDB stores with virtual column families (transformWithState,
join state formats 3 and 4): version bytes, prefix keys, every key encoder Spark writes, UnsafeRow or Avro
rows (``docs/format.md`` §4). Used by the RocksDB store reader (:mod:`readers._format.rocksdb_store`) and by a
family read as a store (:mod:`readers._format.cf_store`), and importing neither.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import numpy as np

from statelens.readers._format.avro_rows import decode_avro, split_schema_id
from statelens.readers._format.unsaferow import compile_layout, decode_rows
from statelens.readers.errors import CorruptFileError, UnsupportedVersionError


class FamilySpec(Protocol):
    """What decoding needs of a column family (:class:`readers._format.rocksdb_store.ColumnFamily`)."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> Any: ...

    @property
    def encoder(self) -> str: ...


STATE_ENCODING_VERSION = 0
_I32_LE = struct.Struct("<i")
_U16_LE = struct.Struct("<H")
_POSITION = struct.Struct(">I")  # element position appended to flat keys of multi-value families
_SIGN = 1 << 63
_NEGATIVE, _POSITIVE, _NULL = 0, 1, 2


def strip_version(row: bytes, path: str) -> bytes:
    """The UnsafeRow after the state encoding version byte ``00``."""
    if not row or row[0] != STATE_ENCODING_VERSION:
        raise CorruptFileError(
            f"row {row[:12].hex(' ')}... does not start with the state encoding version byte 00", path
        )
    return row[1:]


def split_prefix_key(key: bytes, path: str) -> tuple[bytes, bytes]:
    """``len:i32 LE`` + ``00`` + first row + ``00`` + second row -> the two rows (second may be empty)."""
    if len(key) < 4:
        raise CorruptFileError(f"prefix/range-scan key of {len(key)} bytes has no length word", path)
    size = _I32_LE.unpack_from(key, 0)[0]
    if size < 1 or 4 + size > len(key):
        raise CorruptFileError(
            f"prefix/range-scan key declares a {size}-byte prefix in {len(key) - 4} bytes", path
        )
    rest = key[4 + size :]
    return strip_version(key[4 : 4 + size], path), (strip_version(rest, path) if rest else b"")


def decode_all(rows: list[bytes], schema: Any, path: str) -> list[tuple[Any, ...]]:
    """Decode UnsafeRows of one schema, column-wise."""
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(rows) else lens
    return list(decode_rows(b"".join(rows), starts, lens, compile_layout(schema), path=path))


def _range_value(raw: bytes | None, data_type: Any, path: str) -> Any:
    """One ordering column of a range-scan key: marker byte + big-endian value (docs/format.md §4.3)."""
    from pyspark.sql.types import (  # deferred: pyspark (heavy)
        ByteType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        ShortType,
        TimestampType,
    )

    if raw is None or not raw:
        raise CorruptFileError("range-scan column without its marker byte", path)
    marker, body = raw[0], raw[1:]
    if marker == _NULL:
        return None
    if marker not in (_NEGATIVE, _POSITIVE):
        raise CorruptFileError(f"range-scan column has marker {marker:02x} (expected 00, 01 or 02)", path)
    sizes = {
        ByteType: 1,
        ShortType: 2,
        IntegerType: 4,
        LongType: 8,
        TimestampType: 8,
        FloatType: 4,
        DoubleType: 8,
    }
    size = sizes.get(type(data_type))
    if size is None:
        raise UnsupportedVersionError(
            f"range-scan ordering column of type {data_type.simpleString()} is not decoded natively; "
            "use --backend spark",
            path,
        )
    if len(body) < size:
        raise CorruptFileError(
            f"range-scan {data_type.simpleString()} column has {len(body)} of {size} bytes", path
        )
    body = body[:size]
    if isinstance(data_type, (FloatType, DoubleType)):
        bits = int.from_bytes(body, "big")
        if marker == _NEGATIVE:
            bits ^= (1 << (8 * size)) - 1
        fmt = ">f" if size == 4 else ">d"
        return struct.unpack(fmt, bits.to_bytes(size, "big"))[0]
    return int.from_bytes(body, "big", signed=True)


def _spec_int(value: Any, what: str, family: str, path: str) -> int:
    """An integer of a key encoder spec: the spec is JSON of the schema file, text or 1e400 there is damage."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptFileError(
            f"key encoder spec of column family {family!r} has {what} {str(value)[:40]}, not an integer", path
        )
    return value


def decode_values(rows: list[bytes], schema: Any, path: str, avro: bool = False) -> list[tuple[Any, ...]]:
    """Decode value rows (version byte removed): UnsafeRows, or ``schemaId`` + Avro with ``avro``."""
    if not avro:
        return decode_all(rows, schema, path)

    return decode_avro([split_schema_id(r, path)[1] for r in rows], schema, path)


def decode_keys(
    family: FamilySpec, keys: list[bytes], path: str, avro: bool = False
) -> list[tuple[Any, ...]]:
    """Decode column family keys (``cfId`` removed) into tuples in the key schema's column order.

    With ``avro`` the rows are Avro-encoded (docs/format.md §4.3): a schema id after each version byte, except in
    the prefix part of a prefix-scan key and the ordering part of a range-scan key (a record of
    ``<col>_marker`` / ``<col>_value`` byte pairs, verified on Spark 4.3.0 files).
    """
    from pyspark.sql.types import BinaryType, StructField, StructType  # deferred: pyspark (heavy)

    schema = family.schema
    fields = list(schema.key_schema.fields)
    encoder = family.encoder
    if avro and encoder not in (
        "NoPrefixKeyStateEncoderSpec",
        "PrefixKeyScanStateEncoderSpec",
        "RangeKeyScanStateEncoderSpec",
    ):
        raise UnsupportedVersionError(
            f"Avro-encoded {encoder} keys (column family {family.name!r}) are not decoded natively; "
            "use --backend spark",
            path,
        )
    if encoder == "NoPrefixKeyStateEncoderSpec":
        return decode_values([strip_version(k, path) for k in keys], schema.key_schema, path, avro)
    if encoder == "PrefixKeyScanStateEncoderSpec":
        n = _spec_int(
            (schema.key_encoder or {}).get("numColsPrefixKey", 1), "numColsPrefixKey", family.name, path
        )
        if not 1 <= n <= len(fields):
            raise CorruptFileError(
                f"prefix-scan numColsPrefixKey {n} outside the {len(fields)}-column key", path
            )
        split = [split_prefix_key(k, path) for k in keys]
        if avro:
            firsts = decode_avro([a for a, _ in split], StructType(fields[:n]), path)
        else:
            firsts = decode_all([a for a, _ in split], StructType(fields[:n]), path)
        rests = decode_values([b for _, b in split], StructType(fields[n:]), path, avro)
        return [a + b for a, b in zip(firsts, rests, strict=True)]
    if encoder == "RangeKeyScanStateEncoderSpec":
        listed = (schema.key_encoder or {}).get("orderingOrdinals", [0])
        if not isinstance(listed, list):
            raise CorruptFileError(
                f"range-scan orderingOrdinals {str(listed)[:40]} of {family.name!r} is not a list", path
            )
        ordinals = [_spec_int(o, "orderingOrdinals", family.name, path) for o in listed]
        if any(o < 0 or o >= len(fields) for o in ordinals):
            raise CorruptFileError(
                f"range-scan ordinals {ordinals} outside the {len(fields)}-column key", path
            )
        if len(set(ordinals)) != len(ordinals) or not ordinals:
            raise CorruptFileError(
                f"range-scan ordinals {ordinals[:8]} name no column or one column twice", path
            )
        others = [i for i in range(len(fields)) if i not in ordinals]
        split = [split_prefix_key(k, path) for k in keys]
        if avro:  # the ordering part: a record of (<col>_marker bytes, <col>_value bytes) pairs, no schema id
            pairs = StructType(
                [
                    StructField(f"{fields[o].name}_{part}", BinaryType())
                    for o in ordinals
                    for part in ("marker", "value")
                ]
            )
            ordered = [
                tuple(
                    (m or b"") + (v or b"") if m is not None else None
                    for m, v in zip(row[::2], row[1::2], strict=True)
                )
                for row in decode_avro([a for a, _ in split], pairs, path)
            ]
        else:
            binary = StructType([StructField(fields[o].name, BinaryType()) for o in ordinals])
            ordered = decode_all([a for a, _ in split], binary, path)
        rest_schema = StructType([fields[i] for i in others])
        rests = decode_values([b for _, b in split], rest_schema, path, avro) if others else []
        out: list[tuple[Any, ...]] = []
        for n, raw_cols in enumerate(ordered):
            row: list[Any] = [None] * len(fields)
            for o, raw in zip(ordinals, raw_cols, strict=True):
                row[o] = _range_value(raw, fields[o].dataType, path)
            for i, value in zip(others, rests[n] if others else (), strict=True):
                row[i] = value
            out.append(tuple(row))
        return out
    if encoder in ("TimestampAsPostfixKeyStateEncoderSpec", "TimestampAsPrefixKeyStateEncoderSpec"):
        postfix = encoder.startswith("TimestampAsPostfix")
        key_rows: list[bytes] = []
        times: list[int] = []
        for k in keys:
            if len(k) < 9:
                raise CorruptFileError(
                    f"timestamp-keyed key of {len(k)} bytes has no 8-byte event time", path
                )
            if postfix:
                stamp, key_row = k[-8:], strip_version(k[:-8], path)
            else:
                stamp, key_row = k[:8], strip_version(k[8:], path)
            unsigned = int.from_bytes(stamp, "big") ^ _SIGN
            times.append(unsigned - (1 << 64) if unsigned >= _SIGN else unsigned)
            key_rows.append(key_row)
        decoded = decode_all(key_rows, StructType(fields[:-1]), path)
        return [d + (t,) for d, t in zip(decoded, times, strict=True)]
    raise UnsupportedVersionError(
        f"column family {family.name!r} uses key encoder {encoder}, which the native decoder does not know; "
        "use --backend spark",
        path,
    )

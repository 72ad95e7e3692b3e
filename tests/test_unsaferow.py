"""UnsafeRow decoding (``readers/_format/unsaferow.py``) on real bytes written by Spark.

* Every line of the verified dump in ``docs/format.md`` §6.5 (Spark 4.1.1
  ``UnsafeProjection``), decoded by both the single-row and the columnar decoder.
* A few rows captured from PySpark 4.3.0 (``SparkPlan.executeCollect`` returns the UnsafeRows Spark
  itself builds) for types the dump lacks: variant, geography, time, array<void>, decimal(38,0).
* Corruption: real rows cut short or given absurd offsets, sizes and element counts must raise
  ``SchemaMismatchError`` naming file, record and field; random mutations never raise anything else.
* With Spark (``-m spark``): rows Spark builds for every type, compared with what Spark returns for the
  same rows, and every state row of the ``rich_types`` checkpoint compared with Spark's ``statestore``.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from statelens.readers._format import unsaferow as unsaferow_module
from statelens.readers._format.unsaferow import Kind, compile_layout, decode_row, decode_rows
from statelens.readers.errors import SchemaMismatchError, StatelensError
from statelens.readers.model import CalendarInterval


def hexrow(text: str) -> bytes:
    """Bytes from the spec's dump notation: hex pairs, ``|`` separators, ``00×8`` for 8 zero bytes."""
    out = bytearray()
    for tok in text.replace("|", " ").split():
        if "×" in tok:
            byte, count = tok.split("×")
            out += bytes([int(byte, 16)]) * int(count)
        else:
            out.append(int(tok, 16))
    return bytes(out)


class PointUDT(T.UserDefinedType):
    """A user-defined type stored as ``struct<x: double, y: double, tags: array<int>>`` (decoded by sqlType)."""

    @classmethod
    def sqlType(cls) -> T.StructType:  # noqa: N802 - PySpark's name
        return T.StructType(
            [
                T.StructField("x", T.DoubleType()),
                T.StructField("y", T.DoubleType()),
                T.StructField("tags", T.ArrayType(T.IntegerType())),
            ]
        )

    @classmethod
    def module(cls) -> str:
        return "tests"


def one(dt: T.DataType, name: str = "c") -> T.StructType:
    return T.StructType([T.StructField(name, dt)])


# ---------------------------------------------------------------------------------------------------
# Spec §6.5: verified dump (Spark 4.1.1), verbatim

DUMP: list[tuple[str, T.StructType, str, tuple[Any, ...]]] = [
    ("bool true", one(T.BooleanType()), "00×8 | 01 00 00 00 00 00 00 00", (True,)),
    ("byte -2", one(T.ByteType()), "00×8 | fe 00 00 00 00 00 00 00", (-2,)),
    ("short 513", one(T.ShortType()), "00×8 | 01 02 00 00 00 00 00 00", (513,)),
    ("int -1", one(T.IntegerType()), "00×8 | ff ff ff ff 00 00 00 00", (-1,)),
    ("long 0x0102030405060708", one(T.LongType()), "00×8 | 08 07 06 05 04 03 02 01", (0x0102030405060708,)),
    ("float 1.5", one(T.FloatType()), "00×8 | 00 00 c0 3f 00 00 00 00", (1.5,)),
    ("double 1.5", one(T.DoubleType()), "00×8 | 00 00 00 00 00 00 f8 3f", (1.5,)),
    ("date 2024-01-02", one(T.DateType()), "00×8 | 0c 4d 00 00 00 00 00 00", (19724,)),
    ("timestamp", one(T.TimestampType()), "00×8 | 40 22 20 18 24 0a 06 00", (1700000000123456,)),
    ("timestamp_ntz", one(T.TimestampNTZType()), "00×8 | 40 22 20 18 24 0a 06 00", (1700000000123456,)),
    (
        "decimal(10,2) 123.45",
        one(T.DecimalType(10, 2)),
        "00×8 | 39 30 00 00 00 00 00 00",
        (Decimal("123.45"),),
    ),
    (
        "decimal(30,5) big",
        one(T.DecimalType(30, 5)),
        "00×8 | 0b 00 00 00 10 00 00 00 | 01 05 6e 0f 36 a6 44 3d e2 df 79 00 00 00 00 00",
        (Decimal("12345678901234567890.12345"),),
    ),
    (
        "decimal(30,5) -1.00000",
        one(T.DecimalType(30, 5)),
        "00×8 | 03 00 00 00 10 00 00 00 | fe 79 60 00×13",
        (Decimal("-1.00000"),),
    ),
    ("null decimal(38,0)", one(T.DecimalType(38, 0)), "01 00×7 | 00 00 00 00 10 00 00 00 | 00×16", (None,)),
    (
        "interval 1mon 2d 3us",
        one(T.CalendarIntervalType()),
        "00×8 | 10 00 00 00 10 00 00 00 | 01 00 00 00 02 00 00 00 03 00 00 00 00 00 00 00",
        (CalendarInterval(1, 2, 3),),
    ),
    ("day-time", one(T.DayTimeIntervalType()), "00×8 | 00 60 d7 1d 14 00 00 00", (86400000000,)),
    ("year-month", one(T.YearMonthIntervalType()), "00×8 | 0e 00 00 00 00 00 00 00", (14,)),
    (
        "struct<a:int,b:string>",
        one(T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.StringType())])),
        "00×8 | 20 00 00 00 10 00 00 00 | 00×8 05 00 00 00 00 00 00 00 01 00 00 00 18 00 00 00 78 00×7",
        ((5, "x"),),
    ),
    (
        "array<int>",
        one(T.ArrayType(T.IntegerType())),
        "00×8 | 20 00 00 00 10 00 00 00 | 03 00×7 02 00×7 01 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00",
        ([1, None, 3],),
    ),
    (
        "array<string>",
        one(T.ArrayType(T.StringType())),
        "00×8 | 38 00 00 00 10 00 00 00 | 03 00×7 02 00×7 02 00 00 00 28 00 00 00 00×8 03 00 00 00 30 00 00 00 "
        "61 62 00×6 63 64 65 00×5",
        (["ab", None, "cde"],),
    ),
    (
        "map<string,int>",
        one(T.MapType(T.StringType(), T.IntegerType())),
        "00×8 | 50 00 00 00 10 00 00 00 | 30 00×7 | 02 00×7 00×8 01 00 00 00 20 00 00 00 02 00 00 00 28 00 00 00 "
        "61 00×7 62 63 00×6 | 02 00×7 00×8 01 00 00 00 02 00 00 00",
        ([("a", 1), ("bc", 2)],),
    ),
    (
        "five fields",
        T.StructType(
            [
                T.StructField("a", T.IntegerType()),
                T.StructField("s", T.StringType()),
                T.StructField("l", T.LongType()),
                T.StructField("d", T.DoubleType()),
                T.StructField("b", T.BooleanType()),
            ]
        ),
        "08 00×7 | 01 00×7 | 0a 00 00 00 30 00 00 00 | 2a 00×7 | 00×8 | 01 00×7 | 61 62 63 64 65 66 67 68 69 6a 00×6",
        (1, "abcdefghij", 42, None, True),
    ),
]

# Rows captured from PySpark 4.3.0 (SparkPlan.executeCollect of a one-row SELECT), for types §6.5 lacks.
CAPTURED: list[tuple[str, T.StructType, str, tuple[Any, ...]]] = [
    (
        # parse_json('{"a":[1,"x"]}'): payload = value length (i32 LE) + value + metadata, kept opaque
        "variant",
        one(T.VariantType()),
        "00×8 17 00 00 00 10 00 00 00 0e 00 00 00 02 01 00 00 09 03 02 00 02 04 0c 01 05 78 01 01 00 01 61 00",
        (bytes.fromhex("0e000000020100000903020002040c0105780101000161"),),
    ),
    (
        # st_geogfromwkb(POINT(1 2)): payload = srid (i32 LE) + WKB
        "geography",
        one(T.GeographyType(4326)),
        "00×8 19 00 00 00 10 00 00 00 e6 10 00 00 01 01 00 00 00 00 00 00 00 00 00 f0 3f "
        "00 00 00 00 00 00 00 40 00×7",
        (bytes.fromhex("e61000000101000000000000000000f03f0000000000000040"),),
    ),
    # time'12:34:56.123456': int64 nanoseconds since midnight
    ("time", one(T.TimeType(6)), "00×8 00 2a 59 53 32 29 00 00", (45296123456000,)),
    # array(null, null): void elements take 8 bytes each
    (
        "array<void>",
        one(T.ArrayType(T.NullType())),
        "00×8 20 00 00 00 10 00 00 00 02 00×7 03 00×7 00×16",
        ([None, None],),
    ),
    (
        "decimal(38,0) 1 and null",
        T.StructType([T.StructField("d", T.DecimalType(38, 0)), T.StructField("n", T.DecimalType(38, 0))]),
        "02 00×7 01 00 00 00 18 00 00 00 00 00 00 00 28 00 00 00 01 00×15 00×16",
        (Decimal(1), None),
    ),
]

ALL_ROWS = DUMP + CAPTURED


def _framed(rows: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Rows as in an HDFS delta: each behind a 4-byte big-endian size (so rows are not 8-aligned)."""
    parts, starts, pos = [], [], 0
    for r in rows:
        parts += [struct.pack(">i", len(r)), r]
        starts.append(pos + 4)
        pos += 4 + len(r)
    parts.append(b"\xff\xff\xff\xff")
    return b"".join(parts), np.array(starts), np.array([len(r) for r in rows])


@pytest.mark.parametrize(("name", "schema", "hex_", "expected"), ALL_ROWS, ids=[r[0] for r in ALL_ROWS])
def test_real_row_decodes(name: str, schema: T.StructType, hex_: str, expected: tuple[Any, ...]) -> None:
    data = hexrow(hex_)
    assert len(data) % 8 == 0
    layout = compile_layout(schema)
    assert decode_row(data, 0, len(data), layout) == expected
    assert decode_rows(data, [0], [len(data)], layout) == [expected]
    # Same bytes inside a larger buffer, unaligned, several times, from each supported buffer type.
    buf, starts, lengths = _framed([data] * 3)
    for b in (buf, bytearray(buf), memoryview(buf), np.frombuffer(buf, dtype=np.uint8)):
        assert decode_rows(b, starts, lengths, layout) == [expected] * 3
        assert decode_row(b, int(starts[1]), len(data), layout) == expected


def test_decimals_keep_their_scale() -> None:
    (small,) = decode_row(hexrow(DUMP[10][2]), 0, 16, compile_layout(DUMP[10][1]))
    (big,) = decode_row(hexrow(DUMP[12][2]), 0, 32, compile_layout(DUMP[12][1]))
    assert str(small) == "123.45"
    assert str(big) == "-1.00000"
    assert big.as_tuple().exponent == -5


def test_spec_dedup_record() -> None:
    """The decoded 1.delta of docs/format.md §3.3: key user='a', value ``__dummy__ void`` (always null)."""
    key = hexrow("00×8 | 01 00 00 00 10 00 00 00 | 61 00×7")
    value = hexrow("01 00×7 | 00×8")
    assert decode_row(key, 0, 24, compile_layout(one(T.StringType(), "user"))) == ("a",)
    assert decode_row(value, 0, 16, compile_layout(one(T.NullType(), "__dummy__"))) == (None,)
    assert decode_rows(value, [0], [16], compile_layout(one(T.NullType(), "__dummy__"))) == [(None,)]


def test_hdfs_value_size_quirk() -> None:
    """Spark < 2.3 appended 4 stray bytes to values; callers pass floor(len/8)*8 and it must decode."""
    row = hexrow(DUMP[4][2]) + b"\xde\xad\xbe\xef"
    layout = compile_layout(DUMP[4][1])
    assert decode_row(row, 0, (len(row) // 8) * 8, layout) == (0x0102030405060708,)
    assert decode_rows(row, [0], [(len(row) // 8) * 8], layout) == [(0x0102030405060708,)]


def _fmgws_v1_long_fields(value_schema: T.StructType) -> frozenset[int]:
    """What the checkpoint reader passes as ``long_fields`` for a flatMapGroupsWithState store."""
    from statelens.readers.model import OperatorKind, StoreSchema
    from statelens.readers.operators import fmgws_v1_long_fields

    schema = StoreSchema.from_types(one(T.StringType(), "k"), value_schema, 1, "state/0/0/_metadata/schema")
    return fmgws_v1_long_fields(OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, schema)


def test_fmgws_v1_timeout_timestamp_is_a_long() -> None:
    """Spec §7.3: state format 1 declares ``timeoutTimestamp`` integer but Spark writes it with setLong."""
    schema = T.StructType(
        [
            T.StructField("count", T.LongType(), False),
            T.StructField("last", T.StringType()),
            T.StructField("timeoutTimestamp", T.IntegerType(), False),
        ]
    )
    ts = 1_704_067_295_000  # epoch ms: does not fit an int32
    row = b"\0" * 8 + struct.pack("<q", 1) + struct.pack("<II", 6, 32) + struct.pack("<q", ts) + b"last-5\0\0"
    long_fields = _fmgws_v1_long_fields(schema)
    assert long_fields == frozenset({2})
    fixed = compile_layout(schema, long_fields=long_fields)
    assert fixed.fields[2].type.kind == Kind.LONG
    assert decode_row(row, 0, len(row), fixed) == (1, "last-5", ts)
    assert decode_rows(row, [0], [len(row)], fixed) == [(1, "last-5", ts)]
    # Read as declared, the value is truncated to its low 32 bits: the bug the option exists for.
    assert (
        decode_row(row, 0, len(row), compile_layout(schema))[2]
        == struct.unpack("<i", struct.pack("<q", ts)[:4])[0]
    )
    assert _fmgws_v1_long_fields(one(T.LongType(), "timeoutTimestamp")) == frozenset()
    with pytest.raises(ValueError, match="not a field"):
        compile_layout(schema, long_fields={3})


def test_layout_is_compiled_once_and_sized_as_spark() -> None:
    def longs(n: int) -> T.StructType:
        return T.StructType([T.StructField(f"c{i}", T.LongType()) for i in range(n)])

    assert compile_layout(longs(3)) is compile_layout(longs(3))
    assert compile_layout(longs(3)) is not compile_layout(longs(3), long_fields={0})
    for n, bitset in [(0, 0), (1, 8), (64, 8), (65, 16), (128, 16), (129, 24)]:
        layout = compile_layout(longs(n))
        assert (layout.bitset_bytes, layout.fixed_size) == (bitset, bitset + 8 * n)
    # A row with no fields is 0 bytes long (docs/format.md §6.1).
    assert decode_row(b"", 0, 0, compile_layout(longs(0))) == ()
    assert decode_rows(b"", [0, 0], [0, 0], compile_layout(longs(0))) == [(), ()]
    assert decode_rows(b"", [], [], compile_layout(longs(1))) == []


def test_wide_row_null_bits_beyond_64() -> None:
    """A 70-field row has a 16-byte bitset; field 65's null bit is bit 1 of the second word."""
    schema = T.StructType([T.StructField(f"c{i}", T.IntegerType()) for i in range(70)])
    values = [None if i in (0, 63, 64, 65, 69) else i for i in range(70)]
    bits = sum(1 << i for i, v in enumerate(values) if v is None)
    row = bits.to_bytes(16, "little") + b"".join(struct.pack("<q", v or 0) for v in values)
    layout = compile_layout(schema)
    assert decode_row(row, 0, len(row), layout) == tuple(values)
    assert decode_rows(row, [0], [len(row)], layout) == [tuple(values)]


def test_types_decode_by_their_physical_kind() -> None:
    from pyspark.ml.linalg import VectorUDT

    udt = compile_layout(one(VectorUDT()))
    assert udt.fields[0].type.kind == Kind.STRUCT
    assert [f.type.kind for f in udt.fields[0].type.row.fields] == [
        Kind.BYTE,
        Kind.INT,
        Kind.ARRAY,
        Kind.ARRAY,
    ]
    kinds = {
        T.CharType(5): Kind.STRING,
        T.VarcharType(5): Kind.STRING,
        T.StringType("UTF8_LCASE"): Kind.STRING,
        T.VariantType(): Kind.BINARY,
        T.GeometryType(0): Kind.BINARY,
        T.DecimalType(18, 3): Kind.DECIMAL_LONG,
        T.DecimalType(19, 3): Kind.DECIMAL_BIG,
        T.NullType(): Kind.VOID,
    }
    for dt, kind in kinds.items():
        assert compile_layout(one(dt)).fields[0].type.kind == kind, dt
    # Collated strings decode exactly like plain ones.
    data = hexrow(DUMP[19][2])
    lcase = compile_layout(one(T.ArrayType(T.StringType("UTF8_LCASE"))))
    assert decode_row(data, 0, len(data), lcase) == (["ab", None, "cde"],)


def test_unknown_type_is_a_schema_mismatch() -> None:
    class Weird(T.DataType):
        pass

    with pytest.raises(SchemaMismatchError, match="'c' has type"):
        compile_layout(T.StructType([T.StructField("c", Weird())]))


def test_invalid_utf8_is_replaced_as_java_does() -> None:
    row = b"\0" * 8 + struct.pack("<II", 3, 16) + b"a\xffb" + b"\0" * 5
    layout = compile_layout(one(T.StringType()))
    assert decode_row(row, 0, 24, layout) == ("a\ufffdb",)
    assert decode_rows(row, [0], [24], layout) == [("a\ufffdb",)]


# ---------------------------------------------------------------------------------------------------
# Corruption of real rows

FIVE = DUMP[-1]
ARR_STR = DUMP[19]
MAP = DUMP[20]
BIG_DEC = DUMP[11]
INTERVAL = DUMP[14]
STRUCT = DUMP[17]
ARR_INT = DUMP[18]


def _patch(data: bytes, at: int, fmt: str, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def _word(offset: int, size: int) -> int:
    return (offset << 32) | size


CORRUPT: list[tuple[str, tuple[Any, ...], Any, str | None, str]] = [
    # (id, real row, mutation(bytes) -> (bytes, length), field named in the error, message fragment)
    ("shorter than fixed region", FIVE, lambda d: (d, 40), None, "needs at least 48 bytes"),
    ("cut inside the string", FIVE, lambda d: (d[:56], 56), "s", "outside"),
    (
        "string offset past the end",
        FIVE,
        lambda d: (_patch(d, 16, "<Q", _word(0xFFFFFFF0, 10)), len(d)),
        "s",
        "offset 4294967280",
    ),
    (
        "string size past the end",
        FIVE,
        lambda d: (_patch(d, 16, "<Q", _word(0x30, 0xFFFFFFFF)), len(d)),
        "s",
        "size 4294967295",
    ),
    (
        "string offset into the slots",
        FIVE,
        lambda d: (_patch(d, 16, "<Q", _word(8, 4)), len(d)),
        "s",
        "offset 8",
    ),
    ("empty buffer", FIVE, lambda d: (b"", 0), None, "needs at least 48"),
    (
        "array count absurd",
        ARR_INT,
        lambda d: (_patch(d, 16, "<q", 1 << 62), len(d)),
        "c",
        "claims 4611686018427387904",
    ),
    ("array count negative", ARR_INT, lambda d: (_patch(d, 16, "<q", -1), len(d)), "c", "claims -1 elements"),
    (
        "array count too big for its bytes",
        ARR_INT,
        lambda d: (_patch(d, 16, "<q", 6), len(d)),
        "c",
        "needs 40 bytes",
    ),
    (
        "array smaller than its header",
        ARR_INT,
        lambda d: (_patch(d, 8, "<Q", _word(16, 4)), len(d)),
        "c",
        "no room",
    ),
    (
        "array element offset absurd",
        ARR_STR,
        lambda d: (_patch(d, 32, "<Q", _word(0x7FFFFFFF, 2)), len(d)),
        "c[0]",
        "element",
    ),
    ("map key array absurd", MAP, lambda d: (_patch(d, 16, "<q", 1 << 40), len(d)), "c", "key array claims"),
    ("map key array negative", MAP, lambda d: (_patch(d, 16, "<q", -8), len(d)), "c", "key array claims -8"),
    (
        "map key array one byte over",
        MAP,
        lambda d: (_patch(d, 16, "<q", 73), len(d)),  # the map is 80 bytes: 8 of header, 72 of arrays
        "c",
        "key array claims 73 bytes, the map has 72 after its header",
    ),
    (
        "map key array takes every byte",
        MAP,
        lambda d: (_patch(d, 16, "<q", 72), len(d)),  # allowed: then the value array has no room
        "c{value}",
        "array of 0 bytes has no room",
    ),
    (
        "map smaller than its header",
        MAP,
        lambda d: (_patch(d, 8, "<Q", _word(16, 4)), len(d)),
        "c",
        "map of 4 bytes has no room for its 8-byte key-array size",
    ),
    (
        "map keys and values differ",
        MAP,
        lambda d: (_patch(d, 72, "<q", 1), len(d)),
        "c",
        "2 keys but 1 values",
    ),
    (
        "big decimal of 0 bytes",
        BIG_DEC,
        lambda d: (_patch(d, 8, "<Q", _word(16, 0)), len(d)),
        "c",
        "expected 1 to 16",
    ),
    (
        "big decimal of 17 bytes",
        BIG_DEC,
        lambda d: (_patch(d, 8, "<Q", _word(16, 17)) + bytes(8), 40),
        "c",
        "expected 1 to 16",
    ),
    ("interval cut", INTERVAL, lambda d: (_patch(d, 8, "<Q", _word(24, 8)), len(d)), "c", "needs 16 bytes"),
    (
        "nested row shorter than its slots",
        STRUCT,
        lambda d: (_patch(d, 8, "<Q", _word(16, 16)), len(d)),
        "c",
        "needs at least 24",
    ),
    (
        "nested string out of its row",
        STRUCT,
        lambda d: (_patch(d, 32, "<Q", _word(0x18, 100)), len(d)),
        "c.b",
        "outside",
    ),
]


@pytest.mark.parametrize(("name", "base", "mutate", "field", "message"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupt_row_raises_schema_mismatch(
    name: str, base: tuple[Any, ...], mutate: Any, field: str | None, message: str
) -> None:
    data, length = mutate(hexrow(base[2]))
    layout = compile_layout(base[1])
    path = "state/0/1/7.delta"
    with pytest.raises(SchemaMismatchError, match=message) as single:
        decode_row(data, 0, length, layout, path=path, record=5)
    # Inside a framed buffer as the second of three rows: the record index and offset are located.
    good = hexrow(base[2])
    buf, starts, lengths = _framed([good, data, good])
    lengths[1] = length
    with pytest.raises(SchemaMismatchError, match=message) as batch:
        decode_rows(buf, starts, lengths, layout, path=path, records=[10, 11, 12])
    for err, record, offset in ((single.value, 5, 0), (batch.value, 11, int(starts[1]))):
        assert err.path == path
        assert err.offset == offset
        assert err.context["record"] == record
        assert err.context.get("field") == field
        assert path in str(err)


def test_row_outside_the_buffer() -> None:
    data = hexrow(DUMP[4][2])
    layout = compile_layout(DUMP[4][1])
    for start, length in [(8, 16), (-1, 8), (0, -8)]:
        with pytest.raises(SchemaMismatchError, match="outside the 16-byte buffer"):
            decode_row(data, start, length, layout, path="p")
        with pytest.raises(SchemaMismatchError, match="outside the 16-byte buffer"):
            decode_rows(data, [start], [length], layout, path="p")
    with pytest.raises(ValueError, match="1 starts but 2 lengths"):
        decode_rows(data, [0], [16, 16], layout)


def _decode_both(data: bytes, length: int, layout: Any) -> Any:
    """Both decoders on the same bytes: equal values, or both a StatelensError."""
    try:
        one_row = ("ok", decode_row(data, 0, length, layout))
    except StatelensError as e:
        one_row = ("error", type(e))
    try:
        batch = ("ok", decode_rows(data, [0], [length], layout)[0])
    except StatelensError as e:
        batch = ("error", type(e))
    return one_row, batch


def _same(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but their reprs agree


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    row=st.sampled_from(ALL_ROWS),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 200),
)
def test_mutated_rows_never_raise_anything_else(
    row: tuple[Any, ...], edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(hexrow(row[2]))
    for at, value in edits:
        data[at % len(data)] = value
    layout = compile_layout(row[1])
    for length in (len(data), min(cut, len(data)), (len(data) // 8) * 8):
        one_row, batch = _decode_both(bytes(data), length, layout)
        assert one_row[0] == batch[0]
        assert _same(one_row[1], batch[1])


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=12),
    row=st.sampled_from([FIVE, ARR_STR, MAP, STRUCT, INTERVAL, BIG_DEC]),
)
def test_random_words_never_raise_anything_else(words: list[int], row: tuple[Any, ...]) -> None:
    """Rows made of random 64-bit words (absurd offsets, sizes and counts everywhere)."""
    data = b"".join(struct.pack("<Q", w) for w in words)
    one_row, batch = _decode_both(data, len(data), compile_layout(row[1]))
    assert one_row[0] == batch[0]
    assert _same(one_row[1], batch[1])


# ---------------------------------------------------------------------------------------------------
# With Spark: rows Spark builds, and a real checkpoint

_SQL_ROWS = [
    "SELECT id, CAST(id AS STRING) s, id % 3 = 0 b, CAST(id AS TINYINT) y, CAST(id AS SMALLINT) h, "
    "CAST(id * 1000 AS INT) i, id * 1.5D d, CAST(id AS FLOAT) / 3 f FROM range(-5, 70)",
    "SELECT IF(id % 2 = 0, NULL, id) a, IF(id % 3 = 0, NULL, CAST(id AS STRING)) b, "
    "IF(id % 5 = 0, NULL, named_struct('x', id, 'y', IF(id % 7 = 0, NULL, repeat('z', CAST(id AS INT))))) c "
    "FROM range(0, 50)",
    "SELECT CAST(id AS DECIMAL(10,2)) / 7 d1, CAST(id * 1234567 AS DECIMAL(30,5)) / 13 d2, "
    "IF(id % 4 = 0, NULL, CAST(-id AS DECIMAL(38,0))) d3, CAST(id AS DECIMAL(38,18)) d4, "
    "CAST(id AS DECIMAL(18,0)) * 99999999999999 d5 FROM range(-20, 20)",
    "SELECT TIMESTAMP'2024-01-01 00:00:05' + make_interval(0, 0, 0, CAST(id AS INT), 0, 0, 0) t, "
    "TIMESTAMP_NTZ'1900-01-01 00:00:00.000001' tn, DATE'0001-01-01' + CAST(id AS INT) dt, "
    "INTERVAL '1' DAY * id dti, INTERVAL '3' MONTH * id ymi FROM range(-3, 3)",
    "SELECT array(1, NULL, 3) a, array('ab', NULL, 'cde') b, map('a', 1, 'bc', 2) m, "
    "array(array(1L, 2L), NULL, array()) aa, map(1, array('x'), 2, NULL) ma FROM range(2)",
    "SELECT array(named_struct('p', 1.5D, 'q', 'x'), NULL) sa, "
    "array(CAST(1 AS DECIMAL(30,5)), NULL, CAST(-2.5 AS DECIMAL(30,5))) da, array(CAST(1.25 AS DECIMAL(10,2)), NULL) ds, "
    "array(true, false, NULL) ab, array(CAST(1 AS SMALLINT), NULL) ash, array(DATE'2020-01-01') adt, "
    "array(TIMESTAMP'2020-01-01 00:00:00') ats, array(CAST(1 AS TINYINT), NULL) ay, array(1.5F, NULL) af FROM range(1)",
    "SELECT named_struct('a', named_struct('b', named_struct('c', id, 'd', array(id)))) deep, X'deadbeef' bin, "
    "'' e, array() ea, map() em, CAST(NULL AS STRING) ns, NULL v, array(NULL) av, CAST('NaN' AS DOUBLE) nan, "
    "CAST('-Infinity' AS FLOAT) ninf FROM range(3)",
    "SELECT map(named_struct('k', 1), named_struct('v', 'x')) ms, map('a', map('b', 1)) mm, "
    "'é漢字😀' u, make_interval(1, 2, 0, 3, 4, 5, 6.000007) ci, array(make_interval(0, 1, 0, 0, 0, 0, 1)) aci "
    "FROM range(1)",
    "SELECT "
    + ", ".join(f"IF(id % {i + 2} = 0, NULL, id + {i}) c{i}" for i in range(70))
    + " FROM range(10)",
]


@pytest.fixture(scope="module")
def spark() -> Any:
    from tests.oracle import spark_session

    return spark_session()


@pytest.mark.spark
@pytest.mark.parametrize("sql", _SQL_ROWS, ids=[f"q{i}" for i in range(len(_SQL_ROWS))])
def test_rows_built_by_spark(spark: Any, sql: str) -> None:
    """Spark's own UnsafeRows (``executeCollect``) decode to what Spark returns for them."""
    from tests import oracle

    df = spark.sql(sql)
    rows = [bytes(r.getBytes()) for r in df._jdf.queryExecution().executedPlan().executeCollect()]
    expected = oracle.collect(df, df.columns)
    layout = compile_layout(df.schema)
    buf, starts, lengths = _framed(rows)
    got = decode_rows(buf, starts, lengths, layout)
    assert len(got) == len(expected) > 0
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert _same(oracle.canonical(g, df.schema), oracle.canonical(e, df.schema)), i
        assert _same(decode_row(rows[i], 0, len(rows[i]), layout), g)


def _lz4block(data: bytes) -> bytes:
    """lz4-java ``LZ4BlockOutputStream`` (docs/format.md §3.2), just enough for the test."""
    import lz4.block

    out, pos = [], 0
    while pos < len(data):
        assert data[pos : pos + 8] == b"LZ4Block"
        token = data[pos + 8]
        clen, dlen = struct.unpack_from("<ii", data, pos + 9)
        payload = data[pos + 21 : pos + 21 + clen]
        if dlen:
            out.append(
                payload if token & 0xF0 == 0x10 else lz4.block.decompress(payload, uncompressed_size=dlen)
            )
        pos += 21 + clen
    return b"".join(out)


def _replay(files: list[Path]) -> dict[bytes, bytes]:
    """Apply snapshot/deltas in order (docs/format.md §3.3-3.4), keyed on raw key bytes."""
    state: dict[bytes, bytes] = {}
    for f in files:
        data = _lz4block(f.read_bytes())
        pos = 0
        while True:
            (klen,) = struct.unpack_from(">i", data, pos)
            if klen == -1:
                break
            key = data[pos + 4 : pos + 4 + klen]
            (vlen,) = struct.unpack_from(">i", data, pos + 4 + klen)
            pos += 8 + klen
            if vlen == -1:
                state.pop(key, None)
            else:
                state[key] = data[pos : pos + vlen]
                pos += vlen
    return state


def _files_for_latest(partition_dir: Path) -> list[Path]:
    files = {}
    for p in partition_dir.iterdir():
        stem, _, ext = p.name.partition(".")
        if stem.isdigit() and ext in ("delta", "snapshot"):
            files[(int(stem), ext)] = p
    latest = max(v for v, _ in files)
    snaps = [v for v, ext in files if ext == "snapshot"]
    base = max(snaps) if snaps else 0
    chain = [files[(base, "snapshot")]] if snaps else []
    return chain + [files[(v, "delta")] for v in range(base + 1, latest + 1)]


@pytest.mark.spark
def test_rich_types_checkpoint_matches_spark(spark: Any) -> None:
    """Every state row of ``rich_types`` (every type, with nulls) decodes as Spark's ``statestore`` reads it."""
    from statelens.readers.schemas import parse_schema_file
    from tests import oracle
    from tests.spark_checkpoints import get_checkpoint

    root = get_checkpoint("rich_types", spark) / "checkpoint"
    schema_file = root / "state/0/0/_metadata/schema"
    schema = parse_schema_file(schema_file.read_bytes(), str(schema_file))
    key_layout = compile_layout(schema.key_schema)
    value_layout = compile_layout(schema.value_schema)
    native = []
    for pdir in sorted((root / "state/0").iterdir(), key=lambda p: p.name):
        if not pdir.name.isdigit():
            continue
        state = _replay(_files_for_latest(pdir))
        keys, values = list(state), list(state.values())
        kbuf, ks, kl = _framed(keys)
        vbuf, vs, vl = _framed(values)
        dkeys = decode_rows(kbuf, ks, kl, key_layout, path=str(pdir))
        dvals = decode_rows(vbuf, vs, (vl // 8) * 8, value_layout, path=str(pdir))
        for k, v, kb, vb in zip(dkeys, dvals, keys, values, strict=True):
            assert _same(decode_row(kb, 0, len(kb), key_layout), k)
            assert _same(decode_row(vb, 0, (len(vb) // 8) * 8, value_layout), v)
            native.append((int(pdir.name), k, v))
    expected = oracle.read_state(spark, root, 0)
    assert len(native) == len(expected) == 5

    def canon(rows: Any) -> list[Any]:
        out = [
            (p, oracle.canonical(k, schema.key_schema), oracle.canonical(v, schema.value_schema))
            for p, k, v in rows
        ]
        return sorted(out, key=repr)

    assert canon(native) == canon(expected)


def test_an_array_of_no_elements_decodes_empty_in_both_decoders() -> None:
    """A real ``array<int>`` row whose element count is set to 0 (its bytes left as they were) is an
    empty array, for the row decoder and for the batch decoder among unchanged rows."""
    good = hexrow(ARR_INT[2])
    empty = _patch(good, 16, "<q", 0)
    layout = compile_layout(ARR_INT[1])
    assert decode_row(good, 0, len(good), layout) == ([1, None, 3],)
    assert decode_row(empty, 0, len(empty), layout) == ([],)
    buf, starts, lengths = _framed([good, empty, good])
    assert decode_rows(buf, starts, lengths, layout) == [([1, None, 3],), ([],), ([1, None, 3],)]


def _both_fail(data: bytes, layout: Any, good: bytes) -> list[SchemaMismatchError]:
    """The row decoder's error on ``data`` alone, then the batch decoder's on it between two good rows."""
    errors = []
    with pytest.raises(SchemaMismatchError) as one:
        decode_row(data, 0, len(data), layout, path="p", record=5)
    errors.append(one.value)
    buf, starts, lengths = _framed([good, data, good])
    with pytest.raises(SchemaMismatchError) as batch:
        decode_rows(buf, starts, lengths, layout, path="p", records=[1, 2, 3])
    errors.append(batch.value)
    assert [(e.context["record"], e.offset) for e in errors] == [(5, 0), (2, int(starts[1]))]
    return errors


def test_array_element_payloads_to_the_last_byte_of_their_array() -> None:
    """A real ``array<string>`` row (``['ab', NULL, 'cde']``, 56 bytes of array, 40 of them header and
    slots): its last element may grow to the array's last byte, not one byte past it, and two elements
    may not take more than the 16 bytes after the slots between them."""
    good = hexrow(ARR_STR[2])
    layout = compile_layout(ARR_STR[1])
    to_the_end = _patch(good, 48, "<Q", _word(0x30, 8))
    assert decode_row(to_the_end, 0, len(to_the_end), layout) == (["ab", None, "cde" + "\x00" * 5],)
    buf, starts, lengths = _framed([good, to_the_end])
    assert decode_rows(buf, starts, lengths, layout)[1] == (["ab", None, "cde" + "\x00" * 5],)
    for err in _both_fail(_patch(good, 48, "<Q", _word(0x30, 9)), layout, good):
        assert "string element payload at offset 48 with size 9 is outside [40, 56) of its array" in str(err)
        assert err.context["field"] == "c[2]"
    for err in _both_fail(_patch(good, 48, "<Q", _word(0x28, 16)), layout, good):
        assert "element payloads of its array add up to more than the 16 bytes after the fixed part" in str(
            err
        )


def test_row_payload_outside_its_row_says_so() -> None:
    good = hexrow(FIVE[2])
    layout = compile_layout(FIVE[1])
    for err in _both_fail(_patch(good, 16, "<Q", _word(0x30, 17)), layout, good):
        assert f"string payload at offset 48 with size 17 is outside [48, {len(good)}) of its row" in str(err)
        assert err.context["field"] == "s"


def test_rows_decoded_in_chunks_are_the_rows_decoded_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real rows of every kind, framed five times over, decode the same when the batch decoder takes them
    two at a time (its chunks bound the index arrays of one pass) as all at once."""
    compared = 0
    for name, schema, hex_, _ in DUMP:
        row = hexrow(hex_)
        layout = compile_layout(schema)
        buf, starts, lengths = _framed([row] * 5)
        whole = decode_rows(buf, starts, lengths, layout)
        with monkeypatch.context() as small:
            small.setattr(unsaferow_module, "_CHUNK_ROWS", 2)
            assert decode_rows(buf, starts, lengths, layout) == whole, name
        assert whole == [decode_row(row, 0, len(row), layout)] * 5, name
        compared += 1
    assert compared == len(DUMP)


def test_a_row_outside_the_buffer_names_its_record() -> None:
    data = hexrow(DUMP[4][2])
    layout = compile_layout(DUMP[4][1])
    with pytest.raises(SchemaMismatchError, match="outside the 16-byte buffer") as err:
        decode_rows(data, [0, 8], [16, 16], layout, path="p", records=[7, 9])
    assert err.value.context["record"] == 9 and err.value.offset == 8

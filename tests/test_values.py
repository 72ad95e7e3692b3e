"""JSON, CSV and Arrow forms of decoded values (``readers/values.py``) and their writers (``app/output.py``): the
contract of ``statelens rows``."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from statelens.app.output import csv_cell, dumps_jsonl, flat_columns, flatten_row, write_parquet
from statelens.readers._format.unsaferow import compile_layout, decode_row
from statelens.readers.model import CalendarInterval
from statelens.readers.values import (
    JsonObject,
    format_date,
    format_decimal,
    format_time,
    format_timestamp,
    row_to_json,
    rows_to_arrow,
    state_row_schema,
    to_arrow_type,
    to_json_value,
)


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


def field(name: str, dtype: T.DataType) -> T.StructField:
    return T.StructField(name, dtype)


#: The aggregation buffer of docs/format.md §7.1 (v2): names repeat.
AGG = T.StructType(
    [
        field("count", T.LongType()),
        field("sum", T.LongType()),
        field("sum", T.DoubleType()),
        field("count", T.LongType()),
        field("max", T.StringType()),
        field("min", T.TimestampType()),
    ]
)
WINDOW_KEY = T.StructType(
    [
        field("k", T.StringType()),
        field("window", T.StructType([field("start", T.TimestampType()), field("end", T.TimestampType())])),
    ]
)

# ---------------------------------------------------------------------------------------------------
# Dates and timestamps


EPOCH = dt.datetime(1970, 1, 1)


@settings(max_examples=500)
@given(st.integers(min_value=-62135596800000000, max_value=253402300799999999))
def test_timestamps_match_python_in_its_range(micros: int) -> None:
    expected = (EPOCH + dt.timedelta(microseconds=micros)).isoformat(timespec="microseconds")
    assert format_timestamp(micros) == expected + "Z"
    assert format_timestamp(micros, utc=False) == expected


@settings(max_examples=500)
@given(st.integers(min_value=-719162, max_value=2932896))
def test_dates_match_python_in_its_range(days: int) -> None:
    assert format_date(days) == (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        # Values Spark 4.3 prints with to_json(timestampFormat "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").
        (0, "1970-01-01T00:00:00.000000Z"),
        (5_000_000 + 1_704_067_200_000_000, "2024-01-01T00:00:05.000000Z"),
        (-1, "1969-12-31T23:59:59.999999Z"),
        (2**63 - 1, "+294247-01-10T04:00:54.775807Z"),
        (-(2**63), "-290308-12-21T19:59:05.224192Z"),
        (-62135596800000000, "0001-01-01T00:00:00.000000Z"),
        (-62135596800000001, "0000-12-31T23:59:59.999999Z"),
        (253402300800000000, "+10000-01-01T00:00:00.000000Z"),
    ],
)
def test_timestamp_extremes_as_spark_prints_them(micros: int, text: str) -> None:
    assert format_timestamp(micros) == text
    assert to_json_value(micros, T.TimestampType()) == text
    assert to_json_value(micros, T.TimestampNTZType()) == text[:-1]


@pytest.mark.parametrize(
    ("days", "text"),
    [
        # CAST(date AS STRING) in Spark 4.3.
        (-719162, "0001-01-01"),
        (-719163, "0000-12-31"),
        (-800000, "-0221-09-04"),
        (2932896, "9999-12-31"),
        (2932897, "+10000-01-01"),
        (2**31 - 1, "+5881580-07-11"),
        (-(2**31), "-5877641-06-23"),
        (19724, "2024-01-02"),
    ],
)
def test_date_extremes_as_spark_prints_them(days: int, text: str) -> None:
    assert format_date(days) == text
    assert to_json_value(days, T.DateType()) == text


def test_time_of_day() -> None:
    assert format_time(45296123456000) == "12:34:56.123456"
    assert format_time(1) == "00:00:00.000000001"
    assert to_json_value(0, T.TimeType(6)) == "00:00:00.000000"


# ---------------------------------------------------------------------------------------------------
# Numbers


@pytest.mark.parametrize(
    ("value", "scale", "text"),
    [
        (Decimal("1E+2"), 0, "100"),
        (Decimal("1"), 2, "1.00"),
        (Decimal("123.45"), 2, "123.45"),
        (Decimal("-1.00000"), 5, "-1.00000"),
        (Decimal("-0.5"), 3, "-0.500"),
        (Decimal("-0"), 2, "0.00"),
        (Decimal("0E-30"), 2, "0.00"),
        (Decimal("1.500"), 2, "1.50"),
        (Decimal("1E-18"), 18, "0.000000000000000001"),
        (Decimal("12345678901234567890.123456789012345678"), 18, "12345678901234567890.123456789012345678"),
        (Decimal("-99999999999999999999999999999999999999"), 0, "-99999999999999999999999999999999999999"),
        (Decimal("1E+2"), -2, "100"),  # legacy negative scale
        (Decimal("1.505"), 2, "1.505"),  # more digits than the scale: written exactly, never rounded
    ],
)
def test_decimals_are_plain_strings_at_their_scale(value: Decimal, scale: int, text: str) -> None:
    assert format_decimal(value, scale) == text
    assert "E" not in text
    assert Decimal(text) == value


def test_decimal_type_drives_the_scale() -> None:
    assert to_json_value(Decimal(1), T.DecimalType(10, 2)) == "1.00"
    assert to_json_value(Decimal("1E+2"), T.DecimalType(38, 0)) == "100"


def test_floats() -> None:
    d, f = T.DoubleType(), T.FloatType()
    assert to_json_value(math.nan, d) == "NaN"
    assert to_json_value(math.inf, d) == "Infinity"
    assert to_json_value(-math.inf, f) == "-Infinity"
    assert to_json_value(1.5, d) == 1.5
    assert to_json_value(-0.0, d) == 0.0
    assert math.copysign(1, to_json_value(-0.0, d)) == -1
    # A float32 shows the digits Java's Float.toString shows, not the widened double's.
    (f32,) = struct.unpack("<f", struct.pack("<f", 1.1))
    assert f32 != 1.1
    assert to_json_value(f32, f) == 1.1
    assert to_json_value(3.4028234663852886e38, f) == 3.4028235e38


def test_integers_intervals_and_bytes() -> None:
    assert to_json_value(-(2**63), T.LongType()) == -(2**63)
    assert to_json_value(86400000000, T.DayTimeIntervalType()) == 86400000000
    assert to_json_value(-14, T.YearMonthIntervalType()) == -14
    assert to_json_value(CalendarInterval(1, 2, 3), T.CalendarIntervalType()) == [
        ("months", 1),
        ("days", 2),
        ("microseconds", 3),
    ]
    assert to_json_value(b"\xca\xfe\x00\xba\xbe", T.BinaryType()) == "yv4Aur4="
    assert to_json_value(b"", T.BinaryType()) == ""
    assert to_json_value(b"\x07\x00\x00\x00", T.VariantType()) == "BwAAAA=="
    assert to_json_value(None, T.NullType()) is None
    assert to_json_value("x", T.VarcharType(3)) == "x"
    assert to_json_value(True, T.BooleanType()) is True


def test_nested_values() -> None:
    m = T.MapType(T.StringType(), T.ArrayType(T.DateType()))
    assert to_json_value([("a", [0, None]), ("b", None)], m) == [["a", ["1970-01-01", None]], ["b", None]]
    arr = T.ArrayType(T.StructType([field("t", T.TimestampType())]))
    assert to_json_value([(0,), None], arr) == [[("t", "1970-01-01T00:00:00.000000Z")], None]
    assert to_json_value((1.5, math.nan, [1, None]), PointUDT()) == [
        ("x", 1.5),
        ("y", "NaN"),
        ("tags", [1, None]),
    ]


# ---------------------------------------------------------------------------------------------------
# Rows, duplicate names, JSON lines

AGG_ROW = (3, 10, 2.5, 4, None, 1_704_067_205_000_000)
AGG_LINE = (
    '{"count": 3, "sum": 10, "sum": 2.5, "count": 4, "max": null, "min": "2024-01-01T00:00:05.000000Z"}'
)


def test_struct_keeps_repeated_names_in_order() -> None:
    obj = row_to_json(AGG_ROW, AGG)
    assert isinstance(obj, JsonObject)
    assert obj.keys() == ["count", "sum", "sum", "count", "max", "min"]
    assert obj.values() == [3, 10, 2.5, 4, None, "2024-01-01T00:00:05.000000Z"]
    line = dumps_jsonl(obj)
    assert line == AGG_LINE
    assert json.loads(line, object_pairs_hook=list) == obj
    assert row_to_json(None, AGG) is None


def test_nested_structs_round_trip_with_repeats() -> None:
    inner = T.StructType([field("x", T.IntegerType()), field("x", T.StringType())])
    schema = T.StructType(
        [field("a", inner), field("a", inner), field("m", T.MapType(T.IntegerType(), inner))]
    )
    row = ((1, "one"), None, [(7, (2, "two"))])
    obj = row_to_json(row, schema)
    line = dumps_jsonl(obj)
    assert line == '{"a": {"x": 1, "x": "one"}, "a": null, "m": [[7, {"x": 2, "x": "two"}]]}'
    assert json.loads(line, object_pairs_hook=list) == obj


def test_jsonl_lines_are_single_lines_of_valid_json() -> None:
    obj = JsonObject([("s", 'line\nbreak\t"quoted" ü 😀 \u2028'), ("e", []), ("o", JsonObject())])
    line = dumps_jsonl(obj)
    assert "\n" not in line
    assert "ü 😀" in line  # non-ASCII kept as is
    assert json.loads(line) == {"s": 'line\nbreak\t"quoted" ü 😀 \u2028', "e": [], "o": {}}
    with pytest.raises(ValueError, match="not valid JSON"):
        dumps_jsonl([math.nan])
    with pytest.raises(TypeError, match="Decimal is not JSON-ready"):
        dumps_jsonl({"d": Decimal(1)})
    with pytest.raises(TypeError, match="keys must be strings"):
        dumps_jsonl(JsonObject([(1, 2)]))


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=100)
@given(_json_values)
def test_dumps_jsonl_agrees_with_json_dumps(value: Any) -> None:
    assert dumps_jsonl(value) == json.dumps(value, ensure_ascii=False, allow_nan=False)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "sum"]), _json_scalars), max_size=6))
def test_repeated_keys_survive_a_round_trip(pairs: list[tuple[str, Any]]) -> None:
    obj = JsonObject(pairs)
    assert json.loads(dumps_jsonl(obj), object_pairs_hook=list) == pairs


def test_decoded_spec_row_to_jsonl() -> None:
    """Spec §6.5's five-field row, decoded and written as a JSON line."""
    schema = T.StructType(
        [
            field("a", T.IntegerType()),
            field("s", T.StringType()),
            field("l", T.LongType()),
            field("d", T.DoubleType()),
            field("b", T.BooleanType()),
        ]
    )
    data = bytes.fromhex(
        "0800000000000000 0100000000000000 0a00000030000000 2a00000000000000 0000000000000000 0100000000000000"
        " 6162636465666768696a000000000000"
    )
    row = decode_row(data, 0, len(data), compile_layout(schema))
    assert (
        dumps_jsonl(row_to_json(row, schema)) == '{"a": 1, "s": "abcdefghij", "l": 42, "d": null, "b": true}'
    )


# ---------------------------------------------------------------------------------------------------
# CSV


def test_flatten_row_names_and_cells() -> None:
    key = row_to_json(("a", (0, 10_000_000)), WINDOW_KEY)
    assert flatten_row(key, "key") == [
        ("key.k", "a"),
        ("key.window.start", "1970-01-01T00:00:00.000000Z"),
        ("key.window.end", "1970-01-01T00:00:10.000000Z"),
    ]
    assert flatten_row(key, "key", WINDOW_KEY) == flatten_row(key, "key")
    assert flat_columns(WINDOW_KEY, "key") == ["key.k", "key.window.start", "key.window.end"]
    assert flat_columns(WINDOW_KEY) == ["k", "window.start", "window.end"]


def test_flatten_keeps_repeats_and_nests_json() -> None:
    schema = T.StructType(
        [
            *AGG.fields,
            field("tags", T.ArrayType(T.StringType())),
            field("m", T.MapType(T.StringType(), T.IntegerType())),
            field("i", T.CalendarIntervalType()),
        ]
    )
    row = (*AGG_ROW, ["x", None], [("a", 1)], CalendarInterval(1, 2, 3))
    cells = flatten_row(row_to_json(row, schema), "value", schema)
    assert [name for name, _ in cells] == [
        "value.count",
        "value.sum",
        "value.sum",
        "value.count",
        "value.max",
        "value.min",
        "value.tags",
        "value.m",
        "value.i",
    ]
    assert [c for _, c in cells][-3:] == [
        '["x", null]',
        '[["a", 1]]',
        '{"months": 1, "days": 2, "microseconds": 3}',
    ]
    assert [name for name, _ in cells] == flat_columns(schema, "value")


def test_null_struct_gives_the_same_columns_with_a_schema() -> None:
    nonnull = flatten_row(row_to_json(("a", (0, 1)), WINDOW_KEY), "", WINDOW_KEY)
    null = flatten_row(row_to_json(("a", None), WINDOW_KEY), "", WINDOW_KEY)
    assert [n for n, _ in null] == [n for n, _ in nonnull]
    assert null == [("k", "a"), ("window.start", None), ("window.end", None)]
    # Without the schema a null struct can only be one column.
    assert flatten_row(row_to_json(("a", None), WINDOW_KEY)) == [("k", "a"), ("window", None)]


def test_csv_cells() -> None:
    assert [csv_cell(v) for v in (None, True, False, 1, 2.5, "x", '["a"]')] == [
        "",
        "true",
        "false",
        "1",
        "2.5",
        "x",
        '["a"]',
    ]


# ---------------------------------------------------------------------------------------------------
# Arrow / Parquet

RICH = T.StructType(
    [
        field("b", T.BooleanType()),
        field("y", T.ByteType()),
        field("h", T.ShortType()),
        field("i", T.IntegerType()),
        field("l", T.LongType()),
        field("f", T.FloatType()),
        field("d", T.DoubleType()),
        field("s", T.StringType()),
        field("bin", T.BinaryType()),
        field("dt", T.DateType()),
        field("ts", T.TimestampType()),
        field("ntz", T.TimestampNTZType()),
        field("dec", T.DecimalType(10, 2)),
        field("dec38", T.DecimalType(38, 18)),
        field("dti", T.DayTimeIntervalType()),
        field("ymi", T.YearMonthIntervalType()),
        field("ci", T.CalendarIntervalType()),
        field("arr", T.ArrayType(T.StringType())),
        field("m", T.MapType(T.StringType(), T.IntegerType())),
        field("v", T.NullType()),
        field("buf", AGG),
    ]
)
RICH_ROWS = [
    (
        True,
        -2,
        513,
        -1,
        2**62,
        1.5,
        math.nan,
        "héllo",
        b"\xca\xfe",
        19724,
        1_700_000_000_123_456,
        -1,
        Decimal("123.45"),
        Decimal("12345678901234567890.123456789012345678"),
        86_400_000_000,
        14,
        CalendarInterval(1, 2, 3),
        ["ab", None],
        [("a", 1), ("bc", None)],
        None,
        AGG_ROW,
    ),
    tuple([None] * 21),
]


def test_arrow_types() -> None:
    import pyarrow as pa

    t = to_arrow_type(RICH)
    assert [f.type for f in t][:17] == [
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us"),
        pa.decimal128(10, 2),
        pa.decimal128(38, 18),
        pa.duration("us"),
        pa.int32(),
        pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]),
    ]
    assert to_arrow_type(T.MapType(T.StringType(), T.IntegerType())) == pa.map_(pa.string(), pa.int32())
    assert [f.name for f in to_arrow_type(AGG)] == ["count", "sum", "sum", "count", "max", "min"]
    unique = to_arrow_type(AGG, unique_names=True)
    assert [f.name for f in unique] == ["count", "sum", "sum_2", "count_2", "max", "min"]
    assert unique.field(2).metadata == {b"spark_name": b"sum"}
    taken = T.StructType(
        [field("a", T.IntegerType()), field("a_2", T.IntegerType()), field("a", T.IntegerType())]
    )
    assert [f.name for f in to_arrow_type(taken, unique_names=True)] == ["a", "a_2", "a_3"]
    assert to_arrow_type(T.DecimalType(5, -2)) == pa.decimal128(7, 0)
    assert to_arrow_type(T.VariantType()) == pa.binary()
    assert to_arrow_type(T.TimeType(6)) == pa.time64("ns")


def test_arrow_table_values() -> None:
    table = rows_to_arrow(RICH_ROWS, RICH)
    assert table.num_rows == 2
    assert table.column("ts")[0].value == 1_700_000_000_123_456
    assert table.column("dt")[0].as_py() == dt.date(2024, 1, 2)
    assert table.column("dec38")[0].as_py() == Decimal("12345678901234567890.123456789012345678")
    assert table.column("ci")[0].as_py() == {"months": 1, "days": 2, "microseconds": 3}
    assert table.column("m")[0].as_py() == [("a", 1), ("bc", None)]
    assert math.isnan(table.column("d")[0].as_py())
    buf = table.column("buf")
    assert [f.name for f in buf.type] == ["count", "sum", "sum", "count", "max", "min"]
    assert buf.combine_chunks().flatten()[2].to_pylist() == [2.5, None]
    assert table.column("v").null_count == 2
    assert all(table.column(i)[1].as_py() is None for i in range(table.num_columns))


def test_parquet_with_unique_names_reads_back_everywhere(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = rows_to_arrow(RICH_ROWS, RICH, unique_names=True)
    pq.write_table(table, tmp_path / "state.parquet")
    back = pq.read_table(tmp_path / "state.parquet")
    assert back.column("buf").type.names == ["count", "sum", "sum_2", "count_2", "max", "min"]
    first = back.slice(0, 1).to_pylist()[0]
    buf = first.pop("buf")
    assert buf.pop("min") == dt.datetime(2024, 1, 1, 0, 0, 5, tzinfo=dt.timezone.utc)
    assert buf == {"count": 3, "sum": 10, "sum_2": 2.5, "count_2": 4, "max": None}
    assert first["dec"] == Decimal("123.45")
    assert back.column("buf").type.field("sum_2").metadata == {b"spark_name": b"sum"}


def test_parquet_keeps_repeated_names_for_pyarrow_only(tmp_path: Path) -> None:
    """Documented behaviour: pyarrow itself round-trips repeated struct names; dicts cannot hold them."""
    import pyarrow.parquet as pq

    table = rows_to_arrow([(AGG_ROW,)], T.StructType([field("value", AGG)]))
    pq.write_table(table, tmp_path / "dup.parquet")
    back = pq.read_table(tmp_path / "dup.parquet")
    assert back.column("value").type.names == ["count", "sum", "sum", "count", "max", "min"]
    assert back.equals(table)
    with pytest.raises(ValueError, match="duplicate field names"):
        back.to_pylist()


def test_top_level_repeats_are_renamed_for_parquet() -> None:
    schema = T.StructType([field("x", T.IntegerType()), field("x", T.IntegerType())])
    assert rows_to_arrow([(1, 2)], schema).column_names == ["x", "x"]
    assert rows_to_arrow([(1, 2)], schema, unique_names=True).column_names == ["x", "x_2"]


def test_write_parquet_typed_state_rows(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    schema = state_row_schema(WINDOW_KEY, AGG)
    assert schema.names == ["partition", "key", "value"]
    assert state_row_schema(WINDOW_KEY, AGG, changes=True).names == [
        "version",
        "partition",
        "change",
        "key",
        "value",
        "derived",
    ]
    rows = [(0, ("a", (0, 10_000_000)), AGG_ROW), (1, ("b", None), None)]
    write_parquet(rows, tmp_path / "rows.parquet", schema)
    back = pq.read_table(tmp_path / "rows.parquet")
    assert back.column("key").type.field("window").type.field("start").type.unit == "us"
    assert back.column("value").type.names == ["count", "sum", "sum_2", "count_2", "max", "min"]
    assert back.column("value").to_pylist()[1] is None


def test_write_parquet_from_json_documents(tmp_path: Path) -> None:
    """The untyped path: documents as ``statelens rows`` prints them (repeats renamed, lists kept)."""
    import pyarrow.parquet as pq

    docs = [
        JsonObject(
            [
                ("partition", 0),
                ("key", row_to_json(("a", (0, 1)), WINDOW_KEY)),
                ("value", row_to_json(AGG_ROW, AGG)),
            ]
        ),
        JsonObject([("partition", 1), ("key", row_to_json(("b", None), WINDOW_KEY)), ("value", None)]),
    ]
    write_parquet(docs, tmp_path / "docs.parquet")
    back = pq.read_table(tmp_path / "docs.parquet").to_pylist()
    assert back[0]["value"] == {
        "count": 3,
        "sum": 10,
        "sum_2": 2.5,
        "count_2": 4,
        "max": None,
        "min": "2024-01-01T00:00:05.000000Z",
    }
    assert back[1]["key"] == {"k": "b", "window": None}
    # A map of string -> int is a list of mixed-type pairs in JSON: pyarrow cannot type it, so lists
    # become JSON text.
    m = T.StructType([field("m", T.MapType(T.StringType(), T.IntegerType()))])
    write_parquet([JsonObject([("value", row_to_json(([("a", 1)],), m))])], tmp_path / "map.parquet")
    assert pq.read_table(tmp_path / "map.parquet").to_pylist() == [{"value": {"m": '[["a", 1]]'}}]
    # "NaN" strings among numbers cannot be typed at all: that column is JSON text.
    d = T.StructType([field("d", T.DoubleType())])
    docs = [JsonObject([("p", i), ("value", row_to_json((x,), d))]) for i, x in enumerate([1.5, math.nan])]
    write_parquet(docs, tmp_path / "nan.parquet")
    assert pq.read_table(tmp_path / "nan.parquet").to_pylist() == [
        {"p": 0, "value": '{"d": 1.5}'},
        {"p": 1, "value": '{"d": "NaN"}'},
    ]


def test_flatten_a_state_document_with_its_schema() -> None:
    schema = state_row_schema(WINDOW_KEY, AGG)
    doc = JsonObject([("partition", 1), ("key", row_to_json(("b", None), WINDOW_KEY)), ("value", None)])
    cells = flatten_row(doc, "", schema)
    assert [n for n, _ in cells] == flat_columns(schema)
    assert cells[:4] == [
        ("partition", 1),
        ("key.k", "b"),
        ("key.window.start", None),
        ("key.window.end", None),
    ]
    assert all(v is None for _, v in cells[4:])


# ---------------------------------------------------------------------------------------------------
# With Spark: formats against Spark's own printing


@pytest.mark.spark
def test_dates_and_timestamps_print_as_spark_prints_them() -> None:
    from tests.oracle import spark_session

    spark = spark_session()
    days = [-719162, -719163, -800000, -1000000, 0, -1, 19724, 2932896, 2932897, 2**31 - 1, -(2**31)]
    micros = [0, -1, 1, 2**63 - 1, -(2**63), -62135596800000001, 253402300800000000, -2208988799999999]
    opts = "map('timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\")"
    sql = " UNION ALL ".join(
        [f"SELECT {d} AS n, CAST(date_add(DATE'1970-01-01', {d}) AS STRING) AS s, 'd' AS k" for d in days]
        + [
            f"SELECT {u} AS n, get_json_object(to_json(named_struct('t', timestamp_micros({u})), {opts}), '$.t') AS s,"
            f" 't' AS k"
            for u in micros
        ]
    )
    for n, s, k in spark.sql(sql).collect():
        assert (format_date(n) if k == "d" else format_timestamp(n)) == s, n


@pytest.mark.spark
def test_parquet_with_unique_names_is_readable_by_spark(tmp_path: Path) -> None:
    from tests.oracle import spark_session

    spark = spark_session()
    write_parquet(RICH_ROWS, tmp_path / "rich.parquet", RICH)
    df = spark.read.parquet(str(tmp_path / "rich.parquet"))
    assert df.schema["buf"].dataType.names == ["count", "sum", "sum_2", "count_2", "max", "min"]
    row = df.orderBy("b").collect()[-1]
    assert row["buf"]["sum_2"] == 2.5
    assert row["dec38"] == Decimal("12345678901234567890.123456789012345678")
    assert row["dti"] == 86_400_000_000  # duration[us] reads back as its microseconds
    assert row["m"] == {"a": 1, "bc": None}

"""UnsafeRows decoded straight to Arrow columns equal the per-row decoder converted to Arrow.

On every store of every generated checkpoint (sampled versions, every partition), on the rows Spark
wrote for each type (tests/test_unsaferow.py), on damaged rows (same errors, same located messages)
and on randomly mutated rows (both decoders fail with a typed error, or agree).

Each comparison on a checkpoint checks which path ran: a store read column by column is compared with
the per-row decoder; a store the reader declares row-only (Avro rows, checksummed rows, range-scan
keys of column families) goes through the per-row path by design, so comparing it with that path would
compare a result with itself: it is compared with Spark's own reader (:mod:`tests.oracle`) instead.
A columnar read that falls back to rows at run time fails the test.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from statelens.readers._format.unsaferow import compile_layout, decode_row, decode_rows
from statelens.readers._format.unsaferow_arrow import decode_arrow, iter_decode_arrow
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import SchemaMismatchError, StatelensError
from statelens.readers.values import rows_to_arrow, state_row_schema, to_arrow_array, to_arrow_type
from tests.spark_checkpoints import SCENARIOS
from tests.test_unsaferow import (
    ALL_ROWS,
    CORRUPT,
    FIVE,
    MAP,
    STRUCT,
    _fmgws_v1_long_fields,
    _framed,
    _patch,
    _word,
    hexrow,
    one,
)


def _same(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but their reprs agree


def _equal(a: pa.Array, b: pa.Array) -> bool:
    """Same type and values (Arrow's equality first: values out of Python's range, e.g. year 10^6 dates,
    cannot become Python objects; then the reprs, for NaN)."""
    return a.type == b.type and (a.equals(b) or _same(a.to_pylist(), b.to_pylist()))


def _per_row(buf: bytes, starts: Any, lengths: Any, schema: Any) -> pa.Array:
    rows = decode_rows(buf, starts, lengths, compile_layout(schema))
    return to_arrow_array(rows, schema)


@contextlib.contextmanager
def _row_path_calls(reader: Any, method: str) -> Iterator[list[int]]:
    """Count the calls of the reader's per-row ``method`` (``_rows_arrow`` behind ``read_arrow``,
    ``read_changes`` behind ``read_changes_arrow``) made inside the block: a columnar read makes none."""
    assert callable(getattr(type(reader), method, None)), method  # the spy watches a real method
    calls = [0]
    inner = getattr(reader, method)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return inner(*args, **kwargs)

    setattr(reader, method, spy)
    try:
        yield calls
    finally:
        delattr(reader, method)


def _plain(value: Any) -> Any:
    """An Arrow ``to_pylist`` value as the oracle gives values: structs as positional tuples."""
    if isinstance(value, dict):
        return tuple(_plain(v) for v in value.values())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):  # a map entry
        return tuple(_plain(v) for v in value)
    assert value is None or isinstance(value, (bool, int, float, str, bytes, Decimal)), type(value)
    return value


def _plain_rows(table: pa.Table) -> list[str]:
    """A table's rows as sorted reprs of plain tuples (times as their stored integers, as the oracle)."""
    from tests.oracle import stored_numbers

    plain = table.cast(pa.schema([f.with_type(stored_numbers(f.type)) for f in table.schema]))
    return sorted(repr(_plain(tuple(row.values()))) for row in plain.to_pylist())


#: Scenarios with stores read row by row by design (column families of Avro rows, checksummed rows or
#: range-scan keys): those stores are compared with Spark's reader, the others with the row path.
ROW_ONLY_SCENARIOS = {
    "rocks_tws_avro",
    "rocks_tws_checksum",
    "rocks_tws_timers",
    "rocks_tws_timers_avro",
    "rocks_tws_event_time",
}


@pytest.mark.spark
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_store_reads_the_same_as_arrow(scenario: str, checkpoint: Any, request: Any) -> None:
    from tests import oracle

    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    compared = by_spark = 0
    reads = None
    last = oracle.committed_batches(root)[-1] + 1
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None:
                continue
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            schema = state_row_schema(store.key_schema, store.value_schema)
            if not reader.columnar:
                # Row-only by design: read_arrow is read_rows through Arrow. Spark's rows instead.
                with _row_path_calls(reader, "_rows_arrow") as calls:
                    got = [reader.read_arrow(pid, last, unique_names=True) for pid in reader.partition_ids()]
                assert calls[0] == len(got), (scenario, store.store_name)
                if reads is None:
                    reads = oracle.Reads(request.getfixturevalue("spark"), root, op.operator_id)
                want = oracle.read_family(reads, store.store_name, last - 1)
                assert sorted(_plain_rows(pa.concat_tables(got))) == sorted(
                    repr(oracle.canonical(r)) for r in want
                ), (scenario, store.store_name)
                by_spark += len(want)
                continue
            for pid in reader.partition_ids():
                versions = reader.versions(pid)
                for v in sorted(
                    {versions[0], versions[len(versions) // 2], versions[-1]} if versions else set()
                ):
                    with _row_path_calls(reader, "_rows_arrow") as calls:
                        got = reader.read_arrow(pid, v, unique_names=True)
                    assert calls == [0], (scenario, store.store_name, pid, v)  # columnar, no fallback
                    rows = [(r.partition_id, r.key, r.value) for r in reader.read_rows(pid, v)]
                    want = rows_to_arrow(rows, schema, unique_names=True)
                    assert got.schema.equals(want.schema, check_metadata=True), (scenario, store.store_name)
                    # the same rows; the order may differ where a key was removed and put again
                    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist())), (
                        scenario,
                        store.store_name,
                        pid,
                        v,
                    )
                    compared += got.num_rows
    assert (compared > 0) == (scenario not in ALL_ROW_ONLY_SCENARIOS), compared
    assert (by_spark > 0) == (scenario in ROW_ONLY_SCENARIOS), by_spark


@pytest.mark.parametrize("row", ALL_ROWS, ids=[r[0] for r in ALL_ROWS])
def test_rows_spark_wrote_decode_to_the_same_arrow(row: tuple[Any, ...]) -> None:
    """Every type (nested structs, arrays, maps, intervals, decimals, strings...), three rows per buffer."""
    name, schema, hex_ = row[0], row[1], row[2]
    data = hexrow(hex_)
    buf, starts, lengths = _framed([data, data, data])
    want = _per_row(buf, starts, lengths, schema)
    got = decode_arrow(buf, starts, lengths, compile_layout(schema), to_arrow_type(schema))
    assert got.type == want.type, name
    assert _same(got.to_pylist(), want.to_pylist()), name
    # chunking changes nothing
    parts = list(
        iter_decode_arrow(buf, starts, lengths, compile_layout(schema), to_arrow_type(schema), chunk_rows=2)
    )
    assert [len(p) for p in parts] == [2, 1]
    assert _same(pa.concat_arrays(parts).to_pylist(), want.to_pylist())


def test_no_rows_is_an_empty_array() -> None:
    schema = ALL_ROWS[0][1]
    got = decode_arrow(b"", [], [], compile_layout(schema), to_arrow_type(schema))
    assert len(got) == 0 and got.type == to_arrow_type(schema)


@pytest.mark.parametrize(("name", "base", "mutate", "field", "message"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_damaged_rows_raise_what_the_row_decoder_raises(
    name: str, base: tuple[Any, ...], mutate: Any, field: str | None, message: str
) -> None:
    data, length = mutate(hexrow(base[2]))
    good = hexrow(base[2])
    buf, starts, lengths = _framed([good, data, good])
    lengths[1] = length
    layout = compile_layout(base[1])
    path = "state/0/1/7.delta"
    with pytest.raises(SchemaMismatchError, match=message) as err:
        decode_arrow(buf, starts, lengths, layout, to_arrow_type(base[1]), path=path, records=[10, 11, 12])
    assert err.value.path == path
    assert err.value.offset == int(starts[1])
    assert err.value.context["record"] == 11
    assert err.value.context.get("field") == field


def _both(data: bytes, length: int, schema: Any) -> tuple[Any, Any]:
    layout = compile_layout(schema)
    try:
        rows: Any = ("ok", to_arrow_array(decode_rows(data, [0], [length], layout), schema))
    except StatelensError as e:
        rows = ("error", type(e))
    except pa.ArrowInvalid:  # decoded, but Arrow refuses the value (a decimal beyond its precision)
        rows = ("unconvertible", None)
    try:
        cols: Any = ("ok", decode_arrow(data, [0], [length], layout, to_arrow_type(schema)))
    except StatelensError as e:
        cols = ("error", type(e))
    return rows, cols


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    row=st.sampled_from(ALL_ROWS),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 200),
)
def test_mutated_rows_agree_or_both_fail(
    row: tuple[Any, ...], edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(hexrow(row[2]))
    for at, value in edits:
        data[at % len(data)] = value
    for length in (len(data), min(cut, len(data)), (len(data) // 8) * 8):
        rows, cols = _both(bytes(data), length, row[1])
        if rows[0] == "unconvertible":
            # decimals beyond their precision keep their bits; a null map key is a typed error
            assert cols[0] in ("ok", "error"), (row[0], cols)
            continue
        assert rows[0] == cols[0], (row[0], rows, cols)
        if rows[0] == "ok":
            assert _equal(rows[1], cols[1]), row[0]


def test_many_rows_with_nulls_match() -> None:
    """A column of many rows where some values are null (null slots hold leftovers, never read)."""
    picked = [r for r in ALL_ROWS if "null" in r[0].lower()] or ALL_ROWS[:3]
    for name, schema, hex_, *_ in picked:
        good = hexrow(hex_)
        buf, starts, lengths = _framed([good] * 7)
        want = _per_row(buf, starts, lengths, schema)
        got = decode_arrow(
            buf, np.asarray(starts), np.asarray(lengths), compile_layout(schema), to_arrow_type(schema)
        )
        assert _same(got.to_pylist(), want.to_pylist()), name


@pytest.mark.spark
def test_a_damaged_file_fails_as_read_rows_does(checkpoint: Any, tmp_path: Any) -> None:
    """A truncated delta: the columnar replay raises the same typed, located error as the row path."""
    import shutil

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_count") / "checkpoint", root)
    reader = open_checkpoint(str(root)).store_reader(0, None)
    pid = reader.partition_ids()[0]
    v = reader.versions(pid)[-1]
    delta = root / "state" / "0" / str(pid) / f"{v}.delta"
    delta.write_bytes(delta.read_bytes()[: delta.stat().st_size // 2])
    reader = open_checkpoint(str(root)).store_reader(0, None)
    with pytest.raises(StatelensError) as by_rows:
        reader.read_rows(pid, v)
    with pytest.raises(StatelensError) as by_columns:
        reader.read_arrow(pid, v)
    assert type(by_columns.value) is type(by_rows.value)
    assert str(by_columns.value) == str(by_rows.value) and f"{v}.delta" in str(by_columns.value)
    # the other partitions still read
    other = reader.partition_ids()[1]
    assert reader.read_arrow(other, v).num_rows == len(reader.read_rows(other, v))


@pytest.mark.spark
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_arrow_rows_read_back_as_the_row_decoder_gives_them(scenario: str, checkpoint: Any) -> None:
    """ArrowStateRows over read_arrow's tables: the same StateRows as read_rows, page by page (for a
    row-only store, read_arrow's table is read_rows through Arrow: the round trip is what is compared)."""
    from statelens.readers.arrow_values import ArrowStateRows

    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    compared = round_trips = 0
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None:
                continue
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            for pid in reader.partition_ids():
                versions = reader.versions(pid)
                for v in sorted({versions[len(versions) // 2], versions[-1]} if versions else set()):
                    with _row_path_calls(reader, "_rows_arrow") as calls:
                        table = reader.read_arrow(pid, v)
                    assert calls == [0 if reader.columnar else 1], (scenario, store.store_name, pid, v)
                    rows = ArrowStateRows(
                        [table],
                        store.key_schema,
                        store.value_schema,
                        page_rows=3,
                        pages_kept=2,
                    )
                    want = reader.read_rows(pid, v)
                    assert len(rows) == len(want)
                    assert sorted(map(repr, rows)) == sorted(map(repr, want)), (
                        scenario,
                        store.store_name,
                        pid,
                        v,
                    )
                    if len(rows) > 4:  # random access and slices agree with iteration
                        assert (
                            rows[4] == list(rows)[4]
                            and rows[-1] == list(rows)[-1]
                            and rows[1:3] == list(rows)[1:3]
                        )
                    compared += len(rows)
                    round_trips += 0 if reader.columnar else len(rows)
    assert compared > 0
    # Where every family is row-only by design, the round trip is all there is to compare.
    assert (round_trips == compared) == (scenario in ALL_ROW_ONLY_SCENARIOS), (compared, round_trips)


#: Scenarios whose every store is row-only (column families of Avro or checksummed rows).
ALL_ROW_ONLY_SCENARIOS = {"rocks_tws_avro", "rocks_tws_checksum", "rocks_tws_timers_avro"}


#: Generated checkpoints without change records: RocksDB without changelogs (no change feed at all).
NO_CHANGE_RECORDS = {"rocks_agg"}


@pytest.mark.spark
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_change_feed_reads_the_same_as_arrow(scenario: str, checkpoint: Any, request: Any) -> None:
    """read_changes_arrow: every change record of every delta/changelog, in file order, as read_changes
    (decoded column by column); a store whose changes are row-only by design (column families) is
    compared with Spark's change feed of its state variable instead. Every file must decode."""
    from tests import oracle

    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    compared = by_spark = 0
    for op in ckpt.operators:
        variables = None
        for store in op.stores:
            if store.schema is None:
                continue
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            schema = state_row_schema(store.key_schema, store.value_schema, changes=True)
            if not reader.columnar_changes:
                spark = request.getfixturevalue("spark")
                if variables is None:
                    variables = oracle.state_variables(spark, root, op.operator_id)
                if variables:  # transformWithState: its variables' change feeds (none of the others)
                    kind = variables.get(store.store_name)
                    if kind in (None, "TimerState"):
                        continue
                    feed = oracle.read_state_variable_changes(spark, root, op.operator_id, store.store_name)
                else:  # join state formats 3 and 4: the family's own change feed
                    feed = [
                        (*c, None)
                        for c in oracle.read_change_feed(spark, root, op.operator_id, store.store_name)
                    ]
                got = []
                for pid in reader.partition_ids():
                    for v in reader.delta_versions(pid):
                        with _row_path_calls(reader, "read_changes") as calls:
                            table = reader.read_changes_arrow(pid, v)
                        assert calls == [1], (scenario, store.store_name, pid, v)
                        assert not any(table.column("derived").to_pylist()), (scenario, store.store_name, v)
                        got.append(table.drop_columns(["derived"]))  # recorded in changelogs, as Spark's
                want = [
                    (
                        b + 1,
                        p,
                        {"update": "put", "delete": "remove"}.get(t, t),
                        k if u is None else (k, u),
                        val,
                    )
                    for b, t, p, k, val, u in feed
                ]
                assert want and _plain_rows(pa.concat_tables(got)) == sorted(
                    repr(oracle.canonical(r)) for r in want
                ), (scenario, store.store_name)
                by_spark += len(want)
                continue
            for pid in reader.partition_ids():
                for v in reader.delta_versions(pid):
                    changes = reader.read_changes(pid, v)  # real Spark files: a decode error fails
                    with _row_path_calls(reader, "read_changes") as calls:
                        got = reader.read_changes_arrow(pid, v, unique_names=True)
                    assert calls == [0], (scenario, store.store_name, pid, v)
                    want = rows_to_arrow(
                        [(c.version, c.partition_id, c.change, c.key, c.value, c.derived) for c in changes],
                        schema,
                        unique_names=True,
                    )
                    assert got.schema.equals(want.schema), (scenario, store.store_name)
                    assert _same(got.to_pylist(), want.to_pylist()), (scenario, store.store_name, pid, v)
                    compared += got.num_rows
    assert (compared > 0) == (scenario not in NO_CHANGE_RECORDS and scenario not in COLUMN_FAMILY_SCENARIOS)
    assert (by_spark > 0) == (scenario in COLUMN_FAMILY_SCENARIOS), by_spark


#: Checkpoints of one store of column families (transformWithState, join state formats 3 and 4), whose
#: change records are row-only.
COLUMN_FAMILY_SCENARIOS = {
    "rocks_join_v3",
    "rocks_join_v4",
    "rocks_tws",
    "rocks_tws_timers",
    "rocks_tws_avro",
    "rocks_tws_checksum",
    "rocks_tws_timers_avro",
    "rocks_tws_event_time",
}


def test_payloads_outside_their_row_fail_as_the_row_decoder_says() -> None:
    """A real five-field row whose string is made to run past the row, and a real nested struct whose
    string is made to run past the nested row: the Arrow decoder names the record, the offset, the field
    and the bounds as the row decoder does."""
    for base, at, word, field, says in (
        (
            FIVE,
            16,
            _word(0x30, 17),
            "s",
            "string payload at offset 48 with size 17 is outside [48, 64) of its row",
        ),
        (
            STRUCT,
            32,
            _word(0x18, 100),
            "c.b",
            "string payload at offset 24 with size 100 is outside [24, 32) of its row",
        ),
    ):
        good = hexrow(base[2])
        bad = _patch(good, at, "<Q", word)
        layout = compile_layout(base[1])
        with pytest.raises(SchemaMismatchError) as row:
            decode_row(bad, 0, len(bad), layout, path="p")
        assert says in str(row.value) and row.value.context["field"] == field
        buf, starts, lengths = _framed([good, bad, good])
        with pytest.raises(SchemaMismatchError) as arrow:
            decode_arrow(buf, starts, lengths, layout, to_arrow_type(base[1]), path="p", records=[1, 2, 3])
        assert says in str(arrow.value) and arrow.value.context["field"] == field
        assert arrow.value.context["record"] == 2 and arrow.value.offset == int(starts[1])


def test_a_row_outside_the_buffer_names_its_record_and_offset() -> None:
    data = hexrow(FIVE[2])
    with pytest.raises(
        SchemaMismatchError, match="row of 64 bytes at 8 is outside the 64-byte buffer"
    ) as err:
        decode_arrow(
            data, [0, 8], [64, 64], compile_layout(FIVE[1]), to_arrow_type(FIVE[1]), path="p", records=[7, 9]
        )
    assert err.value.context["record"] == 9 and err.value.offset == 8


def test_a_string_that_is_not_utf8_decodes_with_replacement_characters() -> None:
    """Spark's ``UTF8String.toString`` decodes with Java's UTF-8 decoder, which replaces a malformed byte
    with U+FFFD: a real row whose string has its second byte made 0xff reads so, in a column whose other
    rows stay whole."""
    good = hexrow(FIVE[2])
    bad = bytearray(good)
    bad[49] = 0xFF  # "abcdefghij" sits at offset 48 (its slot: offset 0x30, size 10)
    buf, starts, lengths = _framed([good, bytes(bad), good])
    got = decode_arrow(buf, starts, lengths, compile_layout(FIVE[1]), to_arrow_type(FIVE[1]))
    assert got.field("s").to_pylist() == ["abcdefghij", "a\ufffdcdefghij", "abcdefghij"]
    assert got.field("l").to_pylist() == [42, 42, 42]


def test_a_null_map_key_is_a_typed_error_naming_the_type() -> None:
    """Spark refuses null map keys (error class ``NULL_MAP_KEY``), and Arrow cannot hold one: the real map
    row (docs/format.md §6.4) with its key array's null bit 0 set (the key array starts at 24, its null
    bits at 32) is a typed error naming the type and the field."""
    data = bytearray(hexrow(MAP[2]))
    data[32] |= 0x01
    buf, starts, lengths = _framed([hexrow(MAP[2]), bytes(data)])
    with pytest.raises(SchemaMismatchError, match="values of map<string,int> that Arrow cannot hold") as err:
        decode_arrow(
            buf, starts, lengths, compile_layout(MAP[1]), to_arrow_type(MAP[1]), path="state/0/1/7.delta"
        )
    assert err.value.path == "state/0/1/7.delta"
    assert err.value.context.get("field") == "c"


def test_fmgws_v1_timeout_timestamp_is_a_long_column() -> None:
    """Spec §7.3: flatMapGroupsWithState state format 1 declares ``timeoutTimestamp`` integer and writes it
    with setLong; read with ``long_fields`` the column is int64, keeps its name and holds the 64 bits."""
    schema = T.StructType(
        [
            T.StructField("count", T.LongType(), False),
            T.StructField("last", T.StringType()),
            T.StructField("timeoutTimestamp", T.IntegerType(), False),
        ]
    )
    ts = 1_704_067_295_000  # epoch ms: does not fit an int32
    row = b"\0" * 8 + struct.pack("<q", 1) + struct.pack("<II", 6, 32) + struct.pack("<q", ts) + b"last-5\0\0"
    buf, starts, lengths = _framed([row, row])
    layout = compile_layout(schema, long_fields=_fmgws_v1_long_fields(schema))
    got = decode_arrow(buf, starts, lengths, layout, to_arrow_type(schema))
    assert got.type.field("timeoutTimestamp").type == pa.int64()
    assert [got.type.field(i).name for i in range(3)] == ["count", "last", "timeoutTimestamp"]
    assert got.to_pylist() == [{"count": 1, "last": "last-5", "timeoutTimestamp": ts}] * 2


def test_a_decimal_of_negative_scale_holds_its_unscaled_long_times_ten_to_the_scale() -> None:
    """Spark before 3.0 allowed a negative scale (``decimal(5,-2)``): the slot holds the unscaled long
    (docs/format.md §6.2), 123 meaning 12300. The column has the type asked for, nulls where the row's null
    bit is set."""
    schema = one(T.DecimalType(5, -2))
    row = b"\0" * 8 + struct.pack("<q", 123)
    null = (1).to_bytes(8, "little") + struct.pack("<q", 123)
    buf, starts, lengths = _framed([row, null, row])
    got = decode_arrow(buf, starts, lengths, compile_layout(schema), to_arrow_type(schema))
    assert got.type == to_arrow_type(schema)
    assert got.field("c").to_pylist() == [Decimal(12300), None, Decimal(12300)]

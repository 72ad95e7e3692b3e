"""Column family keys, values and Avro rows decoded without a JVM: what Spark's transformWithState query
recorded (``rocks_tws``: its input plan gives every count), and real keys and rows damaged in stated ways.

Avro rows of arrays and nested structs, which no Avro scenario holds, are written here byte by byte from
the Avro specification (https://avro.apache.org/docs/current/specification/: a union is its branch index
as a zig-zag varint, an array its block count, its items and a zero count) for the writer schemas of
docs/format.md §7.7.4 (nullable fields become ``["null", T]`` unions).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

import pytest

from statelens.readers._format.avro_rows import avro_schema, decode_avro, split_schema_id
from statelens.readers._format.cf_codec import _range_value, decode_keys, strip_version
from statelens.readers._format.cf_store import ColumnFamilyStoreReader
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import CorruptFileError, SchemaMismatchError, UnsupportedVersionError

PATH = "state/0/1/2.changelog"

#: ``rocks_tws``'s input, one list a batch: (grouping key, tag) rows (tests/spark_checkpoints.py).
TWS_PLAN = [
    [("a", "x"), ("b", "y"), ("a", "y")],
    [("a", "x"), ("c", "z")],
    [("b", "y"), ("d", "x")],
    [("a", "reset"), ("b", "x")],
    [("a", "y"), ("c", "x"), ("e", "y")],
]


def _family(checkpoint: Any, scenario: str, name: str) -> ColumnFamilyStoreReader:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    for op in ckpt.operators:
        for store in op.stores:
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            if isinstance(reader, ColumnFamilyStoreReader) and reader.family.name == name:
                return reader
    raise AssertionError(f"{scenario} has no column family {name}")


def _counts_put() -> list[Counter]:
    """The ``cnt`` value each batch puts (version = batch + 1): the running number of a key's rows."""
    total: Counter = Counter()
    out = []
    for batch in TWS_PLAN:
        seen = Counter(k for k, _ in batch)
        total.update(seen)
        out.append(Counter({((k,), (total[k],)): 1 for k in seen}))
    return out


# -- the change feed of a family read as a store --------------------------------------------------------
def test_value_state_changes_are_the_counts_each_batch_put(checkpoint: Any) -> None:
    reader = _family(checkpoint, "rocks_tws", "cnt")
    for version, expected in enumerate(_counts_put(), start=1):
        recorded: Counter = Counter()
        differences: Counter = Counter()
        for pid in reader.partition_ids():
            assert not reader.changes_derived(pid, version)  # a changelog of every version
            for change in reader.read_changes(pid, version):
                assert (change.version, change.partition_id, change.change) == (version, pid, "put")
                assert not change.derived
                recorded[(change.key, change.value)] += 1
            pairs = list(reader.iter_raw_changes(pid, version))
            for key, value in reader.decode_pairs(pairs, PATH):
                differences[(key, value)] += 1
        assert recorded == expected, version
        assert differences == expected, version


# -- Avro rows ----------------------------------------------------------------------------------------------
def test_avro_nested_struct_fields_are_unions_only_when_nullable() -> None:
    from pyspark.sql.types import IntegerType, StructField, StructType

    inner = StructType([StructField("a", IntegerType(), nullable=False), StructField("b", IntegerType())])
    schema = StructType([StructField("s", inner)])
    # s: branch 1 (02); a: int 5 (0a), no union; b: branch 1 (02), int -1 (01)
    assert decode_avro([b"\x02\x0a\x02\x01"], schema, PATH) == [((5, -1),)]
    # s: branch 0 (00), null
    assert decode_avro([b"\x00"], schema, PATH) == [(None,)]


def test_avro_arrays_decode_to_lists_of_their_element_type() -> None:
    from pyspark.sql.types import ArrayType, IntegerType, StructField, StructType

    schema = StructType(
        [
            StructField("xs", ArrayType(IntegerType())),
            StructField("ss", ArrayType(StructType([StructField("n", IntegerType(), False)]), False)),
        ]
    )
    # xs: branch 1, block of 2 (04): [branch 1, 1 (02)], [branch 0: null], end (00);
    # ss: branch 1, block of 1 (02): struct n = 3 (06), end (00)
    row = b"\x02\x04\x02\x02\x00\x00" + b"\x02\x02\x06\x00"
    assert decode_avro([row], schema, PATH) == [([1, None], [(3,)])]


def test_avro_types_not_decoded_natively_are_refused_naming_the_file() -> None:
    from pyspark.sql.types import ArrayType, MapType, NullType, StringType, StructField, StructType

    nested_map = StructType(
        [StructField("s", StructType([StructField("m", MapType(StringType(), StringType()))]))]
    )
    with pytest.raises(UnsupportedVersionError, match="map<string,string> column is not decoded") as err:
        avro_schema(nested_map, PATH)
    assert err.value.path == PATH
    # Elements of no bytes: nulls, or structs of null fields only, in arrays that hold no null element
    nulls = StructType([StructField("xs", ArrayType(NullType(), containsNull=False))])
    empty_structs = StructType(
        [StructField("xs", ArrayType(StructType([StructField("n", NullType())]), containsNull=False))]
    )
    for schema in (nulls, empty_structs):
        with pytest.raises(UnsupportedVersionError) as err:
            avro_schema(schema, PATH)
        assert err.value.path == PATH
        assert err.value.message.endswith(
            "column (elements of no bytes) is not decoded natively; use --backend spark"
        ), err.value.message


def test_avro_rows_that_do_not_decode_name_the_file_and_their_first_bytes() -> None:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    strings = StructType([StructField("s", StringType())])
    row = bytes(range(4, 18))  # union branch 2 of a 2-branch union
    with pytest.raises(CorruptFileError) as err:
        decode_avro([b"\x00", row], strings, PATH)
    assert err.value.path == PATH
    assert err.value.message.startswith(
        "Avro row 1 (04 05 06 07 08 09 0a 0b 0c 0d 0e 0f...) does not decode: "
    )
    ints = StructType([StructField("n", IntegerType())])
    with pytest.raises(CorruptFileError) as err:
        decode_avro([b"\x02\x0a\x00"], ints, PATH)  # int 5, then a byte of no field
    assert (err.value.path, err.value.message) == (
        PATH,
        "Avro row 0 ends after 2 of its 3 bytes: not written with this schema",
    )
    with pytest.raises(CorruptFileError) as err:
        split_schema_id(b"\x00", PATH)
    assert (err.value.path, err.value.message) == (PATH, "Avro row of 1 bytes has no schema id")
    assert split_schema_id(b"\x07\x01\x02", PATH) == (0x0107, b"\x02")


# -- column family keys -------------------------------------------------------------------------------------
def test_rows_without_their_version_byte_are_named_with_their_first_bytes() -> None:
    row = b"\x07" + bytes(range(1, 16))
    with pytest.raises(CorruptFileError) as err:
        strip_version(row, PATH)
    assert (err.value.path, err.value.message) == (
        PATH,
        "row 07 01 02 03 04 05 06 07 08 09 0a 0b... does not start with the state encoding version byte 00",
    )


def test_range_scan_markers_and_ordinals_errors_name_the_file(checkpoint: Any) -> None:
    from pyspark.sql.types import LongType

    with pytest.raises(CorruptFileError) as err:
        _range_value(b"\x07" + bytes(8), LongType(), PATH)
    assert err.value.path == PATH
    family = _family(checkpoint, "rocks_tws_timers", "$ttl_ttlv").family
    spec = {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "orderingOrdinals": [0] * 9}
    bad = dataclasses.replace(family, schema=dataclasses.replace(family.schema, key_encoder=spec))
    with pytest.raises(CorruptFileError) as err:
        decode_keys(bad, [b"\x00" * 24], PATH)
    assert err.value.message == (
        "range-scan ordinals [0, 0, 0, 0, 0, 0, 0, 0] name no column or one column twice"
    )


def test_range_scan_key_with_a_damaged_ordering_row_names_the_file(checkpoint: Any) -> None:
    reader = _family(checkpoint, "rocks_tws_timers", "$ttl_ttlv")
    pid = next(p for p in reader.partition_ids() if reader.read_raw(p, reader.versions(p)[-1]))
    key = next(iter(reader.read_raw(pid, reader.versions(pid)[-1])))
    assert decode_keys(reader.family, [key], PATH)  # the real key decodes
    # len:i32 LE, 00, then the ordering row: a null bitmap word, then the binary column's
    # offset-and-size word, whose size (low 4 bytes) is made 2**30, far past the row
    at = 4 + 1 + 8
    damaged = key[:at] + (1 << 30).to_bytes(4, "little") + key[at + 4 :]
    with pytest.raises(SchemaMismatchError, match="size 1073741824 is outside") as err:
        decode_keys(reader.family, [damaged], PATH)
    assert err.value.path == PATH


def test_timestamp_keys_before_1970_and_without_their_event_time(checkpoint: Any) -> None:
    reader = _family(checkpoint, "rocks_join_v4", "left-tsWithKey")
    assert reader.family.encoder == "TimestampAsPrefixKeyStateEncoderSpec"
    pid = next(p for p in reader.partition_ids() if reader.read_raw(p, reader.versions(p)[-1]))
    key = next(iter(reader.read_raw(pid, reader.versions(pid)[-1])))
    (real,) = decode_keys(reader.family, [key], PATH)
    assert real[-1] == int.from_bytes(key[:8], "big") - (1 << 63)  # a time after 1970, sign bit set
    # docs/format.md §4: the event time big-endian with its sign bit flipped
    for time in (-1000, -(1 << 63), -1):
        stamp = ((time & ((1 << 64) - 1)) ^ (1 << 63)).to_bytes(8, "big")
        (got,) = decode_keys(reader.family, [stamp + key[8:]], PATH)
        assert got == (*real[:-1], time)
    with pytest.raises(CorruptFileError) as err:
        decode_keys(reader.family, [key[:8]], PATH)
    assert (err.value.path, err.value.message) == (
        PATH,
        "timestamp-keyed key of 8 bytes has no 8-byte event time",
    )
    with pytest.raises(UnsupportedVersionError) as err:
        decode_keys(reader.family, [key], PATH, avro=True)
    assert err.value.path == PATH


# -- map state keys read column by column -------------------------------------------------------------------
def _damaged_arrays(reader: ColumnFamilyStoreReader, pid: int, version: int, damage: Any) -> None:
    """Make the reader's physical store hand ``damage(buf, kstart, klen)``'s bytes to the columnar read."""
    arrays = reader.physical.family_arrays

    def damaged(p: int, v: int, prefix: bytes) -> Any:
        buf, ks, kl, vs, vl = arrays(p, v, prefix)
        return damage(bytearray(buf), ks, kl), ks, kl, vs, vl

    reader.physical.family_arrays = damaged  # type: ignore[method-assign]


def test_map_keys_whose_user_key_lost_its_version_byte_are_not_read_column_by_column(
    checkpoint: Any,
) -> None:
    """A map state key (len:i32 LE, 00 + grouping key row, 00 + user key row) whose user key row starts
    with 07 instead of 00 is not read column by column (the per-row read then names the damage)."""
    reader = _family(checkpoint, "rocks_tws", "mp")
    assert reader.columnar
    pid, version = next(
        (p, v) for p in reader.partition_ids() for v in reader.versions(p) if reader.read_raw(p, v)
    )

    def damage(buf: bytearray, ks: Any, kl: Any) -> bytes:
        size = int.from_bytes(buf[ks[0] : ks[0] + 4], "little")
        assert buf[ks[0] + 4] == 0 and buf[ks[0] + 4 + size] == 0  # both version bytes, as Spark wrote them
        buf[ks[0] + 4 + size] = 7
        return bytes(buf)

    _damaged_arrays(reader, pid, version, damage)
    assert reader._columnar_arrow(pid, version, True) is None


def test_map_keys_under_a_prefix_spec_that_is_not_an_integer_are_read_row_by_row(checkpoint: Any) -> None:
    """numColsPrefixKey true (damaged schema JSON): not read column by column, and refused by the per-row
    read, which names the key encoder spec."""
    reader = _family(checkpoint, "rocks_tws", "mp")
    pid, version = next(
        (p, v) for p in reader.partition_ids() for v in reader.versions(p) if reader.read_raw(p, v)
    )
    assert reader.schema is not None
    spec = {"keyStateEncoderType": "PrefixKeyScanStateEncoderSpec", "numColsPrefixKey": True}
    reader.schema = dataclasses.replace(reader.schema, key_encoder=spec)
    reader.family = dataclasses.replace(reader.family, schema=reader.schema)
    assert reader._columnar_arrow(pid, version, True) is None
    with pytest.raises(CorruptFileError, match=re.escape("numColsPrefixKey True, not an integer")):
        reader.read_arrow(pid, version)


def test_map_user_key_string_one_byte_past_its_row_is_refused_column_by_column(checkpoint: Any) -> None:
    """The user key row of a map state key ends where the key does: a string (``mk``) whose size word
    is made one byte larger than the row holds is outside its row, though the next key's bytes follow."""
    reader = _family(checkpoint, "rocks_tws", "mp")
    pid, version = next(
        (p, v) for p in reader.partition_ids() for v in reader.versions(p) if len(reader.read_raw(p, v)) > 1
    )

    def damage(buf: bytearray, ks: Any, kl: Any) -> bytes:
        size = int.from_bytes(buf[ks[0] : ks[0] + 4], "little")
        row = int(ks[0]) + 4 + size + 1  # the user key row, after its version byte
        row_len = int(kl[0]) - 4 - size - 1
        word = row + 8  # after the null bitmap: mk's offset (high 4 bytes) and size (low 4 bytes)
        offset = int.from_bytes(buf[word + 4 : word + 8], "little")
        buf[word : word + 4] = (row_len - offset + 1).to_bytes(4, "little")
        return bytes(buf)

    _damaged_arrays(reader, pid, version, damage)
    with pytest.raises(SchemaMismatchError, match="outside") as err:
        reader._columnar_arrow(pid, version, True)
    assert f"/{pid}/{version}" in str(err.value.path), err.value.path

"""Tests of readers.schemas on real schema files written by PySpark 4.3.0, and on corrupted copies."""

from __future__ import annotations

import json
import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers import schemas
from statelens.readers.errors import (
    CorruptFileError,
    StatelensError,
    TruncatedFileError,
    UnsupportedVersionError,
    UsageError,
)
from statelens.readers.model import StoreSchema
from tests._mutations import EDITS, ROCKSDB_PROVIDER, mutate, run_files_query

# --- real bytes (hex dumps of files written by PySpark 4.3.0) --------------------------------------

#: state/0/0/_metadata/schema of groupBy(user).agg(count, sum(v), max(ts)) [RUN 4.3.0]
REAL_SCHEMA_V2_AGG = bytes.fromhex(
    "0002763200000001005a7b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a227573"
    "6572222c2274797065223a22737472696e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b"
    "7d7d5d7d0000000100d47b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a22636f"
    "756e74222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d"
    "7d2c7b226e616d65223a2273756d222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d"
    "65746164617461223a7b7d7d2c7b226e616d65223a226d6178222c2274797065223a2274696d657374616d70222c226e"
    "756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d"
)

#: key column named 'k\\u0000é😀x' (JSON-escaped NUL, emoji as two 3-byte surrogates) [RUN 4.3.0]
REAL_SCHEMA_V2_SURROGATES = bytes.fromhex(
    "000276320000000100667b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a226b5c"
    "7530303030c3a9eda0bdedb88078222c2274797065223a22737472696e67222c226e756c6c61626c65223a747275652c"
    "226d65746164617461223a7b7d7d5d7d0000000100947b2274797065223a22737472756374222c226669656c6473223a"
    "5b7b226e616d65223a226d6178222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65"
    "746164617461223a7b7d7d2c7b226e616d65223a22636f756e74222c2274797065223a226c6f6e67222c226e756c6c61"
    "626c65223a747275652c226d65746164617461223a7b7d7d5d7d"
)

#: transformWithStateInPandas: ValueState cnt, ListState lst, MapState mp [RUN 4.3.0]
REAL_SCHEMA_V3_TWS = bytes.fromhex(
    "0002763300000004000f24726f77436f756e7465725f6c7374000000000001005a7b2274797065223a22737472756374"
    "222c226669656c6473223a5b7b226e616d65223a2275736572222c2274797065223a22737472696e67222c226e756c6c"
    "61626c65223a747275652c226d65746164617461223a7b7d7d5d7d00000000000100597b2274797065223a2273747275"
    "6374222c226669656c6473223a5b7b226e616d65223a22636f756e74222c2274797065223a226c6f6e67222c226e756c"
    "6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d0000000100357b226b65795374617465456e636f"
    "64657254797065223a224e6f5072656669784b65795374617465456e636f64657253706563227d0000000100067b2020"
    "20207d0003636e74000000000001005a7b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d"
    "65223a2275736572222c2274797065223a22737472696e67222c226e756c6c61626c65223a747275652c226d65746164"
    "617461223a7b7d7d5d7d00000000000100557b2274797065223a22737472756374222c226669656c6473223a5b7b226e"
    "616d65223a2263222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164617461"
    "223a7b7d7d5d7d0000000100357b226b65795374617465456e636f64657254797065223a224e6f5072656669784b6579"
    "5374617465456e636f64657253706563227d0000000100067b202020207d00036c7374000000000001005a7b22747970"
    "65223a22737472756374222c226669656c6473223a5b7b226e616d65223a2275736572222c2274797065223a22737472"
    "696e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d00000000000100907b2274"
    "797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a2273222c2274797065223a2273747269"
    "6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d2c7b226e616d65223a226e222c22"
    "74797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d000000"
    "0100357b226b65795374617465456e636f64657254797065223a224e6f5072656669784b65795374617465456e636f64"
    "657253706563227d0000000100067b202020207d00026d70000000000001013c7b2274797065223a2273747275637422"
    "2c226669656c6473223a5b7b226e616d65223a226b6579222c2274797065223a7b2274797065223a2273747275637422"
    "2c226669656c6473223a5b7b226e616d65223a2275736572222c2274797065223a22737472696e67222c226e756c6c61"
    "626c65223a747275652c226d65746164617461223a7b7d7d5d7d2c226e756c6c61626c65223a747275652c226d657461"
    "64617461223a7b7d7d2c7b226e616d65223a22757365724b6579222c2274797065223a7b2274797065223a2273747275"
    "6374222c226669656c6473223a5b7b226e616d65223a226d6b222c2274797065223a22737472696e67222c226e756c6c"
    "61626c65223a747275652c226d65746164617461223a7b7d7d5d7d2c226e756c6c61626c65223a747275652c226d6574"
    "6164617461223a7b7d7d5d7d00000000000100567b2274797065223a22737472756374222c226669656c6473223a5b7b"
    "226e616d65223a226d76222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164"
    "617461223a7b7d7d5d7d00000001004c7b226b65795374617465456e636f64657254797065223a225072656669784b65"
    "795363616e5374617465456e636f64657253706563222c226e756d436f6c735072656669784b6579223a317d00000001"
    "00587b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a226d6b222c227479706522"
    "3a22737472696e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d"
)

#: stream-stream join, join.stateFormatVersion=4 [RUN 4.3.0]
REAL_SCHEMA_V3_JOIN_V4 = bytes.fromhex(
    "000276330000000400166c6566742d6b6579576974685473546f56616c75657300000000000100a07b2274797065223a"
    "22737472756374222c226669656c6473223a5b7b226e616d65223a226669656c6430222c2274797065223a2273747269"
    "6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d2c7b226e616d65223a225f5f6576"
    "656e745f74696d65222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d657461646174"
    "61223a7b7d7d5d7d00000000000100f87b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d"
    "65223a226c75222c2274797065223a22737472696e67222c226e756c6c61626c65223a747275652c226d657461646174"
    "61223a7b7d7d2c7b226e616d65223a226c7473222c2274797065223a2274696d657374616d70222c226e756c6c61626c"
    "65223a747275652c226d65746164617461223a7b22737061726b2e77617465726d61726b44656c61794d73223a313030"
    "30307d7d2c7b226e616d65223a226d617463686564222c2274797065223a22626f6f6c65616e222c226e756c6c61626c"
    "65223a747275652c226d65746164617461223a7b7d7d5d7d00000001003f7b226b65795374617465456e636f64657254"
    "797065223a2254696d657374616d704173506f73746669784b65795374617465456e636f64657253706563227d000000"
    "0100067b202020207d000e6c6566742d7473576974684b657900000000000100a07b2274797065223a22737472756374"
    "222c226669656c6473223a5b7b226e616d65223a226669656c6430222c2274797065223a22737472696e67222c226e75"
    "6c6c61626c65223a747275652c226d65746164617461223a7b7d7d2c7b226e616d65223a225f5f6576656e745f74696d"
    "65222c2274797065223a226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d"
    "7d000000000001005d7b2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a225f5f64"
    "756d6d795f5f222c2274797065223a22766f6964222c226e756c6c61626c65223a747275652c226d6574616461746122"
    "3a7b7d7d5d7d00000001003e7b226b65795374617465456e636f64657254797065223a2254696d657374616d70417350"
    "72656669784b65795374617465456e636f64657253706563227d0000000100067b202020207d001772696768742d6b65"
    "79576974685473546f56616c75657300000000000100a07b2274797065223a22737472756374222c226669656c647322"
    "3a5b7b226e616d65223a226669656c6430222c2274797065223a22737472696e67222c226e756c6c61626c65223a7472"
    "75652c226d65746164617461223a7b7d7d2c7b226e616d65223a225f5f6576656e745f74696d65222c2274797065223a"
    "226c6f6e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d00000000000100f87b"
    "2274797065223a22737472756374222c226669656c6473223a5b7b226e616d65223a227275222c2274797065223a2273"
    "7472696e67222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d2c7b226e616d65223a2272"
    "7473222c2274797065223a2274696d657374616d70222c226e756c6c61626c65223a747275652c226d65746164617461"
    "223a7b22737061726b2e77617465726d61726b44656c61794d73223a31303030307d7d2c7b226e616d65223a226d6174"
    "63686564222c2274797065223a22626f6f6c65616e222c226e756c6c61626c65223a747275652c226d65746164617461"
    "223a7b7d7d5d7d00000001003f7b226b65795374617465456e636f64657254797065223a2254696d657374616d704173"
    "506f73746669784b65795374617465456e636f64657253706563227d0000000100067b202020207d000f72696768742d"
    "7473576974684b657900000000000100a07b2274797065223a22737472756374222c226669656c6473223a5b7b226e61"
    "6d65223a226669656c6430222c2274797065223a22737472696e67222c226e756c6c61626c65223a747275652c226d65"
    "746164617461223a7b7d7d2c7b226e616d65223a225f5f6576656e745f74696d65222c2274797065223a226c6f6e6722"
    "2c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d000000000001005d7b227479706522"
    "3a22737472756374222c226669656c6473223a5b7b226e616d65223a225f5f64756d6d795f5f222c2274797065223a22"
    "766f6964222c226e756c6c61626c65223a747275652c226d65746164617461223a7b7d7d5d7d00000001003e7b226b65"
    "795374617465456e636f64657254797065223a2254696d657374616d7041735072656669784b65795374617465456e63"
    "6f64657253706563227d0000000100067b202020207d"
)


# --- a minimal DataOutputStream writer, to build variants of the real files -----------------------


def java_modified_utf8(text: str) -> bytes:
    """Encode like ``DataOutputStream.writeUTF`` (without the length)."""
    out = bytearray()
    units = struct.unpack(
        f"<{len(text.encode('utf-16-le', 'surrogatepass')) // 2}H", text.encode("utf-16-le", "surrogatepass")
    )
    for u in units:
        if 0x0001 <= u <= 0x007F:
            out.append(u)
        elif u <= 0x07FF:  # includes U+0000 -> c0 80
            out += bytes([0xC0 | (u >> 6), 0x80 | (u & 0x3F)])
        else:
            out += bytes([0xE0 | (u >> 12), 0x80 | ((u >> 6) & 0x3F), 0x80 | (u & 0x3F)])
    return bytes(out)


def write_utf(text: str) -> bytes:
    body = java_modified_utf8(text)
    assert len(body) <= 0xFFFF
    return struct.pack(">H", len(body)) + body


def write_chunks(text: str, size: int = 65535) -> bytes:
    """``SchemaV2Writer``: cut into ``size``-UTF-16-unit pieces, an i32 count, then writeUTF each."""
    units = text.encode("utf-16-le", "surrogatepass")
    pieces = [
        units[i : i + 2 * size].decode("utf-16-le", "surrogatepass") for i in range(0, len(units), 2 * size)
    ]
    pieces = pieces or [""]
    return struct.pack(">i", len(pieces)) + b"".join(write_utf(p) for p in pieces)


def read_utf(data: bytes, pos: int) -> tuple[str, int]:
    """Independent readUTF for the tests (modified UTF-8 via surrogatepass after mapping c0 80)."""
    (n,) = struct.unpack_from(">H", data, pos)
    body = data[pos + 2 : pos + 2 + n].replace(b"\xc0\x80", b"\x00")
    text = (
        body.decode("utf-8", "surrogatepass")
        .encode("utf-16-le", "surrogatepass")
        .decode("utf-16-le", "surrogatepass")
    )
    return text, pos + 2 + n


def read_chunks(data: bytes, pos: int) -> tuple[str, int]:
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    parts = []
    for _ in range(count):
        part, pos = read_utf(data, pos)
        parts.append(part)
    return "".join(parts), pos


def v3_pieces(data: bytes) -> list[tuple[str, int, str, int, str, str, str]]:
    """Split a real v3 file (with schema ids) into its strings, independently of readers.schemas."""
    tag, pos = read_utf(data, 0)
    assert tag == "v3"
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = []
    for _ in range(count):
        name, pos = read_utf(data, pos)
        (kid,) = struct.unpack_from(">h", data, pos)
        key, pos = read_chunks(data, pos + 2)
        (vid,) = struct.unpack_from(">h", data, pos)
        value, pos = read_chunks(data, pos + 2)
        spec, pos = read_chunks(data, pos)
        user, pos = read_chunks(data, pos)
        out.append((name, kid, key, vid, value, spec, user))
    assert pos == len(data)
    return out


def build_v3(pieces, with_ids: bool = True) -> bytes:
    out = write_utf("v3") + struct.pack(">i", len(pieces))
    for name, kid, key, vid, value, spec, user in pieces:
        out += write_utf(name)
        out += (struct.pack(">h", kid) if with_ids else b"") + write_chunks(key)
        out += (struct.pack(">h", vid) if with_ids else b"") + write_chunks(value)
        out += write_chunks(spec) + write_chunks(user)
    return out


def build_v2(key_json: str, value_json: str, size: int = 65535) -> bytes:
    return write_utf("v2") + write_chunks(key_json, size) + write_chunks(value_json, size)


def build_v1(key_json: str, value_json: str) -> bytes:
    return write_utf("v1") + write_utf(key_json) + write_utf(value_json)


def v2_jsons(data: bytes) -> tuple[str, str]:
    tag, pos = read_utf(data, 0)
    assert tag == "v2"
    key, pos = read_chunks(data, pos)
    value, pos = read_chunks(data, pos)
    assert pos == len(data)
    return key, value


def fields(struct_type) -> list[tuple[str, str, bool]]:
    return [(f.name, f.dataType.simpleString(), f.nullable) for f in struct_type.fields]


# --- modified UTF-8 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"", ""),
        (b"abc", "abc"),
        (b"\xc0\x80", "\x00"),
        (b"\x00", "\x00"),  # DataInputStream accepts a plain 00 byte too
        (b"\xc3\xa9", "é"),
        (b"\xe2\x82\xac", "€"),
        (b"\xed\xa0\xbd\xed\xb8\x80", "😀"),  # U+1F600 as two 3-byte surrogates
        (b"a\xed\xa0\xbdz", "a\ud83dz"),  # lone surrogate kept, as in a Java String
        (b"\xc1\xbf", "\x7f"),  # overlong 2-byte form: Java does not check
    ],
)
def test_decode_modified_utf8(raw, text):
    assert schemas.decode_modified_utf8(raw) == text


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b"a\x80", 1),  # continuation byte cannot start a character
        (b"ab\xf0\x9f\x98\x80", 2),  # standard 4-byte UTF-8 is not modified UTF-8
        (b"\xc3", 0),  # partial character at end
        (b"x\xe2\x82", 1),
        (b"\xc3\x41", 1),  # bad continuation
        (b"\xe2\x82\x41", 1),
    ],
)
def test_decode_modified_utf8_errors(raw, offset):
    with pytest.raises(CorruptFileError) as info:
        schemas.decode_modified_utf8(raw, "f", offset=100)
    assert info.value.offset == 100 + offset


def test_modified_utf8_errors_say_what_is_wrong():
    with pytest.raises(CorruptFileError, match="modified UTF-8: partial character at end"):
        schemas.decode_modified_utf8(b"x\xe2\x82", "f")
    for raw in (b"\xc3\x41", b"\xe2\x82\x41"):  # in a 2-byte and in a 3-byte character
        with pytest.raises(CorruptFileError, match="modified UTF-8: bad continuation byte"):
            schemas.decode_modified_utf8(raw, "f")


@given(st.text(max_size=200))
def test_modified_utf8_round_trip(text):
    assert schemas.decode_modified_utf8(java_modified_utf8(text)) == text


# --- v2 (and v1) ----------------------------------------------------------------------------------


def test_real_v2_header_matches_spec():
    # docs/format.md §5.2: 00 02 76 32 | 00 00 00 01 | <u16 chunk length> {"type...
    assert REAL_SCHEMA_V2_AGG[:8] == bytes.fromhex("0002763200000001")
    assert REAL_SCHEMA_V2_AGG[10:17] == b'{"type"'


def test_real_v2_aggregation():
    s = schemas.parse_schema_file(REAL_SCHEMA_V2_AGG, "state/0/0/_metadata/schema")
    assert isinstance(s, StoreSchema)
    assert (s.schema_version, s.path, s.key_encoder, s.user_key_schema) == (
        2,
        "state/0/0/_metadata/schema",
        None,
        None,
    )
    assert fields(s.key_schema) == [("user", "string", True)]
    assert fields(s.value_schema) == [
        ("count", "bigint", True),
        ("sum", "bigint", True),
        ("max", "timestamp", True),
    ]


def _real_struct_jsons() -> list[str]:
    """Struct type JSON of real schema files of generated checkpoints (tests/fuzz/schemas.json)."""
    from pathlib import Path

    entries = json.loads((Path(__file__).parent / "fuzz" / "schemas.json").read_text())
    return [e["json"] for e in entries]


def test_kept_schema_text_is_pyspark_spelling_and_outline_matches_pyspark() -> None:
    """A schema is kept as text and made into pyspark types on first use: the text is the one pyspark's
    ``StructType.json()`` writes for the same file, and the outline (names, type names, metadata) the
    one its fields give, for every real schema of the corpus (decimals, intervals, maps, nested structs,
    watermark metadata)."""
    texts = _real_struct_jsons()
    assert len(texts) >= 10
    for text in texts:
        theirs = schemas.struct_type_from_json(text)
        assert schemas.struct_json(text) == theirs.json()
        kept = StoreSchema(schemas.struct_json(text), schemas.struct_json(text), 2, "f")
        assert kept.key_schema == theirs
        for ours, field in zip(kept.key_fields, theirs.fields, strict=True):
            kind = field.dataType.typeName()
            assert ours.name == field.name
            assert ours.metadata == (field.metadata or {})
            assert ours.type_name == (
                kind if kind in ("struct", "array", "map") else field.dataType.jsonValue()
            )
            if kind == "struct":
                assert ours.names == [f.name for f in field.dataType.fields]


@pytest.mark.parametrize(
    "spelling",
    [
        "decimal",
        "decimal(10,2)",
        "interval",
        "interval day",
        "interval day to day",
        "interval day to second",
        "interval second to day",
        "interval year to year",
        "interval year to month",
        "varchar(5)",
        "char(3)",
        "timestamp_ntz",
    ],
)
def test_kept_schema_text_is_spelled_as_pyspark_spells_it(spelling: str) -> None:
    """Whether or not pyspark is asked (``decimal`` alone and ``interval day to day`` are spelled
    otherwise by pyspark, so it is), the text kept is the one pyspark's ``json()`` writes."""
    text = json.dumps(
        {"type": "struct", "fields": [{"name": "x", "type": spelling, "nullable": True, "metadata": {}}]}
    )
    assert schemas.struct_json(text) == schemas.struct_type_from_json(text).json()


def test_common_types_are_read_without_pyspark_others_with_it() -> None:
    """Opening a schema of common types imports no pyspark (a fresh process); a type only pyspark
    knows how to check (``varchar(5)``) is checked by it, and an unknown one refused by it."""
    import subprocess

    code = (
        "import sys\n"
        "from statelens.readers import schemas\n"
        f"s = schemas.parse_schema_file(bytes.fromhex({REAL_SCHEMA_V2_AGG.hex()!r}), 'f')\n"
        "assert [f.type_name for f in s.value_fields] == ['long', 'long', 'timestamp']\n"
        "print('pyspark' in sys.modules)\n"
        'schemas.struct_json(\'{"type":"struct","fields":[{"name":"v","type":"varchar(5)"}]}\')\n'
        "print('pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    with pytest.raises(CorruptFileError, match="not a valid Spark schema"):
        schemas.struct_json('{"type":"struct","fields":[{"name":"v","type":"varchar(x)"}]}', "f", 7)


def test_arrays_and_maps_of_common_types_are_read_without_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays and maps, spelled as Spark's ``DataType.json`` spells them (``elementType`` and
    ``containsNull``; ``keyType``, ``valueType`` and ``valueContainsNull``), of common types are kept
    without asking pyspark, as pyspark's ``json()`` spells them."""
    text = json.dumps(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "a",
                    "type": {"type": "array", "elementType": "long", "containsNull": True},
                    "nullable": True,
                    "metadata": {},
                },
                {
                    "name": "m",
                    "type": {
                        "type": "map",
                        "keyType": "string",
                        "valueType": "double",
                        "valueContainsNull": False,
                    },
                    "nullable": False,
                    "metadata": {},
                },
            ],
        }
    )
    expected = schemas.struct_type_from_json(text).json()

    def no_pyspark(*args: object, **kwargs: object) -> None:
        raise AssertionError("pyspark was asked")

    monkeypatch.setattr(schemas, "struct_type", no_pyspark)
    assert schemas.struct_json(text) == expected


def test_real_v2_surrogate_pair_field_name():
    s = schemas.parse_schema_file(REAL_SCHEMA_V2_SURROGATES, "schema")
    assert [f.name for f in s.key_schema.fields] == ["k\x00é😀x"]
    assert [f.name for f in s.value_schema.fields] == ["max", "count"]


def test_v1_from_real_json():
    key, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    s = schemas.parse_schema_file(build_v1(key, value), "schema")
    ref = schemas.parse_schema_file(REAL_SCHEMA_V2_AGG, "schema")
    assert s.schema_version == 1
    assert (s.key_schema, s.value_schema) == (ref.key_schema, ref.value_schema)


def test_v2_writer_reproduces_real_bytes():
    key, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    assert build_v2(key, value) == REAL_SCHEMA_V2_AGG


@pytest.mark.parametrize("size", [1, 7, 50])
def test_v2_chunks_are_concatenated(size):
    key, value = v2_jsons(REAL_SCHEMA_V2_SURROGATES)
    data = build_v2(key, value, size)
    assert struct.unpack_from(">i", data, 4)[0] > 1
    s = schemas.parse_schema_file(data, "schema")
    ref = schemas.parse_schema_file(REAL_SCHEMA_V2_SURROGATES, "schema")
    assert (s.key_schema, s.value_schema) == (ref.key_schema, ref.value_schema)


def test_v2_chunk_boundary_inside_surrogate_pair():
    key, value = v2_jsons(REAL_SCHEMA_V2_SURROGATES)
    units = key.encode("utf-16-le")
    cut = 2 * (len(key[: key.index("😀")].encode("utf-16-le")) // 2 + 1)  # between the surrogate halves
    first = units[:cut].decode("utf-16-le", "surrogatepass")
    second = units[cut:].decode("utf-16-le", "surrogatepass")
    assert first[-1] == "\ud83d"
    data = write_utf("v2") + struct.pack(">i", 2) + write_utf(first) + write_utf(second) + write_chunks(value)
    s = schemas.parse_schema_file(data, "schema")
    assert [f.name for f in s.key_schema.fields] == ["k\x00é😀x"]


def test_v2_chunk_ending_in_a_lone_high_surrogate_keeps_it():
    """A Java String may hold a lone surrogate, and writeUTF writes it as three bytes: the real file's
    field name with its emoji's low half taken out, cut after the high half, reads back as that String."""
    key, value = v2_jsons(REAL_SCHEMA_V2_SURROGATES)
    key = key.replace("\U0001f600", "\ud83d")  # U+1F600 without its low surrogate
    cut = key.index("\ud83d") + 1
    data = (
        write_utf("v2")
        + struct.pack(">i", 2)
        + write_utf(key[:cut])
        + write_utf(key[cut:])
        + write_chunks(value)
    )
    s = schemas.parse_schema_file(data, "schema")
    assert [f.name for f in s.key_schema.fields] == ["k\x00\xe9\ud83dx"]


def test_nul_written_as_c0_80_in_field_name():
    key = json.dumps(
        {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]}
    )
    key = key.replace(
        '"a"', '"a\x00b"'
    )  # a raw NUL inside the JSON string (Spark escapes it; readUTF must not care)
    _, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    data = build_v2(key, value)
    assert b"\xc0\x80" in data
    with pytest.raises(CorruptFileError):
        # a raw control character is invalid JSON: json.loads(strict=True) refuses it like Jackson does
        schemas.parse_schema_file(data, "schema")


def test_spark_2_null_type_is_void():
    key = '{"type":"struct","fields":[{"name":"k","type":"null","nullable":true,"metadata":{}}]}'
    value = (
        '{"type":"struct","fields":[{"name":"a","type":{"type":"array","elementType":"null","containsNull":true},'
        '"nullable":true,"metadata":{}},{"name":"m","type":{"type":"map","keyType":"string","valueType":"null",'
        '"valueContainsNull":true},"nullable":true,"metadata":{}}]}'
    )
    s = schemas.parse_schema_file(build_v1(key, value), "schema")
    assert fields(s.key_schema) == [("k", "void", True)]
    assert fields(s.value_schema) == [("a", "array<void>", True), ("m", "map<string,void>", True)]


def test_udt_is_read_as_its_sql_type_without_importing_py_class():
    udt = {
        "type": "udt",
        "class": "org.example.PointUDT",
        "pyClass": "statelens_no_such_module.PointUDT",
        "sqlType": {"type": "array", "elementType": "double", "containsNull": False},
    }
    key = json.dumps(
        {"type": "struct", "fields": [{"name": "p", "type": udt, "nullable": True, "metadata": {}}]}
    )
    _, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    s = schemas.parse_schema_file(build_v2(key, value), "schema")
    assert fields(s.key_schema) == [("p", "array<double>", True)]


def test_udt_without_sql_type_is_refused_before_pyspark_sees_it():
    udt = {"type": "udt", "class": "x.Y", "pyClass": "antigravity.Nothing"}
    key = json.dumps(
        {"type": "struct", "fields": [{"name": "p", "type": udt, "nullable": True, "metadata": {}}]}
    )
    _, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    with pytest.raises(CorruptFileError, match="sqlType"):
        schemas.parse_schema_file(build_v2(key, value), "schema")
    assert "antigravity" not in sys.modules


def test_parse_schema_file_refuses_v3():
    with pytest.raises(UsageError, match="parse_schema_v3"):
        schemas.parse_schema_file(REAL_SCHEMA_V3_TWS, "state/0/_stateSchema/default/0_x")


def test_parse_schema_v3_accepts_v2():
    out = schemas.parse_schema_v3(REAL_SCHEMA_V2_AGG, "schema")
    assert list(out) == ["default"]
    assert out["default"] == schemas.parse_schema_file(REAL_SCHEMA_V2_AGG, "schema")


# --- v3 -------------------------------------------------------------------------------------------


def test_real_v3_transform_with_state():
    path = "state/0/_stateSchema/default/0_3e286b3d"
    out = schemas.parse_schema_v3(REAL_SCHEMA_V3_TWS, path)
    assert list(out) == ["$rowCounter_lst", "cnt", "lst", "mp"]
    for s in out.values():
        assert (s.schema_version, s.path) == (3, path)
        assert fields(s.key_schema)[-1:] == [("user", "string", True)] or s is out["mp"]
    assert fields(out["cnt"].value_schema) == [("c", "bigint", True)]
    assert fields(out["lst"].value_schema) == [("s", "string", True), ("n", "bigint", True)]
    assert fields(out["$rowCounter_lst"].value_schema) == [("count", "bigint", True)]
    assert out["cnt"].key_encoder == {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"}
    assert out["cnt"].user_key_schema is None
    mp = out["mp"]
    assert fields(mp.key_schema) == [
        ("key", "struct<user:string>", True),
        ("userKey", "struct<mk:string>", True),
    ]
    assert mp.key_encoder == {"keyStateEncoderType": "PrefixKeyScanStateEncoderSpec", "numColsPrefixKey": 1}
    assert fields(mp.user_key_schema) == [("mk", "string", True)]
    assert fields(mp.value_schema) == [("mv", "bigint", True)]


def test_real_v3_schema_ids():
    entries = schemas.parse_schema_v3_entries(REAL_SCHEMA_V3_TWS, "f")
    assert [(e.name, e.key_schema_id, e.value_schema_id) for e in entries] == [
        ("$rowCounter_lst", 0, 0),
        ("cnt", 0, 0),
        ("lst", 0, 0),
        ("mp", 0, 0),
    ]


def test_real_v3_join_v4():
    out = schemas.parse_schema_v3(REAL_SCHEMA_V3_JOIN_V4, "f")
    assert {k: v.key_encoder["keyStateEncoderType"] for k, v in out.items()} == {
        "left-keyWithTsToValues": "TimestampAsPostfixKeyStateEncoderSpec",
        "left-tsWithKey": "TimestampAsPrefixKeyStateEncoderSpec",
        "right-keyWithTsToValues": "TimestampAsPostfixKeyStateEncoderSpec",
        "right-tsWithKey": "TimestampAsPrefixKeyStateEncoderSpec",
    }
    assert fields(out["left-tsWithKey"].key_schema) == [
        ("field0", "string", True),
        ("__event_time", "bigint", True),
    ]
    assert fields(out["left-tsWithKey"].value_schema) == [("__dummy__", "void", True)]
    assert fields(out["right-keyWithTsToValues"].value_schema) == [
        ("ru", "string", True),
        ("rts", "timestamp", True),
        ("matched", "boolean", True),
    ]


def test_real_v3_start_matches_spec_layout():
    # docs/format.md §5.3: 00 02 "v3" | i32 count | writeUTF(name) | i16 id 00 00 | i32 chunks 00 00 00 01 | u16 len {"type"...
    data = REAL_SCHEMA_V3_JOIN_V4
    assert data[:8] == bytes.fromhex("0002763300000004")
    name_len = struct.unpack_from(">H", data, 8)[0]
    assert data[10 : 10 + name_len] == b"left-keyWithTsToValues"
    assert data[10 + name_len : 16 + name_len] == bytes.fromhex("000000000001")


def test_v3_writer_reproduces_real_bytes():
    for data in (REAL_SCHEMA_V3_TWS, REAL_SCHEMA_V3_JOIN_V4):
        assert build_v3(v3_pieces(data)) == data


@pytest.mark.parametrize("data", [REAL_SCHEMA_V3_TWS, REAL_SCHEMA_V3_JOIN_V4], ids=["tws", "join_v4"])
def test_v3_without_schema_ids(data):
    old = build_v3(v3_pieces(data), with_ids=False)
    entries = schemas.parse_schema_v3_entries(old, "f")
    ref = schemas.parse_schema_v3_entries(data, "f")
    assert [(e.key_schema_id, e.value_schema_id) for e in entries] == [(None, None)] * len(ref)
    assert [(e.name, e.schema) for e in entries] == [(e.name, e.schema) for e in ref]


def test_v3_evolved_schema_ids():
    pieces = v3_pieces(REAL_SCHEMA_V3_TWS)
    pieces[1] = (pieces[1][0], 3, pieces[1][2], 7, *pieces[1][4:])
    entries = schemas.parse_schema_v3_entries(build_v3(pieces), "f")
    assert (entries[1].name, entries[1].key_schema_id, entries[1].value_schema_id) == ("cnt", 3, 7)


def test_v3_duplicate_family():
    pieces = v3_pieces(REAL_SCHEMA_V3_TWS)
    with pytest.raises(CorruptFileError, match="twice"):
        schemas.parse_schema_v3(build_v3([pieces[0], pieces[0]]), "f")


def test_v3_bad_encoder_spec():
    pieces = v3_pieces(REAL_SCHEMA_V3_TWS)
    pieces[0] = (*pieces[0][:5], '{"numColsPrefixKey":1}', pieces[0][6])
    with pytest.raises(CorruptFileError, match="keyStateEncoderType"):
        schemas.parse_schema_v3(build_v3(pieces), "f")


# --- corruption from real bytes -------------------------------------------------------------------

REAL = {
    "v2_agg": REAL_SCHEMA_V2_AGG,
    "v2_surrogates": REAL_SCHEMA_V2_SURROGATES,
    "v3_tws": REAL_SCHEMA_V3_TWS,
    "v3_join_v4": REAL_SCHEMA_V3_JOIN_V4,
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_every_truncation_is_a_truncated_file_error(name):
    data = REAL[name]
    for cut in range(len(data)):
        with pytest.raises(TruncatedFileError) as info:
            schemas.parse_schema_v3(data[:cut], "ck/schema")
        assert info.value.path == "ck/schema"
        assert info.value.offset is not None
        assert 0 <= info.value.offset <= cut


def test_truncated_inside_key_chunk_points_at_its_length():
    with pytest.raises(TruncatedFileError, match="chunk 0 of the key schema") as info:
        schemas.parse_schema_file(REAL_SCHEMA_V2_AGG[:50], "ck/schema")
    assert info.value.offset == 8


@pytest.mark.parametrize("tag", ["v9", "v4", "v0", "x2", "", "v2 "])
def test_wrong_version_string(tag):
    data = write_utf(tag) + REAL_SCHEMA_V2_AGG[4:]
    expected = UnsupportedVersionError if tag in ("v9", "v4") else CorruptFileError
    with pytest.raises(expected) as info:
        schemas.parse_schema_file(data, "ck/state/0/0/_metadata/schema")
    assert info.value.path == "ck/state/0/0/_metadata/schema"
    assert info.value.offset == 0
    if expected is UnsupportedVersionError:
        assert repr(tag) in str(info.value)
        assert "(statelens reads v1, v2, v3)" in str(info.value)  # the three versions of docs/format.md §5


def test_bad_json_in_real_file():
    data = bytearray(REAL_SCHEMA_V2_AGG)
    pos = data.index(b'"fields"', 10)
    data[pos] = ord("'")
    with pytest.raises(CorruptFileError, match="bad schema JSON") as info:
        schemas.parse_schema_file(bytes(data), "ck/schema")
    assert info.value.offset == 4  # the key schema's chunk count


def test_integer_too_long_for_python_in_real_file():
    """The real file's key schema with a 5000-digit number in its field's metadata: Python refuses to
    parse the integer (more than 4300 digits); the error names the key schema's chunk count."""
    key, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    key = key.replace('"metadata":{}', '"metadata":{"n":' + "1" * 5000 + "}", 1)
    with pytest.raises(CorruptFileError, match=r"^ck/schema at byte 4: bad schema JSON: .*4300") as info:
        schemas.parse_schema_file(build_v2(key, value), "ck/schema")
    assert (info.value.path, info.value.offset) == ("ck/schema", 4)


def _v3_cnt_with(value: str | None = None, user: str | None = None) -> tuple[bytes, int, int]:
    """The real transformWithState v3 file with family 'cnt''s value or user key schema replaced, and
    where that family's value and user key schema chunk counts start (docs/format.md §5.3)."""
    pieces = v3_pieces(REAL_SCHEMA_V3_TWS)
    name, kid, key, vid, old_value, spec, old_user = pieces[1]
    pieces[1] = (name, kid, key, vid, value or old_value, spec, user or old_user)
    value_off = len(build_v3(pieces[:1])) + len(write_utf(name)) + 2 + len(write_chunks(key)) + 2
    user_off = value_off + len(write_chunks(value or old_value)) + len(write_chunks(spec))
    return build_v3(pieces), value_off, user_off


def test_v3_bad_value_schema_names_its_offset():
    _, _, _, _, value, _, _ = v3_pieces(REAL_SCHEMA_V3_TWS)[1]
    data, value_off, _ = _v3_cnt_with(value=value.replace('"fields"', "'fields'", 1))
    with pytest.raises(CorruptFileError, match="bad schema JSON") as info:
        schemas.parse_schema_v3(data, "ck/schema")
    assert (info.value.path, info.value.offset) == ("ck/schema", value_off)


@pytest.mark.parametrize(
    ("user", "why"),
    [("{    ", "Expecting property name"), ('{"n":' + "1" * 5000 + "}", "4300")],
    ids=["cut-short", "long-integer"],
)
def test_v3_bad_user_key_schema_names_file_and_offset(user: str, why: str) -> None:
    """Spark writes ``{    }`` for a family without a user key; JSON that does not parse is refused, at
    the user key schema's chunk count of the file."""
    data, _, user_off = _v3_cnt_with(user=user)
    with pytest.raises(
        CorruptFileError, match=f"bad user key schema JSON of column family 'cnt': .*{why}"
    ) as info:
        schemas.parse_schema_v3(data, "ck/schema")
    assert (info.value.path, info.value.offset) == ("ck/schema", user_off)


def test_json_that_is_not_a_schema():
    _, value = v2_jsons(REAL_SCHEMA_V2_AGG)
    for key in ('{"type":"array"}', "[1]", '{"type":"struct","fields":[{"name":"x","type":"nosuchtype"}]}'):
        with pytest.raises(CorruptFileError):
            schemas.parse_schema_file(build_v2(key, value), "f")


def test_chunk_length_past_the_end():
    data = bytearray(REAL_SCHEMA_V2_AGG)
    data[8:10] = b"\xff\xff"  # the key chunk claims 65535 bytes
    with pytest.raises(TruncatedFileError, match="declares 65535 bytes") as info:
        schemas.parse_schema_file(bytes(data), "ck/schema")
    assert info.value.offset == 8


def test_chunk_count_past_the_end():
    data = bytearray(REAL_SCHEMA_V2_AGG)
    data[4:8] = struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises((TruncatedFileError, CorruptFileError)):
        schemas.parse_schema_file(bytes(data), "ck/schema")


def test_negative_chunk_count():
    data = bytearray(REAL_SCHEMA_V2_AGG)
    data[4:8] = struct.pack(">i", -1)
    with pytest.raises(CorruptFileError, match="negative") as info:
        schemas.parse_schema_file(bytes(data), "ck/schema")
    assert info.value.offset == 4


def test_negative_family_count():
    data = REAL_SCHEMA_V3_TWS[:4] + struct.pack(">i", -2) + REAL_SCHEMA_V3_TWS[8:]
    with pytest.raises(CorruptFileError):
        schemas.parse_schema_v3(data, "f")


@pytest.mark.parametrize("name", sorted(REAL))
def test_trailing_bytes(name):
    with pytest.raises(CorruptFileError, match="unexpected bytes") as info:
        schemas.parse_schema_v3(REAL[name] + b"\x00", "f")
    assert info.value.offset == len(REAL[name])


def test_empty_file():
    with pytest.raises(TruncatedFileError):
        schemas.parse_schema_file(b"", "f")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(REAL)),
    edits=EDITS,
)
def test_mutated_real_schemas_give_value_or_statelens_error(name, edits):
    data = mutate(REAL[name], edits)
    error = None
    try:
        result = schemas.parse_schema_v3(bytes(data), "f")
    except StatelensError as err:
        error = err
    if error is None:
        assert all(isinstance(s, StoreSchema) for s in result.values())
    else:
        assert error.path == "f"


# --- every schema file of every real scenario, against Spark's own reader (PySpark 4.3.0) ---------

SCENARIOS = [
    "agg_count",
    "window_agg_watermark",
    "dedup_watermark",
    "join",
    "pandas_state_processing",
    "pandas_state_event",
    "codec_zstd",
    "codec_snappy",
    "codec_lzf",
    "rich_types",
    "uncommitted",
    "agg_many_partitions",
]


def assert_same_fields(ours, spark_struct, what):
    """Field by field, by position: names, types, nullability (names may repeat)."""
    assert len(ours.fields) == len(spark_struct.fields), what
    for i, (a, b) in enumerate(zip(ours.fields, spark_struct.fields, strict=True)):
        assert (a.name, a.dataType, a.nullable) == (b.name, b.dataType, b.nullable), f"{what} field {i}"


def _ddl_fields(spark, ddl):
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(ddl)
    return [(f.name, f.dataType) for f in schema.fields]


@pytest.mark.spark
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_schema_file_of_real_checkpoints(spark, checkpoint, name):
    scenario = checkpoint(name)
    expected = json.loads((scenario / "expected.json").read_text())
    cp = scenario / "checkpoint"
    for op in expected["operators"]:
        op_id = op["operator_id"]
        default_store = op["store_names"] == ["default"]
        # only partition 0 has the schema file (docs/format.md §5.1)
        for p in range(1, expected["num_partitions"]):
            assert not list((cp / "state" / str(op_id) / str(p)).rglob("_metadata"))
        for store in op["store_names"]:
            rel = (
                f"state/{op_id}/0/_metadata/schema"
                if default_store
                else f"state/{op_id}/0/{store}/_metadata/schema"
            )
            s = schemas.parse_schema_file((cp / rel).read_bytes(), rel)
            assert (s.schema_version, s.path) == (2, rel)
            reader = spark.read.format("statestore").option("operatorId", str(op_id))
            if not default_store:
                reader = reader.option("storeName", store)
            spark_schema = reader.load(str(cp)).schema
            assert_same_fields(s.key_schema, spark_schema["key"].dataType, f"{name} {store} key")
            assert_same_fields(s.value_schema, spark_schema["value"].dataType, f"{name} {store} value")
            # and against what the generator knows
            if "key_schema" in expected and default_store:
                assert [(f.name, f.dataType) for f in s.key_schema.fields] == _ddl_fields(
                    spark, expected["key_schema"]
                )
            if "key_columns" in expected:
                ddl = ", ".join(f"{n} {t}" for n, t in expected["key_columns"])
                assert [(f.name, f.dataType) for f in s.key_schema.fields] == _ddl_fields(spark, ddl)
            if op["expected_kind"] == "join":
                side = store.split("-", 1)[0]
                cols = expected[f"{side}_columns"]
                if store.endswith("keyWithIndexToValue"):
                    assert [f.name for f in s.value_schema.fields] == [*cols, "matched"]
                    assert [f.name for f in s.key_schema.fields][-1] == "index"
                else:
                    assert [f.name for f in s.value_schema.fields] == ["value"]


# --- v3 schema files and v2 operator metadata, written by PySpark 4.3.0 in the test run ----------


_ROCKSDB = ROCKSDB_PROVIDER
_BATCHES = [
    [
        {"user": "a", "v": 1, "ts": "2024-01-01T00:00:01Z"},
        {"user": "b😀", "v": 2, "ts": "2024-01-01T00:00:02Z"},
    ],
    [{"user": "a", "v": 3, "ts": "2024-01-01T00:00:30Z"}],
    [{"user": "c", "v": 4, "ts": "2024-01-01T00:01:30Z"}],
]


def _tws_query(df):
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Processor(StatefulProcessor):
        def init(self, handle):
            self.cnt = handle.getValueState("cnt", "c LONG")
            self.lst = handle.getListState("lst", "s STRING, n LONG")
            self.mp = handle.getMapState("mp", "mk STRING", "mv LONG")

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(pdf) for pdf in rows)
            c = (self.cnt.get()[0] if self.cnt.exists() else 0) + n
            self.cnt.update((c,))
            self.lst.appendValue((key[0], c))
            self.mp.updateValue((key[0] + "_k",), (c,))
            yield pd.DataFrame({"user": [key[0]], "c": [c]})

        def close(self):
            pass

    return df.groupBy("user").transformWithStateInPandas(
        Processor(), outputStructType="user STRING, c LONG", outputMode="Update", timeMode="None"
    )


def _join_query(df):
    from pyspark.sql import functions as F

    left = df.select(F.col("user").alias("lu"), F.col("ts").alias("lts")).withWatermark("lts", "10 seconds")
    right = df.select(F.col("user").alias("ru"), F.col("ts").alias("rts")).withWatermark("rts", "10 seconds")
    return left.join(
        right, F.expr("lu = ru AND rts BETWEEN lts - interval 5 seconds AND lts + interval 5 seconds")
    )


@pytest.fixture(scope="module")
def v3_checkpoints(spark, tmp_path_factory):
    """transformWithStateInPandas and a join with state format v4: both write v3 schema files."""
    base = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stateStore.providerClass": _ROCKSDB}
    tws = run_files_query(spark, tmp_path_factory.mktemp("tws"), _tws_query, "update", base, _BATCHES)
    join_conf = {**base, "spark.sql.streaming.join.stateFormatVersion": "4"}
    join = run_files_query(
        spark, tmp_path_factory.mktemp("join_v4"), _join_query, "append", join_conf, _BATCHES
    )
    return {"tws": tws, "join_v4": join}


def _v3_schemas_via_operator_metadata(cp):
    """Follow state/0/_metadata/v2/<latest> to the v3 schema file(s) of the copy (docs/format.md §8.2)."""
    from statelens.readers import logs, opmeta

    meta_dir = cp / "state" / "0" / "_metadata" / "v2"
    latest = max(b for p in meta_dir.iterdir() if (b := logs.batch_id_from_name(p.name)) is not None)
    meta = opmeta.parse_operator_metadata(
        (meta_dir / str(latest)).read_bytes(), f"state/0/_metadata/v2/{latest}"
    )
    assert meta.format_version == 2
    (store,) = meta.stores
    (uri,) = store.state_schema_file_paths
    rel = opmeta.schema_file_relpath(meta.operator_id, store.store_name, uri)
    assert (cp / rel).is_file()
    return meta, schemas.parse_schema_v3((cp / rel).read_bytes(), rel)


@pytest.mark.spark
@pytest.mark.slow
def test_v3_transform_with_state_against_spark(spark, v3_checkpoints):
    from tests.oracle import read_state_metadata

    cp = v3_checkpoints["tws"]
    meta, out = _v3_schemas_via_operator_metadata(cp)
    assert meta.operator_name == "transformWithStateInPandasExec"
    assert {v["stateName"] for v in meta.properties["stateVariables"]} == {"cnt", "lst", "mp"}
    (row,) = read_state_metadata(spark, cp)
    assert json.loads(row["operatorProperties"]) == meta.properties
    assert set(out) >= {"cnt", "lst", "mp"}

    def spark_schema(var):
        return spark.read.format("statestore").option("stateVarName", var).load(str(cp)).schema

    cnt = spark_schema("cnt")
    assert_same_fields(out["cnt"].key_schema, cnt["key"].dataType, "cnt key")
    assert_same_fields(out["cnt"].value_schema, cnt["value"].dataType, "cnt value")
    lst = spark_schema("lst")
    assert_same_fields(out["lst"].key_schema, lst["key"].dataType, "lst key")
    assert_same_fields(out["lst"].value_schema, lst["list_element"].dataType, "lst element")
    mp = spark_schema("mp")
    assert_same_fields(out["mp"].key_schema.fields[0].dataType, mp["key"].dataType, "mp grouping key")
    assert_same_fields(out["mp"].user_key_schema, mp["user_map_key"].dataType, "mp user key")
    assert_same_fields(out["mp"].value_schema, mp["user_map_value"].dataType, "mp value")
    assert out["mp"].key_encoder["keyStateEncoderType"] == "PrefixKeyScanStateEncoderSpec"


@pytest.mark.spark
@pytest.mark.slow
def test_v3_join_v4_against_spark(spark, v3_checkpoints):
    cp = v3_checkpoints["join_v4"]
    meta, out = _v3_schemas_via_operator_metadata(cp)
    assert meta.properties == {"useVirtualColumnFamilies": True}
    assert sorted(out) == [
        "left-keyWithTsToValues",
        "left-tsWithKey",
        "right-keyWithTsToValues",
        "right-tsWithKey",
    ]
    for side in ("left", "right"):
        spark_schema = spark.read.format("statestore").option("joinSide", side).load(str(cp)).schema
        ours = out[f"{side}-keyWithTsToValues"]
        assert_same_fields(ours.key_schema, spark_schema["key"].dataType, f"{side} key")
        # the store keeps a trailing "matched" flag that the joinSide view drops
        value = spark_schema["value"].dataType
        assert [f.name for f in ours.value_schema.fields] == [*value.fieldNames(), "matched"]
        for a, b in zip(ours.value_schema.fields, value.fields, strict=False):
            assert (a.name, a.dataType) == (b.name, b.dataType)

"""readers._format.records on real record streams (HDFS deltas/snapshots, RocksDB changelogs v1-v4).

Real bytes: the docs/format.md §3.2/§3.3 ``1.delta``, and files written by PySpark 4.3.0 in ``local`` mode:
an aggregation (HDFS, lz4: a delta and a snapshot), a windowed count with watermark in append mode
(a delta with a remove), the same aggregation on RocksDB with changelog checkpointing (v1; v3 with
``checkpointFormatVersion=2``) and a transformWithStateInPandas processor with a value state and a list
state (v2 with virtual column families; v4 with ``checkpointFormatVersion=2``). Corruptions are
derived from those bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers._format import keyids, records
from statelens.readers._format.codecs import decompress
from statelens.readers._format.keyids import PADDING_RATIO, PADDING_SLACK, PaddedKeys
from statelens.readers._format.records import (
    KIND_MERGE,
    KIND_PUT,
    KIND_REMOVE,
    RecordIndex,
    iter_records,
    scan_changelog,
    scan_records,
)
from statelens.readers.errors import (
    CorruptFileError,
    LimitExceededError,
    StatelensError,
    TruncatedFileError,
    UnsupportedVersionError,
)

PATH = "state/0/0/2.delta"
_RUNS_SIZED = records._runs_sized  # the walk fixture replaces it for the record-by-record walk
_LOADED = records._loaded  # and this one for the runs of one record size


@pytest.fixture(autouse=True, scope="module", params=["compiled", "python", "runs"])
def walk(request: pytest.FixtureRequest) -> Any:
    """Every test runs with the compiled record walks (readers/_format/kernels.py), with the Python ones,
    which a process uses until it has walked ``records.PYTHON_WALK_BYTES``, and with the runs of one
    record size a process without the compiled walks tries first (``records._runs_sized``)."""
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "python":
            mp.setattr(records, "_kernels", lambda _size: None)
            mp.setattr(records, "_runs_sized", lambda _buf, _pos: None)
        elif request.param == "runs":
            mp.setattr(records, "_kernels", lambda _size: None)
            mp.setattr(records, "_loaded", lambda: None)
        else:
            from statelens.readers._format import kernels

            mp.setattr(records, "_kernels", lambda _size: kernels)
        yield request.param


def _lz4(hex_text: str) -> bytes:
    return decompress(bytes.fromhex(hex_text), "fixture")


# docs/format.md §3.2: 1.delta of a dedup query -> docs/format.md §3.3: one put, key user='a' (24 bytes), value 16 bytes
SPEC_DELTA = _lz4(
    "4c5a34426c6f636b2523000000340000009616ed075300000018000100930100000010000000611000000f0000140007"
    "020050 00ffffffff 4c5a34426c6f636b15000000000000000000000000".replace(" ", "")
)
# aggregation 3.delta: two puts, keys of 24 and 96 bytes (an 80-char user), values of 24 bytes
AGG_DELTA = _lz4(
    "4c5a34426c6f636b2545000000bc000000f68ca20d5300000018000100930100000010000000631000081c0011020f00"
    "300000030500020200126007003300005038001f7a01003c088000009c000002000388005000ffffffff4c5a34426c6f"
    "636b15000000000000000000000000"
)
# aggregation 2.snapshot: two puts of the same sizes (key 24, value 24)
AGG_SNAPSHOT = _lz4(
    "4c5a34426c6f636b25410000007400000012bafc0d5300000018000100930100000010000000611000081c0011030f00"
    "3000000805000202000d380012631800000200091c00000200c00200000000000000ffffffff4c5a34426c6f636b1500"
    "0000000000000000000000"
)
# windowed count (append mode) 2.delta: a put and the remove of an evicted window (keys of 56 bytes)
WINDOW_DELTA = _lz4(
    "4c5a34426c6f636b254300000094000000829834015300000038000100131804005301000000301400010200b0a7b413"
    "d70d0600803d4d14080011631500010200111006000334000302000f50002680ffffffffffffffff4c5a34426c6f636b"
    "15000000000000000000000000"
)
EMPTY = b"\xff\xff\xff\xff"  # what every codec's empty 1.delta decompresses to (test_codecs.EMPTY)

# RocksDB changelogs
CHANGELOG_V1 = _lz4(
    "4c5a34426c6f636b2544000000c0000000071118005400000019000100940100000010000000631100081d0010020f00"
    "410000000306000102001161060000020013503a001f7a01003c0d9f00000200038a005000ffffffff4c5a34426c6f63"
    "6b15000000000000000000000000"
)
CHANGELOG_V3 = _lz4(
    "4c5a34426c6f636b25c60000005b010000f0d9e007f7420002763300955b7b2276657273696f6e223a312c2263686563"
    "6b706f696e74556e697175654964223a2230366266306237322d343034362d343465612d383033662d62623564376462"
    "6236333861227d2c4a001f324a0004f41d64373733653966362d616534642d343037382d396165352d33366462343064"
    "3632386633227d5d00000019000100940100000010000000631100081d0010020f004100000003060001020011610600"
    "00020013503a001f7a01003c0d9f00000200038a005000ffffffff4c5a34426c6f636b15000000000000000000000000"
)
CHANGELOG_V3_EMPTY = _lz4(
    "4c5a34426c6f636b150c0000000c0000003315ef000002763300025b5dffffffff4c5a34426c6f636b15000000000000"
    "000000000000"
)
CHANGELOG_V2 = _lz4(
    "4c5a34426c6f636b25900000009a010000b746f10db500027632110000001b0400010095010000001000000062120020"
    "0015240005020013070a00002900231b030d000310000b3900063800042800002100211b023000010200004500001400"
    "046e0040ffffffff3600173b9200132892001f7a0100140db200047000006d00143b8a000f590023009c00020200004d"
    "00000200000800143b62000f5500315000000000004c5a34426c6f636b15000000000000000000000000"
)
CHANGELOG_V2_EMPTY = _lz4(
    "4c5a34426c6f636b1505000000050000009a20460200027632004c5a34426c6f636b15000000000000000000000000"
)
CHANGELOG_V4 = _lz4(
    "4c5a34426c6f636b250e010000310200006ae8e60af7420002763400955b7b2276657273696f6e223a312c2263686563"
    "6b706f696e74556e697175654964223a2236643732613635642d306561332d346430622d393230322d36396637653765"
    "3361373331227d2c4a001f324a0004f51f34653234333032652d346435322d343962372d616164652d30306135646337"
    "3030393766227d5d110000001b04000100950100000010000000621200200015240005020013070a00002900231b030d"
    "000310000b3900063800042800002100211b023000010200004500001400046e0040ffffffff3600173b920013289200"
    "1f7a0100140db200047000006d00143b8a000f590023009c00020200004d00000200000800143b62000f550031500000"
    "0000004c5a34426c6f636b15000000000000000000000000"
)
TWS_KINDS = [KIND_MERGE, KIND_PUT, KIND_REMOVE, KIND_MERGE, KIND_PUT, KIND_PUT]
TWS_VAL_LEN = [21, 17, -1, 21, 17, 17]


def _be32(value: int) -> bytes:
    return (value & 0xFFFFFFFF).to_bytes(4, "big")


def _replace(data: bytes, pos: int, new: bytes) -> bytes:
    return data[:pos] + new + data[pos + len(new) :]


def _outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, StatelensError | None]:
    try:
        return fn(*args, **kwargs), None
    except StatelensError as err:
        return None, err


def _expect(
    cls: type[StatelensError], offset: int, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> StatelensError:
    with pytest.raises(StatelensError) as info:
        fn(*args, **kwargs)
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert err.path == PATH
    assert err.offset == offset, str(err)
    return err


def _arrays(index: RecordIndex) -> list[list[int]]:
    return [a.tolist() for a in (index.key_start, index.key_len, index.val_start, index.val_len, index.kind)]


# ---------------------------------------------------------------------------------------------------
# Deltas and snapshots


def test_spec_delta() -> None:
    index = scan_records(SPEC_DELTA, PATH)
    assert _arrays(index) == [[4], [24], [32], [16], [KIND_PUT]]
    assert index.count == 1
    assert index.eof_offset == 48
    for arr in (index.key_start, index.key_len, index.val_start, index.val_len):
        assert arr.dtype == np.int64
    [(key, value)] = list(iter_records(SPEC_DELTA, index))
    assert key == bytes.fromhex("00" * 8 + "0100000010000000" + "61" + "00" * 7)  # user='a'
    assert value == bytes.fromhex("01" + "00" * 15)  # __dummy__ = null


def test_real_delta_with_a_long_key() -> None:
    index = scan_records(AGG_DELTA, PATH)
    assert index.key_len.tolist() == [24, 96]
    assert index.val_len.tolist() == [24, 24]
    assert index.eof_offset == len(AGG_DELTA) - 4
    keys = [k for k, _ in iter_records(AGG_DELTA, index)]
    assert b"z" * 80 in keys[1]


def test_real_snapshot() -> None:
    index = scan_records(AGG_SNAPSHOT, PATH, allow_removes=False)
    assert index.count == 2
    assert index.key_start.tolist() == [4, 60]


def test_real_delta_with_a_remove() -> None:
    index = scan_records(WINDOW_DELTA, PATH)
    assert index.key_len.tolist() == [56, 56]
    assert index.val_len.tolist() == [16, -1]
    assert index.kind.tolist() == [KIND_PUT, KIND_REMOVE]
    assert index.val_start[1] == index.eof_offset  # just after the remove's -1 size word
    pairs = list(iter_records(WINDOW_DELTA, index))
    assert pairs[1][1] is None
    assert len(pairs[0][1]) == 16


def test_remove_in_a_snapshot_is_corrupt() -> None:
    remove_at = 4 + 56 + 4 + 16 + 4 + 56  # the -1 value size of the second record
    err = _expect(CorruptFileError, remove_at, scan_records, WINDOW_DELTA, PATH, allow_removes=False)
    assert err.context["record"] == 1


def test_empty_delta() -> None:
    index = scan_records(EMPTY, PATH)
    assert index.count == 0
    assert index.eof_offset == 0
    assert list(iter_records(EMPTY, index)) == []


def test_accepts_memoryview_and_bytearray() -> None:
    for data in (memoryview(AGG_DELTA), bytearray(AGG_DELTA)):
        assert _arrays(scan_records(data, PATH)) == _arrays(scan_records(AGG_DELTA, PATH))


def test_uniform_fast_path_matches_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # the snapshot's records all have the same sizes, so the vectorised path takes it
    assert records._uniform_sized(records._as_u8(AGG_SNAPSHOT), 0) is not None
    fast = _arrays(scan_records(AGG_SNAPSHOT * 1, PATH))
    monkeypatch.setattr(records, "_uniform_sized", lambda _buf, _start: None)
    assert _arrays(scan_records(AGG_SNAPSHOT, PATH)) == fast


def test_value_size_quirk_aligned_lengths() -> None:
    # a Spark < 2.3 aggregation value carried 4 stray bytes: value size 16 -> 20
    legacy = SPEC_DELTA[:28] + _be32(20) + SPEC_DELTA[32:48] + b"\x00" * 4 + SPEC_DELTA[48:]
    index = scan_records(legacy, PATH)
    assert index.val_len.tolist() == [20]
    assert index.val_len_aligned.tolist() == [16]
    [(_, value)] = list(iter_records(legacy, index, aligned=True))
    assert value == SPEC_DELTA[32:48]
    assert scan_records(WINDOW_DELTA, PATH).val_len_aligned.tolist() == [16, -1]


# Truncation of the spec stream: key size at 0, key 4..27, value size at 28, value 32..47, EOF at 48
@pytest.mark.parametrize("cut", range(len(SPEC_DELTA)))
def test_truncated_anywhere(cut: int) -> None:
    if cut < 28:
        offset = 0
    elif cut < 48:
        offset = 28
    else:
        offset = 48
    _expect(TruncatedFileError, offset, scan_records, SPEC_DELTA[:cut], PATH)


def test_missing_end_marker() -> None:
    err = _expect(TruncatedFileError, 48, scan_records, SPEC_DELTA[:-4], PATH)
    assert "end marker" in str(err)


def test_a_delta_with_a_remove_is_checked_as_a_delta() -> None:
    """A delta may hold removes: when the checked walk looks for what is wrong (a missing end marker, a
    value over the limit after a remove), the remove is not the error. The real window delta (a put of
    56 + 16 bytes, then a remove) cut before its end marker, and its two records swapped."""
    err = _expect(TruncatedFileError, len(WINDOW_DELTA) - 4, scan_records, WINDOW_DELTA[:-4], PATH)
    assert "end marker" in str(err)
    put, remove = WINDOW_DELTA[: 4 + 56 + 4 + 16], WINDOW_DELTA[4 + 56 + 4 + 16 : -4]
    assert len(remove) == 4 + 56 + 4 and remove[-4:] == _be32(-1)
    swapped = remove + put + _be32(-1)
    assert scan_records(swapped, PATH).val_len.tolist() == [-1, 16]
    # the put's value grown to 100 bytes (its 16, then zeros): over a limit of 60, its key is not
    grown = remove + put[: 4 + 56] + _be32(100) + put[4 + 56 + 4 :] + bytes(84) + _be32(-1)
    value_size_at = len(remove) + 4 + 56  # the put's value size word, now after the remove
    assert scan_records(grown, PATH).val_len.tolist() == [-1, 100]
    _expect(LimitExceededError, value_size_at, scan_records, grown, PATH, max_record_bytes=60)


def test_negative_sizes() -> None:
    _expect(CorruptFileError, 0, scan_records, _replace(SPEC_DELTA, 0, _be32(-2)), PATH)
    err = _expect(CorruptFileError, 28, scan_records, _replace(SPEC_DELTA, 28, _be32(-2)), PATH)
    assert err.context["record"] == 0


def test_sizes_past_the_end() -> None:
    _expect(TruncatedFileError, 0, scan_records, _replace(SPEC_DELTA, 0, _be32(1000)), PATH)
    _expect(TruncatedFileError, 28, scan_records, _replace(SPEC_DELTA, 28, _be32(21)), PATH)


def test_record_size_limit() -> None:
    _expect(LimitExceededError, 0, scan_records, SPEC_DELTA, PATH, max_record_bytes=23)
    err = _expect(LimitExceededError, 56, scan_records, AGG_DELTA, PATH, max_record_bytes=30)
    assert err.context["record"] == 1  # the 96-byte key
    assert scan_records(SPEC_DELTA, PATH, max_record_bytes=24).count == 1
    # limit beats "past the end": a 2 GiB key is refused as such
    _expect(LimitExceededError, 0, scan_records, _replace(SPEC_DELTA, 0, _be32(0x7FFFFFFF)), PATH)


def test_bytes_after_the_end_marker() -> None:
    err = _expect(CorruptFileError, 52, scan_records, SPEC_DELTA + SPEC_DELTA[:4], PATH)
    assert err.context["record"] == 1


# ---------------------------------------------------------------------------------------------------
# Changelogs


def test_changelog_v1() -> None:
    version, lineage, index = scan_changelog(CHANGELOG_V1, PATH)
    assert (version, lineage) == (1, None)
    assert index.kind.tolist() == [KIND_PUT, KIND_PUT]
    assert index.key_len.tolist() == [25, 97]  # RocksDB keys: version byte 00 + UnsafeRow
    assert _arrays(index) == _arrays(scan_records(CHANGELOG_V1, PATH))


def test_changelog_v1_empty_is_not_mistaken_for_a_header() -> None:
    # readUTF sees length 0xffff past the end -> EOF -> v1, as in Spark
    version, lineage, index = scan_changelog(EMPTY, PATH)
    assert (version, lineage, index.count, index.eof_offset) == (1, None, 0, 0)


def test_changelog_v3() -> None:
    version, lineage, index = scan_changelog(CHANGELOG_V3, PATH)
    assert version == 3
    assert lineage is not None
    assert [item["version"] for item in json.loads(lineage)] == [1, 2]
    assert index.count == 2
    assert index.key_start[0] == 4 + 2 + len(lineage) + 4
    assert CHANGELOG_V3[index.key_start[0] :].startswith(CHANGELOG_V1[4:29])


def test_changelog_v3_empty() -> None:
    assert scan_changelog(CHANGELOG_V3_EMPTY, PATH)[:2] == (3, "[]")
    assert scan_changelog(CHANGELOG_V3_EMPTY, PATH)[2].count == 0


def test_changelog_v2() -> None:
    version, lineage, index = scan_changelog(CHANGELOG_V2, PATH)
    assert (version, lineage) == (2, None)
    assert index.kind.tolist() == TWS_KINDS
    assert index.val_len.tolist() == TWS_VAL_LEN
    assert index.eof_offset == len(CHANGELOG_V2) - 1
    keys = [k for k, _ in iter_records(CHANGELOG_V2, index)]
    assert all(k[2] == 0 for k in keys)  # 2-byte column family id, then the version byte 00


def test_changelog_v2_empty() -> None:
    version, _, index = scan_changelog(CHANGELOG_V2_EMPTY, PATH)
    assert (version, index.count, index.eof_offset) == (2, 0, 4)


def test_changelog_v4() -> None:
    version, lineage, index = scan_changelog(CHANGELOG_V4, PATH)
    assert version == 4
    assert lineage is not None
    assert len(json.loads(lineage)) == 2
    assert index.kind.tolist() == TWS_KINDS
    assert index.val_len.tolist() == TWS_VAL_LEN
    v2 = scan_changelog(CHANGELOG_V2, PATH)[2]
    shift = int(index.key_start[0] - v2.key_start[0])
    assert (index.key_start - shift).tolist() == v2.key_start.tolist()


def test_changelog_unknown_record_type() -> None:
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    type_at = int(index.key_start[1]) - 5
    data = _replace(CHANGELOG_V2, type_at, b"\x02")
    err = _expect(CorruptFileError, type_at, scan_changelog, data, PATH)
    assert err.context["record"] == 1


def test_changelog_delete_must_carry_minus_one() -> None:
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    size_at = int(index.val_start[2]) - 4
    _expect(CorruptFileError, size_at, scan_changelog, _replace(CHANGELOG_V2, size_at, _be32(0)), PATH)


def test_changelog_put_with_negative_value_size() -> None:
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    size_at = int(index.val_start[1]) - 4
    _expect(CorruptFileError, size_at, scan_changelog, _replace(CHANGELOG_V2, size_at, _be32(-1)), PATH)


def test_changelog_v2_truncation() -> None:
    _expect(TruncatedFileError, len(CHANGELOG_V2) - 1, scan_changelog, CHANGELOG_V2[:-1], PATH)
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    cut = int(index.key_start[3]) + 3
    _expect(TruncatedFileError, int(index.key_start[3]) - 4, scan_changelog, CHANGELOG_V2[:cut], PATH)
    _expect(CorruptFileError, len(CHANGELOG_V2), scan_changelog, CHANGELOG_V2 + b"\x00", PATH)


def test_changelog_unknown_version() -> None:
    assert CHANGELOG_V4[2:4] == b"v4"
    err = _expect(UnsupportedVersionError, 0, scan_changelog, _replace(CHANGELOG_V4, 3, b"7"), PATH)
    assert "'v7'" in str(err)


def test_changelog_header_v1_or_not_a_version_falls_back_to_v1() -> None:
    # Spark reads "v1" (and strings that are not v<short>) as a header-less v1 file from byte 0;
    # here its first int (00 02 76 ..) is then a key size past the end
    for header in (b"v1", b"vx", b"w4"):
        _expect(TruncatedFileError, 0, scan_changelog, _replace(CHANGELOG_V4, 2, header), PATH)


def test_changelog_lineage_checks() -> None:
    _expect(CorruptFileError, 4, scan_changelog, _replace(CHANGELOG_V4, 6, b"x"), PATH)  # not JSON
    _expect(TruncatedFileError, 4, scan_changelog, _replace(CHANGELOG_V4, 4, b"\xff\xff"), PATH)


def test_changelog_record_limit() -> None:
    _expect(LimitExceededError, 5, scan_changelog, CHANGELOG_V2, PATH, max_record_bytes=20)


# ---------------------------------------------------------------------------------------------------
# Fuzzing: the fast scan agrees with a plain reference walk, in results and in errors


def _reference(data: bytes, allow_removes: bool, limit: int) -> tuple[str, int] | list[tuple[int, ...]]:
    n = len(data)
    pos = 0
    out: list[tuple[int, ...]] = []
    while True:
        if pos + 4 > n:
            return ("TruncatedFileError", pos)
        klen = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if klen == -1:
            break
        if klen < 0:
            return ("CorruptFileError", pos)
        if klen > limit:
            return ("LimitExceededError", pos)
        if pos + 4 + klen > n:
            return ("TruncatedFileError", pos)
        vpos = pos + 4 + klen
        if vpos + 4 > n:
            return ("TruncatedFileError", vpos)
        vlen = int.from_bytes(data[vpos : vpos + 4], "big", signed=True)
        if vlen == -1 and not allow_removes:
            return ("CorruptFileError", vpos)
        if vlen < -1:
            return ("CorruptFileError", vpos)
        if vlen > limit:
            return ("LimitExceededError", vpos)
        if vpos + 4 + max(vlen, 0) > n:
            return ("TruncatedFileError", vpos)
        out.append((pos + 4, klen, vpos + 4, vlen))
        pos = vpos + 4 + max(vlen, 0)
    if pos + 4 != n:
        return ("CorruptFileError", pos + 4)
    return out


_STREAMS = [SPEC_DELTA, AGG_DELTA, AGG_SNAPSHOT, WINDOW_DELTA, EMPTY, CHANGELOG_V1]
_CHANGELOGS = [CHANGELOG_V1, CHANGELOG_V2, CHANGELOG_V3, CHANGELOG_V4, CHANGELOG_V2_EMPTY, CHANGELOG_V3_EMPTY]


@st.composite
def _mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "word", "cut", "insert", "delete", "repeat"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "word":
            word = draw(st.sampled_from([-2, -1, 0, 1, 7, 8, 16, 24, 0x7FFFFFFF, -0x80000000]))
            data[pos : pos + 4] = _be32(word)
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "repeat":
            data[pos:pos] = data[pos : pos + draw(st.integers(1, 64))]
    return bytes(data)


@settings(max_examples=800, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_mutated(_STREAMS), allow_removes=st.booleans(), limit=st.sampled_from([1 << 28, 64, 24]))
def test_scan_matches_the_reference_walk(data: bytes, allow_removes: bool, limit: int) -> None:
    expected = _reference(data, allow_removes, limit)
    index, err = _outcome(scan_records, data, PATH, allow_removes=allow_removes, max_record_bytes=limit)
    if err is not None:
        assert (type(err).__name__, err.offset) == expected, str(err)
        return
    assert isinstance(expected, list), expected
    got = list(zip(*_arrays(index)[:4], strict=True))
    assert got == expected


@settings(max_examples=800, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_mutated(_CHANGELOGS))
def test_mutated_changelogs_give_an_index_or_a_statelens_error(data: bytes) -> None:
    result, err = _outcome(scan_changelog, data, PATH)
    if err is not None:
        assert err.path == PATH
        assert err.offset is not None
        assert 0 <= err.offset <= len(data)
        return
    version, lineage, index = result
    assert version in (1, 2, 3, 4)
    assert (lineage is not None) == (version >= 3)
    ends = np.concatenate([index.key_start + index.key_len, index.val_start + np.maximum(index.val_len, 0)])
    assert (ends <= len(data)).all()
    assert index.eof_offset < len(data)


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rich_types", "session_window", "agg_count"])
@pytest.mark.parametrize("gather", ["numpy", "compiled"])
def test_keys_and_values_gathered_into_arrow_equal_their_slices(
    scenario: str, gather: str, checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``binary_array`` (one copy when every string has the same length, else ``records.gather_bytes``:
    a numpy copy per length before the compiled kernels are loaded, theirs after) gives the bytes the
    record index points at, for the keys and the values of real state files."""
    from pathlib import Path

    from statelens.readers._format import kernels
    from statelens.readers.arrow_values import binary_array

    calls: list[int] = []
    if gather == "numpy":  # as in a process that has not loaded the kernels
        monkeypatch.setattr(records, "_loaded", lambda: None)
        monkeypatch.setattr(kernels, "gather_bytes", lambda *args: calls.append(1))
    else:
        monkeypatch.setattr(records, "_GATHER_LENGTHS", 0)

    files = sorted(Path(checkpoint(scenario) / "checkpoint" / "state").rglob("*.delta"))
    assert files
    lengths: set[int] = set()
    for path in files[:12]:
        data = decompress(path.read_bytes(), str(path), "lz4")
        idx = scan_records(data, str(path), allow_removes=True)
        put = idx.val_len >= 0
        for starts, lens in ((idx.key_start, idx.key_len), (idx.val_start[put], idx.val_len[put])):
            got = binary_array(data, starts, lens).to_pylist()
            assert got == [data[s : s + n] for s, n in zip(starts.tolist(), lens.tolist(), strict=True)]
            lengths.add(len(set(lens.tolist())))
    assert not calls  # the numpy copy did not fall back on the compiled one
    # both ways are taken: strings of several lengths, and of one length (fixed-width rows)
    assert (max(lengths) > 1) if scenario == "rich_types" else (1 in lengths)


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rich_types", "agg_count", "window_agg_watermark"])
def test_slices_equal_python_slicing(scenario: str, checkpoint: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``slices``/``value_slices`` (a strided copy for records of one size, a gather for equal lengths elsewhere, Python
    slicing otherwise) cuts the bytes the record index points at, removes as ``None``."""
    from pathlib import Path

    monkeypatch.setattr(records, "_SLICES_MIN", 2)  # the test files hold a few records each
    files = sorted(Path(checkpoint(scenario) / "checkpoint" / "state").rglob("*.delta"))
    assert files
    one_length = 0
    for path in files[:24]:
        data = decompress(path.read_bytes(), str(path), "lz4")
        idx = scan_records(data, str(path), allow_removes=True)
        for starts, lens in ((idx.key_start, idx.key_len), (idx.val_start, idx.val_len)):
            for pick in (
                slice(None),
                slice(None, None, -1),
                slice(None, None, 2),
            ):  # in order, reversed, gaps
                s, n = starts[pick], lens[pick]
                expected = [
                    data[a : a + b] if b >= 0 else None for a, b in zip(s.tolist(), n.tolist(), strict=True)
                ]
                got = records.value_slices(data, s, n)
                assert got == expected
                assert all(type(x) is bytes for x in got if x is not None)
                one_length += len(s) > 1 and len(set(n.tolist())) == 1 and n[0] > 0
    assert (
        one_length or scenario == "rich_types"
    )  # the numpy paths were taken (rich types: strings of many lengths)


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["agg_count", "window_agg_watermark", "rich_types"])
def test_uniform_keys_are_the_scanned_keys(scenario: str, checkpoint: Any) -> None:
    """``uniform_keys`` (growth's shortcut for files of fixed-width rows) gives the keys the record index
    points at and whether they are removes, or ``None`` for any stream it does not cover."""
    from pathlib import Path

    files = sorted((checkpoint(scenario) / "checkpoint" / "state").rglob("*.*"))
    files = [f for f in files if f.suffix in (".delta", ".snapshot") and not f.name.startswith(".")]
    assert files
    taken = 0
    for path in files:
        data = decompress(Path(path).read_bytes(), str(path), "lz4")
        deltas = path.suffix == ".delta"
        got = records.uniform_keys(data, allow_removes=deltas)
        idx = scan_records(data, str(path), allow_removes=deltas)
        sizes = set(zip(idx.key_len.tolist(), idx.val_len.tolist(), strict=True))
        if got is None:
            assert len(sizes) != 1 or not idx.count
            continue
        keys, removes = got
        assert len(sizes) == 1
        assert keys == [
            data[s : s + n] for s, n in zip(idx.key_start.tolist(), idx.key_len.tolist(), strict=True)
        ]
        assert removes == bool((idx.val_len < 0).all())
        taken += 1
    assert taken
    # a snapshot holds no removes: a stream of removes is not taken for one
    removes_only = next(
        (
            d
            for d in (decompress(f.read_bytes(), str(f), "lz4") for f in files)
            if (records.uniform_keys(d) or ([], False))[1]
        ),
        None,
    )
    if removes_only is not None:
        assert records.uniform_keys(removes_only, allow_removes=False) is None


def _partition_deltas(root: Any) -> list[tuple[list[Any], list[bytes]]]:
    """Each partition's ``.delta`` files of a generated checkpoint, in version order, and their bytes."""
    state = root / "checkpoint" / "state"
    out = []
    for folder in sorted({p.parent for p in state.rglob("*.delta")}):
        paths = sorted(folder.glob("*.delta"), key=lambda p: int(p.stem))
        out.append((paths, [decompress(p.read_bytes(), str(p), "lz4") for p in paths]))
    assert out
    return out


def _sized_keys(
    datas: list[Any], allow_removes: list[bool], **kwargs: Any
) -> tuple[Any, list[int], list[Any]] | None:
    """``records.sized_prefix`` when it takes every stream (the whole partition cut at once), else None."""
    run, taken = records.sized_prefix(datas, allow_removes, **kwargs)
    return run if taken == len(datas) else None


def _key_rows(keys: Any) -> list[bytes]:
    """The keys (size word in front) ``sized_prefix`` cut: rows of one width, or zero-padded rows."""
    if isinstance(keys, PaddedKeys):
        assert not any(row[n:].any() for row, n in zip(keys.rows, keys.lens.tolist(), strict=True))
        return keys.to_pylist()
    return [bytes(row) for row in keys]


def _layout_is(layout: Any, idx: RecordIndex) -> bool:
    """A stream's layout in ``sized_prefix``'s run says what its record index says: one key size and one
    value size for all its records, or each record's place and sizes."""
    if isinstance(layout, records.SizeRuns):
        got = layout.index
        return all(
            np.array_equal(getattr(got, name), getattr(idx, name))
            for name in ("key_start", "key_len", "val_start", "val_len", "kind")
        ) and (got.eof_offset == idx.eof_offset)
    if not idx.count:
        return bool(layout == (0, 0))
    return set(zip(idx.key_len.tolist(), idx.val_len.tolist(), strict=True)) == {layout}


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["agg_count", "window_agg_watermark", "rich_types", "join"])
def test_sized_keys_are_the_scanned_keys(scenario: str, checkpoint: Any) -> None:
    """``sized_prefix`` taking a whole partition (the command line's counts: a partition's files cut
    at once, fixed-width files checked in one comparison, files of a few record sizes cut run by run)
    gives every record's key with its size word in front, each file's records and layout, as the
    record index has them; or ``None`` when a file's sizes change too often to be cut run by run or its
    keys would take too much padding. A file damaged in its last record's value size is not taken."""
    partitions = _partition_deltas(checkpoint(scenario))
    taken = refused = mixed = both = 0
    for paths, datas in partitions:
        indexes = [scan_records(d, str(p)) for d, p in zip(datas, paths, strict=True)]
        got = _sized_keys(datas, [True] * len(datas))
        if got is None:
            changes = [
                1 + int(((np.diff(i.key_len) != 0) | (np.diff(i.val_len) != 0)).sum()) for i in indexes
            ]
            widths = np.concatenate([i.key_len for i in indexes]) + 4
            assert (
                max(changes) > records.MAX_SIZE_RUNS
                or len(widths) * int(widths.max()) > (1 + PADDING_RATIO) * int(widths.sum()) + PADDING_SLACK
            )
            refused += 1
            continue
        keys, counts, layouts = got
        assert counts == [i.count for i in indexes]
        assert all(_layout_is(layout, i) for layout, i in zip(layouts, indexes, strict=True))
        expected = [
            d[s - 4 : s + n]
            for d, i in zip(datas, indexes, strict=True)
            for s, n in zip(i.key_start.tolist(), i.key_len.tolist(), strict=True)
        ]
        assert _key_rows(keys) == expected
        for layout, data in zip(layouts, datas, strict=True):  # puts against the reference walk's sizes
            if isinstance(layout, records.SizeRuns):
                walked = _reference(bytes(data), True, records.DEFAULT_MAX_RECORD_BYTES)
                assert isinstance(walked, list)
                want = np.array([vlen >= 0 for *_, vlen in walked])
                assert np.array_equal(np.broadcast_to(layout.puts(), want.shape), want)
                both += bool(want.any() and not want.all())
        taken += 1
        mixed += isinstance(keys, PaddedKeys) or any(isinstance(x, records.SizeRuns) for x in layouts)
        last = max(range(len(datas)), key=lambda j: indexes[j].count)
        if indexes[last].count > 1:
            damaged = bytearray(datas[last])
            at = int(indexes[last].key_start[-1] + indexes[last].key_len[-1])  # the last value's size word
            damaged[at : at + 4] = (int(indexes[last].val_len[-1]) + 8).to_bytes(4, "big", signed=True)
            assert (
                _sized_keys([*datas[:last], bytes(damaged), *datas[last + 1 :]], [True] * len(datas)) is None
            )
    assert taken + refused == len(partitions)
    assert taken
    if scenario in ("rich_types", "join"):
        assert mixed  # strings of several lengths; a join's stores mix key and value sizes
    if scenario == "window_agg_watermark":
        assert both  # windows evicted by the watermark: removes among the puts of one delta


# ---------------------------------------------------------------------------------------------------
# The fixed-width shortcuts on single real files, their limits, and damaged copies


def _real_delta(checkpoint: Any, scenario: str, rel: str) -> bytes:
    path = checkpoint(scenario) / "checkpoint" / "state" / rel
    return decompress(path.read_bytes(), str(path), "lz4")


def _keys_with_size(data: bytes, idx: RecordIndex) -> list[bytes]:
    return [data[s - 4 : s + n] for s, n in zip(idx.key_start.tolist(), idx.key_len.tolist(), strict=True)]


@pytest.mark.spark
def test_sized_keys_of_single_files_empty_files_and_removes(checkpoint: Any) -> None:
    """One file alone, empty files (only the end marker) before and after it, a file of removes, and the
    refusals: two key sizes, a remove where none is allowed, a record over the limit."""
    puts = _real_delta(checkpoint, "agg_count", "0/0/1.delta")  # two puts, keys 24 and values 16 bytes
    empty = _real_delta(checkpoint, "agg_count", "0/1/2.delta")
    removes = _real_delta(checkpoint, "dedup_watermark", "0/0/6.delta")  # one remove, key 32 bytes
    assert empty == EMPTY
    idx = scan_records(puts, PATH)
    assert (idx.count, set(idx.key_len.tolist()), set(idx.val_len.tolist())) == (2, {24}, {16})

    got = _sized_keys([puts], [False])
    assert got is not None
    block, counts, layouts = got
    assert block.dtype == np.uint8 and block.shape == (2, 28)
    assert [bytes(r) for r in block] == _keys_with_size(puts, idx) and (counts, layouts) == ([2], [(24, 16)])

    got = _sized_keys([empty, puts, empty], [True, True, True])
    assert got is not None and got[1:] == ([0, 2, 0], [(0, 0), (24, 16), (0, 0)])
    assert [bytes(r) for r in got[0]] == _keys_with_size(puts, idx)

    only_empty = _sized_keys([empty, empty], [True, True])
    assert only_empty is not None
    assert (
        only_empty[0].shape == (0, 4)
        and only_empty[0].dtype == np.uint8
        and only_empty[1:] == ([0, 0], [(0, 0), (0, 0)])
    )

    got = _sized_keys([removes], [True])
    ridx = scan_records(removes, PATH)
    assert (
        got is not None
        and got[1:] == ([1], [(32, -1)])
        and [bytes(r) for r in got[0]] == _keys_with_size(removes, ridx)
    )
    assert _sized_keys([removes], [False]) is None  # a snapshot holds no removes
    got = _sized_keys([puts, removes], [True, True])  # keys of 24 then 32 bytes: zero-padded to 36
    assert got is not None and isinstance(got[0], PaddedKeys) and got[0].rows.shape == (3, 36)
    assert _key_rows(got[0]) == _keys_with_size(puts, idx) + _keys_with_size(removes, ridx)
    assert got[1:] == ([2, 1], [(24, 16), (32, -1)])
    with pytest.MonkeyPatch.context() as mp:  # keys of unlike widths are not padded past the ratio
        mp.setattr(keyids, "PADDING_RATIO", 0)
        mp.setattr(keyids, "PADDING_SLACK", 0)
        assert records.sized_prefix([puts, removes], [True, True])[1] == 1

    assert _sized_keys([puts], [True], max_record_bytes=24) is not None  # the key is the largest
    assert _sized_keys([puts], [True], max_record_bytes=23) is None
    with pytest.raises(ValueError, match="zip"):
        _sized_keys([puts, puts], [True])  # one flag per file

    # damaged copies: an end marker with a byte after it, a record count cut short
    assert _sized_keys([EMPTY + b"\x00"], [True]) is None
    assert _sized_keys([puts[:-4]], [True]) is None


@pytest.mark.spark
def test_uniform_keys_limits_and_removes(checkpoint: Any) -> None:
    puts = _real_delta(checkpoint, "agg_count", "0/0/1.delta")
    removes = _real_delta(checkpoint, "dedup_watermark", "0/0/6.delta")
    keys = _keys_with_size(puts, scan_records(puts, PATH))
    assert records.uniform_keys(puts) == ([k[4:] for k in keys], False)
    assert records.uniform_keys(puts, max_record_bytes=24) is not None  # key 24, value 16
    assert records.uniform_keys(puts, max_record_bytes=23) is None
    got = records.uniform_keys(removes)  # removes are allowed unless said otherwise
    assert got is not None and got[1] is True and len(got[0]) == 1
    assert records.uniform_keys(removes, allow_removes=False) is None
    state = _real_delta(checkpoint, "pandas_state_processing", "0/0/1.delta")  # key 24, value 96
    assert records.uniform_keys(state, max_record_bytes=96) is not None
    assert records.uniform_keys(state, max_record_bytes=95) is None  # the value alone is over
    assert _sized_keys([state], [False], max_record_bytes=96) is not None
    assert _sized_keys([state], [False], max_record_bytes=95) is None


def test_iter_records_gives_whole_values_unless_aligned() -> None:
    """Changelog values (21 and 17 bytes) come whole by default; ``aligned`` floors them to 8 bytes."""
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    whole = [v for _, v in iter_records(CHANGELOG_V2, index)]
    assert [len(v) if v is not None else -1 for v in whole] == TWS_VAL_LEN
    floored = [v for _, v in iter_records(CHANGELOG_V2, index, aligned=True)]
    assert [len(v) if v is not None else -1 for v in floored] == [
        (n // 8) * 8 if n >= 0 else -1 for n in TWS_VAL_LEN
    ]
    assert all(f == w[: len(f)] for f, w in zip(floored, whole, strict=True) if w is not None)


def test_changelog_errors_name_the_record_and_what_is_wrong() -> None:
    with pytest.raises(TruncatedFileError, match="ends without its 00 end record") as err:
        scan_changelog(CHANGELOG_V2[:-1], PATH)
    assert err.value.context["record"] == len(TWS_KINDS)
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    cut = int(index.key_start[3]) - 2  # inside record 3's key size word
    with pytest.raises(TruncatedFileError, match="key size") as err:
        scan_changelog(CHANGELOG_V2[:cut], PATH)
    assert err.value.context["record"] == 3


@pytest.mark.spark
def test_fixed_width_index_is_the_scanned_index(checkpoint: Any) -> None:
    """The index built from a fixed-width file's sizes equals the scan's, kinds included, for a file of
    puts and a file of removes."""
    for scenario, rel in (("agg_count", "0/0/1.delta"), ("dedup_watermark", "0/0/6.delta")):
        data = _real_delta(checkpoint, scenario, rel)
        scanned = scan_records(data, PATH)
        built = records.fixed_width_index(scanned.count, int(scanned.key_len[0]), int(scanned.val_len[0]))
        assert _arrays(built) == _arrays(scanned) and built.eof_offset == scanned.eof_offset
    assert set(built.kind.tolist()) == {KIND_REMOVE}


def test_changelog_key_over_the_limit_names_the_key_and_its_record() -> None:
    with pytest.raises(LimitExceededError, match="key size 27 exceeds the limit of 20 bytes") as err:
        scan_changelog(CHANGELOG_V2, PATH, max_record_bytes=20)
    assert err.value.context["record"] == 0 and err.value.offset == 5


def test_cut_streams_name_the_size_word_and_the_record() -> None:
    idx = scan_records(AGG_DELTA, PATH)
    at = int(idx.val_start[1]) - 2  # inside record 1's value size word
    with pytest.raises(TruncatedFileError, match=r"ends inside a value size \(2 of 4 bytes\)") as err:
        scan_records(AGG_DELTA[:at], PATH)
    assert err.value.context["record"] == 1
    with pytest.raises(TruncatedFileError, match="ends without its -1 end marker") as err:
        scan_records(AGG_DELTA[:-4], PATH)
    assert err.value.context["record"] == idx.count
    index = scan_changelog(CHANGELOG_V2, PATH)[2]
    size_at = int(index.val_start[2]) - 4
    with pytest.raises(CorruptFileError, match="delete record has value size 0; Spark writes -1") as err:
        scan_changelog(_replace(CHANGELOG_V2, size_at, _be32(0)), PATH)
    assert err.value.context["record"] == 2


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["agg_count", "rich_types", "agg_many_partitions"])
def test_frame_records_writes_a_file_of_puts_byte_for_byte(scenario: str, checkpoint: Any) -> None:
    """``frame_records`` (a RocksDB zip's keys and values laid out as a delta's records) rebuilds each
    real ``.snapshot``, and each ``.delta`` holding only puts, byte for byte from its keys and values
    (delta framing, the end marker last), and its index is the scan's; without values, every value is
    empty. Empty input is the end marker alone."""
    state = checkpoint(scenario) / "checkpoint" / "state"
    files = [
        p for p in sorted(state.rglob("*.*")) if p.suffix in (".delta", ".snapshot") and p.name[0] != "."
    ]
    widths: set[int] = set()
    for path in files:
        data = decompress(path.read_bytes(), str(path), "lz4")
        idx = scan_records(data, str(path), allow_removes=True)
        if (idx.val_len < 0).any():
            continue
        keys = records.slices(data, idx.key_start, idx.key_len)
        values = records.slices(data, idx.val_start, idx.val_len)
        framed, got = records.frame_records(keys, values)
        assert framed == data
        assert _arrays(got) == _arrays(idx) and got.eof_offset == idx.eof_offset
        bare, index = records.frame_records(keys, None)
        rescanned = scan_records(bare, str(path), allow_removes=False)
        assert _arrays(index) == _arrays(rescanned) and index.eof_offset == rescanned.eof_offset
        assert records.slices(bare, index.key_start, index.key_len) == keys
        assert index.val_len.tolist() == [0] * len(keys)
        widths.update(idx.key_len.tolist())
    assert widths
    assert len(widths) > 1 or scenario != "rich_types"  # keys of several lengths too
    assert any(p.suffix == ".snapshot" for p in files) or scenario != "agg_many_partitions"
    framed, got = records.frame_records([], [])
    assert framed == EMPTY and got.count == 0 and got.eof_offset == 0


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rich_types", "join", "agg_count"])
def test_runs_of_one_record_size_are_the_walked_records(scenario: str, checkpoint: Any) -> None:
    """``_runs_sized`` gives the records the record-by-record walk gives, on every state file of real
    checkpoints, and takes files whose sizes change a few times; a file whose sizes change more often is
    left to the walk, and a file cut short or with a damaged size word is never taken."""
    state = checkpoint(scenario) / "checkpoint" / "state"
    paths = sorted(p for p in state.rglob("*") if p.suffix in (".delta", ".snapshot"))
    assert paths
    taken = several = 0
    for path in paths:
        data = decompress(path.read_bytes(), str(path), "lz4")
        buf = np.frombuffer(data, dtype=np.uint8)
        walked = records._walk_sized(data, 0)
        runs = _RUNS_SIZED(buf, 0)
        if runs is None:
            assert len(set(zip(walked[1].tolist(), walked[2].tolist(), strict=True))) > 1
            continue
        taken += 1
        several += len(set(zip(runs[1].tolist(), runs[2].tolist(), strict=True))) > 1
        for got, want in zip(runs, walked, strict=True):
            assert np.array_equal(got, want), path
        if len(walked[0]) > 1:
            last = int(walked[0][-1] + walked[1][-1])  # the last record's value size word
            damaged = bytearray(data)
            damaged[last : last + 4] = (int(walked[2][-1]) + 8).to_bytes(4, "big", signed=True)
            assert _RUNS_SIZED(np.frombuffer(bytes(damaged), dtype=np.uint8), 0) is None
            assert _RUNS_SIZED(buf[: len(buf) - 3], 0) is None
    assert taken
    if scenario == "rich_types":
        assert several  # files of several key widths are cut run by run


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rich_types", "join", "agg_count"])
def test_sized_prefix_runs_and_indexed_files_are_the_scanned_keys(scenario: str, checkpoint: Any) -> None:
    """A partition's files cut a run at a time (``sized_prefix``: the leading files it can cut without a
    walk record by record, files of a few record sizes cut run by run among them, then the next run; a
    file it cannot cut indexed alone) give every file's keys with their size word, in order, as the
    record index has them; every file is taken exactly once."""
    runs_of_several = indexed = cut_by_runs = 0
    for paths, datas in _partition_deltas(checkpoint(scenario)):
        want = [
            d[s - 4 : s + n]
            for d, p in zip(datas, paths, strict=True)
            for i in [scan_records(d, str(p))]
            for s, n in zip(i.key_start.tolist(), i.key_len.tolist(), strict=True)
        ]
        got: list[bytes] = []
        at = 0
        while at < len(datas):
            run, taken = records.sized_prefix(datas[at:], [True] * (len(datas) - at))
            if run is None:
                assert taken == 0
                i = scan_records(datas[at], str(paths[at]))
                got += [
                    datas[at][s - 4 : s + n]
                    for s, n in zip(i.key_start.tolist(), i.key_len.tolist(), strict=True)
                ]
                indexed += 1
                at += 1
                continue
            keys, counts, layouts = run
            assert 1 <= taken == len(counts) == len(layouts) and sum(counts) == len(keys)
            runs_of_several += taken > 1
            cut_by_runs += sum(isinstance(x, records.SizeRuns) for x in layouts)
            got += _key_rows(keys)
            at += taken
        assert got == want, paths[0].parent
    assert runs_of_several
    if scenario in ("rich_types", "join"):
        assert cut_by_runs  # strings of several lengths; a join's stores mix key and value sizes


def test_a_kernels_module_still_being_imported_is_not_taken_as_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While one thread imports readers/_format/kernels.py, the module is already in ``sys.modules``
    without its kernels; another thread must not take it as loaded (it would fail on a missing
    ``walk_sized``), but import it, which waits for the first thread."""
    import sys
    import types

    from statelens.readers._format import kernels

    name = "statelens.readers._format.kernels"
    half = types.ModuleType(name)
    half.__all__ = list(kernels.__all__)  # what the module defines first, before its kernels
    monkeypatch.setitem(sys.modules, name, half)
    assert _LOADED() is None
    monkeypatch.setitem(sys.modules, name, kernels)
    assert _LOADED() is kernels

"""readers._format.codecs on real Spark state files, and on corruption derived from them.

Bytes used here are real: the lz4 ``1.delta`` dumped in docs/format.md §3.2, and state files written by PySpark
4.3.0 (``local[2]``, aggregation ``count``/``sum`` by a string key, 3 batches, one state file per codec:
the same 188-byte record stream compressed by lz4, zstd, snappy and lzf). Every corruption starts from
those bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cramjam
import lz4.block
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers._format import codecs
from statelens.readers._format.codecs import CODECS, decompress, normalize_codec_name, sniff_codec
from statelens.readers._format.records import scan_records
from statelens.readers.errors import (
    BadMagicError,
    ChecksumError,
    CorruptFileError,
    LimitExceededError,
    StatelensError,
    TruncatedFileError,
    UnknownCodecError,
)

# Spec §3.2: state/0/0/1.delta of a dedup query, lz4 (the spec says 76 bytes; the dump holds 77).
SPEC_LZ4 = bytes.fromhex(
    "4c 5a 34 42 6c 6f 63 6b  25  23 00 00 00  34 00 00 00  96 16 ed 07"
    "53 00 00 00 18 00 01 00 93 01 00 00 00 10 00 00 00 61 10 00 00 0f 00 00 14 00 07 02 00 50 00 ff ff ff ff"
    "4c 5a 34 42 6c 6f 63 6b  15  00 00 00 00  00 00 00 00  00 00 00 00"
)
# Spec §3.3: the 52 bytes it decompresses to (key 24 bytes: user='a'; value 16 bytes: null dummy).
SPEC_RECORDS = bytes.fromhex(
    "00000018"  # key size 24
    "0000000000000000 0100000010000000 6100000000000000"  # null bits | offset 16, size 1 | 'a'
    "00000010"  # value size 16
    "0100000000000000 0000000000000000"  # null bits (field 0 null) | slot
    "ffffffff"  # end marker
)

# PySpark 4.3.0: a partition's 1.delta when the batch wrote nothing (one RAW block holding ff ff ff ff,
# then the end block) - also what an empty RocksDB v1 changelog looks like (docs/format.md §3.2, §4.4).
EMPTY_LZ4 = bytes.fromhex(
    "4c5a34426c6f636b150400000004000000db804d08ffffffff4c5a34426c6f636b15000000000000000000000000"
)
EMPTY = {
    "lz4": EMPTY_LZ4,
    "zstd": bytes.fromhex("28b52ffd0048200000ffffffff010000"),
    "snappy": bytes.fromhex("82534e4150505900000000010000000100000006040cffffffff"),
    "lzf": bytes.fromhex("5a56000004ffffffff"),
}

# PySpark 4.3.0: state/0/0/3.delta of the same query with each codec (2 puts, one with an 80-char key).
REAL = {
    "lz4": bytes.fromhex(
        "4c5a34426c6f636b2545000000bc000000f68ca20d5300000018000100930100000010000000631000081c00"
        "11020f00300000030500020200126007003300005038001f7a01003c088000009c000002000388005000ffffffff"
        "4c5a34426c6f636b15000000000000000000000000"
    ),
    "zstd": bytes.fromhex(
        "28b52ffd0048cc0100f80000001800010000001000000063001800020003006000507a0102ffffffff0b00200b64"
        "37305c300edd568e01d7806e6034901b283d035a010000"
    ),
    "snappy": bytes.fromhex(
        "82534e415050590000000001000000010000004abc011000000018000d0124010000001000000063001501151c00"
        "020d1300030d081000000060000d010450000938007afe01003a010000003a9c0001012c0200000000000000ffffffff"
    ),
    "lzf": bytes.fromhex(
        "5a5601004500bc030000001820036000000120050010200300632003a000e0001b0002a0100003a007200000602"
        "0036000005020054037007ae046002056e0007f409b4000c08703ffffffff"
    ),
}
REAL_RECORDS_LEN = 188
PATH = "state/0/0/3.delta"


def _flip(data: bytes, pos: int, value: int) -> bytes:
    out = bytearray(data)
    out[pos] = value
    return bytes(out)


def _put_le32(data: bytes, pos: int, value: int) -> bytes:
    out = bytearray(data)
    out[pos : pos + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)


def _put_be32(data: bytes, pos: int, value: int) -> bytes:
    out = bytearray(data)
    out[pos : pos + 4] = (value & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(out)


def _outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, StatelensError | None]:
    try:
        return fn(*args, **kwargs), None
    except StatelensError as err:
        return None, err


def _raises(cls: type[StatelensError], offset: int, data: bytes, **kwargs: object) -> StatelensError:
    with pytest.raises(StatelensError) as info:
        decompress(data, PATH, **kwargs)  # type: ignore[arg-type]
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert err.path == PATH
    assert err.offset == offset, str(err)
    return err


# ---------------------------------------------------------------------------------------------------
# Real bytes


def test_spec_lz4_delta_decompresses_to_the_spec_record_stream() -> None:
    assert len(SPEC_LZ4) == 77
    assert sniff_codec(SPEC_LZ4) == "lz4"
    assert decompress(SPEC_LZ4, PATH) == SPEC_RECORDS


@pytest.mark.parametrize("codec", CODECS)
def test_real_files_of_every_codec_decompress_to_the_same_records(codec: str) -> None:
    assert sniff_codec(REAL[codec]) == codec
    out = decompress(REAL[codec], PATH, codec)
    assert out == decompress(REAL["lz4"], PATH)
    assert len(out) == REAL_RECORDS_LEN
    index = scan_records(out, PATH)
    assert index.count == 2
    assert index.key_len.tolist() == [24, 96]
    assert b"z" * 80 in out  # the long key, an overlapping back-reference in lz4 and lzf


@pytest.mark.parametrize("codec", CODECS)
def test_empty_state_files_hold_only_the_end_marker(codec: str) -> None:
    assert decompress(EMPTY[codec], PATH) == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_accepts_any_bytes_like(kind: type) -> None:
    assert decompress(kind(SPEC_LZ4), PATH) == SPEC_RECORDS


@pytest.mark.parametrize("codec", CODECS)
def test_concatenated_streams_are_read_to_the_end(codec: str) -> None:
    assert decompress(REAL[codec] + EMPTY[codec] + REAL[codec], PATH) == (
        decompress(REAL[codec], PATH) + b"\xff\xff\xff\xff" + decompress(REAL[codec], PATH)
    )


def test_codec_names_as_spark_accepts_them() -> None:
    assert normalize_codec_name("lz4") == "lz4"
    assert normalize_codec_name(" ZSTD ") == "zstd"
    assert normalize_codec_name("Snappy") == "snappy"
    assert normalize_codec_name("org.apache.spark.io.LZ4CompressionCodec") == "lz4"
    assert normalize_codec_name("org.apache.spark.io.LZFCompressionCodec") == "lzf"
    assert normalize_codec_name("org.apache.spark.io.SnappyCompressionCodec") == "snappy"
    assert normalize_codec_name("org.apache.spark.io.ZStdCompressionCodec") == "zstd"
    # class names are loaded case-sensitively by Spark
    assert normalize_codec_name("org.apache.spark.io.zstdcompressioncodec") is None
    assert normalize_codec_name("brotli") is None
    assert normalize_codec_name(None) is None


def test_sniff_codec() -> None:
    for codec in CODECS:
        assert sniff_codec(REAL[codec]) == codec
        assert sniff_codec(memoryview(EMPTY[codec])) == codec
    assert sniff_codec(SPEC_RECORDS) is None
    assert sniff_codec(b"") is None


def test_in_band_magic_wins_over_the_conf_codec() -> None:
    assert decompress(REAL["zstd"], PATH, "lz4") == decompress(REAL["lz4"], PATH)
    assert decompress(REAL["lzf"], PATH, "org.apache.spark.io.SnappyCompressionCodec") == decompress(
        REAL["lz4"], PATH
    )


def test_conf_codec_explains_errors_when_magic_disagrees() -> None:
    err = _raises(ChecksumError, 0, _flip(SPEC_LZ4, 17, 0x00), codec="zstd")
    assert "offsets conf names codec 'zstd'" in str(err)
    assert err.context["codec"] == "lz4"


# ---------------------------------------------------------------------------------------------------
# No magic


def test_empty_file_is_truncated() -> None:
    _raises(TruncatedFileError, 0, b"")


@pytest.mark.parametrize("codec", CODECS)
def test_file_cut_inside_the_magic_is_truncated(codec: str) -> None:
    _raises(TruncatedFileError, 0, REAL[codec][:1])


def test_unknown_magic_without_conf_codec() -> None:
    err = _raises(UnknownCodecError, 0, SPEC_RECORDS)
    assert "lz4, lzf, snappy, zstd" in str(err)


def test_unknown_magic_with_a_known_conf_codec_is_bad_magic() -> None:
    err = _raises(BadMagicError, 0, _flip(SPEC_LZ4, 0, 0x00), codec="org.apache.spark.io.LZ4CompressionCodec")
    assert "4c 5a 34 42 6c 6f 63 6b" in str(err)


def test_unknown_magic_with_an_unknown_conf_codec() -> None:
    err = _raises(UnknownCodecError, 0, SPEC_RECORDS, codec="brotli")
    assert "'brotli'" in str(err)


# ---------------------------------------------------------------------------------------------------
# lz4 (lz4-java LZ4BlockOutputStream)


@pytest.mark.parametrize("cut", range(1, len(SPEC_LZ4)))
def test_lz4_truncated_anywhere(cut: int) -> None:
    # before 56 the first block (header at 0) is cut; from 56 on, the end block (header at 56) is
    _raises(TruncatedFileError, 0 if cut < 56 else 56, SPEC_LZ4[:cut])


def test_lz4_unknown_method() -> None:
    _raises(CorruptFileError, 0, _flip(SPEC_LZ4, 8, 0x35))


def test_lz4_claiming_2_gib_is_refused_before_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> bytes:
        raise AssertionError("lz4 was asked to allocate")

    monkeypatch.setattr(lz4.block, "decompress", boom)
    err = _raises(LimitExceededError, 0, _put_le32(SPEC_LZ4, 13, 0x7FFFFFFF))
    assert "2147483647" in str(err)


def test_lz4_block_larger_than_its_declared_block_size() -> None:
    _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 13, 40_000))  # token 0x25: 32 KiB blocks


def test_lz4_negative_sizes() -> None:
    _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 13, -1))
    _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 9, -1))


def test_lz4_compressed_size_past_the_end() -> None:
    _raises(TruncatedFileError, 0, _put_le32(SPEC_LZ4, 9, 0x7FFFFFFF))


def test_lz4_original_size_too_small_wraps_the_library_error() -> None:
    err = _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 13, 51))
    assert isinstance(err.__cause__, lz4.block.LZ4BlockError)


def test_lz4_bad_payload_wraps_the_library_error() -> None:
    err = _raises(CorruptFileError, 0, _flip(SPEC_LZ4, 21, 0xFF))
    assert isinstance(err.__cause__, lz4.block.LZ4BlockError)


@pytest.mark.parametrize("pos", [17, 18, 19, 20])
def test_lz4_checksum_field_flipped(pos: int) -> None:
    _raises(ChecksumError, 0, _flip(SPEC_LZ4, pos, SPEC_LZ4[pos] ^ 0x01))


def test_lz4_payload_flip_caught_by_checksum() -> None:
    assert SPEC_LZ4[38] == ord("a")  # the literal 'a' of the key user='a'
    _raises(ChecksumError, 0, _flip(SPEC_LZ4, 38, ord("b")))


def test_lz4_raw_block_checks() -> None:
    _raises(ChecksumError, 0, _flip(EMPTY_LZ4, 21, 0xFE))
    _raises(CorruptFileError, 0, _put_le32(EMPTY_LZ4, 9, 5))  # stored block: clen must equal dlen


def test_lz4_end_block_checks() -> None:
    _raises(BadMagicError, 56, _flip(SPEC_LZ4, 56, 0x00))
    _raises(CorruptFileError, 56, _flip(SPEC_LZ4, 73, 0x01))  # end block checksum must be 0
    _raises(CorruptFileError, 56, _flip(SPEC_LZ4, 69, 0x01))  # clen 0 with dlen 1


def test_lz4_bytes_after_the_end_block() -> None:
    _raises(TruncatedFileError, 77, SPEC_LZ4 + SPEC_LZ4[:3])
    _raises(BadMagicError, 77, SPEC_LZ4 + SPEC_LZ4[21:25])
    _raises(BadMagicError, 77, SPEC_LZ4 + SPEC_LZ4[21:50])


def test_lz4_output_limit() -> None:
    assert decompress(SPEC_LZ4, PATH, max_output_bytes=52) == SPEC_RECORDS
    _raises(LimitExceededError, 0, SPEC_LZ4, max_output_bytes=51)
    _raises(LimitExceededError, 77, SPEC_LZ4 + SPEC_LZ4, max_output_bytes=100)


# ---------------------------------------------------------------------------------------------------
# zstd (zstd-jni ZstdOutputStream): frame header at 0, blocks at 6 (57 bytes) and 66 (empty, last)


@pytest.mark.parametrize("cut", range(1, len(REAL["zstd"])))
def test_zstd_truncated_anywhere(cut: int) -> None:
    offset = 0 if cut < 6 else 6 if cut < 66 else 66
    _raises(TruncatedFileError, offset, REAL["zstd"][:cut])


def test_zstd_reserved_bits() -> None:
    _raises(CorruptFileError, 0, _flip(REAL["zstd"], 4, 0x08))  # frame header descriptor
    _raises(CorruptFileError, 6, _flip(REAL["zstd"], 6, REAL["zstd"][6] | 0x06))  # block type 3


def test_zstd_huge_window_is_refused() -> None:
    _raises(LimitExceededError, 0, _flip(REAL["zstd"], 5, 0xF8))


def test_zstd_bad_payload_wraps_the_library_error() -> None:
    err = _raises(CorruptFileError, 0, _flip(REAL["zstd"], 9, 0x00))
    assert isinstance(err.__cause__, zstandard.ZstdError)


def test_zstd_output_limit_is_enforced_while_streaming() -> None:
    assert len(decompress(REAL["zstd"], PATH, max_output_bytes=REAL_RECORDS_LEN)) == REAL_RECORDS_LEN
    _raises(LimitExceededError, 0, REAL["zstd"], max_output_bytes=REAL_RECORDS_LEN - 1)
    _raises(LimitExceededError, 69, REAL["zstd"] + REAL["zstd"], max_output_bytes=300)


def test_zstd_bytes_after_the_last_frame() -> None:
    _raises(TruncatedFileError, 69, REAL["zstd"] + REAL["zstd"][:2])
    _raises(BadMagicError, 69, REAL["zstd"] + REAL["zstd"][9:20])


# ---------------------------------------------------------------------------------------------------
# snappy (snappy-java SnappyOutputStream): 16-byte header, one chunk at 16 (74 bytes)


@pytest.mark.parametrize("cut", [c for c in range(1, len(REAL["snappy"])) if c != 16])
def test_snappy_truncated_anywhere(cut: int) -> None:
    _raises(TruncatedFileError, 0 if cut < 16 else 16, REAL["snappy"][:cut])


def test_snappy_cut_at_a_chunk_boundary_is_left_to_the_record_scan() -> None:
    # snappy-java streams have no end marker: a cut between chunks decodes, and the record
    # stream then lacks its -1 end marker
    out = decompress(REAL["snappy"][:16], PATH)
    assert out == b""
    with pytest.raises(TruncatedFileError):
        scan_records(out, PATH)


def test_snappy_chunk_length_checks() -> None:
    _raises(TruncatedFileError, 16, _put_be32(REAL["snappy"], 16, 0x7FFFFFFF))
    _raises(CorruptFileError, 16, _put_be32(REAL["snappy"], 16, 0))
    _raises(CorruptFileError, 16, _put_be32(REAL["snappy"], 16, -2))


def test_snappy_claiming_2_gib_is_refused_before_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> bytes:
        raise AssertionError("cramjam was asked to allocate")

    monkeypatch.setattr(cramjam.snappy, "decompress_raw", boom)
    # the block's varint length bc 01 (188) becomes 80 80 80 80 08 (2 GiB); the chunk grows by 3
    data = bytearray(REAL["snappy"])
    data[20:22] = bytes.fromhex("8080808008")
    data = _put_be32(bytes(data), 16, 74 + 3)
    _raises(LimitExceededError, 16, data)


def test_snappy_bad_varint() -> None:
    data = bytearray(REAL["snappy"])
    data[20:22] = bytes.fromhex("ffffffffff")  # five continuation bytes: no valid 32-bit varint
    _raises(CorruptFileError, 16, _put_be32(bytes(data), 16, 74 + 3))


def test_snappy_header_checks() -> None:
    _raises(CorruptFileError, 0, _put_be32(REAL["snappy"], 8, 0))  # version 0
    bad_second = REAL["snappy"] + _flip(REAL["snappy"], 5, 0x00)
    _raises(BadMagicError, 94, bad_second)


def test_snappy_bad_payload_wraps_the_library_error() -> None:
    err = _raises(CorruptFileError, 16, _flip(REAL["snappy"], 20, 0x00))
    assert isinstance(err.__cause__, cramjam.DecompressionError)


def test_snappy_output_limit() -> None:
    _raises(LimitExceededError, 16, REAL["snappy"], max_output_bytes=REAL_RECORDS_LEN - 1)


# ---------------------------------------------------------------------------------------------------
# lzf (compress-lzf LZFOutputStream): one compressed chunk (7-byte header, 69 bytes of LZF)


@pytest.mark.parametrize("cut", range(1, len(REAL["lzf"])))
def test_lzf_truncated_anywhere(cut: int) -> None:
    _raises(TruncatedFileError, 0, REAL["lzf"][:cut])


def test_lzf_chunk_header_checks() -> None:
    _raises(CorruptFileError, 0, _flip(REAL["lzf"], 2, 0x02))  # chunk type 2
    _raises(BadMagicError, 76, REAL["lzf"] + _flip(REAL["lzf"], 1, 0x00))
    _raises(TruncatedFileError, 76, REAL["lzf"] + b"Z")


def test_lzf_declared_size_must_match() -> None:
    _raises(CorruptFileError, 0, _flip(REAL["lzf"], 6, REAL_RECORDS_LEN - 1))
    _raises(CorruptFileError, 0, _flip(REAL["lzf"], 6, REAL_RECORDS_LEN + 1))


def test_lzf_back_reference_before_the_start() -> None:
    assert REAL["lzf"][7] == 0x03  # first token: a 4-byte literal run
    err = _raises(CorruptFileError, 0, _flip(REAL["lzf"], 7, 0xE0))
    assert "before the start" in str(err)


def test_lzf_output_limit() -> None:
    _raises(LimitExceededError, 0, REAL["lzf"], max_output_bytes=REAL_RECORDS_LEN - 1)
    _raises(LimitExceededError, 76, REAL["lzf"] + REAL["lzf"], max_output_bytes=300)


# ---------------------------------------------------------------------------------------------------
# Fuzzing: any mutation of a real file gives bytes or a StatelensError, never another exception

_SEEDS = [SPEC_LZ4, EMPTY_LZ4, *REAL.values(), *EMPTY.values()]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "duplicate"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "duplicate":
            data += data[pos:]
    return bytes(data)


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_mutated(), limit=st.sampled_from([codecs.DEFAULT_LIMIT, 200, 64]))
def test_mutated_real_files_give_bytes_or_a_statelens_error(data: bytes, limit: int) -> None:
    out, err = _outcome(decompress, data, PATH, max_output_bytes=limit)
    if err is not None:
        assert err.path == PATH
        assert err.offset is not None
        assert 0 <= err.offset <= len(data)
        return
    assert isinstance(out, bytes)
    assert len(out) <= limit
    _, err = _outcome(scan_records, out, PATH)
    assert err is None or err.path == PATH


# ---------------------------------------------------------------------------------------------------
# Every state file of real generated checkpoints (tests/spark_checkpoints.py)

_STATE_FILE = re.compile(r"^\d+\.(delta|snapshot)$")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("scenario", "codec"),
    [("agg_count", "lz4"), ("codec_zstd", "zstd"), ("codec_snappy", "snappy"), ("codec_lzf", "lzf")],
)
def test_every_state_file_of_real_checkpoints(
    checkpoint: Callable[[str], Path], scenario: str, codec: str
) -> None:
    root = checkpoint(scenario) / "checkpoint"
    files = sorted(p for p in (root / "state").rglob("*") if _STATE_FILE.match(p.name))
    assert any(p.suffix == ".delta" for p in files)
    for path in files:
        raw = path.read_bytes()
        rel = str(path.relative_to(root))
        assert sniff_codec(raw) == codec, rel
        out = decompress(raw, rel, codec)
        index = scan_records(out, rel, allow_removes=path.suffix == ".delta")
        assert index.eof_offset == len(out) - 4, rel
        assert (index.key_len > 0).all(), rel


# ---------------------------------------------------------------------------------------------------
# What the errors of damaged copies say, where a type and an offset alone do not tell two faults apart


def test_lzf_header_cut_or_complete_says_which() -> None:
    err = _raises(TruncatedFileError, 76, REAL["lzf"] + EMPTY["lzf"][:4])
    assert "inside a LZF chunk header (4 of 5 bytes)" in str(err)
    err = _raises(TruncatedFileError, 76, REAL["lzf"] + EMPTY["lzf"][:5])  # a whole stored-chunk header
    assert "LZF chunk declares 4 bytes but only 0 remain" in str(err)
    err = _raises(BadMagicError, 76, REAL["lzf"] + _flip(REAL["lzf"], 1, 0x00))
    assert str(err).split("found ")[1].startswith("5a 00 01 (")  # the three header bytes read
    err = _raises(LimitExceededError, 0, REAL["lzf"], max_output_bytes=REAL_RECORDS_LEN - 1)
    assert "LZF chunk declares 188 decompressed bytes" in str(err)


def test_snappy_messages_and_the_limit_over_many_streams() -> None:
    err = _raises(TruncatedFileError, 16, REAL["snappy"][:19])
    assert "inside a snappy chunk length (3 of 4 bytes)" in str(err)
    err = _raises(TruncatedFileError, 16, REAL["snappy"][:20])  # the length word whole, no payload
    assert "declares 74 bytes but only 0 remain" in str(err)
    # three streams of 188 bytes: the limit counts all that was decoded before, not just the last chunk
    err = _raises(LimitExceededError, 2 * 94 + 16, REAL["snappy"] * 3, max_output_bytes=500)
    assert "with the 376 already decoded" in str(err)
    assert (
        len(decompress(REAL["snappy"] * 3, PATH, max_output_bytes=3 * REAL_RECORDS_LEN))
        == 3 * REAL_RECORDS_LEN
    )


def test_snappy_varint_of_six_bytes_is_malformed() -> None:
    data = bytearray(REAL["snappy"])
    data[20:22] = bytes.fromhex("808080808000")  # a 32-bit varint has at most five bytes
    err = _raises(CorruptFileError, 16, _put_be32(bytes(data), 16, 74 + 4))
    assert "valid length varint" in str(err)


def _skippable(payload: bytes) -> bytes:
    """A zstd skippable frame (magic 0x184D2A50, little-endian size) holding ``payload``."""
    return bytes.fromhex("502a4d18") + len(payload).to_bytes(4, "little") + payload


def test_zstd_skippable_frames_are_stepped_over() -> None:
    """A real zstd file followed by skippable frames (which zstd allows between frames; the file must
    start with a frame to be sniffed as zstd) decompresses to the same records; a cut or overlong
    skippable frame is truncated where it starts."""
    records = decompress(REAL["zstd"], PATH)
    assert len(records) == REAL_RECORDS_LEN
    for data in (
        REAL["zstd"] + _skippable(b""),
        REAL["zstd"] + _skippable(b"ab") + _skippable(b"\xff" * 3),
    ):
        assert decompress(data, PATH) == records
    assert decompress(REAL["zstd"] + _skippable(b"\x00" * 5) + REAL["zstd"], PATH) == records * 2
    n = len(REAL["zstd"])
    err = _raises(TruncatedFileError, n, REAL["zstd"] + _skippable(b"")[:7])
    assert "inside a zstd skippable frame header" in str(err)
    err = _raises(TruncatedFileError, n, REAL["zstd"] + _skippable(b"\x00" * 9)[:12])
    assert "skippable frame declares 9 bytes past the end" in str(err)
    err = _raises(TruncatedFileError, n, REAL["zstd"] + REAL["zstd"][:4])
    assert "file ends inside a zstd frame header" in str(err)


def test_lz4_errors_say_what_is_wrong_to_the_byte() -> None:
    assert "LZ4Block header (10 of 21 bytes)" in str(_raises(TruncatedFileError, 0, SPEC_LZ4[:10]))
    err = _raises(LimitExceededError, 0, SPEC_LZ4, max_output_bytes=51)
    assert "LZ4Block block declares 52 decompressed bytes" in str(err)
    err = _raises(TruncatedFileError, 0, _put_le32(SPEC_LZ4, 9, 100))
    assert "declares 100 compressed bytes but only 56 remain" in str(err)
    # token 0x25: blocks of at most 1 << (10 + 5) bytes; one byte more is refused before decoding
    err = _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 13, 32769))
    assert "declares 32769 original bytes, more than its block size 32768" in str(err)
    err = _raises(CorruptFileError, 0, _put_le32(SPEC_LZ4, 13, 32768))
    assert "decompressed to 52 bytes, header says 32768" in str(err)


def test_zstd_limit_counts_every_frame_before() -> None:
    err = _raises(LimitExceededError, 2 * len(REAL["zstd"]), REAL["zstd"] * 3, max_output_bytes=500)
    assert "more than the 124 bytes left of the 500-byte limit" in str(err)


def test_a_two_dimensional_buffer_is_read_as_its_bytes() -> None:
    import numpy as np

    data = REAL["snappy"]
    grid = memoryview(np.frombuffer(data, dtype=np.uint8).reshape(-1, 2))
    assert grid.ndim == 2 and decompress(grid, PATH) == decompress(data, PATH)
    words = memoryview(np.frombuffer(data, dtype=np.uint8).view(np.uint16))
    assert words.itemsize == 2 and decompress(words, PATH) == decompress(data, PATH)


def test_an_empty_file_and_a_one_byte_file_are_told_apart() -> None:
    assert "file is empty" in str(_raises(TruncatedFileError, 0, b""))
    err = _raises(TruncatedFileError, 0, REAL["lz4"][:1])
    assert "file is only 1 bytes, cut inside the 8-byte lz4 magic" in str(err)
    err = _raises(TruncatedFileError, 0, REAL["zstd"][:4])
    assert str(err).split(": ", 1)[1].startswith("file ends inside a zstd frame header (")


# ---------------------------------------------------------------------------------------------------
# Frames Spark's writers do not emit but the zstd format allows (RFC 8878 §3.1.1.1), built from the real
# frame: its header descriptor (byte 4) rewritten, the fields it announces added.


def test_zstd_frame_with_a_dictionary_id_field() -> None:
    """Descriptor bits 0-1 = 3: a 4-byte dictionary ID (0: no dictionary) after the window descriptor."""
    z = REAL["zstd"]
    framed = z[:4] + b"\x03" + z[5:6] + b"\x00" * 4 + z[6:]
    assert decompress(framed, PATH) == decompress(z, PATH)
    _raises(TruncatedFileError, 0, framed[:9])  # the 4-byte field counts in the header's length


def test_zstd_frame_with_a_content_checksum() -> None:
    """Descriptor bit 2: the frame ends with the low 4 bytes of the XXH64 of its content (little-endian);
    a wrong one is a checksum error, not just a frame that does not decompress."""
    z = REAL["zstd"]
    records = decompress(z, PATH)
    check = (xxhash.xxh64_intdigest(records) & 0xFFFFFFFF).to_bytes(4, "little")
    framed = z[:4] + b"\x04" + z[5:] + check
    assert decompress(framed, PATH) == records
    _raises(ChecksumError, 0, framed[:-1] + bytes([framed[-1] ^ 0x01]))


# ---------------------------------------------------------------------------------------------------
# compress (what ``statelens prune`` writes) frames streams as Spark's codecs do


@pytest.mark.parametrize("codec", CODECS)
def test_compress_frames_a_stream_of_several_blocks_as_spark_does(codec: str) -> None:
    """A real stream made longer than two 32 KiB blocks and two 64 KiB lzf chunks: compressed, it starts
    as the file Spark wrote with the codec (the same magic, and for lz4 and snappy the same first header
    bytes: block token, stream version), and reads back to the same bytes."""
    records = decompress(REAL[codec], PATH)
    stream = records[:-4] * 800 + records[-4:]
    assert len(stream) > 2 * 0xFFFF
    out = codecs.compress(stream, codec)
    same = {"lz4": 9, "zstd": 4, "snappy": 16, "lzf": 2}[codec]
    assert out[:same] == REAL[codec][:same]
    assert sniff_codec(out) == codec
    assert decompress(out, PATH, codec) == stream

"""Row checksums (``stateStore.rowChecksum.enabled``, Spark 4.3): decoded like Spark, damage caught.

The checkpoints are real (``checksum_window`` on HDFS, ``rocks_checksum_window`` on RocksDB with
changelogs); the equality with Spark's reader at every version and in the change feed is in
``test_native_vs_spark.py``. Here a copy of a real file is damaged inside one row, behind intact
compression framing, so only the row's CRC-32C can notice.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import xxhash

from statelens.app.cli import main
from statelens.readers._format.codecs import decompress
from statelens.readers._format.records import scan_changelog, scan_records
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import ChecksumError
from tests.test_cli import tree_digest

pytestmark = pytest.mark.spark


def _lz4block_raw(data: bytes) -> bytes:
    """lz4-java ``LZ4BlockOutputStream`` framing with one stored (RAW) block and the end block."""
    check = xxhash.xxh32(data, seed=0x9747B28C).intdigest() & 0x0FFFFFFF
    block = b"LZ4Block" + bytes([0x10]) + struct.pack("<iii", len(data), len(data), check) + data
    return block + b"LZ4Block" + bytes([0x10]) + struct.pack("<iii", 0, 0, 0)


def _damaged_copy(checkpoint: Any, scenario: str, tmp_path: Path, suffix: str) -> tuple[Path, Path, int]:
    """Copy the checkpoint; flip one byte inside the last put's value row of the first ``*.suffix`` file
    of partition 0 that has one. Returns ``(root, damaged file, its version)``."""
    root = tmp_path / scenario
    shutil.copytree(checkpoint(scenario) / "checkpoint", root)
    part = root / "state" / "0" / "0"
    for path in sorted(part.glob(f"*.{suffix}"), key=lambda p: int(p.name.split(".")[0])):
        data = bytearray(decompress(path.read_bytes(), str(path), "lz4"))
        if suffix == "delta":
            idx = scan_records(bytes(data), str(path))
        else:
            idx = scan_changelog(bytes(data), str(path))[2]
        puts = [i for i in range(idx.count) if idx.val_len[i] > 0]
        if not puts:
            continue
        i = puts[-1]
        data[int(idx.val_start[i]) + int(idx.val_len[i]) - 1] ^= 0x01  # inside the row, not the CRC
        path.chmod(0o644)
        path.write_bytes(_lz4block_raw(bytes(data)))
        return root, path, int(path.name.split(".")[0])
    raise AssertionError(f"no {suffix} file with a put in {part}")


@pytest.mark.parametrize(
    ("scenario", "suffix", "store"),
    [
        ("checksum_window", "delta", None),
        ("rocks_checksum_window", "changelog", None),
        ("rocks_tws_checksum", "changelog", "cnt"),
    ],
)
def test_a_flipped_bit_in_a_row_is_a_checksum_error_naming_the_file(
    scenario: str, suffix: str, store: str | None, checkpoint: Any, tmp_path: Path, capsys: Any
) -> None:
    expected = json.loads((checkpoint(scenario) / "expected.json").read_text())
    assert expected["row_checksum"] is True
    good = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    reader = good.store_reader(0, store)
    assert good.conf["spark.sql.streaming.stateStore.rowChecksum.enabled"] == "true"
    root, damaged, version = _damaged_copy(checkpoint, scenario, tmp_path, suffix)
    assert reader.read_changes(0, version)  # the undamaged original decodes, with the row we damage
    ckpt = open_checkpoint(str(root))
    bad = ckpt.store_reader(0, store)
    with pytest.raises(ChecksumError) as info:
        bad.read_changes(0, version)  # the damaged file itself (a RocksDB version may also have a zip)
    err = info.value
    assert err.path is not None and err.path.endswith(damaged.name)
    assert "CRC-32C" in err.message and err.context["partition_id"] == 0
    # The other partitions are untouched and still read; the damaged one is reported, not skipped silently.
    others = [pid for pid in bad.partition_ids() if pid != 0 and version in bad.delta_versions(pid)]
    assert others
    for pid in others:
        assert bad.read_changes(pid, version) == reader.read_changes(pid, version)
    before = tree_digest(root)
    extra = ["--store", store] if store else []
    assert main(["rows", str(root), "--operator", "0", *extra, "--changes", "--version", str(version)]) == 1
    captured = capsys.readouterr()
    assert damaged.name in captured.err and "checksum" in captured.err
    shown = [json.loads(line)["partition"] for line in captured.out.splitlines()]
    assert 0 not in shown and len(shown) == sum(len(reader.read_changes(p, version)) for p in others)
    assert tree_digest(root) == before


def test_checksummed_stores_decode_to_the_same_rows_as_without(checkpoint: Any) -> None:
    """The same query with and without checksums leaves the same state (the prefixes are stripped)."""

    def latest(scenario: str) -> set[Any]:
        ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
        reader = ckpt.store_reader(0)
        last = reader.versions()[-1]
        return {(r.key, r.value) for pid in reader.partition_ids() for r in reader.read_rows(pid, last)}

    plain = latest("window_agg_watermark")
    assert plain and latest("checksum_window") == plain == latest("rocks_checksum_window")


def _records_of(checkpoint: Any, scenario: str) -> list[tuple[bytes, bytes | None]]:
    """Every record of partition 0's deltas as stored (checksums in place; ``None`` value: a remove)."""
    out: list[tuple[bytes, bytes | None]] = []
    for path in sorted((checkpoint(scenario) / "checkpoint" / "state" / "0" / "0").glob("*.delta")):
        data = decompress(path.read_bytes(), str(path), "lz4")
        idx = scan_records(data, str(path))
        for i in range(idx.count):
            k, klen, vlen = int(idx.key_start[i]), int(idx.key_len[i]), int(idx.val_len[i])
            value = data[int(idx.val_start[i]) : int(idx.val_start[i]) + vlen] if vlen >= 0 else None
            out.append((data[k : k + klen], value))
    return out


def test_checksums_spark_wrote_are_crc32c_of_key_then_row(checkpoint: Any) -> None:
    """docs/format.md §3.6: a put's value is ``crc:u32 LE`` + row, the CRC-32C of key then row (as
    ``java.util.zip.CRC32C`` continues over both); a remove's key is ``crc`` + key, the CRC of the key.
    Checked with the ``crc32c`` package itself on every record Spark wrote, then stripped."""
    import crc32c as reference

    from statelens.readers._format import rowchecksum

    records = _records_of(checkpoint, "checksum_window")
    keys, values = [k for k, _ in records], [v for _, v in records]
    assert None in values and any(v is not None for v in values)  # puts and removes
    got_keys, got_values = rowchecksum.strip_hdfs(keys, values, "p")
    for (key, value), k, v in zip(records, got_keys, got_values, strict=True):
        if value is None:
            assert v is None and k == key[4:]
            assert int.from_bytes(key[:4], "little") == reference.crc32c(key[4:])
            assert rowchecksum.strip_rocksdb_removed_key(key, "p", 0) == key[4:]
        else:
            assert k == key and v == value[4:]
            assert int.from_bytes(value[:4], "little") == reference.crc32c(key + value[4:])
            assert rowchecksum.crc32c(value[4:], rowchecksum.crc32c(key)) == reference.crc32c(key + value[4:])


def test_damaged_checksummed_rows_name_the_file_and_the_record(checkpoint: Any) -> None:
    from statelens.readers._format import rowchecksum
    from statelens.readers.errors import CorruptFileError

    records = _records_of(checkpoint, "checksum_window")
    keys, values = [k for k, _ in records], [v for _, v in records]
    put = next(i for i, v in enumerate(values) if v is not None)
    gone = next(i for i, v in enumerate(values) if v is None)
    # a value of exactly its checksum holds an empty row, whose CRC covers the key alone
    empty = rowchecksum.crc32c(keys[put]).to_bytes(4, "little")
    assert rowchecksum.strip_hdfs([keys[put]], [empty], "p") == ([keys[put]], [b""])
    cut = [*values]
    cut[put] = empty[:3]
    with pytest.raises(
        CorruptFileError, match=f"value of record {put} is shorter than its row checksum"
    ) as info:
        rowchecksum.strip_hdfs(keys, cut, "state/0/0/3.delta")
    assert (info.value.path, info.value.context["record"]) == ("state/0/0/3.delta", put)
    flipped = [*keys]
    flipped[gone] = bytes([keys[gone][0] ^ 0x01]) + keys[gone][1:]
    with pytest.raises(ChecksumError, match=f"row checksum of record {gone} \\(remove\\)") as info:
        rowchecksum.strip_hdfs(flipped, values, "state/0/0/3.delta")
    assert (info.value.path, info.value.context["record"]) == ("state/0/0/3.delta", gone)
    with pytest.raises(ChecksumError, match="row checksum of record 7 \\(remove\\)") as info:
        rowchecksum.strip_rocksdb_removed_key(flipped[gone], "c/1.changelog", 7)
    assert (info.value.path, info.value.context["record"]) == ("c/1.changelog", 7)
    with pytest.raises(
        CorruptFileError, match="value of record 7 \\(7 bytes\\) is shorter than its checksum header"
    ) as info:
        rowchecksum.strip_rocksdb_value(b"\x00", b"\x00" * 7, "c/1.changelog", 7)
    assert (info.value.path, info.value.context["record"]) == ("c/1.changelog", 7)

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

"""Hadoop's checksum sidecars (``readers.checksums``, docs/format.md §1.3) against the ``.<name>.crc``
files Spark's local file system wrote beside every file of real checkpoints, and against copies of those
files damaged one way each (what is wrong, and where, is what the test did)."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from statelens.readers.checksums import (
    check_against_sidecar,
    crc_sidecar_path,
    hadoop_crc,
    sidecar_target,
)
from statelens.readers.errors import ChecksumError, CorruptFileError

pytestmark = pytest.mark.spark

#: Scenarios whose files cover every kind: logs, HDFS deltas and snapshots, RocksDB zips, SSTs and
#: changelogs, schema files, file-source logs.
SCENARIOS = ["agg_count", "agg_many_partitions", "rocks_agg", "rocks_agg_changelog", "join", "rocks_tws"]


def _pairs(root: Path) -> list[tuple[Path, Path]]:
    """``(file, sidecar)`` of every sidecar Spark wrote under ``root``."""
    out = []
    for crc in sorted(root.rglob(".*.crc")):
        target = crc.with_name(crc.name[1 : -len(".crc")])
        if target.is_file():
            out.append((target, crc))
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_sidecar_spark_wrote_matches_and_is_written_byte_for_byte(
    checkpoint: Callable[[str], Path], scenario: str
) -> None:
    root = checkpoint(scenario) / "checkpoint"
    pairs = _pairs(root)
    kinds = {p.suffix or p.parent.name for p, _ in pairs}
    assert len(pairs) >= 10 and "offsets" in kinds and "commits" in kinds, kinds
    for target, crc in pairs:
        data, sidecar = target.read_bytes(), crc.read_bytes()
        check_against_sidecar(data, sidecar, target.name)
        (chunk,) = struct.unpack(">i", sidecar[4:8])
        assert chunk == 512
        assert hadoop_crc(data) == sidecar, target


def test_names() -> None:
    assert crc_sidecar_path("offsets/3") == "offsets/.3.crc"
    assert crc_sidecar_path("metadata") == ".metadata.crc"
    assert sidecar_target("offsets/.3.crc") == "offsets/3"
    assert sidecar_target(".metadata.crc") == "metadata"
    assert sidecar_target("state/0/0/.12.delta.crc") == "state/0/0/12.delta"
    assert sidecar_target(crc_sidecar_path("state/0/0/SSTs/a-b.sst")) == "state/0/0/SSTs/a-b.sst"
    for other in ("offsets/3", "offsets/3.crc", "state/0/0/1.delta.crc", "..crc", ".crc", "offsets/.3"):
        assert sidecar_target(other) is None, other


def _large(checkpoint: Callable[[str], Path]) -> tuple[bytes, bytes]:
    """A real file of more than two chunks, and its sidecar."""
    for target, crc in _pairs(checkpoint("agg_count") / "checkpoint"):
        if target.stat().st_size > 1100:
            return target.read_bytes(), crc.read_bytes()
    raise AssertionError("no file over 1100 bytes")


def test_a_flipped_byte_is_named_at_its_chunk(checkpoint: Callable[[str], Path]) -> None:
    data, sidecar = _large(checkpoint)
    damaged = bytearray(data)
    damaged[700] ^= 0x01
    with pytest.raises(ChecksumError) as info:
        check_against_sidecar(bytes(damaged), sidecar, "offsets/3")
    err = info.value
    assert (err.path, err.offset) == ("offsets/3", 512)
    assert err.context == {
        "expected": zlib.crc32(data[512:1024]),
        "got": zlib.crc32(bytes(damaged[512:1024])),
    }
    assert "does not match its Hadoop checksum .3.crc: the 512-byte chunk at byte 512 has" in err.message


def test_a_file_saved_again_with_a_final_newline_no_longer_matches(checkpoint: Callable[[str], Path]) -> None:
    root = checkpoint("agg_count") / "checkpoint"
    offsets = root / "offsets" / "0"
    data, sidecar = offsets.read_bytes(), (root / "offsets" / ".0.crc").read_bytes()
    last_chunk = (len(data) // 512) * 512
    with pytest.raises(ChecksumError) as info:
        check_against_sidecar(data + b"\n", sidecar, "offsets/0")
    assert info.value.offset == last_chunk  # the chunk the newline went into


def test_more_or_fewer_chunks_than_the_sidecar_covers(checkpoint: Callable[[str], Path]) -> None:
    data, sidecar = _large(checkpoint)
    chunks = -(-len(data) // 512)
    with pytest.raises(ChecksumError, match=f"covers {chunks}") as info:
        check_against_sidecar(data[:1024], sidecar, "f")  # whole chunks kept: they still match
    assert (info.value.path, info.value.offset) == ("f", 1024)
    with pytest.raises(ChecksumError, match=f"covers {chunks - 1}") as info:
        check_against_sidecar(data, sidecar[:-4], "f")  # one CRC fewer
    assert info.value.offset == (chunks - 1) * 512
    check_against_sidecar(b"", hadoop_crc(b""), "empty")  # an empty file: a header, no CRC
    check_against_sidecar(data, hadoop_crc(data, 1), "f")  # any chunk size the header gives, 1 too
    assert len(hadoop_crc(data, 1)) == 8 + 4 * len(data)


@pytest.mark.parametrize(
    ("damage", "offset", "match"),
    [
        (lambda s: b"CRC\x00" + s[4:], 0, "not a Hadoop checksum file"),
        (lambda s: s[:6], 0, "not a Hadoop checksum file"),
        (lambda s: s[:4] + struct.pack(">i", 0) + s[8:], 4, "chunk size 0"),
        (lambda s: s[:-1], 8, r"\d+ bytes of checksums, not a whole number"),
    ],
)
def test_a_damaged_sidecar_is_named_itself(
    checkpoint: Callable[[str], Path], damage: Callable[[bytes], bytes], offset: int, match: str
) -> None:
    data, sidecar = _large(checkpoint)
    with pytest.raises(CorruptFileError) as info:
        check_against_sidecar(data, damage(sidecar), "state/0/0/1.delta")
    assert (info.value.path, info.value.offset) == ("state/0/0/.1.delta.crc", offset)
    assert re.match(match, info.value.message), info.value.message  # from its first word

"""RocksDB state store read natively: file discovery, checkpoint v2 ids, corrupt files, read-only, temp folders.

The comparisons with Spark's own reader live in ``test_native_vs_spark.py`` and ``test_backends.py``; here
corruption starts from copies of real generated checkpoints and every error must be typed and
name the file.
"""

from __future__ import annotations

import io
import json
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers._format.rocksdb_store import (
    RocksDBStoreReader,
    ZipLimits,
    read_zip,
    sniff_rocksdb_file_name,
    split_list_value,
)
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import (
    BadMagicError,
    ChecksumError,
    CorruptFileError,
    LimitExceededError,
    MissingFileError,
    StatelensError,
    TruncatedFileError,
    UsageError,
)
from tests.test_cli import tree_digest

ROCKS = [
    "rocks_agg",
    "rocks_agg_changelog",
    "rocks_dedup_changelog",
    "rocks_pandas_state",
    "rocks_ckpt_v2",
    "rocks_join",
]


# -- pure helpers ------------------------------------------------------------------------------------------
def test_file_names_follow_spark_rules() -> None:
    uid = "41490998-ffe0-4a4e-947d-26e39acd3fc5"
    assert sniff_rocksdb_file_name("12.zip") == (12, None, "zip")
    assert sniff_rocksdb_file_name("3.changelog") == (3, None, "changelog")
    assert sniff_rocksdb_file_name(f"2_{uid}.zip") == (2, uid, "zip")
    for name in ("2.zip.crc", ".2.zip.crc", f"2_{uid}.changelog.crc", "x.zip", "2.delta", ".2.zip.0ab.tmp"):
        assert sniff_rocksdb_file_name(name) is None, name


def _zip_bytes(entries: dict[str, bytes], symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if name == symlink:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, data)
    return buf.getvalue()


def test_zip_entry_names_links_and_bombs_are_refused() -> None:
    limits = ZipLimits()
    ok = read_zip(_zip_bytes({"CURRENT": b"MANIFEST-000005\n", "metadata": b"v1\n{}"}), "x/1.zip", limits)
    assert set(ok) == {"CURRENT", "metadata"}
    for bad in ("../evil", "/etc/passwd", "sub/dir", "..", "a\\..\\b"):
        with pytest.raises(CorruptFileError, match="not a plain file name") as info:
            read_zip(_zip_bytes({bad: b"x"}), "x/1.zip", limits)
        assert info.value.path == "x/1.zip"
    with pytest.raises(CorruptFileError, match="link"):
        read_zip(_zip_bytes({"CURRENT": b"/etc/passwd"}, symlink="CURRENT"), "x/1.zip", limits)
    bomb = _zip_bytes({"MANIFEST-000001": bytes(32 << 20)})  # 32 MiB of zeros, ~32 KiB deflated
    assert len(bomb) < 1 << 20
    with pytest.raises(LimitExceededError, match="MANIFEST-000001"):
        read_zip(bomb, "x/1.zip", ZipLimits(max_entry_bytes=1 << 20))
    with pytest.raises(LimitExceededError, match="entries"):
        read_zip(_zip_bytes({f"f{i}": b"" for i in range(5)}), "x/1.zip", ZipLimits(max_entries=4))
    with pytest.raises(BadMagicError):
        read_zip(b"LZ4Block" + bytes(40), "x/1.zip", limits)


def test_zip_crc_mismatch_is_a_checksum_error() -> None:
    data = bytearray(_zip_bytes({"metadata": b"v1\n" + b"{}" * 100}))
    # Flip one stored CRC-32 byte in the local header (offset 14) and the central directory.
    data[14] ^= 0xFF
    central = data.rfind(b"PK\x01\x02")
    data[central + 16] ^= 0xFF
    with pytest.raises(ChecksumError, match="metadata"):
        read_zip(bytes(data), "x/1.zip", ZipLimits())


# -- real checkpoints ------------------------------------------------------------------------------------
def _copy(checkpoint: Any, scenario: str, tmp_path: Path) -> Path:
    root = tmp_path / scenario
    shutil.copytree(checkpoint(scenario) / "checkpoint", root)
    return root


def _reader(root: Path | str, store: str = "default") -> RocksDBStoreReader:
    reader = open_checkpoint(str(root)).store_reader(0, store)
    assert isinstance(reader, RocksDBStoreReader)
    return reader


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point temporary folders at an empty folder, to see what is left behind."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.mark.spark
def test_versions_zips_and_changelogs_are_found(checkpoint: Any) -> None:
    for scenario in ROCKS:
        folder = checkpoint(scenario)
        exp = json.loads((folder / "expected.json").read_text())
        ckpt = open_checkpoint(str(folder / "checkpoint"))
        assert not ckpt.report.problems and not ckpt.notes
        files = sorted(sf.path for _, _, sf in ckpt.iter_state_files())
        assert files == sorted(exp["zip_files"] + exp["changelog_files"]), scenario
        for op in ckpt.operators:
            for store in op.stores:
                assert store.provider == "rocksdb"
                assert store.versions == tuple(range(1, max(exp["committed_batches"]) + 2)), scenario
    # Without changelog checkpointing every version is a zip and no change is recorded: the change feed
    # is derived from consecutive versions (tests/test_change_feed.py compares it with Spark's reads).
    reader = _reader(checkpoint("rocks_agg") / "checkpoint")
    assert all(reader.delta_versions(p) == [] for p in reader.partition_ids())
    assert all(reader.change_versions(p) == reader.versions(p) for p in reader.partition_ids())
    with pytest.raises(MissingFileError, match="changelog checkpointing"):
        list(reader.iter_raw_changes(0, 2))
    changes = reader.read_changes(0, 2)
    assert changes and all(c.derived and c.version == 2 for c in changes)


@pytest.mark.spark
def test_column_family_store_shows_each_family_as_a_store(checkpoint: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint("rocks_tws") / "checkpoint"))
    names = [s.store_name for s in ckpt.operators[0].stores]
    assert names[:3] == ["cnt", "lst", "mp"] or sorted(names[:3]) == ["cnt", "lst", "mp"]
    assert all(n.startswith("$") for n in names[3:])  # Spark's internal families after the user's
    assert {s.provider for s in ckpt.operators[0].stores} == {"rocksdb"}
    physical = ckpt.column_family_reader(0, "cnt")
    assert physical is ckpt.column_family_reader(0)  # one reader of the physical store, shared
    for store in ckpt.operators[0].stores:
        reader = ckpt.store_reader(0, store.store_name)
        for pid in reader.partition_ids():
            rows = reader.read_rows(pid, reader.versions(pid)[-1])
            expected = physical.read_variable(pid, reader.versions(pid)[-1], store.store_name)
            assert len(rows) == len(expected), store.store_name
    with pytest.raises(UsageError, match="several stores"):
        ckpt.store_reader(0)


@pytest.mark.spark
def test_reading_writes_nothing_and_cleans_its_temp_folders(
    checkpoint: Any, tmp_path: Path, private_tmp: Path
) -> None:
    for scenario in ROCKS:
        root = _copy(checkpoint, scenario, tmp_path)
        before = tree_digest(root)
        ckpt = open_checkpoint(str(root))
        for op in ckpt.operators:
            for store in op.stores:
                reader = ckpt.store_reader(op.operator_id, store.store_name)
                for pid in reader.partition_ids():
                    for v in reader.versions(pid):
                        reader.read_rows(pid, v)
                    for v in reader.delta_versions(pid):
                        reader.read_changes(pid, v)
                    walk = reader.iter_versions_raw(pid)
                    next(walk)
                    walk.close()  # an abandoned walk frees its folder too
                list(reader.iter_stats())
        assert tree_digest(root) == before, scenario
        assert list(private_tmp.iterdir()) == [], scenario


@pytest.mark.spark
def test_column_family_reads_write_nothing_either(checkpoint: Any, tmp_path: Path, private_tmp: Path) -> None:
    root = _copy(checkpoint, "rocks_tws", tmp_path)
    before = tree_digest(root)
    reader = open_checkpoint(str(root)).column_family_reader(0)
    for var in reader.state_variables():
        for pid in reader.partition_ids():
            for v in reader.versions(pid):
                reader.read_variable(pid, v, var)
    assert tree_digest(root) == before
    assert list(private_tmp.iterdir()) == []


@pytest.mark.spark
def test_zip_and_changelog_give_the_same_state(checkpoint: Any) -> None:
    """A version with both a zip and a changelog: the zip alone and the chain of changelogs agree."""
    reader = _reader(checkpoint("rocks_agg_changelog") / "checkpoint")
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        both = sorted(set(pf.snapshots) & set(pf.deltas))
        assert both
        for v in both:
            from_zip = reader.read_raw(pid, v)
            snapshots, pf.snapshots = pf.snapshots, {}
            try:
                from_changelogs = reader.read_raw(pid, v)
            finally:
                pf.snapshots = snapshots
            assert from_zip == from_changelogs


@pytest.mark.spark
def test_truncated_zip_is_named_and_other_versions_still_read(
    checkpoint: Any, tmp_path: Path, private_tmp: Path
) -> None:
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    target = root / "state/0/0/3.zip"
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    reader = _reader(root)
    with pytest.raises(TruncatedFileError) as info:
        reader.read_rows(0, 3)
    assert info.value.path == "state/0/0/3.zip"
    assert info.value.context["version"] == 3 and info.value.context["partition_id"] == 0
    assert reader.read_rows(0, 2) and reader.read_rows(1, 3)
    errors: list[Any] = []
    stats = list(reader.iter_stats(on_error=errors.append))
    assert [e.path for e in errors] == ["state/0/0/3.zip"]
    assert {(s.partition_id, s.version) for s in stats} >= {(0, 1), (0, 2), (1, 5)}
    assert list(private_tmp.iterdir()) == []


@pytest.mark.spark
def test_missing_sst_is_named(checkpoint: Any, tmp_path: Path) -> None:
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    reader = _reader(root)
    meta = reader.zip_metadata(0, 5)
    _, dfs_name, _ = meta.sst_files[0]
    (root / "state/0/0/SSTs" / dfs_name).unlink()
    with pytest.raises(MissingFileError, match="named by state/0/0/5.zip") as info:
        _reader(root).read_rows(0, 5)
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"


@pytest.mark.spark
def test_short_sst_is_refused_before_rocksdb_sees_it(checkpoint: Any, tmp_path: Path) -> None:
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    _, dfs_name, size = _reader(root).zip_metadata(0, 5).sst_files[0]
    sst = root / "state/0/0/SSTs" / dfs_name
    sst.write_bytes(sst.read_bytes()[: size - 100])
    with pytest.raises(TruncatedFileError, match="records") as info:
        _reader(root).read_rows(0, 5)
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"


@pytest.mark.spark
def test_zip_with_a_parent_path_entry_is_refused(checkpoint: Any, tmp_path: Path, private_tmp: Path) -> None:
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    target = root / "state/0/1/2.zip"
    with zipfile.ZipFile(target, "a") as zf:
        zf.writestr("../../escaped", b"should never be written")
    with pytest.raises(CorruptFileError, match="'../../escaped' is not a plain file name") as info:
        _reader(root).read_rows(1, 2)
    assert info.value.path == "state/0/1/2.zip"
    assert not list(tmp_path.rglob("escaped"))
    assert list(private_tmp.iterdir()) == []


@pytest.mark.spark
def test_truncated_changelog_is_named(checkpoint: Any, tmp_path: Path) -> None:
    root = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    target = root / "state/0/0/3.changelog"
    target.write_bytes(target.read_bytes()[:-7])
    reader = _reader(root)
    with pytest.raises(TruncatedFileError) as info:
        reader.read_changes(0, 3)
    assert info.value.path == "state/0/0/3.changelog"
    with pytest.raises(TruncatedFileError):
        reader.read_rows(0, 3)  # zip 2 + changelog 3
    assert reader.read_rows(0, 4)  # zip 4 alone
    assert reader.read_rows(1, 3)


@pytest.mark.spark
def test_checkpoint_v2_uses_the_committed_unique_id_and_notes_the_others(
    checkpoint: Any, tmp_path: Path
) -> None:
    root = _copy(checkpoint, "rocks_ckpt_v2", tmp_path)
    clean = _reader(root)
    want = {v: clean.read_raw(0, v) for v in clean.versions(0)}
    (real,) = (root / "state/0/0").glob("3_*.changelog")
    stray = root / "state/0/0/3_00000000-0000-0000-0000-000000000000.changelog"
    stray.write_bytes((root / "state/0/0").glob("1_*.changelog").__next__().read_bytes())
    ckpt = open_checkpoint(str(root))
    assert ckpt.notes == [
        f"state/0/0/{stray.name}: ignored, the commit log names another unique id for version 3"
    ]
    reader = ckpt.store_reader(0)
    assert isinstance(reader, RocksDBStoreReader)
    assert reader.partitions[0].deltas[3].path == f"state/0/0/{real.name}"
    assert [f.path for f in reader.ignored_files()] == [f"state/0/0/{stray.name}"]
    assert {v: reader.read_raw(0, v) for v in reader.versions(0)} == want


@pytest.mark.spark
def test_cli_info_rows_growth_on_rocksdb(checkpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(checkpoint("rocks_ckpt_v2") / "checkpoint")
    assert main(["info", root, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["operators"][0]["stores"][0]["provider"] == "rocksdb"
    assert main(["rows", root, "--operator", "0", "--backend", "native"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    exp = json.loads((checkpoint("rocks_ckpt_v2") / "expected.json").read_text())
    assert {r["key"]["key"]: r["value"]["count"] for r in rows} == {
        k: v[0] for k, v in exp["final_state"].items()
    }
    assert main(["growth", root, "--json"]) == 0
    growth = json.loads(capsys.readouterr().out)
    last = max(g["version"] for g in growth)
    assert sum(g["rows"] for g in growth if g["version"] == last) == len(exp["final_state"])


# -- column family stores (transformWithState) -----------------------------------------------------------
def _element(row: bytes) -> bytes:
    return (len(row) + 1).to_bytes(4, "little") + b"\x00" + row


def test_list_values_split_with_either_merge_delimiter() -> None:
    a, b, c = bytes(16), bytes(range(24)), b"\x2c" * 8 + bytes(8)
    for joined, rows in (
        (_element(a), [a]),
        (_element(a) + b"," + _element(b), [a, b]),  # merge operator v1
        (_element(a) + _element(b) + _element(c), [a, b, c]),  # v2
        (_element(a) + _element(b) + b"," + _element(c), [a, b, c]),  # re-merged by rocksdict: a mix
    ):
        assert split_list_value(joined, "x") == rows
    # An element whose length starts with 0x2c (44 bytes) right after another, without a delimiter.
    long_row = bytes(43)
    assert split_list_value(_element(a) + _element(long_row), "x") == [a, long_row]
    with pytest.raises(CorruptFileError, match="length-prefixed"):
        split_list_value(_element(a)[:-1], "state/0/0/3.zip")
    # Thousands of elements made of ',' bytes, each followed by ',' and a bad tail: every position is
    # ambiguous; each is explored once (the search was exponential before), and the answer is an error.
    commas = _element(b"\x2c" * 8)
    with pytest.raises(CorruptFileError):
        split_list_value((commas + b",") * 2000 + b"\x01", "state/0/0/4.zip")


def _spark_rows(spark: Any, root: Path, var: str, batch_id: int) -> list[tuple[Any, ...]]:
    from tests import oracle

    df = (
        spark.read.format("statestore")
        .option("operatorId", "0")
        .option("stateVarName", var)
        .option("batchId", str(batch_id))
        .load(str(root))
    )
    cols = [c for c in df.columns if c != "partition_id"]
    return [(t[-1], *t[:-1]) for t in oracle.collect(df, [*cols, "partition_id"])]


def _native_rows(reader: Any, var: str, version: int) -> list[tuple[Any, ...]]:
    out = []
    for pid in reader.partition_ids():
        for row in reader.read_variable(pid, version, var):
            extra = () if row.user_key is None else (row.user_key,)
            out.append((row.partition_id, row.key, *extra, row.value))
    return out


@pytest.mark.spark
def test_transform_with_state_variables_match_spark(checkpoint: Any, spark: Any) -> None:
    """Value, list and map state of every committed version, row for row with ``stateVarName`` reads."""
    from collections import Counter

    from tests.test_native_vs_spark import canon

    root = checkpoint("rocks_tws") / "checkpoint"
    reader = open_checkpoint(str(root)).column_family_reader(0)
    assert reader.state_variables() == ["cnt", "lst", "mp"]
    compared = 0
    for var in reader.state_variables():
        for version in reader.versions():
            native = Counter(canon(r) for r in _native_rows(reader, var, version))
            expected = Counter(canon(r) for r in _spark_rows(spark, root, var, version - 1))
            assert native == expected, (var, version)
            compared += 1
    assert compared == 15


@pytest.mark.spark
def test_transform_with_state_zip_and_changelogs_agree(checkpoint: Any) -> None:
    """Lists read from SSTs (merged with ',' by rocksdict, or without by Spark) equal changelog replay."""
    reader = open_checkpoint(str(checkpoint("rocks_tws") / "checkpoint")).column_family_reader(0)
    for pid in reader.partition_ids():
        pf = reader.files.partitions[pid]
        assert max(pf.snapshots) > 1
        for v in sorted(pf.snapshots):
            from_zip = reader.read_raw(pid, v)
            snapshots, pf.snapshots = pf.snapshots, {}
            try:
                from_changelogs = reader.read_raw(pid, v)
            finally:
                pf.snapshots = snapshots
            assert from_zip == from_changelogs, (pid, v)


@pytest.mark.spark
def test_growth_counts_changelogs_a_group_at_a_time_and_names_a_bad_version_byte(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``version_rows`` cuts the keys of v1 changelogs of fixed-width rows a group of files at a time:
    the keys it cuts are the records :func:`readers._format.records.scan_changelog` finds, and its rows are the
    keys of ``read_raw`` at every version. A key whose version byte is not 00 (a real changelog,
    damaged) makes the group's check fail; the file is then indexed alone, which names it."""
    from statelens.readers._format import rocksdb_store
    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.keyids import PaddedKeys
    from statelens.readers._format.records import changelog_header, scan_changelog

    root = checkpoint("rocks_agg_changelog") / "checkpoint"
    reader = _reader(root)
    grouped = 0
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        files = [pf.deltas[v] for v in sorted(pf.deltas)]
        datas = [decompress((root / sf.path).read_bytes(), sf.path) for sf in files]
        v1 = all(changelog_header(data, sf.path)[0] == 1 for sf, data in zip(files, datas, strict=True))
        run, taken = reader._sized_changelog_run(files, datas) if v1 else (None, 0)
        if run is not None and taken == len(files):  # the partition's changelogs cut at once
            block, counts, _ = run
            rows = block.to_pylist() if isinstance(block, PaddedKeys) else [bytes(row) for row in block]
            keys = [row[4:] for row in rows]
            want = []
            for data in datas:
                idx = scan_changelog(data, "x")[2]
                want += [
                    data[s : s + n] for s, n in zip(idx.key_start.tolist(), idx.key_len.tolist(), strict=True)
                ]
            assert keys == want and sum(counts) == len(want)
            grouped += 1
        versions, rows = reader.version_rows(pid)  # type: ignore[misc]
        assert versions == reader.versions(pid)
        assert list(rows) == [len(reader.read_raw(pid, v)) for v in versions]
    assert grouped  # one-letter keys: every partition's changelogs are cut at once

    target = reader.partitions[0].deltas[2]
    real = rocksdb_store.decompress

    def damaged(data: bytes, path: str, codec: str | None = None) -> bytes:
        out = real(data, path, codec)
        if path != target.path:
            return out
        idx = scan_changelog(out, path)[2]
        assert idx.count
        broken = bytearray(out)
        broken[int(idx.key_start[0])] = 0x01  # the first key's version byte
        return bytes(broken)

    monkeypatch.setattr(rocksdb_store, "decompress", damaged)
    with pytest.raises(CorruptFileError) as info:
        reader.version_rows(0)
    assert info.value.path == target.path
    assert "version byte" in str(info.value)


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rocks_dedup_changelog", "rocks_pandas_state", "rocks_agg_changelog"])
def test_changelogs_are_cut_a_run_at_a_time_as_each_file_indexes(
    scenario: str, checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition's changelogs are cut a run of files at a time, files of a few record sizes (keys of
    a few widths, removes among puts) cut run by run inside the run, and the records so cut are those
    :func:`readers._format.records.scan_changelog` indexes file by file: each record's key (with its
    size word), key and value place, and whether it is a put, in order."""
    import numpy as np

    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.records import SizeRuns, scan_changelog
    from statelens.readers._format.store_base import ReplayRecords

    root = checkpoint(scenario) / "checkpoint"
    reader = _reader(root)
    runs: list[tuple[int, int]] = []  # (v1 files offered, files taken) per run cut
    cut_by_runs = 0
    real = RocksDBStoreReader._sized_changelog_run

    def spied(self: RocksDBStoreReader, group: Any, datas: Any) -> Any:
        out = real(self, group, datas)
        runs.append((len(group), out[1]))
        return out

    monkeypatch.setattr(RocksDBStoreReader, "_sized_changelog_run", spied)
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        files = [pf.deltas[v] for v in sorted(pf.deltas)]
        got = ReplayRecords(sorted(pf.deltas), list(range(len(files))))
        reader._add_changelog_records(got, files, keep=True)
        want: list[tuple[bytes, int, int, int, int]] = []
        offset = 0
        for sf in files:
            data = decompress((root / sf.path).read_bytes(), sf.path)
            idx = scan_changelog(data, sf.path)[2]
            for ks, kn, vs, vn in zip(
                idx.key_start.tolist(),
                idx.key_len.tolist(),
                idx.val_start.tolist(),
                idx.val_len.tolist(),
                strict=True,
            ):
                want.append((data[ks - 4 : ks + kn], ks + offset, kn, vs + offset, vn))
            offset += len(data)
        cut_by_runs += sum(isinstance(layout, SizeRuns) for layout in got.layouts)
        kstart, klen, vstart, vlen = got.positions()
        keys = [
            bytes(k)
            for piece in got.pieces
            for k in (piece.to_pylist() if hasattr(piece, "to_pylist") else piece)
        ]
        assert (
            list(zip(keys, kstart.tolist(), klen.tolist(), vstart.tolist(), vlen.tolist(), strict=True))
            == want
        )
        assert got.put_mask().tolist() == [w[4] >= 0 for w in want]
        assert sum(got.counts) == len(want) and np.array_equal(got.put_mask(), vlen >= 0)
    assert any(taken > 1 for _, taken in runs)  # several files cut at once
    if scenario != "rocks_agg_changelog":  # one-letter keys there: every file of one record size
        assert cut_by_runs  # files of a few record sizes (removes among puts) cut run by run in a run


# -- the live records replayed from changelogs (the browser, rows, sql) ----------------------------------
def _records(arrays: Any) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of each live record of ``live_arrays``, in order."""
    buf, kstart, klen, vstart, vlen = arrays
    return [
        (bytes(buf[k : k + kn]), bytes(buf[v : v + vn]))
        for k, kn, v, vn in zip(kstart.tolist(), klen.tolist(), vstart.tolist(), vlen.tolist(), strict=True)
    ]


@pytest.fixture
def rocksdb_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The zips RocksDB is opened on (``RocksDBStoreReader._scan_db``), as they are opened."""
    opened: list[str] = []
    scan = RocksDBStoreReader._scan_db

    def counted(self: RocksDBStoreReader, db_dir: str, sf: Any, *args: Any) -> Any:
        opened.append(sf.path)
        return scan(self, db_dir, sf, *args)

    monkeypatch.setattr(RocksDBStoreReader, "_scan_db", counted)
    return opened


@pytest.mark.spark
@pytest.mark.parametrize(
    "scenario", ["rocks_agg_changelog", "rocks_dedup_changelog", "rocks_pandas_state", "rocks_ckpt_v2"]
)
def test_live_records_come_from_the_changelogs_in_the_order_of_the_zip_read(
    scenario: str, checkpoint: Any, rocksdb_opens: list[str]
) -> None:
    """Where changelogs reach back to version 1, the live records of every version (what the browser,
    ``rows`` and ``sql`` decode) are replayed from them without opening RocksDB, and equal, in order,
    those of ``read_raw``, which reads the zip through RocksDB and applies the changelogs after it."""
    reader = _reader(checkpoint(scenario) / "checkpoint")
    zips_read = 0
    for pid in reader.partition_ids():
        for v in reader.versions(pid):
            got = _records(reader.live_arrays(pid, v))
            assert rocksdb_opens == []
            expected = list(reader.read_raw(pid, v).items())
            zips_read += len(rocksdb_opens)
            rocksdb_opens.clear()
            assert got == expected, (pid, v)
    assert zips_read  # versions rebuilt from a zip by read_raw were among them


@pytest.mark.spark
def test_a_damaged_changelog_before_the_zip_is_not_read_for_the_zips_version(
    checkpoint: Any, tmp_path: Path, rocksdb_opens: list[str]
) -> None:
    """A restart of version 4 loads ``4.zip`` and no older changelog: with ``1.changelog`` cut short,
    version 4 still reads (from the zip), and version 1, which only that changelog rebuilds, names it."""
    root = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    target = root / "state/0/0/1.changelog"
    target.write_bytes(target.read_bytes()[:-7])
    reader = _reader(root)
    assert _records(reader.live_arrays(0, 4)) == list(reader.read_raw(0, 4).items())
    assert rocksdb_opens == ["state/0/0/4.zip", "state/0/0/4.zip"]
    with pytest.raises(TruncatedFileError) as info:
        reader.live_arrays(0, 1)
    assert info.value.path == "state/0/0/1.changelog"
    assert info.value.context["partition_id"] == 0 and info.value.context["version"] == 1


@pytest.mark.spark
def test_live_records_name_a_damaged_zip_or_sst_even_with_changelogs(checkpoint: Any, tmp_path: Path) -> None:
    """The changelogs would rebuild version 4, but a restart loads ``4.zip``: a zip cut short and a
    missing or short SST it names are reported as reading the zip reports them."""
    root = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    target = root / "state/0/0/4.zip"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedFileError) as info:
        _reader(root).live_arrays(0, 4)
    assert info.value.path == "state/0/0/4.zip"
    assert info.value.context["partition_id"] == 0 and info.value.context["version"] == 4
    target.write_bytes(data)

    _, dfs_name, size = _reader(root).zip_metadata(0, 4).sst_files[0]
    sst = root / "state/0/0/SSTs" / dfs_name
    content = sst.read_bytes()
    sst.write_bytes(content[: size - 100])
    with pytest.raises(TruncatedFileError, match="records") as info:
        _reader(root).live_arrays(0, 5)  # zip 4 + changelog 5
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"
    sst.unlink()
    with pytest.raises(MissingFileError, match="named by state/0/0/4.zip") as info:
        _reader(root).live_arrays(0, 4)
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"


@pytest.mark.spark
def test_a_zip_whose_key_count_differs_from_the_changelogs_is_read(
    checkpoint: Any, tmp_path: Path, rocksdb_opens: list[str]
) -> None:
    """The zip's ``numKeys`` must equal the keys live after the changelogs up to its version; where it
    does not (here one more, written into a real zip's ``metadata``), the zip is read as a restart reads
    it."""
    root = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    target = root / "state/0/0/4.zip"
    with zipfile.ZipFile(target) as zf:
        entries = {info.filename: zf.read(info) for info in zf.infolist()}
    version, _, doc = entries["metadata"].decode().partition("\n")
    meta = json.loads(doc)
    meta["numKeys"] += 1
    entries["metadata"] = f"{version}\n{json.dumps(meta)}".encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in entries.items():
            zf.writestr(name, content)
    reader = _reader(root)
    assert _records(reader.live_arrays(0, 4)) == list(reader.read_raw(0, 4).items())
    assert rocksdb_opens == ["state/0/0/4.zip", "state/0/0/4.zip"]


def _outcome(data: bytes, limits: ZipLimits) -> Any:
    """What ``read_zip`` gives: the entries, or the error's type, message, file and offset."""
    try:
        return read_zip(data, "state/0/0/4.zip", limits)
    except StatelensError as err:
        return type(err), str(err), err.path, err.offset


@pytest.mark.spark
def test_zips_read_without_zipfile_give_what_zipfile_gives_even_damaged(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_zip`` reads the zips Spark writes with ``struct`` and ``zlib`` (``_read_plain_zip``) and
    hands anything else to :mod:`zipfile`. Every zip of the real checkpoints is read that way, to the
    entries :mod:`zipfile` reads; and each damage of a real zip (every byte flipped, cut at every
    length, bytes added before or after, a lower limit) gives the same entries or the same error (type,
    message, file and offset) as :mod:`zipfile` alone."""
    from statelens.readers._format import rocksdb_store

    limits = ZipLimits()
    zips = sorted((checkpoint("rocks_agg_changelog") / "checkpoint" / "state").rglob("*.zip"))
    zips += sorted((checkpoint("rocks_join") / "checkpoint" / "state").rglob("*.zip"))
    assert zips
    for path in zips:
        data = path.read_bytes()
        with zipfile.ZipFile(path) as zf:
            expected = {info.filename: zf.read(info) for info in zf.infolist()}
        got = rocksdb_store._read_plain_zip(data, limits)
        assert got == expected and list(got) == list(expected), path

    data = (checkpoint("rocks_agg_changelog") / "checkpoint" / "state/0/0/4.zip").read_bytes()
    damaged = [bytes(data[:i]) + bytes([data[i] ^ 0xFF]) + data[i + 1 :] for i in range(len(data))]
    damaged += [data[:n] for n in range(len(data))]
    damaged += [b"PK" + data, data + b"\0", data + data]
    cases = [(d, limits) for d in damaged] + [
        (data, ZipLimits(max_entries=4)),
        (data, ZipLimits(max_entry_bytes=1000)),
        (data, ZipLimits(max_metadata_bytes=100)),
        (data, ZipLimits(max_total_bytes=5000)),
    ]
    fast = [_outcome(d, lim) for d, lim in cases]
    monkeypatch.setattr(rocksdb_store, "_read_plain_zip", lambda _data, _limits: None)
    assert fast == [_outcome(d, lim) for d, lim in cases]
    assert sum(isinstance(f, dict) for f in fast) < len(cases)  # damage was found


@pytest.mark.spark
def test_a_snapshot_row_without_its_version_byte_is_named(checkpoint: Any) -> None:
    """The rows RocksDB gives from a real snapshot carry the version byte ``00``; a row whose byte is
    changed, or cut before it, is named by its position among the rows (keys, and values after a row
    checksum's header when there is one)."""
    reader = _reader(checkpoint("rocks_agg") / "checkpoint")
    with reader.workspace() as ws:
        items = reader._zip_items(ws, 0, 5, False, column_families=False)
    keys = [k for k, _ in items]
    assert len(keys) > 3
    RocksDBStoreReader._check_rows(keys, 1, "state/0/0/5.zip", "key")
    for damaged in (keys[:2] + [b"\x01" + keys[2][1:]] + keys[3:], keys[:2] + [b""] + keys[3:]):
        with pytest.raises(CorruptFileError, match="RocksDB key 2 ") as info:
            RocksDBStoreReader._check_rows(damaged, 1, "state/0/0/5.zip", "key")
        assert info.value.path == "state/0/0/5.zip"
    values = [v for _, v in items]
    RocksDBStoreReader._check_rows(values, 1, "state/0/0/5.zip", "value")
    with pytest.raises(CorruptFileError, match="RocksDB value 3 "):
        RocksDBStoreReader._check_rows(values[:3] + [values[3][:0]], 1, "state/0/0/5.zip", "value")


@pytest.mark.spark
def test_a_history_much_larger_than_its_state_is_not_replayed(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch, rocksdb_opens: list[str]
) -> None:
    """Changelogs holding more than ``CHANGELOG_REPLAY_RATIO`` times the bytes of the SSTs of the zip
    they lead to (here: any, with the ratio at 0) are not replayed: the zip is read through RocksDB, to
    the same records; a version before the first zip still replays its changelogs."""
    from statelens.readers._format import rocksdb_store

    monkeypatch.setattr(rocksdb_store, "CHANGELOG_REPLAY_RATIO", 0)
    reader = _reader(checkpoint("rocks_agg_changelog") / "checkpoint")
    assert _records(reader.live_arrays(0, 5)) == list(reader.read_raw(0, 5).items())
    assert rocksdb_opens == ["state/0/0/4.zip", "state/0/0/4.zip"]
    rocksdb_opens.clear()
    assert _records(reader.live_arrays(0, 1)) == list(reader.read_raw(0, 1).items())
    assert rocksdb_opens == []


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rocks_agg_changelog", "rocks_dedup_changelog", "rocks_pandas_state"])
def test_keys_sort_bytewise_as_rocksdb_iterates_them(
    scenario: str, checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``keyids.bytewise_order`` puts the keys of every zip, shuffled, back in the order RocksDB iterates
    them (``read_raw`` of a version loaded from its own zip), by radix passes and as opaque items
    alike; keys derived from them that end in zero bytes or are prefixes of others sort as Python
    sorts bytes (byte by byte, a prefix first)."""
    import numpy as np

    from statelens.readers._format import keyids
    from statelens.readers._format.keyids import PaddedKeys, bytewise_order

    def padded(keys: list[bytes]) -> PaddedKeys:
        lens = np.array([len(k) for k in keys], dtype=np.int64)
        width = int(lens.max())
        rows = np.zeros((len(keys), width), dtype=np.uint8)
        for row, key in zip(rows, keys, strict=True):
            row[: len(key)] = np.frombuffer(key, dtype=np.uint8)
        return PaddedKeys(rows, lens)

    reader = _reader(checkpoint(scenario) / "checkpoint")
    rng = np.random.default_rng(7)
    zips = 0
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        for v in sorted(pf.snapshots):
            if reader._base_for(pf, v) != v:
                continue
            iterated = list(reader.read_raw(pid, v))  # RocksDB's order: a fresh store, the zip alone
            if len(iterated) < 2:
                continue
            zips += 1
            shuffled = [iterated[i] for i in rng.permutation(len(iterated))]
            derived = shuffled + [k + b"\x00" for k in shuffled[:5]] + [k[:-1] for k in shuffled[:5]]
            for columns in (keyids.RADIX_COLUMNS, 0):
                with monkeypatch.context() as m:
                    m.setattr(keyids, "RADIX_COLUMNS", columns)
                    assert [shuffled[i] for i in bytewise_order(padded(shuffled))] == iterated
                    assert [derived[i] for i in bytewise_order(padded(derived))] == sorted(derived)
    assert zips


@pytest.mark.spark
def test_a_damaged_value_version_byte_in_a_file_cut_run_by_run_is_named(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changelog whose records come in a few sizes (a deduplication's removes among its puts) is cut
    run by run inside its run of files; a put whose value's version byte is not 00 there (a real
    changelog, damaged) ends the run before the file, which is then indexed alone and named."""
    from statelens.readers._format import rocksdb_store
    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.records import SizeRuns, scan_changelog

    root = checkpoint("rocks_dedup_changelog") / "checkpoint"
    reader = _reader(root)
    target = None
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        files = [pf.deltas[v] for v in sorted(pf.deltas)]
        datas = [decompress((root / sf.path).read_bytes(), sf.path) for sf in files]
        run, taken = reader._sized_changelog_run(files, datas)
        assert run is not None and taken == len(files)
        for sf, layout in zip(files, run[2], strict=True):
            if isinstance(layout, SizeRuns) and (layout.index.val_len >= 0).any():
                target = sf
                break
        if target is not None:
            break
    assert target is not None  # a file of a few record sizes, with a put
    real = rocksdb_store.decompress
    at: list[int] = []

    def damaged(data: bytes, path: str, codec: str | None = None) -> bytes:
        out = real(data, path, codec)
        if path != target.path:
            return out
        idx = scan_changelog(out, path)[2]
        put = int((idx.val_len >= 0).argmax())
        at.append(int(idx.val_start[put]) + reader.value_skip - 1)  # that put's value version byte
        broken = bytearray(out)
        broken[at[-1]] = 0x02
        return bytes(broken)

    monkeypatch.setattr(rocksdb_store, "decompress", damaged)
    with pytest.raises(CorruptFileError) as info:
        reader.version_rows(target.partition_id)
    assert info.value.path == target.path and at
    assert "version byte" in str(info.value)


def test_list_values_of_empty_rows() -> None:
    """An element of one byte: the version byte and the UnsafeRow of a schema without fields, which
    takes no bytes (docs/format.md §4.3), joined either way."""
    empty = _element(b"")
    assert empty == b"\x01\x00\x00\x00\x00"
    assert split_list_value(empty + empty, "x") == [b"", b""]
    assert split_list_value(empty + b"," + empty + _element(bytes(16)), "x") == [b"", b"", bytes(16)]
    with pytest.raises(CorruptFileError, match="length-prefixed"):
        split_list_value(empty + b"\x00\x00\x00\x00\x00", "x")  # an element of length 0 has no version byte


@pytest.mark.spark
def test_an_sst_longer_than_its_zip_records_is_corrupt(checkpoint: Any, tmp_path: Path) -> None:
    """The real SST with 100 bytes appended: the listing says more bytes than the zip's metadata
    records, which is not a cut-short file but a different one."""
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    _, dfs_name, size = _reader(root).zip_metadata(0, 5).sst_files[0]
    sst = root / "state/0/0/SSTs" / dfs_name
    sst.write_bytes(sst.read_bytes() + bytes(100))
    with pytest.raises(
        CorruptFileError, match=f"is {size + 100} bytes but state/0/0/5.zip records {size}"
    ) as info:
        _reader(root).read_rows(0, 5)
    assert not isinstance(info.value, TruncatedFileError)
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"


@pytest.mark.spark
def test_verify_zip_opens_each_zip_and_names_a_missing_sst(checkpoint: Any, tmp_path: Path) -> None:
    """``verify_zip`` in a workspace of its own: every zip Spark wrote opens and gives its metadata; with
    an SST it names removed, the SST is named."""
    root = _copy(checkpoint, "rocks_agg", tmp_path)
    reader = _reader(root)
    zips = sorted(reader.partitions[0].snapshots)
    assert zips
    for v in zips:
        assert reader.verify_zip(0, v) == reader.zip_metadata(0, v)
    _, dfs_name, _ = reader.zip_metadata(0, zips[-1]).sst_files[0]
    (root / "state/0/0/SSTs" / dfs_name).unlink()
    with pytest.raises(MissingFileError, match=f"named by state/0/0/{zips[-1]}.zip") as info:
        _reader(root).verify_zip(0, zips[-1])
    assert info.value.path == f"state/0/0/SSTs/{dfs_name}"


@pytest.mark.spark
def test_a_missing_first_changelog_before_any_zip_is_named(checkpoint: Any, tmp_path: Path) -> None:
    """Without ``1.changelog`` and with no zip at or before version 1, version 1 cannot be rebuilt: the
    error names the missing changelog; version 2 still loads from its zip."""
    root = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    assert not (root / "state/0/0/1.zip").exists()
    (root / "state/0/0/1.changelog").unlink()
    reader = _reader(root)
    with pytest.raises(
        MissingFileError, match="no zip of it, and 1.changelog is missing after the start"
    ) as info:
        reader.read_raw(0, 1)
    assert info.value.path == "state/0/0/1.changelog"
    assert reader.read_raw(0, 2)


@pytest.mark.spark
def test_checksummed_rows_walked_version_by_version(checkpoint: Any) -> None:
    """A store whose rows carry checksums is walked version by version: at each version the rows are
    the keys the chain of checked changelogs rebuilds, which at a version with a zip are the keys of
    Spark's zip; the bytes are those of that version's changelog and zip on disk."""
    root = checkpoint("rocks_checksum_window") / "checkpoint"
    reader = _reader(root)
    assert reader.row_checksum
    stats = list(reader.iter_stats())
    assert {(s.partition_id, s.version) for s in stats} == {
        (pid, v) for pid in reader.partition_ids() for v in reader.versions(pid)
    }
    for s in stats:
        pf = reader.partitions[s.partition_id]
        from_changelogs_only = dict(pf.snapshots)
        pf.snapshots.clear()
        try:
            chain = reader.read_raw(s.partition_id, s.version)
        finally:
            pf.snapshots.update(from_changelogs_only)
        assert s.rows == len(chain)
        if s.version in pf.snapshots:
            assert chain == reader.read_raw(s.partition_id, s.version)  # from the zip
        folder = root / "state/0" / str(s.partition_id)
        on_disk = [folder / f"{s.version}.changelog", folder / f"{s.version}.zip"]
        assert s.bytes == sum(p.stat().st_size for p in on_disk if p.exists())


@pytest.mark.spark
def test_a_value_of_its_version_byte_alone_is_an_empty_row(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ``1.changelog`` with its first put's value cut to the version byte (its length field
    set to 1): the value is ``00`` followed by an UnsafeRow of no bytes, read as an empty row; a value
    cut to nothing (length 0) lacks the version byte and is named."""
    import struct

    from statelens.readers._format import rocksdb_store
    from statelens.readers._format.records import scan_changelog

    root = checkpoint("rocks_agg_changelog") / "checkpoint"
    reader = _reader(root)
    target = reader.partitions[0].deltas[1]
    assert 1 not in reader.partitions[0].snapshots
    real = rocksdb_store.decompress
    intact = real(reader.fs.read_bytes(target.path), target.path, reader.codec)
    idx = scan_changelog(intact, target.path)[2]
    i = int((idx.val_len >= 0).argmax())  # the first put
    k0, kn, v0, vn = (int(a[i]) for a in (idx.key_start, idx.key_len, idx.val_start, idx.val_len))
    assert vn > 1
    key = intact[k0 + 1 : k0 + kn]

    def cut_to(value: bytes) -> None:
        damaged = intact[: v0 - 4] + struct.pack(">i", len(value)) + value + intact[v0 + vn :]
        monkeypatch.setattr(
            rocksdb_store,
            "decompress",
            lambda data, path, codec=None: damaged if path == target.path else real(data, path, codec),
        )

    cut_to(b"\x00")
    assert _reader(root).read_raw(0, 1)[key] == b""
    cut_to(b"")
    with pytest.raises(CorruptFileError, match=f"value of record {i} .* \\(found nothing\\)") as info:
        _reader(root).read_raw(0, 1)
    assert info.value.path == target.path


@pytest.mark.spark
def test_a_walk_on_remote_storage_reads_ahead_what_it_replays(checkpoint: Any) -> None:
    """On remote storage (the in-memory fsspec filesystem stands in for S3) the version-by-version walk
    of a store with row checksums first announces the zips and changelogs it replays, then gives the
    rows and bytes it gives on the local copy."""
    import fsspec

    from tests.test_fs import _upload

    local = checkpoint("rocks_checksum_window") / "checkpoint"
    _upload(local, "memory://statelens-rocks/ck")
    try:
        remote = _reader("memory://statelens-rocks/ck")
        assert not remote.fs.is_local
        here = _reader(local)
        for pid in remote.partition_ids():
            # no zip at version 1: every version is reached by its changelog, from the first on
            pf = here.partitions[pid]
            assert 1 not in pf.snapshots and sorted(pf.deltas) == here.versions(pid)
            assert [sf.path for sf in remote._replay_files(pid)] == [
                pf.deltas[v].path for v in sorted(pf.deltas)
            ]
        assert list(remote.iter_stats()) == list(here.iter_stats())
    finally:
        fsspec.filesystem("memory").rm("/statelens-rocks", recursive=True)

"""``statelens doctor`` on real PySpark checkpoints, each copy broken one way.

Every test starts from a real checkpoint copied into ``tmp_path`` and checks the finding (check name,
severity, files) and the exit code; the original is never touched (its tree hash is compared).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.doctor import iter_doctor
from statelens.app.cli import main
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.restart import RestartConf

pytestmark = pytest.mark.spark


def _tree_hash(root: Path) -> str:
    h = hashlib.sha1()
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            p = Path(d) / f
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def copy_of(checkpoint, tmp_path):
    def copy(name: str) -> tuple[Path, dict]:
        folder = checkpoint(name)
        dst = tmp_path / name
        shutil.copytree(folder / "checkpoint", dst)
        return dst, json.loads((folder / "expected.json").read_text())

    return copy


def _doctor(path: Path, **kw):
    return run_to_end(iter_doctor(open_checkpoint(str(path)), **kw))


def _only(result, check: str):
    found = [f for f in result.findings if f.check == check]
    assert found, f"no {check} finding in {[f.check for f in result.findings]}"
    return found


@pytest.mark.parametrize("name", ["agg_count", "join", "pandas_state_event", "window_agg_watermark"])
def test_clean_checkpoints_exit_0_and_are_not_written(checkpoint, capsys, name):
    root = checkpoint(name) / "checkpoint"
    before = _tree_hash(root)
    assert main(["doctor", str(root)]) == 0
    assert "OK: no problems found." in capsys.readouterr().out
    assert _tree_hash(root) == before


def test_uncommitted_last_batch_is_a_warning(checkpoint, capsys):
    folder = checkpoint("uncommitted")
    expected = json.loads((folder / "expected.json").read_text())
    b = expected["uncommitted_batch"]
    assert main(["doctor", str(folder / "checkpoint"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1
    (f,) = [f for f in doc["findings"] if f["check"] == "offsets_without_commit"]
    assert f["severity"] == "warning"
    assert f["files"] == [f"offsets/{b}"]
    assert f["batch_id"] == b
    notes = [f for f in doc["findings"] if f["check"] == "uncommitted_state_version"]
    assert len(notes) == expected["num_partitions"]
    assert all(n["severity"] == "info" for n in notes)


def test_deleted_last_commit(copy_of):
    ckpt, expected = copy_of("agg_count")
    last = max(expected["committed_batches"])
    (ckpt / "commits" / str(last)).unlink()
    result = _doctor(ckpt)
    (f,) = _only(result, "offsets_without_commit")
    assert (f.severity, f.files) == ("warning", (f"offsets/{last}",))
    assert result.exit_code == 1


def test_deleted_middle_commit(copy_of):
    ckpt, _ = copy_of("agg_count")
    (ckpt / "commits" / "1").unlink()
    result = _doctor(ckpt)
    (f,) = _only(result, "offsets_without_commit")
    assert f.severity == "error"
    gap = _only(result, "batch_id_gap")[0]
    assert gap.files == ("commits/1",)
    assert result.exit_code == 2


def test_deleted_offsets_file(copy_of):
    ckpt, _ = copy_of("agg_count")
    (ckpt / "offsets" / "2").unlink()
    result = _doctor(ckpt)
    assert _only(result, "commit_without_offsets")[0].files == ("commits/2",)
    assert result.exit_code == 2


def test_deleted_latest_delta(copy_of):
    ckpt, expected = copy_of("agg_count")
    version = max(expected["committed_batches"]) + 1
    (ckpt / "state" / "0" / "1" / f"{version}.delta").unlink()
    result = _doctor(ckpt)
    (f,) = _only(result, "missing_state_version")
    assert f.severity == "error"
    assert (f.partition, f.files) == (1, (f"state/0/1/{version}.delta",))
    assert result.exit_code == 2


def test_deleted_middle_delta_without_snapshot(copy_of):
    ckpt, expected = copy_of("agg_count")
    assert not expected["snapshot_files"]
    (ckpt / "state" / "0" / "0" / "2.delta").unlink()
    result = _doctor(ckpt)
    (f,) = _only(result, "unrebuildable_version")
    assert f.severity == "error"
    assert f.files == ("state/0/0/2.delta",)
    assert result.exit_code == 2


def test_leftover_temp_file(copy_of, capsys):
    ckpt, _ = copy_of("agg_count")
    tmp = ckpt / "state" / "0" / "0" / ".5.delta.0dada23b-2142-4db7-a392-3c06434a66f4.tmp"
    tmp.write_bytes(b"partial")
    assert main(["doctor", str(ckpt)]) == 1
    out = capsys.readouterr().out
    assert "WARNING  temp_files" in out
    assert "state/0/0/.5.delta.0dada23b-2142-4db7-a392-3c06434a66f4.tmp" in out


def test_truncated_older_snapshot_is_a_warning_a_restart_does_not_read_it(copy_of):
    """A restart after batch 7 loads version 8 from the newest snapshot (6) and deltas 7-8: snapshot 3
    is never read (Spark's loader, docs/reliability.md), so its damage is about older versions."""
    ckpt, expected = copy_of("agg_many_partitions")
    assert {"state/0/0/3.snapshot", "state/0/0/6.snapshot"} <= set(expected["snapshot_files"])
    assert max(expected["committed_batches"]) == 7
    snap = ckpt / "state/0/0/3.snapshot"
    snap.write_bytes(snap.read_bytes()[: snap.stat().st_size // 2])
    result = _doctor(ckpt)
    (found,) = [f for f in _only(result, "undecodable_file") if f.files == ("state/0/0/3.snapshot",)]
    assert found.severity == "warning" and "A restart does not need it" in found.message
    assert "versions still readable: 1-2,6-8" in found.message
    assert result.exit_code == 1
    # --quick skips reading the state files.
    quick = _doctor(ckpt, decode_files=False)
    assert not [f for f in quick.findings if f.check == "undecodable_file"]


def test_truncated_newest_snapshot_fails_without_auto_snapshot_repair(copy_of):
    """Snapshot 6 is the one a restart loads: Spark 3.5 fails on it; Spark 4.1+ (auto snapshot repair)
    falls back to snapshot 3 and replays deltas 4-8 (every delta since 1 is retained here)."""
    ckpt, expected = copy_of("agg_many_partitions")
    assert expected["delta_files"] == 32  # deltas 1-8 of 4 partitions
    snap = ckpt / "state/0/0/6.snapshot"
    snap.write_bytes(snap.read_bytes()[: snap.stat().st_size // 2])
    old = _doctor(ckpt, restart=RestartConf.parse("3.5"))
    (found,) = _only(old, "undecodable_file")
    assert found.severity == "error" and found.files == ("state/0/0/6.snapshot",) and old.exit_code == 2
    assert "The restart will fail" in found.message
    new = _doctor(ckpt, restart=RestartConf.parse("4.3"))
    assert not [f for f in new.findings if f.check == "undecodable_file"]
    (repair,) = _only(new, "restart_snapshot_repair")
    assert repair.severity == "warning" and repair.files == ("state/0/0/6.snapshot",)
    assert "falling back to snapshot 3 + deltas 4-8" in repair.message and new.exit_code == 1


def _edit_offsets(path: Path, **fields) -> None:
    """The offsets file as Spark would have written it with ``fields`` (the Hadoop checksum beside it,
    which no longer matches, removed: as a copy from an object store, which keeps none)."""
    lines = path.read_text().split("\n")
    meta = json.loads(lines[1])
    meta.update(fields)
    lines[1] = json.dumps(meta, separators=(",", ":"))
    path.write_text("\n".join(lines))
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def test_watermark_going_backwards(copy_of):
    ckpt, expected = copy_of("window_agg_watermark")
    last = max(expected["batches"])
    _edit_offsets(ckpt / "offsets" / str(last), batchWatermarkMs=expected["batch_watermark_ms"]["1"] - 1)
    result = _doctor(ckpt)
    (f,) = _only(result, "watermark_backwards")
    assert f.severity == "error"
    assert f.files[-1] == f"offsets/{last}"
    assert result.exit_code == 2


def test_batch_gap_far_beyond_the_usual_interval(copy_of):
    ckpt, expected = copy_of("join")
    last = max(expected["batches"])
    _edit_offsets(
        ckpt / "offsets" / str(last), batchTimestampMs=expected["batch_timestamp_ms"][str(last)] + 3_600_000
    )
    result = _doctor(ckpt)
    (f,) = _only(result, "batch_gap")
    assert (f.severity, f.batch_id) == ("warning", last)
    assert result.exit_code == 1


def test_shuffle_partitions_disagree_with_the_folders(copy_of):
    ckpt, _ = copy_of("agg_count")
    for p in sorted((ckpt / "offsets").iterdir()):
        if p.name.isdigit():
            lines = p.read_text().split("\n")
            meta = json.loads(lines[1])
            meta["conf"]["spark.sql.shuffle.partitions"] = "3"
            lines[1] = json.dumps(meta)
            p.write_text("\n".join(lines))
    result = _doctor(ckpt)
    (f,) = _only(result, "partition_count")
    assert f.severity == "error"
    assert "missing 2" in f.message


def test_schema_files_disagree(copy_of):
    ckpt, _ = copy_of("join")
    # Put the right side's schema file into partition 1 of the left side.
    src = ckpt / "state" / "0" / "0" / "right-keyWithIndexToValue" / "_metadata" / "schema"
    dst = ckpt / "state" / "0" / "1" / "left-keyWithIndexToValue" / "_metadata"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst / "schema")
    result = _doctor(ckpt)
    (f,) = _only(result, "schema_disagrees")
    assert f.store_name == "left-keyWithIndexToValue"
    assert "state/0/1/left-keyWithIndexToValue/_metadata/schema" in f.files
    assert result.exit_code == 2


def test_files_far_beyond_min_batches_to_retain(checkpoint, monkeypatch):
    import statelens.app.analysis.doctor as doctor

    folder = checkpoint("agg_many_partitions")
    expected = json.loads((folder / "expected.json").read_text())
    assert _doctor(folder / "checkpoint").exit_code == 0
    monkeypatch.setattr(doctor, "RETENTION_MARGIN", 0)
    result = _doctor(folder / "checkpoint", min_batches_to_retain=1)
    state = _only(result, "state_beyond_retention")
    assert len(state) == expected["num_partitions"]
    assert all(f.severity == "warning" for f in state)
    assert _only(result, "logs_beyond_retention")[0].files == ("offsets/",)
    assert result.exit_code == 1


def test_row_checksummed_files_decode_clean_and_a_bad_checksum_is_named(copy_of):
    """Spark 4.3 row checksums: the decode sample strips and checks each row's CRC-32C before decoding
    (it reported every row as not fitting the schema), and a wrong CRC is a row_checksum error."""
    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.records import scan_records
    from tests.benchmarks.bench_memory import _lz4_block_stream

    root, _ = copy_of("checksum_window")
    clean = run_to_end(iter_doctor(open_checkpoint(str(root))))
    assert not [f for f in clean.findings if f.severity == "error"]
    delta = next(p for p in sorted((root / "state" / "0").glob("*/*.delta")) if p.stat().st_size > 100)
    raw = decompress(delta.read_bytes(), str(delta), "lz4")
    idx = scan_records(raw, str(delta), allow_removes=True)
    first = int(idx.val_start[0]) if idx.val_len[0] >= 0 else int(idx.key_start[0])
    broken = bytearray(raw)
    broken[first] ^= 0xFF  # the first byte of the first row's stored CRC
    delta.write_bytes(_lz4_block_stream(bytes(broken)))
    result = run_to_end(iter_doctor(open_checkpoint(str(root))))
    bad = [f for f in result.findings if f.check == "row_checksum"]
    assert [(f.severity, f.files) for f in bad] == [("error", (str(delta.relative_to(root)),))]
    assert "ChecksumError" in bad[0].message


# -- RocksDB stores: the same version checks on zips and changelogs ---------------------------------------
@pytest.mark.parametrize(
    "name", ["rocks_agg_changelog", "rocks_ckpt_v2", "rocks_tws_timers", "rocks_join_v4"]
)
def test_clean_rocksdb_checkpoints_pass_the_version_checks(checkpoint, name):
    result = _doctor(checkpoint(name) / "checkpoint")
    assert "state versions vs commits, delta and changelog chains, retention" in result.checked
    assert not [f for f in result.findings if f.severity != "info"], [f.message for f in result.findings]


def test_rocksdb_changelog_missing_in_the_chain_to_the_last_version(copy_of):
    ckpt, expected = copy_of("rocks_agg_changelog")
    latest = max(expected["committed_batches"]) + 1
    part = ckpt / "state" / "0" / "0"
    zips = sorted(int(p.name.split(".")[0]) for p in part.glob("*.zip"))
    gap = next(
        v
        for v in range(latest, 0, -1)
        if (part / f"{v}.changelog").exists()
        and v > max((z for z in zips if z < v), default=0)
        and v not in zips
    )
    for z in [z for z in zips if z >= gap]:  # no zip may cover the gap either
        (part / f"{z}.zip").unlink()
    (part / f"{gap}.changelog").unlink()
    result = _doctor(ckpt)
    (f,) = _only(result, "unrebuildable_version")
    assert f.severity == "error" and f.partition == 0
    assert f.files == (f"state/0/0/{gap}.changelog",)
    assert "changelog(s)" in f.message and "zip covers them" in f.message
    assert result.exit_code == 2


def test_column_family_stores_are_checked_once_per_physical_store(copy_of):
    ckpt, expected = copy_of("rocks_tws_timers")
    latest = max(expected["committed_batches"]) + 1
    part = ckpt / "state" / "0" / "1"
    for f in part.glob(f"{latest}.*"):
        f.unlink()  # the last version of partition 1: its changelog (and zip, if any)
    result = _doctor(ckpt)
    (f,) = _only(result, "missing_state_version")  # once, not once per state variable
    assert (f.store_name, f.partition, f.severity) == ("default", 1, "error")
    assert f.files == (f"state/0/1/{latest}.changelog",)


def test_doctor_json_says_what_a_restart_loads_per_partition(copy_of, capsys):
    """Every partition of a clean copy loads version 8 (batch 7 + 1) from its newest snapshot (6, the
    generator's snapshot files) and deltas 7-8; with snapshot 6 of partition 2 cut, Spark 3.5 fails there."""
    ckpt, expected = copy_of("agg_many_partitions")
    assert max(expected["committed_batches"]) == 7 and expected["num_partitions"] == 4
    assert main(["doctor", str(ckpt), "--json"]) == 0
    restart = json.loads(capsys.readouterr().out)["restart"]
    assert restart["spark_version"] is None and restart["auto_snapshot_repair"] is None
    assert [(p["partition"], p["outcome"], p["base"], p["replayed"]) for p in restart["partitions"]] == [
        (pid, "loads", 6, [7, 8]) for pid in range(4)
    ]
    assert restart["partitions"][1]["reads"] == [
        "state/0/1/6.snapshot",
        "state/0/1/7.delta",
        "state/0/1/8.delta",
    ]
    snap = ckpt / "state/0/2/6.snapshot"
    snap.write_bytes(snap.read_bytes()[:40])
    assert main(["doctor", str(ckpt), "--json", "--spark-version", "3.5"]) == 2
    restart = json.loads(capsys.readouterr().out)["restart"]
    assert restart["spark_version"] == "3.5" and restart["auto_snapshot_repair"] is False
    failed = [p for p in restart["partitions"] if p["outcome"] != "loads"]
    assert [(p["partition"], p["outcome"], p["failure"]["file"]) for p in failed] == [
        (2, "fails", "state/0/2/6.snapshot")
    ]


@pytest.mark.parametrize("which", ["newest", "oldest"])
def test_a_log_saved_again_by_an_editor_is_a_note_not_a_failed_restart(copy_of, which):
    """An offsets file saved again with a final newline no longer matches its Hadoop checksum; Spark reads
    logs without checking it, and the restart succeeds (the restart matrix's ``hdfs/*-offsets-resaved``
    cells): a note that the file changed after Spark wrote it, not an error."""
    ckpt, expected = copy_of("agg_count")
    batch = max(expected["batches"]) if which == "newest" else min(expected["batches"])
    offsets = ckpt / "offsets" / str(batch)
    offsets.write_bytes(offsets.read_bytes() + b"\n")
    result = _doctor(ckpt)
    (f,) = _only(result, "checksum_mismatch")
    assert (f.severity, f.files) == ("info", (f"offsets/{batch}", f"offsets/.{batch}.crc"))
    assert "does not match its Hadoop checksum" in f.message and "does not stop a restart" in f.message
    assert result.exit_code == 0
    # Without the sidecar (a copy from an object store), nothing is said.
    (ckpt / "offsets" / f".{batch}.crc").unlink()
    assert not [f for f in _doctor(ckpt).findings if f.check == "checksum_mismatch"]

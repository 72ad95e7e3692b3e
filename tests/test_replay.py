"""Replay of HDFS-backed state stores (``readers/_format/hdfs_store.py``, ``readers/_format/store_base.py``) on real
checkpoints, against what the query itself reported, with no JVM.

The truths come from Spark's side of each scenario, never from statelens:

* the count aggregations (``agg_count`` and its codec twins) run in update mode, so ``output.json``
  holds every key Spark updated in each batch with its new count: the state after version ``v`` is each
  key's last count emitted by batches ``< v``, and the puts of ``v.delta`` are the rows of batch ``v-1``;
* ``pandas_state_processing``'s state function reported what it did to each key in each batch
  (``key_history``: update, rearm and update_no_timeout write the key, remove deletes it, ignore leaves
  it), and its final state (``expected_state``);
* the sizes of the files are the filesystem's.

Every way the store reader replays a version (records into a dict, arrays without Python objects, the
per-version walk, the counting of rows from key ids, Arrow decoding) is compared with those truths;
damaged copies (a delta missing, a delta cut short) must fail with the file named.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from statelens.readers._format.hdfs_store import HDFSStoreReader, sniff_state_file_name
from statelens.readers._format.records import uniform_keys
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import MissingFileError, StatelensError

COUNTS = ["agg_count", "codec_lzf", "codec_snappy", "codec_zstd"]
WRITES = {"update", "rearm", "update_no_timeout"}  # actions that write the key (``ignore`` writes nothing)


def _reader(folder: Path) -> HDFSStoreReader:
    reader = open_checkpoint(str(folder / "checkpoint")).store_reader(0)
    assert isinstance(reader, HDFSStoreReader)
    return reader


def _emitted(folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((folder / "output.json").read_text())
    assert rows
    return rows


def _count_state(folder: Path, version: int) -> dict[str, int]:
    """Each key's last count emitted by the batches before ``version`` (output.json is in batch order)."""
    state: dict[str, int] = {}
    for row in sorted(_emitted(folder), key=lambda r: r["_batch"]):
        if row["_batch"] < version:
            state[row["key"]] = row["count"]
    return state


def _count_changes(folder: Path, version: int) -> dict[str, int]:
    return {r["key"]: r["count"] for r in _emitted(folder) if r["_batch"] == version - 1}


def _history(folder: Path) -> list[tuple[int, str, str]]:
    expected = json.loads((folder / "expected.json").read_text())
    return sorted((h["batch"], key, h["action"]) for key, hs in expected["key_history"].items() for h in hs)


def _live_keys(folder: Path, version: int) -> set[str]:
    live: set[str] = set()
    for batch, key, action in _history(folder):
        if batch < version and action in WRITES:
            live.add(key)
        elif batch < version and action == "remove":
            live.discard(key)
    return live


def _all_rows(reader: HDFSStoreReader, version: int) -> dict[Any, Any]:
    """Decoded rows of every partition at ``version`` (a partition without it contributes nothing)."""
    out: dict[Any, Any] = {}
    for pid in reader.partition_ids():
        if version in reader.versions(pid):
            for row in reader.read_rows(pid, version):
                assert row.partition_id == pid and row.key[0] not in out
                out[row.key[0]] = row.value
    return out


def _arrow_rows(reader: HDFSStoreReader, version: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for pid in reader.partition_ids():
        for row in reader.read_arrow(pid, version).to_pylist():
            assert row["partition"] == pid
            out[next(iter(row["key"].values()))] = row["value"]
    return out


@pytest.mark.spark
@pytest.mark.parametrize("scenario", COUNTS)
def test_count_state_at_every_version_is_what_the_query_emitted(
    scenario: str, checkpoint: Callable[[str], Path]
) -> None:
    folder = checkpoint(scenario)
    reader = _reader(folder)
    batches = json.loads((folder / "expected.json").read_text())["committed_batches"]
    assert reader.versions() == [b + 1 for b in batches] and reader.latest_version() == len(batches)
    compared = 0
    for v in reader.versions():
        truth = _count_state(folder, v)
        assert {k: val[0] for k, val in _all_rows(reader, v).items()} == truth
        assert {k: val["count"] for k, val in _arrow_rows(reader, v).items()} == truth
        assert sum(len(reader.read_raw(pid, v)) for pid in reader.partition_ids()) == len(truth)
        compared += len(truth)
    assert compared > 0
    final = json.loads((folder / "expected.json").read_text())["final_state"]
    assert {k: [v[0]] for k, v in _all_rows(reader, reader.latest_version()).items()} == final


@pytest.mark.spark
@pytest.mark.parametrize("scenario", COUNTS)
def test_count_changes_are_the_rows_each_batch_emitted(
    scenario: str, checkpoint: Callable[[str], Path]
) -> None:
    folder = checkpoint(scenario)
    reader = _reader(folder)
    for v in reader.versions():
        changes = [c for pid in reader.partition_ids() for c in reader.read_changes(pid, v)]
        assert all(c.change == "put" and c.version == v for c in changes)
        assert {c.key[0]: c.value[0] for c in changes if c.value is not None} == _count_changes(folder, v)
        assert len(changes) == len(_count_changes(folder, v))
        table = [r for pid in reader.partition_ids() for r in reader.read_changes_arrow(pid, v).to_pylist()]
        assert [
            (r["version"], r["partition"], r["change"], r["key"]["key"], r["value"]["count"]) for r in table
        ] == [
            (c.version, c.partition_id, c.change, c.key[0], c.value[0])
            for c in changes
            if c.value is not None
        ]
        raw = [kv for pid in reader.partition_ids() for kv in reader.iter_raw_changes(pid, v)]
        assert len(raw) == len(changes) and all(value is not None for _, value in raw)


def _sizes(folder: Path, pid: int) -> dict[int, int]:
    """Bytes of each ``<v>.delta`` of a partition, as the filesystem lists them."""
    d = folder / "checkpoint" / "state" / "0" / str(pid)
    return {int(n.split(".")[0]): os.path.getsize(d / n) for n in os.listdir(d) if n.endswith(".delta")}


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["agg_count", "pandas_state_processing"])
def test_every_count_of_rows_agrees_with_the_query(scenario: str, checkpoint: Callable[[str], Path]) -> None:
    """Rows per version from the walk (``iter_stats``), the key-id counts (``version_rows``,
    ``version_arrays``) and ``iter_versions_raw``, summed over partitions, are the live keys the query
    reported; bytes on disk are the delta files' sizes."""
    folder = checkpoint(scenario)
    reader = _reader(folder)
    truth = {
        v: len(_count_state(folder, v)) if scenario == "agg_count" else len(_live_keys(folder, v))
        for v in reader.versions()
    }
    assert len(set(truth.values())) > 1  # the state changes size along the way
    stats = list(reader.iter_stats())
    assert len(stats) == sum(len(reader.versions(pid)) for pid in reader.partition_ids())
    counted: dict[str, dict[int, int]] = {"stats": {}, "rows": {}, "arrays": {}, "walk": {}}
    for s in stats:
        counted["stats"][s.version] = counted["stats"].get(s.version, 0) + s.rows
        assert (
            s.bytes
            == _sizes(folder, s.partition_id)[s.version]
            == reader.bytes_on_disk(s.partition_id, s.version)
        )
        assert (s.operator_id, s.store_name) == (0, "default")
    for pid in reader.partition_ids():
        rows = reader.version_rows(pid)
        arrays = reader.version_arrays(pid)
        assert rows is not None and arrays is not None
        assert list(rows[0]) == list(arrays[0]) == reader.versions(pid)
        assert list(rows[1]) == list(arrays[1])
        for v, n in zip(rows[0], rows[1], strict=True):
            counted["rows"][v] = counted["rows"].get(v, 0) + int(n)
        for v, n in zip(arrays[0], arrays[1], strict=True):
            counted["arrays"][v] = counted["arrays"].get(v, 0) + int(n)
        buf, kstart, klen, vstart, vlen = arrays[3]
        last = reader.read_raw(pid, reader.versions(pid)[-1])
        got = {
            bytes(buf[s : s + n]): bytes(buf[t : t + m])
            for s, n, t, m in zip(kstart, klen, vstart, vlen, strict=True)
        }
        assert got == last
        sizes = {
            v: sum(len(k) + len(x) for k, x in reader.read_raw(pid, v).items()) for v in reader.versions(pid)
        }
        assert dict(zip(arrays[0], arrays[2].tolist(), strict=True)) == sizes
        for v, state, on_disk in reader.iter_versions_raw(pid):
            counted["walk"][v] = counted["walk"].get(v, 0) + len(state)
            assert on_disk == _sizes(folder, pid)[v]
    for how, got in counted.items():
        assert got == truth, how


@pytest.mark.spark
@pytest.mark.parametrize(
    "scenario", ["agg_count", "pandas_state_processing", "rich_types", "agg_state_format_v1"]
)
def test_keys_are_numbered_in_order_of_first_appearance(
    scenario: str, checkpoint: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``key_ids`` of a replay's keys (fixed-width runs, files of several key widths zero-padded) gives
    equal key bytes equal ids, numbered in order of first appearance, and ``first_appearances`` marks
    each key's first record: as a dict over the keys cut at the records' positions numbers them. Numpy
    answers (no Arrow); when two different keys share their hash bits (forced here), or keys of several
    widths are left as Arrow arrays (forced here too), numpy declines and Arrow answers alike."""
    from statelens.readers._format import keyids
    from statelens.readers._format.keyids import PaddedKeys, first_records, key_numbers
    from statelens.readers._format.records import SizeRuns
    from statelens.readers.arrow_values import first_appearances, key_ids

    reader = _reader(checkpoint(scenario))
    padded = declined = cut_by_runs = 0
    for pid in reader.partition_ids():
        replay = reader._replay_records(pid, keep=True)
        assert replay is not None
        buf = b"".join(replay.datas)
        kstart, klen, _, _ = replay.positions()
        keys = [buf[s - 4 : s + n] for s, n in zip(kstart.tolist(), klen.tolist(), strict=True)]
        first_seen: dict[bytes, int] = {}
        firsts = []  # whether each record is its key's first
        for key in keys:
            firsts.append(key not in first_seen)
            first_seen.setdefault(key, len(first_seen))
        want = [first_seen[key] for key in keys]
        got = key_numbers(replay.pieces)
        assert got is not None and got.tolist() == want and got.dtype == np.int32
        assert key_ids(replay.pieces).tolist() == want
        first = first_records(replay.pieces)
        assert first is not None and first.tolist() == firsts
        assert first_appearances(replay.pieces).tolist() == firsts
        files_padded = sum(isinstance(p, PaddedKeys) for p in replay.pieces)
        padded += files_padded
        cut_by_runs += sum(isinstance(layout, SizeRuns) for layout in replay.layouts)
        with monkeypatch.context() as m:
            m.setattr(keyids, "_MUL", 0)  # every key gets the same hash
            if len(first_seen) > 1:
                assert key_numbers(replay.pieces) is None and first_records(replay.pieces) is None
                declined += 1
            assert key_ids(replay.pieces).tolist() == want
            assert first_appearances(replay.pieces).tolist() == firsts
        with monkeypatch.context() as m:  # no padding allowed: files of several key widths stay Arrow arrays
            m.setattr(keyids, "PADDING_RATIO", -1)
            m.setattr(keyids, "PADDING_SLACK", 0)
            replay = reader._replay_records(pid, keep=False)
            assert replay is not None
            assert not any(isinstance(p, PaddedKeys) for p in replay.pieces)
            if files_padded and any(not isinstance(p, np.ndarray) for p in replay.pieces):
                assert key_numbers(replay.pieces) is None
            assert key_ids(replay.pieces).tolist() == want
            assert first_appearances(replay.pieces).tolist() == firsts
    assert declined
    if scenario != "agg_count":
        assert padded or cut_by_runs  # some file's records were of several sizes


@pytest.mark.spark
def test_removes_replay_as_the_state_function_reported(checkpoint: Callable[[str], Path]) -> None:
    folder = checkpoint("pandas_state_processing")
    reader = _reader(folder)
    history = _history(folder)
    assert {a for _, _, a in history} >= {"remove", "update", "ignore"}
    removes = 0
    for v in reader.versions():
        live = _live_keys(folder, v)
        assert set(_all_rows(reader, v)) == live
        assert set(_arrow_rows(reader, v)) == live
        changes = [c for pid in reader.partition_ids() for c in reader.read_changes(pid, v)]
        wrote = {
            (k, "put" if a in WRITES else "remove") for b, k, a in history if b == v - 1 and a != "ignore"
        }
        assert {(c.key[0], c.change) for c in changes} == wrote and len(changes) == len(wrote)
        assert all((c.value is None) == (c.change == "remove") for c in changes)
        arrow = [r for pid in reader.partition_ids() for r in reader.read_changes_arrow(pid, v).to_pylist()]
        assert [(r["key"]["key"], r["change"], r["value"] is None) for r in arrow] == [
            (c.key[0], c.change, c.value is None) for c in changes
        ]
        removes += sum(c.change == "remove" for c in changes)
    assert removes >= 2  # ok1 twice, ok2 once
    expected = json.loads((folder / "expected.json").read_text())["expected_state"]
    final = _all_rows(reader, reader.latest_version())
    assert {k: {"cnt": v[0][0], "timeout_ms": v[1]} for k, v in final.items()} == expected


def _copy(checkpoint: Callable[[str], Path], scenario: str, tmp_path: Path) -> Path:
    shutil.copytree(checkpoint(scenario), tmp_path / scenario)
    return tmp_path / scenario


@pytest.mark.spark
def test_a_missing_delta_breaks_the_chain_after_it(checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    folder = _copy(checkpoint, "agg_count", tmp_path)
    part = folder / "checkpoint" / "state" / "0" / "1"
    (part / "2.delta").unlink()
    reader = _reader(folder)
    assert reader.versions(1) == [1] and reader.versions(0) == [1, 2, 3, 4]
    assert reader.versions() == [1, 2, 3, 4] and reader.delta_versions(1) == [1, 3, 4]
    for version in (2, 3, 4):
        with pytest.raises(MissingFileError) as err:
            reader.read_raw(1, version)
        assert err.value.path is not None and err.value.path.endswith("state/0/1/2.delta")
        assert err.value.context["partition_id"] == 1 and err.value.context["version"] == version
    with pytest.raises(MissingFileError, match="2.delta"):
        reader.iter_raw_changes(1, 2)
    with pytest.raises(MissingFileError, match="2.delta"):
        reader.read_changes_arrow(1, 2)
    assert [kv for kv in reader.iter_raw_changes(1, 3)]  # the deltas after the gap are still there
    assert reader.version_rows(1) is not None  # version 1 alone
    stats = list(reader.iter_stats())
    assert sorted((s.partition_id, s.version) for s in stats) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 1)]
    assert [v for v, _, _ in reader.iter_versions_raw(1)] == [1]


@pytest.mark.spark
def test_a_delta_cut_short_is_reported_with_its_file(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = _copy(checkpoint, "agg_count", tmp_path)
    victim = folder / "checkpoint" / "state" / "0" / "0" / "3.delta"
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    reader = _reader(folder)
    assert reader.read_rows(0, 2)  # versions before the damage still read
    for read in (reader.read_raw, reader.read_rows, reader.read_arrow, reader.iter_raw_changes):
        with pytest.raises(StatelensError) as err:
            read(0, 3)
        assert err.value.path is not None and err.value.path.endswith("state/0/0/3.delta")
        assert err.value.context.get("partition_id") == 0 and err.value.context.get("version") == 3
    with pytest.raises(StatelensError, match="3.delta"):
        reader.version_rows(0)
    problems = {sf.path: reader.check_file(sf, 10) for sf in reader.files()}
    bad = {p: got for p, got in problems.items() if got is not None}
    assert list(bad) == [str(reader.partitions[0].deltas[3].path)] and bad[next(iter(bad))][0] == "scan"
    assert len(problems) == 8
    errors: list[StatelensError] = []
    stats = list(reader.iter_stats(on_error=errors.append))
    assert [e.path for e in errors] == [reader.partitions[0].deltas[3].path]
    assert sorted((s.partition_id, s.version) for s in stats) == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
    ]
    with pytest.raises(StatelensError, match="3.delta"):
        list(reader.iter_stats())


def test_state_file_names_follow_spark() -> None:
    """Spark's ``fetchFiles`` rule: ``<digits>.delta`` or ``<digits>.snapshot``, nothing else."""
    assert sniff_state_file_name("12.delta") == (12, "delta")
    assert sniff_state_file_name("3.snapshot") == (3, "snapshot")
    for name in ("1.delta.crc", ".1.delta.crc", "a.delta", "1.zip", "1.changelog", "1.delta.tmp", "x1.delta"):
        assert sniff_state_file_name(name) is None, name


@pytest.mark.spark
def test_errors_name_the_store_and_unknown_partitions_list_the_known(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    from statelens.readers.errors import SchemaMismatchError, UsageError

    reader = _reader(checkpoint("agg_count"))
    with pytest.raises(UsageError, match=r"operator 0 has no partition 7; partitions: 0, 1"):
        reader.read_rows(7, 1)
    assert reader.physical_rocksdb() is None and reader.element_grouping() == (None, None)

    folder = _copy(checkpoint, "agg_count", tmp_path)
    victim = folder / "checkpoint" / "state" / "0" / "1" / "3.delta"
    victim.write_bytes(victim.read_bytes()[:-8])
    with pytest.raises(StatelensError) as err:
        _reader(folder).read_raw(1, 4)
    assert {
        k: err.value.context.get(k) for k in ("operator_id", "store_name", "partition_id", "version")
    } == {
        "operator_id": 0,
        "store_name": "default",
        "partition_id": 1,
        "version": 3,
    }

    for schema in (folder / "checkpoint" / "state" / "0").rglob("schema"):
        schema.unlink()  # a store without its schema file: raw bytes still read, rows cannot be decoded
    bare = _reader(folder)
    assert bare.schema is None and len(bare.read_raw(0, 4)) == len(_all_rows(reader, 4)) - len(
        reader.read_raw(1, 4)
    )
    with pytest.raises(SchemaMismatchError, match="no schema file") as err:
        bare.read_rows(0, 4)
    assert err.value.path == "state/0" and err.value.context.get("store_name") == "default"


@pytest.mark.spark
def test_a_cancelled_walk_stops_at_the_next_version(checkpoint: Callable[[str], Path]) -> None:
    reader = _reader(checkpoint("agg_count"))
    asked: list[int] = []

    def after_one() -> bool:
        asked.append(1)
        return len(asked) > 1

    assert [v for v, _, _ in reader.iter_versions_raw(0, after_one)] == [1]
    assert list(reader.iter_versions_raw(0, lambda: True)) == []
    assert list(reader.iter_stats(lambda: True)) == []
    assert len(list(reader.iter_stats())) == 8


@pytest.mark.spark
def test_row_checksums_change_nothing_that_is_read(checkpoint: Callable[[str], Path]) -> None:
    """``checksum_window`` is ``window_agg_watermark`` (same query, same input files) with row checksums
    on: every record then carries a CRC-32C that the reader checks and strips, through the per-record
    replay (``read_raw`` into the default ``_raw_arrays`` / ``_raw_change_arrays``) instead of the
    arrays of plain files. Both stores hold the same rows and changes at every version."""
    checked = _reader(checkpoint("checksum_window"))
    plain = _reader(checkpoint("window_agg_watermark"))
    assert checked.row_checksum and not plain.row_checksum
    assert checked.versions() == plain.versions() and checked.partition_ids() == plain.partition_ids()
    compared = removes = 0
    for pid in plain.partition_ids():
        assert checked.version_arrays(pid) is None and checked.version_rows(pid) is None  # walked instead
        for v in plain.versions(pid):
            rows = plain.read_rows(pid, v)
            assert sorted(checked.read_rows(pid, v)) == sorted(rows)
            assert sorted(map(str, checked.read_arrow(pid, v, unique_names=True).to_pylist())) == sorted(
                map(str, plain.read_arrow(pid, v, unique_names=True).to_pylist())
            )
            changes = plain.read_changes(pid, v)
            assert checked.read_changes(pid, v) == changes
            assert (
                checked.read_changes_arrow(pid, v, unique_names=True).to_pylist()
                == plain.read_changes_arrow(pid, v, unique_names=True).to_pylist()
            )
            compared += len(rows) + len(changes)
            removes += sum(c.change == "remove" for c in changes)
    assert compared > 0 and removes > 0
    assert [(s.partition_id, s.version, s.rows) for s in checked.iter_stats()] == [
        (s.partition_id, s.version, s.rows) for s in plain.iter_stats()
    ]
    assert [checked.check_file(sf, 10) for sf in checked.files()] == [None] * len(checked.files())


@pytest.mark.spark
def test_a_schema_the_rows_do_not_fit_is_reported_per_file(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    """``agg_count`` with the schema files of ``pandas_state_processing`` swapped in (a damaged copy):
    every file still scans, and the check names the schema stage, the file and the record."""
    folder = _copy(checkpoint, "agg_count", tmp_path)
    other = (
        checkpoint("pandas_state_processing") / "checkpoint" / "state" / "0" / "0" / "_metadata" / "schema"
    )
    swapped = list((folder / "checkpoint" / "state" / "0").glob("*/_metadata/schema"))
    assert len(swapped) == 1  # Spark writes it in partition 0 only
    for schema in swapped:
        shutil.copy(other, schema)
    reader = _reader(folder)
    found = {sf.path: reader.check_file(sf, 10) for sf in reader.files()}
    assert len(found) == 8
    with_records = {p for p, got in found.items() if got is not None}
    for path, got in found.items():
        if got is None:  # an empty delta: no row to decode
            continue
        stage, err = got
        assert stage == "schema" and err.path == path and err.context["record"] == 0
        assert "a row of 2 fields needs at least 24 bytes" in str(err)
    assert len(with_records) == 6  # agg_count's two empty deltas hold no row
    assert all(_reader(checkpoint("agg_count")).check_file(sf, 10) is None for sf in reader.files())


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["dedup_watermark", "window_agg_watermark"])
def test_live_keys_counted_from_keys_alone_are_the_rows_rebuilt(
    scenario: str, checkpoint: Callable[[str], Path]
) -> None:
    """``iter_stats`` applies each delta's keys alone (no value is sliced) and counts the live keys; on
    these queries' deltas, whose watermark removes keys and whose records are not all one width (so no
    fixed-width shortcut), the count at every version is the number of rows ``read_raw`` rebuilds, and
    so are the counts from the keys' ids (``iter_version_arrays``)."""
    reader = _reader(checkpoint(scenario))
    indexed_with_removes = 0
    for pid in reader.partition_ids():
        for sf in reader._partition(pid).deltas.values():
            data = reader._decompressed(sf)
            if uniform_keys(data, allow_removes=True) is None:
                indexed_with_removes += int((reader._index(sf, data)[1].val_len < 0).any())
    assert indexed_with_removes > 0
    stats = list(reader.iter_stats())
    assert len(stats) == sum(len(reader.versions(pid)) for pid in reader.partition_ids())
    rebuilt = {(s.partition_id, s.version): len(reader.read_raw(s.partition_id, s.version)) for s in stats}
    for s in stats:
        assert s.rows == rebuilt[s.partition_id, s.version], (s.partition_id, s.version)
    # the same counts from the keys' ids, partition by partition in order
    ordered = list(reader.iter_version_arrays(reader.partition_ids()))
    assert [pid for pid, _ in ordered] == reader.partition_ids()
    for pid, arrays in ordered:
        assert arrays is not None
        assert list(arrays[0]) == reader.versions(pid)
        assert [int(n) for n in arrays[1]] == [rebuilt[pid, v] for v in reader.versions(pid)]


@pytest.mark.spark
def test_raw_columns_hold_each_row_as_stored(checkpoint: Callable[[str], Path]) -> None:
    """``read_arrow(raw=True)`` adds ``key_bytes`` and ``value_bytes``: each row's key and value bytes as
    the files hold them, the pairs the per-record replay (``read_raw``) rebuilds from the same files."""
    reader = _reader(checkpoint("agg_count"))
    compared = 0
    for pid in reader.partition_ids():
        for v in reader.versions(pid):
            table = reader.read_arrow(pid, v, raw=True)
            assert table.column_names[-2:] == ["key_bytes", "value_bytes"]
            pairs = zip(
                table.column("key_bytes").to_pylist(), table.column("value_bytes").to_pylist(), strict=True
            )
            assert dict(pairs) == reader.read_raw(pid, v)
            compared += table.num_rows
    assert compared > 0


@pytest.mark.spark
def test_a_walk_up_to_a_damaged_delta_counts_live_keys_from_keys_alone(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    """A partition whose files cannot all be read is walked (``iter_stats`` with ``on_error``): each delta's
    keys alone are applied, removes included, up to the damaged file. With every partition's last delta
    of ``dedup_watermark`` cut in half, the rows counted at each earlier version are the rows ``read_raw``
    rebuilds from the intact original."""
    good = _reader(checkpoint("dedup_watermark"))
    root = tmp_path / "checkpoint"
    shutil.copytree(checkpoint("dedup_watermark") / "checkpoint", root)
    last = {}
    for pid in good.partition_ids():
        v = max(good._partition(pid).deltas)
        damaged = root / "state" / "0" / str(pid) / f"{v}.delta"
        damaged.chmod(0o644)
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
        last[pid] = v
    errors: list[StatelensError] = []
    stats = list(_reader(tmp_path).iter_stats(on_error=errors.append))
    assert len(errors) == len(last)
    assert {(s.partition_id, s.version) for s in stats} == {
        (pid, v) for pid in last for v in good.versions(pid) if v < last[pid]
    }
    for s in stats:
        assert s.rows == len(good.read_raw(s.partition_id, s.version)), (s.partition_id, s.version)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("scenario", "rebuild"),
    [
        ("agg_count", "amortised"),
        ("codec_zstd", "amortised"),
        ("agg_count", "every change"),
        ("rocks_agg", "every change"),  # no changelogs: each version the difference of two zips
        ("rocks_agg_changelog", "every change"),
    ],
)
def test_scan_replay_fed_version_by_version_is_what_the_query_emitted(
    scenario: str, rebuild: str, checkpoint: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan's replay, fed one version at a time and resumed from the state it reached (as a live
    follow feeds it), holds after each version exactly the counts the query emitted up to that batch,
    and reads each version once: after the first, every step comes with the records that made it. Its
    states are held in arrays (``CompactState``), rebuilt as the store grows or at every change."""
    from statelens.readers import replay_state
    from statelens.readers.backends import NativeBackend
    from statelens.readers.scan import StateScan

    if rebuild == "every change":
        monkeypatch.setattr(replay_state, "REBUILD_MIN", -1)

    folder = checkpoint(scenario)
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    scan = StateScan(NativeBackend(ckpt), 0, kind="replay")
    replay = scan.replay()
    last = json.loads((folder / "expected.json").read_text())["committed_batches"][-1] + 1
    for v in range(1, last + 1):
        state: dict[str, int] = {}
        steps = list(replay.advance(v))
        assert {s.version for s in steps} == {v}, v  # only the version fed, never one read again
        assert all(s.changes is not None for s in steps) or v == 1
        assert all(isinstance(s.state, replay_state.CompactState) for s in steps)
        for s in steps:
            decoded = scan.decode(s.partition_id, list(s.state.items()), v)
            state.update({key[0]: value[0] for key, value in decoded if value is not None})
        assert state == _count_state(folder, v), v
        assert sum(len(s.state) for s in steps) == len(state), v  # each key held once
        assert all(s.state.get(k) == x for s in steps for k, x in s.state.items()), v
        assert set(replay.positions.values()) == {v}
    assert list(replay.advance()) == []  # nothing new: nothing read
    assert scan.ok and not scan.unreadable


@pytest.mark.spark
def test_scan_replay_reports_a_damaged_delta_and_rebuilds_after_it(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    """A delta cut short: the replay names the file, leaves its partition's versions out until a
    snapshot rebuilds the state, and the other partitions replay whole (the error policy of every scan)."""
    from statelens.readers.backends import NativeBackend
    from statelens.readers.scan import StateScan

    folder = checkpoint("agg_count")
    shutil.copytree(folder / "checkpoint", tmp_path / "checkpoint")
    delta = tmp_path / "checkpoint" / "state" / "0" / "0" / "2.delta"
    delta.write_bytes(delta.read_bytes()[:-7])
    scan = StateScan(NativeBackend(open_checkpoint(str(tmp_path / "checkpoint"))), 0, kind="replay")
    steps = [(s.partition_id, s.version) for s in scan.iter_replay()]
    assert [e.path for e in scan.problems] == ["state/0/0/2.delta"]
    assert scan.unreadable and scan.unreadable[0].partition_id == 0
    assert (0, 1) in steps and (0, 2) not in steps
    assert {v for p, v in steps if p == 1} == set(range(1, max(v for _, v in steps) + 1))
    with pytest.raises(StatelensError, match="2.delta"):
        list(StateScan(scan.backend, 0, kind="replay", strict=True).iter_replay())

"""State growth, skew and footprint on real PySpark checkpoints."""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.growth import SMALL_FILE_BYTES, iter_growth
from statelens.readers.checkpoint import open_checkpoint

pytestmark = pytest.mark.spark


def test_rows_bytes_skew_and_projection(checkpoint):
    folder = checkpoint("agg_many_partitions")
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    result = run_to_end(iter_growth(ckpt))
    assert not result.problems
    (g,) = result.stores
    assert g.partitions == list(range(expected["num_partitions"]))
    last = max(expected["committed_batches"]) + 1
    assert g.versions[-1] == last
    assert g.total_rows()[-1] == len(expected["final_state"])
    reader = ckpt.store_reader(0)
    for pid in g.partitions:
        for v in reader.versions(pid):
            raw = reader.read_raw(pid, v)
            assert g.rows[pid][v] == len(raw)
            assert g.state_bytes[pid][v] == sum(len(k) + len(x) for k, x in raw.items())
    # Rows only grow in a count without watermark; the rate is positive and the projection finite.
    totals = g.total_rows()
    assert totals == sorted(totals)
    assert g.rows_per_batch() > 0
    latest = g.latest_rows()
    assert g.skew() == pytest.approx(max(latest.values()) / statistics.median(latest.values()))
    assert g.top_partitions()[0][1] == max(latest.values())
    proj = g.projection(totals[-1] * 10, result.median_interval_ms)
    assert proj["batches"] == pytest.approx((totals[-1] * 10 - totals[-1]) / g.rows_per_batch())
    assert proj["ms"] > 0
    assert g.projection(1, None)["reached"] is True


def test_footprint_counts_every_file_and_old_versions(checkpoint):
    folder = checkpoint("agg_many_partitions")
    root = folder / "checkpoint"
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["snapshot_files"], "the scenario writes snapshots (minDeltasForSnapshot=2)"
    fp = run_to_end(iter_growth(open_checkpoint(str(root)))).footprint
    files = [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
    assert fp.total_files == len(files)
    assert fp.total_bytes == sum(p.stat().st_size for p in files)
    assert fp.small_files == sum(1 for p in files if p.stat().st_size < SMALL_FILE_BYTES)
    assert fp.areas["state"][0] == sum(1 for p in files if "state" in p.relative_to(root).parts[:1])
    assert fp.temp_files == []
    # Old versions: files before the newest snapshot the latest version is rebuilt from.
    old = 0
    for pdir in sorted((root / "state" / "0").iterdir()):
        if not pdir.name.isdigit():
            continue
        names = [p.name for p in pdir.iterdir() if re.fullmatch(r"\d+\.(delta|snapshot)", p.name)]
        deltas = {int(n.split(".")[0]) for n in names if n.endswith(".delta")}
        snaps = {int(n.split(".")[0]) for n in names if n.endswith(".snapshot")}
        latest = max(deltas | snaps)
        base = max((s for s in snaps if all(v in deltas for v in range(s + 1, latest + 1))), default=0)
        for n in names:
            v = int(n.split(".")[0])
            if v < base or (v == base and n.endswith(".delta")):
                old += (pdir / n).stat().st_size
    assert fp.old_state_bytes == old
    assert old > 0


def test_zombie_share(checkpoint):
    folder = checkpoint("pandas_state_event")
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    exp = run_to_end(iter_expired(ckpt, stale_after=0))
    zombies = {(0, "default"): exp.counts()["zombie"]}
    (g,) = run_to_end(iter_growth(ckpt, zombies)).stores
    expected = json.loads((folder / "expected.json").read_text())
    assert sum(g.latest_rows().values()) == len(expected["final_keys"])
    assert g.zombie_share() == pytest.approx(zombies[(0, "default")] / len(expected["final_keys"]))


@pytest.mark.spark
@pytest.mark.parametrize(
    "scenario",
    ["agg_count", "dedup_watermark", "session_window", "join", "pandas_state_event", "rocks_agg_changelog"],
)
def test_walk_gives_every_version_as_read_whole(scenario: str, checkpoint: Any) -> None:
    """The walk replays deltas (puts-only files in one C-level update, others record by record) onto
    the state it carries: each version it yields, and its key + value bytes, equal the version read whole."""
    from statelens.readers.scan import _PartitionReplay

    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    walked = 0
    for op in ckpt.operators:
        for st in op.stores:
            reader = ckpt.store_reader(op.operator_id, st.store_name)
            for pid in reader.partition_ids():
                problems: list[Any] = []
                for step in _PartitionReplay(reader, pid, problems, True).advance():
                    whole = reader.read_raw(pid, step.version)
                    assert step.state == whole, (scenario, st.store_name, pid, step.version)
                    assert step.state_bytes == sum(len(k) + len(x) for k, x in whole.items())
                    walked += 1
                assert not problems
    assert walked > 0


@pytest.mark.spark
@pytest.mark.parametrize(
    "scenario",
    [
        "agg_count",
        "dedup_watermark",
        "session_window",
        "join",
        "pandas_state_event",
        "rich_types",
        "agg_many_partitions",
    ],
)
@pytest.mark.parametrize("big", [False, True], ids=["one-thread", "threads"])
def test_version_arrays_count_what_the_walk_counts(
    scenario: str, big: bool, checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Growth's columnar count (keys numbered by Arrow's hashing; without removes the distinct keys so
    far, else records grouped by key, each changing rows and bytes by what it adds over the key's
    record before it; partitions on one thread, or on several as for a big store) gives the walk's
    rows and key + value bytes at every version, and the live records at the last version weigh to
    the walk's heaviest keys, ties in the same order. The command line's row counts
    (``iter_stats``, counted from the keys' ids: fixed-width files a group at a time, variable-width
    ones indexed, removes grouped by key) are the walk's over a set of keys."""
    from statelens.app.analysis.heavy import _top_of_arrays
    from statelens.readers._format.hdfs_store import HDFSStoreReader
    from statelens.readers._format.store_base import StoreReaderBase
    from statelens.readers.scan import _PartitionReplay

    monkeypatch.setattr(HDFSStoreReader, "big", lambda self: big)
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    stores = [
        reader
        for op in ckpt.operators
        for st in op.stores
        if isinstance(reader := ckpt.store_reader(op.operator_id, st.store_name), HDFSStoreReader)
    ]
    assert stores
    for reader in stores:
        counted = list(reader.iter_stats())
        with monkeypatch.context() as walked:
            walked.setattr(HDFSStoreReader, "_stats_plan", StoreReaderBase._stats_plan)
            assert counted == list(reader.iter_stats()) and counted
        assert all(reader.version_rows(pid) is not None for pid in reader.partition_ids())
    compared = 0
    for op in ckpt.operators:
        for st in op.stores:
            reader = ckpt.store_reader(op.operator_id, st.store_name)
            for pid in reader.partition_ids():
                arrays = reader.version_arrays(pid)
                if arrays is None:
                    continue
                versions, rows, nbytes, live = arrays
                walked = {}
                state: dict[bytes, bytes] = {}
                for step in _PartitionReplay(reader, pid, [], True).advance():
                    walked[step.version] = (len(step.state), step.state_bytes)
                    state = step.state
                assert walked == {v: (int(r), int(b)) for v, r, b in zip(versions, rows, nbytes, strict=True)}
                buf, ks, kl, vs, vl = live
                got = {buf[a : a + b]: buf[c : c + d] for a, b, c, d in zip(ks, kl, vs, vl, strict=True)}
                assert got == state, (scenario, st.store_name, pid)
                for n in (1, 3, 1000):
                    assert _top_of_arrays(*live, n) == _heaviest(state, n)
                compared += 1
    assert compared > 0


@pytest.mark.spark
def test_counts_of_a_damaged_store_equal_the_walks(
    checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts of a checkpoint with a truncated delta, from the keys' ids (the command line) and in the
    growth view (partitions on one thread, or on several as for a big store): the same rows per
    partition and version as the walk over sets of keys, up to the damaged version of that partition,
    and the same error naming the file."""
    import shutil

    from statelens.readers._format.hdfs_store import HDFSStoreReader
    from statelens.readers._format.store_base import StoreReaderBase
    from statelens.readers.errors import StatelensError

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_many_partitions") / "checkpoint", root)
    victim = root / "state/0/2/8.delta"
    victim.write_bytes(victim.read_bytes()[:40])

    def stats(walk: bool) -> tuple[list[Any], list[str]]:
        with monkeypatch.context() as patched:
            if walk:
                patched.setattr(HDFSStoreReader, "_stats_plan", StoreReaderBase._stats_plan)
            errors: list[StatelensError] = []
            got = list(open_checkpoint(str(root)).store_reader(0, None).iter_stats(on_error=errors.append))
        return got, [e.path or "" for e in errors]

    walked, walk_errors = stats(True)
    counted, count_errors = stats(False)
    assert counted == walked and walk_errors == count_errors == ["state/0/2/8.delta"]
    assert {s.partition_id for s in walked if s.version == 8} == {0, 1, 3}
    views = []
    for big in (False, True):
        monkeypatch.setattr(HDFSStoreReader, "big", lambda self, b=big: b)
        result = run_to_end(iter_growth(open_checkpoint(str(root))))
        views.append((result.stores[0].rows, [p.path for p in result.problems]))
    assert views[0] == views[1] and "state/0/2/8.delta" in views[0][1]
    assert {(p, v): n for p, per in views[0][0].items() for v, n in per.items()} == {
        (s.partition_id, s.version): s.rows for s in walked
    }


def _heaviest(state: dict[bytes, bytes], n: int) -> list[tuple[int, None, bytes, bytes]]:
    """The ``n`` heaviest records of a raw state by key + value bytes, ties by key bytes: every record
    sorted (the oracle of the heaviest keys' selection)."""
    return sorted(((len(k) + len(v), None, k, v) for k, v in state.items()), key=lambda t: (-t[0], t[2]))[:n]


#: RocksDB scenarios whose stores (all plain key/value ones) the growth view reads: a zip per version
#: (no changelogs), then with changelog checkpointing and zips every two versions; the last with row
#: checksums.
ROCKS_GROWTH = [
    "rocks_agg",
    "rocks_agg_changelog",
    "rocks_pandas_state",
    "rocks_dedup_changelog",
    "rocks_ckpt_v2",
    "rocks_join",
    "rocks_checksum_window",
]


def _walked_arrays(reader: Any, pid: int) -> tuple[dict[int, tuple[int, int]], dict[bytes, bytes]]:
    """Rows and key + value bytes at every version, and the last state, from the per-version walk."""
    from statelens.readers.scan import _PartitionReplay

    walked: dict[int, tuple[int, int]] = {}
    state: dict[bytes, bytes] = {}
    problems: list[Any] = []
    for step in _PartitionReplay(reader, pid, problems, True).advance():
        walked[step.version] = (len(step.state), step.state_bytes)
        state = step.state
    assert not problems
    return walked, dict(state)


def _assert_arrays_are_the_walks(reader: Any, pid: int, arrays: Any, what: Any) -> None:
    """``version_arrays``' rows, bytes and live records (and heaviest keys) are the walk's."""
    from statelens.app.analysis.heavy import _top_of_arrays

    versions, rows, nbytes, live = arrays
    walked, state = _walked_arrays(reader, pid)
    assert versions == reader.versions(pid), what
    assert walked == {v: (int(r), int(b)) for v, r, b in zip(versions, rows, nbytes, strict=True)}, what
    buf, ks, kl, vs, vl = live
    got = {buf[a : a + b]: buf[c : c + d] for a, b, c, d in zip(ks, kl, vs, vl, strict=True)}
    assert len(got) == len(ks) and got == state, what
    for n in (1, 3, 1000):
        assert _top_of_arrays(*live, n) == _heaviest(state, n), what
    counted = reader.version_rows(pid)
    if not reader.delta_versions(pid):  # a zip per version: counted by the walk over sets of keys
        assert counted is None, what
        return
    assert counted is not None, what
    assert (counted[0], [int(r) for r in counted[1]]) == (versions, [r for r, _ in walked.values()]), what


def _growth(root: Path, monkeypatch: pytest.MonkeyPatch, walk: bool) -> tuple[Any, list[tuple[int, str]]]:
    """The growth view's result (heaviest keys too), and the partitions it walked (``walk``: every
    RocksDB partition is walked, as before ``version_arrays`` applied to them)."""
    from statelens.readers import scan_sizes
    from statelens.readers._format.rocksdb_store import RocksDBStoreReader

    walked: list[tuple[int, str]] = []
    replay = scan_sizes._walk

    def spy(scan: Any, reader: Any, pid: int, *args: Any, **kwargs: Any) -> Any:
        walked.append((pid, reader.store_name))
        return replay(scan, reader, pid, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(scan_sizes, "_walk", spy)
        if walk:
            patched.setattr(RocksDBStoreReader, "version_arrays", lambda self, pid: None)
        result = run_to_end(iter_growth(open_checkpoint(str(root)), top_keys=3))
    return result, walked


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ROCKS_GROWTH)
@pytest.mark.parametrize("big", [False, True], ids=["one-thread", "threads"])
def test_rocksdb_version_arrays_count_what_the_walk_counts(
    scenario: str, big: bool, checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB stores with changelog checkpointing are replayed as arrays (changelog records counted by
    key id as deltas are), stores without counted zip by zip: rows, key + value bytes and live records
    (version bytes removed) at every version are the per-version walk's, and so is what the growth view
    shows, heaviest keys included, with no partition walked (partitions on one thread, or on several as
    for a big store). Stores with row checksums (checked record by record) are walked:
    ``version_arrays`` is None there."""
    from statelens.readers._format.rocksdb_store import RocksDBStoreReader
    from statelens.readers._format.store_base import StoreReaderBase

    monkeypatch.setattr(StoreReaderBase, "big", lambda self: big)
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    checksums = scenario == "rocks_checksum_window"
    compared = 0
    for op in ckpt.operators:
        for st in op.stores:
            reader = ckpt.store_reader(op.operator_id, st.store_name)
            assert isinstance(reader, RocksDBStoreReader) and reader.row_checksum == checksums
            for pid in reader.partition_ids():
                arrays = reader.version_arrays(pid)
                if checksums:
                    assert arrays is None and reader.version_rows(pid) is None
                    continue
                assert arrays is not None, (scenario, st.store_name, pid)
                _assert_arrays_are_the_walks(reader, pid, arrays, (scenario, st.store_name, pid))
                compared += 1
            counted = list(reader.iter_stats())
            with monkeypatch.context() as walked:
                walked.setattr(RocksDBStoreReader, "_stats_plan", StoreReaderBase._stats_plan)
                assert counted == list(reader.iter_stats()) and counted
    assert compared or checksums
    fast, fast_walked = _growth(root, monkeypatch, walk=False)
    slow, slow_walked = _growth(root, monkeypatch, walk=True)
    partitions = [(pid, st.store_name) for op in ckpt.operators for st in op.stores for pid in st.partitions]
    assert sorted(slow_walked) == sorted(partitions)
    assert fast_walked == (slow_walked if checksums else [])
    assert not fast.problems and not slow.problems
    assert fast.stores == slow.stores
    assert all(g.rows and g.top_keys is not None and g.top_keys.overall for g in fast.stores)


@pytest.mark.spark
def test_rocksdb_version_arrays_start_from_a_zip(
    checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once retention has removed the first changelogs, a RocksDB partition's first version is rebuilt
    from its zip, read once through RocksDB (then its keys and values are framed as a delta's records),
    and the changelogs after it are applied as arrays: the walk's rows, bytes and live records at every
    version. A missing changelog in the middle (a gap: that version only from its zip) is walked."""
    import shutil

    from statelens.readers._format.rocksdb_store import RocksDBStoreReader

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("rocks_agg_changelog") / "checkpoint", root)
    for first in root.glob("state/0/*/1.changelog"):  # as Spark's cleanup of old versions does
        first.unlink()
    zips_read: list[tuple[int, int]] = []
    real = RocksDBStoreReader._add_zip_records

    def spy(self: Any, out: Any, sf: Any, keep: bool) -> None:
        zips_read.append((sf.partition_id, sf.version))
        real(self, out, sf, keep)

    monkeypatch.setattr(RocksDBStoreReader, "_add_zip_records", spy)
    reader = open_checkpoint(str(root)).store_reader(0)
    assert isinstance(reader, RocksDBStoreReader)
    for pid in reader.partition_ids():
        first = reader.versions(pid)[0]
        assert first > 1 and reader.has_snapshot(pid, first)
        zips_read.clear()
        arrays = reader.version_arrays(pid)
        assert arrays is not None and zips_read == [(pid, first)]
        _assert_arrays_are_the_walks(reader, pid, arrays, pid)
    fast, fast_walked = _growth(root, monkeypatch, walk=False)
    slow, _ = _growth(root, monkeypatch, walk=True)
    assert fast_walked == [] and fast.stores == slow.stores and not fast.problems

    pf = reader.partitions[0]
    gap = next(v for v in sorted(pf.deltas) if v not in pf.snapshots and v > min(reader.versions(0)))
    (root / pf.deltas[gap].path).unlink()
    reader = open_checkpoint(str(root)).store_reader(0)
    assert reader.version_arrays(0) is None and reader.version_rows(0) is None
    assert reader.version_arrays(1) is not None
    fast, fast_walked = _growth(root, monkeypatch, walk=False)
    slow, _ = _growth(root, monkeypatch, walk=True)
    assert fast_walked == [(0, "default")] and fast.stores == slow.stores and not fast.problems


@pytest.mark.spark
@pytest.mark.parametrize("damage", ["changelog", "zip"])
def test_rocksdb_growth_of_a_damaged_store_is_the_walks(
    damage: str, checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated changelog, or a truncated zip of a version the changelogs reach (a restart would
    load it), makes ``version_arrays`` of that partition raise, naming the file: the growth view walks
    that partition alone, and shows what the walk of every partition shows, with the same error."""
    import shutil

    from statelens.readers.errors import StatelensError

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("rocks_agg_changelog") / "checkpoint", root)
    reader = open_checkpoint(str(root)).store_reader(0)
    pf = reader.partitions[1]
    victim = pf.snapshots[max(pf.snapshots)] if damage == "zip" else pf.deltas[5]
    (root / victim.path).write_bytes((root / victim.path).read_bytes()[:30])
    with pytest.raises(StatelensError) as info:
        open_checkpoint(str(root)).store_reader(0).version_arrays(1)
    assert info.value.path == victim.path
    fast, fast_walked = _growth(root, monkeypatch, walk=False)
    slow, _ = _growth(root, monkeypatch, walk=True)
    assert fast_walked == [(1, "default")]
    assert fast.stores == slow.stores
    assert [p.path for p in fast.problems] == [p.path for p in slow.problems] and victim.path in [
        p.path for p in fast.problems
    ]


@pytest.mark.spark
@pytest.mark.parametrize("scenario", ["rocks_agg_changelog", "rocks_dedup_changelog"])
def test_rocksdb_version_arrays_match_spark(scenario: str, checkpoint: Any, spark: Any) -> None:
    """Rows per partition at every committed version, counted from the arrays, are the rows Spark's
    ``statestore`` reader returns for that batch; the live records at the last version, decoded, are
    its rows."""
    from tests import oracle
    from tests.test_native_vs_spark import _canon_rows, _compare

    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    reader = ckpt.store_reader(0)
    counted: dict[int, dict[int, int]] = {}
    last: list[tuple[int, Any, Any]] = []
    latest = max(ckpt.commits) + 1
    for pid in reader.partition_ids():
        arrays = reader.version_arrays(pid)
        assert arrays is not None
        versions, rows, _, (buf, ks, kl, vs, vl) = arrays
        for v, n in zip(versions, rows, strict=True):
            counted.setdefault(v, {})[pid] = int(n)
        assert versions[-1] == latest
        pairs = [(buf[a : a + b], buf[c : c + d]) for a, b, c, d in zip(ks, kl, vs, vl, strict=True)]
        last.extend((pid, k, v) for k, v in reader.decode_pairs(pairs, f"partition {pid}"))
    compared = 0
    for v, per in counted.items():
        if v - 1 not in ckpt.commits:
            continue
        spark_rows = oracle.read_state(spark, root, batch_id=v - 1)
        by_partition: dict[int, int] = {}
        for p, _, _ in spark_rows:
            by_partition[p] = by_partition.get(p, 0) + 1
        assert {p: n for p, n in per.items() if n} == by_partition, (scenario, v)
        if v == latest:
            _compare(_canon_rows(last), _canon_rows(spark_rows), f"{scenario} v{v}")
        compared += 1
    assert compared >= 5

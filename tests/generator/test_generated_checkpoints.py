"""Checks of the test-checkpoint generator (``tests/spark_checkpoints.py``) and the bundled sample.

These never call statelens: they pin down what the product's tests rely on, that each scenario's
checkpoint really has the operators, codec, snapshots and end state it was designed to have, as Spark
itself reads them. They are marked ``generator`` and counted apart from the product's tests (the run's
summary gives both counts). Facts ``expected.json`` copies from the same folder listings and logs these
tests could read (batch ids, committed batches, zip and snapshot file lists, the codec's magic) are
not compared with those listings here: that would compare a list with itself. statelens is checked
against them in ``tests/test_checkpoint_facts.py``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests import oracle
from tests.spark_checkpoints import CODEC_MAGIC, REPO, SCENARIOS

pytestmark = pytest.mark.spark

ALL = sorted(SCENARIOS)
STATE_FILE = re.compile(r"^\d+\.(delta|snapshot)$")
# RocksDB changelogs (codec-framed like deltas) and zips; ``_<uuid>`` with checkpoint format v2.
ROCKS_FILE = re.compile(r"^\d+(_[0-9a-f-]{36})?\.(changelog|zip)$")
SAMPLE = REPO / "resources" / "sample_checkpoint"


def _expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text())


def _ids(d: Path) -> list[int]:
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def _state_files(cp: Path) -> list[Path]:
    return sorted(p for p in (cp / "state").rglob("*") if p.is_file() and STATE_FILE.match(p.name))


def _rocks_files(cp: Path, suffix: str) -> list[Path]:
    return sorted(p for p in (cp / "state").rglob(f"*{suffix}") if p.is_file() and ROCKS_FILE.match(p.name))


@pytest.fixture
def format_v2_session(spark):
    """Checkpoint format v2 is not in offsets conf: the reading session must set it (docs/format.md §10.4)."""
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"

    def use(exp: dict[str, Any]) -> None:
        if exp.get("checkpoint_format_version") == 2:
            spark.conf.set(key, "2")

    yield use
    spark.conf.unset(key)


@pytest.mark.parametrize("name", ALL)
def test_folder_layout_and_logs(checkpoint, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    cp = folder / "checkpoint"
    assert exp["scenario"] == name
    assert (cp / "metadata").is_file()
    assert set(p.name for p in cp.iterdir() if not p.name.startswith(".")) <= {
        "metadata",
        "offsets",
        "commits",
        "sources",
        "state",
    }
    assert (cp / ".metadata.crc").is_file(), "Hadoop's hidden checksum sidecars are part of a real checkpoint"
    assert len(exp["batches"]) >= 2
    first = (cp / "offsets" / str(exp["batches"][0])).read_text().split("\n")
    assert first[0] == "v1"
    for op in exp["operators"]:
        parts = sorted(
            int(p.name) for p in (cp / "state" / str(op["operator_id"])).iterdir() if p.name.isdigit()
        )
        # A global limit runs in one task: only partition 0 exists, whatever num_partitions says.
        assert parts == exp.get("state_partitions", list(range(exp["num_partitions"])))


@pytest.mark.parametrize("name", ALL)
def test_every_batch_but_the_failed_one_committed(checkpoint, name):
    exp = _expected(checkpoint(name))
    if name == "uncommitted":
        assert exp["committed_batches"] == [b for b in exp["batches"] if b != exp["uncommitted_batch"]]
        assert exp["uncommitted_batch"] == max(exp["batches"])
    else:
        assert exp["committed_batches"] == exp["batches"]


@pytest.mark.parametrize("name", ALL)
def test_operators_in_state_metadata(spark, checkpoint, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    rows = oracle.read_state_metadata(spark, folder / "checkpoint")
    got = sorted((r["operatorId"], r["operatorName"], r["stateStoreName"], r["numPartitions"]) for r in rows)
    # Join state formats 3/4 keep their logical stores as column families of one physical store.
    physical = ["default"] if exp.get("join_state_format_version", 0) >= 3 else None
    want = sorted(
        (op["operator_id"], op["operator_name"], store, exp["num_partitions"])
        for op in exp["operators"]
        for store in physical or op["store_names"]
    )
    assert got == want
    committed = exp["committed_batches"]
    assert all(r["maxBatchId"] == max(committed) for r in rows)


@pytest.mark.parametrize("name", ALL)
def test_statestore_reader_returns_rows(spark, checkpoint, format_v2_session, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    cp = folder / "checkpoint"
    format_v2_session(exp)
    for op in exp["operators"]:
        if op["expected_kind"] == "transformWithState":
            for var in exp["state_variables"]:  # TWS state is read one state variable at a time
                reader = spark.read.format("statestore").option("operatorId", str(op["operator_id"]))
                assert reader.option("stateVarName", var).load(str(cp)).count(), var
        elif op["expected_kind"] == "join":
            for side in ("left", "right"):
                rows = oracle.read_state(spark, cp, op["operator_id"], join_side=side)
                assert rows, side
            for store in op["store_names"]:
                assert oracle.read_state(spark, cp, op["operator_id"], store_name=store), store
        else:
            rows = oracle.read_state(spark, cp, op["operator_id"])
            assert rows
            assert {p for p, _, _ in rows} <= set(range(exp["num_partitions"]))


@pytest.mark.parametrize("name", ALL)
def test_state_files_use_the_codec(checkpoint, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    files = _state_files(folder / "checkpoint") + _rocks_files(folder / "checkpoint", ".changelog")
    if exp["provider"] == "RocksDBStateStoreProvider":
        zips = _rocks_files(folder / "checkpoint", ".zip")
        assert zips and all(z.read_bytes()[:2] == b"PK" for z in zips)
        assert not _state_files(folder / "checkpoint"), "no HDFS files in a RocksDB store"
    else:
        assert files
    magic = CODEC_MAGIC[exp["codec"]]
    for f in files:
        assert f.read_bytes()[: len(magic)] == magic, f
    if name.startswith("codec_"):
        assert exp["codec"] == name.removeprefix("codec_")  # the scenario set the codec it is named after


def test_snapshot_scenario_has_snapshots(checkpoint):
    folder = checkpoint("agg_many_partitions")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    snaps = [p for p in _state_files(cp) if p.suffix == ".snapshot"]
    assert snaps, "maintenance wrote no .snapshot file"
    assert exp["num_partitions"] == 4
    for p in range(exp["num_partitions"]):
        assert list((cp / "state" / "0" / str(p)).glob("*.snapshot")), f"partition {p} has no snapshot"
    assert len(exp["batches"]) >= 6


@pytest.mark.parametrize(
    "name", ["agg_count", "agg_many_partitions", "codec_zstd", "codec_snappy", "codec_lzf"]
)
def test_aggregation_end_state(spark, checkpoint, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    rows = oracle.read_state(spark, folder / "checkpoint")
    assert {k[0]: list(v) for _, k, v in rows} == exp["final_state"]


def test_uncommitted_batch(spark, checkpoint):
    folder = checkpoint("uncommitted")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    b = exp["uncommitted_batch"]
    assert (cp / "offsets" / str(b)).is_file()
    assert not (cp / "commits" / str(b)).exists()
    # The failed batch did write its state version (b + 1) before the sink raised.
    for p in range(exp["num_partitions"]):
        assert (cp / "state" / "0" / str(p) / f"{b + 1}.delta").is_file()
    # Spark reads the last *committed* batch by default.
    rows = oracle.read_state(spark, cp)
    assert {k[0]: list(v) for _, k, v in rows} == exp["final_state"]
    assert exp["final_state"] != exp["final_state_including_uncommitted"]


@pytest.mark.parametrize("name", ["pandas_state_processing", "pandas_state_event"])
def test_pandas_leak_state(spark, checkpoint, name):
    folder = checkpoint(name)
    exp = _expected(folder)
    rows = oracle.read_state(spark, folder / "checkpoint")
    state = {k[0]: v for _, k, v in rows}
    assert sorted(state) == exp["final_keys"]
    assert exp["leaked"], "the scenario must leak at least one key"
    assert exp["removed"], "the scenario must remove at least one key on timeout"
    last = str(max(exp["committed_batches"]))
    now = exp["batch_watermark_ms"][last] if "event" in name else exp["batch_timestamp_ms"][last]
    for key, want in exp["expected_state"].items():
        (cnt, _total, _last, _info), timeout = state[key]
        assert timeout == want["timeout_ms"], key
        assert cnt == want["cnt"], key
    for key in exp["leaked"]:
        timeout = state[key][1]
        assert 0 < timeout < now, f"{key} should hold an expired timeout"
    assert any(v[1] == -1 for v in state.values()), "some key updated without a timeout (-1)"


def test_rich_types_round_trip(spark, checkpoint):
    from statelens.readers.model import CalendarInterval

    folder = checkpoint("rich_types")
    exp = _expected(folder)
    rows = oracle.read_state(spark, folder / "checkpoint")
    assert len(rows) == exp["groups"]
    keys = [k for _, k, _ in rows]
    assert len(keys[0]) == len(exp["key_columns"])
    # every key column is null in some group and non-null in another
    for i, (col, _typ) in enumerate(exp["key_columns"]):
        values = [k[i] for k in keys]
        assert None in values, col
        assert any(v is not None for v in values), col
    flat = [x for _, k, v in rows for x in _walk((k, v))]
    assert any(isinstance(x, float) and math.isnan(x) for x in flat)
    assert float("inf") in flat
    assert float("-inf") in flat
    assert any(isinstance(x, CalendarInterval) for x in flat)
    assert any(isinstance(x, bytes) for x in flat)
    assert "héllo ✓ 😀 世界" in flat
    assert 1704164645123456 in flat  # TIMESTAMP / TIMESTAMP_NTZ '2024-01-02 03:04:05.123456' as µs
    assert -1 in flat  # TIMESTAMP '1969-12-31 23:59:59.999999'
    assert -25567 in flat  # DATE '1900-01-01' as days


def _walk(v: Any):
    if isinstance(v, (tuple, list)) and not isinstance(v, str):
        if isinstance(v, tuple) and type(v).__name__ == "CalendarInterval":
            yield v
            return
        for x in v:
            yield from _walk(x)
    else:
        yield v


@pytest.mark.parametrize(
    "name",
    [
        "window_agg_watermark",
        "dedup_watermark",
        "session_window",
        "dedup_within_watermark",
        "agg_state_format_v1",
    ],
)
def test_watermark_evictions_in_change_feed(spark, checkpoint, name):
    folder = checkpoint(name)
    changes = oracle.read_change_feed(spark, folder / "checkpoint", 0)
    kinds = {c[1] for c in changes}
    assert kinds == {"update", "delete"}
    assert all(c[4] is None for c in changes if c[1] == "delete")


def test_session_window_state(spark, checkpoint):
    folder = checkpoint("session_window")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    meta = oracle.read_state_metadata(spark, cp)
    assert [m["_numColsPrefixKey"] for m in meta] == [exp["num_cols_prefix_key"]]
    # key = (user, sessionStartTime); value = (session_window(start, end), user, count, sum)
    seen_two_sessions = False
    for b in exp["committed_batches"]:
        rows = oracle.read_state(spark, cp, batch_id=b)
        for _, (user, start), ((w_start, _w_end), v_user, cnt, _sum) in rows:
            assert (v_user, w_start) == (user, start)
            assert cnt >= 1
        users = [k[0] for _, k, _ in rows]
        seen_two_sessions |= len(users) != len(set(users))
    assert seen_two_sessions, "some user should hold two sessions at once"
    # Append mode: a session is emitted exactly when it is evicted (deleted) from the state.
    changes = oracle.read_change_feed(spark, cp, 0)
    deletes = sorted([b, k[0], k[1]] for b, kind, _, k, _ in changes if kind == "delete")
    emitted = sorted([b, user, start] for b, user, start, _end, _cnt, _sum in exp["emitted_sessions"])
    assert deletes == emitted
    assert any(cnt >= 3 for *_, cnt, _sum in exp["emitted_sessions"]), "sessions merged across batches"
    # The last committed state holds the sessions never emitted; the no-data batch emitted the rest.
    last = oracle.read_state(spark, cp)
    assert last
    assert not {(k[0], k[1]) for _, k, _ in last} & {(u, s) for _, u, s, *_ in exp["emitted_sessions"]}


def test_dedup_within_watermark_state(spark, checkpoint):
    folder = checkpoint("dedup_within_watermark")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    delay_us = exp["watermark_delay_ms"] * 1000
    for b in exp["committed_batches"]:
        rows = oracle.read_state(spark, cp, batch_id=b)
        # value = expiresAtMicros = event time of the last kept row of the id (up to batch b) + delay
        kept = {}
        for eb, ident, ts_ms in exp["emitted"]:
            if eb <= b:
                kept[ident] = ts_ms * 1000 + delay_us
        for _, (ident,), (expires,) in rows:
            assert expires == kept[ident], (b, ident)
    ids = [e[1] for e in exp["emitted"]]
    assert len(ids) != len(set(ids)), "some id is kept again after its state was evicted"
    all_rows = sum(len(r) for r in exp["input_plan"])
    assert all_rows > len(exp["emitted"]), "some duplicates were dropped"


def test_stream_limit_state(spark, checkpoint):
    folder = checkpoint("stream_limit")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    assert sum(exp["emitted_per_batch"].values()) == exp["limit"] == exp["output_rows"]
    total = 0
    for b in exp["committed_batches"]:
        total += exp["emitted_per_batch"][str(b)]
        assert oracle.read_state(spark, cp, batch_id=b) == [(0, (None,), (total,))]
    # Once the limit is reached Spark writes empty deltas (no put): changes only where rows were emitted.
    changes = oracle.read_change_feed(spark, cp, 0)
    assert sorted({c[0] for c in changes}) == [
        b for b, n in sorted((int(b), n) for b, n in exp["emitted_per_batch"].items()) if n
    ]
    assert all(c[1] == "update" for c in changes)


def test_agg_state_format_v1_value_repeats_the_key(spark, checkpoint):
    folder = checkpoint("agg_state_format_v1")
    exp = _expected(folder)
    cp = folder / "checkpoint"
    conf = json.loads((cp / "offsets" / "0").read_text().split("\n")[1])["conf"]
    assert conf["spark.sql.streaming.aggregation.stateFormatVersion"] == "1"
    n_key = len(exp["key_columns"])
    seen = 0
    for b in exp["committed_batches"]:
        for _, key, value in oracle.read_state(spark, cp, batch_id=b):
            assert len(key) == n_key
            assert len(value) == len(exp["value_columns"])
            assert value[:n_key] == key
            seen += 1
    assert seen
    assert any(k[2] is None for _, k, _ in oracle.read_state(spark, cp, batch_id=0)), "a NULL key column"


def test_join_evicts(spark, checkpoint):
    folder = checkpoint("join")
    changes = oracle.read_change_feed(spark, folder / "checkpoint", 0, store_name="left-keyToNumValues")
    assert any(c[1] == "delete" for c in changes)


def test_cached_second_call_is_the_same_folder(checkpoint):
    from tests.spark_checkpoints import get_checkpoint

    assert get_checkpoint("agg_count") == checkpoint("agg_count")
    assert not list(checkpoint("agg_count").parent.glob("agg_count.tmp-*"))


def test_bundled_sample(spark):
    assert (SAMPLE / "metadata").is_file(), (
        "run: python -m tests.spark_checkpoints --sample resources/sample_checkpoint"
    )
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 300_000
    assert list(SAMPLE.rglob(".*.crc")), "the sample keeps Hadoop's hidden .crc files"
    meta = oracle.read_state_metadata(spark, SAMPLE)
    assert [(m["operatorName"], m["numPartitions"]) for m in meta] == [("applyInPandasWithState", 2)]
    rows = oracle.read_state(spark, SAMPLE)
    state = {k[0]: v for _, k, v in rows}
    commits = _ids(SAMPLE / "commits")
    offsets_last = json.loads((SAMPLE / "offsets" / str(commits[-1])).read_text().split("\n")[1])
    watermark = offsets_last["batchWatermarkMs"]
    leaked = sorted(k for k, v in state.items() if 0 < v[1] < watermark)
    assert leaked == ["leak1", "leak2", "leak3", "leak4"]

"""Real Spark Structured Streaming checkpoints for the tests, written by real PySpark and cached on disk.

Every scenario runs a small streaming query over deterministic file-source input and leaves a folder::

    <cache>/<name>/
        checkpoint/     exactly what Spark wrote (offsets, commits, state, ... incl. hidden .crc files)
        input/          the input files the query read (outside the checkpoint)
        output.json     what the query emitted, one JSON object per row, tagged with its batch id
        expected.json   facts the generator knows (batches, committed batches, operators, codec, ...)

The cache lives in ``$STATELENS_TEST_CACHE/<key>/`` or ``<repo>/.cache/checkpoints/<key>/`` where
``<key>`` = ``<pyspark version>-<sha1 of this file[:12]>``: editing this file invalidates the cache.
A scenario is generated into ``<name>.tmp-<pid>`` and renamed into place only when complete.

CLI::

    python -m tests.spark_checkpoints [--all | NAME ...] [--out DIR] [--force]
    python -m tests.spark_checkpoints --sample resources/sample_checkpoint

This module is imported by the tests (``tests/conftest.py``); it is not a test module itself.

``expected.json`` (every scenario)::

    scenario, spark_version, generation_seconds
    batches             ids in offsets/            committed_batches   ids in commits/
    num_partitions      shuffle partitions pinned in offsets/0 conf
    codec, provider     state store codec (lz4 when absent) and provider class short name
    operators           [{operator_id, expected_kind (readers.model.OperatorKind value),
                          operator_name (as in state-metadata), store_names}]
    batch_watermark_ms / batch_timestamp_ms   {batch: ms} from offsets/
    next_watermark_ms   {batch: ms} from commits/
    snapshot_files      relative paths of every N.snapshot      delta_files   number of N.delta
    output_rows         rows in output.json (each row has "_batch" = the batch that emitted it)

plus per scenario: ``final_state`` {key: [count]} for the count aggregations; ``uncommitted_batch``;
``codec_magic`` (hex); ``min_deltas_for_snapshot``; ``key_schema`` / ``key_columns``; and for the two
applyInPandasWithState scenarios ``calls`` (every call of the state function: batch, key, timed_out,
action in update|ignore|remove|update_no_timeout|rearm, batch_ts_ms, watermark_ms, new_timeout_ms),
``key_history``, ``final_keys``, ``expected_state`` {key: {cnt, timeout_ms}} (-1 = no timeout),
``leaked`` (keys left in state with an expired timeout) and ``removed`` — all derived from what the
function reported, i.e. what really happened, not from wall-clock assumptions. ``session_window``:
``emitted_sessions`` ([batch, user, start_us, end_us, cnt, sum_v] of every session the append-mode query
emitted, i.e. evicted). ``dedup_within_watermark``: ``emitted`` ([batch, id, ts_ms] of every row kept).
``stream_limit``: ``limit``, ``emitted_per_batch`` {batch: rows}, ``state_partitions`` (the only
partition folder Spark writes for a global limit, whatever ``num_partitions`` says).
``agg_state_format_v1``: ``state_format_version``, ``key_columns`` and ``value_columns`` (v1: the key
columns again, then the buffers).
``rocks_*`` (RocksDB provider): ``rocksdb_conf`` (the confs set for the query), ``zip_files`` and
``changelog_files`` (relative paths, unique-id names with checkpoint format v2), and
``checkpoint_format_version`` (2) for ``rocks_ckpt_v2`` / ``rocks_join``; ``rocks_tws``:
``state_variables`` and ``spark_path`` (the sibling folder the query ran in, which Spark's reader needs).
``rocks_join_v3`` / ``rocks_join_v4``: the join with join state format 3 / 4 (one RocksDB store, the logical
stores as column families), ``join_state_format_version`` and ``spark_path``. ``checksum_window`` /
``rocks_checksum_window``: the windowed aggregation with row checksums (``row_checksum``). ``rocks_tws_timers``:
transformWithStateInPandas in processing time with TTL'd value/list/map state and timers, ``ttl_ms``; its
output rows are what the function saw and did (``event`` input/timer, ``timer_ms`` registered or fired).
``rocks_tws_avro``: ``rocks_tws`` with ``stateStore.encodingFormat=avro`` (``encoding_format``);
``rocks_tws_checksum``: ``rocks_tws`` with row checksums (``row_checksum``); ``rocks_tws_timers_avro``:
``rocks_tws_timers`` Avro-encoded (``encoding_format``). ``rocks_tws_event_time``: event-time timers
(watermark 2 s, ``watermark_delay_ms``), the handler leaks key ``b``; output rows carry the watermark seen.
``rocks_pandas_state`` / ``rocks_pandas_state_processing``: the applyInPandasWithState scenarios on RocksDB
with changelogs. Their other facts are those of the HDFS scenario they repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_SOURCE_HASH = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:12]

#: Scenario used for ``--sample`` (the bundled ``resources/sample_checkpoint``).
SAMPLE_SCENARIO = "pandas_state_event"

#: 2024-01-01T00:00:00Z in ms: event times of every scenario are offsets from here.
BASE_MS = 1_704_067_200_000
#: Modification time (epoch s) of the first input file; later files get +10 s each, so the file
#: source (which orders new files by modification time) reads them in a deterministic order.
_BASE_MTIME = 1_704_067_200

# Session-wide settings (static ones must be known when the JVM starts).
SESSION_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "statelens-tests",
    "spark.driver.memory": "1g",
    # Short-lived JVM doing little work: the C1 compiler alone and the serial GC halve its CPU time
    # (measured: 48 s -> 23 s of JVM CPU for five scenarios on 2 busy cores).
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
    "spark.default.parallelism": "2",
    # Short maintenance interval so background maintenance writes .snapshot files during a run.
    "spark.sql.streaming.stateStore.maintenanceInterval": "200ms",
    # NOT set: spark.sql.streaming.stateStore.coordinatorReportSnapshotUploadLag=false (the 4.1.1 workaround
    # of docs/format.md §10.4). On 4.3.0 reading works without it, and with it every streaming batch fails
    # ("forceSnapshotUploadOnLag can only be true if coordinatorReportSnapshotUploadLag is also true").
}

_SESSION_LOCK = threading.Lock()
_SESSION: Any = None


def spark_session() -> Any:
    """The one SparkSession of this process (created lazily, shared with :mod:`tests.oracle`)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is not None and _SESSION._jsc is not None and not _SESSION._jsc.sc().isStopped():
            return _SESSION
        _ensure_utc()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pyspark.sql import SparkSession

            builder = SparkSession.builder
            for k, v in SESSION_CONF.items():
                builder = builder.config(k, v)
            warehouse = Path(os.environ.get("TMPDIR", "/tmp")) / f"statelens-spark-warehouse-{os.getpid()}"
            builder = builder.config("spark.sql.warehouse.dir", str(warehouse))
            spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _SESSION = spark
        return spark


def _ensure_utc() -> None:
    """Python and the JVM both in UTC, so no wall-clock conversion can shift a timestamp."""
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        if hasattr(time, "tzset"):
            time.tzset()


# --------------------------------------------------------------------------------------------------
# Cache


def cache_key() -> str:
    import pyspark

    return f"{pyspark.__version__}-{_SOURCE_HASH}"


def cache_root() -> Path:
    base = os.environ.get("STATELENS_TEST_CACHE")
    root = Path(base) if base else REPO / ".cache" / "checkpoints"
    return root / cache_key()


def get_checkpoint(name: str, spark: Any = None, *, out: Path | None = None, force: bool = False) -> Path:
    """Path of the scenario folder ``<cache>/<name>/`` (generated on first use, then cached)."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    root = out if out is not None else cache_root()
    final = root / name
    if (final / "expected.json").is_file() and not force:
        return final
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(root, name)
    if spark is None:
        spark = spark_session()
    tmp = root / f"{name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for key in _READER_CONFS:  # a reader may have left one on the shared session
        spark.conf.unset(key)
    try:
        t0 = time.monotonic()
        ctx = Ctx(name=name, spark=spark, dir=tmp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            facts = SCENARIOS[name](ctx)
        expected = _describe(ctx, facts)
        expected["generation_seconds"] = round(time.monotonic() - t0, 2)
        (tmp / "output.json").write_text(
            json.dumps(ctx.output, indent=1, sort_keys=True, allow_nan=True, default=str) + "\n"
        )
        (tmp / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if force and final.exists():
        shutil.rmtree(final)
    try:
        os.rename(tmp, final)
    except OSError:
        # Another process finished the same scenario first: keep theirs.
        shutil.rmtree(tmp, ignore_errors=True)
        if not (final / "expected.json").is_file():
            raise
    return final


def _remove_stale_tmp(root: Path, name: str) -> None:
    for p in root.glob(f"{name}.tmp-*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid == os.getpid() or not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------------------------------
# Scenario context and helpers


@dataclass
class Ctx:
    name: str
    spark: Any
    dir: Path
    output: list[dict[str, Any]] = field(default_factory=list)
    _files: int = 0

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint"

    def input_dir(self, source: str = "in") -> Path:
        p = self.dir / "input" / source
        p.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, source: str, rows: list[dict[str, Any]]) -> Path:
        """One JSON-lines input file in ``input/<source>/`` with a strictly increasing mtime."""
        d = self.input_dir(source)
        idx = len(list(d.glob("*.json")))
        path = d / f"part-{idx:03d}.json"
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        mtime = _BASE_MTIME + 10 * self._files
        self._files += 1
        os.utime(path, (mtime, mtime))
        return path

    def read_json_stream(self, source: str, schema: str, max_files: int | None = 1) -> Any:
        reader = self.spark.readStream.format("json").schema(schema)
        if max_files:
            reader = reader.option("maxFilesPerTrigger", str(max_files))
        return reader.load(str(self.input_dir(source)))

    def run(
        self,
        df: Any,
        *,
        mode: str,
        trigger: str = "availableNow",
        batch_hook: Callable[[Any, int, list[dict[str, Any]]], None] | None = None,
        expect_failure: bool = False,
    ) -> None:
        """Run ``df`` to completion once (``availableNow`` or ``once``), collecting what it emits."""
        from pyspark.errors import StreamingQueryException
        from pyspark.sql import functions as F

        outputs = self.output
        json_opts = {
            "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
            "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
            "ignoreNullFields": "false",
        }

        def sink(batch_df: Any, batch_id: int) -> None:
            rows = [json.loads(r[0]) for r in batch_df.select(F.to_json(F.struct("*"), json_opts)).collect()]
            rows.sort(key=lambda r: json.dumps(r, sort_keys=True))
            for r in rows:
                r["_batch"] = batch_id
            outputs.extend(rows)
            if batch_hook is not None:
                batch_hook(batch_df, batch_id, rows)

        writer = (
            df.writeStream.outputMode(mode)
            .option("checkpointLocation", str(self.checkpoint))
            .foreachBatch(sink)
        )
        writer = writer.trigger(availableNow=True) if trigger == "availableNow" else writer.trigger(once=True)
        q = writer.start()
        try:
            q.awaitTermination()
        except StreamingQueryException:
            if not expect_failure:
                raise
            return
        finally:
            if q.isActive:
                q.stop()
        if expect_failure:
            raise AssertionError(f"{self.name}: the query was expected to fail but completed")


#: Session confs that reading code sets on the shared session (Spark's state reader needs the first for
#: checkpoint format v2); every scenario starts from Spark's defaults for them, so none leaks into a query.
_READER_CONFS = ("spark.sql.streaming.stateStore.checkpointFormatVersion",)


@contextlib.contextmanager
def session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Set SQL confs for the duration of one scenario, then restore the previous values."""
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _ts(ms_offset: int) -> int:
    return BASE_MS + ms_offset


# --------------------------------------------------------------------------------------------------
# Describing a generated checkpoint (facts read back from what Spark wrote)


def _log_ids(d: Path) -> list[int]:
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def _read_log_json(path: Path) -> dict[str, Any]:
    lines = path.read_text().split("\n")
    return json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}


def _describe(ctx: Ctx, facts: dict[str, Any]) -> dict[str, Any]:
    cp = ctx.checkpoint
    batches = _log_ids(cp / "offsets")
    committed = _log_ids(cp / "commits")
    first = _read_log_json(cp / "offsets" / str(batches[0]))
    conf = first.get("conf", {})
    offsets = {b: _read_log_json(cp / "offsets" / str(b)) for b in batches}
    commits = {b: _read_log_json(cp / "commits" / str(b)) for b in committed}
    state_files: dict[str, list[str]] = {"delta": [], "snapshot": []}
    state_dir = cp / "state"
    if state_dir.is_dir():
        for p in sorted(state_dir.rglob("*")):
            parts = p.name.split(".")
            if p.is_file() and len(parts) == 2 and parts[0].isdigit() and parts[1] in state_files:
                state_files[parts[1]].append(p.relative_to(cp).as_posix())
    expected: dict[str, Any] = {
        "scenario": ctx.name,
        "spark_version": ctx.spark.version,
        "batches": batches,
        "committed_batches": committed,
        "num_partitions": int(conf["spark.sql.shuffle.partitions"]),
        "codec": conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4"),
        "provider": conf.get("spark.sql.streaming.stateStore.providerClass", "").rsplit(".", 1)[-1],
        "batch_watermark_ms": {str(b): o.get("batchWatermarkMs", 0) for b, o in offsets.items()},
        "batch_timestamp_ms": {str(b): o.get("batchTimestampMs") for b, o in offsets.items()},
        "next_watermark_ms": {str(b): c.get("nextBatchWatermarkMs", 0) for b, c in commits.items()},
        "snapshot_files": state_files["snapshot"],
        "delta_files": len(state_files["delta"]),
        "output_rows": len(ctx.output),
    }
    expected.update(facts)
    return expected


def _op(kind: str, name: str, stores: list[str] | None = None, operator_id: int = 0) -> dict[str, Any]:
    return {
        "operator_id": operator_id,
        "expected_kind": kind,
        "operator_name": name,
        "store_names": stores or ["default"],
    }


JOIN_STORES = [
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
]


# --------------------------------------------------------------------------------------------------
# Scenarios

_AGG_BATCHES: list[list[str]] = [
    ["a", "b", "c", "a"],
    ["a", "d"],
    ["e", "b", "b", "f", "g"],
    ["a", "h", "c"],
    ["i", "j", "a"],
    ["k", "b", "l"],
    ["m", "a", "n", "d"],
    ["o", "c", "p"],
]


def _agg_count(
    ctx: Ctx,
    *,
    partitions: int = 2,
    batches: int = 4,
    conf: dict[str, str] | None = None,
    sleep_per_batch: float = 0.0,
    fail_at_batch: int | None = None,
    wait_for_snapshots: bool = False,
) -> dict[str, Any]:
    """groupBy(key).count() in update mode, one input file per batch."""
    data = _AGG_BATCHES[:batches]
    for i, keys in enumerate(data):
        ctx.write_json("in", [{"key": k, "value": i * 100 + j} for j, k in enumerate(keys)])
    all_conf = {"spark.sql.shuffle.partitions": str(partitions), **(conf or {})}

    def hook(_df: Any, batch_id: int, _rows: list[dict[str, Any]]) -> None:
        if sleep_per_batch:
            time.sleep(sleep_per_batch)
        if wait_for_snapshots and batch_id >= 2:
            # Versions 1..batch_id+1 are on disk, more than minDeltasForSnapshot deltas: give the
            # background maintenance (every 200 ms) time to snapshot every partition once, so a busy
            # machine cannot end up with a snapshot-less "snapshot scenario".
            _wait_for_snapshots(ctx.checkpoint / "state" / "0", partitions, timeout_s=20.0)
        if fail_at_batch is not None and batch_id == fail_at_batch:
            raise RuntimeError(f"statelens test: deliberate failure in batch {batch_id}")

    with session_conf(ctx.spark, all_conf):
        df = ctx.read_json_stream("in", "key STRING, value LONG").groupBy("key").count()
        ctx.run(df, mode="update", batch_hook=hook, expect_failure=fail_at_batch is not None)

    upto = len(data) if fail_at_batch is None else fail_at_batch + 1
    counts: dict[str, int] = {}
    committed_counts: dict[str, int] = {}
    for i, keys in enumerate(data[:upto]):
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
            if fail_at_batch is None or i < fail_at_batch:
                committed_counts[k] = committed_counts.get(k, 0) + 1
    return {
        "operators": [_op("aggregation", "stateStoreSave")],
        "key_schema": "key STRING",
        "final_state": {k: [v] for k, v in sorted(committed_counts.items())},
        "final_state_including_uncommitted": {k: [v] for k, v in sorted(counts.items())},
    }


def _wait_for_snapshots(op_dir: Path, partitions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(any((op_dir / str(p)).glob("*.snapshot")) for p in range(partitions)):
            return
        time.sleep(0.1)


def scenario_agg_count(ctx: Ctx) -> dict[str, Any]:
    return _agg_count(ctx, partitions=2, batches=4)


def _codec_scenario(codec: str) -> Callable[[Ctx], dict[str, Any]]:
    def run(ctx: Ctx) -> dict[str, Any]:
        facts = _agg_count(
            ctx, partitions=2, batches=4, conf={"spark.sql.streaming.stateStore.compression.codec": codec}
        )
        facts["codec_magic"] = CODEC_MAGIC[codec].hex()
        return facts

    run.__name__ = f"scenario_codec_{codec}"
    return run


#: First bytes of a state file per codec (docs/format.md §3.2).
CODEC_MAGIC = {
    "lz4": b"LZ4Block",
    "zstd": bytes.fromhex("28b52ffd"),
    "snappy": bytes.fromhex("82534e4150505900"),
    "lzf": b"ZV",
}


def scenario_agg_many_partitions(ctx: Ctx) -> dict[str, Any]:
    facts = _agg_count(
        ctx,
        partitions=4,
        batches=8,
        conf={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"},
        sleep_per_batch=0.3,
        wait_for_snapshots=True,
    )
    facts["min_deltas_for_snapshot"] = 2
    return facts


def scenario_uncommitted(ctx: Ctx) -> dict[str, Any]:
    facts = _agg_count(ctx, partitions=2, batches=3, fail_at_batch=2)
    facts["uncommitted_batch"] = 2
    facts["failure"] = "foreachBatch raised in batch 2 after the stateful plan ran (state written, no commit)"
    return facts


def scenario_window_agg_watermark(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    plan = [
        [("a", 1_000, 1.0), ("b", 2_000, 2.0), ("a", 5_000, 3.5), ("c", 12_000, 4.0)],
        [("a", 15_000, 5.0), ("b", 18_000, 6.0), ("c", 25_000, 7.25)],
        # a@3 s is behind the batch's watermark (15 s), but its window [0, 10) is still in state (eviction
        # happens at the end of the batch), so Spark still folds it in before emitting the window.
        [("a", 35_000, 8.0), ("b", 41_000, 9.0), ("a", 3_000, 100.0)],
        [("c", 60_000, 10.0), ("a", 62_000, 11.0)],
        [("b", 90_000, 12.0)],
    ]
    for rows in plan:
        ctx.write_json("in", [{"key": k, "ts_ms": _ts(t), "v": v} for k, t, v in rows])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "3"}):
        src = ctx.read_json_stream("in", "key STRING, ts_ms LONG, v DOUBLE")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "10 seconds"), "key")
            .agg(
                F.count("*").alias("cnt"),
                F.sum("v").alias("sum_v"),
                F.avg("v").alias("avg_v"),
                F.max("v").alias("max_v"),
            )
        )
        ctx.run(df, mode="append")
    return {
        "operators": [_op("aggregation", "stateStoreSave")],
        "key_schema": "window STRUCT<start TIMESTAMP, end TIMESTAMP>, key STRING",
        "watermark_delay_ms": 10_000,
        "window_ms": 10_000,
        "input_event_times_ms": sorted({_ts(t) for rows in plan for _, t, _ in rows}),
    }


def scenario_dedup_watermark(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    plan = [
        [("a", 0), ("b", 1_000), ("a", 0), ("c", 2_000)],
        [("a", 0), ("d", 10_000), ("e", 11_000)],
        [("f", 20_000), ("d", 10_000), ("g", 21_000)],
        [("h", 40_000), ("i", 41_000)],
        [("j", 60_000)],
    ]
    for i, rows in enumerate(plan):
        ctx.write_json("in", [{"id": k, "ts_ms": _ts(t), "payload": f"p{i}-{k}"} for k, t in rows])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        src = ctx.read_json_stream("in", "id STRING, ts_ms LONG, payload STRING")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "5 seconds")
            .dropDuplicates(["id", "ts"])
        )
        ctx.run(df, mode="append")
    return {
        "operators": [_op("deduplication", "dedupe")],
        "key_schema": "id STRING, ts TIMESTAMP",
        "watermark_delay_ms": 5_000,
        "distinct_keys": sorted({(k, _ts(t)) for rows in plan for k, t in rows}),
    }


def scenario_join(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    left_plan = [
        [(1, 0, "l1"), (2, 1_000, "l2"), (3, 2_000, "l3")],
        [(4, 20_000, "l4"), (1, 21_000, "l1b")],
        [(5, 40_000, "l5")],
        [(6, 60_000, "l6")],
        [(7, 90_000, "l7")],
    ]
    right_plan = [
        [(1, 1_000, "r1")],
        [(2, 3_000, "r2"), (4, 22_000, "r4")],
        [(5, 41_000, "r5"), (9, 42_000, "r9")],
        [(6, 62_000, "r6")],
        [(8, 91_000, "r8")],
    ]
    for lrows, rrows in zip(left_plan, right_plan, strict=True):
        ctx.write_json("left", [{"lkey": k, "lts_ms": _ts(t), "lval": v} for k, t, v in lrows])
        ctx.write_json("right", [{"rkey": k, "rts_ms": _ts(t), "rval": v} for k, t, v in rrows])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        left = (
            ctx.read_json_stream("left", "lkey INT, lts_ms LONG, lval STRING")
            .withColumn("lts", F.expr("timestamp_millis(lts_ms)"))
            .withWatermark("lts", "10 seconds")
        )
        right = (
            ctx.read_json_stream("right", "rkey INT, rts_ms LONG, rval STRING")
            .withColumn("rts", F.expr("timestamp_millis(rts_ms)"))
            .withWatermark("rts", "10 seconds")
        )
        df = left.join(
            right,
            F.expr("lkey = rkey AND rts >= lts AND rts <= lts + INTERVAL 5 SECONDS"),
            "leftOuter",
        )
        ctx.run(df, mode="append")
    return {
        "operators": [_op("join", "symmetricHashJoin", JOIN_STORES)],
        "join_type": "leftOuter",
        "watermark_delay_ms": 10_000,
        "left_columns": ["lkey", "lts_ms", "lval", "lts"],
        "right_columns": ["rkey", "rts_ms", "rval", "rts"],
    }


# session window, dedup within watermark, streaming limit, aggregation state format v1 ----------------


def _iso_us(text: str) -> int:
    """``2024-01-01T00:00:01.000000Z`` (the sink's timestamp format) -> µs since the epoch."""
    from datetime import datetime, timedelta, timezone

    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (datetime.fromisoformat(text) - epoch) // timedelta(microseconds=1)


def scenario_session_window(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # Gap 10 s, watermark delay 10 s, append mode: a session is emitted (and deleted from state) in the
    # batch whose watermark passes its end. u1 and u3 grow across three batches (merged sessions), u2
    # holds two sessions at once, u4/u5 survive several batches, u6 is only evicted by the final no-data
    # batch. u1@5 s in batch 2 is 25 s behind that batch's watermark, yet its session [0, 22 s) is still in
    # state (eviction runs at the end of the batch), so Spark folds it in (cnt 4, sum 107).
    plan = [
        [("u1", 0, 1.0), ("u1", 5_000, 2.0), ("u2", 1_000, 3.0), ("u3", 20_000, 4.0)],
        [("u1", 12_000, 5.0), ("u2", 14_000, 6.0), ("u3", 25_000, 7.0), ("u4", 40_000, 8.0)],
        [("u3", 33_000, 9.0), ("u4", 45_000, 10.0), ("u5", 60_000, 11.0), ("u1", 5_000, 99.0)],
        [("u4", 52_000, 12.0), ("u5", 65_000, 13.0)],
        [("u6", 100_000, 14.0)],
    ]
    for rows in plan:
        ctx.write_json("in", [{"user": u, "ts_ms": _ts(t), "v": v} for u, t, v in rows])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        src = ctx.read_json_stream("in", "user STRING, ts_ms LONG, v DOUBLE")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "10 seconds")
            .groupBy(F.session_window("ts", "10 seconds"), "user")
            .agg(F.count("*").alias("cnt"), F.sum("v").alias("sum_v"))
        )
        ctx.run(df, mode="append")
    emitted = sorted(
        [
            r["_batch"],
            r["user"],
            _iso_us(r["session_window"]["start"]),
            _iso_us(r["session_window"]["end"]),
            r["cnt"],
            r["sum_v"],
        ]
        for r in ctx.output
    )
    return {
        "operators": [_op("session_window", "sessionWindowStateStoreSaveExec")],
        "key_schema": "user STRING, sessionStartTime TIMESTAMP",
        "value_schema": "session_window STRUCT<start TIMESTAMP, end TIMESTAMP>, user STRING, count BIGINT, sum DOUBLE",
        "num_cols_prefix_key": 1,
        "watermark_delay_ms": 10_000,
        "gap_ms": 10_000,
        "input_plan": [[[u, _ts(t), v] for u, t, v in rows] for rows in plan],
        "emitted_sessions": emitted,
    }


def scenario_dedup_within_watermark(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # Delay 5 s: the state value is expiresAtMicros = event time of the first row kept + 5 s, evicted once
    # the watermark reaches it. a@2 s (batch 0), a@10 s (batch 1) and d@24 s (batch 2) are duplicates of a
    # live id and dropped; a@45 s in batch 3 comes after a's eviction and is kept again (new expiry).
    plan = [
        [("a", 0), ("b", 1_000), ("a", 2_000), ("c", 3_000)],
        [("a", 10_000), ("d", 20_000), ("e", 21_000)],
        [("f", 30_000), ("d", 24_000)],
        [("g", 50_000), ("a", 45_000)],
        [("h", 70_000)],
    ]
    for i, rows in enumerate(plan):
        ctx.write_json("in", [{"id": k, "ts_ms": _ts(t), "payload": f"p{i}-{k}"} for k, t in rows])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        src = ctx.read_json_stream("in", "id STRING, ts_ms LONG, payload STRING")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "5 seconds")
            .dropDuplicatesWithinWatermark(["id"])
        )
        ctx.run(df, mode="append")
    return {
        "operators": [_op("deduplication_within_watermark", "dedupeWithinWatermark")],
        "key_schema": "id STRING",
        "value_schema": "expiresAtMicros BIGINT NOT NULL",
        "watermark_delay_ms": 5_000,
        "input_plan": [[[k, _ts(t)] for k, t in rows] for rows in plan],
        "emitted": sorted([r["_batch"], r["id"], r["ts_ms"]] for r in ctx.output),
    }


def scenario_stream_limit(ctx: Ctx) -> dict[str, Any]:
    # StreamingGlobalLimitExec (append mode): state = rows emitted so far under a void key, in one state
    # partition (0) although the shuffle-partition count (and numPartitions in the operator metadata) is 2.
    limit = 3
    plan = [[1, 2], [3, 4], [5, 6], [7]]
    for i, ids in enumerate(plan):
        ctx.write_json("in", [{"id": n, "tag": f"b{i}"} for n in ids])
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        df = ctx.read_json_stream("in", "id INT, tag STRING").limit(limit)
        ctx.run(df, mode="append")
    per_batch: dict[str, int] = {str(b): 0 for b in _log_ids(ctx.checkpoint / "commits")}
    for r in ctx.output:
        per_batch[str(r["_batch"])] += 1
    return {
        "operators": [_op("limit", "globalLimit")],
        "key_schema": "key VOID",
        "value_schema": "value BIGINT",
        "limit": limit,
        "state_partitions": [0],
        "input_plan": plan,
        "emitted_per_batch": per_batch,
        "final_state": {"null": [limit]},
    }


def scenario_agg_state_format_v1(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # The session conf is read when the query first starts and pinned in offsets/0; with 1 the state
    # value is the whole aggregate input row: the key columns again, then the buffers. Windowed with a
    # watermark in update mode, so windows are also evicted (deletes in the deltas); k2 is NULL for c.
    plan = [
        [("a", 1, 1_000, 1.0), ("b", 2, 2_000, 2.0), ("a", 1, 5_000, 3.5), ("c", None, 12_000, 4.0)],
        [("a", 1, 15_000, 5.0), ("b", 2, 18_000, 6.0), ("c", None, 25_000, 7.25)],
        [("a", 1, 35_000, 8.0), ("b", 3, 41_000, 9.0)],
        [("c", 4, 60_000, 10.0)],
    ]
    for rows in plan:
        ctx.write_json("in", [{"key": k, "k2": k2, "ts_ms": _ts(t), "v": v} for k, k2, t, v in rows])
    conf = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.aggregation.stateFormatVersion": "1"}
    with session_conf(ctx.spark, conf):
        src = ctx.read_json_stream("in", "key STRING, k2 INT, ts_ms LONG, v DOUBLE")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "10 seconds"), "key", "k2")
            .agg(
                F.count("*").alias("cnt"),
                F.sum("v").alias("sum_v"),
                F.avg("v").alias("avg_v"),
                F.max("ts_ms").alias("max_ts"),
            )
        )
        ctx.run(df, mode="update")
    return {
        "operators": [_op("aggregation", "stateStoreSave")],
        "state_format_version": 1,
        "key_schema": "window STRUCT<start TIMESTAMP, end TIMESTAMP>, key STRING, k2 INT",
        "key_columns": ["window", "key", "k2"],
        # count(*) -> count; sum(v) -> sum; avg(v) -> (sum, count); max(ts_ms) -> max
        "value_columns": ["window", "key", "k2", "count", "sum", "sum", "count", "max"],
        "watermark_delay_ms": 10_000,
        "window_ms": 10_000,
    }


# applyInPandasWithState -----------------------------------------------------------------------------

# No ARRAY/MAP in the state: PySpark 4.3.0's worker cannot parse such a state schema
# (KeyError 'elementType' / 'keyType' in StructType.fromJson), so a nested struct it is.
_PANDAS_STATE_SCHEMA = "cnt LONG, total DOUBLE, last STRING, info STRUCT<first_ts_ms: LONG, timeouts: INT>"
_PANDAS_OUTPUT_SCHEMA = (
    "key STRING, batch_ts_ms LONG, watermark_ms LONG, timed_out BOOLEAN, action STRING, "
    "cnt LONG, old_timeout_ms LONG, new_timeout_ms LONG"
)


def _make_pandas_state_func(event_time: bool, timeout_ms: int) -> Callable[..., Any]:
    """The state function; it reports every call as one output row (what it saw and did).

    Keys decide what happens on timeout: ``leak*`` do nothing (state stays: the classic leak),
    ``ok*`` call ``state.remove()``, ``upd*`` call ``state.update`` without a new timeout, anything
    else (``live*``) updates and re-arms the timeout. On new data every key updates its state and arms
    a timeout (processing time: ``setTimeoutDuration``; event time: max event time + timeout).
    """

    def func(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        k = key[0]
        batch_ts = state.getCurrentProcessingTimeMs()
        watermark = state.getCurrentWatermarkMs() if event_time else None
        old_timeout = state.oldTimeoutTimestamp
        new_timeout = None
        if state.hasTimedOut:
            cnt, total, last, (first_ts, timeouts) = state.get
            info = (first_ts, timeouts + 1)
            if k.startswith("leak"):
                action = "ignore"
            elif k.startswith("ok"):
                state.remove()
                action = "remove"
            elif k.startswith("upd"):
                state.update((cnt, total, "timed-out", info))
                action = "update_no_timeout"
            else:
                state.update((cnt, total, "rearmed", info))
                if event_time:
                    new_timeout = watermark + timeout_ms
                    state.setTimeoutTimestamp(new_timeout)
                else:
                    state.setTimeoutDuration(timeout_ms)
                    new_timeout = batch_ts + timeout_ms
                action = "rearm"
            out_cnt = cnt
        else:
            cnt, total, last, info = state.get if state.exists else (0, 0.0, None, None)
            max_ts = None
            for pdf in pdfs:
                cnt += len(pdf)
                total += float(pdf["v"].sum())
                last = str(pdf["tag"].iloc[-1])
                m = int(pdf["ts_ms"].max())
                max_ts = m if max_ts is None else max(max_ts, m)
            if info is None:
                info = (max_ts, 0)
            state.update((cnt, total, last, tuple(info)))
            if event_time:
                new_timeout = max_ts + timeout_ms
                state.setTimeoutTimestamp(new_timeout)
            else:
                state.setTimeoutDuration(timeout_ms)
                new_timeout = batch_ts + timeout_ms
            action = "update"
            out_cnt = cnt
        yield pd.DataFrame(
            {
                "key": [k],
                "batch_ts_ms": [batch_ts],
                "watermark_ms": pd.array([watermark], dtype="Int64"),
                "timed_out": [bool(state.hasTimedOut)],
                "action": [action],
                "cnt": [int(out_cnt)],
                "old_timeout_ms": pd.array([old_timeout], dtype="Int64"),
                "new_timeout_ms": pd.array([new_timeout], dtype="Int64"),
            }
        )

    return func


def _pandas_facts(ctx: Ctx, event_time: bool, timeout_ms: int) -> dict[str, Any]:
    """Per-key history and the expected end state, derived from what the function reported."""
    calls = sorted(
        (
            {
                "batch": r["_batch"],
                "key": r["key"],
                "timed_out": r["timed_out"],
                "action": r["action"],
                "batch_ts_ms": r["batch_ts_ms"],
                "watermark_ms": r["watermark_ms"],
                "old_timeout_ms": r["old_timeout_ms"],
                "new_timeout_ms": r["new_timeout_ms"],
            }
            for r in ctx.output
        ),
        key=lambda c: (c["batch"], c["key"]),
    )
    committed = set(_log_ids(ctx.checkpoint / "commits"))
    calls = [c for c in calls if c["batch"] in committed]
    history: dict[str, list[dict[str, Any]]] = {}
    for c in calls:
        history.setdefault(c["key"], []).append(
            {"batch": c["batch"], "action": c["action"], "timed_out": c["timed_out"]}
        )
    # What the store should hold at the end, replaying the calls with the semantics observed on 4.3.0:
    # a call that sets a timeout stores it; state.update() without setting one stores -1 (no timeout);
    # a timed-out call that does nothing writes nothing, so the expired timeout stays (the leak).
    expected_state: dict[str, dict[str, Any]] = {}
    for c in calls:
        k = c["key"]
        if c["action"] == "remove":
            expected_state.pop(k, None)
        elif c["action"] in ("update", "rearm"):
            expected_state[k] = {"cnt": None, "timeout_ms": c["new_timeout_ms"]}
        elif c["action"] == "update_no_timeout":
            expected_state[k] = {"cnt": None, "timeout_ms": -1}
    for r in ctx.output:
        if r["_batch"] in committed and r["key"] in expected_state and r["action"] != "remove":
            expected_state[r["key"]]["cnt"] = max(expected_state[r["key"]]["cnt"] or 0, r["cnt"])
    final_keys = sorted(k for k, h in history.items() if h[-1]["action"] != "remove")
    leaked = sorted(k for k, h in history.items() if h[-1]["action"] == "ignore")
    removed = sorted(k for k, h in history.items() if h[-1]["action"] == "remove")
    return {
        "operators": [_op("applyInPandasWithState", "applyInPandasWithState")],
        "timeout": "EventTimeTimeout" if event_time else "ProcessingTimeTimeout",
        "timeout_ms": timeout_ms,
        "key_schema": "key STRING",
        "state_schema": _PANDAS_STATE_SCHEMA,
        "calls": calls,
        "key_history": history,
        "final_keys": final_keys,
        "expected_state": {k: expected_state[k] for k in sorted(expected_state)},
        "leaked": leaked,
        "removed": removed,
    }


def scenario_pandas_state_processing(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql.streaming.state import GroupStateTimeout

    timeout_ms = 1_000
    runs: list[list[str]] = [
        ["leak1", "ok1", "upd1", "live1"],
        ["live1", "ok2", "leak2"],
        ["live1", "ok1"],
        ["upd2"],  # live1 gets no data here: it times out and re-arms
        # (a Trigger.Once run without new input runs no batch at all on 4.3.0, so every run has data)
        ["live1", "leak3"],
        ["live1"],
    ]
    func = _make_pandas_state_func(event_time=False, timeout_ms=timeout_ms)
    last_start = None
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        for i, keys in enumerate(runs):
            if keys:
                ctx.write_json(
                    "in",
                    [
                        {"key": k, "ts_ms": _ts(i * 10_000 + j), "v": float(i + j), "tag": f"b{i}-{k}"}
                        for j, k in enumerate(keys)
                    ],
                )
            if last_start is not None:
                # Make sure every armed timeout has expired before the next trigger starts.
                wait = last_start + timeout_ms / 1000 + 0.3 - time.time()
                if wait > 0:
                    time.sleep(wait)
            last_start = time.time()
            src = ctx.read_json_stream("in", "key STRING, ts_ms LONG, v DOUBLE, tag STRING", max_files=None)
            df = src.groupBy("key").applyInPandasWithState(
                func,
                _PANDAS_OUTPUT_SCHEMA,
                _PANDAS_STATE_SCHEMA,
                "append",
                GroupStateTimeout.ProcessingTimeTimeout,
            )
            ctx.run(df, mode="append", trigger="once")
    facts = _pandas_facts(ctx, event_time=False, timeout_ms=timeout_ms)
    facts["runs"] = [{"run": i, "keys_with_data": keys} for i, keys in enumerate(runs)]
    return facts


def scenario_pandas_state_event(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    timeout_ms = 5_000
    plan: list[list[tuple[str, int]]] = [
        [("leak1", 0), ("ok1", 1_000), ("upd1", 2_000), ("live1", 3_000), ("leak2", 4_000)],
        [("live1", 20_000), ("ok2", 21_000), ("leak3", 22_000)],
        [("live1", 40_000), ("upd2", 41_000)],
        [("live1", 60_000), ("ok1", 61_000)],
        [("leak4", 80_000), ("live1", 81_000)],
        [("live1", 100_000)],
    ]
    for i, rows in enumerate(plan):
        ctx.write_json(
            "in",
            [
                {"key": k, "ts_ms": _ts(t), "v": float(i + j), "tag": f"b{i}-{k}"}
                for j, (k, t) in enumerate(rows)
            ],
        )
    func = _make_pandas_state_func(event_time=True, timeout_ms=timeout_ms)
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        src = ctx.read_json_stream("in", "key STRING, ts_ms LONG, v DOUBLE, tag STRING")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "10 seconds")
            .groupBy("key")
            .applyInPandasWithState(
                func,
                _PANDAS_OUTPUT_SCHEMA,
                _PANDAS_STATE_SCHEMA,
                "append",
                GroupStateTimeout.EventTimeTimeout,
            )
        )
        ctx.run(df, mode="append")
    facts = _pandas_facts(ctx, event_time=True, timeout_ms=timeout_ms)
    facts["watermark_delay_ms"] = 10_000
    facts["input_plan"] = [[[k, _ts(t)] for k, t in rows] for rows in plan]
    return facts


# rich types -------------------------------------------------------------------------------------------

#: (column, SQL type, [literal per row]) — ``None`` = NULL. Rows: 0 typical, 1 extremes, 2 all NULL,
#: 3 NULL in even columns, 4 NULL in odd columns; batch 1 repeats row 0 (same group, updated state).
_RICH_KEY_COLUMNS: list[tuple[str, str, list[str]]] = [
    ("k_bool", "BOOLEAN", ["true", "false"]),
    ("k_byte", "TINYINT", ["CAST(7 AS TINYINT)", "CAST(-128 AS TINYINT)"]),
    ("k_short", "SMALLINT", ["CAST(513 AS SMALLINT)", "CAST(-32768 AS SMALLINT)"]),
    ("k_int", "INT", ["42", "-2147483648"]),
    ("k_long", "BIGINT", ["1234567890123", "CAST(-9223372036854775808 AS BIGINT)"]),
    ("k_float", "FLOAT", ["CAST(1.5 AS FLOAT)", "CAST('NaN' AS FLOAT)"]),
    ("k_double", "DOUBLE", ["CAST(-2.25 AS DOUBLE)", "CAST('Infinity' AS DOUBLE)"]),
    ("k_str", "STRING", ["'héllo ✓ 😀 \u4e16\u754c'", "''"]),
    ("k_bin", "BINARY", ["X'CAFE00BABE'", "X''"]),
    ("k_dec10", "DECIMAL(10,2)", ["CAST(123.45 AS DECIMAL(10,2))", "CAST(-99999999.99 AS DECIMAL(10,2))"]),
    (
        "k_dec30",
        "DECIMAL(30,5)",
        ["CAST(12345678901234567890.12345 AS DECIMAL(30,5))", "CAST(-1.00000 AS DECIMAL(30,5))"],
    ),
    ("k_date", "DATE", ["DATE'2024-01-02'", "DATE'1900-01-01'"]),
    ("k_ts", "TIMESTAMP", ["TIMESTAMP'2024-01-02 03:04:05.123456'", "TIMESTAMP'1969-12-31 23:59:59.999999'"]),
    (
        "k_ntz",
        "TIMESTAMP_NTZ",
        ["TIMESTAMP_NTZ'2024-01-02 03:04:05.123456'", "TIMESTAMP_NTZ'1950-06-15 12:00:00.000001'"],
    ),
    (
        "k_dti",
        "INTERVAL DAY TO SECOND",
        ["INTERVAL '1 02:03:04.5' DAY TO SECOND", "INTERVAL '-0 00:00:00.000001' DAY TO SECOND"],
    ),
    ("k_ymi", "INTERVAL YEAR TO MONTH", ["INTERVAL '1-2' YEAR TO MONTH", "INTERVAL '-3-11' YEAR TO MONTH"]),
    ("k_arr", "ARRAY<INT>", ["array(1, NULL, 3)", "CAST(array() AS ARRAY<INT>)"]),
    (
        "k_struct",
        "STRUCT<a: INT, b: STRING>",
        ["named_struct('a', 5, 'b', 'x')", "named_struct('a', NULL, 'b', '')"],
    ),
]

_RICH_VALUE_COLUMNS: list[tuple[str, str, list[str]]] = [
    ("v_map", "MAP<STRING, INT>", ["map('a', 1, 'bc', 2)", "map('z', CAST(NULL AS INT))"]),
    ("v_arr", "ARRAY<STRING>", ["array('ab', NULL, 'cde')", "CAST(array() AS ARRAY<STRING>)"]),
    (
        "v_nested",
        "STRUCT<inner: STRUCT<y: INT, z: STRING>, tags: ARRAY<STRING>, d: DECIMAL(38,18)>",
        [
            "named_struct('inner', named_struct('y', 1, 'z', 'zz'), 'tags', array('t1', NULL), "
            "'d', CAST(3.141592653589793238 AS DECIMAL(38,18)))",
            "named_struct('inner', CAST(NULL AS STRUCT<y: INT, z: STRING>), 'tags', CAST(NULL AS ARRAY<STRING>), "
            "'d', CAST(-0.000000000000000001 AS DECIMAL(38,18)))",
        ],
    ),
    (
        "v_dec38",
        "DECIMAL(38,18)",
        ["CAST(12345678901234567890.123456789012345678 AS DECIMAL(38,18))", "CAST(-1 AS DECIMAL(38,18))"],
    ),
    ("v_str", "STRING", ["'value ü'", "'x'"]),
    ("v_ts", "TIMESTAMP", ["TIMESTAMP'2030-05-06 07:08:09.000010'", "TIMESTAMP'1970-01-01 00:00:00'"]),
    ("v_double", "DOUBLE", ["CAST(2.5 AS DOUBLE)", "CAST('-Infinity' AS DOUBLE)"]),
    ("v_n", "INT", ["3", "-7"]),
]


def _rich_rows() -> list[list[str]]:
    cols = _RICH_KEY_COLUMNS + _RICH_VALUE_COLUMNS
    rows: list[list[str]] = []
    for variant in range(5):
        row = []
        for i, (_name, typ, lits) in enumerate(cols):
            null = variant == 2 or (variant == 3 and i % 2 == 0) or (variant == 4 and i % 2 == 1)
            lit = lits[1] if variant == 1 else lits[0]
            row.append(f"CAST(NULL AS {typ})" if null else f"CAST({lit} AS {typ})")
        rows.append(row)
    return rows


def scenario_rich_types(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    cols = _RICH_KEY_COLUMNS + _RICH_VALUE_COLUMNS
    names = [c[0] for c in cols]
    rows = _rich_rows()
    batches = [rows, [rows[0], rows[1]]]
    in_dir = ctx.input_dir("in")
    schema = None
    for b, brows in enumerate(batches):
        values = ",\n".join("(" + ", ".join(r) + ")" for r in brows)
        batch_df = ctx.spark.sql(f"SELECT * FROM VALUES {values} AS t({', '.join(names)})")
        schema = batch_df.schema
        tmp = ctx.dir / f"_parquet_tmp_{b}"
        batch_df.coalesce(1).write.mode("overwrite").parquet(str(tmp))
        part = next(tmp.glob("part-*.parquet"))
        target = in_dir / f"part-{b:03d}.parquet"
        shutil.move(str(part), target)
        mtime = _BASE_MTIME + 10 * b
        os.utime(target, (mtime, mtime))
        shutil.rmtree(tmp)
    key_cols = [c[0] for c in _RICH_KEY_COLUMNS]
    with session_conf(ctx.spark, {"spark.sql.shuffle.partitions": "2"}):
        src = (
            ctx.spark.readStream.format("parquet")
            .schema(schema)
            .option("maxFilesPerTrigger", "1")
            .load(str(in_dir))
        )
        df = src.groupBy(*key_cols).agg(
            F.count("*").alias("cnt"),
            F.first("v_map").alias("first_map"),
            F.first("v_arr").alias("first_arr"),
            F.first("v_nested").alias("first_nested"),
            F.first("v_dec38").alias("first_dec38"),
            F.first(
                F.make_interval(
                    F.lit(0), F.col("v_n"), F.lit(0), F.col("v_n"), F.lit(1), F.lit(2), F.lit(3.000004)
                )
            ).alias("first_interval"),
            F.collect_list("v_str").alias("strs"),
            F.sum("k_dec10").alias("sum_dec"),
            F.max("v_ts").alias("max_ts"),
            F.avg("v_double").alias("avg_double"),
            F.min("k_date").alias("min_date"),
        )
        ctx.run(df, mode="update")
    return {
        "operators": [_op("aggregation", "stateStoreSave")],
        "key_columns": [[n, t] for n, t, _ in _RICH_KEY_COLUMNS],
        "value_input_columns": [[n, t] for n, t, _ in _RICH_VALUE_COLUMNS],
        "groups": 5,
        "rows_per_batch": [len(b) for b in batches],
    }


# RocksDB state store provider ----------------------------------------------------------------------

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _rocks_conf(
    changelog: bool, min_deltas: int | None = None, checkpoint_v2: bool = False
) -> dict[str, str]:
    """Session confs of a RocksDB scenario (the provider is pinned in offsets/0 conf, the changelog flag is not)."""
    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(changelog).lower(),
    }
    if min_deltas is not None:
        conf["spark.sql.streaming.stateStore.minDeltasForSnapshot"] = str(min_deltas)
    if checkpoint_v2:
        conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] = "2"
    return conf


def _wait_for_zips(op_dir: Path, partitions: int, timeout_s: float) -> None:
    """Give background maintenance time to upload a snapshot zip in every partition."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(any((op_dir / str(p)).glob("*.zip")) for p in range(partitions)):
            return
        time.sleep(0.1)


def _quiet_state_files(state: Path, settle_s: float = 1.5, timeout_s: float = 15.0) -> None:
    """Wait until background maintenance stops uploading zips after the query ended.

    Maintenance (every 200 ms here) still snapshots and then unloads the stores of a stopped query; a
    listing taken too early misses zips, and an upload after the scenario folder is renamed fails.
    """
    deadline = time.monotonic() + timeout_s
    last: list[Path] = []
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        now = sorted(state.rglob("*.zip"))
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= settle_s:
            return
        time.sleep(0.1)


def _rocks_facts(ctx: Ctx, facts: dict[str, Any], conf: dict[str, str]) -> dict[str, Any]:
    state = ctx.checkpoint / "state"
    _quiet_state_files(state)
    facts["rocksdb_conf"] = conf
    facts["zip_files"] = sorted(p.relative_to(ctx.checkpoint).as_posix() for p in state.rglob("*.zip"))
    facts["changelog_files"] = sorted(
        p.relative_to(ctx.checkpoint).as_posix() for p in state.rglob("*.changelog")
    )
    return facts


def scenario_rocks_agg(ctx: Ctx) -> dict[str, Any]:
    conf = _rocks_conf(changelog=False)
    with session_conf(ctx.spark, conf):
        facts = _agg_count(ctx, partitions=2, batches=5)
    return _rocks_facts(ctx, facts, conf)


def _rocks_agg_changelog(ctx: Ctx, checkpoint_v2: bool) -> dict[str, Any]:
    conf = _rocks_conf(changelog=True, min_deltas=2, checkpoint_v2=checkpoint_v2)
    with session_conf(ctx.spark, conf):
        facts = _agg_count(ctx, partitions=2, batches=8, sleep_per_batch=0.3)
        _wait_for_zips(ctx.checkpoint / "state" / "0", 2, timeout_s=10.0)
    facts["min_deltas_for_snapshot"] = 2
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_agg_changelog(ctx: Ctx) -> dict[str, Any]:
    return _rocks_agg_changelog(ctx, checkpoint_v2=False)


def scenario_rocks_ckpt_v2(ctx: Ctx) -> dict[str, Any]:
    facts = _rocks_agg_changelog(ctx, checkpoint_v2=True)
    facts["checkpoint_format_version"] = 2
    return facts


def scenario_rocks_dedup_changelog(ctx: Ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    plan = [
        [("a", 0), ("b", 1_000), ("a", 0), ("c", 2_000)],
        [("a", 0), ("d", 10_000), ("e", 11_000)],
        [("f", 20_000), ("d", 10_000), ("g", 21_000)],
        [("h", 40_000), ("i", 41_000)],
        [("j", 60_000), ("k", 61_000)],
        [("l", 80_000)],
    ]
    for i, rows in enumerate(plan):
        ctx.write_json("in", [{"id": k, "ts_ms": _ts(t), "payload": f"p{i}-{k}"} for k, t in rows])
    conf = _rocks_conf(changelog=True, min_deltas=2)

    def hook(_df: Any, _batch_id: int, _rows: list[dict[str, Any]]) -> None:
        time.sleep(0.3)  # let maintenance upload snapshot zips between batches

    with session_conf(ctx.spark, {**conf, "spark.sql.shuffle.partitions": "2"}):
        src = ctx.read_json_stream("in", "id STRING, ts_ms LONG, payload STRING")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "5 seconds")
            .dropDuplicates(["id", "ts"])
        )
        ctx.run(df, mode="append", batch_hook=hook)
    facts = {
        "operators": [_op("deduplication", "dedupe")],
        "key_schema": "id STRING, ts TIMESTAMP",
        "watermark_delay_ms": 5_000,
        "distinct_keys": sorted({(k, _ts(t)) for rows in plan for k, t in rows}),
    }
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_pandas_state(ctx: Ctx) -> dict[str, Any]:
    conf = _rocks_conf(changelog=True, min_deltas=2)
    with session_conf(ctx.spark, conf):
        facts = scenario_pandas_state_event(ctx)
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_pandas_state_processing(ctx: Ctx) -> dict[str, Any]:
    conf = _rocks_conf(changelog=True, min_deltas=2)
    with session_conf(ctx.spark, conf):
        facts = scenario_pandas_state_processing(ctx)
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_join(ctx: Ctx) -> dict[str, Any]:
    """The join scenario's four stores (join state format 2) on RocksDB, changelog on, checkpoint v2."""
    conf = _rocks_conf(changelog=True, min_deltas=2, checkpoint_v2=True)
    conf["spark.sql.streaming.join.stateFormatVersion"] = "2"
    with session_conf(ctx.spark, conf):
        facts = scenario_join(ctx)
    facts["checkpoint_format_version"] = 2
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_tws(ctx: Ctx, encoding: str = "unsaferow", row_checksum: bool = False) -> dict[str, Any]:
    """transformWithStateInPandas (value, list and map state; no timers) on RocksDB with changelog.

    Spark's reader finds a TWS schema through the absolute path recorded in operator metadata v2, so the
    query runs where it keeps its path (:func:`_in_spark_path`).
    """
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.cnt = handle.getValueState("cnt", "c LONG")
            self.lst = handle.getListState("lst", "s STRING, n LONG")
            self.mp = handle.getMapState("mp", "mk STRING", "mv LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = 0
            for pdf in rows:
                for tag in pdf["tag"]:
                    n += 1
                    if tag == "reset":  # deletes: the whole list, one map entry
                        self.lst.clear()
                        if self.mp.containsKey(("x",)):
                            self.mp.removeKey(("x",))
                        continue
                    self.lst.appendValue((str(tag), n))
                    old = self.mp.getValue((str(tag),)) if self.mp.containsKey((str(tag),)) else None
                    self.mp.updateValue((str(tag),), ((old[0] if old else 0) + 1,))
            total = (self.cnt.get()[0] if self.cnt.exists() else 0) + n
            self.cnt.update((total,))
            yield pd.DataFrame({"key": [key[0]], "cnt": [total]})

        def close(self) -> None:
            pass

    plan = [
        [("a", "x"), ("b", "y"), ("a", "y")],
        [("a", "x"), ("c", "z")],
        [("b", "y"), ("d", "x")],
        [("a", "reset"), ("b", "x")],
        [("a", "y"), ("c", "x"), ("e", "y")],
    ]
    conf = _rocks_conf(changelog=True, min_deltas=2)
    if encoding != "unsaferow":
        conf["spark.sql.streaming.stateStore.encodingFormat"] = encoding
    if row_checksum:
        conf["spark.sql.streaming.stateStore.rowChecksum.enabled"] = "true"

    def hook(_df: Any, _batch_id: int, _rows: list[dict[str, Any]]) -> None:
        time.sleep(0.3)  # let maintenance upload snapshot zips between batches

    def body(run: Ctx) -> dict[str, Any]:
        for rows in plan:
            run.write_json("in", [{"key": k, "tag": t} for k, t in rows])
        with session_conf(ctx.spark, {**conf, "spark.sql.shuffle.partitions": "2"}):
            src = run.read_json_stream("in", "key STRING, tag STRING")
            df = src.groupBy("key").transformWithStateInPandas(
                statefulProcessor=Counter(),
                outputStructType="key STRING, cnt LONG",
                outputMode="Update",
                timeMode="None",
            )
            run.run(df, mode="update", batch_hook=hook)
        return {}

    facts = _in_spark_path(ctx, body)
    facts.update(
        {
            "operators": [_op("transformWithState", "transformWithStateInPandasExec")],
            "state_variables": ["cnt", "lst", "mp"],
            "encoding_format": encoding,
            "row_checksum": row_checksum,
        }
    )
    return _rocks_facts(ctx, facts, conf)


#: The column families of join state format 4, shown as the operator's stores (docs/format.md §7.4.1).
JOIN_V4_STORES = ["left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey"]


def _in_spark_path(ctx: Ctx, run_scenario: Callable[[Ctx], dict[str, Any]]) -> dict[str, Any]:
    """Run a scenario in ``<cache>/<name>.spark-path/`` and copy its checkpoint into the scenario folder.

    Stores with a v3 schema file (transformWithState, join state format v3/v4) record the schema's absolute
    path in operator metadata v2, so Spark's reader can read them only where the query ran; the copy in
    the scenario folder is what statelens reads (like a checkpoint copied down from S3).
    """
    stable = ctx.dir.parent / f"{ctx.name}.spark-path"
    if stable.exists():
        shutil.rmtree(stable)
    run = Ctx(name=ctx.name, spark=ctx.spark, dir=stable)
    facts = run_scenario(run)
    _quiet_state_files(run.checkpoint / "state")
    shutil.copytree(run.checkpoint, ctx.checkpoint)
    shutil.copytree(stable / "input", ctx.dir / "input")
    ctx.output.extend(run.output)
    ctx._files = run._files
    facts["spark_path"] = stable.name
    return facts


def _rocks_join_format(version: int) -> Callable[[Ctx], dict[str, Any]]:
    def scenario(ctx: Ctx) -> dict[str, Any]:
        """The join scenario with join state format 3 or 4: one store, the four logical stores as column families."""
        conf = _rocks_conf(changelog=True, min_deltas=2)
        conf["spark.sql.streaming.join.stateFormatVersion"] = str(version)
        with session_conf(ctx.spark, conf):
            facts = _in_spark_path(ctx, scenario_join)
        stores = JOIN_STORES if version == 3 else JOIN_V4_STORES
        facts["operators"] = [_op("join", "symmetricHashJoin", stores)]
        facts["join_state_format_version"] = version
        return _rocks_facts(ctx, facts, conf)

    return scenario


def scenario_checksum_window(ctx: Ctx) -> dict[str, Any]:
    """The windowed aggregation (evictions = removes) with row checksums on, HDFS provider."""
    conf = {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true"}
    with session_conf(ctx.spark, conf):
        facts = scenario_window_agg_watermark(ctx)
    facts["row_checksum"] = True
    return facts


def scenario_rocks_checksum_window(ctx: Ctx) -> dict[str, Any]:
    """The windowed aggregation with row checksums on, RocksDB with changelog checkpointing."""
    conf = _rocks_conf(changelog=True, min_deltas=2)
    conf["spark.sql.streaming.stateStore.rowChecksum.enabled"] = "true"
    with session_conf(ctx.spark, conf):
        facts = scenario_window_agg_watermark(ctx)
    facts["row_checksum"] = True
    return _rocks_facts(ctx, facts, conf)


TWS_TIMERS_OUTPUT = "key STRING, cnt LONG, event STRING, timer_ms LONG, batch_ms LONG"


def scenario_rocks_tws_timers(ctx: Ctx, encoding: str = "unsaferow") -> dict[str, Any]:
    """transformWithStateInPandas in processing time: TTL'd value/list/map state and timers.

    Every key gets a timer; keys starting with ``s`` a short one (1 ms, fires in the next batch, whose
    handler clears ``cnt`` — except for ``s1``, the leak: its ``cnt`` stays with no timer left to clear
    it), the others a one-hour one that replaces their previous timer (deleteTimer).
    One Trigger.Once run per batch (processing-time timers keep AvailableNow running). The function
    reports every call, with the timer it registered (``timer_ms``), so expectations come from what it saw.
    """
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    hour = 3_600_000

    class Timers(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.cnt = handle.getValueState("cnt", "c LONG")
            self.ttlv = handle.getValueState("ttlv", "v STRING", hour)
            self.ttll = handle.getListState("ttll", "s STRING", hour)
            self.ttlm = handle.getMapState("ttlm", "mk INT", "mv STRING", hour)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            now = timerValues.getCurrentProcessingTimeInMs()
            n = sum(len(pdf) for pdf in rows)
            total = (self.cnt.get()[0] if self.cnt.exists() else 0) + n
            self.cnt.update((total,))
            self.ttlv.update((f"{key[0]}:{total}",))
            self.ttll.appendValue((f"{key[0]}{total}",))
            self.ttlm.updateValue((total,), (f"m{total}",))
            if key[0].startswith("s"):
                timer = now + 1
            else:
                for old in list(self.handle.listTimers()):
                    self.handle.deleteTimer(old)
                timer = now + hour
            self.handle.registerTimer(timer)
            yield pd.DataFrame(
                {"key": [key[0]], "cnt": [total], "event": ["input"], "timer_ms": [timer], "batch_ms": [now]}
            )

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            # The leak under test: the handler forgets to clear state for key s1 (cnt stays, no timer left).
            leaked = key[0] == "s1"
            if not leaked:
                self.cnt.clear()
            yield pd.DataFrame(
                {
                    "key": [key[0]],
                    "cnt": [self.cnt.get()[0] if leaked else -1],
                    "event": ["timer"],
                    "timer_ms": [expiredTimerInfo.getExpiryTimeInMs()],
                    "batch_ms": [timerValues.getCurrentProcessingTimeInMs()],
                }
            )

        def close(self) -> None:
            pass

    plan = [["a", "s1", "b"], ["a", "c"], ["s1", "s2"], ["b", "d"], ["a", "s2"]]

    def body(run: Ctx) -> dict[str, Any]:
        conf = _rocks_conf(changelog=True, min_deltas=2)
        if encoding != "unsaferow":
            conf["spark.sql.streaming.stateStore.encodingFormat"] = encoding
        with session_conf(ctx.spark, {**conf, "spark.sql.shuffle.partitions": "2"}):
            for keys in plan:
                run.write_json("in", [{"key": k} for k in keys])
                src = run.read_json_stream("in", "key STRING", max_files=None)
                df = src.groupBy("key").transformWithStateInPandas(
                    statefulProcessor=Timers(),
                    outputStructType=TWS_TIMERS_OUTPUT,
                    outputMode="Update",
                    timeMode="ProcessingTime",
                )
                run.run(df, mode="update", trigger="once")
                time.sleep(0.3)  # let maintenance upload snapshot zips between batches
        return {"rocksdb_conf": conf}

    facts = _in_spark_path(ctx, body)
    conf = facts.pop("rocksdb_conf")
    facts.update(
        {
            "operators": [_op("transformWithState", "transformWithStateInPandasExec")],
            "state_variables": ["cnt", "ttlv", "ttll", "ttlm"],
            "ttl_ms": hour,
            "encoding_format": encoding,
        }
    )
    return _rocks_facts(ctx, facts, conf)


def scenario_rocks_tws_event_time(ctx: Ctx) -> dict[str, Any]:
    """transformWithStateInPandas in event time: each key's timer at its last event + 5 s (watermark 2 s).

    The handler clears ``cnt`` when the timer fires, except for key ``b``: the leak, in event time. The
    function reports every call with the watermark it saw (``wm``) and the timer set or fired.
    """
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Sessions(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.cnt = handle.getValueState("cnt", "c LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n, last = 0, 0
            for pdf in rows:
                n += len(pdf)
                last = max(last, int(pdf["ts_ms"].max()))
            total = (self.cnt.get()[0] if self.cnt.exists() else 0) + n
            self.cnt.update((total,))
            for old in list(self.handle.listTimers()):
                self.handle.deleteTimer(old)
            self.handle.registerTimer(last + 5_000)
            yield pd.DataFrame(
                {
                    "key": [key[0]],
                    "cnt": [total],
                    "event": ["input"],
                    "timer_ms": [last + 5_000],
                    "wm": [timerValues.getCurrentWatermarkInMs()],
                }
            )

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            leaked = key[0] == "b"
            if not leaked:
                self.cnt.clear()
            yield pd.DataFrame(
                {
                    "key": [key[0]],
                    "cnt": [self.cnt.get()[0] if leaked else -1],
                    "event": ["timer"],
                    "timer_ms": [expiredTimerInfo.getExpiryTimeInMs()],
                    "wm": [timerValues.getCurrentWatermarkInMs()],
                }
            )

        def close(self) -> None:
            pass

    plan = [[("a", 0), ("b", 1_000)], [("c", 20_000)], [("a", 40_000)], [("d", 60_000)]]

    def body(run: Ctx) -> dict[str, Any]:
        for rows in plan:
            run.write_json("in", [{"key": k, "ts_ms": _ts(t)} for k, t in rows])
        conf = _rocks_conf(changelog=True, min_deltas=2)
        with session_conf(ctx.spark, {**conf, "spark.sql.shuffle.partitions": "2"}):
            src = (
                run.read_json_stream("in", "key STRING, ts_ms LONG")
                .withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
                .withWatermark("ts", "2 seconds")
            )
            df = src.groupBy("key").transformWithStateInPandas(
                statefulProcessor=Sessions(),
                outputStructType="key STRING, cnt LONG, event STRING, timer_ms LONG, wm LONG",
                outputMode="Update",
                timeMode="EventTime",
            )
            run.run(df, mode="update")
        return {"rocksdb_conf": conf}

    facts = _in_spark_path(ctx, body)
    conf = facts.pop("rocksdb_conf")
    facts.update(
        {
            "operators": [_op("transformWithState", "transformWithStateInPandasExec")],
            "state_variables": ["cnt"],
            "watermark_delay_ms": 2_000,
        }
    )
    return _rocks_facts(ctx, facts, conf)


SCENARIOS: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "agg_count": scenario_agg_count,
    "window_agg_watermark": scenario_window_agg_watermark,
    "dedup_watermark": scenario_dedup_watermark,
    "join": scenario_join,
    "pandas_state_processing": scenario_pandas_state_processing,
    "pandas_state_event": scenario_pandas_state_event,
    "codec_zstd": _codec_scenario("zstd"),
    "codec_snappy": _codec_scenario("snappy"),
    "codec_lzf": _codec_scenario("lzf"),
    "rich_types": scenario_rich_types,
    "uncommitted": scenario_uncommitted,
    "agg_many_partitions": scenario_agg_many_partitions,
    "session_window": scenario_session_window,
    "dedup_within_watermark": scenario_dedup_within_watermark,
    "stream_limit": scenario_stream_limit,
    "agg_state_format_v1": scenario_agg_state_format_v1,
    "rocks_agg": scenario_rocks_agg,
    "rocks_agg_changelog": scenario_rocks_agg_changelog,
    "rocks_dedup_changelog": scenario_rocks_dedup_changelog,
    "rocks_pandas_state": scenario_rocks_pandas_state,
    "rocks_pandas_state_processing": scenario_rocks_pandas_state_processing,
    "rocks_ckpt_v2": scenario_rocks_ckpt_v2,
    "rocks_join": scenario_rocks_join,
    "rocks_tws": scenario_rocks_tws,
    "rocks_join_v3": _rocks_join_format(3),
    "rocks_join_v4": _rocks_join_format(4),
    "checksum_window": scenario_checksum_window,
    "rocks_checksum_window": scenario_rocks_checksum_window,
    "rocks_tws_timers": scenario_rocks_tws_timers,
    "rocks_tws_avro": functools.partial(scenario_rocks_tws, encoding="avro"),
    "rocks_tws_checksum": functools.partial(scenario_rocks_tws, row_checksum=True),
    "rocks_tws_timers_avro": functools.partial(scenario_rocks_tws_timers, encoding="avro"),
    "rocks_tws_event_time": scenario_rocks_tws_event_time,
}


# --------------------------------------------------------------------------------------------------
# CLI


def write_sample(dest: Path) -> Path:
    """Copy the checkpoint of :data:`SAMPLE_SCENARIO` (as Spark wrote it, .crc files included) to dest."""
    src = get_checkpoint(SAMPLE_SCENARIO) / "checkpoint"
    dest = dest.resolve()
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(tmp, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.spark_checkpoints", description=__doc__.split("\n")[0]
    )
    parser.add_argument("names", nargs="*", help=f"scenarios: {', '.join(SCENARIOS)}")
    parser.add_argument("--all", action="store_true", help="generate every scenario")
    parser.add_argument("--out", type=Path, help="write scenario folders here instead of the cache")
    parser.add_argument("--force", action="store_true", help="regenerate even when cached")
    parser.add_argument(
        "--sample", type=Path, metavar="DIR", help=f"write the {SAMPLE_SCENARIO} checkpoint to DIR"
    )
    args = parser.parse_args(argv)
    names = list(SCENARIOS) if args.all else args.names
    if not names and not args.sample:
        parser.error("name scenarios, or give --all or --sample")
    for n in names:
        if n not in SCENARIOS:
            parser.error(f"unknown scenario {n!r}")
    t_all = time.monotonic()
    for n in names:
        t0 = time.monotonic()
        path = get_checkpoint(n, out=args.out, force=args.force)
        print(f"{n:28s} {time.monotonic() - t0:7.1f}s  {path}", flush=True)
    if args.sample:
        print(f"sample -> {write_sample(args.sample)}", flush=True)
    print(f"total {time.monotonic() - t_all:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

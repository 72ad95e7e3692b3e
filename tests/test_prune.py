"""statelens prune on real checkpoints: the copy restarts in Spark without the removed keys.

Each case prunes a checkpoint written by PySpark into a new folder, then checks what Spark itself sees:
its ``statestore`` reader (tests/oracle.py, no statelens code) shows the removed keys gone and every
other row equal to the original's, and the same query restarted on the copy runs the next batches
(ids after the added one) without ever calling the state function for the removed keys, while the same
restart on an unpruned copy still calls it for them. The original checkpoint's files are hashed before
and after. Refusals are checked before anything is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers.errors import RefusedError
from statelens.readers.restart import REPAIR_ENABLED

pytestmark = pytest.mark.spark


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def _prune_json(*argv: str) -> dict[str, Any]:
    code, text = _cli("prune", *argv, "--json")
    assert code == 0, text
    return json.loads(text)  # type: ignore[no-any-return]


def _keys(rows: list[tuple[int, Any, Any]]) -> set[str]:
    return {json.dumps(r[1], sort_keys=True, default=str) for r in rows}


def _restart_pandas_state(
    spark: Any, root: Path, batches: list[list[tuple[str, int]]], conf: dict[str, str]
) -> list[dict[str, Any]]:
    """Run the applyInPandasWithState query of ``pandas_state_event`` on ``root/checkpoint`` again, one
    ``Trigger.Once`` run per batch of new input (read from a new folder, so only the new files are new)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from tests.spark_checkpoints import (
        _PANDAS_OUTPUT_SCHEMA,
        _PANDAS_STATE_SCHEMA,
        Ctx,
        _make_pandas_state_func,
        _ts,
        session_conf,
    )

    ctx = Ctx(name="restart", spark=spark, dir=root)
    func = _make_pandas_state_func(event_time=True, timeout_ms=5_000)
    with session_conf(spark, {"spark.sql.shuffle.partitions": "2", **conf}):
        for i, rows in enumerate(batches):
            ctx.write_json(
                "restart",
                [
                    {"key": k, "ts_ms": _ts(t), "v": float(j), "tag": f"r{i}-{k}"}
                    for j, (k, t) in enumerate(rows)
                ],
            )
            src = ctx.read_json_stream("restart", "key STRING, ts_ms LONG, v DOUBLE, tag STRING")
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
            ctx.run(df, mode="append", trigger="once")
    return ctx.output


def _copy_scenario(src: Path, dst: Path) -> Path:
    """A private copy of a cached scenario's checkpoint (the cache is shared and must stay untouched)."""
    shutil.copytree(src / "checkpoint", dst / "checkpoint", symlinks=True)
    return dst / "checkpoint"


#: New input for the restarts: live1 keeps getting data and the watermark moves on.
_RESTART = [[("live1", 120_000), ("new1", 121_000)], [("live1", 140_000)]]


@pytest.mark.parametrize(
    ("scenario", "conf"),
    [
        ("pandas_state_event", {}),
        (
            "rocks_pandas_state",
            {
                "spark.sql.streaming.stateStore.providerClass": (
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
                ),
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
            },
        ),
    ],
)
def test_pruned_copy_restarts_without_the_zombies(
    scenario: str, conf: dict[str, str], checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    from tests import oracle

    source = checkpoint(scenario) / "checkpoint"
    before = _tree_hash(source)
    expected = json.loads((checkpoint(scenario) / "expected.json").read_text())
    last = expected["committed_batches"][-1]

    dry = _prune_json(str(source), "--zombies")
    assert not dry["applied"] and dry["written_files"] == []
    assert dry["removed_rows"] > 0

    target = tmp_path / "pruned" / "checkpoint"
    report = tmp_path / "prune.json"
    doc = _prune_json(str(source), "--zombies", "--out", str(target), "--apply", "--report", str(report))
    assert _tree_hash(source) == before, "prune wrote into the source checkpoint"
    assert json.loads(report.read_text()) == doc
    assert doc["applied"] and doc["proof"]["ok"], doc["proof"]
    assert (doc["last_committed_batch"], doc["new_batch"], doc["new_version"]) == (last, last + 1, last + 2)
    removed = {
        json.dumps(k, sort_keys=True)
        for s in doc["stores"]
        for p in s["partitions"]
        for k in p["removed_keys"]
    }
    assert removed == {json.dumps(k, sort_keys=True) for k in dry_keys(dry)}
    # The keys removed are the ones statelens expired reports as zombies, which the state function
    # leaked: every "leak*" key (a timeout that fired and was ignored) and upd* (stored again without one).
    names = {json.loads(k)["key"] for k in removed}
    assert set(expected["leaked"]) <= names
    assert all(n.startswith(("leak", "upd")) for n in names)
    for w in doc["written_files"]:
        data = (target / w["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == w["sha256"] and len(data) == w["size_bytes"]

    # Spark's own reader: the copy's state after the added batch is the original's minus the removed keys.
    original = oracle.read_state(spark, source, batch_id=last)
    pruned = oracle.read_state(spark, target, batch_id=last + 1)
    kept = [r for r in original if r[1][0] not in names]  # Spark's keys are tuples: (key,)
    assert len(kept) == len(original) - len(removed)
    assert pruned == kept

    # Restart the same query on the copy, and (control) on an unpruned copy of the original.
    runs = {}
    for name, ckpt in (
        ("pruned", target),
        ("control", _copy_scenario(checkpoint(scenario), tmp_path / "control")),
    ):
        runs[name] = _restart_pandas_state(spark, ckpt.parent, _RESTART, conf)
    assert {r["_batch"] for r in runs["pruned"]} == {last + 2, last + 3}
    assert {r["_batch"] for r in runs["control"]} == {last + 1, last + 2}
    leaked_calls = {r["key"] for r in runs["control"] if r["action"] == "ignore"}
    assert leaked_calls & names, "the control restart should still call the state function for leaked keys"
    assert not {r["key"] for r in runs["pruned"]} & names
    # ... and the keys that were kept behave as in the control run.
    assert sorted((r["key"], r["action"]) for r in runs["pruned"]) == sorted(
        (r["key"], r["action"]) for r in runs["control"] if r["key"] not in names
    )
    final = oracle.read_state(spark, target)
    assert {r[1][0] for r in final} and not {r[1][0] for r in final} & names
    assert _tree_hash(source) == before


def dry_keys(doc: dict[str, Any]) -> Iterator[Any]:
    for s in doc["stores"]:
        for p in s["partitions"]:
            yield from p.get("removed_keys", [])


def _restart_count(
    spark: Any, root: Path, batches: list[list[str]], first_file: int, conf: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Run the ``groupBy(key).count()`` query of the aggregation scenarios on ``root/checkpoint`` again,
    reading ``root/input/in`` (new files get modification times after the ``first_file`` old ones), with
    the session ``conf`` of the scenario (its state store provider)."""
    from tests.spark_checkpoints import Ctx, session_conf

    ctx = Ctx(name="restart", spark=spark, dir=root, _files=first_file)
    with session_conf(spark, {"spark.sql.shuffle.partitions": "2", **(conf or {})}):
        for i, keys in enumerate(batches):
            ctx.write_json("in", [{"key": k, "value": 1000 + i} for k in keys])
            df = ctx.read_json_stream("in", "key STRING, value LONG", max_files=None).groupBy("key").count()
            ctx.run(df, mode="update", trigger="once")
    return ctx.output


def test_where_and_drop_uncommitted_restart(checkpoint: Any, spark: Any, tmp_path: Path) -> None:
    """The last batch never committed: prune refuses, then with --drop-uncommitted builds on the last
    committed batch; rows picked by a DuckDB predicate are gone and their counts start over in Spark."""
    from tests import oracle

    source = checkpoint("uncommitted") / "checkpoint"
    before = _tree_hash(source)
    target = tmp_path / "pruned" / "checkpoint"
    with pytest.raises(
        RefusedError, match=r"batch 2 was planned \(offsets/2\) but never committed.*--drop-uncommitted"
    ):
        _run_prune(source, "--where", "key.key = 'a'", "--out", str(target), "--apply")
    assert not target.exists()

    doc = _prune_json(
        str(source), "--where", "key.key IN ('a', 'c')", "--drop-uncommitted", "--out", str(target), "--apply"
    )
    assert doc["proof"]["ok"] and doc["dropped_uncommitted_batches"] == [2]
    assert (doc["new_batch"], doc["new_version"]) == (2, 3)
    assert sorted(k["key"] for k in dry_keys(doc)) == ["a", "c"]
    assert _tree_hash(source) == before
    # The copy's batch 2 is the added one, not the one that failed.
    assert (target / "offsets" / "2").read_text().split("\n")[2:] == (
        source / "offsets" / "1"
    ).read_text().split("\n")[2:]
    original = {r[1][0]: r[2][0] for r in oracle.read_state(spark, source, batch_id=1)}
    pruned = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target, batch_id=2)}
    assert pruned == {k: v for k, v in original.items() if k not in ("a", "c")}

    # Restart: batch 3 plans the dropped batch's input again (part-002: e b b f g) and the new file.
    _move_file_source(target, checkpoint("uncommitted") / "input" / "in", target.parent / "input" / "in")
    out = _restart_count(spark, target.parent, [["a", "b", "z"]], first_file=3)
    assert min(r["_batch"] for r in out) == 3
    final = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target)}
    expect = dict(pruned)
    for k in ["e", "b", "b", "f", "g", "a", "b", "z"]:
        expect[k] = expect.get(k, 0) + 1
    assert final == expect  # a and c started over (c had no new rows); b continued
    assert _tree_hash(source) == before


def _move_file_source(ckpt: Path, old_input: Path, new_input: Path) -> None:
    """Point a copied checkpoint's file-source log at a copy of its input folder (the generator's
    folder was renamed after the run), keeping file names and modification times."""
    new_input.mkdir(parents=True)
    for f in sorted(old_input.iterdir()):
        shutil.copy2(f, new_input / f.name)
    for log in (ckpt / "sources" / "0").iterdir():
        if log.name.startswith("."):
            log.unlink()  # the Hadoop .crc of a rewritten file would no longer match
            continue
        lines = log.read_text().split("\n")
        for i, line in enumerate(lines[1:], 1):
            if line.strip():
                entry = json.loads(line)
                entry["path"] = (new_input / entry["path"].rsplit("/", 1)[1]).as_uri()
                lines[i] = json.dumps(entry)
        log.write_text("\n".join(lines))


def _run_prune(source: Path, *argv: str) -> Any:
    from statelens.app.analysis._common import run_to_end
    from statelens.app.prune import Selection, iter_prune
    from statelens.readers.checkpoint import open_checkpoint

    args = list(argv)
    opts: dict[str, Any] = {}
    sel: dict[str, Any] = {}
    while args:
        flag = args.pop(0)
        if flag == "--where":
            sel["where"] = args.pop(0)
        elif flag == "--zombies":
            sel["zombies"] = True
        elif flag == "--out":
            opts["target"] = args.pop(0)
        elif flag == "--apply":
            opts["apply"] = True
    return run_to_end(iter_prune(open_checkpoint(str(source)), Selection(**sel), **opts))


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("rocks_join", r"stream-stream join"),
        ("rocks_tws", r"virtual column families"),
    ],
)
def test_formats_it_cannot_write_are_refused_before_writing(
    scenario: str, reason: str, checkpoint: Any, tmp_path: Path
) -> None:
    source = checkpoint(scenario) / "checkpoint"
    target = tmp_path / "out"
    code, _ = _cli("prune", str(source), "--where", "true", "--out", str(target), "--apply")
    assert code == 2
    with pytest.raises(RefusedError, match=reason):
        _run_prune(source, "--where", "true", "--out", str(target), "--apply")
    assert not target.exists()


def test_a_where_that_picks_no_row_of_a_join_removes_nothing(checkpoint: Any) -> None:
    """A join's stores are read a partition at a time, each partition's rows put before the predicate
    alone: nothing is left over for the predicate after the last one."""
    source = checkpoint("join") / "checkpoint"
    plan = _run_prune(source, "--where", "false")
    assert plan.removed_rows == 0 and not plan.applied
    assert len(plan.stores) == 4 and all(p.rows is not None for s in plan.stores for p in s.partitions)
    assert sum(p.rows for s in plan.stores for p in s.partitions) > 0


def test_never_writes_into_the_source_or_a_non_empty_folder(checkpoint: Any, tmp_path: Path) -> None:
    source = checkpoint("pandas_state_event") / "checkpoint"
    before = _tree_hash(source)
    with pytest.raises(RefusedError, match="inside the checkpoint"):
        _run_prune(source, "--zombies", "--out", str(source / "pruned"), "--apply")
    with pytest.raises(RefusedError, match="holds the checkpoint"):
        _run_prune(source, "--zombies", "--out", str(source.parent), "--apply")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(RefusedError, match="not empty"):
        _run_prune(source, "--zombies", "--out", str(busy), "--apply")
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    assert _tree_hash(source) == before


def test_keys_file_from_expired_jsonl(checkpoint: Any, tmp_path: Path) -> None:
    """``statelens expired --jsonl`` lines, edited by hand, choose the keys; a dry run writes nothing."""
    source = checkpoint("pandas_state_event") / "checkpoint"
    code, text = _cli("expired", str(source), "--jsonl")
    assert code == 0
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    chosen = [d for d in lines if d["key"]["key"].startswith("leak")]
    assert chosen
    keys = tmp_path / "keys.jsonl"
    keys.write_text("".join(json.dumps(d) + "\n" for d in chosen))
    doc = _prune_json(str(source), "--keys", str(keys))
    assert sorted(k["key"] for k in dry_keys(doc)) == sorted({d["key"]["key"] for d in chosen})
    assert doc["written_files"] == [] and doc["proof"] is None
    code, text = _cli("prune", str(source), "--keys", str(keys))
    assert code == 0 and "Dry run: nothing written" in text


def _window_query(ctx: Any) -> Any:
    """A windowed count without a watermark: Spark never evicts its windows (state grows forever)."""
    from pyspark.sql import functions as F

    src = ctx.read_json_stream("in", "key STRING, ts_ms LONG", max_files=None)
    return (
        src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
        .groupBy(F.window("ts", "10 seconds"), "key")
        .count()
    )


def test_old_windows_of_an_unbounded_window_count(spark: Any, tmp_path: Path) -> None:
    """Windows Spark never evicts (no watermark) are removed with --where on the window end; after the
    restart a late row for a removed window counts from 1 and a kept window goes on counting."""
    from tests import oracle
    from tests.spark_checkpoints import Ctx, _ts, session_conf

    ctx = Ctx(name="windows", spark=spark, dir=tmp_path / "job")
    with session_conf(spark, {"spark.sql.shuffle.partitions": "2"}):
        for rows in ([("a", 1_000), ("b", 2_000)], [("a", 15_000), ("a", 16_000)], [("b", 41_000)]):
            ctx.write_json("in", [{"key": k, "ts_ms": _ts(t)} for k, t in rows])
            ctx.run(_window_query(ctx), mode="update", trigger="once")
    source = ctx.checkpoint
    before = _tree_hash(source)
    where = "key.window['end'] <= TIMESTAMP '2024-01-01 00:00:20'"
    target = tmp_path / "pruned" / "checkpoint"
    doc = _prune_json(str(source), "--where", where, "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and _tree_hash(source) == before
    removed = sorted((k["window"]["start"], k["key"]) for k in dry_keys(doc))
    assert removed == [
        ("2024-01-01T00:00:00.000000Z", "a"),
        ("2024-01-01T00:00:00.000000Z", "b"),
        ("2024-01-01T00:00:10.000000Z", "a"),
    ]
    last = doc["last_committed_batch"]
    state = oracle.read_state(spark, target, batch_id=last + 1)
    windows = {((r[1][0][0] - _ts(0) * 1000) // 1_000_000, r[1][1]): r[2][0] for r in state}  # start in us
    assert windows == {(40, "b"): 1}

    restart = Ctx(name="windows", spark=spark, dir=target.parent, _files=10)
    shutil.copytree(ctx.input_dir("in"), restart.input_dir("in"), dirs_exist_ok=True)
    _point_file_source(target, ctx.input_dir("in"), restart.input_dir("in"))
    with session_conf(spark, {"spark.sql.shuffle.partitions": "2"}):
        restart.write_json("in", [{"key": "a", "ts_ms": _ts(3_000)}, {"key": "b", "ts_ms": _ts(42_000)}])
        restart.run(_window_query(restart), mode="update", trigger="once")
    counts = {(r["window"]["start"][17:19], r["key"]): r["count"] for r in restart.output}
    assert {r["_batch"] for r in restart.output} == {last + 2}
    assert counts == {("00", "a"): 1, ("40", "b"): 2}


def _point_file_source(ckpt: Path, old_input: Path, new_input: Path) -> None:
    """Rewrite a copied checkpoint's file-source log from ``old_input`` to ``new_input`` (same names)."""
    for log in (ckpt / "sources" / "0").iterdir():
        if log.name.startswith("."):
            log.unlink()
            continue
        log.write_text(log.read_text().replace(old_input.as_uri(), new_input.as_uri()))


def _spark_sees_the_prune(spark: Any, source: Path, target: Path, doc: dict[str, Any]) -> None:
    """Spark's reader on the copy at the added batch: every store is the original minus the removed keys."""
    from tests import oracle

    last = doc["last_committed_batch"]
    for store in doc["stores"]:
        op, name = store["operator_id"], store["store_name"]
        side = {"left": "left", "right": "right"}.get(name.split("-", 1)[0]) if "-" in name else None
        if side is not None:  # Spark reads join stores by side
            continue
        original = oracle.read_state(spark, source, op, None, batch_id=last)
        pruned = oracle.read_state(spark, target, op, None, batch_id=last + 1)
        gone = store["removed_rows"]
        assert len(pruned) == len(original) - gone
        assert set(pruned) <= set(original)


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy", "lzf"])
def test_every_codec_is_written_as_spark_reads_it(
    codec: str, checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    """The removal delta is compressed in the store's codec; Spark's own reader decompresses it."""
    source = checkpoint("agg_count" if codec == "lz4" else f"codec_{codec}") / "checkpoint"
    target = tmp_path / "pruned"
    doc = _prune_json(str(source), "--where", "key.key IN ('a', 'b')", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["removed_rows"] == 2
    _spark_sees_the_prune(spark, source, target, doc)


@pytest.mark.parametrize("version", ["3.4.4", "3.5.5"])
@pytest.mark.parametrize("scenario", ["pandas_state_event", "rocks_pandas_state", "join"])
def test_checkpoints_of_older_spark(version: str, scenario: str, spark: Any, tmp_path: Path) -> None:
    """Checkpoints written by PySpark 3.4 and 3.5 (3.4's RocksDB zips, join state format 2)."""
    from tests.spark_versions import versioned_checkpoint

    source = versioned_checkpoint(version, scenario) / "checkpoint"
    before = _tree_hash(source)
    target = tmp_path / "pruned"
    if scenario == "join":  # rows of a join side live in two stores that must change together
        with pytest.raises(RefusedError, match="stream-stream join"):
            _run_prune(source, "--where", "true", "--out", str(target), "--apply")
        assert not target.exists() and _tree_hash(source) == before
        return
    doc = _prune_json(str(source), "--zombies", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["removed_rows"] > 0
    assert _tree_hash(source) == before
    _spark_sees_the_prune(spark, source, target, doc)


def test_python_api_prunes_what_expired_found(checkpoint: Any, spark: Any, tmp_path: Path) -> None:
    """In a notebook: findings from ``expired()`` feed ``prune(keys=...)``; the copy reads back."""
    import statelens

    source = checkpoint("pandas_state_event") / "checkpoint"
    with statelens.open(str(source)) as ckpt:
        findings = [f.to_json() for f in ckpt.expired().findings if f.category == "zombie"]
        dry = ckpt.prune(keys=findings)
        names = {v for f in findings for k, v in f["key"] if k == "key"}  # keys: ordered (name, value) pairs
        assert not dry.applied and dry.removed_rows == len(names)
        plan = ckpt.prune(keys=findings, out=str(tmp_path / "copy"), apply=True)
    assert plan.applied and plan.proof is not None and plan.proof.ok
    with statelens.open(str(tmp_path / "copy")) as copy:
        left = {r["key"]["key"] for r in copy.state().to_pylist()}
    assert left and not left & names
    _spark_sees_the_prune(spark, source, tmp_path / "copy", plan.to_json())


@pytest.mark.parametrize("scenario", ["checksum_window", "rocks_checksum_window"])
def test_row_checksums_are_written(scenario: str, checkpoint: Any, spark: Any, tmp_path: Path) -> None:
    """Stores whose rows carry CRC-32C checksums (Spark 4.3): each removed key is written with its CRC,
    which statelens' reader checks on the copy and Spark's reader accepts."""
    from tests import oracle

    source = checkpoint(scenario) / "checkpoint"
    target = tmp_path / "pruned"
    doc = _prune_json(str(source), "--where", "key.key = 'b'", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["removed_rows"] == 1
    last = doc["last_committed_batch"]
    assert [r[1][1] for r in oracle.read_state(spark, source, batch_id=last)] == ["b"]
    assert oracle.read_state(spark, target, batch_id=last + 1) == []
    # The written record really carries a checksum: drop it and statelens' reader names the mismatch.
    written = next(
        w["path"] for w in doc["written_files"] if w["path"].endswith(("/2/7.delta", "/2/7.changelog"))
    )
    from statelens.readers._format.codecs import compress, decompress

    raw = decompress((target / written).read_bytes(), written)
    flipped = bytearray(raw)
    flipped[4] ^= 0xFF  # first byte of the removed key's CRC
    (target / written).write_bytes(compress(bytes(flipped), "lz4"))
    for sidecar in target.rglob(f".{Path(written).name}.crc"):
        sidecar.unlink()
    import statelens
    from statelens.readers.errors import ChecksumError

    with statelens.open(str(target)) as copy, pytest.raises(ChecksumError, match="row checksum of record 0"):
        copy.state(version=last + 2, partition=2).to_arrow()


@pytest.fixture
def shared_spark_backend(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``statelens repartition`` runs in the test run's SparkSession instead of starting a second JVM."""
    import statelens.app.cli._common
    from statelens.readers.backends import BackendChooser

    monkeypatch.setattr(
        statelens.app.cli._common, "_backends", lambda args, ckpt: BackendChooser(ckpt, "spark", spark=spark)
    )
    return spark


def test_repartition_runs_spark_on_a_copy_and_proves_it(
    checkpoint: Any, shared_spark_backend: Any, tmp_path: Path
) -> None:
    """Spark's own repartition (4.2+) on a copy: the same rows over 3 partitions, the original untouched,
    and the query restarts on the copy and goes on counting."""
    from tests import oracle

    spark = shared_spark_backend
    source = checkpoint("rocks_agg_changelog") / "checkpoint"
    before = _tree_hash(source)
    code, text = _cli("repartition", str(source), "--partitions", "3")
    assert code == 0 and "Dry run: nothing written" in text
    target = tmp_path / "job" / "checkpoint"
    code, text = _cli(
        "repartition", str(source), "--partitions", "3", "--out", str(target), "--apply", "--json"
    )
    assert code == 0, text
    doc = json.loads(text)
    assert doc["proof"]["ok"] and doc["partitions_before"] == 2 and doc["partitions"] == 3
    assert _tree_hash(source) == before
    last = doc["last_committed_batch"]
    original = oracle.read_state(spark, source, batch_id=last)
    moved = oracle.read_state(spark, target, batch_id=last + 1)
    assert sorted(r[1:] for r in moved) == sorted(r[1:] for r in original)
    assert {r[0] for r in moved} == {0, 1, 2}
    code, text = _cli("doctor", str(target))
    assert code == 0, text  # the repartition is a note, not a partition-count error

    counts = {r[1][0]: r[2][0] for r in original}
    input_dir = checkpoint("rocks_agg_changelog") / "input" / "in"
    _move_file_source(target, input_dir, target.parent / "input" / "in")
    from tests.spark_checkpoints import _rocks_conf

    out = _restart_count(
        spark, target.parent, [["a", "zz"]], len(list(input_dir.iterdir())), _rocks_conf(changelog=True)
    )
    got = {r["key"]: r["count"] for r in out}
    assert min(r["_batch"] for r in out) == last + 2
    assert got == {"a": counts["a"] + 1, "zz": 1}


def test_repartition_refuses_what_spark_would_refuse(checkpoint: Any, tmp_path: Path) -> None:
    """HDFS stores (Spark's repartition leaves a half-written batch behind on them) and the same count
    are refused before anything is copied."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.repartition import iter_repartition
    from statelens.readers.checkpoint import open_checkpoint

    for scenario, partitions, reason in (
        ("agg_count", 4, "RocksDB stores only"),
        ("rocks_agg_changelog", 2, "already has 2 partitions"),
    ):
        target = tmp_path / scenario
        ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
        steps = iter_repartition(ckpt, partitions, str(target), apply=True, spark=lambda: None)
        with pytest.raises(RefusedError, match=reason):
            run_to_end(steps)
        assert not target.exists()


def test_copy_to_object_storage(checkpoint: Any, moto_endpoint: str, tmp_path: Path) -> None:
    """``--out s3://...``: the copy is put on S3 (moto on loopback), the proof reads it back from there; a
    prefix that already holds objects is refused before anything is written."""
    import statelens
    from statelens.app.analysis._common import run_to_end
    from statelens.app.prune import Selection, iter_prune
    from statelens.readers.checkpoint import open_checkpoint
    from tests.test_fs_concurrent import _client
    from tests.test_fs_s3 import options

    client = _client(moto_endpoint)
    client.create_bucket(Bucket="pruned")
    client.put_object(Bucket="pruned", Key="busy/notes.txt", Body=b"mine")
    source = checkpoint("pandas_state_event") / "checkpoint"
    before = _tree_hash(source)
    opts = options(moto_endpoint)
    ckpt = open_checkpoint(str(source))
    busy = iter_prune(ckpt, Selection(zombies=True), "s3://pruned/busy", apply=True, storage_options=opts)
    with pytest.raises(RefusedError, match="is not empty"):
        run_to_end(busy)
    assert [o["Key"] for o in client.list_objects_v2(Bucket="pruned")["Contents"]] == ["busy/notes.txt"]

    plan = run_to_end(
        iter_prune(ckpt, Selection(zombies=True), "s3://pruned/job", apply=True, storage_options=opts)
    )
    assert plan.proof is not None and plan.proof.ok and plan.proof.gone_rows == 6
    keys = {
        o["Key"] for o in client.list_objects_v2(Bucket="pruned", Prefix="job/", MaxKeys=1000)["Contents"]
    }
    assert {"job/offsets/7", "job/commits/7", "job/state/0/0/8.delta", "job/state/0/1/8.delta"} <= keys
    assert not any(k.endswith(".8.delta.crc") for k in keys)  # no Hadoop sidecars on object storage
    with statelens.open("s3://pruned/job", storage_options=opts) as copy:
        left = {r["key"]["key"] for r in copy.state(version=8).to_pylist()}
    assert left == {"live1"}
    assert _tree_hash(source) == before


def test_checkpoint_format_v2(checkpoint: Any, spark: Any, tmp_path: Path) -> None:
    """RocksDB with checkpoint format v2 (Spark 4.0+): the changelog is written as ``<v>_<id>.changelog``
    in format v3 with its lineage, the added commit names the new ids, and the query restarts on it."""
    from tests import oracle
    from tests.spark_checkpoints import _rocks_conf

    source = checkpoint("rocks_ckpt_v2") / "checkpoint"
    before = _tree_hash(source)
    target = tmp_path / "job" / "checkpoint"
    doc = _prune_json(str(source), "--where", "key.key IN ('a', 'b')", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["removed_rows"] == 2
    last = doc["last_committed_batch"]
    commit = json.loads((target / "commits" / str(last + 1)).read_text().split("\n", 1)[1])
    ids = [p[0] for p in commit["stateUniqueIds"]["0"]]
    assert [w["path"] for w in doc["written_files"] if w["path"].endswith(".changelog")] == [
        f"state/0/{pid}/{last + 2}_{uid}.changelog" for pid, uid in enumerate(ids)
    ]
    original = {r[1][0]: r[2][0] for r in oracle.read_state(spark, source, batch_id=last)}
    pruned = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target, batch_id=last + 1)}
    assert pruned == {k: v for k, v in original.items() if k not in ("a", "b")}
    input_dir = checkpoint("rocks_ckpt_v2") / "input" / "in"
    _move_file_source(target, input_dir, target.parent / "input" / "in")
    conf = _rocks_conf(changelog=True, min_deltas=2, checkpoint_v2=True)
    out = _restart_count(spark, target.parent, [["a", "c"]], len(list(input_dir.iterdir())), conf)
    assert {r["key"]: r["count"] for r in out} == {"a": 1, "c": original["c"] + 1}
    assert min(r["_batch"] for r in out) == last + 2
    assert _tree_hash(source) == before


# -- damaged sources: what the doctor finds in what the copy carries --------------------------------------
def _cli_all(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _damage_file(root: Path, rel: str, how: str) -> str:
    """Damage one real file of a checkpoint copy (``empty``, ``cut`` in half or ``flip`` its middle byte,
    with :func:`tests._mutations.mutate`) and drop its Hadoop ``.crc``; returns ``rel``."""
    from tests._mutations import mutate

    path = root / rel
    data = path.read_bytes()
    edit = {"empty": ("cut", 0, 0), "cut": ("cut", len(data) // 2, 0), "flip": ("flip", len(data) // 2, 0)}
    if how == "flip":
        edit["flip"] = ("flip", len(data) // 2, data[len(data) // 2] ^ 0xFF)
    path.write_bytes(mutate(data, [edit[how]]))
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    return rel


def _damaged_copy(checkpoint: Any, scenario: str, tmp_path: Path, damage: str) -> tuple[Path, str]:
    """A private copy of a cached scenario (``<version>/<name>`` for an older writer's) with one file
    damaged: ``<how>:<path>`` (see
    :func:`_damage_file`), or a state-file damage of tests/test_consistency.py (``truncate-latest-zip``)."""
    from tests.spark_versions import versioned_checkpoint
    from tests.test_consistency import _damage

    version, _, name = scenario.rpartition("/")  # "3.5.5/rocks_agg": written by that PySpark
    root = _copy_scenario(
        versioned_checkpoint(version, name) if version else checkpoint(name), tmp_path / "src"
    )
    if ":" in damage:
        how, rel = damage.split(":", 1)
        return root, _damage_file(root, rel, how)
    return root, _damage(root, damage)


#: Damage a restart of the copy loads: (scenario, damage, whether --force can carry it). The logs and the
#: metadata are copied as they are; prune itself reads the schema, the offsets of the last batch and the
#: state files of the last committed version, so those cannot be carried.
DAMAGE_LOADED = [
    ("agg_count", "empty:commits/1", True),
    ("agg_count", "cut:offsets/1", True),
    ("agg_count", "cut:metadata", True),
    ("rocks_agg", "cut:metadata", True),
    ("3.5.5/rocks_agg", "cut:metadata", True),
    ("agg_count", "cut:offsets/3", False),
    ("agg_count", "cut:state/0/0/_metadata/schema", False),
    ("rocks_agg_changelog", "cut:state/0/0/_metadata/schema", False),
    ("pandas_state_processing", "truncate-latest-delta", False),
    ("pandas_state_processing", "flip-latest-delta", False),
    ("agg_many_partitions", "cut:state/0/0/6.snapshot", False),
    ("agg_many_partitions", "flip:state/0/0/6.snapshot", False),
    ("rocks_agg", "truncate-latest-zip", False),
    ("rocks_agg", "flip-latest-zip", False),
    ("3.5.5/rocks_agg", "truncate-latest-zip", False),
    ("3.5.5/rocks_agg", "flip-latest-zip", False),
    ("rocks_agg_changelog", "truncate-latest-zip", False),
    ("rocks_pandas_state", "truncate-latest-changelog", False),
    ("rocks_pandas_state", "flip-latest-changelog", False),
]


@pytest.mark.parametrize(
    ("scenario", "damage", "forceable"), DAMAGE_LOADED, ids=[f"{s}-{d}" for s, d, _ in DAMAGE_LOADED]
)
def test_damage_a_restart_of_the_copy_loads_is_refused(
    scenario: str, damage: str, forceable: bool, checkpoint: Any, tmp_path: Path
) -> None:
    """statelens doctor reports an error in a file the copy carries and a restart of it loads: prune
    refuses (exit 2, nothing written, the file named, --force told); with --force the copy is written and
    its report and final line name what it carries, or, when prune must read the file itself, it still
    refuses and writes nothing."""
    source, bad = _damaged_copy(checkpoint, scenario, tmp_path, damage)
    # prune reads the last committed version itself, without auto snapshot repair: judged that way
    code, text, _ = _cli_all("doctor", str(source), "--json", "--conf", f"{REPAIR_ENABLED}=false")
    doctor = json.loads(text)
    assert code == 2 and any(bad in f["files"] for f in doctor["findings"] if f["severity"] == "error"), (
        doctor["findings"]
    )
    before = _tree_hash(source)
    target = tmp_path / "out" / "checkpoint"
    code, out, err = _cli_all("prune", str(source), "--where", "true", "--out", str(target), "--apply")
    assert code == 2 and out == "", out
    assert not target.exists()
    assert bad in err and "nothing written" in err.lower() and "--force" in err, err

    report = tmp_path / "prune.json"
    argv = ("prune", str(source), "--where", "true", "--out", str(target), "--apply", "--force")
    code, out, err = _cli_all(*argv, "--report", str(report))
    assert _tree_hash(source) == before
    if not forceable:
        assert code == 2 and bad in err and "--force" in err, err
        assert not target.exists() and not report.exists()
        return
    assert code == 0, err
    doc = json.loads(report.read_text())
    assert doc["applied"] and doc["forced"] and doc["proof"]["ok"]
    carried = [f for f in doc["findings"] if f["severity"] == "error"]
    assert doc["carried_errors"] == len(carried) > 0
    assert bad in {p for f in carried for p in f["files"]}
    assert (target / bad).read_bytes() == (source / bad).read_bytes()  # carried as it is
    last = out.strip().splitlines()[-1]
    assert last.startswith("Forced: the copy carries") and bad in last, out
    assert "Restart the same query" not in out
    assert f"error: {bad}" in out  # each carried error listed
    code, text = _cli("prune", str(source), "--where", "true", "--force", "--json")
    assert code == 0 and json.loads(text)["carried_errors"] == len(carried)  # the dry run's JSON too


def test_the_last_commit_emptied(checkpoint: Any, tmp_path: Path) -> None:
    """An emptied last commit: its batch reads as planned but not committed, and the refusal says the
    commit file cannot be read (with --force too); --drop-uncommitted leaves that batch and its files
    out, so the copy carries no error and the restart line is plain."""
    source, bad = _damaged_copy(checkpoint, "agg_count", tmp_path, "empty:commits/3")
    target = tmp_path / "out"
    for force in ((), ("--force",)):
        code, _, err = _cli_all(
            "prune", str(source), "--where", "true", "--out", str(target), "--apply", *force
        )
        assert code == 2 and "commits/3 cannot be read" in err and "--drop-uncommitted" in err, err
        assert not target.exists()
    code, out, err = _cli_all(
        "prune",
        str(source),
        "--where",
        "true",
        "--drop-uncommitted",
        "--out",
        str(target),
        "--apply",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["dropped_uncommitted_batches"] == [3] and doc["carried_errors"] == 0
    assert not any(bad in f["files"] for f in doc["findings"])
    assert (target / "commits" / "3").read_bytes() != b""  # batch 3 of the copy is the added one


#: Damage in files a restart of the copy does not load: the version it loads comes from a snapshot or zip
#: after them (or at the same version).
DAMAGE_NOT_LOADED = [
    ("agg_many_partitions", "cut:state/0/0/5.delta"),
    ("agg_many_partitions", "flip:state/0/0/3.snapshot"),
    ("rocks_agg", "cut:state/0/0/3.zip"),
    ("3.5.5/rocks_agg", "flip:state/0/0/4.zip"),
    ("rocks_agg_changelog", "truncate-latest-changelog"),
    ("rocks_agg_changelog", "cut:state/0/0/3.changelog"),
]


@pytest.mark.parametrize(
    ("scenario", "damage"), DAMAGE_NOT_LOADED, ids=[f"{s}-{d}" for s, d in DAMAGE_NOT_LOADED]
)
def test_damage_a_restart_does_not_load_does_not_block(
    scenario: str, damage: str, checkpoint: Any, tmp_path: Path
) -> None:
    """An older delta, snapshot, zip or changelog is damaged (statelens doctor names it), but the version
    the new one is built on loads without it: prune writes the copy, its proof holds, no error is carried
    and it says plainly to restart on NEW."""
    source, bad = _damaged_copy(checkpoint, scenario, tmp_path, damage)
    code, text, _ = _cli_all("doctor", str(source), "--json")
    assert code >= 1 and any(bad in f["files"] for f in json.loads(text)["findings"]), text
    target = tmp_path / "out"
    code, out, err = _cli_all(
        "prune", str(source), "--where", "key.key = 'a'", "--out", str(target), "--apply"
    )
    assert code == 0, err
    assert out.strip().splitlines()[-1].startswith(f"Restart the same query on {target}")
    assert "Proof: read back" in out and "error:" not in out


def _restart_loads(root: Path) -> set[str]:
    """What a restart of a copy built on the last committed batch loads, by Spark's rules (not statelens'):
    the logs and the metadata, the schema files, and per partition folder the newest snapshot or zip at
    or below version ``last commit + 1`` and the deltas or changelogs after it."""
    last = max(int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit())
    out = {"metadata"}
    out |= {p.relative_to(root).as_posix() for log in ("offsets", "commits") for p in (root / log).iterdir()}
    out |= {p.relative_to(root).as_posix() for p in root.rglob("_metadata/schema")}
    for folder in {p.parent for p in root.glob("state/*/*/*") if p.suffix in (".delta", ".zip")}:
        versions = {p.name: int(p.stem) for p in folder.iterdir() if p.stem.isdigit()}
        full, step = (
            (".snapshot", ".delta") if any(n.endswith(".delta") for n in versions) else (".zip", ".changelog")
        )
        base = max((v for n, v in versions.items() if n.endswith(full) and v <= last + 1), default=0)
        chain = ([f"{base}{full}"] if base else []) + [f"{v}{step}" for v in range(base + 1, last + 2)]
        out |= {(folder / n).relative_to(root).as_posix() for n in chain if n in versions}
    return out


#: The real files each scenario's copies damage: every log and the metadata of one, the schema and
#: every state file of partition 0 (deltas and snapshots; zips and changelogs) of all.
RED_TEAM = {
    "agg_count": ("metadata", "offsets/*", "commits/*", "state/0/0/_metadata/schema", "state/0/0/*.delta"),
    "agg_many_partitions": ("state/0/0/*.delta", "state/0/0/*.snapshot"),
    "rocks_agg_changelog": ("state/0/0/_metadata/schema", "state/0/0/*.zip", "state/0/0/*.changelog"),
}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(RED_TEAM))
def test_every_damaged_copy_the_doctor_faults_is_refused(
    scenario: str, checkpoint: Any, tmp_path: Path
) -> None:
    """Red team: every file above (not the ``.crc`` sidecars) emptied, cut in half or with its middle byte
    flipped, one copy each.
    Wherever statelens doctor reports an error in a file a restart of the copy loads, prune refuses (exit
    2, the target never made, a faulted file named); wherever it does not, prune writes the copy with a
    proof that holds."""
    clean = checkpoint(scenario) / "checkpoint"
    files = sorted(
        p.relative_to(clean).as_posix()
        for pattern in RED_TEAM[scenario]
        for p in clean.glob(pattern)
        if p.is_file() and not p.name.startswith(".")
    )
    refused = written = 0
    for n, (rel, how) in enumerate((rel, how) for rel in files for how in ("empty", "cut", "flip")):
        root = _copy_scenario(clean.parent, tmp_path / str(n))
        _damage_file(root, rel, how)
        code, text, _ = _cli_all("doctor", str(root), "--json")
        loads = _restart_loads(root)
        faulted = {  # an error, or a snapshot only auto snapshot repair gets past: prune reads it itself
            p
            for f in json.loads(text)["findings"]
            if f["severity"] == "error" or f["check"] == "restart_snapshot_repair"
            for p in f["files"]
            if p in loads
        }
        target = tmp_path / f"out{n}"
        code, out, err = _cli_all("prune", str(root), "--where", "true", "--out", str(target), "--apply")
        if faulted:
            assert code == 2 and not target.exists(), (rel, how, faulted, out)
            assert any(p in err for p in faulted), (rel, how, faulted, err)
            refused += 1
        else:
            assert code == 0 and "Proof: read back" in out, (rel, how, err)
            written += 1
        shutil.rmtree(tmp_path / str(n))
        shutil.rmtree(target, ignore_errors=True)
    # agg_count: every file damaged is one a restart loads; the others hold older versions it does not.
    assert refused + written == 3 * len(files) and refused >= 6, (refused, written)
    assert written == 0 if scenario == "agg_count" else written >= 6, (refused, written)

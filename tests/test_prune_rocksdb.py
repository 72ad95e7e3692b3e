"""statelens prune on RocksDB stores without changelog checkpointing: a new zip and SSTs Spark loads.

Spark's default RocksDB store (and every Spark 3.4 one) keeps each version as ``<v>.zip`` plus shared
``SSTs/`` files, so the added version is a RocksDB checkpoint written as ``RocksDBFileManager`` writes
one (docs/format.md §4.7). Each case prunes a checkpoint written by PySpark into a new folder, then
asks Spark: its ``statestore`` reader (tests/oracle.py, no statelens code) shows the removed keys gone
and every other row equal to the original's, and the same query restarted on the copy with the same
RocksDB configuration continues from the kept counts while a removed key starts over. The original
checkpoint's files are hashed before and after.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.test_prune import (
    _RESTART,
    _copy_scenario,
    _move_file_source,
    _prune_json,
    _restart_count,
    _tree_hash,
    dry_keys,
)

pytestmark = pytest.mark.spark


def _zip_metadata(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        text = zf.read("metadata").decode("utf-8")
    version, _, doc = text.partition("\n")
    assert version == "v1"
    return json.loads(doc)  # type: ignore[no-any-return]


def _check_written_versions(source: Path, target: Path, doc: dict[str, Any]) -> None:
    """Every partition of every store gained ``<new>.zip`` naming the SSTs its base version named (same
    names and sizes) plus the SSTs prune wrote; the written files are all that is new in the copy."""
    base, new = doc["base_version"], doc["new_version"]
    written = {w["path"] for w in doc["written_files"]}
    zips = sorted(target.glob(f"state/*/*/{new}.zip"))  # default stores: state/<op>/<partition>
    assert zips and {z.relative_to(target).as_posix() for z in zips} <= written
    assert not list(target.rglob(f"{new}.changelog"))
    removed_in = {
        (s["operator_id"], p["partition"])
        for s in doc["stores"]
        for p in s["partitions"]
        if p["removed_rows"]
    }
    for z in zips:
        folder = z.parent
        old = _zip_metadata(source / folder.relative_to(target) / f"{base}.zip")
        meta = _zip_metadata(z)
        old_ssts = {f["dfsSstFileName"]: (f["localFileName"], f["sizeBytes"]) for f in old["sstFiles"]}
        new_ssts = {f["dfsSstFileName"]: (f["localFileName"], f["sizeBytes"]) for f in meta["sstFiles"]}
        added = set(new_ssts) - set(old_ssts)
        assert {n for n in new_ssts if n in old_ssts} == set(old_ssts)  # nothing rewritten or dropped
        assert all(new_ssts[n] == old_ssts[n] for n in old_ssts)
        for name in added:  # uploaded under a new name, as written by prune, with the recorded size
            rel = (folder / "SSTs" / name).relative_to(target).as_posix()
            assert rel in written and (folder / "SSTs" / name).stat().st_size == new_ssts[name][1]
            assert not (source / rel).exists()
        key = (int(folder.parent.name), int(folder.name))
        if key in removed_in:
            assert len(added) == 1  # one flush of the deletions
        if "numKeys" in old and old["numKeys"] >= 0:
            removed = sum(
                p["removed_rows"]
                for s in doc["stores"]
                for p in s["partitions"]
                if (s["operator_id"], p["partition"]) == key
            )
            assert meta["numKeys"] == old["numKeys"] - removed


def _restart_count_rocksdb(spark: Any, root: Path, batches: list[list[str]], first_file: int) -> list[Any]:
    """The aggregation scenarios' query restarted with RocksDB and no changelog checkpointing."""
    from tests.spark_checkpoints import _rocks_conf

    return _restart_count(spark, root, batches, first_file, _rocks_conf(changelog=False))


def test_rocksdb_without_changelog_pruned_and_restarted(checkpoint: Any, spark: Any, tmp_path: Path) -> None:
    from tests import oracle

    scenario = checkpoint("rocks_agg")
    source = scenario / "checkpoint"
    before = _tree_hash(source)
    target = tmp_path / "pruned" / "checkpoint"
    doc = _prune_json(str(source), "--where", "key.key IN ('a','b')", "--out", str(target), "--apply")
    assert doc["applied"] and doc["proof"]["ok"], doc["proof"]
    assert sorted(k["key"] for k in dry_keys(doc)) == ["a", "b"]
    assert _tree_hash(source) == before, "prune wrote into the source checkpoint"
    _check_written_versions(source, target, doc)

    # Spark's own reader loads the new zip: the original minus a and b, every other count equal.
    last = doc["last_committed_batch"]
    original = {r[1][0]: r[2][0] for r in oracle.read_state(spark, source, batch_id=last)}
    pruned = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target, batch_id=last + 1)}
    assert {"a", "b"} <= set(original)
    assert pruned == {k: v for k, v in original.items() if k not in ("a", "b")}

    # Restart the same query on the copy: two batches, each loading the version before (the first one
    # the zip prune wrote, the second one the zip Spark wrote on top of it).
    _move_file_source(target, scenario / "input" / "in", target.parent / "input" / "in")
    out = _restart_count_rocksdb(spark, target.parent, [["a", "c", "z"], ["a", "b", "c"]], first_file=5)
    assert sorted({r["_batch"] for r in out}) == [last + 2, last + 3]
    counts = {(r["_batch"], r["key"]): r["count"] for r in out}
    assert counts == {
        (last + 2, "a"): 1,  # removed: starts over
        (last + 2, "c"): original["c"] + 1,  # kept: goes on
        (last + 2, "z"): 1,
        (last + 3, "a"): 2,
        (last + 3, "b"): 1,
        (last + 3, "c"): original["c"] + 2,
    }
    for part in ("0", "1"):  # the restart ran on RocksDB without changelogs: a zip per new version
        folder = target / "state" / "0" / part
        assert {z.name for z in folder.glob("*.zip")} >= {f"{v}.zip" for v in range(last + 2, last + 5)}
        assert not list(folder.glob("*.changelog"))
    final = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target)}
    assert final == {**pruned, "a": 2, "b": 1, "c": original["c"] + 2, "z": 1}
    assert _tree_hash(source) == before


#: Restart of the ``rocks_pandas_state`` query (tests/test_prune.py ``_restart_pandas_state``) run by the
#: PySpark of an older writer venv, RocksDB without changelogs; prints the query's output as JSON.
_RESTART_IN_WRITER = """
import json, sys
from pathlib import Path
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from tests.spark_checkpoints import (
    _PANDAS_OUTPUT_SCHEMA, _PANDAS_STATE_SCHEMA, Ctx, _make_pandas_state_func, _rocks_conf, _ts,
    session_conf, spark_session,
)
spark = spark_session()
ctx = Ctx(name="restart", spark=spark, dir=Path(sys.argv[1]))
func = _make_pandas_state_func(event_time=True, timeout_ms=5_000)
with session_conf(spark, {"spark.sql.shuffle.partitions": "2", **_rocks_conf(changelog=False)}):
    for i, rows in enumerate(json.loads(sys.argv[2])):
        ctx.write_json(
            "restart",
            [{"key": k, "ts_ms": _ts(t), "v": float(j), "tag": f"r{i}-{k}"} for j, (k, t) in enumerate(rows)],
        )
        src = ctx.read_json_stream("restart", "key STRING, ts_ms LONG, v DOUBLE, tag STRING")
        df = (
            src.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "10 seconds")
            .groupBy("key")
            .applyInPandasWithState(
                func, _PANDAS_OUTPUT_SCHEMA, _PANDAS_STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
            )
        )
        ctx.run(df, mode="append", trigger="once")
print(json.dumps(ctx.output))
"""


#: Restart of the aggregation scenarios' count (tests/test_prune.py ``_restart_count``) run by the PySpark
#: of an older writer venv, RocksDB without changelogs; the new input files come after the ``argv[3]`` old
#: ones.
_RESTART_COUNT_IN_WRITER = """
import json, sys
from pathlib import Path
from tests.spark_checkpoints import Ctx, _rocks_conf, session_conf, spark_session
spark = spark_session()
ctx = Ctx(name="restart", spark=spark, dir=Path(sys.argv[1]), _files=int(sys.argv[3]))
with session_conf(spark, {"spark.sql.shuffle.partitions": "2", **_rocks_conf(changelog=False)}):
    for i, keys in enumerate(json.loads(sys.argv[2])):
        ctx.write_json("in", [{"key": k, "value": 1000 + i} for k in keys])
        df = ctx.read_json_stream("in", "key STRING, value LONG", max_files=None).groupBy("key").count()
        ctx.run(df, mode="update", trigger="once")
print(json.dumps(ctx.output))
"""


def _restart_in_writer(
    version: str, root: Path, batches: list[Any], script: str = _RESTART_IN_WRITER, *extra: str
) -> list[dict[str, Any]]:
    import os
    import subprocess

    from tests.spark_checkpoints import REPO
    from tests.spark_versions import writer_python

    python = str(writer_python(version))
    env = {**os.environ, "TZ": "UTC", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
    env.pop("SPARK_HOME", None)
    proc = subprocess.run(
        [python, "-c", script, str(root), json.dumps(batches), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_spark_34_rocksdb_zips_pruned_and_restarted_by_spark_34(spark: Any, tmp_path: Path) -> None:
    """Spark 3.4 keeps a zip per version (RocksDB 7.9.2 files): the zombies are removed in a new zip that
    Spark 4.3's reader loads, and that Spark 3.4 itself (its RocksDB 7.9.2 reading the MANIFEST written by
    rocksdict's RocksDB) restarts from without calling the state function for the removed keys."""
    from tests import oracle
    from tests.spark_versions import versioned_checkpoint

    source = versioned_checkpoint("3.4.4", "rocks_pandas_state") / "checkpoint"
    assert not list(source.rglob("*.changelog"))
    before = _tree_hash(source)
    target = tmp_path / "pruned" / "checkpoint"
    doc = _prune_json(str(source), "--zombies", "--out", str(target), "--apply")
    assert doc["proof"]["ok"], doc["proof"]
    assert doc["removed_rows"] > 0 and _tree_hash(source) == before
    _check_written_versions(source, target, doc)
    removed = {k["key"] for k in dry_keys(doc)}
    last = doc["last_committed_batch"]
    original = oracle.read_state(spark, source, batch_id=last)
    pruned = oracle.read_state(spark, target, batch_id=last + 1)
    assert removed <= {r[1][0] for r in original}
    assert pruned == [r for r in original if r[1][0] not in removed]

    out = _restart_in_writer("3.4.4", target.parent, _RESTART)
    assert {r["_batch"] for r in out} == {last + 2, last + 3}
    assert "live1" in {r["key"] for r in out}
    assert not {r["key"] for r in out} & removed  # leaked keys are gone: no timeout fires for them
    # Control: the same restart on an unpruned copy still calls the state function for leaked keys.
    control = _copy_scenario(source.parent, tmp_path / "control")
    leaked_calls = {r["key"] for r in _restart_in_writer("3.4.4", control.parent, _RESTART)}
    assert leaked_calls & removed
    assert _tree_hash(source) == before


def test_spark_35_rocksdb_zips_pruned_and_restarted_by_spark_35(spark: Any, tmp_path: Path) -> None:
    """Spark 3.5 without changelog checkpointing (its default) keeps a zip per version (RocksDB 8): keys
    removed in a new zip are gone for Spark 4.3's reader, and Spark 3.5 itself restarts from it, counting
    a removed key from 1 and a kept one on from its count."""
    from tests import oracle
    from tests.spark_versions import versioned_checkpoint

    folder = versioned_checkpoint("3.5.5", "rocks_agg")
    assert json.loads((folder / "expected.json").read_text())["spark_version"] == "3.5.5"
    source = folder / "checkpoint"
    assert not list(source.rglob("*.changelog"))
    before = _tree_hash(source)
    target = tmp_path / "pruned" / "checkpoint"
    doc = _prune_json(str(source), "--where", "key.key IN ('a','b')", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["findings"] == [] and not doc["forced"], doc
    assert sorted(k["key"] for k in dry_keys(doc)) == ["a", "b"] and _tree_hash(source) == before
    _check_written_versions(source, target, doc)
    last = doc["last_committed_batch"]
    original = {r[1][0]: r[2][0] for r in oracle.read_state(spark, source, batch_id=last)}
    pruned = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target, batch_id=last + 1)}
    assert {"a", "b", "c"} <= set(original)
    assert pruned == {k: v for k, v in original.items() if k not in ("a", "b")}

    _move_file_source(target, folder / "input" / "in", target.parent / "input" / "in")
    first = str(len(list((folder / "input" / "in").iterdir())))
    out = _restart_in_writer("3.5.5", target.parent, [["a", "c", "z"]], _RESTART_COUNT_IN_WRITER, first)
    assert {(r["_batch"], r["key"], r["count"]) for r in out} == {
        (last + 2, "a", 1),  # removed: starts over
        (last + 2, "c", original["c"] + 1),  # kept: goes on
        (last + 2, "z", 1),
    }
    for part in ("0", "1"):  # Spark 3.5 loaded the zip prune wrote and wrote the next one beside it
        assert (target / "state" / "0" / part / f"{last + 3}.zip").is_file()
    assert not list(target.rglob("*.changelog")) and _tree_hash(source) == before


def test_zip_of_a_newer_rocksdb_is_refused_before_writing(checkpoint: Any, tmp_path: Path) -> None:
    """A zip whose OPTIONS name a RocksDB newer than the one rocksdict bundles is refused (the copy of a
    real zip with its version line raised): rocksdict would rewrite what it may not understand."""
    from statelens.readers.errors import RefusedError
    from statelens.readers.rewrite import bundled_rocksdb_version
    from tests.test_prune import _run_prune

    source = _copy_scenario(checkpoint("rocks_agg"), tmp_path / "src")
    last_zip = max((source / "state" / "0" / "1").glob("*.zip"), key=lambda p: int(p.stem))
    with zipfile.ZipFile(last_zip) as zf:
        entries = {i.filename: zf.read(i) for i in zf.infolist()}
    (options,) = [n for n in entries if n.startswith("OPTIONS-")]
    newer = f"rocksdb_version={bundled_rocksdb_version()[0] + 1}.0.0".encode()
    text = entries[options]
    start = text.index(b"rocksdb_version=")
    entries[options] = text[:start] + newer + text[text.index(b"\n", start) :]
    (last_zip.parent / f".{last_zip.name}.crc").unlink()
    with zipfile.ZipFile(last_zip, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    target = tmp_path / "out"
    with pytest.raises(
        RefusedError, match=r"partition 1 .*written by RocksDB \d+\.0\.0, newer than the RocksDB"
    ):
        _run_prune(source, "--where", "true", "--out", str(target), "--apply")
    assert not target.exists()


def test_row_checksums_without_changelog(spark: Any, tmp_path: Path) -> None:
    """With row checksums (Spark 4.3) RocksDB values carry a CRC but keys do not: the zip prune writes
    deletes the plain keys, Spark's reader (which verifies every value's CRC) sees them gone, and a
    restart counts a removed key from 1."""
    import shutil

    from tests import oracle
    from tests.spark_checkpoints import Ctx, _rocks_conf, session_conf
    from tests.test_prune import _point_file_source

    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.rowChecksum.enabled": "true",
        **_rocks_conf(changelog=False),
    }

    def run(ctx: Ctx, keys: list[str]) -> None:
        with session_conf(spark, conf):
            ctx.write_json("in", [{"key": k, "value": 1} for k in keys])
            df = ctx.read_json_stream("in", "key STRING, value LONG", max_files=None).groupBy("key").count()
            ctx.run(df, mode="update", trigger="once")

    job = Ctx(name="checksums", spark=spark, dir=tmp_path / "job")
    for keys in (["a", "b", "c"], ["a", "d"]):
        run(job, keys)
    source = job.checkpoint
    assert (
        '"spark.sql.streaming.stateStore.rowChecksum.enabled":"true"'
        in (source / "offsets" / "1").read_text()
    )
    assert not list(source.rglob("*.changelog"))
    before = _tree_hash(source)
    target = tmp_path / "pruned" / "checkpoint"
    doc = _prune_json(str(source), "--where", "key.key IN ('a', 'd')", "--out", str(target), "--apply")
    assert doc["proof"]["ok"] and doc["removed_rows"] == 2 and _tree_hash(source) == before
    _check_written_versions(source, target, doc)
    last = doc["last_committed_batch"]
    assert {r[1][0]: r[2][0] for r in oracle.read_state(spark, target, batch_id=last + 1)} == {"b": 1, "c": 1}

    restart = Ctx(name="checksums", spark=spark, dir=target.parent, _files=2)
    shutil.copytree(job.input_dir("in"), restart.input_dir("in"), dirs_exist_ok=True)
    _point_file_source(target, job.input_dir("in"), restart.input_dir("in"))
    run(restart, ["a", "b"])
    assert {(r["_batch"], r["key"], r["count"]) for r in restart.output} == {
        (last + 2, "a", 1),
        (last + 2, "b", 2),
    }
    final = {r[1][0]: r[2][0] for r in oracle.read_state(spark, target)}
    assert final == {"a": 1, "b": 2, "c": 1}

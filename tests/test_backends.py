"""The twin backends each give Spark's answers: native decoder and Spark backend vs Spark's own readers.

One suite, both backends compared with :mod:`tests.oracle` (Spark's state data sources turned into plain
Python by test code): rows at sampled committed versions, change records and growth (rows per partition
per version) on real checkpoints, state variables and join families read as stores; plus the backend
chooser and the "Spark is missing" messages.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.readers.backends import BackendChooser
from statelens.readers.backends.native import NativeBackend
from statelens.readers.backends.spark import SparkBackend, check_spark_available, parse_spark_defaults
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import BackendUnavailableError, UsageError
from tests import oracle

SCENARIOS = [
    "agg_count",
    "window_agg_watermark",
    "join",
    "pandas_state_processing",
    "rich_types",
    "agg_many_partitions",
    # RocksDB with changelogs (Spark's change feed needs them), checkpoint format v1 and v2
    "rocks_agg_changelog",
    "rocks_pandas_state",
    "rocks_ckpt_v2",
    "rocks_join",
]

#: statelens' change kinds as Spark's change feed names them.
SPARK_CHANGE = {"put": "update", "remove": "delete"}


def _backends(ckpt: Any, spark: Any) -> list[Any]:
    return [NativeBackend(ckpt), SparkBackend(ckpt, spark=spark)]


def _stores(spark: Any, root: Path) -> list[tuple[int, str]]:
    """``(operator, store)`` of every store, as Spark's ``state-metadata`` lists them."""
    return [(m["operatorId"], m["stateStoreName"]) for m in oracle.read_state_metadata(spark, root)]


def _canonical_rows(rows: Any, types: tuple[Any, Any]) -> Counter:
    return Counter(
        (p, repr(oracle.canonical(k, types[0])), repr(oracle.canonical(v, types[1]))) for p, k, v in rows
    )


def _canonical_changes(changes: Any, types: tuple[Any, Any]) -> Counter:
    return Counter(
        (b, t, p, repr(oracle.canonical(k, types[0])), repr(oracle.canonical(v, types[1])))
        for b, t, p, k, v in changes
    )


@pytest.mark.spark
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rows_and_changes_are_sparks(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    committed = oracle.committed_batches(root)
    stores = _stores(spark, root)
    assert sorted((op.operator_id, s.store_name) for op in ckpt.operators for s in op.stores) == sorted(
        stores
    )
    batches = sorted({committed[0], committed[len(committed) // 2], committed[-1]})
    compared = 0
    for op_id, store in stores:
        types = oracle.state_types(spark, root, op_id, store)
        feed = oracle.read_change_feed(spark, root, op_id, store, 0, committed[-1])
        for batch in batches:
            want = oracle.read_state(spark, root, op_id, store, batch_id=batch)
            for backend in _backends(ckpt, spark):
                got = [(r.partition_id, r.key, r.value) for r in backend.read_rows(op_id, store, batch + 1)]
                assert _canonical_rows(got, types) == _canonical_rows(want, types), (
                    backend.name,
                    store,
                    batch,
                )
            compared += len(want)
        for backend in _backends(ckpt, spark):
            got_changes = [
                (c.version - 1, SPARK_CHANGE[c.change], c.partition_id, c.key, c.value)
                for c in backend.read_changes(op_id, store, 1, committed[-1] + 1)
            ]
            assert _canonical_changes(got_changes, types) == _canonical_changes(feed, types), (
                backend.name,
                store,
            )
        assert feed, store
        compared += len(feed)
    assert compared > 0 and len(stores) == (4 if "join" in scenario else 1)


def _on_disk_bytes(root: Path, op_id: int, store: str) -> dict[tuple[int, int], int]:
    """Bytes of the files each partition's version is written in (HDFS ``v.delta``/``v.snapshot``,
    RocksDB ``v[_id].changelog``/``v[_id].zip``), summed from the folder listing."""
    out: dict[tuple[int, int], int] = {}
    for pdir in (root / "state" / str(op_id)).iterdir():
        if not pdir.name.isdigit():
            continue
        folder = pdir if store == "default" else pdir / store
        for f in folder.iterdir() if folder.is_dir() else []:
            stem, _, ext = f.name.partition(".")
            version = stem.split("_")[0]
            if ext in ("delta", "snapshot", "changelog", "zip") and version.isdigit():
                key = (int(pdir.name), int(version))
                out[key] = out.get(key, 0) + f.stat().st_size
    return out


@pytest.mark.spark
@pytest.mark.parametrize(
    "scenario",
    [
        "agg_many_partitions",
        "window_agg_watermark",
        "dedup_watermark",
        "join",
        "pandas_state_event",
        "rocks_agg_changelog",
        "rocks_dedup_changelog",
        "rocks_ckpt_v2",
    ],
)
def test_growth_is_sparks_row_count_at_every_version(scenario: str, checkpoint: Any, spark: Any) -> None:
    """Rows per partition per committed version, each backend's (the Spark backend's from its change
    feed in one job) against Spark counting each version's ``statestore`` rows; bytes from the listing."""
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    committed = oracle.committed_batches(root)
    metadata = oracle.read_state_metadata(spark, root)
    for m in metadata:
        op_id, store = m["operatorId"], m["stateStoreName"]
        counts = oracle.row_counts(spark, root, op_id, store, committed)
        sizes = _on_disk_bytes(root, op_id, store)
        want = {
            (pid, b + 1): (counts.get((pid, b), 0), sizes.get((pid, b + 1), 0))
            for pid in range(m["numPartitions"])
            for b in committed
        }
        assert sum(n for n, _ in want.values()) > 0, store
        for backend in _backends(ckpt, spark):
            got = {
                (s.partition_id, s.version): (s.rows, s.bytes)
                for s in backend.iter_stats(op_id, store)
                if s.version - 1 in committed
            }
            assert got == want, (backend.name, store)
            if backend.name == "spark":
                assert backend.notes == ["growth computed from Spark's change feed in one job"]


@pytest.mark.spark
def test_spark_refuses_uncommitted_versions_native_shows_them(checkpoint: Any, spark: Any) -> None:
    folder = checkpoint("uncommitted")
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    (batch,) = ckpt.uncommitted_batches()
    with pytest.raises(UsageError, match="only committed versions"):
        SparkBackend(ckpt, spark=spark).read_rows(0, "default", batch + 1)
    assert NativeBackend(ckpt).read_rows(0, "default", batch + 1)


@pytest.mark.spark
def test_auto_uses_native_when_it_can_and_describes_it(checkpoint: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint("agg_count") / "checkpoint"))
    chooser = BackendChooser(ckpt, "auto")
    assert chooser.for_store(0, "default").name == "native"
    assert chooser.describe() == "native decoder"
    assert BackendChooser(ckpt, "spark").for_store(0).name == "spark"
    with pytest.raises(UsageError, match="unknown backend"):
        BackendChooser(ckpt, "hadoop")


@pytest.mark.spark
def test_auto_reads_rocksdb_and_column_family_stores_natively(checkpoint: Any) -> None:
    for scenario in ("rocks_agg", "rocks_agg_changelog", "rocks_ckpt_v2"):
        ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
        assert BackendChooser(ckpt, "auto").for_store(0, "default").name == "native", scenario
    for scenario in ("rocks_tws", "rocks_tws_avro", "rocks_join_v4"):
        ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
        for store in ckpt.operators[0].stores:
            assert NativeBackend(ckpt).can_read(0, store.store_name), (scenario, store.store_name)
            assert BackendChooser(ckpt, "auto").for_store(0, store.store_name).name == "native"


@pytest.mark.spark
def test_state_variables_and_join_families_read_as_stores_are_sparks(checkpoint: Any, spark: Any) -> None:
    """A transformWithState variable or a format-4 join family, as a store: both backends' rows, row
    counts and changes are what Spark's reader shows (``stateVarName``, ``storeName``)."""
    compared = 0
    for scenario, stores in (
        ("rocks_tws", ("cnt", "lst", "mp")),
        ("rocks_join_v4", ("left-keyWithTsToValues", "right-tsWithKey")),
    ):
        root = checkpoint(scenario) / "checkpoint"
        ckpt = open_checkpoint(str(root))
        last = oracle.committed_batches(root)[-1]
        reads = oracle.Reads(spark, root, 0) if scenario == "rocks_tws" else None
        for store in stores:
            if reads is not None:  # state variables: Spark's entries, changes shaped as the product's
                want = oracle.read_family(reads, store, last)
                feed = [
                    (b, t, p, k if u is None else (k, u), v)
                    for b, t, p, k, v, u in oracle.read_state_variable_changes(spark, root, 0, store, 0, last)
                ]
            else:
                want = oracle.read_state(spark, root, 0, store, batch_id=last)
                feed = oracle.read_change_feed(spark, root, 0, store, 0, last)
            assert want and feed, (scenario, store)
            for backend in _backends(ckpt, spark):
                got = [(r.partition_id, r.key, r.value) for r in backend.read_rows(0, store, last + 1)]
                assert _canonical(got) == _canonical(want), (backend.name, scenario, store)
                counts = {
                    s.partition_id: s.rows for s in backend.iter_stats(0, store) if s.version == last + 1
                }
                assert sum(counts.values()) == len(want), (backend.name, scenario, store)
                changes = [
                    (c.version - 1, SPARK_CHANGE.get(c.change, c.change), c.partition_id, c.key, c.value)
                    for c in backend.read_changes(0, store, 1, last + 1)
                ]
                assert _canonical(changes) == _canonical(feed), (backend.name, scenario, store)
            compared += len(want) + len(feed)
    assert compared > 0


def _canonical(rows: Any) -> list[str]:
    """Rows as sorted reprs of their canonical form (NaN equal to NaN; maps are not involved here)."""
    return sorted(repr(oracle.canonical(tuple(r))) for r in rows)


def test_missing_java_is_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BackendUnavailableError, match="no Java runtime found"):
        check_spark_available()


def test_spark_defaults_file(tmp_path: Any) -> None:
    f = tmp_path / "spark-defaults.conf"
    f.write_text("# S3A\nspark.hadoop.fs.s3a.endpoint   http://127.0.0.1:9000\nspark.executor.memory=2g\n\n")
    assert parse_spark_defaults(f) == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.executor.memory": "2g",
    }


@pytest.mark.spark
def test_spark_backend_leaves_the_checkpoint_untouched(checkpoint: Any, spark: Any, tmp_path: Any) -> None:
    """Spark's readers and the native ones alike: byte-for-byte and listing-for-listing unchanged."""
    import shutil

    from tests.test_cli import tree_digest

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("join") / "checkpoint", root)
    before = tree_digest(root)
    ckpt = open_checkpoint(str(root))
    sparkb = SparkBackend(ckpt, spark=spark)
    for store in ckpt.operators[0].stores:
        last = sparkb.latest_version(0, store.store_name)
        sparkb.read_rows(0, store.store_name, last)
        sparkb.read_changes(0, store.store_name, 1, last)
        list(sparkb.iter_stats(0, store.store_name))
    sparkb.state_metadata()
    assert tree_digest(root) == before


@pytest.mark.spark
def test_reading_a_v2_checkpoint_leaves_the_shared_session_as_it_was(checkpoint: Any, spark: Any) -> None:
    """Regression: a leaked checkpointFormatVersion=2 made later HDFS queries and reads fail
    (STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED) on a session shared with the backend."""
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    assert spark.conf.get(key, None) is None
    v2 = open_checkpoint(str(checkpoint("rocks_ckpt_v2") / "checkpoint"))
    SparkBackend(v2, spark=spark).read_rows(0, "default", SparkBackend(v2, spark=spark).latest_version(0))
    assert spark.conf.get(key, None) is None
    v1 = open_checkpoint(str(checkpoint("agg_count") / "checkpoint"))
    assert SparkBackend(v1, spark=spark).read_rows(0, "default", 1)


def test_consumers_reach_state_only_through_a_backend() -> None:
    """The import contract (pyproject's import-linter) keeps store-reader modules out of the app; this keeps
    their handles out too: no module of the app or the viewers asks the checkpoint for a store reader, and
    both backends answer the one protocol."""
    import ast

    from statelens.readers.backends import NativeBackend, StateBackend
    from statelens.readers.backends.spark import SparkBackend

    root = Path(__file__).resolve().parent.parent
    calls = []
    for folder in ("app", "viewers"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in ("store_reader", "column_family_reader"):
                    calls.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
    assert calls == [], calls
    members = [n for n in vars(StateBackend) if not n.startswith("_")] + list(StateBackend.__annotations__)
    assert {"read_arrow", "read_changes_arrow", "iter_stats", "capabilities", "engine", "cancel"} <= set(
        members
    )
    assert not {"store", "column_families", "live_records", "reads_files"} & set(members)
    for cls in (NativeBackend, SparkBackend):
        missing = [m for m in members if not hasattr(cls, m)]
        assert missing == [], (cls.__name__, missing)


@pytest.mark.spark
def test_capabilities_say_what_each_backend_answers_and_the_rest_raises(checkpoint: Any, spark: Any) -> None:
    """What only files answer raises FilesUnavailableError on Spark (with the way out in the message); the
    native backend has no engine (queries run where Spark runs); capabilities say so first,
    and a transformWithState operator has a latest version on both (its stores' newest)."""
    from statelens.readers.backends.base import files_of
    from statelens.readers.errors import FilesUnavailableError
    from statelens.readers.scan import StateScan

    ckpt = open_checkpoint(str(checkpoint("agg_count") / "checkpoint"))
    native, sparkb = NativeBackend(ckpt), SparkBackend(ckpt, spark=spark)
    assert native.capabilities.partition_reads and not native.capabilities.engine_queries
    assert sparkb.capabilities.engine_queries and not sparkb.capabilities.partition_reads
    assert files_of(native, 0).partition_ids() == sparkb.partition_ids(0)
    assert native.capabilities.raw_records and not sparkb.capabilities.raw_records
    with pytest.raises(FilesUnavailableError, match="native backend"):
        files_of(sparkb, 0)
    with pytest.raises(FilesUnavailableError, match="native backend"):
        StateScan(sparkb, 0, kind="replay").replay().advance().__next__()
    assert native.engine is None and sparkb.engine is not None
    latest = native.latest_version(0)
    path, table = sparkb.arrow_entry(0, None, latest, 0, cache=None)  # type: ignore[arg-type]
    assert path is None and table.equals(sparkb.read_arrow(0, None, latest, 0))

    tws = open_checkpoint(str(checkpoint("rocks_tws") / "checkpoint"))
    newest = max(max(s.versions) for s in tws.operators[0].stores)
    assert NativeBackend(tws).latest_version(0) == newest > 1

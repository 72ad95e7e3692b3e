"""The twin backends give the same answers: native decoder vs Spark's state data sources.

One parametrised suite: rows at every committed version, change records, and growth (Spark's from its
change feed in one job) on real checkpoints; plus the backend chooser and the "Spark is missing"
messages.
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
from tests.oracle import canonical

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


def _rows(backend: Any, op: int, store: str, version: int, schema: Any) -> Counter:
    return Counter(
        (
            r.partition_id,
            repr(canonical(r.key, schema.key_schema)),
            repr(canonical(r.value, schema.value_schema)),
        )
        for r in backend.read_rows(op, store, version)
    )


@pytest.mark.spark
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rows_and_changes_agree(scenario: str, checkpoint: Any, spark: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    native, sparkb = NativeBackend(ckpt), SparkBackend(ckpt, spark=spark)
    for op in ckpt.operators:
        for store in op.stores:
            last = sparkb.latest_version(op.operator_id, store.store_name)
            for version in sorted({1, last // 2 or 1, last}):
                a = _rows(native, op.operator_id, store.store_name, version, store.schema)
                b = _rows(sparkb, op.operator_id, store.store_name, version, store.schema)
                assert a == b, (store.store_name, version)
            ca = native.read_changes(op.operator_id, store.store_name, 1, last)
            cb = sparkb.read_changes(op.operator_id, store.store_name, 1, last)

            def norm(changes: list[Any], schema: Any = store.schema) -> Counter:
                return Counter(
                    (
                        c.version,
                        c.partition_id,
                        c.change,
                        repr(canonical(c.key, schema.key_schema)),
                        repr(canonical(c.value, schema.value_schema)),
                    )
                    for c in changes
                )

            assert norm(ca) == norm(cb), store.store_name


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
def test_growth_from_spark_change_feed_equals_native(scenario: str, checkpoint: Any, spark: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    native, sparkb = NativeBackend(ckpt), SparkBackend(ckpt, spark=spark)
    committed_versions = {b + 1 for b in ckpt.commits}
    for op in ckpt.operators:
        for store in op.stores:
            a = {
                (s.partition_id, s.version): (s.rows, s.bytes)
                for s in native.iter_stats(op.operator_id, store.store_name)
            }
            b = {
                (s.partition_id, s.version): (s.rows, s.bytes)
                for s in sparkb.iter_stats(op.operator_id, store.store_name)
            }
            assert sparkb.notes == ["growth computed from Spark's change feed in one job"]
            a = {k: v for k, v in a.items() if k[1] in committed_versions}
            assert a == b, store.store_name


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
def test_spark_backend_reads_state_variable_and_join_family_stores(checkpoint: Any, spark: Any) -> None:
    """A transformWithState variable or a format-4 join family, as a store: Spark's rows equal native ones."""
    from tests.test_native_vs_spark import canon

    for scenario, stores in (
        ("rocks_tws", ("cnt", "lst", "mp")),
        ("rocks_join_v4", ("left-keyWithTsToValues", "right-tsWithKey")),
    ):
        ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
        sparkb = SparkBackend(ckpt, spark=spark)
        native = NativeBackend(ckpt)
        version = sparkb.latest_version(0)
        for store in stores:
            ours = [canon(tuple(r)) for r in native.read_rows(0, store, version)]
            theirs = [canon(tuple(r)) for r in sparkb.read_rows(0, store, version)]
            assert ours and sorted(ours, key=repr) == sorted(theirs, key=repr), (scenario, store)
            counts = {s.partition_id: s.rows for s in sparkb.iter_stats(0, store) if s.version == version}
            assert sum(counts.values()) == len(ours), (scenario, store)
            ours_changes = [canon(tuple(c)) for c in native.read_changes(0, store, 1, version)]
            theirs_changes = [canon(tuple(c)) for c in sparkb.read_changes(0, store, 1, version)]
            assert sorted(ours_changes, key=repr) == sorted(theirs_changes, key=repr), (scenario, store)


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
    assert {"read_arrow", "read_changes_arrow", "iter_stats", "reads_files", "cancel"} <= set(members)
    for cls in (NativeBackend, SparkBackend):
        missing = [m for m in members if not hasattr(cls, m)]
        assert missing == [], (cls.__name__, missing)

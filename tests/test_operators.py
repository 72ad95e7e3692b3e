"""Operator kind recognition and time columns (``readers/operators.py``), on schemas and real checkpoints.

The time column of an operator must be the one Spark *evicts by*: checked against what Spark really
kept and deleted in the generated checkpoints (every surviving row is ahead of the batch's watermark,
every evicted row was behind it), not only against the spec's prose.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.model import OperatorKind, StoreSchema, TimeColumn
from statelens.readers.operators import find_time_columns, fmgws_v1_long_fields, infer_kind

WINDOW = StructType([StructField("start", TimestampType()), StructField("end", TimestampType())])
SESSION_META = {"spark.sessionWindow": True, "spark.watermarkDelayMs": 10000}
WINDOW_META = {"spark.timeWindow": True, "spark.watermarkDelayMs": 10000}


def _schemas(key: list[StructField], value: list[StructField]) -> dict[str, StoreSchema]:
    return {
        "default": StoreSchema.from_types(StructType(key), StructType(value), 2, "state/0/0/_metadata/schema")
    }


def _session_window_schemas(*, metadata: bool = True, session_first: bool = True) -> dict[str, StoreSchema]:
    """§7.5: K = grouping keys + sessionStartTime; V = the aggregated row (session struct where grouped)."""
    session = StructField("session_window", WINDOW, False, SESSION_META if metadata else {})
    user = StructField("user", StringType())
    buffers = [StructField("count", LongType(), False), StructField("sum", DoubleType())]
    value = [session, user, *buffers] if session_first else [user, session, *buffers]
    return _schemas([user, StructField("sessionStartTime", TimestampType(), False)], value)


# -- schemas only ----------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [True, False])
@pytest.mark.parametrize("session_first", [True, False])
def test_session_window_evicts_by_the_value_session_end(metadata: bool, session_first: bool) -> None:
    schemas = _session_window_schemas(metadata=metadata, session_first=session_first)
    assert infer_kind("sessionWindowStateStoreSaveExec", ["default"], schemas) == OperatorKind.SESSION_WINDOW
    assert infer_kind(None, ["default"], schemas) == OperatorKind.SESSION_WINDOW  # pre-4.0: no metadata
    (tc,) = find_time_columns(OperatorKind.SESSION_WINDOW, schemas)
    pos = 0 if session_first else 1
    assert tc == TimeColumn("default", "value", (pos, 1), "session_window.end", "us", "event_time")


def test_dedup_within_watermark_evicts_by_expires_at() -> None:
    schemas = _schemas([StructField("id", StringType())], [StructField("expiresAtMicros", LongType(), False)])
    assert infer_kind(None, ["default"], schemas) == OperatorKind.DEDUPLICATION_WITHIN_WATERMARK
    (tc,) = find_time_columns(OperatorKind.DEDUPLICATION_WITHIN_WATERMARK, schemas)
    assert tc == TimeColumn("default", "value", (0,), "expiresAtMicros", "us", "event_time")


def test_limit_has_no_time_column_and_needs_a_void_key() -> None:
    limit = _schemas([StructField("key", NullType())], [StructField("value", LongType())])
    assert infer_kind(None, ["default"], limit) == OperatorKind.LIMIT
    assert find_time_columns(OperatorKind.LIMIT, limit) == []
    # groupBy("key") with a typed Aggregator whose buffer is a Long: the buffer column is "value long".
    typed_agg = _schemas([StructField("key", StringType())], [StructField("value", LongType())])
    assert infer_kind(None, ["default"], typed_agg) == OperatorKind.AGGREGATION


def test_aggregation_v1_evicts_by_the_key_window_end() -> None:
    window = StructField("window", WINDOW, True, WINDOW_META)
    key = [window, StructField("key", StringType()), StructField("k2", IntegerType())]
    value = [*key, StructField("count", LongType()), StructField("sum", DoubleType())]
    schemas = _schemas(key, value)
    assert infer_kind(None, ["default"], schemas) == OperatorKind.AGGREGATION
    (tc,) = find_time_columns(OperatorKind.AGGREGATION, schemas)
    assert (tc.side, tc.path, tc.name) == ("key", (0, 1), "window.end")


def test_group_state_operators_time_out_by_the_last_value_field() -> None:
    """§7.3: (flat)MapGroupsWithState and applyInPandasWithState keep ``timeoutTimestamp`` (ms) as the last
    value field of each store; state format 1 declares it integer while Spark writes a long."""
    key = [StructField("k", StringType())]
    v1 = [StructField("count", LongType()), StructField("timeoutTimestamp", IntegerType(), False)]
    two = {**_schemas(key, v1), "other": _schemas(key, v1)["default"]}
    for kind in (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE):
        cols = find_time_columns(kind, two)
        assert [(c.store_name, c.side, c.path, c.name, c.unit, c.role) for c in cols] == [
            (store, "value", (1,), "timeoutTimestamp", "ms", "timeout") for store in ("default", "other")
        ]
        assert fmgws_v1_long_fields(kind, two["default"]) == frozenset({1})
        v2 = _schemas(
            key, [StructField("count", LongType()), StructField("timeoutTimestamp", LongType(), False)]
        )
        assert fmgws_v1_long_fields(kind, v2["default"]) == frozenset()
        # the name must be last: a timeout field followed by another is not the layout Spark writes
        moved = _schemas(key, [*reversed(v1)])
        assert fmgws_v1_long_fields(kind, moved["default"]) == frozenset()
        assert find_time_columns(kind, moved) == []
    assert fmgws_v1_long_fields(OperatorKind.AGGREGATION, two["default"]) == frozenset()


# -- real checkpoints ------------------------------------------------------------------------------

NEW_KINDS = [
    "session_window",
    "dedup_within_watermark",
    "stream_limit",
    "agg_state_format_v1",
    "dedup_watermark",
]

#: scenario -> (side, path, name) of the column Spark evicts by.
EVICTION_COLUMNS = {
    "window_agg_watermark": ("key", (0, 1), "window.end"),
    "dedup_watermark": ("key", (1,), "ts"),
    "session_window": ("value", (0, 1), "session_window.end"),
    "dedup_within_watermark": ("value", (0,), "expiresAtMicros"),
    "agg_state_format_v1": ("key", (0, 1), "window.end"),
}


def _at(row: tuple[Any, ...], path: tuple[int, ...]) -> Any:
    for i in path:
        row = row[i]
    return row


@pytest.mark.spark
@pytest.mark.parametrize("name", NEW_KINDS)
def test_kind_from_metadata_and_from_schemas_alone(checkpoint: Any, name: str) -> None:
    folder = checkpoint(name)
    exp = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    assert not ckpt.report.problems
    for want in exp["operators"]:
        op = ckpt.operator(want["operator_id"])
        assert op.operator_name == want["operator_name"]
        assert op.kind.value == want["expected_kind"]
        # Checkpoints written before Spark 4.0 have no operator metadata: the schemas must suffice.
        schemas = {s.store_name: s.schema for s in op.stores if s.schema is not None}
        assert infer_kind(None, [s.store_name for s in op.stores], schemas).value == want["expected_kind"]


@pytest.mark.spark
@pytest.mark.parametrize("name", NEW_KINDS)
def test_info_names_the_kind(checkpoint: Any, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from statelens.app.cli import main

    folder = checkpoint(name)
    exp = json.loads((folder / "expected.json").read_text())
    assert main(["info", str(folder / "checkpoint"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {op["operator_id"]: (op["kind"], op["operator_name"]) for op in doc["operators"]}
    assert got == {op["operator_id"]: (op["expected_kind"], op["operator_name"]) for op in exp["operators"]}
    assert main(["info", str(folder / "checkpoint")]) == 0
    assert exp["operators"][0]["expected_kind"] in capsys.readouterr().out


@pytest.mark.spark
def test_stream_limit_has_no_time_column(checkpoint: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint("stream_limit") / "checkpoint"))
    (op,) = ckpt.operators
    assert op.time_columns == ()
    (store,) = op.stores
    assert store.partitions == (0,)


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(EVICTION_COLUMNS))
def test_time_column_is_what_spark_evicts_by(checkpoint: Any, name: str) -> None:
    """After batch b (state version b+1) every row's time is > b's watermark; every evicted row's was <=."""
    folder = checkpoint(name)
    exp = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    (op,) = ckpt.operators
    (tc,) = [t for t in op.time_columns if t.role == "event_time"]
    assert (tc.side, tc.path, tc.name) == EVICTION_COLUMNS[name]
    scale = 1000 if tc.unit == "us" else 1
    reader = ckpt.store_reader(op.operator_id)
    kept = evicted = 0
    for pid in reader.partition_ids():
        previous: dict[Any, Any] = {}
        for version in reader.versions(pid):
            batch = version - 1
            watermark = exp["batch_watermark_ms"][str(batch)] * scale
            rows = {r.key: r.value for r in reader.read_rows(pid, version)}
            for key, value in rows.items():
                assert _at(key if tc.side == "key" else value, tc.path) > watermark, (version, key)
                kept += 1
            for ch in reader.read_changes(pid, version):
                if ch.change == "remove":
                    row = ch.key if tc.side == "key" else previous[ch.key]
                    assert _at(row, tc.path) <= watermark, (version, ch.key)
                    evicted += 1
            previous = rows
    assert kept and evicted


@pytest.mark.spark
def test_session_start_alone_would_flag_live_sessions(checkpoint: Any) -> None:
    """Why the key's sessionStartTime is not the eviction column: live sessions start behind the watermark."""
    folder = checkpoint("session_window")
    exp = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    reader = ckpt.store_reader(0)
    behind = [
        (version, row.key)
        for pid in reader.partition_ids()
        for version in reader.versions(pid)
        for row in reader.read_rows(pid, version)
        if row.key[1] <= exp["batch_watermark_ms"][str(version - 1)] * 1000
    ]
    assert behind, "expected a live session whose start is already behind the watermark"

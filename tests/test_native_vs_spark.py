"""Every state version of every store, decoded natively, equals Spark's own ``statestore`` reader.

For each generated checkpoint kind, each operator, store, committed version
and partition, the native rows are compared row for row (positionally, canonicalised for NaN and map
order) with ``spark.read.format("statestore")`` on the same checkpoint; and the batch list with the logs.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from statelens.readers.checkpoint import open_checkpoint
from tests import oracle
from tests.spark_checkpoints import SCENARIOS as GENERATED_SCENARIOS

pytestmark = pytest.mark.spark

SCENARIOS = list(GENERATED_SCENARIOS)  # every generated checkpoint kind

#: transformWithState: one store of column families, each shown (and compared) as a store of its own.
COLUMN_FAMILY_SCENARIOS = {
    "rocks_tws",
    "rocks_tws_timers",
    "rocks_tws_avro",
    "rocks_tws_checksum",
    "rocks_tws_timers_avro",
    "rocks_tws_event_time",
}


def canon(value: Any) -> Any:
    """A hashable form of a decoded value (NaN equal to NaN; maps, lists of pairs, in their order)."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if isinstance(value, Decimal):
        return ("decimal", value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(value))
    if isinstance(value, (list, tuple)):
        return tuple(canon(v) for v in value)
    return value


def _canon_rows(rows: Any) -> Counter:
    return Counter((p, canon(k), canon(v)) for p, k, v in rows)


def _compare(native: Counter, spark: Counter, what: str) -> None:
    """The same rows, maps in the same order too (the oracle keeps the order Spark reads them in)."""
    assert native == spark, (
        f"{what}: native-only {list((native - spark).items())[:3]}, spark-only {list((spark - native).items())[:3]}"
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_version_matches_spark(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    assert not ckpt.report.problems, ckpt.report.problems
    assert ckpt.operators, "generated scenarios are all stateful"
    if scenario in COLUMN_FAMILY_SCENARIOS:
        # Each column family is a store; Spark shows state variables (stateVarName) and timers
        # (readRegisteredTimers), from which the internal families follow (oracle.read_family).
        compared = _compare_every_family(scenario, ckpt, root, spark)
        assert compared == FAMILY_VERSIONS_COMPARED[scenario]
        return
    compared = _compare_every_version(scenario, ckpt, root, set(oracle.committed_batches(root)), spark)
    assert compared >= 2


#: (family, version) pairs compared per column-family scenario: every family at the first, middle and
#: last of its 5 versions.
FAMILY_VERSIONS_COMPARED = {
    "rocks_tws": 12,  # cnt, lst, mp, $rowCounter_lst
    "rocks_tws_avro": 12,
    "rocks_tws_checksum": 12,
    "rocks_tws_timers": 36,  # 4 variables, 2 timer families, 3 TTL indexes, $count/$min/$rowCounter
    "rocks_tws_timers_avro": 36,
    "rocks_tws_event_time": 9,  # one variable, 2 timer families
}


def _compare_every_family(scenario: str, ckpt: Any, root: Any, spark: Any) -> int:
    reads = oracle.Reads(spark, root, 0)
    compared = 0
    committed = set(oracle.committed_batches(root))
    for store in ckpt.operators[0].stores:
        reader = ckpt.store_reader(0, store.store_name)
        versions = [v for v in store.versions if v - 1 in committed]
        for version in sorted({versions[0], versions[len(versions) // 2], versions[-1]}):
            expected = oracle.read_family(reads, store.store_name, version - 1)
            native = [
                (r.partition_id, r.key, r.value)
                for pid in reader.partition_ids()
                for r in reader.read_rows(pid, version)
            ]
            _compare(_canon_rows(native), _canon_rows(expected), f"{scenario} {store.store_name} v{version}")
            compared += 1
    return compared


def _compare_every_version(scenario: str, ckpt: Any, root: Any, committed: set[int], spark: Any) -> int:
    compared = 0
    for op in ckpt.operators:
        for store in op.stores:
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            for version in store.versions:
                batch_id = version - 1
                if batch_id not in committed:
                    continue  # Spark refuses versions of uncommitted batches
                native = []
                for pid in reader.partition_ids():
                    if version in reader.versions(pid):
                        native.extend(
                            (r.partition_id, r.key, r.value) for r in reader.read_rows(pid, version)
                        )
                store_arg = None if store.store_name == "default" else store.store_name
                expected = oracle.read_state(
                    spark, root, operator_id=op.operator_id, store_name=store_arg, batch_id=batch_id
                )
                _compare(
                    _canon_rows(native),
                    _canon_rows(expected),
                    f"{scenario} op {op.operator_id} {store.store_name} v{version}",
                )
                compared += 1
    return compared


@pytest.mark.parametrize(
    "scenario",
    [
        "agg_count",
        "window_agg_watermark",
        "join",
        "pandas_state_event",
        "session_window",
        "dedup_within_watermark",
        "stream_limit",
        "agg_state_format_v1",
        "rocks_agg_changelog",
        "rocks_dedup_changelog",
        "rocks_pandas_state",
        "rocks_ckpt_v2",
        "rocks_join",
        "rocks_join_v3",
        "rocks_join_v4",
        "checksum_window",
        "rocks_checksum_window",
    ],
)
def test_changes_match_spark_change_feed(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    _compare_changes(scenario, ckpt, root, spark)


def _compare_changes(scenario: str, ckpt: Any, root: Any, spark: Any) -> None:
    for op in ckpt.operators:
        for store in op.stores:
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            native = []
            for pid in reader.partition_ids():
                for version in reader.delta_versions(pid):
                    if version - 1 not in ckpt.commits:
                        continue
                    for ch in reader.read_changes(pid, version):
                        kind = {"put": "update", "remove": "delete"}.get(ch.change, ch.change)
                        native.append((version - 1, kind, pid, ch.key, ch.value))
            store_arg = None if store.store_name == "default" else store.store_name
            expected = oracle.read_change_feed(
                spark, root, op.operator_id, store_name=store_arg, start_batch=0
            )
            n = Counter((b, t, p, canon(k), canon(v)) for b, t, p, k, v in native)
            s = Counter((b, t, p, canon(k), canon(v)) for b, t, p, k, v in expected)
            assert n == s, (
                f"{scenario} {store.store_name}: {list((n - s).items())[:3]} vs {list((s - n).items())[:3]}"
            )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_batches_match_logs(scenario: str, checkpoint: Any) -> None:
    import json

    folder = checkpoint(scenario)
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    assert [b.batch_id for b in ckpt.batches] == list(expected["batches"])
    assert sorted(ckpt.commits) == list(expected["committed_batches"])
    assert ckpt.query_id
    kinds = {op.operator_id: op.kind.value for op in ckpt.operators}
    for op in expected["operators"]:
        assert kinds[op["operator_id"]] == op["expected_kind"]
        names = {s.store_name for s in ckpt.operator(op["operator_id"]).stores}
        if op["expected_kind"] == "transformWithState":  # one physical store; its families are shown
            assert names >= set(expected["state_variables"])
        else:
            assert names == set(op["store_names"])

"""Heaviest keys weighed inside Spark (``app.analysis.heavy_spark``): every key's UnsafeRow size computed by
Spark SQL from its decoded values equals the bytes the native decoder reads for it, on every store of
these real checkpoints (rich types included); the top keys through Spark agree with the native ones."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.heavy import iter_top_keys
from statelens.app.analysis.heavy_spark import key_weights_in_spark, weight_sql
from statelens.readers.backends import BackendChooser
from statelens.readers.backends.spark import SparkBackend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.values import row_to_json

pytestmark = pytest.mark.spark

WEIGHED = [
    "agg_many_partitions",
    "rich_types",
    "pandas_state_event",
    "window_agg_watermark",
    "dedup_watermark",
    "join",
    "session_window",
    "rocks_agg_changelog",
    "rocks_join",
    "checksum_window",
]


def _native_weights(
    ckpt: Any, operator_id: int, store_name: str, version: int
) -> Counter[tuple[int, str, int]]:
    reader = ckpt.store_reader(operator_id, store_name)
    out: Counter[tuple[int, str, int]] = Counter()
    for pid in reader.partition_ids():
        if version not in reader.versions(pid):
            continue
        raw = reader.read_raw(pid, version)
        decoded = reader.decode_pairs(list(raw.items()), "weights")
        for (k, v), (key, _) in zip(raw.items(), decoded, strict=True):
            out[(pid, json.dumps(row_to_json(key, reader.schema.key_schema)), len(k) + len(v))] += 1
    return out


@pytest.mark.parametrize("scenario", WEIGHED)
def test_every_keys_weight_in_spark_equals_its_native_bytes(
    scenario: str, checkpoint: Any, spark: Any
) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    backend = SparkBackend(ckpt, spark=spark)
    version = backend.latest_version(0)
    compared = 0
    for op in ckpt.operators:
        for st in op.stores:
            sizes = weight_sql(st.schema)
            assert sizes is not None, (scenario, st.store_name)
            got: Counter[tuple[int, str, int]] = Counter(
                (p, json.dumps(row_to_json(key, st.schema.key_schema)), b)
                for p, key, b in key_weights_in_spark(backend, op.operator_id, st.store_name, version, sizes)
            )
            want = _native_weights(ckpt, op.operator_id, st.store_name, version)
            assert got == want, (scenario, op.operator_id, st.store_name)
            compared += sum(want.values())
    assert compared > 0


def _ranking(store: Any) -> tuple[Any, ...]:
    """What both weighings must agree on: per partition the weights in order and the keys heavier than
    the partition's cut (keys tied at the cut are chosen by key bytes natively, by JSON text in Spark)."""

    def above(heavy: list[Any]) -> set[str]:
        cut = heavy[-1].bytes if heavy else 0
        return {json.dumps(h.key) for h in heavy if h.bytes > cut}

    parts = {p: ([h.bytes for h in hs], above(hs)) for p, hs in store.by_partition.items()}
    return store.version, store.keys, parts, [h.bytes for h in store.overall], above(store.overall)


@pytest.mark.parametrize(
    "scenario", ["agg_many_partitions", "rich_types", "join", "session_window", "rocks_tws"]
)
def test_top_keys_through_spark_agree_with_native(scenario: str, checkpoint: Any, spark: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    native, problems = run_to_end(iter_top_keys(ckpt, 3))
    assert not problems
    chooser = BackendChooser(ckpt, "spark", spark=spark)
    through, problems = run_to_end(iter_top_keys(ckpt, 3, backends=chooser))
    assert not problems
    for n, s in zip(native, through, strict=True):
        assert (n.operator_id, n.store_name, n.grouping, n.skipped) == (
            s.operator_id,
            s.store_name,
            s.grouping,
            s.skipped,
        )
        assert _ranking(s) == _ranking(n), (scenario, n.store_name)
        # Weighed by a Spark query unless the weight is not the UnsafeRow size (transformWithState).
        assert s.weighed_in_spark == (scenario != "rocks_tws")
        assert not n.weighed_in_spark
    assert any(n.overall for n in native)

"""Checkpoints written by Spark 3.4 and 3.5 (each from its own cached venv, see tests/spark_versions.py):
every store of every version equals what the suite's Spark 4.x ``statestore`` reader reads, and
``expired`` finds exactly the keys the applyInPandasWithState function itself reported as timed out and
kept, on HDFS and on RocksDB, for both timeout kinds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statelens.app.analysis._common import key_fields
from statelens.readers.checkpoint import open_checkpoint
from tests.spark_versions import VERSIONED_SCENARIOS, WRITER_VERSIONS, versioned_checkpoint
from tests.test_analysis_expired import _expected_zombies, _findings
from tests.test_native_vs_spark import _compare_every_version

pytestmark = pytest.mark.spark

CASES = [(v, s) for v in WRITER_VERSIONS for s in VERSIONED_SCENARIOS]
PANDAS = {
    "pandas_state_event": "event_time",
    "pandas_state_processing": "processing_time",
    "rocks_pandas_state": "event_time",
    "rocks_pandas_state_processing": "processing_time",
}


@pytest.mark.parametrize(("version", "scenario"), CASES, ids=[f"{v}-{s}" for v, s in CASES])
def test_every_version_matches_sparks_reader(version: str, scenario: str, spark: Any) -> None:
    folder = versioned_checkpoint(version, scenario)
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["spark_version"] == version  # written by that Spark, not the suite's
    root = folder / "checkpoint"
    ckpt = open_checkpoint(str(root))
    assert not ckpt.report.problems, ckpt.report.problems
    compared = _compare_every_version(f"{version}-{scenario}", ckpt, root, set(ckpt.commits), spark)
    assert compared >= 2


@pytest.mark.parametrize(
    ("version", "scenario"),
    [(v, s) for v in WRITER_VERSIONS for s in PANDAS],
    ids=[f"{v}-{s}" for v in WRITER_VERSIONS for s in PANDAS],
)
def test_expired_finds_the_zombies_the_function_reported(version: str, scenario: str) -> None:
    folder = versioned_checkpoint(version, scenario)
    expected = json.loads((folder / "expected.json").read_text())
    kind = PANDAS[scenario]
    run = _findings(folder / "checkpoint", all_versions=True, stale_after=0)
    assert not run.problems
    (op,) = run.operators
    assert op.timeout_kind.timeout_kind == kind, op.timeout_kind
    assert {f.category for f in run.findings} <= {"zombie"}
    last_version = max(expected["committed_batches"]) + 1
    found_any = set()
    for v in range(1, last_version + 1):
        want = _expected_zombies(expected, v)
        got = {key_fields(f.key)["key"]: f for f in run.findings if f.version == v}
        assert set(got) == set(want), (v, sorted(got), sorted(want))
        for key, f in got.items():
            assert f.batch_id == want[key], (v, key)
        found_any |= set(got)
    assert set(expected["leaked"]) <= found_any

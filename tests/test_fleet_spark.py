"""``statelens fleet --backend spark``: the rows computed in Spark tasks (``mapInArrow`` over the paths,
each task running the native first look) equal the rows computed in threads here, on real checkpoints,
a damaged copy and a folder that cannot be listed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis.fleet import fleet
from tests.spark_checkpoints import get_checkpoint
from tests.spark_versions import versioned_checkpoint

pytestmark = pytest.mark.spark

SCENARIOS = ("agg_count", "rocks_agg_changelog", "pandas_state_event", "join", "rocks_tws", "uncommitted")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STATELENS_RAISE", "1")
    top = tmp_path / "prod"
    for name in SCENARIOS:
        (top / "a").mkdir(parents=True, exist_ok=True)
        (top / "a" / name).symlink_to(get_checkpoint(name) / "checkpoint")
    (top / "b").mkdir()
    (top / "b" / "dedup35").symlink_to(versioned_checkpoint("3.5.5", "dedup_watermark") / "checkpoint")
    shutil.copytree(get_checkpoint("agg_count") / "checkpoint", top / "b" / "damaged")
    delta = max((top / "b" / "damaged" / "state" / "0" / "1").glob("*.delta"), key=lambda p: int(p.stem))
    delta.write_bytes(delta.read_bytes()[:25])
    (top / "c").mkdir()
    (top / "c" / "loop").symlink_to(top / "c" / "loop")
    return top


def _comparable(row: Any) -> dict[str, Any]:
    d = row.to_json()
    for volatile in ("checked_ms", "age_ms", "cached"):
        d.pop(volatile)
    return d


def test_spark_tasks_give_the_native_rows(spark, root, tmp_path, monkeypatch):
    native = fleet(str(root))
    monkeypatch.setenv(
        "STATELENS_CACHE_DIR", str(tmp_path / "cache-spark")
    )  # nothing reused from the native run
    on_spark = fleet(str(root), spark=spark)
    assert [r.path for r in on_spark.rows] == [r.path for r in native.rows]
    assert len(on_spark.rows) == len(SCENARIOS) + 3
    assert not any(r.cached for r in on_spark.rows)
    compared = 0
    for a, b in zip(native.rows, on_spark.rows, strict=True):
        assert _comparable(b) == _comparable(a), a.path
        compared += 1
    assert compared == len(SCENARIOS) + 3
    rows = {r.path: r for r in on_spark.rows}
    assert rows["c"].error is not None  # the folder that cannot be listed: a row, found by the search here
    assert rows["b/damaged"].restart == "error"
    assert rows["a/pandas_state_event"].zombies
    assert on_spark.exit_code == native.exit_code == 2

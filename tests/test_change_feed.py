"""The change feed is never silently empty: at every version of every store, the changes statelens gives
(recorded in a delta or changelog, or derived where the store recorded none, as RocksDB without changelog
checkpointing and every Spark 3.4 RocksDB store) turn Spark's own read of the version before into Spark's
own read of that version: every key Spark no longer holds is removed, every key Spark added or changed is
put with the value Spark holds, and no put differs from it. ``rows --changes`` and ``sql ... FROM changes``
give the same records; a version whose changes can be neither read nor derived is a located error.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers.backends import NativeBackend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import MissingFileError
from tests import oracle
from tests.spark_versions import versioned_checkpoint

pytestmark = pytest.mark.spark

#: (Spark version or None for the suite's, scenario, whether its changes are derived).
CASES = [
    (None, "agg_count", False),
    (None, "window_agg_watermark", False),
    (None, "join", False),
    (None, "rocks_agg", True),
    (None, "rocks_agg_changelog", False),
    ("3.4.4", "rocks_pandas_state", True),
]


def _root(version: str | None, scenario: str, checkpoint: Any) -> Path:
    folder = checkpoint(scenario) if version is None else versioned_checkpoint(version, scenario)
    return Path(folder) / "checkpoint"


def _by_key(rows: list[tuple[int, Any, Any]]) -> dict[tuple[int, str], Any]:
    return {(p, repr(oracle.canonical(k))): oracle.canonical(v) for p, k, v in rows}


@pytest.mark.parametrize(
    ("version", "scenario", "derived"), CASES, ids=[f"{v or '4.3'}-{s}" for v, s, _ in CASES]
)
def test_changes_turn_sparks_version_before_into_sparks_version(
    version: str | None, scenario: str, derived: bool, checkpoint: Any, spark: Any
) -> None:
    root = _root(version, scenario, checkpoint)
    ckpt = open_checkpoint(str(root))
    backend = NativeBackend(ckpt)
    last = max(ckpt.commits) + 1
    compared = 0
    for op in ckpt.operators:
        for store in op.stores:
            name = store.store_name
            before: dict[tuple[int, str], Any] = {}
            for v in range(1, last + 1):
                after = _by_key(oracle.read_state(spark, root, op.operator_id, name, batch_id=v - 1))
                changes = backend.read_changes(op.operator_id, name, v, v)
                assert {c.derived for c in changes} <= {derived}, (name, v)
                effective: dict[tuple[int, str], Any] = {}
                for c in changes:  # the last record of a key in a version decides
                    assert c.version == v
                    effective[(c.partition_id, repr(oracle.canonical(c.key)))] = c
                removed = {k for k, c in effective.items() if c.change == "remove"}
                put = {k: oracle.canonical(c.value) for k, c in effective.items() if c.change != "remove"}
                assert removed & before.keys() == before.keys() - after.keys(), (name, v)
                assert not removed & after.keys(), (name, v)
                changed = {k for k, val in after.items() if before.get(k, ()) != val}
                assert changed <= put.keys(), (name, v, sorted(changed - put.keys())[:3])
                assert all(after.get(k) == val for k, val in put.items()), (name, v)
                compared += len(changed) + len(before.keys() - after.keys())
                before = after
    assert compared > 0


@pytest.mark.parametrize(("version", "scenario"), [(None, "rocks_agg"), ("3.4.4", "rocks_pandas_state")])
def test_rows_changes_and_sql_changes_agree_with_the_feed(
    version: str | None, scenario: str, checkpoint: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = _root(version, scenario, checkpoint)
    ckpt = open_checkpoint(str(root))
    feed = NativeBackend(ckpt).read_changes(0, None, 1, max(ckpt.commits) + 1)
    want = Counter((c.version, c.partition_id, c.change) for c in feed)
    assert sum(want.values()) > 0 and all(c.derived for c in feed)

    out = tmp_path / "changes.jsonl"
    assert main(["rows", str(root), "--operator", "0", "--changes", "--format", "jsonl", "-o", str(out)]) == 0
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter((d["version"], d["partition"], d["change"]) for d in docs) == want
    assert all(d["derived"] is True for d in docs)

    capsys.readouterr()
    q = "SELECT version, partition_id, change, count(*) AS n, bool_and(derived) AS d FROM changes GROUP BY ALL"
    assert main(["sql", str(root), q, "--operator", "0", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {(r["version"], r["partition_id"], r["change"]): r["n"] for r in got} == dict(want)
    assert all(r["d"] is True for r in got)


def test_a_version_that_can_be_neither_read_nor_derived_is_a_located_error(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _root(None, "rocks_agg", checkpoint)
    root = tmp_path / "checkpoint"
    shutil.copytree(src, root)
    zips = sorted((root / "state" / "0" / "0").glob("*.zip"), key=lambda p: int(p.stem.split("_")[0]))
    assert len(zips) >= 3
    gone = int(zips[1].stem.split("_")[0])
    zips[1].unlink()  # that version cannot be rebuilt, so neither its changes nor the next one's
    ckpt = open_checkpoint(str(root))
    backend = NativeBackend(ckpt)
    with pytest.raises(MissingFileError) as err:
        backend.read_changes(0, None, gone + 1, gone + 1, partition_id=0)
    assert err.value.path is not None and err.value.path.endswith(f"state/0/0/{gone + 1}.changelog")
    assert f"version {gone + 1}" in str(err.value)
    # The command says which file instead of printing nothing: an error (2) for that partition alone,
    # the other partitions' changes and exit 1 for the store.
    capsys.readouterr()
    code = main(["rows", str(root), "--operator", "0", "--changes", "--partition", "0", "--format", "jsonl"])
    assert code == 2  # the first version of the partition's feed that cannot be had: the one without zip
    assert f"state/0/0/{gone}.changelog: the changes of version {gone}" in capsys.readouterr().err
    assert main(["rows", str(root), "--operator", "0", "--changes", "--format", "jsonl"]) == 1
    out, err = capsys.readouterr()
    assert f"state/0/0/{gone}.changelog" in err
    partitions = {json.loads(line)["partition"] for line in out.splitlines()}
    assert 0 not in partitions and partitions  # the others are still there


@pytest.mark.parametrize(("version", "scenario"), [(None, "rocks_agg"), ("3.4.4", "rocks_pandas_state")])
def test_the_spark_backend_derives_the_same_feed(
    version: str | None, scenario: str, checkpoint: Any, spark: Any
) -> None:
    from statelens.readers.backends.spark import SparkBackend

    root = _root(version, scenario, checkpoint)
    ckpt = open_checkpoint(str(root))
    last = max(ckpt.commits) + 1

    def records(changes: list[Any]) -> Counter[tuple[Any, ...]]:
        return Counter(
            (
                c.version,
                c.partition_id,
                c.change,
                repr(oracle.canonical(c.key)),
                repr(oracle.canonical(c.value)),
            )
            for c in changes
        )

    native = NativeBackend(ckpt).read_changes(0, None, 1, last)
    through_spark = SparkBackend(ckpt, spark=spark).read_changes(0, None, 1, last)
    assert all(c.derived for c in native + through_spark)
    assert records(through_spark) == records(native) and len(native) > 0

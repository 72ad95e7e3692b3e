"""statelens as a library (``statelens.open``): the same answers as the command line on the same bytes,
Spark's own reader as the truth for state, and the example notebook runs on the bundled sample."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import statelens
from statelens.app.cli import main
from statelens.app.resources import sample_checkpoint_path
from statelens.readers.errors import StatelensError, UsageError
from tests import oracle

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "docs" / "examples" / "post_mortem.ipynb"


def _cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_open_describes_the_sample_as_info_does(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(sample_checkpoint_path())
    ck = statelens.open(path)
    code, info = _cli_json(capsys, "info", path)
    assert code == 0
    assert ck.query_id == info["query_id"]
    assert [b.batch_id for b in ck.batches] == list(range(len(ck.batches))) and len(ck.batches) >= 5
    assert ck.last_committed_batch == max(b.batch_id for b in ck.batches if b.committed)
    assert [o.operator_id for o in ck.operators] == [0]
    assert "statelens checkpoint" in ck._repr_html_() and path in repr(ck)


@pytest.mark.spark
def test_state_and_changes_match_sparks_reader_and_the_cli(
    capsys: pytest.CaptureFixture[str], spark: Any, tmp_path: Path
) -> None:
    path = sample_checkpoint_path()
    ck = statelens.open(str(path))
    table = ck.state(0).to_arrow()
    want = oracle.read_state(spark, path, 0)
    assert table.num_rows == len(want) > 0
    got = sorted((r["partition"], tuple(r["key"].values())) for r in table.to_pylist())
    assert got == sorted((p, tuple(oracle.canonical(k))) for p, k, _ in want)

    out = tmp_path / "changes.jsonl"
    assert main(["rows", str(path), "--operator", "0", "--changes", "--format", "jsonl", "-o", str(out)]) == 0
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    feed = ck.changes(0).to_arrow().to_pylist()
    assert Counter((d["version"], d["partition"], d["change"]) for d in docs) == Counter(
        (r["version"], r["partition"], r["change"]) for r in feed
    )
    assert len(feed) > 0
    one = ck.state(0, partition=1).to_arrow()
    assert set(one.column("partition").to_pylist()) == {1}
    assert one.num_rows == sum(1 for p, _, _ in want if p == 1)


@pytest.mark.spark
def test_stats_count_what_sparks_reader_returns_at_each_version(spark: Any) -> None:
    path = sample_checkpoint_path()
    ck = statelens.open(str(path))
    last = ck.last_committed_batch
    scan = ck.stats(0, start=last, end=last + 1, partition=[0, 1])
    table = scan.to_arrow()
    assert table.column_names == ["version", "partition", "rows", "bytes"]
    got = {(r["version"], r["partition"]): r["rows"] for r in table.to_pylist()}
    assert set(got) == {(v, p) for v in (last, last + 1) for p in (0, 1)}
    for version in (last, last + 1):
        want = Counter(p for p, _, _ in oracle.read_state(spark, path, 0, batch_id=version - 1))
        assert {p: got[(version, p)] for p in (0, 1)} == {p: want[p] for p in (0, 1)}
    assert sum(got.values()) > 0 and scan.ok and all(r["bytes"] > 0 for r in table.to_pylist())
    with pytest.raises(UsageError):
        scan.to_spark()
    one = ck.stats(0, version=last + 1, partition=1).to_arrow().to_pylist()
    assert [(r["version"], r["partition"], r["rows"]) for r in one] == [(last + 1, 1, got[(last + 1, 1)])]
    with pytest.raises(UsageError):
        ck.stats(0, version=last, start=1)


def test_analyses_agree_with_their_commands(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(sample_checkpoint_path())
    ck = statelens.open(path)
    expired = ck.expired()
    code, doc = _cli_json(capsys, "expired", path)
    assert code == 0  # every file read (findings are the answer, not a failure)
    counts = {c: n for c, n in expired.counts().items() if n}
    assert counts == dict(Counter(f["category"] for f in doc)) and len(doc) > 0
    answer = ck.sql("SELECT category, count(*) AS n FROM expired GROUP BY ALL")
    assert dict(zip(answer.column("category").to_pylist(), answer.column("n").to_pylist(), strict=True)) == (
        counts
    )
    growth = ck.growth_table()
    code, doc = _cli_json(capsys, "sql", path, "SELECT version, sum(rows) AS rows FROM growth GROUP BY ALL")
    assert code == 0
    by_version: Counter[int] = Counter()
    for v, n in zip(growth.column("version").to_pylist(), growth.column("rows").to_pylist(), strict=True):
        by_version[v] += n
    assert {r["version"]: int(r["rows"]) for r in doc} == dict(by_version) and by_version  # sum: HUGEINT text
    assert ck.doctor().exit_code == main(["doctor", path, "--json"])


def test_a_bad_choice_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="backend"):
        statelens.open(str(sample_checkpoint_path()), backend="nope")
    ck = statelens.open(str(sample_checkpoint_path()))
    with pytest.raises(UsageError, match="partition 99"):
        ck.state(0, partition=99).to_arrow()
    with pytest.raises(StatelensError):
        ck.state(0, store="no-such-store")


def test_example_notebook_runs_on_the_sample() -> None:
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = json.dumps([o.get("text", "") for o in outputs])
    assert "'zombie'" in text and "rows at the latest version" in text


def test_a_store_none_of_whose_partitions_reads_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "checkpoint"
    shutil.copytree(sample_checkpoint_path(), root)
    damaged = []
    for part in sorted((root / "state" / "0").iterdir()):
        if not part.name.isdigit():
            continue
        latest = max(part.glob("*.delta"), key=lambda p: int(p.stem))
        latest.write_bytes(latest.read_bytes()[:10])
        damaged.append(latest.relative_to(root).as_posix())
    assert len(damaged) == 2
    scan = statelens.open(str(root)).state(0)
    with pytest.raises(StatelensError, match="no partition of this store could be read") as err:
        scan.to_arrow()
    assert all(d in str(err.value) for d in damaged)
    assert {u.partition_id for u in scan.unreadable} == {0, 1} and not scan.ok


@pytest.mark.spark
def test_to_spark_is_sparks_own_dataframe_on_the_spark_backend(spark: Any) -> None:
    from statelens.readers.errors import BackendUnavailableError

    path = str(sample_checkpoint_path())
    with pytest.raises(BackendUnavailableError, match="backend='spark'"):
        statelens.open(path).state(0).to_spark()
    ck = statelens.open(path, backend="spark", spark=spark)
    df = ck.state(0).to_spark()
    want = oracle.read_state(spark, path, 0)
    assert df.count() == len(want) > 0
    assert df.where("partition_id = 1").count() == sum(1 for p, _, _ in want if p == 1)
    assert ck.state(0, partition=1).to_spark().count() == sum(1 for p, _, _ in want if p == 1)
    changes = ck.changes(0).to_spark()
    native = statelens.open(path).changes(0).to_arrow()
    assert changes.count() == native.num_rows > 0


def test_doctor_is_judged_for_the_spark_that_restarts(checkpoint: Any, tmp_path: Path) -> None:
    """A cut newest snapshot (agg_many_partitions: snapshot 6 of partition 0, deltas 1-8 kept): Spark 3.5
    fails on it, Spark 4.3 falls back to snapshot 3 (auto snapshot repair); the API says as the CLI."""
    import shutil

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_many_partitions") / "checkpoint", root)
    snap = root / "state/0/0/6.snapshot"
    snap.write_bytes(snap.read_bytes()[:30])
    ck = statelens.open(str(root))
    old, new = ck.doctor(spark_version="3.5"), ck.doctor(spark_version="4.3")
    assert (old.exit_code, new.exit_code) == (2, 1)
    plans = {r.partition: r.load for r in new.restart_loads if r.operator_id == 0}
    assert plans[0].outcome == "repaired" and plans[0].base == 3 and plans[1].outcome == "loads"
    off = ck.doctor(
        spark_version="4.3", conf={"spark.sql.streaming.stateStore.autoSnapshotRepair.enabled": "false"}
    )
    assert off.exit_code == 2 and [r.load.outcome for r in off.restart_loads if r.partition == 0] == ["fails"]
    with pytest.raises(ValueError, match="not a Spark version"):
        ck.doctor(spark_version="four")

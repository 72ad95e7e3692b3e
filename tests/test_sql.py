"""``statelens sql``: DuckDB over real checkpoints written by PySpark, checked against Spark's own reader
and statelens' other commands (the tables hold what those show), and its errors and outputs."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.app.output import dumps_jsonl
from statelens.readers.values import row_to_json
from tests import oracle

pytestmark = pytest.mark.spark


def _sql(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(["sql", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _positional(doc: Any) -> Any:
    """Struct values by position (aggregation buffers repeat names; SQL columns get a _2 suffix)."""
    if isinstance(doc, dict):
        return tuple(_positional(v) for v in doc.values())
    if isinstance(doc, (list, tuple)):
        return tuple(_positional(v) for v in doc)
    return doc


def _pairs_positional(text: str) -> Any:
    """JSON text with repeated names, by position."""
    return json.loads(text, object_pairs_hook=lambda pairs: tuple(v for _, v in pairs))


@pytest.mark.parametrize(
    "scenario", ["window_agg_watermark", "pandas_state_event", "rich_types", "rocks_agg_changelog"]
)
def test_state_table_equals_sparks_reader(
    scenario: str, checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.readers.checkpoint import open_checkpoint

    root = checkpoint(scenario) / "checkpoint"
    store = open_checkpoint(str(root)).operator(0).stores[0]
    got = _sql(
        capsys,
        str(root),
        "SELECT partition_id, key, value FROM state",
        "--operator",
        "0",
        "--store",
        store.store_name,
    )
    expected = [
        (
            pid,
            _pairs_positional(dumps_jsonl(row_to_json(k, store.key_schema))),
            _pairs_positional(dumps_jsonl(row_to_json(v, store.value_schema))),
        )
        for pid, k, v in oracle.read_state(spark, root, store_name=store.store_name)
    ]
    assert expected
    assert Counter(_positional([d["partition_id"], d["key"], d["value"]]) for d in got) == Counter(
        _positional(list(e)) for e in expected
    )


def test_changes_growth_batches_and_expired_equal_the_other_commands(
    checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(checkpoint("pandas_state_event") / "checkpoint")
    changes = _sql(capsys, root, "SELECT version, partition_id, change FROM changes")
    feed = oracle.read_change_feed(spark, root, 0)
    assert Counter(
        (d["version"] - 1, d["partition_id"], {"put": "update", "remove": "delete"}[d["change"]])
        for d in changes
    ) == Counter((b, p, c) for b, c, p, _, _ in feed)

    assert main(["growth", root, "--json"]) == 0
    growth = json.loads(capsys.readouterr().out)
    table = _sql(capsys, root, "SELECT * FROM growth")
    assert Counter(json.dumps(d, sort_keys=True) for d in table) == Counter(
        json.dumps({**g, "partition_id": g["partition_id"]}, sort_keys=True) for g in growth
    )

    assert main(["timeline", root, "--json"]) == 0
    timeline = json.loads(capsys.readouterr().out)["batches"]
    batches = _sql(
        capsys,
        root,
        "SELECT batch_id, version, timestamp_ms, start, committed, watermark_ms FROM batches "
        "ORDER BY batch_id",
    )
    assert [(b["batch_id"], b["timestamp_ms"], b["committed"], b["watermark_ms"]) for b in timeline] == [
        (b["batch_id"], b["timestamp_ms"], b["committed"], b["watermark_ms"]) for b in batches
    ]
    assert all(b["version"] == b["batch_id"] + 1 and b["start"].endswith("Z") for b in batches)

    assert main(["expired", root, "--json"]) == 0
    findings = json.loads(capsys.readouterr().out)
    expired = _sql(capsys, root, "SELECT category, key, version, partition_id, age_batches FROM expired")
    assert findings and Counter(
        (f["category"], dumps_jsonl(f["key"]), f["version"], f["partition"], f["age_batches"])
        for f in findings
    ) == Counter(
        (e["category"], e["key"], e["version"], e["partition_id"], e["age_batches"]) for e in expired
    )


def test_outputs_csv_parquet_and_table(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    root = str(checkpoint("window_agg_watermark") / "checkpoint")
    query = "SELECT partition_id, key, value FROM state ORDER BY partition_id, key.window.start"
    docs = _sql(capsys, root, query)
    assert main(["sql", root, query, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(docs) > 0
    assert {"partition_id", "key.window.start", "key.window.end", "value.sum_2"} <= set(rows[0])
    assert rows[0]["key.window.start"] == docs[0]["key"]["window"]["start"]
    out = tmp_path / "a.parquet"
    assert main(["sql", root, query, "--parquet", "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == len(docs) and str(table.schema.field("key").type).startswith(
        "struct<window: struct<"
    )
    assert main(["sql", root, "SELECT * FROM batches", "--max-rows", "2"]) == 0
    text = capsys.readouterr().out
    assert "more rows not shown" in text and text.rstrip().endswith("rows)")
    # table cells: timestamps bare ISO-8601 UTC as in the JSON, structs as JSON
    batches = _sql(capsys, root, "SELECT batch_id, start FROM batches ORDER BY batch_id")
    assert main(["sql", root, "SELECT batch_id, start, sources FROM batches ORDER BY batch_id"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:2] == [str(batches[0]["batch_id"]), batches[0]["start"]]
    assert '"' not in lines[2].split()[1] and batches[0]["start"].endswith("Z")


def test_errors_are_clear_and_the_checkpoint_untouched(
    checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = checkpoint("join") / "checkpoint"

    def tree() -> dict[str, str]:
        return {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    before = tree()
    root = str(folder)
    assert main(["sql", root, "SELECT 1"]) == 2
    assert "uses none of the tables batches, growth, state, changes, expired" in capsys.readouterr().err
    assert main(["sql", root, "SELECT count(*) FROM state"]) == 2
    err = capsys.readouterr().err
    assert "hold one store; pick it" in err and "--store left-keyToNumValues" in err
    assert main(["sql", root, "SELECT nope FROM growth"]) == 2
    assert "the query failed" in capsys.readouterr().err
    got = _sql(capsys, root, "SELECT count(*) AS n FROM state", "--store", "left-keyToNumValues")
    # the store's rows in the last committed batch, as Spark's own reader returns them
    assert got == [{"n": len(oracle.read_state(spark, folder, 0, store_name="left-keyToNumValues"))}]
    assert tree() == before


def test_state_is_read_in_place_from_the_cache(checkpoint: Any, tmp_path: Path) -> None:
    """With the cache, ``state`` is a view over the cache's Parquet files (not a copy in DuckDB, so memory
    does not grow with the store): the same answer as without, the files pinned until the result closes."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.analysis.sql import answer_rows, iter_sql
    from statelens.readers.cache import StateCache
    from statelens.readers.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(checkpoint("rich_types") / "checkpoint"))
    query = "SELECT partition_id, version, CAST(key AS VARCHAR) AS k, CAST(value AS VARCHAR) AS v FROM state ORDER BY 1, 3"
    plain = run_to_end(iter_sql(ckpt, query))
    want = answer_rows(plain, 10_000)
    plain.close()
    cache = StateCache(tmp_path / "cache")
    for _ in range(2):  # cold (decoded into the cache), then warm (read back)
        result = run_to_end(iter_sql(ckpt, query, cache=cache))
        assert result.pinned and all(Path(p).is_file() for p, _ in result.pinned)
        assert cache._pinned
        assert answer_rows(result, 10_000) == want and want[1] > 0
        result.close()
        assert not cache._pinned


def test_show_tables_and_describe_answer_without_reading_state(
    capsys: pytest.CaptureFixture[str], checkpoint
) -> None:  # type: ignore[no-untyped-def]
    """``SHOW TABLES`` lists the five tables; ``DESCRIBE t`` gives the columns a query over ``t`` returns."""
    root = str(checkpoint("pandas_state_event") / "checkpoint")
    shown = _sql(capsys, root, "SHOW TABLES")
    assert sorted(r["name"] for r in shown) == ["batches", "changes", "expired", "growth", "state"]
    for table in ("batches", "state", "changes", "expired", "growth"):
        described = [r["column_name"] for r in _sql(capsys, root, f"DESCRIBE {table}")]
        answered = _sql(capsys, root, f"SELECT * FROM {table} LIMIT 1")
        assert answered, table
        assert described == list(answered[0]), table
    state = {r["column_name"]: r["column_type"] for r in _sql(capsys, root, "DESCRIBE state")}
    assert state["key"] == 'STRUCT("key" VARCHAR)' and state["value"].startswith(
        "STRUCT(groupState STRUCT(cnt BIGINT"
    )
    # A query naming no table still says which there are, and how to list them.
    assert main(["sql", root, "SELECT 1"]) == 2
    assert "SHOW TABLES" in capsys.readouterr().err

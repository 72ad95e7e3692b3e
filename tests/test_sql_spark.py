"""``statelens sql --in-spark``: the query is Spark SQL and runs where Spark runs; the store's rows never
come to this process. Its answers equal DuckDB's (the native tables) on real checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import statelens.app.analysis.sql as sql_module
from statelens.app.cli import main

pytestmark = pytest.mark.spark


def _answer(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main(["sql", *args, "--json"]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


# (scenario, query): the same text is valid DuckDB and Spark SQL.
QUERIES = [
    (
        "agg_many_partitions",
        "SELECT partition_id, count(*) AS n, max(version) AS v FROM state GROUP BY partition_id "
        "ORDER BY partition_id",
    ),
    (
        "window_agg_watermark",
        "SELECT version, change, count(*) AS n FROM changes GROUP BY version, change ORDER BY version, change",
    ),
    (
        "window_agg_watermark",
        "SELECT key.window.start AS start, value FROM state ORDER BY start",
    ),
    (
        "agg_many_partitions",
        "SELECT b.batch_id, b.committed, CAST(sum(g.rows) AS BIGINT) AS keys FROM batches b JOIN growth g "
        "ON g.version = b.version GROUP BY b.batch_id, b.committed ORDER BY b.batch_id",
    ),
    (
        "pandas_state_processing",
        "SELECT category, count(*) AS n, min(version) AS first FROM expired GROUP BY category ORDER BY category",
    ),
    ("rich_types", "SELECT partition_id, key, value FROM state ORDER BY partition_id, to_json(key)"),
]


@pytest.mark.parametrize(("scenario", "query"), QUERIES)
def test_in_spark_answers_equal_duckdbs(
    scenario: str, query: str, checkpoint: Any, shared_spark_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(checkpoint(scenario) / "checkpoint")
    if "to_json" in query:  # DuckDB and Spark spell "the key as JSON text" differently
        native, _ = _answer(
            capsys, root, query.replace("to_json(key)", "CAST(key AS VARCHAR)"), "--backend", "native"
        )
        got, err = _answer(capsys, root, query, "--in-spark")
        key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
        assert sorted(map(key, got)) == sorted(map(key, native))
    else:
        native, _ = _answer(capsys, root, query, "--backend", "native")
        got, err = _answer(capsys, root, query, "--in-spark")
        assert got == native
    assert native, "the query has an answer"
    assert "read with the Spark" in err


def test_in_spark_writes_parquet_where_spark_runs(
    checkpoint: Any, shared_spark_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(checkpoint("agg_many_partitions") / "checkpoint")
    query = "SELECT partition_id, key, value FROM state"
    native = tmp_path / "native.parquet"
    assert main(["sql", root, query, "--parquet", "-o", str(native), "--backend", "native"]) == 0
    folder = tmp_path / "spark"
    capsys.readouterr()
    assert main(["sql", root, query, "--in-spark", "--parquet", "-o", str(folder)]) == 0
    err = capsys.readouterr().err
    expected = pq.read_table(native).to_pylist()
    assert f"{len(expected):,} rows written by Spark to {folder}" in err
    assert folder.is_dir()  # Spark's folder of part files
    key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
    assert sorted(map(key, pq.read_table(folder).to_pylist())) == sorted(map(key, expected))
    # Never inside the checkpoint.
    assert main(["sql", root, query, "--in-spark", "--parquet", "-o", f"{root}/answer"]) == 2
    assert "never writes there" in capsys.readouterr().err


def test_in_spark_errors_are_clear(
    checkpoint: Any,
    shared_spark_cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = str(checkpoint("agg_many_partitions") / "checkpoint")
    capsys.readouterr()
    assert main(["sql", root, "SELECT nope FROM state", "--in-spark"]) == 2
    err = capsys.readouterr().err
    assert "the query failed" in err and "nope" in err
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        main(["sql", root, "SELECT * FROM state", "--in-spark", "--backend", "native"])
    assert usage.value.code == 2
    assert "cannot be used with --backend native" in capsys.readouterr().err
    # An answer too large to bring back says how to get it.
    monkeypatch.setattr(sql_module, "SPARK_ANSWER_ROWS", 10)
    assert main(["sql", root, "SELECT * FROM state", "--in-spark"]) == 2
    err = capsys.readouterr().err
    assert "more than 10 rows" in err and "--parquet -o" in err

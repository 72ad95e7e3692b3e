"""``rows --format parquet`` writes each partition's Arrow columns straight to the file: the same rows
and types as the row-by-row path, for state and change feeds, every column of every scenario type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.values import rows_to_arrow, state_row_schema

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [
        ("rich_types", []),
        ("window_agg_watermark", []),
        ("window_agg_watermark", ["--changes"]),
        ("dedup_watermark", ["--changes"]),
        ("rocks_agg_changelog", []),
        ("pandas_state_event", ["--version", "3"]),
    ],
)
def test_parquet_rows_equal_the_row_path(
    scenario: str, extra: list[str], checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    root = checkpoint(scenario) / "checkpoint"
    out = tmp_path / "rows.parquet"
    assert main(["rows", str(root), "--operator", "0", "--format", "parquet", "-o", str(out), *extra]) == 0
    got = pq.read_table(out)
    ckpt = open_checkpoint(str(root))
    reader = ckpt.store_reader(0, None)
    store = ckpt.operator(0).stores[0]
    changes = "--changes" in extra
    version = int(extra[extra.index("--version") + 1]) if "--version" in extra else None
    rows: list[tuple[Any, ...]] = []
    for pid in reader.partition_ids():
        if changes:
            rows += [
                (c.version, c.partition_id, c.change, c.key, c.value, c.derived)
                for v in reader.change_versions(pid)
                for c in reader.read_changes(pid, v)
            ]
        else:
            rows += [
                (r.partition_id, r.key, r.value)
                for r in reader.read_rows(pid, version or reader.versions(pid)[-1])
            ]
    want = rows_to_arrow(
        rows, state_row_schema(store.key_schema, store.value_schema, changes=changes), unique_names=True
    )
    assert got.schema.equals(want.schema)  # types and names (Parquet adds its own schema metadata)
    assert got.num_rows == want.num_rows > 0
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist()))


def _leaf_differences(want: Any, got: Any) -> set[tuple[str, str]]:
    """``(want, got)`` leaf types that differ between two schemas of the same shape and names."""
    import pyarrow as pa

    def walk(a: Any, b: Any) -> set[tuple[str, str]]:
        if pa.types.is_struct(a) and pa.types.is_struct(b):
            assert [f.name for f in a] == [f.name for f in b], (a, b)
            return set().union(*(walk(a.field(i).type, b.field(i).type) for i in range(a.num_fields)))
        if pa.types.is_list(a) and pa.types.is_list(b):
            return walk(a.value_type, b.value_type)
        if pa.types.is_map(a) and pa.types.is_map(b):
            return walk(a.key_type, b.key_type) | walk(a.item_type, b.item_type)
        return set() if a.equals(b) else {(str(a), str(b))}

    return set().union(*(walk(w.type, got.field(w.name).type) for w in want))


def _sorted_rows(table: Any) -> list[str]:
    import json

    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            items = [norm(x) for x in v]
            return sorted(
                items, key=lambda x: json.dumps(x, sort_keys=True, default=str)
            )  # Spark lost map order
        if isinstance(v, tuple):
            return [norm(x) for x in v]
        return v

    return sorted(json.dumps(norm(r), sort_keys=True, default=str) for r in table.to_pylist())


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [
        ("window_agg_watermark", []),
        ("window_agg_watermark", ["--changes"]),
        ("dedup_watermark", ["--changes", "--version", "2"]),
        ("rocks_agg_changelog", ["--partition", "1"]),
        ("agg_state_format_v1", []),
        ("rich_types", []),
    ],
)
def test_spark_writes_the_parquet_the_native_backend_writes(
    scenario: str, extra: list[str], checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    """``rows --backend spark --format parquet -o FOLDER``: Spark writes where it runs (a folder of part
    files), nothing is collected to statelens, and the rows, names and types are the native file's."""
    import pyarrow.parquet as pq

    root = checkpoint(scenario) / "checkpoint"
    native, folder = tmp_path / "native.parquet", tmp_path / "by-spark"
    base = ["rows", str(root), "--operator", "0", "--format", "parquet", *extra]
    assert main([*base, "-o", str(native), "--backend", "native"]) == 0
    assert main([*base, "-o", str(folder), "--backend", "spark"]) == 0
    assert folder.is_dir() and list(folder.glob("part-*.parquet"))
    want, got = pq.read_table(native), pq.read_table(folder)
    assert got.schema.names == want.schema.names
    # The same types, field names made unique the same way; but Parquet has no duration type Spark writes:
    # day-time intervals are int64 microseconds in Spark's files (duration[us] in statelens' own).
    assert _leaf_differences(want.schema, got.schema) <= {("duration[us]", "int64")}
    got = got.cast(want.schema)
    assert got.num_rows == want.num_rows > 0
    assert _sorted_rows(got) == _sorted_rows(want)


def test_spark_refuses_to_write_into_the_checkpoint_or_over_a_folder(
    checkpoint: Any, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoint("window_agg_watermark") / "checkpoint"
    base = ["rows", str(root), "--operator", "0", "--format", "parquet", "--backend", "spark"]
    assert main([*base, "-o", str(root / "exported")]) == 2
    assert "inside the checkpoint" in capsys.readouterr().err
    assert not (root / "exported").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    assert main([*base, "-o", str(taken)]) != 0
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--changes"]])
def test_spark_rows_as_json_lines_stream_from_one_job(
    extra: list[str],
    checkpoint: Any,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``rows --backend spark`` (JSON lines) streams from one job instead of collecting the whole store:
    nothing calls the collecting reads, and the lines are the native ones."""
    from statelens.readers.backends.spark import SparkBackend

    root = str(checkpoint("window_agg_watermark") / "checkpoint")
    base = ["rows", root, "--operator", "0", *extra]
    assert main([*base, "--backend", "native"]) == 0
    native = capsys.readouterr().out

    def collected(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the whole answer was collected")

    monkeypatch.setattr(SparkBackend, "read_rows", collected)
    monkeypatch.setattr(SparkBackend, "read_changes", collected)
    assert main([*base, "--backend", "spark"]) == 0
    through = capsys.readouterr().out
    assert sorted(through.splitlines()) == sorted(native.splitlines()) and native  # every batch committed

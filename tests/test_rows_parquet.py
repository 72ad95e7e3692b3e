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
                (c.version, c.partition_id, c.change, c.key, c.value)
                for v in reader.delta_versions(pid)
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

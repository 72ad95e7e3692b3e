"""The state browser's table over Arrow (columnar decode, rows made a page at a time): every column
shows, sorts and filters exactly as the same table over decoded Python rows."""

from __future__ import annotations

from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.session import _build_table, iter_state_table, state_columns
from statelens.readers.checkpoint import open_checkpoint
from statelens.viewers.tables import row_order

pytestmark = pytest.mark.spark

SCENARIOS = [
    "rich_types",
    "window_agg_watermark",
    "pandas_state_event",
    "join",
    "agg_many_partitions",
    "rocks_pandas_state",
    "session_window",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_arrow_table_shows_sorts_and_filters_as_python_rows(scenario: str, checkpoint: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    checked = presorted = searched = 0
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None or not store.versions:
                continue
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            version = max(
                store.versions,
                key=lambda v: sum(
                    len(reader.read_rows(p, v)) for p in reader.partition_ids() if v in reader.versions(p)
                ),
            )
            table = run_to_end(iter_state_table(reader, version))
            rows = list(table.records)  # plain Python rows: the reference path
            specs = state_columns(reader.schema, reader.store_name)
            headers, columns, sort_keys, keys = _build_table(rows, specs, reader.schema.key_schema)
            n = table.total_rows
            assert table.headers == headers and n == len(rows)
            for c in range(len(headers)):
                assert list(table.columns[c]) == list(columns[c]), (scenario, headers[c])
                assert table.columns[c][1:4] == columns[c][1:4]
                for descending in (False, True):
                    got = row_order(table.sort_keys, table.columns, n, c, descending, "")
                    want = row_order(sort_keys, columns, n, c, descending, "")
                    assert got.tolist() == want.tolist(), (scenario, headers[c], descending)
            needle = columns[1][n // 2][:3].casefold() if n else ""
            got = row_order(table.sort_keys, table.columns, n, 1, False, needle)
            want = row_order(sort_keys, columns, n, 1, False, needle)
            assert got.tolist() == want.tolist() and (len(got) > 0 or not n)
            assert [keys[i] for i in range(n)] == [table.keys[i] for i in range(n)]
            checked += n
            presorted += sum(hasattr(k, "ascending_order") for k in table.sort_keys)
            searched += all(hasattr(c, "contains") for c in table.columns)  # the vectorised filter compared
    assert checked > 0 and presorted > 0  # the Arrow orders were the ones compared
    if scenario == "agg_many_partitions":  # text and integer columns only
        assert searched > 0

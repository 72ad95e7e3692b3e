"""The state browser's table over Arrow (columnar decode, rows made a page at a time): every column
shows, sorts and filters exactly as the same table over decoded Python rows, and in the order the
table promises (:func:`expected_order`, written out here with ``sorted``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.session import _build_table, iter_state_table, state_columns
from statelens.readers.checkpoint import open_checkpoint
from statelens.viewers.tables import row_order

pytestmark = pytest.mark.spark


def expected_order(
    sort_keys: Sequence[Sequence[Any]],
    columns: Sequence[Sequence[str]],
    n: int,
    column: int,
    descending: bool,
    needle: str,
) -> list[int]:
    """Row positions the table should show, from its documented order, independently of the table's
    own sorting (``viewers.tables.row_order``): by ``column``'s sort keys, numbers by value with nulls
    (and NaN) first when every key is a number or null, anything else by its text (null as ""); ties in
    row order; descending is the ascending order reversed; -1 keeps row order. A ``needle`` (case-folded)
    keeps the rows where some column's text, case-folded, contains it."""
    rows = list(range(n))
    if column >= 0:
        keys = list(sort_keys[column])
        assert len(keys) == n
        if all(k is None or (isinstance(k, (int, float)) and not isinstance(k, bool)) for k in keys):

            def rank(i: int) -> tuple[Any, ...]:
                k = keys[i]
                return (0,) if k is None or (isinstance(k, float) and math.isnan(k)) else (1, k)

            rows.sort(key=rank)
        else:
            rows.sort(key=lambda i: "" if keys[i] is None else str(keys[i]))
        if descending:
            rows.reverse()
    if needle:
        rows = [i for i in rows if any(needle in str(col[i]).casefold() for col in columns)]
    return rows


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
    checked = presorted = searched = orders = 0
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
                    want = expected_order(sort_keys, columns, n, c, descending, "")
                    assert got.tolist() == want, (scenario, headers[c], descending)
                    assert row_order(sort_keys, columns, n, c, descending, "").tolist() == want
                    orders += 2
            needle = columns[1][n // 2][:3].casefold() if n else ""
            got = row_order(table.sort_keys, table.columns, n, 1, False, needle)
            want = expected_order(sort_keys, columns, n, 1, False, needle)
            assert got.tolist() == want and (len(got) > 0 or not n)
            assert row_order(sort_keys, columns, n, 1, False, needle).tolist() == want
            assert [keys[i] for i in range(n)] == [table.keys[i] for i in range(n)]
            checked += n
            presorted += sum(hasattr(k, "ascending_order") for k in table.sort_keys)
            searched += all(hasattr(c, "contains") for c in table.columns)  # the vectorised filter compared
    assert checked > 0 and presorted > 0  # the Arrow orders were the ones compared
    assert orders > 0
    if scenario == "agg_many_partitions":  # text and integer columns only
        assert searched > 0

"""The state browser's table over Arrow (columnar decode, rows made a page at a time): every column
shows, sorts and filters exactly as the same table over decoded Python rows, and in the order the
table promises (:func:`expected_order`, written out here with ``sorted``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.columns import _build_table, state_columns
from statelens.app.state_table import iter_state_table
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.scan import StateScan
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
            table = run_to_end(
                iter_state_table(StateScan(native_backend(ckpt), op.operator_id, store.store_name), version)
            )
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


#: What the probe below runs in a fresh process: every store's latest version decoded as the browser
#: decodes a big one (into the cache, paged by DuckDB, its first page asked for); rows counted and
#: whether pandas was imported, as JSON.
_PAGED_PROBE = """
import json, sys
from statelens.app.analysis._common import run_to_end
from statelens.app.state_table import iter_state_table
from statelens.readers.cache import StateCache
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.scan import StateScan
ckpt = open_checkpoint(sys.argv[1])
rows = {}
for op in ckpt.operators:
    for store in op.stores:
        if store.schema is None or not store.versions:
            continue
        scan = StateScan(native_backend(ckpt), op.operator_id, store.store_name)
        table = run_to_end(iter_state_table(scan, store.versions[-1], cache=StateCache(sys.argv[2]), paged_over=0))
        if table.query is not None:
            table.query.first_page(-1, True, "", 10)
            table.query.close()
        rows[f"{op.operator_id}/{store.store_name}"] = table.total_rows
print(json.dumps({"rows": rows, "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.parametrize("scenario", ["window_agg_watermark", "join", "rocks_agg_changelog"])
def test_the_browser_decodes_a_version_without_pandas(scenario: str, checkpoint: Any, tmp_path: Any) -> None:
    """Decoding a version for the browser (columns straight to Arrow: numbers, strings, timestamps,
    nested structs; a join's four stores; a RocksDB store from its changelogs), writing it to the cache
    and paging it with DuckDB imports no pandas (~0.3 s on the way to the browser's first page): Arrow's
    ``pa.array`` looks for pandas objects, so numpy columns are handed over as buffers. Every row is
    there. (Arrays and maps, decoded per value and converted by Arrow from Python lists, still import
    it.)"""
    import json
    import os
    import subprocess
    import sys

    root = checkpoint(scenario) / "checkpoint"
    out = subprocess.run(
        [sys.executable, "-c", _PAGED_PROBE, str(root), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ckpt = open_checkpoint(str(root))
    want = {}
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None or not store.versions:
                continue
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            v = store.versions[-1]
            want[f"{op.operator_id}/{store.store_name}"] = sum(
                len(reader.read_rows(p, v))
                for p in reader.partition_ids()
                if v in reader.versions(p) or v == 0
            )
    assert got["rows"] == want and sum(want.values()) > 0
    assert got["pandas"] is False


def test_numpy_columns_become_the_arrow_arrays_pa_array_makes() -> None:
    """:func:`readers.arrow_values.numpy_array` (buffers, no pandas) gives what ``pa.array(values,
    mask=mask)`` gives, for every fixed-width dtype the decoder gathers, with and without nulls, at
    lengths around a validity byte, and for strided input."""
    import numpy as np
    import pyarrow as pa

    from statelens.readers.arrow_values import numpy_array

    rng = np.random.default_rng(7)
    for dtype in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8", "?"):
        for n in (0, 1, 7, 8, 9, 1000):
            values = rng.integers(0, 100, n) > 50 if dtype == "?" else rng.integers(-50, 100, n).astype(dtype)
            for mask in (None, rng.integers(0, 2, n).astype(bool), np.zeros(n, dtype=bool)):
                got = numpy_array(values, mask)
                got.validate(full=True)
                want = pa.array(values, mask=mask)
                assert got.type == want.type and got.equals(want) and got.null_count == want.null_count
        strided = np.arange(20).astype(dtype)[::2]
        assert numpy_array(strided).equals(pa.array(strided))

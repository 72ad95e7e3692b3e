"""Versions too large to hold, paged by DuckDB from the cache (``app.state_query``): the same rows,
order, filter, keys and export as the in-memory table, on checkpoints written by Spark."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.state_table import iter_state_table
from statelens.readers.backends import native_backend
from statelens.readers.cache import StateCache
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import StatelensError
from statelens.readers.scan import StateScan
from tests.test_browser_arrow import SCENARIOS, expected_order  # the held table's own test

pytestmark = pytest.mark.spark

#: Columns whose filter text in DuckDB is exactly the display text (see the module's docstring).
_PLAIN = ("byte", "short", "integer", "long", "string", "boolean", "date", "timestamp", "timestamp_ntz")


def _scan(ckpt: Any, operator_id: int, store_name: str | None) -> StateScan:
    """The scan of a store, by the native decoder, as the browser's jobs take it."""
    return StateScan(native_backend(ckpt), operator_id, ckpt.store_reader(operator_id, store_name).store_name)


def _tables(reader: Any, version: int, cache_dir: Path) -> tuple[Any, Any]:
    held = run_to_end(iter_state_table(reader, version))
    paged = run_to_end(iter_state_table(reader, version, cache=StateCache(cache_dir), paged_over=0))
    return held, paged


def _plain(spec: Any) -> bool:
    if spec.side == "partition" or spec.unit is not None:
        return True
    try:
        return str(spec.dtype.typeName()) in _PLAIN
    except AttributeError:
        return False


def _sorted_like_display(spec: Any) -> bool:
    """Columns that sort by value (numbers, times, text): the same order in both tables."""
    if spec.numeric or spec.side in ("partition", "change"):
        return True
    return str(spec.dtype.typeName()) == "string"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_paged_table_pages_sorts_and_filters_as_the_held_one(
    scenario: str, checkpoint: Any, tmp_path: Path
) -> None:
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    compared = sorted_cols = filtered = 0
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None or not store.versions:
                continue
            reader = _scan(ckpt, op.operator_id, store.store_name)
            version = store.versions[-1]
            held, paged = _tables(reader, version, tmp_path / "cache")
            query = paged.query
            assert query is not None and held.query is None
            try:
                n = held.total_rows
                assert paged.total_rows == n and paged.headers == held.headers and not paged.records
                if not n:
                    continue
                page = query.page(-1, False, "", 0, n)
                assert page.texts == [list(c) for c in held.columns], (scenario, store.store_name)
                assert page.keys == [held.keys[i] for i in range(n)]
                assert page.partitions == [r.partition_id for r in held.records]
                # Pages are windows of one order.
                if n > 2:
                    part = query.page(-1, False, "", 1, 2)
                    assert [t[:] for t in part.texts] == [t[1:3] for t in page.texts]
                for c, spec in enumerate(query.specs):
                    for descending in (False, True):
                        got = query.page(c, descending, "", 0, n)
                        if _sorted_like_display(spec):
                            want = expected_order(held.sort_keys, held.columns, n, c, descending, "")
                            assert got.texts == [[col[i] for i in want] for col in held.columns], (
                                scenario,
                                spec.header,
                                descending,
                            )
                            sorted_cols += 1
                        else:  # lists, maps, binary: by DuckDB's text of them; the same rows
                            assert sorted(zip(*got.texts, strict=True)) == sorted(
                                zip(*page.texts, strict=True)
                            )
                # Filters on text of a plain column: exactly the held table's rows.
                for c, spec in enumerate(query.specs):
                    if not _plain(spec) or spec.side == "partition":
                        continue
                    needle = held.columns[c][n // 2][:4].casefold()
                    if not needle:
                        continue
                    want = expected_order(held.sort_keys, held.columns, n, -1, False, needle)
                    if not all(_plain(s) for s in query.specs):
                        # Other columns match on DuckDB's text: at least the plain columns' matches.
                        hits = {
                            i
                            for i in range(n)
                            if any(
                                needle in held.columns[k][i].casefold()
                                for k in range(len(query.specs))
                                if _plain(query.specs[k])
                            )
                        }
                        got = query.page(-1, False, needle, 0, n)
                        assert query.count(needle) == len(got) >= len(hits) > 0
                        filtered += 1
                        break
                    got = query.page(-1, False, needle, 0, n)
                    assert query.count(needle) == len(want) == len(got), (scenario, spec.header, needle)
                    assert got.texts == [[col[i] for i in want] for col in held.columns]
                    filtered += 1
                    break
                compared += 1
            finally:
                query.close()
    assert compared > 0
    assert sorted_cols > 0
    if scenario in ("agg_many_partitions", "rich_types"):
        assert filtered > 0


def test_small_versions_stay_in_memory_and_large_ones_pin_their_cache_files(
    checkpoint: Any, tmp_path: Path
) -> None:
    ckpt = open_checkpoint(str(checkpoint("agg_many_partitions") / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    version = reader.versions(None)[-1]
    cache = StateCache(tmp_path / "cache")
    held = run_to_end(iter_state_table(reader, version, cache=cache, paged_over=10**9))
    assert held.query is None and len(held.records) == held.total_rows > 0
    paged = run_to_end(iter_state_table(reader, version, cache=cache, paged_over=0))
    query = paged.query
    files = list(query.files)
    assert files and all(f.is_file() for f in files)
    assert all(tmp_path / "cache" in f.parents for f in files)
    # A cap of nothing evicts every entry but the pinned ones, which the table still reads.
    cache.max_bytes = 0
    cache.evict()
    assert all(f.is_file() for f in files)
    assert query.count("") == held.total_rows
    assert query.page(0, False, "", 0, 5).texts[0] == sorted(held.columns[0], key=int)[:5]
    tmp = Path(query._tmp)
    query.close()
    query.close()  # idempotent
    assert not tmp.exists()
    with pytest.raises(InterruptedError):
        query.count("x")
    cache.evict()
    assert not any(f.is_file() for f in files)  # unpinned: evicted like any entry


def test_export_of_a_paged_table_matches_the_held_one(checkpoint: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from statelens.app.export import iter_export_query_table, iter_export_state_table

    ckpt = open_checkpoint(str(checkpoint("rich_types") / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    version = reader.versions(None)[-1]
    held, paged = _tables(reader, version, tmp_path / "cache")
    try:
        n = held.total_rows
        assert n > 2
        column = 1
        order = expected_order(held.sort_keys, held.columns, n, column, True, "")
        for fmt in ("csv", "parquet"):
            a, b = tmp_path / f"held.{fmt}", tmp_path / f"paged.{fmt}"
            assert run_to_end(iter_export_state_table(held, str(a), fmt, order)) == n
            assert run_to_end(iter_export_query_table(paged, str(b), fmt, column, True, "")) == n
            if fmt == "csv":
                with open(a, newline="") as fa, open(b, newline="") as fb:
                    assert list(csv.reader(fa)) == list(csv.reader(fb))
            else:
                ta, tb = pq.read_table(a), pq.read_table(b)
                assert ta.schema == tb.schema
                assert repr(ta.to_pylist()) == repr(tb.to_pylist())  # repr: NaN equals NaN
    finally:
        paged.query.close()


@pytest.mark.parametrize(
    "scenario", ["agg_many_partitions", "rich_types", "pandas_state_event", "session_window"]
)
def test_paged_diff_matches_the_held_diff(scenario: str, checkpoint: Any, tmp_path: Path) -> None:
    """A diff of two versions kept in the cache per partition: held when small (the same records as
    without the cache), paged by DuckDB when large (the same rows, counts, order and export)."""
    from statelens.app.export import iter_export_query_table, iter_export_state_table
    from statelens.app.state_table import iter_state_diff

    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    compared = 0
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None or len(store.versions) < 2:
                continue
            reader = _scan(ckpt, op.operator_id, store.store_name)
            old, new = store.versions[(len(store.versions) - 1) // 2], store.versions[-1]
            held = run_to_end(iter_state_diff(reader, old, new))
            cache = StateCache(tmp_path / "cache")
            via_cache = run_to_end(iter_state_diff(reader, old, new, cache=cache, paged_over=10**9))
            assert via_cache.query is None
            assert repr(list(via_cache.records)) == repr(list(held.records))  # repr: NaN equals NaN
            assert via_cache.notes == held.notes
            paged = run_to_end(iter_state_diff(reader, old, new, cache=cache, paged_over=0))
            n = held.total_rows
            if not n:
                assert paged.query is None
                continue
            query = paged.query
            try:
                assert query is not None and paged.is_diff and paged.compare_version == old
                assert paged.total_rows == n and paged.notes == held.notes and paged.headers == held.headers
                page = query.page(-1, False, "", 0, n)
                assert page.texts == [list(c) for c in held.columns], (scenario, store.store_name)
                assert page.keys == [held.keys[i] for i in range(n)]
                for c, spec in enumerate(query.specs):
                    if spec.side == "before" or not _sorted_like_display(spec):
                        continue
                    for descending in (False, True):
                        want = expected_order(held.sort_keys, held.columns, n, c, descending, "")
                        got = query.page(c, descending, "", 0, n)
                        assert got.texts == [[col[i] for i in want] for col in held.columns], (
                            spec.header,
                            descending,
                        )
                for change in ("added", "removed", "changed"):
                    want = expected_order(held.sort_keys, held.columns, n, -1, False, change)
                    # "change" text is plain: rows whose change (or other text) holds the word
                    assert query.count(change) >= sum(1 for r in held.records if r.change == change)
                order = expected_order(held.sort_keys, held.columns, n, 1, True, "")
                a, b = tmp_path / "held.csv", tmp_path / "paged.csv"
                run_to_end(iter_export_state_table(held, str(a), "csv", order))
                run_to_end(iter_export_query_table(paged, str(b), "csv", 1, True, ""))
                assert a.read_text() == b.read_text()
                compared += 1
            finally:
                query.close()
    assert compared > 0


@pytest.mark.parametrize("one_scan_rows", [0, 100_000])
def test_first_page_counts_with_or_without_a_second_scan(
    one_scan_rows: int, checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page and the count of a filter, in the table's order or a column's, equal the held
    table's: from one scan when every match fits in ``ONE_SCAN_ROWS`` (the page sorted out of them), from
    page and count queries otherwise."""
    from statelens.app import state_query

    monkeypatch.setattr(state_query, "ONE_SCAN_ROWS", one_scan_rows)
    ckpt = open_checkpoint(str(checkpoint("agg_many_partitions") / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    held, paged = _tables(reader, reader.versions(None)[-1], tmp_path / "cache")
    query = paged.query
    try:
        n = held.total_rows
        # Needles an integer's text can or cannot hold ("-0", "1-"), letters in any case, "null".
        needles = (
            "",
            held.columns[1][0],
            held.columns[1][0].upper(),
            "no such text",
            "-",
            "-0",
            "1-",
            "0",
            "1",
            "ull",
        )
        for needle in needles:
            for column, descending in ((2, False), (-1, False), (1, True)):
                want = expected_order(held.sort_keys, held.columns, n, column, descending, needle.casefold())
                for limit in (1, n + 1):
                    matching, page = query.first_page(column, descending, needle, limit)
                    assert matching == len(want) == query.count(needle)
                    assert page.texts == [[col[i] for i in want[:limit]] for col in held.columns]
    finally:
        query.close()


def test_a_cache_file_removed_under_an_open_table_is_a_clear_error(checkpoint: Any, tmp_path: Path) -> None:
    """Another process clearing the cache (``statelens cache clear``) while the app pages a version: the
    next query fails with a typed error that says what to do; the table still closes cleanly."""
    from statelens.readers.errors import StorageError

    folder = checkpoint("agg_many_partitions")
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    cache = StateCache(tmp_path / "cache")
    paged = run_to_end(iter_state_table(reader, reader.versions(None)[-1], cache=cache, paged_over=0))
    query = paged.query
    # Before the cache is cleared, queries over its files answer: every key of the last batch, and the
    # keys whose name or count holds a digit no partition id (0-3) has, as the generator recorded them.
    final = json.loads((folder / "expected.json").read_text())["final_state"]  # {key: [count]}
    assert query.count("") == len(final) > 0
    for needle in "456":
        assert query.count(needle) == sum(1 for k, (n,) in final.items() if needle in k + str(n)), needle
    assert cache.clear() == len(query.files)  # what `statelens cache clear` does, pins or not
    with pytest.raises(StorageError) as info:
        query.page(1, False, "", 0, 10)
    assert "open the version again" in str(info.value) and str(tmp_path / "cache") in str(info.value)
    query.close()
    # A table made over files that are gone fails the same way, pinning nothing and leaving no folder.
    from statelens.app.state_query import QueryStateTable

    before = set(Path(tempfile.gettempdir()).glob("statelens-duckdb-*"))
    with pytest.raises(StorageError):
        QueryStateTable(query.files, query.specs, query.key_schema, query.value_schema, 1, cache)
    assert not set(Path(tempfile.gettempdir()).glob("statelens-duckdb-*")) - before  # none left behind
    assert not cache._pinned
    # Opened again, the version is decoded afresh into the cache.
    again = run_to_end(iter_state_table(reader, reader.versions(None)[-1], cache=cache, paged_over=0))
    try:
        assert again.query.count("") == paged.total_rows and all(f.is_file() for f in again.query.files)
    finally:
        again.query.close()


def test_a_cache_that_cannot_be_written_keeps_the_version_in_memory(checkpoint: Any, tmp_path: Path) -> None:
    """No room in the cache (here its folder is a file): the version and the diff are held, as without
    a cache, never lost."""
    from statelens.app.state_table import iter_state_diff

    ckpt = open_checkpoint(str(checkpoint("agg_many_partitions") / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    cache = StateCache(blocked)
    latest = reader.versions(None)[-1]
    held = run_to_end(iter_state_table(reader, latest))
    got = run_to_end(iter_state_table(reader, latest, cache=cache, paged_over=0))
    assert got.query is None and got.total_rows == held.total_rows > 0
    assert [list(c) for c in got.columns] == [list(c) for c in held.columns]
    old = reader.versions(0)[0]
    want = run_to_end(iter_state_diff(reader, old, latest))
    diff = run_to_end(iter_state_diff(reader, old, latest, cache=cache, paged_over=0))
    assert diff.query is None and diff.total_rows == want.total_rows > 0
    assert list(diff.records) == list(want.records) and diff.notes == want.notes


@pytest.mark.parametrize("scenario", ["agg_many_partitions", "rich_types"])
def test_position_of_a_key_is_its_row_in_the_order(scenario: str, checkpoint: Any, tmp_path: Path) -> None:
    """Where a key selected elsewhere stands in the paged table's current order and filter."""
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    reader = _scan(ckpt, 0, None)
    held, paged = _tables(reader, reader.versions(None)[-1], tmp_path / "cache")
    query = paged.query
    try:
        n = held.total_rows
        assert n > 1
        probes = sorted({0, n // 3, n // 2, n - 1})
        needle = held.columns[1][n // 2][:2].casefold()
        checked = 0
        for c, spec in enumerate(query.specs):
            if not _sorted_like_display(spec):
                continue
            for descending in (False, True):
                for flt in ("", needle):
                    order = expected_order(held.sort_keys, held.columns, n, c, descending, flt)
                    for i in probes:
                        r = held.records[i]
                        want = order.index(i) if i in order else None
                        got = query.position_of(c, descending, flt, r.partition_id, held.keys[i])
                        if want is None and flt and not all(_plain(s) for s in query.specs):
                            continue  # DuckDB's text of a list/map may still match the needle
                        assert got == want, (spec.header, descending, flt, i)
                        checked += 1
        order = list(range(n))
        assert [
            query.position_of(-1, False, "", held.records[i].partition_id, held.keys[i]) for i in probes
        ] == probes
        assert query.position_of(-1, False, "", held.records[0].partition_id + 1000, held.keys[0]) is None
        assert checked > 0
    finally:
        query.close()


@pytest.mark.parametrize("scenario", ["rocks_tws_timers", "rocks_tws_avro", "rocks_join_v4"])
def test_column_family_stores_page_as_they_are_held(scenario: str, checkpoint: Any, tmp_path: Path) -> None:
    """transformWithState variables, their TTL indexes and timers, and a join's families in state format
    4 (RocksDB column families, Avro values too): the paged rows are the held rows."""
    ckpt = open_checkpoint(str(checkpoint(scenario) / "checkpoint"))
    native = native_backend(ckpt)
    compared = 0
    for op in ckpt.operators:
        for store in op.stores:
            if store.schema is None or not store.versions:
                continue
            reader = StateScan(native, op.operator_id, store.store_name)
            held, paged = _tables(reader, store.versions[-1], tmp_path / "cache")
            if not held.total_rows:
                assert paged.query is None
                continue
            try:
                n = held.total_rows
                page = paged.query.page(-1, False, "", 0, n)
                assert page.texts == [list(c) for c in held.columns], store.store_name
                assert page.keys == [held.keys[i] for i in range(n)]
                compared += 1
            finally:
                paged.query.close()
    assert compared >= 3


def test_a_damaged_delta_leaves_its_partition_out_of_the_version_and_the_diff(
    checkpoint: Any, tmp_path: Path
) -> None:
    """A delta cut short (version 2 of partition 0): the last version and the diff up to it name the file
    among their problems and show the other partition whole, never an empty partition in its place; the
    partition asked for alone raises the error (the scan's policy)."""
    from statelens.app.state_table import iter_state_diff

    folder = checkpoint("agg_count") / "checkpoint"
    shutil.copytree(folder, tmp_path / "checkpoint")
    delta = tmp_path / "checkpoint" / "state" / "0" / "0" / "2.delta"
    delta.write_bytes(delta.read_bytes()[:-7])
    scan = _scan(open_checkpoint(str(tmp_path / "checkpoint")), 0, None)
    whole = _scan(open_checkpoint(str(folder)), 0, None)
    table = run_to_end(iter_state_table(scan, 4))
    diff = run_to_end(iter_state_diff(scan, 1, 4))
    for got, want in (
        (table, run_to_end(iter_state_table(whole, 4, 1))),
        (diff, run_to_end(iter_state_diff(whole, 1, 4, 1))),
    ):
        assert [e.path for e in got.problems] == ["state/0/0/2.delta"]
        assert want.records and list(got.records) == list(want.records)  # partition 1's, as undamaged
    with pytest.raises(StatelensError, match="2.delta"):
        run_to_end(iter_state_table(scan, 4, 0))
    with pytest.raises(StatelensError, match="2.delta"):
        run_to_end(iter_state_diff(scan, 1, 4, 0))

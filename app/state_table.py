"""The state browser's jobs (Qt-free): one store version, or the difference of two, read through the scan
into a :class:`StateTable` of lazy display columns; a version too large to hold stays in the state cache,
paged by DuckDB (:mod:`app.state_query`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.columns import (
    ColumnSpec,
    _arrow_columns,
    _build_table,
    _cell_formatter,
    state_columns,
)
from statelens.app.state_query import QueryStateTable, diff_rows
from statelens.readers.arrow_values import ArrowStateRows
from statelens.readers.errors import SchemaMismatchError, StatelensError, UsageError
from statelens.readers.model import Progress, StoreInfo
from statelens.readers.parallel import WORKERS
from statelens.readers.scan import ScanPart, StateScan
from statelens.readers.scan_diff import iter_diff
from statelens.readers.textfmt import ranges as _ranges


@dataclass
class StateTable:
    """Decoded rows of one store at one version (or a diff of two versions), as lazy display columns.

    Attributes
    ----------
    headers : list of str
        ``partition``, then ``key.<field>``..., then ``value.<field>``... (a diff starts with
        ``change`` and ends with ``value before``).
    columns : list of Sequence[str]
        Display text per column (plain text, formatted on demand).
    sort_keys : list of Sequence
        Per column: ints/floats (None for null) when the column is numeric, else the display text.
    keys : Sequence
        The key of each row in the JSON form of ``statelens rows`` (a ``JsonObject``), converted on
        demand; it is what :class:`SelectionState` holds as ``key``.
    records : list
        The decoded rows (``StateRow``, or ``DiffRow`` for a diff), for typed export.
    total_rows : int
        Rows in the state.
    notes : list of str
        Partitions skipped (version not readable there), for the status line.
    problems : list of StatelensError
        Partitions whose files could not be read.
    backend : str
        Which backend answered (``native decoder``, ``Spark 4.x on local[*]``).
    compare_version : int or None
        For a diff: the version compared against (``version`` is the newer one).
    query : app.state_query.QueryStateTable or None
        For a version too large to hold: its rows, queried a page at a time (``columns``,
        ``sort_keys``, ``keys`` and ``records`` are then empty).
    """

    operator_id: int
    store_name: str
    partition_id: int | None
    version: int
    headers: list[str]
    columns: list[Sequence[str]]
    sort_keys: list[Sequence[Any]]
    keys: Sequence[Any]
    records: Sequence[Any] = ()
    total_rows: int = 0
    notes: list[str] = field(default_factory=list)
    problems: list[StatelensError] = field(default_factory=list)
    backend: str = "native decoder"
    compare_version: int | None = None
    key_schema: Any = None
    value_schema: Any = None
    query: Any = None  # app.state_query.QueryStateTable: rows left on disk, paged by DuckDB

    @property
    def is_diff(self) -> bool:
        return self.compare_version is not None


def _table(
    store: StateScan | StoreInfo,
    partition_id: int | None,
    version: int,
    schema: Any,
    specs: Sequence[ColumnSpec],
    records: Sequence[Any],
    total: int,
    notes: list[str] | None = None,
    problems: list[StatelensError] | None = None,
    query: QueryStateTable | None = None,
) -> StateTable:
    """A :class:`StateTable` of ``store``'s ``records`` shown as ``specs`` (Arrow-backed records sort and
    format from their arrays), or of the rows ``query`` pages from the cache."""
    if query is None:
        headers, columns, sort_keys, keys = _build_table(records, specs, schema.key_schema)
        columns, sort_keys = _arrow_columns(records, specs, columns, sort_keys)
    else:
        headers, columns, sort_keys, keys = query.headers, [], [], []
    return StateTable(
        store.operator_id,
        store.store_name or "",
        partition_id,
        version,
        headers,
        columns,
        sort_keys,
        keys,
        records,
        total,
        notes or [],
        problems or [],
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
        query=query,
    )


def _require_schema(scan: StateScan) -> Any:
    schema = scan.schema
    if schema is None:
        raise SchemaMismatchError(
            "this store has no schema file, so its rows cannot be decoded",
            path=f"state/{scan.operator_id}",
            operator_id=scan.operator_id,
            store_name=scan.store_name,
        )
    return schema


def iter_state_table(
    scan: StateScan,
    version: int,
    partition_id: int | None = None,
    max_rows: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
    cache: Any = None,
    paged_over: int | None = None,
) -> Generator[Progress, None, StateTable]:
    """Decode one store at one version into lazy display columns.

    Parameters
    ----------
    scan : readers.scan.StateScan
        The store's scan (its backend, operator and store name; what else it says is set here), on a
        backend that reads files (``capabilities.raw_records``).
    version : int
        State version (written by batch ``version - 1``).
    partition_id : int, optional
        One partition; every partition when None (partitions where ``version`` cannot be rebuilt are
        listed in ``notes``; partitions whose files fail are listed in ``problems``).
    max_rows : int, optional
        Keep at most this many rows (all by default: the table pages through them).
    time_columns : sequence of readers.model.TimeColumn
        The operator's time columns (those of other stores are ignored).
    cancelled : callable, optional
        Returns True when the work should stop early.
    cache : readers.cache.StateCache, optional
        Where decoded versions are kept and found again.
    paged_over : int, optional
        With ``cache``: a version of more rows than this is not held in memory but left in the cache
        and served a page at a time by DuckDB (the table's ``query``, see :mod:`app.state_query`).

    Yields
    ------
    Progress
        One per partition.

    Returns
    -------
    StateTable

    Raises
    ------
    UsageError
        When the store has no such partition or the version is not readable in any partition.
    StatelensError
        When the one requested partition cannot be read (bad or missing file).
    """
    schema = _require_schema(scan)
    pids, readable, skipped = _partitions(scan, partition_id, (version,))
    notes: list[str] = []
    what = f"decoding operator {scan.operator_id} {scan.store_name} version {version}"
    # Large versions stay in the cache (one Parquet file per partition) for DuckDB to page through.
    in_cache = paged_over is not None and cache is not None and max_rows is None
    rows = dataclasses.replace(
        scan, kind="rows", version=version, partitions=readable, cache=cache, cancelled=cancelled
    )

    def reread(pid: int) -> Any:
        return next(dataclasses.replace(rows, partitions=[pid]).iter_parts()).tables[0]

    files, parts, total = yield from _gather(
        rows,
        rows.iter_parts(in_place=in_cache, threads=WORKERS),
        len(pids),
        what,
        partition_id,
        paged_over if in_cache else None,
        reread,
    )
    _check_skipped(scan, version, partition_id, pids, skipped, notes)
    specs = state_columns(schema, scan.store_name or "", time_columns)
    if files:
        yield Progress(len(pids), len(pids), what)
        query = QueryStateTable(files, specs, schema.key_schema, schema.value_schema, total, cache)
        return _table(scan, partition_id, version, schema, specs, (), total, notes, rows.problems, query)
    tables: list[Any] = []
    kept = 0
    for part in parts:
        room = part.num_rows if max_rows is None else max(max_rows - kept, 0)
        if room:
            tables.append(part.slice(0, room))
            kept += min(room, part.num_rows)
    if total > kept:
        notes.append(f"showing the first {kept:,} of {total:,} rows")
    records = ArrowStateRows(tables, schema.key_schema, schema.value_schema)
    yield Progress(len(pids), len(pids), what)
    return _table(scan, partition_id, version, schema, specs, records, total, notes, rows.problems)


def iter_backend_table(
    backend: Any,
    store: StoreInfo,
    version: int,
    partition_id: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, StateTable]:
    """Read one store at one version through a backend that reads through an engine into display columns.

    Spark answers in one job (collected, cancelled through its job group); the table is the same shape
    as :func:`iter_state_table`'s.

    Parameters
    ----------
    backend : readers.backends.base.StateBackend
    store : readers.model.StoreInfo
    version : int
    partition_id : int, optional
    time_columns : sequence of readers.model.TimeColumn
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    StateTable

    Raises
    ------
    StatelensError
        As the backend's read (``UsageError`` for versions Spark cannot read,
        ``BackendUnavailableError`` without PySpark or Java).
    """
    if store.schema is None:
        raise UsageError(
            f"store {store.store_name!r} of operator {store.operator_id} has no schema: rows cannot be decoded"
        )
    what = f"reading operator {store.operator_id} {store.store_name} version {version} through {backend.name}"
    yield Progress(0, 0, what)  # one job with no steps to count: a busy indicator
    scan = StateScan(
        backend,
        store.operator_id,
        store.store_name,
        version=version,
        partitions=[partition_id] if partition_id is not None else None,
        strict=True,
    )
    rows = scan.collect()
    if cancelled is not None and cancelled():
        rows = []
    rows.sort(key=lambda r: r.partition_id)
    yield Progress(1, 1, what)
    specs = state_columns(store.schema, store.store_name, time_columns)
    table = _table(store, partition_id, version, store.schema, specs, rows, len(rows))
    return dataclasses.replace(table, backend=backend.describe())


def _partitions(
    scan: StateScan, partition_id: int | None, versions: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """The partitions asked for, those where every one of ``versions`` can be read (version 0, empty,
    always can), and the others."""
    pids = scan.partition_ids()
    if partition_id is not None and partition_id not in pids:
        raise UsageError(
            f"store {scan.store_name!r} of operator {scan.operator_id} has no partition {partition_id}",
            operator_id=scan.operator_id,
        )
    pids = pids if partition_id is None else [partition_id]
    readable: list[int] = []
    skipped: list[int] = []
    for pid in pids:
        have = scan.versions(pid)
        (skipped if any(v != 0 and v not in have for v in versions) else readable).append(pid)
    return pids, readable, skipped


def _gather(
    scan: StateScan,
    parts: Iterator[ScanPart],
    count: int,
    what: str,
    partition_id: int | None,
    paged_over: int | None,
    reread: Callable[[int], Any],
    seen: Callable[[Any], None] | None = None,
) -> Generator[Progress, None, tuple[list[Any], list[Any], int]]:
    """``(files, tables, rows)`` of the ``parts`` of ``scan`` (each table also given to ``seen``; a
    partition that fails is in the scan's problems, raised when it alone was asked for): the cache files
    (for DuckDB to page) when every partition is in the cache and more than ``paged_over`` rows came, else
    the tables in partition order. Tables let go once paged are read again with ``reread(pid)`` if
    needed after all."""
    answered: list[int] = []
    files: list[Any] = []
    tables: dict[int, Any] = {}
    total = 0
    all_cached = True

    def paged() -> bool:
        return all_cached and paged_over is not None and total > paged_over

    yield Progress(0, count, what)
    try:
        for done, part in enumerate(parts, 1):
            pid, table = part.partition_id, part.tables[0]
            yield Progress(done, count, f"{what}, partition {pid}")
            total += table.num_rows
            if seen is not None:
                seen(table)
            answered.append(pid)
            if part.cache_file is None:
                all_cached = False  # the cache cannot hold it: the version stays in memory
            else:
                files.append(part.cache_file)
            tables[pid] = table
            if paged():
                tables.clear()  # the cache holds them
    except StatelensError as err:  # the one partition readable of several: a problem, not the answer
        if partition_id is not None:
            raise
        scan.problems.append(err)
    if files and paged():
        return files, [], total
    return [], [tables[pid] if pid in tables else reread(pid) for pid in answered], total


def _check_skipped(
    scan: StateScan,
    version: int,
    partition_id: int | None,
    pids: Sequence[int],
    skipped: Sequence[int],
    notes: list[str],
) -> None:
    if not skipped:
        return
    if len(skipped) == len(pids):
        have = scan.versions(partition_id)
        span = f"{have[0]}–{have[-1]}" if have else "none"
        raise UsageError(
            f"version {version} cannot be rebuilt in {'partition ' + str(partition_id) if partition_id is not None else 'any partition'} "
            f"of operator {scan.operator_id} store {scan.store_name!r}; readable versions: {span}",
            operator_id=scan.operator_id,
            store_name=scan.store_name,
            version=version,
        )
    notes.append(f"version {version} not readable in partitions {_ranges(skipped)}")


def iter_state_diff(
    scan: StateScan,
    old_version: int,
    new_version: int,
    partition_id: int | None = None,
    time_columns: Sequence[Any] = (),
    cancelled: Callable[[], bool] | None = None,
    cache: Any = None,
    paged_over: int | None = None,
) -> Generator[Progress, None, StateTable]:
    """The rows added, changed and removed between two versions of one store.

    Compares the raw key and value bytes of both versions per partition (UnsafeRow bytes of equal
    values are equal), then decodes only the rows that differ (:func:`readers.scan_diff.iter_diff`).

    Parameters
    ----------
    scan : readers.scan.StateScan
        The store's scan, as :func:`iter_state_table` takes it.
    old_version, new_version : int
        The versions to compare (``new_version`` is shown as the table's version).
    partition_id : int, optional
        One partition, or every partition readable at both versions.
    time_columns : sequence of readers.model.TimeColumn
    cancelled : callable, optional
    cache : readers.cache.StateCache, optional
    paged_over : int, optional
        With ``cache``: each partition's differences are kept in the cache (one Parquet file per
        partition and pair of versions, reused on reopen), and a diff of more rows than this is
        served from there a page at a time by DuckDB (the table's ``query``), not held in memory.

    Yields
    ------
    Progress

    Returns
    -------
    StateTable
        Columns ``change``, ``partition``, key and value fields (the newer value; the old one for
        removed rows) and ``value before`` for changed rows.

    Raises
    ------
    UsageError
        Unknown partition, or a version readable in no partition.
    """
    schema = _require_schema(scan)
    pids, readable, skipped = _partitions(scan, partition_id, (old_version, new_version))
    notes: list[str] = []
    what = (
        f"comparing versions {old_version} and {new_version} of operator {scan.operator_id} {scan.store_name}"
    )
    in_cache = paged_over is not None and cache is not None
    counts = {"added": 0, "changed": 0, "removed": 0}
    diff = dataclasses.replace(
        scan, partitions=readable, cache=cache if in_cache else None, cancelled=cancelled
    )

    def reread(pid: int) -> Any:
        return next(iter_diff(dataclasses.replace(diff, partitions=[pid]), old_version, new_version)).tables[
            0
        ]

    def tally(table: Any) -> None:
        for change, n in _change_counts(table).items():
            counts[change] += n

    files, parts, total = yield from _gather(
        diff,
        iter_diff(diff, old_version, new_version, in_place=in_cache, threads=WORKERS),
        len(pids),
        what,
        partition_id,
        paged_over if in_cache else None,
        reread,
        tally,
    )
    _check_skipped(scan, new_version, partition_id, pids, skipped, notes)
    notes.insert(0, ", ".join(f"{n:,} {c}" for c, n in counts.items()))
    yield Progress(len(pids), len(pids), what)
    value_fmt = _cell_formatter(schema.value_schema, None)
    specs = [
        ColumnSpec("change", lambda r: r.change, str, False, side="change"),
        *state_columns(schema, scan.store_name or "", time_columns),
        ColumnSpec(
            "value before",
            lambda r: r.before,
            lambda v: "" if v is None else value_fmt(v),
            False,
            schema.value_schema,
            side="before",
        ),
    ]
    if files:
        query = QueryStateTable(files, specs, schema.key_schema, schema.value_schema, total, cache, diff=True)
        table = _table(scan, partition_id, new_version, schema, specs, (), total, notes, diff.problems, query)
    else:
        records = [r for part in parts for r in diff_rows(part, schema.key_schema, schema.value_schema)]
        n = len(records)
        table = _table(scan, partition_id, new_version, schema, specs, records, n, notes, diff.problems)
    return dataclasses.replace(table, compare_version=old_version)


def _change_counts(table: Any) -> dict[str, int]:
    """Rows per kind of change in a diff table."""
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    counts = pc.value_counts(table.column("change").combine_chunks())
    return {str(c["values"]): int(c["counts"]) for c in counts.to_pylist()}

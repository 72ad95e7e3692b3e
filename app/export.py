"""Qt-free writers behind the desktop app's Export actions: tables to CSV or Parquet, the HTML report.

The GUI runs these generators in its worker (they yield :class:`~readers.model.Progress` about every
20,000 rows and stop when cancelled, leaving no half-written file behind). Everything goes through
:mod:`readers.values`, so exported files match ``statelens rows``:

* decoded state rows (:func:`iter_export_state_table`): typed, as ``statelens rows --format csv|parquet``
  (``partition, key.*, value.*``; a diff adds ``change`` and the version; Parquet keeps Spark's types);
* JSON documents (:func:`iter_export_documents`, e.g. expired-key findings): flattened to CSV columns,
  Parquet typed from the JSON form;
* any display table (:func:`iter_export_display_table`): the text shown, numbers as numbers.

Files are written to ``<path>.partial`` first and renamed when complete. Nothing here ever writes
inside a checkpoint (the caller picks the path; :func:`check_output_path` refuses one inside it).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

from statelens.app.analysis.report import iter_report
from statelens.app.output import csv_cell, flat_columns, flatten_row, write_parquet
from statelens.readers.errors import UsageError
from statelens.readers.model import Progress
from statelens.readers.values import JsonObject, row_to_json, rows_to_arrow, state_row_schema

FORMATS = ("csv", "parquet")
_STEP = 20_000


def check_output_path(path: str, checkpoint_location: str | None = None) -> str:
    """Refuse output paths inside the checkpoint (statelens never writes to one).

    Parameters
    ----------
    path : str
        The file to write.
    checkpoint_location : str, optional
        A local checkpoint folder.

    Returns
    -------
    str
        The absolute path.

    Raises
    ------
    UsageError
        When ``path`` is inside the checkpoint.
    """
    out = os.path.abspath(path)
    if checkpoint_location and "://" not in checkpoint_location:
        root = os.path.abspath(checkpoint_location)
        if os.path.commonpath([out, root]) == root:
            raise UsageError(
                f"{out} is inside the checkpoint {root}: statelens never writes there; pick another folder"
            )
    return out


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")


class _Partial:
    """Writes go to ``<path>.partial``; renamed over ``path`` on success, removed otherwise."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = path + ".partial"

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        if kind is None:
            os.replace(self.tmp, self.path)
        elif os.path.exists(self.tmp):
            os.remove(self.tmp)


def _stopped(cancelled: Callable[[], bool] | None) -> None:
    if cancelled is not None and cancelled():
        raise InterruptedError("export cancelled")


def _write_csv_rows(
    tmp: str,
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    n: int,
    what: str,
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, None]:
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for i, row in enumerate(rows):
            if i % _STEP == 0:
                _stopped(cancelled)
                yield Progress(i, n, what)
            writer.writerow(row)


def iter_export_state_table(
    table: Any,
    path: str,
    fmt: str,
    rows: Sequence[int] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, int]:
    """Write decoded state rows (an :class:`app.state_table.StateTable`) as ``statelens rows`` does.

    Parameters
    ----------
    table : app.state_table.StateTable
        Rows (``StateRow``) or a diff (``DiffRow``: written as a change feed, ``version, partition,
        change, key, value, derived``, with ``value`` the old value of removed rows and ``derived`` true:
        a diff is the difference of two versions).
    path : str
    fmt : {"csv", "parquet"}
    rows : sequence of int, optional
        Positions of the records to write, in order (the table's filtered, sorted rows); all when None.
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    int
        Rows written.
    """

    records = table.records
    order = range(len(records)) if rows is None else rows
    if fmt != "parquet":  # a row at a time
        return (
            yield from _write_records(table, ([records[i]] for i in order), len(order), path, fmt, cancelled)
        )
    data = []  # written as one table
    for j, i in enumerate(order):
        if j % _STEP == 0:
            _stopped(cancelled)
        data.append(records[i])
    return (yield from _write_records(table, [data], len(order), path, fmt, cancelled))


def iter_export_query_table(
    table: Any,
    path: str,
    fmt: str,
    column: int = -1,
    descending: bool = False,
    needle: str = "",
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, int]:
    """Write the rows of a paged state table (``StateTable.query``) as ``statelens rows`` does (a diff
    as a change feed, as :func:`iter_export_state_table`), in the browser's order and filter, a batch
    at a time (the rows are never all in memory).

    Parameters
    ----------
    table : app.state_table.StateTable
        With ``query`` (an :class:`app.state_query.QueryStateTable`).
    path : str
    fmt : {"csv", "parquet"}
    column, descending, needle
        The browser's sort column (-1: none), direction and filter text.
    cancelled : callable, optional

    Returns
    -------
    int
        Rows written.
    """
    _check_format(fmt)
    query = table.query
    batches = query.iter_rows(column, descending, needle, cancelled=cancelled)
    return (yield from _write_records(table, batches, query.count(needle), path, fmt, cancelled))


def _write_records(
    table: Any,
    batches: Iterable[Sequence[Any]],
    n: int,
    path: str,
    fmt: str,
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, int]:
    """Write ``n`` records of ``table`` (``StateRow``, or ``DiffRow`` of a diff), given a batch at a time,
    as ``statelens rows`` does: each batch a Parquet row group, or CSV rows; returns the rows written."""
    import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

    _check_format(fmt)
    diff = table.is_diff
    schema = state_row_schema(table.key_schema, table.value_schema, changes=diff)

    def tuples(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
        if diff:
            return [(table.version, r.partition_id, r.change, r.key, r.value, True) for r in rows]
        return [(r.partition_id, r.key, r.value) for r in rows]

    what = f"writing {n:,} rows to {os.path.basename(path)}"
    done = 0
    yield Progress(0, n, what)
    with _Partial(path) as tmp:
        if fmt == "parquet":
            writer = None
            try:
                for rows in batches:
                    part = rows_to_arrow(tuples(rows), schema, unique_names=True)
                    if writer is None:
                        writer = pq.ParquetWriter(tmp, part.schema)
                    writer.write_table(part)
                    done += len(rows)
                    yield Progress(done, n, what)
                if writer is None:
                    pq.write_table(rows_to_arrow([], schema, unique_names=True), tmp)
            finally:
                if writer is not None:
                    writer.close()
        else:

            def cells() -> Iterable[list[str]]:
                nonlocal done
                for rows in batches:
                    for t in tuples(rows):
                        doc = row_to_json(t, schema)
                        yield [csv_cell(v) for _, v in flatten_row(doc, "", schema)]
                    done += len(rows)

            yield from _write_csv_rows(tmp, flat_columns(schema), cells(), n, what, cancelled)
    yield Progress(n, n, what)
    return done


def iter_export_documents(
    docs: Iterable[Any],
    path: str,
    fmt: str,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, int]:
    """Write JSON documents (``JsonObject``/dicts, e.g. ``ExpiredFinding.to_json()``).

    CSV columns are the flattened names of every document (``key.user``...), in first-seen order;
    Parquet types come from the JSON form (:func:`readers.values.write_parquet` without a schema).

    Parameters
    ----------
    docs : iterable
        Consumed here (in the worker), so a generator defers building them.
    path : str
    fmt : {"csv", "parquet"}
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    int
        Documents written.
    """

    _check_format(fmt)
    docs = [
        d if isinstance(d, JsonObject) else JsonObject(d.items()) if isinstance(d, dict) else d for d in docs
    ]
    n = len(docs)
    what = f"writing {n:,} rows to {os.path.basename(path)}"
    with _Partial(path) as tmp:
        if fmt == "parquet":
            yield Progress(0, n, what)
            _stopped(cancelled)
            write_parquet(docs, tmp)
        else:
            flat = [flatten_row(d) for d in docs]
            names: dict[str, None] = {}
            for cells in flat:
                names.update(dict.fromkeys(name for name, _ in cells))
            header = list(names)

            def rows() -> Iterable[list[str]]:
                for cells in flat:
                    by_name = dict(cells)
                    yield [csv_cell(by_name.get(name)) for name in header]

            yield from _write_csv_rows(tmp, header, rows(), n, what, cancelled)
    yield Progress(n, n, what)
    return n


def iter_export_display_table(
    headers: Sequence[str],
    columns: Sequence[Sequence[str]],
    sort_keys: Sequence[Sequence[Any]] | None,
    path: str,
    fmt: str,
    rows: Sequence[int] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, int]:
    """Write a table as shown: display text, except numeric columns, written as numbers.

    Parameters
    ----------
    headers : sequence of str
    columns : sequence of sequence of str
        Display text per column.
    sort_keys : sequence of sequence, optional
        Per column, numbers (None for null) for numeric columns; other columns are written as text.
    path : str
    fmt : {"csv", "parquet"}
    rows : sequence of int, optional
        Row positions to write, in order; all when None.
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    int
        Rows written.
    """

    _check_format(fmt)
    n_all = len(columns[0]) if columns else 0
    order = list(range(n_all)) if rows is None else list(rows)
    numeric = [_numeric(sort_keys[c]) if sort_keys is not None else False for c in range(len(columns))]

    def cell(c: int, i: int) -> Any:
        if numeric[c]:
            return sort_keys[c][i]  # type: ignore[index]
        return columns[c][i]

    docs = []
    for j, i in enumerate(order):
        if j % _STEP == 0:
            _stopped(cancelled)
            yield Progress(j, len(order), f"collecting {len(order):,} rows")
        docs.append(JsonObject((h, cell(c, i)) for c, h in enumerate(headers)))
    return (yield from iter_export_documents(docs, path, fmt, cancelled))


def _numeric(keys: Sequence[Any]) -> bool:
    seen = 0
    for k in keys[:200]:
        if k is None:
            continue
        if isinstance(k, bool) or not isinstance(k, (int, float)):
            return False
        seen += 1
    return seen > 0


def iter_export_report(
    ckpt: Any, path: str, cancelled: Callable[[], bool] | None = None
) -> Generator[Progress, None, str]:
    """Write the HTML post-mortem report (:func:`app.analysis.report.iter_report`) to ``path``.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    path : str
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    str
        The path written.
    """

    result = yield from iter_report(ckpt, cancelled=cancelled)
    _stopped(cancelled)
    with _Partial(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(result.html)
    return path


def iter_spark_parquet(
    backend: Any,
    operator_id: int,
    store_name: str,
    version: int,
    url: str,
    partition_id: int | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, int]:
    """Spark writes one store version (or one partition of it) as Parquet to ``url`` where it runs
    (:meth:`readers.backends.spark_engine.SparkEngine.write_parquet`); returns the rows written."""
    yield Progress(0, 1, f"Spark is writing operator {operator_id} {store_name} version {version} to {url}")
    return backend.engine.write_parquet(
        operator_id, store_name, url, version=version, partition_id=partition_id
    )

"""SQL over a checkpoint: the post-mortem's questions as DuckDB queries (``statelens sql``).

A query sees these tables, each filled only when the query names it:

``batches``
    One row per batch of the timeline: ``batch_id``, ``version`` (the state version it writes),
    ``start`` (timestamp, UTC), ``timestamp_ms``, ``interval_ms``, ``watermark``, ``watermark_ms``,
    ``watermark_move_ms``, ``committed``, ``has_offsets``, ``sources`` and ``conf_changes`` (JSON text).
``growth``
    Rows and on-disk bytes of every store partition at every version: ``operator_id``, ``store_name``,
    ``version``, ``batch_id``, ``partition_id``, ``rows``, ``bytes``.
``state``
    The rows of one store at one version (``--operator``/``--store``/``--version``; the latest by
    default): ``operator_id``, ``store_name``, ``version``, ``partition_id``, ``key`` and ``value`` as
    typed structs with Spark's field names (``key.window.start``); repeated names get a ``_2`` suffix.
``changes``
    The change feed of that store over every version: ``version``, ``partition_id``, ``change``
    (``put``/``remove``/``append``), ``key``, ``value`` (null for a remove).
``expired``
    Every expired-but-unremoved key at each partition's latest version (``expired`` findings):
    ``operator_id``, ``store_name``, ``partition_id``, ``version``, ``batch_id``, ``category``, ``key``
    (JSON text), ``timeout_ms``, ``threshold_ms``, ``timeout_kind``, ``age_batches``, ``age_ms``, ``note``.

Rows are decoded one partition at a time and appended to DuckDB, which spills to a temporary folder
outside the checkpoint when they outgrow its memory limit; the query's answer is streamed out in Arrow
record batches.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import json
import math
import re
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.growth import store_growth
from statelens.app.analysis.timeline import iter_timeline
from statelens.app.output import dumps_jsonl
from statelens.readers.backends import BackendChooser
from statelens.readers.errors import SchemaMismatchError, StatelensError, UsageError
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan
from statelens.readers.values import rows_to_arrow, state_row_schema

#: The tables a query may use, in the order they are filled.
TABLES = ("batches", "growth", "state", "changes", "expired")
#: DuckDB's memory before it spills to its temporary folder.
MEMORY_LIMIT = "512MB"
#: Expired findings appended to DuckDB per insert.
_FINDINGS_PER_INSERT = 20_000


def tables_named(query: str) -> list[str]:
    """The statelens tables a query names (as whole words, any case), in :data:`TABLES` order.

    Parameters
    ----------
    query : str

    Returns
    -------
    list of str
    """
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return [t for t in TABLES if t in words]


@dataclass
class SqlResult:
    """A query's answer, open for streaming, and the problems met filling the tables."""

    columns: list[str]
    batches: Iterator[Any]  # pyarrow.RecordBatch
    problems: list[StatelensError] = field(default_factory=list)
    connection: Any = None
    _spill: Any = None
    rows_written: int | None = None  # the answer was written where Spark runs (``output_url``), not here

    pinned: list[tuple[Any, int]] = field(default_factory=list)  # cache files the query reads in place
    cache: Any = None

    def close(self) -> None:
        """Close the database, let the cache evict the files it read, and remove its temporary folder."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        if self.pinned and self.cache is not None:
            self.cache.unpin([path for path, _ in self.pinned])
            self.pinned = []
        if self._spill is not None:
            self._spill.cleanup()
            self._spill = None


#: Rows of decoded state gathered before one insert into DuckDB.
_INSERT_ROWS = 250_000


class _Appender:
    """Appends Arrow tables to one DuckDB table, creating it from the first."""

    def __init__(self, con: Any, name: str):
        self.con = con
        self.name = name
        self.created = False

    def add(self, table: Any) -> None:
        self.con.register("_statelens_chunk", table)
        try:
            verb = f"INSERT INTO {self.name} BY NAME" if self.created else f"CREATE TABLE {self.name} AS"
            self.con.execute(f"{verb} SELECT * FROM _statelens_chunk")
        finally:
            self.con.unregister("_statelens_chunk")
        self.created = True

    def finish(self, empty: Any) -> None:
        """Create the table from ``empty`` (the right columns, no rows) when nothing was added."""
        if not self.created:
            self.add(empty)


class _Collected:
    """Gathers Arrow tables in this process (the small tables sent to Spark with ``in_spark``)."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.empty: Any = None

    def add(self, table: Any) -> None:
        self.parts.append(table)

    def finish(self, empty: Any) -> None:
        self.empty = empty

    def table(self) -> Any:
        import pyarrow as pa  # deferred: pyarrow (heavy)

        return pa.concat_tables(self.parts) if self.parts else self.empty


def _pick_store(ckpt: Any, operator_id: int | None, store_name: str | None) -> tuple[int, str]:
    stores = [
        (op.operator_id, s.store_name)
        for op in ckpt.operators
        for s in op.stores
        if (operator_id is None or op.operator_id == operator_id)
        and (store_name is None or s.store_name == store_name)
    ]
    if len(stores) == 1:
        return stores[0]
    every = (
        ", ".join(
            f"--operator {o} --store {s}"
            for o, s in [(op.operator_id, s.store_name) for op in ckpt.operators for s in op.stores]
        )
        or "none"
    )
    if not stores:
        raise UsageError(f"no such store; the stores of this checkpoint: {every}")
    raise UsageError(f"the state and changes tables hold one store; pick it: {every}")


def _batches_table(ckpt: Any, problems: list[StatelensError]) -> Generator[Progress, None, Any]:
    timeline = yield from iter_timeline(ckpt)
    problems += timeline.problems
    return _batches_arrow([b.to_json() for b in timeline.rows])


def _batches_arrow(rows: list[dict[str, Any]]) -> Any:
    """The ``batches`` table from the timeline's rows (``TimelineRow.to_json``)."""

    import pyarrow as pa  # deferred: pyarrow (heavy)

    ts = pa.timestamp("ms", tz="UTC")
    return pa.table(
        {
            "batch_id": pa.array([r["batch_id"] for r in rows], pa.int64()),
            "version": pa.array([r["batch_id"] + 1 for r in rows], pa.int64()),
            "start": pa.array([r["timestamp_ms"] for r in rows], ts),
            "timestamp_ms": pa.array([r["timestamp_ms"] for r in rows], pa.int64()),
            "interval_ms": pa.array([r["interval_ms"] for r in rows], pa.int64()),
            "watermark": pa.array([r["watermark_ms"] or None for r in rows], ts),
            "watermark_ms": pa.array([r["watermark_ms"] for r in rows], pa.int64()),
            "watermark_move_ms": pa.array([r["watermark_move_ms"] for r in rows], pa.int64()),
            "committed": pa.array([r["committed"] for r in rows], pa.bool_()),
            "has_offsets": pa.array([r["has_offsets"] for r in rows], pa.bool_()),
            "sources": pa.array([json.dumps(r["sources"]) for r in rows], pa.string()),
            "conf_changes": pa.array([json.dumps(r["conf_changes"]) for r in rows], pa.string()),
        }
    )


_GROWTH_TYPES = {
    "operator_id": "int32",
    "store_name": "string",
    "version": "int64",
    "batch_id": "int64",
    "partition_id": "int32",
    "rows": "int64",
    "bytes": "int64",
}


def _growth(ckpt: Any, backends: Any, out: _Appender | _Collected) -> Generator[Progress, None, None]:
    import pyarrow as pa  # deferred: pyarrow (heavy)

    schema = pa.schema([(k, getattr(pa, t)()) for k, t in _GROWTH_TYPES.items()])
    stores = [(op, s) for op in ckpt.operators for s in op.stores]
    for n, (op, s) in enumerate(stores):
        yield Progress(n, len(stores), f"growth: operator {op.operator_id} {s.store_name}")
        cols: dict[str, list[Any]] = {k: [] for k in _GROWTH_TYPES}
        for record in store_growth(ckpt, backends, op.operator_id, s.store_name):
            for k, column in cols.items():
                column.append(record[k])
        out.add(pa.table(cols, schema=schema))
    out.finish(schema.empty_table())


def _state_empty(ckpt: Any, operator_id: int, store: str, changes: bool) -> Any:
    """The ``state`` (or ``changes``) table of one store with its columns and no rows."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    described = ckpt.operator(operator_id).store(store)
    if described.schema is None:
        raise SchemaMismatchError(
            "this store has no readable schema file, so its rows cannot be decoded",
            path=f"state/{operator_id}/0/_metadata/schema",
            operator_id=operator_id,
            store_name=store,
        )
    row_schema = state_row_schema(described.key_schema, described.value_schema, changes=changes)
    # SQL's own names: "partition" is a keyword (PARTITION BY), Spark's statestore source says partition_id
    head = [T.StructField("operator_id", T.IntegerType()), T.StructField("store_name", T.StringType())]
    fields = [
        T.StructField("partition_id", f.dataType) if f.name == "partition" else f for f in row_schema.fields
    ]
    if not changes:
        head.append(T.StructField("version", T.LongType()))
    return rows_to_arrow([], T.StructType(head + fields), unique_names=True)


def _state_rows(
    ckpt: Any,
    backend: Any,
    operator_id: int,
    store: str,
    version: int | None,
    changes: bool,
    out: _Appender,
    problems: list[StatelensError],
    cancelled: Callable[[], bool] | None,
    cache: Any = None,
    in_place: list[tuple[Any, int]] | None = None,
) -> Generator[Progress, None, None]:
    """Fill ``out`` with one store's rows (or its change feed), read by one :class:`readers.scan.StateScan`
    and its error policy: a partition that cannot be read is reported in ``problems`` (and the command
    exits 1), never an empty partition in the answer. With ``in_place`` (a list, and a cache the backend
    keeps Arrow files in), partitions the cache holds are not copied: their ``(file, version)`` are
    appended to it for a view that reads them where they are."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    empty = _state_empty(ckpt, operator_id, store, changes)
    scan = StateScan(
        backend,
        operator_id,
        store,
        kind="changes" if changes else "rows",
        version=None if changes else version,
        cache=None if changes else cache,
        cancelled=cancelled,
    )
    pending: list[Any] = []
    pending_rows = 0
    npids = len(scan.partition_ids())
    what = "changes" if changes else "state"
    yield Progress(0, npids, f"{what}: operator {operator_id} {store}")
    try:
        for n, part in enumerate(scan.iter_parts(in_place=in_place is not None and cache is not None)):
            yield Progress(
                n + 1, npids, f"{what}: operator {operator_id} {store} partition {part.partition_id}"
            )
            if part.cache_file is not None:
                assert in_place is not None
                cache.pin([part.cache_file])
                in_place.append((part.cache_file, part.version))
                continue
            for table in part.tables:
                rows = table.num_rows
                if not rows:
                    continue
                head_arrays = [
                    pa.repeat(pa.scalar(operator_id, pa.int32()), rows),
                    pa.repeat(pa.scalar(store), rows),
                ]
                if not changes:
                    head_arrays.append(pa.array(np.full(rows, part.version, dtype=np.int64)))
                pending.append(pa.Table.from_arrays(head_arrays + table.columns, names=empty.schema.names))
                pending_rows += rows
                if pending_rows >= _INSERT_ROWS:  # few large inserts: DuckDB's per-insert cost is high
                    out.add(pa.concat_tables(pending))
                    pending, pending_rows = [], 0
    finally:
        problems += scan.problems  # each unreadable partition, located (file, offset, what is wrong)
    if pending:
        out.add(pa.concat_tables(pending))
    out.finish(empty)


def _state_view(con: Any, store: tuple[int, str], files: list[tuple[Any, int]]) -> None:
    """``state``: the partitions held in DuckDB (``_state_held``) and those read in place from the cache's
    Parquet files, under one view. The files are scanned as Arrow datasets (one per version), so their
    columns keep the Arrow types the held rows have (durations, intervals), and DuckDB streams them."""
    import pyarrow.dataset as ds  # deferred: pyarrow (heavy)

    head = f"{int(store[0])}::INTEGER AS operator_id, {_quote(store[1])} AS store_name"
    parts = ["SELECT * FROM _state_held"]
    versions = sorted({v for _, v in files})
    for v in versions:
        name = f"_state_cached_{v}"
        con.register(name, ds.dataset([str(path) for path, w in files if w == v], format="parquet"))
        parts.append(
            f'SELECT {head}, {int(v)}::BIGINT AS version, "partition" AS partition_id, key, value FROM {name}'
        )
    con.execute("CREATE VIEW state AS " + " UNION ALL ".join(parts))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_EXPIRED_TYPES = {
    "operator_id": "int32",
    "store_name": "string",
    "partition_id": "int32",
    "version": "int64",
    "batch_id": "int64",
    "category": "string",
    "key": "string",
    "timeout_ms": "int64",
    "threshold_ms": "int64",
    "timeout_kind": "string",
    "age_batches": "int64",
    "age_ms": "int64",
    "note": "string",
}


def _expired(
    ckpt: Any,
    backends: Any,
    out: _Appender | _Collected,
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, list[StatelensError]]:
    import pyarrow as pa  # deferred: pyarrow (heavy)

    schema = pa.schema([(k, getattr(pa, t)()) for k, t in _EXPIRED_TYPES.items()])
    pending: list[Any] = []

    def flush() -> None:
        if pending:
            cols = {
                "operator_id": [f.operator_id for f in pending],
                "store_name": [f.store_name for f in pending],
                "partition_id": [f.partition for f in pending],
                "version": [f.version for f in pending],
                "batch_id": [f.batch_id for f in pending],
                "category": [f.category for f in pending],
                "key": [dumps_jsonl(f.key) for f in pending],
                "timeout_ms": [f.timeout_ms for f in pending],
                "threshold_ms": [f.threshold_ms for f in pending],
                "timeout_kind": [f.timeout_kind for f in pending],
                "age_batches": [f.age_batches for f in pending],
                "age_ms": [f.age_ms for f in pending],
                "note": [f.note for f in pending],
            }
            out.add(pa.table(cols, schema=schema))
            pending.clear()

    def sink(finding: Any) -> None:
        pending.append(finding)
        if len(pending) >= _FINDINGS_PER_INSERT:
            flush()

    result = yield from iter_expired(ckpt, cancelled=cancelled, sink=sink, max_examples=1, backends=backends)
    flush()
    out.finish(schema.empty_table())
    return list(result.problems)


#: Statements about the tables themselves, answered on empty tables: ``SHOW TABLES``, ``SHOW ALL TABLES``,
#: ``DESCRIBE [table or query]``, ``SHOW table``.
_CATALOGUE = re.compile(r"^\s*(show|describe)\b", re.IGNORECASE)


def is_catalogue_query(query: str) -> bool:
    """Whether ``query`` asks about the tables (``SHOW TABLES``, ``DESCRIBE state``), not their rows."""
    return bool(_CATALOGUE.match(query))


def empty_tables(
    ckpt: Any, operator_id: int | None = None, store_name: str | None = None
) -> tuple[dict[str, Any], str]:
    """Each table of :data:`TABLES` with its columns and no rows (nothing is decoded).

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    operator_id, store_name : optional
        The store ``state`` and ``changes`` read (needed when the checkpoint has several).

    Returns
    -------
    tables : dict
        Table name to an empty ``pyarrow.Table``; ``state`` and ``changes`` are left out when no store
        is picked among several, or the store has no readable schema.
    note : str
        Why ``state`` and ``changes`` are left out (empty when they are there).
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)

    tables: dict[str, Any] = {"batches": _batches_arrow([])}
    tables["growth"] = pa.schema([(k, getattr(pa, t)()) for k, t in _GROWTH_TYPES.items()]).empty_table()
    note = ""
    try:
        store = _pick_store(ckpt, operator_id, store_name)
        tables["state"] = _state_empty(ckpt, *store, changes=False)
        tables["changes"] = _state_empty(ckpt, *store, changes=True)
    except StatelensError as err:
        note = f"state and changes: {err}"
    tables["expired"] = pa.schema([(k, getattr(pa, t)()) for k, t in _EXPIRED_TYPES.items()]).empty_table()
    return {t: tables[t] for t in TABLES if t in tables}, note


def table_columns(
    ckpt: Any, operator_id: int | None = None, store_name: str | None = None
) -> tuple[dict[str, list[tuple[str, str]]], str]:
    """Each table's columns as DuckDB names them: ``{table: [(column, type), ...]}`` and a note (see
    :func:`empty_tables`), for a list of tables beside a query editor."""
    import duckdb  # deferred: duckdb (heavy)

    tables, note = empty_tables(ckpt, operator_id, store_name)
    con = duckdb.connect(":memory:")
    try:
        out: dict[str, list[tuple[str, str]]] = {}
        for name, table in tables.items():
            con.register("_statelens_empty", table)
            out[name] = [(str(r[0]), str(r[1])) for r in con.execute("DESCRIBE _statelens_empty").fetchall()]
            con.unregister("_statelens_empty")
        return out, note
    finally:
        con.close()


def iter_table_columns(
    ckpt: Any, operator_id: int | None = None, store_name: str | None = None
) -> Generator[Progress, None, tuple[dict[str, list[tuple[str, str]]], str]]:
    """:func:`table_columns` as a job (it loads DuckDB and Arrow, seconds the first time)."""
    yield Progress(0, 1, "listing the tables and their columns")
    return table_columns(ckpt, operator_id, store_name)


def iter_sql(
    ckpt: Any,
    query: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    version: int | None = None,
    backends: Any = None,
    cancelled: Callable[[], bool] | None = None,
    rows_per_batch: int = 65_536,
    cache: Any = None,
    in_spark: bool = False,
    output_url: str | None = None,
) -> Generator[Progress, None, SqlResult]:
    """Fill the tables ``query`` names, run it, and return its answer as a stream of Arrow batches.

    With ``in_spark`` the query is Spark SQL and runs where Spark runs (:func:`_in_spark`).

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    query : str
        A DuckDB SQL query over :data:`TABLES`.
    operator_id, store_name : optional
        The store of the ``state`` and ``changes`` tables (needed when the checkpoint has several).
    version : int, optional
        The state version of ``state`` (default: each partition's latest).
    backends : readers.backends.BackendChooser, optional
        Where state rows come from (default native).
    cancelled : callable, optional
        Polled between partitions.
    rows_per_batch : int
        Rows per Arrow record batch of the answer.
    cache : readers.cache.StateCache, optional
        Where decoded versions of ``state`` are kept and found again (default: decode every time).
    in_spark : bool
        Run the query in Spark (Spark SQL) on the Spark backend of ``backends``, not in DuckDB here.
    output_url : str, optional
        With ``in_spark``: Spark writes the answer there as Parquet (a folder of part files, where Spark
        runs) and the result has no rows.

    Yields
    ------
    Progress

    Returns
    -------
    SqlResult
        Close it when done (:meth:`SqlResult.close`).

    Raises
    ------
    UsageError
        The query names no table, names ``state``/``changes`` on a checkpoint with several stores and no
        store picked, or DuckDB refuses it (the message is DuckDB's).
    """
    import duckdb  # deferred: duckdb (heavy)

    if is_catalogue_query(query) and not in_spark:
        return _catalogue(ckpt, query, operator_id, store_name, rows_per_batch)
    names = tables_named(query)
    if not names:
        raise UsageError(
            f"the query uses none of the tables {', '.join(TABLES)} (SHOW TABLES lists them, "
            "DESCRIBE state their columns)"
        )
    store = _pick_store(ckpt, operator_id, store_name) if {"state", "changes"} & set(names) else None
    backends = backends or BackendChooser(ckpt, "native")
    problems: list[StatelensError] = []
    if in_spark:
        return (
            yield from _in_spark(
                ckpt, query, names, store, version, backends, problems, output_url, cancelled
            )
        )
    spill = tempfile.TemporaryDirectory(prefix="statelens-sql-")
    con = duckdb.connect(":memory:")
    result = SqlResult([], iter(()), problems, con, spill)
    try:
        con.execute(f"SET temp_directory = '{spill.name}'")
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        for name in names:
            yield Progress(names.index(name), len(names), f"filling table {name}")
            if name == "batches":
                table = yield from _batches_table(ckpt, problems)
                _Appender(con, "batches").add(table)
            elif name == "growth":
                yield from _growth(ckpt, backends, _Appender(con, "growth"))
            elif name in ("state", "changes"):
                assert store is not None
                backend = backends.for_store(*store)
                in_place = result.pinned if name == "state" and cache is not None else None
                if in_place is not None:
                    result.cache = cache
                yield from _state_rows(
                    ckpt,
                    backend,
                    store[0],
                    store[1],
                    version,
                    name == "changes",
                    _Appender(con, "_state_held" if in_place is not None else name),
                    problems,
                    cancelled,
                    cache,
                    in_place,
                )
                if in_place is not None:
                    _state_view(con, store, in_place)
            else:
                problems += yield from _expired(ckpt, backends, _Appender(con, "expired"), cancelled)
        yield Progress(len(names), len(names), "running the query")
        try:
            answer = con.sql(query)
            if answer is None:  # a statement without rows (SET, CREATE VIEW...)
                return result
            result.columns = list(answer.columns)
            result.batches = iter(answer.to_arrow_reader(rows_per_batch))
        except duckdb.Error as err:
            raise UsageError(f"the query failed: {err}") from err
        return result
    except BaseException:
        result.close()
        raise


def _catalogue(
    ckpt: Any, query: str, operator_id: int | None, store_name: str | None, rows_per_batch: int
) -> SqlResult:
    """Answer ``SHOW TABLES`` / ``DESCRIBE ...`` in DuckDB over the tables created empty."""
    import duckdb  # deferred: duckdb (heavy)

    tables, note = empty_tables(ckpt, operator_id, store_name)
    con = duckdb.connect(":memory:")
    problems: list[StatelensError] = [UsageError(note)] if note else []
    result = SqlResult([], iter(()), problems, con)
    try:
        for name, table in tables.items():
            _Appender(con, name).add(table)
        answer = con.sql(query)
        if answer is None:
            return result
        result.columns = list(answer.columns)
        result.batches = iter(answer.to_arrow_reader(rows_per_batch))
        return result
    except duckdb.Error as err:
        result.close()
        raise UsageError(f"the query failed: {err}") from err


#: Rows of an answer computed in Spark that may come back to this process (more: write it with Spark).
SPARK_ANSWER_ROWS = 1_000_000


def _in_spark(
    ckpt: Any,
    query: str,
    names: list[str],
    store: tuple[int, str] | None,
    version: int | None,
    backends: Any,
    problems: list[StatelensError],
    output_url: str | None,
    cancelled: Callable[[], bool] | None,
    rows_per_batch: int = 65_536,
) -> Generator[Progress, None, SqlResult]:
    """Run ``query`` as Spark SQL where Spark runs: ``state`` and ``changes`` are Spark's own reads of
    the store, never brought here; ``batches``, ``growth`` and ``expired`` are computed first (growth and
    expired inside Spark too, only their counts and findings come back) and sent to Spark as tables.
    At most :data:`SPARK_ANSWER_ROWS` rows of the answer come back; with ``output_url`` Spark writes it."""
    tables: dict[str, Any] = {}
    for n, name in enumerate(names):
        yield Progress(n, len(names) + 1, f"preparing table {name}")
        if name == "batches":
            tables[name] = yield from _batches_table(ckpt, problems)
        elif name == "growth":
            collected = _Collected()
            yield from _growth(ckpt, backends, collected)
            tables[name] = collected.table()
        elif name == "expired":
            collected = _Collected()
            problems += yield from _expired(ckpt, backends, collected, cancelled)
            tables[name] = collected.table()
    yield Progress(len(names), len(names) + 1, "running the query in Spark")
    backend = backends.spark
    backends.used.add("spark")
    columns, table, rows = backend.sql_answer(
        query, names, tables, store, version, max_rows=SPARK_ANSWER_ROWS, output_url=output_url
    )
    result = SqlResult(
        columns, iter(()) if table is None else iter(table.to_batches(rows_per_batch)), problems
    )
    result.rows_written = rows if table is None else None
    return result


# -- writing answers ---------------------------------------------------------------------------------------
def _json_value(v: Any) -> Any:
    """A value of an answer as JSON: timestamps ISO-8601 (UTC ``Z``), decimals as text, bytes base64."""

    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if type(v).__name__ == "MonthDayNano":  # DuckDB's INTERVAL: a day-time interval is integer microseconds
        months, days, nanos = v
        micros = days * 86_400_000_000 + nanos // 1000
        return micros if not months else {"months": months, "days": days, "microseconds": nanos // 1000}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            return v.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return v.isoformat(timespec="microseconds")
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, decimal.Decimal):
        return format(v, "f")  # plain digits, as statelens rows writes them (never 1E-18)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _cell(v: Any) -> str:
    """One table cell: NULL empty, text and timestamps bare (ISO-8601 UTC), structs and lists as JSON."""

    if v is None:
        return ""
    j = _json_value(v)
    return j if isinstance(j, str) else json.dumps(j, ensure_ascii=False)


def _flat(batch: Any) -> Any:
    """A record batch with struct columns flattened (``key.window.start``) and lists/maps as JSON text."""

    import pyarrow as pa  # deferred: pyarrow (heavy)

    table = pa.Table.from_batches([batch])
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    for i, f in enumerate(table.schema):
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type) or pa.types.is_map(f.type):
            texts = [None if v is None else json.dumps(_json_value(v)) for v in table.column(i).to_pylist()]
            table = table.set_column(i, f.name, pa.array(texts, pa.string()))
    return table


def write_answer(result: SqlResult, fmt: str, target: Any) -> int:
    """Write a query's answer; returns the rows written.

    Parameters
    ----------
    result : SqlResult
    fmt : {"json", "jsonl", "csv", "parquet"}
        ``json``: one JSON list of objects, written row by row; ``jsonl``: one object per line;
        ``csv``: a header and one line per row, structs flattened to ``a.b`` columns, lists and maps
        as JSON text; ``parquet``: Arrow's types kept (``target`` is a path).
    target : text stream, or path for ``parquet``

    Returns
    -------
    int
    """

    n = 0
    if fmt == "parquet":
        import pyarrow as pa  # deferred: pyarrow (heavy)
        import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

        writer = None
        try:
            for batch in result.batches:
                if writer is None:
                    writer = pq.ParquetWriter(target, batch.schema)
                writer.write_table(pa.Table.from_batches([batch]))
                n += batch.num_rows
            if writer is None:  # no rows: still a file with the answer's columns
                pq.write_table(pa.table({c: pa.array([], pa.null()) for c in result.columns}), target)
        finally:
            if writer is not None:
                writer.close()
        return n
    if fmt == "csv":
        out = csv.writer(target, lineterminator="\n")
        header = False
        for batch in result.batches:
            table = _flat(batch)
            if not header:
                out.writerow(table.column_names)
                header = True
            for row in zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True):
                out.writerow(
                    [
                        ""
                        if v is None
                        else json.dumps(_json_value(v)).strip('"')
                        if not isinstance(v, (int, float, str))
                        else v
                        for v in row
                    ]
                )
                n += 1
        if not header:
            out.writerow(result.columns)
        return n
    if fmt in ("json", "jsonl"):
        first = True
        if fmt == "json":
            target.write("[")
        for batch in result.batches:
            for row in batch.to_pylist():
                text = json.dumps(_json_value(row), ensure_ascii=False)
                if fmt == "jsonl":
                    target.write(text + "\n")
                else:
                    target.write(("\n" if first else ",\n") + text)
                first = False
                n += 1
        if fmt == "json":
            target.write("]\n" if first else "\n]\n")
        return n
    raise ValueError(f"unknown answer format {fmt!r}")


def answer_rows(result: SqlResult, max_rows: int) -> tuple[list[list[str]], int]:
    """The first ``max_rows`` rows of an answer as display text, and how many rows it has in all.

    Structs, lists and timestamps are shown as JSON (timestamps ISO-8601 UTC); NULL as an empty cell.
    """

    rows: list[list[str]] = []
    n = 0
    for batch in result.batches:
        room = max_rows - len(rows)
        if room > 0:  # by position: answers may repeat a column name (SELECT a.x, b.x)
            head = batch.slice(0, room)
            cells = [[_cell(v) for v in head.column(i).to_pylist()] for i in range(head.num_columns)]
            rows.extend(map(list, zip(*cells, strict=True)) if cells else [[] for _ in range(head.num_rows)])
        n += batch.num_rows
    return rows, n


#: Post-mortem questions as queries (the README's), offered by the app's SQL tab. ``{store}`` marks
#: queries over ``state``/``changes`` (they need a store picked).
EXAMPLES: list[tuple[str, str]] = [
    (
        "Batches: start, watermark, interval",
        "SELECT batch_id, start, watermark, watermark_move_ms / 1000 AS watermark_moved_s, interval_ms, committed\n"
        "FROM batches ORDER BY batch_id",
    ),
    (
        "Slowest trigger intervals",
        "SELECT batch_id, start, interval_ms FROM batches\nORDER BY interval_ms DESC NULLS LAST LIMIT 10",
    ),
    (
        "Keys per partition (skew)",
        "SELECT partition_id, count(*) AS keys FROM state\nGROUP BY 1 ORDER BY keys DESC",
    ),
    (
        "Which partition's state grew most",
        "SELECT operator_id, store_name, partition_id,\n"
        "       arg_max(rows, version) - arg_min(rows, version) AS key_growth, max(bytes) AS max_bytes\n"
        "FROM growth GROUP BY ALL ORDER BY key_growth DESC LIMIT 20",
    ),
    (
        "Keys last written before batch N, never removed",
        "SELECT key, max(version) - 1 AS last_written_batch FROM changes\n"
        "GROUP BY key HAVING max(version) - 1 < 3 AND arg_max(change, version) = 'put'\nORDER BY 2",
    ),
    (
        "Timed-out keys never removed, per partition",
        "SELECT category, operator_id, partition_id, count(*) AS keys, max(age_batches) AS oldest_batches\n"
        "FROM expired GROUP BY ALL ORDER BY keys DESC",
    ),
]


@dataclass
class SqlTable:
    """A query's answer as display columns (the app's SQL tab): at most ``max_rows`` rows shown."""

    headers: list[str]
    columns: list[list[str]]
    total_rows: int
    seconds: float
    problems: list[StatelensError] = field(default_factory=list)


def iter_sql_table(
    ckpt: Any,
    query: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    cache: Any = None,
    max_rows: int = 10_000,
    cancelled: Callable[[], bool] | None = None,
    backends: Any = None,
    in_spark: bool = False,
) -> Generator[Progress, None, SqlTable]:
    """Run ``query`` (:func:`iter_sql`, in Spark with ``in_spark``) and keep the first ``max_rows`` rows as
    display text."""

    start = time.perf_counter()
    result = yield from iter_sql(
        ckpt,
        query,
        operator_id=operator_id,
        store_name=store_name,
        cache=cache,
        cancelled=cancelled,
        backends=backends,
        in_spark=in_spark,
    )
    try:
        rows, n = answer_rows(result, max_rows)
        columns = [[row[i] for row in rows] for i in range(len(result.columns))]
        return SqlTable(list(result.columns), columns, n, time.perf_counter() - start, list(result.problems))
    finally:
        result.close()

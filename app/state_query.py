"""State too large to hold: one store version served a page at a time by DuckDB.

A version with more rows than :data:`PAGED_ROWS` is not kept in memory. Each partition is decoded once
into the state cache (one Parquet file per partition version, :mod:`readers.cache`), and the browser
asks DuckDB for what it shows: the rows passing a filter are counted, and pages of ``partition, key,
value`` are read in the requested order with ``LIMIT``/``OFFSET``. Only a page at a time becomes
Python objects (and display text), so the app's memory does not grow with the store; DuckDB itself is
capped (:data:`DUCKDB_MEMORY`) and spills to a private temporary folder, never next to the checkpoint.

The order and the filter follow the in-memory table's (``app.state_table.iter_state_table``):

* rows come in partition order, then in file order, and ties of a sort keep that order (reversed
  for a descending sort, as a reversed stable sort does);
* numbers, times and dates sort by value with nulls first (NaN counts as null); text by its UTF-8
  bytes (a null as the word ``null``); other columns (lists, maps, binary) by their text;
* the filter keeps rows where any column's text contains the needle, ignoring case. Numbers, text,
  booleans, dates and time columns are matched on exactly the text shown; lists, maps, structs below
  the flattening depth and binary values on DuckDB's text of them (``{'a': 1}`` where the table shows
  ``{a: 1}``), which can differ from the display in punctuation.

The cache entries read are pinned (never evicted by this process while the table is open).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from statelens.app.analysis._common import row_converter
from statelens.readers.arrow_values import ArrowStateRows, values_converter
from statelens.readers.errors import StorageError

__all__ = ["DUCKDB_MEMORY", "PAGED_ROWS", "PageRows", "QueryStateTable"]

#: Versions with more rows than this are served by DuckDB from the cache, a page at a time
#: (``$STATELENS_PAGED_ROWS`` overrides: 0 pages every version).
PAGED_ROWS = int(os.environ.get("STATELENS_PAGED_ROWS") or 1_000_000)

#: DuckDB's memory cap for one table's queries (sorts beyond it spill to a temporary folder).
DUCKDB_MEMORY = "512MB"
#: Matching rows a filter's first scan may bring back (Arrow, not Python): when no more match, that one
#: scan gives both the count and the first page (:meth:`QueryStateTable.first_page`).
ONE_SCAN_ROWS = 100_000


@dataclass
class PageRows:
    """One page of a query: display text per column, and per row its key (JSON form) and partition."""

    offset: int
    texts: list[list[str]]
    keys: list[Any]
    partitions: list[int]

    def __len__(self) -> int:
        return len(self.partitions)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class QueryStateTable:
    """Rows of one store version kept on disk (the cache's Parquet files) and queried with DuckDB.

    Parameters
    ----------
    files : sequence of path
        One Parquet file per partition (``partition int32, key struct, value struct``), in partition
        order.
    specs : sequence of app.columns.ColumnSpec
        The display columns (``partition``, the flattened key, the flattened value).
    key_schema, value_schema : pyspark.sql.types.StructType
    total_rows : int
    cache : readers.cache.StateCache, optional
        Holder of ``files``: they are pinned until :meth:`close`.
    diff : bool
        The files hold the differences of two versions (``change, partition, key, value, before``,
        rows as :class:`DiffRow`), not rows of one version.
    """

    def __init__(
        self,
        files: Sequence[Path],
        specs: Sequence[Any],
        key_schema: Any,
        value_schema: Any,
        total_rows: int,
        cache: Any = None,
        diff: bool = False,
    ):
        import duckdb  # deferred: duckdb (heavy)
        import pyarrow as pa  # deferred: pyarrow (heavy)

        self.files = [Path(f) for f in files]
        self.specs = list(specs)
        self.headers = [s.header for s in self.specs]
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.total_rows = total_rows
        self.diff = diff
        self._columns = (
            '"change", "partition", "key", "value", "before"' if diff else '"partition", "key", "value"'
        )
        self._cache = cache
        if cache is not None:
            cache.pin(self.files)
        self._tmp = tempfile.mkdtemp(prefix="statelens-duckdb-")
        self._lock = threading.Lock()
        self._running: set[Any] = set()
        self._closed = False
        try:
            self._con = duckdb.connect(config={"memory_limit": DUCKDB_MEMORY, "temp_directory": self._tmp})
            with contextlib.suppress(duckdb.Error):  # without ICU timestamps print in UTC anyway
                self._con.execute("SET TimeZone = 'UTC'")
            listing = ", ".join(_literal(str(f)) for f in self.files)
            self._con.execute(
                f"CREATE VIEW src AS SELECT * FROM read_parquet([{listing}], file_row_number = true)"
            )
            arrow_schema = self._con.sql(f"SELECT {self._columns} FROM src LIMIT 0").to_arrow_table().schema
        except duckdb.Error as err:
            self._release()
            raise self._unreadable(err) from err
        self._text: list[str] = []
        self._order: list[str] = []
        self._int_text: list[bool] = []  # shown as plain integers ("null" when null)
        for spec in self.specs:
            ref, atype = _reference(arrow_schema, spec)
            self._int_text.append(
                spec.side == "partition"
                or (spec.side in ("key", "value") and spec.unit is None and pa.types.is_integer(atype))
            )
            self._text.append(_text_sql(ref, atype, spec))
            self._order.append(_order_sql(ref, atype, spec, self._text[-1]))

        self._convert_key = row_converter(key_schema)

    # -- queries -------------------------------------------------------------------------------------
    def where(self, needle: str) -> str:
        """The ``WHERE`` clause of the filter ``needle`` ("" when it keeps every row)."""
        return f"WHERE {self.condition(needle)}" if needle else ""

    def condition(self, needle: str) -> str:
        """The SQL condition of the filter ``needle`` (case-folded text; "" keeps every row)."""
        if not needle:
            return "true"
        folded = needle.casefold()
        lit = _literal(folded)
        ints = _int_text_can_hold(folded)
        # Text without letters needs no case folding (``lower`` costs a pass over every value).
        caseless = folded.upper() == folded
        tests = [
            f"contains({t}, {lit})" if is_int or caseless else f"contains(lower({t}), {lit})"
            for t, is_int in zip(self._text, self._int_text, strict=True)
            if ints or not is_int
        ]
        return " OR ".join(tests) if tests else "false"

    def order_by(self, column: int, descending: bool) -> str:
        """``ORDER BY`` of a sort on display column ``column`` (-1: partition then file order)."""
        if not 0 <= column < len(self._order):
            return ""
        expr = self._order[column]
        if descending:
            return f'ORDER BY {expr} DESC NULLS LAST, "partition" DESC, file_row_number DESC'
        return f'ORDER BY {expr} ASC NULLS FIRST, "partition", file_row_number'

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A connection of this table's database for one query (each thread queries on its own); a
        query still running when the table is closed is interrupted; DuckDB's errors (a cache file
        removed or damaged meanwhile) become a ``StorageError``."""
        import duckdb  # deferred: duckdb (heavy)

        with self._lock:
            if self._closed:
                raise InterruptedError("the table was closed")
            cur = self._con.cursor()
            self._running.add(cur)
        try:
            yield cur
        except duckdb.Error as err:
            with self._lock:
                closed = self._closed
            if closed:
                raise InterruptedError("the table was closed") from err
            raise self._unreadable(err) from err
        finally:
            with self._lock:
                self._running.discard(cur)
            cur.close()

    def count(self, needle: str) -> int:
        """Rows passing the filter."""
        if not needle:
            return self.total_rows
        with self._cursor() as cur:
            row = cur.execute(f"SELECT count(*) FROM src {self.where(needle)}").fetchone()
        return int(row[0]) if row else 0

    def first_page(self, column: int, descending: bool, needle: str, limit: int) -> tuple[int, PageRows]:
        """Rows passing the filter and the first ``limit`` of them in order.

        A filter first asks for up to :data:`ONE_SCAN_ROWS` matching rows in any order (a scan on every
        thread that stops as soon as that many match): when that is all of them, they are the count, and
        the page is sorted out of them (one scan instead of two; they stay Arrow, only the page becomes
        Python). When more match, the page and the count are two more queries, as without a filter.
        """
        if needle:
            most = max(limit, ONE_SCAN_ROWS)
            with self._cursor() as cur:
                # In any order: without keeping the files' order the scan runs on every thread (a LIMIT
                # otherwise waits for rows in order: 1.0 -> 0.5 s for a filter of 20M rows on 2 cores).
                cur.execute("SET SESSION preserve_insertion_order = false")
                probe = cur.sql(
                    f"SELECT {self._columns}, file_row_number FROM src {self.where(needle)} LIMIT {most + 1}"
                ).to_arrow_table()
                if probe.num_rows <= most:
                    order = self.order_by(column, descending) or 'ORDER BY "partition", file_row_number'
                    cur.register("_probe", probe)
                    try:
                        table = cur.sql(
                            f"SELECT {self._columns} FROM _probe {order} LIMIT {int(limit)}"
                        ).to_arrow_table()
                    finally:
                        cur.unregister("_probe")
                    return probe.num_rows, self._page_of(table, 0)
        page = self.page(column, descending, needle, 0, limit)
        return (self.count(needle) if needle else self.total_rows), page

    def position_of(
        self, column: int, descending: bool, needle: str, partition_id: int, key: Any
    ) -> int | None:
        """The row of ``key`` (its JSON form, as pages give it) of partition ``partition_id`` in the sorted,
        filtered table, or None when it is not there (or filtered out).

        The key is found among its partition's rows (converted a batch at a time), then the rows before
        it in the order are counted.
        """
        import pyarrow as pa  # deferred: pyarrow (heavy)

        keys_of = values_converter(self.key_schema)
        pid = int(partition_id)
        found: int | None = None
        with self._cursor() as cur:
            sql = f'SELECT "key", file_row_number FROM src WHERE "partition" = {pid}'
            for batch in cur.sql(sql).to_arrow_reader(65_536):
                column_keys = keys_of(pa.array(batch.column(0)))
                for i, k in enumerate(column_keys):
                    if self._convert_key(k) == key:
                        found = int(batch.column(1)[i].as_py())
                        break
                if found is not None:
                    break
        if found is None:
            return None
        target = f'"partition" = {pid} AND file_row_number = {found}'
        passes = self.condition(needle)
        after = "<" if not descending else ">"
        ties = f'("partition" {after} {pid} OR ("partition" = {pid} AND file_row_number {after} {found}))'
        if 0 <= column < len(self._order):
            e = f"({self._order[column]})"
            # Nulls come first ascending, last descending (see order_by).
            nulls = (
                f"{e} IS NULL AND t.te IS NOT NULL" if not descending else f"{e} IS NOT NULL AND t.te IS NULL"
            )
            before = f"({nulls}) OR ({e} {after} t.te) OR ({e} IS NOT DISTINCT FROM t.te AND {ties})"
            source = f"src, (SELECT {e} AS te FROM src WHERE {target}) AS t"
        else:
            before, source = ties, "src"
        with self._cursor() as cur:
            shown = cur.execute(f"SELECT count(*) FROM src WHERE ({target}) AND ({passes})").fetchone()
            if not shown or not shown[0]:
                return None
            row = cur.execute(f"SELECT count(*) FROM {source} WHERE ({passes}) AND ({before})").fetchone()
        return int(row[0]) if row else None

    def arrow_page(self, column: int, descending: bool, needle: str, offset: int, limit: int) -> Any:
        """Rows ``offset`` to ``offset + limit`` of the sorted, filtered table as an Arrow table."""
        sql = (
            f"SELECT {self._columns} FROM src {self.where(needle)} "
            f"{self.order_by(column, descending)} LIMIT {int(limit)} OFFSET {int(offset)}"
        )
        with self._cursor() as cur:
            return cur.sql(sql).to_arrow_table()

    def page(self, column: int, descending: bool, needle: str, offset: int, limit: int) -> PageRows:
        """A page of display text (and keys, partitions) of the sorted, filtered table."""
        return self._page_of(self.arrow_page(column, descending, needle, offset, limit), offset)

    def _page_of(self, table: Any, offset: int) -> PageRows:
        """Display text, keys and partitions of the rows of ``table`` (rows ``offset`` on)."""
        rows = self._records(table)
        texts = [[spec.formatter(spec.getter(r)) for r in rows] for spec in self.specs]
        keys = [self._convert_key(r.key) for r in rows]
        return PageRows(offset, texts, keys, [r.partition_id for r in rows])

    def iter_rows(
        self,
        column: int,
        descending: bool,
        needle: str,
        batch_rows: int = 65_536,
        cancelled: Callable[[], bool] | None = None,
    ) -> Iterator[list[Any]]:
        """The sorted, filtered rows (``StateRow``, or ``DiffRow`` for a diff), a batch at a time."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        sql = f"SELECT {self._columns} FROM src {self.where(needle)} {self.order_by(column, descending)}"
        with self._cursor() as cur:
            for batch in cur.sql(sql).to_arrow_reader(batch_rows):
                if cancelled is not None and cancelled():
                    raise InterruptedError("cancelled")
                yield self._records(pa.Table.from_batches([batch]))

    def _records(self, table: Any) -> list[Any]:
        """Rows of a query result, as the held table's records."""
        if not self.diff:
            return ArrowStateRows([table], self.key_schema, self.value_schema)[0 : table.num_rows]
        return diff_rows(table, self.key_schema, self.value_schema)

    def _unreadable(self, err: Exception) -> Exception:
        """A cache file removed or damaged by another process (``statelens cache clear``...)."""

        return StorageError(
            f"the decoded state kept in the cache could not be queried ({err}); open the version "
            "again to decode it afresh",
            path=str(self.files[0].parent.parent) if self.files else None,
        )

    # -- life ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the database, remove its temporary folder and unpin the cache entries (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            running = list(self._running)
        for cur in running:
            with contextlib.suppress(Exception):
                cur.interrupt()
        self._release()

    def _release(self) -> None:
        self._closed = True
        try:
            con = getattr(self, "_con", None)
            if con is not None:
                con.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
            if self._cache is not None:
                self._cache.unpin(self.files)
                self._cache = None

    def __del__(self) -> None:  # a table dropped without close() still frees its folder and pins
        with contextlib.suppress(Exception):  # interpreter shutdown, or a constructor that failed
            self.close()


def _int_text_can_hold(needle: str) -> bool:
    """Whether the text of some integer (``-120``, ``0``; ``null`` for null) contains ``needle``:
    digits after an optional leading ``-``, with no leading zero."""
    if needle in "null":
        return True
    if not set(needle) <= set("-0123456789"):
        return False
    if "-" in needle[1:] or needle.startswith("-0"):
        return False
    return True


def _reference(schema: Any, spec: Any) -> tuple[str, Any]:
    """SQL reference to a display column's field (by position: DuckDB renames repeated field names)
    and its Arrow type."""
    if spec.side in ("partition", "change", "before"):
        return _ident(spec.side), schema.field(spec.side).type
    atype = schema.field(spec.side).type
    ref = _ident(spec.side)
    for i in spec.path:
        field = atype.field(i)
        ref = f"struct_extract({ref}, {_literal(field.name)})"
        atype = field.type
    return ref, atype


def _text_sql(ref: str, atype: Any, spec: Any) -> str:
    """SQL text of a column as the table shows it (``null`` for null)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    if spec.side == "partition":
        return f"CAST({ref} AS VARCHAR)"
    if spec.side == "before":  # shown empty when there is none
        return f"coalesce(CAST({ref} AS VARCHAR), '')"
    if spec.unit is not None and pa.types.is_integer(atype):
        micros = f"({ref} * 1000)" if spec.unit == "ms" else ref
        stamp = f"try(make_timestamp({micros}))"
        when = (
            f"CASE WHEN {micros} % 1000 = 0 THEN strftime({stamp}, '%Y-%m-%d %H:%M:%S.%g') "
            f"ELSE strftime({stamp}, '%Y-%m-%d %H:%M:%S.%f') END || 'Z'"
        )
        text = (
            f"CASE WHEN {ref} = -1 THEN '-1 (no timeout)' WHEN {ref} < 0 THEN CAST({ref} AS VARCHAR) "
            f"ELSE coalesce({when}, CAST({ref} AS VARCHAR)) END"
        )
    elif pa.types.is_timestamp(atype):
        ts = f"CAST({ref} AS TIMESTAMP)"
        micros = f"epoch_us({ts})"
        text = (
            f"CASE WHEN {micros} % 1000 = 0 THEN strftime({ts}, '%Y-%m-%d %H:%M:%S.%g') "
            f"ELSE strftime({ts}, '%Y-%m-%d %H:%M:%S.%f') END" + (" || 'Z'" if atype.tz else "")
        )
    elif pa.types.is_binary(atype) or pa.types.is_large_binary(atype):
        text = f"'0x' || lower(hex({ref}))"
    elif pa.types.is_string(atype) or pa.types.is_large_string(atype):
        text = ref
    else:
        text = f"CAST({ref} AS VARCHAR)"
    return f"coalesce({text}, 'null')"


def _order_sql(ref: str, atype: Any, spec: Any, text: str) -> str:
    """What a column sorts by: its value for numbers and times, else its text (as shown)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    if spec.side == "partition":
        return ref
    if pa.types.is_floating(atype):
        return f"CASE WHEN isnan({ref}) THEN NULL ELSE {ref} END"
    if pa.types.is_decimal(atype):
        return f"CAST({ref} AS DOUBLE)"
    if pa.types.is_integer(atype) or pa.types.is_temporal(atype):
        return ref
    return text  # text too: as shown, "null" sorting as the word, as in the held table


class DiffRow(NamedTuple):
    """One row of a diff between two versions: ``added``, ``changed`` or ``removed``.

    ``value`` is the newer value (the removed value for ``removed``); ``before`` the older value of a
    changed row.
    """

    change: str
    partition_id: int
    key: tuple[Any, ...]
    value: tuple[Any, ...] | None
    before: tuple[Any, ...] | None = None


def diff_rows(table: Any, key_schema: Any, value_schema: Any) -> list[DiffRow]:
    """The rows of a diff table (``change, partition, key, value, before``), back as ``DiffRow``."""

    key = values_converter(key_schema)
    value = values_converter(value_schema)
    cols = [table.column(i).combine_chunks() for i in range(5)]
    return [
        DiffRow(*row)
        for row in zip(
            cols[0].to_pylist(),
            cols[1].to_pylist(),
            key(cols[2]),
            value(cols[3]),
            value(cols[4]),
            strict=True,
        )
    ]

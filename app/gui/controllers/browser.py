"""The state browser tab: a store version's rows (or two versions' diff), sorted, filtered and paged."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from PySide6.QtCore import Signal

from statelens.app.columns import display_time_columns
from statelens.app.export import iter_export_query_table, iter_export_state_table, iter_spark_parquet
from statelens.app.gui import errors
from statelens.app.gui.controllers.browser_state import BrowserState, backend_text
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.session import LoadedCheckpoint
from statelens.app.state_query import PAGED_ROWS
from statelens.app.state_table import StateTable, iter_backend_table, iter_state_diff, iter_state_table
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.model import Progress
from statelens.viewers.browser import StateBrowserView
from statelens.viewers.tables import PAGE_ROWS, row_order

#: The runner channel of reading a version (and the view's name: it waits for the view).
CHANNEL = "browser"


class BrowserController(Controller):
    """Reads the selected store version (or a diff) through the backend chosen, and serves the view's
    sorting, filtering and paging.

    Signals
    -------
    backend_used(str text)
        Which backend answered the last read (``State read by the native decoder``).
    """

    name = "browser"
    title = "State browser"

    backend_used = Signal(str)

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, StateBrowserView(ctx.selection))
        #: Versions with more rows than this are paged by DuckDB from the cache (``app.state_query``).
        self.paged_rows = PAGED_ROWS
        #: What the browser remembers: the version compared with, the rows shown, the pages waited for.
        self.state = BrowserState()
        v = self.view
        v.store_selected.connect(ctx.select_store)
        v.partition_selected.connect(ctx.select_partition)
        v.version_selected.connect(ctx.select_version)
        v.key_selected.connect(ctx.select_key)
        v.compare_selected.connect(self._on_view_compare_selected)
        v.history_requested.connect(self.request_history)
        v.order_requested.connect(self._on_view_order_requested)
        v.page_requested.connect(self._on_view_page_requested)
        ctx.runner.job_finished.connect(self._on_runner_job_finished)
        v.locate_requested.connect(self._on_view_locate_requested)

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self._set_state_table(None)
        self.state.reset()
        self.view.set_operators(
            loaded.checkpoint.operators, self.ctx.roles, self.ctx.store_groups(), self.ctx.catalog.by_rows()
        )
        self.view.compare_combo.setCurrentIndex(0)

    def refresh(self, loaded: LoadedCheckpoint) -> None:
        """The pickers list the new versions; the rows shown stay (with their page and scroll
        position): they are read again only when the selection moves to another version."""
        s = self.ctx.selection
        self.view.set_operators(
            loaded.checkpoint.operators, self.ctx.roles, self.ctx.store_groups(), self.ctx.catalog.by_rows()
        )
        self.view.show_selection(s.operator_id, s.store_name, s.partition_id, s.version)

    def show_no_store(self) -> None:
        self.view.clear_table("This checkpoint has no state store the native reader can decode.")
        self.updated.emit()

    def on_selection_changed(self, changes: dict[str, Any]) -> None:
        if {"operator_id", "store_name", "partition_id", "version"} & set(changes):
            self.ctx.deferred.when_shown(CHANNEL, self.request_table)

    def state_table(self) -> StateTable | None:
        """The rows the browser shows (None while none)."""
        return self.state.table

    def main_table(self) -> Any:
        return self.view.table

    def close(self) -> None:
        """Close a paged table's database and temporary folder."""
        self._set_state_table(None)

    def request_history(self) -> None:
        """Follow the key selected in the table (or the selection's) through its versions."""
        picked = self.view.selected_key()
        if picked is not None:
            pid, key = picked
            self.ctx.selection.update(key=key, key_partition_id=pid if pid >= 0 else None)
        self.ctx.key_history_requested.emit(None)

    # -- reading -----------------------------------------------------------------------------------------
    def request_table(self) -> None:
        """Read the selected store version (or the diff with the compared version)."""
        ctx = self.ctx
        read = self.state.read(ctx.selection)
        if ctx.loaded is None or read is None:
            return
        if read.version is None:
            self.view.clear_table("This store has no readable version.")
            self.updated.emit()
            return
        op, name, version, pid = read.operator_id, read.store_name, read.version, read.partition_id
        try:
            backend = ctx.backends.for_store(op, name)
            # Spark reads stores the native readers cannot open (column families); diffs are native.
            native = read.is_diff or backend is None or backend.capabilities.raw_records
            scan = ctx.backends.reader(op, name) if native else None
        except StatelensError as err:
            self.view.clear_table(f"Cannot read this store: {err}")
            self.updated.emit()
            return
        ctx.backends.cancel_spark_read()
        where = read.where
        time_columns = display_time_columns(ctx.loaded.checkpoint.operator(op))
        ctx.runner.cancel("order")
        done = {"on_result": self._on_table_finished, "on_error": self._on_table_errored}
        if read.is_diff:
            old, new = read.diff_versions
            self.view.set_loading(f"Comparing versions {old} and {new} of operator {op} {name}, {where}…")
            ctx.runner.submit(
                CHANNEL,
                iter_state_diff,
                scan,
                old,
                new,
                pid,
                time_columns=time_columns,
                cache=ctx.cache,
                paged_over=self.paged_rows,
                what=f"Comparing versions {old} and {new}",
                **done,
            )
            return
        if native:
            self.view.set_loading(f"Decoding operator {op} {name}, {where}, version {version}…")
            ctx.runner.submit(
                CHANNEL,
                iter_state_table,
                scan,
                version,
                pid,
                time_columns=time_columns,
                cache=ctx.cache,
                paged_over=self.paged_rows,
                what=f"Decoding version {version}",
                **done,
            )
            return
        store = ctx.loaded.checkpoint.operator(op).store(name)
        self.view.set_loading(
            f"Reading operator {op} {name}, {where}, version {version} "
            f"through Spark on {ctx.backends.master} (the first read starts a Spark session)…"
        )
        ctx.backends.start_spark_read(backend)
        ctx.runner.submit(
            CHANNEL,
            iter_backend_table,
            backend,
            store,
            version,
            pid,
            time_columns=time_columns,
            what=f"Reading version {version} through Spark",
            **done,
        )

    def _set_state_table(self, table: StateTable | None) -> None:
        """Hold the browser's rows, closing the database of the rows held before (if paged)."""
        old, self.state.table = self.state.table, table
        self.state.pages_wanted.clear()
        if old is not None and old is not table and old.query is not None:
            for channel in ("order", "page", "locate"):
                self.ctx.runner.cancel(channel)
            old.query.close()

    def _on_table_finished(self, table: StateTable) -> None:
        self.ctx.backends.end_spark_read()
        self._set_state_table(table)
        role = self.ctx.roles.get((table.operator_id, table.store_name))
        text = self.state.describe(table, role.text if role is not None else None)
        if table.problems:
            self.ctx.problems.add_problems(table.problems, where=f"decoding version {table.version}")
        if table.query is not None:
            self.view.set_query_table(
                table.headers, [spec.numeric for spec in table.query.specs], table.total_rows, text
            )
        else:
            partitions = table.sort_keys[table.headers.index("partition")]
            self.view.set_table(table.headers, table.columns, table.sort_keys, table.keys, text, partitions)
        self.backend_used.emit(f"State read by {backend_text(table.backend)}")
        self.updated.emit()

    def _on_table_errored(self, err: BaseException) -> None:
        self.ctx.backends.end_spark_read()
        self._set_state_table(None)
        if isinstance(err, StatelensError):
            if not isinstance(err, UsageError):
                self.ctx.problems.add_problems([err], where="state browser")
            self.view.clear_table(f"Cannot show this state: {err}")
            self.updated.emit()
        else:
            self.view.clear_table(f"Decoding failed: {errors.short_message(err)}")
            self.updated.emit()
            errors.show_error(err, title="Decoding state failed")

    def _on_view_compare_selected(self, version: int | None) -> None:
        self.state.compare_version = version
        self.request_table()

    # -- sorting, filtering and paging -------------------------------------------------------------------
    def _on_view_order_requested(self, column: int, descending: bool, needle: str) -> None:
        table = self.state.table
        query = table.query if table is not None else None
        runner = self.ctx.runner
        if query is not None and self.view.model is self.view.query_model:
            self.state.pages_wanted.clear()  # pages of the former order
            what = "Filtering" if needle else "Sorting" if column >= 0 else "Reading"
            runner.submit(
                "order",
                _iter_query_order,
                query,
                column,
                descending,
                needle,
                what=f"{what} {query.total_rows:,} rows (DuckDB)",
                on_result=lambda got: self.view.apply_result(column, descending, needle, *got),
                on_error=self._on_query_errored,
            )
            return
        model = self.view.model
        columns, sort_keys, n = model.columns(), model.sort_keys(), model.total_rows()
        runner.submit(
            "order",
            _iter_row_order,
            sort_keys,
            columns,
            n,
            column,
            descending,
            needle,
            what=f"Sorting and filtering {n:,} rows",
            on_result=lambda rows: self.view.apply_order(column, descending, needle, rows),
        )

    def _on_view_page_requested(self, column: int, descending: bool, needle: str, offset: int) -> None:
        dropped = self.state.want_page(offset)
        if dropped:  # scrolled past: asked for again if shown again
            self.view.forget_page_requests(dropped)
        self._read_next_page()

    def _read_next_page(self) -> None:
        """Read the page asked for last, one at a time (the rows on screen first)."""
        table = self.state.table
        query = table.query if table is not None else None
        if query is None or not self.state.pages_wanted or self.ctx.runner.current("page") is not None:
            return
        offset = self.state.next_page()
        assert offset is not None
        model = self.view.query_model
        column, descending = model.sort_state()
        needle = model.filter_text()

        self.ctx.runner.submit(
            "page",
            _iter_query_page,
            query,
            column,
            descending,
            needle,
            offset,
            what=f"Reading rows {offset + 1:,}–{offset + PAGE_ROWS:,}",
            on_result=lambda page: self.view.add_page(column, descending, needle, page),
            on_error=self._on_query_errored,
        )  # the next one starts when this one is finished (_on_runner_job_finished)

    def _on_runner_job_finished(self, channel: str) -> None:
        if channel == "page":
            self._read_next_page()

    def _on_view_locate_requested(self, partition_id: int, key: Any) -> None:
        table = self.state.table
        query = table.query if table is not None else None
        if query is None:
            return
        model = self.view.query_model
        column, descending = model.sort_state()
        self.ctx.runner.submit(
            "locate",
            _iter_query_locate,
            query,
            column,
            descending,
            model.filter_text(),
            partition_id,
            key,
            what="Finding the selected key among the rows",
            on_result=lambda row: self.view.show_query_row(row) if row is not None else None,
            on_error=self._on_query_errored,
        )

    def _on_query_errored(self, err: BaseException) -> None:
        if isinstance(err, InterruptedError):
            return  # the table was replaced meanwhile
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="state browser")
        self.view.set_loading(f"Cannot query these rows: {errors.short_message(err)}")

    # -- export ------------------------------------------------------------------------------------------
    def export_job(self, table: Any, source: Any, out: str, fmt: str) -> tuple[Any, ...] | None:
        """The rows shown, typed as ``statelens rows`` writes them (filter and order kept)."""

        shown = self.state.table
        if table is not self.view.table or shown is None:
            return None
        if shown.query is not None:
            column, descending = source.sort_state()
            return (iter_export_query_table, shown, out, fmt, column, descending, source.filter_text())
        return (iter_export_state_table, shown, out, fmt, source.visible_source_rows())

    def spark_job(self, url: str) -> tuple[str, tuple[Any, ...]] | None:
        """``(what, job)`` having Spark write the version shown (its partition, when one is shown) as
        Parquet to ``url`` where Spark runs; None without a table."""

        table = self.state.table
        if self.ctx.loaded is None or table is None:
            return None
        backends = self.ctx.backends
        backend = backends.ensure_chooser().spark
        backends.chooser.used.add("spark")
        job = (
            iter_spark_parquet,
            backend,
            table.operator_id,
            table.store_name,
            table.version,
            url,
            table.partition_id,
        )
        return f"Spark is writing version {table.version} to {url}", job


def _iter_row_order(
    sort_keys: Any,
    columns: Any,
    n: int,
    column: int,
    descending: bool,
    needle: str,
    cancelled: Any = None,
) -> Generator[Progress, None, Any]:
    """:func:`viewers.tables.row_order` of a large table as a runner job (formats cells as needed)."""
    yield Progress(0, 1, f"{'filtering' if needle else 'sorting'} {n:,} rows")
    return row_order(sort_keys, columns, n, column, descending, needle, cancelled=cancelled)


def _iter_query_order(
    query: Any, column: int, descending: bool, needle: str
) -> Generator[Progress, None, tuple[int, Any]]:
    """Rows matching and the first page of a paged table's new order, as a runner job."""
    yield Progress(0, 1, f"{'filtering' if needle else 'sorting'} {query.total_rows:,} rows")
    return query.first_page(column, descending, needle, PAGE_ROWS)


def _iter_query_page(
    query: Any, column: int, descending: bool, needle: str, offset: int
) -> Generator[Progress, None, Any]:
    """The next page of a paged table, as a runner job."""
    yield Progress(0, 1, f"reading rows from {offset + 1:,}")
    return query.page(column, descending, needle, offset, PAGE_ROWS)


def _iter_query_locate(
    query: Any, column: int, descending: bool, needle: str, partition_id: int, key: Any
) -> Generator[Progress, None, int | None]:
    """Where a key stands in a paged table's order, as a runner job."""
    yield Progress(0, 1, f"finding the key in partition {partition_id}")
    return query.position_of(column, descending, needle, partition_id, key)

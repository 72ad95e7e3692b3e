"""The SQL tab: DuckDB (or Spark) over the state of the checkpoint shown, with its tables listed."""

from __future__ import annotations

from typing import Any

from statelens.app.analysis.sql import EXAMPLES as SQL_EXAMPLES
from statelens.app.analysis.sql import SqlTable, iter_sql_table, iter_table_columns
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.gui.controllers.sql_state import SqlState
from statelens.app.session import LoadedCheckpoint
from statelens.readers.errors import StatelensError
from statelens.viewers.sql import SqlView

#: The runner channel of a query (and the view's name: the editor's query waits for the view).
CHANNEL = "sql"
#: The runner channel of listing the tables and their columns.
TABLES_CHANNEL = "sqltables"


class SqlController(Controller):
    """Runs the editor's query (on the picked store's ``state`` and ``changes`` tables) and lists the
    tables beside the editor."""

    name = "sql"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, SqlView())
        #: What the tab shows of its last query and of the tables listed.
        self.state = SqlState()
        self.view.set_examples(SQL_EXAMPLES)
        self.view.run_requested.connect(self._on_view_run_requested)
        self.view.store_combo.activated.connect(lambda _i: self.list_tables())

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.view.set_stores(
            [self.ctx.store_item(op, s) for op, s in self.ctx.stores],
            self.ctx.store_groups(),
            self.ctx.store_tips(),
        )

    def start(self, loaded: LoadedCheckpoint) -> None:
        # The editor's query, on this checkpoint, and the tables' columns beside it.
        self.ctx.deferred.when_shown(
            CHANNEL,
            lambda: (
                self.list_tables(),
                self._on_view_run_requested(
                    self.view.query(), self.view.store(), self.view.spark_check.isChecked()
                ),
            ),
        )

    def cancel(self) -> None:
        chooser = self.ctx.backends.chooser
        if self.ctx.runner.current(CHANNEL) is not None and chooser is not None:
            chooser.cancel()  # a query running in Spark

    def list_tables(self) -> None:
        """List the SQL tables and their columns (``state`` and ``changes`` of the picked store)."""
        if self.ctx.loaded is None:
            return
        operator_id, store_name = self.state.store_of(self.view.store())
        self.ctx.runner.submit(
            TABLES_CHANNEL,
            iter_table_columns,
            self.ctx.loaded.checkpoint,
            operator_id,
            store_name,
            what="Listing the SQL tables",
            on_result=lambda got: self._on_tables_listed(*got),
            on_error=lambda err: self._on_tables_listed(
                {}, f"Tables not listed: {errors.short_message(err)}"
            ),
        )

    def _on_tables_listed(self, tables: dict[str, list[tuple[str, str]]], note: str = "") -> None:
        self.state.listed(tables, note)
        self.view.set_tables(tables, note)

    def _on_view_run_requested(self, query: str, store: Any, in_spark: bool = False) -> None:
        if not self.state.runs(query, opened=self.ctx.loaded is not None):
            return
        operator_id, store_name = self.state.store_of(store)
        backends = self.ctx.backends.ensure_chooser() if in_spark else None
        self.view.set_running(self.state.running_text(in_spark, self.ctx.backends.master))
        self.ctx.runner.submit(
            CHANNEL,
            iter_sql_table,
            self.ctx.loaded.checkpoint,
            query,
            operator_id=operator_id,
            store_name=store_name,
            cache=self.ctx.cache,
            backends=backends,
            in_spark=in_spark,
            what="Running the SQL query in Spark" if in_spark else "Running the SQL query",
            on_result=self._on_sql_finished,
            on_error=self._on_sql_errored,
        )

    def _on_sql_finished(self, answer: SqlTable) -> None:
        status = self.state.answered(answer)
        if answer.problems:
            self.ctx.problems.add_problems(answer.problems, where="SQL query")
        self.view.set_answer(answer.headers, answer.columns, status)
        self.updated.emit()

    def _on_sql_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.view.set_error(self.state.failed(str(err)))
        else:
            self.view.set_error(self.state.failed(f"The query failed: {errors.short_message(err)}"))
            errors.show_error(err, title="SQL query failed")
        self.updated.emit()

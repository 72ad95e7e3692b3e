"""The schema and conf tab: each store's schema, the schema files' history and the query's conf."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from statelens.app.explore import conf_changes, read_schema_history
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.gui.controllers.schema_state import SchemaState
from statelens.app.session import LoadedCheckpoint
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.viewers.schema import SchemaConfView

#: The runner channel of the schema files' job.
CHANNEL = "schema"


class SchemaController(Controller):
    """Shows the stores' schemas at once, then the schema files read in the background."""

    name = "schema"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, SchemaConfView(ctx.selection))
        #: The schema files read.
        self.state = SchemaState()
        self.view.batch_selected.connect(ctx.select_batch)
        self.view.store_selected.connect(ctx.select_store)

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        ckpt = loaded.checkpoint
        self.state.reset()
        self.view.set_schemas(self._schema_items(), self.state.files, self.ctx.store_tips())
        self.view.set_conf(ckpt.batches, conf_changes(ckpt.batches))

    def start(self, loaded: LoadedCheckpoint) -> None:
        self.ctx.runner.submit(
            CHANNEL,
            _iter_schema_history,
            loaded.checkpoint,
            what="Reading schema files",
            on_result=self._on_schema_finished,
            on_error=self._on_schema_errored,
        )

    def main_table(self) -> Any:
        return self.view.conf_table

    def _schema_items(self) -> list[tuple[Any, ...]]:
        ckpt = self.ctx.loaded.checkpoint if self.ctx.loaded is not None else None
        return (
            [(*self.ctx.store_item(op, s), s.schema) for op in ckpt.operators for s in op.stores]
            if ckpt
            else []
        )

    def _on_schema_finished(self, result: Any) -> None:
        versions, problems = result
        self.ctx.problems.add_problems(problems, where="schema files")
        if self.ctx.loaded is not None:
            self.view.set_schemas(self._schema_items(), self.state.read(versions), self.ctx.store_tips())
            self.view.show_store(*self.state.store_shown(self.ctx.selection))
        self.updated.emit()

    def _on_schema_errored(self, err: BaseException) -> None:
        self.updated.emit()
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="schema files")
        else:
            errors.show_error(err, title="Reading schema files failed")


def _iter_schema_history(ckpt: Any) -> Generator[Progress, None, Any]:
    """:func:`app.explore.read_schema_history` as a runner job."""
    yield Progress(0, 1, "reading schema files")
    return read_schema_history(ckpt)

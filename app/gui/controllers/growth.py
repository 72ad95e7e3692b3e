"""The state growth tab: rows and bytes per version and partition, and the heaviest keys."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from PySide6.QtCore import Signal

from statelens.app.analysis.growth import GrowthResult, iter_growth
from statelens.app.analysis.heavy import StoreTopKeys, iter_top_keys
from statelens.app.analysis.runs import Run, find_runs, fix_view, iter_runs
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import TOP_KEYS_SHOWN, Controller, WindowContext
from statelens.app.gui.controllers.growth_state import GrowthState
from statelens.app.session import LoadedCheckpoint, growth_arrays
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.viewers.growth import StateGrowthView

#: The runner channel of the growth job (and the view's name: it waits for the view).
CHANNEL = "growth"
#: The runner channel of weighing one store's keys.
HEAVY_CHANNEL = "heavy"


def _growth_and_runs(
    ckpt: Any,
    event_logs: list[str],
    storage_options: Any,
    top_keys: int,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, tuple[GrowthResult, list[Run]]]:
    """State growth, then the checkpoint's runs (the event logs' run ids when given): one job."""
    growth = yield from iter_growth(ckpt, cancelled=cancelled, top_keys=top_keys)
    runs = yield from iter_runs(ckpt, event_logs, storage_options, cancelled)
    return growth, runs


class GrowthController(Controller):
    """Measures state growth when the view is shown (or the app is idle), then weighs the selected
    store's heaviest keys.

    Parameters
    ----------
    ctx : WindowContext
    top_keys : int, optional
        Heaviest keys listed for the selected store.

    Signals
    -------
    store_updated(int operator_id, str store_name)
        A store's growth is shown.
    """

    name = "growth"

    store_updated = Signal(int, str)

    def __init__(self, ctx: WindowContext, top_keys: int = TOP_KEYS_SHOWN) -> None:
        super().__init__(ctx, StateGrowthView(ctx.selection))
        #: What the view remembers: whether growth was measured, whose keys were asked for.
        self.state = GrowthState(top_keys=top_keys)
        self.view.store_selected.connect(ctx.select_store)
        self.view.partition_selected.connect(ctx.select_partition)
        self.view.fix_batch_chosen.connect(self._on_fix_batch_chosen)

    @property
    def top_keys(self) -> int:
        """Heaviest keys listed for the selected store."""
        return self.state.top_keys

    @property
    def done(self) -> bool:
        """Whether growth was measured for the checkpoint shown (its keys are weighed after)."""
        return self.state.done

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.state.reset()
        self.view.clear()
        self.view.fix.set_batches(max(loaded.checkpoint.offsets, default=None))
        self.view.set_stores(
            [self.ctx.store_item(op, s) for op, s in self.ctx.stores],
            self.ctx.store_groups(),
            self.ctx.store_tips(),
        )

    def start(self, loaded: LoadedCheckpoint) -> None:
        if not self.ctx.stores:
            return
        for op, s in self.ctx.stores:
            self.view.set_store_status(op.operator_id, s.store_name, "computing…")
        self.ctx.deferred.when_shown(
            CHANNEL,
            lambda: self.ctx.runner.submit(
                CHANNEL,
                _growth_and_runs,
                loaded.checkpoint,
                list(self.ctx.event_logs),
                self.ctx.storage_options or None,
                self.top_keys,  # weighed on growth's own walk: no second read
                what="Measuring state growth",
                on_result=self._on_growth_and_runs_finished,
                on_error=self._on_growth_errored,
            ),
        )

    def adopt(self, summary: Any) -> None:
        """Show the verdicts' growth run when this view's own has not started (no second read); take
        their runs (from the event logs' run ids, when given)."""
        if summary.runs:
            self.state.runs = list(summary.runs)
            if self.state.rows:
                self._show_fix()
        if summary.growth is not None and self.ctx.deferred.take(CHANNEL):
            self._on_growth_finished(summary.growth)

    def show_store(self, operator_id: int, store_name: str) -> None:
        self.view.show_store(operator_id, store_name)

    def main_plot(self) -> Any:
        return self.view.graphics

    def on_selection_changed(self, changes: dict[str, Any]) -> None:
        if {"operator_id", "store_name"} & set(changes):
            self._request_top_keys()

    def _on_growth_and_runs_finished(self, result: tuple[Any, list[Run]]) -> None:
        growth, runs = result
        if self.state.runs is None:  # the verdicts' runs, when they came first, are as good
            self.state.runs = runs
        self._on_growth_finished(growth)

    def _on_growth_finished(self, result: Any) -> None:
        self.ctx.problems.add_problems(result.problems, where="state growth")
        for store in result.stores:
            if store.skipped:
                self.view.set_store_status(store.operator_id, store.store_name, store.skipped)
                continue
            self.state.rows[(store.operator_id, store.store_name)] = {
                v: r
                for v, r in zip(store.versions, store.total_rows(), strict=True)
                if store.partitions_at(v) == len(store.rows)
            }
            pids, versions, metrics = growth_arrays(store)
            self.view.set_growth(store.operator_id, store.store_name, pids, versions, metrics)
            role = self.ctx.roles.get((store.operator_id, store.store_name))
            notes = self.state.store_notes(store, result.problems, role)
            self.view.set_store_status(store.operator_id, store.store_name, notes)
            self.store_updated.emit(store.operator_id, store.store_name)

        self._show_fix()
        weighed = [s.top_keys for s in result.stores if s.top_keys is not None]
        self.state.weighed.update((t.operator_id, t.store_name) for t in weighed)
        self._show_top_keys(weighed)
        self.state.done = True
        self._request_top_keys()

    def _show_fix(self) -> None:
        """Mark the fix batch (the last restart) and each store's rows per batch around it."""
        if self.ctx.loaded is None:
            return
        if self.state.runs is None:
            self.state.runs = find_runs(self.ctx.loaded.checkpoint)
        self.view.set_fix(*fix_view(self.state.runs, self.state.rows, "rows", self.state.chosen))

    def _on_fix_batch_chosen(self, batch_id: int | None) -> None:
        self.state.chosen = batch_id
        if self.state.rows:
            self._show_fix()

    def _on_growth_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="state growth")
        else:
            errors.show_error(err, title="Measuring state growth failed")

    # -- heaviest keys ---------------------------------------------------------------------------------
    def _request_top_keys(self) -> None:
        """Weigh the selected store's keys (once per store and checkpoint), after growth: heaviest keys
        are read in the background for the growth view, never delaying its plots."""
        ctx = self.ctx
        if ctx.loaded is None:
            return
        selected = (ctx.selection.operator_id, ctx.selection.store_name)
        key = self.state.to_weigh(selected, ctx.catalog.decodable)
        if key is None:
            return
        ctx.runner.submit(
            HEAVY_CHANNEL,
            iter_top_keys,
            ctx.loaded.checkpoint,
            self.state.top_keys,
            only=key,
            what="Weighing the heaviest keys",
            on_result=self._on_top_keys_finished,
            on_error=lambda err, k=key: self._on_top_keys_errored(k, err),
        )

    def _on_top_keys_finished(self, result: Any) -> None:
        stores, problems = result
        self.ctx.problems.add_problems(problems, where="heaviest keys")
        self._show_top_keys(stores)

    def _show_top_keys(self, stores: list[StoreTopKeys]) -> None:
        for s in stores:
            rows = [(h.partition_id, h.key_text, h.bytes, h.elements) for h in s.overall]
            self.view.set_top_keys(
                s.operator_id,
                s.store_name,
                s.version,
                s.keys,
                rows,
                s.grouping,
                note=f"not weighed ({s.skipped})" if s.skipped else "",
            )

    def _on_top_keys_errored(self, key: tuple[int, str], err: BaseException) -> None:
        self.state.forget(key)
        self.view.set_top_keys(
            key[0], key[1], None, 0, [], note=f"could not be weighed: {errors.short_message(err)}"
        )
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="heaviest keys")
        else:
            errors.show_error(err, title="Weighing the heaviest keys failed")

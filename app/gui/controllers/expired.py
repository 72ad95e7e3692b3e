"""The expired keys tab: keys whose timeout or watermark passed but that are still in the state."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from statelens.app.analysis.runs import Run, find_runs, fix_view, iter_runs
from statelens.app.explore import ExpiredOverview, arrange_expired, findings_table, iter_expired_overview
from statelens.app.export import iter_export_documents
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.gui.controllers.expired_state import ExpiredState
from statelens.app.prune import Selection
from statelens.app.session import LoadedCheckpoint
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.viewers.expired import ExpiredView

#: The runner channel of the expired keys' job (and the view's name: it waits for the view).
CHANNEL = "expired"


def _expired_and_runs(
    ckpt: Any, event_logs: list[str], storage_options: Any, cancelled: Callable[[], bool] | None = None
) -> Generator[Progress, None, tuple[ExpiredOverview, list[Run]]]:
    """The expired keys, then the checkpoint's runs (the event logs' run ids when given): one job."""
    overview = yield from iter_expired_overview(ckpt, cancelled=cancelled)
    runs = yield from iter_runs(ckpt, event_logs, storage_options, cancelled)
    return overview, runs


class ExpiredController(Controller):
    """Looks for expired keys when the view is shown (or the app is idle, or the verdicts found them),
    and opens the store with the most findings first."""

    name = "expired"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, ExpiredView(ctx.selection))
        #: What the view shows: the analysis (None until it is done), and how it orders the stores.
        self.state = ExpiredState()
        self.view.store_selected.connect(ctx.select_store)
        self.view.version_selected.connect(ctx.select_version)
        self.view.partition_selected.connect(ctx.select_partition)
        self.view.finding_selected.connect(self._on_view_finding_selected)
        self.view.prune_requested.connect(self.open_prune_dialog)
        self.view.fix_batch_chosen.connect(self._on_fix_batch_chosen)
        #: The prune dialog last opened (kept for tests and to keep it alive while shown).
        self.prune_dialog: Any = None
        # Tables built from the analysis are rebuilt in the new zone (no re-analysis).
        ctx.time_zone.connect(self._on_time_zone_changed)

    @property
    def overview(self) -> ExpiredOverview | None:
        """The analysis shown (None until it is done)."""
        return self.state.overview

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.state.reset()
        self.view.clear()
        self.view.fix.set_batches(max(loaded.checkpoint.offsets, default=None))
        items = self.ctx.store_items(self.state.store_order(self.ctx.catalog))  # by rows until analysed
        self.view.set_stores(items, self.ctx.store_groups(), self.ctx.store_tips())

    def start(self, loaded: LoadedCheckpoint) -> None:
        ckpt = loaded.checkpoint
        if not ckpt.operators:
            self.updated.emit()
            return
        for op in ckpt.operators:
            for s in op.stores:
                self.view.set_store_status(op.operator_id, s.store_name, "Looking for expired keys…")
        self.ctx.deferred.when_shown(
            CHANNEL,
            lambda: self.ctx.runner.submit(
                CHANNEL,
                _expired_and_runs,
                ckpt,
                list(self.ctx.event_logs),
                self.ctx.storage_options or None,
                what="Looking for expired keys",
                on_result=self._on_expired_and_runs_finished,
                on_error=self._on_expired_errored,
            ),
        )

    def adopt(self, summary: Any) -> None:
        """Show the verdicts' expired run when this view's own has not started (no second read); take
        their runs (from the event logs' run ids, when given)."""
        if summary.runs:
            self.state.runs = list(summary.runs)
            if self.overview is not None:
                self._show_fix(self.overview)
        if self.ctx.loaded is None or summary.expired is None or summary.version_counts is None:
            return
        if self.ctx.deferred.take(CHANNEL):
            self._on_expired_finished(
                arrange_expired(self.ctx.loaded.checkpoint, summary.expired, summary.version_counts)
            )

    def findings(self) -> list[Any]:
        """The findings the view lists (latest version of each partition), every store: the analysis'
        capped examples (exact counts are in each store's ``total_findings``)."""
        return self.state.findings()

    def show_store(self, operator_id: int, store_name: str) -> None:
        self.view.show_store(operator_id, store_name)

    def open_prune_dialog(self, operator_id: int, store_name: str) -> None:
        """ "Prune these keys into a copy...": the zombies of one store, dry run first (a dialog)."""
        from statelens.app.gui.prune_dialog import PruneDialog  # deferred: prune_dialog imports superqt

        if self.ctx.loaded is None:
            return
        selection = Selection(zombies=True, operator_id=operator_id, store_name=store_name)
        self.prune_dialog = PruneDialog(
            self.ctx.loaded.checkpoint, selection, self.ctx.runner, self.view.window()
        )
        self.prune_dialog.show()

    def main_table(self) -> Any:
        return self.view.table

    def main_plot(self) -> Any:
        return self.view.graphics

    def export_job(self, table: Any, source: Any, out: str, fmt: str) -> tuple[Any, ...] | None:
        """The findings shown, as JSON documents (the CLI's ``expired --json`` rows)."""

        if table is not self.view.table or self.overview is None:
            return None
        findings = self.state.store_findings(self.view.shown_store())
        rows = source.visible_source_rows()
        return (iter_export_documents, (findings[i].to_json() for i in rows), out, fmt)  # built in the worker

    def _on_expired_and_runs_finished(self, result: tuple[ExpiredOverview, list[Run]]) -> None:
        overview, runs = result
        if self.state.runs is None:  # the verdicts' runs, when they came first, are as good
            self.state.runs = runs
        self._on_expired_finished(overview)

    def _on_expired_finished(self, overview: ExpiredOverview) -> None:
        self.state.overview = overview
        ctx = self.ctx
        ctx.problems.add_problems(overview.problems, where="expired keys")
        if ctx.loaded is not None:
            # Stores with findings first (then by rows), and the view opens on the one with the
            # most, unless a store was picked.
            order = self.state.store_order(ctx.catalog)
            self.view.set_stores(ctx.store_items(order), ctx.store_groups(), ctx.store_tips())
            show = self.state.store_to_show(
                order, (ctx.selection.operator_id, ctx.selection.store_name), ctx.store_chosen
            )
            if show is not None:
                self.view.show_store(*show)
        self._show_tables(overview)
        for st in overview.stores:
            self.view.set_store_status(st.operator_id, st.store_name, st.describe())
        self._show_fix(overview)
        self.updated.emit()

    def _show_fix(self, overview: ExpiredOverview) -> None:
        """Mark the fix batch (the last restart) and each store's expired keys per batch around it."""
        if self.ctx.loaded is None:
            return
        if self.state.runs is None:
            self.state.runs = find_runs(self.ctx.loaded.checkpoint)
        series = {
            (st.operator_id, st.store_name): {
                v: sum(n[i] for c, n in st.counts.items() if c != "overdue")
                for i, v in enumerate(st.versions)
            }
            for st in overview.stores
            if st.summary.check != "skipped"
        }
        self.view.set_fix(*fix_view(self.state.runs, series, "expired keys", self.state.chosen))

    def _on_fix_batch_chosen(self, batch_id: int | None) -> None:
        self.state.chosen = batch_id
        if self.overview is not None:
            self._show_fix(self.overview)

    def _show_tables(self, overview: ExpiredOverview) -> None:
        zone = self.ctx.time_zone
        for st in overview.stores:
            examples = st.examples  # the most overdue keys; st.total_findings counts them all
            times = [
                ms for f in examples for ms in (f.timeout_ms, f.threshold_ms) if ms is not None and ms >= 0
            ]
            headers, columns, sort_keys = findings_table(
                examples, zone.format_ms, zone.label(min(times) / 1000 if times else None)
            )
            refs = [(f.partition, f.version, f.key) for f in examples]
            self.view.set_expiry(
                st.operator_id,
                st.store_name,
                st.versions,
                st.counts,
                st.partitions,
                st.partition_counts,
                headers,
                columns,
                sort_keys,
                refs,
                total=st.total_findings,
                checked=st.summary.check != "skipped",
                unreadable=st.unreadable,
            )

    def _on_time_zone_changed(self, _utc: bool) -> None:
        if self.overview is not None:
            self._show_tables(self.overview)
            self.updated.emit()

    def _on_expired_errored(self, err: BaseException) -> None:
        if self.ctx.loaded is not None:
            for op in self.ctx.loaded.checkpoint.operators:
                for s in op.stores:
                    self.view.set_store_status(
                        op.operator_id,
                        s.store_name,
                        f"Could not look for expired keys: {errors.short_message(err)}",
                    )
        self.updated.emit()
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="expired keys")
        else:
            errors.show_error(err, title="Looking for expired keys failed")

    def _on_view_finding_selected(self, partition_id: int, version: int, key: Any) -> None:
        shown = self.view.shown_store()
        if shown is None:
            return
        change = self.state.finding_selection(
            shown, partition_id, version, key, self.ctx.store_exists(*shown)
        )
        changed = self.ctx.selection.update(**change)
        self.ctx.key_history_requested.emit(set(changed))

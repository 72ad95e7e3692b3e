"""The overview tab: the checkpoint's facts at once, then the verdicts.

When a checkpoint is shown the overview lists its batches, operators and load problems, and
:func:`app.analysis.summary.iter_summary` runs in the background (at once when the overview is in
front, else once the view in front has its data, as :class:`~app.gui.controllers.context.DeferredJobs`
runs hidden views' jobs); its verdicts, health checks and problems go to
:class:`viewers.overview.OverviewView`. The verdicts that need no state file read (commit,
watermark) are shown at once, above what is still being checked; then the verdicts that need only each
store's latest version (:func:`app.analysis.summary.iter_first_look`: restart, rows now, skew), read
first because on remote storage they need a few times fewer requests than every state file; then all
of them. A verdict's link asks the window to open the view that proves it, where it points
(``MainWindow.open_at``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal

from statelens.app.analysis.expired import DEFAULT_MAX_EXAMPLES
from statelens.app.analysis.summary import Summary, early_verdicts, iter_first_look, iter_summary
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import TOP_KEYS_SHOWN, Controller, WindowContext
from statelens.app.gui.controllers.overview_state import OverviewState
from statelens.app.session import LoadedCheckpoint, describe_state
from statelens.readers.errors import StatelensError
from statelens.viewers.overview import OverviewView

#: The runner channel of the verdicts' job.
CHANNEL = "summary"
PENDING = (
    "Checking the checkpoint: health checks (every state file is read), expired keys, state growth, "
    "watermark…"
)
#: Under the verdicts known at once (:func:`app.analysis.summary.early_verdicts`).
PENDING_STATE = (
    "Still checking (the latest version's files first, then every state file): restart, expired keys, "
    "state growth, unreadable files…"
)
#: Under the first verdicts (:func:`app.analysis.summary.iter_first_look`).
PENDING_HISTORY = (
    "Still checking (every state file is read): expired keys, growth over the versions, the older "
    "versions' files, the event logs…"
)


class OverviewController(Controller):
    """Fills the overview and runs the verdicts' job.

    Parameters
    ----------
    ctx : WindowContext
    top_keys : int, optional
        Heaviest keys weighed on the verdicts' growth walk (the growth view shows them).

    Signals
    -------
    summary_finished(object summary)
        The verdicts' :class:`~app.analysis.summary.Summary` (its growth and expired runs can fill
        those views without a second read).
    open_requested(str view, object target)
        A verdict's link: show ``view`` at ``target`` (``MainWindow.open_at`` keywords).
    """

    name = "overview"

    summary_finished = Signal(object)
    open_requested = Signal(str, object)

    def __init__(self, ctx: WindowContext, top_keys: int = TOP_KEYS_SHOWN) -> None:
        super().__init__(ctx, OverviewView(ctx.selection, ctx.time_zone))
        self.top_keys = top_keys
        #: What the overview shows of the verdicts' job, and where their links lead.
        self.state = OverviewState()
        self.view.batch_selected.connect(ctx.select_batch)
        self.view.store_selected.connect(ctx.select_store)
        self.view.view_requested.connect(self._on_view_view_requested)

    @property
    def summary(self) -> Summary | None:
        """The verdicts shown (None while they are computed, or when they could not be)."""
        return self.state.summary

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        ckpt = loaded.checkpoint
        self.view.set_checkpoint(
            loaded.location,
            ckpt.query_id,
            ckpt.batches,
            ckpt.operators,
            ckpt.report.problems,
            roles=self.ctx.roles,
            descriptions=describe_state(ckpt),
        )
        self.check(ckpt)

    def check(self, ckpt: Any) -> None:
        """Check ``ckpt`` (the checkpoint shown) in the background, with the event logs added."""
        self.state.reset()
        try:
            early = early_verdicts(ckpt)
        except StatelensError:  # named again by the full checks
            self.view.set_verdicts_pending(PENDING)
        else:
            self.view.set_verdicts(self.state.verdict_rows(early), pending=PENDING_STATE)
        # The latest versions' files, then every state file: when another view is in front, its own
        # job gets the cores first (the verdicts start when the overview is shown or nothing else
        # runs). A run of the checks before (without the event logs just added) would only be
        # replaced: it stops now.
        self.ctx.runner.cancel(CHANNEL)
        self.ctx.deferred.when_shown(
            self.name,
            lambda: self.ctx.runner.submit(
                CHANNEL,
                iter_first_look,
                ckpt,
                what="Reading the latest versions for the first verdicts",
                on_result=lambda first: self._on_first_look(ckpt, first),
                on_error=lambda err: self._on_first_look_errored(ckpt, err),
            ),
        )

    def _on_first_look(self, ckpt: Any, first: Summary | None) -> None:
        if first is None:  # stopped before its end (Cancel)
            return
        self.view.set_verdicts(self.state.verdict_rows(first), pending=PENDING_HISTORY)
        self.updated.emit()
        self._check_every_file(ckpt)

    def _on_first_look_errored(self, ckpt: Any, err: BaseException) -> None:
        if isinstance(err, StatelensError):  # a located error: the full checks name it where it is
            self._check_every_file(ckpt)
        else:
            self._on_summary_errored(err)

    def _check_every_file(self, ckpt: Any) -> None:
        self.ctx.runner.submit(
            CHANNEL,
            iter_summary,
            ckpt,
            event_logs=list(self.ctx.event_logs) or None,
            storage_options=self.ctx.storage_options or None,
            # The growth and expired views show the same runs (no second read): summary_finished.
            max_examples=DEFAULT_MAX_EXAMPLES,
            top_keys=self.top_keys,
            what="Checking the checkpoint for the verdicts",
            on_result=self._on_summary_finished,
            on_error=self._on_summary_errored,
        )

    def cancel(self) -> None:
        if self.ctx.runner.current(CHANNEL) is not None:
            self.view.set_verdicts_pending("The checks were cancelled: reload (F5) to run them again.")

    def main_table(self) -> Any:
        return self.view.batch_table

    def _on_summary_finished(self, summary: Summary | None) -> None:
        if summary is None:  # stopped before its end (Cancel)
            return
        self.state.summary = summary
        self.view.set_verdicts(self.state.verdict_rows(summary))
        findings, unreadable = self.state.health(summary)
        self.view.set_health(findings, unreadable)
        self.ctx.problems.add_problems(summary.problems, where="verdicts")
        self.updated.emit()
        self.summary_finished.emit(summary)

    def _on_summary_errored(self, err: BaseException) -> None:
        self.view.set_verdicts_pending(f"The verdicts could not be computed: {errors.short_message(err)}")
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="verdicts")
        else:
            errors.show_error(err, title="Checking the checkpoint failed")
        self.updated.emit()

    def _on_view_view_requested(self, view: str, target: dict[str, Any]) -> None:
        link = self.state.link(view, target)
        if link.details is not None:
            self.view.show_details(link.details)
            return
        self.open_requested.emit(link.view, dict(link.target))

"""The batch timeline tab: the checkpoint's batches, and what the query reported in its event logs."""

from __future__ import annotations

from typing import Any

from statelens.app.analysis.timeline import ProgressSeries, iter_progress_series
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.gui.controllers.timeline_state import TimelineState
from statelens.app.session import LoadedCheckpoint
from statelens.readers.errors import StatelensError
from statelens.viewers.timeline import BatchTimelineView

#: The runner channel of the event logs' job.
CHANNEL = "eventlog"


class TimelineController(Controller):
    """Fills the batch timeline, and reads the event logs added (durations, rows and rates per batch).

    Its ``updated`` signal is sent when the event logs were read (or could not be).
    """

    name = "timeline"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, BatchTimelineView(ctx.selection, ctx.time_zone))
        #: What the timeline remembers of the event logs read.
        self.state = TimelineState()
        self.view.batch_selected.connect(ctx.select_batch)

    @property
    def progress_summary(self) -> str:
        """The last event logs' summary line (also shown in the status bar)."""
        return self.state.progress_summary

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.view.set_batches(loaded.checkpoint.batches)
        self.view.clear_progress()

    def start(self, loaded: LoadedCheckpoint) -> None:
        if self.ctx.event_logs:
            self.read_event_logs()

    def main_plot(self) -> Any:
        return self.view.graphics

    def add_event_logs(self, paths: list[str]) -> bool:
        """Add event logs, driver logs or progress dumps (a file of a rolling event log stands for its
        folder); read them when a checkpoint is shown. True when they were read."""
        self.state.add_event_logs(self.ctx.event_logs, paths)
        if self.ctx.loaded is None:
            return False
        self.read_event_logs()
        return True

    def read_event_logs(self) -> None:
        assert self.ctx.loaded is not None
        self.ctx.runner.submit(
            CHANNEL,
            iter_progress_series,
            self.ctx.loaded.checkpoint,
            list(self.ctx.event_logs),
            self.ctx.storage_options or None,
            what="Reading event logs",
            on_result=self._on_event_logs_read,
            on_error=self._on_event_logs_errored,
        )

    def _on_event_logs_read(self, series: ProgressSeries) -> None:
        self.ctx.problems.add_problems(series.problems, where="event logs")
        # Shown even when no batch is reported: the plots then say why.
        self.view.set_progress(
            series.batch_ids,
            series.parts,
            series.input_rate,
            series.processed_rate,
            series.dropped,
            series.notes,
            series.run_ids,
            why_empty=series.why_empty,
        )
        readout = self.state.shown(series)
        self.ctx.status(series.summary)
        self.view.readout.setText(readout)
        self.updated.emit()

    def _on_event_logs_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.ctx.problems.add_problems([err], where="event logs")
            self.ctx.status(f"Event logs not read: {err}")
        else:
            errors.show_error(err, title="Reading event logs failed")
        self.updated.emit()

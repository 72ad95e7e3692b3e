"""Batch timeline: batches on a wall-clock axis with the watermark, the interval between batches and the
watermark gap.

Stacked pyqtgraph plots with linked x axes (``DateAxisItem``, local time or UTC). The top plot shows
batch ids (committed and uncommitted in distinct colours and symbols) and, on a right-hand event-time axis, the
watermark each batch ran with; below are the seconds since the previous batch started and the watermark
gap (batch start time minus watermark, the Spark UI's "Global Watermark Gap"); with event logs, the
batch durations and rates follow. A plot with nothing to draw says why.
A vertical cursor follows the mouse (rate-limited through ``SignalProxy``) with a plain-text
read-out; a click selects the nearest batch. Items are built once and updated with ``setData``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from statelens.readers.model import BatchInfo
from statelens.viewers import theme
from statelens.viewers.overview import format_duration_s
from statelens.viewers.timefmt import TimeZoneState

LEFT_AXIS_WIDTH = 70
#: A batch taking more than this many times the median duration is marked slow.
SLOW_FACTOR = 3.0
RIGHT_AXIS_WIDTH = 100


def _day_span(seconds: np.ndarray, time_zone: TimeZoneState) -> str:
    """``2024-01-01``, or ``2023-12-31 to 2024-01-01``: the days epoch seconds span in the shown zone.

    The tick labels carry the time of day (down to tenths of a second on short spans), and a tick at
    midnight its date; this names the first and last day, so ticks on either side of midnight are read
    against the right one.
    """
    finite = seconds[np.isfinite(seconds)]
    if not len(finite):
        return ""
    first = time_zone.format_ms(int(finite.min() * 1000))[:10]
    last = time_zone.format_ms(int(finite.max() * 1000))[:10]
    return first if first == last else f"{first} to {last}"


def _axis_label(what: str, seconds: np.ndarray, time_zone: TimeZoneState) -> str:
    """``batch start time (local, UTC+01:00, 2024-01-01)``: the zone (offset mid-span) and the days."""
    finite = seconds[np.isfinite(seconds)]
    middle = float((finite.min() + finite.max()) / 2) if len(finite) else None
    zone = time_zone.label(middle)
    days = _day_span(seconds, time_zone)
    return f"{what} ({zone}, {days})" if days else f"{what} ({zone})"


def _plot_note(plot: Any) -> Any:
    """A centred, wrapped text in ``plot`` saying why it is empty (blank while it has data)."""
    note = pg.TextItem("", color=theme.foreground(), anchor=(0.5, 0.5))
    note.setTextWidth(700)
    plot.addItem(note, ignoreBounds=True)
    return note


class BatchTimelineView(QWidget):
    """Batches over time.

    Parameters
    ----------
    selection : object, optional
        The shared selection state; its ``batch_id`` is marked with a dashed line.
    time_zone : TimeZoneState, optional
        Local time or UTC for the time axes and read-outs (local time when not given); the view
        re-renders when it changes.

    Signals
    -------
    batch_selected(int batch_id)
        The user clicked near a batch.
    """

    batch_selected = Signal(int)

    def __init__(
        self, selection: Any = None, time_zone: TimeZoneState | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.time_zone = time_zone if time_zone is not None else TimeZoneState()
        self._ids = np.zeros(0, dtype=np.int64)
        self._t = np.zeros(0)  # batch start, seconds since the epoch
        self._wm = np.zeros(0)  # watermark, seconds (NaN when none)
        self._committed = np.zeros(0, dtype=bool)
        self._hover_index: int | None = None
        # What the query reported per timed batch (event logs), NaN where no log covers it.
        self._progress: dict[str, np.ndarray] = {}
        self._progress_text: list[str] = []
        self._why_empty = ""
        self._run_ids: list[str] = []
        self._restart_lines: list[tuple[Any, Any]] = []
        self.restarts: list[int] = []  # positions of the first batch of each new run
        self.duration_plot: Any = None
        self.rate_plot: Any = None

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(theme.background())
        layout.addWidget(self.graphics, 1)
        self.readout = QLabel("Move the mouse over the plot to read a batch; click to select it.")
        self.readout.setTextFormat(Qt.TextFormat.PlainText)
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.readout)

        # -- top: batches and watermark ----------------------------------------------------------------
        self.batch_plot = self.graphics.addPlot(
            row=0,
            col=0,
            axisItems={
                "bottom": theme.TimeAxisItem(),
                "right": theme.TimeAxisItem(orientation="right"),
                "left": theme.IntegerAxisItem(orientation="left"),
            },
        )
        theme.style_plot(self.batch_plot, "Batches over time")
        theme.set_axis_label(self.batch_plot, "left", "batch id")
        theme.set_axis_label(self.batch_plot, "right", "no watermark")
        theme.set_axis_label(
            self.batch_plot, "bottom", _axis_label("batch start time", self._t, self.time_zone)
        )
        self.batch_plot.showAxis("right")
        self.batch_plot.setMouseEnabled(x=True, y=False)

        self.watermark_box = pg.ViewBox()
        self.watermark_box.setMouseEnabled(x=True, y=False)
        self.batch_plot.scene().addItem(self.watermark_box)
        self.batch_plot.getAxis("right").linkToView(self.watermark_box)
        self.watermark_box.setXLink(self.batch_plot)
        self.batch_plot.vb.sigResized.connect(self._on_batch_plot_resized)

        self.legend = self.batch_plot.addLegend(offset=(10, 10))
        theme.style_legend(self.legend)
        self.batch_line = pg.PlotDataItem(pen=pg.mkPen(theme.muted(), width=1))
        self.batch_plot.addItem(self.batch_line)
        self.committed_points = pg.ScatterPlotItem(
            size=8,
            symbol="o",
            pen=pg.mkPen(theme.COMMITTED),
            brush=pg.mkBrush(theme.COMMITTED),
            name="committed batch",
        )
        self.uncommitted_points = pg.ScatterPlotItem(
            size=14,
            symbol="t",
            pen=pg.mkPen(theme.UNCOMMITTED, width=2),
            brush=pg.mkBrush(theme.UNCOMMITTED),
            name="uncommitted batch (no commit file)",
        )
        self.batch_plot.addItem(self.committed_points)
        self.batch_plot.addItem(self.uncommitted_points)
        self.watermark_curve = pg.PlotDataItem(
            pen=pg.mkPen(theme.WATERMARK, width=2), connect="finite", name="watermark (right axis)"
        )
        self.watermark_box.addItem(self.watermark_curve)
        self.legend.addItem(self.watermark_curve, "watermark (right axis)")

        # -- bottom: interval between batches ----------------------------------------------------------
        self.interval_plot = self.graphics.addPlot(row=1, col=0, axisItems={"bottom": theme.TimeAxisItem()})
        theme.style_plot(self.interval_plot, "Interval between batch starts")
        theme.set_axis_label(self.interval_plot, "left", "interval", units="s")
        theme.set_axis_label(
            self.interval_plot, "bottom", _axis_label("batch start time", self._t, self.time_zone)
        )
        self.interval_plot.setXLink(self.batch_plot)
        self.interval_plot.setMouseEnabled(x=True, y=False)
        # Same axis widths in both plots so their time axes line up pixel for pixel.
        self.interval_plot.showAxis("right")
        self.interval_plot.getAxis("right").setStyle(showValues=False)
        fill = theme.COMMITTED
        self.interval_bars = pg.BarGraphItem(
            x0=[], x1=[], height=[], brush=pg.mkBrush(fill + "99"), pen=pg.mkPen(fill)
        )
        self.interval_plot.addItem(self.interval_bars)
        # -- watermark gap: how far event time lags the batch clock ---------------------------------------
        self.gap_plot = self.graphics.addPlot(row=2, col=0, axisItems={"bottom": theme.TimeAxisItem()})
        theme.style_plot(self.gap_plot, "Watermark gap: batch start time minus watermark")
        theme.set_axis_label(self.gap_plot, "left", "gap (s)")
        self.gap_plot.setXLink(self.batch_plot)
        self.gap_plot.setMouseEnabled(x=True, y=False)
        self.gap_plot.showAxis("right")
        self.gap_plot.getAxis("right").setStyle(showValues=False)
        self.gap_curve = pg.PlotDataItem(
            pen=pg.mkPen(theme.WATERMARK, width=2),
            symbol="o",
            symbolSize=5,
            symbolBrush=theme.WATERMARK,
            symbolPen=pg.mkPen(theme.WATERMARK),
            connect="finite",
        )
        self.gap_plot.addItem(self.gap_curve)
        self.gap_unit = "s"
        for plot in (self.batch_plot, self.interval_plot, self.gap_plot):
            plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
            plot.getAxis("right").setWidth(RIGHT_AXIS_WIDTH)
            plot.enableAutoRange(x=False)  # the batches' span is set in set_batches, for all plots at once
        self.graphics.ci.layout.setRowStretchFactor(0, 3)
        self.graphics.ci.layout.setRowStretchFactor(1, 2)
        self.graphics.ci.layout.setRowStretchFactor(2, 2)

        # -- cursor and selection markers ----------------------------------------------------------------
        cursor_pen = pg.mkPen(theme.muted(), width=1)
        selected_pen = pg.mkPen(theme.SELECTED, width=2, style=Qt.PenStyle.DashLine)
        self.cursors = [pg.InfiniteLine(angle=90, movable=False, pen=cursor_pen) for _ in range(2)]
        self.selected_lines = [pg.InfiniteLine(angle=90, movable=False, pen=selected_pen) for _ in range(2)]
        for plot, cursor, selected in zip(
            (self.batch_plot, self.interval_plot), self.cursors, self.selected_lines, strict=True
        ):
            for line in (cursor, selected):
                line.setVisible(False)
                plot.addItem(line, ignoreBounds=True)
        gap_selected = pg.InfiniteLine(angle=90, movable=False, pen=selected_pen)
        gap_selected.setVisible(False)
        self.gap_plot.addItem(gap_selected, ignoreBounds=True)
        self.selected_lines.append(gap_selected)
        self.empty_text = pg.TextItem("", color=theme.foreground(), anchor=(0.5, 0.5))
        self.batch_plot.addItem(self.empty_text, ignoreBounds=True)
        self.gap_empty_text = _plot_note(self.gap_plot)
        self.batch_plot.sigXRangeChanged.connect(lambda *_: self._place_notes())

        self._mouse_proxy = pg.SignalProxy(
            self.graphics.scene().sigMouseMoved, rateLimit=30, slot=self._on_scene_mouse_moved
        )
        self.graphics.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)

        self._selection = selection
        if selection is not None:
            selection.connect(self._on_selection_changed)
            cb = self._on_selection_changed
            self.destroyed.connect(lambda *_: selection.disconnect(cb))
        zone, zone_cb = self.time_zone, self._on_time_zone_changed
        zone.connect(zone_cb)
        self.destroyed.connect(lambda *_: zone.disconnect(zone_cb))

    # -- data ----------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.set_batches([])

    def set_batches(self, batches: Sequence[BatchInfo]) -> None:
        """Show the batches that have a start time (from their offsets file)."""
        timed = [b for b in batches if b.timestamp_ms is not None]
        self._ids = np.array([b.batch_id for b in timed], dtype=np.int64)
        self._t = np.array([b.timestamp_ms / 1000 for b in timed], dtype=np.float64)  # type: ignore[operator]
        self._wm = np.array(
            [b.watermark_ms / 1000 if b.watermark_ms else np.nan for b in timed], dtype=np.float64
        )
        self._committed = np.array([b.committed for b in timed], dtype=bool)

        self.batch_line.setData(self._t, self._ids.astype(np.float64))
        self.committed_points.setData(
            x=self._t[self._committed],
            y=self._ids[self._committed].astype(np.float64),
            data=self._ids[self._committed],
        )
        self.uncommitted_points.setData(
            x=self._t[~self._committed],
            y=self._ids[~self._committed].astype(np.float64),
            data=self._ids[~self._committed],
        )
        # The watermark a batch ran with holds until the next batch starts: draw it as steps.
        if len(self._t):
            xs = np.repeat(self._t, 2)[1:]
            ys = np.repeat(self._wm, 2)[:-1]
            self.watermark_curve.setData(xs, ys)
        else:
            self.watermark_curve.setData([], [])
        has_wm = bool(np.isfinite(self._wm).any())
        self.batch_plot.getAxis("right").setStyle(showValues=has_wm)
        self._draw_gap(has_wm)
        self._set_time_axes(has_wm)
        # Legend entries only for what is drawn.
        self.legend.clear()
        if self._committed.any():
            self.legend.addItem(self.committed_points, "committed batch")
        if (~self._committed).any():
            self.legend.addItem(self.uncommitted_points, "uncommitted batch (no commit file)")
        if has_wm:
            self.legend.addItem(self.watermark_curve, "watermark (right axis)")

        gaps = np.diff(self._t) if len(self._t) > 1 else np.zeros(0)
        if len(gaps):
            brushes = [
                pg.mkBrush((theme.COMMITTED if c else theme.UNCOMMITTED) + "99") for c in self._committed[1:]
            ]
            self.interval_bars.setOpts(x0=self._t[:-1], x1=self._t[1:], height=gaps, brushes=brushes)
        else:
            self.interval_bars.setOpts(x0=[], x1=[], height=[], brushes=None)

        if len(self._t):
            self.empty_text.setText("")
            self._fit_x()
            self._place_notes()
            self.batch_plot.setYRange(
                float(self._ids.min()) - 0.5, float(self._ids.max()) + 0.5, padding=0.05
            )
            if has_wm:
                finite = self._wm[np.isfinite(self._wm)]
                lo, hi = float(finite.min()), float(finite.max())
                span = max(hi - lo, 1.0)
                self.watermark_box.setYRange(lo - 0.1 * span, hi + 0.1 * span, padding=0)
            self.interval_plot.setYRange(0, float(gaps.max()) * 1.1 if len(gaps) else 1.0, padding=0)
        else:
            self.empty_text.setText("No batch has a start time (no offsets files).")
            self.empty_text.setPos(0, 0)
        for line in self.cursors:
            line.setVisible(False)
        self._on_batch_plot_resized()
        if self._selection is not None:
            self.show_batch(self._selection.batch_id)

    def _fit_x(self) -> None:
        """Show every batch, with a margin, in all the linked time plots."""
        if not len(self._t):
            return
        # Room for half a duration bar beyond the first and last batch, and a margin.
        pad = max((self._t[-1] - self._t[0]) * 0.03, self._bar_width() * 0.6, 1.0)
        self.batch_plot.setXRange(self._t[0] - pad, self._t[-1] + pad, padding=0)

    def _bar_width(self) -> float:
        """Width of a duration bar, seconds: 60 % of the shortest interval between batches."""
        gaps = np.diff(self._t)
        return float(np.nanmin(gaps[gaps > 0]) * 0.6) if len(gaps) and (gaps > 0).any() else 1.0

    def x_range(self) -> tuple[float, float]:
        """The time span the plots show, seconds since the epoch."""
        lo, hi = self.batch_plot.viewRange()[0]
        return float(lo), float(hi)

    def _draw_gap(self, has_wm: bool) -> None:
        """The watermark gap (batch start minus watermark), in seconds, minutes, hours or days."""
        gap = self._t - self._wm
        finite = gap[np.isfinite(gap)]
        self._show_gap_plot(bool(has_wm and len(finite)) or not len(self._t))
        if not has_wm or not len(finite):
            self.gap_curve.setData([], [])
            self.gap_empty_text.setText(
                "No watermark in this query: nothing to compare the batch times with." if len(self._t) else ""
            )
            theme.set_axis_label(self.gap_plot, "left", "gap (s)")
            self.gap_plot.setYRange(0, 1, padding=0)
            return
        self.gap_empty_text.setText("")
        top = float(np.abs(finite).max())
        unit, size = next(
            ((u, n) for u, n in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)) if top >= 2 * n), ("s", 1.0)
        )
        self.gap_unit = unit
        theme.set_curve_data(self.gap_curve, self._t, gap / size)
        theme.set_axis_label(self.gap_plot, "left", f"gap ({unit})")
        lo, hi = min(float(finite.min()) / size, 0.0), max(float(finite.max()) / size, 0.0)
        span = (hi - lo) or 1.0
        self.gap_plot.setYRange(lo - 0.05 * span, hi + 0.15 * span, padding=0)  # 0 stays a labelled tick

    def _show_gap_plot(self, show: bool) -> None:
        """The gap plot takes its row only when the query has a watermark (the batch plot says when not)."""
        shown = self.gap_plot in self.graphics.ci.items
        if show and not shown:
            self.graphics.addItem(self.gap_plot, row=2, col=0)
        elif not show and shown:
            self.graphics.removeItem(self.gap_plot)
        self.graphics.ci.layout.setRowStretchFactor(2, 2 if show else 0)

    def gap_plot_shown(self) -> bool:
        """Whether the watermark-gap plot is in the view (only for queries with a watermark)."""
        return self.gap_plot in self.graphics.ci.items

    def _place_notes(self) -> None:
        """Centre each plot's note (why it is empty) in what the plot shows."""
        for plot, note in self._notes():
            (x0, x1), (y0, y1) = plot.viewRange()
            note.setPos((x0 + x1) / 2, (y0 + y1) / 2)

    def _notes(self) -> list[tuple[Any, Any]]:
        pairs = [(self.gap_plot, self.gap_empty_text)]
        if self.duration_plot is not None:
            pairs += [(self.duration_plot, self.duration_note), (self.rate_plot, self.rate_note)]
        return pairs

    def notes(self) -> dict[str, str]:
        """What each plot says in place of data (empty when it has data): ``gap``, ``duration``, ``rate``."""
        names = ("gap", "duration", "rate")
        return {
            n: note.textItem.toPlainText() for n, (_plot, note) in zip(names, self._notes(), strict=False)
        }

    # -- what the query reported (event logs) ------------------------------------------------------
    def set_progress(
        self,
        batch_ids: Sequence[int],
        parts: Sequence[tuple[str, Sequence[float]]],
        input_rate: Sequence[float],
        processed_rate: Sequence[float],
        dropped: Sequence[float],
        notes: Sequence[str] = (),
        run_ids: Sequence[str] = (),
        why_empty: str = "",
    ) -> None:
        """Show the durations and rates the query reported, one value per ``batch_ids`` entry.

        ``parts`` are ``(name, seconds)`` of the batch duration (Spark's ``durationMs`` parts, stacked in
        the given order); rates in rows per second; ``dropped`` rows dropped by the watermark (all state
        operators). ``notes`` (one per batch) extend the read-out, e.g. the run id; where ``run_ids``
        changes from one batch to the next the query was restarted, which is marked. Batches taking more
        than :data:`SLOW_FACTOR` times the median are marked slow. NaN where a batch has no report.
        Batches without a start time are left out, as in the plots above. When no batch shown has a
        report, the plots say so, with ``why_empty`` (what the event logs held instead).
        """
        self._why_empty = why_empty
        index = {int(b): i for i, b in enumerate(batch_ids)}
        rows = [index.get(int(b)) for b in self._ids]

        def pick(values: Sequence[float]) -> np.ndarray:
            arr = np.asarray(values, dtype=np.float64)
            return np.array([arr[r] if r is not None else np.nan for r in rows], dtype=np.float64)

        self._progress = {name: pick(v) for name, v in parts}
        self._progress_rates = (pick(input_rate), pick(processed_rate), pick(dropped))
        self._progress_text = [notes[r] if r is not None and r < len(notes) else "" for r in rows]
        self._run_ids = [run_ids[r] if r is not None and r < len(run_ids) else "" for r in rows]
        self._ensure_progress_plots()
        self._draw_progress()
        if self._selection is not None:
            self.show_batch(self._selection.batch_id)

    def clear_progress(self) -> None:
        """Remove the reported durations and rates (another checkpoint, no event log)."""
        self._progress = {}
        self._progress_text = []
        for plot in (self.duration_plot, self.rate_plot):
            if plot is not None:
                self.graphics.removeItem(plot)
        self.duration_plot = self.rate_plot = None
        del self.selected_lines[3:]  # the lines of the plots just removed
        self._restart_lines = []
        self.restarts = []

    def _ensure_progress_plots(self) -> None:
        if self.duration_plot is not None:
            return
        self.duration_plot = self.graphics.addPlot(row=3, col=0, axisItems={"bottom": theme.TimeAxisItem()})
        theme.style_plot(self.duration_plot, "Batch duration by part (event logs)")
        theme.set_axis_label(self.duration_plot, "left", "duration", units="s")
        self.rate_plot = self.graphics.addPlot(row=4, col=0, axisItems={"bottom": theme.TimeAxisItem()})
        theme.style_plot(self.rate_plot, "Rows per second, and rows dropped by the watermark (event logs)")
        theme.set_axis_label(self.rate_plot, "left", "rows/s")
        for plot in (self.duration_plot, self.rate_plot):
            plot.enableAutoRange(x=False)  # bars and curves added later must not pull the shared span
            plot.setXLink(self.batch_plot)
            plot.setMouseEnabled(x=True, y=False)
            plot.showAxis("right")
            plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
            plot.getAxis("right").setWidth(RIGHT_AXIS_WIDTH)
            plot.getAxis("right").setStyle(showValues=False)
        theme.set_axis_label(self.rate_plot, "right", "rows dropped")
        self.rate_plot.getAxis("right").setStyle(showValues=True)
        self.duration_legend = self.duration_plot.addLegend(offset=(-10, 5), colCount=4)
        theme.style_legend(self.duration_legend)
        self.rate_legend = self.rate_plot.addLegend(offset=(-10, 5), colCount=3)
        theme.style_legend(self.rate_legend)
        self.dropped_box = pg.ViewBox()
        self.rate_plot.scene().addItem(self.dropped_box)
        self.rate_plot.getAxis("right").linkToView(self.dropped_box)
        self.dropped_box.setXLink(self.rate_plot)

        def follow() -> None:
            self.dropped_box.setGeometry(self.rate_plot.vb.sceneBoundingRect())
            self.dropped_box.linkedViewChanged(self.rate_plot.vb, self.dropped_box.XAxis)

        self.rate_plot.vb.sigResized.connect(follow)
        self._follow_dropped = follow
        self.graphics.ci.layout.setRowStretchFactor(3, 2)
        self.graphics.ci.layout.setRowStretchFactor(4, 2)
        self.duration_note = _plot_note(self.duration_plot)
        self.rate_note = _plot_note(self.rate_plot)
        selected_pen = pg.mkPen(theme.SELECTED, width=2, style=Qt.PenStyle.DashLine)
        for plot in (self.duration_plot, self.rate_plot):
            line = pg.InfiniteLine(angle=90, movable=False, pen=selected_pen)
            line.setVisible(False)
            plot.addItem(line, ignoreBounds=True)
            self.selected_lines.append(line)

    def _draw_progress(self) -> None:
        for plot in (self.duration_plot, self.rate_plot):
            for item in [i for i in plot.items if not isinstance(i, (pg.InfiniteLine, pg.TextItem))]:
                plot.removeItem(item)
        for plot, line in self._restart_lines:
            plot.removeItem(line)
        self._restart_lines = []
        self.dropped_box.clear()
        self.duration_legend.clear()
        self.rate_legend.clear()
        t = self._t
        width = self._bar_width()
        bottom = np.zeros(len(t))
        for n, (name, seconds) in enumerate(self._progress.items()):
            height = np.nan_to_num(seconds)
            if not height.any():
                continue
            color = theme.SERIES[n % len(theme.SERIES)]
            bars = pg.BarGraphItem(
                x=t,
                width=width,
                y0=bottom.copy(),
                height=height,
                brush=pg.mkBrush(color),
                pen=pg.mkPen(color),
            )
            self.duration_plot.addItem(bars)
            self.duration_legend.addItem(bars, name)
            bottom += height
        if bottom.any():
            self.duration_plot.setYRange(0, float(bottom.max()) * 1.25, padding=0)
        self._mark_slow_and_restarts(bottom)
        inp, proc, dropped = self._progress_rates
        for values, name, color in (
            (inp, "input rows/s", theme.SERIES[0]),
            (proc, "processed rows/s", theme.SERIES[2]),
        ):
            curve = pg.PlotDataItem(
                pen=pg.mkPen(color, width=2), symbol="o", symbolSize=5, symbolBrush=color, connect="finite"
            )
            theme.set_curve_data(curve, t, values)
            self.rate_plot.addItem(curve)
            self.rate_legend.addItem(curve, name)
        finite = np.concatenate([inp[np.isfinite(inp)], proc[np.isfinite(proc)]])
        if len(finite):
            self.rate_plot.setYRange(0, float(finite.max()) * 1.15 or 1.0, padding=0)
        drop_color = theme.UNCOMMITTED
        some = np.nan_to_num(dropped) > 0
        drops = pg.ScatterPlotItem(
            x=t[some],
            y=dropped[some],
            symbol="x",
            size=10,
            pen=pg.mkPen(drop_color),
            brush=pg.mkBrush(drop_color),
        )
        self.dropped_box.addItem(drops)
        self.rate_legend.addItem(
            drops, "dropped by watermark (right axis)" if some.any() else "none dropped by the watermark"
        )
        self.dropped_box.setYRange(
            0, max(float(np.nanmax(dropped)) if np.isfinite(dropped).any() else 0, 1) * 1.15, padding=0
        )
        self._set_time_axes(bool(np.isfinite(self._wm).any()))
        self._follow_dropped()
        reported = bottom.any() or np.isfinite(inp).any() or np.isfinite(proc).any()
        if reported:
            why = ""
        else:
            why = "No batch shown here has a report in the event logs" + (
                f": {self._why_empty}" if self._why_empty else "."
            )
            self.duration_plot.setYRange(0, 1, padding=0)
            self.rate_plot.setYRange(0, 1, padding=0)
        for legend in (self.duration_legend, self.rate_legend):
            legend.setVisible(bool(reported))  # an empty plot's legend would cover its note
        self.duration_note.setText(why)
        self.rate_note.setText(why)
        self._fit_x()
        self._place_notes()

    def _mark_slow_and_restarts(self, total: np.ndarray) -> None:
        """Slow batches (a star over their bar) and restarts (a dashed line where the run id changes)."""
        reported = total[total > 0]
        if len(reported) >= 3:
            slow = total > SLOW_FACTOR * float(np.median(reported))
            if slow.any():
                stars = pg.ScatterPlotItem(
                    x=self._t[slow],
                    y=total[slow] * 1.08,
                    symbol="star",
                    size=14,
                    pen=pg.mkPen(theme.UNCOMMITTED),
                    brush=pg.mkBrush(theme.UNCOMMITTED),
                )
                self.duration_plot.addItem(stars)
                self.duration_legend.addItem(stars, f"slow (over {SLOW_FACTOR:g}x the median)")
        self.restarts = [
            i
            for i in range(1, len(self._run_ids))
            if self._run_ids[i] and self._run_ids[i - 1] and self._run_ids[i] != self._run_ids[i - 1]
        ]
        pen = pg.mkPen(theme.SELECTED, width=1, style=Qt.PenStyle.DotLine)
        for i in self.restarts:
            for plot in (self.duration_plot, self.rate_plot):
                x = (self._t[i - 1] + self._t[i]) / 2
                line = pg.InfiniteLine(
                    pos=x,
                    angle=90,
                    movable=False,
                    pen=pen,
                    label="restart" if plot is self.duration_plot else None,
                    labelOpts={"position": 0.3, "color": theme.SELECTED},
                )
                plot.addItem(line, ignoreBounds=True)
                self._restart_lines.append((plot, line))

    def _set_time_axes(self, has_wm: bool) -> None:
        """Axis zones (offset at the middle of the data) and labels for the current time zone."""
        finite = self._t[np.isfinite(self._t)]
        middle = float((finite.min() + finite.max()) / 2) if len(finite) else None
        offset = self.time_zone.axis_offset_s(middle)
        for plot in self._time_plots():
            plot.getAxis("bottom").set_utc_offset_s(offset)
        wm = self._wm[np.isfinite(self._wm)]
        self.batch_plot.getAxis("right").set_utc_offset_s(
            self.time_zone.axis_offset_s(float((wm.min() + wm.max()) / 2) if len(wm) else middle)
        )
        theme.set_axis_label(
            self.batch_plot,
            "right",
            self._watermark_label(middle) if has_wm else "no watermark",
        )
        # The plots share their time axis: its zone and days are said once, under the lowest plot.
        plots = self._time_plots()
        for plot in plots:
            theme.set_axis_label(plot, "bottom", _axis_label("batch start time", self._t, self.time_zone))
            plot.getAxis("bottom").showLabel(plot is plots[-1])

    def _watermark_label(self, batch_middle: float | None) -> str:
        """``watermark (2023-12-31 to 2024-01-01)``: the days; the zone only where it is not the batch
        times' (a daylight-saving change between them)."""
        wm = self._wm[np.isfinite(self._wm)]
        days = _day_span(self._wm, self.time_zone)
        zone = self.time_zone.label(float((wm.min() + wm.max()) / 2))
        if zone == self.time_zone.label(batch_middle):
            return f"watermark ({days})"
        return f"watermark ({zone.removeprefix('local, ')}, {days})"

    def _time_plots(self) -> list[Any]:
        gap = self.gap_plot if self.gap_plot_shown() else None
        return [
            p
            for p in (self.batch_plot, self.interval_plot, gap, self.duration_plot, self.rate_plot)
            if p is not None
        ]

    def _on_time_zone_changed(self, _utc: bool) -> None:
        self._set_time_axes(bool(np.isfinite(self._wm).any()))
        if self._hover_index is not None and self._hover_index < len(self._t):
            self.readout.setText(self.describe(self._hover_index))
        if self._selection is not None:
            self.show_batch(self._selection.batch_id)

    # -- interaction ---------------------------------------------------------------------------------
    def _on_batch_plot_resized(self) -> None:
        self.watermark_box.setGeometry(self.batch_plot.vb.sceneBoundingRect())
        self.watermark_box.linkedViewChanged(self.batch_plot.vb, self.watermark_box.XAxis)

    def _nearest(self, x: float) -> int | None:
        if not len(self._t):
            return None
        i = int(np.searchsorted(self._t, x))
        candidates = [j for j in (i - 1, i) if 0 <= j < len(self._t)]
        return min(candidates, key=lambda j: abs(self._t[j] - x))

    def _scene_to_x(self, pos: Any) -> float | None:
        for plot in self._time_plots():
            if plot.vb.sceneBoundingRect().contains(pos):
                return float(plot.vb.mapSceneToView(pos).x())
        return None

    def _on_scene_mouse_moved(self, event: Any) -> None:
        x = self._scene_to_x(event[0])
        if x is None:
            return
        i = self._nearest(x)
        if i is None:
            return
        self._hover_index = i
        for line in self.cursors:
            line.setPos(self._t[i])
            line.setVisible(True)
        self.readout.setText(self.describe(i))

    def _on_scene_mouse_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        x = self._scene_to_x(event.scenePos())
        if x is None:
            return
        i = self._nearest(x)
        if i is not None:
            self.batch_selected.emit(int(self._ids[i]))

    def describe(self, i: int) -> str:
        """Plain-text read-out of the i-th timed batch."""
        fmt = self.time_zone.format_ms
        started = fmt(int(round(self._t[i] * 1000)))
        parts = [
            f"batch {int(self._ids[i])}",
            f"started {started} ({self.time_zone.label(float(self._t[i]))})",
        ]
        wm = self._wm[i]
        if np.isfinite(wm):
            behind = format_duration_s(abs(self._t[i] - wm))
            parts.append(
                f"watermark {fmt(int(round(wm * 1000)))}, {behind} "
                + ("behind the batch" if self._t[i] >= wm else "ahead of the batch")
            )
        else:
            parts.append("no watermark")
        if i > 0:
            parts.append(
                f"{format_duration_s(self._t[i] - self._t[i - 1])} after batch {int(self._ids[i - 1])}"
            )
        parts.append("committed" if self._committed[i] else "NOT committed")
        if self._progress:
            total = sum(float(v[i]) for v in self._progress.values() if np.isfinite(v[i]))
            inp, proc, dropped = (float(a[i]) for a in self._progress_rates)
            if any(np.isfinite(v[i]) for v in self._progress.values()):
                parts.append(f"took {format_duration_s(total)}")
                if np.isfinite(inp) and np.isfinite(proc):
                    parts.append(f"{inp:,.1f} rows/s in, {proc:,.1f} processed")
                if np.isfinite(dropped) and dropped:
                    parts.append(f"{int(dropped):,} rows dropped by the watermark")
                if self._progress_text[i]:
                    parts.append(self._progress_text[i])
            else:
                parts.append("no progress in the event logs")
        return "  ·  ".join(parts)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if "batch_id" in changes:
            self.show_batch(changes["batch_id"])

    def show_batch(self, batch_id: int | None) -> None:
        """Mark a batch with the dashed selection line."""
        hits: Any = np.nonzero(self._ids == batch_id)[0] if batch_id is not None else []
        for line in self.selected_lines:
            if len(hits):
                line.setPos(self._t[hits[0]])
                line.setVisible(True)
            else:
                line.setVisible(False)
        if len(hits):
            self.readout.setText(self.describe(int(hits[0])))

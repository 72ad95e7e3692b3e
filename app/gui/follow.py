"""Follow mode: poll the checkpoint shown and refresh every view as batches commit.

:class:`FollowController` owns the checkable Follow action (File › Follow the checkpoint, Ctrl+F5, also
on the toolbar) and a timer. Every ``interval_s`` seconds, once the views have finished their previous
refresh, it runs one poll
(:func:`app.follow.iter_poll` through a :class:`~app.follow.Poller`) on the runner's ``follow`` channel,
off the GUI thread. When batches committed, the window shows the checkpoint as the poll opened it
(:meth:`MainWindow.refresh_checkpoint`): the selection, the selected key and the browser's rows stay;
:class:`ViewMemory` puts back the tables' scroll positions and the zoom of every plot the user had
zoomed into, so a plot shown at its full range extends in place to the new batches and a zoomed one stays
where it was. The status line (:attr:`FollowController.label`) says when the last poll ran and what it
found (:func:`app.follow.follow_status`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractItemView, QLabel, QWidget

from statelens.app.follow import DEFAULT_INTERVAL_S, FollowLog, FollowPoll, Poller, ReopeningPoller, iter_poll
from statelens.app.session import LoadedCheckpoint

#: The runner channel of the polls.
CHANNEL = "follow"
#: The Follow action's shortcut.
SHORTCUT = "Ctrl+F5"
#: Milliseconds between two renderings of the status line while following.
STATUS_TICK_MS = 1000


@dataclass
class _TableSpot:
    table: QAbstractItemView
    vertical: int
    horizontal: int
    at_end: bool  # scrolled to the last row: stays at the last row (the newest batch) as rows are added


@dataclass
class _PlotSpot:
    box: Any  # pyqtgraph.ViewBox
    x_range: tuple[float, float]
    y_range: tuple[float, float]


class _EndPin(QObject):
    """Keeps a table scrolled to its end while its rows change (a view filled again lays its table out
    later, hidden tabs when shown); let go of as soon as the user scrolls elsewhere."""

    def __init__(self, table: QAbstractItemView) -> None:
        super().__init__(table)
        self.bar = table.verticalScrollBar()
        self.bar.rangeChanged.connect(self._on_bar_range_changed)
        self.bar.actionTriggered.connect(self._on_bar_action_triggered)
        self.to_end()

    def to_end(self) -> None:
        self.bar.setValue(self.bar.maximum())

    def _on_bar_range_changed(self, _low: int, _high: int) -> None:
        self.to_end()

    def _on_bar_action_triggered(self, _action: int) -> None:
        # The user moved the bar (drag, wheel, arrows, page): the table goes where the user takes it.
        self.release()

    def release(self) -> None:
        """Stop keeping the table at its end."""
        self.bar.rangeChanged.disconnect(self._on_bar_range_changed)
        self.bar.actionTriggered.disconnect(self._on_bar_action_triggered)
        self.setParent(None)  # no longer found among the table's children
        self.deleteLater()


class ViewMemory:
    """Where the user looked before a refresh: the tables' scroll positions and the plots the user
    zoomed into (a plot showing all its data is left to extend to the new data).

    Parameters
    ----------
    root : QWidget
        Whose tables and plots are remembered (the window).
    """

    def __init__(self, root: QWidget) -> None:
        self.tables: list[_TableSpot] = []
        self.plots: list[_PlotSpot] = []
        release_end_pins(root)  # the previous refresh's: whether a table is at its end is looked at again
        for table in root.findChildren(QAbstractItemView):
            bar = table.verticalScrollBar()
            v, h = bar.value(), table.horizontalScrollBar().value()
            if v or h:
                self.tables.append(_TableSpot(table, v, h, v > 0 and v == bar.maximum()))
        for graphics in root.findChildren(pg.GraphicsView):
            for item in graphics.scene().items():
                if isinstance(item, pg.ViewBox) and item.isVisible() and is_zoomed(item):
                    (x0, x1), (y0, y1) = item.viewRange()
                    self.plots.append(_PlotSpot(item, (x0, x1), (y0, y1)))

    def restore(self) -> None:
        """Put back what can be: a table's scroll position once it is long enough again (a table scrolled
        to its end stays at its end, the newest rows in sight), every zoomed
        plot's range (a view filled again scrolls or fits anew: call again whenever views are filled,
        until :meth:`forget`)."""
        for spot in self.tables:
            bar, side = spot.table.verticalScrollBar(), spot.table.horizontalScrollBar()
            if spot.at_end:
                if not spot.table.findChildren(_EndPin):
                    _EndPin(spot.table)  # stays at the end until the user scrolls, past this refresh
            elif bar.maximum() >= spot.vertical:
                bar.setValue(spot.vertical)
            if side.maximum() >= spot.horizontal:
                side.setValue(spot.horizontal)
        for plot in self.plots:
            box = plot.box
            if tuple(box.viewRange()[0]) != plot.x_range or tuple(box.viewRange()[1]) != plot.y_range:
                box.setRange(xRange=plot.x_range, yRange=plot.y_range, padding=0)

    def forget(self) -> None:
        """Stop putting things back (the refresh is over, or the user moved on)."""
        self.tables, self.plots = [], []


def release_end_pins(root: QWidget) -> None:
    """Let every table under ``root`` kept at its end by a refresh go."""
    for pin in root.findChildren(_EndPin):
        pin.release()


def is_zoomed(box: Any) -> bool:
    """Whether a pyqtgraph ViewBox shows less than all of its data along x or y (the user zoomed in or
    panned); a box without data is not zoomed."""
    bounds = box.childrenBounds()
    view = box.viewRange()
    for axis in (0, 1):
        data = bounds[axis]
        if data is None:
            continue
        lo, hi = float(data[0]), float(data[1])
        tol = max(hi - lo, 1e-9) * 1e-6
        if view[axis][0] > lo + tol or view[axis][1] < hi - tol:
            return True
    return False


class FollowController(QObject):
    """The Follow toggle, the poll timer and the follow status line.

    Parameters
    ----------
    window : MainWindow
        The window followed: its ``ctx`` (runner, the checkpoint shown, storage options, time zone),
        ``refresh_checkpoint`` and ``settled``.
    interval_s : float
        Seconds between polls.
    poller_factory : callable, optional
        ``(loaded, ctx) -> Poller``: how a poll reads the checkpoint (:class:`ReopeningPoller` unless
        given).
    clock : callable, optional
        Epoch milliseconds now (tests pass a fixed one).

    Signals
    -------
    polled(object poll)
        A poll ended (:class:`~app.follow.FollowPoll`), after the views were refreshed when it found
        new batches.
    """

    polled = Signal(object)

    def __init__(
        self,
        window: Any,
        interval_s: float = DEFAULT_INTERVAL_S,
        poller_factory: Callable[[LoadedCheckpoint, Any], Poller] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(window)
        self.window = window
        self.ctx = window.ctx
        self.poller_factory = poller_factory or _reopening_poller
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.log = FollowLog(interval_s=interval_s)
        self.poller: Poller | None = None
        self._poller_url: str | None = None
        self.memory: ViewMemory | None = None
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._on_timer_timeout)
        #: Ages the status line ("started 3 s ago") between polls.
        self.tick = QTimer(self)
        self.tick.setInterval(STATUS_TICK_MS)
        self.tick.timeout.connect(self._show_status)
        self.action = QAction("&Follow the checkpoint", window)
        self.action.setCheckable(True)
        self.action.setShortcut(QKeySequence(SHORTCUT))
        self.action.setToolTip(
            f"Poll the checkpoint every {interval_s:g} s and show new batches as they commit, keeping what "
            f"is selected ({SHORTCUT})"
        )
        self.action.toggled.connect(self._on_action_toggled)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setToolTip("Follow mode: when the checkpoint was last polled and what the poll found")
        self.label.setVisible(False)
        self.ctx.runner.job_finished.connect(self._on_runner_job_finished)
        self.ctx.runner.idle_changed.connect(self._on_runner_idle_changed)

    # -- on and off ----------------------------------------------------------------------------------
    @property
    def following(self) -> bool:
        """Whether follow mode is on."""
        return self.action.isChecked()

    @property
    def interval_s(self) -> float:
        """Seconds between polls."""
        return self.log.interval_s

    def set_interval(self, seconds: float) -> None:
        """Poll every ``seconds`` (at least 0.1 s)."""
        self.log.interval_s = max(0.1, float(seconds))
        if self.timer.isActive():
            self.timer.start(int(self.log.interval_s * 1000))

    def set_following(self, on: bool) -> None:
        """Turn follow mode on or off (as the Follow action does)."""
        self.action.setChecked(on)

    def _on_action_toggled(self, on: bool) -> None:
        if on:
            self.log.start(self.clock())
            self.label.setVisible(True)
            self.timer.start(int(self.log.interval_s * 1000))
            self.tick.start()
            self._show_status()
            self.poll_now()
        else:
            self.timer.stop()
            self.tick.stop()
            self.ctx.runner.cancel(CHANNEL)
            self.poller, self._poller_url = None, None
            if self.memory is not None:
                self.memory.forget()
            release_end_pins(self.window)
            self.label.setText("Not following")

    # -- polling -------------------------------------------------------------------------------------
    def poll_now(self) -> bool:
        """Poll once now, unless a poll is running, a checkpoint is still opening or the views are
        still refreshing. True when a poll started."""
        runner, loaded = self.ctx.runner, self.ctx.loaded
        if not self.following or loaded is None or runner.is_shut_down:
            return False
        if runner.current(CHANNEL) is not None or runner.current("load") is not None:
            return False
        if not self.window.settled():
            return False  # the previous refresh still reads: poll when it is shown
        if self.poller is None or self._poller_url != loaded.url:
            self.poller = self.poller_factory(loaded, self.ctx)
            self._poller_url = loaded.url
        runner.submit(
            CHANNEL,
            iter_poll,
            self.poller,
            what="Looking for new batches",
            on_result=lambda poll, url=loaded.url: self._on_poll_finished(url, poll),
            on_error=self._on_poll_errored,
        )
        return True

    def _on_timer_timeout(self) -> None:
        self.poll_now()

    def _on_poll_finished(self, url: str, poll: FollowPoll) -> None:
        loaded = self.ctx.loaded
        if not self.following or loaded is None or loaded.url != url:
            return
        self.log.record(poll, self.clock())
        if poll.changed and poll.checkpoint is not None:
            self.memory = ViewMemory(self.window)
            self.window.refresh_checkpoint(LoadedCheckpoint(url, poll.checkpoint, loaded.is_sample))
            self.memory.restore()
        self._show_status()
        self.polled.emit(poll)

    def _on_poll_errored(self, err: BaseException) -> None:
        # A poller that raised (not one that said so in its result): a status, and the next poll.
        self.log.record(FollowPoll(problem=str(err) or type(err).__name__), self.clock())
        self._show_status()
        self.polled.emit(self.log.last)

    def _on_runner_job_finished(self, channel: str) -> None:
        if self.memory is not None and channel != CHANNEL:
            self.memory.restore()  # a view refilled: put back its scroll position and zoom

    def _on_runner_idle_changed(self, idle: bool) -> None:
        if idle and self.memory is not None and self.window.settled():
            self.memory.restore()
            self.memory.forget()
            self.memory = None

    def _show_status(self) -> None:
        self.label.setText(self.log.status(self.clock(), self._clock_text))

    def _clock_text(self, ms: int) -> str:
        text = self.ctx.time_zone.format_ms(ms)
        return text[11:19] + ("Z" if self.ctx.time_zone.utc else "")

    def stop(self) -> None:
        """Stop polling for good (the window closes)."""
        self.timer.stop()
        self.tick.stop()
        self.ctx.runner.cancel(CHANNEL)


def _reopening_poller(loaded: LoadedCheckpoint, ctx: Any) -> Poller:
    return ReopeningPoller(
        loaded.url,
        None if loaded.is_sample else (ctx.storage_options or None),
        loaded.checkpoint.last_committed_batch_id,
    )

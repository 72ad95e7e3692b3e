"""The fleet view's controller: a folder or prefix that is not a checkpoint but holds checkpoints opens
as a table of them (:class:`viewers.fleet.FleetView`), filled in as each is read by
:func:`app.analysis.fleet.iter_fleet` on the runner channel ``fleet``; a double-click opens one in the
usual views. A folder holding none reports the window's original error."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from statelens.app.analysis.fleet import FleetOptions, FleetRow, iter_fleet
from statelens.readers.errors import NotACheckpointError
from statelens.readers.model import Progress
from statelens.viewers.fleet import COLUMNS, FleetView

CHANNEL = "fleet"
_RANK = {"error": 0, "warning": 1, "info": 2, "ok": 3}


def _join(root: str, rel: str) -> str:
    if not rel:
        return root
    return root.rstrip("/") + "/" + rel


def row_order(row: FleetRow) -> str:
    """A text that sorts rows as :func:`app.analysis.fleet.worst_first` does (the view sorts one column
    by it as rows arrive)."""
    errors = sum(1 for v in row.verdicts if v.severity == "error")
    warnings = sum(1 for v in row.verdicts if v.severity == "warning")
    return (
        f"{int(row.error is None)}{_RANK.get(row.severity, 0)}{10**6 - errors:07d}{10**6 - warnings:07d}"
        f"{10**15 - (row.zombies or 0):016d}{10**18 - (row.state_bytes or 0):019d}{row.path}"
    )


def _num(n: int | None) -> int:
    return -1 if n is None else n


def row_cells(row: FleetRow, now_ms: int) -> tuple[list[Any], list[Any], str]:
    """The cells after the severity, each column's sort key, and the tooltip of one row."""
    texts = row.texts(now_ms)
    cells = [texts[c] for c in COLUMNS[1:]]
    age = row.age_ms(now_ms)
    keys = [
        row_order(row),
        row.path,
        row.query_id or "",
        _num(row.last_batch),
        _num(age),
        row.stores,
        _num(row.rows),
        _num(row.state_bytes),
        -(10.0**18)
        if row.trend is None or row.trend.get("rows_per_day") is None
        else row.trend["rows_per_day"],
        _num(row.zombies),
        _RANK.get(row.restart, 4),
        row.unreadable,
        row.headline(),
    ]
    tip = (
        f"cannot read: {(row.error or {}).get('message')}"
        if row.error is not None
        else "\n".join(f"{v.severity.upper()}: {v.text}" for v in row.verdicts)
    )
    return cells, keys, f"{row.location}\n\n{tip}{_trend_tip(row)}\n\nDouble-click to open it."


def _trend_tip(row: FleetRow) -> str:
    """Each store's rows and their change since the previous run that read the checkpoint."""
    lines = []
    for s in row.store_rows:
        line = f"operator {s['operator_id']} {s['store_name']}: {s['rows']:,} rows"
        if s.get("rows_change") is not None:
            line += f", {s['rows_change']:+,} since version {s['version_before']}"
            if s.get("rows_per_day") is not None:
                line += f" ({s['rows_per_day']:+,.0f}/day)"
        lines.append(line)
    return "\n\n" + "\n".join(lines) if lines else ""


class FleetController(QObject):
    """Runs a fleet search and read into a :class:`FleetView` (a window of its own).

    Parameters
    ----------
    runner : app.gui.workers.JobRunner
    storage_options : dict
        fsspec options of the window.
    parent : QWidget
        The main window (the fleet window stays above it).

    Signals
    -------
    open_requested(str url)
        Open this checkpoint in the usual views.
    finished(int rows)
        Every checkpoint found was read (or the search was cancelled).
    """

    open_requested = Signal(str)
    finished = Signal(int)

    def __init__(self, runner: Any, storage_options: dict[str, Any], parent: QWidget) -> None:
        super().__init__(parent)
        self.runner = runner
        self.storage_options = storage_options
        self.view = FleetView(parent)
        self.view.open_requested.connect(self.open_requested)
        self.view.cancel_requested.connect(self.cancel)
        self.runner.job_progressed.connect(self._on_runner_job_progressed)
        self.root = ""
        self.rows: list[FleetRow] = []
        self._now_ms = 0
        self._not_found: Callable[[BaseException | None], None] | None = None

    def look_below(
        self,
        url: str,
        err: BaseException,
        failed: Callable[[BaseException], None],
        say: Callable[[str], None],
    ) -> bool:
        """Opening ``url`` failed with ``err``: when it is not a checkpoint, look for checkpoints below
        it (``failed(err)`` when there are none) and return True; else return False (the caller reports
        ``err``)."""
        if not isinstance(err, NotACheckpointError):
            return False
        short = url if len(url) <= 80 else "…" + url[-79:]
        say(f"Not a checkpoint; looking for checkpoints below {short}")
        self.scan(url, not_found=lambda _why: failed(err))
        return True

    def scan(self, root: str, not_found: Callable[[BaseException | None], None] | None = None) -> int:
        """Find and read the checkpoints below ``root``; the view shows with the first one found.
        ``not_found(error)`` is called instead when none is found (``error``: why the root could not be
        listed, else None)."""
        self.root = root
        self.rows = []
        self._now_ms = int(time.time() * 1000)
        self._not_found = not_found
        self.view.start(root)
        return int(
            self.runner.submit(
                CHANNEL,
                iter_fleet,
                root,
                self.storage_options or None,
                options=FleetOptions(),
                what=f"Reading the checkpoints below {root}",
                on_yield=self._on_row,
                on_result=lambda _none: self._on_done(),
                on_error=self._on_error,
            )
        )

    def cancel(self) -> None:
        """Stop reading (the rows read stay shown)."""
        self.runner.cancel(CHANNEL)
        self.view.finish(f"Cancelled: {len(self.rows)} checkpoints read")
        self.finished.emit(len(self.rows))

    def _on_row(self, row: Any) -> None:
        if not isinstance(row, FleetRow):
            return
        self.rows.append(row)
        cells, keys, tip = row_cells(row, self._now_ms)
        self.view.add_row(row.severity, cells, keys, _join(self.root, row.path), tip)
        if len(self.rows) == 1:
            self.view.show()

    def _on_runner_job_progressed(self, channel: str, progress: Progress) -> None:
        if channel == CHANNEL:
            self.view.set_progress(progress.done, progress.total, progress.what)

    def _on_done(self) -> None:
        if not self.rows:
            self.view.hide()
            if self._not_found is not None:
                self._not_found(None)
            self.finished.emit(0)
            return
        bad = sum(1 for r in self.rows if r.severity in ("error", "warning"))
        self.view.finish(
            f"{len(self.rows)} checkpoints, {bad} with errors or warnings; worst first; double-click one to open it"
        )
        self.finished.emit(len(self.rows))

    def _on_error(self, err: BaseException) -> None:
        if not self.rows:
            self.view.hide()
            if self._not_found is not None:
                self._not_found(err)
        else:
            self.view.finish(f"Stopped: {err}")
        self.finished.emit(len(self.rows))

"""The fix batch on a view's plots over state versions, and the before/after line under the store picker.

Used by the growth and expired views: batch ``F`` writes version ``F + 1``, so the mark stands between
versions ``F`` and ``F + 1`` (at ``F + 0.5``): the versions left of it are the state before the fix, those
right of it the state the fixed query wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSpinBox

from statelens.viewers import theme


class FixMarker:
    """A dashed vertical line per plot at the fix, labelled on the first, and a text label.

    Parameters
    ----------
    plots : sequence of pyqtgraph.PlotItem
        Plots whose x axis is the state version.
    """

    def __init__(self, plots: Sequence[Any]) -> None:
        color = theme.foreground()  # no series' colour: it must not read as a line of data
        pen = pg.mkPen(color, width=2, style=Qt.PenStyle.DashDotLine)
        self.lines: list[pg.InfiniteLine] = []
        for i, plot in enumerate(plots):
            opts: dict[str, Any] = {}
            if i == 0:
                opts = {
                    "label": "",
                    "labelOpts": {"position": 0.92, "color": color, "anchors": [(0, 0.5), (0, 0.5)]},
                }
            line = pg.InfiniteLine(angle=90, movable=False, pen=pen, **opts)
            line.setVisible(False)
            plot.addItem(line, ignoreBounds=True)
            self.lines.append(line)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.label.setVisible(False)
        # The user's choice of fix batch; its lowest value means "the last restart" (the default).
        self.chooser_label = QLabel("Fix at batch:")
        self.chooser = QSpinBox()
        self.chooser.setRange(-1, -1)
        self.chooser.setSpecialValueText("last restart")
        self.chooser.setToolTip(
            "The batch the fix went in with: expired keys and rows per batch are compared before and "
            "after it (by default the last restart the run ids or the batch times show)"
        )
        self.chooser.setKeyboardTracking(False)
        self.fix_batch: int | None = None
        self.title = ""
        self.texts: dict[tuple[int, str], str] = {}

    def set_fix(
        self, fix_batch: int | None, title: str = "", texts: Mapping[tuple[int, str], str] | None = None
    ) -> None:
        """The fix batch (None: no fix, nothing drawn), the line saying where it is and why, and per store
        ``(operator_id, store_name)`` its before/after text."""
        self.fix_batch = fix_batch
        self.title = title
        self.texts = dict(texts or {})

    def set_batches(self, last_batch: int | None) -> None:
        """The batches the user can choose from (0 to ``last_batch``; None: none, the choice is off)."""
        self.chooser.blockSignals(True)
        self.chooser.setRange(-1, -1 if last_batch is None else last_batch)
        self.chooser.setValue(-1)
        self.chooser.blockSignals(False)
        self.chooser.setEnabled(last_batch is not None)

    def chosen(self) -> int | None:
        """The batch the user chose (None: the last restart)."""
        value = self.chooser.value()
        return None if value < 0 else value

    def show(self, store: tuple[int, str] | None) -> None:
        """Draw the mark and the text of ``store`` (hidden without a fix)."""
        fix = self.fix_batch
        for line in self.lines:
            line.setVisible(fix is not None)
            if fix is not None:
                line.setPos(fix + 0.5)
        if self.lines and self.lines[0].label is not None:
            self.lines[0].label.setFormat(f"fix: batch {fix}" if fix is not None else "")
        text = ""
        if fix is not None:
            text = self.title
            store_text = self.texts.get(store) if store is not None else None
            if store_text:
                text += f"\nBefore and after the fix: {store_text}"
        self.label.setText(text)
        self.label.setVisible(bool(text))

    def shown_text(self) -> str:
        """The text shown (empty when hidden)."""
        return self.label.text() if self.label.isVisibleTo(self.label.parentWidget()) else ""

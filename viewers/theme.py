"""Colours and fonts that follow the system palette (light or dark), for widgets and pyqtgraph plots.

Nothing here hard-codes a background or text colour: those come from the application palette.
Series colours are mid-luminance so they read on white and on near-black backgrounds.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

#: Series colours (mid-luminance: readable on light and dark backgrounds).
SERIES = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#a855f7", "#14b8a6", "#ec4899", "#84cc16")
COMMITTED = "#3b82f6"
UNCOMMITTED = "#ef4444"
WATERMARK = "#f59e0b"
INTERVAL = "#10b981"
SELECTED = "#a855f7"

#: Translucent highlight for uncommitted rows in tables; readable over light and dark bases.
UNCOMMITTED_ROW = QColor(239, 68, 68, 70)

TICK_POINT_SIZE = 10
LABEL_SIZE = "11pt"
TITLE_SIZE = "12pt"


def palette() -> QPalette:
    app = QApplication.instance()
    return app.palette() if isinstance(app, QApplication) else QPalette()


def is_dark() -> bool:
    """True when the palette's window colour is dark."""
    return palette().color(QPalette.ColorRole.Window).lightness() < 128


def background() -> QColor:
    return palette().color(QPalette.ColorRole.Base)


def foreground() -> QColor:
    return palette().color(QPalette.ColorRole.Text)


def muted() -> QColor:
    """Text colour half way to the background (secondary series, grid)."""
    fg, bg = foreground(), background()
    return QColor((fg.red() + bg.red()) // 2, (fg.green() + bg.green()) // 2, (fg.blue() + bg.blue()) // 2)


def style_plot(plot: pg.PlotItem, title: str | None = None) -> None:
    """Palette colours, readable fonts and a grid for one plot item."""
    fg = foreground()
    font = QFont()
    font.setPointSize(TICK_POINT_SIZE)
    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(fg))
        axis.setTextPen(pg.mkPen(fg))
        axis.setTickFont(font)
        axis.label.setDefaultTextColor(fg)
    plot.showGrid(x=True, y=True, alpha=0.15)
    if title is not None:
        plot.setTitle(title, color=fg.name(), size=TITLE_SIZE)


def set_axis_label(plot: pg.PlotItem, side: str, text: str, units: str | None = None) -> None:
    """An axis label in the palette's text colour; ``units`` get SI prefixes from pyqtgraph."""
    plot.setLabel(side, text, units=units, color=foreground().name(), **{"font-size": LABEL_SIZE})


def style_legend(legend: pg.LegendItem) -> None:
    """Legend with a translucent palette background and the text colour."""
    bg = background()
    bg.setAlpha(200)
    legend.setBrush(pg.mkBrush(bg))
    legend.setPen(pg.mkPen(muted()))
    legend.setLabelTextColor(foreground())
    legend.setLabelTextSize("10pt")


class IntegerAxisItem(pg.AxisItem):
    """An axis for whole numbers (batch ids, versions, row counts): no ticks between integers."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(spacing, offset) for spacing, offset in levels if spacing >= 1]
        return whole or [(1.0, 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if spacing * scale >= 1:
            return [f"{int(round(v * scale)):,}" for v in values]
        return super().tickStrings(values, scale, spacing)

"""Colours and fonts that follow the system palette (light or dark), for widgets and pyqtgraph plots.

Nothing here hard-codes a background or text colour: those come from the application palette.
Series colours are mid-luminance so they read on white and on near-black backgrounds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyqtgraph as pg
from pyqtgraph.graphicsItems.DateAxisItem import MS_SPACING, TickSpec, ZoomLevel, makeMSStepper, makeSStepper
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


def set_curve_data(item: pg.PlotDataItem, x: Any, y: Any) -> None:
    """``item.setData(x, y)``, or no data when no ``y`` is finite.

    A curve drawn with symbols hands its points to a ``ScatterPlotItem``, whose bounds are ``nanmin`` /
    ``nanmax`` of them: all-NaN values (a metric no version has, rates of batches no event log reports)
    make numpy print "All-NaN slice encountered" RuntimeWarnings on every repaint. Some NaN among finite
    values are fine (``connect="finite"`` leaves gaps there).
    """

    values = np.asarray(y, dtype=np.float64)
    if values.size and np.isfinite(values).any():
        item.setData(x, values)
    else:
        item.setData([], [])


class IntegerAxisItem(pg.AxisItem):
    """An axis for whole numbers (batch ids, versions, row counts): no ticks between integers."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(spacing, offset) for spacing, offset in levels if spacing >= 1]
        return whole or [(1.0, 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if spacing * scale >= 1:
            ints = [int(round(v * scale)) for v in values]
            top = max((abs(i) for i in ints), default=0)
            for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M")):
                if top >= size:  # "20M", "0.5M": ten digits crowd the axis title
                    return [f"{i / size:.3g}{suffix}" for i in ints]
            return [f"{i:,}" for i in ints]
        return super().tickStrings(values, scale, spacing)


#: pyqtgraph's sub-second zoom level with room for ``hh:mm:ss.f`` labels (its example text is ``99:99:99``).
MS_ZOOM_LEVEL = ZoomLevel(
    [
        TickSpec(60, makeSStepper(60), "%H:%M:%S"),
        TickSpec(MS_SPACING, makeMSStepper(MS_SPACING), "%S.%f", autoSkip=[1, 5, 10, 25]),
    ],
    # Wider than the labels: pyqtgraph drops a level whose labels fill more than 80 % of the axis.
    "99:99:99.999",
)


class TimeAxisItem(pg.DateAxisItem):
    """A ``DateAxisItem`` whose sub-second ticks read as clock times (``21:57:33.5``, not ``33.500``).

    On spans of a few seconds the ticks show the time of day to the second (or tenth); the date goes in
    the axis label, and a tick at midnight shows its date instead of ``00:00:00``.

    ``utc_offset_s`` is the shown zone's offset east of UTC (pyqtgraph's ``utcOffset`` counts west).
    """

    def __init__(self, orientation: str = "bottom", utc_offset_s: int = 0, **kwargs: Any) -> None:
        super().__init__(orientation=orientation, utcOffset=-utc_offset_s, **kwargs)
        # Sub-second ticks are wider than pyqtgraph's "99:99:99" example: space them for hh:mm:ss.f.
        self.zoomLevels[1] = MS_ZOOM_LEVEL

    def set_utc_offset_s(self, utc_offset_s: int) -> None:
        """Show times at this offset east of UTC."""
        self.utcOffset = -utc_offset_s
        self.picture = None
        self.update()

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        strings = self._clock_strings(values, scale, spacing)
        if spacing >= 86400:
            return strings
        # Ticks showing the time of day: a tick at midnight names its day instead, so a span across
        # midnight says on which side of it each tick is.
        out = []
        for v, text in zip(values, strings, strict=True):
            when = self._when(v)
            if when is not None and (when.hour, when.minute, when.second, when.microsecond) == (0, 0, 0, 0):
                text = when.strftime("%Y-%m-%d")
            out.append(text)
        return out

    def _when(self, value: float) -> dt.datetime | None:
        try:
            return dt.datetime.fromtimestamp(round(value - (self.utcOffset or 0), 3), tz=dt.timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None

    def _clock_strings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if spacing >= 1:
            return list(super().tickStrings(values, scale, spacing))
        # Sub-second level: as many decimals as the ticks need (whole seconds: none, 0.5 s steps: one).
        millis = [int(round(v * 1000)) % 1000 for v in values]
        decimals = next(
            d for d, unit in ((0, 1000), (1, 100), (2, 10), (3, 1)) if all(m % unit == 0 for m in millis)
        )
        out = []
        for v in values:
            when = self._when(v)
            if when is None:
                out.append("")
                continue
            out.append(
                when.strftime("%H:%M:%S.%f")[: 9 + decimals] if decimals else when.strftime("%H:%M:%S")
            )
        return out

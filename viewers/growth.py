"""State growth: rows (or bytes written) per version, in total and per partition.

Takes plain arrays (partition ids, versions, a partitions × versions matrix of rows and of bytes) per
store; the app computes them in a worker. The partitions with the largest values get their own
colour, legend entry and end-of-line label; the others share one muted curve (one item, NaN-separated)
so hundreds of partitions stay fast. Items are built once and updated with ``setData``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QSplitter, QVBoxLayout, QWidget

from statelens.viewers import theme
from statelens.viewers.fixmark import FixMarker
from statelens.viewers.stores import StorePickerMixin
from statelens.viewers.tables import ColumnTableModel, DataTableView

LEFT_AXIS_WIDTH = 80

#: Partitions drawn in their own colour and labelled.
TOP_PARTITIONS = 5

#: metric name -> (picker text, axis label, units, title)
METRICS = {
    "rows": ("rows in state", "rows in state", None, "Rows"),
    "state_bytes": ("state size (key + value bytes)", "key + value bytes held", "B", "State size"),
    "file_bytes": ("bytes written per version (files)", "delta + snapshot file bytes", "B", "Bytes written"),
}


class StateGrowthView(StorePickerMixin, QWidget):
    """Rows or bytes per state version, for one store at a time.

    Parameters
    ----------
    selection : object, optional
        The shared selection; its ``operator_id``/``store_name`` pick the store shown and its
        ``version`` is marked.

    Signals
    -------
    store_selected(int operator_id, str store_name)
    metric_selected(str metric)
        A key of :data:`METRICS`.
    fix_batch_chosen(object batch_id)
        The user chose the fix batch (None: the last restart).
    partition_selected(object partition_id)
        The user clicked near a partition's line.
    """

    store_selected = Signal(int, str)
    metric_selected = Signal(str)
    partition_selected = Signal(object)
    fix_batch_chosen = Signal(object)
    hide_empty_status = True

    def __init__(self, selection: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._data: dict[tuple[int, str], dict[str, Any]] = {}
        self._stores: list[tuple[int, str]] = []
        self._shown: tuple[int, str] | None = None
        self._metric = "rows"
        self._status: dict[tuple[int, str], str] = {}
        self._top_pids: list[int] = []

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        self._add_store_picker(bar)
        bar.addSpacing(16)
        bar.addWidget(QLabel("Show:"))
        self.metric_combo = QComboBox()
        for name, (text, *_rest) in METRICS.items():
            self.metric_combo.addItem(text, name)
        self.metric_combo.activated.connect(self._on_metric_combo_activated)
        bar.addWidget(self.metric_combo)
        bar.addStretch(1)
        layout.addLayout(bar)
        # Its own line, wrapped: notes can be long, and must never widen the window.
        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)

        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(theme.background())
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.graphics)
        heavy_box = QWidget()
        heavy_layout = QVBoxLayout(heavy_box)
        heavy_layout.setContentsMargins(0, 4, 0, 0)
        self.heavy_label = QLabel("")
        self.heavy_label.setTextFormat(Qt.TextFormat.PlainText)
        self.heavy_label.setWordWrap(True)
        heavy_layout.addWidget(self.heavy_label)
        self.heavy_model = ColumnTableModel()
        self.heavy_table = DataTableView(self.heavy_model, "heaviest keys")
        self.heavy_table.clicked.connect(self._on_heavy_table_clicked)
        heavy_layout.addWidget(self.heavy_table, 1)
        splitter.addWidget(heavy_box)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([600, 200])
        layout.addWidget(splitter, 1)
        self._heavy: dict[tuple[int, str], dict[str, Any]] = {}
        self._heavy_pids: list[int] = []

        self.total_plot = self.graphics.addPlot(
            row=0,
            col=0,
            axisItems={
                "bottom": theme.IntegerAxisItem(orientation="bottom"),
                "left": theme.IntegerAxisItem(orientation="left"),
            },
        )
        theme.style_plot(self.total_plot, "Total over all partitions")
        self.total_curve = pg.PlotDataItem(
            pen=pg.mkPen(theme.SERIES[0], width=2),
            symbol="o",
            symbolSize=5,
            symbolBrush=theme.SERIES[0],
            symbolPen=None,
        )
        self.total_plot.addItem(self.total_curve)
        self.partition_plot = self.graphics.addPlot(
            row=1,
            col=0,
            axisItems={
                "bottom": theme.IntegerAxisItem(orientation="bottom"),
                "left": theme.IntegerAxisItem(orientation="left"),
            },
        )
        for plot in (self.total_plot, self.partition_plot):
            plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
        theme.style_plot(self.partition_plot, "Per partition")
        self.partition_plot.setXLink(self.total_plot)
        theme.set_axis_label(self.partition_plot, "bottom", "state version (written by batch version − 1)")
        self.graphics.ci.layout.setRowStretchFactor(0, 2)
        self.graphics.ci.layout.setRowStretchFactor(1, 3)
        # The legend gets its own column, so it never hides a line.
        self.legend = pg.LegendItem()
        theme.style_legend(self.legend)
        self.graphics.addItem(self.legend, row=1, col=1)
        self.legend.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.graphics.ci.layout.setAlignment(
            self.legend, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft
        )
        self.graphics.ci.layout.setColumnStretchFactor(0, 1)

        others = theme.muted()
        others.setAlpha(150)
        self.other_curve = pg.PlotDataItem(pen=pg.mkPen(others, width=1), connect="finite")
        self.partition_plot.addItem(self.other_curve)
        self.top_curves: list[pg.PlotDataItem] = []
        self.top_labels: list[pg.TextItem] = []
        for i in range(TOP_PARTITIONS):
            color = theme.SERIES[(i + 1) % len(theme.SERIES)]
            curve = pg.PlotDataItem(
                pen=pg.mkPen(color, width=2),
                connect="finite",
                clipToView=True,
                autoDownsample=True,
                downsampleMethod="peak",
            )
            self.partition_plot.addItem(curve)
            self.top_curves.append(curve)
            label = pg.TextItem("", color=color, anchor=(0, 0.5))
            self.partition_plot.addItem(label, ignoreBounds=True)
            self.top_labels.append(label)
        self.version_lines = [
            pg.InfiniteLine(
                angle=90, movable=False, pen=pg.mkPen(theme.SELECTED, width=2, style=Qt.PenStyle.DashLine)
            )
            for _ in range(2)
        ]
        for plot, line in zip((self.total_plot, self.partition_plot), self.version_lines, strict=True):
            line.setVisible(False)
            plot.addItem(line, ignoreBounds=True)
        # The selected partition (shared selection) drawn on top, whatever its rank.
        self.selected_curve = pg.PlotDataItem(
            pen=pg.mkPen(theme.SELECTED, width=3, style=Qt.PenStyle.DashLine), connect="finite"
        )
        self.partition_plot.addItem(self.selected_curve)
        self.selected_label = pg.TextItem("", color=theme.SELECTED, anchor=(0, 1))
        self.partition_plot.addItem(self.selected_label, ignoreBounds=True)
        self.message = pg.TextItem("", color=theme.foreground(), anchor=(0.5, 0.5))
        self.partition_plot.addItem(self.message, ignoreBounds=True)
        # The fix batch (a restart with the fix, or the user's choice) and the rates around it.
        self.fix = FixMarker([self.total_plot, self.partition_plot])
        layout.insertWidget(2, self.fix.label)
        bar.addSpacing(12)
        bar.addWidget(self.fix.chooser_label)
        bar.addWidget(self.fix.chooser)
        self.fix.chooser.valueChanged.connect(lambda _v: self.fix_batch_chosen.emit(self.fix.chosen()))
        self._apply_labels()
        self._x_span: tuple[float, float] | None = None
        self.partition_plot.vb.sigResized.connect(self._fit_x)
        self.graphics.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)

        self._observe(selection, self._on_selection_changed)

    # -- data ----------------------------------------------------------------------------------------
    def set_growth(
        self,
        operator_id: int,
        store_name: str,
        partition_ids: Sequence[int] | np.ndarray,
        versions: Sequence[int] | np.ndarray,
        metrics: dict[str, np.ndarray],
    ) -> None:
        """Growth of one store: ``metrics[name][i, j]`` is partition ``partition_ids[i]`` at ``versions[j]``.

        ``metrics`` has a partitions × versions matrix (NaN where not readable) per key of :data:`METRICS`.
        """
        data: dict[str, Any] = {
            "partition_ids": np.asarray(partition_ids, dtype=np.int64),
            "versions": np.asarray(versions, dtype=np.float64),
        }
        for name in METRICS:
            matrix = metrics.get(name)
            data[name] = (
                np.asarray(matrix, dtype=np.float64)
                if matrix is not None
                else np.full((len(data["partition_ids"]), len(data["versions"])), np.nan)
            )
        self._data[(operator_id, store_name)] = data
        if self._shown == (operator_id, store_name):
            self._redraw()

    def set_top_keys(
        self,
        operator_id: int,
        store_name: str,
        version: int | None,
        keys_weighed: int,
        rows: Sequence[tuple[int, str, int, int | None]],
        elements_of: str | None = None,
        note: str = "",
    ) -> None:
        """The heaviest keys of one store at ``version``: ``(partition, key text, bytes, elements)`` rows,
        heaviest first. ``elements_of`` names what ``elements`` counts (list elements, map entries...);
        ``note`` replaces the table's title (e.g. why the store was not weighed)."""
        self._heavy[(operator_id, store_name)] = {
            "version": version,
            "keys": keys_weighed,
            "rows": list(rows),
            "elements_of": elements_of,
            "note": note,
        }
        if self._shown == (operator_id, store_name):
            self._show_heavy()

    def top_key_rows(self) -> list[list[str]]:
        """The heaviest-keys table of the shown store, as displayed."""
        return [self.heavy_model.row_texts(r) for r in range(self.heavy_model.rowCount())]

    def _show_heavy(self) -> None:
        data = self._heavy.get(self._shown) if self._shown is not None else None
        if data is None:
            self.heavy_label.setText("Heaviest keys: weighing…" if self._shown is not None else "")
            self.heavy_model.set_columns([], [])
            return
        if data["note"]:
            self.heavy_label.setText(f"Heaviest keys: {data['note']}")
        else:
            counted = {"list": "list elements", "map": "map entries", "values": "values"}.get(
                data["elements_of"] or ""
            )
            what = "encoded key + value bytes as the store holds them"
            if counted:
                what += f", of all {counted} of a key together"
            listed, keys = len(data["rows"]), int(data["keys"])
            which = (
                f"All {keys:,} keys of version {data['version']}, heaviest first"
                if listed >= keys
                else f"The {listed:,} heaviest of the {keys:,} keys of version {data['version']}"
            )
            self.heavy_label.setText(f"{which} ({what}); click one to select its partition")
        rows = data["rows"]
        # The key last: it takes the width that is left.
        headers = ["partition", "bytes"]
        columns: list[list[str]] = [[str(r[0]) for r in rows], [_si(r[2], "B") for r in rows]]
        keys: list[list[Any]] = [[r[0] for r in rows], [r[2] for r in rows]]
        if data["elements_of"]:
            headers.append("elements")
            columns.append([f"{r[3]:,}" if r[3] is not None else "" for r in rows])
            keys.append([r[3] or 0 for r in rows])
        headers.append("key")
        columns.append([r[1] for r in rows])
        keys.append([r[1] for r in rows])
        self.heavy_model.set_columns(headers, columns, keys)
        self.heavy_table.fit_columns(max_width=640)
        self._heavy_pids = [r[0] for r in rows]

    def _on_heavy_table_clicked(self, index: Any) -> None:
        pids = self._heavy_pids
        source = self.heavy_model.source_row(index.row())
        if 0 <= source < len(pids):
            self.partition_selected.emit(pids[source])

    def clear(self) -> None:
        self._heavy.clear()
        super().clear()

    def has_growth(self, operator_id: int, store_name: str) -> bool:
        return (operator_id, store_name) in self._data

    def set_metric(self, metric: str) -> None:
        """A key of :data:`METRICS`."""
        if metric not in METRICS or metric == self._metric:
            return
        self._metric = metric
        self.metric_combo.setCurrentIndex(list(METRICS).index(metric))
        self._apply_labels()
        self._redraw()

    def shown_partitions(self) -> list[int]:
        """Partitions drawn with their own colour (largest first)."""
        return list(self._top_pids)

    # -- drawing -------------------------------------------------------------------------------------
    def _apply_labels(self) -> None:
        _text, label, units, title = METRICS[self._metric]
        theme.set_axis_label(self.total_plot, "left", label, units=units)
        theme.set_axis_label(self.partition_plot, "left", label, units=units)
        self.total_plot.setTitle(
            f"{title}: total over all partitions", color=theme.foreground().name(), size=theme.TITLE_SIZE
        )
        self.partition_plot.setTitle(
            f"{title}: per partition", color=theme.foreground().name(), size=theme.TITLE_SIZE
        )

    def set_fix(
        self, fix_batch: int | None, title: str = "", texts: Mapping[tuple[int, str], str] | None = None
    ) -> None:
        """Mark the fix batch on the plots and say, per store, its rows per batch before and after.

        Parameters
        ----------
        fix_batch : int or None
            None: no fix to show.
        title : str
            Where the fix is and why (shown above the store's text).
        texts : mapping, optional
            ``(operator_id, store_name)`` -> that store's before/after line.
        """
        self.fix.set_fix(fix_batch, title, texts)
        self.fix.show(self._shown)

    def _redraw(self) -> None:
        self.fix.show(self._shown)
        self._show_heavy()
        data = self._data.get(self._shown) if self._shown is not None else None
        self.legend.clear()
        self._top_pids = []
        self._show_status(self._status.get(self._shown, "") if self._shown is not None else "")
        if data is None or not len(data["versions"]):
            for item in (self.total_curve, self.other_curve, *self.top_curves):
                item.setData([], [])
            for label in self.top_labels:
                label.setText("")
            self.selected_curve.setData([], [])
            self.selected_label.setText("")
            if self._shown is None:
                text = "No state store to show."
            elif data is None:
                text = "Computing state growth…"
            else:
                text = "This store has no readable versions."
            self.message.setText(text)
            self.message.setPos(0.5, 0.5)
            self._x_span = None
            self.partition_plot.setRange(xRange=(0, 1), yRange=(0, 1))
            return
        self.message.setText("")
        x = data["versions"]
        values = data[self._metric]
        pids = data["partition_ids"]
        totals = np.nansum(values, axis=0)
        totals[~np.isfinite(values).any(axis=0)] = np.nan
        theme.set_curve_data(self.total_curve, x, totals)
        # max over versions, NaN (not readable) as 0, without numpy's all-NaN warning
        peak = np.where(np.isfinite(values), values, 0.0).max(axis=1) if values.size else np.zeros(len(pids))
        has_data = np.isfinite(values).any(axis=1) if values.size else np.zeros(len(pids), dtype=bool)
        order = np.array([i for i in np.argsort(-peak, kind="stable") if has_data[i]], dtype=np.int64)
        if not len(order):
            self.message.setText("No values of this kind for this store.")
            self.message.setPos(float(x[0]), 0.5)
        top = order[:TOP_PARTITIONS]
        rest = order[TOP_PARTITIONS:]
        if len(rest):
            xs = np.concatenate([np.append(x, np.nan) for _ in rest])
            ys = np.concatenate([np.append(values[i], np.nan) for i in rest])
            self.other_curve.setData(xs, ys)
            self.legend.addItem(
                self.other_curve, f"{len(rest)} other partition{'s' if len(rest) != 1 else ''}"
            )
        else:
            self.other_curve.setData([], [])
        unit = "rows" if self._metric == "rows" else "B"
        ends: dict[tuple[float, float], tuple[pg.TextItem, list[int]]] = {}
        tolerance = 0.04 * float(peak.max(initial=0.0))  # about a text line of the plot's height
        for slot, (curve, label) in enumerate(zip(self.top_curves, self.top_labels, strict=True)):
            if slot < len(top):
                i = top[slot]
                curve.setData(x, values[i])
                self._top_pids.append(int(pids[i]))
                self.legend.addItem(curve, f"partition {int(pids[i])} (max {_si(peak[i], unit)})")
                finite = np.nonzero(np.isfinite(values[i]))[0]
                label.setText("")
                label.setColor(theme.SERIES[(slot + 1) % len(theme.SERIES)])
                if len(finite):
                    # Lines ending at (or within a text line of) one point share one label ("p0, p3")
                    # instead of overprinting.
                    j = finite[-1]
                    end = (float(x[j]), float(values[i][j]))
                    near = next((e for e in ends if e[0] == end[0] and abs(e[1] - end[1]) <= tolerance), None)
                    shared, names = ends.setdefault(near or end, (label, []))
                    names.append(int(pids[i]))
                    shown = ", ".join(f"p{p}" for p in names[:2])
                    shared.setText(f" {shown}" + (f" +{len(names) - 2}" if len(names) > 2 else ""))
                    if len(names) > 1:  # no single line's colour fits a shared label
                        shared.setColor(theme.foreground())
                    shared.setPos(*(near or end))
            else:
                curve.setData([], [])
                label.setText("")
        self._x_span = (float(x[0]), float(x[-1]))
        self._fit_x()
        # Growth reads against zero: both y axes start there, with 0 a labelled tick just inside.
        for plot, top_value in (
            (self.total_plot, np.nanmax(totals, initial=0.0)),
            (self.partition_plot, float(peak.max(initial=0.0))),
        ):
            top_y = max(float(top_value), 1.0) * 1.08
            plot.setYRange(-0.08 * top_y, top_y, padding=0)
        if self._selection is not None:
            self.show_version(self._selection.version)
            self.show_partition(self._selection.partition_id)

    def _fit_x(self) -> None:
        """Versions from first to last, with room on the right for the widest end label ("p0, p1 +1").

        The room is measured in pixels (the label's width) and turned into versions at the plot's
        current width, so the labels fit whatever the window's size.
        """
        if self._x_span is None:
            return
        first, last = self._x_span
        label_px = max(
            (lab.boundingRect().width() for lab in self.top_labels if lab.textItem.toPlainText()), default=0.0
        )
        width_px = float(self.partition_plot.vb.width())
        span = max(last - first, 1.0) + 0.5
        room_px = label_px + 12
        if width_px > 2 * room_px:
            pad = max(room_px * span / (width_px - room_px), 0.5)
        else:
            pad = max(span * 0.14, 0.5)
        self.total_plot.setXRange(first - 0.5, last + pad, padding=0)

    def end_labels(self) -> list[str]:
        """The texts at the right ends of the partition lines, as drawn (``p1``, ``p0, p3 +1``)."""
        return [t for t in (lab.textItem.toPlainText().strip() for lab in self.top_labels) if t]

    def show_partition(self, partition_id: int | None) -> None:
        """Draw one partition's line in the selection colour (hidden for None or unknown)."""
        data = self._data.get(self._shown) if self._shown is not None else None
        hits: Any = (
            np.nonzero(data["partition_ids"] == partition_id)[0]
            if data is not None and partition_id is not None
            else []
        )
        if not len(hits):
            self.selected_curve.setData([], [])
            self.selected_label.setText("")
            return
        values = data[self._metric][hits[0]]  # type: ignore[index]
        self.selected_curve.setData(data["versions"], values)  # type: ignore[index]
        finite = np.nonzero(np.isfinite(values))[0]
        self.selected_label.setText(f"selected: partition {partition_id}" if len(finite) else "")
        if len(finite):
            self.selected_label.setPos(float(data["versions"][finite[0]]), float(values[finite[0]]))  # type: ignore[index]

    def partition_at(self, x: float, y: float) -> int | None:
        """The partition whose line passes nearest to ``(x, y)`` (plot coordinates) at the nearest version."""
        data = self._data.get(self._shown) if self._shown is not None else None
        if data is None or not len(data["versions"]) or not len(data["partition_ids"]):
            return None
        j = int(np.argmin(np.abs(data["versions"] - x)))
        column = data[self._metric][:, j]
        if not np.isfinite(column).any():
            return None
        i = int(np.nanargmin(np.abs(column - y)))
        return int(data["partition_ids"][i])

    def _on_scene_mouse_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        pos = event.scenePos()
        if not self.partition_plot.vb.sceneBoundingRect().contains(pos):
            return
        point = self.partition_plot.vb.mapSceneToView(pos)
        pid = self.partition_at(point.x(), point.y())
        if pid is not None:
            self.partition_selected.emit(pid)

    def show_version(self, version: int | None) -> None:
        """Mark a state version with a dashed line."""
        for line in self.version_lines:
            line.setVisible(version is not None)
            if version is not None:
                line.setPos(version)

    # -- signals -------------------------------------------------------------------------------------
    def _on_store_combo_activated(self, index: int) -> None:
        key = self.store_combo.itemData(index)
        if key is not None:
            self._shown = tuple(key)  # type: ignore[assignment]
            self._redraw()
            self.store_selected.emit(int(key[0]), str(key[1]))

    def _on_metric_combo_activated(self, index: int) -> None:
        metric = self.metric_combo.itemData(index)
        self.set_metric(metric)
        self.metric_selected.emit(metric)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if "operator_id" in changes or "store_name" in changes:
            self.show_store(self._selection.operator_id, self._selection.store_name)
        if "version" in changes:
            self.show_version(changes["version"])
        if "partition_id" in changes:
            self.show_partition(changes["partition_id"])


def _si(value: float, unit: str) -> str:
    if unit == "rows":
        return f"{int(value):,} row{'s' if int(value) != 1 else ''}"
    for prefix in ("", "k", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.0f} {prefix}{unit}" if prefix == "" else f"{value:.1f} {prefix}{unit}"
        value /= 1000
    return f"{value:.1f} P{unit}"

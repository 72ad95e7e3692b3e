"""Expired-but-unremoved keys: counts over versions and per partition, and the table of keys.

Takes plain arrays and display columns per store (the app runs the analysis in a worker). Two
stacked-bar plots, one bar item per category built once and updated with ``setOpts``: the left one
over state versions, the right one per partition at each partition's latest version. Below, the keys
with their timeout, threshold, age and the batch where they expired. Clicking a key selects it (and
the app opens its history); clicking a bar selects that version or partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from statelens.viewers import theme
from statelens.viewers.fixmark import FixMarker
from statelens.viewers.stores import StorePickerMixin
from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView

#: Category -> (legend text, colour). Same order as the analysis' categories.
CATEGORIES = {
    "zombie": ("zombie: timed out, still in the state", "#ef4444"),
    "overdue": ("overdue: the next batch would time it out", "#f59e0b"),
    "stale": ("stale: no timeout, not written for a while", "#14b8a6"),
    "eviction_lag": ("eviction lag: behind the watermark", "#3b82f6"),
}
LEFT_AXIS_WIDTH = 60
FILTER_DELAY_MS = 150
HINT = "Click a key to select it in every view and see its history across versions."
#: Rows looked at to decide that a column is empty for every key (and hide it).
EMPTY_SCAN_ROWS = 5000


class ExpiredView(StorePickerMixin, QWidget):
    """Zombie, overdue, stale and eviction-lag keys of one store at a time.

    Parameters
    ----------
    selection : object, optional
        The shared selection; its store picks the store shown, its version and partition are
        marked, its key is selected in the table.

    Signals
    -------
    store_selected(int operator_id, str store_name)
    version_selected(int version)
        A bar of the versions plot was clicked.
    fix_batch_chosen(object batch_id)
        The user chose the fix batch (None: the last restart).
    partition_selected(object partition_id)
        A bar of the partitions plot was clicked.
    finding_selected(int partition_id, int version, object key)
        A key of the table was clicked.
    prune_requested(int operator_id, str store_name)
        "Prune these keys into a copy..." was pressed for the store shown.
    """

    store_selected = Signal(int, str)
    version_selected = Signal(int)
    partition_selected = Signal(object)
    fix_batch_chosen = Signal(object)
    finding_selected = Signal(int, int, object)
    prune_requested = Signal(int, str)

    def __init__(self, selection: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._stores: list[tuple[int, str]] = []
        self._data: dict[tuple[int, str], dict[str, Any]] = {}
        self._status: dict[tuple[int, str], str] = {}
        self._shown: tuple[int, str] | None = None
        self._refs: Sequence[tuple[int, int, Any]] = []
        self._labels: dict[tuple[int, str], str] = {}
        self._syncing = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        self._add_store_picker(bar)
        bar.addSpacing(12)
        self.counts_label = QLabel("")
        self.counts_label.setTextFormat(Qt.TextFormat.PlainText)
        bar.addWidget(self.counts_label, 1)
        layout.addLayout(bar)
        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)

        splitter = QSplitter(Qt.Orientation.Vertical)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(theme.background())
        splitter.addWidget(self.graphics)

        self.version_plot = self.graphics.addPlot(
            row=0,
            col=0,
            axisItems={
                "bottom": theme.IntegerAxisItem(orientation="bottom"),
                "left": theme.IntegerAxisItem(orientation="left"),
            },
        )
        theme.style_plot(self.version_plot, "Expired keys still in the state, per version")
        theme.set_axis_label(self.version_plot, "bottom", "state version (written by batch version − 1)")
        theme.set_axis_label(self.version_plot, "left", "keys")
        self.partition_plot = self.graphics.addPlot(
            row=0,
            col=1,
            axisItems={
                "bottom": theme.IntegerAxisItem(orientation="bottom"),
                "left": theme.IntegerAxisItem(orientation="left"),
            },
        )
        theme.style_plot(self.partition_plot, "Per partition, at its latest version")
        theme.set_axis_label(self.partition_plot, "bottom", "partition")
        theme.set_axis_label(self.partition_plot, "left", "keys")
        for plot in (self.version_plot, self.partition_plot):
            plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
            plot.setMouseEnabled(x=True, y=False)
        self.graphics.ci.layout.setColumnStretchFactor(0, 3)
        self.graphics.ci.layout.setColumnStretchFactor(1, 2)
        self.legend = self.version_plot.addLegend(offset=(10, 10))
        theme.style_legend(self.legend)

        self.version_bars: dict[str, pg.BarGraphItem] = {}
        self.partition_bars: dict[str, pg.BarGraphItem] = {}
        for name, (_label, color) in CATEGORIES.items():
            for plot, store in (
                (self.version_plot, self.version_bars),
                (self.partition_plot, self.partition_bars),
            ):
                item = pg.BarGraphItem(
                    x=[], height=[], width=0.7, brush=pg.mkBrush(color + "cc"), pen=pg.mkPen(color)
                )
                plot.addItem(item)
                store[name] = item
        selected_pen = pg.mkPen(theme.SELECTED, width=2, style=Qt.PenStyle.DashLine)
        self.version_line = pg.InfiniteLine(angle=90, movable=False, pen=selected_pen)
        self.version_line.setVisible(False)
        self.version_plot.addItem(self.version_line, ignoreBounds=True)
        self.partition_line = pg.InfiniteLine(angle=90, movable=False, pen=selected_pen)
        self.partition_line.setVisible(False)
        self.partition_plot.addItem(self.partition_line, ignoreBounds=True)
        self.message = pg.TextItem("", color=theme.foreground(), anchor=(0.5, 0.5))
        self.version_plot.addItem(self.message, ignoreBounds=True)
        # Partitions whose files could not be read: marked, never drawn as 0 keys.
        self.unreadable_marks = pg.ScatterPlotItem(
            x=[], y=[], symbol="x", size=14, pen=pg.mkPen(theme.foreground(), width=2), brush=None
        )
        self.partition_plot.addItem(self.unreadable_marks)
        self.unreadable_text = pg.TextItem("", color=theme.foreground(), anchor=(0.5, 1.0))
        self.partition_plot.addItem(self.unreadable_text, ignoreBounds=True)
        self.graphics.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)
        # The fix batch (a restart with the fix, or the user's choice) and the rates around it.
        self.fix = FixMarker([self.version_plot])
        layout.insertWidget(2, self.fix.label)
        bar.addSpacing(12)
        bar.addWidget(self.fix.chooser_label)
        bar.addWidget(self.fix.chooser)
        self.fix.chooser.valueChanged.connect(lambda _v: self.fix_batch_chosen.emit(self.fix.chosen()))

        table_box = QWidget()
        table_layout = QVBoxLayout(table_box)
        table_layout.setContentsMargins(0, 0, 0, 0)
        filters = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter keys: text in any column")
        self.filter_edit.setClearButtonEnabled(True)
        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter_edit.textChanged.connect(lambda _t: self._filter_timer.start())
        filters.addWidget(self.filter_edit, 1)
        self.count_label = QLabel("")
        self.count_label.setTextFormat(Qt.TextFormat.PlainText)
        filters.addWidget(self.count_label)
        self.prune_button = QPushButton("Prune these keys into a copy…")
        self.prune_button.setToolTip(
            "Write a copy of the checkpoint without this store's expired keys, that the same query restarts "
            "from; a dry run is shown first"
        )
        self.prune_button.setEnabled(False)
        self.prune_button.clicked.connect(self._on_prune_clicked)
        filters.addWidget(self.prune_button)
        table_layout.addLayout(filters)
        self.model = ColumnTableModel()
        self.proxy = ColumnFilterProxyModel()
        self.proxy.setSourceModel(self.model)
        self.table = DataTableView(self.proxy, "expired keys")
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_changed)
        self.table.clicked.connect(self._on_table_clicked)
        table_layout.addWidget(self.table, 1)
        self.hint = QLabel(HINT)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        self.hint.setWordWrap(True)
        table_layout.addWidget(self.hint)
        splitter.addWidget(table_box)
        splitter.setSizes([360, 420])
        layout.addWidget(splitter, 1)
        self._redraw()

        self._observe(selection, self._on_selection_changed)

    # -- data ----------------------------------------------------------------------------------------
    def set_expiry(
        self,
        operator_id: int,
        store_name: str,
        versions: Sequence[int],
        counts: Mapping[str, Sequence[int]],
        partitions: Sequence[int],
        partition_counts: Mapping[str, Sequence[int]],
        headers: Sequence[str],
        columns: Sequence[Sequence[str]],
        sort_keys: Sequence[Sequence[Any]],
        refs: Sequence[tuple[int, int, Any]],
        total: int | None = None,
        checked: bool = True,
        unreadable: Sequence[int] = (),
    ) -> None:
        """One store's counts (per category over ``versions`` and over ``partitions``) and its keys.

        ``refs[i]`` is ``(partition_id, version, key)`` of table row ``i`` (emitted when clicked).
        ``total`` is the exact number of keys found at each partition's latest version (the table may
        list fewer: the most overdue); ``checked`` False says the store was not checked at all (its
        status says why), which is not the same as nothing found. ``unreadable`` partitions had files
        that could not be read: they are marked (×) and named, never drawn as 0 keys.
        """
        latest = {c: int(np.sum(partition_counts.get(c, []))) for c in CATEGORIES}
        self._data[(operator_id, store_name)] = {
            "total": sum(latest.values()) if total is None else int(total),
            "checked": checked,
            "versions": np.asarray(versions, dtype=np.float64),
            "counts": {
                c: np.asarray(counts.get(c, [0] * len(versions)), dtype=np.float64) for c in CATEGORIES
            },
            "partitions": np.asarray(partitions, dtype=np.float64),
            "partition_counts": {
                c: np.asarray(partition_counts.get(c, [0] * len(partitions)), dtype=np.float64)
                for c in CATEGORIES
            },
            "table": (list(headers), list(columns), list(sort_keys)),
            "refs": list(refs),
            "unreadable": sorted(unreadable),
        }
        self._label_store((operator_id, store_name), latest)
        if self._shown == (operator_id, store_name):
            self._redraw()

    def set_stores(
        self,
        stores: Sequence[tuple[int, str, str]],
        groups: Mapping[tuple[int, str], str] | None = None,
        tips: Mapping[tuple[int, str], str] | None = None,
    ) -> None:
        """As :meth:`StorePickerMixin.set_stores`; stores with findings get their counts in the picker."""
        self._labels = {(op, name): label for op, name, label in stores}
        super().set_stores(stores, groups, tips)

    def _label_store(self, key: tuple[int, str], latest: Mapping[str, int]) -> None:
        """Append the findings (``[zombie: 1]``) to a store's picker text, so stores with keys stand out."""
        index = getattr(self, "_combo_index", {}).get(key)
        label = self._labels.get(key)
        if index is None or label is None:
            return
        found = [f"{c.replace('_', ' ')}: {n:,}" for c, n in latest.items() if n]
        self.store_combo.setItemText(index, f"{label}  [{', '.join(found)}]" if found else label)

    def has_expiry(self, operator_id: int, store_name: str) -> bool:
        return (operator_id, store_name) in self._data

    def shown_store(self) -> tuple[int, str] | None:
        return self._shown

    def visible_rows(self) -> int:
        return self.proxy.rowCount()

    def row_ref(self, row: int) -> tuple[int, int, Any]:
        """``(partition_id, version, key)`` of a table row (in the sorted, filtered order)."""
        return self._refs[self.model.source_row(row)]

    def apply_filter(self) -> None:
        self._filter_timer.stop()
        self.proxy.set_filter_text(self.filter_edit.text())
        self._update_count()

    # -- drawing -------------------------------------------------------------------------------------
    def set_fix(
        self, fix_batch: int | None, title: str = "", texts: Mapping[tuple[int, str], str] | None = None
    ) -> None:
        """Mark the fix batch on the per-version plot and say, per store, its expired keys per batch
        before and after.

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
        data = self._data.get(self._shown) if self._shown is not None else None
        self.status.setText(self._status.get(self._shown, "") if self._shown is not None else "")
        self.legend.clear()
        self.legend.setVisible(False)  # an empty legend is a stray box
        self.hint.setText(HINT)
        if data is None:
            for item in (*self.version_bars.values(), *self.partition_bars.values()):
                item.setOpts(x=[], height=[], y0=[])
            self.unreadable_marks.setData(x=[], y=[])
            self.unreadable_text.setText("")
            self.message.setText(
                "No state store to check." if self._shown is None else "Looking for expired keys…"
            )
            self.message.setPos(0.5, 0.5)
            self.version_plot.setRange(xRange=(0, 1), yRange=(0, 1))
            self._refs = []
            self.model.clear()
            self.counts_label.setText("")
            self._update_count()
            return
        x = data["versions"]
        base = np.zeros(len(x))
        totals: dict[str, int] = {}
        for name, item in self.version_bars.items():
            h = data["counts"][name]
            nz = h > 0  # zero-height bars would still draw their outline
            item.setOpts(x=x[nz], height=h[nz], y0=base[nz], width=0.7)
            base = base + h
            if h.any():
                self.legend.addItem(item, CATEGORIES[name][0])
                self.legend.setVisible(True)
        px = data["partitions"]
        pbase = np.zeros(len(px))
        for name, item in self.partition_bars.items():
            h = data["partition_counts"][name]
            nz = h > 0
            item.setOpts(x=px[nz], height=h[nz], y0=pbase[nz], width=0.7)
            pbase = pbase + h
            totals[name] = int(h.sum())
        if len(x):
            self.version_plot.setXRange(float(x.min()) - 0.6, float(x.max()) + 0.6, padding=0)
            # Room above the bars for the legend (top left, a line per category shown): it hides none.
            rows = sum(1 for name in self.version_bars if data["counts"][name].any())
            top_share = 1.15 + 0.13 * rows
            self.version_plot.setYRange(0, max(float(base.max(initial=0.0)), 1.0) * top_share, padding=0)
        bad = [p for p in data["unreadable"] if p in set(px.tolist())]
        self.unreadable_marks.setData(x=bad, y=[0] * len(bad))
        top = max(float(pbase.max(initial=0.0)), 1.0) * 1.15
        if bad:
            self.unreadable_text.setText("unreadable: " + ", ".join(f"p{p}" for p in bad))
            self.unreadable_text.setPos(float(np.mean(bad)), top * 0.5)
        else:
            self.unreadable_text.setText("")
        if len(px):
            self.partition_plot.setXRange(float(px.min()) - 0.6, float(px.max()) + 0.6, padding=0)
            self.partition_plot.setYRange(0, top, padding=0)
        if not data["checked"]:
            self.message.setText("Not checked: see the note above.")
            self.message.setPos(float(x.mean()) if len(x) else 0.5, 0.5)
        elif not base.any():
            self.message.setText("No expired key still in the state.")
            self.message.setPos(float(x.mean()) if len(x) else 0.5, 0.5)
        else:
            self.message.setText("")
        found = [f"{c.replace('_', ' ')}: {n:,}" for c, n in totals.items() if n]
        if not data["checked"]:
            self.counts_label.setText("This store was not checked for expired keys.")
        else:
            text = "Keys at each partition's latest version: " + (
                ", ".join(found) if found else "nothing expired"
            )
            if bad:
                text += (
                    f"; partition{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} could not be read "
                    "(see Problems)"
                )
            self.counts_label.setText(text)
        headers, columns, sort_keys = data["table"]
        self._refs = data["refs"]
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.model.set_columns(headers, columns, sort_keys)
        self.proxy.set_filter_text(self.filter_edit.text())
        # Columns empty for every key listed (no stored timeout in transformWithState...) make room.
        n = min(len(columns[0]) if columns else 0, EMPTY_SCAN_ROWS)
        for col, texts in enumerate(columns):
            self.table.setColumnHidden(col, n > 0 and not any(texts[i] for i in range(n)))
        self.table.fit_columns()
        self._update_count()
        if self._selection is not None:
            s = self._selection
            self.show_version(s.version)
            self.show_partition(s.partition_id)
            self.show_key(s.partition_id, s.key)

    def _update_count(self) -> None:
        total = self.model.total_rows()
        shown = self.model.matching_rows()
        data = self._data.get(self._shown) if self._shown is not None else None
        found = data["total"] if data is not None else total
        noun = "key" if total == 1 else "keys"
        text = f"{shown:,} of {total:,} {noun}" if shown != total else f"{total:,} {noun}"
        if found > total:
            # The analysis keeps the most overdue keys per category; the counts above are exact.
            text += f" listed, the most overdue of {found:,} found"
        self.count_label.setText(text)
        self.prune_button.setEnabled(found > 0)

    def show_version(self, version: int | None) -> None:
        self.version_line.setVisible(version is not None)
        if version is not None:
            self.version_line.setPos(version)

    def show_partition(self, partition_id: int | None) -> None:
        self.partition_line.setVisible(partition_id is not None)
        if partition_id is not None:
            self.partition_line.setPos(partition_id)

    def show_key(self, partition_id: int | None, key: Any) -> None:
        """Select the table row of ``key`` (in ``partition_id`` when given) without emitting."""
        if key is None:
            return
        for src, (pid, _v, k) in enumerate(self._refs):
            if k == key and (partition_id is None or pid == partition_id):
                row = self.model.row_of_source(src)
                if row < 0:
                    return
                index = self.proxy.mapFromSource(self.model.index(row, 0))
                self._syncing = True
                try:
                    self.table.selectRow(index.row())
                    self.table.scrollTo(index)
                finally:
                    self._syncing = False
                return

    # -- signals -------------------------------------------------------------------------------------
    def _on_prune_clicked(self) -> None:
        if self._shown is not None:
            self.prune_requested.emit(*self._shown)

    def _on_store_combo_activated(self, index: int) -> None:
        key = self.store_combo.itemData(index)
        if key is not None:
            self._shown = tuple(key)  # type: ignore[assignment]
            self._redraw()
            self.store_selected.emit(int(key[0]), str(key[1]))

    def _on_table_current_changed(self, current: Any, _previous: Any) -> None:
        if not current.isValid():
            return
        if self._syncing:
            self._show_row_note(self.proxy.mapToSource(current).row())
            return
        self._emit_row(current)

    def _on_table_clicked(self, index: Any) -> None:
        # A click on the row already current still means "show me this key" (e.g. history closed).
        if index.isValid() and not self._syncing:
            self._emit_row(index)

    def _emit_row(self, index: Any) -> None:
        row = self.proxy.mapToSource(index).row()
        pid, version, key = self.row_ref(row)
        self._show_row_note(row)
        self.finding_selected.emit(pid, version, key)

    def _show_row_note(self, row: int) -> None:
        """The selected key's category and note in full under the table (the note column is often cut)."""
        texts = dict(zip(self.model.headers(), self.model.row_texts(row), strict=False))
        text = f"{texts.get('category', '')} · partition {texts.get('partition', '')} · key {texts.get('key', '')}"
        if texts.get("note"):
            text += f": {texts['note']}"
        self.hint.setText(f"{text}. Its history across versions is in the Key history panel.")

    def _on_scene_mouse_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        pos = event.scenePos()
        data = self._data.get(self._shown) if self._shown is not None else None
        if data is None:
            return
        for plot, xs, signal in (
            (self.version_plot, data["versions"], self.version_selected),
            (self.partition_plot, data["partitions"], self.partition_selected),
        ):
            if plot.vb.sceneBoundingRect().contains(pos) and len(xs):
                x = plot.vb.mapSceneToView(pos).x()
                i = int(np.argmin(np.abs(xs - x)))
                if abs(xs[i] - x) <= 0.5:
                    signal.emit(int(xs[i]))
                return

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        s = self._selection
        if "operator_id" in changes or "store_name" in changes:
            self.show_store(s.operator_id, s.store_name)
        if "version" in changes:
            self.show_version(s.version)
        if "partition_id" in changes:
            self.show_partition(s.partition_id)
        if "key" in changes:
            self.show_key(s.partition_id, s.key)

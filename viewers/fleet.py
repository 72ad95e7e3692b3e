"""The fleet view: one row per checkpoint found below a folder or prefix, worst first, filled in as the
checkpoints are read; sortable by any column, filtered by a text; a double-click asks to open that
checkpoint in the usual views (:mod:`app.gui.controllers.fleet` feeds it and answers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QModelIndex, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

#: Column headers, left to right.
COLUMNS = (
    "",
    "checkpoint",
    "query id",
    "last batch",
    "age",
    "stores",
    "rows",
    "bytes",
    "trend",
    "zombies",
    "restart",
    "unreadable",
    "worst finding",
)
#: Columns shown right-aligned (numbers).
NUMERIC = frozenset({3, 5, 6, 7, 8, 9, 11})
#: Sort and filter roles: a row's order key per cell, the checkpoint to open.
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
URL_ROLE = Qt.ItemDataRole.UserRole + 2
_SEVERITY_COLORS = {"error": QColor(220, 38, 38), "warning": QColor(217, 119, 6)}
_TAGS = {"error": "ERROR", "warning": "WARNING", "info": "note", "ok": "ok"}


class FleetView(QWidget):
    """The fleet table with its filter, progress and Cancel button.

    Signals
    -------
    open_requested(str url)
        A row was double-clicked (or Enter pressed on it): open that checkpoint.
    cancel_requested()
        The Cancel button.
    """

    open_requested = Signal(str)
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Checkpoints — statelens")
        self.resize(1300, 700)
        layout = QVBoxLayout(self)
        self.title = QLabel()
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.title)
        top = QHBoxLayout()
        top.addWidget(QLabel("Filter:"))
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("any text of a row: a path, ERROR, a query id, restart…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self._on_filter_edit_text_changed)
        top.addWidget(self.filter_edit, 1)
        layout.addLayout(top)
        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(list(COLUMNS))
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setFilterKeyColumn(-1)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.proxy.setDynamicSortFilter(True)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)  # worst first
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.doubleClicked.connect(self._on_table_double_clicked)
        self.table.activated.connect(self._on_table_double_clicked)
        layout.addWidget(self.table, 1)
        bottom = QHBoxLayout()
        self.status = QLabel()
        bottom.addWidget(self.status, 1)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(260)
        bottom.addWidget(self.progress)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_requested)
        bottom.addWidget(self.cancel_button)
        layout.addLayout(bottom)

    # -- filling -------------------------------------------------------------------------------------
    def start(self, root: str) -> None:
        """Empty the table for a new search below ``root``."""
        self.model.removeRows(0, self.model.rowCount())
        self.title.setText(f"<b>Checkpoints below</b> {root}")
        self.setWindowTitle(f"{root} — checkpoints — statelens")
        self.status.setText("Looking for checkpoints…")
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.cancel_button.setEnabled(True)

    def add_row(
        self,
        severity: str,
        cells: Sequence[Any],
        sort_keys: Sequence[Any],
        url: str,
        tooltip: str = "",
    ) -> None:
        """Add one checkpoint's row (any order: the table keeps its sort).

        Parameters
        ----------
        severity : str
            ``error``, ``warning``, ``info`` or ``ok`` (the first cell shows it, coloured).
        cells : sequence
            The texts of :data:`COLUMNS` after the first.
        sort_keys : sequence
            One order key per column (numbers sort as numbers; the first column's is the worst-first rank).
        url : str
            What a double-click asks to open.
        tooltip : str
            Shown over the row (every verdict, the error).
        """
        items = []
        texts = [_TAGS.get(severity, severity), *("" if c is None else str(c) for c in cells)]
        for i, (text, key) in enumerate(zip(texts, sort_keys, strict=True)):
            item = QStandardItem(text)
            item.setData(key, SORT_ROLE)
            item.setData(url, URL_ROLE)
            if tooltip:
                item.setToolTip(tooltip)
            if i in NUMERIC:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if i == 0 and severity in _SEVERITY_COLORS:
                item.setForeground(QBrush(_SEVERITY_COLORS[severity]))
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            items.append(item)
        self.model.appendRow(items)
        if self.model.rowCount() <= 3:
            self.table.resizeColumnsToContents()

    def set_progress(self, done: int, total: int, what: str) -> None:
        """``done`` of ``total`` checkpoints read so far (total grows while the search goes on)."""
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.status.setText(f"{done} of {total} checkpoints read — {what}")

    def finish(self, text: str) -> None:
        """The search and every read are done (or cancelled): ``text`` says what was found."""
        self.progress.setVisible(False)
        self.cancel_button.setEnabled(False)
        self.status.setText(text)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)

    # -- reading back (tests, the controller) --------------------------------------------------------
    def row_count(self) -> int:
        """Rows shown (after the filter)."""
        return self.proxy.rowCount()

    def row_texts(self, row: int) -> list[str]:
        """The texts of shown row ``row``."""
        return [str(self.proxy.index(row, c).data() or "") for c in range(len(COLUMNS))]

    def row_url(self, row: int) -> str:
        """What shown row ``row`` opens."""
        return str(self.proxy.index(row, 0).data(URL_ROLE))

    # -- user intent ---------------------------------------------------------------------------------
    def _on_filter_edit_text_changed(self, text: str) -> None:
        self.proxy.setFilterFixedString(text)

    def _on_table_double_clicked(self, index: QModelIndex) -> None:
        url = index.data(URL_ROLE)
        if url:
            self.open_requested.emit(str(url))

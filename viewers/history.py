"""A key's history: its value (and timeout) at every version of its partition, as a table.

The app follows the key through the versions in a worker and hands over display columns; rows where
the key was added, updated or removed are highlighted. Clicking a row selects that version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView

#: Row backgrounds by change (translucent: readable on light and dark palettes).
CHANGE_COLORS = {
    "added": QColor(16, 185, 129, 70),
    "updated": QColor(59, 130, 246, 60),
    "removed": QColor(239, 68, 68, 70),
}


class KeyHistoryPanel(QWidget):
    """The history of one key across versions.

    Signals
    -------
    version_selected(int version)
        A row was clicked.
    refresh_requested()
        The user asked for the selected key's history again (e.g. after it was cleared).
    """

    version_selected = Signal(int)
    refresh_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._versions: list[int] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        self.title = QLabel(
            "Select a key (state browser or expired keys) to see its history across versions."
        )
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        top.addWidget(self.title, 1)
        self.refresh_button = QPushButton("Show the selected key")
        self.refresh_button.clicked.connect(self.refresh_requested.emit)
        top.addWidget(self.refresh_button)
        layout.addLayout(top)
        self.model = ColumnTableModel()
        self.proxy = ColumnFilterProxyModel()
        self.proxy.setSourceModel(self.model)
        self.table = DataTableView(self.proxy, "key history")
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_changed)
        layout.addWidget(self.table, 1)

    def set_loading(self, text: str) -> None:
        self.title.setText(text)

    def clear_history(self, message: str) -> None:
        self._versions = []
        self.model.clear()
        self.title.setText(message)

    def set_history(
        self,
        title: str,
        headers: Sequence[str],
        columns: Sequence[Sequence[str]],
        sort_keys: Sequence[Sequence[Any]],
        versions: Sequence[int],
        changes: Sequence[str],
    ) -> None:
        """Show a history: one row per version (``versions[i]``, ``changes[i]`` for row ``i``)."""
        self._versions = list(versions)
        background = [CHANGE_COLORS.get(c) for c in changes]
        self.model.set_columns(headers, columns, sort_keys, background)
        self.title.setText(title)
        self.table.fit_columns(300)

    def rows(self) -> int:
        return self.model.total_rows()

    def _on_table_current_changed(self, current: Any, _previous: Any) -> None:
        if not current.isValid():
            return
        src = self.model.source_row(self.proxy.mapToSource(current).row())
        if 0 <= src < len(self._versions):
            self.version_selected.emit(self._versions[src])

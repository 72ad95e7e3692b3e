"""The SQL tab: a DuckDB query over the checkpoint's tables, and its answer as a table.

The app runs the query in a worker (it may decode a whole store) and hands over display columns; this
view only edits the query, offers examples, picks the store the ``state``/``changes`` tables read, and
shows the answer or the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from statelens.viewers.stores import StoreKey, fill_store_combo
from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView

TABLES_HELP = (
    "SHOW TABLES lists the tables, DESCRIBE state the columns of one. Tables: batches (the timeline), growth (rows and bytes per store, version, partition), "
    "state (the picked store's rows at its latest version: partition_id, key, value), "
    "changes (its change feed), expired (timed-out keys never removed). Ctrl+Enter runs the query."
)


class SqlView(QWidget):
    """Query editor, examples, store picker and the answer.

    Signals
    -------
    run_requested(str query, object store, bool in_spark)
        Run ``query``; ``store`` is the picked ``(operator_id, store_name)`` or None; ``in_spark``: as
        Spark SQL where Spark runs (the toolbar's Spark master or Connect endpoint), not in DuckDB.
    """

    run_requested = Signal(str, object, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._examples: list[tuple[str, str]] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(QLabel("Examples:"))
        self.examples_combo = QComboBox()
        self.examples_combo.setMinimumContentsLength(28)
        self.examples_combo.activated.connect(self._on_examples_combo_activated)
        top.addWidget(self.examples_combo)
        top.addSpacing(12)
        top.addWidget(QLabel("Store (state, changes):"))
        self.store_combo = QComboBox()
        self.store_combo.setMinimumContentsLength(30)
        top.addWidget(self.store_combo)
        top.addStretch(1)
        self.spark_check = QCheckBox("In Spark")
        self.spark_check.setToolTip(
            "Run the query as Spark SQL where Spark runs (the toolbar's Spark master or sc:// endpoint): "
            "state and changes are read there and never come to this app; at most 1,000,000 answer rows "
            "come back. Unchecked: DuckDB here, over the decoded state."
        )
        top.addWidget(self.spark_check)
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Run the query (Ctrl+Enter)")
        self.run_button.clicked.connect(self.request_run)
        top.addWidget(self.run_button)
        layout.addLayout(top)

        splitter = QSplitter(Qt.Orientation.Vertical)
        self.editor = QPlainTextEdit()
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.editor.setPlaceholderText("SELECT ... FROM batches | growth | state | changes | expired")
        self.editor.setToolTip(TABLES_HELP)
        # The tables and their columns beside the editor; a double-click writes a name into the query.
        self.tables_tree = QTreeWidget()
        self.tables_tree.setHeaderLabels(["table / column", "type"])
        self.tables_tree.setToolTip(
            "The tables a query may use (SHOW TABLES, DESCRIBE state). Double-click a name to insert it."
        )
        self.tables_tree.itemDoubleClicked.connect(self._on_tables_tree_double_clicked)
        editor_row = QSplitter(Qt.Orientation.Horizontal)
        editor_row.addWidget(self.editor)
        editor_row.addWidget(self.tables_tree)
        editor_row.setStretchFactor(0, 3)
        editor_row.setStretchFactor(1, 1)
        editor_row.setSizes([900, 420])
        splitter.addWidget(editor_row)
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel(TABLES_HELP)
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bl.addWidget(self.status)
        self.model = ColumnTableModel()
        self.proxy = ColumnFilterProxyModel()
        self.proxy.setSourceModel(self.model)
        self.table = DataTableView(self.proxy, "query answer")
        bl.addWidget(self.table, 1)
        splitter.addWidget(bottom)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setSizes([300, 450])  # room for the tables' list beside the editor
        layout.addWidget(splitter, 1)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self.editor, activated=self.request_run)

    # -- inputs --------------------------------------------------------------------------------------
    def set_examples(self, examples: Sequence[tuple[str, str]]) -> None:
        """Offer ``(title, query)`` examples; the editor starts with the first when it is empty."""
        self._examples = list(examples)
        self.examples_combo.clear()
        for title, _ in self._examples:
            self.examples_combo.addItem(title)
        if self._examples and not self.editor.toPlainText().strip():
            self.editor.setPlainText(self._examples[0][1])

    def set_stores(
        self,
        stores: Sequence[tuple[int, str, str]],
        groups: Mapping[StoreKey, str] | None = None,
        tips: Mapping[StoreKey, str] | None = None,
    ) -> None:
        """The stores ``state`` and ``changes`` may read: ``(operator_id, store_name, label)``."""
        fill_store_combo(self.store_combo, stores, groups, tips)
        for i in range(self.store_combo.count()):
            if self.store_combo.itemData(i) is not None:
                self.store_combo.setCurrentIndex(i)
                break

    def set_tables(self, columns: Mapping[str, Sequence[tuple[str, str]]], note: str = "") -> None:
        """List the tables and their ``(column, type)``; ``note`` says why a table is missing."""
        self.tables_tree.clear()
        for table, cols in columns.items():
            top = QTreeWidgetItem([table, f"{len(cols)} columns"])
            font = top.font(0)
            font.setBold(True)
            top.setFont(0, font)
            for name, kind in cols:
                child = QTreeWidgetItem([name, kind])
                child.setToolTip(1, kind)
                top.addChild(child)
            self.tables_tree.addTopLevelItem(top)
        if note:
            item = QTreeWidgetItem([note, ""])
            item.setToolTip(0, note)
            self.tables_tree.addTopLevelItem(item)
        self.tables_tree.expandAll()
        self.tables_tree.resizeColumnToContents(0)

    def tables(self) -> dict[str, list[tuple[str, str]]]:
        """The listed tables and their columns, as shown."""
        out: dict[str, list[tuple[str, str]]] = {}
        for i in range(self.tables_tree.topLevelItemCount()):
            top = self.tables_tree.topLevelItem(i)
            if top.childCount():
                out[top.text(0)] = [
                    (top.child(j).text(0), top.child(j).text(1)) for j in range(top.childCount())
                ]
        return out

    def _on_tables_tree_double_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        if item.childCount() or item.parent() is not None:
            self.editor.insertPlainText(item.text(0))
            self.editor.setFocus()

    def query(self) -> str:
        return self.editor.toPlainText()

    def set_query(self, text: str) -> None:
        self.editor.setPlainText(text)

    def store(self) -> StoreKey | None:
        data = self.store_combo.currentData()
        return (int(data[0]), str(data[1])) if data is not None else None

    def request_run(self) -> None:
        """Ask the app to run the query in the editor."""
        text = self.query().strip()
        if text:
            self.run_requested.emit(text, self.store(), self.spark_check.isChecked())

    # -- the answer ----------------------------------------------------------------------------------
    def set_running(self, text: str) -> None:
        self.status.setText(text)
        self.run_button.setEnabled(False)

    def set_answer(self, headers: Sequence[str], columns: Sequence[Sequence[str]], status: str) -> None:
        """Show an answer: display text per column (numbers sort as numbers)."""
        sort_keys = [_sort_keys(col) for col in columns]
        self.model.set_columns(list(headers), list(columns), sort_keys)
        self.table.fit_columns(420)
        self.status.setText(status)
        self.run_button.setEnabled(True)

    def set_error(self, message: str) -> None:
        """Show why the query could not run (the last answer stays below)."""
        self.status.setText(message)
        self.run_button.setEnabled(True)

    def rows(self) -> int:
        return self.model.total_rows()

    def _on_examples_combo_activated(self, index: int) -> None:
        if 0 <= index < len(self._examples):
            self.editor.setPlainText(self._examples[index][1])


def _sort_keys(column: Sequence[str]) -> Sequence[Any]:
    """Numbers when every non-empty cell is one (so 10 sorts after 9), else the text."""
    out: list[Any] = []
    for text in column:
        if text == "":
            out.append(None)
            continue
        try:
            out.append(float(text))
        except ValueError:
            return column
    return out

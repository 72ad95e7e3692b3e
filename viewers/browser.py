"""State browser: pick an operator's store, a partition and a version; see its decoded rows.

The rows arrive as lazy display columns (decoding happens in the app's worker); the table is a
paged :class:`~viewers.tables.ColumnTableModel` behind a :class:`~viewers.tables.ColumnFilterProxyModel`.
Large tables sort and filter in a worker (:attr:`StateBrowserView.order_requested`). A second version
can be picked to see the diff (added, changed, removed rows), and the selected key's history asked for.
Keys and values are untrusted: the table and the detail pane show them as plain text only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from statelens.readers.model import OperatorInfo, StoreInfo
from statelens.viewers.stores import fill_store_combo
from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView, QueryTableModel

#: Milliseconds between the last key press in the filter and filtering.
FILTER_DELAY_MS = 150

#: A key selected elsewhere is looked for among at most this many rows (the scan runs on the GUI thread).
KEY_SCAN_ROWS = 300_000


#: Diff row backgrounds (translucent: readable on light and dark palettes).
CHANGE_COLORS = {
    "added": QColor(16, 185, 129, 60),
    "changed": QColor(59, 130, 246, 50),
    "removed": QColor(239, 68, 68, 60),
}


class _ChangeColors(Sequence[QColor | None]):
    """Row backgrounds of a diff, looked up from its ``change`` column when a row is drawn."""

    def __init__(self, changes: Sequence[str]):
        self._changes = changes

    def __len__(self) -> int:
        return len(self._changes)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [CHANGE_COLORS.get(c) for c in self._changes[i]]
        return CHANGE_COLORS.get(self._changes[i])


def store_label(op: OperatorInfo, store: StoreInfo, role: Any = None) -> str:
    """``operator 0 · aggregation · default`` (plus the provider when it is not HDFS).

    ``role`` (an ``app.session.StoreRole``, or anything with ``text`` and ``column_family_of``) says what
    the store holds: ``operator 0 · transformWithState · cnt · ValueState``, ``… · $ttl_ttlv · internal:
    TTL index of ttlv``. A column family's provider is not repeated (always RocksDB).
    """
    text = f"operator {op.operator_id} · {op.kind.value} · {store.store_name}"
    if role is not None:
        text = f"{text} · {role.text}"
        if getattr(role, "column_family_of", None):
            return text
    return text if store.provider == "hdfs" else f"{text} ({store.provider})"


class StateBrowserView(QWidget):
    """Decoded state rows of one store, partition and version.

    Parameters
    ----------
    selection : object, optional
        The shared selection; the pickers follow its operator, store, partition and version.

    Signals
    -------
    store_selected(int operator_id, str store_name)
    partition_selected(object partition_id)
        An int, or None for every partition.
    version_selected(int version)
    key_selected(int partition_id, object key)
        The partition and key (an opaque object from :meth:`set_table`) of the row the user selected.
    compare_selected(object version)
        The version to diff against (an int), or None to show plain rows.
    history_requested()
        The user asked for the selected key's history.
    order_requested(int column, bool descending, str needle)
        A large table needs sorting/filtering in a worker; answer with :meth:`apply_order` (or, for
        a table shown with :meth:`set_query_table`, with :meth:`apply_result`).
    page_requested(int column, bool descending, str needle, int offset)
        A table shown with :meth:`set_query_table` needs a page; answer with :meth:`add_page`.
    locate_requested(int partition_id, object key)
        Where a key selected elsewhere stands in a query table; answer with :meth:`show_query_row`.
    """

    store_selected = Signal(int, str)
    partition_selected = Signal(object)
    version_selected = Signal(int)
    key_selected = Signal(int, object)
    compare_selected = Signal(object)
    history_requested = Signal()
    order_requested = Signal(int, bool, str)
    page_requested = Signal(int, bool, str, int)
    locate_requested = Signal(int, object)

    def __init__(self, selection: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._stores: dict[tuple[int, str], StoreInfo] = {}
        self._combo_index: dict[tuple[int, str], int] = {}
        self._keys: Sequence[Any] = []
        self._partitions: Sequence[int] = []
        self._syncing = False
        self._selecting_key = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        pickers = QHBoxLayout()
        pickers.addWidget(QLabel("Store:"))
        self.store_combo = QComboBox()
        self.store_combo.setMinimumContentsLength(32)
        self.store_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.store_combo.activated.connect(self._on_store_combo_activated)
        pickers.addWidget(self.store_combo)
        pickers.addSpacing(12)
        pickers.addWidget(QLabel("Partition:"))
        self.partition_combo = QComboBox()
        self.partition_combo.setMinimumContentsLength(12)
        self.partition_combo.activated.connect(self._on_partition_combo_activated)
        pickers.addWidget(self.partition_combo)
        pickers.addSpacing(12)
        pickers.addWidget(QLabel("Version:"))
        self.version_combo = QComboBox()
        self.version_combo.setMinimumContentsLength(18)
        self.version_combo.activated.connect(self._on_version_combo_activated)
        pickers.addWidget(self.version_combo)
        pickers.addSpacing(12)
        pickers.addWidget(QLabel("Compare with:"))
        self.compare_combo = QComboBox()
        self.compare_combo.setMinimumContentsLength(18)
        self.compare_combo.setToolTip("Show the rows added, changed and removed since another version")
        self.compare_combo.activated.connect(self._on_compare_combo_activated)
        pickers.addWidget(self.compare_combo)
        pickers.addStretch(1)
        self.history_button = QPushButton("Key history")
        self.history_button.setToolTip("The selected row's key across every version of its partition")
        self.history_button.setEnabled(False)
        self.history_button.clicked.connect(self.history_requested.emit)
        pickers.addWidget(self.history_button)
        layout.addLayout(pickers)

        filters = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter rows: text in any column (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter_edit.textChanged.connect(self._on_filter_edit_text_changed)
        filters.addWidget(self.filter_edit, 1)
        self.count_label = QLabel("")
        self.count_label.setTextFormat(Qt.TextFormat.PlainText)
        filters.addWidget(self.count_label)
        layout.addLayout(filters)

        splitter = QSplitter(Qt.Orientation.Vertical)
        self.column_model = ColumnTableModel()
        self.column_model.bold_highlights = False
        self.column_model.order_requested.connect(self._on_model_order_requested)
        self.query_model = QueryTableModel()
        self.query_model.order_requested.connect(self._on_model_order_requested)
        self.query_model.page_requested.connect(self._on_query_page_requested)
        self.model: ColumnTableModel = self.column_model  # the one shown
        self._fit_pending = False
        self._pending_row: int | None = None  # a located row to select once its page is read
        self.proxy = ColumnFilterProxyModel()
        self.proxy.setSourceModel(self.model)
        self.table = DataTableView(self.proxy, "state rows")
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_changed)
        self.table.clicked.connect(self._on_table_clicked)
        splitter.addWidget(self.table)
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        self.detail.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.detail.setPlaceholderText("Select a row to see its full key and value.")
        splitter.addWidget(self.detail)
        splitter.setSizes([600, 140])
        layout.addWidget(splitter, 1)

        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)

        self._selection = selection
        if selection is not None:
            selection.connect(self._on_selection_changed)
            cb = self._on_selection_changed
            self.destroyed.connect(lambda *_: selection.disconnect(cb))

    # -- pickers -------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.set_operators([])
        self.clear_table("")

    def set_operators(
        self,
        operators: Sequence[OperatorInfo],
        roles: Mapping[tuple[int, str], Any] | None = None,
        groups: Mapping[tuple[int, str], str] | None = None,
        order: Sequence[tuple[int, str]] = (),
    ) -> None:
        """The stores to browse; ``roles`` (``app.session.StoreRole`` per store) label them and give
        their tooltips, ``groups`` group them in the picker (see :func:`viewers.stores.fill_store_combo`),
        ``order`` lists them in the picker's order (stores not in it last, in the operators' order)."""
        self._stores = {}
        items = []
        tips = {}
        for op in operators:
            for s in op.stores:
                key = (op.operator_id, s.store_name)
                self._stores[key] = s
                role = roles.get(key) if roles else None
                items.append((op.operator_id, s.store_name, store_label(op, s, role)))
                if role is not None:
                    tips[key] = role.description
        rank = {key: i for i, key in enumerate(order)}
        items.sort(key=lambda item: rank.get((item[0], item[1]), len(rank)))
        self._combo_index = fill_store_combo(self.store_combo, items, groups, tips)
        if not self._stores:
            self.partition_combo.clear()
            self.version_combo.clear()
            self.clear_table("This checkpoint has no state stores to browse.")

    def show_selection(
        self, operator_id: int | None, store_name: str | None, partition_id: int | None, version: int | None
    ) -> None:
        """Point the pickers at a store, partition and version without emitting signals."""
        self._syncing = True
        try:
            key = (operator_id, store_name)
            if key in self._stores:
                self.store_combo.setCurrentIndex(self._combo_index[key])  # type: ignore[index]
                store = self._stores[key]  # type: ignore[index]
                self._fill_partitions(store)
                self._fill_versions(store, version)
            idx = self.partition_combo.findData(-1 if partition_id is None else partition_id)
            if idx >= 0:
                self.partition_combo.setCurrentIndex(idx)
            self._fill_compare(version)
        finally:
            self._syncing = False

    def _fill_partitions(self, store: StoreInfo) -> None:
        current = self.partition_combo.currentData()
        self.partition_combo.clear()
        self.partition_combo.addItem(f"all ({len(store.partitions)})", -1)
        for pid in store.partitions:
            self.partition_combo.addItem(str(pid), pid)
        idx = self.partition_combo.findData(current)
        self.partition_combo.setCurrentIndex(max(idx, 0))

    def _fill_versions(self, store: StoreInfo, version: int | None) -> None:
        self.version_combo.clear()
        versions = list(store.versions)
        for v in reversed(versions):
            self.version_combo.addItem(f"{v} (after batch {v - 1})" if v else "0 (empty)", v)
        if version is not None and version not in versions:
            self.version_combo.insertItem(0, f"{version} (not readable)", version)
        idx = self.version_combo.findData(version) if version is not None else 0
        self.version_combo.setCurrentIndex(max(idx, 0))

    def _fill_compare(self, version: int | None) -> None:
        current = self.compare_combo.currentData()
        self.compare_combo.clear()
        self.compare_combo.addItem("— (no diff)", -1)
        others = [self.version_combo.itemData(i) for i in range(self.version_combo.count())]
        if version not in (0, None) and 0 not in others:
            others.append(0)
        for v in others:
            if v is not None and v != version:
                self.compare_combo.addItem(f"version {v}" if v else "version 0 (empty)", v)
        idx = self.compare_combo.findData(current) if current is not None else 0
        self.compare_combo.setCurrentIndex(max(idx, 0))

    def compare_version(self) -> int | None:
        """The version picked to diff against, or None."""
        v = self.compare_combo.currentData()
        return None if v is None or v == -1 else int(v)

    def set_compare_version(self, version: int | None) -> None:
        """Pick the version to diff against (None: plain rows) and emit :attr:`compare_selected`."""
        idx = self.compare_combo.findData(-1 if version is None else version)
        if idx < 0:
            self.compare_combo.addItem(f"version {version}", version)
            idx = self.compare_combo.count() - 1
        self.compare_combo.setCurrentIndex(idx)
        self.compare_selected.emit(version)

    # -- table ---------------------------------------------------------------------------------------
    def set_loading(self, text: str) -> None:
        """Say that rows are being decoded (the old rows stay until the new ones arrive)."""
        self.status.setText(text)

    def clear_table(self, message: str) -> None:
        """Empty the table and show ``message`` (e.g. why the version cannot be read)."""
        self._keys = []
        self._partitions = []
        self.model.clear()
        self.detail.clear()
        self.history_button.setEnabled(False)
        self.count_label.setText("")
        self.status.setText(message)

    def _use_model(self, model: ColumnTableModel) -> None:
        if self.model is not model:
            self.model.clear()
            self.model = model
            self.proxy.setSourceModel(model)

    def set_table(
        self,
        headers: Sequence[str],
        columns: Sequence[Sequence[str]],
        sort_keys: Sequence[Sequence[Any]],
        keys: Sequence[Any],
        status: str,
        partitions: Sequence[int] = (),
    ) -> None:
        """Show decoded rows: display text per column, and per row its key and partition (for
        :attr:`key_selected`; sequences are read on demand, never copied)."""
        self._use_model(self.column_model)
        self._keys = keys
        self._partitions = partitions
        self.detail.clear()
        self.history_button.setEnabled(False)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        # A diff (first column "change") gets a background per kind of change.
        background = _ChangeColors(columns[0]) if headers and headers[0] == "change" else None
        self.model.set_columns(headers, columns, sort_keys, background)
        self.proxy.set_filter_text(self.filter_edit.text())
        self.proxy.invalidate()
        header = self.table.horizontalHeader()
        metrics = self.table.fontMetrics()
        cap = max(360, self.table.viewport().width() // 2)
        for col, name in enumerate(headers):
            sample = [name, *columns[col][:200]]
            width = max(metrics.horizontalAdvance(s) for s in sample) + 24
            header.resizeSection(col, min(max(width, 60), cap))
        self.status.setText(status)
        self._update_count()
        if self._selection is not None and self._selection.key is not None:
            self.select_key(self._selection.key, self._selection.key_partition_id)

    def set_query_table(
        self, headers: Sequence[str], right_aligned: Sequence[bool], total: int, status: str
    ) -> None:
        """Show a table too large to hold: its rows come from a database a page at a time (the first
        page is asked for at once through :attr:`order_requested`, the next ones through
        :attr:`page_requested`)."""
        self._use_model(self.query_model)
        self.query_model.first_column_colors = CHANGE_COLORS if headers and headers[0] == "change" else None
        self._keys = []
        self._partitions = []
        self.detail.clear()
        self.history_button.setEnabled(False)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.status.setText(status)
        self._fit_pending = True
        self.query_model.set_query(headers, right_aligned, total, self.filter_edit.text())

    def apply_result(self, column: int, descending: bool, needle: str, matching: int, page: Any) -> None:
        """Show the first page of a query table's sorted/filtered rows (answer to :attr:`order_requested`)."""
        if self.model is not self.query_model:
            return
        self._pending_row = None
        self.query_model.set_result(column, descending, needle, matching, page)
        if self._fit_pending and len(page):
            self._fit_pending = False
            header = self.table.horizontalHeader()
            metrics = self.table.fontMetrics()
            cap = max(360, self.table.viewport().width() // 2)
            for col, name in enumerate(self.query_model.headers()):
                sample = [name, *page.texts[col][:200]]
                width = max(metrics.horizontalAdvance(s) for s in sample) + 24
                header.resizeSection(col, min(max(width, 60), cap))
        self._update_count()
        if self._selection is not None and self._selection.key is not None:
            self.select_key(self._selection.key, self._selection.key_partition_id)

    def add_page(self, column: int, descending: bool, needle: str, page: Any) -> None:
        """A page of a query table (answer to :attr:`page_requested`)."""
        if self.model is not self.query_model:
            return
        self.query_model.add_page(column, descending, needle, page)
        row = self._pending_row
        if row is not None and self.query_model.is_loaded(row):
            self._pending_row = None
            self._select_source_row(row)
        self.table.viewport().update()  # rows shown whose page was given up on ask again

    def forget_page_requests(self, offsets: Sequence[int]) -> None:
        """Pages of a query table no longer waited for (scrolled past)."""
        self.query_model.forget_requests(offsets)

    def _key_of(self, src: int) -> tuple[int, Any] | None:
        """``(partition, key)`` of the row at source position ``src`` (None when out of range)."""
        if self.model is self.query_model:
            if not 0 <= src < self.query_model.rowCount() or not self.query_model.is_loaded(src):
                return None
            pid = self.query_model.partition_at(src)
            return (-1 if pid is None else pid), self.query_model.key_at(src)
        if not 0 <= src < len(self._keys):
            return None
        return (int(self._partitions[src]) if self._partitions else -1), self._keys[src]

    def apply_order(self, column: int, descending: bool, needle: str, rows: Any) -> None:
        """Show the rows a worker sorted/filtered (answer to :attr:`order_requested`)."""
        self.model.set_row_order(column, descending, needle, rows)
        self._update_count()

    def select_key(self, key: Any, partition_id: int | None = None) -> bool:
        """Select the row holding ``key`` (in ``partition_id`` when given) without emitting; True if found.

        Only the first :data:`KEY_SCAN_ROWS` rows are searched (keys are compared one by one). In a table
        shown with :meth:`set_query_table`, the pages read so far are searched; when the key is not there
        (and its partition is known) :attr:`locate_requested` asks where it stands in the whole table,
        answered by :meth:`show_query_row`.
        """
        if self.model is self.query_model:
            self._pending_row = None
            for src in self.query_model.loaded_rows():
                if self.query_model.key_at(src) == key and (
                    partition_id is None or self.query_model.partition_at(src) == partition_id
                ):
                    self._select_source_row(src)
                    return True
            if partition_id is not None and partition_id >= 0:
                self.locate_requested.emit(int(partition_id), key)
            return False
        n = min(len(self._keys), KEY_SCAN_ROWS)
        for src in range(n):
            if (
                partition_id is None or not self._partitions or self._partitions[src] == partition_id
            ) and self._keys[src] == key:
                return self._select_source_row(src)
        return False

    def show_query_row(self, row: int) -> None:
        """Scroll a query table to ``row`` (where :attr:`locate_requested`'s key stands) and select it once
        its page is read."""
        if self.model is not self.query_model or not 0 <= row < self.query_model.rowCount():
            return
        self.table.scrollTo(self.proxy.mapFromSource(self.model.index(row, 0)))
        if self.query_model.is_loaded(row):
            self._select_source_row(row)
        else:
            self._pending_row = row
            self.query_model.key_at(row)  # asks for its page

    def _select_source_row(self, src: int) -> bool:
        row = self.model.row_of_source(src)
        if row < 0:
            return False
        index = self.proxy.mapFromSource(self.model.index(row, 0))
        self._selecting_key = True
        try:
            self.table.selectRow(index.row())
            self.table.scrollTo(index)
        finally:
            self._selecting_key = False
        return True

    def selected_key(self) -> tuple[int, Any] | None:
        """``(partition_id, key)`` of the current row, or None."""
        index = self.table.currentIndex()
        if not index.isValid():
            return None
        return self._key_of(self.model.source_row(self.proxy.mapToSource(index).row()))

    def visible_rows(self) -> int:
        """Rows that pass the filter (all pages)."""
        return self.model.matching_rows()

    def focus_filter(self) -> None:
        """Put the cursor in the filter box (Ctrl+F)."""
        self.filter_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.filter_edit.selectAll()

    def apply_filter(self) -> None:
        """Filter now (normally done shortly after the last key press)."""
        self._filter_timer.stop()
        self.proxy.set_filter_text(self.filter_edit.text())
        self._update_count()

    def _update_count(self) -> None:
        total = self.model.total_rows()
        matching = self.model.matching_rows()
        noun = "row" if total == 1 else "rows"
        text = f"{matching:,} of {total:,} {noun}" if matching != total else f"{total:,} {noun}"
        if self.model.rowCount() < matching:
            text += f" (first {self.model.rowCount():,} loaded; scroll for more)"
        self.count_label.setText(text)

    # -- signals -------------------------------------------------------------------------------------
    def _on_filter_edit_text_changed(self, _text: str) -> None:
        self._filter_timer.start()

    def _on_model_order_requested(self, column: int, descending: bool, needle: str) -> None:
        what = "Filtering" if needle != self.model.filter_text() else "Sorting"
        self.count_label.setText(f"{what} {self.model.total_rows():,} rows…")
        self.order_requested.emit(column, descending, needle)

    def _on_query_page_requested(self, offset: int) -> None:
        column, descending = self.query_model.sort_state()
        self.page_requested.emit(column, descending, self.query_model.filter_text(), offset)

    def _on_compare_combo_activated(self, index: int) -> None:
        v = self.compare_combo.itemData(index)
        if v is not None and not self._syncing:
            self.compare_selected.emit(None if v == -1 else int(v))

    def _on_store_combo_activated(self, index: int) -> None:
        key = self.store_combo.itemData(index)
        if key is None or self._syncing:
            return
        store = self._stores[tuple(key)]
        self._fill_partitions(store)
        self._fill_versions(store, store.versions[-1] if store.versions else None)
        self.store_selected.emit(int(key[0]), str(key[1]))

    def _on_partition_combo_activated(self, index: int) -> None:
        pid = self.partition_combo.itemData(index)
        if pid is not None and not self._syncing:
            self.partition_selected.emit(None if pid == -1 else int(pid))

    def _on_version_combo_activated(self, index: int) -> None:
        version = self.version_combo.itemData(index)
        if version is not None and not self._syncing:
            self.version_selected.emit(int(version))

    def _on_table_current_changed(self, current: Any, _previous: Any) -> None:
        if not current.isValid():
            return
        row = self.proxy.mapToSource(current).row()
        texts = self.model.row_texts(row)
        width = max((len(h) for h in self.model.headers()), default=0)
        self.detail.setPlainText(
            "\n".join(f"{h.ljust(width)}  {t}" for h, t in zip(self.model.headers(), texts, strict=True))
        )
        picked = self._key_of(self.model.source_row(row))
        if picked is not None:
            self.history_button.setEnabled(True)
            if not self._selecting_key:
                self.key_selected.emit(*picked)

    def _on_table_clicked(self, index: Any) -> None:
        # A click on the current row (selected from another view) still picks its key.
        picked = self.selected_key() if index.isValid() else None
        if picked is not None:
            self.key_selected.emit(*picked)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if "key" in changes or "key_partition_id" in changes:
            s = self._selection
            if s.key is not None:
                self.select_key(s.key, s.key_partition_id)
        if {"operator_id", "store_name", "partition_id", "version"} & set(changes):
            s = self._selection
            self.show_selection(s.operator_id, s.store_name, s.partition_id, s.version)

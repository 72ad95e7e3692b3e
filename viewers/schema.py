"""Schemas and conf: each store's key and value schema as a tree, schema files across versions, and
the session conf pinned in each batch's offsets file with the changes between batches highlighted.

Field names are shown as stored, repeats included (aggregation buffers hold ``sum, sum, count``).
Schemas arrive as :class:`readers.model.StoreSchema` (Spark ``StructType`` objects, walked by their
``fields``/``dataType`` attributes); the conf as :class:`readers.model.BatchInfo`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QLabel,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from statelens.readers.model import BatchInfo, StoreSchema
from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView

#: Translucent highlight of changed conf keys and schema files with changes (light and dark palettes).
CHANGED_ROW = QColor(245, 158, 11, 80)


def type_text(dtype: Any) -> str:
    """Short type text: ``long``, ``struct (3 fields)``, ``array<string>``, ``map<string,struct>``."""
    fields = getattr(dtype, "fields", None)
    if fields is not None:
        return f"struct ({len(fields)} field{'s' if len(fields) != 1 else ''})"
    element = getattr(dtype, "elementType", None)
    if element is not None:
        return f"array<{_inner(element)}>"
    key, value = getattr(dtype, "keyType", None), getattr(dtype, "valueType", None)
    if key is not None and value is not None:
        return f"map<{_inner(key)},{_inner(value)}>"
    try:
        return str(dtype.simpleString())
    except AttributeError:
        return str(dtype)


def encoder_text(encoder: Mapping[str, Any]) -> str:
    """``PrefixKeyScan (numColsPrefixKey 1)`` for a v3 schema's key encoder spec (``NoPrefix``...)."""
    kind = str(encoder.get("keyStateEncoderType", ""))
    for suffix in ("KeyStateEncoderSpec", "StateEncoderSpec"):
        if kind.endswith(suffix):
            kind = kind[: -len(suffix)]
            break
    rest = ", ".join(f"{k} {v}" for k, v in encoder.items() if k != "keyStateEncoderType")
    return f"{kind} ({rest})" if rest else kind or str(dict(encoder))


def _inner(dtype: Any) -> str:
    return "struct" if getattr(dtype, "fields", None) is not None else type_text(dtype)


class SchemaConfView(QWidget):
    """Key/value schemas per store, schema files over time, and the session conf per batch.

    Parameters
    ----------
    selection : object, optional
        The shared selection; its store is selected in the tree, its batch in the conf table.

    Signals
    -------
    batch_selected(int batch_id)
    store_selected(int operator_id, str store_name)
    """

    batch_selected = Signal(int)
    store_selected = Signal(int, str)

    CONF_HEADERS = ("key", "value", "before (previous batch)")
    BATCH_HEADERS = ("batch", "conf keys", "changed from the previous batch")
    FILE_HEADERS = ("store", "from batch", "schema file", "changes from the previous file")

    def __init__(self, selection: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store_items: dict[tuple[int, str], QTreeWidgetItem] = {}
        self._batches: list[BatchInfo] = []
        self._batch_ids: list[int] = []
        self._changes: dict[int, dict[str, tuple[str | None, str | None]]] = {}
        self._syncing = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        splitter = QSplitter(Qt.Orientation.Horizontal)

        left = QSplitter(Qt.Orientation.Vertical)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(3)
        self.tree.setHeaderLabels(["field", "type", "nullable"])
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.currentItemChanged.connect(self._on_tree_current_changed)
        left.addWidget(
            _group("State schemas (key and value of each store; field names as stored)", self.tree)
        )
        self.file_model = ColumnTableModel()
        self.file_table = DataTableView(self.file_model, "schema files")
        left.addWidget(_group("Schema files across versions", self.file_table))
        left.setSizes([520, 200])
        splitter.addWidget(left)

        right = QSplitter(Qt.Orientation.Vertical)
        self.batch_model = ColumnTableModel()
        self.batch_proxy = ColumnFilterProxyModel()
        self.batch_proxy.setSourceModel(self.batch_model)
        self.batch_table = DataTableView(self.batch_proxy, "conf changes per batch")
        self.batch_table.verticalHeader().setVisible(False)
        self.batch_table.selectionModel().currentRowChanged.connect(self._on_batch_table_current_changed)
        right.addWidget(_group("Batches (conf changes highlighted)", self.batch_table))
        self.conf_box = QGroupBox("Session conf")
        conf_layout = QVBoxLayout(self.conf_box)
        conf_layout.setContentsMargins(4, 4, 4, 4)
        self.conf_note = QLabel("Select a batch to see the session conf its offsets file pinned.")
        self.conf_note.setTextFormat(Qt.TextFormat.PlainText)
        self.conf_note.setWordWrap(True)
        conf_layout.addWidget(self.conf_note)
        self.conf_model = ColumnTableModel()
        self.conf_table = DataTableView(self.conf_model, "session conf")
        self.conf_table.verticalHeader().setVisible(False)
        conf_layout.addWidget(self.conf_table, 1)
        right.addWidget(self.conf_box)
        right.setSizes([260, 460])
        splitter.addWidget(right)
        splitter.setSizes([690, 690])
        layout.addWidget(splitter, 1)

        self._selection = selection
        if selection is not None:
            selection.connect(self._on_selection_changed)
            cb = self._on_selection_changed
            self.destroyed.connect(lambda *_: selection.disconnect(cb))

    # -- schemas -------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.set_schemas([], [])
        self.set_conf([], {})

    def set_schemas(
        self,
        stores: Sequence[tuple[int, str, str, StoreSchema | None]],
        files: Sequence[tuple[str, int | None, str, Sequence[str]]],
        tips: Mapping[tuple[int, str], str] | None = None,
    ) -> None:
        """Stores ``(operator_id, store_name, label, schema)`` and schema files
        ``(store label, from batch, path, changes)``, oldest first per store; ``tips`` are plain-text
        tooltips of the stores (what a transformWithState variable or join store holds)."""
        self.tree.clear()
        self._store_items = {}
        for op, name, label, schema in stores:
            top = QTreeWidgetItem([label, "", ""])
            top.setData(0, Qt.ItemDataRole.UserRole, (op, name))
            font = top.font(0)
            font.setBold(True)
            top.setFont(0, font)
            self.tree.addTopLevelItem(top)
            top.setFirstColumnSpanned(True)  # long store labels read in full
            self._store_items[(op, name)] = top
            if schema is None:
                top.addChild(QTreeWidgetItem(["(no schema file: rows cannot be decoded)", "", ""]))
                continue
            for side, struct in (("key", schema.key_schema), ("value", schema.value_schema)):
                node = QTreeWidgetItem([side, type_text(struct), ""])
                top.addChild(node)
                _add_fields(node, struct)
            if schema.key_encoder:
                item = QTreeWidgetItem(["key encoder", encoder_text(schema.key_encoder), ""])
                item.setToolTip(1, str(schema.key_encoder))
                top.addChild(item)
            if tips and tips.get((op, name)):
                top.setToolTip(0, tips[(op, name)])
            top.setText(0, f"{label}  (schema format v{schema.schema_version})")
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        self.tree.setColumnWidth(0, min(max(self.tree.columnWidth(0), 220), 300))
        self.tree.setColumnWidth(1, 250)  # key encoders: "PrefixKeyScan (numColsPrefixKey 1)"

        cols: list[list[str]] = [[], [], [], []]
        background: list[QColor | None] = []
        for label, batch, path, changes in files:
            cols[0].append(label)
            cols[1].append("every batch" if batch is None else str(batch))
            cols[2].append(path)
            cols[3].append(
                "; ".join(changes)
                if changes
                else "(first file)"
                if batch is not None
                else "one file for every version (format v1/v2 files are never rewritten)"
            )
            background.append(CHANGED_ROW if changes else None)
        self.file_model.set_columns(self.FILE_HEADERS, cols, None, background)
        self.file_table.fit_columns(max_width=260)

    def store_items(self) -> dict[tuple[int, str], QTreeWidgetItem]:
        return dict(self._store_items)

    # -- conf ----------------------------------------------------------------------------------------
    def set_conf(
        self, batches: Sequence[BatchInfo], changes: dict[int, dict[str, tuple[str | None, str | None]]]
    ) -> None:
        """Batches (their offsets files hold the conf) and the keys that changed at each batch."""
        self._batches = [b for b in batches if b.offsets is not None]
        self._batch_ids = [b.batch_id for b in self._batches]
        self._changes = dict(changes)
        ids, counts, changed, background = [], [], [], []
        for b in self._batches:
            diff = changes.get(b.batch_id, {})
            ids.append(str(b.batch_id))
            counts.append(str(len(b.offsets.conf)) if b.offsets is not None else "")
            changed.append(", ".join(f"{k}: {_text(a)} → {_text(c)}" for k, (a, c) in diff.items()))
            background.append(CHANGED_ROW if diff else None)
        self.batch_model.set_columns(
            self.BATCH_HEADERS,
            [ids, counts, changed],
            [self._batch_ids, [len(b.offsets.conf) for b in self._batches if b.offsets], changed],
            background,
        )
        header = self.batch_table.horizontalHeader()
        for col, width in enumerate((70, 80)):
            header.resizeSection(col, width)
        n = len(changes)
        self.conf_note.setText(
            f"{n} batch{'es' if n != 1 else ''} changed the conf; select a batch to see its conf."
            if n
            else "The conf is the same in every batch; select a batch to see it."
        )
        if self._batches:
            self.show_conf(self._batches[-1].batch_id)

    def show_conf(self, batch_id: int) -> None:
        """Show the conf of one batch, keys changed since the previous batch highlighted."""
        b = next((x for x in self._batches if x.batch_id == batch_id), None)
        if b is None or b.offsets is None:
            return
        diff = self._changes.get(batch_id, {})
        keys = sorted(set(b.offsets.conf) | set(diff))
        values = [_text(b.offsets.conf.get(k)) for k in keys]
        before = [_text(diff[k][0]) if k in diff else "" for k in keys]
        background = [CHANGED_ROW if k in diff else None for k in keys]
        # The "before" column only when this batch changed something.
        headers = self.CONF_HEADERS if diff else self.CONF_HEADERS[:2]
        cols = [keys, values, before] if diff else [keys, values]
        self.conf_model.set_columns(headers, cols, None, background)
        self.conf_table.resizeColumnsToContents()
        header = self.conf_table.horizontalHeader()
        header.resizeSection(0, min(header.sectionSize(0), 430))
        room = max(self.conf_table.viewport().width() - header.sectionSize(0), 160)
        if diff:
            header.resizeSection(1, min(header.sectionSize(1), room // 2))
            header.resizeSection(2, min(header.sectionSize(2), room - header.sectionSize(1)))
        else:
            header.resizeSection(1, min(header.sectionSize(1), room))
        self.conf_box.setTitle(
            f"Session conf of batch {batch_id} ({b.offsets.path})"
            + (f": {len(diff)} key{'s' if len(diff) != 1 else ''} changed" if diff else "")
        )

    # -- selection -----------------------------------------------------------------------------------
    def show_batch(self, batch_id: int | None) -> None:
        if batch_id is None or batch_id not in self._batch_ids:
            return
        src = self._batch_ids.index(batch_id)
        row = self.batch_model.row_of_source(src)
        if row < 0:
            return
        index = self.batch_proxy.mapFromSource(self.batch_model.index(row, 0))
        self._syncing = True
        try:
            self.batch_table.selectionModel().setCurrentIndex(
                index,
                QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
            )
            self.batch_table.scrollTo(index)
        finally:
            self._syncing = False
        self.show_conf(batch_id)

    def show_store(self, operator_id: int | None, store_name: str | None) -> None:
        item = self._store_items.get((operator_id, store_name))  # type: ignore[arg-type]
        if item is None:
            return
        self._syncing = True
        try:
            self.tree.setCurrentItem(item)
            self.tree.scrollToItem(item)
        finally:
            self._syncing = False

    def _on_batch_table_current_changed(self, current: Any, _previous: Any) -> None:
        if not current.isValid():
            return
        batch_id = self._batch_ids[self.batch_model.source_row(self.batch_proxy.mapToSource(current).row())]
        self.show_conf(batch_id)
        if not self._syncing:
            self.batch_selected.emit(batch_id)

    def _on_tree_current_changed(self, current: QTreeWidgetItem | None, _previous: Any) -> None:
        if current is None or self._syncing:
            return
        top = current
        while (parent := top.parent()) is not None:
            top = parent
        key = top.data(0, Qt.ItemDataRole.UserRole)
        if key is not None:
            self.store_selected.emit(int(key[0]), str(key[1]))

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        s = self._selection
        if "batch_id" in changes:
            self.show_batch(s.batch_id)
        if "operator_id" in changes or "store_name" in changes:
            self.show_store(s.operator_id, s.store_name)


def _text(value: str | None) -> str:
    return "(not set)" if value is None else value


def _group(title: str, widget: QWidget) -> QGroupBox:
    box = QGroupBox(title)
    lay = QVBoxLayout(box)
    lay.setContentsMargins(4, 4, 4, 4)
    lay.addWidget(widget)
    return box


def _add_fields(parent: QTreeWidgetItem, struct: Any) -> None:
    for f in list(getattr(struct, "fields", None) or []):
        dtype = f.dataType
        item = QTreeWidgetItem([f.name, type_text(dtype), "yes" if getattr(f, "nullable", True) else "no"])
        parent.addChild(item)
        if getattr(dtype, "fields", None) is not None:
            _add_fields(item, dtype)
        element = getattr(dtype, "elementType", None)
        if element is not None and getattr(element, "fields", None) is not None:
            node = QTreeWidgetItem(["element", type_text(element), ""])
            item.addChild(node)
            _add_fields(node, element)
        value = getattr(dtype, "valueType", None)
        if value is not None and getattr(value, "fields", None) is not None:
            node = QTreeWidgetItem(["value", type_text(value), ""])
            item.addChild(node)
            _add_fields(node, value)

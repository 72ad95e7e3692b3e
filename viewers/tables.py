"""Qt table models over columns (STYLE §4): cells are served on demand from column lists.

:class:`ColumnTableModel` holds one list of display strings per column plus one list of sort keys;
it sorts itself with numpy (one argsort, not a Python comparison per pair) and
:class:`ColumnFilterProxyModel` filters rows on a case-insensitive substring of any cell. Display text
is plain text: Qt's item views never interpret it as markup, and no tooltip (which would) is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QFont

_Index = QModelIndex | QPersistentModelIndex


class ColumnTableModel(QAbstractTableModel):
    """A read-only table over columns of display text.

    Parameters
    ----------
    headers : sequence of str
    columns : sequence of sequence of str
        One list of display strings per column, all of one length.
    sort_keys : sequence of sequence, optional
        Per column, the values to sort by: numbers (None for null, sorted first) or strings.
        Defaults to the display text.
    row_background : sequence of QColor or None, optional
        A background per row (e.g. uncommitted batches), None for the default.
    """

    def __init__(
        self,
        headers: Sequence[str] = (),
        columns: Sequence[Sequence[str]] = (),
        sort_keys: Sequence[Sequence[Any]] | None = None,
        row_background: Sequence[QColor | None] | None = None,
        parent: Any = None,
    ) -> None:
        super().__init__(parent)
        self._headers: list[str] = []
        self._columns: list[Sequence[str]] = []
        self._sort_keys: list[Sequence[Any]] = []
        self._background: Sequence[QColor | None] | None = None
        self._order = np.zeros(0, dtype=np.int64)
        self._haystack: list[str] | None = None
        self._right: list[bool] = []
        self._bold = QFont()
        self._bold.setBold(True)
        self.set_columns(headers, columns, sort_keys, row_background)

    # -- data ----------------------------------------------------------------------------------------
    def set_columns(
        self,
        headers: Sequence[str],
        columns: Sequence[Sequence[str]],
        sort_keys: Sequence[Sequence[Any]] | None = None,
        row_background: Sequence[QColor | None] | None = None,
    ) -> None:
        """Replace the whole table."""
        lengths = {len(c) for c in columns}
        if len(lengths) > 1:
            raise ValueError(f"columns differ in length: {sorted(lengths)}")
        if len(headers) != len(columns):
            raise ValueError(f"{len(headers)} headers for {len(columns)} columns")
        self.beginResetModel()
        self._headers = list(headers)
        self._columns = list(columns)
        self._sort_keys = list(sort_keys) if sort_keys is not None else list(columns)
        self._background = row_background
        self._order = np.arange(lengths.pop() if lengths else 0, dtype=np.int64)
        self._haystack = None
        self._right = [_is_numeric(k) for k in self._sort_keys]
        self.endResetModel()

    def clear(self) -> None:
        self.set_columns([], [])

    def source_row(self, row: int) -> int:
        """The row's position in the columns given (before sorting)."""
        return int(self._order[row])

    def row_texts(self, row: int) -> list[str]:
        """Display text of every cell of one (sorted) row."""
        r = int(self._order[row])
        return [c[r] for c in self._columns]

    def headers(self) -> list[str]:
        return list(self._headers)

    def haystack(self, row: int) -> str:
        """Lower-cased text of one (sorted) row, for filtering."""
        if self._haystack is None:
            n = len(self._order)
            self._haystack = ["\x1f".join(c[r] for c in self._columns).casefold() for r in range(n)]
        return self._haystack[int(self._order[row])]

    # -- Qt virtuals ---------------------------------------------------------------------------------
    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008 - Qt's default argument
        return 0 if parent.isValid() else len(self._order)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._columns)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r = int(self._order[index.row()])
        if role == Qt.ItemDataRole.DisplayRole:
            return self._columns[index.column()][r]
        if role == Qt.ItemDataRole.TextAlignmentRole and self._right[index.column()]:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.BackgroundRole and self._background is not None:
            color = self._background[r]
            return QBrush(color) if color is not None else None
        if role == Qt.ItemDataRole.FontRole and self._background is not None and self._background[r] is not None:
            return self._bold
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Horizontal:
            return self._headers[section] if 0 <= section < len(self._headers) else None
        return str(section + 1)

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(self._columns):
            return
        self.layoutAboutToBeChanged.emit()
        self._order = _argsort(self._sort_keys[column], descending=order == Qt.SortOrder.DescendingOrder)
        self.layoutChanged.emit()


def _argsort(keys: Sequence[Any], descending: bool) -> np.ndarray:
    """Stable order of ``keys``; numbers numerically with nulls first, anything else as text."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    numeric = all(k is None or (isinstance(k, (int, float)) and not isinstance(k, bool)) for k in keys)
    if numeric:
        isnull = np.fromiter((k is None for k in keys), dtype=bool, count=n)
        if all(isinstance(k, int) for k in keys if k is not None) and _fits_int64(keys):
            values = np.fromiter((0 if k is None else k for k in keys), dtype=np.int64, count=n)
        else:
            values = np.fromiter((np.nan if k is None else float(k) for k in keys), dtype=np.float64, count=n)
            isnull |= np.isnan(values)
        # lexsort: last key is primary; nulls first when ascending.
        order = np.lexsort((values, ~isnull))
    else:
        text = np.array(["" if k is None else str(k) for k in keys], dtype=object)
        order = np.argsort(text, kind="stable")
    return order[::-1].copy() if descending else order


def _is_numeric(keys: Sequence[Any]) -> bool:
    """True when the sort keys are numbers (checked on the first non-null ones)."""
    seen = 0
    for k in keys:
        if k is None:
            continue
        if isinstance(k, bool) or not isinstance(k, (int, float)):
            return False
        seen += 1
        if seen >= 50:
            break
    return seen > 0


def _fits_int64(keys: Sequence[Any]) -> bool:
    return all(-(2**63) <= k < 2**63 for k in keys if k is not None)


class ColumnFilterProxyModel(QSortFilterProxyModel):
    """Filters a :class:`ColumnTableModel` on a case-insensitive substring; sorting goes to the model."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._needle = ""
        self.setDynamicSortFilter(False)

    def set_filter_text(self, text: str) -> None:
        """Keep rows where any cell contains ``text`` (ignoring case)."""
        needle = text.casefold()
        if needle != self._needle:
            self._refilter(lambda: setattr(self, "_needle", needle))

    def _refilter(self, change: Any) -> None:
        """Run ``change`` inside a row-filter change (Qt 6.9+ API, older releases invalidate)."""
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()
            change()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:  # pragma: no cover - PySide6 < 6.9
            change()
            self.invalidateRowsFilter()

    def filter_text(self) -> str:
        return self._needle

    def filterAcceptsRow(self, source_row: int, source_parent: _Index) -> bool:
        if not self._needle:
            return True
        model = self.sourceModel()
        if not isinstance(model, ColumnTableModel):
            return True
        return self._needle in model.haystack(source_row)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        model = self.sourceModel()
        if isinstance(model, ColumnTableModel):
            # The model sorts its own rows (numpy argsort); the proxy keeps source order.
            self._refilter(lambda: model.sort(column, order))
        else:
            super().sort(column, order)

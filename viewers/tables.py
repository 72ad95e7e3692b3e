"""Qt table models over columns: cells are served on demand from column sequences.

:class:`ColumnTableModel` holds one sequence of display strings per column plus one of sort keys
(lists, or lazy columns that format a cell when asked), exposes rows a page at a time
(``canFetchMore``/``fetchMore``), and sorts and filters with one numpy index array over all rows:
at once for small tables, in a worker for large ones (:func:`row_order` is Qt-free). Display text is
plain text: Qt's item views never interpret it as markup, and no tooltip (which would) is set.
"""

from __future__ import annotations

import html
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QMenu, QTableView

_Index = QModelIndex | QPersistentModelIndex


#: Rows a table shows at first and adds per ``fetchMore`` (when scrolled to the end).
PAGE_ROWS = 5_000

#: Tables with more rows than this sort and filter in a worker (the view asks the app through
#: :attr:`ColumnTableModel.order_requested`); smaller ones do it at once.
SYNC_ROWS = 50_000


class ColumnTableModel(QAbstractTableModel):
    """A read-only table over columns of display text, paged for million-row tables.

    The columns can be any sequences (lists, or lazy columns that format a cell when asked); the
    model only reads the cells the view shows. Rows are exposed ``PAGE_ROWS`` at a time through
    ``canFetchMore``/``fetchMore``; sorting and filtering compute an index array over all rows
    (numpy), at once for small tables and through :attr:`order_requested` for large ones.

    Parameters
    ----------
    headers : sequence of str
    columns : sequence of sequence of str
        One sequence of display strings per column, all of one length.
    sort_keys : sequence of sequence, optional
        Per column, the values to sort by: numbers (None for null, sorted first) or strings.
        Defaults to the display text.
    row_background : sequence of QColor or None, optional
        A background per row (e.g. uncommitted batches), None for the default.

    Signals
    -------
    order_requested(int column, bool descending, str needle)
        A large table needs sorting/filtering: compute :func:`row_order` in a worker and give the
        result to :meth:`set_row_order`.
    """

    order_requested = Signal(int, bool, str)

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
        self._n = 0
        self._visible = np.zeros(0, dtype=np.int64)
        self._fetched = 0
        self._sort: tuple[int, bool] = (-1, False)
        self._needle = ""
        self._haystack: list[str] | None = None
        self._right: list[bool] = []
        self._bold = QFont()
        self._bold.setBold(True)
        #: Highlighted rows (with a background) are also bold; off where every row is highlighted.
        self.bold_highlights = True
        self.set_columns(headers, columns, sort_keys, row_background)

    # -- data ----------------------------------------------------------------------------------------
    def set_columns(
        self,
        headers: Sequence[str],
        columns: Sequence[Sequence[str]],
        sort_keys: Sequence[Sequence[Any]] | None = None,
        row_background: Sequence[QColor | None] | None = None,
    ) -> None:
        """Replace the whole table (sorting and the filter are reset to none)."""
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
        self._n = lengths.pop() if lengths else 0
        self._visible = np.arange(self._n, dtype=np.int64)
        self._fetched = min(self._n, PAGE_ROWS)
        self._sort = (-1, False)
        self._needle = ""
        self._haystack = None
        self._right = [_is_numeric(k) for k in self._sort_keys]
        self.endResetModel()

    def clear(self) -> None:
        self.set_columns([], [])

    def total_rows(self) -> int:
        """Rows in the table, whatever the filter and paging."""
        return self._n

    def matching_rows(self) -> int:
        """Rows that pass the filter (shown or still to be fetched)."""
        return len(self._visible)

    def visible_source_rows(self) -> np.ndarray:
        """Positions in the columns of every row passing the filter, in sorted order (all pages)."""
        return self._visible.copy()

    def columns(self) -> list[Sequence[str]]:
        return list(self._columns)

    def sort_keys(self) -> list[Sequence[Any]]:
        return list(self._sort_keys)

    def source_row(self, row: int) -> int:
        """The row's position in the columns given (before sorting and filtering)."""
        return int(self._visible[row])

    def row_of_source(self, source: int) -> int:
        """The table row showing column position ``source`` (fetching pages up to it), or -1."""
        hits = np.nonzero(self._visible == source)[0]
        if not len(hits):
            return -1
        row = int(hits[0])
        if row >= self._fetched:
            self._fetch_to(row + 1)
        return row

    def row_texts(self, row: int) -> list[str]:
        """Display text of every cell of one (sorted) row."""
        r = int(self._visible[row])
        return [c[r] for c in self._columns]

    def headers(self) -> list[str]:
        return list(self._headers)

    def filter_text(self) -> str:
        return self._needle

    def sort_state(self) -> tuple[int, bool]:
        """``(column, descending)`` of the current order (column -1: as given)."""
        return self._sort

    # -- sorting and filtering -----------------------------------------------------------------------
    def set_filter_text(self, text: str) -> None:
        """Keep rows where any cell contains ``text`` (ignoring case)."""
        needle = text.casefold()
        if needle != self._needle:
            self._reorder(self._sort[0], self._sort[1], needle)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(self._columns):
            return
        self._reorder(column, order == Qt.SortOrder.DescendingOrder, self._needle)

    def _reorder(self, column: int, descending: bool, needle: str) -> None:
        if self._n > SYNC_ROWS:
            self.order_requested.emit(column, descending, needle)
            return
        if needle and self._haystack is None:
            self._haystack = haystacks(self._columns, self._n)
        order = row_order(self._sort_keys, self._columns, self._n, column, descending, needle, self._haystack)
        self.set_row_order(column, descending, needle, order)

    def set_row_order(self, column: int, descending: bool, needle: str, rows: np.ndarray) -> None:
        """Show ``rows`` (positions in the columns, from :func:`row_order`) as the sorted, filtered table."""
        self.beginResetModel()
        self._sort = (column, descending)
        self._needle = needle
        self._visible = np.asarray(rows, dtype=np.int64)
        self._fetched = min(len(self._visible), PAGE_ROWS)
        self.endResetModel()

    # -- paging --------------------------------------------------------------------------------------
    def canFetchMore(self, parent: _Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and self._fetched < len(self._visible)

    def fetchMore(self, parent: _Index = QModelIndex()) -> None:  # noqa: B008
        if parent.isValid():
            return
        self._fetch_to(self._fetched + PAGE_ROWS)

    def _fetch_to(self, count: int) -> None:
        count = min(count, len(self._visible))
        if count <= self._fetched:
            return
        self.beginInsertRows(QModelIndex(), self._fetched, count - 1)
        self._fetched = count
        self.endInsertRows()

    # -- Qt virtuals ---------------------------------------------------------------------------------
    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008 - Qt's default argument
        return 0 if parent.isValid() else self._fetched

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._columns)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r = int(self._visible[index.row()])
        if role == Qt.ItemDataRole.DisplayRole:
            return self._columns[index.column()][r]
        if role == Qt.ItemDataRole.ToolTipRole:  # the full text of a cell narrowed to fit
            return plain_tooltip(self._columns[index.column()][r])
        if role == Qt.ItemDataRole.TextAlignmentRole and self._right[index.column()]:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.BackgroundRole and self._background is not None:
            color = self._background[r]
            return QBrush(color) if color is not None else None
        if (
            role == Qt.ItemDataRole.FontRole
            and self.bold_highlights
            and self._background is not None
            and self._background[r] is not None
        ):
            return self._bold
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Horizontal:
            return self._headers[section] if 0 <= section < len(self._headers) else None
        return str(section + 1)

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable


def haystacks(
    columns: Sequence[Sequence[str]], n: int, cancelled: Callable[[], bool] | None = None
) -> list[str]:
    """Lower-cased text of every row (cells joined by a separator no cell holds), for filtering."""
    out: list[str] = []
    step = 20_000
    for start in range(0, n, step):
        if cancelled is not None and cancelled():
            raise InterruptedError("filtering cancelled")
        parts = [c[start : start + step] for c in columns]
        out.extend("\x1f".join(cells).casefold() for cells in zip(*parts, strict=True))
    return out


def row_order(
    sort_keys: Sequence[Sequence[Any]],
    columns: Sequence[Sequence[str]],
    n: int,
    column: int,
    descending: bool,
    needle: str,
    haystack: Sequence[str] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Positions of the rows passing ``needle``, sorted by ``column`` (Qt-free: runs in a worker too).

    Parameters
    ----------
    sort_keys, columns : sequences of sequences
        As given to :class:`ColumnTableModel`.
    n : int
        Rows.
    column : int
        Sort column, -1 for the order given.
    descending : bool
    needle : str
        Case-folded text a row must contain ("" keeps every row).
    haystack : sequence of str, optional
        Precomputed :func:`haystacks`.
    cancelled : callable, optional

    Returns
    -------
    numpy.ndarray
        int64 row positions.
    """
    order = (
        _argsort(sort_keys[column], descending)
        if 0 <= column < len(sort_keys)
        else np.arange(n, dtype=np.int64)
    )
    if not needle:
        return order
    matchers = [getattr(c, "contains", None) for c in columns]
    if (
        haystack is None
        and needle.isascii()
        and "\x1f" not in needle
        and all(m is not None for m in matchers)
    ):
        # Columns that can search themselves (kept as Arrow arrays): one vectorised pass per column.
        mask = np.zeros(n, dtype=bool)
        for match in matchers:
            mask |= np.asarray(match(needle), dtype=bool)  # type: ignore[misc]
        return order[mask[order]]
    hay = haystack if haystack is not None else haystacks(columns, n, cancelled)
    mask = np.fromiter((needle in h for h in hay), dtype=bool, count=n)
    return order[mask[order]]


def _argsort(keys: Sequence[Any], descending: bool) -> np.ndarray:
    """Stable order of ``keys``; numbers numerically with nulls first, anything else as text.

    Sort keys that know their own order (an ``ascending_order()`` method returning int64 positions,
    e.g. columns kept as Arrow arrays) are not read one by one.
    """
    presorted = getattr(keys, "ascending_order", None)
    if presorted is not None:
        order = np.asarray(presorted(), dtype=np.int64)
        return order[::-1].copy() if descending else order
    keys = list(keys)
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
    for k in keys[:200] if hasattr(keys, "__getitem__") else keys:
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


#: Pages a :class:`QueryTableModel` keeps (least recently shown go first).
QUERY_PAGES_KEPT = 40

#: Text of a cell whose page is still being read.
LOADING_TEXT = "…"


class QueryTableModel(ColumnTableModel):
    """A read-only table whose rows live elsewhere (a database) and are read a page at a time.

    Every matching row is a row of the model (the scroll bar spans them all); a page is asked for
    when one of its rows is first shown (:attr:`page_requested`, answered by :meth:`add_page`) and shows
    :data:`LOADING_TEXT` until it comes. At most :data:`QUERY_PAGES_KEPT` pages are kept. Sorting or
    filtering emits :attr:`order_requested`, answered by :meth:`set_result` (how many rows match, and
    the first page). Pages are objects with ``offset``, ``texts`` (display text per column), ``keys``
    and ``partitions`` (per row), and ``len()``, ``PAGE_ROWS`` rows long but the last. Rows are
    numbered in the current order: a row's "source" position is its row.

    Signals
    -------
    order_requested(int column, bool descending, str needle)
    page_requested(int offset)
        The page of ``PAGE_ROWS`` rows from ``offset`` in the current order is needed.
    """

    page_requested = Signal(int)

    def __init__(self, parent: Any = None) -> None:
        #: Row backgrounds by the text of the first column (e.g. a diff's ``change``), or None.
        self.first_column_colors: dict[str, QColor] | None = None
        self._pages: OrderedDict[int, Any] = OrderedDict()  # page number -> page, least recent first
        self._asked: set[int] = set()
        self._matching = 0
        super().__init__(parent=parent)

    def set_query(
        self, headers: Sequence[str], right_aligned: Sequence[bool], total: int, needle: str
    ) -> None:
        """A new table of ``total`` rows: empty until the first :meth:`set_result`, which is requested
        at once (in the order given, filtered by ``needle``)."""
        self._reset(headers, right_aligned, total, needle.casefold())
        self.order_requested.emit(-1, False, self._needle)

    def set_columns(self, headers: Sequence[str], columns: Sequence[Sequence[str]], *args: Any) -> None:
        """No rows (``columns`` are not held: rows come from :meth:`set_result`)."""
        self._reset(headers, [False] * len(headers), 0, "")

    def _reset(self, headers: Sequence[str], right_aligned: Sequence[bool], total: int, needle: str) -> None:
        self.beginResetModel()
        self._headers = list(headers)
        self._columns = []
        self._right = list(right_aligned)
        self._n = total
        self._matching = 0
        self._pages = OrderedDict()
        self._asked = set()
        self._sort = (-1, False)
        self._needle = needle
        self.endResetModel()

    def set_result(self, column: int, descending: bool, needle: str, matching: int, page: Any) -> None:
        """The answer to :attr:`order_requested`: rows matching, and the first page in that order."""
        self.beginResetModel()
        self._sort = (column, descending)
        self._needle = needle
        self._matching = matching
        self._pages = OrderedDict({0: page}) if len(page) else OrderedDict()
        self._asked = set()
        self.endResetModel()

    def add_page(self, column: int, descending: bool, needle: str, page: Any) -> None:
        """The answer to :attr:`page_requested` (ignored when the order changed meanwhile)."""
        if (column, descending) != self._sort or needle != self._needle or page.offset % PAGE_ROWS:
            return
        k = page.offset // PAGE_ROWS
        self._asked.discard(k)
        if not len(page) or k in self._pages:
            return
        self._pages[k] = page
        while len(self._pages) > QUERY_PAGES_KEPT:
            self._pages.popitem(last=False)
        last = min(page.offset + len(page), self._matching) - 1
        if last >= page.offset and self._headers:
            self.dataChanged.emit(self.index(page.offset, 0), self.index(last, len(self._headers) - 1))

    def forget_requests(self, offsets: Sequence[int]) -> None:
        """Pages no longer waited for (scrolled past): asked for again when shown again."""
        for offset in offsets:
            self._asked.discard(offset // PAGE_ROWS)

    def is_loaded(self, row: int) -> bool:
        return row // PAGE_ROWS in self._pages

    def matching_rows(self) -> int:
        return self._matching

    def visible_source_rows(self) -> np.ndarray:
        return np.arange(self._matching, dtype=np.int64)

    def source_row(self, row: int) -> int:
        return row

    def row_of_source(self, source: int) -> int:
        return source if 0 <= source < self._matching else -1

    def _at(self, row: int) -> tuple[Any, int] | None:
        """The page holding ``row`` and the row's place in it; None (and the page asked for) if not read."""
        if not 0 <= row < self._matching:
            return None
        k = row // PAGE_ROWS
        page = self._pages.get(k)
        if page is None:
            if k not in self._asked:
                self._asked.add(k)
                self.page_requested.emit(k * PAGE_ROWS)
            return None
        self._pages.move_to_end(k)
        i = row - page.offset
        return (page, i) if i < len(page) else None

    def row_texts(self, row: int) -> list[str]:
        got = self._at(row)
        if got is None:
            return [LOADING_TEXT] * len(self._headers)
        page, i = got
        return [texts[i] for texts in page.texts]

    def key_at(self, row: int) -> Any:
        """The row's key (None while its page is being read)."""
        got = self._at(row)
        return None if got is None else got[0].keys[got[1]]

    def partition_at(self, row: int) -> int | None:
        got = self._at(row)
        return None if got is None else int(got[0].partitions[got[1]])

    def loaded_rows(self) -> list[int]:
        """Rows whose page has been read, in order."""
        return [
            r for k in sorted(self._pages) for r in range(k * PAGE_ROWS, k * PAGE_ROWS + len(self._pages[k]))
        ]

    def columns(self) -> list[Sequence[str]]:
        return []

    def sort_keys(self) -> list[Sequence[Any]]:
        return []

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if 0 <= column < len(self._headers):
            self._reorder(column, order == Qt.SortOrder.DescendingOrder, self._needle)

    def _reorder(self, column: int, descending: bool, needle: str) -> None:
        self.order_requested.emit(column, descending, needle)

    def set_row_order(self, column: int, descending: bool, needle: str, rows: np.ndarray) -> None:
        raise TypeError("a query table is ordered by its database: use set_result")

    def canFetchMore(self, parent: _Index = QModelIndex()) -> bool:  # noqa: B008
        return False

    def fetchMore(self, parent: _Index = QModelIndex()) -> None:  # noqa: B008
        return

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self._matching

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._headers)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            got = self._at(index.row())
            return LOADING_TEXT if got is None else got[0].texts[index.column()][got[1]]
        if role == Qt.ItemDataRole.TextAlignmentRole and self._right[index.column()]:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.BackgroundRole and self.first_column_colors is not None:
            got = self._at(index.row())
            color = None if got is None else self.first_column_colors.get(got[0].texts[0][got[1]])
            return QBrush(color) if color is not None else None
        return None


class ColumnFilterProxyModel(QSortFilterProxyModel):
    """Passes a :class:`ColumnTableModel` through; the model itself sorts, filters and pages.

    Kept so views can keep using proxy indexes; :meth:`set_filter_text` and :meth:`sort` go to the
    model (one numpy index array over all rows, not a Python comparison per pair).
    """

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setDynamicSortFilter(False)

    def _model(self) -> ColumnTableModel | None:
        model = self.sourceModel()
        return model if isinstance(model, ColumnTableModel) else None

    def set_filter_text(self, text: str) -> None:
        """Keep rows where any cell contains ``text`` (ignoring case)."""
        model = self._model()
        if model is not None:
            model.set_filter_text(text)

    def filter_text(self) -> str:
        model = self._model()
        return model.filter_text() if model is not None else ""

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        model = self._model()
        if model is not None:
            model.sort(column, order)
        else:
            super().sort(column, order)


class DataTableView(QTableView):
    """A read-only, row-selecting table with a context menu to copy a cell or export the table.

    Parameters
    ----------
    model : QAbstractItemModel
    name : str
        What the table holds, for file names and dialog titles (``expired keys``).

    Signals
    -------
    export_requested(str fmt)
        ``csv`` or ``parquet``: the user asked to export this table (the app writes the file).
    """

    export_requested = Signal(str)

    def __init__(self, model: Any = None, name: str = "table", parent: Any = None) -> None:
        super().__init__(parent)
        self.name = name
        if model is not None:
            self.setModel(model)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.horizontalHeader().setStretchLastSection(True)
        # Dotted column names (value.groupState.info.first_ts_ms) keep their last, most specific part.
        self.horizontalHeader().setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)
        self._fit_args: tuple[int, int] | None = None  # the last fit_columns, redone at each resize

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self._fit_args is not None:
            self.fit_columns(*self._fit_args)

    def fit_columns(self, max_width: int = 320, sample_rows: int = 200) -> None:
        """Size columns to their header and first rows, then fit them in the viewport.

        Each column gets the width of its header and first ``sample_rows`` cells (at most ``max_width``,
        never less than its header). When they are wider than the viewport together, the widest are
        narrowed to a common width, never below their header, so every column starts on screen and its
        header reads in full; narrowed cells elide, their full text in the tooltip. The last column gets
        what is left of the viewport. Hidden columns are left alone.
        """
        model = self.model()
        if model is None:
            return
        self._fit_args = (max_width, sample_rows)
        header = self.horizontalHeader()
        metrics = self.fontMetrics()
        head_metrics = header.fontMetrics()
        cols = [c for c in range(model.columnCount()) if not self.isColumnHidden(c)]
        if not cols:
            return
        rows = min(model.rowCount(), sample_rows)
        floors: list[int] = []
        wants: list[int] = []
        for col in cols:
            head = str(model.headerData(col, Qt.Orientation.Horizontal) or "")
            floor = max(head_metrics.horizontalAdvance(head) + 24, 48)
            cells = [str(model.index(r, col).data() or "") for r in range(rows)]
            content = max((metrics.horizontalAdvance(t) for t in cells), default=0) + 24
            floors.append(floor)
            wants.append(max(floor, min(content, max_width)))
        room = self.viewport().width()
        widths = _fit_widths(wants, floors, room)
        for col, width in zip(cols, widths, strict=True):
            header.resizeSection(col, width)
        used = sum(widths[:-1])
        if room - used > widths[-1]:
            header.resizeSection(cols[-1], room - used)

    def _on_context_menu_requested(self, pos: Any) -> None:
        menu = QMenu(self)
        index = self.indexAt(pos)
        if index.isValid():
            copy = menu.addAction("Copy cell")
            copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(str(index.data() or "")))
            menu.addSeparator()
        for fmt, text in (("csv", "Export table as CSV…"), ("parquet", "Export table as Parquet…")):
            action = menu.addAction(text)
            action.triggered.connect(lambda _checked=False, f=fmt: self.export_requested.emit(f))
        menu.popup(self.viewport().mapToGlobal(pos))


def _fit_widths(wants: list[int], floors: list[int], room: int) -> list[int]:
    """Column widths: ``wants`` when they fit in ``room``; else the widest cut to one common width (found
    by bisection), never below ``floors``; the floors when even they do not fit."""
    if sum(wants) <= room or sum(floors) >= room:
        return list(wants) if sum(wants) <= room else list(floors)

    def total(cap: int) -> int:
        return sum(max(f, min(w, cap)) for w, f in zip(wants, floors, strict=True))

    lo, hi = 0, max(wants)
    while lo < hi:  # the largest cap whose total fits
        mid = (lo + hi + 1) // 2
        if total(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return [max(f, min(w, lo)) for w, f in zip(wants, floors, strict=True)]


def plain_tooltip(text: str) -> str | None:
    """A tooltip that shows ``text`` as it is: Qt renders tooltips that look like HTML as HTML, and cell
    values come from files, so the text is escaped inside explicit rich text. None for empty text."""
    if not text:
        return None
    return "<p style='white-space:pre-wrap'>" + html.escape(text) + "</p>"

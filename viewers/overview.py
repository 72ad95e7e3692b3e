"""The Overview: the verdicts first (one line each, a severity colour, the number and a link to the view
that proves it), then the details: what the checkpoint is, its batches (uncommitted ones highlighted),
operators, health checks and the files that could not be read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from statelens.readers.model import BatchInfo, OperatorInfo
from statelens.readers.textfmt import format_duration_ms
from statelens.readers.textfmt import ranges as text_ranges
from statelens.viewers import theme
from statelens.viewers.tables import ColumnFilterProxyModel, ColumnTableModel, DataTableView
from statelens.viewers.timefmt import TimeZoneState


def format_duration_s(seconds: float) -> str:
    """``3 h 2 min``, ``4.2 s`` ... (``readers.textfmt.format_duration_ms``, words style)."""
    return format_duration_ms(seconds * 1000, "words")


def ranges(values: Sequence[int]) -> str:
    """``1–4, 7`` for sorted ints."""
    return text_ranges(values, ", ", "–")


#: Severity -> (badge text, colour). Mid-luminance colours with white text read on light and dark palettes.
SEVERITY_STYLE = {
    "error": ("ERROR", "#dc2626"),
    "warning": ("WARNING", "#d97706"),
    "info": ("NOTE", "#64748b"),
    "ok": ("OK", "#16a34a"),
}
#: View name -> link text of a verdict.
VIEW_LINKS = {
    "overview": "Details below",
    "timeline": "Batch timeline",
    "growth": "State growth",
    "expired": "Expired keys",
    "browser": "State browser",
    "sql": "SQL",
    "schema": "Schema and conf",
}


def _plain_label(text: str = "") -> QLabel:
    label = QLabel(text)
    # Paths and query ids come from files: never let QLabel guess they are rich text.
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(True)
    return label


class OverviewView(QWidget):
    """Summary of a checkpoint.

    Parameters
    ----------
    selection : object, optional
        The shared selection state (``connect``/``disconnect`` of callbacks, ``batch_id``); the
        selected batch is highlighted in the batch table.
    time_zone : TimeZoneState, optional
        Local time or UTC for batch start times and watermarks (local time when not given); the
        view re-renders when it changes.

    Signals
    -------
    batch_selected(int batch_id)
        The user picked a batch in the table.
    store_selected(int operator_id, str store_name)
        The user picked an operator's store in the operators table.
    view_requested(str view, object target)
        The user clicked a verdict's link: show ``view`` (``overview`` means this view's details) at
        ``target``, a dict of ``operator_id``, ``store_name``, ``batch_id``, ``partition_id``, ``check``.
    """

    batch_selected = Signal(int)
    store_selected = Signal(int, str)
    view_requested = Signal(str, object)

    BATCH_HEADERS = (
        "batch",
        "started ({zone})",
        "watermark ({zone})",
        "interval (s)",
        "committed",
        "sources",
    )
    OPERATOR_HEADERS = (
        "operator",
        "kind",
        "name",
        "store",
        "holds",
        "provider",
        "codec",
        "partitions",
        "versions",
        "key schema",
        "value schema",
    )
    #: Operators described one per line in the State row; more are counted.
    MAX_DESCRIBED = 6
    #: Approximate table row height (pixels) for sizing the operators table.
    ROW_HEIGHT = 22
    PROBLEM_HEADERS = ("problem", "file", "offset", "message")
    HEALTH_HEADERS = ("severity", "check", "finding", "files")

    def __init__(
        self, selection: Any = None, time_zone: TimeZoneState | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._selection = selection
        self.time_zone = time_zone if time_zone is not None else TimeZoneState()
        self._batches: Sequence[BatchInfo] = []
        self._batch_ids: list[int] = []
        self._stores: list[tuple[int, str]] = []
        self._updating = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.splitter_main = QSplitter(Qt.Orientation.Vertical)

        # -- the verdicts: answers first ------------------------------------------------------------
        self.verdict_box = QGroupBox("Verdicts")
        vlay = QVBoxLayout(self.verdict_box)
        vlay.setContentsMargins(6, 6, 6, 6)
        self.verdict_status = _plain_label("Open a checkpoint to see the verdicts.")
        vlay.addWidget(self.verdict_status)
        self._verdict_grid = QGridLayout()
        self._verdict_grid.setContentsMargins(0, 0, 0, 0)
        self._verdict_grid.setHorizontalSpacing(8)
        self._verdict_grid.setVerticalSpacing(4)
        self._verdict_grid.setColumnStretch(1, 1)
        vlay.addLayout(self._verdict_grid)
        vlay.addStretch(1)
        self.verdict_badges: list[QLabel] = []
        self.verdict_labels: list[QLabel] = []
        self.verdict_links: list[QPushButton] = []
        self._verdict_widgets: list[QWidget] = []
        self.splitter_main.addWidget(self.verdict_box)

        # -- the details: raw tables ----------------------------------------------------------------
        self.details = QTabWidget()
        self.details.setDocumentMode(True)
        summary = QWidget()
        form = QFormLayout(summary)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.location_label = _plain_label("—")
        self.query_label = _plain_label("—")
        self.batches_label = _plain_label("—")
        self.time_label = _plain_label("—")
        self.commit_label = _plain_label("—")
        self.state_label = _plain_label("—")
        self.state_label.setWordWrap(False)  # a line per operator: its size hint counts every line
        self.problems_label = _plain_label("—")
        form.addRow("Location", self.location_label)
        form.addRow("Query id", self.query_label)
        form.addRow("Batches", self.batches_label)
        form.addRow("Time range", self.time_label)
        form.addRow("Commits", self.commit_label)
        form.addRow("State", self.state_label)
        form.addRow("Problems", self.problems_label)

        self.splitter = splitter = QSplitter(Qt.Orientation.Vertical)
        self.batch_model = ColumnTableModel()
        self.batch_proxy = ColumnFilterProxyModel()
        self.batch_proxy.setSourceModel(self.batch_model)
        self.batch_table = self._table(self.batch_proxy, "batches")
        self.batch_table.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        self.batch_table.setSortingEnabled(True)
        self.batch_table.selectionModel().currentRowChanged.connect(self._on_batch_table_current_changed)
        splitter.addWidget(self._group("Batches (uncommitted batches highlighted)", self.batch_table))

        self.operator_model = ColumnTableModel()
        self.operator_table = self._table(self.operator_model, "stateful operators")
        self.operator_table.selectionModel().currentRowChanged.connect(
            self._on_operator_table_current_changed
        )
        splitter.addWidget(self._group("Stateful operators", self.operator_table))
        splitter.setSizes([300, 180])
        checkpoint_tab = QWidget()
        tab_layout = QVBoxLayout(checkpoint_tab)
        tab_layout.setContentsMargins(4, 4, 4, 4)
        tab_layout.addWidget(summary)
        tab_layout.addWidget(splitter, 1)
        self.details.addTab(checkpoint_tab, "Checkpoint, batches and operators")

        self.health_model = ColumnTableModel()
        self.health_table = self._table(self.health_model, "health checks")
        self.details.addTab(self.health_table, "Health checks")

        self.problem_model = ColumnTableModel()
        self.problem_table = self._table(self.problem_model, "problems")
        self.problems_box = self._group("Problems while loading", self.problem_table)
        self.details.addTab(self.problems_box, "Problems")
        self.splitter_main.addWidget(self.details)
        self.splitter_main.setStretchFactor(0, 1)
        self.splitter_main.setStretchFactor(1, 1)
        self.splitter_main.setSizes([330, 470])
        layout.addWidget(self.splitter_main, 1)

        if selection is not None:
            selection.connect(self._on_selection_changed)
            cb = self._on_selection_changed
            self.destroyed.connect(lambda *_: selection.disconnect(cb))
        zone, zone_cb = self.time_zone, self._on_time_zone_changed
        zone.connect(zone_cb)
        self.destroyed.connect(lambda *_: zone.disconnect(zone_cb))

    @staticmethod
    def _group(title: str, widget: QWidget) -> QGroupBox:
        box = QGroupBox(title)
        lay = QVBoxLayout(box)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(widget)
        return box

    @staticmethod
    def _table(model: Any, name: str) -> DataTableView:
        table = DataTableView(model, name)
        table.verticalHeader().setVisible(False)
        return table

    # -- data ----------------------------------------------------------------------------------------
    def clear(self) -> None:
        for label in (
            self.location_label,
            self.query_label,
            self.batches_label,
            self.time_label,
            self.commit_label,
            self.state_label,
            self.problems_label,
        ):
            label.setText("—")
        self.batch_model.clear()
        self.operator_model.clear()
        self.problem_model.clear()
        self.health_model.clear()
        self.set_verdicts_pending("Open a checkpoint to see the verdicts.")
        self._batch_ids = []
        self._batches = []

    def set_checkpoint(
        self,
        location: str,
        query_id: str | None,
        batches: Sequence[BatchInfo],
        operators: Sequence[OperatorInfo],
        problems: Sequence[BaseException],
        roles: Mapping[tuple[int, str], Any] | None = None,
        descriptions: Sequence[str] = (),
    ) -> None:
        """Show a loaded checkpoint.

        ``roles`` (``app.session.StoreRole`` per store) fill the operators table's ``holds`` column;
        ``descriptions`` (one line per operator) say what each operator is under the store count.
        """
        self.location_label.setText(location)
        self.query_label.setText(query_id or "(no metadata file)")
        uncommitted = [b.batch_id for b in batches if not b.committed]
        if batches:
            self.batches_label.setText(
                f"{len(batches):,} batches, {batches[0].batch_id} to {batches[-1].batch_id}"
                + (
                    f"; ids missing: {ranges(_gaps([b.batch_id for b in batches]))}"
                    if _gaps([b.batch_id for b in batches])
                    else ""
                )
            )
        else:
            self.batches_label.setText("no batches (no offsets or commits files)")
        if uncommitted:
            self.commit_label.setText(
                f"UNCOMMITTED: batch{'es' if len(uncommitted) > 1 else ''} {ranges(uncommitted)} "
                "(offsets written, no commit: a restart re-runs the last one)"
            )
            font = QFont(self.commit_label.font())
            font.setBold(True)
            self.commit_label.setFont(font)
        else:
            self.commit_label.setText("all planned batches committed" if batches else "—")
            self.commit_label.setFont(QFont())
        stores = sum(len(op.stores) for op in operators)
        text = (
            f"{len(operators)} stateful operator{'s' if len(operators) != 1 else ''}, "
            f"{stores} store{'s' if stores != 1 else ''}"
            if operators
            else "no stateful operators (no state/ folder)"
        )
        lines = list(descriptions[: self.MAX_DESCRIBED])
        if len(descriptions) > len(lines):
            lines.append(f"… and {len(descriptions) - len(lines)} more operators (see the table below)")
        self.state_label.setText("\n".join([text, *lines]))
        self.state_label.setMinimumHeight(self.state_label.sizeHint().height())  # every line, at once
        self._set_batches(batches)
        self._set_operators(operators, roles or {})
        # Room for the stores when there are many (transformWithState lists a dozen column families).
        rows = self.ROW_HEIGHT * (stores + 2)
        total = sum(self.splitter.sizes()) or 480
        store_part = min(max(rows, 180), total // 2)
        self.splitter.setSizes([total - store_part, store_part])
        self._set_problems(problems)

    def _on_time_zone_changed(self, _utc: bool) -> None:
        if self._batches:
            self._set_batches(self._batches)
            if self._selection is not None:
                self.show_batch(self._selection.batch_id)

    def _set_batches(self, batches: Sequence[BatchInfo]) -> None:
        self._batches = list(batches)
        fmt = self.time_zone.format_ms
        times = [b.timestamp_ms for b in batches if b.timestamp_ms is not None]
        if times:
            span = (max(times) - min(times)) / 1000
            zone = self.time_zone.label(min(times) / 1000)
            self.time_label.setText(
                f"{fmt(min(times))} to {fmt(max(times))} ({format_duration_s(span)}; {zone})"
            )
        else:
            self.time_label.setText("no batch timestamps")
        ids, started, watermark, interval, committed, sources = [], [], [], [], [], []
        k_ids: list[int] = []
        k_started: list[int | None] = []
        k_wm: list[int | None] = []
        k_interval: list[float | None] = []
        background = []
        prev: int | None = None
        for b in batches:
            ids.append(str(b.batch_id))
            k_ids.append(b.batch_id)
            started.append(fmt(b.timestamp_ms))
            k_started.append(b.timestamp_ms)
            wm = b.watermark_ms
            watermark.append(fmt(wm) if wm else ("0 (none yet)" if wm == 0 else ""))
            k_wm.append(wm)
            if b.timestamp_ms is not None and prev is not None:
                gap = (b.timestamp_ms - prev) / 1000
                interval.append(f"{gap:.1f}")
                k_interval.append(gap)
            else:
                interval.append("")
                k_interval.append(None)
            if b.timestamp_ms is not None:
                prev = b.timestamp_ms
            committed.append("yes" if b.committed else "NO")
            sources.append("; ".join(_source_text(s) for s in (b.offsets.sources if b.offsets else ())))
            background.append(None if b.committed else theme.UNCOMMITTED_ROW)
        self._batch_ids = k_ids
        zone = self.time_zone.label(times[0] / 1000 if times else None)
        self.batch_model.set_columns(
            [h.format(zone=zone) for h in self.BATCH_HEADERS],
            [ids, started, watermark, interval, committed, sources],
            [k_ids, k_started, k_wm, k_interval, committed, sources],
            background,
        )
        self.batch_proxy.invalidate()
        header = self.batch_table.horizontalHeader()
        for col, width in enumerate((70, 190, 190, 90, 90)):
            header.resizeSection(col, width)

    def _set_operators(self, operators: Sequence[OperatorInfo], roles: Mapping[tuple[int, str], Any]) -> None:
        rows: list[list[str]] = []
        self._stores = []
        for op in operators:
            for s in op.stores:
                self._stores.append((op.operator_id, s.store_name))
                role = roles.get((op.operator_id, s.store_name))
                provider = (
                    s.provider
                    if role is None or not role.column_family_of
                    else (f"{s.provider} (column family)")
                )
                rows.append(
                    [
                        str(op.operator_id),
                        op.kind.value,
                        op.operator_name or "",
                        s.store_name,
                        role.text if role is not None else "",
                        provider,
                        s.codec,
                        str(len(s.partitions)),
                        f"{ranges(s.versions)} ({len(s.versions)})" if s.versions else "none",
                        _schema_text(s.key_schema),
                        _schema_text(s.value_schema),
                    ]
                )
        columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in self.OPERATOR_HEADERS]
        self.operator_model.set_columns(self.OPERATOR_HEADERS, columns)
        holds = self.OPERATOR_HEADERS.index("holds")
        self.operator_table.setColumnHidden(holds, not any(columns[holds]))  # nothing to say for plain stores
        self.operator_table.resizeColumnsToContents()

    def _set_problems(self, problems: Sequence[BaseException], final: bool = False) -> None:
        """The files that could not be read. Until ``final`` (the verdicts' full read), only the logs and
        metadata were read: the state files are not yet known to be fine."""
        cols: list[list[str]] = [[], [], [], []]
        for err in problems:
            cols[0].append(type(err).__name__)
            cols[1].append(getattr(err, "path", None) or "")
            offset = getattr(err, "offset", None)
            cols[2].append("" if offset is None else str(offset))
            cols[3].append(getattr(err, "message", None) or str(err))
        self.problem_model.set_columns(self.PROBLEM_HEADERS, cols)
        if problems:
            text = f"{len(problems)} file{'s' if len(problems) != 1 else ''} could not be read; everything else is shown"
        elif final:
            text = "none: every file read"
        else:
            text = "none in the logs and metadata; the state files are being checked (see the verdicts)"
        self.problems_label.setText(text)
        self.problems_box.setTitle(f"Files that could not be read: {text}")
        index = self.details.indexOf(self.problems_box)
        self.details.setTabText(index, f"Problems ({len(problems)})" if problems else "Problems")
        header = self.problem_table.horizontalHeader()
        for col, width in enumerate((170, 330, 70)):
            header.resizeSection(col, width)

    # -- verdicts ------------------------------------------------------------------------------------
    def set_verdicts_pending(self, text: str) -> None:
        """No verdicts yet: say what is being checked."""
        self._clear_verdicts()
        self.verdict_status.setText(text)
        self.verdict_status.setVisible(True)
        self.verdict_box.setTitle("Verdicts")

    def _clear_verdicts(self) -> None:
        for widget in self._verdict_widgets:
            self._verdict_grid.removeWidget(widget)
            widget.deleteLater()
        self._verdict_widgets = []
        self.verdict_badges = []
        self.verdict_labels = []
        self.verdict_links = []

    def set_verdicts(
        self, verdicts: Sequence[tuple[str, str, str, Mapping[str, Any]]], pending: str | None = None
    ) -> None:
        """Show the verdicts, worst first: ``(severity, text, view, target)`` each.

        ``severity`` is a key of :data:`SEVERITY_STYLE`; ``view`` a key of :data:`VIEW_LINKS`; ``target``
        is given back with :attr:`view_requested` when the link is clicked. ``pending`` says what is
        still being checked, under the verdicts already known.
        """
        self._clear_verdicts()
        counts: dict[str, int] = {}
        for n, (severity, text, view, target) in enumerate(verdicts):
            counts[severity] = counts.get(severity, 0) + 1
            badge_text, colour = SEVERITY_STYLE.get(severity, (severity.upper(), "#64748b"))
            badge = QLabel(badge_text)
            badge.setTextFormat(Qt.TextFormat.PlainText)
            badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
            badge.setFixedWidth(76)
            badge.setStyleSheet(
                f"background: {colour}; color: white; font-weight: bold; border-radius: 3px; padding: 2px;"
            )
            badge.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
            label = _plain_label(text)  # from the checkpoint's files: plain text only
            link = QPushButton(f"{VIEW_LINKS.get(view, view)} →")
            link.setToolTip(f"Show the {VIEW_LINKS.get(view, view).lower()} that proves this")
            link.setFlat(True)
            link.setCursor(Qt.CursorShape.PointingHandCursor)
            link.setStyleSheet("text-align: right; color: palette(link); padding: 2px 6px;")
            link.clicked.connect(lambda _c=False, v=view, t=dict(target): self.view_requested.emit(v, t))
            middle = Qt.AlignmentFlag.AlignVCenter
            self._verdict_grid.addWidget(badge, n, 0, middle)
            self._verdict_grid.addWidget(label, n, 1)
            self._verdict_grid.addWidget(link, n, 2, middle | Qt.AlignmentFlag.AlignRight)
            self._verdict_widgets += [badge, label, link]
            self.verdict_badges.append(badge)
            self.verdict_labels.append(label)
            self.verdict_links.append(link)
        self.verdict_status.setText(pending or "")
        self.verdict_status.setVisible(pending is not None)
        self._fit_verdicts()
        nouns = {"error": ("error", "errors"), "warning": ("warning", "warnings"), "info": ("note", "notes")}
        parts = [
            f"{counts[s]} {nouns[s][counts[s] != 1] if s in nouns else 'fine'}"
            for s in SEVERITY_STYLE
            if counts.get(s)
        ]
        heading = "Verdicts so far" if pending is not None else "Verdicts"
        self.verdict_box.setTitle(f"{heading}: " + ", ".join(parts) if parts else heading)

    def _fit_verdicts(self) -> None:
        """Give the verdicts the height their wrapped lines need at the box's width (up to two thirds),
        the details the rest; again on every resize, as a narrower window wraps them onto more lines."""
        for label in self.verdict_labels:  # a grid row keeps every wrapped line of its label
            if label.width() > 0:
                label.setMinimumHeight(label.heightForWidth(label.width()))
        total = sum(self.splitter_main.sizes())
        if total <= 0 or not self._verdict_widgets:
            return
        layout = self.verdict_box.layout()
        width = self.verdict_box.width()
        need = layout.totalHeightForWidth(width) if layout.hasHeightForWidth() and width > 0 else -1
        if need < 0:
            need = self.verdict_box.sizeHint().height()
        want = min(need + 8, total * 2 // 3)
        self.splitter_main.setSizes([want, total - want])

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self._fit_verdicts()

    def verdict_texts(self) -> list[tuple[str, str]]:
        """``(badge, text)`` of every verdict shown, top to bottom."""
        return [(b.text(), t.text()) for b, t in zip(self.verdict_badges, self.verdict_labels, strict=True)]

    def set_health(
        self,
        findings: Sequence[tuple[str, str, str, Sequence[str]]],
        unreadable: Sequence[BaseException] = (),
    ) -> None:
        """Doctor's findings ``(severity, check, message, files)`` and every problem the verdicts met."""
        cols: list[list[str]] = [[], [], [], []]
        for severity, check, message, files in findings:
            cols[0].append(severity)
            cols[1].append(check)
            cols[2].append(message)
            cols[3].append(", ".join(files))
        if not findings:
            cols = [["ok"], ["every health check"], ["no problems found"], [""]]
        self.health_model.set_columns(self.HEALTH_HEADERS, cols)
        bad = sum(1 for f in findings if f[0] in ("error", "warning"))
        self.details.setTabText(
            self.details.indexOf(self.health_table), f"Health checks ({bad})" if bad else "Health checks"
        )
        header = self.health_table.horizontalHeader()
        for col, width in enumerate((80, 190, 700)):
            header.resizeSection(col, width)
        self._set_problems(unreadable, final=True)

    def show_details(self, what: str) -> None:
        """Bring a details tab forward: ``checkpoint``, ``batches``, ``health`` or ``problems``."""
        widget = {
            "checkpoint": self.details.widget(0),
            "batches": self.details.widget(0),
            "health": self.health_table,
            "problems": self.problems_box,
        }.get(what)
        if widget is not None:
            self.details.setCurrentWidget(widget)

    # -- selection -----------------------------------------------------------------------------------
    def _on_batch_table_current_changed(self, current: Any, previous: Any) -> None:
        if self._updating or not current.isValid():
            return
        src = self.batch_proxy.mapToSource(current)
        batch_id = self._batch_ids[self.batch_model.source_row(src.row())]
        self.batch_selected.emit(batch_id)

    def _on_operator_table_current_changed(self, current: Any, _previous: Any) -> None:
        if self._updating or not current.isValid():
            return
        op, store = self._stores[self.operator_model.source_row(current.row())]
        self.store_selected.emit(op, store)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if "batch_id" in changes:
            self.show_batch(changes["batch_id"])
        if "operator_id" in changes or "store_name" in changes:
            self.show_store(self._selection.operator_id, self._selection.store_name)

    def show_store(self, operator_id: int | None, store_name: str | None) -> None:
        """Highlight an operator's store row without emitting :attr:`store_selected`."""
        key = (operator_id, store_name)
        if key not in self._stores:
            return
        row = self.operator_model.row_of_source(self._stores.index(key))  # type: ignore[arg-type]
        if row < 0:
            return
        self._updating = True
        try:
            self.operator_table.selectionModel().setCurrentIndex(
                self.operator_model.index(row, 0),
                QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
            )
        finally:
            self._updating = False

    def show_batch(self, batch_id: int | None) -> None:
        """Highlight a batch's row without emitting :attr:`batch_selected`."""
        if batch_id is None or batch_id not in self._batch_ids:
            return
        src_pos = self._batch_ids.index(batch_id)
        row = self.batch_model.row_of_source(src_pos)
        if row < 0:
            return
        index = self.batch_proxy.mapFromSource(self.batch_model.index(row, 0))
        if index.isValid():
            self._updating = True
            try:
                self.batch_table.selectionModel().setCurrentIndex(
                    index,
                    QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
                )
                self.batch_table.scrollTo(index)
            finally:
                self._updating = False


def _gaps(ids: Sequence[int]) -> list[int]:
    if not ids:
        return []
    present = set(ids)
    return [i for i in range(ids[0], ids[-1] + 1) if i not in present]


def _source_text(source: Any) -> str:
    raw = source.raw
    if raw is None:
        return f"{source.source_kind}: -"
    text = raw if len(raw) <= 80 else raw[:77] + "..."
    return f"{source.source_kind}: {text}"


def _schema_text(schema: Any, limit: int = 90) -> str:
    if schema is None:
        return "(no schema)"
    try:
        text = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    except AttributeError:
        text = str(schema)
    return text if len(text) <= limit else text[: limit - 1] + "…"

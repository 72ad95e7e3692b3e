"""What the per-store views share: a store picker (grouped, with tooltips), a status note per store,
selection wiring."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

StoreKey = tuple[int, str]


def fill_store_combo(
    combo: QComboBox,
    stores: Sequence[tuple[int, str, str]],
    groups: Mapping[StoreKey, str] | None = None,
    tips: Mapping[StoreKey, str] | None = None,
) -> dict[StoreKey, int]:
    """Fill a store picker: one item per ``(operator_id, store_name, label)``, data ``(operator_id, store_name)``.

    Consecutive stores of the same group (``groups``, e.g. a transformWithState operator's state
    variables, then Spark's internal column families) get a header line above them that cannot be
    picked. ``tips`` are plain-text tooltips per store.

    Returns
    -------
    dict
        ``(operator_id, store_name) -> combo index``.
    """
    blocked = combo.blockSignals(True)
    combo.clear()
    index: dict[StoreKey, int] = {}
    last: str | None = None
    model = combo.model()
    for op, name, label in stores:
        group = groups.get((op, name)) if groups else None
        if group is not None and group != last:
            combo.addItem(f"── {group} ──")
            if isinstance(model, QStandardItemModel):
                header = model.item(combo.count() - 1)
                header.setFlags(header.flags() & ~(Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled))
                font = header.font()
                font.setBold(True)
                header.setFont(font)
        last = group
        combo.addItem(label, (op, name))
        index[(op, name)] = combo.count() - 1
        tip = tips.get((op, name)) if tips else None
        if tip:
            combo.setItemData(combo.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
    combo.blockSignals(blocked)
    return index


class StorePickerMixin:
    """Store picker state for a view that shows one store at a time (growth, expired keys).

    The view owns ``store_combo`` (a ``QComboBox``), ``status`` (a ``QLabel``) and implements
    ``_redraw()``; the mixin keeps ``_stores``, ``_data`` (per-store results), ``_status`` and ``_shown``.
    """

    store_combo: QComboBox
    status: QLabel
    _stores: list[tuple[int, str]]
    _combo_index: dict[tuple[int, str], int]
    _data: dict[tuple[int, str], Any]
    _status: dict[tuple[int, str], str]
    _shown: tuple[int, str] | None
    #: Hide the status line while it is empty (it sits on a line of its own).
    hide_empty_status = False

    def _redraw(self) -> None:
        raise NotImplementedError

    def _add_store_picker(self, bar: QHBoxLayout) -> None:
        """``Store:`` and the ``store_combo`` picker, at the start of the view's top bar."""
        bar.addWidget(QLabel("Store:"))
        self.store_combo = QComboBox()
        self.store_combo.setMinimumContentsLength(30)
        self.store_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.store_combo.activated.connect(self._on_store_combo_activated)
        bar.addWidget(self.store_combo)

    def _observe(self, selection: Any, on_changed: Callable[..., None]) -> None:
        """Follow the shared selection state until this widget is destroyed."""
        self._selection = selection
        if selection is None:
            return
        selection.connect(on_changed)
        widget: QWidget = self  # type: ignore[assignment]
        widget.destroyed.connect(lambda *_: selection.disconnect(on_changed))

    def clear(self) -> None:
        self._data.clear()
        self._status.clear()
        self.set_stores([])

    def set_stores(
        self,
        stores: Sequence[tuple[int, str, str]],
        groups: Mapping[StoreKey, str] | None = None,
        tips: Mapping[StoreKey, str] | None = None,
    ) -> None:
        """The stores to pick from: ``(operator_id, store_name, label)``, optionally grouped (see
        :func:`fill_store_combo`)."""
        self._stores = [(op, name) for op, name, _ in stores]
        self._combo_index = fill_store_combo(self.store_combo, stores, groups, tips)
        self._shown = self._stores[0] if self._stores else None
        if self._shown is not None:
            self._set_combo_index(self._shown)
        self._redraw()

    def _set_combo_index(self, key: StoreKey) -> None:
        index = getattr(self, "_combo_index", {}).get(key)
        if index is None:
            return
        blocked = self.store_combo.blockSignals(True)
        self.store_combo.setCurrentIndex(index)
        self.store_combo.blockSignals(blocked)

    def set_store_status(self, operator_id: int, store_name: str, text: str) -> None:
        """A note for one store (``computing…``, what was checked, a failure); shown with that store."""
        self._status[(operator_id, store_name)] = text
        if self._shown == (operator_id, store_name):
            self._show_status(text)

    def _show_status(self, text: str) -> None:
        """Show a store's note; a view with :attr:`hide_empty_status` hides the line when there is none."""
        self.status.setText(text)
        if self.hide_empty_status:
            self.status.setVisible(bool(text))

    def show_store(self, operator_id: int | None, store_name: str | None) -> None:
        """Show one store (ignored when unknown)."""
        key = (operator_id, store_name)
        if key not in self._stores or key == self._shown:
            return
        self._shown = key  # type: ignore[assignment]
        self._set_combo_index(key)  # type: ignore[arg-type]
        self._redraw()

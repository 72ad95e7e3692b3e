"""What the per-store plot views share: a store picker, a status note per store, selection wiring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtWidgets import QComboBox, QLabel, QWidget


class StorePickerMixin:
    """Store picker state for a view that shows one store at a time (growth, expired keys).

    The view owns ``store_combo`` (a ``QComboBox``), ``status`` (a ``QLabel``) and implements
    ``_redraw()``; the mixin keeps ``_stores``, ``_data`` (per-store results), ``_status`` and ``_shown``.
    """

    store_combo: QComboBox
    status: QLabel
    _stores: list[tuple[int, str]]
    _data: dict[tuple[int, str], Any]
    _status: dict[tuple[int, str], str]
    _shown: tuple[int, str] | None

    def _redraw(self) -> None:
        raise NotImplementedError

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

    def set_stores(self, stores: Sequence[tuple[int, str, str]]) -> None:
        """The stores to pick from: ``(operator_id, store_name, label)``."""
        self._stores = [(op, name) for op, name, _ in stores]
        self.store_combo.blockSignals(True)
        self.store_combo.clear()
        for op, name, label in stores:
            self.store_combo.addItem(label, (op, name))
        self.store_combo.blockSignals(False)
        self._shown = self._stores[0] if self._stores else None
        self._redraw()

    def set_store_status(self, operator_id: int, store_name: str, text: str) -> None:
        """A note for one store (``computing…``, what was checked, a failure); shown with that store."""
        self._status[(operator_id, store_name)] = text
        if self._shown == (operator_id, store_name):
            self.status.setText(text)

    def show_store(self, operator_id: int | None, store_name: str | None) -> None:
        """Show one store (ignored when unknown)."""
        key = (operator_id, store_name)
        if key not in self._stores or key == self._shown:
            return
        self._shown = key  # type: ignore[assignment]
        self.store_combo.blockSignals(True)
        self.store_combo.setCurrentIndex(self._stores.index(key))  # type: ignore[arg-type]
        self.store_combo.blockSignals(False)
        self._redraw()

"""statelens desktop app: the only part of ``app`` that imports Qt.

PySide6 is pinned below 6.12 in ``pyproject.toml``: 6.12.0 returns ``None`` from void methods and
``True`` from ``SignalInstance.emit()`` without taking a reference, which aborts Python 3.10/3.11 after a
few thousand calls ("none_dealloc: deallocating None"); 6.11.3 does not.
"""

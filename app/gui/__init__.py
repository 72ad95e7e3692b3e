"""statelens desktop app: the only part of ``app`` that imports Qt.

Importing this package checks for a PySide6 defect: in PySide6 6.12.0 ``SignalInstance.emit()``
returns ``True`` without taking a reference, so every emit drops one reference to ``True``. On
Python 3.12+ ``True`` is immortal and nothing happens; on 3.10/3.11 the count reaches zero after a few
thousand emits and the interpreter aborts ("bool_dealloc: deallocating True or False"). When the probe
sees the leak on such a Python, ``True``/``False`` get a reference count no session can exhaust (what
3.12 does by design). Pinning ``PySide6-Essentials!=6.12.0`` avoids it altogether.
"""

from __future__ import annotations

import sys


def _emit_leaks_true() -> bool:
    """True when emitting a signal drops references to ``True`` (the PySide6 6.12.0 defect)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        probed = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(16):
        probe.probed.emit()
    return sys.getrefcount(True) <= before - 8


def _guard_bool_refcounts() -> bool:
    """Make ``True``/``False`` effectively immortal when PySide6 leaks them; returns whether it did."""
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython" or not _emit_leaks_true():
        return False
    import ctypes

    for obj in (True, False):
        # ob_refcnt is the first field of every CPython object (release builds).
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 48
    return True


BOOL_REFCOUNT_GUARDED = _guard_bool_refcounts()

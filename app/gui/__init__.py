"""statelens desktop app: the only part of ``app`` that imports Qt.

Importing this package checks for a PySide6 defect. PySide6 6.12.0 returns ``None`` from void methods
(``setObjectName``, ``beginResetModel``, ...) and ``True`` from ``SignalInstance.emit()`` without
taking a reference, as if they were immortal. They are on Python 3.12+, so nothing happens there; on
3.10/3.11 every call drops a reference and after a few thousand calls the interpreter aborts
("none_dealloc: deallocating None", "bool_dealloc: deallocating True or False"). PySide6 6.11.3 does
not do this. When the probe sees the leak on such a Python, ``None``/``True``/``False`` get a
reference count no session can exhaust, which is what Python 3.12 does by design. The real fix is a
dependency pin (``PySide6-Essentials<6.12``) or Python 3.12+.
"""

from __future__ import annotations

import sys

_PROBE_CALLS = 16


def _leaked_singletons() -> list[object]:
    """The singletons PySide6 drops references to (empty with a sound PySide6 or on Python 3.12+)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        probed = Signal()

    probe = _Probe()
    leaked: list[object] = []
    before = sys.getrefcount(None)
    for _ in range(_PROBE_CALLS):
        probe.setObjectName("statelens-probe")
    if sys.getrefcount(None) <= before - _PROBE_CALLS // 2:
        leaked.append(None)
    before = sys.getrefcount(True)
    for _ in range(_PROBE_CALLS):
        probe.probed.emit()
    if sys.getrefcount(True) <= before - _PROBE_CALLS // 2:
        leaked.extend((True, False))
    return leaked


def _guard_singleton_refcounts() -> bool:
    """Make the leaked singletons effectively immortal; returns whether anything was done."""
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    leaked = _leaked_singletons()
    if not leaked:
        return False
    import ctypes

    for obj in leaked:
        # ob_refcnt is the first field of every CPython object (release builds); 2**48 references
        # outlast any session, as Python 3.12's immortal singletons do.
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 48
    return True


SINGLETON_REFCOUNTS_GUARDED = _guard_singleton_refcounts()

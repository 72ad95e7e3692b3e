"""The main window as the GUI tests open it: private settings, 1400x900, shown; closed idle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any


def open_window(qtbot: Any, tmp_path: Path, backend: str | None = None) -> Iterator[Any]:
    """Yield a shown ``MainWindow`` with settings in ``tmp_path``; on exit close it, its work finished."""
    from PySide6.QtCore import QSettings, QThreadPool

    from statelens.app.gui.window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings)
    if backend is not None:
        win.set_backend(backend, remember=False)
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show()
    yield win
    win.close()
    assert win.runner.idle or QThreadPool.globalInstance().waitForDone(5000)

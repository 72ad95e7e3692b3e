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


# -- screenshots, and what they show -------------------------------------------------------------------
def screenshot_window(
    qtbot: Any, tmp_path: Path, url: str | Path, view: str, *, is_sample: bool = False, event_logs: Any = ()
) -> Iterator[Any]:
    """Render ``view`` of ``url`` as ``statelens gui --screenshot`` does; yield the window it drew.

    The PNG is checked to be written at the screenshot size; the window stays open for the caller to
    read what was drawn through its widgets, and is closed idle afterwards.
    """
    from PySide6.QtCore import QSettings, QThreadPool
    from PySide6.QtGui import QImage

    from statelens.app.gui.main import SCREENSHOT_SIZE, take_screenshot
    from statelens.app.gui.window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.event_logs = [str(p) for p in event_logs]
    win.set_backend("native", remember=False)
    out = tmp_path / f"{view}.png"
    assert take_screenshot(win, str(url), str(out), view, is_sample=is_sample) == 0
    assert QImage(str(out)).size().toTuple() == SCREENSHOT_SIZE
    assert win.size().toTuple() == SCREENSHOT_SIZE  # long labels wrap or elide: the window never widens
    assert win.tabs.currentWidget() is win.views[view]
    yield win
    win.close()
    assert win.runner.idle or QThreadPool.globalInstance().waitForDone(5000)


def header_texts(table: Any) -> list[str]:
    """The texts of a table's visible column headers, left to right."""
    from PySide6.QtCore import Qt

    model = table.model()
    return [
        str(model.headerData(c, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole))
        for c in range(model.columnCount())
        if not table.isColumnHidden(c)
    ]


def clipped_columns(table: Any) -> list[str]:
    """Visible columns a user cannot read in full: header text wider than its section, or a section
    that does not end inside the viewport (cut by its right edge, or scrolled out of sight)."""
    from PySide6.QtCore import Qt

    header = table.horizontalHeader()
    metrics = header.fontMetrics()
    room = table.viewport().width()
    model = table.model()
    bad = []
    for c in range(model.columnCount()):
        if table.isColumnHidden(c):
            continue
        text = str(model.headerData(c, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole))
        # Qt's header draws its text with a few pixels of margin on each side (and room for a sort arrow).
        if metrics.horizontalAdvance(text) + 8 > header.sectionSize(c):
            bad.append(f"{text} (header elided)")
        elif header.sectionViewportPosition(c) + header.sectionSize(c) > room:
            bad.append(f"{text} (past the right edge)")
    return bad


def inside(plot: Any, item: Any) -> bool:
    """Whether a text item of a plot is drawn wholly inside the plot's view box (not cut)."""
    return bool(plot.vb.sceneBoundingRect().contains(item.sceneBoundingRect()))


def widget_texts(widget: Any) -> list[str]:
    """Every text a user can read in ``widget``: labels, and the cells and headers of its tables."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QAbstractItemView, QLabel

    texts = [label.text() for label in widget.findChildren(QLabel) if label.isVisible()]
    for view in widget.findChildren(QAbstractItemView):
        model = view.model()
        if model is None or not view.isVisible():
            continue
        for c in range(model.columnCount()):
            texts.append(str(model.headerData(c, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole)))
        for r in range(min(model.rowCount(), 200)):
            texts += [str(model.index(r, c).data() or "") for c in range(model.columnCount())]
    return texts

"""The one place that turns exceptions into UI.

* :func:`show_error` — a dialog with a short message and the traceback under "Show details", for
  failures of something the user asked for (open a checkpoint, decode a version).
* :class:`ProblemsPanel` — a non-modal list of per-file problems met in the background (the
  checkpoint's load report, partitions that could not be decoded); the rest stays usable.
* :func:`install_excepthooks` routes ``sys.excepthook`` and ``threading.excepthook`` to the dialog.

With ``STATELENS_RAISE=1`` every function here re-raises instead (tests, debugging). In headless
mode (``--screenshot``) errors are written to stderr, one line each, instead of shown.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from statelens.readers.errors import StatelensError, redact

_state: dict[str, Any] = {"headless": False, "dialogs": [], "parent": None}

#: What to try, by error class (shown under the message).
_HINTS = {
    "NotACheckpointError": "Open the checkpointLocation folder itself: the one holding metadata, offsets/, "
    "commits/ and state/.",
    "StorageError": "Check the path or URL and that credentials for it are set up (for s3:// the usual AWS "
    "variables or profile).",
    "BackendUnavailableError": "This part needs an optional library or backend; the message says which.",
}


def raise_errors() -> bool:
    """True when ``STATELENS_RAISE=1``: errors propagate instead of being shown."""
    return os.environ.get("STATELENS_RAISE") == "1"


def set_headless(headless: bool) -> None:
    """Write errors to stderr instead of showing dialogs (screenshot mode).

    Parameters
    ----------
    headless : bool
    """
    _state["headless"] = headless


def set_dialog_parent(parent: QWidget | None) -> None:
    """The window dialogs are shown over.

    Parameters
    ----------
    parent : QWidget or None
    """
    _state["parent"] = parent


def short_message(err: BaseException) -> str:
    """One line naming what failed: the typed message for statelens errors, else the class too.

    Parameters
    ----------
    err : BaseException

    Returns
    -------
    str
    """
    if isinstance(err, StatelensError):
        return str(err)
    return redact(f"{type(err).__name__}: {err}")


def _details(err: BaseException) -> str:
    return redact("".join(traceback.format_exception(type(err), err, err.__traceback__)))


def open_dialogs() -> list[QMessageBox]:
    """Error dialogs currently shown (newest last)."""
    alive = []
    for box in _state["dialogs"]:
        try:
            if box.isVisible():
                alive.append(box)
        except RuntimeError:  # deleted on the C++ side
            continue
    _state["dialogs"] = alive
    return list(alive)


def show_error(
    err: BaseException, title: str = "statelens", parent: QWidget | None = None
) -> QMessageBox | None:
    """Show ``err`` to the user: a window-modal dialog, the traceback under "Show details".

    Parameters
    ----------
    err : BaseException
    title : str
        What failed, as the dialog title.
    parent : QWidget, optional
        Defaults to the window given to :func:`set_dialog_parent`.

    Returns
    -------
    QMessageBox or None
        The dialog (None in headless mode).

    Raises
    ------
    BaseException
        ``err`` itself when ``STATELENS_RAISE=1``.
    """
    if raise_errors():
        raise err
    if _state["headless"]:
        sys.stderr.write(f"statelens: error: {title}: {short_message(err)}\n")
        return None
    box = QMessageBox(parent or _state["parent"])
    box.setIcon(
        QMessageBox.Icon.Critical if not isinstance(err, StatelensError) else QMessageBox.Icon.Warning
    )
    box.setWindowTitle(title)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setText(short_message(err))
    hint = _HINTS.get(type(err).__name__)
    if hint:
        box.setInformativeText(hint)
    box.setDetailedText(_details(err))
    box.setStandardButtons(QMessageBox.StandardButton.Close)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    _state["dialogs"].append(box)
    box.open()  # window-modal, does not block the event loop
    return box


def _excepthook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
    if raise_errors():
        sys.__excepthook__(kind, err, tb)
        return
    if err.__traceback__ is None and tb is not None:
        err = err.with_traceback(tb)
    try:
        show_error(err, title="Unexpected error")
    except Exception:  # noqa: BLE001 - the hook must never raise; fall back to the default printout
        sys.__excepthook__(kind, err, tb)


def _threading_excepthook(args: threading.ExceptHookArgs) -> None:
    # Qt widgets may only be touched on the GUI thread: other threads print the one line.
    if args.exc_value is not None:
        sys.stderr.write(
            f"statelens: error in thread {args.thread.name if args.thread else '?'}: "
            f"{short_message(args.exc_value)}\n"
        )


def install_excepthooks() -> None:
    """Route uncaught exceptions to :func:`show_error` (unless ``STATELENS_RAISE=1``)."""
    if raise_errors():
        return
    sys.excepthook = _excepthook
    threading.excepthook = _threading_excepthook


def uninstall_excepthooks() -> None:
    """Restore Python's default hooks."""
    sys.excepthook = sys.__excepthook__
    threading.excepthook = threading.__excepthook__


class ProblemsPanel(QWidget):
    """A non-modal list of per-file problems: kind, file, byte offset and message.

    Signals
    -------
    problems_changed(int count)
    """

    problems_changed = Signal(int)

    HEADERS = ("problem", "file", "offset", "message")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._seen: set[tuple[str, str | None, int | None, str]] = set()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.summary = QLabel("No problems.")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.clear_button = QPushButton("Clear")
        self.clear_button.clicked.connect(self.clear)
        top.addWidget(self.summary, 1)
        top.addWidget(self.clear_button)
        layout.addLayout(top)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(list(self.HEADERS))
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setColumnWidth(0, 170)
        self.tree.setColumnWidth(1, 330)
        self.tree.setColumnWidth(2, 70)
        layout.addWidget(self.tree, 1)

    def count(self) -> int:
        """Problems listed."""
        return self.tree.topLevelItemCount()

    def clear(self) -> None:
        """Forget every problem."""
        self.tree.clear()
        self._seen.clear()
        self._update_summary()

    def add_problems(self, errors: Iterable[BaseException], where: str = "") -> int:
        """List problems met in the background; repeats of one problem are listed once.

        Parameters
        ----------
        errors : iterable of BaseException
            Usually :class:`~readers.errors.StatelensError` with a path and offset.
        where : str
            What was being done (prefixed to the message when given).

        Returns
        -------
        int
            How many new problems were listed.
        """
        added = 0
        for err in errors:
            if raise_errors() and not isinstance(err, StatelensError):
                raise err
            path = getattr(err, "path", None)
            offset = getattr(err, "offset", None)
            message = getattr(err, "message", None) or short_message(err)
            context = getattr(err, "context", None) or {}
            if context:
                message += " (" + ", ".join(f"{k}={v}" for k, v in context.items()) + ")"
            key = (type(err).__name__, path, offset, message)
            if key in self._seen:
                continue
            self._seen.add(key)
            if _state["headless"]:
                sys.stderr.write(f"statelens: warning: {short_message(err)}\n")
            # QTreeWidgetItem text is plain text: paths and messages from files are never markup.
            item = QTreeWidgetItem(
                [
                    type(err).__name__,
                    path or "",
                    "" if offset is None else str(offset),
                    f"{where}: {message}" if where else message,
                ]
            )
            item.setToolTip(1, "")
            self.tree.addTopLevelItem(item)
            added += 1
        if added:
            self._update_summary()
        return added

    def _update_summary(self) -> None:
        n = self.count()
        self.summary.setText(
            "No problems."
            if n == 0
            else f"{n} file problem{'s' if n != 1 else ''}: these files could not be read; "
            "everything else is shown."
        )
        self.problems_changed.emit(n)

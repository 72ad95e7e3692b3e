"""File › Open recent: the checkpoints opened last, kept in the settings without credentials."""

from __future__ import annotations

import re
from collections.abc import Callable

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMenu, QWidget

from statelens.readers.errors import redact

MAX_RECENT = 10
SETTINGS_RECENT = "recent_checkpoints"


class RecentCheckpoints:
    """The recent checkpoints and their menu.

    Parameters
    ----------
    settings : QSettings
    open_checkpoint : callable
        Opens a URL picked in the menu.
    parent : QWidget
        The menu's parent.
    """

    def __init__(
        self, settings: QSettings, open_checkpoint: Callable[[str], object], parent: QWidget
    ) -> None:
        self.settings = settings
        self.open_checkpoint = open_checkpoint
        self.menu = QMenu("Open &recent", parent)
        self.menu.aboutToShow.connect(self._fill_menu)

    def urls(self) -> list[str]:
        """The checkpoints opened last, newest first."""
        value = self.settings.value(SETTINGS_RECENT, [])
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else []

    def remember(self, url: str) -> None:
        """Put ``url`` first (never with credentials: they come from the environment)."""
        url = _without_userinfo(redact(url))
        recent = [url] + [u for u in self.urls() if u != url]
        self.settings.setValue(SETTINGS_RECENT, recent[:MAX_RECENT])
        self.settings.sync()

    def _fill_menu(self) -> None:
        self.menu.clear()
        recent = self.urls()
        if not recent:
            self.menu.addAction("(none yet)").setEnabled(False)
        for url in recent:
            action = self.menu.addAction(url)
            action.triggered.connect(lambda _checked=False, u=url: self.open_checkpoint(u))


def _without_userinfo(url: str) -> str:
    """``s3://***@bucket/p`` (a redacted URL) becomes ``s3://bucket/p``."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)

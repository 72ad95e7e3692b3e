"""The window's chrome: the status bar that follows the runner, the sample banner, dropped folders."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Any

from PySide6.QtCore import QObject, Qt, QUrl
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QStatusBar

from statelens.readers.model import Progress

SAMPLE_BANNER = (
    "Sample checkpoint: a small streaming query bundled with statelens to explore. "
    "Open your own with Ctrl+O, by typing a path or URL above, or by dropping a folder on this window."
)


class StatusBar(QObject):
    """A status line, the running jobs' progress with a Cancel button, and which backend read the state.

    Parameters
    ----------
    bar : QStatusBar
        The window's status bar, filled here.
    runner : app.gui.workers.JobRunner
        Whose jobs are followed.
    cancel : callable
        What the Cancel button does.
    idle_text : callable
        The line shown when the last job ends (``Showing ...``).
    quiet_channels : collection of str
        Runner channels whose jobs show no progress (follow mode's polls, every few seconds, say what
        they found on a line of their own).
    """

    def __init__(
        self,
        bar: QStatusBar,
        runner: Any,
        cancel: Callable[[], None],
        idle_text: Callable[[], str],
        quiet_channels: Collection[str] = (),
    ):
        super().__init__(bar)
        self.idle_text = idle_text
        self.runner = runner
        self.quiet_channels = frozenset(quiet_channels)
        self.label = QLabel("Ready")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        bar.addWidget(self.label, 1)
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(260)
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setVisible(False)
        bar.addPermanentWidget(self.progress_bar)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop loading (Esc)")
        self.cancel_button.clicked.connect(cancel)
        self.cancel_button.setVisible(False)
        bar.addPermanentWidget(self.cancel_button)
        self.backend_label = QLabel("")
        self.backend_label.setTextFormat(Qt.TextFormat.PlainText)
        self.backend_label.setToolTip("Which backend answered the last state read")
        bar.addPermanentWidget(self.backend_label)
        runner.job_started.connect(self._on_runner_job_started)
        runner.job_progressed.connect(
            lambda channel, progress: None if channel in self.quiet_channels else self.show_progress(progress)
        )
        runner.idle_changed.connect(self._on_runner_idle_changed)

    def show_progress(self, progress: Progress) -> None:
        """Show how far a job (or Spark's tasks) went."""
        if progress.total > 0:
            self.progress_bar.setRange(0, progress.total)
            self.progress_bar.setValue(min(progress.done, progress.total))
        else:
            self.progress_bar.setRange(0, 0)
        if progress.what:
            self.label.setText(f"{progress.what}…")

    def _on_runner_job_started(self, channel: str, what: str) -> None:
        if channel in self.quiet_channels:
            return
        self.label.setText(f"{what}…")
        self.progress_bar.setRange(0, 0)
        self.progress_bar.setVisible(True)
        self.cancel_button.setVisible(True)

    def _on_runner_idle_changed(self, idle: bool) -> None:
        if not idle and all(job.channel in self.quiet_channels for job in self.runner.running_jobs()):
            return  # a quiet job alone: shown when a job of another channel starts
        self.progress_bar.setVisible(not idle)
        self.cancel_button.setVisible(not idle)
        if idle and self.label.text().endswith("…"):
            self.label.setText(self.idle_text())


def sample_banner() -> QLabel:
    """The banner shown over the tabs while the bundled sample is open."""
    banner = QLabel(SAMPLE_BANNER)
    banner.setTextFormat(Qt.TextFormat.PlainText)
    banner.setWordWrap(True)
    banner.setObjectName("sampleBanner")
    # Translucent amber reads on light and dark palettes alike.
    banner.setStyleSheet(
        "#sampleBanner { background: rgba(245, 158, 11, 60); border: 1px solid rgba(245, 158, 11, 160);"
        " border-radius: 4px; padding: 6px; font-weight: bold; }"
    )
    banner.setVisible(False)
    return banner


def dropped_folder(mime: Any) -> str | None:
    """The first local folder among dropped URLs (None: nothing to open)."""
    if mime is None or not mime.hasUrls():
        return None
    for url in mime.urls():
        if isinstance(url, QUrl) and url.isLocalFile() and os.path.isdir(url.toLocalFile()):
            return url.toLocalFile()
    return None

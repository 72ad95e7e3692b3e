"""Start the desktop app, or render one view offscreen to a PNG (``--screenshot``).

The launcher imports this module for every command, so Qt (PySide6, pyqtgraph and the window) is
imported inside the functions that start the app: the command line stays Qt-free.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from statelens.app.analysis.views import VIEWS
from statelens.app.resources import icon_path, sample_checkpoint_path

if TYPE_CHECKING:
    from statelens.app.gui.window import MainWindow

#: Size of ``--screenshot`` images, in pixels.
SCREENSHOT_SIZE = (1400, 900)

#: Jobs (runner channels) whose results each view shows, loading first; ``--screenshot`` waits for these only.
VIEW_JOBS = {name: ("load", *view.jobs) for name, view in VIEWS.items()}

#: Milliseconds ``--screenshot`` gives other views' jobs to stop after their cancel (it goes on as soon as
#: they have; a job still running when the window closes would signal a window that is gone: on a busy
#: machine a RocksDB replay between two cancel checks took longer than 5 s).
CANCEL_WAIT_MS = 60_000

#: Seconds ``--screenshot`` waits for loading and the view's data before giving up.
SCREENSHOT_TIMEOUT_S = 900


def run_gui(args: argparse.Namespace) -> int:
    """Open the window on ``args.checkpoint`` (the bundled sample when None).

    Parameters
    ----------
    args : argparse.Namespace
        ``checkpoint`` (path or URL, or None), ``screenshot`` (PNG path or None), ``view``,
        ``storage_options`` (fsspec options from ``--storage-option``, or None), ``follow`` and
        ``follow_interval`` (``--follow``, ``--interval``: poll the checkpoint); where to open:
        ``operator_id``, ``store_name``, ``state_version``, ``partition_id``, ``key`` (each optional).

    Returns
    -------
    int
        The exit code: 0, or 2 when ``--screenshot`` could not load the checkpoint.
    """
    view = getattr(args, "view", None) or "overview"
    if view not in VIEWS:
        sys.stderr.write(f"statelens: error: unknown view {view!r}; views: {', '.join(VIEWS)}\n")
        return 2
    screenshot = getattr(args, "screenshot", None)
    if screenshot:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtWidgets import QApplication  # deferred: PySide6 (heavy)

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "statelens"])
    app.setApplicationName("statelens")
    app.setOrganizationName("statelens")
    from PySide6.QtGui import QIcon  # deferred: PySide6 (heavy)

    app.setWindowIcon(QIcon(str(icon_path())))
    _configure_pyqtgraph()

    from statelens.app.gui.window import MainWindow  # deferred: window imports PySide6

    checkpoint = getattr(args, "checkpoint", None)
    url = checkpoint if checkpoint else str(sample_checkpoint_path())
    is_sample = not checkpoint
    storage_options = getattr(args, "storage_options", None)
    target = {
        "operator_id": getattr(args, "operator_id", None),
        "store_name": getattr(args, "store_name", None),
        "version": getattr(args, "state_version", None),
        "partition_id": getattr(args, "partition_id", None),
        "key": getattr(args, "key", None),
    }
    if screenshot:
        window = MainWindow(storage_options=storage_options)
        window.event_logs = list(getattr(args, "event_log", None) or [])
        if any(v is not None for v in target.values()):
            window.start_at(view, **target)
        window.set_backend("native", remember=False)  # reproducible images, whatever the user last chose
        with startup_objects_frozen():
            try:
                return take_screenshot(window, url, screenshot, view, is_sample=is_sample)
            finally:
                window.close()
                window.deleteLater()

    from statelens.app.gui import errors  # deferred: errors imports PySide6

    errors.install_excepthooks()
    window = MainWindow(storage_options=storage_options)
    window.event_logs = list(getattr(args, "event_log", None) or [])
    follow_interval = getattr(args, "follow_interval", None)
    if follow_interval is not None:
        window.follow.set_interval(follow_interval)
    if getattr(args, "follow", False):
        window.follow.set_following(True)  # polls once the checkpoint is shown
    window.select_view(view)
    if any(v is not None for v in target.values()):
        window.start_at(view, **target)
    window.show()
    with startup_objects_frozen():
        window.open_checkpoint(url, is_sample=is_sample)
        try:
            return int(app.exec())
        finally:
            errors.uninstall_excepthooks()


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Leave every object made so far out of the garbage collector's passes while the app runs
    (:func:`gc.freeze`), and give them back at the end (:func:`gc.unfreeze`: a process that goes on,
    such as a test run, collects them again).

    Called once the window is built: what the start made (modules, classes, the window and its views,
    ~150,000 objects that live as long as the app) would otherwise be walked again by every full pass,
    0.05-0.15 s each with the GIL held while a checkpoint is read (the reading threads wait). Objects
    made from then on are collected as before.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _configure_pyqtgraph() -> None:
    import pyqtgraph as pg  # deferred: pyqtgraph (heavy)

    pg.setConfigOptions(antialias=True)


def take_screenshot(
    window: MainWindow,
    url: str,
    out: str,
    view: str = "overview",
    is_sample: bool = False,
    timeout_s: float = SCREENSHOT_TIMEOUT_S,
) -> int:
    """Load ``url`` in ``window``, wait for the jobs the view shows (:data:`VIEW_JOBS`), save a PNG.

    Parameters
    ----------
    window : app.gui.window.MainWindow
    url : str
    out : str
        PNG path.
    view : str
        View to show.
    is_sample : bool
    timeout_s : float
        Give up (exit code 2) when loading takes longer.

    Returns
    -------
    int
        0 when the PNG was written; 2 (with a one-line message on stderr) when loading failed.
    """
    from PySide6.QtCore import QEventLoop, QTimer  # deferred: PySide6 (heavy)
    from PySide6.QtWidgets import QApplication  # deferred: PySide6 (heavy)

    from statelens.app.gui import errors  # deferred: errors imports PySide6

    errors.set_headless(True)
    try:
        window.resize(*SCREENSHOT_SIZE)
        window.select_view(view)
        window.show()
        loop = QEventLoop()
        outcome: dict[str, str] = {}
        needed = VIEW_JOBS.get(view, ())

        def on_failed(message: str) -> None:
            outcome["error"] = message
            loop.quit()

        def on_job_finished(_channel: str) -> None:
            # Done once the checkpoint is shown and the jobs this view draws from have finished;
            # other views' jobs (state growth of a huge store...) are not waited for.
            if window.loaded is not None and all(window.runner.current(ch) is None for ch in needed):
                window.deferred.hold()  # the picture is ready: fill no other view
                loop.quit()

        def on_timeout() -> None:
            outcome.setdefault("error", f"loading took longer than {timeout_s:.0f} s")
            loop.quit()

        window.load_failed.connect(on_failed)
        window.runner.job_finished.connect(on_job_finished)
        timer = QTimer()
        timer.setSingleShot(True)
        timer.timeout.connect(on_timeout)
        timer.start(int(timeout_s * 1000))
        window.open_checkpoint(url, is_sample=is_sample)
        loop.exec()
        timer.stop()
        window.runner.job_finished.disconnect(on_job_finished)
        if not window.runner.idle:
            # Stop jobs of other views and let them wind down (they stop at their next step).
            def on_idle(idle: bool) -> None:
                if idle:
                    loop.quit()

            window.runner.idle_changed.connect(on_idle)
            window.runner.cancel()
            QTimer.singleShot(CANCEL_WAIT_MS, loop.quit)
            loop.exec()
        if "error" in outcome:
            sys.stderr.write(f"statelens: error: {outcome['error']}\n")
            return 2
        # Let layouts and plots settle before grabbing (no progress is driven from here).
        for _ in range(3):
            QApplication.processEvents()
        pixmap = window.grab()
        if not pixmap.save(out, "PNG"):
            sys.stderr.write(f"statelens: error: cannot write {out}\n")
            return 2
        return 0
    finally:
        errors.set_headless(False)

"""The main window: opens checkpoints, runs jobs through the runner and wires views to the selection.

Views never call each other: they send user intent as signals, the window turns intent into
:class:`~app.session.SelectionState` changes, and the views (and the window's job scheduling) observe
that state. Every reader call runs through :class:`~app.gui.workers.JobRunner`.
"""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import QSettings, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.analysis.growth import iter_growth
from app.gui import errors
from app.gui.workers import JobRunner
from app.session import (
    LoadedCheckpoint,
    SelectionState,
    StateTable,
    growth_arrays,
    iter_load_checkpoint,
    iter_state_table,
)
from readers.errors import StatelensError, UsageError
from readers.model import Progress
from viewers.browser import StateBrowserView, store_label
from viewers.growth import StateGrowthView
from viewers.overview import OverviewView
from viewers.timeline import BatchTimelineView

#: View names, as accepted by ``statelens gui --view``, in tab order.
VIEWS = ("overview", "timeline", "growth", "browser")
VIEW_TITLES = {"overview": "Overview", "timeline": "Batch timeline", "growth": "State growth", "browser": "State browser"}

MAX_RECENT = 10
SETTINGS_RECENT = "recent_checkpoints"

SAMPLE_BANNER = (
    "Sample checkpoint: a small streaming query bundled with statelens to explore. "
    "Open your own with Ctrl+O, by typing a path or URL above, or by dropping a folder on this window."
)


class MainWindow(QMainWindow):
    """The statelens desktop window.

    Parameters
    ----------
    settings : QSettings, optional
        Where the recent checkpoints are kept (tests pass a temporary one).

    Signals
    -------
    checkpoint_loaded(object loaded)
        A :class:`~app.session.LoadedCheckpoint` is shown.
    load_failed(str message)
        Opening failed (the previous checkpoint, if any, stays shown).
    growth_updated(int operator_id, str store_name)
    table_updated()
        The state browser shows new rows (or a message why it cannot).
    """

    checkpoint_loaded = Signal(object)
    load_failed = Signal(str)
    growth_updated = Signal(int, str)
    table_updated = Signal()

    def __init__(self, settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings("statelens", "statelens")
        self.selection = SelectionState()
        self.runner = JobRunner(self)
        self.loaded: LoadedCheckpoint | None = None
        self._loading_url: str | None = None
        self._readers: dict[tuple[int, str], Any] = {}

        self.setWindowTitle("statelens")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        errors.set_dialog_parent(self)

        self._build_actions()
        self._build_toolbar()
        self._build_central()
        self._build_status_bar()
        self._build_problems_dock()
        self._build_menus()

        self.selection.connect(self._on_selection_changed)
        self.runner.job_started.connect(self._on_runner_job_started)
        self.runner.job_progressed.connect(self._on_runner_job_progressed)
        self.runner.idle_changed.connect(self._on_runner_idle_changed)

    # -- construction --------------------------------------------------------------------------------
    def _build_actions(self) -> None:
        self.open_action = QAction("&Open folder…", self)
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        self.open_action.triggered.connect(self.open_folder_dialog)
        self.open_url_action = QAction("Open &URL…", self)
        self.open_url_action.setShortcut(QKeySequence("Ctrl+L"))
        self.open_url_action.triggered.connect(self._on_open_url_action_triggered)
        self.reload_action = QAction("&Reload", self)
        self.reload_action.setShortcut(QKeySequence(Qt.Key.Key_F5))
        self.reload_action.triggered.connect(self.reload)
        self.sample_action = QAction("Open &sample checkpoint", self)
        self.sample_action.triggered.connect(self.open_sample)
        self.cancel_action = QAction("&Cancel loading", self)
        self.cancel_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.cancel_action.triggered.connect(self.cancel_jobs)
        self.find_action = QAction("&Find in state…", self)
        self.find_action.setShortcut(QKeySequence.StandardKey.Find)
        self.find_action.triggered.connect(self._on_find_action_triggered)
        self.quit_action = QAction("&Quit", self)
        self.quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        self.quit_action.triggered.connect(self.close)
        for action in (self.open_action, self.open_url_action, self.reload_action, self.cancel_action,
                       self.find_action, self.quit_action):
            self.addAction(action)

    def _build_toolbar(self) -> None:
        bar = QToolBar("Checkpoint")
        bar.setMovable(False)
        bar.addAction(self.open_action)
        bar.addAction(self.reload_action)
        bar.addSeparator()
        bar.addWidget(QLabel(" Path or URL: "))
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("/path/to/checkpoint, file:///…, s3://bucket/prefix (any fsspec URL)")
        self.url_edit.setClearButtonEnabled(True)
        self.url_edit.returnPressed.connect(self._on_url_edit_return_pressed)
        bar.addWidget(self.url_edit)
        self.url_button = QPushButton("Open")
        self.url_button.clicked.connect(self._on_url_edit_return_pressed)
        bar.addWidget(self.url_button)
        self.addToolBar(bar)

    def _build_central(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        self.banner = QLabel(SAMPLE_BANNER)
        self.banner.setTextFormat(Qt.TextFormat.PlainText)
        self.banner.setWordWrap(True)
        self.banner.setObjectName("sampleBanner")
        # Translucent amber reads on light and dark palettes alike.
        self.banner.setStyleSheet(
            "#sampleBanner { background: rgba(245, 158, 11, 60); border: 1px solid rgba(245, 158, 11, 160);"
            " border-radius: 4px; padding: 6px; font-weight: bold; }"
        )
        self.banner.setVisible(False)
        layout.addWidget(self.banner)

        self.tabs = QTabWidget()
        self.overview = OverviewView(self.selection)
        self.timeline = BatchTimelineView(self.selection)
        self.growth = StateGrowthView(self.selection)
        self.browser = StateBrowserView(self.selection)
        self.views = {"overview": self.overview, "timeline": self.timeline, "growth": self.growth,
                      "browser": self.browser}
        for name in VIEWS:
            self.tabs.addTab(self.views[name], VIEW_TITLES[name])
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.overview.batch_selected.connect(self._on_view_batch_selected)
        self.timeline.batch_selected.connect(self._on_view_batch_selected)
        self.growth.store_selected.connect(self._on_view_store_selected)
        self.browser.store_selected.connect(self._on_view_store_selected)
        self.browser.partition_selected.connect(self._on_browser_partition_selected)
        self.browser.version_selected.connect(self._on_browser_version_selected)
        self.browser.key_selected.connect(self._on_browser_key_selected)

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.status_label = QLabel("Ready")
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)
        status.addWidget(self.status_label, 1)
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(260)
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setVisible(False)
        status.addPermanentWidget(self.progress_bar)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop loading (Esc)")
        self.cancel_button.clicked.connect(self.cancel_jobs)
        self.cancel_button.setVisible(False)
        status.addPermanentWidget(self.cancel_button)

    def _build_problems_dock(self) -> None:
        self.problems = errors.ProblemsPanel()
        self.problems_dock = QDockWidget("Problems", self)
        self.problems_dock.setObjectName("problemsDock")
        self.problems_dock.setWidget(self.problems)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.problems_dock)
        self.problems_dock.setVisible(False)
        self.problems.problems_changed.connect(self._on_problems_problems_changed)

    def _build_menus(self) -> None:
        menu = self.menuBar().addMenu("&File")
        menu.addAction(self.open_action)
        menu.addAction(self.open_url_action)
        self.recent_menu = QMenu("Open &recent", self)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        menu.addMenu(self.recent_menu)
        menu.addAction(self.sample_action)
        menu.addSeparator()
        menu.addAction(self.reload_action)
        menu.addAction(self.cancel_action)
        menu.addSeparator()
        menu.addAction(self.quit_action)
        view_menu = self.menuBar().addMenu("&View")
        for n, name in enumerate(VIEWS, start=1):
            action = QAction(VIEW_TITLES[name], self)
            action.setShortcut(QKeySequence(f"Ctrl+{n}"))
            action.triggered.connect(lambda _checked=False, v=name: self.select_view(v))
            view_menu.addAction(action)
            self.addAction(action)
        view_menu.addSeparator()
        view_menu.addAction(self.problems_dock.toggleViewAction())
        view_menu.addAction(self.find_action)

    # -- opening -------------------------------------------------------------------------------------
    def open_checkpoint(self, url: str, is_sample: bool = False) -> int:
        """Start opening a checkpoint (cancels an opening still running).

        Parameters
        ----------
        url : str
            Local path or fsspec URL.
        is_sample : bool
            Whether it is the bundled sample (shows the banner, not added to recent).

        Returns
        -------
        int
            The load job's token.
        """
        url = url.strip()
        self._loading_url = url
        return self.runner.submit(
            "load",
            iter_load_checkpoint,
            url,
            is_sample,
            what=f"Opening {_short(url)}",
            on_result=self._on_load_finished,
            on_error=self._on_load_errored,
        )

    def open_sample(self) -> int:
        """Open the checkpoint bundled with statelens."""
        from app.cli import sample_checkpoint_path

        return self.open_checkpoint(str(sample_checkpoint_path()), is_sample=True)

    def open_folder_dialog(self) -> None:
        """Ask for a folder and open it (Ctrl+O)."""
        start = self.loaded.url if self.loaded and "://" not in self.loaded.url else os.path.expanduser("~")
        folder = QFileDialog.getExistingDirectory(self, "Open a checkpoint folder", start)
        if folder:
            self.open_checkpoint(folder)

    def reload(self) -> None:
        """Open the current checkpoint again (F5)."""
        if self.loaded is not None:
            self.open_checkpoint(self.loaded.url, self.loaded.is_sample)
        elif self._loading_url:
            self.open_checkpoint(self._loading_url)

    def cancel_jobs(self) -> None:
        """Stop every running job at its next step (the Cancel button)."""
        if self.runner.idle:
            return
        loading = self.runner.current("load") is not None
        self.runner.cancel()
        self.status_label.setText(f"Cancelled opening {_short(self._loading_url or '')}" if loading else "Cancelled")

    def recent_checkpoints(self) -> list[str]:
        value = self.settings.value(SETTINGS_RECENT, [])
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else []

    def _remember(self, url: str) -> None:
        recent = [url] + [u for u in self.recent_checkpoints() if u != url]
        self.settings.setValue(SETTINGS_RECENT, recent[:MAX_RECENT])
        self.settings.sync()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = self.recent_checkpoints()
        if not recent:
            action = self.recent_menu.addAction("(none yet)")
            action.setEnabled(False)
            return
        for url in recent:
            action = self.recent_menu.addAction(url)
            action.triggered.connect(lambda _checked=False, u=url: self.open_checkpoint(u))

    def _on_load_finished(self, loaded: LoadedCheckpoint) -> None:
        # Results of the previous checkpoint's jobs must not land in the new one's views.
        self.runner.cancel("growth")
        self.runner.cancel("browser")
        reloading = self.loaded is not None and self.loaded.url == loaded.url
        previous = self.selection.snapshot()
        self.loaded = loaded
        self._readers = {}
        ckpt = loaded.checkpoint
        title = f"{loaded.location} — statelens" + (" (sample checkpoint)" if loaded.is_sample else "")
        self.setWindowTitle(title)
        self.banner.setVisible(loaded.is_sample)
        self.url_edit.setText(loaded.url)
        if not loaded.is_sample:
            self._remember(loaded.url)

        self.problems.clear()
        self.problems.add_problems(ckpt.report.problems, where="loading")
        self.overview.set_checkpoint(loaded.location, ckpt.query_id, ckpt.batches, ckpt.operators, ckpt.report.problems)
        self.timeline.set_batches(ckpt.batches)
        self.browser.set_operators(ckpt.operators)
        stores = loaded.hdfs_stores()
        self.growth.clear()
        self.growth.set_stores([(op.operator_id, s.store_name, store_label(op, s)) for op, s in stores])
        self.status_label.setText(
            f"Opened {loaded.location}: {len(ckpt.batches):,} batches, {len(ckpt.operators)} stateful operators"
            + (f", {len(ckpt.report.problems)} file problems" if ckpt.report.problems else "")
        )

        # Create the store readers here, on the GUI thread; jobs only use them.
        for op, s in stores:
            try:
                self._reader(op.operator_id, s.store_name)
            except StatelensError as err:
                self.problems.add_problems([err], where="opening store")
        self.checkpoint_loaded.emit(loaded)

        # Selection last: it starts the browser's decoding job. A reload (F5) keeps what was selected.
        self.selection.reset()
        default = loaded.default_store()
        kept = reloading and self._store_exists(previous["operator_id"], previous["store_name"])
        if kept:
            self.selection.update(**{k: v for k, v in previous.items() if k != "key"})
        elif default is not None:
            versions = loaded.checkpoint.operator(default[0]).store(default[1]).versions
            self.selection.update(
                operator_id=default[0], store_name=default[1], partition_id=None,
                version=versions[-1] if versions else None,
            )
        else:
            self.browser.clear_table("This checkpoint has no state store the native reader can decode.")
            self.table_updated.emit()
        if stores:
            for op, s in stores:
                self.growth.set_store_status(op.operator_id, s.store_name, "computing…")
            self.runner.submit(
                "growth",
                iter_growth,
                ckpt,
                what="Measuring state growth",
                on_result=self._on_growth_finished,
                on_error=self._on_growth_errored,
            )

    def _store_exists(self, operator_id: int | None, store_name: str | None) -> bool:
        if self.loaded is None or operator_id is None:
            return False
        return any(op.operator_id == operator_id and s.store_name == store_name
                   for op, s in self.loaded.hdfs_stores())

    def _on_load_errored(self, err: BaseException) -> None:
        message = errors.short_message(err)
        self.status_label.setText(f"Could not open {_short(self._loading_url or '')}")
        self.load_failed.emit(message)
        errors.show_error(err, title="Could not open the checkpoint")

    def _reader(self, operator_id: int, store_name: str) -> Any:
        key = (operator_id, store_name)
        if key not in self._readers:
            if self.loaded is None:
                raise UsageError("no checkpoint is open")
            self._readers[key] = self.loaded.checkpoint.store_reader(operator_id, store_name)
        return self._readers[key]

    # -- growth --------------------------------------------------------------------------------------
    def _on_growth_finished(self, result: Any) -> None:
        self.problems.add_problems(result.problems, where="state growth")
        for store in result.stores:
            if store.skipped:
                self.growth.set_store_status(store.operator_id, store.store_name, store.skipped)
                continue
            pids, versions, metrics = growth_arrays(store)
            self.growth.set_growth(store.operator_id, store.store_name, pids, versions, metrics)
            bad = [p for p in result.problems
                   if p.context.get("operator_id") == store.operator_id and p.context.get("store_name") == store.store_name]
            self.growth.set_store_status(
                store.operator_id, store.store_name,
                f"{len(bad)} file(s) could not be read; their versions are gaps. See Problems." if bad else "",
            )
            self.growth_updated.emit(store.operator_id, store.store_name)

    def _on_growth_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="state growth")
        else:
            errors.show_error(err, title="Measuring state growth failed")

    # -- browser -------------------------------------------------------------------------------------
    def _request_table(self) -> None:
        s = self.selection
        if self.loaded is None or s.operator_id is None or s.store_name is None:
            return
        if s.version is None:
            self.browser.clear_table("This store has no readable version.")
            self.table_updated.emit()
            return
        try:
            reader = self._reader(s.operator_id, s.store_name)
        except StatelensError as err:
            self.browser.clear_table(str(err))
            self.table_updated.emit()
            return
        where = "all partitions" if s.partition_id is None else f"partition {s.partition_id}"
        time_columns = self.loaded.checkpoint.operator(s.operator_id).time_columns
        self.browser.set_loading(f"Decoding operator {s.operator_id} {s.store_name}, {where}, version {s.version}…")
        self.runner.submit(
            "browser",
            iter_state_table,
            reader,
            s.version,
            s.partition_id,
            time_columns=time_columns,
            what=f"Decoding version {s.version}",
            on_result=self._on_table_finished,
            on_error=self._on_table_errored,
        )

    def _on_table_finished(self, table: StateTable) -> None:
        where = "all partitions" if table.partition_id is None else f"partition {table.partition_id}"
        parts = [f"{table.total_rows:,} row{'s' if table.total_rows != 1 else ''}", f"operator {table.operator_id} {table.store_name}", where,
                 f"version {table.version} (state after batch {table.version - 1})", *table.notes]
        if table.problems:
            self.problems.add_problems(table.problems, where=f"decoding version {table.version}")
            parts.append(f"{len(table.problems)} partition(s) could not be read: see Problems")
        self.browser.set_table(table.headers, table.columns, table.sort_keys, table.keys, " · ".join(parts))
        self.table_updated.emit()

    def _on_table_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            if not isinstance(err, UsageError):
                self.problems.add_problems([err], where="state browser")
            self.browser.clear_table(f"Cannot show this state: {err}")
            self.table_updated.emit()
        else:
            self.browser.clear_table(f"Decoding failed: {errors.short_message(err)}")
            self.table_updated.emit()
            errors.show_error(err, title="Decoding state failed")

    # -- selection wiring ----------------------------------------------------------------------------
    def _on_view_batch_selected(self, batch_id: int) -> None:
        self.selection.select_batch(batch_id)

    def _on_view_store_selected(self, operator_id: int, store_name: str) -> None:
        version = self.selection.version
        if self.selection.batch_id is None and self.loaded is not None:
            versions = self.loaded.checkpoint.operator(operator_id).store(store_name).versions
            version = versions[-1] if versions else None
        self.selection.update(operator_id=operator_id, store_name=store_name, partition_id=None,
                              version=version, key=None)

    def _on_browser_partition_selected(self, partition_id: int | None) -> None:
        self.selection.update(partition_id=partition_id, key=None)

    def _on_browser_version_selected(self, version: int) -> None:
        self.selection.update(version=version, batch_id=version - 1 if version > 0 else None, key=None)

    def _on_browser_key_selected(self, key: Any) -> None:
        self.selection.update(key=key)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if {"operator_id", "store_name", "partition_id", "version"} & set(changes):
            self._request_table()

    # -- views ---------------------------------------------------------------------------------------
    def select_view(self, name: str) -> None:
        """Show one view: ``overview``, ``timeline``, ``growth`` or ``browser``."""
        if name not in self.views:
            raise UsageError(f"unknown view {name!r}; views: {', '.join(VIEWS)}")
        self.tabs.setCurrentWidget(self.views[name])

    def current_view(self) -> str:
        widget = self.tabs.currentWidget()
        return next(name for name, view in self.views.items() if view is widget)

    def _on_find_action_triggered(self) -> None:
        self.select_view("browser")
        self.browser.focus_filter()

    def _on_open_url_action_triggered(self) -> None:
        self.url_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.url_edit.selectAll()

    def _on_url_edit_return_pressed(self) -> None:
        text = self.url_edit.text().strip()
        if text:
            self.open_checkpoint(text)

    def _on_problems_problems_changed(self, count: int) -> None:
        if count:
            self.problems_dock.setVisible(True)
        self.problems_dock.setWindowTitle(f"Problems ({count})" if count else "Problems")

    # -- status bar ----------------------------------------------------------------------------------
    def _on_runner_job_started(self, channel: str, what: str) -> None:
        self.status_label.setText(f"{what}…")
        self.progress_bar.setRange(0, 0)
        self.progress_bar.setVisible(True)
        self.cancel_button.setVisible(True)

    def _on_runner_job_progressed(self, channel: str, progress: Progress) -> None:
        if progress.total > 0:
            self.progress_bar.setRange(0, progress.total)
            self.progress_bar.setValue(min(progress.done, progress.total))
        else:
            self.progress_bar.setRange(0, 0)
        if progress.what:
            self.status_label.setText(f"{progress.what}…")

    def _on_runner_idle_changed(self, idle: bool) -> None:
        self.progress_bar.setVisible(not idle)
        self.cancel_button.setVisible(not idle)
        if idle and self.status_label.text().endswith("…"):
            self.status_label.setText(f"Showing {self.loaded.location}" if self.loaded else "Ready")

    # -- drag and drop -------------------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if _dropped_folder(event.mimeData()) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        folder = _dropped_folder(event.mimeData())
        if folder is not None:
            event.acceptProposedAction()
            self.open_checkpoint(folder)

    # -- closing -------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.runner.shutdown():
            import sys

            names = ", ".join(job.what or job.channel for job in self.runner.running_jobs())
            sys.stderr.write(f"statelens: warning: jobs still running at exit: {names}\n")
        self.selection.disconnect_all()
        errors.set_dialog_parent(None)
        super().closeEvent(event)


def _dropped_folder(mime: Any) -> str | None:
    if mime is None or not mime.hasUrls():
        return None
    for url in mime.urls():
        if isinstance(url, QUrl) and url.isLocalFile() and os.path.isdir(url.toLocalFile()):
            return url.toLocalFile()
    return None


def _short(url: str, limit: int = 80) -> str:
    return url if len(url) <= limit else "…" + url[-(limit - 1):]

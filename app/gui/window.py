"""The main window: builds menus, toolbar, tabs and docks, opens checkpoints and routes to the tabs.

Each tab's behaviour (what it loads, what its actions do) lives in its controller under
:mod:`app.gui.controllers`; controllers reach the window only through
:class:`~app.gui.controllers.context.WindowContext` and their signals. Views never call each other:
they send user intent as signals, which becomes :class:`~app.session.SelectionState` changes that the
views and controllers observe. Every reader call runs through :class:`~app.gui.workers.JobRunner`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from statelens.app.analysis.views import VIEWS as GUI_VIEWS
from statelens.app.gui import errors
from statelens.app.gui.chrome import StatusBar, dropped_folder, sample_banner
from statelens.app.gui.controllers.context import WindowContext, controller_class
from statelens.app.gui.controllers.export import CHANNEL as EXPORT_CHANNEL
from statelens.app.gui.controllers.export import ExportController
from statelens.app.gui.controllers.fleet import FleetController
from statelens.app.gui.controllers.history import CHANNEL as HISTORY_CHANNEL
from statelens.app.gui.controllers.history import HistoryController
from statelens.app.gui.follow import CHANNEL as FOLLOW_CHANNEL
from statelens.app.gui.follow import FollowController
from statelens.app.gui.recent import RecentCheckpoints
from statelens.app.gui.workers import JobRunner
from statelens.app.resources import sample_checkpoint_path
from statelens.app.session import LoadedCheckpoint, iter_load_checkpoint
from statelens.readers.errors import UsageError
from statelens.viewers.tables import DataTableView

#: View names, as accepted by ``statelens gui --view``, in tab order (:data:`app.analysis.views.VIEWS`).
VIEWS = tuple(GUI_VIEWS)
#: Runner channels of per-checkpoint jobs (cancelled when another checkpoint is shown): every view's,
#: the key history's and the export's.
CHECKPOINT_CHANNELS = (
    *(job for view in GUI_VIEWS.values() for job in view.jobs),
    HISTORY_CHANNEL,
    EXPORT_CHANNEL,
)


class MainWindow(QMainWindow):
    """The statelens desktop window.

    Parameters
    ----------
    settings : QSettings, optional
        Where the recent checkpoints are kept (tests pass a temporary one).
    storage_options : dict, optional
        fsspec storage options (``--storage-option``) for every checkpoint opened but the bundled
        sample; never written to the settings.

    Signals
    -------
    checkpoint_loaded(object loaded)
        A :class:`~app.session.LoadedCheckpoint` is shown.
    checkpoint_refreshed(object loaded)
        The checkpoint shown, grown by new batches, is shown in its place (follow mode,
        :meth:`refresh_checkpoint`).
    load_failed(str message)
        Opening failed (the previous checkpoint, if any, stays shown).

    Each tab's controller (``overview_controller``, ``browser_controller``...) sends ``updated`` when
    its view shows new results; ``exporter.finished`` says a file was written.
    """

    checkpoint_loaded = Signal(object)
    checkpoint_refreshed = Signal(object)
    load_failed = Signal(str)

    def __init__(
        self,
        settings: QSettings | None = None,
        parent: QWidget | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings("statelens", "statelens")
        self.runner = JobRunner(self)
        options = dict(storage_options or {})
        self.ctx = ctx = WindowContext(self.runner, self.settings, options, self.current_view, VIEWS, self)
        self.selection, self.time_zone, self.problems = ctx.selection, ctx.time_zone, ctx.problems
        self.backends, self.deferred = ctx.backends, ctx.deferred
        self._loading_url: str | None = None
        self.recent = RecentCheckpoints(self.settings, self.open_checkpoint, self)
        #: Where to open once the next checkpoint is shown (``statelens gui --view --store ...``).
        self._start_at: dict[str, Any] | None = None

        self.setWindowTitle("statelens")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        errors.set_dialog_parent(self)
        self._build_controllers()
        #: Follow mode: polls the checkpoint shown and refreshes the views as batches commit.
        self.follow = FollowController(self)
        self._build_actions()
        self._build_toolbar()
        self._build_central()
        self._build_status_bar()
        self._build_docks()
        self._build_menus()
        self._show_backend()
        self.selection.connect(self._on_selection_changed)
        self.ctx.status_changed.connect(self.status_label.setText)
        self.runner.idle_changed.connect(self.deferred.on_idle_changed)

    # -- construction --------------------------------------------------------------------------------
    def _build_controllers(self) -> None:
        ctx = self.ctx
        # Views are built in tab order, each observing the selection before the controllers do.
        self.controllers = {name: controller_class(view)(ctx) for name, view in GUI_VIEWS.items()}
        self.history_controller = HistoryController(ctx)
        self.views = {name: ctl.view for name, ctl in self.controllers.items()}
        c = self.controllers
        # The controllers the window wires to each other (and tests reach through the window).
        self.overview_controller, self.timeline_controller = c["overview"], c["timeline"]
        self.growth_controller, self.expired_controller = c["growth"], c["expired"]
        self.browser_controller, self.sql_controller = c["browser"], c["sql"]
        self.schema_controller = c["schema"]
        self.overview, self.timeline = self.overview_controller.view, self.timeline_controller.view
        self.growth, self.expired = self.growth_controller.view, self.expired_controller.view
        self.browser, self.sql = self.browser_controller.view, self.sql_controller.view
        self.schema, self.history = self.schema_controller.view, self.history_controller.view
        self.exporter = ExportController(
            ctx, self, self.controllers, self.browser_controller, self.current_view
        )
        self.backends.changed.connect(self._on_backends_changed)
        self.browser_controller.backend_used.connect(lambda text: self.backend_label.setText(text))
        # The verdicts' growth and expired runs fill those views when their own jobs have not started.
        self.overview_controller.summary_finished.connect(self.expired_controller.adopt)
        self.overview_controller.summary_finished.connect(self.growth_controller.adopt)
        self.overview_controller.open_requested.connect(lambda view, target: self.open_at(view, **target))
        self.history.refresh_requested.connect(self.browser_controller.request_history)
        # A folder of checkpoints opens as a table of them; a double-click opens one here.
        self.fleet_controller = FleetController(self.runner, ctx.storage_options, self)
        self.fleet_controller.open_requested.connect(self.open_checkpoint)

    def _action(self, text: str, slot: Any, shortcut: Any = None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            self.addAction(action)
        if tip:
            action.setToolTip(tip)
        action.triggered.connect(slot)
        return action

    def _build_actions(self) -> None:
        self.open_action = self._action(
            "&Open folder…", self.open_folder_dialog, QKeySequence.StandardKey.Open
        )
        self.open_url_action = self._action("Open &URL…", self._on_open_url_action_triggered, "Ctrl+L")
        self.reload_action = self._action("&Reload", self.reload, Qt.Key.Key_F5)
        self.event_log_action = self._action(
            "Add &event log…",
            self._on_event_log_action_triggered,
            tip="Spark event log, driver log or progress JSON lines of this query: durations, rows and rates on "
            "the batch timeline",
        )
        self.sample_action = self._action("Open &sample checkpoint", self.open_sample)
        self.cancel_action = self._action("&Cancel loading", self.cancel_jobs, Qt.Key.Key_Escape)
        self.find_action = self._action(
            "&Find in state…", self._on_find_action_triggered, QKeySequence.StandardKey.Find
        )
        self.quit_action = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.utc_action = QAction("Show times in &UTC", self)
        self.utc_action.setCheckable(True)
        self.utc_action.setChecked(self.time_zone.utc)
        self.utc_action.setToolTip(
            "Batch starts, watermarks, timeouts and thresholds in UTC instead of local time "
            "(times inside state values are always UTC)"
        )
        self.utc_action.toggled.connect(self.set_times_in_utc)

    def _build_toolbar(self) -> None:
        bar = QToolBar("Checkpoint")
        bar.setMovable(False)
        bar.addAction(self.open_action)
        bar.addAction(self.reload_action)
        bar.addAction(self.follow.action)
        bar.addSeparator()
        bar.addWidget(QLabel(" Path or URL: "))
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText(
            "/path/to/checkpoint, file:///…, s3://bucket/prefix (any fsspec URL)"
        )
        self.url_edit.setClearButtonEnabled(True)
        self.url_edit.returnPressed.connect(self._on_url_edit_return_pressed)
        bar.addWidget(self.url_edit)
        self.url_button = QPushButton("Open")
        self.url_button.clicked.connect(self._on_url_edit_return_pressed)
        bar.addWidget(self.url_button)
        bar.addSeparator()
        self.backends.add_to_toolbar(bar)
        self.addToolBar(bar)

    def _build_central(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        self.banner = sample_banner()
        layout.addWidget(self.banner)
        self.tabs = QTabWidget()
        for name, view in GUI_VIEWS.items():
            self.tabs.addTab(self.views[name], view.title)
        self.tabs.currentChanged.connect(lambda _i: self.deferred.on_view_shown(self.current_view()))
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

    def _build_status_bar(self) -> None:
        self.status = StatusBar(
            self.statusBar(),
            self.runner,
            self.cancel_jobs,
            lambda: f"Showing {self.loaded.location}" if self.loaded else "Ready",
            quiet_channels=(FOLLOW_CHANNEL,),
        )
        self.status_label, self.progress_bar = self.status.label, self.status.progress_bar
        self.cancel_button, self.backend_label = self.status.cancel_button, self.status.backend_label
        self.backends.spark_progressed.connect(self.status.show_progress)  # Spark's tasks
        self.statusBar().addPermanentWidget(self.follow.label)

    def _build_docks(self) -> None:
        self.problems_dock = QDockWidget("Problems", self)
        self.problems_dock.setObjectName("problemsDock")
        self.problems_dock.setWidget(self.problems)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.problems_dock)
        self.problems_dock.setVisible(False)
        self.problems.problems_changed.connect(self._on_problems_problems_changed)
        self.history_dock = self.history_controller.dock
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.history_dock)
        self.history_dock.setVisible(False)
        for table in self.findChildren(DataTableView):
            table.export_requested.connect(lambda fmt, t=table: self.exporter.export_table_dialog(t, fmt))

    def _build_menus(self) -> None:
        menu = self.menuBar().addMenu("&File")
        menu.addAction(self.open_action)
        menu.addAction(self.open_url_action)
        menu.addMenu(self.recent.menu)
        menu.addAction(self.sample_action)
        menu.addAction(self.event_log_action)
        menu.addSeparator()
        for action in self.exporter.menu_actions():
            menu.addAction(action)
        menu.aboutToShow.connect(self.exporter.update_actions)
        menu.addSeparator()
        menu.addAction(self.reload_action)
        menu.addAction(self.follow.action)
        menu.addAction(self.cancel_action)
        menu.addSeparator()
        menu.addAction(self.quit_action)
        view_menu = self.menuBar().addMenu("&View")
        for n, view in enumerate(GUI_VIEWS.values(), start=1):
            view_menu.addAction(
                self._action(view.title, lambda _checked=False, v=view.name: self.select_view(v), f"Ctrl+{n}")
            )
        view_menu.addSeparator()
        view_menu.addAction(self.problems_dock.toggleViewAction())
        view_menu.addAction(self.history_dock.toggleViewAction())
        view_menu.addAction(self.find_action)
        view_menu.addSeparator()
        view_menu.addAction(self.utc_action)
        backend_menu = self.menuBar().addMenu("&Backend")
        for action in self.backends.menu_actions():
            backend_menu.addAction(action) if action is not None else backend_menu.addSeparator()

    # -- opening -------------------------------------------------------------------------------------
    @property
    def loaded(self) -> LoadedCheckpoint | None:
        """The checkpoint shown (None before the first one opens)."""
        return self.ctx.loaded

    @property
    def event_logs(self) -> list[str]:
        """Event logs, driver logs or progress dumps shown on the timeline and used by the verdicts."""
        return self.ctx.event_logs

    @event_logs.setter
    def event_logs(self, paths: list[str]) -> None:
        self.ctx.event_logs = list(paths)

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
            storage_options=None if is_sample else self.ctx.storage_options,
            what=f"Opening {_short(url)}",
            on_result=self._on_load_finished,
            on_error=self._on_load_errored,
        )

    def open_sample(self) -> int:
        """Open the checkpoint bundled with statelens."""

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
        self.deferred.hold()  # a hidden view still fills when it is shown
        if self.runner.idle:
            return
        loading = self.runner.current("load") is not None
        self.backends.cancel_spark_read()  # a Spark job does not yield: cancel its job group
        for ctl in self.controllers.values():
            ctl.cancel()
        self.runner.cancel()
        self.status_label.setText(
            f"Cancelled opening {_short(self._loading_url or '')}" if loading else "Cancelled"
        )

    def _on_load_finished(self, loaded: LoadedCheckpoint) -> None:
        # Results of the previous checkpoint's jobs must not land in the new one's views.
        for channel in CHECKPOINT_CHANNELS:
            self.runner.cancel(channel)
        self.backends.cancel_spark_read()
        ctx = self.ctx
        reloading = ctx.loaded is not None and ctx.loaded.url == loaded.url
        previous = self.selection.snapshot()
        ctx.store_chosen = ctx.store_chosen and reloading
        self.backends.set_checkpoint(loaded.checkpoint)  # closes the previous one's
        ctx.set_checkpoint(loaded)
        self.deferred.clear()
        ckpt = loaded.checkpoint
        self.setWindowTitle(
            f"{loaded.location} — statelens" + (" (sample checkpoint)" if loaded.is_sample else "")
        )
        self.banner.setVisible(loaded.is_sample)
        self.url_edit.setText(loaded.url)
        if not loaded.is_sample:
            self.recent.remember(loaded.url)
        self.problems.clear()
        self.problems.add_problems(ckpt.report.problems, where="loading")
        for ctl in (*self.controllers.values(), self.history_controller):
            ctl.show_checkpoint(loaded)
        self.status_label.setText(
            f"Opened {loaded.location}: {len(ckpt.batches):,} batches, {len(ckpt.operators)} stateful operators"
            + (f", {len(ckpt.report.problems)} file problems" if ckpt.report.problems else "")
        )
        ctx.open_readers()
        self.checkpoint_loaded.emit(loaded)
        # Selection last: it starts the browser's decoding job. A reload (F5) keeps what was selected.
        if not ctx.select_first_store(previous, reloading):
            self.browser_controller.show_no_store()
        for ctl in self.controllers.values():
            ctl.start(loaded)
        if self._start_at is not None:
            start, self._start_at = self._start_at, None
            try:
                self.open_at(**start)
            except UsageError as err:
                self.status_label.setText(str(err))
                errors.show_error(err, title="Cannot open there")

    def refresh_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        """Show ``loaded``, the checkpoint shown as opened again with new batches (follow mode), in its
        place: the selection (store, partition, version, key) stays, so the browser keeps its rows and
        reads nothing; every other view is filled again from ``loaded`` (state versions decoded before
        come from the on-disk cache)."""
        for channel in CHECKPOINT_CHANNELS:
            self.runner.cancel(channel)
        self.backends.cancel_spark_read()
        ctx = self.ctx
        previous = self.selection.snapshot()
        self.backends.set_checkpoint(loaded.checkpoint)  # closes the previous one's
        ctx.set_checkpoint(loaded)
        self.deferred.clear()
        self.problems.clear()
        self.problems.add_problems(loaded.checkpoint.report.problems, where="loading")
        for ctl in (*self.controllers.values(), self.history_controller):
            ctl.refresh(loaded)
        ctx.open_readers()
        # Only fields that changed reach the views: a store, version or key still there stays as it was.
        opening = ctx.catalog.opening(previous, True, loaded.default_store())
        if opening is not None:
            self.selection.update(**opening)
        for ctl in self.controllers.values():
            ctl.start(loaded)
        self.checkpoint_refreshed.emit(loaded)

    def _on_load_errored(self, err: BaseException) -> None:
        url = self._loading_url  # a folder of checkpoints opens as a fleet table
        if not (
            url and self.fleet_controller.look_below(url, err, self._load_failed, self.status_label.setText)
        ):
            self._load_failed(err)

    def _load_failed(self, err: BaseException) -> None:
        self.status_label.setText(f"Could not open {_short(self._loading_url or '')}")
        self.load_failed.emit(errors.short_message(err))
        errors.show_error(err, title="Could not open the checkpoint")

    def add_event_logs(self, paths: list[str]) -> None:
        """Show what the query reported (event logs, driver logs, progress dumps) on the batch timeline,
        and in the verdicts (slowest batches, rows dropped by the watermark)."""
        if self.timeline_controller.add_event_logs(paths) and self.loaded is not None:
            self.overview_controller.check(self.loaded.checkpoint)

    def _on_event_log_action_triggered(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add event log, driver log or progress JSON lines")
        if paths:
            self.add_event_logs(paths)

    # -- where the window shows ----------------------------------------------------------------------
    def start_at(self, view: str, **target: Any) -> None:
        """Open the next checkpoint shown at ``view`` and ``target`` (as :meth:`open_at`), e.g. from
        ``statelens gui CKPT --view expired --operator 0 --store default``."""
        self._start_at = {"view": view, **{k: v for k, v in target.items() if v is not None}}

    def open_at(self, view: str, **target: Any) -> None:
        """Show ``view`` (one of :data:`VIEWS`) at a store, version, partition, key or batch: keywords
        ``operator_id``, ``store_name``, ``version``, ``partition_id``, ``key``, ``batch_id`` (see
        :meth:`WindowContext.target`). Raises :class:`~readers.errors.UsageError` for an unknown view,
        operator or store (naming the ones there are)."""
        if view not in self.views:
            raise UsageError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
        change = self.ctx.target(**target)
        self.select_view(view)
        if change:
            self.selection.update(**change)
        if "operator_id" in change:
            for ctl in self.controllers.values():
                ctl.show_store(change["operator_id"], change["store_name"])

    def select_view(self, name: str) -> None:
        """Show one view of :data:`VIEWS`."""
        if name not in self.views:
            raise UsageError(f"unknown view {name!r}; views: {', '.join(VIEWS)}")
        self.tabs.setCurrentWidget(self.views[name])

    def current_view(self) -> str:
        widget = self.tabs.currentWidget()
        return next(name for name, view in self.views.items() if view is widget)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        for ctl in (*self.controllers.values(), self.history_controller):
            ctl.on_selection_changed(changes)

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

    def set_times_in_utc(self, utc: bool, remember: bool = True) -> None:
        """Show the checkpoint's times in UTC (True) or local time (:meth:`WindowContext.set_times_in_utc`)."""
        blocked = self.utc_action.blockSignals(True)
        self.utc_action.setChecked(utc)
        self.utc_action.blockSignals(blocked)
        self.ctx.set_times_in_utc(utc, remember)

    # -- backends ------------------------------------------------------------------------------------
    def set_backend(
        self, name: str, master: str | None = None, spark: Any = None, remember: bool = True
    ) -> None:
        """Read the browser's state with ``native``, ``spark`` or ``auto`` (:meth:`BackendsController.choose`)."""
        self.backends.choose(name, master, spark, remember)

    def _show_backend(self) -> None:
        if not self.backend_label.text() or self.browser_controller.state_table() is None:
            self.backend_label.setText(self.backends.description())

    def _on_backends_changed(self) -> None:
        self._show_backend()
        self.browser_controller.request_table()

    # -- jobs that wait for their view ---------------------------------------------------------------
    def settled(self) -> bool:
        """True when no job runs and none waits to start in the background (:meth:`DeferredJobs.settled`)."""
        return self.deferred.settled()

    # -- drag and drop, closing ----------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if dropped_folder(event.mimeData()) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        folder = dropped_folder(event.mimeData())
        if folder is not None:
            event.acceptProposedAction()
            self.open_checkpoint(folder)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.deferred.jobs.clear()  # closing: fill no hidden view
        self.follow.stop()
        self.deferred.hold()
        self.backends.cancel_all()  # first, or the runner would wait in vain for a Spark job to yield
        if not self.runner.shutdown():
            names = ", ".join(job.what or job.channel for job in self.runner.running_jobs())
            sys.stderr.write(f"statelens: warning: jobs still running at exit: {names}\n")
        self.selection.disconnect_all()
        self.browser_controller.close()  # a paged table's database and temporary folder
        self.backends.shutdown()  # a Spark session the app started, and the JVM PySpark launched
        errors.set_dialog_parent(None)
        super().closeEvent(event)


def _short(url: str, limit: int = 80) -> str:
    return url if len(url) <= limit else "…" + url[-(limit - 1) :]

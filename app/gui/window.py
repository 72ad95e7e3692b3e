"""The main window: opens checkpoints, runs jobs through the runner and wires views to the selection.

Views never call each other: they send user intent as signals, which becomes
:class:`~app.session.SelectionState` changes that the views and controllers observe. The overview,
timeline, growth, expired keys, SQL and schema tabs and the key history have their own controllers (:mod:`app.gui.controllers`), sharing the
window's :class:`~app.gui.controllers.context.WindowContext`; the other tabs are still wired here.
Every reader call runs through :class:`~app.gui.workers.JobRunner`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator
from typing import Any

from PySide6.QtCore import QSettings, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QInputDialog,
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

from statelens.app.analysis.views import VIEWS as GUI_VIEWS
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import WindowContext
from statelens.app.gui.controllers.expired import ExpiredController
from statelens.app.gui.controllers.growth import GrowthController
from statelens.app.gui.controllers.history import HistoryController
from statelens.app.gui.controllers.overview import CHANNEL as VERDICTS_CHANNEL
from statelens.app.gui.controllers.overview import OverviewController
from statelens.app.gui.controllers.schema import SchemaController
from statelens.app.gui.controllers.sql import SqlController
from statelens.app.gui.controllers.timeline import TimelineController
from statelens.app.gui.workers import JobRunner
from statelens.app.session import (
    LoadedCheckpoint,
    StateTable,
    display_time_columns,
    iter_backend_table,
    iter_load_checkpoint,
    iter_state_diff,
    iter_state_table,
)
from statelens.app.state_query import PAGED_ROWS
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.model import Progress
from statelens.viewers.browser import StateBrowserView
from statelens.viewers.tables import PAGE_ROWS, DataTableView, row_order

#: Pages of a paged table waited for at most (older asks, scrolled past, are given up).
PAGES_WAITED = 6

#: View names, as accepted by ``statelens gui --view``, in tab order.
VIEWS = tuple(GUI_VIEWS)

#: Views whose job (on the runner channel of the same name) waits for them: it starts at once when the
#: view is showing, else when the view is first shown or nothing else runs, so the view in front gets
#: the cores (two, on many laptops) instead of sharing them with every other view's analysis.
DEFERRED_VIEWS = ("growth", "expired", "browser", "sql")
VIEW_TITLES = {
    "overview": "Overview",
    "timeline": "Batch timeline",
    "growth": "State growth",
    "expired": "Expired keys",
    "browser": "State browser",
    "sql": "SQL",
    "schema": "Schema and conf",
}

#: Runner channels of per-checkpoint jobs (cancelled when another checkpoint is shown).
CHECKPOINT_CHANNELS = (
    VERDICTS_CHANNEL,
    "growth",
    "heavy",
    "expired",
    "schema",
    "browser",
    "order",
    "history",
    "export",
    "sql",
    "eventlog",
)

#: Heaviest keys listed in the growth view for the selected store.
TOP_KEYS_SHOWN = 25

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
    storage_options : dict, optional
        fsspec storage options (``--storage-option``) for every checkpoint opened but the bundled
        sample; never written to the settings.

    Signals
    -------
    checkpoint_loaded(object loaded)
        A :class:`~app.session.LoadedCheckpoint` is shown.
    load_failed(str message)
        Opening failed (the previous checkpoint, if any, stays shown).
    growth_updated(int operator_id, str store_name)
    table_updated()
        The state browser shows new rows (or a message why it cannot).
    expired_updated()
        The expired-keys view shows the analysis (or why it failed).
    schema_updated()
    history_updated()
        The key history panel shows a key's history (or why not).
    sql_updated()
        The SQL tab shows a query's answer (or why it failed).
    verdicts_updated()
        The overview shows the verdicts (or why they could not be computed).
    export_finished(str path)
        A table, plot or report was written.
    """

    checkpoint_loaded = Signal(object)
    load_failed = Signal(str)
    growth_updated = Signal(int, str)
    table_updated = Signal()
    expired_updated = Signal()
    schema_updated = Signal()
    history_updated = Signal()
    sql_updated = Signal()
    verdicts_updated = Signal()
    progress_updated = Signal()
    spark_progressed = Signal(object)  # a Progress of the Spark jobs the browser's read runs
    export_finished = Signal(str)

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
        self._table: StateTable | None = None
        #: Versions with more rows than this are paged by DuckDB from the cache (``app.state_query``).
        self.paged_rows = PAGED_ROWS
        self._pages_wanted: list[int] = []  # offsets of a paged table's pages to read, last asked last
        self._compare_version: int | None = None
        #: Where to open once the next checkpoint is shown (``statelens gui --view --store ...``).
        self._start_at: dict[str, Any] | None = None

        self.setWindowTitle("statelens")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        errors.set_dialog_parent(self)

        self._build_actions()
        self._build_toolbar()
        self._build_central()
        self._build_status_bar()
        self._build_problems_dock()
        self._build_history_dock()
        self._build_menus()
        self._show_backend()

        self.selection.connect(self._on_selection_changed)
        self.ctx.status_changed.connect(self.status_label.setText)
        self.backends.changed.connect(self._on_backends_changed)
        self.backends.spark_progressed.connect(self._on_backends_spark_progressed)
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
        self.event_log_action = QAction("Add &event log…", self)
        self.event_log_action.setToolTip(
            "Spark event log, driver log or progress JSON lines of this query: durations, rows and rates on "
            "the batch timeline"
        )
        self.event_log_action.triggered.connect(self._on_event_log_action_triggered)
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
        self.export_csv_action = QAction("Export table as &CSV…", self)
        self.export_csv_action.triggered.connect(lambda: self.export_current_table("csv"))
        self.export_parquet_action = QAction("Export table as &Parquet…", self)
        self.export_parquet_action.triggered.connect(lambda: self.export_current_table("parquet"))
        self.export_png_action = QAction("Export plot as P&NG…", self)
        self.export_png_action.triggered.connect(lambda: self.export_current_plot("png"))
        self.export_svg_action = QAction("Export plot as S&VG…", self)
        self.export_svg_action.triggered.connect(lambda: self.export_current_plot("svg"))
        self.spark_parquet_action = QAction("Write version with &Spark (Parquet)…", self)
        self.spark_parquet_action.setToolTip(
            "Spark writes the browser's store version (every partition, or the one shown) as Parquet to a "
            "folder or Hadoop URL where it runs (s3a://, hdfs://...): nothing is collected to this app"
        )
        self.spark_parquet_action.triggered.connect(self._on_spark_parquet_action_triggered)
        self.export_report_action = QAction("Export &HTML report…", self)
        self.export_report_action.setShortcut(QKeySequence("Ctrl+E"))
        self.export_report_action.triggered.connect(self._on_export_report_action_triggered)
        self.utc_action = QAction("Show times in &UTC", self)
        self.utc_action.setCheckable(True)
        self.utc_action.setChecked(self.time_zone.utc)
        self.utc_action.setToolTip(
            "Batch starts, watermarks, timeouts and thresholds in UTC instead of local time "
            "(times inside state values are always UTC)"
        )
        self.utc_action.toggled.connect(self._on_utc_action_toggled)
        for action in (
            self.open_action,
            self.open_url_action,
            self.reload_action,
            self.cancel_action,
            self.find_action,
            self.quit_action,
            self.export_report_action,
        ):
            self.addAction(action)

    def _build_toolbar(self) -> None:
        bar = QToolBar("Checkpoint")
        bar.setMovable(False)
        bar.addAction(self.open_action)
        bar.addAction(self.reload_action)
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
        self.overview_controller = OverviewController(self.ctx, TOP_KEYS_SHOWN)
        self.timeline_controller = TimelineController(self.ctx)
        self.overview, self.timeline = self.overview_controller.view, self.timeline_controller.view
        self.growth_controller = GrowthController(self.ctx, TOP_KEYS_SHOWN)
        self.expired_controller = ExpiredController(self.ctx)
        self.growth, self.expired = self.growth_controller.view, self.expired_controller.view
        self.browser = StateBrowserView(self.selection)
        self.schema_controller = SchemaController(self.ctx)
        self.sql_controller = SqlController(self.ctx)
        self.schema, self.sql = self.schema_controller.view, self.sql_controller.view
        for ctl, signal in (
            (self.overview_controller, self.verdicts_updated),
            (self.timeline_controller, self.progress_updated),
            (self.schema_controller, self.schema_updated),
            (self.sql_controller, self.sql_updated),
            (self.expired_controller, self.expired_updated),
        ):
            ctl.updated.connect(signal)
        self.growth_controller.store_updated.connect(self.growth_updated)
        # The verdicts' growth and expired runs fill those views when their own jobs have not started.
        self.overview_controller.summary_finished.connect(self.expired_controller.adopt)
        self.overview_controller.summary_finished.connect(self.growth_controller.adopt)
        self.overview_controller.open_requested.connect(lambda view, target: self.open_at(view, **target))
        self.views = {
            "overview": self.overview,
            "timeline": self.timeline,
            "growth": self.growth,
            "expired": self.expired,
            "browser": self.browser,
            "sql": self.sql,
            "schema": self.schema,
        }
        for name in VIEWS:
            self.tabs.addTab(self.views[name], VIEW_TITLES[name])
        self.tabs.currentChanged.connect(lambda _i: self.deferred.on_view_shown(self.current_view()))
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.browser.store_selected.connect(self.ctx.select_store)
        self.browser.partition_selected.connect(self.ctx.select_partition)
        self.browser.version_selected.connect(self.ctx.select_version)
        self.browser.key_selected.connect(self.ctx.select_key)
        self.browser.compare_selected.connect(self._on_browser_compare_selected)
        self.browser.history_requested.connect(self._on_browser_history_requested)
        self.browser.order_requested.connect(self._on_browser_order_requested)
        self.browser.page_requested.connect(self._on_browser_page_requested)
        self.runner.job_finished.connect(self._on_runner_job_finished)
        self.browser.locate_requested.connect(self._on_browser_locate_requested)
        for table in self.findChildren(DataTableView):
            table.export_requested.connect(lambda fmt, t=table: self.export_table_dialog(t, fmt))

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
        self.backend_label = QLabel("")
        self.backend_label.setTextFormat(Qt.TextFormat.PlainText)
        self.backend_label.setToolTip("Which backend answered the last state read")
        status.addPermanentWidget(self.backend_label)

    def _build_problems_dock(self) -> None:
        self.problems_dock = QDockWidget("Problems", self)
        self.problems_dock.setObjectName("problemsDock")
        self.problems_dock.setWidget(self.problems)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.problems_dock)
        self.problems_dock.setVisible(False)
        self.problems.problems_changed.connect(self._on_problems_problems_changed)

    def _build_history_dock(self) -> None:
        self.history_controller = HistoryController(self.ctx)
        self.history = self.history_controller.view
        self.history_dock = self.history_controller.dock
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.history_dock)
        self.history_dock.setVisible(False)
        self.history_controller.updated.connect(self.history_updated)
        self.history.refresh_requested.connect(self._on_browser_history_requested)
        self.history.table.export_requested.connect(
            lambda fmt: self.export_table_dialog(self.history.table, fmt)
        )

    def _build_menus(self) -> None:
        menu = self.menuBar().addMenu("&File")
        menu.addAction(self.open_action)
        menu.addAction(self.open_url_action)
        self.recent_menu = QMenu("Open &recent", self)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        menu.addMenu(self.recent_menu)
        menu.addAction(self.sample_action)
        menu.addAction(self.event_log_action)
        menu.addSeparator()
        for action in (
            self.export_csv_action,
            self.export_parquet_action,
            self.export_png_action,
            self.export_svg_action,
            self.spark_parquet_action,
            self.export_report_action,
        ):
            menu.addAction(action)
        menu.aboutToShow.connect(self._update_export_actions)
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
        view_menu.addAction(self.history_dock.toggleViewAction())
        view_menu.addAction(self.find_action)
        view_menu.addSeparator()
        view_menu.addAction(self.utc_action)
        backend_menu = self.menuBar().addMenu("&Backend")
        for action in self.backends.menu_actions():
            backend_menu.addAction(action) if action is not None else backend_menu.addSeparator()

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
            storage_options=None if is_sample else self.ctx.storage_options,
            what=f"Opening {_short(url)}",
            on_result=self._on_load_finished,
            on_error=self._on_load_errored,
        )

    def open_sample(self) -> int:
        """Open the checkpoint bundled with statelens."""
        from statelens.app.resources import sample_checkpoint_path

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
        self.hold_hidden_views()  # a hidden view still fills when it is shown
        if self.runner.idle:
            return
        loading = self.runner.current("load") is not None
        self.overview_controller.cancel()
        self.backends.cancel_spark_read()  # a Spark job does not yield: cancel its job group
        self.sql_controller.cancel()
        self.runner.cancel()
        self.status_label.setText(
            f"Cancelled opening {_short(self._loading_url or '')}" if loading else "Cancelled"
        )

    def recent_checkpoints(self) -> list[str]:
        value = self.settings.value(SETTINGS_RECENT, [])
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else []

    def _remember(self, url: str) -> None:
        from statelens.readers.errors import redact

        url = _without_userinfo(
            redact(url)
        )  # never keep credentials in settings; they come from the environment
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
        for channel in CHECKPOINT_CHANNELS:
            self.runner.cancel(channel)
        self.backends.cancel_spark_read()
        ctx = self.ctx
        reloading = ctx.loaded is not None and ctx.loaded.url == loaded.url
        previous = self.selection.snapshot()
        ctx.store_chosen = ctx.store_chosen and reloading
        self.backends.set_checkpoint(loaded.checkpoint)  # closes the previous one's
        ctx.set_checkpoint(loaded)
        self._set_state_table(None)
        self._compare_version = None
        self.deferred.clear()
        ckpt = loaded.checkpoint
        title = f"{loaded.location} — statelens" + (" (sample checkpoint)" if loaded.is_sample else "")
        self.setWindowTitle(title)
        self.banner.setVisible(loaded.is_sample)
        self.url_edit.setText(loaded.url)
        if not loaded.is_sample:
            self._remember(loaded.url)

        self.problems.clear()
        self.problems.add_problems(ckpt.report.problems, where="loading")
        groups = ctx.store_groups()
        self.overview_controller.show_checkpoint(loaded)
        self.timeline_controller.show_checkpoint(loaded)
        self.browser.set_operators(ckpt.operators, ctx.roles, groups)
        self.browser.compare_combo.setCurrentIndex(0)
        self.history_controller.show_checkpoint(loaded)
        # Pickers list the biggest stores first (the expired view re-orders by findings once known).
        self.growth_controller.show_checkpoint(loaded)
        self.expired_controller.show_checkpoint(loaded)
        self.schema_controller.show_checkpoint(loaded)
        self.sql_controller.show_checkpoint(loaded)
        self.status_label.setText(
            f"Opened {loaded.location}: {len(ckpt.batches):,} batches, {len(ckpt.operators)} stateful operators"
            + (f", {len(ckpt.report.problems)} file problems" if ckpt.report.problems else "")
        )
        ctx.open_readers()
        self.checkpoint_loaded.emit(loaded)

        # Selection last: it starts the browser's decoding job. A reload (F5) keeps what was selected.
        if not ctx.select_first_store(previous, reloading):
            self.browser.clear_table("This checkpoint has no state store the native reader can decode.")
            self.table_updated.emit()
        self.schema_controller.start(loaded)
        self.growth_controller.start(loaded)
        self.sql_controller.start(loaded)
        self.timeline_controller.start(loaded)
        self.expired_controller.start(loaded)
        if self._start_at is not None:
            start, self._start_at = self._start_at, None
            try:
                self.open_at(**start)
            except UsageError as err:
                self.status_label.setText(str(err))
                errors.show_error(err, title="Cannot open there")

    def start_at(self, view: str, **target: Any) -> None:
        """Open the next checkpoint shown at ``view`` and ``target`` (as :meth:`open_at`), e.g. from
        ``statelens gui CKPT --view expired --operator 0 --store default``."""
        self._start_at = {"view": view, **{k: v for k, v in target.items() if v is not None}}

    def open_at(
        self,
        view: str,
        *,
        operator_id: int | None = None,
        store_name: str | None = None,
        version: int | None = None,
        partition_id: int | None = None,
        key: Any = None,
        batch_id: int | None = None,
    ) -> None:
        """Show ``view`` (one of :data:`VIEWS`) at a store, version, partition, key or batch.

        The store defaults to the operator's only one; the version to the store's latest (or
        ``batch_id + 1``). Raises :class:`~readers.errors.UsageError` for an unknown view, operator or
        store (naming the ones there are).
        """
        if view not in self.views:
            raise UsageError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
        change = self.ctx.target(
            operator_id=operator_id,
            store_name=store_name,
            version=version,
            partition_id=partition_id,
            key=key,
            batch_id=batch_id,
        )
        self.select_view(view)
        if change:
            self.selection.update(**change)
        if "operator_id" in change:
            for ctl in (self.expired_controller, self.growth_controller):
                ctl.show_store(change["operator_id"], change["store_name"])

    # -- the shared context, for the tabs still wired here ------------------------------------------
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

    @property
    def _chooser(self) -> Any:
        return self.backends.chooser

    def _reader(self, operator_id: int, store_name: str) -> Any:
        return self.backends.reader(operator_id, store_name)

    def _when_shown(self, channel: str, start: Callable[[], None]) -> None:
        self.deferred.when_shown(channel, start)

    def _on_load_errored(self, err: BaseException) -> None:
        message = errors.short_message(err)
        self.status_label.setText(f"Could not open {_short(self._loading_url or '')}")
        self.load_failed.emit(message)
        errors.show_error(err, title="Could not open the checkpoint")

    # -- event logs -----------------------------------------------------------------------------------
    def add_event_logs(self, paths: list[str]) -> None:
        """Show what the query reported (event logs, driver logs, progress dumps) on the batch timeline,
        and in the verdicts (slowest batches, rows dropped by the watermark)."""
        if self.timeline_controller.add_event_logs(paths) and self.loaded is not None:
            self.overview_controller.check(self.loaded.checkpoint)

    def _on_event_log_action_triggered(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add event log, driver log or progress JSON lines")
        if paths:
            self.add_event_logs(paths)

    # -- browser -------------------------------------------------------------------------------------
    def _request_table(self) -> None:
        s = self.selection
        if self.loaded is None or s.operator_id is None or s.store_name is None:
            return
        if s.version is None:
            self.browser.clear_table("This store has no readable version.")
            self.table_updated.emit()
            return
        compare = self._compare_version
        diff = compare is not None and compare != s.version
        try:
            backend = self.backends.for_store(s.operator_id, s.store_name)
            # Spark reads stores the native readers cannot open (column families); diffs are native.
            native = diff or backend is None or backend.reads_files
            reader = self._reader(s.operator_id, s.store_name) if native else None
        except StatelensError as err:
            self.browser.clear_table(f"Cannot read this store: {err}")
            self.table_updated.emit()
            return
        self.backends.cancel_spark_read()
        where = "all partitions" if s.partition_id is None else f"partition {s.partition_id}"
        time_columns = display_time_columns(self.loaded.checkpoint.operator(s.operator_id))
        self.runner.cancel("order")
        if diff:
            assert compare is not None
            old, new = sorted((compare, s.version))
            self.browser.set_loading(
                f"Comparing versions {old} and {new} of operator {s.operator_id} {s.store_name}, {where}…"
            )
            self.runner.submit(
                "browser",
                iter_state_diff,
                reader,
                old,
                new,
                s.partition_id,
                time_columns=time_columns,
                cache=self.ctx.cache,
                paged_over=self.paged_rows,
                what=f"Comparing versions {old} and {new}",
                on_result=self._on_table_finished,
                on_error=self._on_table_errored,
            )
            return
        if backend is None or backend.reads_files:
            self.browser.set_loading(
                f"Decoding operator {s.operator_id} {s.store_name}, {where}, version {s.version}…"
            )
            self.runner.submit(
                "browser",
                iter_state_table,
                reader,
                s.version,
                s.partition_id,
                time_columns=time_columns,
                cache=self.ctx.cache,
                paged_over=self.paged_rows,
                what=f"Decoding version {s.version}",
                on_result=self._on_table_finished,
                on_error=self._on_table_errored,
            )
            return
        store = self.loaded.checkpoint.operator(s.operator_id).store(s.store_name)
        self.browser.set_loading(
            f"Reading operator {s.operator_id} {s.store_name}, {where}, version {s.version} "
            f"through Spark on {self.backends.master} (the first read starts a Spark session)…"
        )
        self.backends.start_spark_read(backend)
        self.runner.submit(
            "browser",
            iter_backend_table,
            backend,
            store,
            s.version,
            s.partition_id,
            time_columns=time_columns,
            what=f"Reading version {s.version} through Spark",
            on_result=self._on_table_finished,
            on_error=self._on_table_errored,
        )

    def _set_state_table(self, table: StateTable | None) -> None:
        """Hold the browser's rows, closing the database of the rows held before (if paged)."""
        old, self._table = self._table, table
        self._pages_wanted.clear()
        if old is not None and old is not table and old.query is not None:
            for channel in ("order", "page", "locate"):
                self.runner.cancel(channel)
            old.query.close()

    def _on_table_finished(self, table: StateTable) -> None:
        self.backends.end_spark_read()
        self._set_state_table(table)
        where = "all partitions" if table.partition_id is None else f"partition {table.partition_id}"
        if table.is_diff:
            head = f"diff of versions {table.compare_version} → {table.version}"
        else:
            head = f"{table.total_rows:,} row{'s' if table.total_rows != 1 else ''}"
        role = self.ctx.roles.get((table.operator_id, table.store_name))
        parts = [
            head,
            f"operator {table.operator_id} {table.store_name}"
            + (f" ({role.text})" if role is not None else ""),
            where,
        ]
        if not table.is_diff:
            parts.append(f"version {table.version} (state after batch {table.version - 1})")
        parts.extend(table.notes)
        parts.append(f"read by {_backend_text(table.backend)}")
        if table.problems:
            self.problems.add_problems(table.problems, where=f"decoding version {table.version}")
            parts.append(f"{len(table.problems)} partition(s) could not be read: see Problems")
        if table.query is not None:
            parts.insert(1, "paged from the cache by DuckDB")
            self.browser.set_query_table(
                table.headers,
                [spec.numeric for spec in table.query.specs],
                table.total_rows,
                " · ".join(parts),
            )
            self.backend_label.setText(f"State read by {_backend_text(table.backend)}")
            self.table_updated.emit()
            return
        partitions = table.sort_keys[table.headers.index("partition")]
        self.browser.set_table(
            table.headers, table.columns, table.sort_keys, table.keys, " · ".join(parts), partitions
        )
        self.backend_label.setText(f"State read by {_backend_text(table.backend)}")
        self.table_updated.emit()

    def _on_table_errored(self, err: BaseException) -> None:
        self.backends.end_spark_read()
        self._set_state_table(None)
        if isinstance(err, StatelensError):
            if not isinstance(err, UsageError):
                self.problems.add_problems([err], where="state browser")
            self.browser.clear_table(f"Cannot show this state: {err}")
            self.table_updated.emit()
        else:
            self.browser.clear_table(f"Decoding failed: {errors.short_message(err)}")
            self.table_updated.emit()
            errors.show_error(err, title="Decoding state failed")

    def state_table(self) -> StateTable | None:
        """The rows the browser shows (None while none)."""
        return self._table

    def _on_browser_order_requested(self, column: int, descending: bool, needle: str) -> None:
        query = self._table.query if self._table is not None else None
        if query is not None and self.browser.model is self.browser.query_model:
            self._pages_wanted.clear()  # pages of the former order
            what = "Filtering" if needle else "Sorting" if column >= 0 else "Reading"
            self.runner.submit(
                "order",
                _iter_query_order,
                query,
                column,
                descending,
                needle,
                what=f"{what} {query.total_rows:,} rows (DuckDB)",
                on_result=lambda got: self.browser.apply_result(column, descending, needle, *got),
                on_error=self._on_query_errored,
            )
            return
        model = self.browser.model
        columns, sort_keys, n = model.columns(), model.sort_keys(), model.total_rows()
        self.runner.submit(
            "order",
            _iter_row_order,
            sort_keys,
            columns,
            n,
            column,
            descending,
            needle,
            what=f"Sorting and filtering {n:,} rows",
            on_result=lambda rows: self.browser.apply_order(column, descending, needle, rows),
        )

    def _on_browser_page_requested(self, column: int, descending: bool, needle: str, offset: int) -> None:
        wanted = self._pages_wanted
        if offset in wanted:
            wanted.remove(offset)
        wanted.append(offset)
        if len(wanted) > PAGES_WAITED:  # scrolled past: asked for again if shown again
            self.browser.forget_page_requests(wanted[:-PAGES_WAITED])
            del wanted[:-PAGES_WAITED]
        self._read_next_page()

    def _read_next_page(self) -> None:
        """Read the page asked for last, one at a time (the rows on screen first)."""
        query = self._table.query if self._table is not None else None
        if query is None or not self._pages_wanted or self.runner.current("page") is not None:
            return
        offset = self._pages_wanted.pop()
        model = self.browser.query_model
        column, descending = model.sort_state()
        needle = model.filter_text()

        self.runner.submit(
            "page",
            _iter_query_page,
            query,
            column,
            descending,
            needle,
            offset,
            what=f"Reading rows {offset + 1:,}–{offset + PAGE_ROWS:,}",
            on_result=lambda page: self.browser.add_page(column, descending, needle, page),
            on_error=self._on_query_errored,
        )  # the next one starts when this one is finished (_on_runner_job_finished)

    def _on_runner_job_finished(self, channel: str) -> None:
        if channel == "page":
            self._read_next_page()

    def _on_browser_locate_requested(self, partition_id: int, key: Any) -> None:
        query = self._table.query if self._table is not None else None
        if query is None:
            return
        model = self.browser.query_model
        column, descending = model.sort_state()
        self.runner.submit(
            "locate",
            _iter_query_locate,
            query,
            column,
            descending,
            model.filter_text(),
            partition_id,
            key,
            what="Finding the selected key among the rows",
            on_result=lambda row: self.browser.show_query_row(row) if row is not None else None,
            on_error=self._on_query_errored,
        )

    def _on_query_errored(self, err: BaseException) -> None:
        if isinstance(err, InterruptedError):
            return  # the table was replaced meanwhile
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="state browser")
        self.browser.set_loading(f"Cannot query these rows: {errors.short_message(err)}")

    def _on_browser_compare_selected(self, version: int | None) -> None:
        self._compare_version = version
        self._request_table()

    # -- key history ---------------------------------------------------------------------------------
    def _on_utc_action_toggled(self, checked: bool) -> None:
        self.set_times_in_utc(checked)

    def set_times_in_utc(self, utc: bool, remember: bool = True) -> None:
        """Show the checkpoint's times in UTC (True) or local time (:meth:`WindowContext.set_times_in_utc`)."""
        blocked = self.utc_action.blockSignals(True)
        self.utc_action.setChecked(utc)
        self.utc_action.blockSignals(blocked)
        self.ctx.set_times_in_utc(utc, remember)

    def _on_browser_history_requested(self) -> None:
        picked = self.browser.selected_key()
        if picked is not None:
            pid, key = picked
            self.selection.update(key=key, key_partition_id=pid if pid >= 0 else None)
        self.ctx.key_history_requested.emit(None)

    # -- backends ------------------------------------------------------------------------------------
    def set_backend(
        self, name: str, master: str | None = None, spark: Any = None, remember: bool = True
    ) -> None:
        """Read the browser's state with ``native``, ``spark`` or ``auto`` (:meth:`BackendsController.choose`)."""
        self.backends.choose(name, master, spark, remember)

    def backend_name(self) -> str:
        return self.backends.name

    def _show_backend(self) -> None:
        if not self.backend_label.text() or self._table is None:
            self.backend_label.setText(self.backends.description())

    def _on_backends_changed(self) -> None:
        self._show_backend()
        self._request_table()

    def _on_backends_spark_progressed(self, progress: Progress) -> None:
        self.progress_bar.setRange(0, progress.total)
        self.progress_bar.setValue(min(progress.done, progress.total))
        self.status_label.setText(f"{progress.what}…")
        self.spark_progressed.emit(progress)

    # -- export --------------------------------------------------------------------------------------
    def _main_table(self, view: str | None = None) -> DataTableView | None:
        tables = {
            "overview": self.overview.batch_table,
            "expired": self.expired.table,
            "browser": self.browser.table,
            "schema": self.schema.conf_table,
        }
        return tables.get(view or self.current_view())

    def _main_plot(self, view: str | None = None) -> Any:
        return {
            "timeline": self.timeline.graphics,
            "growth": self.growth.graphics,
            "expired": self.expired.graphics,
        }.get(view or self.current_view())

    def _update_export_actions(self) -> None:
        has_table = self._main_table() is not None
        has_plot = self._main_plot() is not None
        for action in (self.export_csv_action, self.export_parquet_action):
            action.setEnabled(has_table)
        for action in (self.export_png_action, self.export_svg_action):
            action.setEnabled(has_plot)
        self.export_report_action.setEnabled(self.loaded is not None)
        self.spark_parquet_action.setEnabled(self._table is not None and not self._table.is_diff)

    def write_version_with_spark(self, url: str) -> int | None:
        """Have Spark write the browser's store version (its partition, when one is shown) as Parquet to
        ``url`` (a folder it creates, or a Hadoop URL) where Spark runs, on the toolbar's Spark master or
        endpoint; nothing is collected here. Returns the job's token (None without a table)."""
        from statelens.app.export import iter_spark_parquet

        table = self._table
        if self.loaded is None or table is None:
            return None
        backend = self.backends.ensure_chooser().spark
        self.backends.chooser.used.add("spark")
        return self.runner.submit(
            "export",
            iter_spark_parquet,
            backend,
            table.operator_id,
            table.store_name,
            table.version,
            url,
            table.partition_id,
            what=f"Spark is writing version {table.version} to {url}",
            on_result=lambda n: self._on_export_finished(url, f"{n:,} rows (written by Spark)"),
            on_error=lambda err: self._on_export_errored(err, "Spark could not write the version"),
        )

    def _on_spark_parquet_action_triggered(self) -> None:
        if self._table is None:
            return
        url, ok = QInputDialog.getText(
            self,
            "Write version with Spark",
            "Folder or Hadoop URL Spark writes the Parquet part files to (it must not exist; on a cluster, "
            "a path every executor can write, e.g. s3a://bucket/prefix):",
            text=self._export_dir("statelens-state-parquet"),
        )
        if ok and url.strip():
            self.write_version_with_spark(url.strip())

    def export_current_table(self, fmt: str) -> None:
        table = self._main_table()
        if table is not None:
            self.export_table_dialog(table, fmt)

    def export_current_plot(self, fmt: str) -> None:
        graphics = self._main_plot()
        if graphics is None:
            return
        name = f"{self.current_view()}.{fmt}"
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export plot as {fmt.upper()}", self._export_dir(name), f"{fmt.upper()} (*.{fmt})"
        )
        if path:
            self.export_plot(self.current_view(), path)

    def export_table_dialog(self, table: DataTableView, fmt: str) -> None:
        name = f"{table.name.replace(' ', '_')}.{fmt}"
        path, _ = QFileDialog.getSaveFileName(
            self,
            f"Export {table.name} as {fmt.upper()}",
            self._export_dir(name),
            "CSV (*.csv)" if fmt == "csv" else "Parquet (*.parquet)",
        )
        if path:
            self.export_table(table, path, fmt)

    def _export_dir(self, name: str) -> str:
        folder = str(self.settings.value("export_dir", "") or os.path.expanduser("~"))
        return os.path.join(folder, name)

    def _checked_path(self, path: str) -> str | None:
        from statelens.app.export import check_output_path

        try:
            out = check_output_path(path, self.loaded.url if self.loaded is not None else None)
        except UsageError as err:
            errors.show_error(err, title="Cannot export there")
            return None
        self.settings.setValue("export_dir", os.path.dirname(out))
        return out

    def export_table(self, table: DataTableView, path: str, fmt: str) -> int | None:
        """Write a table to CSV or Parquet in a worker (the state browser's rows typed, as ``statelens rows``).

        Parameters
        ----------
        table : DataTableView
            One of the window's tables; its filter and sort order are kept.
        path : str
        fmt : {"csv", "parquet"}

        Returns
        -------
        int or None
            The job's token (None when the path was refused).
        """
        from statelens.app.export import (
            iter_export_display_table,
            iter_export_state_table,
        )

        out = self._checked_path(path)
        if out is None:
            return None
        model: Any = table.model()
        source: Any = model.sourceModel() if hasattr(model, "sourceModel") else model
        if table is self.browser.table and self._table is not None and self._table.query is not None:
            from statelens.app.export import iter_export_query_table

            column, descending = source.sort_state()
            job: tuple[Any, ...] = (
                iter_export_query_table,
                self._table,
                out,
                fmt,
                column,
                descending,
                source.filter_text(),
            )
            return self.runner.submit(
                "export",
                *job,
                what=f"Exporting {table.name} to {os.path.basename(out)}",
                on_result=lambda n: self._on_export_finished(out, f"{n:,} rows of {table.name}"),
                on_error=lambda err: self._on_export_errored(err, "Export failed"),
            )
        rows = source.visible_source_rows()
        if table is self.browser.table and self._table is not None:
            job = (iter_export_state_table, self._table, out, fmt, rows)
        elif (expired := self.expired_controller.export_job(table, source, out, fmt)) is not None:
            job = expired
        else:
            job = (
                iter_export_display_table,
                source.headers(),
                source.columns(),
                source.sort_keys(),
                out,
                fmt,
                rows,
            )
        return self.runner.submit(
            "export",
            *job,
            what=f"Exporting {table.name} to {os.path.basename(out)}",
            on_result=lambda n: self._on_export_finished(out, f"{n:,} rows of {table.name}"),
            on_error=lambda err: self._on_export_errored(err, "Export failed"),
        )

    def export_plot(self, view: str, path: str) -> str | None:
        """Write a view's plots to PNG or SVG (by the file's extension), on the GUI thread (it is quick).

        Parameters
        ----------
        view : str
            ``timeline``, ``growth`` or ``expired``.
        path : str

        Returns
        -------
        str or None
            The path written.
        """
        import pyqtgraph.exporters as exporters

        graphics = self._main_plot(view)
        if graphics is None:
            raise UsageError(f"the {view} view has no plot; plots: timeline, growth, expired")
        out = self._checked_path(path)
        if out is None:
            return None
        scene = graphics.scene()
        if out.lower().endswith(".svg"):
            try:
                exporters.SVGExporter(scene).export(out)
            except ValueError:
                # pyqtgraph 0.14's SVGExporter cannot parse closed paths ("... Z") that Qt 6.10+ writes
                # (pyqtgraph#3495): render the scene with Qt's own SVG generator instead.
                _render_svg(scene, graphics, out)
        else:
            exporter = exporters.ImageExporter(scene)
            params = exporter.parameters()
            # Native size: scaling up leaves legend text at its screen size (tiny next to the axes).
            from statelens.viewers import theme

            params["background"] = theme.background()
            exporter.export(out)
        self._on_export_finished(out, f"{VIEW_TITLES[view].lower()} plot")
        return out

    def export_report(self, path: str) -> int | None:
        """Write the whole checkpoint's HTML post-mortem report in a worker."""
        from statelens.app.export import iter_export_report

        if self.loaded is None:
            return None
        out = self._checked_path(path)
        if out is None:
            return None
        return self.runner.submit(
            "export",
            iter_export_report,
            self.loaded.checkpoint,
            out,
            what="Writing the HTML report",
            on_result=lambda p: self._on_export_finished(p, "HTML report"),
            on_error=lambda err: self._on_export_errored(err, "Writing the report failed"),
        )

    def _on_export_report_action_triggered(self) -> None:
        if self.loaded is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Export HTML report", self._export_dir("statelens-report.html"), "HTML (*.html)"
        )
        if path:
            self.export_report(path)

    def _on_export_errored(self, err: BaseException, title: str) -> None:
        self.status_label.setText(f"{title}: {errors.short_message(err)}")
        errors.show_error(err, title=title)

    def _on_export_finished(self, path: str, what: str) -> None:
        self.status_label.setText(f"Wrote {what} to {path}")
        self.export_finished.emit(path)

    # -- selection wiring ----------------------------------------------------------------------------
    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if {"operator_id", "store_name", "partition_id", "version"} & set(changes):
            self._when_shown("browser", self._request_table)
        self.growth_controller.on_selection_changed(changes)
        self.history_controller.on_selection_changed(changes)

    # -- views ---------------------------------------------------------------------------------------
    def select_view(self, name: str) -> None:
        """Show one view of :data:`VIEWS`."""
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
        self.deferred.on_idle_changed(idle)

    # -- jobs that wait for their view ---------------------------------------------------------------
    def settled(self) -> bool:
        """True when no job runs and none waits to start in the background (:meth:`DeferredJobs.settled`)."""
        return self.deferred.settled()

    def hold_hidden_views(self) -> None:
        """Start no more jobs for hidden views until they are shown (``--screenshot`` is done; Cancel)."""
        self.deferred.hold()

    def pending_views(self) -> list[str]:
        """Views whose data waits until they are shown or the app is idle (the rest is done or running)."""
        return self.deferred.pending()

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
        import sys

        self.deferred.jobs.clear()  # closing: fill no hidden view
        self.hold_hidden_views()
        self.backends.cancel_all()  # first, or the runner would wait in vain for a Spark job to yield
        if not self.runner.shutdown():
            names = ", ".join(job.what or job.channel for job in self.runner.running_jobs())
            sys.stderr.write(f"statelens: warning: jobs still running at exit: {names}\n")
        self.selection.disconnect_all()
        self._set_state_table(None)  # a paged table's database and temporary folder
        self.backends.shutdown()  # a Spark session the app started, and the JVM PySpark launched
        errors.set_dialog_parent(None)
        super().closeEvent(event)


def _render_svg(scene: Any, widget: Any, path: str) -> None:
    """Render a graphics scene to an SVG file with Qt's ``QSvgGenerator`` (vector, fonts as text)."""
    from PySide6.QtCore import QRectF, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    rect = QRectF(0, 0, widget.width(), widget.height())
    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(QSize(int(rect.width()), int(rect.height())))
    generator.setViewBox(rect)
    # Same resolution as the screen the scene was laid out for, or curves and axes scale apart.
    generator.setResolution(widget.logicalDpiX())
    generator.setTitle("statelens plot")
    painter = QPainter(generator)
    try:
        from statelens.viewers import theme

        painter.fillRect(rect, theme.background())
        scene.render(painter, rect, widget.mapToScene(widget.viewport().rect()).boundingRect())
    finally:
        painter.end()


def _iter_row_order(
    sort_keys: Any,
    columns: Any,
    n: int,
    column: int,
    descending: bool,
    needle: str,
    cancelled: Any = None,
) -> Generator[Progress, None, Any]:
    """:func:`viewers.tables.row_order` of a large table as a runner job (formats cells as needed)."""
    yield Progress(0, 1, f"{'filtering' if needle else 'sorting'} {n:,} rows")
    return row_order(sort_keys, columns, n, column, descending, needle, cancelled=cancelled)


def _iter_query_order(
    query: Any, column: int, descending: bool, needle: str
) -> Generator[Progress, None, tuple[int, Any]]:
    """Rows matching and the first page of a paged table's new order, as a runner job."""
    yield Progress(0, 1, f"{'filtering' if needle else 'sorting'} {query.total_rows:,} rows")
    return query.first_page(column, descending, needle, PAGE_ROWS)


def _iter_query_page(
    query: Any, column: int, descending: bool, needle: str, offset: int
) -> Generator[Progress, None, Any]:
    """The next page of a paged table, as a runner job."""
    yield Progress(0, 1, f"reading rows from {offset + 1:,}")
    return query.page(column, descending, needle, offset, PAGE_ROWS)


def _iter_query_locate(
    query: Any, column: int, descending: bool, needle: str, partition_id: int, key: Any
) -> Generator[Progress, None, int | None]:
    """Where a key stands in a paged table's order, as a runner job."""
    yield Progress(0, 1, f"finding the key in partition {partition_id}")
    return query.position_of(column, descending, needle, partition_id, key)


def _backend_text(description: str) -> str:
    """``the native decoder`` / ``Spark 4.x on local[*]`` after "read by"."""
    return f"the {description}" if description == "native decoder" else description


def _dropped_folder(mime: Any) -> str | None:
    if mime is None or not mime.hasUrls():
        return None
    for url in mime.urls():
        if isinstance(url, QUrl) and url.isLocalFile() and os.path.isdir(url.toLocalFile()):
            return url.toLocalFile()
    return None


def _short(url: str, limit: int = 80) -> str:
    return url if len(url) <= limit else "…" + url[-(limit - 1) :]


def _without_userinfo(url: str) -> str:
    """``s3://***@bucket/p`` (a redacted URL) becomes ``s3://bucket/p``."""

    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)

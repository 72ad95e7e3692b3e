"""The main window: opens checkpoints, runs jobs through the runner and wires views to the selection.

Views never call each other: they send user intent as signals, the window turns intent into
:class:`~app.session.SelectionState` changes, and the views (and the window's job scheduling) observe
that state. Every reader call runs through :class:`~app.gui.workers.JobRunner`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
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

from statelens.app.analysis.growth import iter_growth
from statelens.app.analysis.heavy import StoreTopKeys, iter_top_keys
from statelens.app.analysis.sql import EXAMPLES as SQL_EXAMPLES
from statelens.app.analysis.sql import SqlTable, iter_sql_table, iter_table_columns
from statelens.app.analysis.timeline import ProgressSeries, iter_progress_series
from statelens.app.analysis.views import VIEWS as GUI_VIEWS
from statelens.app.explore import (
    ExpiredOverview,
    KeyHistory,
    arrange_expired,
    conf_changes,
    findings_table,
    iter_expired_overview,
    iter_key_history,
    order_stores,
    read_schema_history,
)
from statelens.app.gui import errors
from statelens.app.gui.verdicts import CHANNEL as VERDICTS_CHANNEL
from statelens.app.gui.verdicts import VerdictsController
from statelens.app.gui.workers import JobRunner
from statelens.app.session import (
    LoadedCheckpoint,
    SelectionState,
    StateTable,
    StoreRole,
    describe_state,
    display_time_columns,
    growth_arrays,
    iter_backend_table,
    iter_load_checkpoint,
    iter_state_diff,
    iter_state_table,
)
from statelens.app.state_query import PAGED_ROWS
from statelens.readers.backends import native_backend
from statelens.readers.cache import StateCache
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.model import Progress
from statelens.viewers.browser import StateBrowserView, store_label
from statelens.viewers.expired import ExpiredView
from statelens.viewers.growth import StateGrowthView
from statelens.viewers.history import KeyHistoryPanel
from statelens.viewers.overview import OverviewView
from statelens.viewers.schema import SchemaConfView
from statelens.viewers.sql import SqlView
from statelens.viewers.tables import PAGE_ROWS, DataTableView, row_order
from statelens.viewers.timefmt import TimeZoneState
from statelens.viewers.timeline import BatchTimelineView

#: Pages of a paged table waited for at most (older asks, scrolled past, are given up).
PAGES_WAITED = 6

#: View names, as accepted by ``statelens gui --view``, in tab order.
VIEWS = tuple(GUI_VIEWS)

#: Milliseconds between looks at Spark's status tracker while a read runs on Spark.
SPARK_PROGRESS_MS = 500

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

#: Backends of the state browser (``readers.backends``), as shown in the picker.
BACKENDS = {"native": "native decoder", "spark": "Spark", "auto": "auto (native, else Spark)"}
SETTINGS_BACKEND = "backend"
SETTINGS_MASTER = "spark_master"
SETTINGS_UTC = "times_in_utc"

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
        self.storage_options = dict(storage_options or {})
        self.event_logs: list[str] = []  # event logs, driver logs or progress dumps shown on the timeline
        self.progress_summary = ""
        self._cache = StateCache()  # decoded state versions, shared with the command line
        self.selection = SelectionState()
        self.runner = JobRunner(self)
        self.loaded: LoadedCheckpoint | None = None
        self._loading_url: str | None = None
        self._readers: dict[tuple[int, str], Any] = {}
        self._weighed: set[tuple[int, str]] = set()  # stores whose heaviest keys were asked for
        self._growth_done = False
        self._roles: dict[tuple[int, str], StoreRole] = {}
        self._table: StateTable | None = None
        #: Versions with more rows than this are paged by DuckDB from the cache (``app.state_query``).
        self.paged_rows = PAGED_ROWS
        self._pages_wanted: list[int] = []  # offsets of a paged table's pages to read, last asked last
        self._expired: ExpiredOverview | None = None
        self._history: KeyHistory | None = None
        self._compare_version: int | None = None
        self._chooser: Any = None
        self._spark_session: Any = None
        self._spark_reading: Any = None
        self._backend_name = str(self.settings.value(SETTINGS_BACKEND, "native"))
        if self._backend_name not in BACKENDS:
            self._backend_name = "native"
        self._spark_master = str(self.settings.value(SETTINGS_MASTER, "") or _default_master())
        #: Local time (the default) or UTC for the checkpoint's own times, in every view.
        self.time_zone = TimeZoneState(_setting_bool(self.settings.value(SETTINGS_UTC, False)))
        self._history_request: tuple[Any, ...] | None = None
        #: Polls Spark's status tracker while the browser reads through Spark (tasks done in the progress bar).
        self._spark_progress_timer = QTimer(self)
        self._spark_progress_timer.setInterval(SPARK_PROGRESS_MS)
        self._spark_progress_timer.timeout.connect(self._on_spark_progress_timer_timeout)
        #: Jobs waiting for their view (see :data:`DEFERRED_VIEWS`): channel -> how to start it.
        self._deferred: dict[str, Callable[[], None]] = {}
        self._background_paused = False

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
        self.verdicts = VerdictsController(self)
        #: Where to open once the next checkpoint is shown (``statelens gui --view --store ...``).
        self._start_at: dict[str, Any] | None = None
        #: The user (or the command line) picked the store: views keep it rather than a default.
        self._store_chosen = False

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
        self.backend_actions = QActionGroup(self)
        self.backend_actions.setExclusive(True)
        for name, text in BACKENDS.items():
            action = QAction(
                f"Read state with the {text}" if name != "auto" else "Read state: auto (native, else Spark)",
                self,
            )
            action.setCheckable(True)
            action.setData(name)
            action.triggered.connect(lambda _checked=False, n=name: self.set_backend(n))
            self.backend_actions.addAction(action)
        self.utc_action = QAction("Show times in &UTC", self)
        self.utc_action.setCheckable(True)
        self.utc_action.setChecked(self.time_zone.utc)
        self.utc_action.setToolTip(
            "Batch starts, watermarks, timeouts and thresholds in UTC instead of local time "
            "(times inside state values are always UTC)"
        )
        self.utc_action.toggled.connect(self._on_utc_action_toggled)
        self.master_action = QAction("Spark &master…", self)
        self.master_action.triggered.connect(self._on_master_action_triggered)
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
        bar.addWidget(QLabel(" Backend: "))
        self.backend_combo = QComboBox()
        for name, text in BACKENDS.items():
            self.backend_combo.addItem(text, name)
        self.backend_combo.setToolTip(
            "Who decodes the state the browser shows: statelens itself, or Spark's statestore data source"
        )
        self.backend_combo.activated.connect(self._on_backend_combo_activated)
        bar.addWidget(self.backend_combo)
        bar.addWidget(QLabel(" Spark: "))
        self.master_edit = QLineEdit()
        self.master_edit.setMaximumWidth(200)
        self.master_edit.setToolTip(
            "Where the Spark backend runs: a master URL (local[*], spark://host:7077, yarn...), or a Spark "
            "Connect endpoint (sc://host:15002: no local Java needed; the server reads the checkpoint)"
        )
        self.master_edit.editingFinished.connect(self._on_master_edit_editing_finished)
        bar.addWidget(self.master_edit)
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
        self.overview = OverviewView(self.selection, self.time_zone)
        self.timeline = BatchTimelineView(self.selection, self.time_zone)
        self.growth = StateGrowthView(self.selection)
        self.expired = ExpiredView(self.selection)
        self.browser = StateBrowserView(self.selection)
        self.schema = SchemaConfView(self.selection)
        self.sql = SqlView()
        self.sql.set_examples(SQL_EXAMPLES)
        self.sql.run_requested.connect(self._on_sql_run_requested)
        self.sql.store_combo.activated.connect(lambda _i: self._list_sql_tables())
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
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.overview.batch_selected.connect(self._on_view_batch_selected)
        self.overview.store_selected.connect(self._on_view_store_selected)
        self.timeline.batch_selected.connect(self._on_view_batch_selected)
        self.growth.store_selected.connect(self._on_view_store_selected)
        self.growth.partition_selected.connect(self._on_view_partition_selected)
        self.expired.store_selected.connect(self._on_view_store_selected)
        self.expired.version_selected.connect(self._on_view_version_selected)
        self.expired.partition_selected.connect(self._on_view_partition_selected)
        self.expired.finding_selected.connect(self._on_expired_finding_selected)
        self.browser.store_selected.connect(self._on_view_store_selected)
        self.browser.partition_selected.connect(self._on_view_partition_selected)
        self.browser.version_selected.connect(self._on_view_version_selected)
        self.browser.key_selected.connect(self._on_browser_key_selected)
        self.browser.compare_selected.connect(self._on_browser_compare_selected)
        self.browser.history_requested.connect(self._on_browser_history_requested)
        self.browser.order_requested.connect(self._on_browser_order_requested)
        self.browser.page_requested.connect(self._on_browser_page_requested)
        self.runner.job_finished.connect(self._on_runner_job_finished)
        self.browser.locate_requested.connect(self._on_browser_locate_requested)
        self.schema.batch_selected.connect(self._on_view_batch_selected)
        self.schema.store_selected.connect(self._on_view_store_selected)
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
        self.problems = errors.ProblemsPanel()
        self.problems_dock = QDockWidget("Problems", self)
        self.problems_dock.setObjectName("problemsDock")
        self.problems_dock.setWidget(self.problems)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.problems_dock)
        self.problems_dock.setVisible(False)
        self.problems.problems_changed.connect(self._on_problems_problems_changed)

    def _build_history_dock(self) -> None:
        self.history = KeyHistoryPanel()
        self.history_dock = QDockWidget("Key history", self)
        self.history_dock.setObjectName("historyDock")
        self.history_dock.setWidget(self.history)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.history_dock)
        self.history_dock.setVisible(False)
        self.history.version_selected.connect(self._on_view_version_selected)
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
        for action in self.backend_actions.actions():
            backend_menu.addAction(action)
        backend_menu.addSeparator()
        backend_menu.addAction(self.master_action)

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
            storage_options=None if is_sample else self.storage_options,
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
        if self.runner.current(VERDICTS_CHANNEL) is not None:
            self.overview.set_verdicts_pending("The checks were cancelled: reload (F5) to run them again.")
        self._cancel_spark_read()  # a Spark job does not yield: cancel its job group
        if self.runner.current("sql") is not None and self._chooser is not None:
            self._chooser.cancel()  # a query running in Spark
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
        self._cancel_spark_read()
        reloading = self.loaded is not None and self.loaded.url == loaded.url
        previous = self.selection.snapshot()
        self._store_chosen = self._store_chosen and reloading
        self._close_backends()
        self.loaded = loaded
        self._readers = {}
        self._weighed = set()
        self._growth_done = False
        self._set_state_table(None)
        self._expired = None
        self._history = None
        self._history_request = None
        self._compare_version = None
        self._deferred = {}
        self._background_paused = False
        ckpt = loaded.checkpoint
        title = f"{loaded.location} — statelens" + (" (sample checkpoint)" if loaded.is_sample else "")
        self.setWindowTitle(title)
        self.banner.setVisible(loaded.is_sample)
        self.url_edit.setText(loaded.url)
        if not loaded.is_sample:
            self._remember(loaded.url)

        self.problems.clear()
        self.problems.add_problems(ckpt.report.problems, where="loading")
        self._roles = roles = loaded.store_roles()
        groups = self._store_groups()
        tips = {key: role.description for key, role in roles.items()}
        self.overview.set_checkpoint(
            loaded.location,
            ckpt.query_id,
            ckpt.batches,
            ckpt.operators,
            ckpt.report.problems,
            roles=roles,
            descriptions=describe_state(ckpt),
        )
        self.verdicts.start(ckpt, top_keys=TOP_KEYS_SHOWN)
        self.timeline.set_batches(ckpt.batches)
        self.timeline.clear_progress()
        self.browser.set_operators(ckpt.operators, roles, groups)
        self.browser.compare_combo.setCurrentIndex(0)
        self.history.clear_history(
            "Select a key (state browser or expired keys) to see its history across versions."
        )
        # Pickers list the biggest stores first (the expired view re-orders by findings once known).
        decodable = loaded.decodable_stores()
        keys = [(op.operator_id, s.store_name) for op, s in decodable]
        rank = {k: i for i, k in enumerate(order_stores(keys, {}, loaded.store_sizes(), groups))}
        stores = sorted(decodable, key=lambda item: rank[(item[0].operator_id, item[1].store_name)])
        self.growth.clear()
        self.growth.set_stores([self._store_item(op, s) for op, s in stores], groups, tips)
        self.expired.clear()
        self.expired.set_stores(
            [self._store_item(op, s) for op in ckpt.operators for s in op.stores], groups, tips
        )
        self.schema.set_schemas(
            [(*self._store_item(op, s), s.schema) for op in ckpt.operators for s in op.stores], [], tips
        )
        self.schema.set_conf(ckpt.batches, conf_changes(ckpt.batches))
        self.sql.set_stores([self._store_item(op, s) for op, s in stores], groups, tips)
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
            self.selection.update(**previous)
        elif default is not None:
            versions = loaded.checkpoint.operator(default[0]).store(default[1]).versions
            self.selection.update(
                operator_id=default[0],
                store_name=default[1],
                partition_id=None,
                version=versions[-1] if versions else None,
            )
        else:
            self.browser.clear_table("This checkpoint has no state store the native reader can decode.")
            self.table_updated.emit()
        self.runner.submit(
            "schema",
            _iter_schema_history,
            ckpt,
            what="Reading schema files",
            on_result=self._on_schema_finished,
            on_error=self._on_schema_errored,
        )
        if stores:
            for op, s in stores:
                self.growth.set_store_status(op.operator_id, s.store_name, "computing…")
            self._when_shown(
                "growth",
                lambda: self.runner.submit(
                    "growth",
                    iter_growth,
                    ckpt,
                    top_keys=TOP_KEYS_SHOWN,  # weighed on growth's own walk: no second read
                    what="Measuring state growth",
                    on_result=self._on_growth_finished,
                    on_error=self._on_growth_errored,
                ),
            )
        # The editor's query, on this checkpoint, and the tables' columns beside it.
        self._when_shown(
            "sql",
            lambda: (
                self._list_sql_tables(),
                self._on_sql_run_requested(
                    self.sql.query(), self.sql.store(), self.sql.spark_check.isChecked()
                ),
            ),
        )
        if self.event_logs:
            self._read_event_logs()
        if ckpt.operators:
            for op in ckpt.operators:
                for s in op.stores:
                    self.expired.set_store_status(op.operator_id, s.store_name, "Looking for expired keys…")
            self._when_shown(
                "expired",
                lambda: self.runner.submit(
                    "expired",
                    iter_expired_overview,
                    ckpt,
                    what="Looking for expired keys",
                    on_result=self._on_expired_finished,
                    on_error=self._on_expired_errored,
                ),
            )
        else:
            self.expired_updated.emit()
        if self._start_at is not None:
            start, self._start_at = self._start_at, None
            try:
                self.open_at(**start)
            except UsageError as err:
                self.status_label.setText(str(err))
                errors.show_error(err, title="Cannot open there")

    def adopt_summary(self, summary: Any) -> None:
        """Show the verdicts' growth and expired runs in their views when those have not started their
        own (they wait for their view or an idle app): one read of the state for both."""
        if self.loaded is None:
            return
        if "expired" in self._deferred and summary.expired is not None and summary.version_counts is not None:
            self._deferred.pop("expired")
            self._on_expired_finished(
                arrange_expired(self.loaded.checkpoint, summary.expired, summary.version_counts)
            )
        if "growth" in self._deferred and summary.growth is not None:
            self._deferred.pop("growth")
            self._on_growth_finished(summary.growth)

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
        change: dict[str, Any] = {}
        if operator_id is not None or store_name is not None:
            if self.loaded is None:
                raise UsageError("no checkpoint is open")
            ckpt = self.loaded.checkpoint
            if operator_id is None:
                owners = [
                    op.operator_id
                    for op in ckpt.operators
                    if any(s.store_name == store_name for s in op.stores)
                ]
                if not owners:
                    raise UsageError(f"no operator has a store {store_name!r}")
                operator_id = owners[0]
            op = ckpt.operator(operator_id)
            names = [s.store_name for s in op.stores]
            if store_name is None:
                store_name = names[0] if len(names) == 1 or "default" not in names else "default"
            if store_name not in names:
                raise UsageError(
                    f"operator {operator_id} has no store {store_name!r}; its stores: {', '.join(names)}"
                )
            versions = op.store(store_name).versions
            if version is None:
                version = batch_id + 1 if batch_id is not None else (versions[-1] if versions else None)
            change.update(
                operator_id=operator_id,
                store_name=store_name,
                partition_id=partition_id,
                version=version,
                key=None,
                key_partition_id=None,
            )
            self._store_chosen = True
        elif version is not None or partition_id is not None:
            change.update(partition_id=partition_id)
            if version is not None:
                change["version"] = version
        if batch_id is not None:
            change["batch_id"] = batch_id
        elif change.get("version") is not None:
            change["batch_id"] = change["version"] - 1 if change["version"] > 0 else None
        if key is not None:
            change.update(key=key, key_partition_id=partition_id)
        self.select_view(view)
        if change:
            self.selection.update(**change)
        if "operator_id" in change:
            self.expired.show_store(change["operator_id"], change["store_name"])
            self.growth.show_store(change["operator_id"], change["store_name"])

    def _store_item(self, op: Any, store: Any) -> tuple[int, str, str]:
        """``(operator_id, store_name, label)`` of a store picker item (labelled with what it holds)."""
        return (
            op.operator_id,
            store.store_name,
            store_label(op, store, self._roles.get((op.operator_id, store.store_name))),
        )

    def _store_groups(self) -> dict[tuple[int, str], str]:
        """Picker groups: a transformWithState operator's state variables, then its internal families."""
        if self.loaded is None:
            return {}
        kinds = {op.operator_id: op.kind.value for op in self.loaded.checkpoint.operators}
        return {
            key: f"operator {key[0]} · {kinds[key[0]]}: {role.group}"
            for key, role in self._roles.items()
            if role.group is not None
        }

    def _store_exists(self, operator_id: int | None, store_name: str | None) -> bool:
        if self.loaded is None or operator_id is None:
            return False
        return any(
            op.operator_id == operator_id and s.store_name == store_name
            for op, s in self.loaded.decodable_stores()
        )

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
            self._readers[key] = native_backend(self.loaded.checkpoint, self._chooser).store(
                operator_id, store_name
            )
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
            bad = [
                p
                for p in result.problems
                if p.context.get("operator_id") == store.operator_id
                and p.context.get("store_name") == store.store_name
            ]
            notes = (
                [f"{len(bad)} file(s) could not be read; their versions are gaps. See Problems."]
                if bad
                else []
            )
            role = self._roles.get((store.operator_id, store.store_name))
            if role is not None and role.column_family_of:
                notes.append(
                    f"A column family of RocksDB store {role.column_family_of!r}: rows and key + value bytes "
                    "are this family's; bytes written count the whole store's files (shared by its families)."
                )
            if role is not None and role.text.startswith("ListState"):
                notes.append("List state: one row per list element.")
            self.growth.set_store_status(store.operator_id, store.store_name, " ".join(notes))
            self.growth_updated.emit(store.operator_id, store.store_name)

        weighed = [s.top_keys for s in result.stores if s.top_keys is not None]
        self._weighed.update((t.operator_id, t.store_name) for t in weighed)
        self._show_top_keys(weighed)
        self._growth_done = True
        self._request_top_keys()

    def _request_top_keys(self) -> None:
        """Weigh the selected store's keys (once per store and checkpoint), after growth: heaviest keys
        are read in the background for the growth view, never delaying its plots."""
        key = (self.selection.operator_id, self.selection.store_name)
        if (
            self.loaded is None
            or not self._growth_done
            or key[0] is None
            or key in self._weighed
            or not self._store_exists(*key)
        ):
            return
        self._weighed.add(key)  # type: ignore[arg-type]
        self.runner.submit(
            "heavy",
            iter_top_keys,
            self.loaded.checkpoint,
            TOP_KEYS_SHOWN,
            only=key,
            what="Weighing the heaviest keys",
            on_result=self._on_top_keys_finished,
            on_error=lambda err, k=key: self._on_top_keys_errored(k, err),
        )

    def _on_top_keys_finished(self, result: Any) -> None:
        stores, problems = result
        self.problems.add_problems(problems, where="heaviest keys")
        self._show_top_keys(stores)

    def _show_top_keys(self, stores: list[StoreTopKeys]) -> None:
        for s in stores:
            rows = [(h.partition_id, h.key_text, h.bytes, h.elements) for h in s.overall]
            self.growth.set_top_keys(
                s.operator_id,
                s.store_name,
                s.version,
                s.keys,
                rows,
                s.grouping,
                note=f"not weighed ({s.skipped})" if s.skipped else "",
            )

    def _on_top_keys_errored(self, key: tuple[Any, Any], err: BaseException) -> None:
        self._weighed.discard(key)
        self.growth.set_top_keys(
            key[0], key[1], None, 0, [], note=f"could not be weighed: {errors.short_message(err)}"
        )
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="heaviest keys")
        else:
            errors.show_error(err, title="Weighing the heaviest keys failed")

    def _on_growth_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="state growth")
        else:
            errors.show_error(err, title="Measuring state growth failed")

    # -- event logs -----------------------------------------------------------------------------------
    def add_event_logs(self, paths: list[str]) -> None:
        """Show what the query reported (event logs, driver logs, progress dumps) on the batch timeline,
        and in the verdicts (slowest batches, rows dropped by the watermark)."""
        for path in paths:
            # a file of a rolling event log stands for its folder (all its events_N files)
            parent = os.path.dirname(path)
            if re.match(r"^events_\d+_", os.path.basename(path)) and os.path.basename(parent).startswith(
                "eventlog_v2_"
            ):
                path = parent
            if path not in self.event_logs:
                self.event_logs.append(path)
        if self.loaded is not None:
            self._read_event_logs()
            self.verdicts.start(self.loaded.checkpoint, top_keys=TOP_KEYS_SHOWN)

    def _on_event_log_action_triggered(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add event log, driver log or progress JSON lines")
        if paths:
            self.add_event_logs(paths)

    def _read_event_logs(self) -> None:
        assert self.loaded is not None
        self.runner.submit(
            "eventlog",
            iter_progress_series,
            self.loaded.checkpoint,
            list(self.event_logs),
            self.storage_options or None,
            what="Reading event logs",
            on_result=self._on_event_logs_read,
            on_error=self._on_event_logs_errored,
        )

    def _on_event_logs_read(self, series: ProgressSeries) -> None:
        self.problems.add_problems(series.problems, where="event logs")
        # Shown even when no batch is reported: the plots then say why.
        self.timeline.set_progress(
            series.batch_ids,
            series.parts,
            series.input_rate,
            series.processed_rate,
            series.dropped,
            series.notes,
            series.run_ids,
            why_empty=series.why_empty,
        )
        self.progress_summary = series.summary
        self.status_label.setText(series.summary)
        self.timeline.readout.setText(series.summary + ". Move the mouse over the plots to read a batch.")
        self.progress_updated.emit()

    def _on_event_logs_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="event logs")
            self.status_label.setText(f"Event logs not read: {err}")
        else:
            errors.show_error(err, title="Reading event logs failed")
        self.progress_updated.emit()

    # -- SQL -----------------------------------------------------------------------------------------
    def _list_sql_tables(self) -> None:
        """List the SQL tables and their columns (``state`` and ``changes`` of the picked store)."""
        if self.loaded is None:
            return
        operator_id, store_name = self.sql.store() or (None, None)
        self.runner.submit(
            "sqltables",
            iter_table_columns,
            self.loaded.checkpoint,
            operator_id,
            store_name,
            what="Listing the SQL tables",
            on_result=lambda got: self.sql.set_tables(*got),
            on_error=lambda err: self.sql.set_tables({}, f"Tables not listed: {errors.short_message(err)}"),
        )

    def _on_sql_run_requested(self, query: str, store: Any, in_spark: bool = False) -> None:
        if self.loaded is None or not query.strip():
            return
        operator_id, store_name = store if store is not None else (None, None)
        backends = None
        if in_spark:
            backends = self._ensure_chooser()
            self.sql.set_running(f"Running the query in Spark on {self._spark_master}…")
        else:
            self.sql.set_running("Running the query (tables are filled from the checkpoint first)…")
        self.runner.submit(
            "sql",
            iter_sql_table,
            self.loaded.checkpoint,
            query,
            operator_id=operator_id,
            store_name=store_name,
            cache=self._cache,
            backends=backends,
            in_spark=in_spark,
            what="Running the SQL query in Spark" if in_spark else "Running the SQL query",
            on_result=self._on_sql_finished,
            on_error=self._on_sql_errored,
        )

    def _on_sql_finished(self, answer: SqlTable) -> None:
        shown = len(answer.columns[0]) if answer.columns else 0
        status = f"{answer.total_rows:,} row{'s' if answer.total_rows != 1 else ''} in {answer.seconds:.2f} s"
        if shown < answer.total_rows:
            status += f" (the first {shown:,} shown; statelens sql --csv/--parquet writes them all)"
        if answer.problems:
            self.problems.add_problems(answer.problems, where="SQL query")
            status += f" · {len(answer.problems)} file(s) could not be read: see Problems"
        self.sql.set_answer(answer.headers, answer.columns, status)
        self.sql_updated.emit()

    def _on_sql_errored(self, err: BaseException) -> None:
        if isinstance(err, StatelensError):
            self.sql.set_error(str(err))
        else:
            self.sql.set_error(f"The query failed: {errors.short_message(err)}")
            errors.show_error(err, title="SQL query failed")
        self.sql_updated.emit()

    # -- expired keys --------------------------------------------------------------------------------
    def _on_expired_finished(self, overview: ExpiredOverview) -> None:
        self._expired = overview
        self.problems.add_problems(overview.problems, where="expired keys")
        if self.loaded is not None:
            # Stores with findings first (then the biggest), and the view opens on the one with the
            # most, unless a store was picked.
            ckpt = self.loaded.checkpoint
            items = [self._store_item(op, s) for op in ckpt.operators for s in op.stores]
            order = overview.store_order(self.loaded.store_sizes(), self._store_groups())
            rank = {key: i for i, key in enumerate(order)}
            items.sort(key=lambda item: rank.get((item[0], item[1]), len(rank)))
            tips = {key: role.description for key, role in self._roles.items()}
            self.expired.set_stores(items, self._store_groups(), tips)
            chosen = (self.selection.operator_id, self.selection.store_name)
            if self._store_chosen and chosen in rank:
                self.expired.show_store(*chosen)
        self._show_expired_tables(overview)
        for st in overview.stores:
            self.expired.set_store_status(st.operator_id, st.store_name, st.describe())
        self.expired_updated.emit()

    def _show_expired_tables(self, overview: ExpiredOverview) -> None:
        zone = self.time_zone
        for st in overview.stores:
            examples = st.examples  # the most overdue keys; st.total_findings counts them all
            times = [
                ms for f in examples for ms in (f.timeout_ms, f.threshold_ms) if ms is not None and ms >= 0
            ]
            headers, columns, sort_keys = findings_table(
                examples, zone.format_ms, zone.label(min(times) / 1000 if times else None)
            )
            refs = [(f.partition, f.version, f.key) for f in examples]
            self.expired.set_expiry(
                st.operator_id,
                st.store_name,
                st.versions,
                st.counts,
                st.partitions,
                st.partition_counts,
                headers,
                columns,
                sort_keys,
                refs,
                total=st.total_findings,
                checked=st.summary.check != "skipped",
                unreadable=st.unreadable,
            )

    def _on_expired_errored(self, err: BaseException) -> None:
        if self.loaded is not None:
            for op in self.loaded.checkpoint.operators:
                for s in op.stores:
                    self.expired.set_store_status(
                        op.operator_id,
                        s.store_name,
                        f"Could not look for expired keys: {errors.short_message(err)}",
                    )
        self.expired_updated.emit()
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="expired keys")
        else:
            errors.show_error(err, title="Looking for expired keys failed")

    def expired_findings(self) -> list[Any]:
        """The findings the expired view lists (latest version of each partition), every store: the
        analysis' capped examples (exact counts are in each store's ``total_findings``)."""
        return list(self._expired.result.examples) if self._expired is not None else []

    def _on_expired_finding_selected(self, partition_id: int, version: int, key: Any) -> None:
        shown = self.expired.shown_store()
        if shown is None:
            return
        op, store = shown
        change: dict[str, Any] = {"key": key, "key_partition_id": partition_id}
        if self._store_exists(op, store):
            change.update(
                operator_id=op,
                store_name=store,
                partition_id=partition_id,
                version=version,
                batch_id=version - 1 if version > 0 else None,
            )
        was_visible = self.history_dock.isVisible()
        changed = self.selection.update(**change)
        if not (was_visible and {"key", "key_partition_id", "operator_id", "store_name"} & set(changed)):
            self.show_key_history()

    # -- schema and conf -----------------------------------------------------------------------------
    def _on_schema_finished(self, result: Any) -> None:
        versions, problems = result
        self.problems.add_problems(problems, where="schema files")
        if self.loaded is not None:
            ckpt = self.loaded.checkpoint
            self.schema.set_schemas(
                [(*self._store_item(op, s), s.schema) for op in ckpt.operators for s in op.stores],
                # Short labels: the files table is narrow, and every store of an operator starts alike.
                [
                    (f"operator {v.operator_id} · {v.store_name}", v.from_batch, v.path, v.changes)
                    for v in versions
                ],
                {key: role.description for key, role in self._roles.items()},
            )
            self.schema.show_store(self.selection.operator_id, self.selection.store_name)
        self.schema_updated.emit()

    def _on_schema_errored(self, err: BaseException) -> None:
        self.schema_updated.emit()
        if isinstance(err, StatelensError):
            self.problems.add_problems([err], where="schema files")
        else:
            errors.show_error(err, title="Reading schema files failed")

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
            backend = self._backend_for(s.operator_id, s.store_name)
            # Spark reads stores the native readers cannot open (column families); diffs are native.
            native = diff or backend is None or backend.reads_files
            reader = self._reader(s.operator_id, s.store_name) if native else None
        except StatelensError as err:
            self.browser.clear_table(f"Cannot read this store: {err}")
            self.table_updated.emit()
            return
        self._cancel_spark_read()
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
                cache=self._cache,
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
                cache=self._cache,
                paged_over=self.paged_rows,
                what=f"Decoding version {s.version}",
                on_result=self._on_table_finished,
                on_error=self._on_table_errored,
            )
            return
        store = self.loaded.checkpoint.operator(s.operator_id).store(s.store_name)
        self.browser.set_loading(
            f"Reading operator {s.operator_id} {s.store_name}, {where}, version {s.version} "
            f"through Spark on {self._spark_master} (the first read starts a Spark session)…"
        )
        self._spark_reading = backend
        self._spark_progress_timer.start()
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
        self._spark_reading = None
        self._set_state_table(table)
        where = "all partitions" if table.partition_id is None else f"partition {table.partition_id}"
        if table.is_diff:
            head = f"diff of versions {table.compare_version} → {table.version}"
        else:
            head = f"{table.total_rows:,} row{'s' if table.total_rows != 1 else ''}"
        role = self._roles.get((table.operator_id, table.store_name))
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
        self._spark_reading = None
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
    def show_key_history(self) -> int | None:
        """Show the history dock and follow the selected key through its partition's versions.

        Returns
        -------
        int or None
            The job's token, None when no key (or no partition for it) is selected.
        """
        s = self.selection
        self.history_dock.setVisible(True)
        self.history_dock.raise_()
        if self.loaded is None or s.key is None or s.operator_id is None or s.store_name is None:
            self.history.clear_history(
                "Select a key (state browser or expired keys) to see its history across versions."
            )
            self.history_updated.emit()
            return None
        pid = s.key_partition_id if s.key_partition_id is not None else s.partition_id
        if pid is None or pid < 0:
            self.history.clear_history(
                "The selected key's partition is not known: pick a partition in the browser."
            )
            self.history_updated.emit()
            return None
        try:
            reader = self._reader(s.operator_id, s.store_name)
        except StatelensError as err:
            self.history.clear_history(f"Cannot read this store: {err}")
            self.history_updated.emit()
            return None
        from statelens.app.analysis._common import key_text

        self.history.set_loading(f"Following key {key_text(s.key)} through the versions of partition {pid}…")
        ckpt = self.loaded.checkpoint
        time_columns = display_time_columns(ckpt.operator(s.operator_id))
        batch_times = {b: (e.timestamp_ms, e.watermark_ms) for b, e in ckpt.offsets.items()}
        self._history_request = (reader, pid, s.key, time_columns, batch_times)
        return self._submit_history()

    def _submit_history(self) -> int | None:
        if self._history_request is None:
            return None
        reader, pid, key, time_columns, batch_times = self._history_request
        starts = [t for t, _wm in batch_times.values() if t is not None]
        zone = self.time_zone
        return self.runner.submit(
            "history",
            iter_key_history,
            reader,
            pid,
            key,
            time_columns,
            batch_times,
            time_text=zone.format_ms,
            zone=zone.label(min(starts) / 1000 if starts else None),
            what="Following the key through its versions",
            on_result=self._on_history_finished,
            on_error=self._on_history_errored,
        )

    def _on_utc_action_toggled(self, checked: bool) -> None:
        self.set_times_in_utc(checked)

    def set_times_in_utc(self, utc: bool, remember: bool = True) -> None:
        """Show the checkpoint's times in UTC (True) or local time; views re-render through the state.

        Parameters
        ----------
        utc : bool
        remember : bool
            Keep the choice for the next start (the settings).
        """
        blocked = self.utc_action.blockSignals(True)
        self.utc_action.setChecked(utc)
        self.utc_action.blockSignals(blocked)
        if remember:
            self.settings.setValue(SETTINGS_UTC, utc)
        if utc == self.time_zone.utc:
            return
        self.time_zone.set_utc(utc)
        # Tables the app builds from analysis results are rebuilt in the new zone (no re-analysis).
        if self._expired is not None:
            self._show_expired_tables(self._expired)
            self.expired_updated.emit()
        if self._history is not None:
            self._submit_history()

    def _on_history_finished(self, history: KeyHistory) -> None:
        self._history = history
        self.problems.add_problems(history.problems, where="key history")
        self.history.set_history(
            history.describe(),
            history.headers,
            history.columns,
            history.sort_keys,
            history.row_versions,
            history.changes,
        )
        self.history_updated.emit()

    def _on_history_errored(self, err: BaseException) -> None:
        self._history = None
        self.history.clear_history(f"Cannot follow this key: {errors.short_message(err)}")
        self.history_updated.emit()
        if not isinstance(err, StatelensError):
            errors.show_error(err, title="Key history failed")

    def key_history(self) -> KeyHistory | None:
        return self._history

    def _on_browser_history_requested(self) -> None:
        picked = self.browser.selected_key()
        if picked is not None:
            pid, key = picked
            self.selection.update(key=key, key_partition_id=pid if pid >= 0 else None)
        self.show_key_history()

    # -- backends ------------------------------------------------------------------------------------
    def set_backend(
        self, name: str, master: str | None = None, spark: Any = None, remember: bool = True
    ) -> None:
        """Read the browser's state with ``native``, ``spark`` or ``auto`` (native where it can decode).

        Parameters
        ----------
        name : str
        master : str, optional
            Spark master URL (kept when None).
        spark : SparkSession, optional
            Use this session instead of starting one (tests share one).
        remember : bool
            Keep the choice for the next start (the settings).
        """
        if name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
        changed = (
            name != self._backend_name
            or (master is not None and master != self._spark_master)
            or spark is not None
        )
        self._backend_name = name
        if master is not None:
            self._spark_master = master
        if spark is not None:
            self._spark_session = spark
        if remember:
            self.settings.setValue(SETTINGS_BACKEND, name)
            self.settings.setValue(SETTINGS_MASTER, self._spark_master)
        self._show_backend()
        if changed:
            self._close_backends()
            self._request_table()

    def backend_name(self) -> str:
        return self._backend_name

    def _show_backend(self) -> None:
        self.backend_combo.setCurrentIndex(max(self.backend_combo.findData(self._backend_name), 0))
        self.master_edit.setText(self._spark_master)
        self.master_edit.setEnabled(self._backend_name != "native")
        for action in self.backend_actions.actions():
            action.setChecked(action.data() == self._backend_name)
        if not self.backend_label.text() or self._table is None:
            self.backend_label.setText(
                f"Backend: {BACKENDS[self._backend_name]}"
                + (f" on {self._spark_master}" if self._backend_name != "native" else "")
            )

    def _backend_for(self, operator_id: int, store_name: str) -> Any:
        """The backend object reading this store (None: the native reader path)."""
        if self._backend_name == "native" or self.loaded is None:
            return None
        return self._ensure_chooser().for_store(operator_id, store_name)

    def _ensure_chooser(self) -> Any:
        """The backends of this checkpoint (Spark on the toolbar's master or endpoint, started when first
        needed); with the native backend picked, Spark is still what the SQL tab's "In Spark" runs on."""
        assert self.loaded is not None
        if self._chooser is None:
            from statelens.readers.backends import BackendChooser

            remote = self._spark_master if self._spark_master.startswith("sc://") else None
            self._chooser = BackendChooser(
                self.loaded.checkpoint,
                self._backend_name if self._backend_name != "native" else "spark",
                master=None if remote else self._spark_master,
                spark=None if remote else self._spark_session,
                remote=remote,
            )
        return self._chooser

    def _on_spark_progress_timer_timeout(self) -> None:
        backend = self._spark_reading
        if backend is None or self.runner.current("browser") is None:
            self._spark_progress_timer.stop()
            return
        progress = backend.job_progress() if hasattr(backend, "job_progress") else None
        if progress is not None:
            self.progress_bar.setRange(0, progress.total)
            self.progress_bar.setValue(min(progress.done, progress.total))
            self.status_label.setText(f"{progress.what}…")
            self.spark_progressed.emit(progress)

    def _cancel_spark_read(self) -> None:
        backend, self._spark_reading = self._spark_reading, None
        if backend is not None and hasattr(backend, "cancel"):
            backend.cancel()

    def _close_backends(self) -> None:
        chooser, self._chooser = self._chooser, None
        if chooser is not None:
            self._cancel_spark_read()
            chooser.close()

    def _on_backend_combo_activated(self, index: int) -> None:
        name = self.backend_combo.itemData(index)
        if name:
            self.set_backend(str(name))

    def _on_master_edit_editing_finished(self) -> None:
        text = self.master_edit.text().strip()
        if text and text != self._spark_master:
            self.set_backend(self._backend_name, master=text)

    def _on_master_action_triggered(self) -> None:
        text, ok = QInputDialog.getText(
            self,
            "Spark master",
            "Spark master URL (local[*], spark://host:7077, yarn…) or Spark Connect endpoint (sc://host:15002):",
            QLineEdit.EchoMode.Normal,
            self._spark_master,
        )
        if ok and text.strip():
            self.set_backend(self._backend_name, master=text.strip())

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
        backend = self._ensure_chooser().spark
        self._chooser.used.add("spark")
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
            iter_export_documents,
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
        elif table is self.expired.table and self._expired is not None:
            shown = self.expired.shown_store()
            st = self._expired.store(*shown) if shown is not None else None
            findings = st.examples if st is not None else []
            job = (
                iter_export_documents,
                (findings[i].to_json() for i in rows),
                out,
                fmt,
            )  # built in the worker
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
    def _on_view_batch_selected(self, batch_id: int) -> None:
        self.selection.select_batch(batch_id)

    def _on_view_store_selected(self, operator_id: int, store_name: str) -> None:
        self._store_chosen = True
        if (operator_id, store_name) == (self.selection.operator_id, self.selection.store_name):
            return
        version = self.selection.version
        if self.selection.batch_id is None and self.loaded is not None:
            versions = self.loaded.checkpoint.operator(operator_id).store(store_name).versions
            version = versions[-1] if versions else None
        self.selection.update(
            operator_id=operator_id,
            store_name=store_name,
            partition_id=None,
            version=version,
            key=None,
            key_partition_id=None,
        )

    def _on_view_partition_selected(self, partition_id: int | None) -> None:
        self.selection.update(partition_id=partition_id)

    def _on_view_version_selected(self, version: int) -> None:
        self.selection.update(version=version, batch_id=version - 1 if version > 0 else None)

    def _on_browser_key_selected(self, partition_id: int, key: Any) -> None:
        self.selection.update(key=key, key_partition_id=partition_id if partition_id >= 0 else None)

    def _on_selection_changed(self, changes: dict[str, Any]) -> None:
        if {"operator_id", "store_name", "partition_id", "version"} & set(changes):
            self._when_shown("browser", self._request_table)
        if {"operator_id", "store_name"} & set(changes):
            self._request_top_keys()
        if (
            {"key", "key_partition_id", "operator_id", "store_name"} & set(changes)
            and self.history_dock.isVisible()
            and self.selection.key is not None
        ):
            self.show_key_history()

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
        if idle and self._deferred and not self._background_paused:
            # Nothing else runs: fill the next hidden view, so switching to it later is instant.
            QTimer.singleShot(0, self._start_next_deferred)

    # -- jobs that wait for their view ---------------------------------------------------------------
    def _when_shown(self, channel: str, start: Callable[[], None]) -> None:
        """Run ``start`` (which submits the job on ``channel``, one of :data:`DEFERRED_VIEWS`) now if that view is showing; otherwise
        when the view is first shown or the app is idle. A newer request replaces a waiting one."""
        if self.current_view() == channel:
            self._deferred.pop(channel, None)
            start()
            return
        self._deferred[channel] = start
        if self.runner.idle and not self._background_paused:
            QTimer.singleShot(0, self._start_next_deferred)

    def _start_next_deferred(self) -> None:
        if not self._deferred or not self.runner.idle or self._background_paused or self.runner.is_shut_down:
            return
        channel = min(self._deferred, key=VIEWS.index)  # in the order of the tabs
        self._deferred.pop(channel)()

    def _on_tabs_current_changed(self, _index: int) -> None:
        start = self._deferred.pop(self.current_view(), None)
        if start is not None:
            start()

    def settled(self) -> bool:
        """True when no job runs and none waits to start in the background (hidden views are filled,
        or held after Cancel)."""
        return self.runner.idle and (self._background_paused or not self._deferred)

    def hold_hidden_views(self) -> None:
        """Start no more jobs for hidden views until they are shown (``--screenshot`` is done; Cancel)."""
        self._background_paused = True

    def pending_views(self) -> list[str]:
        """Views whose data waits until they are shown or the app is idle (the rest is done or running)."""
        return [v for v in DEFERRED_VIEWS if v in self._deferred]

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

        self._deferred.clear()  # closing: fill no hidden view
        self.hold_hidden_views()
        # A Spark job never yields: cancel it first, or the runner would wait for it in vain.
        self._cancel_spark_read()
        if self._chooser is not None:
            self._chooser.cancel()
        if not self.runner.shutdown():
            names = ", ".join(job.what or job.channel for job in self.runner.running_jobs())
            sys.stderr.write(f"statelens: warning: jobs still running at exit: {names}\n")
        self.selection.disconnect_all()
        self._set_state_table(None)  # a paged table's database and temporary folder
        self._close_backends()  # stops a Spark session the app started (a given one keeps running)
        if "statelens.readers.backends.spark" in sys.modules:
            from statelens.readers.backends.spark import stop_gateway

            stop_gateway()  # and the JVM PySpark launched for it, with py4j's threads
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


def _iter_schema_history(ckpt: Any) -> Generator[Progress, None, Any]:
    """:func:`app.explore.read_schema_history` as a runner job."""
    yield Progress(0, 1, "reading schema files")
    return read_schema_history(ckpt)


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


def _setting_bool(value: Any) -> bool:
    """A QSettings boolean (INI files hand back ``"true"``/``"false"``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _default_master() -> str:
    from statelens.readers.backends.spark import DEFAULT_MASTER, MASTER_ENV, REMOTE_ENV

    return os.environ.get(REMOTE_ENV) or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


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
    import re

    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)

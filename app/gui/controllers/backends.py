"""Who reads the state: the native decoder, Spark, or the native decoder with Spark behind it.

The toolbar's backend picker and Spark master field, and the Backend menu, are built here.

:class:`BackendsController` keeps the backend chosen (toolbar, Backend menu, settings), the Spark master
or Spark Connect endpoint, the checkpoint's :class:`~readers.backends.BackendChooser` (Spark starts when
first needed), the scans of the stores the native decoder reads (:meth:`BackendsController.reader`), and
the Spark read running for the state browser, whose task counts it polls for the status bar.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from PySide6.QtCore import QObject, QSettings, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QComboBox, QInputDialog, QLabel, QLineEdit, QToolBar, QWidget

from statelens.readers.backends import BackendChooser, native_backend
from statelens.readers.backends.spark import DEFAULT_MASTER, MASTER_ENV, REMOTE_ENV, stop_gateway
from statelens.readers.errors import UsageError
from statelens.readers.scan import StateScan

#: Backends of the state browser (``readers.backends``), as shown in the picker.
BACKENDS = {"native": "native decoder", "spark": "Spark", "auto": "auto (native, else Spark)"}
SETTINGS_BACKEND = "backend"
SETTINGS_MASTER = "spark_master"

#: Milliseconds between looks at Spark's status tracker while a read runs on Spark.
SPARK_PROGRESS_MS = 500


class BackendsController(QObject):
    """The backends of the checkpoint shown, and the choice of them.

    Parameters
    ----------
    settings : QSettings
        Where the choice is remembered.
    runner : app.gui.workers.JobRunner
        Whose ``browser`` channel a Spark read runs on.

    parent : QWidget
        The window (parent of the Spark master dialog).

    Signals
    -------
    spark_progressed(object progress)
        A :class:`~readers.model.Progress` of the Spark jobs the browser's read runs.
    changed()
        What reads the state changed (the browser reads again).
    """

    spark_progressed = Signal(object)
    changed = Signal()

    def __init__(self, settings: QSettings, runner: Any, parent: QWidget) -> None:
        super().__init__(parent)
        self.settings = settings
        self.runner = runner
        self.name = str(settings.value(SETTINGS_BACKEND, "native"))
        if self.name not in BACKENDS:
            self.name = "native"
        self.master = str(settings.value(SETTINGS_MASTER, "") or _default_master())
        #: The checkpoint's backends (None until Spark, or a Spark-read store, is first needed).
        self.chooser: Any = None
        self._ckpt: Any = None
        self._spark_session: Any = None
        self._spark_reading: Any = None
        self._opened: set[tuple[int, str]] = set()
        #: Polls Spark's status tracker while the browser reads through Spark (tasks done in the progress bar).
        self._timer = QTimer(self)
        self._timer.setInterval(SPARK_PROGRESS_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._build_widgets()

    # -- the toolbar's picker and the Backend menu -------------------------------------------------------
    def _build_widgets(self) -> None:
        self.combo = QComboBox()
        for name, text in BACKENDS.items():
            self.combo.addItem(text, name)
        self.combo.setToolTip(
            "Who decodes the state the browser shows: statelens itself, or Spark's statestore data source"
        )
        self.combo.activated.connect(lambda i: self.choose(str(self.combo.itemData(i))))
        self.master_edit = QLineEdit()
        self.master_edit.setMaximumWidth(200)
        self.master_edit.setToolTip(
            "Where the Spark backend runs: a master URL (local[*], spark://host:7077, yarn...), or a Spark "
            "Connect endpoint (sc://host:15002: no local Java needed; the server reads the checkpoint)"
        )
        self.master_edit.editingFinished.connect(self._on_master_edit_editing_finished)
        self.actions = QActionGroup(self)
        self.actions.setExclusive(True)
        for name, text in BACKENDS.items():
            label = (
                f"Read state with the {text}" if name != "auto" else "Read state: auto (native, else Spark)"
            )
            action = QAction(label, self)
            action.setCheckable(True)
            action.setData(name)
            action.triggered.connect(lambda _checked=False, n=name: self.choose(n))
            self.actions.addAction(action)
        self.master_action = QAction("Spark &master…", self)
        self.master_action.triggered.connect(self._on_master_action_triggered)
        self._show()

    def add_to_toolbar(self, bar: QToolBar) -> None:
        bar.addWidget(QLabel(" Backend: "))
        bar.addWidget(self.combo)
        bar.addWidget(QLabel(" Spark: "))
        bar.addWidget(self.master_edit)

    def menu_actions(self) -> list[QAction | None]:
        """The Backend menu (None: a separator)."""
        return [*self.actions.actions(), None, self.master_action]

    def _show(self) -> None:
        self.combo.setCurrentIndex(max(self.combo.findData(self.name), 0))
        self.master_edit.setText(self.master)
        self.master_edit.setEnabled(self.name != "native")
        for action in self.actions.actions():
            action.setChecked(action.data() == self.name)

    def _on_master_edit_editing_finished(self) -> None:
        text = self.master_edit.text().strip()
        if text and text != self.master:
            self.choose(self.name, master=text)

    def _on_master_action_triggered(self) -> None:
        text, ok = QInputDialog.getText(
            self.parent(),
            "Spark master",
            "Spark master URL (local[*], spark://host:7077, yarn…) or Spark Connect endpoint (sc://host:15002):",
            QLineEdit.EchoMode.Normal,
            self.master,
        )
        if ok and text.strip():
            self.choose(self.name, master=text.strip())

    def set_checkpoint(self, ckpt: Any) -> None:
        """Read ``ckpt`` from now on (the previous checkpoint's backends are closed)."""
        self.close()
        self._ckpt = ckpt
        self._opened = set()

    def choose(self, name: str, master: str | None = None, spark: Any = None, remember: bool = True) -> bool:
        """Read the browser's state with ``native``, ``spark`` or ``auto`` (native where it can decode).

        Parameters
        ----------
        name : str
        master : str, optional
            Spark master URL or Spark Connect endpoint (kept when None).
        spark : SparkSession, optional
            Use this session instead of starting one (tests share one).
        remember : bool
            Keep the choice for the next start (the settings).

        Returns
        -------
        bool
            Whether what reads the state changed (``changed`` was then sent).
        """
        if name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
        changed = name != self.name or (master is not None and master != self.master) or spark is not None
        self.name = name
        if master is not None:
            self.master = master
        if spark is not None:
            self._spark_session = spark
        if remember:
            self.settings.setValue(SETTINGS_BACKEND, name)
            self.settings.setValue(SETTINGS_MASTER, self.master)
        self._show()
        if changed:
            self.close()
            self.changed.emit()
        return changed

    def description(self) -> str:
        """``Backend: Spark on local[*]`` for the status bar."""
        return f"Backend: {BACKENDS[self.name]}" + (f" on {self.master}" if self.name != "native" else "")

    def for_store(self, operator_id: int, store_name: str) -> Any:
        """The backend object reading this store (None: the native reader path)."""
        if self.name == "native" or self._ckpt is None:
            return None
        return self.ensure_chooser().for_store(operator_id, store_name)

    def ensure_chooser(self) -> Any:
        """The backends of this checkpoint (Spark on the toolbar's master or endpoint, started when first
        needed); with the native backend picked, Spark is still what the SQL tab's "In Spark" runs on."""
        assert self._ckpt is not None
        if self.chooser is None:
            remote = self.master if self.master.startswith("sc://") else None
            self.chooser = BackendChooser(
                self._ckpt,
                self.name if self.name != "native" else "spark",
                master=None if remote else self.master,
                spark=None if remote else self._spark_session,
                remote=remote,
            )
        return self.chooser

    def reader(self, operator_id: int, store_name: str) -> StateScan:
        """The scan of a store read by the native decoder (the jobs set what they read of it: version,
        partitions, cache). The store is opened once per checkpoint, on the GUI thread (its listing is
        read then): a store that cannot be opened raises here."""
        if self._ckpt is None:
            raise UsageError("no checkpoint is open")
        scan = StateScan(native_backend(self._ckpt, self.chooser), operator_id, store_name)
        if (operator_id, store_name) not in self._opened:
            scan.partition_ids()
            self._opened.add((operator_id, store_name))
        return scan

    # -- a read running in Spark -----------------------------------------------------------------------
    def start_spark_read(self, backend: Any) -> None:
        """The browser's read now runs in ``backend`` (Spark): poll its tasks, cancel it on demand."""
        self._spark_reading = backend
        self._timer.start()

    def end_spark_read(self) -> None:
        self._spark_reading = None

    def cancel_spark_read(self) -> None:
        """Cancel the Spark job group of the browser's read (a Spark job never yields to the runner)."""
        backend, self._spark_reading = self._spark_reading, None
        if backend is not None:
            backend.cancel()

    def _on_timer_timeout(self) -> None:
        backend = self._spark_reading
        if backend is None or self.runner.current("browser") is None:
            self._timer.stop()
            return
        progress = backend.engine.job_progress() if backend.engine is not None else None
        if progress is not None:
            self.spark_progressed.emit(progress)

    def cancel_all(self) -> None:
        """Cancel what runs in Spark (the window closes): a Spark job never yields to the runner."""
        self.cancel_spark_read()
        if self.chooser is not None:
            self.chooser.cancel()

    def close(self) -> None:
        """Stop a Spark session the app started (a given one keeps running)."""
        chooser, self.chooser = self.chooser, None
        if chooser is not None:
            self.cancel_spark_read()
            chooser.close()

    def shutdown(self) -> None:
        """Close the backends (the window closes), and stop the JVM PySpark launched, with py4j's threads."""

        self.close()
        if "statelens.readers.backends.spark" in sys.modules:
            stop_gateway()


def _default_master() -> str:
    return os.environ.get(REMOTE_ENV) or os.environ.get(MASTER_ENV) or DEFAULT_MASTER

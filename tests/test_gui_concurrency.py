"""Concurrency of the desktop app: a second checkpoint opened while the first still
loads, and the window closed mid-load (native loading and Spark reads), stop cleanly.

Loads are slowed down deterministically, never by timing: :class:`StalledStorage` holds every file read
of one checkpoint until released, the way a stalled S3 request would, while still polling the reader's
cancel flag as the storage layer does (``CheckpointFS._call_once``); :class:`BlockingSparkJob` makes a
Spark read run a job that sleeps in the executor until it is cancelled. Each test checks that no Python
thread is left behind (``threading.enumerate`` before and after, with a bounded wait), that no worker of
Qt's thread pool still runs, and for Spark that the job is cancelled and that a session the app started
is stopped (a session the tests gave it keeps running). The app-started session runs in a fresh process
(``tests/_close_probe.py``): one process can hold only one SparkContext, and the tests' own may be up.

No test asserts how long a close took: a stalled read can only end by being cancelled (its gate opens
after the test), a blocked Spark job only by its job group being cancelled (it sleeps for ten minutes),
so "no worker still running as ``close()`` returns" proves the cancel. The close time is reported by the
probe (``close_seconds``) and measured by ``python -m tests.benchmarks.bench_cancel``.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("superqt")

from PySide6.QtCore import QSettings, QThreadPool  # noqa: E402

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 refcount guard before any signal is emitted

pytestmark = [pytest.mark.spark, pytest.mark.qt_log_ignore("propagateSizeHints")]

LOAD_TIMEOUT_MS = 60_000
REPO = Path(__file__).resolve().parent.parent


# -- helpers -------------------------------------------------------------------------------------------
def python_threads() -> set[threading.Thread]:
    """Threads started by Python code (Qt's pool threads that ran Python show up as dummies: left out,
    they are checked through ``QThreadPool``)."""
    return {t for t in threading.enumerate() if type(t).__name__ != "_DummyThread"}


def assert_no_stray_threads(qtbot: Any, before: set[threading.Thread], timeout_ms: int = 10_000) -> None:
    assert QThreadPool.globalInstance().waitForDone(timeout_ms), (
        "a worker of Qt's thread pool is still running"
    )
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    qtbot.waitUntil(lambda: python_threads() <= before, timeout=timeout_ms)


class StalledStorage:
    """Holds every file read under ``root`` until :attr:`gate` is set, polling the read's cancel flag."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.cancelled_reads = 0
        self.released_reads = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from statelens.readers import fs as fs_module

        real = fs_module.CheckpointFS._call_once
        stalled = self

        def call_once(fs: Any, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any], stop: Any) -> Any:
            reading = (
                method == "cat_file" or method is fs_module._local_read
            )  # fsspec, or the local disk's read
            if reading and str(args[0]).startswith(stalled.root):
                stalled.entered.set()
                while not stalled.gate.wait(fs_module.POLL_S / 10):
                    if stop():
                        stalled.cancelled_reads += 1
                        raise fs_module._Stop  # what a request in flight does when cancelled
                stalled.released_reads += 1
            return real(fs, method, args, kwargs, stop)

        monkeypatch.setattr(fs_module.CheckpointFS, "_call_once", call_once)


class BlockingSparkJob:
    """Spark reads first run, in their own job group, a job that sleeps in the executor until cancelled."""

    SLEEP = "reflect('java.lang.Thread', 'sleep', cast(600000 as bigint)) as slept"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.outcome: str | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from statelens.readers.backends import spark as spark_backend

        real = spark_backend.collect_converted
        blocker = self

        def collect_converted(df: Any, columns: list[str]) -> Any:
            blocker.entered.set()
            try:
                df.sparkSession.range(1, numPartitions=1).selectExpr(blocker.SLEEP).collect()
            except Exception as err:
                blocker.outcome = "cancelled" if "CANCELLED" in str(err).upper() else f"failed: {err}"
                raise
            blocker.outcome = "finished"
            return real(df, columns)

        monkeypatch.setattr(spark_backend, "collect_converted", collect_converted)


@pytest.fixture
def raise_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATELENS_RAISE", "1")


@pytest.fixture
def make_window(qtbot: Any, tmp_path: Path) -> Iterator[Any]:
    from statelens.app.gui.window import MainWindow

    made: list[Any] = []

    def make() -> Any:
        settings = QSettings(str(tmp_path / f"settings{len(made)}.ini"), QSettings.Format.IniFormat)
        win = MainWindow(settings=settings)
        qtbot.addWidget(win)
        win.resize(1200, 800)
        win.show()
        made.append(win)
        return win

    yield make
    for win in made:
        win.close()
    from statelens.app.gui import errors

    for box in errors.open_dialogs():
        box.close()


def _open(qtbot: Any, win: Any, path: Path) -> Any:
    with qtbot.waitSignal(win.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)
    return win.loaded


# -- a second checkpoint while the first loads -----------------------------------------------------------
def test_second_checkpoint_cancels_the_first_still_loading(
    qtbot,
    make_window,
    checkpoint,
    monkeypatch,  # type: ignore[no-untyped-def]
    raise_errors,
) -> None:
    from statelens.app.gui import errors

    first, second = checkpoint("agg_count") / "checkpoint", checkpoint("window_agg_watermark") / "checkpoint"
    before = python_threads()
    stalled = StalledStorage(first)
    stalled.install(monkeypatch)
    win = make_window()
    loaded: list[Any] = []
    failed: list[str] = []
    win.checkpoint_loaded.connect(loaded.append)
    win.load_failed.connect(failed.append)
    try:
        win.open_checkpoint(str(first))
        qtbot.waitUntil(stalled.entered.is_set, timeout=LOAD_TIMEOUT_MS)  # the first load waits for storage
        with qtbot.waitSignal(win.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
            win.open_checkpoint(str(second))
        qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)
        # The first load stopped because it was cancelled, not because the storage answered.
        assert stalled.cancelled_reads >= 1 and stalled.released_reads == 0
        assert [item.url for item in loaded] == [str(second)] and failed == []
        assert win.loaded is not None and win.loaded.url == str(second)
        assert win.windowTitle().startswith(str(second))
        # Nothing of the cancelled load reached the views: no problems, no dialogs, its reads not listed.
        assert win.loaded.checkpoint.report.problems == []
        assert win.problems.count() == 0 and errors.open_dialogs() == []
        assert win.overview.batch_model.rowCount() == len(win.loaded.checkpoint.batches)
        win.close()
        assert_no_stray_threads(qtbot, before)
    finally:
        stalled.gate.set()


# -- closing the window mid-load -------------------------------------------------------------------------
def test_close_while_loading_cancels_the_read_and_leaves_no_thread(
    qtbot,
    make_window,
    checkpoint,
    monkeypatch,  # type: ignore[no-untyped-def]
    capsys,
    raise_errors,
) -> None:
    path = checkpoint("agg_many_partitions") / "checkpoint"
    before = python_threads()
    stalled = StalledStorage(path)
    stalled.install(monkeypatch)
    win = make_window()
    loaded: list[Any] = []
    win.checkpoint_loaded.connect(loaded.append)
    try:
        win.open_checkpoint(str(path))
        qtbot.waitUntil(stalled.entered.is_set, timeout=LOAD_TIMEOUT_MS)
        win.close()
        # close() waited for its workers, and they ended: the read still held on the gate was cancelled
        assert QThreadPool.globalInstance().activeThreadCount() == 0
        assert not stalled.gate.is_set() and stalled.released_reads == 0
        qtbot.waitUntil(lambda: win.settled(), timeout=5000)  # their "finished" signals, queued
        assert stalled.cancelled_reads >= 1 and stalled.released_reads == 0
        assert loaded == []
        assert_no_stray_threads(qtbot, before)
        assert "still running" not in capsys.readouterr().err
    finally:
        stalled.gate.set()


def test_close_during_a_spark_read_cancels_its_job_and_keeps_a_given_session(
    qtbot,
    make_window,
    checkpoint,  # type: ignore[no-untyped-def]
    spark,
    monkeypatch,
    capsys,
    raise_errors,
) -> None:
    """With a session the caller supplied (the tests'), closing cancels the app's Spark job only."""
    win = make_window()
    _open(qtbot, win, checkpoint("agg_count") / "checkpoint")
    tracker = spark.sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == []
    blocker = BlockingSparkJob()
    blocker.install(monkeypatch)
    before = python_threads()
    win.set_backend("spark", spark=spark, remember=False)  # the browser reads the store through Spark
    qtbot.waitUntil(blocker.entered.is_set, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: tracker.getActiveJobsIds() != [], timeout=LOAD_TIMEOUT_MS)  # the job runs
    win.close()
    # the worker ended within close(), and its ten-minute job could only end by being cancelled
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    assert blocker.outcome == "cancelled"
    qtbot.waitUntil(lambda: win.settled(), timeout=5000)
    qtbot.waitUntil(lambda: tracker.getActiveJobsIds() == [], timeout=10_000)
    assert_no_stray_threads(qtbot, before)
    assert spark.range(3).count() == 3  # the given session is still there and usable
    assert "still running" not in capsys.readouterr().err


def test_cancelled_spark_backend_refuses_the_read_it_was_starting(checkpoint, spark, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A cancel that comes before the job is submitted (session still starting) still stops the read."""
    from statelens.readers.backends.spark import SparkBackend
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.errors import ReadCancelledError

    ckpt = open_checkpoint(str(checkpoint("agg_count") / "checkpoint"))
    backend = SparkBackend(ckpt, spark=spark)
    real_session = backend.session

    def slow_start() -> Any:
        backend.cancel()  # arrives while "Spark starts", before any job of the read exists
        return real_session()

    monkeypatch.setattr(backend, "session", slow_start)
    with pytest.raises(ReadCancelledError, match="cancelled"):
        backend.read_rows(0, "default", 1)
    monkeypatch.setattr(backend, "session", real_session)
    assert backend.read_rows(0, "default", 1)  # a later read is not affected
    backend.close()
    assert spark.range(2).count() == 2  # close() never stops a session it was given


def test_closing_the_app_stops_the_spark_session_it_started() -> None:
    """In a fresh process: close the window while the app's own session starts, then during its job.

    Each time the session the app started is stopped, the JVM gateway it launched is shut down, no job
    keeps running, and the process is left with the threads it had before (``tests/_close_probe.py``).
    """
    from tests.spark_checkpoints import get_checkpoint

    path = get_checkpoint("agg_count") / "checkpoint"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(REPO)}
    env.pop("STATELENS_SPARK_MASTER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests._close_probe", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(lines[-1])
    for phase in ("while_starting", "during_job"):
        got = report[phase]
        assert got["session_started"], got  # the app really started its own session
        assert got["spark_context_active"] is False, got
        assert got["gateway_running"] is False, got
        assert got["stray_threads"] == [], got
        assert got["pool_idle"] is True, got
    # the job sleeps ten minutes unless cancelled; the probe's close returned with the pool idle
    assert report["during_job"]["job_outcome"] == "cancelled"


def test_a_spark_read_shows_its_tasks_in_the_progress_bar_and_cancels(  # type: ignore[no-untyped-def]
    qtbot, make_window, checkpoint, spark, monkeypatch
) -> None:
    """While the browser reads through Spark, the progress bar counts the job's tasks from Spark's status
    tracker; Cancel stops the job."""
    win = make_window()
    win.select_view("browser")
    _open(qtbot, win, checkpoint("agg_count") / "checkpoint")
    tracker = spark.sparkContext.statusTracker()
    blocker = BlockingSparkJob()
    blocker.install(monkeypatch)
    seen: list[Any] = []
    win.backends.spark_progressed.connect(seen.append)
    win.set_backend("spark", spark=spark, remember=False)
    qtbot.waitUntil(blocker.entered.is_set, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: bool(seen), timeout=LOAD_TIMEOUT_MS)
    progress = seen[-1]
    assert progress.total >= 1 and 0 <= progress.done < progress.total  # the sleeping task is not done
    assert (win.progress_bar.maximum(), win.progress_bar.value()) == (progress.total, progress.done)
    assert "tasks done" in win.status_label.text() and win.progress_bar.isVisible()
    win.cancel_jobs()
    qtbot.waitUntil(lambda: blocker.outcome is not None, timeout=LOAD_TIMEOUT_MS)
    assert blocker.outcome == "cancelled"
    qtbot.waitUntil(lambda: tracker.getActiveJobsIds() == [], timeout=10_000)
    qtbot.waitUntil(lambda: win.settled(), timeout=10_000)

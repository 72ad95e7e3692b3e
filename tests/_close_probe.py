"""Close the app's window while its own Spark session starts, then during its Spark job; report what is left.

Run in a fresh process by ``tests/test_gui_concurrency.py`` (one process holds one SparkContext, and
the test process may already have the tests' own)::

    python -m tests._close_probe CHECKPOINT

Prints one JSON line: for each phase (``while_starting``, ``during_job``) whether the app started a
session, whether a SparkContext or the JVM gateway is still up afterwards, the Python threads that
were not there before, whether Qt's thread pool is idle, how long ``close()`` took and what became of
the blocked Spark job. Slowdowns are deterministic: the session start waits for a gate released as the
window closes; the job sleeps in the executor until cancelled.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

#: How long one wait of the probe may take before it gives up (seconds).
WAIT_S = 240


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if type(t).__name__ != "_DummyThread"}


def _wait(app: Any, predicate: Any, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError(f"probe: waited {WAIT_S} s for {what}")
        app.processEvents()
        time.sleep(0.01)


def _left_over(app: Any, before: set[threading.Thread]) -> dict[str, Any]:
    from PySide6.QtCore import QThreadPool
    from pyspark import SparkContext

    pool_idle = QThreadPool.globalInstance().waitForDone(WAIT_S * 1000)
    end = time.monotonic() + 10
    while _threads() - before and time.monotonic() < end:  # py4j's workers end within a second
        app.processEvents()
        time.sleep(0.05)
    return {
        "spark_context_active": SparkContext._active_spark_context is not None,
        "gateway_running": SparkContext._gateway is not None,
        "stray_threads": sorted(t.name for t in _threads() - before),
        "pool_idle": pool_idle and QThreadPool.globalInstance().activeThreadCount() == 0,
    }


def _window(app: Any, path: str, folder: str, name: str) -> Any:
    from PySide6.QtCore import QSettings

    from statelens.app.gui.window import MainWindow

    win = MainWindow(settings=QSettings(os.path.join(folder, f"{name}.ini"), QSettings.Format.IniFormat))
    win.show()
    loaded: list[Any] = []
    win.checkpoint_loaded.connect(loaded.append)
    win.open_checkpoint(path)
    _wait(app, lambda: loaded and win.settled(), "the checkpoint to load")
    return win


def _started_sessions() -> list[Any]:
    """Records every session ``SparkSession.builder.getOrCreate`` hands out (the app starts its own)."""
    from pyspark.sql import SparkSession

    got: list[Any] = []
    real = SparkSession.Builder.getOrCreate

    def get_or_create(self: Any) -> Any:
        result = real(self)
        got.append(result)
        return result

    SparkSession.Builder.getOrCreate = get_or_create  # type: ignore[method-assign]
    return got


def phase_while_starting(app: Any, path: str, folder: str) -> dict[str, Any]:
    """Close while ``SparkBackend.session()`` is starting Spark (held at ``check_spark_available``)."""
    from statelens.readers.backends import spark as spark_backend

    before = _threads()
    win = _window(app, path, folder, "starting")
    entered, gate = threading.Event(), threading.Event()
    real_check = spark_backend.check_spark_available

    def held_check() -> None:
        entered.set()
        gate.wait(WAIT_S)
        real_check()

    spark_backend.check_spark_available = held_check
    try:
        win.set_backend("spark", master="local[1]", remember=False)
        _wait(app, entered.is_set, "the Spark session to start")
        # Release the start as the window closes: the close overtakes or meets a starting session.
        threading.Timer(0.1, gate.set).start()
        t = time.monotonic()
        win.close()
        close_s = time.monotonic() - t
        _wait(app, lambda: win.settled(), "the reading job to end")
    finally:
        gate.set()
        spark_backend.check_spark_available = real_check
    out = _left_over(app, before)
    out["close_seconds"] = round(close_s, 2)
    return out


def phase_during_job(app: Any, path: str, folder: str) -> dict[str, Any]:
    """Close while the app's Spark read runs a job that sleeps until cancelled."""
    from statelens.readers.backends import spark as spark_backend

    before = _threads()
    win = _window(app, path, folder, "job")
    entered = threading.Event()
    outcome: list[str] = []
    real_collect = spark_backend.collect_converted

    def collect_converted(df: Any, columns: list[str]) -> Any:
        entered.set()
        try:
            df.sparkSession.range(1, numPartitions=1).selectExpr(
                "reflect('java.lang.Thread', 'sleep', cast(600000 as bigint)) as slept"
            ).collect()
        except Exception as err:
            outcome.append("cancelled" if "CANCELLED" in str(err).upper() else f"failed: {str(err)[:300]}")
            raise
        outcome.append("finished")
        return real_collect(df, columns)

    spark_backend.collect_converted = collect_converted
    try:
        win.set_backend("spark", master="local[1]", remember=False)
        _wait(app, entered.is_set, "the Spark read to start its job")
        from pyspark import SparkContext

        _wait(
            app,
            lambda: (
                SparkContext._active_spark_context is not None
                and SparkContext._active_spark_context.statusTracker().getActiveJobsIds()
            ),
            "the job to run",
        )
        t = time.monotonic()
        win.close()
        close_s = time.monotonic() - t
        _wait(app, lambda: bool(outcome), "the job to end")
    finally:
        spark_backend.collect_converted = real_collect
    out = _left_over(app, before)
    out["close_seconds"] = round(close_s, 2)
    out["job_outcome"] = outcome[0] if outcome else None
    return out


def main(argv: list[str]) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.pop("STATELENS_SPARK_MASTER", None)
    from PySide6.QtWidgets import QApplication

    import statelens.app.gui  # noqa: F401 - the PySide6 guard, as the app applies it

    path = argv[0]
    app = QApplication.instance() or QApplication(["statelens-probe"])
    sessions = _started_sessions()
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        report["while_starting"] = phase_while_starting(app, path, folder)
        report["while_starting"]["session_started"] = bool(sessions)
        n = len(sessions)
        report["during_job"] = phase_during_job(app, path, folder)
        report["during_job"]["session_started"] = len(sessions) > n
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

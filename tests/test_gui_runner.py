"""The GUI's one job runner (``app/gui/workers.py``): stale results dropped, cancel at the next yield
with the job's ``finally`` run, and a shutdown that cannot wait for a job detaches it, so that a job
still inside one long step (a RocksDB replay under load) never calls back into a closed window."""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest

pytest.importorskip("PySide6")

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 refcount guard before any signal is emitted
from statelens.app.gui.workers import JobRunner  # noqa: E402
from statelens.readers.model import Progress  # noqa: E402

TIMEOUT_MS = 10_000


def _blocking(
    gate: threading.Event, entered: threading.Event, closed: list[bool]
) -> Generator[Any, None, str]:
    """Yields once, then sits in one long step until ``gate`` is set; records that it was closed."""
    try:
        yield Progress(0, 1, "started")
        entered.set()
        gate.wait(TIMEOUT_MS / 1000)
        yield Progress(1, 1, "after the long step")
        return "done"
    finally:
        closed.append(True)


def test_a_newer_job_drops_the_older_ones_result(qtbot: Any) -> None:
    runner = JobRunner()
    gate, entered, closed = threading.Event(), threading.Event(), []
    results: list[str] = []
    runner.submit("load", _blocking, gate, entered, closed, on_result=results.append)
    assert entered.wait(TIMEOUT_MS / 1000)

    def quick() -> Generator[Any, None, str]:
        yield Progress(0, 1, "quick")
        return "newer"

    with qtbot.waitSignal(runner.idle_changed, timeout=TIMEOUT_MS, check_params_cb=lambda idle: idle):
        runner.submit("load", quick, on_result=results.append)
        gate.set()
    assert results == ["newer"]
    assert closed == [True]  # the superseded job stopped at its next yield and ran its finally


def test_shutdown_waits_for_a_job_that_yields(qtbot: Any) -> None:
    runner = JobRunner()
    gate, entered, closed = threading.Event(), threading.Event(), []
    runner.submit("growth", _blocking, gate, entered, closed)
    assert entered.wait(TIMEOUT_MS / 1000)
    gate.set()
    assert runner.shutdown(TIMEOUT_MS) is True
    assert closed == [True]
    with pytest.raises(RuntimeError, match="shut down"):
        runner.submit("growth", _blocking, gate, entered, closed)


def test_shutdown_detaches_a_job_it_cannot_wait_for(qtbot: Any) -> None:
    runner = JobRunner()
    gate, entered, closed = threading.Event(), threading.Event(), []
    called: list[str] = []
    runner.job_finished.connect(lambda channel: called.append(f"finished {channel}"))
    runner.job_progressed.connect(lambda channel, _p: called.append(f"progress {channel}"))
    runner.submit(
        "replay",
        _blocking,
        gate,
        entered,
        closed,
        on_result=lambda r: called.append(f"result {r}"),
        on_error=lambda e: called.append(f"error {e}"),
        on_yield=lambda i: called.append(f"yield {i}"),
    )
    assert entered.wait(TIMEOUT_MS / 1000)
    qtbot.waitUntil(lambda: "progress replay" in called, timeout=TIMEOUT_MS)
    called.clear()
    assert runner.shutdown(timeout_ms=50) is False  # the job is inside its long step
    (job,) = runner.running_jobs()
    finished = threading.Event()
    job.worker.finished.connect(finished.set)  # the test's own watch on the thread, after the detach
    gate.set()
    qtbot.waitUntil(finished.is_set, timeout=TIMEOUT_MS)
    qtbot.wait(50)  # let any queued signal be delivered
    assert called == []  # nothing it emitted after the shutdown reached the runner or its callbacks
    assert closed == [True]  # and it still stopped at its next yield, its finally run

"""Follow mode: a copy of a real checkpoint grows batch by batch (as Spark writes one: the batch's offsets,
then its state files, then its commit) while the app follows it.

Expected batch ids and state versions are the names of the files Spark wrote (``offsets/<id>``,
``commits/<id>``, ``<version>.delta``); the views must show what a poll found without losing what the
user picked. Polls are started by the test (``FollowController.poll_now``) and waited for through the
``polled`` signal, never by time.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("superqt")

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 6.12.0 refcount guard before any signal is emitted
from statelens.app.follow import FollowLog, FollowPoll, ReopeningPoller, follow_status  # noqa: E402
from tests._growing import GrowingCheckpoint  # noqa: E402
from tests._gui import open_window  # noqa: E402

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

LOAD_TIMEOUT_MS = 60_000
SCENARIO = "agg_many_partitions"
#: Batches the copy holds when the app opens it.
FIRST = 4


@pytest.fixture
def growing(checkpoint, tmp_path: Path) -> GrowingCheckpoint:  # type: ignore[no-untyped-def]
    grown = GrowingCheckpoint(checkpoint(SCENARIO) / "checkpoint", tmp_path / "live")
    assert len(grown.batches) > FIRST + 2
    grown.write_until(FIRST)
    return grown


@pytest.fixture
def raise_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATELENS_RAISE", "1")


@pytest.fixture
def window(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    yield from open_window(qtbot, tmp_path)


def _open(qtbot, win, path: Path):  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(win.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(win.settled, timeout=LOAD_TIMEOUT_MS)


def _poll(qtbot, win) -> FollowPoll:  # type: ignore[no-untyped-def]
    """Start a poll and wait until it and the refresh it started are done."""
    qtbot.waitUntil(win.settled, timeout=LOAD_TIMEOUT_MS)
    with qtbot.waitSignal(win.follow.polled, timeout=LOAD_TIMEOUT_MS) as got:
        assert win.follow.poll_now()
    qtbot.waitUntil(win.settled, timeout=LOAD_TIMEOUT_MS)
    poll = got.args[0]
    assert isinstance(poll, FollowPoll)
    return poll


def _versions(win) -> list[float]:  # type: ignore[no-untyped-def]
    """The versions the growth view's total curve is drawn at."""
    xs = win.growth.total_curve.getData()[0]
    return [] if xs is None else [float(x) for x in xs]


# -- Qt-free: the poller and the status line ------------------------------------------------------------
@pytest.mark.spark
def test_poller_reports_each_committed_batch_once(growing: GrowingCheckpoint) -> None:
    poller = ReopeningPoller(str(growing.dest), last_committed=FIRST)
    assert poller.poll().new_batches == ()
    growing.write_batch()
    growing.write_batch()
    first = poller.poll()
    assert first.new_batches == tuple(growing.committed()[FIRST + 1 :]) == (FIRST + 1, FIRST + 2)
    assert first.checkpoint is not None and first.checkpoint.last_committed_batch_id == FIRST + 2
    assert poller.poll().new_batches == ()

    # A batch planned (offsets written) but not committed yet is not new; its commit makes it new.
    batch = FIRST + 3
    for rel in growing.files[batch]:
        if rel.parts[0] != "commits":
            growing._copy(rel)
    assert poller.poll().new_batches == ()
    for rel in growing.files[batch]:
        growing._copy(rel)
    assert poller.poll().new_batches == (batch,)


@pytest.mark.spark
def test_poller_says_why_it_cannot_read(growing: GrowingCheckpoint) -> None:
    poller = ReopeningPoller(str(growing.dest), last_committed=FIRST)
    # The newest commit deleted: the commit log went back, nothing is new.
    (growing.dest / "commits" / str(FIRST)).unlink()
    poll = poller.poll()
    assert poll.went_back and poll.changed and poll.new_batches == ()
    assert poll.last_committed == growing.committed()[-1] == FIRST - 1
    assert poller.poll().went_back is False
    shutil.rmtree(growing.dest)
    poll = poller.poll()
    assert poll.problem and not poll.changed and poll.checkpoint is None
    assert poll.last_committed == FIRST - 1


def test_follow_status_lines() -> None:
    log = FollowLog(interval_s=5)
    clock = {0: "12:00:00", 3_000: "12:00:03", 70_000: "12:01:10"}.__getitem__
    log.start(0)
    assert follow_status(log, 0, clock) == "Following (every 5 s) · waiting for the first poll"
    log.record(FollowPoll(new_batches=(41, 42), last_committed=42, batch_time_ms=0), 3_000)
    assert follow_status(log, 3_000, clock) == (
        "Following (every 5 s) · polled 12:00:03: batch 42 started 3 s ago; 2 new batches"
    )
    log.record(FollowPoll(last_committed=42, batch_time_ms=0), 70_000)
    assert follow_status(log, 70_000, clock).endswith(
        "batch 42 started 70 s ago; no new batch for 67 s — query stopped?"
    )
    log.record(FollowPoll(last_committed=42, problem="file not found: commits/43"), 70_000)
    assert "could not read the checkpoint (file not found: commits/43); trying again" in follow_status(
        log, 70_000, clock
    )
    log.record(FollowPoll(last_committed=40, went_back=True), 70_000)
    assert "the commit log went back to batch 40" in follow_status(log, 70_000, clock)
    log.record(FollowPoll(new_batches=(43,), last_committed=43, restarted=True), 70_000)
    assert follow_status(log, 70_000, clock).endswith("batch 43; 1 new batch; the query restarted")


# -- the app follows -------------------------------------------------------------------------------------
@pytest.mark.spark
def test_follow_refreshes_views_and_keeps_what_the_user_picked(
    qtbot, window, growing: GrowingCheckpoint, monkeypatch, raise_errors
) -> None:  # type: ignore[no-untyped-def]
    win = window
    # The browser's rows are paged by DuckDB, 4 a page, as a big store's are.
    monkeypatch.setattr("statelens.viewers.tables.PAGE_ROWS", 4)
    monkeypatch.setattr("statelens.app.gui.controllers.browser.PAGE_ROWS", 4)
    win.browser_controller.paged_rows = 0
    browser = win.browser
    browser.table.setMaximumHeight(140)  # fewer rows than the version holds fit: the browser scrolls
    win.select_view("browser")
    _open(qtbot, win, growing.dest)
    model = browser.query_model
    n = model.rowCount()
    qtbot.waitUntil(lambda: browser.model is model and n > 0 and model.is_loaded(0), timeout=LOAD_TIMEOUT_MS)
    bar = browser.table.verticalScrollBar()
    assert bar.maximum() > 0  # the rows do not all fit: a page further down is read when scrolled to
    bar.setValue(bar.maximum())
    qtbot.waitUntil(lambda: model.is_loaded(n - 1), timeout=LOAD_TIMEOUT_MS)
    browser.table.selectRow(n - 1)
    qtbot.waitUntil(lambda: win.selection.key is not None, timeout=5000)
    scrolled, picked, table = bar.value(), browser.selected_key(), win.browser_controller.state_table()
    before = win.selection.snapshot()

    # The overview's batch table scrolled to its end (it is filled again at every refresh).
    win.select_view("overview")
    batches_table = win.overview.batch_table
    batches_table.setMaximumHeight(90)
    qtbot.waitUntil(lambda: batches_table.verticalScrollBar().maximum() > 0, timeout=5000)
    batches_bar = batches_table.verticalScrollBar()
    batches_bar.setValue(batches_bar.maximum())
    assert batches_bar.value() > 0

    # The timeline zoomed in on its first batches; the growth plot shows all its versions.
    win.select_view("timeline")
    timeline = win.timeline
    t0, t1 = timeline.x_range()
    zoom = (t0, t0 + (t1 - t0) / 3)
    timeline.batch_plot.setXRange(*zoom, padding=0)
    zoom = timeline.x_range()
    win.select_view("growth")
    qtbot.waitUntil(lambda: _versions(win) != [], timeout=LOAD_TIMEOUT_MS)
    versions_before = _versions(win)
    assert versions_before[-1] == FIRST + 1

    win.follow.set_interval(3600)  # the test polls itself
    qtbot.waitUntil(win.settled, timeout=LOAD_TIMEOUT_MS)  # the first poll waits for the views
    with qtbot.waitSignal(win.follow.polled, timeout=LOAD_TIMEOUT_MS) as first:
        win.follow.set_following(True)
    assert first.args[0].new_batches == () and not first.args[0].changed
    # A poll that finds nothing shows no progress bar and leaves the status line as it was.
    assert not win.progress_bar.isVisible() and not win.status_label.text().endswith("…")
    assert "no new batch" in win.follow.label.text()

    # The selected key's history shows in its dock.
    with qtbot.waitSignal(win.history_controller.updated, timeout=LOAD_TIMEOUT_MS):
        win.history_controller.show_key_history()
    history = win.history_controller.history
    assert history is not None and history.key == win.selection.key

    batches_bar.setValue(batches_bar.maximum())  # at its end as laid out now
    assert batches_bar.value() == batches_bar.maximum() > 0
    batch = growing.write_batch()
    poll = _poll(qtbot, win)
    assert poll.new_batches == (batch,) == tuple(growing.committed()[FIRST + 1 :])
    label = win.follow.label.text()
    assert (
        f"batch {batch} started" in label and "1 new batch" in label and label.startswith("Following (every")
    )

    # Every view shows the new batch.
    assert list(timeline.committed_points.getData()[1]) == [float(b) for b in growing.committed()]
    assert win.overview.batch_table.model().rowCount() == len(growing.committed())
    qtbot.waitUntil(lambda: _versions(win)[-1:] == [batch + 1], timeout=LOAD_TIMEOUT_MS)
    assert _versions(win) == [*versions_before, batch + 1]
    assert win.overview_controller.summary is not None
    # The key is followed again, through the new version too.
    qtbot.waitUntil(lambda: win.history_controller.history is not history, timeout=LOAD_TIMEOUT_MS)
    again = win.history_controller.history
    assert again is not None and again.key == history.key
    assert again.versions_read == history.versions_read + 1
    store = win.loaded.checkpoint.operator(before["operator_id"]).store(before["store_name"])
    assert store.versions[-1] == batch + 1
    assert browser.version_combo.itemData(0) == batch + 1  # the picker lists the new version

    # ...and what the user picked stays: selection, key, the browser's rows, page and scroll, the zoom.
    assert win.selection.snapshot() == before
    assert browser.selected_key() == picked
    assert win.browser_controller.state_table() is table
    assert bar.value() == scrolled
    assert batches_bar.value() == batches_bar.maximum() > 0  # still at its end: the new batch in sight
    assert timeline.x_range() == pytest.approx(zoom, rel=0, abs=1e-3)  # seconds since the epoch
    growth_range = win.growth.total_plot.viewRange()[0]
    assert growth_range[1] > batch + 1  # the full-range plot extended to the new version

    # Follow off: no poll starts, the timer is stopped, a batch written now is not shown.
    win.follow.set_following(False)
    assert not win.follow.timer.isActive() and not win.follow.poll_now()
    growing.write_batch()
    assert win.runner.current("follow") is None
    assert win.loaded.checkpoint.last_committed_batch_id == batch
    assert win.follow.label.text() == "Not following"


@pytest.mark.spark
def test_follow_survives_files_vanishing(qtbot, window, growing: GrowingCheckpoint, raise_errors) -> None:  # type: ignore[no-untyped-def]
    win = window
    _open(qtbot, win, growing.dest)
    win.follow.set_interval(3600)
    qtbot.waitUntil(win.settled, timeout=LOAD_TIMEOUT_MS)
    with qtbot.waitSignal(win.follow.polled, timeout=LOAD_TIMEOUT_MS):
        win.follow.set_following(True)

    # Two new batches; the delta of partition 0 the second wrote is gone by the time it is read (cleaned
    # up, or not uploaded yet; no snapshot of that version stands in for it): the views refresh, a
    # verdict names the file; nothing raises.
    growing.write_batch()
    batch = growing.write_batch()
    gone = growing.dest / "state" / "0" / "0" / f"{batch + 1}.delta"
    assert gone.is_file() and not gone.with_suffix(".snapshot").exists()
    gone.unlink()
    poll = _poll(qtbot, win)
    assert poll.new_batches == (batch - 1, batch)
    assert win.loaded.checkpoint.last_committed_batch_id == batch
    verdicts = win.overview_controller.summary.verdicts
    assert any(v.severity == "error" and f"{batch + 1}.delta" in v.text for v in verdicts), verdicts

    # The whole folder gone between two polls: a status line, and the views keep what they showed.
    shutil.rmtree(growing.dest)
    poll = _poll(qtbot, win)
    assert poll.problem and not poll.changed
    assert "could not read the checkpoint" in win.follow.label.text()
    assert win.loaded.checkpoint.last_committed_batch_id == batch
    assert win.follow.following and win.follow.timer.isActive()


# -- the command line --------------------------------------------------------------------------------------
def test_gui_follow_options_reach_the_app(tmp_path: Path) -> None:
    from statelens.app.cli import main

    seen: list = []
    assert (
        main([str(tmp_path), "--follow", "--interval", "2.5"], gui_runner=lambda a: seen.append(a) or 0) == 0
    )
    assert main(["gui", str(tmp_path)], gui_runner=lambda a: seen.append(a) or 0) == 0
    assert [(a.checkpoint, a.follow, a.follow_interval) for a in seen] == [
        (str(tmp_path), True, 2.5),
        (str(tmp_path), False, None),
    ]
    with pytest.raises(SystemExit) as refused:
        main(["gui", str(tmp_path), "--follow", "--interval", "0"], gui_runner=lambda a: 0)
    assert refused.value.code == 2


def test_follow_action_is_a_checkable_toggle_in_the_menu_and_toolbar(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QToolBar

    action = window.follow.action
    assert action.isCheckable() and action.shortcut().toString() == "Ctrl+F5"
    file_menu = window.menuBar().actions()[0].menu()
    assert action in file_menu.actions()
    assert any(action in bar.actions() for bar in window.findChildren(QToolBar))
    action.trigger()  # no checkpoint shown yet: following waits for one
    assert window.follow.following and window.follow.timer.isActive()
    assert window.follow.label.text() == "Following (every 5 s) · waiting for the first poll"
    assert window.runner.current("follow") is None
    action.trigger()
    assert not window.follow.following and not window.follow.timer.isActive()


@pytest.mark.spark
def test_gui_command_follows_from_the_start(
    qtbot, growing: GrowingCheckpoint, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """``statelens gui CKPT --follow --interval S``: the window opens following, polls once the checkpoint
    is shown, and sees a batch committed after it opened."""
    import argparse

    from PySide6.QtCore import QEventLoop, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from statelens.app.gui import main as gui_main
    from statelens.app.gui.window import MainWindow

    monkeypatch.setattr(
        "statelens.app.gui.window.QSettings",
        lambda *_: QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
    )
    seen: dict = {}
    loop = QEventLoop()
    windows: list = []

    def watch() -> None:
        win = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
        if win is None or win.loaded is None:
            return
        seen.setdefault("interval", win.follow.interval_s)
        if "wrote" not in seen and win.follow.log.last is not None:
            seen["first"] = win.follow.log.last
            seen["wrote"] = growing.write_batch()
        elif "wrote" in seen and win.follow.log.last.new_batches and win.settled():
            # (a poll that started before the batch was written finds nothing: the next one finds it)
            seen["found"] = win.follow.log.last
            seen["label"] = win.follow.label.text()
            windows.append(win)
            loop.quit()

    def app_exec(_app: object) -> int:
        # The app's event loop, as run_gui starts it, ended by the test (not by quitting the application
        # the other tests share).
        timer = QTimer()
        timer.timeout.connect(watch)
        timer.start(20)
        guard = QTimer()  # the asserts below say what was missed
        guard.setSingleShot(True)
        guard.timeout.connect(loop.quit)
        guard.start(LOAD_TIMEOUT_MS)
        loop.exec()
        timer.stop()
        guard.stop()
        for win in windows:
            win.close()
            win.deleteLater()
        return 0

    monkeypatch.setattr(QApplication, "exec", app_exec)
    args = argparse.Namespace(checkpoint=str(growing.dest), follow=True, follow_interval=0.2, view="overview")
    assert gui_main.run_gui(args) == 0
    assert seen["interval"] == 0.2
    assert seen["first"].new_batches == ()
    assert "found" in seen, seen
    assert seen["found"].new_batches == (seen["wrote"],) == (FIRST + 1,)
    assert seen["label"].startswith("Following (every 0.2 s)") and "1 new batch" in seen["label"]

"""The app opens on the verdicts, and each view on what matters: on the bundled sample and real
checkpoints (join, transformWithState, RocksDB), the overview's verdicts are those of
``statelens summary`` (which match ``doctor`` and ``expired``, see ``tests/test_summary.py``); their
links open the view that proves them; the expired view opens on the store with findings; the browser on
the biggest store (a join's keyWithIndexToValue side); ``statelens gui --view --store --key`` opens
exactly there."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 refcount guard before any signal is emitted
from statelens.app.analysis._common import run_to_end  # noqa: E402
from statelens.app.analysis.summary import iter_summary  # noqa: E402
from statelens.app.resources import sample_checkpoint_path  # noqa: E402
from statelens.readers.checkpoint import open_checkpoint  # noqa: E402
from tests._gui import open_window  # noqa: E402

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.spark]

LOAD_TIMEOUT_MS = 120_000
SCENARIOS = ["join", "rocks_tws_timers", "rocks_pandas_state", "pandas_state_processing"]


@pytest.fixture
def window(qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STATELENS_RAISE", "1")
    yield from open_window(qtbot, tmp_path)


def _open(qtbot: Any, win: Any, path: Path) -> None:
    with qtbot.waitSignal(win.overview_controller.updated, timeout=LOAD_TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)


def _root(checkpoint: Any, name: str) -> Path:
    return Path(sample_checkpoint_path()) if name == "sample" else checkpoint(name) / "checkpoint"


BADGE = {"error": "ERROR", "warning": "WARNING", "info": "NOTE", "ok": "OK"}


def _assert_shown_whole(overview: Any, label: Any) -> None:
    """The label is as tall as its wrapped text needs, and its last line lies inside the verdicts' box
    (the splitter gives the box the room its rows need)."""
    assert label.height() >= label.heightForWidth(label.width()), label.text()
    bottom = label.mapTo(overview.verdict_box, label.rect().bottomLeft()).y()
    assert bottom <= overview.verdict_box.contentsRect().bottom(), label.text()


@pytest.mark.parametrize("name", ["sample", *SCENARIOS])
def test_the_overview_shows_the_summary_verdicts_first(
    qtbot: Any, window: Any, checkpoint: Any, name: str
) -> None:
    root = _root(checkpoint, name)
    _open(qtbot, window, root)
    assert window.current_view() == "overview"
    want = run_to_end(iter_summary(open_checkpoint(str(root))))
    assert window.overview.verdict_texts() == [(BADGE[v.severity], v.text) for v in want.verdicts]
    for label in window.overview.verdict_labels:
        assert label.isVisible() and label.textFormat() == Qt.TextFormat.PlainText
        # Nothing cut: the label is as tall as its (wrapped) text needs, and inside the verdicts' box.
        _assert_shown_whole(window.overview, label)
    links = [b.text() for b in window.overview.verdict_links]
    assert len(links) == len(want.verdicts) and all(t.endswith("→") for t in links)
    assert "Verdicts: " in window.overview.verdict_box.title()


def test_a_verdict_link_opens_its_view_on_its_store(qtbot: Any, window: Any) -> None:
    _open(qtbot, window, Path(sample_checkpoint_path()))
    texts = [t for _, t in window.overview.verdict_texts()]
    row = next(i for i, t in enumerate(texts) if "zombie" in t)
    with qtbot.waitSignal(window.expired_controller.updated, timeout=LOAD_TIMEOUT_MS, raising=False):
        qtbot.mouseClick(window.overview.verdict_links[row], Qt.MouseButton.LeftButton)
    assert window.current_view() == "expired"
    qtbot.waitUntil(lambda: window.expired.has_expiry(0, "default"), timeout=LOAD_TIMEOUT_MS)
    assert window.expired.shown_store() == (0, "default")
    assert (window.selection.operator_id, window.selection.store_name) == (0, "default")
    # The "restart" verdict's link shows the health checks in the details pane.
    window.select_view("overview")
    row = next(i for i, t in enumerate(texts) if t.startswith("Restart"))
    qtbot.mouseClick(window.overview.verdict_links[row], Qt.MouseButton.LeftButton)
    assert window.overview.details.currentWidget() is window.overview.health_table


def test_a_damaged_copy_is_named_not_called_fine(
    qtbot: Any, window: Any, checkpoint: Any, tmp_path: Path
) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(checkpoint("pandas_state_processing") / "checkpoint", root)
    delta = root / "state/0/1/6.delta"
    delta.write_bytes(delta.read_bytes()[:20])
    _open(qtbot, window, root)
    badge, first = window.overview.verdict_texts()[0]
    assert badge == "ERROR" and "state/0/1/6.delta" in first
    for label in window.overview.verdict_labels:  # the long error wraps: every line of it is shown
        _assert_shown_whole(window.overview, label)
    problems = window.overview.problems_label.text()
    assert "none" not in problems and "could not be read" in problems
    assert "state/0/1/6.delta" in [
        window.overview.problem_model.index(r, 1).data()
        for r in range(window.overview.problem_model.rowCount())
    ]


def test_a_long_verdict_is_shown_whole(qtbot: Any, window: Any, checkpoint: Any, tmp_path: Path) -> None:
    """A RocksDB copy (no changelogs: no auto snapshot repair) whose latest zip is cut short: the restart
    verdict quotes the zip's error and wraps onto a second line, which the overview shows whole (it was
    cut at the verdicts' box's edge)."""
    root = tmp_path / "damaged"
    shutil.copytree(checkpoint("rocks_agg") / "checkpoint", root)
    zips = sorted((root / "state/0/0").glob("*.zip"), key=lambda p: int(p.stem.split("_")[0]))
    zips[-1].write_bytes(zips[-1].read_bytes()[: zips[-1].stat().st_size // 2])
    _open(qtbot, window, root)
    badge, first = window.overview.verdict_texts()[0]
    assert badge == "ERROR" and zips[-1].name in first
    label = window.overview.verdict_labels[0]
    assert label.heightForWidth(label.width()) > label.fontMetrics().height() * 1.5  # it wraps
    for label in window.overview.verdict_labels:
        _assert_shown_whole(window.overview, label)


@pytest.mark.parametrize("name", ["rocks_tws_timers", "join"])
def test_expired_opens_on_the_store_with_findings(
    qtbot: Any, window: Any, checkpoint: Any, name: str
) -> None:
    """transformWithState: the view opens on the state variable with the leaked timer; the join on a
    side that was checked (not on a key-count store that cannot be); the picker lists stores with
    findings first, then the biggest."""
    _open(qtbot, window, checkpoint(name) / "checkpoint")
    window.select_view("expired")
    qtbot.waitUntil(lambda: window.expired_controller.overview is not None, timeout=LOAD_TIMEOUT_MS)
    stores = {(s.operator_id, s.store_name): s for s in window.expired_controller.overview.stores}
    shown = window.expired.shown_store()
    assert stores[shown].total_findings == max(s.total_findings for s in stores.values())
    assert stores[shown].summary.check != "skipped"
    combo = window.expired.store_combo
    first = next(tuple(combo.itemData(i)) for i in range(combo.count()) if combo.itemData(i) is not None)
    assert first == shown
    if name == "rocks_tws_timers":
        assert stores[shown].total_findings > 0 and "zombie: 1" in window.expired.counts_label.text()


def test_the_browser_opens_on_the_join_rows(qtbot: Any, window: Any, checkpoint: Any) -> None:
    _open(qtbot, window, checkpoint("join") / "checkpoint")
    assert window.selection.store_name.endswith("keyWithIndexToValue")
    sizes = window.loaded.store_sizes()
    sides = {k: v for k, v in sizes.items() if k[1].endswith("keyWithIndexToValue")}
    assert sizes[(window.selection.operator_id, window.selection.store_name)] == max(sides.values())
    # The growth picker lists the biggest stores first: the rows sides before their key counts.
    combo = window.growth.store_combo
    listed = [tuple(combo.itemData(i)) for i in range(combo.count()) if combo.itemData(i) is not None]
    assert [sizes[k] for k in listed] == sorted((sizes[k] for k in listed), reverse=True)
    assert listed[0][1].endswith("keyWithIndexToValue")


def _picker(combo: Any) -> list[Any]:
    """A store picker as a user reads it, top to bottom: a group header as its text, a store as its
    ``(operator_id, store_name)``."""
    return [
        tuple(combo.itemData(i)) if combo.itemData(i) is not None else combo.itemText(i)
        for i in range(combo.count())
    ]


def _state_bytes(root: Path, operator_id: int, store_name: str) -> int:
    """Bytes of a store's delta and snapshot files on disk (HDFS-backed stores)."""
    sub = "" if store_name == "default" else store_name
    return sum(
        f.stat().st_size
        for part in (root / "state" / str(operator_id)).iterdir()
        if part.name.isdigit()
        for f in (part / sub).iterdir()
        if f.is_file() and f.suffix in (".delta", ".snapshot")
    )


def _cli_findings(root: Path) -> Counter[tuple[int, str]]:
    """Findings per store as ``statelens expired --json`` (run in a subprocess) lists them."""
    out = subprocess.run(
        [sys.executable, "-m", "statelens.app.launcher", "expired", str(root), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode in (0, 1), out.stderr
    return Counter((f["operator_id"], f["store_name"]) for f in json.loads(out.stdout))


@pytest.mark.parametrize("name", ["sample", "join", "rocks_tws_timers"])
def test_pickers_order_stores_by_what_matters(qtbot: Any, window: Any, checkpoint: Any, name: str) -> None:
    """The browser's picker lists stores by rows, largest first (a join's keyWithIndexToValue sides,
    which hold the rows, before the key counts), and opens on the first; the expired view's lists the
    stores with findings first, most first (as ``statelens expired`` counts them), then the others in
    the browser's order. A transformWithState operator's groups stay whole under their headers."""
    root = _root(checkpoint, name)
    _open(qtbot, window, root)
    window.select_view("expired")
    qtbot.waitUntil(lambda: window.expired_controller.overview is not None, timeout=LOAD_TIMEOUT_MS)
    browser = _picker(window.browser.store_combo)
    expired = _picker(window.expired.store_combo)
    every = [(op.operator_id, s.store_name) for op in open_checkpoint(str(root)).operators for s in op.stores]
    browser_stores = [item for item in browser if isinstance(item, tuple)]
    expired_stores = [item for item in expired if isinstance(item, tuple)]
    assert sorted(browser_stores) == sorted(expired_stores) == sorted(every)
    assert browser_stores[0] == (window.selection.operator_id, window.selection.store_name)

    found = _cli_findings(root)
    assert expired_stores[: len(found)] == sorted(found, key=lambda k: -found[k])
    assert [k for k in expired_stores if k not in found] == [k for k in browser_stores if k not in found]
    if name == "sample":
        assert browser == expired == [(0, "default")] and found[(0, "default")] > 0
    elif name == "join":
        sizes = {k: _state_bytes(root, *k) for k in every}
        rows = sorted((k for k in every if k[1].endswith("keyWithIndexToValue")), key=lambda k: -sizes[k])
        counts = sorted((k for k in every if k[1].endswith("keyToNumValues")), key=lambda k: -sizes[k])
        assert browser == rows + counts  # no headers: a join's stores are not grouped
        assert not found and expired == browser
    else:
        assert list(found) == [(0, "cnt")]  # the leaked timer's state variable
        for picker in (browser, expired):
            variables = picker.index("── operator 0 · transformWithState: state variables ──")
            internal = picker.index("── operator 0 · transformWithState: Spark's internal column families ──")
            assert variables == 0 and picker[1] == (0, "cnt")
            assert sorted(picker[1:internal]) == [(0, n) for n in ("cnt", "ttll", "ttlm", "ttlv")]
            assert all(isinstance(k, tuple) and k[1].startswith("$") for k in picker[internal + 1 :])


def test_gui_opens_at_a_view_store_and_key(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``statelens gui CKPT --view browser --operator 0 --store default --partition 0 --key JSON``."""
    from statelens.app.cli import build_parser
    from statelens.app.gui.main import take_screenshot
    from statelens.app.gui.window import MainWindow

    monkeypatch.setenv("STATELENS_RAISE", "1")
    root = str(sample_checkpoint_path())
    args = build_parser().parse_args(
        [
            "gui",
            root,
            "--view",
            "browser",
            "--operator",
            "0",
            "--store",
            "default",
            "--version",
            "5",
            "--partition",
            "0",
            "--key",
            json.dumps({"key": "leak1"}),
        ]
    )
    win = MainWindow()
    qtbot.addWidget(win)
    win.start_at(
        args.view,
        operator_id=args.operator_id,
        store_name=args.store_name,
        version=args.state_version,
        partition_id=args.partition_id,
        key=args.key,
    )
    assert take_screenshot(win, root, str(tmp_path / "browser.png"), args.view) == 0
    s = win.selection
    assert (s.operator_id, s.store_name, s.version, s.partition_id) == (0, "default", 5, 0)
    assert s.key == [("key", "leak1")]
    assert win.current_view() == "browser"
    assert (tmp_path / "browser.png").stat().st_size > 0


def test_gui_help_lists_the_views(capsys: pytest.CaptureFixture[str]) -> None:
    from statelens.app.analysis.views import VIEWS
    from statelens.app.cli import main

    with pytest.raises(SystemExit):
        main(["gui", "--help"])
    text = capsys.readouterr().out
    for name in VIEWS:
        assert f"  {name} " in text
    for option in ("--operator", "--store", "--version", "--partition", "--key"):
        assert option in text


def test_event_logs_added_later_reach_the_verdicts(qtbot: Any, window: Any) -> None:
    from tests.eventlog_gen import get_event_log

    folder = get_event_log("plain")
    _open(qtbot, window, folder / "checkpoint")
    assert any("no event logs loaded" in t for _, t in window.overview.verdict_texts())
    window.add_event_logs([str(folder / "events")])  # the first verdicts, then all of them again
    qtbot.waitUntil(
        lambda: window.settled() and window.overview_controller.summary is not None, timeout=LOAD_TIMEOUT_MS
    )
    texts = [t for _, t in window.overview.verdict_texts()]
    assert any(t.startswith("Slowest batches: ") for t in texts)
    assert not any("no event logs loaded" in t for t in texts)


def test_growth_and_expired_views_show_the_verdicts_runs(qtbot: Any, window: Any) -> None:
    """Opened on the overview, the state is read once: the growth and expired views show the runs the
    verdicts made, with the same numbers as their own jobs give."""
    from statelens.app.explore import iter_expired_overview

    started: list[str] = []
    window.runner.job_started.connect(lambda channel, _what: started.append(channel))
    root = Path(sample_checkpoint_path())
    _open(qtbot, window, root)
    assert "summary" in started and "growth" not in started and "expired" not in started
    own = run_to_end(iter_expired_overview(open_checkpoint(str(root))))
    shown = window.expired_controller.overview
    assert [(s.operator_id, s.store_name, s.total_findings, s.counts) for s in shown.stores] == [
        (s.operator_id, s.store_name, s.total_findings, s.counts) for s in own.stores
    ]
    assert window.expired.has_expiry(0, "default")
    assert window.growth.has_growth(0, "default") and window.growth_controller.done


def test_verdicts_that_need_no_state_file_are_shown_while_the_state_is_read(
    qtbot: Any, window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the state files are still being read (held here), the overview already shows the commit
    and watermark verdicts, under a line saying what is still checked; then the verdicts of the latest
    versions' files (restart, rows now); then all the verdicts."""
    import threading

    from statelens.app.analysis import summary as summary_module
    from statelens.app.gui.controllers import overview as overview_controller

    releases = {"first": threading.Event(), "full": threading.Event()}
    held: list[str] = []

    def holding(name: str, run: Any) -> Any:
        def held_run(*args: Any, **kwargs: Any) -> Any:
            held.append(name)
            releases[name].wait(LOAD_TIMEOUT_MS / 1000)
            return (yield from run(*args, **kwargs))

        return held_run

    monkeypatch.setattr(
        overview_controller, "iter_first_look", holding("first", summary_module.iter_first_look)
    )
    monkeypatch.setattr(overview_controller, "iter_summary", holding("full", summary_module.iter_summary))
    root = Path(sample_checkpoint_path())
    window.open_checkpoint(str(root))
    qtbot.waitUntil(
        lambda: held == ["first"] and bool(window.overview.verdict_texts()), timeout=LOAD_TIMEOUT_MS
    )
    early = summary_module.early_verdicts(open_checkpoint(str(root)))
    assert window.overview.verdict_texts() == [(BADGE[v.severity], v.text) for v in early]
    assert {v.check for v in early} == {"commit", "watermark"}
    assert window.overview.verdict_status.isVisible()
    assert window.overview.verdict_status.text().startswith("Still checking")
    assert window.overview.verdict_box.title() == "Verdicts so far: 2 fine"
    state_row = window.overview.state_label  # every line of the details shown, not only the first
    assert state_row.height() >= state_row.sizeHint().height() and "\n" in state_row.text()

    with qtbot.waitSignal(window.overview_controller.updated, timeout=LOAD_TIMEOUT_MS):
        releases["first"].set()
    qtbot.waitUntil(lambda: held == ["first", "full"], timeout=LOAD_TIMEOUT_MS)
    first = run_to_end(summary_module.iter_first_look(open_checkpoint(str(root))))
    assert not first.complete
    assert window.overview.verdict_texts() == [(BADGE[v.severity], v.text) for v in first.verdicts]
    assert {v.check for v in first.verdicts} == {"restart", "commit", "growth", "watermark"}
    assert "expired keys" in window.overview.verdict_status.text()
    assert window.overview_controller.summary is None  # the growth and expired views wait for all

    with qtbot.waitSignal(window.overview_controller.updated, timeout=LOAD_TIMEOUT_MS):
        releases["full"].set()
    qtbot.waitUntil(lambda: window.settled(), timeout=LOAD_TIMEOUT_MS)
    want = run_to_end(iter_summary(open_checkpoint(str(root))))
    assert window.overview.verdict_texts() == [(BADGE[v.severity], v.text) for v in want.verdicts]
    assert not window.overview.verdict_status.isVisible() and len(want.verdicts) > len(first.verdicts)


def test_a_restart_only_auto_snapshot_repair_saves_is_a_warning_that_says_so(
    qtbot: Any, window: Any, checkpoint: Any, tmp_path: Path
) -> None:
    """RocksDB with changelogs, its newest zip cut short: Spark 4.1+ falls back to an older zip and
    replays the changelogs after it (the restart matrix shows Spark 4.3 doing it), Spark 3.x and 4.0 fail.
    The overview's restart verdict says which, as the first verdicts and as the full check."""
    root = tmp_path / "damaged"
    shutil.copytree(checkpoint("rocks_agg_changelog") / "checkpoint", root)
    zips = sorted((root / "state/0/0").glob("*.zip"), key=lambda p: int(p.stem.split("_")[0]))
    zips[-1].write_bytes(zips[-1].read_bytes()[: zips[-1].stat().st_size // 2])
    _open(qtbot, window, root)
    texts = dict((text.split(":")[0], badge) for badge, text in window.overview.verdict_texts())
    assert texts["Restart depends on the Spark version"] == "WARNING"
    (restart,) = [t for _, t in window.overview.verdict_texts() if t.startswith("Restart")]
    assert zips[-1].name in restart and "on Spark 3.x and 4.0" in restart
    for label in window.overview.verdict_labels:
        _assert_shown_whole(window.overview, label)

"""The app's fleet view: opening a folder that holds checkpoints shows them in a table, worst first,
filterable and sortable; a double-click opens one in the usual views; a folder without any still says
it is not a checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests._gui import open_window
from tests.spark_checkpoints import get_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.qt_log_ignore("propagateSizeHints")]

TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STATELENS_RAISE", "1")
    yield from open_window(qtbot, tmp_path)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three real checkpoints (one a copy with its newest delta cut short) and a data folder."""
    root = tmp_path / "prod"
    orders = root / "teamA" / "orders"
    shutil.copytree(get_checkpoint("agg_count") / "checkpoint", orders)
    delta = max((orders / "state" / "0" / "0").glob("*.delta"), key=lambda p: int(p.stem))
    delta.write_bytes(delta.read_bytes()[:30])
    (root / "teamB").mkdir()
    (root / "teamB" / "sessions").symlink_to(get_checkpoint("uncommitted") / "checkpoint")
    (root / "teamB" / "leak").symlink_to(get_checkpoint("pandas_state_event") / "checkpoint")
    (root / "data").mkdir()
    for i in range(50):
        (root / "data" / f"part-{i:05d}.json").write_text("{}\n")
    return root


def test_a_folder_of_checkpoints_opens_as_a_table_and_a_row_opens_its_checkpoint(
    qtbot, window, folder, tmp_path
):
    fleet = window.fleet_controller
    with qtbot.waitSignal(fleet.finished, timeout=TIMEOUT_MS) as done:
        window.open_checkpoint(str(folder))
    assert done.args == [3]
    view = fleet.view
    assert view.isVisible()
    assert window.loaded is None
    rows = [view.row_texts(r) for r in range(view.row_count())]
    # worst first: the truncated delta (restart error), the uncommitted batch (warning), then the rest
    assert [(r[0], r[1]) for r in rows] == [
        ("ERROR", "teamA/orders"),
        ("WARNING", "teamB/sessions"),
        ("note", "teamB/leak"),
    ]
    facts = json.loads((get_checkpoint("pandas_state_event") / "expected.json").read_text())
    assert rows[2][3] == str(max(facts["committed_batches"]))  # last batch, as the query recorded it
    assert rows[0][10] == "error"  # restart
    # sortable: by last batch, largest first
    from PySide6.QtCore import Qt

    view.table.sortByColumn(3, Qt.SortOrder.DescendingOrder)
    batches = [int(view.row_texts(r)[3]) for r in range(view.row_count())]
    assert batches == sorted(batches, reverse=True)
    # filterable: any text of a row
    view.filter_edit.setText("leak")
    assert view.row_count() == 1
    assert view.row_texts(0)[1] == "teamB/leak"
    view.grab().save(str(tmp_path / "fleet.png"))
    assert (tmp_path / "fleet.png").stat().st_size > 0
    # a double-click opens that checkpoint in the usual views
    with qtbot.waitSignal(window.checkpoint_loaded, timeout=TIMEOUT_MS) as loaded:
        view.table.doubleClicked.emit(view.proxy.index(0, 1))
    assert loaded.args[0].url == str(folder / "teamB" / "leak")
    assert window.loaded.checkpoint.query_id
    qtbot.waitUntil(lambda: window.runner.idle, timeout=TIMEOUT_MS)


def test_a_folder_without_checkpoints_is_still_not_a_checkpoint(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.delenv("STATELENS_RAISE")
    from statelens.app.gui import errors

    empty = tmp_path / "notes"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "a.txt").write_text("hello")
    with qtbot.waitSignal(window.load_failed, timeout=TIMEOUT_MS) as failed:
        window.open_checkpoint(str(empty))
    assert "not a Structured Streaming checkpoint" in failed.args[0]
    assert not window.fleet_controller.view.isVisible()
    for box in errors.open_dialogs():
        box.close()

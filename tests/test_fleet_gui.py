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
    # worst first: the truncated delta (restart error), then the two warnings, the one holding zombie
    # keys (the expired verdict) before the uncommitted batch
    assert [(r[0], r[1]) for r in rows] == [
        ("ERROR", "teamA/orders"),
        ("WARNING", "teamB/leak"),
        ("WARNING", "teamB/sessions"),
    ]
    facts = json.loads((get_checkpoint("pandas_state_event") / "expected.json").read_text())
    assert rows[1][3] == str(max(facts["committed_batches"]))  # last batch, as the query recorded it
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


def test_the_table_shows_each_checkpoints_trend_and_each_stores_over_its_row(qtbot, tmp_path, monkeypatch):
    from statelens.app.analysis.fleet import fleet
    from statelens.app.gui.controllers.fleet import row_cells
    from statelens.viewers.fleet import COLUMNS, FleetView

    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "prod"
    orders = root / "orders"
    shutil.copytree(get_checkpoint("agg_count") / "checkpoint", orders)
    held = tmp_path / "batch3"
    for f in [orders / "offsets" / "3", orders / "commits" / "3", *orders.glob("state/0/*/4.delta")]:
        (held / f.relative_to(orders)).parent.mkdir(parents=True, exist_ok=True)
        f.rename(held / f.relative_to(orders))
    fleet(str(root))  # the checkpoint after batch 2
    for f in [p for p in held.rglob("*") if p.is_file()]:
        f.rename(orders / f.relative_to(held))
    (row,) = fleet(str(root)).rows  # after batch 3: the trend since the run before
    agg = json.loads((get_checkpoint("agg_count") / "expected.json").read_text())
    # the uncommitted scenario's state including its uncommitted batch is agg_count's after batch 2
    after2 = len(
        json.loads((get_checkpoint("uncommitted") / "expected.json").read_text())[
            "final_state_including_uncommitted"
        ]
    )
    assert row.trend is not None
    view = FleetView()
    qtbot.addWidget(view)
    cells, keys, tip = row_cells(row, row.checked_ms)
    view.add_row(row.severity, cells, keys, str(orders), tip)
    shown = view.row_texts(0)
    assert shown[COLUMNS.index("rows")] == f"{len(agg['final_state']):,}"
    assert shown[COLUMNS.index("trend")] == f"{row.trend['rows_per_day']:+,.0f}/day"
    assert row.trend["rows_per_day"] > 0
    change = len(agg["final_state"]) - after2
    assert f"operator 0 default: {len(agg['final_state']):,} rows, {change:+,} since version 3" in tip

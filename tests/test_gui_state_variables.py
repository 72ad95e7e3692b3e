"""Desktop app on stores that are RocksDB column families: transformWithState state variables (user
variables and Spark's internal ``$...`` families) and joins in state formats 3 and 4.

Real checkpoints written by PySpark (``checkpoint`` fixture): ``rocks_tws_timers`` (TTL'd value, list
and map state, processing-time timers, and a timer handler that leaks key ``s1`` in variable ``cnt``),
``rocks_tws_avro`` and ``rocks_tws_timers_avro`` (Avro-encoded state) and the format 3/4 joins. Waits use ``qtbot.waitSignal`` /
``waitUntil``, never sleeps.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")

from PySide6.QtCore import Qt  # noqa: E402

import statelens.app.gui  # noqa: E402,F401
from statelens.app.analysis._common import key_text  # noqa: E402
from tests._gui import open_window, screenshot_window, widget_texts

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.spark]

REPO = Path(__file__).resolve().parent.parent
LOAD_TIMEOUT_MS = 120_000
TWS_VARIABLES = ["cnt", "ttll", "ttlm", "ttlv"]


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STATELENS_RAISE", "1")
    yield from open_window(qtbot, tmp_path, backend="native")


def _open(qtbot, win, path: Path):  # type: ignore[no-untyped-def]
    """Open a checkpoint and wait for it and every follow-up job (growth, expired, schema, browser)."""
    with qtbot.waitSignal(win.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)
    return win.loaded


def _cli(*args: str) -> str:
    """What this checkout's ``statelens`` prints (in a subprocess)."""
    out = subprocess.run(
        [sys.executable, "-m", "statelens.app.launcher", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def _items(combo) -> list[tuple[Any, str, bool]]:  # type: ignore[no-untyped-def]
    """``(data, text, enabled)`` of every item of a combo box (headers have no data and are disabled)."""
    model = combo.model()
    return [
        (
            combo.itemData(i),
            combo.itemText(i),
            bool(model.flags(model.index(i, 0)) & Qt.ItemFlag.ItemIsEnabled),
        )
        for i in range(combo.count())
    ]


def _pick(combo, key: tuple[int, str]) -> None:  # type: ignore[no-untyped-def]
    """Pick a store in a combo as a user does (current index, then ``activated``)."""
    index = next(i for i in range(combo.count()) if combo.itemData(i) == key)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def _show_store(qtbot, win, key: tuple[int, str]) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(win.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _pick(win.browser.store_combo, key)
    qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)


# -- store pickers -------------------------------------------------------------------------------------
def test_state_variables_are_in_every_store_picker(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    """Each view's picker lists cnt, ttll, ttlm, ttlv with their type and TTL, then the internal families."""
    loaded = _open(qtbot, window, checkpoint("rocks_tws_timers") / "checkpoint")
    names = [s.store_name for s in loaded.checkpoint.operator(0).stores]
    internal = [n for n in names if n.startswith("$")]
    assert internal and "$ttl_ttlv" in internal and "$procTimers_timestampToKey" in internal
    for view in (window.browser, window.growth, window.expired):
        items = _items(view.store_combo)
        stores = [data[1] for data, _text, _enabled in items if data is not None]
        assert stores == TWS_VARIABLES + internal, f"{view}: user variables first, then Spark's families"
        text = {data[1]: t for data, t, _enabled in items if data is not None}
        assert "cnt · ValueState" in text["cnt"] and "TTL" not in text["cnt"]
        assert "ttlv · ValueState · TTL" in text["ttlv"]
        assert "ttll · ListState · TTL" in text["ttll"]
        assert "ttlm · MapState · TTL" in text["ttlm"]
        assert "$ttl_ttlv · internal: TTL index of ttlv" in text["$ttl_ttlv"]
        assert "internal: processing-time timers" in text["$procTimers_timestampToKey"]
        assert all("internal" not in text[n] for n in TWS_VARIABLES)
        # Two group headers, neither of which can be picked, each above its group.
        headers = [(i, t) for i, (data, t, enabled) in enumerate(items) if data is None]
        assert [t for _, t in headers] == [
            "── operator 0 · transformWithState: state variables ──",
            "── operator 0 · transformWithState: Spark's internal column families ──",
        ]
        assert not any(enabled for data, _t, enabled in items if data is None)
        assert headers[0][0] == 0 and items[headers[1][0] + 1][0] == (0, internal[0])
        # What a store holds, as a tooltip.
        i = next(i for i, (data, _t, _e) in enumerate(items) if data == (0, "ttlm"))
        assert "one row per user key" in view.store_combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
    # The schema tree labels them alike, and the overview says what the operator is.
    tree = {key: item.text(0) for key, item in window.schema.store_items().items()}
    assert "ttlm · MapState · TTL" in tree[(0, "ttlm")] and "internal" in tree[(0, "$ttl_ttlm")]
    state = window.overview.state_label.text()
    assert "transformWithState" in state and "4 state variables (cnt, ttll, ttlm, ttlv)" in state
    assert "timeMode ProcessingTime" in state


@pytest.mark.parametrize(
    "name", ["rocks_tws", "rocks_tws_avro", "rocks_tws_checksum", "rocks_join_v3", "rocks_join_v4"]
)
def test_column_family_stores_are_browsable(qtbot, window, checkpoint, name) -> None:  # type: ignore[no-untyped-def]
    """Every column family opens in the browser natively; none says it cannot be decoded."""
    loaded = _open(qtbot, window, checkpoint(name) / "checkpoint")
    ckpt = loaded.checkpoint
    stores = [(op.operator_id, s.store_name) for op in ckpt.operators for s in op.stores]
    assert [(op.operator_id, s.store_name) for op, s in loaded.decodable_stores()] == stores
    shown = [data for data, _t, _e in _items(window.browser.store_combo) if data is not None]
    assert sorted(shown) == sorted(stores)  # listed by rows (tests/test_gui_verdicts.py checks the order)
    for key in stores:
        if window.selection.store_name != key[1]:
            _show_store(qtbot, window, key)
        status = window.browser.status.text()
        assert "cannot" not in status.lower() and "native reader can decode" not in status, status
        assert (
            window.browser_controller.state_table() is not None
            and window.browser_controller.state_table().store_name == key[1]
        )
        assert "read by the native decoder" in status
    if "join" in name:
        labels = [t for data, t, _e in _items(window.browser.store_combo) if data is not None]
        assert any("left: buffered rows" in t for t in labels)


# -- map state in the browser ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "variable"),
    [("rocks_tws_timers", "ttlm"), ("rocks_tws_avro", "mp"), ("rocks_tws_timers_avro", "ttlm")],
)
def test_browser_shows_map_state_with_its_user_key(qtbot, window, checkpoint, name, variable) -> None:  # type: ignore[no-untyped-def]
    """A map state variable: one row per (grouping key, user key), as ``rows --state-var`` prints it."""
    path = checkpoint(name) / "checkpoint"
    _open(qtbot, window, path)
    _show_store(qtbot, window, (0, variable))
    table = window.browser_controller.state_table()
    assert table is not None and table.store_name == variable
    headers = table.headers
    key_cols = [h for h in headers if h.startswith("key.")]
    user_cols = [h for h in headers if h.startswith("user_key.")]
    assert key_cols and user_cols, headers
    assert not any(h.startswith("key.key.") or h.startswith("key.userKey") for h in headers), headers
    want = []
    for line in _cli("rows", str(path), "--operator", "0", "--state-var", variable).splitlines():
        doc = json.loads(line)
        want.append(
            (
                str(doc["partition"]),
                *(str(v) for v in doc["key"].values()),
                *(str(v) for v in doc["user_key"].values()),
            )
        )
    assert want, "the scenario's map state has entries"
    cols = [headers.index(h) for h in ("partition", *key_cols, *user_cols)]
    got = [tuple(table.columns[c][r] for c in cols) for r in range(table.total_rows)]
    assert sorted(got) == sorted(want)
    # Shown in the table as the user sees it, the selected row's detail names the user key.
    window.browser.table.selectRow(0)
    detail = window.browser.detail.toPlainText()
    assert "user_key." in detail
    assert "MapState" in window.browser.status.text()
    if "value.ttlExpirationMs" in headers:  # TTL expirations show as UTC times, sorted by the number
        cell = table.columns[headers.index("value.ttlExpirationMs")][0]
        assert cell.endswith("Z") and cell[:4].isdigit(), cell


# -- the transformWithState zombie -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rocks_tws_timers", "rocks_tws_timers_avro"])
def test_expired_view_lists_the_tws_timer_zombie(qtbot, window, checkpoint, name) -> None:  # type: ignore[no-untyped-def]
    """s1's timer fired and the handler kept its ``cnt`` state: a zombie of variable cnt, in the view."""
    path = checkpoint(name) / "checkpoint"
    with qtbot.waitSignal(window.expired_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _open(qtbot, window, path)
    window.select_view("expired")
    cli = json.loads(_cli("expired", str(path), "--json"))
    assert [(f["store_name"], f["partition"], f["key"], f["category"]) for f in cli] == [
        ("cnt", 1, {"key": "s1"}, "zombie")
    ]
    view = window.expired
    # The picker says which variable has expired keys.
    text = {data[1]: t for data, t, _e in _items(view.store_combo) if data is not None}
    assert "cnt · ValueState" in text["cnt"] and "[zombie: 1]" in text["cnt"]
    assert all("zombie" not in t for n, t in text.items() if n != "cnt")
    _pick(view.store_combo, (0, "cnt"))
    assert view.shown_store() == (0, "cnt")
    rows = [view.row_ref(r) for r in range(view.visible_rows())]
    assert [(pid, key_text(key)) for pid, _v, key in rows] == [(1, "s1")]
    headers = view.model.headers()
    texts = view.model.row_texts(0)
    assert texts[headers.index("category")] == "zombie"
    assert "timer fired" in texts[headers.index("note")]
    assert "zombie: 1" in view.counts_label.text()
    assert [(f.store_name, key_text(f.key)) for f in window.expired_controller.findings()] == [("cnt", "s1")]
    # Clicking it shows the note in full under the table and follows the key into the browser.
    with qtbot.waitSignal(window.history_controller.updated, timeout=LOAD_TIMEOUT_MS):
        index = view.table.model().index(0, 0)
        view.table.scrollTo(index)
        qtbot.mouseClick(
            view.table.viewport(), Qt.MouseButton.LeftButton, pos=view.table.visualRect(index).center()
        )
    assert "timer fired; the handler kept this state" in view.hint.text()
    assert (window.selection.store_name, window.selection.key_partition_id) == ("cnt", 1)
    # A TTL'd variable is not checked (Spark removes expired entries itself): the view says so.
    _pick(view.store_combo, (0, "ttlv"))
    assert "not checked" in view.status.text()
    assert "not checked" in view.counts_label.text() and "nothing expired" not in view.counts_label.text()
    qtbot.waitUntil(
        lambda: window.settled(), timeout=LOAD_TIMEOUT_MS
    )  # the browser and history follow the pick


@pytest.fixture
def tws_shot(qtbot, checkpoint, tmp_path, request, monkeypatch):  # type: ignore[no-untyped-def]
    """The window after ``--screenshot`` of ``request.param`` on rocks_tws_timers (long store labels:
    column families, internal families); the window keeps its size (checked by ``screenshot_window``)."""
    monkeypatch.setenv("STATELENS_RAISE", "1")
    folder = checkpoint("rocks_tws_timers")
    for win in screenshot_window(qtbot, tmp_path, folder / "checkpoint", request.param):
        yield win, json.loads((folder / "expected.json").read_text())


@pytest.mark.parametrize("tws_shot", ["overview"], indirect=True)
def test_screenshot_of_the_overview_lists_the_state_variables(tws_shot) -> None:  # type: ignore[no-untyped-def]
    win, expected = tws_shot
    texts = " ".join(widget_texts(win.overview))
    assert "transformWithState" in texts
    assert len(win.loaded.checkpoint.batches) == len(expected["batches"])


@pytest.mark.parametrize("tws_shot", ["growth"], indirect=True)
def test_screenshot_of_growth_elides_the_long_store_label(tws_shot) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import inside

    win, expected = tws_shot
    view = win.growth
    picked = view.store_combo.currentData()
    assert picked is not None and picked[1] in expected["state_variables"]
    assert view.store_combo.width() < win.width() // 2  # the long label elides instead of widening
    assert view.end_labels()
    assert all(inside(view.partition_plot, lab) for lab in view.top_labels if lab.textItem.toPlainText())
    xs, _ = view.total_curve.getData()
    assert int(xs[-1]) == max(expected["batches"]) + 1


@pytest.mark.parametrize("tws_shot", ["expired"], indirect=True)
def test_screenshot_of_expired_shows_every_column(tws_shot) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import clipped_columns, header_texts

    win, _expected = tws_shot
    view = win.expired
    if view.visible_rows():
        headers = header_texts(view.table)
        assert {"category", "partition", "key", "note"} <= set(headers), headers
        assert clipped_columns(view.table) == []
    else:  # nothing listed: the view says why, in words
        assert view.counts_label.text() and view.status.text()


@pytest.mark.parametrize("tws_shot", ["browser"], indirect=True)
def test_screenshot_of_the_browser_shows_a_state_variable(tws_shot) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import clipped_columns, header_texts

    win, expected = tws_shot
    table = win.browser_controller.state_table()
    assert table is not None and table.store_name in expected["state_variables"]
    headers = header_texts(win.browser.table)
    assert headers[0] == "partition" and any(h.startswith("key.") for h in headers), headers
    assert not [c for c in clipped_columns(win.browser.table) if "header elided" in c]


@pytest.mark.parametrize("tws_shot", ["schema"], indirect=True)
def test_screenshot_of_schema_says_from_which_batch_each_file_holds(tws_shot) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import clipped_columns

    win, expected = tws_shot
    view = win.schema
    model = view.file_table.model()
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    col = headers.index("from batch")
    cells = [model.index(r, col).data() for r in range(model.rowCount())]
    assert cells and all(c for c in cells)  # v3 schema files name the batch that wrote them
    assert {int(c) for c in cells} <= set(expected["batches"])
    assert clipped_columns(view.file_table) == []
    stores = view.store_items()
    assert {name for _op, name in stores} >= set(expected["state_variables"])


# -- heaviest keys -------------------------------------------------------------------------------------
def test_growth_view_lists_the_heaviest_keys_of_the_picked_store(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    """Picking a list state variable in the growth view weighs it in the background: its heaviest grouping
    keys with their element counts, as ``iter_top_keys`` weighs them; a click selects the key's partition."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.analysis.heavy import iter_top_keys
    from statelens.app.gui.controllers.context import TOP_KEYS_SHOWN

    loaded = _open(qtbot, window, checkpoint("rocks_tws_timers") / "checkpoint")
    window.select_view("growth")
    _pick(window.growth.store_combo, (0, "ttll"))
    qtbot.waitUntil(lambda: window.settled() and bool(window.growth.top_key_rows()), timeout=LOAD_TIMEOUT_MS)
    (expected,), problems = run_to_end(iter_top_keys(loaded.checkpoint, TOP_KEYS_SHOWN, only=(0, "ttll")))
    assert problems == [] and expected.overall
    assert window.growth.heavy_model.headers() == ["partition", "bytes", "elements", "key"]
    rows = window.growth.top_key_rows()
    assert [(int(r[0]), int(r[2]), r[3]) for r in rows] == [
        (h.partition_id, h.elements, h.key_text) for h in expected.overall
    ]
    heading = window.growth.heavy_label.text()
    listed = len(expected.overall)
    assert heading.startswith(
        f"All {expected.keys:,} keys of version {expected.version}"
        if listed >= expected.keys
        else f"The {listed:,} heaviest of the {expected.keys:,} keys of version {expected.version}"
    ), heading
    assert "list elements" in window.growth.heavy_label.text()
    last = len(rows) - 1
    window.growth.heavy_table.clicked.emit(window.growth.heavy_model.index(last, 0))
    assert window.selection.partition_id == expected.overall[last].partition_id

"""Desktop app: expired keys, key history, schema and conf, diff, paging, export,
the backend switch and linked selection — driven through the real widgets.

Checkpoints: the bundled sample (``resources/sample_checkpoint``, the ``pandas_state_event`` scenario)
and real ones written by PySpark (``checkpoint`` fixture, marked ``spark``). Waits use
``qtbot.waitSignal``/``waitUntil``, never sleeps.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402

import statelens.app.gui  # noqa: E402,F401
from statelens.app.analysis._common import key_text  # noqa: E402
from tests._gui import open_window, screenshot_window

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

REPO = Path(__file__).resolve().parent.parent
LOAD_TIMEOUT_MS = 60_000


# -- fixtures and helpers ------------------------------------------------------------------------------
@pytest.fixture
def raise_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATELENS_RAISE", "1")


@pytest.fixture
def window(qtbot, tmp_path: Path, raise_errors):  # type: ignore[no-untyped-def]
    yield from open_window(qtbot, tmp_path)


def _open(qtbot, win, path: str | Path):  # type: ignore[no-untyped-def]
    """Open a checkpoint and wait for it and every follow-up job (growth, expired, schema, browser)."""
    with qtbot.waitSignal(win.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(lambda: win.settled(), timeout=LOAD_TIMEOUT_MS)
    return win.loaded


def _sample() -> Path:
    from statelens.app.resources import sample_checkpoint_path

    path = sample_checkpoint_path()
    if not path.is_dir():
        pytest.skip(f"no bundled sample checkpoint at {path}")
    return path


def _cli_expired(path: Path) -> list[dict[str, Any]]:
    """What ``statelens expired --json`` prints (this checkout's code, in a subprocess)."""
    out = subprocess.run(
        [sys.executable, "-m", "statelens.app.launcher", "expired", str(path), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _kt(key: Any) -> str:
    """Key text of an encoded key, from the window (JsonObject) or from parsed CLI JSON (dict)."""
    from statelens.readers.values import JsonObject

    return key_text(JsonObject(key.items()) if isinstance(key, dict) else key)


def _finding_rows(win) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    return sorted(
        (pid, key_text(key))
        for pid, _v, key in (win.expired.row_ref(r) for r in range(win.expired.visible_rows()))
    )


def _click_row(qtbot, table, row: int) -> None:  # type: ignore[no-untyped-def]
    index = table.model().index(row, 0)
    table.scrollTo(index)
    rect = table.visualRect(index)
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


# -- expired keys and key history ----------------------------------------------------------------------
def test_expired_view_lists_the_cli_zombies_of_the_sample(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    path = _sample()
    with qtbot.waitSignal(window.expired_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _open(qtbot, window, path)
    window.select_view("expired")
    cli = _cli_expired(path)
    zombies = sorted((f["partition"], _kt(f["key"])) for f in cli if f["category"] == "zombie")
    assert zombies, "the sample checkpoint has zombie keys"
    assert _finding_rows(window) == sorted((f["partition"], _kt(f["key"])) for f in cli)
    shown = [window.expired.model.index(r, 0).data() for r in range(window.expired.visible_rows())]
    assert sorted(p for p, _ in zombies) == sorted(
        window.expired.row_ref(r)[0] for r in range(window.expired.visible_rows()) if shown[r] == "zombie"
    )
    # Counts: the latest version's bar holds every finding; per partition they add up.
    data = window.expired._data[window.expired.shown_store()]
    assert data["counts"]["zombie"][-1] == len(zombies)
    assert data["partition_counts"]["zombie"].sum() == len(zombies)
    assert "zombie: " + str(len(zombies)) in window.expired.counts_label.text()
    assert "event_time" in window.expired.status.text()


def test_a_partition_that_cannot_be_read_is_marked_not_drawn_as_zero(qtbot, window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A copy of the sample whose partition 0 has its latest delta cut short: the expired view marks
    partition 0 unreadable (and says so) instead of drawing it with no keys; partition 1 keeps its keys."""
    import shutil

    root = tmp_path / "damaged"
    shutil.copytree(_sample(), root)
    latest = max((root / "state" / "0" / "0").glob("*.delta"), key=lambda f: int(f.stem))
    latest.write_bytes(latest.read_bytes()[:10])
    cli = [f for f in _cli_expired(_sample()) if f["partition"] == 1]
    with qtbot.waitSignal(window.expired_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _open(qtbot, window, root)
    window.select_view("expired")
    data = window.expired._data[window.expired.shown_store()]
    assert data["unreadable"] == [0]
    xs, ys = window.expired.unreadable_marks.getData()
    assert list(xs) == [0] and list(ys) == [0]
    assert "partition 0 could not be read" in window.expired.counts_label.text()
    assert window.expired.unreadable_text.textItem.toPlainText() == "unreadable: p0"
    assert sorted(p for p, _ in _finding_rows(window)) == [1] * len(cli) and cli


def test_clicking_a_zombie_opens_its_history_and_selects_it_everywhere(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    loaded = _open(qtbot, window, _sample())
    window.select_view("expired")
    row = next(
        r for r in range(window.expired.visible_rows()) if key_text(window.expired.row_ref(r)[2]) == "leak1"
    )
    pid, version, key = window.expired.row_ref(row)
    with qtbot.waitSignal(window.history_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _click_row(qtbot, window.expired.table, row)
    assert window.history_dock.isVisible()
    history = window.history_controller.history
    assert history is not None and key_text(history.key) == "leak1"
    # leak1 was written by batch 0 and never touched again: in every version of its partition.
    reader = loaded.checkpoint.store_reader(0, "default")
    expected = [
        v for v in reader.versions(pid) if any(key_text(k) == "leak1" for k in _keys_at(reader, pid, v))
    ]
    assert history.versions == expected
    assert history.changes[0] == "added" and set(history.changes[1:]) == {"unchanged"}
    assert window.history.rows() == len(expected)
    assert "present in" in window.history.title.text()
    # The shared selection moved: the browser shows that partition and version with the key selected.
    s = window.selection
    assert (s.partition_id, s.version, s.key, s.key_partition_id) == (pid, version, key, pid)
    qtbot.waitUntil(lambda: window.settled(), timeout=LOAD_TIMEOUT_MS)
    assert window.browser.version_combo.currentData() == version
    assert window.browser.partition_combo.currentData() == pid
    assert window.browser.selected_key() == (pid, key)
    # A history row selects its version in every view.
    window.history.table.setCurrentIndex(window.history.proxy.index(2, 0))
    assert window.selection.version == expected[2]
    assert window.selection.key == key


def _keys_at(reader, pid: int, version: int) -> list[Any]:  # type: ignore[no-untyped-def]
    from statelens.app.analysis._common import row_converter

    convert = row_converter(reader.schema.key_schema)
    return [convert(r.key) for r in reader.read_rows(pid, version)]


@pytest.mark.spark
def test_expired_view_on_generated_pandas_state_checkpoint(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    path = checkpoint("pandas_state_event") / "checkpoint"
    _open(qtbot, window, path)
    cli = _cli_expired(path)
    assert any(f["category"] == "zombie" for f in cli)
    assert _finding_rows(window) == sorted((f["partition"], _kt(f["key"])) for f in cli)
    # The same list the analysis gives without all_versions (what the CLI runs).
    from statelens.app.analysis._common import run_to_end
    from statelens.app.analysis.expired import iter_expired

    streamed: list[Any] = []
    direct = run_to_end(iter_expired(window.loaded.checkpoint, sink=streamed.append))
    assert not direct.truncated()  # a small checkpoint: the view lists every finding
    assert [f.to_json() for f in sorted(streamed, key=_fkey)] == [
        f.to_json() for f in sorted(window.expired_controller.findings(), key=_fkey)
    ]


def _fkey(f: Any) -> tuple[Any, ...]:
    return (f.operator_id, f.store_name, f.partition, f.category, key_text(f.key))


@pytest.mark.spark
def test_key_history_from_the_browser_row(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    loaded = _open(qtbot, window, checkpoint("pandas_state_event") / "checkpoint")
    window.select_view("browser")
    browser = window.browser
    row = next(r for r in range(browser.visible_rows()) if "live1" in browser.model.row_texts(r))
    _click_row(qtbot, browser.table, row)
    assert browser.history_button.isEnabled()
    pid, key = browser.selected_key()
    assert key_text(key) == "live1" and window.selection.key == key
    with qtbot.waitSignal(window.history_controller.updated, timeout=LOAD_TIMEOUT_MS):
        qtbot.mouseClick(browser.history_button, Qt.MouseButton.LeftButton)
    history = window.history_controller.history
    reader = loaded.checkpoint.store_reader(0, "default")
    expected = [
        v for v in reader.versions(pid) if any(key_text(k) == "live1" for k in _keys_at(reader, pid, v))
    ]
    assert history.versions == expected
    # live1 gets an event in every batch: updated, not merely unchanged.
    assert "updated" in history.changes
    # While the history is shown, selecting another key follows it.
    other = next(
        r
        for r in range(browser.visible_rows())
        if "live1" not in browser.model.row_texts(r) and int(browser.model.row_texts(r)[0]) == pid
    )
    with qtbot.waitSignal(window.history_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _click_row(qtbot, browser.table, other)
    assert window.history_controller.history.key == browser.selected_key()[1]


# -- state browser: diff and paging --------------------------------------------------------------------
@pytest.mark.spark
def test_diff_shows_added_changed_removed(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    loaded = _open(qtbot, window, checkpoint("pandas_state_event") / "checkpoint")
    ckpt = loaded.checkpoint
    reader = ckpt.store_reader(0, "default")
    versions = reader.versions()
    old, new = versions[0], versions[-1]
    window.select_view("browser")
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.browser.set_compare_version(old)
    table = window.browser_controller.state_table()
    assert table.is_diff and (table.compare_version, table.version) == (old, new)
    assert window.browser.model.headers()[0] == "change"

    # The oracle: decoded rows of both versions.
    def rows(v: int) -> dict[tuple[int, str], Any]:
        return {
            (r.partition_id, key_text(_json_key(reader, r.key))): r.value
            for p in reader.partition_ids()
            for r in reader.read_rows(p, v)
        }

    a, b = rows(old), rows(new)
    expected = (
        {("added", k) for k in b.keys() - a.keys()}
        | {("removed", k) for k in a.keys() - b.keys()}
        | {("changed", k) for k in a.keys() & b.keys() if a[k] != b[k]}
    )
    got = {(r.change, (r.partition_id, key_text(_json_key(reader, r.key)))) for r in table.records}
    assert got == expected
    assert {c for c, _ in got} >= {"added", "removed"}
    assert f"diff of versions {old} → {new}" in window.browser.status.text()
    # Back to plain rows.
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.browser.set_compare_version(None)
    assert not window.browser_controller.state_table().is_diff
    assert window.browser.visible_rows() == len(b)


def _json_key(reader: Any, key: tuple[Any, ...]) -> Any:
    from statelens.app.analysis._common import row_converter

    return row_converter(reader.schema.key_schema)(key)


def test_table_model_pages_and_sorts_large_tables_in_a_worker(qtbot) -> None:  # type: ignore[no-untyped-def]
    from statelens.viewers.browser import StateBrowserView
    from statelens.viewers.tables import PAGE_ROWS, SYNC_ROWS, row_order

    n = SYNC_ROWS + 7_001
    ids = list(range(n))
    texts = [f"key-{(i * 7919) % n:07d}" for i in ids]
    view = StateBrowserView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    view.set_table(
        ["partition", "key.k"],
        [[str(i % 4) for i in ids], texts],
        [[i % 4 for i in ids], texts],
        texts,
        "big",
        [i % 4 for i in ids],
    )
    model = view.model
    assert model.rowCount() == PAGE_ROWS and model.total_rows() == n
    assert model.canFetchMore()
    model.fetchMore()
    assert model.rowCount() == 2 * PAGE_ROWS
    assert "scroll for more" in view.count_label.text()
    # Large: sorting asks for a worker; the answer is applied as one index array.
    with qtbot.waitSignal(view.order_requested) as blocker:
        view.proxy.sort(1, Qt.SortOrder.DescendingOrder)
    column, descending, needle = blocker.args
    rows = row_order(model.sort_keys(), model.columns(), n, column, descending, needle)
    view.apply_order(column, descending, needle, rows)
    assert model.index(0, 1).data() == max(texts)
    with qtbot.waitSignal(view.order_requested) as blocker:
        view.filter_edit.setText("key-00000")
        view.apply_filter()
    column, descending, needle = blocker.args
    view.apply_order(
        column,
        descending,
        needle,
        row_order(model.sort_keys(), model.columns(), n, column, descending, needle),
    )
    matching = [t for t in texts if "key-00000" in t]
    assert view.visible_rows() == len(matching)
    assert [model.index(r, 1).data() for r in range(model.rowCount())] == sorted(matching, reverse=True)
    # A key chosen elsewhere is found and its page fetched.
    view.filter_edit.clear()
    with qtbot.waitSignal(view.order_requested) as blocker:
        view.apply_filter()
    view.apply_order(*blocker.args, row_order(model.sort_keys(), model.columns(), n, *blocker.args))
    target = texts[n - 3]
    assert view.select_key(target, (n - 3) % 4)
    assert view.selected_key() == ((n - 3) % 4, target)


@pytest.mark.spark
def test_window_sorts_a_large_table_in_the_worker(qtbot, window, checkpoint, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import statelens.viewers.tables as tables

    monkeypatch.setattr(tables, "SYNC_ROWS", 2)
    _open(qtbot, window, checkpoint("agg_count") / "checkpoint")
    browser = window.browser
    total = browser.visible_rows()
    assert total > 2
    value_col = (
        browser.model.headers().index("value.count") if "value.count" in browser.model.headers() else 0
    )
    browser.proxy.sort(value_col, Qt.SortOrder.DescendingOrder)
    qtbot.waitUntil(lambda: browser.model.sort_state() == (value_col, True), timeout=LOAD_TIMEOUT_MS)
    keys = browser.model.sort_keys()[value_col]
    shown = [keys[browser.model.source_row(r)] for r in range(browser.model.rowCount())]
    assert shown == sorted(shown, key=lambda v: (v is not None, v), reverse=True)


# -- export --------------------------------------------------------------------------------------------
def test_export_tables_plots_and_report(qtbot, window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    loaded = _open(qtbot, window, _sample())
    browser_rows = window.browser.visible_rows()
    # State rows, typed like `statelens rows`.
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"rows.{fmt}"
        with qtbot.waitSignal(window.exporter.finished, timeout=LOAD_TIMEOUT_MS):
            window.exporter.export_table(window.browser.table, str(out), fmt)
        assert out.exists() and not Path(str(out) + ".partial").exists()
    with open(tmp_path / "rows.csv", newline="", encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    assert len(records) == browser_rows
    assert {"partition", "key.key", "value.timeoutTimestamp"} <= set(records[0])
    assert {r["key.key"] for r in records} >= {"leak1", "live1"}
    table = pq.read_table(tmp_path / "rows.parquet")
    assert table.num_rows == browser_rows
    assert table.column_names == ["partition", "key", "value"]
    assert {k["key"] for k in table.column("key").to_pylist()} == {r["key.key"] for r in records}
    # The filter is kept: only matching rows are written.
    window.browser.filter_edit.setText("leak")
    window.browser.apply_filter()
    with qtbot.waitSignal(window.exporter.finished, timeout=LOAD_TIMEOUT_MS):
        window.exporter.export_table(window.browser.table, str(tmp_path / "leaks.csv"), "csv")
    with open(tmp_path / "leaks.csv", newline="", encoding="utf-8") as f:
        assert {r["key.key"] for r in csv.DictReader(f)} == {"leak1", "leak2", "leak3", "leak4"}
    # Expired findings: JSON documents.
    for fmt in ("csv", "parquet"):
        with qtbot.waitSignal(window.exporter.finished, timeout=LOAD_TIMEOUT_MS):
            window.exporter.export_table(window.expired.table, str(tmp_path / f"expired.{fmt}"), fmt)
    with open(tmp_path / "expired.csv", newline="", encoding="utf-8") as f:
        found = list(csv.DictReader(f))
    assert sorted(r["key.key"] for r in found) == sorted(
        key_text(f.key) for f in window.expired_controller.findings()
    )
    assert {r["category"] for r in found} == {"zombie"}
    assert pq.read_table(tmp_path / "expired.parquet").num_rows == len(found)
    # Any other table: as shown, numbers as numbers.
    with qtbot.waitSignal(window.exporter.finished, timeout=LOAD_TIMEOUT_MS):
        window.exporter.export_table(
            window.overview.batch_table, str(tmp_path / "batches.parquet"), "parquet"
        )
    batches = pq.read_table(tmp_path / "batches.parquet").to_pylist()
    assert [b["batch"] for b in batches] == [b.batch_id for b in loaded.checkpoint.batches]
    # Plots.
    for view in ("timeline", "growth", "expired"):
        png, svg = tmp_path / f"{view}.png", tmp_path / f"{view}.svg"
        window.select_view(view)
        assert window.exporter.export_plot(view, str(png)) == str(png)
        assert window.exporter.export_plot(view, str(svg)) == str(svg)
        assert QImage(str(png)).width() >= 1000
        assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml")
    # The whole checkpoint as the HTML report.
    report = tmp_path / "report.html"
    with qtbot.waitSignal(window.exporter.finished, timeout=LOAD_TIMEOUT_MS):
        window.exporter.export_report(str(report))
    text = report.read_text(encoding="utf-8")
    assert "<html" in text.lower() and "leak1" in text


def test_export_refuses_to_write_inside_the_checkpoint(qtbot, window, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    src = _sample()
    copy = tmp_path / "ckpt"
    shutil.copytree(src, copy)
    _open(qtbot, window, copy)
    monkeypatch.delenv("STATELENS_RAISE")
    from statelens.app.gui import errors

    assert window.exporter.export_table(window.browser.table, str(copy / "rows.csv"), "csv") is None
    assert not (copy / "rows.csv").exists()
    qtbot.waitUntil(lambda: bool(errors.open_dialogs()), timeout=2000)
    assert "never writes there" in errors.open_dialogs()[-1].text()
    for box in errors.open_dialogs():
        box.close()


# -- schema and conf -----------------------------------------------------------------------------------
def test_schema_view_shows_fields_and_conf_changes(qtbot, window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "ckpt"
    shutil.copytree(_sample(), copy)
    # Batch 3 ran with another shuffle-partition count (as after a conf change and restart).
    offsets = copy / "offsets" / "3"
    lines = offsets.read_text(encoding="utf-8").split("\n")
    meta = json.loads(lines[1])
    meta["conf"]["spark.sql.shuffle.partitions"] = "8"
    lines[1] = json.dumps(meta)
    offsets.write_text("\n".join(lines), encoding="utf-8")
    with qtbot.waitSignal(window.schema_controller.updated, timeout=LOAD_TIMEOUT_MS):
        _open(qtbot, window, copy)
    view = window.schema
    window.select_view("schema")
    top = view.store_items()[(0, "default")]
    texts = _tree_texts(top)
    assert ("key", "struct (1 field)") in texts
    assert ("timeoutTimestamp", "bigint") in texts
    assert ("groupState", "struct (4 fields)") in texts
    # Batches 3 and 4 changed the conf (to 8, then back to 2); highlighted, "before" shown.
    changed = [
        view.batch_model.index(r, 0).data()
        for r in range(view.batch_model.rowCount())
        if view.batch_model.data(view.batch_model.index(r, 0), Qt.ItemDataRole.BackgroundRole) is not None
    ]
    assert changed == ["3", "4"]
    window.timeline.batch_selected.emit(3)
    assert "batch 3" in view.conf_box.title() and "1 key changed" in view.conf_box.title()
    row = next(
        r
        for r in range(view.conf_model.rowCount())
        if view.conf_model.index(r, 0).data() == "spark.sql.shuffle.partitions"
    )
    assert [view.conf_model.index(row, c).data() for c in range(3)] == [
        "spark.sql.shuffle.partitions",
        "8",
        "2",
    ]
    assert view.file_model.rowCount() == 1


def _tree_texts(item: Any) -> list[tuple[str, str]]:
    out = [(item.text(0), item.text(1))]
    for i in range(item.childCount()):
        out.extend(_tree_texts(item.child(i)))
    return out


def test_schema_changes_between_files() -> None:
    from pyspark.sql import types as T

    from statelens.app.explore import schema_changes
    from statelens.readers.model import StoreSchema

    key = T.StructType([T.StructField("user", T.StringType())])
    old = StoreSchema.from_types(
        key,
        T.StructType(
            [
                T.StructField("sum", T.LongType()),
                T.StructField("sum", T.LongType()),
                T.StructField("count", T.LongType()),
            ]
        ),
        3,
        "a",
    )
    new = StoreSchema.from_types(
        key,
        T.StructType(
            [
                T.StructField("sum", T.LongType()),
                T.StructField("sum", T.DoubleType()),
                T.StructField("last", T.StringType()),
            ]
        ),
        3,
        "b",
    )
    assert schema_changes(old, new) == [
        "changed value.sum bigint -> double",
        "added value.last string",
        "removed value.count bigint",
    ]
    assert schema_changes(old, old) == []


@pytest.mark.spark
def test_schema_history_of_a_v3_schema_file(checkpoint) -> None:  # type: ignore[no-untyped-def]
    from statelens.app.explore import read_schema_history
    from statelens.readers.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(checkpoint("rocks_tws") / "checkpoint"))
    versions, problems = read_schema_history(ckpt)
    assert not problems
    assert any("_stateSchema" in v.path and v.from_batch == 0 for v in versions)


# -- backend switch ------------------------------------------------------------------------------------
@pytest.mark.spark
def test_backend_switch_to_spark_reads_the_same_rows(qtbot, window, checkpoint, spark) -> None:  # type: ignore[no-untyped-def]
    _open(qtbot, window, checkpoint("pandas_state_event") / "checkpoint")
    native = window.browser_controller.state_table()
    native_rows = sorted(
        key_text(native.keys[i]) + "|" + "|".join(c[i] for c in native.columns)
        for i in range(len(native.records))
    )
    assert "native decoder" in window.backend_label.text()
    with qtbot.waitSignal(window.browser_controller.updated, timeout=300_000):
        window.set_backend("spark", spark=spark)
    assert window.backends.combo.currentData() == "spark"
    assert window.backends.master_edit.isEnabled()
    table = window.browser_controller.state_table()
    assert table is not None and table.backend.startswith("Spark")
    spark_rows = sorted(
        key_text(table.keys[i]) + "|" + "|".join(c[i] for c in table.columns)
        for i in range(len(table.records))
    )
    assert spark_rows == native_rows
    assert "Spark" in window.backend_label.text()
    assert "read by Spark" in window.browser.status.text()
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.set_backend("native")
    assert window.browser_controller.state_table().backend == "native decoder"
    assert not window.backends.master_edit.isEnabled()


# -- linked selection ----------------------------------------------------------------------------------
@pytest.mark.spark
def test_selection_links_every_view(qtbot, window, checkpoint) -> None:  # type: ignore[no-untyped-def]
    loaded = _open(qtbot, window, checkpoint("pandas_state_event") / "checkpoint")
    ckpt = loaded.checkpoint
    batch = ckpt.batches[2].batch_id
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.schema.batch_table.setCurrentIndex(window.schema.batch_proxy.index(2, 0))
    # batch -> version everywhere
    assert window.selection.batch_id == batch
    assert window.timeline.selected_lines[0].isVisible()
    assert window.growth.version_lines[0].value() == batch + 1
    assert window.expired.version_line.isVisible() and window.expired.version_line.value() == batch + 1
    assert window.browser.version_combo.currentData() == batch + 1
    assert window.overview.batch_table.currentIndex().data() == str(batch)
    # partition: growth click -> browser partition, expired marker
    pid = ckpt.operators[0].stores[0].partitions[-1]
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.growth.partition_selected.emit(pid)
    assert window.browser.partition_combo.currentData() == pid
    assert window.expired.partition_line.isVisible() and window.expired.partition_line.value() == pid
    assert window.growth.selected_curve.xData is not None and len(window.growth.selected_curve.xData)
    # store: picked in the overview's operators table -> every view shows it
    window.overview.operator_table.setCurrentIndex(window.overview.operator_model.index(0, 0))
    assert (window.selection.operator_id, window.selection.store_name) == (0, "default")
    assert window.schema.tree.currentItem() is window.schema.store_items()[(0, "default")]
    assert window.expired.shown_store() == (0, "default")
    # key: picked in the browser -> expired table follows when it lists it
    qtbot.waitUntil(lambda: window.settled(), timeout=LOAD_TIMEOUT_MS)
    zombie = window.expired_controller.findings()[0]
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.selection.update(partition_id=zombie.partition, version=zombie.version)
    assert window.browser.select_key(zombie.key, zombie.partition) is True
    _click_row(qtbot, window.browser.table, window.browser.table.currentIndex().row())
    assert window.selection.key == zombie.key
    current = window.expired.table.currentIndex()
    assert current.isValid() and key_text(window.expired.row_ref(current.row())[2]) == key_text(zombie.key)


# -- screenshots: what the new views draw ---------------------------------------------------------------
def test_screenshot_of_expired_lists_the_zombies_with_every_column(qtbot, tmp_path, raise_errors) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import clipped_columns, header_texts

    for win in screenshot_window(qtbot, tmp_path, _sample(), "expired"):
        view = win.expired
        zombies = [f for f in _cli_expired(_sample()) if f["category"] == "zombie"]
        assert _finding_rows(win) == sorted((f["partition"], _kt(f["key"])) for f in zombies)
        headers = header_texts(view.table)
        assert headers[0] == "category" and headers[-1] == "note", headers
        assert clipped_columns(view.table) == []  # the last column too: nothing past the right edge
        assert sum("UTC" in h for h in headers) == 1  # the zone said once
        assert "zombie: 6" in view.counts_label.text()


def test_screenshot_of_schema_fills_every_column(qtbot, tmp_path, raise_errors) -> None:  # type: ignore[no-untyped-def]
    from tests._gui import clipped_columns

    for win in screenshot_window(qtbot, tmp_path, _sample(), "schema"):
        view = win.schema
        model = view.file_table.model()
        assert model.rowCount() == 1
        row = [model.index(0, c).data() for c in range(model.columnCount())]
        # A format v2 store keeps one schema file for all its versions: written at the first batch.
        assert row[1] == "every batch" and row[2] == "state/0/0/_metadata/schema", row
        assert clipped_columns(view.file_table) == []
        top = view.tree.topLevelItem(0)
        assert top.text(0).endswith("(schema format v2)")
        assert [top.child(i).text(0) for i in range(top.childCount())] == ["key", "value"]


@pytest.mark.spark
@pytest.mark.parametrize("name", ["pandas_state_event", "pandas_state_processing", "rocks_pandas_state"])
def test_expired_counts_over_versions_match_all_versions(checkpoint, name) -> None:  # type: ignore[no-untyped-def]
    """The view counts earlier versions without keeping findings; the counts are all_versions' counts."""
    from collections import Counter

    from statelens.app.analysis._common import run_to_end
    from statelens.app.analysis.expired import iter_expired
    from statelens.app.explore import iter_expired_overview
    from statelens.readers.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(checkpoint(name) / "checkpoint"))
    every: list[Any] = []
    run_to_end(iter_expired(ckpt, all_versions=True, sink=every.append))
    want = Counter((f.operator_id, f.store_name, f.version, f.category) for f in every)
    overview = run_to_end(iter_expired_overview(ckpt))
    got = Counter(
        {
            (st.operator_id, st.store_name, v, c): n
            for st in overview.stores
            for c, per in st.counts.items()
            for v, n in zip(st.versions, per, strict=True)
            if n
        }
    )
    assert got == want
    latest: list[Any] = []
    run_to_end(iter_expired(ckpt, sink=latest.append))
    assert [f.to_json() for f in overview.result.examples] == [f.to_json() for f in latest]
    assert sum(st.total_findings for st in overview.stores) == len(latest)
    # Per partition at the latest version, exact.
    for st in overview.stores:
        per_partition = Counter(
            (f.partition, f.category)
            for f in latest
            if (f.operator_id, f.store_name) == (st.operator_id, st.store_name)
        )
        assert {
            (p, c): n
            for c, per in st.partition_counts.items()
            for p, n in zip(st.partitions, per, strict=True)
            if n
        } == dict(per_partition)


@pytest.mark.spark
def test_expired_overview_caps_the_listed_keys_and_says_so(checkpoint) -> None:  # type: ignore[no-untyped-def]
    """The view lists at most max_examples keys per category (the most overdue), counts stay exact."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.explore import iter_expired_overview
    from statelens.readers.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(checkpoint("pandas_state_event") / "checkpoint"))
    full = run_to_end(iter_expired_overview(ckpt, stale_after=1))
    capped = run_to_end(iter_expired_overview(ckpt, stale_after=1, max_examples=1))
    for a, b in zip(full.stores, capped.stores, strict=True):
        assert (a.versions, a.counts, a.partition_counts, a.total_findings) == (
            b.versions,
            b.counts,
            b.partition_counts,
            b.total_findings,
        )
        assert len(b.examples) == len({f.category for f in a.examples})
        if len(a.examples) > len(b.examples):
            assert "most overdue of" in b.describe()
            assert "most overdue of" not in a.describe()


def test_key_history_follows_removal_and_return() -> None:
    """ok1 times out and is removed, comes back with a new event, and is removed again."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.explore import iter_key_history
    from statelens.readers.backends import native_backend
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.scan import StateScan
    from statelens.readers.values import JsonObject

    ckpt = open_checkpoint(str(_sample()))
    reader = ckpt.store_reader(0, "default")
    key = JsonObject([("key", "ok1")])
    pid = next(
        p
        for p in reader.partition_ids()
        if any(_kt(k) == "ok1" for v in reader.versions(p) for k in _keys_at(reader, p, v))
    )
    present = [v for v in reader.versions(pid) if any(_kt(k) == "ok1" for k in _keys_at(reader, pid, v))]
    times = {b: (e.timestamp_ms, e.watermark_ms) for b, e in ckpt.offsets.items()}
    scan = StateScan(native_backend(ckpt), 0, "default")
    history = run_to_end(iter_key_history(scan, pid, key, ckpt.operator(0).time_columns, times))
    assert history.versions == present
    assert history.changes.count("removed") == 2 and history.changes.count("added") == 2
    removed_at = [v for v, c in zip(history.row_versions, history.changes, strict=True) if c == "removed"]
    assert all(v not in present and v - 1 in present for v in removed_at)
    assert "batch watermark (UTC)" in history.headers
    assert history.headers.index("value.timeoutTimestamp") < history.headers.index("value.groupState.cnt")
    # A key that was never in the partition: an empty history, said so.
    other = 1 - pid if len(reader.partition_ids()) == 2 else pid
    empty = run_to_end(iter_key_history(scan, other, key))
    assert empty.versions == [] and "not found" in empty.describe()


# -- local time or UTC ---------------------------------------------------------------------------------
@pytest.fixture
def paris_time() -> Any:
    """The process in Europe/Paris (UTC+01:00 in winter) for one test; the suite runs in UTC."""
    import time

    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is not available on this platform")
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Paris"
    time.tzset()
    yield
    if previous is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = previous
    time.tzset()


def test_time_format_helper_local_and_utc(paris_time) -> None:  # type: ignore[no-untyped-def]
    from statelens.viewers.timefmt import TimeZoneState, format_ms, offset_text, zone_label

    jan, jul = 1_704_067_200_000, 1_719_792_000_000  # 2024-01-01 and 2024-07-01, 00:00 UTC
    assert format_ms(jan, utc=True) == "2024-01-01 00:00:00.000Z"
    assert format_ms(jan) == "2024-01-01 01:00:00.000"
    assert format_ms(jul) == "2024-07-01 02:00:00.000"  # summer time
    assert format_ms(-1) == "-1 (none)" and format_ms(None) == ""
    assert (
        zone_label(False, jan / 1000) == "local, UTC+01:00"
        and zone_label(False, jul / 1000) == "local, UTC+02:00"
    )
    assert zone_label(True) == "UTC" and offset_text(-19_800) == "UTC-05:30"
    state, seen = TimeZoneState(), []
    state.connect(seen.append)
    state.set_utc(True)
    state.set_utc(True)  # no change, no call
    assert seen == [True] and state.format_ms(jan).endswith("Z") and state.axis_offset_s(jan / 1000) == 0
    state.set_utc(False)
    assert seen == [True, False] and state.axis_offset_s(jan / 1000) == 3600


def test_utc_setting_switches_overview_and_timeline(qtbot, window, paris_time) -> None:  # type: ignore[no-untyped-def]
    from statelens.viewers.timefmt import format_ms

    loaded = _open(qtbot, window, _sample())
    first = min(b.timestamp_ms for b in loaded.checkpoint.batches if b.timestamp_ms is not None)
    model = window.overview.batch_model
    started_col = 1

    def started() -> tuple[str, str]:
        header = model.headerData(started_col, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole)
        return header, model.index(0, started_col).data()

    def bottom_label() -> str:
        return window.timeline.batch_plot.getAxis("bottom").labelText

    # Local time is the default: Paris in the sample's (winter or summer) offset.
    assert not window.time_zone.utc and not window.utc_action.isChecked()
    local_zone = window.time_zone.label(first / 1000)
    assert local_zone.startswith("local, UTC+0")
    assert started() == (f"started ({local_zone})", format_ms(first))
    assert not started()[1].endswith("Z")
    assert bottom_label().startswith(f"batch start time ({local_zone}, ")
    assert window.timeline.batch_plot.getAxis("bottom").utcOffset == -window.time_zone.axis_offset_s(
        first / 1000
    )
    assert f"({local_zone})" in window.timeline.describe(0)
    assert "UTC)" not in " ".join(
        window.expired.model.headerData(c, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole)
        for c in range(window.expired.model.columnCount())
    )

    window.utc_action.trigger()  # View > Show times in UTC
    assert window.time_zone.utc and window.settings.value("times_in_utc") in (True, "true")
    assert started() == ("started (UTC)", format_ms(first, utc=True))
    assert bottom_label().startswith("batch start time (UTC, ")
    assert window.timeline.batch_plot.getAxis("bottom").utcOffset == 0
    assert window.timeline.describe(0).count("Z") >= 1 and "(UTC)" in window.timeline.describe(0)
    headers = [
        window.expired.model.headerData(c, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole)
        for c in range(window.expired.model.columnCount())
    ]
    # The zone is said once, in the first time column.
    assert "timeout / event time (UTC)" in headers and "threshold" in headers
    assert sum("UTC" in h for h in headers) == 1

    window.utc_action.trigger()
    assert started() == (f"started ({local_zone})", format_ms(first))
    assert bottom_label().startswith(f"batch start time ({local_zone}, ")


def test_utc_setting_is_remembered(qtbot, tmp_path, raise_errors) -> None:  # type: ignore[no-untyped-def]
    from statelens.app.gui.window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    first = MainWindow(settings=settings)
    qtbot.addWidget(first)
    first.set_times_in_utc(True)
    settings.sync()
    again = MainWindow(settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    assert again.time_zone.utc and again.utc_action.isChecked()


def test_short_spans_read_as_clock_times(qtbot) -> None:  # type: ignore[no-untyped-def]
    from statelens.viewers import theme

    axis = theme.TimeAxisItem(utc_offset_s=3600)
    t0 = 1_704_067_200.0  # 2024-01-01 00:00:00 UTC, 01:00:00 at UTC+01:00
    assert axis.tickStrings([t0 + 0.5, t0 + 1.0, t0 + 1.5], 1, 0.001) == [
        "01:00:00.5",
        "01:00:01.0",
        "01:00:01.5",
    ]
    assert axis.tickStrings([t0 + 1, t0 + 2], 1, 0.001) == ["01:00:01", "01:00:02"]
    axis.set_utc_offset_s(0)
    assert axis.tickStrings([t0 + 0.25], 1, 0.001) == ["00:00:00.25"]


def test_screenshot_of_the_timeline_in_local_time(qtbot, tmp_path, raise_errors, paris_time) -> None:  # type: ignore[no-untyped-def]
    """Paris time, on the sample whose watermarks cross midnight (2023-12-31 23:59:54 UTC is 2024-01-01
    00:59:54 in Paris): every axis reads in local time and names its days."""
    import numpy as np

    from statelens.viewers.timefmt import format_ms

    for win in screenshot_window(qtbot, tmp_path, _sample(), "timeline"):
        view = win.timeline
        batches = win.loaded.checkpoint.batches
        starts = np.array([b.timestamp_ms / 1000 for b in batches])
        lo, hi = view.x_range()
        assert lo < starts.min() and starts.max() < hi
        bottom = view.gap_plot.getAxis("bottom")
        assert bottom.label.isVisible() and "UTC+01:00" in bottom.labelText
        # The ticks drawn show the local clock time of their instants.
        spacing, values = _drawn_ticks(bottom)
        assert values
        assert bottom.tickStrings(values, 1, spacing) == [format_ms(round(v * 1000))[11:19] for v in values]
        wms = [b.watermark_ms for b in batches if b.watermark_ms]
        days = sorted({format_ms(ms)[:10] for ms in wms})
        label = view.batch_plot.getAxis("right").labelText
        assert days[0] in label and days[-1] in label
        gap = [(b.timestamp_ms - b.watermark_ms) / 1000 for b in batches if b.watermark_ms]
        unit = {"s": 1, "min": 60, "h": 3600, "d": 86400}[view.gap_unit]
        _, ys = view.gap_curve.getData()
        assert list(ys[np.isfinite(ys)] * unit) == pytest.approx(gap, abs=0.002)


def test_watermark_axis_names_both_days_and_its_midnight_tick_the_date(qtbot, tmp_path, raise_errors) -> None:  # type: ignore[no-untyped-def]
    """The sample's watermarks run from 2023-12-31 23:59:54 to 2024-01-01 00:01:30 (UTC): the axis label
    says both days, and the tick at midnight reads as its date, not as 00:00:00 of an unnamed day."""
    for win in screenshot_window(qtbot, tmp_path, _sample(), "timeline"):
        win.utc_action.trigger()
        axis = win.timeline.batch_plot.getAxis("right")
        assert "2023-12-31 to 2024-01-01" in axis.labelText
        midnight = 1_704_067_200.0
        spacing, values = _drawn_ticks(axis)
        texts = dict(zip(values, axis.tickStrings(values, 1, spacing), strict=True))
        assert texts[midnight] == "2024-01-01"
        assert all(len(t) == 8 and t[2] == ":" for v, t in texts.items() if v != midnight), texts


def _drawn_ticks(axis: Any) -> tuple[float, list[float]]:
    """The finest level of ticks an axis draws over its range and length: ``(spacing, values)``."""
    lo, hi = axis.range
    length = axis.geometry().height() if axis.orientation in ("left", "right") else axis.geometry().width()
    levels = [(spacing, list(values)) for spacing, values in axis.tickValues(lo, hi, length) if len(values)]
    return levels[-1]


# -- the view in front gets the cores ---------------------------------------------------------------------
def _record_jobs(window, channel: str) -> tuple[list[tuple[str, str]], list[list[str]]]:  # type: ignore[no-untyped-def]
    """The window's jobs as ``("start" | "end", channel)`` in the order they happen, and the views still
    waiting (``deferred.pending()``) each time a job of ``channel`` ends."""
    events: list[tuple[str, str]] = []
    window.runner.job_started.connect(lambda ch, _what: events.append(("start", ch)))
    window.runner.job_finished.connect(lambda ch: events.append(("end", ch)))
    at_end: list[list[str]] = []
    window.runner.job_finished.connect(lambda ch: ch == channel and at_end.append(window.deferred.pending()))
    return events, at_end


def test_hidden_views_fill_after_the_view_in_front(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Opened on the growth view, only its job starts with the load; the overview's verdicts, the
    browser and SQL wait until nothing else runs, then fill one after another; expired keys come from
    the verdicts' run (no second read), so every view ends up with its data."""
    window.select_view("growth")
    events, at_growth_end = _record_jobs(window, "growth")
    with qtbot.waitSignal(window.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        window.open_checkpoint(str(_sample()))
    qtbot.waitUntil(window.settled, timeout=LOAD_TIMEOUT_MS)
    assert window.deferred.pending() == []
    assert len(at_growth_end) == 1 and at_growth_end[0] == ["overview", "expired", "browser", "sql"]
    # Then one at a time, in the order of the tabs, each after the one before had finished.
    background = [e for e in events if e[1] in ("expired", "browser", "sql")]
    assert background == [(w, ch) for ch in ("browser", "sql") for w in ("start", "end")]
    assert events.index(("end", "growth")) < events.index(("start", "summary"))
    assert events.index(("end", "growth")) < events.index(("start", "browser"))
    assert events.index(("end", "summary")) < events.index(("start", "browser"))
    assert window.overview_controller.summary is not None
    assert (
        window.browser_controller.state_table() is not None
        and window.browser_controller.state_table().total_rows > 0
    )
    assert window.expired_controller.findings(), "the sample's zombies were found in the background"
    assert window.sql.table.model().rowCount() > 0


def test_the_verdicts_wait_for_the_browser_in_front(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Opened on the state browser, its rows are decoded and its first page asked for before the
    overview's verdicts start (they read every state file); the verdicts then run by themselves, and
    the overview shows them and their health checks, and the growth and expired views their runs."""
    window.select_view("browser")
    window.browser_controller.paged_rows = 1  # paged by DuckDB, as big versions are: its first page a job
    events, at_browser_end = _record_jobs(window, "browser")
    with qtbot.waitSignal(window.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        window.open_checkpoint(str(_sample()))
    qtbot.waitUntil(window.settled, timeout=LOAD_TIMEOUT_MS)
    assert at_browser_end and at_browser_end[0][0] == "overview"
    first_page = events.index(("end", "order"))  # the first page's rows, asked for once the rows are in
    assert events.index(("end", "browser")) < first_page < events.index(("start", "summary"))
    assert window.deferred.pending() == []
    assert window.overview_controller.summary is not None and window.overview.verdict_labels
    assert window.growth_controller.done and window.expired_controller.findings()
    assert ("start", "growth") not in events and ("start", "expired") not in events  # the verdicts' runs


def test_showing_a_view_starts_its_waiting_job_and_cancel_holds_the_rest(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    window.select_view("overview")
    # Cancel once the load is over (cancelling the load stops its reads too) and the verdicts run.
    window.runner.job_progressed.connect(
        lambda channel, _p: (
            channel == "summary"
            and window.runner.current("load") is None
            and not window.deferred.paused
            and window.cancel_jobs()
        )
    )
    with qtbot.waitSignal(window.checkpoint_loaded, timeout=LOAD_TIMEOUT_MS):
        window.open_checkpoint(str(_sample()))
    # The first job after the load (the overview's verdicts) was cancelled by the user: the others
    # stay held...
    qtbot.waitUntil(window.settled, timeout=LOAD_TIMEOUT_MS)
    assert window.deferred.pending() == ["growth", "expired", "browser", "sql"]
    assert window.browser_controller.state_table() is None
    assert "cancelled" in window.overview.verdict_status.text() and not window.overview.verdict_labels
    # ...until their view is shown.
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.select_view("browser")
    assert window.deferred.pending() == ["growth", "expired", "sql"]
    assert (
        window.browser_controller.state_table() is not None
        and window.browser_controller.state_table().total_rows > 0
    )


def test_a_spark_connect_endpoint_in_the_spark_field(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """The toolbar's Spark field takes a Connect endpoint too: the browser then reads through it, and an
    endpoint nobody answers says so in the browser and the Problems panel (no dialog)."""
    import socket

    # Spark Connect's client modules (pandas, pyarrow, grpc) imported here on the main thread: imported
    # for the first time on the job's worker thread while other Qt tests' threads wind down, the import
    # crashed the process once (a segmentation fault inside pyspark.sql.conversion's module body).
    import pyspark.sql.connect.session  # noqa: F401

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    window.select_view("browser")
    window.set_backend("spark", master=f"sc://127.0.0.1:{port}", remember=False)
    assert f"sc://127.0.0.1:{port}" in window.backend_label.text()
    with qtbot.waitSignal(window.browser_controller.updated, timeout=LOAD_TIMEOUT_MS):
        window.open_checkpoint(str(_sample()))
    assert window.browser_controller.state_table() is None
    assert f"Spark Connect at sc://127.0.0.1:{port} is unreachable" in window.browser.status.text()
    from pyspark import SparkContext

    assert (
        SparkContext._gateway is None or SparkContext._active_spark_context is not None
    )  # none started here


def test_row_counts_of_millions_read_short_on_the_axis(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Counts of millions tick as ``0.5M``..., so ten-digit labels do not run into the axis title."""
    from statelens.viewers import theme

    axis = theme.IntegerAxisItem(orientation="left")
    assert axis.tickStrings([0, 500_000, 1_000_000, 2_500_000], 1, 500_000) == ["0M", "0.5M", "1M", "2.5M"]
    assert axis.tickStrings([2e9, 4e9], 1, 2e9) == ["2G", "4G"]
    assert axis.tickStrings([0, 20_000, 40_000], 1, 20_000) == ["0", "20,000", "40,000"]


# -- the timeline with event logs ----------------------------------------------------------------------------
@pytest.mark.spark
def test_timeline_with_event_logs_keeps_the_last_batch_and_its_bar_on_the_axis(
    qtbot, tmp_path, raise_errors
) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from tests.eventlog_gen import get_event_log

    folder = get_event_log("restart")
    for win in screenshot_window(
        qtbot, tmp_path, folder / "checkpoint", "timeline", event_logs=[folder / "events"]
    ):
        view = win.timeline
        starts = np.array([b.timestamp_ms / 1000 for b in win.loaded.checkpoint.batches])
        half_bar = float(np.diff(starts).min()) * 0.6 / 2  # duration bars are 60 % of the shortest interval
        lo, hi = view.x_range()
        assert lo <= starts.min() - half_bar and starts.max() + half_bar <= hi
        assert view.notes()["duration"] == view.notes()["rate"] == ""  # every batch reported
        assert not view.gap_plot_shown()  # no watermark in this query: its row is not taken
        assert view.batch_plot.getAxis("right").labelText == "no watermark"
        lowest = view.rate_plot.getAxis("bottom")
        assert lowest.label.isVisible() and not view.batch_plot.getAxis("bottom").label.isVisible()


@pytest.mark.spark
def test_timeline_plots_say_why_the_event_logs_report_no_batch(qtbot, tmp_path, raise_errors) -> None:  # type: ignore[no-untyped-def]
    """Progress records without the query id (a real progress file with its ``id`` fields removed): the
    duration and rate plots say why they are empty, and nothing prints RuntimeWarnings."""
    import warnings

    from tests.eventlog_gen import get_event_log

    folder = get_event_log("plain")
    doc = json.loads((folder / "progress.json").read_text())
    records = [p for run in doc for p in (run if isinstance(run, list) else [run])]
    assert records
    damaged = tmp_path / "progress-without-id.json"
    damaged.write_text("".join(json.dumps({k: v for k, v in p.items() if k != "id"}) + "\n" for p in records))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for win in screenshot_window(
            qtbot, tmp_path, folder / "checkpoint", "timeline", event_logs=[damaged]
        ):
            notes = win.timeline.notes()
            for what in ("duration", "rate"):
                assert f"{len(records)} progress record(s) have no query id" in notes[what], notes
            assert not win.timeline.duration_legend.isVisible()
            win.grab()  # paint every plot once more
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]

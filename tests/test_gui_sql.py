"""The app's SQL tab: the editor's query runs on open, examples answer what ``statelens sql`` answers,
errors are shown in the tab, Ctrl+Enter runs, the answer sorts numbers as numbers."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 refcount guard before any signal is emitted
from statelens.app.analysis.sql import EXAMPLES  # noqa: E402
from statelens.app.cli import main  # noqa: E402
from tests._gui import open_window  # noqa: E402

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STATELENS_RAISE", "1")
    yield from open_window(qtbot, tmp_path)


def _open(qtbot: Any, win: Any, path: Path) -> None:
    with qtbot.waitSignal(win.sql_controller.updated, timeout=TIMEOUT_MS):
        win.open_checkpoint(str(path))
    qtbot.waitUntil(lambda: win.settled(), timeout=TIMEOUT_MS)


def _run(qtbot: Any, win: Any, query: str) -> None:
    win.sql.set_query(query)
    with qtbot.waitSignal(win.sql_controller.updated, timeout=TIMEOUT_MS):
        win.sql.request_run()


def _cli(capsys: pytest.CaptureFixture[str], root: Path, query: str, *extra: str) -> list[dict[str, Any]]:
    assert main(["sql", str(root), "--json", *extra, query]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_examples_answer_as_the_command_line(
    qtbot: Any, window: Any, checkpoint: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoint("pandas_state_event") / "checkpoint"
    _open(qtbot, window, root)
    batches = _cli(capsys, root, "SELECT batch_id FROM batches")
    assert window.sql.rows() == len(batches) > 0  # the first example ran on open
    assert window.sql.model.headers()[0] == "batch_id"
    op, store = window.sql.store()
    for title, query in EXAMPLES:
        _run(qtbot, window, query)
        assert "failed" not in window.sql.status.text(), (title, window.sql.status.text())
        want = _cli(capsys, root, query, "--operator", str(op), "--store", store)
        assert window.sql.rows() == len(want), title
        assert f"{len(want):,} row" in window.sql.status.text()
        shown = [window.sql.model.row_texts(r)[0] for r in range(window.sql.rows())]
        assert shown == [_text(list(row.values())[0]) for row in want], title


def _text(v: Any) -> str:
    """A JSON answer's value as the tab shows it (NULL empty, text bare, the rest as JSON)."""
    return "" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def test_errors_stay_in_the_tab_and_ctrl_enter_runs(qtbot: Any, window: Any) -> None:
    from statelens.app.resources import sample_checkpoint_path

    _open(qtbot, window, sample_checkpoint_path())
    shown = window.sql.rows()
    _run(qtbot, window, "SELEC nonsense FROM batches")
    assert "the query failed" in window.sql.status.text() and "syntax" in window.sql.status.text().lower()
    assert window.sql.rows() == shown and window.sql.run_button.isEnabled()
    _run(qtbot, window, "SELECT 1")
    assert "uses none of the tables" in window.sql.status.text()
    window.sql.set_query("SELECT batch_id, interval_ms FROM batches ORDER BY batch_id DESC")
    window.show()
    window.select_view("sql")
    window.sql.editor.setFocus()
    with qtbot.waitSignal(window.sql_controller.updated, timeout=TIMEOUT_MS):
        qtbot.keyClick(window.sql.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.sql.model.row_texts(0)[0] == "6"
    # numbers sort as numbers (10 after 9), whatever the text
    window.sql.table.sortByColumn(1, Qt.SortOrder.AscendingOrder)
    qtbot.waitUntil(lambda: window.settled(), timeout=TIMEOUT_MS)
    texts = [window.sql.proxy.index(r, 1).data() for r in range(window.sql.proxy.rowCount())]
    numbers = [float(t) for t in texts if t]
    assert numbers == sorted(numbers)


@pytest.mark.spark
def test_in_spark_runs_the_query_in_spark_with_the_same_answer(
    qtbot: Any, window: Any, checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "In Spark" runs the editor's query as Spark SQL on the toolbar's Spark (here the test run's session),
    even with the native backend picked for the browser; the answer is the command line's (DuckDB)."""
    root = checkpoint("agg_many_partitions") / "checkpoint"
    window.set_backend("native", spark=spark, remember=False)
    _open(qtbot, window, root)
    query = "SELECT partition_id, count(*) AS n FROM state GROUP BY partition_id ORDER BY partition_id"
    want = _cli(capsys, root, query, "--backend", "native")
    window.sql.spark_check.setChecked(True)
    _run(qtbot, window, query)
    assert "failed" not in window.sql.status.text(), window.sql.status.text()
    shown = [window.sql.model.row_texts(r)[:2] for r in range(window.sql.rows())]
    assert shown == [[str(r["partition_id"]), str(r["n"])] for r in want] and want
    assert window.backends.chooser is not None and "spark" in window.backends.chooser.used  # Spark answered
    _run(qtbot, window, "SELECT nope FROM state")
    assert "the query failed" in window.sql.status.text() and "nope" in window.sql.status.text()


@pytest.mark.spark
def test_spark_writes_the_browsers_version_where_it_runs(
    qtbot: Any, window: Any, checkpoint: Any, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """File > Write version with Spark: Spark writes the browser's store version as Parquet part files
    (nothing collected to the app); the rows equal ``statelens rows --format parquet``'s."""
    import pyarrow.parquet as pq

    root = checkpoint("agg_many_partitions") / "checkpoint"
    window.set_backend("native", spark=spark, remember=False)
    _open(qtbot, window, root)
    window.show()
    window.select_view("browser")
    qtbot.waitUntil(lambda: window.browser_controller.state_table() is not None, timeout=TIMEOUT_MS)
    table = window.browser_controller.state_table()
    window.exporter.update_actions()
    assert window.exporter.spark_parquet_action.isEnabled()
    out = tmp_path / "spark-out"
    with qtbot.waitSignal(window.exporter.finished, timeout=TIMEOUT_MS):
        window.exporter.write_version_with_spark(str(out))
    assert list(out.glob("part-*.parquet")), "Spark wrote part files"
    assert "written by Spark" in window.status_label.text()
    native = tmp_path / "native.parquet"
    args = ["rows", str(root), "--operator", "0", "--version", str(table.version)]
    if table.partition_id is not None:
        args += ["--partition", str(table.partition_id)]
    assert main([*args, "--format", "parquet", "-o", str(native), "--backend", "native"]) == 0
    key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
    want = sorted(map(key, pq.read_table(native).to_pylist()))
    assert sorted(map(key, pq.read_table(out).to_pylist())) == want and want


def test_the_tables_and_their_columns_are_listed_beside_the_editor(
    qtbot: Any, window: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.app.resources import sample_checkpoint_path

    root = sample_checkpoint_path()
    _open(qtbot, window, root)
    qtbot.waitUntil(lambda: bool(window.sql.tables()), timeout=TIMEOUT_MS)
    listed = window.sql.tables()
    assert list(listed) == ["batches", "growth", "state", "changes", "expired"]
    for table, columns in listed.items():
        described = _cli(capsys, root, f"DESCRIBE {table}")
        assert columns == [(r["column_name"], r["column_type"]) for r in described], table
    # SHOW TABLES runs in the tab too; a double-click on a column writes its name into the query.
    _run(qtbot, window, "SHOW TABLES")
    assert window.sql.rows() == 5 and "failed" not in window.sql.status.text()
    window.sql.set_query("SELECT  FROM batches")
    cursor = window.sql.editor.textCursor()
    cursor.setPosition(len("SELECT "))
    window.sql.editor.setTextCursor(cursor)
    batches = window.sql.tables_tree.topLevelItem(0)
    window.sql.tables_tree.itemDoubleClicked.emit(batches.child(0), 0)
    assert window.sql.query() == "SELECT batch_id FROM batches"

"""Query progress from real Spark event logs (zstd rolling, lz4, plain, a restart with two run ids), a real
driver log and progress JSON lines, on the timeline: every figure equals the progress objects the query
itself reported; damaged logs give located warnings and the rest still shows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from tests.eventlog_gen import get_event_log

pytestmark = pytest.mark.spark


def _timeline(capsys: pytest.CaptureFixture[str], ckpt: Path, *logs: Path, code: int = 0) -> dict[str, Any]:
    args = ["timeline", str(ckpt), "--json"]
    for log in logs:
        args += ["--event-log", str(log)]
    assert main(args) == code
    return json.loads(capsys.readouterr().out)


def _reported(folder: Path) -> dict[int, dict[str, Any]]:
    """Batch -> the progress object the query reported for it (the last run that ran it)."""
    out: dict[int, dict[str, Any]] = {}
    for run in json.loads((folder / "progress.json").read_text()):
        for p in run:
            out[p["batchId"]] = p
    return out


def _same_rate(ours: float | None, theirs: float | None) -> bool:
    """``query.recentProgress`` JSON rounds rates to one decimal; the logs keep full precision."""
    if theirs is None or ours is None:
        return ours == theirs
    return abs(ours - theirs) <= 0.05 + 1e-9 * abs(theirs)


def _check(batches: list[dict[str, Any]], reported: dict[int, dict[str, Any]]) -> None:
    by_id = {b["batch_id"]: b["progress"] for b in batches}
    assert set(reported) <= set(by_id)
    for batch_id, p in reported.items():
        got = by_id[batch_id]
        assert got is not None, batch_id
        assert got["run_id"] == p["runId"] and got["timestamp"] == p["timestamp"]
        assert got["duration_ms"] == p["durationMs"]
        assert got["num_input_rows"] == p["numInputRows"] > 0
        assert _same_rate(got["input_rows_per_second"], p["inputRowsPerSecond"])
        assert _same_rate(got["processed_rows_per_second"], p["processedRowsPerSecond"])
        assert got["sink_num_output_rows"] == p["sink"]["numOutputRows"]
        assert len(got["state_operators"]) == len(p["stateOperators"]) == 1
        for ours, theirs in zip(got["state_operators"], p["stateOperators"], strict=True):
            assert ours["operator_name"] == theirs["operatorName"] == "stateStoreSave"
            assert ours["num_rows_total"] == theirs["numRowsTotal"]
            assert ours["num_rows_updated"] == theirs["numRowsUpdated"]
            assert ours["num_rows_removed"] == theirs["numRowsRemoved"]
            assert ours["num_rows_dropped_by_watermark"] == theirs["numRowsDroppedByWatermark"]
            assert ours["memory_used_bytes"] == theirs["memoryUsedBytes"]
            assert ours["custom_metrics"] == theirs["customMetrics"] and ours["custom_metrics"]


@pytest.mark.parametrize("variant", ["zstd_rolling", "lz4", "lzf", "snappy", "plain"])
def test_event_logs_give_every_figure_the_query_reported(
    variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = get_event_log(variant)
    doc = _timeline(capsys, folder / "checkpoint", folder / "events")
    _check(doc["batches"], _reported(folder))
    logs = doc["event_logs"]
    assert len(logs["runs"]) == 1 and logs["runs"][0]["terminated"] and not logs["warnings"]
    assert logs["batches_with_progress"] == [b["batch_id"] for b in doc["batches"]]
    suffix = {"zstd_rolling": ".zstd", "lz4": ".lz4", "lzf": ".lzf", "snappy": ".snappy", "plain": ""}[
        variant
    ]
    assert all(f.endswith(suffix) for f in logs["files"]) and len(logs["files"]) == 1


def test_a_driver_log_and_progress_json_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = get_event_log("lz4")
    assert "Streaming query made progress" in (folder / "driver.log").read_text()
    _check(_timeline(capsys, folder / "checkpoint", folder / "driver.log")["batches"], _reported(folder))
    lines = tmp_path / "progress.jsonl"  # what a job that logs query.lastProgress after each batch keeps
    lines.write_text(
        "\n".join(json.dumps(p) for run in json.loads((folder / "progress.json").read_text()) for p in run)
        + "\n"
    )
    _check(_timeline(capsys, folder / "checkpoint", lines)["batches"], _reported(folder))


def test_a_restart_is_a_second_run(capsys: pytest.CaptureFixture[str]) -> None:
    folder = get_event_log("restart")
    doc = _timeline(capsys, folder / "checkpoint", folder / "events")
    reported = _reported(folder)
    _check(doc["batches"], reported)
    runs = doc["event_logs"]["runs"]
    assert len(runs) == 2 and len({r["run_id"] for r in runs}) == 2 and len(doc["event_logs"]["files"]) == 2
    first, second = json.loads((folder / "progress.json").read_text())
    assert {b["batch_id"]: b["progress"]["run_id"] for b in doc["batches"]} == {
        **{p["batchId"]: p["runId"] for p in first},
        **{p["batchId"]: p["runId"] for p in second},
    }
    assert main(["timeline", str(folder / "checkpoint"), "--event-log", str(folder / "events")]) == 0
    text = capsys.readouterr().out
    assert "duration" in text and "input rows" in text and "2 run(s) of this query" in text


def test_damaged_logs_warn_where_and_keep_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = get_event_log("plain")
    (log,) = [p for p in (folder / "events").iterdir() if not p.name.startswith(".")]
    lines = log.read_text().splitlines()
    progress_lines = [i for i, line in enumerate(lines) if "QueryProgressEvent" in line]
    damaged = list(lines)
    damaged[progress_lines[0]] = damaged[progress_lines[0]][: len(damaged[progress_lines[0]]) // 2]  # cut
    bad = tmp_path / "events.log"
    bad.write_text("\n".join(damaged) + "\n")
    doc = _timeline(capsys, folder / "checkpoint", bad, code=1)
    (warning,) = doc["event_logs"]["warnings"]
    assert warning["path"] == str(bad) and warning["line"] == progress_lines[0] + 1
    first = _reported(folder)
    got = {b["batch_id"]: b["progress"] for b in doc["batches"]}
    assert got[0] is None and all(got[b] is not None for b in first if b != 0)
    _check([b for b in doc["batches"] if b["batch_id"] != 0], {b: p for b, p in first.items() if b != 0})
    # a compressed log cut short: what was read still shows, the cut is named
    zlog = next((get_event_log("zstd_rolling") / "events").rglob("events_1_*"))
    cut = tmp_path / "eventlog_v2_local-cut" / zlog.name
    cut.parent.mkdir()
    cut.write_bytes(zlog.read_bytes()[: zlog.stat().st_size * 2 // 3])
    zfolder = get_event_log("zstd_rolling")
    doc = _timeline(capsys, zfolder / "checkpoint", cut.parent, code=1)
    assert any(w["path"] == str(cut) and "ends early" in w["message"] for w in doc["event_logs"]["warnings"])


def test_logs_of_another_query_are_named_not_mixed_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ours, theirs = get_event_log("plain"), get_event_log("zstd_rolling")
    doc = _timeline(capsys, ours / "checkpoint", theirs / "events", code=1)
    assert all(b["progress"] is None for b in doc["batches"])
    assert list(doc["event_logs"]["other_queries"].values()) == [len(_reported(theirs))]
    assert any("other queries" in p["message"] for p in doc["problems"])
    missing = tmp_path / "nope"
    assert main(["timeline", str(ours / "checkpoint"), "--event-log", str(missing)]) == 2
    assert f"{missing}: event log not found" in capsys.readouterr().err


def test_the_checkpoint_and_logs_are_not_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.test_analysis_doctor import _tree_hash

    folder = get_event_log("restart")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    before = _tree_hash(copy)
    _timeline(capsys, copy / "checkpoint", copy / "events")
    assert _tree_hash(copy) == before


# -- doctor --event-log -----------------------------------------------------------------------------------
def _doctor(capsys: pytest.CaptureFixture[str], ckpt: Path, log: Path, code: int) -> dict[str, Any]:
    assert main(["doctor", str(ckpt), "--json", "--event-log", str(log)]) == code
    return json.loads(capsys.readouterr().out)


def test_doctor_agrees_with_the_logs_of_its_own_query(capsys: pytest.CaptureFixture[str]) -> None:
    folder = get_event_log("restart")
    doc = _doctor(capsys, folder / "checkpoint", folder / "events", 0)
    assert any("event logs' progress" in c for c in doc["checked"]) and doc["findings"] == []


def test_doctor_names_logs_of_another_query(capsys: pytest.CaptureFixture[str]) -> None:
    ours, theirs = get_event_log("plain"), get_event_log("zstd_rolling")
    doc = _doctor(capsys, ours / "checkpoint", theirs / "events", 1)
    (f,) = doc["findings"]
    assert f["check"] == "event_log_other_query" and "nothing to compare" in f["message"]


def test_doctor_sees_a_copy_older_than_the_logs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The checkpoint copied before the last batch ran: the logs report a batch it does not have."""
    folder = get_event_log("plain")
    copy = tmp_path / "ckpt"
    shutil.copytree(folder / "checkpoint", copy)
    last = max(int(p.name) for p in (copy / "commits").iterdir() if p.name.isdigit())
    for p in [
        copy / "offsets" / str(last),
        copy / "commits" / str(last),
        *(copy / "state").rglob(f"{last + 1}.*"),
    ]:
        p.unlink()
    doc = _doctor(capsys, copy, folder / "events", 1)
    (f,) = [f for f in doc["findings"] if f["check"] == "event_log_beyond_checkpoint"]
    assert (
        f["severity"] == "warning"
        and f"batches {last} after this checkpoint's last batch ({last - 1})" in f["message"]
    )


def test_doctor_compares_state_rows_with_num_rows_total(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A log whose numRowsTotal for a batch says otherwise than the state files (the log damaged on purpose)."""
    folder = get_event_log("plain")
    (log,) = [p for p in (folder / "events").iterdir() if not p.name.startswith(".")]
    lines = log.read_text().splitlines()
    i = max(n for n, line in enumerate(lines) if "QueryProgressEvent" in line)
    event = json.loads(lines[i])
    batch = event["progress"]["batchId"]
    rows = event["progress"]["stateOperators"][0]["numRowsTotal"]
    event["progress"]["stateOperators"][0]["numRowsTotal"] = rows + 7
    lines[i] = json.dumps(event)
    edited = tmp_path / "events.log"
    edited.write_text("\n".join(lines) + "\n")
    doc = _doctor(capsys, folder / "checkpoint", edited, 1)
    (f,) = [f for f in doc["findings"] if f["check"] == "progress_rows_disagree"]
    assert f["batch_id"] == batch and f"reported {rows + 7:,} state rows" in f["message"]
    assert f"version {batch + 1} hold {rows:,}" in f["message"]


@pytest.fixture
def window(qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    pytest.importorskip("PySide6")
    import statelens.app.gui  # noqa: F401 - the PySide6 refcount guard
    from tests._gui import open_window

    monkeypatch.setenv("STATELENS_RAISE", "1")
    yield from open_window(qtbot, tmp_path)


@pytest.mark.qt_log_ignore("propagateSizeHints")
def test_the_app_shows_durations_and_rates_on_the_timeline(qtbot: Any, window: Any) -> None:
    folder = get_event_log("restart")
    reported = _reported(folder)
    last = reported[max(reported)]
    rolling_file = next(
        (folder / "events").rglob("events_1_*")
    )  # a file of a rolling log stands for its folder
    second = next(p for p in (folder / "events").iterdir() if p.name != rolling_file.parent.name)
    window.add_event_logs([str(rolling_file), str(second)])
    assert window.event_logs == [str(rolling_file.parent), str(second)]
    with qtbot.waitSignal(window.timeline_controller.updated, timeout=120_000):
        window.open_checkpoint(str(folder / "checkpoint"))
    qtbot.waitUntil(lambda: window.settled(), timeout=120_000)
    view = window.timeline
    assert view.duration_plot is not None and view.rate_plot is not None
    i = int(list(view._ids).index(max(reported)))
    shown = sum(float(v[i]) for v in view._progress.values())
    assert abs(shown - last["durationMs"]["triggerExecution"] / 1000) < 1e-6  # the parts add up to the whole
    text = view.describe(i)
    assert "took" in text and "rows/s in" in text and f"run {last['runId'][:8]}" in text
    first, second = json.loads((folder / "progress.json").read_text())
    assert [int(view._ids[k]) for k in view.restarts] == [second[0]["batchId"]]  # the restart is marked
    assert (
        "Event logs: progress for 5 batches of this query in 2 run(s)"
        in window.timeline_controller.progress_summary
    )
    # another checkpoint without event logs: the reported figures go
    window.event_logs.clear()
    with qtbot.waitSignal(window.checkpoint_loaded, timeout=120_000):
        window.open_checkpoint(str(get_event_log("plain") / "checkpoint"))
    assert view.duration_plot is None


def test_the_report_shows_what_the_query_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = get_event_log("restart")
    out = tmp_path / "report.html"
    assert (
        main(["report", str(folder / "checkpoint"), "--event-log", str(folder / "events"), "-o", str(out)])
        == 0
    )
    html = out.read_text()
    assert (
        "What the query reported (event logs)" in html
        and "5 of 5 batches covered by 2 file(s), 2 run(s)" in html
    )
    assert "Batch duration by part" in html and "Input and processed rows per second" in html
    for p in _reported(folder).values():
        assert f"<td>{p['runId'][:8]}</td>" in html
        assert f"{p['processedRowsPerSecond']:.1f}" in html

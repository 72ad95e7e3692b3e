"""Runs and before/after on a live query restarted with its leak fixed (``tests/live_query.py``).

The query leaks for a few batches (every row a new key; the timeout fires and the function does
nothing), is stopped, and is restarted on the same checkpoints with ``state.remove()`` on timeout. The
restart's first batch is the first the query reported under its new run id; rows per batch come from the
``numRowsTotal`` it reported; expired keys per version from Spark's ``statestore`` source
(``tests/oracle.py``) and the batch timestamps of ``offsets/<b>`` (the format: a processing-time timeout
fires in batch ``b`` when ``timeoutTimestamp < batchTimestampMs(b)``).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis import runs as runs_mod
from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.growth import iter_growth
from statelens.app.analysis.timeline import iter_timeline
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import UsageError
from tests.live_query import LiveQuery
from tests.oracle import read_state

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.live,
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

LEAK_UNTIL = 4  # the leaking run stops after this batch...
FIXED_UNTIL = 8  # ...the fixed run after this one


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> LiveQuery:
    """Both queries: leaking until batch LEAK_UNTIL, then restarted fixed until FIXED_UNTIL."""
    live = LiveQuery(tmp_path_factory.mktemp("live"))
    live.start(until_batch=LEAK_UNTIL)
    assert live.wait() == 0, live.log()[-3000:]
    _pause_like_a_restart(live)
    live.start(fixed=True, until_batch=FIXED_UNTIL)
    assert live.wait() == 0, live.log()[-3000:]
    return live


def _pause_like_a_restart(live: LiveQuery) -> None:
    """Wait as long as a fix and a redeploy take at the least: until the restart is a gap the checkpoint
    alone shows (docs/format.md §2.7: more than ``GAP_FACTOR`` median intervals and ``GAP_MIN_MS``).

    A new JVM alone is not enough on a busy machine, where each batch of the first run is slower too; the
    wait is three times the rule's bound over the first run's own intervals, so that the fixed run's
    intervals, which join the median, may be slower still."""
    deadline_ms = 0.0
    for name in live.queries:
        ckpt_dir = live.checkpoint(name)
        batches = sorted(int(p.name) for p in (ckpt_dir / "offsets").iterdir() if p.name.isdigit())
        stamps = [_batch_ts(ckpt_dir, b) for b in batches]
        median = statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))
        bound = 3 * max(runs_mod.GAP_FACTOR * median, runs_mod.GAP_MIN_MS + median)
        deadline_ms = max(deadline_ms, stamps[-1] + bound)
    time.sleep(max(0.0, deadline_ms / 1000 - time.time()))


def _reported(live: LiveQuery, name: str) -> dict[int, dict[str, Any]]:
    """Batch id -> the last progress the query reported for it."""
    return {p["batchId"]: p for p in live.progress(name)}


def _fix_batch(live: LiveQuery, name: str) -> int:
    """The first batch the query reported under the second start's run id."""
    second = live.runs(name)[1]
    return min(p["batchId"] for p in live.progress(name) if p["runId"] == second)


def _batch_ts(ckpt_dir: Path, batch: int) -> int:
    """``batchTimestampMs`` of ``offsets/<batch>`` (line 2 of the file, docs/format.md §2.2)."""
    return int(json.loads((ckpt_dir / "offsets" / str(batch)).read_text().split("\n")[1])["batchTimestampMs"])


def _iso_ms(text: str) -> int:
    """Milliseconds of a progress report's ``timestamp`` (``2026-11-28T16:41:26.811Z``)."""
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _rate(series: dict[int, int], first: int, last: int) -> float:
    return (series[last] - series[first]) / (last - first)


def _analyses(ckpt: Any) -> tuple[Any, Any, Counter[tuple[int, str, int, str]], dict[tuple[int, str], Any]]:
    counts: Counter[tuple[int, str, int, str]] = Counter()
    expired = run_to_end(iter_expired(ckpt, version_counts=counts))
    growth = run_to_end(iter_growth(ckpt))
    versions = {(op.operator_id, st.store_name): st.versions for op in ckpt.operators for st in op.stores}
    return expired, growth, counts, versions


@pytest.mark.parametrize("name", ["agg", "leak"])
def test_find_runs_finds_the_restart(restarted: LiveQuery, name: str) -> None:
    ckpt_dir = restarted.checkpoint(name)
    first, second = restarted.runs(name)
    fix = _fix_batch(restarted, name)
    assert 0 < fix <= LEAK_UNTIL + 1
    # The last run ends with the last batch it planned (a stop may leave it uncommitted).
    planned = max(int(p.name) for p in (ckpt_dir / "offsets").iterdir() if p.name.isdigit())
    assert planned >= FIXED_UNTIL
    ckpt = open_checkpoint(str(ckpt_dir))
    # From the run ids of the progress the query reported.
    with_logs = run_to_end(iter_timeline(ckpt, [str(restarted.progress_path(name))]))
    runs = runs_mod.find_runs(ckpt, with_logs)
    assert [(r.first_batch, r.last_batch, r.run_id, r.evidence) for r in runs] == [
        (0, fix - 1, first, "first batch"),
        (fix, planned, second, "run id"),
    ]
    # From the checkpoint alone: the gap the restart left in the batch timestamps, at the first batch
    # the new run planned (a batch it re-ran keeps the stopped run's timestamp in its offsets file).
    started = _iso_ms(_reported(restarted, name)[fix]["timestamp"])
    planned_first = min(b for b in range(fix, planned + 1) if _batch_ts(ckpt_dir, b) >= started)
    assert planned_first in (fix, fix + 1)
    runs = runs_mod.find_runs(ckpt, run_to_end(iter_timeline(ckpt)))
    assert [(r.first_batch, r.evidence) for r in runs] == [(0, "first batch"), (planned_first, "gap")]
    assert runs[1].gap_ms == _batch_ts(ckpt_dir, planned_first) - _batch_ts(ckpt_dir, planned_first - 1)
    assert runs_mod.fix_batch_of(runs) == planned_first
    assert runs_mod.fix_margin(runs, planned_first) == 1
    # The user's choice adds a run where the evidence has none.
    chosen = runs_mod.find_runs(ckpt, fix_batch=2)
    assert [(r.first_batch, r.evidence) for r in chosen] == [
        (0, "first batch"),
        (2, "chosen"),
        (planned_first, "gap"),
    ]
    assert runs_mod.fix_margin(chosen, 2) == 0
    assert runs_mod.fix_batch_of(chosen, 2) == 2
    with pytest.raises(UsageError, match="batch 99 is not in the checkpoint"):
        runs_mod.find_runs(ckpt, fix_batch=99)


@pytest.fixture(scope="module")
def leak_zombies(restarted: LiveQuery, spark: Any) -> dict[int, int]:
    """Version -> keys of the leak's state whose timeout fired, from Spark's statestore source: at
    version ``b + 1`` the keys with ``0 <= timeoutTimestamp < batchTimestampMs(b)``; every version's
    row count is checked against the ``numRowsTotal`` the query reported."""
    ckpt_dir = restarted.checkpoint("leak")
    reported = _reported(restarted, "leak")
    zombies = {}
    for b in range(max(reported) + 1):
        threshold = _batch_ts(ckpt_dir, b)
        state = read_state(spark, ckpt_dir, batch_id=b)
        assert len(state) == reported[b]["stateOperators"][0]["numRowsTotal"]
        zombies[b + 1] = sum(1 for _pid, _key, (_s, timeout) in state if 0 <= timeout < threshold)
    return zombies


def test_before_after_zombies_stop(restarted: LiveQuery, leak_zombies: dict[int, int]) -> None:
    ckpt_dir = restarted.checkpoint("leak")
    fix = _fix_batch(restarted, "leak")
    reported = _reported(restarted, "leak")
    last = max(reported)
    # Rows at version b + 1 are what batch b reported.
    rows = {b + 1: p["stateOperators"][0]["numRowsTotal"] for b, p in reported.items()}
    zombies = leak_zombies
    assert zombies[fix] > zombies[1]  # it leaked...
    assert all(zombies[v] == 0 for v in range(fix + 1, last + 2))  # ...and the fix removed them all

    ckpt = open_checkpoint(str(ckpt_dir))
    expired, growth, counts, versions = _analyses(ckpt)
    (store,) = runs_mod.before_after(fix, growth, expired, counts, versions)
    assert (store.operator_id, store.store_name) == (0, "default")
    assert store.expired is not None and store.rows is not None
    assert store.expired.before.to_json() == {
        "first_version": 1,
        "last_version": fix,
        "first": zombies[1],
        "last": zombies[fix],
        "per_batch": _rate(zombies, 1, fix),
    }
    assert store.expired.after.to_json() == {
        "first_version": fix + 1,
        "last_version": last + 1,
        "first": 0,
        "last": 0,
        "per_batch": 0.0,
    }
    assert store.expired.at_fix == -zombies[fix]
    assert store.expired.stopped is True
    assert store.rows.before.per_batch == _rate(rows, 1, fix)
    assert store.rows.after.per_batch == _rate(rows, fix + 1, last + 1)
    assert store.rows.at_fix == rows[fix + 1] - rows[fix]
    # The series the rates come from, version by version.
    assert runs_mod.expired_per_version(expired, counts, versions)[(0, "default")] == zombies


def test_before_after_of_the_aggregation(restarted: LiveQuery) -> None:
    fix = _fix_batch(restarted, "agg")
    reported = _reported(restarted, "agg")
    last = max(reported)
    rows = {b + 1: p["stateOperators"][0]["numRowsTotal"] for b, p in reported.items()}
    ckpt = open_checkpoint(str(restarted.checkpoint("agg")))
    expired, growth, counts, versions = _analyses(ckpt)
    (store,) = runs_mod.before_after(fix, growth, expired, counts, versions)
    assert store.expired is None  # an aggregation without a watermark: nothing expires
    assert store.rows is not None
    assert (store.rows.before.first, store.rows.before.last) == (rows[1], rows[fix])
    assert (store.rows.after.first, store.rows.after.last) == (rows[fix + 1], rows[last + 1])
    assert store.rows.after.per_batch == _rate(rows, fix + 1, last + 1)


def test_summary_before_after(
    restarted: LiveQuery, leak_zombies: dict[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.app.launcher import main

    ckpt_dir = restarted.checkpoint("leak")
    fix = _fix_batch(restarted, "leak")
    reported = _reported(restarted, "leak")
    rows = {b + 1: p["stateOperators"][0]["numRowsTotal"] for b, p in reported.items()}
    events = str(restarted.progress_path("leak"))
    main(["summary", str(ckpt_dir), "--quick", "--json", "--event-log", events])
    doc = json.loads(capsys.readouterr().out)
    assert doc["fix_batch"] == fix
    assert [(r["first_batch"], r["run_id"]) for r in doc["runs"]] == [
        (0, restarted.runs("leak")[0]),
        (fix, restarted.runs("leak")[1]),
    ]
    (store,) = doc["before_after"]
    assert store["rows"]["before"]["per_batch"] == _rate(rows, 1, fix)
    assert store["expired"]["after"]["per_batch"] == 0.0
    assert store["expired"]["stopped"] is True
    (fix_verdict,) = [v for v in doc["verdicts"] if v["check"] == "fix"]
    assert (fix_verdict["severity"], fix_verdict["batch_id"], fix_verdict["view"]) == ("ok", fix, "expired")

    main(["summary", str(ckpt_dir), "--quick", "--event-log", events])
    text = capsys.readouterr().out
    assert f"2 runs: batches 0–{fix - 1} (run {restarted.runs('leak')[0][:8]}), batches {fix}–" in text
    line = next(ln for ln in text.splitlines() if f"before/after batch {fix}: expired keys" in ln)
    assert line.startswith("ok ")
    assert f"expired keys {_rate(leak_zombies, 1, fix):+,.1f} per batch before, 0 after" in line
    assert f"stopped; rows {_rate(rows, 1, fix):+,.1f} per batch before" in line

    # Without the progress: the runs from the batch timestamps; before ends a version earlier, where
    # the state is surely the leaking run's, whether or not the new run re-ran a batch.
    main(["summary", str(ckpt_dir), "--quick", "--json"])
    doc = json.loads(capsys.readouterr().out)
    gap_fix = doc["fix_batch"]
    assert gap_fix in (fix, fix + 1)
    (store,) = doc["before_after"]
    assert store["expired"]["before"]["last_version"] == gap_fix - 1
    assert store["expired"]["before"]["per_batch"] == _rate(leak_zombies, 1, gap_fix - 1)
    assert store["rows"]["before"]["per_batch"] == _rate(rows, 1, gap_fix - 1)
    assert store["expired"]["after"]["per_batch"] == 0.0
    assert store["expired"]["stopped"] is True

    # A chosen fix batch, and one the checkpoint does not have.
    main(["summary", str(ckpt_dir), "--quick", "--json", "--fix-batch", "2"])
    assert json.loads(capsys.readouterr().out)["fix_batch"] == 2
    assert main(["summary", str(ckpt_dir), "--quick", "--fix-batch", "99"]) == 2
    assert "batch 99 is not in the checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["agg", "leak"])
def test_growth_rows_are_what_the_query_reported(restarted: LiveQuery, name: str) -> None:
    """Rows of every version, both runs, equal the numRowsTotal the query reported for the batch that
    wrote it (the last report of a batch a restart re-ran)."""
    reported = _reported(restarted, name)
    ckpt = open_checkpoint(str(restarted.checkpoint(name)))
    (store,) = run_to_end(iter_growth(ckpt)).stores
    rows = dict(zip(store.versions, store.total_rows(), strict=True))
    expected = {b + 1: p["stateOperators"][0]["numRowsTotal"] for b, p in reported.items()}
    assert len(expected) > FIXED_UNTIL
    assert {v: rows[v] for v in expected} == expected


@pytest.mark.parametrize("view", ["expired", "growth"])
def test_views_mark_the_fix(
    restarted: LiveQuery, leak_zombies: dict[int, int], view: str, qtbot: Any, tmp_path: Path
) -> None:
    """The app's screenshot of either view marks the fix (found from the batch times: no event log)
    and gives the store's rate before and after it, as Spark's state and the query's progress say."""
    from tests._gui import screenshot_window

    ckpt_dir = restarted.checkpoint("leak")
    reported = _reported(restarted, "leak")
    rows = {b + 1: p["stateOperators"][0]["numRowsTotal"] for b, p in reported.items()}
    last = max(reported) + 1
    ckpt = open_checkpoint(str(ckpt_dir))
    gap_fix = runs_mod.find_runs(ckpt)[-1].first_batch
    series = leak_zombies if view == "expired" else rows
    what = "expired keys" if view == "expired" else "rows"
    before = _rate(series, 1, gap_fix - 1)
    after = _rate(series, gap_fix + 1, last)
    for win in screenshot_window(qtbot, tmp_path, ckpt_dir, view):
        marker = win.views[view].fix
        assert [line.value() for line in marker.lines] == [gap_fix + 0.5] * len(marker.lines)
        assert all(line.isVisible() for line in marker.lines)
        assert marker.lines[0].label.textItem.toPlainText() == f"fix: batch {gap_fix}"
        title, store_line = marker.label.text().split("\n")
        assert title.startswith(f"Fix at batch {gap_fix} (state version {gap_fix + 1} on): run 2 of 2")
        assert store_line == (
            f"Before and after the fix: {what} {before:+,.1f} per batch before, "
            + ("0" if after == 0 else f"{after:+,.1f}")
            + f" after ({series[gap_fix + 1] - series[gap_fix - 1]:+,} at the fix)"
        )
        # The user's choice: batch 2 (the leak still running on both sides).
        marker.chooser.setValue(2)
        assert [line.value() for line in marker.lines] == [2.5] * len(marker.lines)
        title, store_line = marker.label.text().split("\n")
        assert title == "Fix at batch 2 (state version 3 on): chosen"
        assert store_line.startswith(
            f"Before and after the fix: {what} {_rate(series, 1, 2):+,.1f} per batch before, "
            f"{_rate(series, 3, last):+,.1f} after"
        )
        marker.chooser.setValue(-1)  # back to the last restart
        assert marker.label.text().startswith(f"Fix at batch {gap_fix} ")
    assert leak_zombies[last] == 0


def test_views_take_the_run_ids_of_the_event_logs(restarted: LiveQuery, qtbot: Any, tmp_path: Path) -> None:
    """With the query's progress as event log, the views' fix is the first batch of the second run id."""
    from tests._gui import screenshot_window

    fix = _fix_batch(restarted, "leak")
    second = restarted.runs("leak")[1]
    events = [restarted.progress_path("leak")]
    for win in screenshot_window(qtbot, tmp_path, restarted.checkpoint("leak"), "growth", event_logs=events):
        marker = win.views["growth"].fix
        assert [line.value() for line in marker.lines] == [fix + 0.5] * 2
        title = marker.label.text().split("\n")[0]
        assert (
            title
            == f"Fix at batch {fix} (state version {fix + 1} on): run 2 of 2 started there (run id {second[:8]})"
        )

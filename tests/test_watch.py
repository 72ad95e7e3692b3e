"""``statelens watch`` over real checkpoints grown batch by batch.

A copy of a cached checkpoint is "grown": the files of batches ``0..k`` are copied, the watcher polls,
then batch ``k + 1``'s files are copied in the order Spark writes them (offsets, state files, commit)
with a poll after each step. Every batch must be reported exactly once, in order, when its commit is
there; rows and zombies are what the writing query recorded: the pandas scenarios' state function
reports every call (``expected.json``'s ``key_history``), from which the keys alive and the zombies after
each batch follow (zombies as in ``tests/test_analysis_expired.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis.watch import Watcher
from statelens.app.cli import main
from tests.test_analysis_expired import _expected_zombies

#: ``<version>.delta|snapshot|changelog|zip`` or ``<version>_<uuid>.zip|changelog``.
_STATE_FILE = re.compile(r"^(\d+)(?:_[0-9a-f-]+)?\.(delta|snapshot|changelog|zip)$")


def file_batch(rel: str) -> int | None:
    """The batch that wrote a checkpoint file (a log file's own id, a state file's version - 1), or None
    for files every batch shares (metadata, schemas, SSTs, sources)."""
    parts = rel.split("/")
    if parts[0] in ("offsets", "commits") and parts[-1].isdigit():
        return int(parts[-1])
    m = _STATE_FILE.match(parts[-1])
    if parts[0] == "state" and m and "_metadata" not in parts:
        return int(m.group(1)) - 1
    return None


def copy_files(src: Path, dst: Path, keep: Callable[[str], bool]) -> list[str]:
    copied = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        if p.is_file() and keep(rel) and not (dst / rel).exists():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / rel)
            copied.append(rel)
    return copied


def grow_to(src: Path, dst: Path, k: int) -> None:
    """Copy every file of batches ``0..k`` (and the files all batches share)."""

    def keep(rel: str) -> bool:
        b = file_batch(rel)
        return b is None or b <= k

    copy_files(src, dst, keep)


def batch_steps(src: Path, dst: Path, b: int) -> list[Callable[[], list[str]]]:
    """Batch ``b``'s files in Spark's order: offsets, then state files, then the commit."""
    return [
        lambda: copy_files(src, dst, lambda rel: rel == f"offsets/{b}"),
        lambda: copy_files(src, dst, lambda rel: rel.startswith("state/") and file_batch(rel) == b),
        lambda: copy_files(src, dst, lambda rel: rel == f"commits/{b}"),
    ]


def expected_rows(expected: dict[str, Any], batch_id: int) -> int:
    """Keys in the state after batch ``batch_id``: called at least once, last call not a remove."""
    alive = 0
    for calls in expected["key_history"].values():
        done = [c for c in calls if c["batch"] <= batch_id]
        if done and done[-1]["action"] != "remove":
            alive += 1
    return alive


def check_batch(batch: Any, expected: dict[str, Any], before: Any) -> None:
    b = batch.batch_id
    (store,) = batch.stores
    assert store.rows == expected_rows(expected, b), b
    assert store.zombies == len(_expected_zombies(expected, b + 1)), b
    fired = [k for k, at in _expected_zombies(expected, b + 1).items() if at == b]
    assert store.zombies_new == len(fired), b
    assert batch.watermark_ms == expected["batch_watermark_ms"][str(b)]
    if before is not None:
        assert store.rows_delta == store.rows - before.stores[0].rows


SCENARIOS = ["pandas_state_event", "pandas_state_processing", "rocks_pandas_state"]


# start 0: the first poll sees one batch, whose timeouts cannot tell event from processing time yet
@pytest.mark.parametrize("start", [0, 1])
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.spark
def test_every_batch_reported_once_in_order_as_the_query_recorded(
    checkpoint: Callable[[str], Path], tmp_path: Path, scenario: str, start: int
) -> None:
    folder = checkpoint(scenario)
    expected = json.loads((folder / "expected.json").read_text())
    src, dst = folder / "checkpoint", tmp_path / "ckpt"
    last = max(expected["committed_batches"])
    grow_to(src, dst, start)
    watcher = Watcher(str(dst), from_batch=0)
    seen = list(watcher.poll().batches)
    assert [b.batch_id for b in seen] == list(range(start + 1))
    for b in range(start + 1, last + 1):
        for n, step in enumerate(batch_steps(src, dst, b)):
            assert step(), f"batch {b} step {n} copied nothing"
            poll = watcher.poll()
            if n < 2:
                assert poll.batches == [], f"batch {b} reported before its commit"
            else:
                assert [x.batch_id for x in poll.batches] == [b]
                assert not poll.waiting
            seen.extend(poll.batches)
    assert [b.batch_id for b in seen] == list(range(last + 1))
    for i, batch in enumerate(seen):
        check_batch(batch, expected, seen[i - 1] if i else None)
        # The commit time is when the commit file was written (the copy is written when copied).
        assert batch.commit_time_ms == (dst / "commits" / str(batch.batch_id)).stat().st_mtime_ns // 1_000_000
        assert not [f for f in batch.findings if f.severity == "error"]
    # The last batch holds what the query's state holds at the end.
    assert seen[-1].stores[0].rows == len(expected["expected_state"])
    assert watcher.poll().batches == []


@pytest.mark.spark
def test_default_start_is_the_last_commit_with_the_whole_history_folded(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    dst = tmp_path / "ckpt"
    grow_to(folder / "checkpoint", dst, 3)
    watcher = Watcher(str(dst))
    (batch,) = watcher.poll().batches
    assert batch.batch_id == 3
    # update_no_timeout keys are zombies only to a fold that saw them fire: the history was read.
    assert batch.stores[0].zombies == len(_expected_zombies(expected, 4))
    assert batch.stores[0].rows_delta is None


@pytest.mark.spark
def test_stopped_after_polls_without_a_batch(checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    folder = checkpoint("pandas_state_event")
    dst = tmp_path / "ckpt"
    grow_to(folder / "checkpoint", dst, 2)
    watcher = Watcher(str(dst), stop_after=2)
    assert not watcher.poll().stopped  # batch 2 reported
    assert not watcher.poll().stopped
    poll = watcher.poll()
    assert poll.stopped
    assert "stopped" in poll.status
    for step in batch_steps(folder / "checkpoint", dst, 3):
        step()
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [3]
    assert not poll.stopped


@pytest.mark.spark
def test_versions_cleaned_up_before_they_were_read_are_gone(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    # What cleanup leaves of a RocksDB store: the zip of version 4 and the changelogs after it.
    folder = checkpoint("rocks_pandas_state")
    expected = json.loads((folder / "expected.json").read_text())
    dst = tmp_path / "ckpt"
    shutil.copytree(folder / "checkpoint", dst)
    removed = 0
    for p in (dst / "state").rglob("*"):
        m = _STATE_FILE.match(p.name)
        if m and int(m.group(1)) < 4:
            p.unlink()
            removed += 1
        elif m and int(m.group(1)) == 4 and m.group(2) == "changelog":
            p.unlink()  # version 4 now loads from its zip only
    assert removed
    watcher = Watcher(str(dst), from_batch=0)
    poll = watcher.poll()
    last = max(expected["committed_batches"])
    assert [b.batch_id for b in poll.batches] == list(range(last + 1))
    assert [b.batch_id for b in poll.batches if b.gone] == [0, 1, 2]
    assert all(s.rows is None for b in poll.batches[:3] for s in b.stores)
    for batch in poll.batches[3:]:
        assert batch.stores[0].rows == expected_rows(expected, batch.batch_id)
        assert not [f for f in batch.findings if f.severity == "error"]


@pytest.mark.spark
def test_cli_jsonl_until_batch(
    checkpoint: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = checkpoint("pandas_state_processing")
    expected = json.loads((folder / "expected.json").read_text())
    dst = tmp_path / "ckpt"
    grow_to(folder / "checkpoint", dst, 5)
    rc = main(["watch", str(dst), "--jsonl", "--from-batch", "0", "--until-batch", "4", "--interval", "0"])
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["batch_id"] for d in docs] == [0, 1, 2, 3, 4]
    for d in docs:
        (store,) = d["stores"]
        assert set(store) >= {"operator_id", "store_name", "rows", "rows_delta", "zombies"}
        assert store["rows"] == expected_rows(expected, d["batch_id"])
        assert store["zombies"] == len(_expected_zombies(expected, d["batch_id"] + 1))
        assert d["watermark_ms"] == expected["batch_watermark_ms"][str(d["batch_id"])]
    # Zombies are warnings, as the doctor's exit code has them.
    assert rc == 1


@pytest.mark.spark
def test_cli_ctrl_c_stops_cleanly(
    checkpoint: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = checkpoint("agg_count")
    dst = tmp_path / "ckpt"
    grow_to(folder / "checkpoint", dst, 3)

    def interrupt(_seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("statelens.app.cli.watch.time.sleep", interrupt)
    rc = main(["watch", str(dst)])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.startswith("batch 3 ")
    assert "rows 8" in out  # agg_count's final state: 8 keys
    assert "watch stopped" in err
    assert "Traceback" not in err


@pytest.mark.spark
def test_rows_are_spark_num_rows_total_and_the_event_log_joins(tmp_path: Path) -> None:
    # Two runs of one query on one checkpoint, with the event log and the progress the query reported.
    from tests.eventlog_gen import get_event_log

    folder = get_event_log("restart")
    runs = json.loads((folder / "progress.json").read_text())
    progress = {p["batchId"]: p for run in runs for p in run}
    first_run_last = max(p["batchId"] for p in runs[0])
    src, dst = folder / "checkpoint", tmp_path / "ckpt"
    grow_to(src, dst, first_run_last)
    watcher = Watcher(str(dst), event_logs=[str(folder / "events")], from_batch=0)
    poll = watcher.poll()
    seen = list(poll.batches)
    assert not poll.restarted
    grow_to(src, dst, max(progress))
    poll = watcher.poll()
    seen.extend(poll.batches)
    assert [b.batch_id for b in seen] == sorted(progress)
    (line,) = poll.restarted
    assert f"batch {first_run_last + 1}" in line
    assert runs[1][0]["runId"] in line
    assert [b.batch_id for b in seen if b.restart] == [first_run_last + 1]
    for batch in seen:
        p = progress[batch.batch_id]
        assert [s.rows for s in batch.stores] == [op["numRowsTotal"] for op in p["stateOperators"]]
        assert batch.duration_ms == p["durationMs"]["triggerExecution"]
        assert batch.input_rows == p["numInputRows"]
        assert batch.run_id == p["runId"]
    # From the restart on, each store's rows per batch before and after it, from the query's own counts
    # (batch b's report is version b + 1; runs.around).
    fix, last = first_run_last + 1, max(progress)
    assert all(s.since_fix is None for b in seen if b.batch_id < fix for s in b.stores)
    total = {b: progress[b]["stateOperators"][0]["numRowsTotal"] for b in progress}
    first = min(progress)
    change = seen[-1].stores[0].since_fix
    assert change is not None and change["fix_batch"] == fix
    if fix - 1 > first:
        assert change["rows"].before.per_batch == (total[fix - 1] - total[first]) / (fix - 1 - first)
    if last > fix:
        assert change["rows"].after.per_batch == (total[last] - total[fix]) / (last - fix)
    assert seen[-1].stores[0].since_fix_text().startswith(f"since the restart at batch {fix}: rows ")


@pytest.mark.spark
def test_a_checkpoint_that_appears_later_is_waited_for(
    checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    from statelens.readers.errors import NotACheckpointError

    dst = tmp_path / "later"
    with pytest.raises(NotACheckpointError):
        Watcher(str(dst)).poll()
    watcher = Watcher(str(dst), from_batch=0, wait_for_checkpoint=True)
    poll = watcher.poll()
    assert poll.batches == []
    assert poll.waiting
    assert "no checkpoint there yet" in poll.status
    grow_to(checkpoint("agg_count") / "checkpoint", dst, 1)
    assert [b.batch_id for b in watcher.poll().batches] == [0, 1]


@pytest.mark.spark
def test_cleanup_behind_a_watcher_that_lags(checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    # The watcher has read batch 1; before its next poll the query runs on and cleanup deletes every
    # version before the zip of version 4: batch 2 is gone, the rest is read from that zip on.
    folder = checkpoint("rocks_pandas_state")
    expected = json.loads((folder / "expected.json").read_text())
    src, dst = folder / "checkpoint", tmp_path / "ckpt"
    grow_to(src, dst, 1)
    watcher = Watcher(str(dst), from_batch=0)
    assert [b.batch_id for b in watcher.poll().batches] == [0, 1]
    last = max(expected["committed_batches"])
    grow_to(src, dst, last)
    for p in (dst / "state").rglob("*"):
        m = _STATE_FILE.match(p.name)
        if m and (int(m.group(1)) < 4 or (int(m.group(1)) == 4 and m.group(2) == "changelog")):
            p.unlink()
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == list(range(2, last + 1))
    assert [b.batch_id for b in poll.batches if b.gone] == [2]
    for batch in poll.batches[1:]:
        assert batch.stores[0].rows == expected_rows(expected, batch.batch_id)
        assert not [f for f in batch.findings if f.severity == "error"]

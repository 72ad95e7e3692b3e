"""Expired-but-unremoved keys on real PySpark checkpoints.

The pandas scenarios' state function reports every call (which keys timed out, what it did), so the
zombies expected at each version are derived from ``expected.json``'s ``key_history``: a key is a
zombie after batch ``b`` when its last call up to ``b`` was a timeout it did not handle (``ignore``:
old timeout left in place; ``update_no_timeout``: stored with -1), and it expired in the first call of
that unhandled streak.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import key_fields, run_to_end
from statelens.app.analysis.expired import ExpiredFinding, ExpiredResult, iter_expired
from statelens.app.cli import main
from statelens.app.output import dumps_jsonl
from statelens.readers.checkpoint import open_checkpoint
from tests._mutations import set_log_json

UNHANDLED = ("ignore", "update_no_timeout")


def _expected_zombies(expected: dict[str, Any], version: int) -> dict[str, int]:
    """Key -> batch in which its timeout fired, for the zombies present at ``version``."""
    last_batch = version - 1
    out: dict[str, int] = {}
    for key, calls in expected["key_history"].items():
        calls = [c for c in calls if c["batch"] <= last_batch]
        streak: list[dict[str, Any]] = []
        for c in calls:
            if c["timed_out"] and c["action"] in UNHANDLED:
                streak.append(c)
            else:
                streak = []
        if streak:
            out[key] = streak[0]["batch"]
    return out


class _Run:
    """An ``iter_expired`` run: its result and every finding its sink received, in order."""

    def __init__(self, result: ExpiredResult, findings: list[ExpiredFinding]):
        self.result = result
        self.findings = findings
        self.operators = result.operators
        self.problems = result.problems


def _findings(path: Path, **kw: Any) -> _Run:
    found: list[ExpiredFinding] = []
    result = run_to_end(iter_expired(open_checkpoint(str(path)), sink=found.append, **kw))
    # The result counts exactly what was streamed, and its examples are some of those findings.
    assert result.tally == Counter(
        (f.operator_id, f.store_name, f.partition, f.version, f.category) for f in found
    )
    assert result.total() == len(found)
    assert all(f in found for f in result.examples)
    return _Run(result, found)


@pytest.mark.parametrize(
    ("scenario", "kind"),
    [("pandas_state_processing", "processing_time"), ("pandas_state_event", "event_time")],
)
@pytest.mark.spark
def test_zombies_at_every_version_match_the_functions_own_report(checkpoint, scenario, kind):
    folder = checkpoint(scenario)
    expected = json.loads((folder / "expected.json").read_text())
    result = _findings(folder / "checkpoint", all_versions=True, stale_after=0)
    assert not result.problems
    (op,) = result.operators
    assert op.timeout_kind.timeout_kind == kind
    assert op.timeout_kind.source == "inferred"
    assert op.timeout_kind.evidence
    assert {f.category for f in result.findings} <= {"zombie"}
    last_version = max(expected["committed_batches"]) + 1
    leaked_or_upd = set()
    for version in range(1, last_version + 1):
        want = _expected_zombies(expected, version)
        got = {key_fields(f.key)["key"]: f for f in result.findings if f.version == version}
        assert set(got) == set(want), f"version {version}"
        for key, f in got.items():
            assert f.batch_id == want[key], (version, key)
            assert f.age_batches == version - 1 - want[key]  # 0 at the version the firing batch wrote
            assert f.timeout_kind == kind
            assert f.timeout_ms is not None
            assert f.threshold_ms is not None
            assert f.timeout_ms < f.threshold_ms
            ts = expected["batch_timestamp_ms" if kind == "processing_time" else "batch_watermark_ms"]
            assert f.threshold_ms == ts[str(f.batch_id)]
            assert f.age_ms == ts[str(version - 1)] - f.timeout_ms
            leaked_or_upd.add(key)
        # Both on-disk shapes: the PySpark leak keeps its expired timeout, update() without one stores -1.
        for key, f in got.items():
            history = [c for c in expected["key_history"][key] if c["batch"] <= version - 1]
            if history[-1]["action"] == "ignore":
                assert f.stored_timeout_ms == f.timeout_ms
            else:
                assert f.stored_timeout_ms == -1
    assert set(expected["leaked"]) <= leaked_or_upd
    assert not leaked_or_upd & set(expected["removed"])


@pytest.mark.spark
def test_latest_version_only_by_default_and_json_cli(checkpoint, capsys):
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    last_version = max(expected["committed_batches"]) + 1
    rc = main(["expired", str(folder / "checkpoint"), "--json"])
    assert rc == 0
    docs = json.loads(capsys.readouterr().out)
    assert {dict(d["key"])["key"] for d in docs} == set(_expected_zombies(expected, last_version))
    assert {d["version"] for d in docs} == {last_version}
    for d in docs:
        for name in (
            "operator_id",
            "partition",
            "version",
            "batch_id",
            "category",
            "key",
            "timeout_ms",
            "threshold_ms",
            "timeout_kind",
            "age_batches",
            "age_ms",
        ):
            assert name in d
        assert d["category"] == "zombie"
        assert d["timeout_kind"] == "event_time"


@pytest.mark.spark
def test_text_output_names_the_evidence(checkpoint, capsys):
    folder = checkpoint("pandas_state_processing")
    assert main(["expired", str(folder / "checkpoint")]) == 0
    text = capsys.readouterr().out
    assert "timeout kind processing_time (inferred" in text
    assert "zombie" in text
    assert "leak1" in text


@pytest.mark.spark
def test_override_timeout_kind_and_stale(checkpoint):
    """Forcing event time on a query without watermark: nothing can fire, -1 keys become stale."""
    folder = checkpoint("pandas_state_processing")
    expected = json.loads((folder / "expected.json").read_text())
    result = _findings(folder / "checkpoint", timeout_kind="event_time", stale_after=1)
    (op,) = result.operators
    assert (op.timeout_kind.timeout_kind, op.timeout_kind.source) == ("event_time", "override")
    assert not [f for f in result.findings if f.category == "zombie"]
    stale = {key_fields(f.key)["key"] for f in result.findings if f.category == "stale"}
    no_timeout = {k for k, h in expected["key_history"].items() if h[-1]["action"] == "update_no_timeout"}
    assert stale == no_timeout
    assert all(f.timeout_ms == -1 and f.age_batches >= 1 for f in result.findings)


@pytest.mark.spark
def test_overdue_when_the_next_watermark_passed_but_no_batch_ran(checkpoint, tmp_path):
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", ckpt)
    last = max(expected["committed_batches"])
    # The last commit promises a watermark far ahead: every armed timeout is due, no batch ran.
    set_log_json(ckpt / "commits" / str(last), nextBatchWatermarkMs=10**13)
    result = _findings(ckpt, stale_after=0)
    overdue = {key_fields(f.key)["key"]: f for f in result.findings if f.category == "overdue"}
    zombies = _expected_zombies(expected, last + 1)
    assert overdue
    assert not set(overdue) & set(zombies)
    assert set(overdue) == set(expected["final_keys"]) - set(zombies)
    for f in overdue.values():
        assert f.batch_id == last + 1
        assert f.age_batches == 0
        assert f.threshold_ms == 10**13
        assert "commits/" in f.note


@pytest.mark.spark
def test_eviction_lag_only_when_keys_stay_behind_the_watermark(checkpoint, tmp_path):
    folder = checkpoint("window_agg_watermark")
    clean = _findings(folder / "checkpoint", all_versions=True)
    assert clean.findings == []
    assert clean.operators[0].check == "eviction"
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", ckpt)
    last = max(int(p.name) for p in (ckpt / "offsets").iterdir() if re.fullmatch(r"\d+", p.name))
    # Pretend the last batch ran with a watermark past every window: nothing was evicted, so all lag.
    set_log_json(ckpt / "offsets" / str(last), batchWatermarkMs=10**13)
    lag = _findings(ckpt)
    assert lag.findings
    assert {f.category for f in lag.findings} == {"eviction_lag"}
    assert all(
        f.version == last + 1 and f.threshold_ms == 10**13 and f.timeout_ms < 10**13 for f in lag.findings
    )
    assert all(set(key_fields(f.key)) == {"window", "key"} for f in lag.findings)


@pytest.mark.spark
def test_a_truncated_delta_is_reported_and_other_partitions_still_checked(checkpoint, tmp_path, capsys):
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", ckpt)
    delta = ckpt / "state" / "0" / "1" / "2.delta"
    delta.write_bytes(delta.read_bytes()[:10])
    result = _findings(ckpt, stale_after=0)
    assert [p.path for p in result.problems] == ["state/0/1/2.delta"]
    last_version = max(expected["committed_batches"]) + 1
    got = {key_fields(f.key)["key"] for f in result.findings if f.partition == 0}
    assert got
    assert got <= set(_expected_zombies(expected, last_version))
    assert not [f for f in result.findings if f.partition == 1 and f.version < last_version]
    assert main(["expired", str(ckpt), "--json"]) == 1
    captured = capsys.readouterr()
    assert "state/0/1/2.delta" in captured.err
    docs = json.loads(captured.out)
    assert all(d["timeout_kind_evidence"].startswith("inferred: ") for d in docs)


class _Clock:
    def __init__(self, watermarks: dict[int, int]):
        self.watermark_ms = watermarks


@pytest.mark.parametrize(
    ("samples", "watermarks", "kind", "words"),
    [
        # No watermark anywhere: only processing time is possible.
        ([(2_000, 1_000, 0), (3_000, 2_000, 0)], {0: 0}, "processing_time", "no batch had a watermark"),
        # A timeout set before its batch started: event time.
        ([(500, 1_000, 400), (9_000, 2_000, 900)], {0: 400}, "event_time", "at or before"),
        # A timeout below the watermark: processing time.
        ([(1_500, 1_000, 2_000)], {0: 2_000}, "processing_time", "below their batch's watermark"),
        # Event times near wall-clock time, both clocks fit: a fixed offset means setTimeoutDuration...
        (
            [(11_000, 1_000, 500), (12_000, 2_000, 900), (13_000, 3_000, 900)],
            {0: 500},
            "processing_time",
            "exactly 10000 ms",
        ),
        # ...offsets that follow the data mean event time.
        (
            [(1_700, 1_000, 500), (2_900, 2_000, 900), (3_350, 3_000, 900)],
            {0: 500},
            "event_time",
            "follow the data",
        ),
    ],
)
def test_timeout_kind_decision(samples, watermarks, kind, words):
    from statelens.app.analysis.timeout_kind import _decide_timeout_kind

    ev = _decide_timeout_kind(samples, _Clock(watermarks))
    assert ev.timeout_kind == kind
    assert ev.source == "inferred"
    assert words in ev.evidence
    assert ev.samples == len(samples)


# -- bounded memory: findings stream, the result keeps counts and capped examples ---------
_WALK_ORDER = ("zombie", "overdue", "stale", "eviction_lag")


def _walk_key(f: ExpiredFinding) -> tuple[Any, ...]:
    return (f.operator_id, f.store_name, f.partition, f.version, _WALK_ORDER.index(f.category))


def _lagging_window_checkpoint(folder: Path, tmp_path: Path) -> Path:
    """``window_agg_watermark`` with its last batch's watermark past every window: all windows lag."""
    ckpt = tmp_path / "lagging"
    shutil.copytree(folder / "checkpoint", ckpt)
    last = max(int(p.name) for p in (ckpt / "offsets").iterdir() if re.fullmatch(r"\d+", p.name))
    set_log_json(ckpt / "offsets" / str(last), batchWatermarkMs=10**13)
    return ckpt


@pytest.mark.spark
def test_streamed_findings_come_in_walk_order_and_equal_the_cli_output(checkpoint, tmp_path, capsys):
    """The sink gets every finding sorted as the full list always was (operator, store, partition,
    version, category; stable within), and --json / --jsonl / text print exactly that stream."""
    folder = checkpoint("pandas_state_event")
    run = _findings(folder / "checkpoint", all_versions=True, stale_after=1)
    assert len({f.version for f in run.findings}) > 1
    assert len({f.partition for f in run.findings}) > 1
    assert run.findings == sorted(run.findings, key=_walk_key)
    want = [dumps_jsonl(f.to_json()) for f in run.findings]
    args = ["expired", str(folder / "checkpoint"), "--all-versions", "--stale-after", "1"]
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out, object_pairs_hook=list) == [json.loads(w, object_pairs_hook=list) for w in want]
    assert out == "[\n" + ",\n".join(want) + "\n]\n"
    assert main([*args, "--jsonl"]) == 0
    assert capsys.readouterr().out.splitlines() == want
    assert main(args) == 0
    text = capsys.readouterr().out
    rows = [
        line for line in text.splitlines() if re.match(r"^0\s+default\s+\d+\s+\d+\s+(zombie|stale)\s", line)
    ]
    assert len(rows) == len(want)
    assert f"{len(want)} findings: " in text
    # Eviction lag streams the same way.
    lag = _findings(_lagging_window_checkpoint(checkpoint("window_agg_watermark"), tmp_path))
    assert lag.findings
    assert lag.findings == sorted(lag.findings, key=_walk_key)


@pytest.mark.spark
def test_examples_are_capped_and_counts_exact(checkpoint, tmp_path):
    """max_examples findings per store and category are kept (the most overdue); counts stay exact,
    with or without a sink (without one, only the kept keys are decoded)."""
    folder = checkpoint("pandas_state_event")
    full = _findings(folder / "checkpoint", all_versions=True, stale_after=1)
    per_category = Counter(f.category for f in full.findings)
    assert max(per_category.values()) > 3
    for sink in (True, False):
        found: list[ExpiredFinding] = []
        result = run_to_end(
            iter_expired(
                open_checkpoint(str(folder / "checkpoint")),
                all_versions=True,
                stale_after=1,
                max_examples=3,
                sink=found.append if sink else None,
            )
        )
        assert result.tally == full.result.tally
        assert result.counts() == {c: per_category.get(c, 0) for c in _WALK_ORDER}
        assert result.ages == full.result.ages
        assert result.truncated()
        kept = Counter(f.category for f in result.examples)
        assert kept == {c: min(3, n) for c, n in per_category.items()}
        for category in per_category:
            ranked = sorted(
                (f for f in full.findings if f.category == category), key=lambda f: -(f.age_ms or 0)
            )
            got = [f for f in result.examples if f.category == category]
            assert sorted(f.age_ms or 0 for f in got) == sorted(f.age_ms or 0 for f in ranked[:3])
            assert all(f in full.findings for f in got)
        assert result.examples == sorted(result.examples, key=_walk_key)
        assert found == (full.findings if sink else [])
    # The per-store summaries count everything too.
    assert full.operators[0].counts == dict(per_category)


@pytest.mark.spark
def test_findings_are_not_retained_while_streaming(checkpoint, monkeypatch):
    """Regression: at no point are more findings alive than the examples plus one chunk."""
    import weakref

    import statelens.app.analysis.expired_result as expired_result

    monkeypatch.setattr(expired_result, "CHUNK", 2)
    folder = checkpoint("pandas_state_event")
    alive = 0
    most = 0
    total = 0

    def gone() -> None:
        nonlocal alive
        alive -= 1

    def sink(f: ExpiredFinding) -> None:
        nonlocal alive, most, total
        weakref.finalize(f, gone)
        alive += 1
        total += 1
        most = max(most, alive)

    result = run_to_end(
        iter_expired(
            open_checkpoint(str(folder / "checkpoint")),
            all_versions=True,
            stale_after=1,
            max_examples=1,
            sink=sink,
        )
    )
    groups = len({(op, store, c) for op, store, _, _, c in result.tally})
    assert total == result.total() > groups + 2 + 5
    assert most <= groups + 2  # one example per store and category, plus the chunk being handed over
    del result


@pytest.mark.spark
@pytest.mark.slow
def test_memory_does_not_grow_with_the_number_of_findings(checkpoint):
    """All versions of a windowed store with never-evicted windows: ~30x the findings of the latest
    version, same state; the traced peak stays about the same (it held every finding before)."""
    import tracemalloc

    from tests.benchmarks.bench_memory import build_windowed_checkpoint

    checkpoint("window_agg_watermark")  # the template the synthetic checkpoint copies its logs from
    path = build_windowed_checkpoint(partitions=2, batches=32, keys=64_000, zombie_every=4)

    def peak(**kw: Any) -> tuple[int, int]:
        ckpt = open_checkpoint(str(path))
        tracemalloc.start()
        try:
            result = run_to_end(iter_expired(ckpt, sink=lambda f: None, **kw))
            return tracemalloc.get_traced_memory()[1], result.total()
        finally:
            tracemalloc.stop()

    latest_peak, latest_findings = peak()
    all_peak, all_findings = peak(all_versions=True)
    assert all_findings > 10 * latest_findings > 10_000
    assert all_peak < 1.5 * latest_peak, (all_peak, latest_peak)


@pytest.mark.spark
@pytest.mark.parametrize("rebuild", ["amortised", "every change"])
def test_the_timeout_fold_fed_batch_by_batch_from_a_resumed_replay(checkpoint, rebuild, monkeypatch):
    """The fold a live follow feeds: one replay of the store, advanced a version at a time (never started
    over), finds after each version exactly the zombies the function's own report expects there; the
    replay's compact states rebuilt as the store grows or at every change (keys removed, put again)."""
    from statelens.readers import replay_state

    if rebuild == "every change":
        monkeypatch.setattr(replay_state, "REBUILD_MIN", -1)
    from statelens.app.analysis._common import BatchClock
    from statelens.app.analysis.expired_fold import TimeoutFold, timeout_column
    from statelens.app.analysis.expired_result import Emitter, ExpiredResult, OperatorExpiry
    from statelens.app.analysis.expired_sources import ScanSource, state_source

    folder = checkpoint("pandas_state_processing")
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    (op,) = ckpt.operators
    (store,) = op.stores
    source = state_source(ckpt, store)
    assert isinstance(source, ScanSource)
    found: list[ExpiredFinding] = []
    fold = TimeoutFold(
        OperatorExpiry(op.operator_id, op.kind.value, store.store_name, "timeouts"),
        Emitter(ExpiredResult([], [], None, False), found.append),
        BatchClock(ckpt),
        source.key_decoder,
        False,
        None,
        "given",
        read_timeout=source.value_reader(timeout_column(op, store.store_name)),
        kind="processing_time",
        tiebreak=source.tiebreak,
        stale_after=None,
    )
    replay = source.scan.replay()
    fed: list[tuple[int, int]] = []
    last_version = max(expected["committed_batches"]) + 1
    for version in range(1, last_version + 1):
        found.clear()
        for step in replay.advance(until=version):
            fed.append((step.partition_id, step.version))
            fold.feed(step.partition_id, step.version, step.state, step.changes, latest=True)
        assert set(replay.positions.values()) == {version}
        got = {key_fields(f.key)["key"]: f.batch_id for f in found if f.category == "zombie"}
        assert got == _expected_zombies(expected, version), f"version {version}"
    assert len(fed) == len(set(fed))  # every version of every partition fed once
    assert any(_expected_zombies(expected, v) for v in range(1, last_version + 1))

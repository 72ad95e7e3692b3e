"""``expired``, ``doctor`` and ``report`` read state through ``--backend native|spark|auto``.

Through Spark the same checks run on the rows Spark's ``statestore`` source returns (keys identified by
their decoded tuple); on real checkpoints the findings must equal the native ones. The tests share the
one SparkSession of the run (``spark`` fixture): the CLI's backend chooser is handed that session.
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
from statelens.app.analysis.expired import ExpiredFinding, iter_expired
from statelens.app.cli import main
from statelens.app.output import dumps_jsonl
from statelens.readers.backends import BackendChooser
from statelens.readers.checkpoint import open_checkpoint
from tests._mutations import set_log_json

pytestmark = pytest.mark.spark


def _last_batch(ckpt: Path) -> int:
    return max(int(p.name) for p in (ckpt / "offsets").iterdir() if re.fullmatch(r"\d+", p.name))


def _run(path: Path, backends: BackendChooser, **kw: Any) -> tuple[Any, list[ExpiredFinding]]:
    found: list[ExpiredFinding] = []
    result = run_to_end(iter_expired(open_checkpoint(str(path)), sink=found.append, backends=backends, **kw))
    return result, found


def _compare(path: Path, spark: Any, **kw: Any) -> list[str]:
    """Findings (as JSON lines) and per-store summaries through Spark equal the native ones."""
    ckpt = open_checkpoint(str(path))
    native, got_native = _run(path, BackendChooser(ckpt, "native"), **kw)
    through, got_spark = _run(path, BackendChooser(ckpt, "spark", spark=spark), **kw)
    assert not native.problems
    assert not through.problems
    a = sorted(dumps_jsonl(f.to_json()) for f in got_native)
    b = sorted(dumps_jsonl(f.to_json()) for f in got_spark)
    assert a == b
    assert native.tally == through.tally
    for n, s in zip(native.operators, through.operators, strict=True):
        assert (n.backend, s.backend) == ("native", "spark")
        assert (n.check, n.timeout_kind, n.counts, n.keys_at_latest, n.partitions) == (
            s.check,
            s.timeout_kind,
            s.counts,
            s.keys_at_latest,
            s.partitions,
        )
        assert not s.reason  # Spark's change feed answered for every version after the first
        assert s.in_spark == (s.check in ("timeouts", "eviction"))  # checked by a Spark query, not here
    return a


@pytest.mark.parametrize(
    ("scenario", "kw", "categories"),
    [
        ("pandas_state_processing", {}, {"zombie"}),
        ("pandas_state_event", {}, {"zombie"}),
        ("rocks_pandas_state", {}, {"zombie"}),
        # Forced event time on a query without watermark: nothing fires, keys stored with -1 are stale.
        ("pandas_state_processing", {"timeout_kind": "event_time"}, {"stale"}),
    ],
)
def test_expired_through_spark_equals_native_on_timeouts(
    scenario: str, kw: dict[str, Any], categories: set[str], checkpoint: Any, spark: Any
) -> None:
    """Zombies and stale keys at every version, from Spark's rows and change feed, as natively."""
    found = _compare(checkpoint(scenario) / "checkpoint", spark, all_versions=True, stale_after=1, **kw)
    assert {json.loads(f)["category"] for f in found} == categories


def test_expired_through_spark_equals_native_on_overdue_keys(
    checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(checkpoint("pandas_state_event") / "checkpoint", ckpt)
    # The last commit promises a watermark far ahead: every armed timeout is due, no batch ran.
    set_log_json(ckpt / "commits" / str(_last_batch(ckpt)), nextBatchWatermarkMs=10**13)
    found = _compare(ckpt, spark, stale_after=0)
    assert {json.loads(f)["category"] for f in found} == {"zombie", "overdue"}


def test_expired_through_spark_equals_native_on_eviction_lag(
    checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    folder = checkpoint("window_agg_watermark")
    assert _compare(folder / "checkpoint", spark, all_versions=True) == []
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", ckpt)
    # Pretend the last batch ran with a watermark past every window: nothing was evicted, so all lag.
    set_log_json(ckpt / "offsets" / str(_last_batch(ckpt)), batchWatermarkMs=10**13)
    latest = _compare(ckpt, spark)
    assert latest
    assert {json.loads(f)["category"] for f in latest} == {"eviction_lag"}
    assert set(latest) <= set(_compare(ckpt, spark, all_versions=True))


def test_expired_cli_backend_spark_says_so_and_prints_the_native_findings(
    checkpoint: Any, shared_spark_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(checkpoint("pandas_state_processing") / "checkpoint")
    assert main(["expired", path, "--json", "--backend", "native"]) == 0
    native = capsys.readouterr()
    assert "read with" not in native.err
    assert main(["expired", path, "--json", "--backend", "spark"]) == 0
    through = capsys.readouterr()
    assert "read with the Spark" in through.err
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(map(key, json.loads(through.out))) == sorted(map(key, json.loads(native.out)))
    assert json.loads(native.out)
    # auto decodes natively here, silently.
    assert main(["expired", path, "--json", "--backend", "auto"]) == 0
    auto = capsys.readouterr()
    assert auto.out == native.out
    assert "read with" not in auto.err
    assert main(["expired", path, "--backend", "spark"]) == 0
    assert "(read by spark, checked inside Spark)" in capsys.readouterr().out


def test_expired_through_spark_without_change_feed_reads_versions_whole(
    checkpoint: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When Spark's change feed fails (RocksDB without changelogs), every version is read whole and the
    summary says so; a whole state still shows the PySpark leak shape (an expired timeout kept)."""
    from statelens.readers.backends.spark import SparkBackend
    from statelens.readers.backends.spark_engine import SparkEngine
    from statelens.readers.errors import SparkReadError

    def no_feed(*_args: Any, **_kw: Any) -> Any:
        raise SparkReadError("Spark could not read the changes: no changelog")

    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    path = folder / "checkpoint"
    ckpt = open_checkpoint(str(path))
    _, native = _run(path, BackendChooser(ckpt, "native"), stale_after=0)
    monkeypatch.setattr(SparkBackend, "iter_changes", no_feed)
    # The streamed walk and the checks inside Spark read the history through the engine's queries.
    monkeypatch.setattr(SparkEngine, "query", no_feed)
    result, through = _run(path, BackendChooser(ckpt, "spark", spark=spark), stale_after=0)
    (op,) = result.operators
    assert "change feed is unavailable" in op.reason
    assert op.timeout_kind.timeout_kind is None  # no fresh timeouts seen without changes: undecided
    result, through = _run(
        path, BackendChooser(ckpt, "spark", spark=spark), stale_after=0, timeout_kind="event_time"
    )
    assert not result.problems
    keys = {key_fields(f.key)["key"] for f in through}
    assert keys <= {key_fields(f.key)["key"] for f in native}
    kept_expired = {k for k, calls in expected["key_history"].items() if calls[-1]["action"] == "ignore"}
    leaked = kept_expired & {key_fields(f.key)["key"] for f in native}
    assert leaked
    assert leaked <= keys


@pytest.mark.parametrize("scenario", ["pandas_state_event", "rocks_pandas_state"])
def test_expired_through_spark_streams_partition_by_partition(
    scenario: str, checkpoint: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a classic session the timeout check reads the first version and the change feed as one stream,
    partition by partition (no read of a whole version, no per-version job), and finds what the native
    decoder finds."""
    from statelens.readers.backends.spark import SparkBackend
    from statelens.readers.backends.spark_engine import SparkEngine

    def whole(*_args: Any, **_kw: Any) -> Any:
        raise AssertionError("a whole version or one version's changes was collected")

    path = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(path))
    native, got_native = _run(path, BackendChooser(ckpt, "native"), all_versions=True)
    streams: list[str] = []
    real = SparkEngine.query

    def counted(self: Any, what: str, *args: Any, **kw: Any) -> Any:
        streams.append(what)
        return real(self, what, *args, **kw)

    for name in ("read_rows", "read_changes", "iter_rows", "iter_changes"):
        monkeypatch.setattr(SparkBackend, name, whole)
    monkeypatch.setattr(SparkEngine, "query", counted)
    through, got_spark = _run(path, BackendChooser(ckpt, "spark", spark=spark), all_versions=True)
    assert not through.problems and any(w.startswith("state and changes") for w in streams)
    assert sorted(dumps_jsonl(f.to_json()) for f in got_spark) == sorted(
        dumps_jsonl(f.to_json()) for f in got_native
    )
    assert got_native and native.tally == through.tally


# -- doctor and report -----------------------------------------------------------------------------------
SPARK_CHECKS = ("spark_unreadable", "spark_native_disagree")


@pytest.mark.parametrize("scenario", ["pandas_state_event", "join", "rocks_agg_changelog"])
def test_doctor_with_spark_finds_no_disagreement_on_a_good_checkpoint(
    scenario: str, checkpoint: Any, shared_spark_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(checkpoint(scenario) / "checkpoint")
    native_code = main(["doctor", path, "--json", "--backend", "native"])
    native = json.loads(capsys.readouterr().out)
    code = main(["doctor", path, "--json", "--backend", "spark"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == native_code
    assert any(c.startswith("Spark reads the latest committed version") for c in doc["checked"])
    assert not any(c.startswith("Spark") for c in native["checked"])
    assert not [f for f in doc["findings"] if f["check"] in SPARK_CHECKS]
    assert [f for f in doc["findings"] if not f["check"].startswith("spark_")] == native["findings"]
    assert "read with the Spark" in captured.err


def test_doctor_names_the_partition_where_spark_and_native_disagree(
    checkpoint: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statelens.app.analysis.doctor import iter_doctor
    from statelens.readers.backends.spark import SparkBackend

    real = SparkBackend.row_counts

    def one_more_in_partition_1(self: Any, operator_id: int, store_name: Any, version: int) -> dict[int, int]:
        counts = real(self, operator_id, store_name, version)
        counts[1] = counts.get(1, 0) + 1
        return counts

    monkeypatch.setattr(SparkBackend, "row_counts", one_more_in_partition_1)
    ckpt = open_checkpoint(str(checkpoint("agg_count") / "checkpoint"))
    result = run_to_end(
        iter_doctor(ckpt, decode_files=False, backends=BackendChooser(ckpt, "spark", spark=spark))
    )
    bad = [f for f in result.findings if f.check == "spark_native_disagree"]
    assert [(f.severity, f.operator_id, f.store_name, f.partition) for f in bad] == [
        ("error", 0, "default", 1)
    ]
    assert "partition 1" in bad[0].message
    assert result.exit_code == 2


def test_report_reads_growth_and_expired_keys_through_spark(
    checkpoint: Any, spark: Any, shared_spark_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.app.analysis.growth import iter_growth

    path = checkpoint("pandas_state_event") / "checkpoint"
    ckpt = open_checkpoint(str(path))
    native = run_to_end(iter_growth(ckpt))
    through = run_to_end(iter_growth(ckpt, backends=BackendChooser(ckpt, "spark", spark=spark)))
    committed = {b + 1 for b in ckpt.commits}
    for a, b in zip(native.stores, through.stores, strict=True):
        assert b.backend == "spark"
        assert {p: {v: n for v, n in per.items() if v in committed} for p, per in a.rows.items()} == b.rows
        assert b.to_json()["per_partition"]
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out), "--backend", "spark"]) == 0
    assert "read with the Spark" in capsys.readouterr().err
    html = out.read_text()
    assert "Read by spark" in html
    assert main(["report", str(path), "-o", str(tmp_path / "native.html"), "--backend", "native"]) == 0
    native_html = (tmp_path / "native.html").read_text()
    zombies = re.compile(r"Expired keys at the latest version: [^<]*")
    assert zombies.search(html).group(0) == zombies.search(native_html).group(0)


@pytest.mark.parametrize("scenario", ["pandas_state_event", "pandas_state_processing", "rocks_pandas_state"])
def test_timeouts_are_checked_inside_spark_with_the_walks_counts(
    scenario: str, checkpoint: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Spark the timeout checks run as one SQL query (only findings come back); its findings at
    the latest version and its counts per earlier version (the app's chart) equal the native walk's."""
    import statelens.app.analysis.expired_spark as pushdown

    calls: list[str] = []
    run = pushdown.check_timeouts_in_spark

    def counted(source: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(source.store_name)
        return (yield from run(source, *args, **kwargs))

    monkeypatch.setattr(pushdown, "check_timeouts_in_spark", counted)
    path = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(path))
    counts: dict[str, Counter] = {}
    found: dict[str, list[str]] = {}
    for name, chooser in (
        ("native", BackendChooser(ckpt, "native")),
        ("spark", BackendChooser(ckpt, "spark", spark=spark)),
    ):
        counts[name] = Counter()
        got: list[ExpiredFinding] = []
        result = run_to_end(
            iter_expired(ckpt, sink=got.append, backends=chooser, stale_after=1, version_counts=counts[name])
        )
        assert not result.problems
        found[name] = sorted(dumps_jsonl(f.to_json()) for f in got)
    assert calls == ["default"]
    assert [op.in_spark for op in result.operators] == [True]
    assert found["native"] and found["spark"] == found["native"]
    assert counts["native"] and counts["spark"] == counts["native"]


@pytest.mark.parametrize("scenario", ["dedup_watermark", "session_window", "join", "window_agg_watermark"])
def test_eviction_checked_inside_spark_equals_native(
    scenario: str, checkpoint: Any, spark: Any, tmp_path: Path
) -> None:
    """Eviction lag computed by a Spark query over the change feed (rows behind each version's watermark)
    equals the native walk's, at every version and as the app's counts per version."""
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(checkpoint(scenario) / "checkpoint", ckpt)
    # The last batch ran with a watermark past every row: nothing was evicted, so every row lags.
    set_log_json(ckpt / "offsets" / str(_last_batch(ckpt)), batchWatermarkMs=10**13)
    opened = open_checkpoint(str(ckpt))
    got: dict[str, Any] = {}
    for name in ("native", "spark"):
        chooser = BackendChooser(opened, name, spark=spark if name == "spark" else None)
        found, counts = [], Counter()
        every = run_to_end(iter_expired(opened, sink=found.append, backends=chooser, all_versions=True))
        latest = run_to_end(iter_expired(opened, backends=chooser, version_counts=counts))
        assert not every.problems and not latest.problems
        checked = [op for op in every.operators if op.check == "eviction"]
        assert checked and all(op.in_spark == (name == "spark") for op in checked)
        got[name] = (
            sorted(dumps_jsonl(f.to_json()) for f in found),
            every.tally,
            counts,
            [(op.store_name, op.counts, op.keys_at_latest, op.versions_read) for op in checked],
        )
    assert got["native"][0] and {json.loads(f)["category"] for f in got["native"][0]} == {"eviction_lag"}
    assert got["spark"] == got["native"]


@pytest.mark.parametrize("scenario", ["rocks_tws_timers", "rocks_tws_timers_avro", "rocks_tws_event_time"])
def test_timer_leaks_checked_inside_spark_equal_native(scenario: str, checkpoint: Any, spark: Any) -> None:
    """transformWithState's timer check as a Spark query (every version's timers, the variable's change
    feed) finds the walk's zombies at every version, at the latest one, and the app's counts per version."""
    path = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(path))
    got: dict[str, Any] = {}
    for name in ("native", "spark"):
        chooser = BackendChooser(ckpt, name, spark=spark if name == "spark" else None)
        every: list[ExpiredFinding] = []
        counts: Counter = Counter()
        all_result = run_to_end(iter_expired(ckpt, sink=every.append, backends=chooser, all_versions=True))
        latest_result = run_to_end(iter_expired(ckpt, backends=chooser, version_counts=counts))
        assert not all_result.problems and not latest_result.problems
        timers = [op for op in all_result.operators + latest_result.operators if op.check == "timers"]
        assert timers and all(op.in_spark == (name == "spark") for op in timers)
        assert all(op.backend == name for op in timers)
        got[name] = (
            sorted(dumps_jsonl(f.to_json()) for f in every),
            sorted(dumps_jsonl(f.to_json()) for f in latest_result.examples),
            counts,
            [(op.store_name, op.counts, op.keys_at_latest, op.versions_read, op.partitions) for op in timers],
        )
    assert got["native"][0] and got["native"][1] and got["native"][2]  # zombies at several versions
    assert {json.loads(f)["category"] for f in got["native"][0]} == {"zombie"}
    assert got["spark"] == got["native"]

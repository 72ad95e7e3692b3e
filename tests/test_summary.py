"""``statelens summary`` and its verdicts on real checkpoints: every verdict agrees with the analysis it
comes from (``doctor``, ``expired``, the commits, the event logs), and a damaged copy is named."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.doctor import iter_doctor
from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.summary import SEVERITIES, Summary, iter_first_look, iter_summary
from statelens.app.cli import main
from statelens.app.resources import sample_checkpoint_path
from statelens.readers.checkpoint import open_checkpoint

pytestmark = pytest.mark.spark

SCENARIOS = [
    "pandas_state_processing",
    "join",
    "window_agg_watermark",
    "rocks_pandas_state",
    "rocks_tws_timers",
]


def _summary(path: Path, **kw: Any) -> Summary:
    return run_to_end(iter_summary(open_checkpoint(str(path)), **kw))


def _root(checkpoint: Any, name: str) -> Path:
    return Path(sample_checkpoint_path()) if name == "sample" else checkpoint(name) / "checkpoint"


def _by(summary: Summary, check: str) -> list[Any]:
    return [v for v in summary.verdicts if v.check == check]


@pytest.mark.parametrize("name", ["sample", *SCENARIOS])
def test_verdicts_match_doctor_and_expired(checkpoint: Any, name: str) -> None:
    root = _root(checkpoint, name)
    summary = _summary(root)
    ckpt = open_checkpoint(str(root))
    doctor = run_to_end(iter_doctor(ckpt))
    expired = run_to_end(iter_expired(ckpt))

    (restart,) = _by(summary, "restart")
    errors = [f for f in doctor.findings if f.severity == "error"]
    assert restart.severity == ("error" if errors else "ok")
    if not errors:
        assert f"version {ckpt.last_committed_batch_id + 1}" in restart.text

    # One expired verdict per store with findings, with the exact number `statelens expired` finds.
    found = Counter({(f.operator_id, f.store_name): 0 for f in expired.findings})
    for (op, store, _pid, _v, _c), n in expired.tally.items():
        found[(op, store)] += n
    shown = {
        (v.operator_id, v.store_name): v.value for v in _by(summary, "expired") if v.severity == "warning"
    }
    assert shown == {k: float(n) for k, n in found.items() if n}
    for v in _by(summary, "expired"):
        assert v.view == "expired"
        if v.severity == "warning":
            assert f"{int(v.value):,}" in v.text and v.store_name in v.text

    (commit,) = _by(summary, "commit")
    assert commit.severity == ("warning" if ckpt.uncommitted_batches() else "ok")
    (unreadable,) = _by(summary, "unreadable")
    assert unreadable.severity == "ok"
    assert summary.exit_code == (
        1 if any(v.severity in ("error", "warning") for v in summary.verdicts) else 0
    )
    order = [SEVERITIES.index(v.severity) for v in summary.verdicts]
    assert order == sorted(order)


def test_the_sample_leaks_zombies_and_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    root = str(sample_checkpoint_path())
    assert main(["summary", root]) == 1
    text = capsys.readouterr().out
    assert "WARNING  operator 0 store default: 6 zombie keys expired but still in the state" in text
    assert "[view: expired]" in text
    assert main(["summary", root, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1
    (zombies,) = [v for v in doc["verdicts"] if v["check"] == "expired"]
    assert (zombies["value"], zombies["operator_id"], zombies["store_name"]) == (6, 0, "default")
    # The trend over the last versions: one count per version, the last the 6 found now.
    trend = zombies["text"].rsplit(": ", 1)[1].split(" → ")
    assert len(trend) == 5 and trend[-1] == "6"


def test_a_clean_checkpoint_exits_0(checkpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(checkpoint("window_agg_watermark") / "checkpoint")]) == 0
    out = capsys.readouterr().out
    assert "ERROR" not in out and "WARNING" not in out
    assert "Watermark advancing" in out


def test_an_uncommitted_batch_is_the_one_a_restart_reruns(checkpoint: Any) -> None:
    folder = checkpoint("uncommitted")
    expected = json.loads((folder / "expected.json").read_text())
    (commit,) = _by(_summary(folder / "checkpoint"), "commit")
    assert commit.severity == "warning"
    assert commit.batch_id == expected["uncommitted_batch"]
    assert commit.view == "timeline"


def test_a_damaged_copy_names_the_file(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("pandas_state_processing") / "checkpoint", root)
    delta = root / "state/0/1/6.delta"
    data = bytearray(delta.read_bytes())
    delta.write_bytes(bytes(data[: len(data) // 2]))
    summary = _summary(root)
    (restart,) = _by(summary, "restart")
    assert restart.severity == "error"
    assert "state/0/1/6.delta" in restart.files
    (unreadable,) = _by(summary, "unreadable")
    assert unreadable.severity == "error"
    assert "state/0/1/6.delta" in unreadable.files
    assert summary.verdicts[0].severity == "error"
    assert main(["summary", str(root)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("ERROR")
    assert "state/0/1/6.delta" in out


def test_quick_does_not_claim_every_state_file_was_decoded(checkpoint: Any) -> None:
    (unreadable,) = _by(_summary(checkpoint("join") / "checkpoint", decode_files=False), "unreadable")
    assert unreadable.severity == "ok"
    assert "not decoded" in unreadable.text


def test_event_logs_name_the_slowest_batch(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.eventlog_gen import get_event_log

    folder = get_event_log("plain")
    logs = [str(folder / "events")]
    summary = _summary(folder / "checkpoint", event_logs=logs)
    reported: dict[int, dict[str, Any]] = {}
    for run in json.loads((folder / "progress.json").read_text()):
        for p in run:
            reported[p["batchId"]] = p
    slowest = max(reported, key=lambda b: (reported[b]["durationMs"]["triggerExecution"], -b))
    (slow,) = _by(summary, "slow_batches")
    assert slow.batch_id == slowest
    assert slow.value == reported[slowest]["durationMs"]["triggerExecution"]
    (dropped,) = _by(summary, "dropped_rows")
    total = sum(
        op.get("numRowsDroppedByWatermark") or 0
        for p in reported.values()
        for op in p.get("stateOperators", [])
    )
    assert dropped.value == total
    assert not _by(summary, "event_logs")


def test_the_report_starts_with_the_same_verdicts(checkpoint: Any, tmp_path: Path) -> None:
    import html
    import re

    root = checkpoint("pandas_state_processing") / "checkpoint"
    out = tmp_path / "report.html"
    assert main(["report", str(root), "-o", str(out)]) == 0
    page = out.read_text()
    sections = re.findall(r'<section id="([a-z]+)"', page)
    assert sections[:2] == ["verdicts", "overview"]
    verdicts = page[page.index('<section id="verdicts">') : page.index('<section id="overview">')]
    want = _summary(root).verdicts
    shown = re.findall(r'<li><span class="badge ([a-z]+)">[A-Z]+</span>(.*?) <a href="#([a-z]+)">', verdicts)
    assert [(sev, html.unescape(text)) for sev, text, _ in shown] == [(v.severity, v.text) for v in want]
    for _, _, anchor in shown:
        assert f'<section id="{anchor}">' in page


def test_a_watermark_that_stops_moving_is_stuck_since_its_last_move(checkpoint: Any, tmp_path: Path) -> None:
    """A copy whose last three batches kept the watermark of batch 2 (offsets edited as a stalled
    source leaves them): stuck since batch 2, three batches without a move."""
    folder = checkpoint("window_agg_watermark")
    expected = json.loads((folder / "expected.json").read_text())
    root = tmp_path / "ckpt"
    shutil.copytree(folder / "checkpoint", root)
    batches = sorted(expected["batches"])
    held = expected["batch_watermark_ms"][str(batches[2])]
    assert len({expected["batch_watermark_ms"][str(b)] for b in batches[2:]}) > 1  # it moved before the edit
    for b in batches[3:]:
        path = root / "offsets" / str(b)
        lines = path.read_text().split("\n")
        meta = json.loads(lines[1])
        meta["batchWatermarkMs"] = held
        lines[1] = json.dumps(meta, separators=(",", ":"))
        path.write_text("\n".join(lines))
    (wm,) = _by(_summary(root), "watermark")
    assert wm.severity == "warning"
    assert (wm.batch_id, wm.value) == (batches[2], float(len(batches) - 3))
    assert f"since batch {batches[2]}" in wm.text
    (wm,) = _by(_summary(folder / "checkpoint"), "watermark")
    assert wm.severity == "ok" and wm.batch_id == batches[-1]


@pytest.mark.parametrize("name", ["sample", "agg_many_partitions", *SCENARIOS])
def test_first_verdicts_count_what_spark_reads_at_the_latest_batch(
    checkpoint: Any, spark: Any, name: str
) -> None:
    """The overview's first verdicts (from the latest versions' files only): every store's rows per
    partition are the rows Spark's ``statestore`` reader counts after the last committed batch, the
    restart, commit and watermark verdicts are those of all the checks, and the rows now are those the
    growth over every version ends with (for transformWithState's state variables, which Spark reads
    one by one, those are the comparison)."""
    from tests import oracle

    root = _root(checkpoint, name)
    ckpt = open_checkpoint(str(root))
    first = run_to_end(iter_first_look(ckpt))
    full = _summary(root)
    assert not first.complete and full.complete
    assert first.growth is not None and full.growth is not None
    last = max(oracle.committed_batches(root))
    counted = 0
    for g in first.growth.stores:
        if g.skipped:
            assert "column families" in g.skipped or "RocksDB" in g.skipped, g.skipped
            continue
        assert g.versions == [last + 1]
        if g.kind != "transformWithState":  # its state variables: compared with every version's walk
            spark_rows = oracle.row_counts(spark, root, g.operator_id, g.store_name, [last])
            assert {p: n for p, n in g.latest_rows().items() if n} == {
                p: n for (p, _), n in spark_rows.items()
            }
        (whole,) = [
            s for s in full.growth.stores if (s.operator_id, s.store_name) == (g.operator_id, g.store_name)
        ]
        assert g.latest_rows() == whole.latest_rows()
        assert g.total_state_bytes()[-1] == whole.total_state_bytes()[-1]
        counted += 1
    assert counted
    for check in ("restart", "commit", "watermark"):
        assert [v.to_json() for v in _by(first, check)] == [v.to_json() for v in _by(full, check)]
    assert not _by(first, "expired") and not _by(first, "unreadable")
    for v in _by(first, "growth"):
        (same,) = [
            w for w in _by(full, "growth") if (w.operator_id, w.store_name) == (v.operator_id, v.store_name)
        ]
        assert v.value == same.value and v.text.split(";")[0] == same.text.split(";")[0]


def test_first_verdicts_name_a_damaged_file_a_restart_loads_and_not_older_ones(
    checkpoint: Any, tmp_path: Path
) -> None:
    """Damage in a delta after the newest snapshot fails the first restart verdict, naming the file;
    damage only in a delta the newest snapshot replaces does not (a restart never loads it), and the
    check of every file then names it."""
    source = checkpoint("agg_many_partitions") / "checkpoint"
    for victim, loaded in (("state/0/1/8.delta", True), ("state/0/1/2.delta", False)):
        root = tmp_path / victim.replace("/", "_")
        shutil.copytree(source, root)
        data = (root / victim).read_bytes()
        (root / victim).write_bytes(data[: len(data) // 2])
        first = run_to_end(iter_first_look(open_checkpoint(str(root))))
        (restart,) = _by(first, "restart")
        (unreadable,) = _by(_summary(root), "unreadable")
        assert unreadable.severity == "error" and any(f.endswith(victim) for f in unreadable.files)
        if loaded:
            assert restart.severity == "error" and restart.files and restart.files[0].endswith(victim)
            assert victim in restart.text and "cannot be read" in restart.text
            (first_unreadable,) = _by(first, "unreadable")
            assert first_unreadable.severity == "error"
        else:
            assert restart.severity == "ok" and not first.problems


def test_summary_latest_prints_the_first_verdicts_and_says_what_it_left(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``statelens summary --latest``: the first verdicts, exit 1 when a file a restart loads is damaged
    (named), ``complete`` false in JSON, a line saying what was not checked; options it cannot honour
    are a usage error (exit 2)."""
    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_many_partitions") / "checkpoint", root)
    assert main(["summary", str(root), "--latest"]) == 0
    text = capsys.readouterr().out
    assert "Restart should succeed" in text and "Only each store's latest version was read" in text
    victim = root / "state/0/2/7.delta"
    victim.write_bytes(victim.read_bytes()[:10])
    assert main(["summary", str(root), "--latest", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] is False and doc["exit_code"] == 1
    restart = next(v for v in doc["verdicts"] if v["check"] == "restart")
    assert restart["severity"] == "error" and restart["files"][0].endswith("state/0/2/7.delta")
    assert doc["verdicts"][0]["severity"] == "error"
    for extra in (["--quick"], ["--event-log", str(tmp_path)], ["--backend", "spark"]):
        with pytest.raises(SystemExit) as usage:
            main(["summary", str(root), "--latest", *extra])
        assert usage.value.code == 2 and "--latest reads the files" in capsys.readouterr().err

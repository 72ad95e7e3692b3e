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
from statelens.app.analysis.summary import SEVERITIES, Summary, iter_summary
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

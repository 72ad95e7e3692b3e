"""The batch timeline on real PySpark checkpoints (and copies edited one way each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.timeline import iter_timeline
from statelens.app.cli import main
from statelens.readers.checkpoint import open_checkpoint

pytestmark = pytest.mark.spark


def _timeline(path: Path):
    return run_to_end(iter_timeline(open_checkpoint(str(path))))


def test_join_timeline_matches_the_logs_and_the_input_files(checkpoint):
    folder = checkpoint("join")
    expected = json.loads((folder / "expected.json").read_text())
    tl = _timeline(folder / "checkpoint")
    assert not tl.problems
    assert [r.batch_id for r in tl.rows] == expected["batches"]
    ts = expected["batch_timestamp_ms"]
    wm = expected["batch_watermark_ms"]
    files_per_side = len(list((folder / "input" / "left").glob("*.json")))
    for r in tl.rows:
        b = str(r.batch_id)
        assert r.timestamp_ms == ts[b]
        assert r.watermark_ms == wm[b]
        assert r.committed
        assert r.next_watermark_ms == expected["next_watermark_ms"][b]
        if r.batch_id > 0:
            assert r.interval_ms == ts[b] - ts[str(r.batch_id - 1)]
            prev_wm = wm[str(r.batch_id - 1)]
            assert r.watermark_move_ms == ((wm[b] - prev_wm) if prev_wm else None)
        assert [s.kind for s in r.sources] == ["file", "file"]
    # One input file per side per batch (maxFilesPerTrigger=1); later batches read nothing new.
    assert sum(r.sources[0].files for r in tl.rows) == files_per_side
    assert sum(r.sources[1].files for r in tl.rows) == files_per_side
    assert all(s.files in (0, 1) for r in tl.rows for s in r.sources)
    assert tl.median_interval_ms() > 0


def test_uncommitted_batch_is_marked(checkpoint, capsys):
    folder = checkpoint("uncommitted")
    expected = json.loads((folder / "expected.json").read_text())
    tl = _timeline(folder / "checkpoint")
    assert [r.batch_id for r in tl.rows if not r.committed] == [expected["uncommitted_batch"]]
    assert main(["timeline", str(folder / "checkpoint")]) == 0
    out = capsys.readouterr().out
    assert "NO" in out
    assert "median interval" in out


def _rewrite_offsets(path: Path, meta_update: dict | None = None, sources: list[str] | None = None) -> None:
    lines = path.read_text().split("\n")
    if meta_update:
        meta = json.loads(lines[1])
        for k, v in meta_update.items():
            if isinstance(v, dict):
                meta.setdefault(k, {}).update(v)
            else:
                meta[k] = v
        lines[1] = json.dumps(meta, separators=(",", ":"))
    if sources is not None:
        lines = lines[:2] + sources
    path.write_text("\n".join(lines))


def test_conf_change_and_kafka_record_counts(checkpoint, tmp_path, capsys):
    folder = checkpoint("agg_count")
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", ckpt)
    # Turn the file source into a Kafka source: initial offsets, then end offsets per batch.
    ends = [
        {"t": {"0": 10, "1": 5}},
        {"t": {"0": 14, "1": 5}},
        {"t": {"0": 20, "1": 9}},
        {"t": {"0": 20, "1": 9}},
    ]
    for b, end in enumerate(ends):
        _rewrite_offsets(ckpt / "offsets" / str(b), sources=[json.dumps(end, separators=(",", ":"))])
    shutil.rmtree(ckpt / "sources" / "0")
    (ckpt / "sources" / "0").mkdir()
    (ckpt / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + b'{"t":{"0":4,"1":0}}')
    _rewrite_offsets(ckpt / "offsets" / "2", {"conf": {"spark.sql.shuffle.partitions": "7"}})
    tl = _timeline(ckpt)
    assert not tl.problems
    assert [r.sources[0].records for r in tl.rows] == [11, 4, 10, 0]
    assert tl.rows[2].sources[0].per_partition == {"t/0": 6, "t/1": 4}
    assert tl.rows[2].conf_changes == {"spark.sql.shuffle.partitions": ("2", "7")}
    assert tl.rows[3].conf_changes == {"spark.sql.shuffle.partitions": ("7", "2")}
    assert not tl.rows[1].conf_changes
    assert main(["timeline", str(ckpt), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batches"][0]["sources"][0]["records"] == 11
    assert doc["batches"][2]["conf_changes"]["spark.sql.shuffle.partitions"] == {"before": "2", "after": "7"}

"""statelens reads every generated checkpoint as the generator recorded it.

The generator (``tests/spark_checkpoints.py``, ``_describe``) writes ``expected.json`` from plain folder
listings and Spark's JSON log lines, never from statelens: the batch ids of ``offsets/`` and
``commits/``, each batch's watermark and timestamp, each commit's next watermark, the shuffle
partitions and codec of the query's conf, the snapshot, delta and zip files. statelens computes the
same facts through its own filesystem layer and log parsers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from statelens.readers.checkpoint import open_checkpoint
from tests.spark_checkpoints import SCENARIOS

pytestmark = pytest.mark.spark

STATE_FILE = re.compile(r"^\d+\.(delta|snapshot)$")
CODEC_KEY = "spark.sql.streaming.stateStore.compression.codec"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_batches_watermarks_and_files_are_the_generators(checkpoint: Any, name: str) -> None:
    folder = checkpoint(name)
    exp = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    planned = [b for b in ckpt.batches if b.offsets is not None]
    committed = [b for b in ckpt.batches if b.commit is not None]
    assert [b.batch_id for b in planned] == exp["batches"]
    assert [b.batch_id for b in committed] == exp["committed_batches"]
    assert {str(b.batch_id): b.offsets.watermark_ms for b in planned} == exp["batch_watermark_ms"]
    assert {str(b.batch_id): b.offsets.timestamp_ms for b in planned} == exp["batch_timestamp_ms"]
    assert {str(b.batch_id): b.commit.next_watermark_ms for b in committed} == exp["next_watermark_ms"]
    assert ckpt.conf["spark.sql.shuffle.partitions"] == str(exp["num_partitions"])
    assert ckpt.conf.get(CODEC_KEY, "lz4") == exp["codec"]
    state = [e.path for e in ckpt.fs.walk_files("state")]
    names = [p.rsplit("/", 1)[-1] for p in state]
    assert (
        sorted(
            p for p, n in zip(state, names, strict=True) if STATE_FILE.match(n) and n.endswith(".snapshot")
        )
        == (exp["snapshot_files"])
    )
    assert sum(1 for n in names if STATE_FILE.match(n) and n.endswith(".delta")) == exp["delta_files"]
    if "zip_files" in exp:
        assert sorted(p for p in state if p.endswith(".zip")) == exp["zip_files"]

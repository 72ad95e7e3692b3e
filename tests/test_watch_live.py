"""``statelens watch --jsonl`` on a live query (``tests/live_query.py``), across a stop and a restart with
the leak fixed.

Every batch committed while watch runs is reported exactly once, in order; each store's ``rows`` is
the ``numRowsTotal`` the query reported for that batch (the last report of a batch a restart re-ran),
and ``zombies`` what Spark's ``statestore`` source holds at that version with its timeout fired; the
zombies it reports stop growing after the fix batch (the new run id's first batch in the progress the
query wrote).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis.runs import around
from tests.live_query import REPO, LiveQuery
from tests.oracle import read_state

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.live]

LEAK_UNTIL = 4  # the leaking run stops after this batch...
FIXED_UNTIL = 9  # ...the fixed run after this one, and watch with it


def _batch_ts(ckpt: Path, batch: int) -> int:
    """``batchTimestampMs`` of ``offsets/<batch>`` (line 2, docs/format.md §2.2)."""
    return int(json.loads((ckpt / "offsets" / str(batch)).read_text().split("\n")[1])["batchTimestampMs"])


def test_watch_follows_a_live_query_through_its_fix(tmp_path: Path, spark: Any) -> None:
    live = LiveQuery(tmp_path / "live")
    live.start(until_batch=LEAK_UNTIL)
    live.wait_for_batch("agg", 0)
    live.wait_for_batch("leak", 0)
    watches = {
        name: subprocess.Popen(
            [sys.executable, "-m", "statelens.app.launcher", "watch", str(live.checkpoint(name)), "--jsonl"]
            + ["--from-batch", "0", "--until-batch", str(FIXED_UNTIL), "--interval", "0.5"]
            + ["--event-log", str(live.progress_path(name))],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("agg", "leak")
    }
    try:
        assert live.wait() == 0, live.log()[-3000:]
        live.start(fixed=True, until_batch=FIXED_UNTIL)
        assert live.wait() == 0, live.log()[-3000:]
        outputs = {name: w.communicate(timeout=300) for name, w in watches.items()}
    finally:
        for w in watches.values():
            if w.poll() is None:
                w.kill()
    for name, (out, err) in outputs.items():
        assert watches[name].returncode in (0, 1), err[-3000:]
        reports = [json.loads(line) for line in out.splitlines() if line.strip()]
        # Every batch, once, in order: the checkpoint was watched from batch 0 on.
        assert [r["batch_id"] for r in reports] == list(range(FIXED_UNTIL + 1)), err[-3000:]
        reported = {p["batchId"]: p for p in live.progress(name)}
        for r in reports:
            (store,) = r["stores"]
            assert store["rows"] == reported[r["batch_id"]]["stateOperators"][0]["numRowsTotal"], r
        if name == "leak":
            second = live.runs(name)[1]
            fix = min(p["batchId"] for p in live.progress(name) if p["runId"] == second)
            ckpt = live.checkpoint(name)
            zombies = []
            for b in range(FIXED_UNTIL + 1):
                threshold = _batch_ts(ckpt, b)
                state = read_state(spark, ckpt, batch_id=b)
                zombies.append(sum(1 for _p, _k, (_s, timeout) in state if 0 <= timeout < threshold))
            watched = [r["stores"][0]["zombies"] for r in reports]
            assert watched == zombies, (watched, zombies, fix, err[-2000:])
            assert zombies[fix - 1] > zombies[0]  # rising before the fix...
            assert zombies[fix:] == [0] * (FIXED_UNTIL + 1 - fix)  # ...none after
            # Before and after the fix, from what watch reported (batch b's report is version b + 1).
            change = around({r["batch_id"] + 1: r["stores"][0]["zombies"] for r in reports}, fix)
            assert change.before.per_batch == (zombies[fix - 1] - zombies[0]) / (fix - 1)
            assert (change.after.per_batch, change.stopped) == (0.0, True)

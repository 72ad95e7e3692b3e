"""Runs of cached checkpoints (no live query): operator metadata v2 files, one run, a chosen batch.

The live query restarted with its fix is in ``tests/test_runs_live.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from statelens.app.analysis import runs as runs_mod
from statelens.app.analysis.runs import BeforeAfter, Rate, around, describe_change
from statelens.readers.checkpoint import open_checkpoint

pytestmark = pytest.mark.spark


def test_a_transform_with_state_restart_is_named_by_its_operator_metadata() -> None:
    """The restart matrix's transformWithStateInPandas checkpoint: its generator runs batches 0 to
    BATCHES - 2 in one query and the last batch in a second (``_write_kind``, ``wait="zip"``); Spark
    wrote ``_metadata/v2/<b>`` at each run's first batch."""
    from tests.restart_matrix import BATCHES, KINDS, cells

    assert KINDS["tws"]["wait"]  # the kind whose last batch runs on its own
    kind = cells()[0].path.parents[3] / "kinds" / "tws" / "checkpoint"
    ckpt = open_checkpoint(str(kind))
    runs = runs_mod.find_runs(ckpt)
    assert [(r.first_batch, r.last_batch, r.evidence) for r in runs] == [
        (0, BATCHES - 2, "first batch"),
        (BATCHES - 1, BATCHES - 1, "operator metadata"),
    ]
    assert runs_mod.fix_batch_of(runs) == BATCHES - 1
    assert runs_mod.fix_margin(runs, BATCHES - 1) == 0
    # The gap there is too short for the batch times alone to tell (a restart inside one process).
    stamps = {
        b: json.loads((kind / "offsets" / str(b)).read_text().split("\n")[1])["batchTimestampMs"]
        for b in (BATCHES - 2, BATCHES - 1)
    }
    assert stamps[BATCHES - 1] - stamps[BATCHES - 2] < runs_mod.GAP_MIN_MS
    assert runs_mod.describe_fix(runs, BATCHES - 1).endswith(
        f"run 2 of 2 started there (its operator metadata file state/<op>/_metadata/v2/{BATCHES - 1})"
    )


@pytest.mark.parametrize("name", ["rocks_tws", "agg_count", "pandas_state_event"])
def test_one_availablenow_run_is_one_run(checkpoint: Callable[[str], Path], name: str) -> None:
    """Scenarios written by one ``availableNow`` query: one run, no fix unless one is chosen."""
    folder = checkpoint(name)
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    runs = runs_mod.find_runs(ckpt)
    batches = expected["batches"]
    assert [(r.first_batch, r.last_batch, r.evidence) for r in runs] == [(0, max(batches), "first batch")]
    assert runs_mod.fix_batch_of(runs) is None
    chosen = runs_mod.find_runs(ckpt, fix_batch=1)
    assert [(r.first_batch, r.evidence) for r in chosen] == [(0, "first batch"), (1, "chosen")]
    assert runs_mod.fix_view(chosen, {(0, "default"): {1: 2, 2: 5, 3: 5}}, "rows")[:2] == (
        1,
        "Fix at batch 1 (state version 2 on): chosen",
    )


def test_around_and_its_text() -> None:
    """The arithmetic: batch F writes version F + 1; before is up to version F (F - margin)."""
    series = {1: 0, 2: 4, 3: 8, 4: 12, 5: 1, 6: 1, 7: 1}
    change = around(series, 4)
    assert change == BeforeAfter(Rate(1, 4, 0, 12), Rate(5, 7, 1, 1), -11)
    assert (change.before.per_batch, change.after.per_batch, change.stopped) == (4.0, 0.0, True)
    assert (
        describe_change(change, "expired keys")
        == "expired keys +4.0 per batch before, 0 after (-11 at the fix)"
    )
    margin = around(series, 4, margin=1)
    assert margin == BeforeAfter(Rate(1, 3, 0, 8), Rate(5, 7, 1, 1), -7)
    rising = around({1: 0, 2: 1, 3: 3, 4: 5}, 2)
    assert (rising.after.per_batch, rising.stopped) == (2.0, False)
    assert around({1: 3}, 0).before.per_batch is None


def test_the_api_gives_the_runs() -> None:
    """``statelens.open(...).runs()``: the same runs as find_runs, on the transformWithState restart."""
    import statelens
    from tests.restart_matrix import BATCHES, cells

    kind = cells()[0].path.parents[3] / "kinds" / "tws" / "checkpoint"
    with statelens.open(str(kind)) as ckpt:
        assert [(r.first_batch, r.evidence) for r in ckpt.runs()] == [
            (0, "first batch"),
            (BATCHES - 1, "operator metadata"),
        ]

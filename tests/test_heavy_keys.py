"""The heaviest keys (``growth --top-keys``, app.analysis.heavy) on real checkpoints written by PySpark.

* The ranking is the one a brute-force weighing of every raw entry gives, and every key it names is a
  key Spark's own ``statestore`` reader returns at that batch.
* For list and map state variables of transformWithState, ``elements`` equals the rows Spark's reader
  returns for that grouping key (one per list element, one per map entry).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.heavy import iter_top_keys
from statelens.app.cli import main
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.values import row_to_json
from tests import oracle

pytestmark = pytest.mark.spark


def _weigh(ckpt: Any, n: int) -> dict[str, Any]:
    stores, problems = run_to_end(iter_top_keys(ckpt, n))
    assert problems == []
    return {s.store_name: s for s in stores}


@pytest.mark.parametrize("scenario", ["agg_many_partitions", "pandas_state_event", "rocks_agg_changelog"])
def test_ranking_equals_brute_force_and_keys_are_sparks(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    n = 4
    (store,) = _weigh(ckpt, n).values()
    reader = ckpt.store_reader(0)
    weighed = 0
    everything: list[tuple[int, int, Any]] = []
    for pid in reader.partition_ids():
        if store.version not in reader.versions(pid):
            continue
        raw = reader.read_raw(pid, store.version)
        decoded = reader.decode_pairs(list(raw.items()), "brute force")
        sizes = [len(k) + len(v) for k, v in raw.items()]
        mine = [
            (len(k) + len(v), row_to_json(key, reader.schema.key_schema))
            for (k, v), (key, _) in zip(raw.items(), decoded, strict=True)
        ]
        everything += [(pid, b, key) for b, key in mine]
        weighed += len(raw)
        got = store.by_partition.get(pid, [])
        assert [h.bytes for h in got] == sorted(sizes, reverse=True)[:n], (scenario, pid)
        for h in got:  # each named key weighs what its raw entry weighs
            assert (h.bytes, h.key) in mine and h.elements is None
    assert store.keys == weighed > 0
    assert [h.bytes for h in store.overall] == sorted((b for _, b, _ in everything), reverse=True)[:n]
    spark_keys = {
        (pid, json.dumps(row_to_json(key, reader.schema.key_schema)))
        for pid, key, _ in oracle.read_state(spark, root, batch_id=store.version - 1)
    }
    assert {(h.partition_id, json.dumps(h.key)) for h in store.overall} <= spark_keys


def test_list_and_map_state_are_weighed_per_grouping_key(checkpoint: Any, spark: Any) -> None:
    root = checkpoint("rocks_tws_timers") / "checkpoint"
    ckpt = open_checkpoint(str(root))
    stores = _weigh(ckpt, 50)
    assert stores["ttll"].grouping == "list" and stores["ttlm"].grouping == "map"
    assert stores["cnt"].grouping is None
    for var in ("ttll", "ttlm"):
        s = stores[var]
        df = (
            spark.read.format("statestore")
            .option("operatorId", "0")
            .option("stateVarName", var)
            .option("batchId", str(s.version - 1))
            .load(str(root))
        )
        per_key = Counter((r["partition_id"], r["key"]["key"]) for r in df.collect())
        assert per_key, var
        got = {
            (h.partition_id, h.key[0][1] if var == "ttll" else h.key[0][1][0][1]): h.elements
            for h in s.overall
        }
        assert got == dict(per_key), var
        assert s.keys == len(per_key)
        assert all(h.bytes > 0 for h in s.overall)
        assert [h.bytes for h in s.overall] == sorted((h.bytes for h in s.overall), reverse=True)


def test_cli_growth_top_keys(checkpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(checkpoint("agg_many_partitions") / "checkpoint")
    assert main(["growth", root, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["growth", root, "--json", "--top-keys", "3"]) == 0
    docs = json.loads(capsys.readouterr().out)
    rollups = [d for d in docs if d["partition_id"] is None]
    assert len(docs) == len(plain) + 1 and len(rollups) == 1
    (rollup,) = rollups
    latest = [d for d in docs if d["partition_id"] is not None and d["version"] == rollup["version"]]
    assert rollup["rows"] == sum(d["rows"] for d in latest) == rollup["keys"]
    assert all(len(d["top_keys"]) == min(3, d["rows"]) for d in latest)
    heaviest = sorted((k for d in latest for k in d["top_keys"]), key=lambda k: -k["bytes"])[:3]
    assert [k["bytes"] for k in rollup["top_keys"]] == [k["bytes"] for k in heaviest]
    assert set(rollup["top_keys"][0]) == {"partition", "key", "bytes", "elements"}
    assert [
        {k: v for k, v in d.items() if k != "top_keys"} for d in docs if d["partition_id"] is not None
    ] == plain

    assert main(["growth", root, "--top-keys", "2"]) == 0
    text = capsys.readouterr().out
    assert f"Heaviest keys of operator 0 default at version {rollup['version']}" in text

    with pytest.raises(SystemExit) as usage:
        main(["growth", root, "--top-keys", "0"])
    assert usage.value.code == 2
    assert "--top-keys must be at least 1" in capsys.readouterr().err


def test_a_damaged_partition_is_reported_and_the_rest_weighed(checkpoint: Any, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_many_partitions") / "checkpoint", root)
    ckpt = open_checkpoint(str(root))
    reader = ckpt.store_reader(0)
    pid = reader.partition_ids()[0]
    latest = reader.versions(pid)[-1]
    victim = reader.partitions[pid].deltas[latest].path  # relative to the checkpoint
    data = (root / victim).read_bytes()
    (root / victim).write_bytes(data[: len(data) - 7])
    stores, problems = run_to_end(iter_top_keys(open_checkpoint(str(root)), 2))
    assert problems and all(str(p.path).endswith(victim) for p in problems), [str(p) for p in problems]
    assert (
        pid not in stores[0].by_partition and len(stores[0].by_partition) == len(reader.partition_ids()) - 1
    )


@pytest.mark.parametrize(
    ("scenario", "damaged"),
    [
        ("agg_many_partitions", False),
        ("agg_many_partitions", True),
        ("pandas_state_event", False),
        ("pandas_state_event", True),
        ("rocks_agg_changelog", False),
    ],
)
def test_growth_weighs_on_its_walk_what_a_read_of_the_version_weighs(
    scenario: str, damaged: bool, checkpoint: Any, tmp_path: Path
) -> None:
    """The app's growth job weighs the heaviest keys on its own walk (no second read of the state): the
    answer is the separate weighing's, also when the newest file of a partition is cut."""
    import shutil

    from statelens.app.analysis.growth import iter_growth

    root = checkpoint(scenario) / "checkpoint"
    if damaged:
        shutil.copytree(root, tmp_path / "ckpt")
        root = tmp_path / "ckpt"
        reader = open_checkpoint(str(root)).store_reader(0)
        pid = reader.partition_ids()[-1]
        files = reader.partitions[pid]
        victim = files.deltas[max(files.deltas)].path
        data = (root / victim).read_bytes()
        (root / victim).write_bytes(data[: len(data) - 7])
    ckpt = open_checkpoint(str(root))
    growth = run_to_end(iter_growth(ckpt, top_keys=3))
    separate, problems = run_to_end(iter_top_keys(ckpt, 3))
    assert bool(problems) == damaged and bool(growth.problems) == damaged
    by_store = {(s.operator_id, s.store_name): s for s in separate}
    weighed = [g for g in growth.stores if g.top_keys is not None]
    assert weighed, "growth weighed no store"
    for g in weighed:
        assert g.top_keys.to_json() == by_store[(g.operator_id, g.store_name)].to_json()  # type: ignore[union-attr]
        assert g.top_keys.overall and g.top_keys.keys == sum(  # type: ignore[union-attr]
            per[g.top_keys.version]
            for per in g.rows.values()
            if g.top_keys.version in per  # type: ignore[union-attr]
        )


def test_report_lists_each_stores_heaviest_keys_escaped(checkpoint: Any, tmp_path: Path) -> None:
    from statelens.app.analysis.doctor import iter_doctor
    from statelens.app.analysis.expired import iter_expired
    from statelens.app.analysis.growth import iter_growth
    from statelens.app.analysis.heavy import HeavyKey
    from statelens.app.analysis.report import render_html
    from statelens.app.analysis.timeline import iter_timeline
    from statelens.readers.values import JsonObject

    root = checkpoint("pandas_state_event") / "checkpoint"
    out = tmp_path / "report.html"
    assert main(["report", str(root), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    ckpt = open_checkpoint(str(root))
    (store,) = _weigh(ckpt, 10).values()
    assert f"Heaviest keys at version {store.version} (of {store.keys:,} keys" in text
    for h in store.overall:
        assert f"<td>{h.key_text}</td>" in text

    evil = "<script>alert('x')</script>"
    store.overall.insert(0, HeavyKey(0, JsonObject([("key", evil)]), 10**9, None))
    html = render_html(
        ckpt,
        run_to_end(iter_timeline(ckpt)),
        run_to_end(iter_growth(ckpt)),
        run_to_end(iter_expired(ckpt)),
        run_to_end(iter_doctor(ckpt, decode_files=False)),
        heavy=[store],
    )
    assert evil not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html

"""One answer: on real checkpoints and on damaged copies of them (a delta, changelog or snapshot zip cut
short or with a flipped byte), ``rows``, ``rows --changes``, ``growth``, ``sql`` (``state`` and
``changes``), ``expired``, ``doctor`` and the Python API agree on the rows of every partition at the
latest version (and ``sql``'s ``changes`` with ``rows --changes``), on which partitions
cannot be read, and on the exit code; every command that met the damaged file names it and exits 1, and
no partition it made unreadable is answered as 0 rows or left out silently. ``prune`` refuses (exit 2,
nothing written, the file named) exactly where ``doctor`` predicts the restart fails (exit 2).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import statelens
from statelens.app.cli import main

pytestmark = pytest.mark.spark

#: (scenario, damage): which file of partition 0 is damaged and how.
CASES = [
    ("pandas_state_processing", None),
    ("pandas_state_processing", "truncate-latest-delta"),
    ("pandas_state_processing", "flip-middle-delta"),
    ("rocks_agg", None),
    ("rocks_agg", "truncate-latest-zip"),
    ("rocks_agg_changelog", "truncate-latest-zip"),
    ("rocks_agg_changelog", "truncate-latest-changelog"),
]


def _version(p: Path) -> int:
    return int(p.name.split(".")[0].split("_")[0])


def _damage(root: Path, how: str) -> str:
    """Damage one file of partition 0 of operator 0; returns its path relative to the checkpoint."""
    folder = root / "state" / "0" / "0"
    kind, which, suffix = how.split("-")
    files = sorted(folder.glob(f"*.{suffix}"), key=_version)
    assert len(files) >= 3, files
    target = files[-1] if which == "latest" else files[len(files) // 2]
    data = bytearray(target.read_bytes())
    if kind == "truncate":
        data = data[: len(data) // 2]
    else:  # flip one byte inside the compressed body (past the codec's header)
        data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    return target.relative_to(root).as_posix()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _answers(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    c = str(root)
    got: dict[str, Any] = {}

    code, out, err = _run(capsys, "rows", c, "--operator", "0", "--format", "jsonl")
    got["rows"] = (code, Counter(json.loads(line)["partition"] for line in out.splitlines()), err)

    code, out, err = _run(capsys, "rows", c, "--operator", "0", "--changes", "--format", "jsonl")
    got["changes"] = (code, Counter(json.loads(line)["partition"] for line in out.splitlines()), err)

    code, out, err = _run(capsys, "growth", c, "--json")
    series = [r for r in json.loads(out) if r["operator_id"] == 0]
    latest: dict[int, tuple[int, int]] = {}
    for r in series:
        if r["partition_id"] not in latest or r["version"] > latest[r["partition_id"]][0]:
            latest[r["partition_id"]] = (r["version"], r["rows"])
    got["growth"] = (code, latest, err)

    q = "SELECT partition_id, count(*) AS n FROM state GROUP BY ALL"
    code, out, err = _run(capsys, "sql", c, q, "--operator", "0", "--json")
    got["sql"] = (code, Counter({r["partition_id"]: r["n"] for r in json.loads(out)}), err)

    q = "SELECT partition_id, count(*) AS n FROM changes GROUP BY ALL"
    code, out, err = _run(capsys, "sql", c, q, "--operator", "0", "--json")
    got["sql changes"] = (code, Counter({r["partition_id"]: r["n"] for r in json.loads(out)}), err)

    code, _, err = _run(capsys, "expired", c)
    got["expired"] = (code, None, err)
    code, out, err = _run(capsys, "doctor", c)
    got["doctor"] = (code, out, err)

    scan = statelens.open(c).state(0)
    table = scan.to_arrow()
    got["api"] = (
        Counter(table.column("partition").to_pylist()),
        {u.partition_id for u in scan.unreadable},
        [str(p) for p in scan.problems],
    )
    live = statelens.open(c).state(0)
    got["api live"] = (
        Counter({pid: len(records[1]) for pid, _, records in live.iter_live()}),
        {u.partition_id for u in live.unreadable},
    )
    stats = statelens.open(c).stats(0)
    counted = stats.to_arrow().to_pylist()
    newest: dict[int, tuple[int, int]] = {}
    for r in counted:
        if r["partition"] not in newest or r["version"] > newest[r["partition"]][0]:
            newest[r["partition"]] = (r["version"], r["rows"])
    got["api stats"] = (newest, {u.partition_id for u in stats.unreadable}, [str(p) for p in stats.problems])
    return got


@pytest.mark.parametrize(("scenario", "damage"), CASES, ids=[f"{s}-{d or 'intact'}" for s, d in CASES])
def test_every_command_gives_the_same_answer(
    scenario: str, damage: str | None, checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "checkpoint"
    shutil.copytree(Path(checkpoint(scenario)) / "checkpoint", root)
    intact = _answers(root, capsys) if damage is not None else None
    bad = _damage(root, damage) if damage is not None else None
    got = _answers(root, capsys)
    pruned = tmp_path / "pruned"
    prune_code, _, prune_err = _run(
        capsys, "prune", str(root), "--where", "true", "--out", str(pruned), "--apply"
    )
    # an error in a file a restart loads (the copy would carry it), or a newest snapshot only auto snapshot
    # repair gets past (prune reads that snapshot itself, without repair)
    if got["doctor"][0] == 2 or "restart_snapshot_repair" in got["doctor"][1]:
        assert prune_code == 2 and not pruned.exists() and bad is not None and bad in prune_err, prune_err
    else:
        assert prune_code == 0 and pruned.is_dir(), prune_err

    rows_code, rows, rows_err = got["rows"]
    sql_code, sql, sql_err = got["sql"]
    growth_code, latest, growth_err = got["growth"]
    api_rows, api_unreadable, api_problems = got["api"]
    # The rows of every partition at its latest version: the same in every reader of state.
    assert rows == sql == api_rows == got["api live"][0], (rows, sql, api_rows, got["api live"][0])
    assert got["api live"][1] == api_unreadable  # the stored records: the same partitions unreadable
    # The change feed: the same records per partition, the same exit code, the same file named.
    changes_code, changes, changes_err = got["changes"]
    sql_changes_code, sql_changes, sql_changes_err = got["sql changes"]
    assert (sql_changes_code, sql_changes) == (changes_code, changes)
    assert sum(changes.values()) > 0
    assert sum(rows.values()) > 0
    growth_latest = {p: n for p, (_, n) in latest.items() if p in rows}
    assert growth_latest == dict(rows)
    # The API's stats scan counts what growth counts, and names the same damage.
    stats_latest, stats_unreadable, stats_problems = got["api stats"]
    assert stats_latest == latest
    assert (growth_code == 1) == bool(stats_problems)
    assert all(p.split(": ")[0] in growth_err for p in stats_problems)

    if bad is None:
        assert rows_code == sql_code == growth_code == 0
        assert got["changes"][0] == got["expired"][0] == 0
        assert not api_unreadable and not api_problems
        return

    assert intact is not None
    if bad.endswith(".changelog") and (root / bad.replace(".changelog", ".zip")).is_file():
        # That version loads from its own zip, as Spark loads it: every reader gives its rows; the walk
        # that replays changelogs (growth) still meets the damaged one, says so and exits 1.
        assert (rows_code, sql_code, rows) == (0, 0, intact["rows"][1]) and not api_unreadable
        assert growth_code == 1 and bad in growth_err and latest == intact["growth"][1]
        assert got["changes"][0] == 1 and bad in got["changes"][2] and bad in sql_changes_err
        return
    # Partition 0 cannot be read at its latest version, by every reader, and says which file.
    assert 0 not in rows and api_unreadable == {0}
    assert {p: n for p, n in rows.items()} == {p: n for p, n in intact["rows"][1].items() if p != 0}
    for code, err in ((rows_code, rows_err), (sql_code, sql_err), (growth_code, growth_err)):
        assert code == 1 and bad in err, (code, err)
    assert any(bad in p for p in api_problems)
    assert any(bad in p for p in stats_problems) and stats_unreadable == {0}
    # growth does not draw the unreadable version as rows: partition 0 stops before it.
    intact_latest = intact["growth"][1]
    assert latest.get(0, (0, 0))[0] < intact_latest[0][0]
    # The change feed needs deltas and changelogs (not zips): it meets a damaged one and says so.
    if bad.endswith((".delta", ".changelog")) or scenario == "rocks_agg":  # no changelogs: zips are the feed
        assert changes_code == 1 and bad in changes_err and bad in sql_changes_err
        assert changes[0] < intact["changes"][1][0]
    else:
        assert (changes_code, changes) == (0, intact["changes"][1])
    # A command that walks the state (the timeout check) meets it too; doctor predicts the restart fails.
    if scenario.startswith("pandas"):
        assert got["expired"][0] == 1 and bad in got["expired"][2]
    assert got["doctor"][0] >= 1

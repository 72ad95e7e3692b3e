"""The restart verdict against what Spark did: real Spark restarted on damaged copies of real checkpoints.

:mod:`tests.restart_matrix` restarts each kind's query on every damaged copy and records whether Spark
failed, restarted, or restarted with other state than the undamaged copy's restart. The first tests
check that oracle itself; the last one holds ``statelens summary``'s restart verdict to it: an error
exactly where Spark fails or silently loses state.

``python -m tests.test_restart_matrix`` prints the matrix with the verdicts beside it, as markdown.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.restart_matrix import (
    BATCHES,
    DAMAGES,
    KINDS,
    REPAIR,
    REPAIR_OFF,
    REPAIR_OFF_CELLS,
    UNDETECTABLE,
    Cell,
    cells,
    input_rows,
    markdown_table,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Cell names, known without generating the matrix (the product check is parametrized by them).
NAMES = [f"{k}/{d}" for k in KINDS for d in DAMAGES[k]] + [
    f"{k}/{d}+repair-off" for k, ds in REPAIR_OFF_CELLS.items() for d in ds
]
#: Kinds whose restart emits one row a key with its count in the second column.
COUNTING = ["hdfs-snap", "hdfs", "rocks-changelog", "rocks", "rocks-v2", "tws", "pandas-state"]


@pytest.fixture(scope="module")
def matrix() -> dict[str, Cell]:
    return {c.name: c for c in cells()}


def _kind(cell: Cell) -> Path:
    """The undamaged checkpoint the cell was copied from."""
    return cell.path.parents[3] / "kinds" / cell.kind / "checkpoint"


# --------------------------------------------------------------------------------------------------
# The oracle


def test_the_matrix_has_every_cell(matrix: dict[str, Cell]) -> None:
    assert sorted(matrix) == sorted(NAMES)
    for c in matrix.values():
        assert c.outcome in ("failed", "restarted", "restarted-wrong-state"), c.name
        assert c.spark_version.startswith("4.3."), c.spark_version
        assert (c.path / "offsets").is_dir(), c.name
        assert bool(c.error) == (c.outcome == "failed"), c.name
        assert (c.conf.get(REPAIR) == "false") == c.name.endswith("+repair-off"), c.name


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_control_restarts_and_runs_one_more_batch(matrix: dict[str, Cell], kind: str) -> None:
    control = matrix[f"{kind}/control"]
    assert control.outcome == "restarted"
    assert control.restart_batch == BATCHES
    assert control.files == []
    if kind == "stateless":
        assert control.state_rows == 0
    else:
        # The restart's batch touched every key ever seen plus a new one; Spark's store holds them all.
        keys = {r["key"] for i in range(BATCHES + 1) for r in input_rows(i)}
        assert control.state_rows == len(keys)


@pytest.mark.parametrize("kind", COUNTING)
def test_the_control_counts_every_input_row(matrix: dict[str, Cell], kind: str) -> None:
    """What the control's restart emitted is what its input says: the count of each key over every file
    (the comparison every other cell is judged by starts from the right state)."""
    doc = json.loads((matrix[f"{kind}/control"].path.parents[3] / "outcomes.json").read_text())
    expected: dict[str, int] = {}
    for i in range(BATCHES + 1):
        for r in input_rows(i):
            expected[r["key"]] = expected.get(r["key"], 0) + 1
    assert doc["kinds"][kind]["control_counts"] == {k: expected[k] for k in sorted(expected)}


def test_the_damaged_copies_are_damaged_and_never_restarted(matrix: dict[str, Cell]) -> None:
    checked = 0
    for c in matrix.values():
        original = _kind(c)
        # Never restarted: no commit of the restart's batch, no offsets of it.
        assert not (c.path / "offsets" / str(BATCHES)).exists(), c.name
        for rel in c.files:
            damaged, before = c.path / rel, (original / rel).read_bytes()
            if c.damage == "newest-delta-stale":
                older = original / rel.replace(f"{BATCHES}.delta", f"{BATCHES - 1}.delta")
                assert damaged.read_bytes() == older.read_bytes() != before, c.name
            elif c.damage.endswith("-deleted"):
                assert not damaged.exists(), c.name
            elif c.damage.endswith("-truncated"):
                assert damaged.read_bytes() == before[: len(before) // 2], c.name
            elif "-resaved" in c.damage:
                assert damaged.read_bytes() == before + b"\n", c.name
            else:
                after = damaged.read_bytes()
                diff = [i for i in range(len(before)) if before[i] != after[i]]
                assert diff == [len(before) // 2] and after[diff[0]] == before[diff[0]] ^ 0xFF, c.name
        checked += bool(c.files)
    assert checked == len([n for n in NAMES if not n.endswith("/control")])


def test_a_damaged_file_keeps_its_crc_unless_the_damage_says_nocrc(matrix: dict[str, Cell]) -> None:
    """Hadoop's .crc beside a file, which Spark's local file system checks on read: kept beside a
    truncated or bit-flipped file (as on a disk), gone with ``-nocrc`` (as in a copy from an object store)."""
    nocrc = 0
    for c in matrix.values():
        for rel in c.files:
            damaged = c.path / rel
            crc = damaged.with_name(f".{damaged.name}.crc")
            if c.damage == "newest-delta-stale":
                continue
            if c.damage.endswith("-nocrc") or "-deleted" in c.damage:
                assert not crc.exists(), c.name
                nocrc += c.damage.endswith("-nocrc")
            else:
                assert crc.is_file(), c.name
    assert nocrc == sum(d.endswith("-nocrc") for ds in DAMAGES.values() for d in ds)


def test_each_kind_has_the_files_its_cells_damage(matrix: dict[str, Cell]) -> None:
    def names(kind: str, pattern: str) -> list[str]:
        return sorted(p.name for p in (_kind(matrix[f"{kind}/control"]) / "state/0/0").glob(pattern))

    assert len(names("hdfs-snap", "*.snapshot")) >= 2
    assert names("hdfs", "*.snapshot") == [] and names("pandas-state", "*.snapshot") == []
    for kind in ("rocks-changelog", "rocks-v2", "tws"):
        assert len(names(kind, "*.zip")) >= 2 and len(names(kind, "*.changelog")) >= BATCHES - 1, kind
    assert len(names("rocks", "*.zip")) >= 2 and names("rocks", "*.changelog") == []
    assert all("_" in n for n in names("rocks-v2", "*.zip")), "checkpoint v2 names files <version>_<id>"
    assert not (_kind(matrix["stateless/control"]) / "state").exists()
    # The newest version of a kind with snapshots is one no snapshot covers: a restart replays its file.
    for kind, suffix in [
        ("hdfs-snap", "snapshot"),
        ("rocks-changelog", "zip"),
        ("rocks-v2", "zip"),
        ("tws", "zip"),
    ]:
        newest = max(
            int(n.split(".")[0].split("_")[0]) for n in names(kind, "*.changelog") + names(kind, "*.delta")
        )
        assert newest == BATCHES, kind
        assert all(int(n.split(".")[0].split("_")[0]) < BATCHES for n in names(kind, f"*.{suffix}")), kind


def test_a_deleted_newest_commit_reruns_that_batch_and_restarts(matrix: dict[str, Cell]) -> None:
    for kind in KINDS:
        c = matrix[f"{kind}/newest-commit-deleted"]
        assert c.files == [f"commits/{BATCHES - 1}"]
        assert (c.path / "offsets" / str(BATCHES - 1)).is_file()
        assert c.outcome == "restarted", c.name
        assert c.restart_batch == BATCHES


def test_a_rolled_back_batch_runs_again_with_the_next_input_and_loses_nothing(
    matrix: dict[str, Cell],
) -> None:
    """Offsets and commit of the last batch deleted: Spark plans that batch again, with the rest of the
    input, so one batch fewer runs, and the state (or, stateless, the output) is the control's."""
    for kind in ("hdfs", "rocks-changelog", "stateless"):
        c = matrix[f"{kind}/newest-batch-deleted"]
        assert c.files == [f"offsets/{BATCHES - 1}", f"commits/{BATCHES - 1}"]
        assert c.outcome == "restarted", c.name
        assert c.restart_batch == BATCHES - 1, c.name


def test_a_stale_delta_restarts_with_wrong_state(matrix: dict[str, Cell]) -> None:
    """The oracle tells wrong state from right: the newest delta replaced by the previous one decodes,
    Spark restarts on it, and the counts of the keys batch 6 touched come out short."""
    c = matrix["hdfs/newest-delta-stale"]
    assert c.outcome == "restarted-wrong-state"
    assert c.restart_batch == BATCHES
    touched = {r["key"] for r in input_rows(BATCHES - 1)}
    short = {d.split("'")[1] for d in c.differs if d.startswith("loaded -")}
    assert short and short <= touched, c.differs


def test_a_lost_or_damaged_delta_the_restart_needs_fails_it(matrix: dict[str, Cell]) -> None:
    for name in ("hdfs/newest-delta-deleted", "hdfs/newest-delta-truncated", "hdfs/oldest-delta-truncated"):
        c = matrix[name]
        assert c.outcome == "failed", name
        assert "CANNOT_LOAD_STATE_STORE" in " ".join(c.errors), name


def test_a_damaged_snapshot_is_repaired_only_with_repair_on(matrix: dict[str, Cell]) -> None:
    """Auto snapshot repair (on by default) skips a snapshot it cannot load, says so in Spark's log, and
    restarts from an older one; with it off the same copy fails."""
    compared = 0
    for kind, damages in REPAIR_OFF_CELLS.items():
        for d in damages:
            on, off = matrix[f"{kind}/{d}"], matrix[f"{kind}/{d}+repair-off"]
            assert off.conf == {**on.conf, **REPAIR_OFF}
            assert off.outcome == "failed", off.name
            if on.outcome != "failed":
                assert any("Failed to load snapshot version" in ln for ln in on.log), on.name
            compared += 1
    assert compared == sum(len(d) for d in REPAIR_OFF_CELLS.values())


# --------------------------------------------------------------------------------------------------
# The product


def verdict(cell: Cell, *, spark_flags: bool = True) -> dict[str, Any]:
    """``statelens summary --json``'s restart verdict on the cell's damaged copy, told the Spark version
    and the restart's repair setting (``spark_flags``)."""
    from statelens.app.cli import main

    args = ["summary", str(cell.path), "--json"]
    if spark_flags:
        args += ["--spark-version", cell.spark_version.rsplit(".", 1)[0]]
        args += [a for k, v in cell.conf.items() if k == REPAIR for a in ("--conf", f"{k}={v}")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(args)
    doc = json.loads(out.getvalue())
    (restart,) = [v for v in doc["verdicts"] if v["check"] == "restart"]
    return restart


@pytest.mark.parametrize("name", [n for n in NAMES if n not in UNDETECTABLE])
def test_the_restart_verdict_is_what_spark_did(matrix: dict[str, Cell], name: str) -> None:
    cell = matrix[name]
    restart = verdict(cell)
    wrong = cell.outcome in ("failed", "restarted-wrong-state")
    assert (restart["severity"] == "error") == wrong, (cell.outcome, cell.error, restart["text"])


# --------------------------------------------------------------------------------------------------
# The table for docs/reliability.md


def print_table(file: Any = None) -> None:
    """Print the matrix as markdown: cell, what Spark did, statelens' restart verdict."""
    rows = []
    for c in cells():
        v, note = verdict(c), ""
        expected = "error" if c.outcome in ("failed", "restarted-wrong-state") else "not error"
        agree = "agrees" if (v["severity"] == "error") == (expected == "error") else "**DISAGREES**"
        shown = f"{agree}: {v['severity']}{note}: {v['text'][:90]}"
        rows.append((c, shown))
    print(markdown_table(rows), file=file or sys.stdout, end="")


if __name__ == "__main__":
    print_table()

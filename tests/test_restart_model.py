"""The restart model (readers/restart.py) against the rules of Spark's loader.

The expected loads are those Spark's ``AutoSnapshotLoader`` (Spark 4.1+) and its callers choose, as its
own suite states them (``AutoSnapshotLoaderSuite``: the newest eligible snapshot; on failure, with repair,
the next older one within ``maxChangeFileReplay``, version 0 the last resort; without repair the first
failure is final) and as the providers replay after it (every delta or changelog up to the version; a
failure there is final). ``tests/test_restart_matrix.py`` holds the model to what Spark really did on
damaged copies of real checkpoints.
"""

from __future__ import annotations

import pytest

from statelens.readers.restart import (
    REPAIR_ENABLED,
    REPAIR_MAX_REPLAY,
    PartitionFiles,
    RestartConf,
    parse_spark_version,
    plan_load,
)

SPARK_43 = RestartConf.parse("4.3")
SPARK_35 = RestartConf.parse("3.5.5")


def _files(
    snapshots: list[int],
    deltas: list[int],
    damaged: list[str] = (),
    provider: str = "hdfs",
    changelogs: bool = True,
) -> PartitionFiles:
    snap, delta = ("zip", "changelog") if provider == "rocksdb" else ("snapshot", "delta")
    return PartitionFiles(
        provider,
        {v: f"p/{v}.{snap}" for v in snapshots},
        {v: f"p/{v}.{delta}" for v in deltas},
        {path: "cannot be read" for path in damaged},
        "p",
        changelog_checkpointing=changelogs,
    )


def test_the_newest_eligible_snapshot_then_the_deltas_after_it() -> None:
    load = plan_load(_files([2, 4, 6], [3, 4, 5, 6, 7, 8]), 7, SPARK_43)
    assert (load.outcome, load.base, load.replayed) == ("loads", 6, (7,))
    assert load.reads == ("p/6.snapshot", "p/7.delta")


def test_damage_the_restart_does_not_read_does_not_matter() -> None:
    load = plan_load(_files([4], [3, 4, 5, 6], damaged=["p/3.delta"]), 6, SPARK_35)
    assert (load.outcome, load.base, load.replayed) == ("loads", 4, (5, 6))


def test_without_a_snapshot_every_delta_from_the_empty_state() -> None:
    load = plan_load(_files([], [1, 2, 3], damaged=["p/1.delta"]), 3, SPARK_43)
    assert load.outcome == "fails" and load.base == 0 and load.failure is not None
    assert load.failure[0] == "p/1.delta"


def test_a_damaged_newest_snapshot_is_repaired_from_the_next_older_one() -> None:
    files = _files([2, 4], [1, 2, 3, 4, 5], damaged=["p/4.snapshot"])
    load = plan_load(files, 5, SPARK_43)
    assert (load.outcome, load.base, load.replayed) == ("repaired", 2, (3, 4, 5))
    assert [v for v, _, _ in load.skipped] == [4]
    assert load.without_repair is not None and load.without_repair.failure == (
        "p/4.snapshot",
        "cannot be read",
    )


def test_without_repair_the_first_snapshot_failure_is_final() -> None:
    files = _files([2, 4], [1, 2, 3, 4, 5], damaged=["p/4.snapshot"])
    for conf in (SPARK_35, RestartConf.parse("4.0"), RestartConf.parse("4.3", {REPAIR_ENABLED: "false"})):
        load = plan_load(files, 5, conf)
        assert load.outcome == "fails" and load.failure == ("p/4.snapshot", "cannot be read"), conf


def test_repair_reaches_the_empty_state_when_every_snapshot_is_damaged() -> None:
    files = _files([2, 4], [1, 2, 3, 4, 5], damaged=["p/4.snapshot", "p/2.snapshot"])
    load = plan_load(files, 5, SPARK_43)
    assert (load.outcome, load.base, load.replayed) == ("repaired", 0, (1, 2, 3, 4, 5))


def test_repair_then_a_missing_delta_fails_and_does_not_go_further_back() -> None:
    # the deltas before 3 were cleaned up: snapshot 2 loads, delta 3 is there, but 4's snapshot is
    # damaged and the fallback to 2 needs delta 3 and 4; 4 is gone
    files = _files([2, 4], [3, 5], damaged=["p/4.snapshot"])
    load = plan_load(files, 5, SPARK_43)
    assert load.outcome == "fails" and load.base == 2 and load.failure == ("p/4.delta", "delta 4 is missing")


def test_repair_is_bounded_by_max_change_file_replay() -> None:
    files = _files([2, 8], list(range(1, 11)), damaged=["p/8.snapshot"])
    far = plan_load(files, 10, RestartConf.parse("4.3", {REPAIR_MAX_REPLAY: "8"}))
    assert (far.outcome, far.base) == ("repaired", 2)
    near = plan_load(files, 10, RestartConf.parse("4.3", {REPAIR_MAX_REPLAY: "7"}))  # 10 - 2 > 7
    assert near.outcome == "fails" and near.failure is not None and "maxChangeFileReplay" in near.failure[1]


def test_rocksdb_without_changelogs_never_repairs() -> None:
    files = _files([2, 3, 4], [], damaged=["p/4.zip"], provider="rocksdb", changelogs=False)
    load = plan_load(files, 4, SPARK_43)
    assert load.outcome == "fails" and load.failure == ("p/4.zip", "cannot be read")


def test_rocksdb_with_changelogs_repairs_like_hdfs() -> None:
    files = _files([2, 4], [1, 2, 3, 4, 5], damaged=["p/4.zip"], provider="rocksdb")
    load = plan_load(files, 5, SPARK_43)
    assert (load.outcome, load.base, load.replayed) == ("repaired", 2, (3, 4, 5))
    assert load.chain_text(files) == "zip 2 + changelogs 3-5"


def test_an_unknown_spark_version_is_judged_with_repair_and_says_so() -> None:
    conf = RestartConf()
    assert conf.repair is None and conf.text() == "an unknown Spark version"
    load = plan_load(_files([4], [4, 5], damaged=["p/4.snapshot"]), 5, conf)
    assert load.outcome == "fails"  # no older snapshot and delta 1-3 gone: fails on every version
    load = plan_load(_files([2, 4], [1, 2, 3, 4, 5], damaged=["p/4.snapshot"]), 5, conf)
    assert load.outcome == "repaired" and load.without_repair is not None


@pytest.mark.parametrize(
    ("text", "want"), [("4.3", (4, 3)), ("4.3.0", (4, 3)), ("3.5.5", (3, 5)), ("4", (4, 0))]
)
def test_spark_versions_parse(text: str, want: tuple[int, int]) -> None:
    assert parse_spark_version(text) == want


@pytest.mark.parametrize("text", ["", "x.y", "4.x", "-1.2"])
def test_bad_spark_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Spark version"):
        parse_spark_version(text)


def test_bad_repair_confs_are_refused() -> None:
    with pytest.raises(ValueError, match="true or false"):
        RestartConf.parse("4.3", {REPAIR_ENABLED: "yes"})
    with pytest.raises(ValueError, match="at least 1"):
        RestartConf.parse("4.3", {REPAIR_MAX_REPLAY: "0"})

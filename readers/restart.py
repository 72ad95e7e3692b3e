"""What a restart of the query loads, partition by partition, as Spark's state store providers do it.

A restart after committed batch ``b`` loads state version ``v = b + 1`` of every store partition
(``docs/format.md`` §1.2). Both providers load it the same way (Spark's ``AutoSnapshotLoader``, used by
``HDFSBackedStateStoreProvider.loadSnapshot`` and ``RocksDB.loadSnapshotWithoutCheckpointId`` since
Spark 4.1; the same choice without the loader before):

1. The *eligible* snapshots are the snapshot files listed at or below ``v`` (HDFS ``<n>.snapshot``,
   RocksDB ``<n>.zip``) and version 0, the empty state. The newest is loaded.
2. If it cannot be loaded and *auto snapshot repair* is on, the loader tries the older eligible
   snapshots, newest first, among those within ``maxChangeFileReplay`` versions of ``v`` (version 0
   always loads). Without repair (Spark 3.x and 4.0, the conf set to false, or a RocksDB store without
   changelog checkpointing) the restart fails on the first snapshot.
3. The deltas (HDFS) or changelogs (RocksDB) after the loaded snapshot up to ``v`` are replayed, each one
   must be there and readable; a failure here is final (the loader does not go back to an older snapshot).

Files that no step reads (older snapshots, deltas before the loaded snapshot) do not matter to the
restart: their damage is a finding about older versions, not a restart failure.

This module only decides; which files are damaged is found by the checks that read them
(:mod:`app.analysis.doctor`). It reads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from statelens.readers.textfmt import ranges

#: The configuration keys of auto snapshot repair (Spark 4.1+).
REPAIR_ENABLED = "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"
REPAIR_MAX_REPLAY = "spark.sql.streaming.stateStore.autoSnapshotRepair.maxChangeFileReplay"
#: The first Spark release with auto snapshot repair.
REPAIR_SINCE = (4, 1)
#: ``maxChangeFileReplay`` by default, as Spark 4.3.0's SQLConf gives it.
DEFAULT_MAX_REPLAY = 500

Outcome = Literal["loads", "repaired", "fails"]


def parse_spark_version(text: str) -> tuple[int, int]:
    """``"4.3"``, ``"4.3.0"`` or ``"3.5.5"`` as ``(major, minor)``.

    Raises
    ------
    ValueError
        When the text is not a Spark version.
    """
    parts = text.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ValueError(f"not a Spark version: {text!r} (expected e.g. 3.5 or 4.3.0)") from None
    if major < 1 or minor < 0:
        raise ValueError(f"not a Spark version: {text!r} (expected e.g. 3.5 or 4.3.0)")
    return major, minor


@dataclass(frozen=True)
class RestartConf:
    """The Spark that will restart the query, as far as the loading of state goes.

    Parameters
    ----------
    spark_version : tuple of int, optional
        ``(major, minor)``; ``None`` when unknown (the verdict then says what depends on it).
    conf : mapping of str to str
        Spark configuration of the restart (only the auto snapshot repair keys matter).
    """

    spark_version: tuple[int, int] | None = None
    conf: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spark_version: str | None = None, conf: Mapping[str, str] | None = None) -> RestartConf:
        """From ``--spark-version`` and ``--conf KEY=VALUE`` texts.

        Raises
        ------
        ValueError
            A version that is not one, or a repair setting that is not a boolean or a count.
        """
        conf = dict(conf or {})
        enabled = conf.get(REPAIR_ENABLED)
        if enabled is not None and enabled.strip().lower() not in ("true", "false"):
            raise ValueError(f"{REPAIR_ENABLED} must be true or false, not {enabled!r}")
        replay = conf.get(REPAIR_MAX_REPLAY)
        if replay is not None and (not replay.strip().isdigit() or int(replay) < 1):
            raise ValueError(f"{REPAIR_MAX_REPLAY} must be a count of at least 1, not {replay!r}")
        version = parse_spark_version(spark_version) if spark_version else None
        return cls(version, conf)

    @property
    def repair(self) -> bool | None:
        """Whether auto snapshot repair is on: ``None`` when it depends on the unknown Spark version."""
        enabled = self.conf.get(REPAIR_ENABLED)
        if self.spark_version is not None and self.spark_version < REPAIR_SINCE:
            return False
        if enabled is not None and enabled.strip().lower() == "false":
            return False
        if self.spark_version is None:
            return None
        return True

    @property
    def max_replay(self) -> int:
        """``maxChangeFileReplay``: the oldest snapshot repair may fall back to is ``v - max_replay``."""
        replay = self.conf.get(REPAIR_MAX_REPLAY)
        return int(replay) if replay is not None else DEFAULT_MAX_REPLAY

    def text(self) -> str:
        """The restarting Spark in words, e.g. ``Spark 4.3`` or ``an unknown Spark version``."""
        if self.spark_version is None:
            return "an unknown Spark version"
        return f"Spark {self.spark_version[0]}.{self.spark_version[1]}"


@dataclass(frozen=True)
class PartitionFiles:
    """What the listing shows of one store partition, and which of its files cannot be read.

    Parameters
    ----------
    provider : {"hdfs", "rocksdb"}
    snapshots, deltas : mapping of int to str
        Version to path: HDFS ``.snapshot`` / ``.delta``, RocksDB ``.zip`` / ``.changelog``.
    damaged : mapping of str to str
        Path to what is wrong with it, for the files found unreadable (a zip whose SST is missing
        included).
    changelog_checkpointing : bool
        RocksDB: the store writes changelogs (repair needs them).
    """

    provider: str
    snapshots: Mapping[int, str]
    deltas: Mapping[int, str]
    damaged: Mapping[str, str]
    directory: str = ""
    changelog_checkpointing: bool = True

    def snapshot_path(self, version: int) -> str:
        return self.snapshots.get(version) or f"{self.directory}/{version}.{self.snapshot_kind}"

    def delta_path(self, version: int) -> str:
        return self.deltas.get(version) or f"{self.directory}/{version}.{self.delta_kind}"

    @property
    def snapshot_kind(self) -> str:
        return "zip" if self.provider == "rocksdb" else "snapshot"

    @property
    def delta_kind(self) -> str:
        return "changelog" if self.provider == "rocksdb" else "delta"


@dataclass(frozen=True)
class RestartLoad:
    """How a restart loads one partition.

    Attributes
    ----------
    version : int
        The version loaded (last commit + 1).
    outcome : {"loads", "repaired", "fails"}
        ``repaired``: it loads only because auto snapshot repair skips the snapshots in ``skipped``.
    base : int or None
        The snapshot version it starts from (0: the empty state); ``None`` when it fails before one.
    replayed : tuple of int
        The deltas or changelogs it replays after ``base``.
    skipped : tuple of (int, str, str)
        Snapshots repair skipped: version, path, what is wrong.
    failure : tuple of (str, str) or None
        The file the restart fails on and why.
    without_repair : RestartLoad or None
        For a ``repaired`` load: what the same restart does without repair (it fails).
    reads : tuple of str
        Paths of the files the load reads, in order (the snapshots it tried included).
    """

    version: int
    outcome: Outcome
    base: int | None
    replayed: tuple[int, ...] = ()
    skipped: tuple[tuple[int, str, str], ...] = ()
    failure: tuple[str, str] | None = None
    without_repair: RestartLoad | None = None
    reads: tuple[str, ...] = ()

    def chain_text(self, files: PartitionFiles) -> str:
        """``snapshot 6 + deltas 7-8`` (or ``the empty state + ...``)."""
        head = f"{files.snapshot_kind} {self.base}" if self.base else "the empty state"
        if self.replayed:
            return f"{head} + {files.delta_kind}s {ranges(list(self.replayed))}"
        return head


def plan_load(
    files: PartitionFiles, version: int, conf: RestartConf, *, repair: bool | None = None
) -> RestartLoad:
    """What a restart loading ``version`` of this partition does.

    Parameters
    ----------
    files : PartitionFiles
    version : int
        Last committed batch + 1.
    conf : RestartConf
    repair : bool, optional
        Force auto snapshot repair on or off (default: as ``conf`` says; an unknown Spark version is
        taken as one with repair, and the result's ``without_repair`` says what happens without it).

    Returns
    -------
    RestartLoad
    """
    on = conf.repair if repair is None else repair
    if on is None:
        on = True
    if files.provider == "rocksdb" and not files.changelog_checkpointing:
        on = False  # repair rebuilds from changelogs: RocksDB without them never repairs
    eligible = sorted({s for s in files.snapshots if 0 < s <= version} | {0}, reverse=True)
    needed: list[str] = []

    def problem(path: str) -> str | None:
        return files.damaged.get(path)

    first = eligible[0]
    skipped: list[tuple[int, str, str]] = []
    base: int | None = None
    if first == 0:
        base = 0
    else:
        path = files.snapshot_path(first)
        needed.append(path)
        wrong = problem(path)
        if wrong is None:
            base = first
        elif not on:
            return RestartLoad(version, "fails", None, failure=(path, wrong), reads=tuple(needed))
        else:
            skipped.append((first, path, wrong))
            for s in eligible[1:]:
                if version - s > conf.max_replay:
                    continue
                if s == 0:
                    base = 0
                    break
                older = files.snapshot_path(s)
                needed.append(older)
                wrong = problem(older)
                if wrong is None:
                    base = s
                    break
                skipped.append((s, older, wrong))
            if base is None:
                return RestartLoad(
                    version,
                    "fails",
                    None,
                    skipped=tuple(skipped),
                    failure=(
                        path,
                        f"{skipped[0][2]}; auto snapshot repair finds no loadable snapshot within "
                        f"{conf.max_replay} versions (maxChangeFileReplay)",
                    ),
                    reads=tuple(needed),
                )
    replayed = tuple(range(base + 1, version + 1))
    for v in replayed:
        path = files.delta_path(v)
        needed.append(path)
        if v not in files.deltas:
            failure = (path, f"{files.delta_kind} {v} is missing")
        else:
            wrong = problem(path)
            if wrong is None:
                continue
            failure = (path, wrong)
        return RestartLoad(version, "fails", base, replayed, tuple(skipped), failure, reads=tuple(needed))
    if skipped:
        plain = plan_load(files, version, conf, repair=False)
        return RestartLoad(
            version, "repaired", base, replayed, tuple(skipped), None, plain, reads=tuple(needed)
        )
    return RestartLoad(version, "loads", base, replayed, reads=tuple(needed))

"""Checkpoint health checks: ``statelens doctor``.

Every finding has a severity (``error``: Spark will fail or lose data on restart, or a file is corrupt;
``warning``: something a person should look at; ``info``: explains a state that is normal after a
crash) and the files involved. Exit code: 0 clean (info only), 1 warnings, 2 errors.

The rules follow ``docs/format.md``: offsets without a commit are the batch a restart
re-runs (§2.2, §2.6); version ``v`` is written by batch ``v-1`` so the latest state version must be the
last committed batch + 1 (§1.2); temp files are ``.<name>.<uuid>[.TID..].tmp`` leftovers of atomic
writes (§1.3); the partition count is ``spark.sql.shuffle.partitions`` pinned in the first offsets file
(§1.1, §2.2); a version is rebuilt from its newest snapshot plus every later delta (§3.4); cleanup keeps
``minBatchesToRetain`` versions (§3.5, §2.6).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statelens.app.analysis._common import BatchClock
from statelens.app.analysis.progress_checks import iter_check_progress
from statelens.readers import schemas
from statelens.readers.backends import native_backend
from statelens.readers.checksums import crc_sidecar_path
from statelens.readers.errors import StatelensError
from statelens.readers.model import OperatorKind, Progress
from statelens.readers.restart import REPAIR_ENABLED, PartitionFiles, RestartConf, RestartLoad, plan_load
from statelens.readers.scan import StateScan
from statelens.readers.scan_files import FileCheck, StoreFiles, iter_sidecar_checks, sidecar_pairs
from statelens.readers.textfmt import ranges as _ranges

SEVERITIES = ("error", "warning", "info")
DEFAULT_MIN_BATCHES_TO_RETAIN = 100
#: A batch interval is a gap when above this many times the median interval...
GAP_FACTOR = 10
#: ...and at least this much longer than the median.
GAP_MIN_EXTRA_MS = 30_000
#: Versions Spark may keep beyond minBatchesToRetain: the delta chain back to the base snapshot
#: (minDeltasForSnapshot, default 10) and maintenance running behind. "Far beyond" = more than
#: twice minBatchesToRetain plus this.
RETENTION_MARGIN = 10
_FILES_SHOWN = 20


@dataclass(frozen=True)
class DoctorFinding:
    """One health problem (or note) and the files involved."""

    check: str
    severity: str
    message: str
    files: tuple[str, ...] = ()
    batch_id: int | None = None
    operator_id: int | None = None
    partition: int | None = None
    store_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "message": self.message,
            "files": list(self.files),
            "batch_id": self.batch_id,
            "operator_id": self.operator_id,
            "partition": self.partition,
            "store_name": self.store_name,
        }


@dataclass
class DoctorResult:
    """All findings, worst first."""

    findings: list[DoctorFinding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: The Spark the restart was judged for (``--spark-version``, ``--conf``).
    restart: RestartConf = field(default_factory=RestartConf)
    #: Paths of the files found unreadable elsewhere that the restart checks judged (``known_damage``).
    judged: set[str] = field(default_factory=set)
    #: How a restart loads each store partition (with the damage the checks found; none with ``--quick``).
    restart_loads: list[PartitionRestart] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        sev = {f.severity for f in self.findings}
        return 2 if "error" in sev else 1 if "warning" in sev else 0

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "checked": list(self.checked),
            "findings": [f.to_json() for f in self.findings],
            "restart": {
                "spark_version": ".".join(map(str, self.restart.spark_version))
                if self.restart.spark_version
                else None,
                "auto_snapshot_repair": self.restart.repair,
                "partitions": [r.to_json() for r in self.restart_loads],
            },
        }


@dataclass(frozen=True)
class PartitionRestart:
    """How a restart loads one store partition (:func:`readers.restart.plan_load`)."""

    operator_id: int
    store_name: str
    partition: int
    load: RestartLoad

    def to_json(self) -> dict[str, Any]:
        load = self.load
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "partition": self.partition,
            "version": load.version,
            "outcome": load.outcome,
            "base": load.base,
            "replayed": list(load.replayed),
            "reads": list(load.reads),
            "skipped": [path for _, path, _ in load.skipped],
            "failure": {"file": load.failure[0], "problem": load.failure[1]} if load.failure else None,
        }


class _Doctor:
    def __init__(self, ckpt: Any, min_batches_to_retain: int, restart: RestartConf | None = None):
        self.ckpt = ckpt
        self.native = native_backend(ckpt)  # the files, their checks and raw records
        self.min_retain = min_batches_to_retain
        self.restart = restart or RestartConf()
        self.result = DoctorResult(restart=self.restart)
        # partitions whose restart problem the listing checks already named: (operator, store, partition)
        self._listing_flagged: set[tuple[int, str, int]] = set()
        # each store partition's files as listed, and the damaged ones among them, for the restart plans
        self._layout: dict[tuple[int, str, int], PartitionFiles] = {}
        self._damage: dict[tuple[int, str, int], dict[str, str]] = {}
        # files that do not match their Hadoop checksum sidecar: path -> what is wrong (a RocksDB zip, or
        # one whose SSTs do not, is judged with the damaged files; the rest is reported by report_sidecars)
        self._sidecar_bad: dict[str, StatelensError] = {}

    def add(
        self, check: str, severity: str, message: str, files: list[str] | tuple[str, ...] = (), **ctx: Any
    ) -> None:
        files = list(files)
        if len(files) > _FILES_SHOWN:
            message += f" ({len(files)} files, first {_FILES_SHOWN} listed)"
            files = files[:_FILES_SHOWN]
        self.result.findings.append(DoctorFinding(check, severity, message, tuple(files), **ctx))

    # -- logs --------------------------------------------------------------------------------------
    def check_load_report(self) -> None:
        self.result.checked.append("readable logs and metadata")
        for err in self.ckpt.report.problems:
            self.add(
                "unreadable_file",
                "error",
                f"{type(err).__name__}: {err.message}",
                [err.path] if err.path else [],
            )

    def check_batches(self) -> None:
        self.result.checked.append("offsets vs commits, batch id gaps")
        offsets, commits = self.ckpt.offsets, self.ckpt.commits
        if not offsets and not commits:
            self.add("no_batches", "info", "no offsets or commits: the query never planned a batch")
            return
        last_commit = max(commits) if commits else None
        for b in sorted(set(offsets) - set(commits)):
            if last_commit is not None and b < last_commit:
                self.add(
                    "offsets_without_commit",
                    "error",
                    f"batch {b} has offsets but no commit while later batch {last_commit} committed "
                    "(a commit file was lost)",
                    [f"offsets/{b}"],
                    batch_id=b,
                )
            else:
                self.add(
                    "offsets_without_commit",
                    "warning",
                    f"batch {b} was planned but never committed: a restart re-runs it",
                    [f"offsets/{b}"],
                    batch_id=b,
                )
        for b in sorted(set(commits) - set(offsets)):
            self.add(
                "commit_without_offsets",
                "error",
                f"batch {b} has a commit but no offsets file (offsets lost or deleted by hand)",
                [f"commits/{b}"],
                batch_id=b,
            )
        for name, ids in (("offsets", sorted(offsets)), ("commits", sorted(commits))):
            missing = [b for b in range(ids[0], ids[-1] + 1) if b not in set(ids)] if ids else []
            if missing:
                self.add(
                    "batch_id_gap",
                    "error",
                    f"{name}/ has no file for batch ids {_ranges(missing)} between {ids[0]} and {ids[-1]}",
                    [f"{name}/{b}" for b in missing],
                )
        if len(offsets) > 2 * self.min_retain + RETENTION_MARGIN:
            self.add(
                "logs_beyond_retention",
                "warning",
                f"{len(offsets)} offsets files kept although minBatchesToRetain is {self.min_retain}: "
                "log purging may not be running",
                ["offsets/"],
            )

    def check_watermark_and_clock(self) -> None:
        self.result.checked.append("watermark monotonic, batch timestamps and gaps")
        clock = BatchClock(self.ckpt)
        prev: tuple[int, int] | None = None
        for b in sorted(clock.watermark_ms):
            wm = clock.watermark_ms[b]
            if prev is not None and wm < prev[1]:
                self.add(
                    "watermark_backwards",
                    "error",
                    f"watermark went backwards from {prev[1]} ms (batch {prev[0]}) to {wm} ms (batch {b}); "
                    "Spark never moves it back: an offsets file was edited or mixed from another checkpoint",
                    [f"offsets/{prev[0]}", f"offsets/{b}"],
                    batch_id=b,
                )
            if wm:
                prev = (b, wm)
        for b, nxt in sorted(clock.next_watermark_ms.items()):
            planned = clock.watermark_ms.get(b + 1)
            if planned is not None and nxt and planned != nxt:
                self.add(
                    "watermark_mismatch",
                    "warning",
                    f"commits/{b} says the next batch uses watermark {nxt} ms, offsets/{b + 1} says {planned} ms",
                    [f"commits/{b}", f"offsets/{b + 1}"],
                    batch_id=b + 1,
                )
        ids = clock.batches_with_timestamp()
        intervals = [
            (a, c, clock.timestamp_ms[c] - clock.timestamp_ms[a])
            for a, c in zip(ids, ids[1:], strict=False)
            if c == a + 1
        ]
        for a, c, d in intervals:
            if d < 0:
                self.add(
                    "timestamp_backwards",
                    "warning",
                    f"batch {c} started {-d} ms before batch {a} (driver clock moved back, or a restart on "
                    "another machine): processing-time timeouts may fire late",
                    [f"offsets/{a}", f"offsets/{c}"],
                    batch_id=c,
                )
        positive = [d for *_, d in intervals if d >= 0]
        if len(positive) >= 3:
            med = statistics.median(positive)
            limit = max(GAP_FACTOR * med, med + GAP_MIN_EXTRA_MS)
            for a, c, d in intervals:
                if d > limit:
                    self.add(
                        "batch_gap",
                        "warning",
                        f"{d / 1000:.1f} s between batch {a} and {c}, the usual interval is {med / 1000:.1f} s: "
                        "the query was stopped or stalled",
                        [f"offsets/{a}", f"offsets/{c}"],
                        batch_id=c,
                    )

    def check_conf(self) -> None:
        self.result.checked.append("partition count vs spark.sql.shuffle.partitions, conf changes")
        key = "spark.sql.shuffle.partitions"
        conf = self.ckpt.conf
        try:
            want = int(conf[key]) if key in conf else None
        except ValueError:
            want = None
        prev: tuple[int, dict[str, str]] | None = None
        for b in sorted(self.ckpt.offsets):
            c = self.ckpt.offsets[b].conf
            if prev is not None and c and prev[1]:
                changed = sorted(k for k in set(c) | set(prev[1]) if c.get(k) != prev[1].get(k))
                if changed == [key] and self._repartitioned(c.get(key)):
                    self.add(
                        "repartitioned",
                        "info",
                        f"state repartitioned in batch {b}: {key} {prev[1].get(key)} -> {c.get(key)} (Spark 4.2+ "
                        "checkpointManager.repartition); versions before it have the old partitions",
                        [f"offsets/{prev[0]}", f"offsets/{b}"],
                        batch_id=b,
                    )
                elif changed:
                    self.add(
                        "conf_changed",
                        "warning" if key in changed or any("stateStore" in k for k in changed) else "info",
                        f"conf changed between batch {prev[0]} and {b}: "
                        + ", ".join(f"{k} {prev[1].get(k)} -> {c.get(k)}" for k in changed),
                        [f"offsets/{prev[0]}", f"offsets/{b}"],
                        batch_id=b,
                    )
            if c:
                prev = (b, c)
        if want is None:
            return
        for op in self.ckpt.operators:
            expected = 1 if op.kind == OperatorKind.LIMIT else want
            for st in op.stores:
                have = len(st.partitions)
                if have != expected:
                    ids = set(st.partitions)
                    missing = [p for p in range(expected) if p not in ids]
                    extra = [p for p in st.partitions if p >= expected]
                    detail = []
                    if missing:
                        detail.append(f"missing {_ranges(missing)}")
                    if extra:
                        detail.append(f"extra {_ranges(extra)}")
                    self.add(
                        "partition_count",
                        "error",
                        f"operator {op.operator_id} store {st.store_name} has {have} partition folders, "
                        f"{key} = {want} ({'; '.join(detail)})",
                        [f"state/{op.operator_id}"],
                        operator_id=op.operator_id,
                        store_name=st.store_name,
                    )

    def _repartitioned(self, count: str | None) -> bool:
        """Every store has exactly ``count`` partition folders (a repartition wrote the new ones)."""
        try:
            want = int(count or "")
        except ValueError:
            return False
        return all(
            len(st.partitions) == (1 if op.kind == OperatorKind.LIMIT else want)
            for op in self.ckpt.operators
            for st in op.stores
        )

    # -- files -------------------------------------------------------------------------------------
    def check_temp_files(self) -> None:
        self.result.checked.append("leftover temporary files")
        temps = [
            e.path for e in self.ckpt.fs.walk_files("") if e.name.startswith(".") and e.name.endswith(".tmp")
        ]
        if temps:
            self.add(
                "temp_files",
                "warning",
                f"{len(temps)} leftover temporary file(s): a writer died mid-write (Spark ignores them)",
                temps,
            )

    def check_schemas(self) -> None:
        self.result.checked.append("schema files agree across partitions")

        for op in self.ckpt.operators:
            for st in op.stores:
                sub = "" if st.store_name == "default" else f"/{st.store_name}"
                found: dict[str, Any] = {}
                for pid in st.partitions:
                    path = f"state/{op.operator_id}/{pid}{sub}/_metadata/schema"
                    if not self.ckpt.fs.exists(path):
                        continue
                    try:
                        parsed = schemas.parse_schema_file(self.ckpt.fs.read_bytes(path), path)
                    except StatelensError as err:
                        self.add(
                            "bad_schema_file",
                            "error",
                            f"schema file cannot be read: {err.message}",
                            [path],
                            operator_id=op.operator_id,
                            partition=pid,
                            store_name=st.store_name,
                        )
                        continue
                    found[path] = (parsed.key_json, parsed.value_json)
                if len(set(found.values())) > 1:
                    first = next(iter(found.values()))
                    odd = [p for p, s in found.items() if s != first]
                    self.add(
                        "schema_disagrees",
                        "error",
                        f"operator {op.operator_id} store {st.store_name}: schema files differ across partitions",
                        [next(iter(found)), *odd],
                        operator_id=op.operator_id,
                        store_name=st.store_name,
                    )
                if st.provider == "hdfs" and st.schema is None and st.partitions:
                    self.add(
                        "missing_schema",
                        "warning",
                        f"operator {op.operator_id} store {st.store_name}: no schema file, rows cannot be decoded",
                        [f"state/{op.operator_id}/0{sub}/_metadata/schema"],
                        operator_id=op.operator_id,
                        store_name=st.store_name,
                    )

    def check_state_versions(self) -> None:
        self.result.checked.append("state versions vs commits, delta and changelog chains, retention")
        commits = self.ckpt.commits
        last_commit = max(commits) if commits else None
        expected = last_commit + 1 if last_commit is not None else None
        planned = max(self.ckpt.offsets) if self.ckpt.offsets else None
        for op in self.ckpt.operators:
            seen: set[str] = set()
            for st in op.stores:
                # Column families shown as stores share one physical store: check its files once.
                physical = self.ckpt.physical_store(op.operator_id, st.store_name)
                if physical in seen:
                    continue
                seen.add(physical)
                files = StoreFiles(self.native, op.operator_id, st.store_name)
                for err in files.problems:
                    self.add(
                        "unreadable_store",
                        "error",
                        f"operator {op.operator_id} store {physical}: {err}",
                        operator_id=op.operator_id,
                        store_name=physical,
                    )
                for pid in files.partition_ids():
                    self._check_partition(op, physical, files, pid, expected, planned)

    def _check_partition(
        self, op: Any, store_name: str, files: StoreFiles, pid: int, expected: int | None, planned: int | None
    ) -> None:
        pf = files.listing(pid)
        ctx = {"operator_id": op.operator_id, "partition": pid, "store_name": store_name}
        where = f"operator {op.operator_id} store {store_name} partition {pid}"
        self._layout[(op.operator_id, store_name, pid)] = files.restart_files(pid)
        # HDFS: <v>.delta + <v>.snapshot; RocksDB: <v>.changelog + <v>.zip (the same roles).
        delta, snapshot = ("changelog", "zip") if files.provider == "rocksdb" else ("delta", "snapshot")

        def path(v: int) -> str:
            sf = pf.deltas.get(v) or pf.snapshots.get(v)
            return sf.path if sf is not None else f"{pf.directory}/{v}.{delta}"

        versions = sorted(set(pf.deltas) | set(pf.snapshots))
        if not versions:
            self.add(
                "no_state_files",
                "error" if expected else "info",
                f"{where}: no {delta} or {snapshot} files",
                [pf.directory],
                **ctx,
            )
            return
        latest = max(versions)
        readable = set(pf.readable_versions())
        if expected is not None:
            if latest < expected or (expected <= latest and expected not in readable):
                self._listing_flagged.add((op.operator_id, store_name, pid))
            if latest < expected:
                self.add(
                    "missing_state_version",
                    "error",
                    f"{where}: latest state version is {latest} but the last commit (batch {expected - 1}) "
                    f"needs version {expected}: a restart cannot load the state",
                    [path(expected)],
                    batch_id=expected - 1,
                    **ctx,
                )
            elif latest > expected:
                if planned is not None and latest == planned + 1 and planned == expected:
                    self.add(
                        "uncommitted_state_version",
                        "info",
                        f"{where}: version {latest} was written by uncommitted batch {latest - 1}; "
                        "Spark rewrites it when the batch is re-run",
                        [path(latest)],
                        batch_id=latest - 1,
                        **ctx,
                    )
                else:
                    extra = [v for v in versions if v > expected]
                    # Spark loads version `expected` and writes the later ones again as it re-runs the
                    # batches (the restart matrix: offsets and commit of the last batch deleted, restarted
                    # with the control's state): the offsets or commits were lost, not the state
                    self.add(
                        "extra_state_version",
                        "warning",
                        f"{where}: state versions {_ranges(extra)} are beyond the last committed batch "
                        f"({expected - 1}) and not explained by a planned batch: offsets or commits of later "
                        "batches are missing; a restart loads version "
                        f"{expected} and writes these again as it re-runs those batches",
                        [path(v) for v in extra],
                        **ctx,
                    )
            if expected <= latest and expected not in readable:
                base = max((s for s in pf.snapshots if s <= expected), default=0)
                gap = [v for v in range(base + 1, expected + 1) if v not in pf.deltas]
                self.add(
                    "unrebuildable_version",
                    "error",
                    f"{where}: version {expected} cannot be rebuilt: {delta}(s) {_ranges(gap)} missing and no "
                    f"{snapshot} covers them",
                    [path(v) for v in gap],
                    batch_id=expected - 1,
                    **ctx,
                )
        oldest = min(versions)
        holes = [v for v in range(oldest + 1, latest + 1) if v not in readable]
        if holes and (expected is None or expected in readable or expected > latest):
            self.add(
                "unreadable_history",
                "warning",
                f"{where}: versions {_ranges(holes)} cannot be rebuilt ({delta}s missing); later versions are fine",
                [path(v) for v in holes if v not in pf.deltas],
                **ctx,
            )
        if latest - oldest + 1 > 2 * self.min_retain + RETENTION_MARGIN:
            self.add(
                "state_beyond_retention",
                "warning",
                f"{where}: {latest - oldest + 1} versions on disk (oldest {oldest}) although minBatchesToRetain "
                f"is {self.min_retain}: state maintenance/cleanup may not be running",
                [pf.directory],
                **ctx,
            )

    def iter_check_files(
        self, cancelled: Callable[[], bool] | None, restart_only: bool = False
    ) -> Generator[Progress, None, None]:
        """Every state file (``restart_only``: those a restart loads, see :meth:`_restart_reads`) as a read
        uses it (:meth:`readers.scan_files.StoreFiles.iter_checks`: an HDFS file decompresses, scans and
        a sample of its rows matches the schema; a RocksDB zip opens with every SST and log it names, a
        changelog frames whole records), then SSTs that no retained zip names.

        A damaged file is an error when a restart of the last committed batch reads it
        (:func:`readers.restart.plan_load`: the restart will fail), a warning about an older version when
        it does not. SSTs no retained zip names are a note.
        """
        self.result.checked.append(
            "every delta/snapshot a restart loads decompresses, scans and matches its schema"
            if restart_only
            else "every delta/snapshot decompresses, scans and matches its schema"
        )
        self.result.checked.append(
            "RocksDB: the zip, SSTs and changelogs a restart loads, every other retained zip and changelog, "
            "orphan SSTs"
        )
        jobs: list[tuple[int, str, StoreFiles, list[Any]]] = []
        for op in self.ckpt.operators:
            seen: set[str] = set()
            for st in op.stores:
                physical = self.ckpt.physical_store(op.operator_id, st.store_name)
                if physical not in seen:  # column families shown as stores: their store's files, once
                    seen.add(physical)
                    files = StoreFiles(self.native, op.operator_id, st.store_name)
                    reads = self._restart_reads(op.operator_id, physical) if restart_only else None
                    jobs.append((op.operator_id, physical, files, files.state_files(only=reads)))
        last, n, total = time.monotonic(), 0, sum(len(chosen) for *_, chosen in jobs)
        for op_id, store_name, files, chosen in jobs:
            checks: dict[int, list[FileCheck]] = {}
            for checked in files.iter_checks(chosen):
                if cancelled is not None and cancelled():
                    return
                n += 1
                if time.monotonic() - last > 0.1:
                    last = time.monotonic()
                    yield Progress(n, total, f"checking {checked.file.path}")
                checks.setdefault(checked.file.partition_id, []).append(checked)
            for pid in files.partition_ids():
                bad = {c.file.path: self._damage_of(op_id, c) for c in checks.get(pid, []) if c.error}
                self._sidecar_zips(files, pid, checks.get(pid, []), bad)
                if (
                    bad
                ):  # (RocksDB undamaged: a restart can only fail on a missing file, the listing names it)
                    self._judge_damage(op_id, store_name, pid, files, bad)
                self._orphan_ssts(op_id, store_name, pid, files, checks.get(pid, []))

    def iter_check_sidecars(self, cancelled: Callable[[], bool] | None) -> Generator[Progress, None, None]:
        """The files with a Hadoop checksum sidecar beside them (a local file system) against it
        (:func:`readers.scan_files.sidecar_pairs`: logs, schemas, source logs, zips, SSTs); what does not
        match is judged by :meth:`iter_check_files` (RocksDB zips and their SSTs) and
        :meth:`report_sidecars` (the rest)."""
        if not self.ckpt.fs.is_local:
            return
        pairs = sidecar_pairs(self.ckpt.fs)
        self.result.checked.append(
            "logs, schemas, RocksDB zips and SSTs match the Hadoop checksum (.crc) beside them (Spark checks zips' and SSTs')"
        )
        last = time.monotonic()
        for n, (path, err) in enumerate(iter_sidecar_checks(self.ckpt.fs, cancelled, pairs), 1):
            if err is not None:
                self._sidecar_bad[path] = err
            if time.monotonic() - last > 0.1:
                last = time.monotonic()
                yield Progress(n, len(pairs), f"checking the checksum of {path}")

    def _sidecar_zips(
        self,
        files: StoreFiles,
        pid: int,
        checks: list[FileCheck],
        bad: dict[str, tuple[str, str, list[str], int]],
    ) -> None:
        """RocksDB zips that are sound by their format but that Spark refuses to load: the zip, or an SST
        it names, does not match its Hadoop checksum (a restart copies them through Hadoop's
        ``FileSystem``, which checks it: ``ChecksumException``, tests/restart_matrix.py)."""
        pf = files.listing(pid)
        for c in checks:
            if c.file.kind != "zip" or c.error is not None or c.file.path in bad:
                continue
            at_fault = [c.file.path] if c.file.path in self._sidecar_bad else []
            at_fault += [
                f"{pf.directory}/SSTs/{name}"
                for name in sorted(c.sst_names)
                if f"{pf.directory}/SSTs/{name}" in self._sidecar_bad
            ]
            if at_fault:
                err = self._sidecar_bad[at_fault[0]]
                message = (
                    f"zip {c.file.version} cannot be loaded: {at_fault[0]} {err.message}, and Spark copies "
                    "RocksDB files through Hadoop's checked read (ChecksumException)"
                )
                bad[c.file.path] = (
                    "rocksdb_checksum",
                    message,
                    [*at_fault, crc_sidecar_path(at_fault[0])],
                    c.file.version,
                )
        for c in checks:
            if c.file.kind == "zip":
                self._sidecar_bad.pop(c.file.path, None)
                for name in c.sst_names:
                    self._sidecar_bad.pop(f"{pf.directory}/SSTs/{name}", None)

    def report_sidecars(self) -> None:
        """The files left in :attr:`_sidecar_bad`: logs, schemas, source logs, and zips or SSTs no check
        read. Spark reads the former through its checkpoint file
        manager (Hadoop's ``FileContext``), which does not check the sidecar (a restart on an offsets file
        saved again by an editor succeeds: tests/restart_matrix.py), and a restart does not load the
        latter: a note that the file changed after Spark wrote it, the evidence of an edit or of damage."""
        for path, err in sorted(self._sidecar_bad.items()):
            name = path.rsplit("/", 1)[-1]
            rocks = name.endswith((".zip", ".sst"))
            self.add(
                "checksum_mismatch",
                "info",
                f"{path} {err.message}: it changed after Spark wrote it (edited by hand, saved again, or "
                "damaged on disk). "
                + (
                    "Spark checks it when a restart copies it, but a restart of the last committed batch "
                    "does not load it"
                    if rocks
                    else "Spark reads it without checking the sidecar, so this alone does not stop a restart"
                ),
                [path, crc_sidecar_path(path)],
            )

    @staticmethod
    def _damage_of(op_id: int, checked: FileCheck) -> tuple[str, str, list[str], int]:
        """A damaged file as :meth:`_judge_damage` takes it: ``(check, message, files, version)`` (a zip's
        finding names the file at fault: an SST it names, or itself)."""
        sf, err, files = checked.file, checked.error, [checked.file.path]
        assert err is not None
        if checked.stage in ("zip", "changelog"):
            message = (
                f"the {sf.kind} of version {sf.version} cannot be read: {type(err).__name__}: {err.message}"
            )
            return f"rocksdb_{sf.kind}", message, [err.path or sf.path], sf.version
        if checked.stage == "scan":
            at = f" at byte {err.offset}" if err.offset is not None else ""
            check, message = "undecodable_file", f"{type(err).__name__}: {err.message}{at}"
            message = f"{sf.kind} {sf.version} cannot be decoded: {message}"
        elif checked.stage == "row_checksum":
            check, message = "row_checksum", f"{sf.kind} {sf.version}: {type(err).__name__}: {err.message}"
        else:
            check = "rows_disagree_with_schema"
            message = f"{sf.kind} {sf.version}: rows do not fit the store's schema: {err.message}"
            files.append(f"state/{op_id}/0/_metadata/schema")
        return check, message, files, sf.version

    def _orphan_ssts(
        self, op_id: int, store_name: str, pid: int, files: StoreFiles, checks: list[FileCheck]
    ) -> None:
        orphans = files.orphan_ssts(pid, checks)
        if orphans:
            self.add(
                "rocksdb_orphan_sst",
                "info",
                f"operator {op_id} store {store_name} partition {pid}: {len(orphans)} SST file(s), "
                f"{sum(orphans.values()):,} bytes, named by no retained zip (left by versions cleaned up, or by "
                "batches that were retried; Spark deletes them in maintenance)",
                [f"{files.listing(pid).directory}/SSTs/{n}" for n in orphans],
                operator_id=op_id,
                partition=pid,
                store_name=store_name,
            )

    def judge_known_damage(self, damage: Sequence[StatelensError]) -> None:
        """Without reading every file (``decode_files=False``): judge the state files another analysis
        found unreadable (the first look reads each store's latest version) as the full check would, by
        whether a restart reads them. The files it has not read are taken as readable; the full check
        reads them."""
        by_partition: dict[tuple[int, str, int], list[StatelensError]] = {}
        for err in damage:
            ctx = err.context
            op_id, store, pid = ctx.get("operator_id"), ctx.get("store_name"), ctx.get("partition_id")
            if err.path and op_id is not None and store is not None and pid is not None:
                by_partition.setdefault((op_id, store, pid), []).append(err)
        for (op_id, store, pid), errs in sorted(by_partition.items(), key=lambda kv: kv[0]):
            files = StoreFiles(self.native, op_id, store)  # (an unreadable store: the listing checks say so)
            if files.listing(pid) is None:
                continue
            bad: dict[str, tuple[str, str, list[str], int]] = {}
            for err in errs:
                sf = files.file_of(pid, err)
                if sf is None:
                    continue
                check = f"rocksdb_{sf.kind}" if files.provider == "rocksdb" else "undecodable_file"
                message = f"{sf.kind} {sf.version} cannot be read: {type(err).__name__}: {err.message}"
                bad.setdefault(sf.path, (check, message, [err.path or sf.path], sf.version))
                self.result.judged.add(str(err.path))
            if bad:
                self._judge_damage(op_id, self.ckpt.physical_store(op_id, store), pid, files, bad)

    def plan_restarts(self) -> None:
        """How a restart loads every store partition the listing showed, with the damage found."""
        version = self._restart_version()
        if version is None:
            return
        for key in sorted(self._layout):
            files = replace(self._layout[key], damaged=self._damage.get(key, {}))
            self.result.restart_loads.append(PartitionRestart(*key, plan_load(files, version, self.restart)))

    def _restart_version(self) -> int | None:
        last = self.ckpt.last_committed_batch_id
        return None if last is None else last + 1

    def _judge_damage(
        self,
        op_id: int,
        store_name: str,
        pid: int,
        listed: StoreFiles,
        bad: dict[str, tuple[str, str, list[str], int]],
    ) -> None:
        """Report each damaged file of one partition by whether a restart reads it.

        ``bad`` maps each damaged file's path to ``(check, message, files, version)``; the versions the
        listing can rebuild that still load are named beside a damaged file a restart does not need.
        """
        files = listed.restart_files(pid, {path: message for path, (_, message, _, _) in bad.items()})
        ctx = {"operator_id": op_id, "partition": pid, "store_name": store_name}
        where = f"operator {op_id} store {store_name} partition {pid}"
        self._damage.setdefault((op_id, store_name, pid), {}).update(files.damaged)
        version = self._restart_version()
        if version is None:  # nothing committed: no restart to judge, every damaged file is an error
            for check, message, paths, v in bad.values():
                self.add(check, "error", message, paths, batch_id=v - 1, **ctx)
            return
        load = plan_load(files, version, self.restart)
        skipped = {path for _, path, _ in load.skipped}
        still: list[int] | None = None  # the versions that still load, named beside each file not needed
        for path, (check, message, paths, v) in bad.items():
            if load.failure is not None and (path == load.failure[0] or path in skipped):
                self.add(
                    check.replace("rocksdb_", "rocksdb_restart_", 1),
                    "error",
                    f"{where}: {message}. A restart loads version {version} (the last commit, batch "
                    f"{version - 1}, + 1) and reads this file. The restart will fail"
                    + self._repair_tail(load, files),
                    paths,
                    batch_id=v - 1,
                    **ctx,
                )
            elif path not in skipped:
                if still is None:
                    still = [
                        u
                        for u in listed.listing(pid).readable_versions()
                        if plan_load(files, u, self.restart, repair=False).outcome != "fails"
                    ]
                self.add(
                    check,
                    "warning",
                    f"{where}: the retained version {v}: {message}. A restart does not need it (it loads "
                    f"version {version} from "
                    f"{load.chain_text(files) if load.base is not None else 'other files'}); "
                    + (f"versions still readable: {_ranges(still)}" if still else "no version is readable"),
                    paths,
                    batch_id=v - 1,
                    **ctx,
                )
        self._judge_load(op_id, store_name, pid, files, load, reported=set(bad))

    def _repair_tail(self, load: RestartLoad, files: PartitionFiles) -> str:
        if not load.skipped:
            return ""
        tried = ", ".join(f"{files.snapshot_kind} {v}" for v, _, _ in load.skipped)
        return f" (auto snapshot repair already skipped {tried})"

    def _judge_load(
        self,
        op_id: int,
        store_name: str,
        pid: int,
        files: PartitionFiles,
        load: RestartLoad,
        reported: set[str],
    ) -> None:
        """The restart's own findings for one partition: a load that only auto snapshot repair saves, and
        a failure on a file no other finding names."""
        ctx = {"operator_id": op_id, "partition": pid, "store_name": store_name}
        where = f"operator {op_id} store {store_name} partition {pid}"
        version = load.version
        if load.outcome == "repaired":
            bad = "; ".join(why for _, _, why in load.skipped)
            plain = load.without_repair
            fails = (
                f"{plain.failure[0]}" if plain is not None and plain.failure is not None else "the snapshot"
            )
            if self.restart.repair is None:
                tail = (
                    f" Spark 4.1 and later do this with auto snapshot repair ({REPAIR_ENABLED}, on by "
                    f"default); on Spark 3.x and 4.0, or with it set to false, the restart fails on {fails}."
                )
            else:
                tail = f" ({self.restart.text()}, {REPAIR_ENABLED} on)."
            self.add(
                "restart_snapshot_repair",
                "warning",
                f"{where}: {bad}. A restart loads version {version} by falling back to "
                f"{load.chain_text(files)}.{tail}",
                [path for _, path, _ in load.skipped],
                batch_id=version - 1,
                **ctx,
            )
        elif load.failure is not None and load.failure[0] not in reported:
            if (op_id, store_name, pid) in self._listing_flagged:
                return  # the listing checks named the missing files already
            path, why = load.failure
            self.add(
                "restart_load",
                "error",
                f"{where}: a restart loads version {version} (the last commit, batch {version - 1}, + 1) "
                f"from {load.chain_text(files) if load.base is not None else 'its newest snapshot'}: {why}. "
                "The restart will fail" + self._repair_tail(load, files),
                [path],
                batch_id=version - 1,
                **ctx,
            )

    def _restart_reads(self, operator_id: int, store_name: str) -> set[str]:
        """Paths of the state files a restart of the last committed batch reads from one store
        (:func:`readers.restart.plan_load` on the files as listed)."""
        version = self._restart_version()
        if version is None:
            return set()
        reads: set[str] = set()
        for (op_id, store, _), files in self._layout.items():
            if (op_id, store) == (operator_id, store_name):
                reads.update(plan_load(files, version, self.restart).reads)
        return reads

    def iter_spark_cross_check(
        self, backends: Any, cancelled: Callable[[], bool] | None
    ) -> Generator[Progress, None, None]:
        """Spark reads the latest committed version of every store; its rows per partition match native.

        One Spark job per store (``statestore`` at ``batchId`` = the last committed batch, counted per
        partition); the native side rebuilds each partition at that version, one at a time.
        """
        self.result.checked.append(
            "Spark reads the latest committed version of every store, rows per partition as the native decoder"
        )
        spark = backends.spark
        backends.used.add("spark")
        last = self.ckpt.last_committed_batch_id
        if last is None:
            self.add("spark_not_checked", "info", "no committed batch: Spark has no version to read")
            return
        version = last + 1
        stores = [(op, st) for op in self.ckpt.operators for st in op.stores]
        for n, (op, st) in enumerate(stores):
            if cancelled is not None and cancelled():
                return
            where = f"operator {op.operator_id} store {st.store_name}"
            ctx = {"operator_id": op.operator_id, "store_name": st.store_name, "batch_id": last}
            folder = f"state/{op.operator_id}"
            yield Progress(n, len(stores), f"Spark reads {where} version {version}")
            if op.kind == OperatorKind.TRANSFORM_WITH_STATE:
                self.add(
                    "spark_not_compared",
                    "info",
                    f"{where}: transformWithState state is read per state variable (rows --state-var); "
                    "row counts not compared",
                    [folder],
                    **ctx,
                )
                continue
            try:
                counted = spark.row_counts(op.operator_id, st.store_name, version)
            except StatelensError as err:
                self.add(
                    "spark_unreadable",
                    "error",
                    f"{where}: Spark cannot read version {version} (last committed batch {last}): {err.message}",
                    [folder],
                    **ctx,
                )
                continue
            # every partition at that version, as stored (a replay from the version's own files)
            scan = StateScan(self.native, op.operator_id, st.store_name, "replay", None, version, version)
            try:
                native = {step.partition_id: len(step.state) for step in scan.iter_replay()}
            except StatelensError as err:
                self.add(
                    "spark_not_compared",
                    "info",
                    f"{where}: Spark reads version {version} ({sum(counted.values()):,} rows); the native "
                    f"decoder cannot, nothing to compare: {err.message}",
                    [folder],
                    **ctx,
                )
                continue
            unreadable = {u.partition_id for u in scan.unreadable}  # reported by the decode checks
            for pid in sorted((set(native) | set(counted)) - unreadable):
                spark_rows = counted.get(pid, 0)
                native_rows = native.get(pid)
                if native_rows is None:  # no files rebuild the version
                    if spark_rows:
                        self.add(
                            "spark_native_disagree",
                            "error",
                            f"{where} partition {pid}: Spark reads {spark_rows:,} rows at version {version}, "
                            "the native decoder cannot rebuild that version",
                            [f"{folder}/{pid}"],
                            partition=pid,
                            **ctx,
                        )
                    continue
                if native_rows != spark_rows:
                    self.add(
                        "spark_native_disagree",
                        "error",
                        f"{where} partition {pid}: at version {version} Spark reads {spark_rows:,} rows, the "
                        f"native decoder {native_rows:,}",
                        [f"{folder}/{pid}"],
                        partition=pid,
                        **ctx,
                    )


def iter_doctor(
    ckpt: Any,
    *,
    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
    decode_files: bool = True,
    cancelled: Callable[[], bool] | None = None,
    backends: Any = None,
    event_logs: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    restart: RestartConf | None = None,
    known_damage: Sequence[StatelensError] = (),
    restart_only: bool = False,
) -> Generator[Progress, None, DoctorResult]:
    """Run every health check on an opened checkpoint.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    min_batches_to_retain : int
        ``spark.sql.streaming.minBatchesToRetain`` of the query (not recorded in the checkpoint).
    decode_files : bool
        Also decompress and scan every state file and decode a sample of its rows (reads every file).
    cancelled : callable, optional
        Polled between files.
    backends : readers.backends.BackendChooser, optional
        With the ``spark`` backend, also check that Spark reads the latest committed version of every
        store and counts the rows of each partition as the native decoder does (a disagreement is an
        error naming the store and partition).
    event_logs : list of str, optional
        Event logs, driver logs or progress dumps of the query: their progress is checked against the
        checkpoint (:mod:`app.analysis.progress_checks`).
    storage_options : dict, optional
        fsspec options for the event log URLs.
    restart : readers.restart.RestartConf, optional
        The Spark version and conf that will restart the query (default: unknown; what depends on them,
        auto snapshot repair, is said so).
    known_damage : sequence of StatelensError
        Without ``decode_files``: state files another analysis could not read, judged by whether a
        restart reads them (:meth:`_Doctor.judge_known_damage`).
    restart_only : bool
        With ``decode_files``, decode only the state files a restart of the last committed batch loads
        (per partition, the newest snapshot or zip at or below version ``last commit + 1`` and the
        deltas or changelogs after it, :func:`readers.restart.plan_load`), not every retained version: what ``statelens prune`` checks
        before copying a checkpoint.

    Yields
    ------
    Progress

    Returns
    -------
    DoctorResult
        Findings sorted worst first; ``exit_code`` 0, 1 or 2.
    """
    doc = _Doctor(ckpt, min_batches_to_retain, restart)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("logs", doc.check_load_report),
        ("batches", doc.check_batches),
        ("watermark", doc.check_watermark_and_clock),
        ("conf", doc.check_conf),
        ("temp files", doc.check_temp_files),
        ("schemas", doc.check_schemas),
        ("state versions", doc.check_state_versions),
    ]
    for n, (what, step) in enumerate(steps):
        yield Progress(n, len(steps) + 1, what)
        step()
    if decode_files:
        yield from doc.iter_check_sidecars(cancelled)
        yield from doc.iter_check_files(cancelled, restart_only)
        doc.report_sidecars()
    elif known_damage:
        doc.judge_known_damage(known_damage)
    doc.plan_restarts()
    if backends is not None and backends.name == "spark":
        yield from doc.iter_spark_cross_check(backends, cancelled)
    if event_logs:
        doc.result.checked.append(
            "the event logs' progress against the checkpoint (query id, batches, state rows)"
        )
        yield from iter_check_progress(ckpt, event_logs, doc.add, storage_options, cancelled)
    yield Progress(len(steps) + 1, len(steps) + 1, "done")
    order = {s: i for i, s in enumerate(SEVERITIES)}
    doc.result.findings.sort(key=lambda f: (order[f.severity], f.check, f.operator_id or 0, f.partition or 0))
    return doc.result

"""Follow a running query's checkpoint batch by batch: ``statelens watch`` and the app's follow mode.

A :class:`Watcher` polls the checkpoint (:meth:`readers.checkpoint.Checkpoint.refresh`: one listing, then
only the new log files) and reports every batch committed since the last poll, in order, once: its
watermark, and per store its rows, the change since the batch before and its expired-but-unremoved keys
(zombies). Each store is advanced with the scan's replay (:meth:`readers.scan.Replay.advance`), one
partition at a time from the version it reached, and each step is fed to the fold ``statelens expired``
uses (:mod:`app.analysis.expired_fold`), so a batch costs what it wrote, not the store.

A live checkpoint is read while it is written (docs/format.md §1.3, §3.5):

* a batch is reported once its commit file is read and every partition of every store lists the version
  it wrote (version ``b + 1``); before that it is *not yet readable* and looked at again at the next
  poll (offsets are written before the state, the commit after it);
* a state file listed but not readable (deleted by cleanup under the reader, an S3 object listed before
  it can be read) puts that partition back to be read whole at the next poll, never into the numbers;
* a version cleaned up before it was read (a watch started far behind) is reported as *gone*, with no
  rows;
* no new batch for ``stop_after`` polls: the query is said to have stopped; a restart is found as
  ``statelens summary`` finds it (:func:`app.analysis.runs.find_runs`: a new run id in the event log,
  operator metadata written at a run's first batch, or a gap in the batch times; docs/format.md §2.7),
  and from then on each batch says, per store, zombies and rows per batch before and after it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from statelens.app.analysis._common import BatchClock, run_to_end
from statelens.app.analysis.doctor import DoctorFinding
from statelens.app.analysis.expired import TIMEOUT_KINDS
from statelens.app.analysis.expired_fold import (
    EvictionFold,
    TimeoutFold,
    eviction_column,
    timeout_column,
)
from statelens.app.analysis.expired_result import Emitter, ExpiredResult, OperatorExpiry, TimeoutKindEvidence
from statelens.app.analysis.expired_sources import ScanSource
from statelens.app.analysis.findings import NO_TIMESTAMP
from statelens.app.analysis.runs import around, describe_change, find_runs, fix_margin
from statelens.app.analysis.timeout_kind import infer_timeout_kind
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import Checkpoint, open_checkpoint
from statelens.readers.errors import (
    BackendUnavailableError,
    FileChangedError,
    MissingFileError,
    NotACheckpointError,
    StatelensError,
    StorageError,
)
from statelens.readers.eventlog import iter_read_event_logs
from statelens.readers.model import OperatorKind
from statelens.readers.scan import Replay, StateScan

__all__ = ["BatchReport", "StoreReport", "WatchPoll", "Watcher"]

_TIMEOUT_OPERATORS = (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE)
#: Errors of a file that is not there (yet, or any more): read again at the next poll, not damage.
_TRANSIENT = (MissingFileError, FileChangedError, StorageError)
#: Polls without a new batch after which the query is said to have stopped.
DEFAULT_STOP_AFTER = 3


@dataclass(frozen=True)
class StoreReport:
    """One store after one batch.

    Attributes
    ----------
    operator_id, store_name : int, str
    rows : int or None
        Live rows of the version the batch wrote (Spark's ``numRowsTotal``); None when gone or unreadable.
    rows_delta : int or None
        Change since the batch before (None for the first batch reported).
    zombies : int or None
        Expired-but-unremoved keys at that version, as ``statelens expired`` counts them (zombies for
        timeouts, eviction lag for stores Spark evicts); None where no check applies.
    zombies_new : int or None
        Of those, the keys whose timeout fired in this batch (timeouts); the change since the batch
        before (eviction lag).
    check : str
        ``timeouts``, ``eviction`` or why none applies.
    since_fix : dict, optional
        Once a restart was seen: ``fix_batch`` and, for ``zombies`` and ``rows``, the
        :class:`app.analysis.runs.BeforeAfter` of what this watch saw around it.
    """

    operator_id: int
    store_name: str
    rows: int | None
    rows_delta: int | None
    zombies: int | None
    zombies_new: int | None
    check: str = ""
    since_fix: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "rows": self.rows,
            "rows_delta": self.rows_delta,
            "zombies": self.zombies,
            "zombies_new": self.zombies_new,
            "check": self.check,
            "since_fix": None
            if self.since_fix is None
            else {k: v if k == "fix_batch" else v.to_json() for k, v in self.since_fix.items()},
        }

    def since_fix_text(self) -> str:
        """``"since the fix at batch 5: zombies +4.0 per batch before, 0 after; rows ..."`` ("" before one)."""
        if self.since_fix is None:
            return ""
        parts = [describe_change(self.since_fix[k], k) for k in ("zombies", "rows") if k in self.since_fix]
        return f"since the restart at batch {self.since_fix['fix_batch']}: " + "; ".join(parts)


@dataclass
class BatchReport:
    """One newly committed batch.

    Attributes
    ----------
    batch_id : int
    batch_timestamp_ms, watermark_ms : int or None
        From ``offsets/<batch_id>``.
    commit_time_ms : int or None
        When the commit file was written, as the listing says (an object's ``LastModified`` on object
        stores, whole seconds on S3; the file's modification time on disk).
    stores : list of StoreReport
    findings : list of DoctorFinding
        What the doctor would now say about the batch's files and state.
    gone : bool
        The batch's state versions were cleaned up before they were read.
    duration_ms, input_rows : int or None
        From the event log's progress of the batch, when one is given.
    run_id : str or None
        The run that wrote it (event log).
    restart : str or None
        A restart of the query found at this poll, in words (at this batch, or at an earlier one whose
        run id the event log gave only later).
    """

    batch_id: int
    batch_timestamp_ms: int | None
    watermark_ms: int | None
    commit_time_ms: int | None
    stores: list[StoreReport] = field(default_factory=list)
    findings: list[DoctorFinding] = field(default_factory=list)
    gone: bool = False
    duration_ms: int | None = None
    input_rows: int | None = None
    run_id: str | None = None
    restart: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "batch_timestamp_ms": self.batch_timestamp_ms,
            "commit_time_ms": self.commit_time_ms,
            "watermark_ms": self.watermark_ms,
            "duration_ms": self.duration_ms,
            "input_rows": self.input_rows,
            "run_id": self.run_id,
            "restart": self.restart,
            "gone": self.gone,
            "stores": [s.to_json() for s in self.stores],
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass
class WatchPoll:
    """What one poll found.

    Attributes
    ----------
    batches : list of BatchReport
        Batches committed since the last poll, in order, each reported once.
    status : str
        One line: when the poll ran, what it found, what it waits for.
    stopped : bool
        No new batch for the last ``stop_after`` polls.
    restarted : list of str
        A restart seen before a batch of this poll (one line each).
    waiting : list of str
        What is not readable yet (read again at the next poll).
    unlisted : str
        Why the checkpoint could not be listed ("" when it was); the next poll lists again.
    """

    batches: list[BatchReport] = field(default_factory=list)
    status: str = ""
    stopped: bool = False
    restarted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    unlisted: str = ""


class _StoreWatch:
    """One store's replays (one per partition, so a partition that must be read again does not hold
    back the others) and its expired-keys fold."""

    def __init__(self, ckpt: Checkpoint, op: Any, st: Any, clock: BatchClock):
        self.operator_id = op.operator_id
        self.store_name = st.store_name
        self.backend = native_backend(ckpt)
        self.rows: dict[int, int | None] = {}
        self.at: dict[int, int] = {}  # partition -> version fed
        self.prev_rows: int | None = None
        self.prev_zombies: int | None = None
        self.counts: Counter[tuple[int, str, int, str]] = Counter()
        self.problems: list[StatelensError] = []
        self.fold: TimeoutFold | EvictionFold | None = None
        self.category = ""
        self.check = ""
        self._replays: dict[int, tuple[StateScan, Replay]] = {}
        self.pids = list(st.partitions)
        for pid in self.pids:
            self.restart(pid, None)
        #: The timeouts' kind could not be told yet (too few batches): inferred again at each batch.
        self.undecided = False
        self._store = (ckpt, op, st, clock)
        self._build_fold(ckpt, op, st, clock)

    def decide(self) -> None:
        """Infer an undecided timeout kind again (a watch started after the first batch or two, when
        no timeout set so far tells event from processing time); once known, the fold is built again
        and every partition fed from its oldest version, as ``statelens expired`` reads the store."""
        if not self.undecided:
            return
        fold = self.fold
        self._build_fold(*self._store)
        if self.undecided:
            self.fold = fold  # still undecided: keep the fold fed so far
            return
        self.counts.clear()
        for pid in self.pids:
            self.restart(pid, None)

    def restart(self, pid: int, version: int | None) -> None:
        """Read partition ``pid`` whole at ``version`` next (after a failed read), or from its oldest
        version (the first poll: the folds need the history, as ``statelens expired`` reads it)."""
        scan = StateScan(
            self.backend,
            self.operator_id,
            self.store_name,
            kind="replay",
            partitions=[pid],
            start_version=version,
        )
        self._replays[pid] = (scan, scan.replay())
        self.at.pop(pid, None)

    def _build_fold(self, ckpt: Checkpoint, op: Any, st: Any, clock: BatchClock) -> None:
        if st.schema is None:
            self.check = "no schema file"
            return
        try:
            source = ScanSource(self.backend, st)
        except BackendUnavailableError as err:
            self.check = err.message
            return
        summary = OperatorExpiry(op.operator_id, op.kind.value, st.store_name, "skipped")
        out = Emitter(ExpiredResult([], [], None, False, 0), None)
        if op.kind in _TIMEOUT_OPERATORS:
            path = timeout_column(op, st.store_name)
            if path is None:
                read_timeout: Callable[[Any], int | None] = lambda _v: NO_TIMESTAMP  # noqa: E731
                evidence = TimeoutKindEvidence("none", "schema", "no timeoutTimestamp column")
            else:
                read_timeout = source.value_reader(path)
                evidence = infer_timeout_kind(source, clock, read_timeout, [])
            kind = evidence.timeout_kind if evidence.timeout_kind in TIMEOUT_KINDS else None
            self.undecided = path is not None and kind is None
            self.fold = TimeoutFold(
                summary,
                out,
                clock,
                source.key_decoder,
                False,
                self.counts,
                f"{evidence.source}: {evidence.evidence}",
                read_timeout=read_timeout,
                kind=kind,
                tiebreak=source.tiebreak,
                stale_after=None,
            )
            self.category, self.check = "zombie", "timeouts"
            return
        col = eviction_column(op, st)
        if col is None:
            self.check = f"{op.kind.value}: no timeout or eviction column"
            return
        side, path, unit, _ = col
        read = source.key_reader(path) if side == "key" else source.value_reader(path)
        self.fold = EvictionFold(
            summary, out, clock, source.key_decoder, False, self.counts, "schema", read_time=read,
            side=side, unit=unit, note="",
        )  # fmt: skip
        self.category, self.check = "eviction_lag", "eviction"

    def versions(self, pid: int) -> list[int]:
        return self._replays[pid][0].versions(pid)

    def advance(self, version: int) -> list[str]:
        """Feed every partition up to ``version``; returns what must be read again at the next poll."""
        waiting: list[str] = []
        for pid in self.pids:
            if self.at.get(pid) == version:
                continue
            scan, replay = self._replays[pid]
            known = len(scan.problems)
            last = None
            for step in replay.advance(until=version):
                if any(isinstance(e, _TRANSIENT) for e in scan.problems[known:]):
                    break
                if self.fold is not None:
                    self.fold.feed(pid, step.version, step.state, step.changes, False)
                last = step
            new = scan.problems[known:]
            transient = [e for e in new if isinstance(e, _TRANSIENT)]
            # The replay names each error once: damage met before still explains a version not rebuilt.
            damaged = any(not isinstance(e, _TRANSIENT) for e in scan.problems)
            if transient or (not damaged and (last is None or last.version != version)):
                # Renamed, uploaded or deleted under the reader: this partition is read whole next time.
                waiting.extend(f"partition {pid}: {e}" for e in transient)
                if not transient:
                    waiting.append(f"partition {pid}: version {version} not readable yet")
                self.restart(pid, None)  # the fold's history of this partition is fed again too
                continue
            # Damage is reported, not waited for: the version as a restart would load it, or no rows.
            self.problems.extend(new)
            self.rows[pid] = len(last.state) if last is not None and last.version == version else None
            self.at[pid] = version
        return waiting

    def report(self, batch_id: int) -> StoreReport:
        version = batch_id + 1
        counted = [self.rows.get(pid) for pid in self.pids]
        rows = None if None in counted else sum(n or 0 for n in counted)
        zombies: int | None = None
        zombies_new: int | None = None
        if self.fold is not None:
            zombies = sum(
                n for (_, _, v, cat), n in self.counts.items() if v == version and cat == self.category
            )
            if isinstance(self.fold, TimeoutFold):
                zombies_new = sum(
                    1
                    for ts in self.fold.states.values()
                    for b0, _, _ in ts.zombies.values()
                    if b0 == batch_id
                )
            elif self.prev_zombies is not None:
                zombies_new = zombies - self.prev_zombies
            self.counts.clear()
        if rows is None:  # a partition that cannot be read: no count of the store stands
            zombies = zombies_new = None
        delta = None if self.prev_rows is None or rows is None else rows - self.prev_rows
        self.prev_rows, self.prev_zombies = rows, zombies
        return StoreReport(self.operator_id, self.store_name, rows, delta, zombies, zombies_new, self.check)


class Watcher:
    """Follow a checkpoint a query is writing, batch by batch (see the module docstring).

    Parameters
    ----------
    ckpt_url : str
        Local path or fsspec URL.
    storage_options : dict, optional
        Passed to the storage layer.
    event_logs : list of str, optional
        Event logs, driver logs or progress JSON lines of the query, read again at every poll: each
        batch gains its duration, input rows and run id, and a new run id is a restart.
    from_batch : int, optional
        The first batch to report (default: the last batch committed at the first poll).
    stop_after : int
        Polls without a new batch after which the query is said to have stopped.
    clock : callable
        Wall-clock time in seconds (for the status line).
    mirror : bool
        Keep remote files read in the local mirror (:mod:`readers.mirror`); False for ``--no-cache``.
    wait_for_checkpoint : bool
        A location that is not a checkpoint yet (a query about to start) is polled again instead of
        raising :class:`readers.errors.NotACheckpointError`.
    """

    def __init__(
        self,
        ckpt_url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        event_logs: list[str] | None = None,
        from_batch: int | None = None,
        stop_after: int = DEFAULT_STOP_AFTER,
        clock: Callable[[], float] = time.time,
        mirror: bool = True,
        wait_for_checkpoint: bool = False,
    ):
        self.mirror = mirror
        self.wait_for_checkpoint = wait_for_checkpoint
        self.url = ckpt_url
        self.storage_options = storage_options
        self.event_logs = list(event_logs or [])
        self.next_batch = from_batch
        self.stop_after = stop_after
        self._clock = clock
        self.ckpt: Checkpoint | None = None
        self._stores: dict[tuple[int, str], _StoreWatch] = {}
        self._batch_clock: BatchClock | None = None
        self._idle_polls = 0
        self._restarts: set[int] = set()
        self._fix: tuple[int, int] | None = None  # the last restart's batch, and runs.fix_margin
        #: per store, version -> zombies and version -> rows, as reported
        self._series: dict[tuple[int, str], dict[str, dict[int, int]]] = {}
        self._first_reported: int | None = None
        self.problems: list[StatelensError] = []
        self.reported = 0

    # -- one poll ----------------------------------------------------------------------------------
    def poll(self) -> WatchPoll:
        """Look at the checkpoint once and report every batch committed since the last poll, in order.

        Raises
        ------
        NotACheckpointError
            At the first poll, when the location is not a checkpoint (unless ``wait_for_checkpoint``).
        StorageError
            When the storage cannot be listed at the first poll (later, the poll says so in ``status``
            and ``waiting`` and the next one lists again).
        """
        out = WatchPoll()
        if self.ckpt is None:
            try:
                self.ckpt = open_checkpoint(self.url, self.storage_options, mirror=self.mirror)
            except NotACheckpointError as err:
                if not self.wait_for_checkpoint:
                    raise
                out.waiting.append(str(err))
                out.status = f"polled {self._now()} UTC: no checkpoint there yet ({err})"
                return out
        else:
            try:
                refresh = self.ckpt.refresh()
            except StorageError as err:  # the listing failed after its retries: the next poll lists again
                out.waiting.append(str(err))
                out.unlisted = str(err)
                self._idle_polls += 1
                out.status = f"polled {self._now()} UTC: the checkpoint could not be listed ({err})"
                return out
            out.waiting.extend(refresh.waiting)
            if refresh.reshaped:
                self._stores = {}
        ckpt = self.ckpt
        if self._batch_clock is None:
            self._batch_clock = BatchClock(ckpt)
        else:  # the folds hold this clock: bring it up to date in place
            self._batch_clock.__dict__.update(BatchClock(ckpt).__dict__)
        if self.next_batch is None and ckpt.commits:
            self.next_batch = max(ckpt.commits)
        # The event log is read again only when a batch is to be reported (it grows with the query).
        progress = self._progress() if self.next_batch in ckpt.commits else {}
        while self.next_batch is not None and self.next_batch in ckpt.commits:
            batch = self._batch(self.next_batch, out, progress)
            if batch is None:
                break
            out.batches.append(batch)
            self.next_batch += 1
        if out.batches:
            self._runs_seen(out, progress)
        self._idle_polls = 0 if out.batches else self._idle_polls + 1
        out.stopped = self._idle_polls >= self.stop_after and bool(ckpt.commits)
        out.status = self._status(out)
        self.reported += len(out.batches)
        return out

    def _progress(self) -> dict[int, Any]:
        """The event log's progress by batch id (the last run's, where a batch was run twice)."""
        if not self.event_logs:
            return {}
        try:
            read = run_to_end(iter_read_event_logs(self.event_logs, self.storage_options))
        except StatelensError as err:
            self.problems.append(err)
            return {}
        return {p.batch_id: p for p in read.progress}

    def _ensure_stores(self) -> list[_StoreWatch]:
        ckpt, clock = self.ckpt, self._batch_clock
        assert ckpt is not None and clock is not None
        for op in ckpt.operators:
            for st in op.stores:
                key = (op.operator_id, st.store_name)
                if key not in self._stores:
                    self._stores[key] = _StoreWatch(ckpt, op, st, clock)
        return [self._stores[k] for k in sorted(self._stores)]

    def _batch(self, b: int, out: WatchPoll, progress: dict[int, Any]) -> BatchReport | None:
        ckpt = self.ckpt
        assert ckpt is not None
        v = b + 1
        offsets = ckpt.offsets.get(b)
        report = BatchReport(
            b,
            offsets.timestamp_ms if offsets is not None else None,
            offsets.watermark_ms if offsets is not None else None,
            self._commit_time(b),
        )
        stores = self._ensure_stores()
        for sw in stores:
            sw.decide()
        # Every partition of every store must list version v (the commit is written after the state).
        for sw in stores:
            for pid in sw.pids:
                have = sw.versions(pid)
                if v in have:
                    continue
                if have and min(have) > v:
                    report.gone = True
                    continue
                out.waiting.append(
                    f"batch {b}: operator {sw.operator_id} {sw.store_name} partition {pid} has no "
                    f"version {v} yet"
                )
                return None
        if report.gone:  # each replay goes on from what is left (read whole, as a restart loads it)
            report.stores = [
                StoreReport(sw.operator_id, sw.store_name, None, None, None, None, sw.check) for sw in stores
            ]
            report.findings.append(
                DoctorFinding(
                    "watch", "info", f"batch {b}: its state was cleaned up before it was read", batch_id=b
                )
            )
            return report
        waiting: list[str] = []
        for sw in stores:
            waiting.extend(f"batch {b}: operator {sw.operator_id} {sw.store_name} {w}" for w in sw.advance(v))
        if waiting:
            out.waiting.extend(waiting)
            return None
        for sw in stores:
            for err in sw.problems:
                self.problems.append(err)
                report.findings.append(
                    DoctorFinding(
                        "unreadable", "error", str(err), (err.path,) if err.path else (), b,
                        sw.operator_id, None, sw.store_name,
                    )
                )  # fmt: skip
            sw.problems.clear()
            sr = sw.report(b)
            report.stores.append(sr)
            if sr.zombies_new and sw.check == "timeouts":
                report.findings.append(
                    DoctorFinding(
                        "zombies", "warning",
                        f"operator {sw.operator_id} {sw.store_name}: {sr.zombies_new} key(s) timed out in "
                        f"batch {b} and were left in the state ({sr.zombies} in all)",
                        (), b, sw.operator_id, None, sw.store_name,
                    )
                )  # fmt: skip
        p = progress.get(b)
        if p is not None:
            doc = p.to_json()  # event logs leave the query-level input rows out: summed over the sources
            report.duration_ms = doc["duration_ms"].get("triggerExecution")
            report.input_rows = doc["num_input_rows"]
            report.run_id = p.run_id
        return report

    def _commit_time(self, b: int) -> int | None:
        """When ``commits/<b>`` was written, as the poll's listing gave it (on object stores the
        object's ``LastModified``, the second it was uploaded)."""
        ckpt = self.ckpt
        assert ckpt is not None
        if not ckpt.fs.exists(f"commits/{b}"):
            return None
        return ckpt.fs.entry(f"commits/{b}").modified_ms

    def _runs_seen(self, out: WatchPoll, progress: dict[int, Any]) -> None:
        """Restarts, found as ``statelens summary`` finds them (:func:`app.analysis.runs.find_runs`), and
        per store the rates before and after the last one, on the batches of this poll."""
        ckpt = self.ckpt
        assert ckpt is not None
        runs = find_runs(ckpt, event_logs_progress=progress or None)
        first = self._first_reported if self._first_reported is not None else out.batches[0].batch_id
        self._first_reported = first
        last = out.batches[-1].batch_id
        by_batch = {r.batch_id: r for r in out.batches}
        for run in runs[1:]:
            b = run.first_batch
            if b in self._restarts or b > last:
                continue
            self._restarts.add(b)
            self._fix = (b, fix_margin(runs, b))
            if b < first:
                continue  # before this watch began: the base of the rates, not news
            why = {
                "run id": f"new run {run.run_id} (event log)",
                "operator metadata": "operator metadata written at a run's first batch",
                "gap": f"{(run.gap_ms or 0) / 1000:.0f} s after the batch before",
            }.get(run.evidence, run.evidence)
            text = f"restart at batch {b}: {why}"
            target = by_batch.get(b, out.batches[0])
            target.restart = text if target.restart is None else f"{target.restart}; {text}"
            out.restarted.append(text)
        for batch in out.batches:
            for sr in batch.stores:
                series = self._series.setdefault((sr.operator_id, sr.store_name), {"zombies": {}, "rows": {}})
                for what, n in (("zombies", sr.zombies), ("rows", sr.rows)):
                    if n is not None:
                        series[what][batch.batch_id + 1] = n
        if self._fix is None:
            return
        fix, margin = self._fix
        for batch in out.batches:
            if batch.batch_id < fix:
                continue
            stores = []
            for sr in batch.stores:
                series = self._series.get((sr.operator_id, sr.store_name), {})
                seen = {
                    what: around({v: n for v, n in vs.items() if v <= batch.batch_id + 1}, fix, margin)
                    for what, vs in series.items()
                    if vs
                }
                stores.append(replace(sr, since_fix={"fix_batch": fix, **seen}) if seen else sr)
            batch.stores = stores

    def _now(self) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(self._clock()))

    def _status(self, out: WatchPoll) -> str:
        when = self._now()
        ckpt = self.ckpt
        assert ckpt is not None
        last = max(ckpt.commits) if ckpt.commits else None
        if out.batches:
            found = f"{len(out.batches)} new batch(es), last {out.batches[-1].batch_id}"
        elif last is None:
            found = "no batch committed yet"
        else:
            found = f"no new batch (last committed {last})"
        text = f"polled {when} UTC: {found}"
        if out.waiting:
            text += f"; waiting for {len(out.waiting)} file(s) not readable yet"
        if out.stopped:
            text += f"; no new batch for {self._idle_polls} polls: the query looks stopped"
        return text

"""The expired-keys checks as folds over a store's versions (:mod:`app.analysis.expired`): each
``(partition, version, state, changes)`` step, oldest first, is fed to a fold that keeps what it needs
between versions and reports the findings of that version.

:class:`TimeoutFold` keeps each partition's timeouts, last writes and zombies (:class:`TimeoutState`);
:class:`EvictionFold` needs nothing but the version's state. Both are fed by one walk
(:func:`walk_store`), or step by step by a caller that holds a :class:`readers.scan.Replay` and feeds the
versions committed since (a live follow): the fold's state is where it resumes, nothing is read again.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from statelens.app.analysis._common import BatchClock, to_ms
from statelens.app.analysis.expired_result import Emitter, OperatorExpiry
from statelens.app.analysis.findings import (
    NO_TIMESTAMP,
    eviction_fields,
    overdue_fields,
    stale_fields,
    zombie_fields,
)
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress

if TYPE_CHECKING:
    from statelens.app.analysis.expired_sources import RowSource, ScanSource

VersionCounts = Counter[tuple[int, str, int, str]]


def eviction_column(op: Any, st: Any) -> tuple[str, tuple[int, ...], str, str] | None:
    """``(side, path, unit, name)`` of the time that decides eviction for this store, if any.

    ``readers.operators.find_time_columns`` names it per kind (session windows: the value's
    ``session_window.end``, which Spark compares with the watermark).
    """
    for tc in op.time_columns:
        if tc.store_name == st.store_name and tc.role == "event_time":
            return (tc.side, tc.path, tc.unit, tc.name)
    return None


def timeout_column(op: Any, store_name: str) -> tuple[int, ...] | None:
    """The positional path of the store's ``timeoutTimestamp`` in its values, if it has one."""
    for tc in op.time_columns:
        if tc.store_name == store_name and tc.role == "timeout":
            return tc.path
    return None


class TimeoutState:
    """Timeouts, last writes and zombies of one store partition, advanced version by version.

    Keys are whatever the source identifies them by (raw bytes natively, decoded tuples through Spark).
    """

    def __init__(
        self,
        read_timeout: Callable[[Any], int | None],
        clock: BatchClock,
        kind: str | None,
        tiebreak: Callable[[Any], Any],
        track_writes: bool = True,
    ):
        self.read_timeout = read_timeout
        self.clock = clock
        self.kind = kind
        self.tiebreak = tiebreak
        self.timeouts: dict[Any, int] = {}
        #: Key -> the version that last wrote it, for the stale check (kept only when ``track_writes``:
        #: a dict entry per key that a watch, which reports no stale keys, does without).
        self.last_write: dict[Any, int] = {}
        self.track_writes = track_writes
        self.zombies: dict[
            Any, tuple[int | None, int, int | None]
        ] = {}  # key -> (fired batch, timeout, threshold)
        self.heap: list[tuple[int, Any, Any]] = []  # (timeout, tie, key) of armed timeouts

    def step(self, v: int, state: Mapping[Any, Any], changes: list[tuple[Any, Any]] | None) -> int | None:
        """Apply version ``v`` (its whole ``state`` when ``changes`` is None); return its threshold."""
        clock, kind, read_timeout, tie = self.clock, self.kind, self.read_timeout, self.tiebreak
        b = v - 1
        thr = clock.threshold(b, kind) if kind else None
        if changes is None:
            timeouts: dict[Any, int] = {}
            for k, val in state.items():
                t = read_timeout(val)
                timeouts[k] = NO_TIMESTAMP if t is None else t
            self.timeouts = timeouts
            if self.track_writes:
                self.last_write = dict.fromkeys(state, v)  # unknown history: at least this recent
            self.zombies = zombies = {}
            self.heap = [(t, tie(k), k) for k, t in timeouts.items() if t != NO_TIMESTAMP]
            heapq.heapify(self.heap)
            if thr is not None:
                # Still holding a timeout below the threshold of the batch that wrote this version:
                # it fired then (or earlier) and was left in place (the PySpark leak shape).
                for k, t in timeouts.items():
                    if t != NO_TIMESTAMP and t < thr:
                        b0 = clock.first_batch_over(t, kind, b)  # type: ignore[arg-type]
                        zombies[k] = (b0, t, clock.threshold(b0, kind) if b0 is not None else None)  # type: ignore[arg-type]
            return thr
        timeouts, zombies, heap = self.timeouts, self.zombies, self.heap
        # Without the stale check, writes go to a scratch dict that is dropped (one branch less per key).
        last_write = self.last_write if self.track_writes else {}
        fired: dict[Any, int] = {}
        if thr is not None:
            while heap and heap[0][0] < thr:
                t, _, k = heapq.heappop(heap)
                if timeouts.get(k) == t and k not in zombies:
                    fired[k] = t
        for k, new_val in changes:
            if new_val is None:
                timeouts.pop(k, None)
                last_write.pop(k, None)
                zombies.pop(k, None)
                continue
            t2 = read_timeout(new_val)
            t2 = NO_TIMESTAMP if t2 is None else t2
            old = timeouts.get(k)
            timeouts[k] = t2
            last_write[k] = v
            if k in zombies and t2 != NO_TIMESTAMP:
                rearmed = t2 >= thr if thr is not None else t2 != old
                if rearmed:
                    del zombies[k]
            if t2 != NO_TIMESTAMP and k not in zombies and k not in fired:
                heapq.heappush(heap, (t2, tie(k), k))
        for k, t in fired.items():
            t2 = timeouts.get(k)
            if t2 is None:
                continue  # removed: the function cleaned up
            if t2 == NO_TIMESTAMP or t2 < thr:  # type: ignore[operator]
                zombies[k] = (b, t, thr)
            else:
                heapq.heappush(heap, (t2, tie(k), k))
        if len(heap) > 2 * len(timeouts) + 1024:
            self.heap = [
                (t, tie(k), k) for k, t in timeouts.items() if t != NO_TIMESTAMP and k not in zombies
            ]
            heapq.heapify(self.heap)
        return thr


def _timeout_candidates(
    ts: TimeoutState,
    clock: BatchClock,
    kind: str | None,
    evidence: str,
    v: int,
    thr: int | None,
    stale_after: int | None,
    is_latest: bool,
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``(key, finding fields)`` of what one partition holds at version ``v``: zombies, overdue, stale."""
    b = v - 1
    kind_label = kind or "none"
    timeouts, zombies, last_write = ts.timeouts, ts.zombies, ts.last_write
    for k, (b0, t0, thr0) in zombies.items():
        yield k, zombie_fields(v, b0, t0, thr0, timeouts.get(k), thr, kind_label, evidence)
    if is_latest and kind is not None:
        nthr, source = clock.next_threshold(b, kind)
        if nthr is not None:
            for k, t in timeouts.items():
                if t != NO_TIMESTAMP and t < nthr and k not in zombies:
                    yield k, overdue_fields(v, t, nthr, source, kind_label, evidence)
    if stale_after:
        ts_now = clock.timestamp_ms.get(b)
        for k, t in timeouts.items():
            if t != NO_TIMESTAMP or k in zombies:
                continue
            written = last_write.get(k, v)
            if v - written >= stale_after:
                yield k, stale_fields(v, written, ts_now, clock.timestamp_ms.get(written - 1))


def _count_timeout_findings(
    where: tuple[int, str, int], ts: TimeoutState, stale_after: int | None, counts: VersionCounts
) -> None:
    """What :func:`_timeout_candidates` would report at a non-latest version ``where`` (operator, store,
    version), counted, keys not decoded."""
    v = where[2]
    if ts.zombies:
        counts[(*where, "zombie")] += len(ts.zombies)
    if stale_after:
        zombies, last_write = ts.zombies, ts.last_write
        n = sum(
            1
            for k, t in ts.timeouts.items()
            if t == NO_TIMESTAMP and k not in zombies and v - last_write.get(k, v) >= stale_after
        )
        if n:
            counts[(*where, "stale")] += n


def _eviction_candidates(
    behind: Iterable[tuple[Any, int]], clock: BatchClock, b: int, wm: int, note: str, evidence: str
) -> Iterator[tuple[Any, dict[str, Any]]]:
    for k, t in behind:
        yield k, eviction_fields(b + 1, clock.first_batch_over(t, "event_time", b), t, wm, note, evidence)


@dataclass
class _Fold:
    """What both folds share: where findings go, which versions report them, the keys' decoders."""

    summary: OperatorExpiry
    out: Emitter
    clock: BatchClock
    key_decoder: Callable[[int], Any]
    all_versions: bool
    version_counts: VersionCounts | None
    evidence: str
    _keys: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    #: The walk must give every version's whole state (not only its changes).
    needs_state: ClassVar[bool] = False

    @property
    def only_last(self) -> bool:
        """Only each partition's latest version is reported or counted: a source that can read it alone
        may skip the others."""
        return False

    def keys(self, partition_id: int) -> Any:
        if partition_id not in self._keys:
            self._keys[partition_id] = self.key_decoder(partition_id)
        return self._keys[partition_id]

    def forget_others(self, partition_id: int) -> None:
        """Drop what is kept for every partition but ``partition_id`` (a walk that has finished them)."""
        self._keys = {p: k for p, k in self._keys.items() if p == partition_id}

    def feed(
        self, partition_id: int, version: int, state: Mapping[Any, Any], changes: Any, latest: bool
    ) -> None:
        """Fold one version of one partition (``state`` after it, ``changes`` that made it or None when
        rebuilt whole, as :class:`readers.scan.ReplayStep` has them) and report its findings: all of
        them when ``latest`` (the newest version fed) or ``all_versions``, else only counted into
        ``version_counts``."""
        raise NotImplementedError


@dataclass(kw_only=True)
class TimeoutFold(_Fold):
    """Timeouts of one (flat)MapGroupsWithState / applyInPandasWithState store, folded version by version:
    zombies, overdue and stale keys (:class:`TimeoutState` per partition)."""

    read_timeout: Callable[[Any], int | None]
    kind: str | None
    tiebreak: Callable[[Any], Any]
    stale_after: int | None
    states: dict[int, TimeoutState] = field(default_factory=dict, init=False, repr=False)

    def forget_others(self, partition_id: int) -> None:
        super().forget_others(partition_id)
        self.states = {p: ts for p, ts in self.states.items() if p == partition_id}

    def feed(
        self, partition_id: int, version: int, state: Mapping[Any, Any], changes: Any, latest: bool
    ) -> None:
        ts = self.states.get(partition_id)
        if ts is None:
            ts = self.states[partition_id] = TimeoutState(
                self.read_timeout, self.clock, self.kind, self.tiebreak, track_writes=bool(self.stale_after)
            )
        thr = ts.step(version, state, changes)
        summary = self.summary
        if latest:
            summary.keys_at_latest += len(ts.timeouts)
        if self.all_versions or latest:
            found = _timeout_candidates(
                ts, self.clock, self.kind, self.evidence, version, thr, self.stale_after, latest
            )
            self.out.emit(summary, partition_id, version, found, self.keys(partition_id))
        elif self.version_counts is not None:
            where = (summary.operator_id, summary.store_name, version)
            _count_timeout_findings(where, ts, self.stale_after, self.version_counts)


@dataclass(kw_only=True)
class EvictionFold(_Fold):
    """Rows of a store Spark evicts itself (aggregation, deduplication, join, session window) whose event
    time is behind the watermark of the batch that wrote the version: each version on its own."""

    read_time: Callable[[Any], int | None]
    side: str
    unit: str
    note: str
    needs_state: ClassVar[bool] = True

    @property
    def only_last(self) -> bool:
        return not self.all_versions and self.version_counts is None

    def feed(
        self, partition_id: int, version: int, state: Mapping[Any, Any], changes: Any, latest: bool
    ) -> None:
        summary = self.summary
        if latest:
            summary.keys_at_latest += len(state)
        count_only = not (self.all_versions or latest)
        if count_only and self.version_counts is None:
            return
        b = version - 1
        wm = self.clock.watermark_ms.get(b)
        if not wm:
            return
        read, unit, on_key = self.read_time, self.unit, self.side == "key"
        behind = (
            (k, t)
            for k, t in ((k, to_ms(read(k if on_key else val), unit)) for k, val in state.items())
            if t is not None and t < wm
        )
        if count_only:
            n = sum(1 for _ in behind)
            if n and self.version_counts is not None:
                self.version_counts[(summary.operator_id, summary.store_name, version, "eviction_lag")] += n
            return
        found = _eviction_candidates(behind, self.clock, b, wm, self.note, self.evidence)
        self.out.emit(summary, partition_id, version, found, self.keys(partition_id))


def walk_store(
    source: ScanSource | RowSource,
    fold: _Fold,
    problems: list[StatelensError],
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, None]:
    """Feed every version the source walks to ``fold``, once: each partition's latest version (as the
    source lists it) is fed as the latest; files that cannot be read go to ``problems``."""
    summary = fold.summary
    pids = source.partition_ids()
    last_versions = {pid: source.last_version(pid) for pid in pids}
    where = f"operator {summary.operator_id} {summary.store_name}"
    last_tick = time.monotonic()
    current: int | None = None
    walk = source.walk(problems, cancelled, need_state=fold.needs_state, only_last=fold.only_last)
    try:
        for pid, v, state, changes in walk:
            if pid != current:
                current = pid
                if source.partition_major:
                    fold.forget_others(pid)  # a finished partition is not seen again
                    yield Progress(
                        pids.index(pid) if pid in pids else 0, len(pids), f"{where}: partition {pid}"
                    )
            summary.versions_read += 1
            fold.feed(pid, v, state, changes, v == last_versions.get(pid))
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(
                    pids.index(pid) if pid in pids else 0, len(pids), f"{where}: partition {pid}, version {v}"
                )
    finally:
        walk.close()

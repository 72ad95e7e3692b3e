"""Expired-but-unremoved keys: zombies, overdue and stale keys, and eviction lag (issue 3 §1).

In ``(flat)MapGroupsWithState`` and ``applyInPandasWithState`` Spark only *calls* the user function with
``hasTimedOut``; removing the state is the user's job (``shared/spec/checkpoint-format.md`` §7.3,
§7.3.1). The timeout lives in the value's last field ``timeoutTimestamp`` (ms, ``-1`` = none). A
processing-time timeout fires in batch ``b`` when ``timeoutTimestamp < batchTimestampMs(b)``, an
event-time one when ``timeoutTimestamp < batchWatermarkMs(b)`` (both from ``offsets/<b>``, §2.2).
Version ``v`` is the state after batch ``v-1`` (§1.2).

What a leak looks like on disk differs, and all of these are zombies:

* PySpark ``applyInPandasWithState``, function does nothing on timeout: the key is not even rewritten,
  the old expired timeout stays and fires again in every later batch;
* Scala ``(flat)MapGroupsWithState``, neither removed nor re-armed: stored again with ``-1``;
* ``state.update()`` without a new timeout: stored with ``-1``, never fires again.

Categories:

``zombie``
    the timeout fired in a batch and the key is still there after it, not re-armed to a later time;
``overdue``
    the timeout is below the next batch's threshold (known from an uncommitted ``offsets/<b>`` or the
    last commit's ``nextBatchWatermarkMs``) but no batch has processed it yet: the query stopped first;
``stale``
    no timeout, and no batch has written the key for at least K versions;
``eviction_lag``
    for operators Spark evicts itself (aggregation and deduplication with a watermark, joins, session
    windows): the key's event time is behind the watermark of the batch that wrote the version, yet it
    is still there.

The checkpoint does not record whether timeouts are event- or processing-time: it is inferred from the
timeouts freshly set in the deltas (:func:`infer_timeout_kind`), or given with ``timeout_kind``.

Versions are streamed per partition (:func:`app.analysis._common.walk_partition`); only the timeout
slot of changed values is read, and only reported keys are decoded.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from app.analysis._common import BatchClock, int_reader, row_converter, to_ms, walk_partition
from readers.errors import BackendUnavailableError, StatelensError, UsageError
from readers.model import OperatorKind, Progress

CATEGORIES = ("zombie", "overdue", "stale", "eviction_lag")
TIMEOUT_KINDS = ("event_time", "processing_time")
DEFAULT_STALE_AFTER = 10
NO_TIMESTAMP = -1

_TIMEOUT_OPERATORS = (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE)
_EVICTING_OPERATORS = (
    OperatorKind.AGGREGATION,
    OperatorKind.DEDUPLICATION,
    OperatorKind.DEDUPLICATION_WITHIN_WATERMARK,
    OperatorKind.JOIN,
    OperatorKind.SESSION_WINDOW,
)
#: Fresh timeout samples after which the timeout-kind inference stops reading.
_INFERENCE_SAMPLES = 500
_JOIN_NOTE = (
    "joins with a time-range condition keep rows up to the range width behind the watermark by design"
)


@dataclass(frozen=True)
class ExpiredFinding:
    """One expired-but-present key at one version of one store partition.

    ``batch_id`` is the batch in which the timeout fired (zombie), would fire (overdue: the next
    batch), in which the watermark first passed the event time (eviction lag), or that last wrote the
    key (stale). ``timeout_ms`` is the timeout that fired (or the event time, for eviction lag), in ms;
    ``stored_timeout_ms`` what the store holds now (``-1`` for Scala-style leaks). ``age_batches``
    counts the batches that ran since the threshold passed ``timeout_ms`` (0 for overdue; for stale,
    versions since the last write); ``age_ms`` is how far the current threshold is past it.
    """

    operator_id: int
    store_name: str
    partition: int
    version: int
    batch_id: int | None
    category: str
    key: Any
    timeout_ms: int | None
    threshold_ms: int | None
    timeout_kind: str
    age_batches: int | None
    age_ms: int | None
    stored_timeout_ms: int | None = None
    note: str = ""
    evidence: str = ""  # how the timeout kind was decided: "inferred: ...", "override", "schema: ..."

    def to_json(self) -> dict[str, Any]:
        """The issue's JSON object (plus ``store_name``, ``stored_timeout_ms``, ``note``, ``evidence``)."""
        return {
            "operator_id": self.operator_id,
            "partition": self.partition,
            "version": self.version,
            "batch_id": self.batch_id,
            "category": self.category,
            "key": self.key,
            "timeout_ms": self.timeout_ms,
            "threshold_ms": self.threshold_ms,
            "timeout_kind": self.timeout_kind,
            "age_batches": self.age_batches,
            "age_ms": self.age_ms,
            "store_name": self.store_name,
            "stored_timeout_ms": self.stored_timeout_ms,
            "note": self.note,
            "timeout_kind_evidence": self.evidence,
        }


@dataclass(frozen=True)
class TimeoutKindEvidence:
    """How the timeout kind of an operator was decided."""

    timeout_kind: str | None  # "event_time" | "processing_time" | "none" | None (undecided)
    source: str  # "override" | "inferred" | "schema" | "undecided"
    evidence: str
    samples: int = 0


@dataclass
class OperatorExpiry:
    """What was checked for one store of one operator, and how."""

    operator_id: int
    kind: str
    store_name: str
    check: str  # "timeouts" | "eviction" | "skipped"
    timeout_kind: TimeoutKindEvidence | None = None
    reason: str = ""
    partitions: int = 0
    versions_read: int = 0
    keys_at_latest: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        tk = self.timeout_kind
        return {
            "operator_id": self.operator_id,
            "kind": self.kind,
            "store_name": self.store_name,
            "check": self.check,
            "timeout_kind": tk.timeout_kind if tk else None,
            "timeout_kind_source": tk.source if tk else None,
            "timeout_kind_evidence": tk.evidence if tk else None,
            "reason": self.reason,
            "partitions": self.partitions,
            "versions_read": self.versions_read,
            "keys_at_latest": self.keys_at_latest,
            "counts": dict(self.counts),
        }


@dataclass
class ExpiredResult:
    """Everything ``statelens expired`` found."""

    findings: list[ExpiredFinding]
    operators: list[OperatorExpiry]
    problems: list[StatelensError]
    stale_after: int | None
    all_versions: bool

    def counts(self) -> dict[str, int]:
        c = Counter(f.category for f in self.findings)
        return {k: c.get(k, 0) for k in CATEGORIES}


# -- timeout kind --------------------------------------------------------------------------------------
def infer_timeout_kind(
    reader: Any,
    clock: BatchClock,
    read_timeout: Callable[[bytes], int | None],
    problems: list[StatelensError],
    max_samples: int = _INFERENCE_SAMPLES,
) -> TimeoutKindEvidence:
    """Decide whether an operator's timeouts are event- or processing-time from the stored values.

    A timeout is *fresh* when a batch wrote it (new key, or a value different from before). A fresh
    processing-time timeout is ``batchTimestampMs + duration`` with a positive duration (only
    ``setTimeoutDuration`` exists for it), so it is after its batch's timestamp; a fresh event-time
    timeout must not be older than the batch's watermark (Spark refuses it) and needs a watermark at
    all. Contradictions decide; otherwise a constant ``timeout - batch timestamp`` (one duration for
    all keys) means processing time, and the nearer clock decides as a last resort.

    Parameters
    ----------
    reader : HDFSStoreReader
        The operator's store.
    clock : BatchClock
        Batch timestamps and watermarks.
    read_timeout : callable
        Reads ``timeoutTimestamp`` from raw value bytes.
    problems : list
        Unreadable files are appended here.
    max_samples : int
        Stop reading after this many fresh timeouts.

    Returns
    -------
    TimeoutKindEvidence
    """
    samples: list[tuple[int, int | None, int]] = []  # (timeout, batch timestamp, batch watermark)
    for pid in reader.partition_ids():
        prev: dict[bytes, int] = {}
        for v, state, changes in walk_partition(reader, pid, problems):
            b = v - 1
            items = changes if changes is not None else list(state.items())
            seen: dict[bytes, int] = {}
            for k, val in items:
                if val is None:
                    prev.pop(k, None)
                    continue
                t = read_timeout(val)
                t = NO_TIMESTAMP if t is None else t
                if t != NO_TIMESTAMP and prev.get(k) != t and changes is not None:
                    samples.append((t, clock.timestamp_ms.get(b), clock.watermark_ms.get(b, 0)))
                seen[k] = t
            if changes is None:
                prev = seen
            else:
                prev.update(seen)
            if len(samples) >= max_samples:
                break
        if len(samples) >= max_samples:
            break
    return _decide_timeout_kind(samples, clock)


def _decide_timeout_kind(samples: list[tuple[int, int | None, int]], clock: Any) -> TimeoutKindEvidence:
    """Pick the timeout kind from fresh ``(timeout, batch timestamp, batch watermark)`` samples."""
    n = len(samples)
    if n == 0:
        return TimeoutKindEvidence(
            None, "undecided", "no batch ever set a timeout in the versions read, so nothing can have fired"
        )
    any_watermark = any(w for w in clock.watermark_ms.values())
    timed = [(t, ts) for t, ts, _ in samples if ts is not None]
    proc_bad = sum(1 for t, ts in timed if t <= ts)
    evt_bad = sum(1 for t, _, wm in samples if wm and t < wm)
    offsets = Counter(t - ts for t, ts in timed)
    top_offset, top_count = offsets.most_common(1)[0] if offsets else (None, 0)
    fixed = f"{top_count} of {len(timed)} exactly {top_offset} ms after their batch timestamp"
    if not any_watermark:
        return TimeoutKindEvidence(
            "processing_time",
            "inferred",
            f"no batch had a watermark (event-time timeouts need one); {n} timeouts set"
            + (f", {fixed}" if top_count > 1 else ""),
            n,
        )
    if proc_bad and not evt_bad:
        return TimeoutKindEvidence(
            "event_time",
            "inferred",
            f"{proc_bad} of {len(timed)} timeouts were set at or before their batch's timestamp "
            "(impossible for processing-time timeouts); none below the batch watermark",
            n,
        )
    if evt_bad and not proc_bad:
        return TimeoutKindEvidence(
            "processing_time",
            "inferred",
            f"{evt_bad} of {n} timeouts were set below their batch's watermark (Spark refuses that for "
            "event-time timeouts); all after their batch timestamp" + (f", {fixed}" if top_count > 1 else ""),
            n,
        )
    if not proc_bad and not evt_bad:
        # Both clocks fit (event times close to wall-clock time). setTimeoutDuration gives one or a few
        # fixed offsets from the batch timestamp; event-time timeouts follow the data instead.
        if top_count >= 2 and top_count >= 0.3 * len(timed):
            return TimeoutKindEvidence(
                "processing_time", "inferred",
                f"{fixed} (a setTimeoutDuration); no contradiction either way, so weak evidence: "
                "override with --timeout-kind", n,
            )
        return TimeoutKindEvidence(
            "event_time", "inferred",
            f"{len(offsets)} different offsets from the batch timestamp among {len(timed)} timeouts: they "
            "follow the data, not the batch clock; no contradiction either way, so weak evidence: override "
            "with --timeout-kind", n,
        )
    kind = "event_time" if proc_bad > evt_bad else "processing_time"
    return TimeoutKindEvidence(
        kind,
        "inferred",
        f"conflicting: {proc_bad} timeouts at/before their batch timestamp, {evt_bad} below the watermark; "
        "chose the kind with fewer contradictions, override with --timeout-kind",
        n,
    )


# -- the analysis --------------------------------------------------------------------------------------
def iter_expired(
    ckpt: Any,
    operator_id: int | None = None,
    *,
    all_versions: bool = False,
    stale_after: int | None = DEFAULT_STALE_AFTER,
    timeout_kind: str | None = None,
    cancelled: Callable[[], bool] | None = None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
) -> Generator[Progress, None, ExpiredResult]:
    """Find expired-but-unremoved keys in every (or one) stateful operator.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    operator_id : int, optional
        Only this operator.
    all_versions : bool
        Report every readable version, not only each partition's latest.
    stale_after : int or None
        Versions without a write after which a key without timeout is ``stale``; ``None`` or 0 turns
        the check off.
    timeout_kind : {"event_time", "processing_time"}, optional
        Override the inferred timeout kind of (flat)MapGroupsWithState / applyInPandasWithState.
    cancelled : callable, optional
        Polled between versions; when it returns True the walk stops early.
    version_counts : Counter, optional
        Without ``all_versions``: also count what would be reported at every earlier version, into
        ``version_counts[(operator_id, store_name, version, category)]``, without decoding those keys
        or keeping findings for them (the over-time view of a large store in bounded memory). The
        latest versions are not counted there: their findings are in the result.

    Yields
    ------
    Progress

    Returns
    -------
    ExpiredResult

    Raises
    ------
    UsageError
        Unknown operator or timeout kind.
    """
    if timeout_kind is not None and timeout_kind not in TIMEOUT_KINDS:
        raise UsageError(f"unknown timeout kind {timeout_kind!r}; use one of: {', '.join(TIMEOUT_KINDS)}")
    operators = [ckpt.operator(operator_id)] if operator_id is not None else list(ckpt.operators)
    clock = BatchClock(ckpt)
    findings: list[ExpiredFinding] = []
    summaries: list[OperatorExpiry] = []
    problems: list[StatelensError] = []
    jobs = [(op, st) for op in operators for st in op.stores]
    for n, (op, st) in enumerate(jobs):
        summary = OperatorExpiry(op.operator_id, op.kind.value, st.store_name, "skipped")
        summaries.append(summary)
        yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name}")
        if st.schema is None:
            summary.reason = "no schema file: rows cannot be decoded"
            continue
        try:
            reader = ckpt.store_reader(op.operator_id, st.store_name)
        except BackendUnavailableError as unreadable:  # e.g. RocksDB column families (transformWithState)
            summary.reason = unreadable.message
            continue
        if op.kind in _TIMEOUT_OPERATORS:
            summary.check = "timeouts"
            yield from _check_timeouts(
                op, reader, clock, summary, findings, problems, all_versions, stale_after, timeout_kind, cancelled,
                version_counts,
            )
        elif op.kind in _EVICTING_OPERATORS:
            col = _eviction_column(op, st)
            if col is None and op.kind == OperatorKind.JOIN:
                summary.reason = "join key counts: evicted together with the keyWithIndexToValue rows"
                continue
            if col is None:
                summary.reason = (
                    "no event-time column (no watermark on a grouping/dedup key): Spark never evicts this "
                    "state, see growth"
                )
                continue
            summary.check = "eviction"
            yield from _check_eviction(op, reader, clock, col, summary, findings, problems, all_versions, cancelled,
                                       version_counts)
        else:
            summary.reason = f"{op.kind.value}: no timeout or eviction rule known"
    yield Progress(len(jobs), len(jobs), "expired keys")
    findings.sort(key=lambda f: (f.operator_id, f.store_name, f.partition, f.version, CATEGORIES.index(f.category)))
    unique: dict[str, StatelensError] = {}
    for err in problems:  # the inference pass and the main pass meet the same bad files
        unique.setdefault(str(err), err)
    return ExpiredResult(findings, summaries, list(unique.values()), stale_after or None, all_versions)


def _eviction_column(op: Any, st: Any) -> tuple[str, tuple[int, ...], str, str] | None:
    """``(side, path, unit, name)`` of the time that decides eviction for this store, if any.

    ``readers.operators.find_time_columns`` names it per kind (session windows: the value's
    ``session_window.end``, which Spark compares with the watermark).
    """
    for tc in op.time_columns:
        if tc.store_name == st.store_name and tc.role == "event_time":
            return (tc.side, tc.path, tc.unit, tc.name)
    return None


def _timeout_column(op: Any, store_name: str) -> tuple[int, ...] | None:
    for tc in op.time_columns:
        if tc.store_name == store_name and tc.role == "timeout":
            return tc.path
    return None


class _KeyDecoder:
    """Decodes reported raw keys of one partition in batches, caching the JSON form."""

    def __init__(self, reader: Any, partition_id: int):
        self.reader = reader
        self.partition_id = partition_id
        self.cache: dict[bytes, Any] = {}
        self.convert = row_converter(reader.schema.key_schema)

    def decode(self, keys: list[bytes]) -> None:
        todo = [k for k in keys if k not in self.cache]
        if not todo:
            return
        path = f"state/{self.reader.operator_id}/{self.partition_id}"
        decoded = self.reader.decode_pairs([(k, None) for k in todo], path)
        convert = self.convert
        for raw, (key, _) in zip(todo, decoded, strict=True):
            self.cache[raw] = convert(key)

    def __getitem__(self, raw: bytes) -> Any:
        return self.cache[raw]


def _value_layout(reader: Any) -> Any:
    from readers.unsaferow import compile_layout

    return compile_layout(reader.schema.value_schema, long_fields=reader.long_value_fields)


def _key_layout(reader: Any) -> Any:
    from readers.unsaferow import compile_layout

    return compile_layout(reader.schema.key_schema)


def _check_timeouts(
    op: Any,
    reader: Any,
    clock: BatchClock,
    summary: OperatorExpiry,
    findings: list[ExpiredFinding],
    problems: list[StatelensError],
    all_versions: bool,
    stale_after: int | None,
    override: str | None,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
) -> Generator[Progress, None, None]:
    path = _timeout_column(op, reader.store_name)
    if path is None:
        read_timeout: Callable[[bytes], int | None] = lambda _v: NO_TIMESTAMP  # noqa: E731
        evidence = TimeoutKindEvidence("none", "schema", "no timeoutTimestamp column: timeouts are not configured")
    else:
        read_timeout = int_reader(_value_layout(reader), path)
        if override is not None:
            evidence = TimeoutKindEvidence(override, "override", "given with --timeout-kind")
        else:
            yield Progress(0, 1, f"operator {op.operator_id}: inferring the timeout kind")
            evidence = infer_timeout_kind(reader, clock, read_timeout, problems)
    summary.timeout_kind = evidence
    kind = evidence.timeout_kind if evidence.timeout_kind in TIMEOUT_KINDS else None
    ev_text = f"{evidence.source}: {evidence.evidence}"
    pids = reader.partition_ids()
    summary.partitions = len(pids)
    last_tick = time.monotonic()
    for n, pid in enumerate(pids):
        yield Progress(n, len(pids), f"operator {op.operator_id}: partition {pid}")
        versions = reader.versions(pid)
        if not versions:
            continue
        last_version = versions[-1]
        keys = _KeyDecoder(reader, pid)
        timeouts: dict[bytes, int] = {}
        last_write: dict[bytes, int] = {}
        zombies: dict[bytes, tuple[int | None, int, int | None]] = {}  # key -> (fired batch, timeout, threshold)
        heap: list[tuple[int, bytes]] = []
        for v, state, changes in walk_partition(reader, pid, problems, cancelled):
            summary.versions_read += 1
            b = v - 1
            thr = clock.threshold(b, kind) if kind else None
            if changes is None:
                timeouts = {}
                for k, val in state.items():
                    t = read_timeout(val)
                    timeouts[k] = NO_TIMESTAMP if t is None else t
                last_write = dict.fromkeys(state, v)  # unknown history: at least this recent
                zombies = {}
                heap = [(t, k) for k, t in timeouts.items() if t != NO_TIMESTAMP]
                heapq.heapify(heap)
                if thr is not None:
                    # Still holding a timeout below the threshold of the batch that wrote this version:
                    # it fired then (or earlier) and was left in place (the PySpark leak shape).
                    for k, t in timeouts.items():
                        if t != NO_TIMESTAMP and t < thr:
                            b0 = clock.first_batch_over(t, kind, b)  # type: ignore[arg-type]
                            zombies[k] = (b0, t, clock.threshold(b0, kind) if b0 is not None else None)  # type: ignore[arg-type]
            else:
                fired: dict[bytes, int] = {}
                if thr is not None:
                    while heap and heap[0][0] < thr:
                        t, k = heapq.heappop(heap)
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
                        heapq.heappush(heap, (t2, k))
                for k, t in fired.items():
                    t2 = timeouts.get(k)
                    if t2 is None:
                        continue  # removed: the function cleaned up
                    if t2 == NO_TIMESTAMP or t2 < thr:  # type: ignore[operator]
                        zombies[k] = (b, t, thr)
                    else:
                        heapq.heappush(heap, (t2, k))
                if len(heap) > 2 * len(timeouts) + 1024:
                    heap = [(t, k) for k, t in timeouts.items() if t != NO_TIMESTAMP and k not in zombies]
                    heapq.heapify(heap)
            if v == last_version:
                summary.keys_at_latest += len(state)
            if all_versions or v == last_version:
                _emit_timeout_findings(
                    op, reader, clock, kind, ev_text, pid, v, thr, timeouts, last_write, zombies, keys,
                    stale_after, v == last_version, findings, summary,
                )
            elif version_counts is not None:
                _count_timeout_findings(op, reader, v, timeouts, last_write, zombies, stale_after, version_counts)
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(n, len(pids), f"operator {op.operator_id}: partition {pid}, version {v}")


def _emit_timeout_findings(
    op: Any,
    reader: Any,
    clock: BatchClock,
    kind: str | None,
    evidence: str,
    pid: int,
    v: int,
    thr: int | None,
    timeouts: dict[bytes, int],
    last_write: dict[bytes, int],
    zombies: dict[bytes, tuple[int | None, int, int | None]],
    keys: _KeyDecoder,
    stale_after: int | None,
    is_latest: bool,
    findings: list[ExpiredFinding],
    summary: OperatorExpiry,
) -> None:
    b = v - 1
    kind_label = kind or "none"
    out: list[tuple[bytes, dict[str, Any]]] = []
    for k, (b0, t0, thr0) in zombies.items():
        stored = timeouts.get(k)
        note = (
            "old expired timeout left in place: fires again every batch"
            if stored == t0
            else "stored again without a timeout (-1): never fires again"
        )
        out.append((k, dict(
            category="zombie", batch_id=b0, timeout_ms=t0, threshold_ms=thr0, timeout_kind=kind_label,
            age_batches=(b - b0 + 1) if b0 is not None else None,
            age_ms=(thr - t0) if thr is not None else None, stored_timeout_ms=stored, note=note,
        )))
    if is_latest and kind is not None:
        nthr, source = clock.next_threshold(b, kind)
        if nthr is not None:
            for k, t in timeouts.items():
                if t != NO_TIMESTAMP and t < nthr and k not in zombies:
                    out.append((k, dict(
                        category="overdue", batch_id=v, timeout_ms=t, threshold_ms=nthr, timeout_kind=kind_label,
                        age_batches=0, age_ms=nthr - t, stored_timeout_ms=t,
                        note=f"no batch processed it; next threshold from {source}",
                    )))
    if stale_after:
        ts_now = clock.timestamp_ms.get(b)
        for k, t in timeouts.items():
            if t != NO_TIMESTAMP or k in zombies:
                continue
            written = last_write.get(k, v)
            if v - written >= stale_after:
                ts_then = clock.timestamp_ms.get(written - 1)
                out.append((k, dict(
                    category="stale", batch_id=written - 1, timeout_ms=NO_TIMESTAMP, threshold_ms=None,
                    timeout_kind="none", age_batches=v - written,
                    age_ms=(ts_now - ts_then) if ts_now is not None and ts_then is not None else None,
                    stored_timeout_ms=NO_TIMESTAMP,
                    note="no timeout and not written since" + (" (at least)" if written == v else ""),
                )))
    if not out:
        return
    keys.decode([k for k, _ in out])
    for k, fields in out:
        ev = evidence if fields["category"] != "stale" else "no timeout set on the key"
        findings.append(ExpiredFinding(op.operator_id, reader.store_name, pid, v, key=keys[k], evidence=ev, **fields))
        summary.counts[fields["category"]] = summary.counts.get(fields["category"], 0) + 1


def _count_timeout_findings(
    op: Any,
    reader: Any,
    v: int,
    timeouts: dict[bytes, int],
    last_write: dict[bytes, int],
    zombies: dict[bytes, tuple[int | None, int, int | None]],
    stale_after: int | None,
    counts: Counter[tuple[int, str, int, str]],
) -> None:
    """What :func:`_emit_timeout_findings` would report at a non-latest version, counted, keys not decoded."""
    where = (op.operator_id, reader.store_name, v)
    if zombies:
        counts[(*where, "zombie")] += len(zombies)
    if stale_after:
        n = sum(1 for k, t in timeouts.items()
                if t == NO_TIMESTAMP and k not in zombies and v - last_write.get(k, v) >= stale_after)
        if n:
            counts[(*where, "stale")] += n


def _check_eviction(
    op: Any,
    reader: Any,
    clock: BatchClock,
    col: tuple[str, tuple[int, ...], str, str],
    summary: OperatorExpiry,
    findings: list[ExpiredFinding],
    problems: list[StatelensError],
    all_versions: bool,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
) -> Generator[Progress, None, None]:
    side, path, unit, name = col
    read = int_reader(_key_layout(reader) if side == "key" else _value_layout(reader), path)
    summary.timeout_kind = TimeoutKindEvidence(
        "event_time", "schema", f"Spark evicts rows whose {side} field {name} is behind the watermark"
    )
    note = _JOIN_NOTE if op.kind == OperatorKind.JOIN else ""
    ev_text = f"schema: {summary.timeout_kind.evidence}"
    pids = reader.partition_ids()
    summary.partitions = len(pids)
    last_tick = time.monotonic()
    for n, pid in enumerate(pids):
        yield Progress(n, len(pids), f"operator {op.operator_id} {reader.store_name}: partition {pid}")
        versions = reader.versions(pid)
        if not versions:
            continue
        last_version = versions[-1]
        keys = _KeyDecoder(reader, pid)
        for v, state, _changes in walk_partition(reader, pid, problems, cancelled):
            summary.versions_read += 1
            if v == last_version:
                summary.keys_at_latest += len(state)
            count_only = not (all_versions or v == last_version)
            if count_only and version_counts is None:
                continue
            b = v - 1
            wm = clock.watermark_ms.get(b)
            if not wm:
                continue
            out: list[tuple[bytes, int]] = []
            for k, val in state.items():
                t = to_ms(read(k if side == "key" else val), unit)
                if t is not None and t < wm:
                    out.append((k, t))
            if not out:
                continue
            if count_only:
                version_counts[(op.operator_id, reader.store_name, v, "eviction_lag")] += len(out)  # type: ignore[index]
                continue
            keys.decode([k for k, _ in out])
            for k, t in out:
                b0 = clock.first_batch_over(t, "event_time", b)
                findings.append(ExpiredFinding(
                    op.operator_id, reader.store_name, pid, v, b0, "eviction_lag", keys[k], t, wm, "event_time",
                    (b - b0 + 1) if b0 is not None else None, wm - t, None, note, ev_text,
                ))
            summary.counts["eviction_lag"] = summary.counts.get("eviction_lag", 0) + len(out)
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(n, len(pids), f"operator {op.operator_id}: partition {pid}, version {v}")


def expired_json(result: ExpiredResult) -> list[dict[str, Any]]:
    """The ``statelens expired --json`` list."""
    return [f.to_json() for f in result.findings]

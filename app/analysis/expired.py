"""Expired-but-unremoved keys: zombies, overdue and stale keys, and eviction lag.

In ``(flat)MapGroupsWithState`` and ``applyInPandasWithState`` Spark only *calls* the user function with
``hasTimedOut``; removing the state is the user's job (``docs/format.md`` §7.3,
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

Versions are streamed per partition (:func:`readers.scan.walk_partition`); only the timeout
slot of changed values is read, and only reported keys are decoded. Findings are handed to a sink as
they are found, in walk order (operator, store, partition, version, category); the result keeps exact
counts per partition, version and category and a capped number of examples, so memory does not grow
with the number of findings. With a Spark backend the same checks run on the rows Spark's
``statestore`` source returns (:class:`RowSource`).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from statelens.app.analysis import expired_spark
from statelens.app.analysis._common import BatchClock, int_reader, row_converter, to_ms
from statelens.app.analysis.expired_spark import event_time_sql, groupable, timeout_column_sql
from statelens.app.analysis.findings import (
    NO_TIMESTAMP,
    eviction_fields,
    overdue_fields,
    stale_fields,
    timer_fields,
    zombie_fields,
)
from statelens.app.analysis.tws import iter_timer_zombies, leak_check_plan
from statelens.readers.backends import native_backend
from statelens.readers.errors import (
    BackendUnavailableError,
    FilesUnavailableError,
    StatelensError,
    UsageError,
)
from statelens.readers.model import OperatorKind, Progress
from statelens.readers.scan import walk_partition
from statelens.readers.values import json_converter

if TYPE_CHECKING:
    from statelens.readers.backends import BackendChooser

CATEGORIES = ("zombie", "overdue", "stale", "eviction_lag")
TIMEOUT_KINDS = ("event_time", "processing_time")
DEFAULT_STALE_AFTER = 10
T = TypeVar("T")

_TIMEOUT_OPERATORS = (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE)
_EVICTING_OPERATORS = (
    OperatorKind.AGGREGATION,
    OperatorKind.DEDUPLICATION,
    OperatorKind.DEDUPLICATION_WITHIN_WATERMARK,
    OperatorKind.JOIN,
    OperatorKind.SESSION_WINDOW,
)
#: Findings kept as examples per operator, store and category (the most overdue).
DEFAULT_MAX_EXAMPLES = 1000
#: Findings of one partition and version decoded and handed over at a time.
_CHUNK = 4096
#: Decoded keys cached per partition (zombies repeat at every version with --all-versions).
_KEY_CACHE = 65536
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
    #: The key row as stored (read from files; None when Spark decoded the key): what prune removes.
    raw_key: bytes | None = field(default=None, repr=False, compare=False)

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
    backend: str = "native"  # what read the rows: "native" decoders or "spark"
    in_spark: bool = False  # the checks ran as a Spark query: only findings came back

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
            "backend": self.backend,
            "computed_in_spark": self.in_spark,
        }


@dataclass
class ExpiredResult:
    """What ``statelens expired`` found, in memory independent of the number of findings.

    Every finding is handed to the ``sink`` given to :func:`iter_expired` as soon as it is found; the
    result keeps exact counts and only a capped number of examples.

    Attributes
    ----------
    operators : list of OperatorExpiry
        What was checked per store, and how.
    problems : list of StatelensError
        Files (or Spark reads) that failed; the rest was still checked.
    tally : Counter
        Exact number of findings per ``(operator_id, store_name, partition, version, category)``.
    ages : Counter
        Exact number of findings per ``(operator_id, store_name, category, age_batches)``.
    max_examples : int
        Findings kept per ``(operator_id, store_name, category)`` in :attr:`examples`.
    """

    operators: list[OperatorExpiry]
    problems: list[StatelensError]
    stale_after: int | None
    all_versions: bool
    max_examples: int = DEFAULT_MAX_EXAMPLES
    tally: Counter[tuple[int, str, int, int, str]] = field(default_factory=Counter)
    ages: Counter[tuple[int, str, str, int | None]] = field(default_factory=Counter)
    # (operator_id, store_name, category) -> min-heap of (rank, -sequence, finding): the worst kept on top
    _kept: dict[tuple[int, str, str], list[tuple[int, int, ExpiredFinding]]] = field(
        default_factory=dict, repr=False
    )
    _seq: int = field(default=0, repr=False)

    # -- filling -------------------------------------------------------------------------------------
    def count(self, where: tuple[int, str, int, int, str], age_batches: int | None) -> None:
        """Count one finding at ``(operator_id, store_name, partition, version, category)``."""
        self.tally[where] += 1
        self.ages[(where[0], where[1], where[4], age_batches)] += 1

    def wants(self, operator_id: int, store_name: str, category: str, age_ms: int | None) -> bool:
        """Whether a finding with this age would be kept as an example now (decode its key only then)."""
        heap = self._kept.get((operator_id, store_name, category))
        if heap is None or len(heap) < self.max_examples:
            return self.max_examples > 0
        return (age_ms or 0) > heap[0][0]

    def keep(self, finding: ExpiredFinding) -> None:
        """Offer a (counted) finding as an example: kept if among the ``max_examples`` most overdue."""
        self._seq += 1
        if self.max_examples <= 0:
            return
        heap = self._kept.setdefault((finding.operator_id, finding.store_name, finding.category), [])
        # Most overdue first (largest age_ms, None as 0, as the report ranks); among equals the first found.
        item = (finding.age_ms or 0, -self._seq, finding)
        if len(heap) < self.max_examples:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)

    def add(self, finding: ExpiredFinding) -> None:
        """Count a finding and offer it as an example."""
        self.count(
            (finding.operator_id, finding.store_name, finding.partition, finding.version, finding.category),
            finding.age_batches,
        )
        self.keep(finding)

    # -- reading -------------------------------------------------------------------------------------
    @property
    def examples(self) -> list[ExpiredFinding]:
        """The kept findings in walk order (operator, store, partition, version, category, as found).

        At most :attr:`max_examples` per ``(operator_id, store_name, category)``: the most overdue
        (largest ``age_ms``; the first found among equals). All findings when there are no more.
        """
        kept = [item for heap in self._kept.values() for item in heap]
        kept.sort(key=lambda item: -item[1])
        return [f for _, _, f in kept]

    @property
    def findings(self) -> list[ExpiredFinding]:
        """Same as :attr:`examples` (what the expired view lists); every finding went to the sink."""
        return self.examples

    def total(self) -> int:
        """Number of findings (exact)."""
        return sum(self.tally.values())

    def counts(self) -> dict[str, int]:
        """Findings per category (exact), every category present."""
        c: Counter[str] = Counter()
        for where, n in self.tally.items():
            c[where[4]] += n
        return {k: c.get(k, 0) for k in CATEGORIES}

    def store_tally(self, operator_id: int, store_name: str) -> Counter[tuple[int, int, str]]:
        """Findings of one store per ``(partition, version, category)`` (exact)."""
        out: Counter[tuple[int, int, str]] = Counter()
        for (op, store, pid, v, c), n in self.tally.items():
            if op == operator_id and store == store_name:
                out[(pid, v, c)] += n
        return out

    def truncated(self) -> bool:
        """True when some findings are counted but not kept as examples."""
        return sum(len(h) for h in self._kept.values()) < self.total()


# -- timeout kind --------------------------------------------------------------------------------------
def infer_timeout_kind(
    source: FileSource | RowSource,
    clock: BatchClock,
    read_timeout: Callable[[Any], int | None],
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
    source : FileSource or RowSource
        The operator's store, as :func:`state_source` gives it.
    clock : BatchClock
        Batch timestamps and watermarks.
    read_timeout : callable
        Reads ``timeoutTimestamp`` from a stored value (raw bytes, or a decoded row for Spark).
    problems : list
        Unreadable files are appended here.
    max_samples : int
        Stop reading after this many fresh timeouts.

    Returns
    -------
    TimeoutKindEvidence
    """
    samples: list[tuple[int, int | None, int]] = []  # (timeout, batch timestamp, batch watermark)
    prev_by_pid: dict[int, dict[Any, int]] = {}
    walk = source.walk(problems, need_state=False)
    try:
        for pid, v, state, changes in walk:
            if source.partition_major and pid not in prev_by_pid:
                prev_by_pid.clear()  # a finished partition is not seen again
            prev = prev_by_pid.setdefault(pid, {})
            b = v - 1
            items = changes if changes is not None else list(state.items())
            seen: dict[Any, int] = {}
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
                prev_by_pid[pid] = seen
            else:
                prev.update(seen)
            if len(samples) >= max_samples:
                break
    finally:
        walk.close()
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
                "processing_time",
                "inferred",
                f"{fixed} (a setTimeoutDuration); no contradiction either way, so weak evidence: "
                "override with --timeout-kind",
                n,
            )
        return TimeoutKindEvidence(
            "event_time",
            "inferred",
            f"{len(offsets)} different offsets from the batch timestamp among {len(timed)} timeouts: they "
            "follow the data, not the batch clock; no contradiction either way, so weak evidence: override "
            "with --timeout-kind",
            n,
        )
    kind = "event_time" if proc_bad > evt_bad else "processing_time"
    return TimeoutKindEvidence(
        kind,
        "inferred",
        f"conflicting: {proc_bad} timeouts at/before their batch timestamp, {evt_bad} below the watermark; "
        "chose the kind with fewer contradictions, override with --timeout-kind",
        n,
    )


# -- where the state comes from ------------------------------------------------------------------------
StateWalk = Generator[tuple[int, int, Mapping[Any, Any], "list[tuple[Any, Any]] | None"], None, None]


class FileSource:
    """One store read from its files (a backend's :meth:`~readers.backends.base.StateBackend.store`): raw
    key bytes identify keys, raw value bytes are values.

    Walks partition by partition (:func:`readers.scan.walk_partition`), so only one
    partition's state is in memory at a time.
    """

    partition_major = True
    feed_note = ""  # the walk always replays the files: nothing to say about a change feed

    def __init__(self, reader: Any, name: str = "native"):
        self.reader = reader
        self.name = name  # what read the rows, for the user
        self.operator_id = reader.operator_id
        self.store_name = reader.store_name

    def partition_ids(self) -> list[int]:
        return list(self.reader.partition_ids())

    def last_version(self, partition_id: int) -> int | None:
        versions = self.reader.versions(partition_id)
        return versions[-1] if versions else None

    def walk(
        self,
        problems: list[StatelensError],
        cancelled: Callable[[], bool] | None = None,
        *,
        need_state: bool = True,
        only_last: bool = False,
    ) -> StateWalk:
        """``(partition, version, state, changes)`` as :func:`walk_partition` yields them, partition by partition.

        Every version is read (the delta chain must be replayed), whatever ``only_last`` says.
        """
        for pid in self.partition_ids():
            for v, state, changes in walk_partition(self.reader, pid, problems, cancelled):
                yield pid, v, state, changes

    def value_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return int_reader(_value_layout(self.reader), path)

    def key_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return int_reader(_key_layout(self.reader), path)

    def key_decoder(self, partition_id: int) -> Any:
        return _KeyDecoder(self.reader, partition_id)

    @staticmethod
    def tiebreak(key: Any) -> Any:
        return key  # raw bytes: equal timeouts pop in key-byte order

    def check_timeouts_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The timeout checks run here, on the walk of the files: nothing is run elsewhere (False)."""
        yield from ()
        return False

    def check_eviction_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The eviction check runs here, on the walk of the files: nothing is run elsewhere (False)."""
        yield from ()
        return False


class RowSource:
    """One store read as decoded rows from a backend that does not hand out files (Spark's ``statestore``
    source).

    Keys are identified by their decoded key tuple, values are decoded rows. Such a backend answers for
    every partition of a version in one job, so the walk goes version by version (then partition): the
    first version, and any version after a failed read, is read whole (``read_rows``); the others
    through Spark's change feed for that one batch (``read_changes``), or whole again when the feed
    is unavailable (RocksDB without changelog checkpointing). Only committed versions are read.
    """

    partition_major = False

    def __init__(self, backend: Any, ckpt: Any, store: Any):
        self.backend = backend
        self.name = backend.name  # what read the rows, for the user
        self.operator_id = store.operator_id
        self.store_name = store.store_name
        self.schema = store.schema
        self.pids = sorted(store.partitions)
        self.versions = [v for v in store.versions if v - 1 in ckpt.commits]
        self._convert = json_converter(store.schema.key_schema)
        self._ties = itertools.count()
        self.feed_note = ""

    def partition_ids(self) -> list[int]:
        return list(self.pids)

    def last_version(self, partition_id: int) -> int | None:
        return self.versions[-1] if self.versions else None

    def walk(
        self,
        problems: list[StatelensError],
        cancelled: Callable[[], bool] | None = None,
        *,
        need_state: bool = True,
        only_last: bool = False,
    ) -> StateWalk:
        """``(partition, version, state, changes)``, version by version, every partition at each.

        ``state`` is the whole partition when ``changes`` is None, else empty (the changes were read,
        not the state). ``need_state`` reads every version whole; ``only_last`` reads the last only.
        Without either, on a classic session with an unbroken run of versions, the first version and the
        change feed are streamed partition by partition instead (one job; this process holds one
        partition at a time, whatever the store's size).
        """
        if not need_state and not only_last and self._streamable():
            streamed = self._walk_streamed(cancelled)
            try:
                head = next(streamed)
            except StopIteration:
                return
            except StatelensError as err:  # Spark Connect, or no change feed: versions one by one below
                self.feed_note = f"streaming unavailable ({err}): versions read one by one"
            else:
                self.partition_major = True
                yield head
                yield from streamed
                return
        self.partition_major = False
        op, store = self.operator_id, self.store_name
        use_feed = not need_state
        previous: int | None = None
        for v in self.versions[-1:] if only_last else self.versions:
            if cancelled is not None and cancelled():
                return
            if use_feed and previous == v - 1:
                try:
                    records = self.backend.read_changes(op, store, v, v)
                except StatelensError as err:
                    use_feed = False
                    self.feed_note = f"Spark's change feed is unavailable ({err}): every version read whole"
                else:
                    changes: dict[int, list[tuple[Any, Any]]] = {}
                    for ch in records:
                        changes.setdefault(ch.partition_id, []).append((_identity(ch.key), ch.value))
                    previous = v
                    for pid in sorted(set(self.pids) | set(changes)):
                        yield pid, v, {}, changes.pop(pid, [])
                    continue
            # The version whole, streamed in partition order: one partition in memory at a time.
            rows = ((r.partition_id, r.key, r.value) for r in self.backend.iter_rows(op, store, v))
            try:
                for pid, part in _group_by_partition(rows, self.pids):
                    yield pid, v, {_identity(k): val for _, k, val in part}, None
            except StatelensError as err:
                problems.append(err)
                previous = None
                continue
            previous = v

    def _streamable(self) -> bool:
        vs = self.versions
        return (
            len(vs) >= 2 and vs == list(range(vs[0], vs[-1] + 1)) and self.backend.capabilities.engine_queries
        )

    def _walk_streamed(self, cancelled: Callable[[], bool] | None) -> StateWalk:
        """Partition-major walk over Spark's stream of the first version's rows and the change feed."""
        versions = self.versions
        rows = self.backend.iter_state_then_changes(
            self.operator_id, self.store_name, versions[0], versions[-1]
        )
        try:
            for pid, part in _group_by_partition(rows, self.pids):
                state: dict[Any, Any] = {}
                changes: dict[int, list[tuple[Any, Any]]] = {}
                for _, v, change, key, value in part:
                    if change is None:
                        state[_identity(key)] = value
                    else:
                        changes.setdefault(v, []).append((_identity(key), value))
                del part
                if cancelled is not None and cancelled():
                    return
                yield pid, versions[0], state, None
                del state
                for v in versions[1:]:
                    yield pid, v, {}, changes.pop(v, [])
        finally:
            rows.close()

    def value_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return _tuple_reader(path)

    def key_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        read = _tuple_reader(path)
        return lambda key: read(key.key if isinstance(key, _FrozenKey) else key)

    def key_decoder(self, partition_id: int) -> Any:
        return _DecodedKeys(self._convert)

    def tiebreak(self, key: Any) -> Any:
        return next(self._ties)  # decoded keys may not be comparable (None, mixed types)

    def check_timeouts_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The timeout checks as a query where the backend's engine runs (:func:`_timeouts_in_spark`):
        True when done there, False when the rows must be walked here instead."""
        return _timeouts_in_spark(op, self, *rest)

    def check_eviction_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The eviction check as a query where the backend's engine runs (:func:`_eviction_in_spark`):
        True when done there, False when the rows must be walked here instead."""
        return _eviction_in_spark(op, self, *rest)


def _group_by_partition(
    rows: Iterator[tuple[Any, ...]], known: Iterable[int]
) -> Iterator[tuple[int, list[Any]]]:
    """``(partition, its rows)`` in partition order, from rows sorted by partition (``row[0]``); every
    partition of ``known`` comes out, with no rows when the stream has none for it."""
    ids = sorted(known)
    i = 0
    end = float("inf")
    row = next(rows, None)
    while i < len(ids) or row is not None:
        pid = int(min(ids[i] if i < len(ids) else end, row[0] if row is not None else end))
        if i < len(ids) and ids[i] == pid:
            i += 1
        part = []
        while row is not None and row[0] == pid:
            part.append(row)
            row = next(rows, None)
        yield pid, part


def state_source(ckpt: Any, store: Any, backends: BackendChooser | None = None) -> FileSource | RowSource:
    """The source :func:`iter_expired` reads one store from.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    store : readers.model.StoreInfo
    backends : readers.backends.BackendChooser, optional
        Picks native or Spark per store (``auto``: native where it can decode); default native.

    Returns
    -------
    FileSource or RowSource
        The store's files where the backend hands them out, else its decoded rows.

    Raises
    ------
    BackendUnavailableError
        The native decoders cannot read this store (and the native backend was asked for).
    """
    backend = (
        backends.for_store(store.operator_id, store.store_name)
        if backends is not None
        else native_backend(ckpt)
    )
    try:
        return FileSource(backend.store(store.operator_id, store.store_name), backend.name)
    except FilesUnavailableError:  # decoded rows from another engine (Spark)
        return RowSource(backend, ckpt, store)


class _FrozenKey:
    """A decoded key that is not hashable as it is (arrays, maps) or holds NaN: compared by value."""

    __slots__ = ("_id", "key")

    def __init__(self, key: Any):
        self.key = key
        self._id = _freeze(key)

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FrozenKey) and self._id == other._id


def _freeze(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float) and value != value:
        return ("NaN",)  # NaN != NaN: the same key must still find itself
    return value


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    if isinstance(value, (tuple, list)):
        return any(_has_nan(v) for v in value)
    return False


def _identity(key: Any) -> Any:
    """A dict key for a decoded key tuple (the tuple itself when it is hashable and NaN-free)."""
    try:
        hash(key)
    except TypeError:
        return _FrozenKey(key)
    return _FrozenKey(key) if _has_nan(key) else key


def _tuple_reader(path: tuple[int, ...]) -> Callable[[Any], int | None]:
    """Reads an integer field of a decoded row by positional path (``None`` when null or not an int)."""

    def read(row: Any) -> int | None:
        for index in path:
            if row is None or index >= len(row):
                return None
            row = row[index]
        return row if isinstance(row, int) and not isinstance(row, bool) else None

    return read


class _DecodedKeys:
    """The JSON form of decoded keys (Spark): nothing to decode, only to convert."""

    def __init__(self, convert: Callable[[Any], Any]):
        self.convert = convert

    def decode(self, keys: list[Any]) -> None:
        """Nothing to do: Spark decoded them."""

    def __getitem__(self, key: Any) -> Any:
        return self.convert(key.key if isinstance(key, _FrozenKey) else key)


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
    sink: Callable[[ExpiredFinding], None] | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    backends: BackendChooser | None = None,
) -> Generator[Progress, None, ExpiredResult]:
    """Find expired-but-unremoved keys in every (or one) stateful operator, in bounded memory.

    Findings are handed to ``sink`` one by one as they are found, in walk order: operator id, store
    name, partition, version (ascending), then category (``zombie``, ``overdue``, ``stale``,
    ``eviction_lag``); within one of those, in the order the state holds the keys. (Through Spark the
    walk goes version by version, so with ``all_versions`` version comes before partition.) Nothing
    holds them all: the result has exact counts and at most ``max_examples`` findings per operator,
    store and category.

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
    sink : callable, optional
        Called with every :class:`ExpiredFinding` as it is found (print it, write it, collect it).
        Without a sink only the keys of kept examples are decoded.
    max_examples : int
        Findings kept in :attr:`ExpiredResult.examples` per operator, store and category: the most
        overdue (largest ``age_ms``).
    backends : readers.backends.BackendChooser, optional
        Where state rows come from (``native``, ``spark`` or ``auto``); default the native decoders.
        Through Spark the same checks run on decoded rows, keys identified by their decoded tuple.

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
    result = ExpiredResult([], [], stale_after or None, all_versions, max_examples)
    problems: list[StatelensError] = []
    out = _Emitter(result, sink)
    # Walk order: operator id, then store name (the order the findings were always sorted in).
    jobs = sorted(
        ((op, st) for op in operators for st in op.stores), key=lambda j: (j[0].operator_id, j[1].store_name)
    )
    for n, (op, st) in enumerate(jobs):
        summary = OperatorExpiry(op.operator_id, op.kind.value, st.store_name, "skipped")
        result.operators.append(summary)
        yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name}")
        if st.schema is None:
            summary.reason = "no schema file: rows cannot be decoded"
            continue
        col: tuple[str, tuple[int, ...], str, str] | None = None
        if op.kind in _TIMEOUT_OPERATORS:
            check = "timeouts"
        elif op.kind in _EVICTING_OPERATORS:
            col = _eviction_column(op, st)
            if col is None and op.kind == OperatorKind.JOIN:
                summary.reason = (
                    "join event-time index: evicted together with the keyWithTsToValues rows"
                    if st.store_name.endswith("tsWithKey")
                    else "join key counts: evicted together with the keyWithIndexToValue rows"
                )
                continue
            if col is None:
                summary.reason = (
                    "no event-time column (no watermark on a grouping/dedup key): Spark never evicts this "
                    "state, see growth"
                )
                continue
            check = "eviction"
        elif op.kind == OperatorKind.TRANSFORM_WITH_STATE:
            yield from _check_transform_with_state(
                ckpt, op, st, clock, summary, out, problems, all_versions, cancelled, version_counts, backends
            )
            continue
        else:
            summary.reason = f"{op.kind.value}: no timeout or eviction rule known"
            continue
        try:
            source = state_source(ckpt, st, backends)
        except BackendUnavailableError as unreadable:  # e.g. RocksDB column families (transformWithState)
            summary.reason = unreadable.message
            continue
        summary.backend = source.name
        summary.check = check
        if col is None:
            yield from _check_timeouts(
                op,
                source,
                clock,
                summary,
                out,
                problems,
                all_versions,
                stale_after,
                timeout_kind,
                cancelled,
                version_counts,
            )
        else:
            yield from _check_eviction(
                op, source, clock, col, summary, out, problems, all_versions, cancelled, version_counts
            )
        if source.feed_note:
            summary.reason = source.feed_note
    yield Progress(len(jobs), len(jobs), "expired keys")
    unique: dict[str, StatelensError] = {}
    for err in problems:  # the inference pass and the main pass meet the same bad files
        unique.setdefault(str(err), err)
    result.problems = list(unique.values())
    return result


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Emitter:
    """Counts findings, decodes the keys of the ones anybody will see, hands them to the sink.

    Works through a version's findings :data:`_CHUNK` at a time, so memory does not grow with them.
    """

    def __init__(self, result: ExpiredResult, sink: Callable[[ExpiredFinding], None] | None):
        self.result = result
        self.sink = sink

    def emit(
        self,
        summary: OperatorExpiry,
        partition_id: int,
        version: int,
        candidates: Iterable[tuple[Any, dict[str, Any]]],
        keys: Any,
    ) -> None:
        """Report ``(raw key, ExpiredFinding fields)`` pairs found at one partition and version."""
        result, sink = self.result, self.sink
        op_id, store = summary.operator_id, summary.store_name
        for chunk in _chunks(candidates, _CHUNK):
            todo = []
            for k, fields in chunk:
                category = fields["category"]
                result.count((op_id, store, partition_id, version, category), fields["age_batches"])
                summary.counts[category] = summary.counts.get(category, 0) + 1
                if sink is not None or result.wants(op_id, store, category, fields["age_ms"]):
                    todo.append((k, fields))
            if not todo:
                continue
            keys.decode([k for k, _ in todo])
            for k, fields in todo:
                raw = k if isinstance(k, bytes) else None
                finding = ExpiredFinding(
                    op_id, store, partition_id, version, key=keys[k], raw_key=raw, **fields
                )
                result.keep(finding)
                if sink is not None:
                    sink(finding)


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
    """Decodes reported raw keys of one partition, caching the JSON form of up to :data:`_KEY_CACHE`."""

    def __init__(self, reader: Any, partition_id: int):
        self.reader = reader
        self.partition_id = partition_id
        self.cache: dict[bytes, Any] = {}
        self.convert = row_converter(reader.schema.key_schema)

    def decode(self, keys: list[bytes]) -> None:
        todo = [k for k in keys if k not in self.cache]
        if not todo:
            return
        if len(self.cache) + len(todo) > _KEY_CACHE:
            # Keeps --all-versions from re-decoding the same zombies at every version, in bounded memory.
            self.cache = {k: self.cache[k] for k in keys if k in self.cache}
        path = f"state/{self.reader.operator_id}/{self.partition_id}"
        decoded = self.reader.decode_pairs([(k, None) for k in todo], path)
        convert = self.convert
        for raw, (key, _) in zip(todo, decoded, strict=True):
            self.cache[raw] = convert(key)

    def __getitem__(self, raw: bytes) -> Any:
        return self.cache[raw]


def _value_layout(reader: Any) -> Any:
    return reader.layouts()[1]


def _key_layout(reader: Any) -> Any:
    return reader.layouts()[0]


class _TimeoutState:
    """Timeouts, last writes and zombies of one store partition, advanced version by version.

    Keys are whatever the source identifies them by (raw bytes natively, decoded tuples through Spark).
    """

    def __init__(
        self,
        read_timeout: Callable[[Any], int | None],
        clock: BatchClock,
        kind: str | None,
        tiebreak: Callable[[Any], Any],
    ):
        self.read_timeout = read_timeout
        self.clock = clock
        self.kind = kind
        self.tiebreak = tiebreak
        self.timeouts: dict[Any, int] = {}
        self.last_write: dict[Any, int] = {}
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
        timeouts, last_write, zombies, heap = self.timeouts, self.last_write, self.zombies, self.heap
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


def _check_timeouts(
    op: Any,
    source: FileSource | RowSource,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    stale_after: int | None,
    override: str | None,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
) -> Generator[Progress, None, None]:
    path = _timeout_column(op, source.store_name)
    if path is None:
        read_timeout: Callable[[Any], int | None] = lambda _v: NO_TIMESTAMP  # noqa: E731
        evidence = TimeoutKindEvidence(
            "none", "schema", "no timeoutTimestamp column: timeouts are not configured"
        )
    else:
        read_timeout = source.value_reader(path)
        if override is not None:
            evidence = TimeoutKindEvidence(override, "override", "given with --timeout-kind")
        else:
            yield Progress(0, 1, f"operator {op.operator_id}: inferring the timeout kind")
            evidence = infer_timeout_kind(source, clock, read_timeout, problems)
    summary.timeout_kind = evidence
    kind = evidence.timeout_kind if evidence.timeout_kind in TIMEOUT_KINDS else None
    ev_text = f"{evidence.source}: {evidence.evidence}"
    pids = source.partition_ids()
    summary.partitions = len(pids)
    pushed = yield from source.check_timeouts_elsewhere(
        op, clock, kind, path, ev_text, summary, out, problems, stale_after, all_versions, version_counts
    )
    if pushed:
        return
    last_versions = {pid: source.last_version(pid) for pid in pids}
    states: dict[int, tuple[_TimeoutState, Any]] = {}
    last_tick = time.monotonic()
    current: int | None = None
    walk = source.walk(problems, cancelled, need_state=False)
    try:
        for pid, v, state, changes in walk:
            if pid != current:
                current = pid
                if source.partition_major:
                    states.clear()  # a finished partition is not seen again
                    yield Progress(
                        pids.index(pid) if pid in pids else 0,
                        len(pids),
                        f"operator {op.operator_id}: partition {pid}",
                    )
            if pid not in states:
                states[pid] = (
                    _TimeoutState(read_timeout, clock, kind, source.tiebreak),
                    source.key_decoder(pid),
                )
            ts, keys = states[pid]
            summary.versions_read += 1
            thr = ts.step(v, state, changes)
            last = last_versions.get(pid)
            if v == last:
                summary.keys_at_latest += len(ts.timeouts)
            if all_versions or v == last:
                out.emit(
                    summary,
                    pid,
                    v,
                    _timeout_candidates(ts, clock, kind, ev_text, v, thr, stale_after, v == last),
                    keys,
                )
            elif version_counts is not None:
                _count_timeout_findings(op, source, v, ts, stale_after, version_counts)
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(
                    pids.index(pid) if pid in pids else 0,
                    len(pids),
                    f"operator {op.operator_id}: partition {pid}, version {v}",
                )
    finally:
        walk.close()


def _in_spark(
    source: RowSource,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    what: str,
    run: Callable[
        [Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None]],
        Generator[Progress, None, tuple[int, int]],
    ],
) -> Generator[Progress, None, bool]:
    """Run one store's check as a Spark query (:mod:`app.analysis.expired_spark`): ``run(emit)`` hands
    findings to ``emit(partition, version, candidates)`` and returns the keys at the latest version and
    the versions looked at. False (nothing done) when the store's versions have a gap or Spark cannot
    run the query before its first finding (the walk then reads the rows instead)."""
    vs = source.versions
    if not vs or vs != list(range(vs[0], vs[-1] + 1)) or not source.backend.capabilities.engine_queries:
        return False
    refused = yield from _pushed(summary, out, problems, source.key_decoder, len(source.partition_ids()), run)
    if refused is not None:
        source.feed_note = f"{what} not checked inside Spark ({refused}): rows streamed instead"
        return False
    return True


def _pushed(
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    keys: Callable[[int], Any],
    partitions: int,
    run: Callable[
        [Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None]],
        Generator[Progress, None, tuple[int, int]],
    ],
) -> Generator[Progress, None, str | None]:
    """Run a check as a Spark query: ``run(emit)`` hands findings to ``emit(partition, version,
    candidates)`` (decoded with ``keys(partition)``) and returns the keys at the latest version and the
    versions looked at, added to ``summary``. None when done; Spark's reason when it failed before its
    first finding (nothing reported: the caller checks another way). A failure after findings were
    reported goes to ``problems``."""
    emitted = 0

    def emit(pid: int, v: int, candidates: list[tuple[Any, dict[str, Any]]]) -> None:
        nonlocal emitted
        emitted += 1
        out.emit(summary, pid, v, candidates, keys(pid))

    try:
        keys_at_latest, walked = yield from run(emit)
    except StatelensError as err:
        if emitted:  # findings already reported: the rest is lost, say so
            problems.append(err)
            return None
        return err.message
    summary.keys_at_latest += keys_at_latest
    summary.versions_read += partitions * walked
    summary.in_spark = True
    return None


def _timeouts_in_spark(
    op: Any,
    source: RowSource,
    clock: BatchClock,
    kind: str | None,
    path: tuple[int, ...] | None,
    evidence: str,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    stale_after: int | None,
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The timeout checks of one store computed inside Spark: only findings come back. False (nothing
    done) when the store's keys or timeout column cannot be named in Spark SQL (or as :func:`_in_spark`)."""

    timeout_sql = "NULL" if path is None else timeout_column_sql(source.schema, path)
    if timeout_sql is None or not groupable(source.schema.key_schema):
        return False
    return (
        yield from _in_spark(
            source,
            summary,
            out,
            problems,
            "timeouts",
            lambda emit: expired_spark.check_timeouts_in_spark(
                source,
                clock,
                kind,
                timeout_sql,
                stale_after,
                all_versions,
                version_counts,
                emit,
                evidence,
                op.operator_id,
            ),
        )
    )


def _timeout_candidates(
    ts: _TimeoutState,
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
    op: Any,
    source: FileSource | RowSource,
    v: int,
    ts: _TimeoutState,
    stale_after: int | None,
    counts: Counter[tuple[int, str, int, str]],
) -> None:
    """What :func:`_timeout_candidates` would report at a non-latest version, counted, keys not decoded."""
    where = (op.operator_id, source.store_name, v)
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


def _check_eviction(
    op: Any,
    source: FileSource | RowSource,
    clock: BatchClock,
    col: tuple[str, tuple[int, ...], str, str],
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
) -> Generator[Progress, None, None]:
    side, path, unit, name = col
    read = source.key_reader(path) if side == "key" else source.value_reader(path)
    summary.timeout_kind = TimeoutKindEvidence(
        "event_time", "schema", f"Spark evicts rows whose {side} field {name} is behind the watermark"
    )
    note = _JOIN_NOTE if op.kind == OperatorKind.JOIN else ""
    ev_text = f"schema: {summary.timeout_kind.evidence}"
    pids = source.partition_ids()
    summary.partitions = len(pids)
    pushed = yield from source.check_eviction_elsewhere(
        op, clock, col, note, ev_text, summary, out, problems, all_versions, version_counts
    )
    if pushed:
        return
    last_versions = {pid: source.last_version(pid) for pid in pids}
    last_tick = time.monotonic()
    current: int | None = None
    keys: Any = None
    walk = source.walk(
        problems, cancelled, need_state=True, only_last=not all_versions and version_counts is None
    )
    try:
        for pid, v, state, _changes in walk:
            if pid != current:
                current = pid
                keys = source.key_decoder(pid)
                yield Progress(
                    pids.index(pid) if pid in pids else 0,
                    len(pids),
                    f"operator {op.operator_id} {source.store_name}: partition {pid}",
                )
            summary.versions_read += 1
            last = last_versions.get(pid)
            if v == last:
                summary.keys_at_latest += len(state)
            count_only = not (all_versions or v == last)
            if count_only and version_counts is None:
                continue
            b = v - 1
            wm = clock.watermark_ms.get(b)
            if not wm:
                continue
            behind = (
                (k, t)
                for k, t in ((k, to_ms(read(k if side == "key" else val), unit)) for k, val in state.items())
                if t is not None and t < wm
            )
            if count_only:
                n = sum(1 for _ in behind)
                if n:
                    version_counts[(op.operator_id, source.store_name, v, "eviction_lag")] += n  # type: ignore[index]
                continue
            out.emit(summary, pid, v, _eviction_candidates(behind, clock, b, wm, note, ev_text), keys)
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(
                    pids.index(pid) if pid in pids else 0,
                    len(pids),
                    f"operator {op.operator_id}: partition {pid}, version {v}",
                )
    finally:
        walk.close()


def _eviction_in_spark(
    op: Any,
    source: RowSource,
    clock: BatchClock,
    col: tuple[str, tuple[int, ...], str, str],
    note: str,
    evidence: str,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The eviction check of one store computed inside Spark; False where it cannot be (an event-time
    column Spark SQL cannot read the same way, or as :func:`_in_spark`)."""

    side, path, unit, _name = col
    time_sql = event_time_sql(source.schema, side, path, unit)
    if time_sql is None or not groupable(source.schema.key_schema):
        return False
    return (
        yield from _in_spark(
            source,
            summary,
            out,
            problems,
            "eviction",
            lambda emit: expired_spark.check_eviction_in_spark(
                source, clock, time_sql, all_versions, version_counts, emit, note, evidence, op.operator_id
            ),
        )
    )


def _eviction_candidates(
    behind: Iterable[tuple[Any, int]], clock: BatchClock, b: int, wm: int, note: str, evidence: str
) -> Iterator[tuple[Any, dict[str, Any]]]:
    for k, t in behind:
        yield k, eviction_fields(b + 1, clock.first_batch_over(t, "event_time", b), t, wm, note, evidence)


def _check_transform_with_state(
    ckpt: Any,
    op: Any,
    st: Any,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
    backends: BackendChooser | None = None,
) -> Generator[Progress, None, None]:
    """transformWithState: keys whose timer fired and whose state was kept (:mod:`app.analysis.tws`).

    With the Spark backend the check runs as a Spark query (:func:`_timers_in_spark`); otherwise, or when
    Spark cannot run it, the timer families are walked natively.
    """

    kind, plain, reason = leak_check_plan(ckpt, op.operator_id)
    if kind is None or st.store_name not in plain:
        summary.reason = reason or (
            "Spark's internal column family"
            if st.store_name.startswith("$")
            else "state with a TTL: Spark removes expired entries itself"
        )
        return
    summary.check = "timers"
    evidence = f"transformWithState timeMode={op.properties.get('timeMode')}"
    summary.timeout_kind = TimeoutKindEvidence(kind, "schema", evidence)
    reader = native_backend(ckpt).column_families(op.operator_id)
    summary.partitions = len(reader.partition_ids())
    variable = reader.families[st.store_name]
    key_schema: Any = variable.schema.key_schema
    if variable.variable_type == "MapState":
        key_schema = key_schema.fields[0].dataType  # the grouping key, without the user key
    keys = _DecodedKeys(row_converter(key_schema))
    backend = backends.for_store(op.operator_id, st.store_name) if backends is not None else None
    if backend is not None and backend.capabilities.engine_queries:
        pushed = yield from _timers_in_spark(
            backend,
            ckpt,
            op,
            st,
            kind,
            key_schema,
            clock,
            summary,
            out,
            problems,
            all_versions,
            version_counts,
        )
        if pushed:
            return
    yield Progress(0, 1, f"operator {op.operator_id} {st.store_name}: timers")
    by_place: dict[tuple[int, int], list[tuple[Any, dict[str, Any]]]] = {}
    latest = {pid: max(reader.versions(pid), default=None) for pid in reader.partition_ids()}
    every = all_versions or version_counts is not None
    for z in iter_timer_zombies(ckpt, op.operator_id, clock, problems, every, cancelled, [st.store_name]):
        if not all_versions and z.version != latest.get(z.partition):
            version_counts[(op.operator_id, st.store_name, z.version, "zombie")] += 1  # type: ignore[index]
            continue
        now = clock.threshold(z.version - 1, kind)
        by_place.setdefault((z.partition, z.version), []).append(
            (z.key, timer_fields(z.version, z.fired_batch, z.expiry_ms, z.threshold_ms, now, kind, evidence))
        )
    for pid in reader.partition_ids():
        versions = reader.versions(pid)
        summary.versions_read += len(versions)
        if versions:
            summary.keys_at_latest += len(reader.read_variable(pid, versions[-1], st.store_name))
    for (pid, version), candidates in sorted(by_place.items()):
        out.emit(summary, pid, version, candidates, keys)


def _timers_in_spark(
    backend: Any,
    ckpt: Any,
    op: Any,
    st: Any,
    kind: str,
    key_schema: Any,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: _Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The timer leak check of one transformWithState variable as a Spark query: only findings come back.
    False (nothing done) when its keys cannot be grouped by Spark, its versions have a gap, or Spark
    cannot run the query before its first finding (the native walk then runs)."""

    versions = [v for v in st.versions if v - 1 in ckpt.commits]
    if not versions or versions != list(range(versions[0], versions[-1] + 1)) or not groupable(key_schema):
        return False
    keys = _DecodedKeys(row_converter(key_schema))
    evidence = f"transformWithState timeMode={op.properties.get('timeMode')}"
    refused = yield from _pushed(
        summary,
        out,
        problems,
        lambda _pid: keys,
        summary.partitions,
        lambda emit: expired_spark.check_timers_in_spark(
            backend,
            op.operator_id,
            st.store_name,
            versions,
            clock,
            kind,
            all_versions,
            version_counts,
            emit,
            evidence,
        ),
    )
    if refused is not None:
        summary.reason = f"timers not checked inside Spark ({refused}): read natively instead"
        return False
    summary.backend = "spark"
    return True


def expired_json(result: ExpiredResult) -> list[dict[str, Any]]:
    """The kept examples as ``statelens expired --json`` objects (the command streams every finding)."""
    return [f.to_json() for f in result.examples]

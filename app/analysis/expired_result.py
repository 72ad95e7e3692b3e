"""What the expired-keys analysis finds and keeps (:mod:`app.analysis.expired`): one finding, how a
store was checked, the result with exact counts and capped examples, and the emitter that counts findings,
decodes the keys anybody will see and hands them to the sink, in bounded memory.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from statelens.readers.errors import StatelensError

CATEGORIES = ("zombie", "overdue", "stale", "eviction_lag")
TIMEOUT_KINDS = ("event_time", "processing_time")
DEFAULT_STALE_AFTER = 10
#: Findings kept as examples per operator, store and category (the most overdue).
DEFAULT_MAX_EXAMPLES = 1000
#: Findings of one partition and version decoded and handed over at a time.
CHUNK = 4096
T = TypeVar("T")


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

    def describe(self) -> str:
        """One line: what was checked and how (partitions, versions, who read the rows, the timeout kind
        and its evidence, anything worth knowing), or why nothing was; what ``statelens expired`` prints
        after each store's name and the app's expired view shows."""
        if self.check == "skipped":
            return f"not checked: {self.reason}"
        text = f"{self.check} checked on {self.partitions} partitions, {self.versions_read} versions read"
        if self.backend != "native":
            text += f" (read by {self.backend}{', checked inside Spark' if self.in_spark else ''})"
        tk = self.timeout_kind
        if tk is not None:
            text += f"; timeout kind {tk.timeout_kind or 'unknown'} ({tk.source}: {tk.evidence})"
        if self.reason:
            text += f"; {self.reason}"
        return text

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


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Emitter:
    """Counts findings, decodes the keys of the ones anybody will see, hands them to the sink.

    Works through a version's findings :data:`CHUNK` at a time, so memory does not grow with them.
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
        for chunk in _chunks(candidates, CHUNK):
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

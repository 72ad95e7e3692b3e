"""Batch timeline: when each batch started, how the watermark moved, what each source read.

Reads ``offsets/<b>`` (start timestamp ``batchTimestampMs``, watermark ``batchWatermarkMs``, pinned
``conf``, one offset per source), ``commits/<b>`` (committed, ``nextBatchWatermarkMs``) and the file
sources' own logs ``sources/<i>/<n>`` / ``<n>.compact`` (``docs/format.md`` §2.2–§2.5).

Records per batch where offsets allow: Kafka ``offsets(b) - offsets(b-1)`` per partition (batch 0 from
the initial offsets in ``sources/<i>/0``); file sources: the files listed in their log for the log
offsets the batch advanced over; ``long`` offsets (memory, rate): the offset delta.
"""

from __future__ import annotations

import statistics
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

from statelens.readers import logs
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.eventlog import iter_read_event_logs
from statelens.readers.model import Progress


@dataclass(frozen=True)
class SourceActivity:
    """What one source read in one batch."""

    index: int
    kind: str
    offset: Any
    records: int | None = None  # Kafka: offset deltas summed; long: offset delta
    files: int | None = None  # file source: files taken by this batch
    per_partition: dict[str, int | None] = field(default_factory=dict)  # Kafka "topic/partition" -> records
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "offset": self.offset,
            "records": self.records,
            "files": self.files,
            "per_partition": dict(self.per_partition),
            "note": self.note,
        }


@dataclass(frozen=True)
class BatchRow:
    """One batch of the timeline."""

    batch_id: int
    timestamp_ms: int | None
    interval_ms: int | None  # since the previous batch's start
    watermark_ms: int | None
    watermark_move_ms: int | None  # vs the previous batch; None when either had no watermark
    next_watermark_ms: int | None
    committed: bool
    has_offsets: bool
    sources: tuple[SourceActivity, ...]
    conf_changes: dict[str, tuple[str | None, str | None]]
    progress: Any = None  # readers.eventlog.QueryProgress of this batch, when an event log covers it

    @property
    def version(self) -> int:
        """The state version this batch writes (docs/format.md §1.2)."""
        return self.batch_id + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "timestamp_ms": self.timestamp_ms,
            "interval_ms": self.interval_ms,
            "watermark_ms": self.watermark_ms,
            "watermark_move_ms": self.watermark_move_ms,
            "next_watermark_ms": self.next_watermark_ms,
            "committed": self.committed,
            "has_offsets": self.has_offsets,
            "sources": [s.to_json() for s in self.sources],
            "conf_changes": {k: {"before": a, "after": b} for k, (a, b) in self.conf_changes.items()},
        }

    def to_json_with_progress(self) -> dict[str, Any]:
        """:meth:`to_json` plus ``progress`` (null when no event log covers this batch)."""
        return {**self.to_json(), "progress": self.progress.to_json() if self.progress is not None else None}


@dataclass
class Timeline:
    """The whole batch timeline and a few summary numbers."""

    rows: list[BatchRow]
    problems: list[StatelensError]
    event_logs: Any = None  # readers.eventlog.EventLogRead, when event logs were given
    query_id: str | None = None

    def intervals_ms(self) -> list[int]:
        return [r.interval_ms for r in self.rows if r.interval_ms is not None]

    def median_interval_ms(self) -> float | None:
        iv = self.intervals_ms()
        return statistics.median(iv) if iv else None

    def to_json(self) -> dict[str, Any]:
        iv = self.intervals_ms()
        if self.event_logs is not None:
            return {
                "batches": [r.to_json_with_progress() for r in self.rows],
                "median_interval_ms": self.median_interval_ms(),
                "max_interval_ms": max(iv) if iv else None,
                "uncommitted": [r.batch_id for r in self.rows if not r.committed],
                "event_logs": {
                    **self.event_logs.to_json(self.query_id),
                    **self.progress_coverage(),
                    "why_no_progress": progress_missing_reason(self.event_logs, self.query_id),
                },
                "problems": [p.to_json() for p in self.problems],
            }
        return {
            "batches": [r.to_json() for r in self.rows],
            "median_interval_ms": self.median_interval_ms(),
            "max_interval_ms": max(iv) if iv else None,
            "uncommitted": [r.batch_id for r in self.rows if not r.committed],
            "problems": [p.to_json() for p in self.problems],
        }

    def progress_coverage(self) -> dict[str, Any]:
        """Batches the event logs cover, and batches they report that the checkpoint does not have."""
        assert self.event_logs is not None
        reported = self.event_logs.for_query(self.query_id)
        ids = {r.batch_id for r in self.rows}
        return {
            "batches_with_progress": sorted(b for b in reported if b in ids),
            "batches_not_in_checkpoint": sorted(b for b in reported if b not in ids),
        }


class _FileSourceLog:
    """Files per log offset of one file source, read lazily from ``sources/<i>/``."""

    def __init__(self, ckpt: Any, index: int, problems: list[StatelensError]):
        self.ckpt = ckpt
        self.dir = f"sources/{index}"
        self.problems = problems
        self._plain: dict[int, str] = {}
        self._compact: dict[int, str] = {}
        for e in ckpt.fs.list_dir(self.dir):
            if e.is_dir or e.name.startswith("."):
                continue
            if logs.is_batch_file_name(e.name):
                self._plain[int(e.name)] = e.path
            elif e.name.endswith(".compact") and e.name[: -len(".compact")].isdigit():
                self._compact[int(e.name[: -len(".compact")])] = e.path
        self._cache: dict[str, list[dict[str, Any]] | None] = {}

    @property
    def present(self) -> bool:
        return bool(self._plain or self._compact)

    def _entries(self, path: str) -> list[dict[str, Any]] | None:
        if path not in self._cache:
            try:
                self._cache[path] = logs.parse_file_source_log(self.ckpt.fs.read_bytes(path), path)
            except StatelensError as err:
                self.problems.append(err)
                self._cache[path] = None
        return self._cache[path]

    def files_at(self, log_offset: int) -> int | None:
        if log_offset in self._plain:
            entries = self._entries(self._plain[log_offset])
            return None if entries is None else len(entries)
        later = [c for c in self._compact if c >= log_offset]
        if later:
            entries = self._entries(self._compact[min(later)])
            if entries is None:
                return None
            return sum(1 for e in entries if e.get("batchId") == log_offset)
        return None


def _long(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def iter_timeline(
    ckpt: Any,
    event_logs: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    cancelled: Any = None,
) -> Generator[Progress, None, Timeline]:
    """Build the batch timeline of a checkpoint.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    event_logs : list of str, optional
        Spark event logs, driver logs or progress dumps (paths or URLs, see :mod:`readers.eventlog`):
        each batch gains the progress its query reported (matched by the checkpoint's query id).
    storage_options : dict, optional
        fsspec options for the event log URLs.

    Yields
    ------
    Progress

    Returns
    -------
    Timeline
    """
    problems: list[StatelensError] = []
    file_logs: dict[int, _FileSourceLog] = {}
    kafka_initial: dict[int, Any] = {}
    rows: list[BatchRow] = []
    prev_batch: Any = None
    total = len(ckpt.batches)
    for n, b in enumerate(ckpt.batches):
        if n % 100 == 0:
            yield Progress(n, total, "timeline")
        off = b.offsets
        prev_off = (
            prev_batch.offsets if prev_batch is not None and prev_batch.batch_id == b.batch_id - 1 else None
        )
        ts = b.timestamp_ms
        prev_ts = prev_batch.timestamp_ms if prev_batch is not None else None
        wm = b.watermark_ms
        prev_wm = prev_batch.watermark_ms if prev_batch is not None else None
        sources: list[SourceActivity] = []
        if off is not None:
            for s in off.sources:
                before = None
                if prev_off is not None:
                    before = next((p for p in prev_off.sources if p.index == s.index), None)
                sources.append(_activity(ckpt, s, before, b.batch_id, file_logs, kafka_initial, problems))
        conf_changes: dict[str, tuple[str | None, str | None]] = {}
        if off is not None and prev_off is not None and off.conf and prev_off.conf:
            for key in sorted(set(off.conf) | set(prev_off.conf)):
                a, c = prev_off.conf.get(key), off.conf.get(key)
                if a != c:
                    conf_changes[key] = (a, c)
        rows.append(
            BatchRow(
                batch_id=b.batch_id,
                timestamp_ms=ts,
                interval_ms=(ts - prev_ts) if ts is not None and prev_ts is not None else None,
                watermark_ms=wm,
                # 0 means "no watermark yet" (docs/format.md §2.2): the first real one is not a move.
                watermark_move_ms=(wm - prev_wm) if wm is not None and prev_wm else None,
                next_watermark_ms=b.commit.next_watermark_ms if b.commit is not None else None,
                committed=b.committed,
                has_offsets=off is not None,
                sources=tuple(sources),
                conf_changes=conf_changes,
            )
        )
        prev_batch = b
    yield Progress(total, total, "timeline")
    timeline = Timeline(rows, problems)
    if event_logs:
        read = yield from iter_read_event_logs(event_logs, storage_options, cancelled)
        timeline.event_logs, timeline.query_id = read, ckpt.query_id
        problems.extend(read.warnings)
        by_batch = read.for_query(ckpt.query_id)
        timeline.rows = [replace(r, progress=by_batch.get(r.batch_id)) for r in rows]
        others = read.other_queries(ckpt.query_id)
        if others:
            problems.append(
                UsageError(
                    "the event logs also hold progress of other queries, left out: "
                    + ", ".join(f"{q} ({n} batches)" for q, n in sorted(others.items())),
                    path=", ".join(event_logs),
                )
            )
    return timeline


def _activity(
    ckpt: Any,
    s: Any,
    before: Any,
    batch_id: int,
    file_logs: dict[int, _FileSourceLog],
    kafka_initial: dict[int, Any],
    problems: list[StatelensError],
) -> SourceActivity:
    kind = s.source_kind
    if s.parsed is None:
        return SourceActivity(s.index, kind, None, note="no offset yet")
    if kind == "kafka":
        prev = before.parsed if before is not None and before.source_kind == "kafka" else None
        note = ""
        if prev is None and batch_id == 0:
            prev = _kafka_initial(ckpt, s.index, kafka_initial, problems)
            note = f"from the initial offsets in sources/{s.index}/0" if prev is not None else ""
        if prev is None:
            return SourceActivity(s.index, kind, s.parsed, note="previous offsets unknown")
        try:
            counts = logs.kafka_record_counts(prev, s.parsed)
        except StatelensError as err:
            problems.append(err)
            return SourceActivity(s.index, kind, s.parsed, note=str(err))
        per = {f"{t}/{p}": c for (t, p), c in counts.items()}
        known = [c for c in counts.values() if c is not None]
        return SourceActivity(s.index, kind, s.parsed, sum(known) if known else None, None, per, note)
    if kind == "file":
        cur = _long(s.parsed.get("logOffset"))
        prev_lo = (
            _long(before.parsed.get("logOffset"))
            if before is not None and before.source_kind == "file"
            else None
        )
        flog = file_logs.get(s.index)
        if flog is None:
            flog = file_logs[s.index] = _FileSourceLog(ckpt, s.index, problems)
        if cur is None:
            return SourceActivity(s.index, kind, s.parsed, note="bad logOffset")
        start = (prev_lo + 1) if prev_lo is not None else (0 if batch_id == 0 else cur)
        if prev_lo is not None and cur == prev_lo:
            return SourceActivity(s.index, kind, s.parsed, files=0, note="no new files")
        if not flog.present:
            return SourceActivity(s.index, kind, s.parsed, note=f"no file source log in sources/{s.index}")
        per_log = [flog.files_at(lo) for lo in range(start, cur + 1)]
        files = [c for c in per_log if c is not None]
        if len(files) != len(per_log):
            return SourceActivity(
                s.index, kind, s.parsed, note="file source log entries purged or unreadable"
            )
        return SourceActivity(s.index, kind, s.parsed, files=sum(files))
    if kind == "long":
        prev = _long(before.parsed) if before is not None else None
        cur = _long(s.parsed)
        delta = (cur - prev) if cur is not None and prev is not None else None
        return SourceActivity(
            s.index, kind, s.parsed, records=delta, note="offset delta (source-defined units)"
        )
    return SourceActivity(s.index, kind, s.parsed)


def _kafka_initial(ckpt: Any, index: int, cache: dict[int, Any], problems: list[StatelensError]) -> Any:
    if index not in cache:
        path = f"sources/{index}/0"
        cache[index] = None
        if ckpt.fs.exists(path):
            try:
                cache[index] = logs.parse_kafka_initial_offsets(ckpt.fs.read_bytes(path), path)
            except StatelensError as err:
                problems.append(err)
    return cache[index]


#: The parts of a batch's duration, in the order they run (Spark's ``durationMs`` names).
DURATION_PARTS = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


@dataclass
class ProgressSeries:
    """What the query reported per batch, as columns for the timeline plots (NaN where unknown)."""

    batch_ids: list[int]
    parts: list[tuple[str, list[float]]]  # (part name, seconds), stacked in this order
    input_rate: list[float]
    processed_rate: list[float]
    dropped: list[float]
    notes: list[str]
    run_ids: list[str]
    problems: list[StatelensError]
    summary: str
    why_empty: str = ""  # when no batch of this query is reported: what the logs held instead


def iter_progress_series(
    ckpt: Any, event_logs: list[str], storage_options: dict[str, Any] | None = None, cancelled: Any = None
) -> Generator[Progress, None, ProgressSeries]:
    """Read the event logs and lay out the checkpoint query's progress for the timeline plots.

    The duration parts are Spark's ``durationMs`` (``triggerExecution`` is their whole; what it has
    beyond the listed parts is shown as ``other``); rates are the query's input and processed rows per
    second; ``dropped`` sums ``numRowsDroppedByWatermark`` over the state operators.
    """

    read = yield from iter_read_event_logs(event_logs, storage_options, cancelled)
    reported = read.for_query(ckpt.query_id)
    ids = sorted(reported)
    nan = float("nan")
    parts: list[tuple[str, list[float]]] = []
    docs = [reported[b].to_json() for b in ids]
    for name in DURATION_PARTS:
        values = [d["duration_ms"].get(name) for d in docs]
        if any(v is not None for v in values):
            parts.append((name, [v / 1000 if v is not None else nan for v in values]))
    other = []
    for d in docs:
        total = d["duration_ms"].get("triggerExecution")
        known = sum(v for k, v in d["duration_ms"].items() if k in DURATION_PARTS)
        other.append(max(total - known, 0) / 1000 if total is not None else nan)
    if any(v > 0 for v in other if v == v):
        parts.append(("other", other))

    def num(v: Any) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else nan

    problems: list[StatelensError] = list(read.warnings)
    others = read.other_queries(ckpt.query_id)
    if others:
        problems.append(
            UsageError(
                "the event logs also hold progress of other queries, left out: "
                + ", ".join(f"{q} ({n} batches)" for q, n in sorted(others.items())),
                path=", ".join(event_logs),
            )
        )
    runs = [r for r in read.runs.values() if r.query_id == ckpt.query_id]
    why_empty = "" if ids else progress_missing_reason(read, ckpt.query_id)
    summary = (
        f"Event logs: progress for {len(ids):,} batches of this query in {len(runs)} run(s), "
        f"{len(read.files)} file(s)" + (f", {len(read.warnings)} warning(s)" if read.warnings else "")
    )
    return ProgressSeries(
        batch_ids=ids,
        parts=parts,
        input_rate=[num(d["input_rows_per_second"]) for d in docs],
        processed_rate=[num(d["processed_rows_per_second"]) for d in docs],
        dropped=[
            float(sum(op["num_rows_dropped_by_watermark"] or 0 for op in d["state_operators"])) for d in docs
        ],
        notes=[f"run {d['run_id'][:8]}" for d in docs],
        run_ids=[d["run_id"] for d in docs],
        problems=problems,
        summary=summary,
        why_empty=why_empty,
    )


def progress_missing_reason(read: Any, query_id: str | None) -> str:
    """Why event logs hold no progress of query ``query_id``: what they held instead, in one sentence.

    Parameters
    ----------
    read : readers.eventlog.EventLogRead
    query_id : str or None
        The checkpoint's query id (``metadata``).

    Returns
    -------
    str
        Empty when the logs do report progress of this query.
    """
    if read.for_query(query_id):
        return ""
    no_id = [w for w in read.warnings if "without a query id" in str(w)]
    others = read.other_queries(query_id)
    if no_id:
        first = no_id[0]
        line = first.context.get("line")
        return (
            f"{len(no_id):,} progress record(s) have no query id (the 'id' field), so none can be matched "
            f"to this checkpoint's query {query_id} (first: {first.path}"
            + (f", line {line})" if line else ")")
        )
    if others:
        return (
            f"they report other queries only ({', '.join(sorted(others))}), not this checkpoint's "
            f"query {query_id}"
        )
    return f"they hold no query progress at all ({len(read.files)} file(s) read)"

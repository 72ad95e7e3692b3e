"""The runs of a checkpoint (starts and restarts of its query) and each store's rates before and after a fix.

A checkpoint does not store run ids (``docs/format.md`` §2.1, §2.7): a restart of the same query writes
the next ``offsets/<b>`` and ``commits/<b>`` as the run before it would have, and no state, schema or
metadata file names it. So the runs come, in this order of trust, from

1. the run ids of the query's progress reports (event logs, driver logs or progress JSON lines:
   ``readers/eventlog.py``), batch by batch: a run starts at the first batch reported with its run id
   (a batch re-run after a restart is reported by the run that committed it);
2. else, for queries whose operators write operator metadata v2 (transformWithState, joins of state
   format v3 and later: ``state/<op>/_metadata/v2/<b>``, §8.2), the batch ids of those files: Spark
   writes one at the first batch of every run (verified on a transformWithStateInPandas query run twice
   on Spark 4.3: files ``0`` and ``6``, its second run's first batch);
3. else the batch timestamps (``batchTimestampMs``, §2.2): a run starts at a batch whose start is more
   than :data:`GAP_FACTOR` times the median interval and :data:`GAP_MIN_MS` after the batch before it
   (a restart costs at least a JVM's start; a slow batch or a stop of less than that is not told apart),
   unless the batch before it starts a run (a run's first batch is slow: the gap after it is its
   duration; verified on a live query restarted under load, whose first batch took 7.8 s). A restart
   re-runs the batch its predecessor planned but did not commit, and ``offsets/<b>`` keeps the stopped
   run's timestamp (verified on Spark 4.3): so a gap at batch ``b`` says the new run started at ``b`` or,
   when it re-ran one, at ``b - 1``; the rates then leave version ``b`` (the state after ``b - 1``) out
   of *before* (``margin``);
4. or the batch the user names (``fix_batch``).

:func:`before_after` then sets, per store, the rate of state growth (rows per batch, from
:mod:`app.analysis.growth`) and of new expired-but-unremoved keys (from the expired analysis' counts per
version, ``iter_expired(version_counts=...)``) before the fix batch against after it. Batch ``F`` writes
version ``F + 1`` (§1.2): *before* is the versions up to ``F`` (written by the runs before the fix),
*after* the versions from ``F + 1`` on; the change from version ``F`` to ``F + 1`` (what the fix's first
batch did, e.g. removing every zombie at once) is its own number, ``at_fix``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.eventlog import iter_read_event_logs
from statelens.readers.model import Progress

__all__ = [
    "GAP_FACTOR",
    "GAP_MIN_MS",
    "BeforeAfter",
    "Rate",
    "Run",
    "StoreBeforeAfter",
    "around",
    "before_after",
    "describe_change",
    "describe_fix",
    "expired_per_version",
    "find_runs",
    "fix_batch_of",
    "fix_margin",
    "fix_view",
    "iter_runs",
]

#: A batch starting this many median intervals after the one before it starts a new run (no event log).
GAP_FACTOR = 5.0
#: ... and at least this much later (ms): less than that is a slow batch, not a restart.
GAP_MIN_MS = 5_000


@dataclass(frozen=True)
class Run:
    """One run of the query: the batches one start of it planned or re-ran.

    Attributes
    ----------
    index : int
        0 for the first run the checkpoint still shows.
    first_batch, last_batch : int
        Its batches (inclusive). A run that re-ran a batch planned by the run before it starts there.
    run_id : str or None
        The run id its progress reports carry (None when no event log covers it).
    started_ms : int or None
        ``batchTimestampMs`` of its first batch.
    evidence : str
        Why a run starts here: ``"first batch"``, ``"run id"`` (the progress reports), ``"operator
        metadata"`` (a ``_metadata/v2/<b>`` file), ``"gap"`` (the batch timestamps) or ``"chosen"`` (the
        user's fix batch).
    gap_ms : int or None
        The time from the previous batch's start to this run's first batch's start.
    """

    index: int
    first_batch: int
    last_batch: int
    run_id: str | None
    started_ms: int | None
    evidence: str
    gap_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "first_batch": self.first_batch,
            "last_batch": self.last_batch,
            "run_id": self.run_id,
            "started_ms": self.started_ms,
            "evidence": self.evidence,
            "gap_ms": self.gap_ms,
        }


def _timestamps(ckpt: Any, timeline: Any) -> dict[int, int]:
    if timeline is not None:
        return {r.batch_id: r.timestamp_ms for r in timeline.rows if r.timestamp_ms is not None}
    return {b: e.timestamp_ms for b, e in ckpt.offsets.items() if e.timestamp_ms is not None}


def _progress(timeline: Any, event_logs_progress: Mapping[int, Any] | None) -> dict[int, Any]:
    if event_logs_progress is not None:
        return dict(event_logs_progress)
    if timeline is not None:
        return {r.batch_id: r.progress for r in timeline.rows if r.progress is not None}
    return {}


def _metadata_batches(ckpt: Any) -> list[int]:
    """Batch ids of the operator metadata v2 files of every operator (from the listing: no read)."""
    out: set[int] = set()
    for op in ckpt.operators:
        for e in ckpt.fs.list_dir(f"state/{op.operator_id}/_metadata/v2"):
            if not e.is_dir and e.name.isdigit():
                out.add(int(e.name))
    return sorted(out)


def find_runs(
    ckpt: Any,
    timeline: Any = None,
    event_logs_progress: Mapping[int, Any] | None = None,
    *,
    fix_batch: int | None = None,
) -> list[Run]:
    """The runs of the checkpoint's query, oldest first (see the module docstring for how).

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    timeline : app.analysis.timeline.Timeline, optional
        Its batch timestamps, and the progress of its rows when it was read with event logs.
    event_logs_progress : mapping, optional
        Batch id -> :class:`readers.eventlog.QueryProgress` of this query
        (``EventLogRead.for_query(ckpt.query_id)``); overrides the timeline's.
    fix_batch : int, optional
        Also start a run at this batch (the user's choice), whatever the evidence says.

    Returns
    -------
    list of Run
        Empty when the checkpoint has no batch.
    """
    stamps = _timestamps(ckpt, timeline)
    batches = sorted(set(ckpt.offsets) | set(ckpt.commits) | set(stamps))
    if not batches:
        return []
    progress = _progress(timeline, event_logs_progress)
    starts: dict[int, tuple[str, str | None]] = {batches[0]: ("first batch", None)}
    if progress:
        prev: str | None = None
        for b in batches:
            p = progress.get(b)
            if p is None:
                continue
            if p.run_id != prev:
                if prev is not None:
                    starts[b] = ("run id", p.run_id)
                elif b == batches[0] or b not in starts:
                    starts[batches[0]] = ("first batch", p.run_id)
                prev = p.run_id
    elif meta := _metadata_batches(ckpt):
        for b in meta:
            if b > batches[0]:
                starts[b] = ("operator metadata", None)
    else:
        ordered = [b for b in batches if b in stamps]
        gaps = {b: stamps[b] - stamps[a] for a, b in zip(ordered, ordered[1:], strict=False) if b == a + 1}
        if len(gaps) >= 2:
            median = statistics.median(gaps.values())
            for b, gap in sorted(gaps.items()):
                # A run's first batch is slow (state loaded, code compiled, a busy machine): the gap
                # after it is that batch's duration, not another restart.
                if b - 1 not in starts and gap > GAP_FACTOR * median and gap >= GAP_MIN_MS + median:
                    starts[b] = ("gap", None)
    if fix_batch is not None:
        if fix_batch not in batches:
            raise UsageError(
                f"batch {fix_batch} is not in the checkpoint (batches {batches[0]}–{batches[-1]})",
                path=ckpt.location,
            )
        if fix_batch not in starts:
            starts[fix_batch] = ("chosen", None)
    firsts = sorted(starts)
    runs: list[Run] = []
    for i, first in enumerate(firsts):
        last = firsts[i + 1] - 1 if i + 1 < len(firsts) else batches[-1]
        evidence, run_id = starts[first]
        prev_stamp = stamps.get(first - 1)
        gap_ms = stamps[first] - prev_stamp if first in stamps and prev_stamp is not None else None
        runs.append(Run(i, first, last, run_id, stamps.get(first), evidence, gap_ms if i else None))
    return runs


def fix_batch_of(runs: Sequence[Run], fix_batch: int | None = None) -> int | None:
    """The batch the fix went in with: ``fix_batch`` when given, else the last run's first batch.

    None when there is one run only and no choice.
    """
    if fix_batch is not None:
        return fix_batch
    return runs[-1].first_batch if len(runs) > 1 else None


def fix_margin(runs: Sequence[Run], fix_batch: int) -> int:
    """Versions before the fix batch that may hold the fixed run's state: 1 when the run starting
    there was found by a gap (it may have re-run the batch before), else 0."""
    return next((1 for r in runs if r.first_batch == fix_batch and r.evidence == "gap"), 0)


@dataclass(frozen=True)
class Rate:
    """A series' change per batch over some versions.

    ``per_batch`` is ``(last - first) / (last_version - first_version)``; None with fewer than two
    versions.
    """

    first_version: int | None
    last_version: int | None
    first: int | None
    last: int | None

    @property
    def per_batch(self) -> float | None:
        if self.first_version is None or self.last_version is None or self.first_version == self.last_version:
            return None
        assert self.first is not None and self.last is not None
        return (self.last - self.first) / (self.last_version - self.first_version)

    def to_json(self) -> dict[str, Any]:
        return {
            "first_version": self.first_version,
            "last_version": self.last_version,
            "first": self.first,
            "last": self.last,
            "per_batch": self.per_batch,
        }


def _rate(series: Mapping[int, int], versions: Sequence[int]) -> Rate:
    vs = [v for v in versions if v in series]
    if not vs:
        return Rate(None, None, None, None)
    return Rate(vs[0], vs[-1], series[vs[0]], series[vs[-1]])


@dataclass(frozen=True)
class BeforeAfter:
    """One series (rows, or expired keys) of one store around the fix."""

    before: Rate
    after: Rate
    at_fix: int | None  # series[F + 1] - series[F]: what the fix's first batch changed

    @property
    def stopped(self) -> bool | None:
        """It grew before the fix and does not after (None when either rate is unknown)."""
        b, a = self.before.per_batch, self.after.per_batch
        if b is None or a is None:
            return None
        return b > 0 and a <= 0

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "at_fix": self.at_fix,
            "stopped": self.stopped,
        }


@dataclass(frozen=True)
class StoreBeforeAfter:
    """A store's rows and expired keys before and after the fix batch."""

    operator_id: int
    store_name: str
    rows: BeforeAfter | None  # None: growth did not read the store
    expired: BeforeAfter | None  # None: the expired analysis did not check the store

    def to_json(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "rows": self.rows.to_json() if self.rows is not None else None,
            "expired": self.expired.to_json() if self.expired is not None else None,
        }


def expired_per_version(
    expired: Any,
    version_counts: Counter[tuple[int, str, int, str]] | None,
    store_versions: Mapping[tuple[int, str], Sequence[int]] | None = None,
) -> dict[tuple[int, str], dict[int, int]]:
    """Expired keys per version of every checked store (``overdue`` left out: it exists only at the
    latest version), from the counts at earlier versions and the result's tally at the latest.

    A version of ``store_versions`` where nothing was found counts 0 (the analysis reads every version
    of a store: the earlier ones into ``version_counts``, the latest into the result).
    """
    out: dict[tuple[int, str], dict[int, int]] = {}
    for o in expired.operators:
        if o.check == "skipped":
            continue
        key = (o.operator_id, o.store_name)
        per: Counter[int] = Counter()
        for (op, store, v, c), n in (version_counts or Counter()).items():
            if (op, store) == key and c != "overdue":
                per[v] += n
        for (_pid, v, c), n in expired.store_tally(o.operator_id, o.store_name).items():
            if c != "overdue":
                per[v] += n
        series = dict(per)
        for v in (store_versions or {}).get(key, ()):
            series.setdefault(v, 0)
        out[key] = dict(sorted(series.items()))
    return out


def around(series: Mapping[int, int], fix_batch: int, margin: int = 0) -> BeforeAfter:
    """A series (version -> count) before and after ``fix_batch`` (see :func:`before_after`)."""
    fix_version, last_before = fix_batch + 1, fix_batch - margin
    versions = sorted(series)
    before = [v for v in versions if v <= last_before]
    after = [v for v in versions if v >= fix_version]
    at_fix = (
        series[fix_version] - series[last_before] if fix_version in series and last_before in series else None
    )
    return BeforeAfter(_rate(series, before), _rate(series, after), at_fix)


def before_after(
    fix_batch: int,
    growth: Any = None,
    expired: Any = None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
    store_versions: Mapping[tuple[int, str], Sequence[int]] | None = None,
    margin: int = 0,
) -> list[StoreBeforeAfter]:
    """Per store, rows and expired keys per batch before and after ``fix_batch``.

    Parameters
    ----------
    fix_batch : int
        The batch the fix went in with (:func:`fix_batch_of`).
    growth : app.analysis.growth.GrowthResult, optional
        Rows per version (a version not every partition has is left out: its total would be short).
    expired : app.analysis.expired.ExpiredResult, optional
        With ``version_counts`` from the same ``iter_expired`` run: expired keys per version.
    store_versions : mapping, optional
        ``(operator_id, store_name)`` -> the store's versions, so a version without findings counts 0.
    margin : int
        Leave this many versions before the fix batch's out of *before* (:func:`fix_margin`); ``at_fix``
        is then the change from the last of *before* to the first of *after*.

    Returns
    -------
    list of StoreBeforeAfter
        Sorted by operator id and store name.
    """
    rows: dict[tuple[int, str], BeforeAfter] = {}
    if growth is not None:
        for st in growth.stores:
            if st.skipped or not st.versions:
                continue
            full = {
                v: r
                for v, r in zip(st.versions, st.total_rows(), strict=True)
                if st.partitions_at(v) == len(st.rows)
            }
            rows[(st.operator_id, st.store_name)] = around(full, fix_batch, margin)
    zombies: dict[tuple[int, str], BeforeAfter] = {}
    if expired is not None:
        for key, series in expired_per_version(expired, version_counts, store_versions).items():
            zombies[key] = around(series, fix_batch, margin)
    return [
        StoreBeforeAfter(op, store, rows.get((op, store)), zombies.get((op, store)))
        for op, store in sorted(set(rows) | set(zombies))
    ]


def _per_batch(rate: float | None) -> str:
    """A rate as text: signed, one decimal; ``0``; ``"not known"`` (fewer than two versions)."""
    return "not known" if rate is None else f"{rate:+,.1f}" if rate else "0"


def describe_change(change: BeforeAfter, what: str) -> str:
    """One line: ``"expired keys +4.0 per batch before, 0 after (-20 at the fix)"``."""
    text = (
        f"{what} {_per_batch(change.before.per_batch)} per batch before, "
        f"{_per_batch(change.after.per_batch)} after"
    )
    if change.at_fix:
        text += f" ({change.at_fix:+,} at the fix)"
    return text


def describe_fix(runs: Sequence[Run], fix_batch: int) -> str:
    """Where the fix is and why there: ``"Fix at batch 6: run 2 of 2 started there (run id 5fa54b0b)"``."""
    run = next((r for r in runs if r.first_batch == fix_batch), None)
    text = f"Fix at batch {fix_batch} (state version {fix_batch + 1} on)"
    if run is None or run.evidence == "chosen":
        return text + ": chosen"
    where = f"run {run.index + 1} of {len(runs)} started there"
    if run.evidence == "run id" and run.run_id:
        return f"{text}: {where} (run id {run.run_id[:8]})"
    if run.evidence == "operator metadata":
        return f"{text}: {where} (its operator metadata file state/<op>/_metadata/v2/{fix_batch})"
    if run.evidence == "gap" and run.gap_ms is not None:
        return (
            f"{text}: {where}, after a {run.gap_ms / 1000:,.1f} s gap in the batch times (or at batch "
            f"{fix_batch - 1}, if it re-ran that one: version {fix_batch} is counted on neither side)"
        )
    return f"{text}: {where}"


def fix_view(
    runs: Sequence[Run],
    series: Mapping[tuple[int, str], Mapping[int, int]],
    what: str,
    fix_batch: int | None = None,
) -> tuple[int | None, str, dict[tuple[int, str], str]]:
    """What a view over versions shows of the fix: its batch (None with one run), where it is and why,
    and per store the line of :func:`describe_change` for ``series`` (version -> count).

    Parameters
    ----------
    runs : sequence of Run
        :func:`find_runs` (with a chosen batch, that one is the fix).
    series : mapping
        ``(operator_id, store_name)`` -> version -> rows or expired keys.
    what : str
        What the series counts (``"rows"``, ``"expired keys"``).
    fix_batch : int, optional
        The user's choice (default: a chosen run's start, else the last run's).
    """
    chosen = next((r.first_batch for r in runs if r.evidence == "chosen"), None)
    fix = fix_batch_of(runs, fix_batch if fix_batch is not None else chosen)
    if fix is None:
        return None, "", {}
    margin = fix_margin(runs, fix)
    texts = {key: describe_change(around(s, fix, margin), what) for key, s in series.items()}
    return fix, describe_fix(runs, fix), texts


def iter_runs(
    ckpt: Any,
    event_logs: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, list[Run]]:
    """:func:`find_runs`, reading the event logs first when given (their run ids); an event log that
    cannot be read leaves the runs to the checkpoint's own evidence (the timeline reports the error).

    Yields
    ------
    Progress

    Returns
    -------
    list of Run
    """
    if not event_logs:
        return find_runs(ckpt)
    try:
        read = yield from iter_read_event_logs(list(event_logs), storage_options, cancelled)
    except StatelensError:
        return find_runs(ckpt)
    return find_runs(ckpt, event_logs_progress=read.for_query(ckpt.query_id))

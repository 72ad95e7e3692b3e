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

Versions are streamed per partition by the scan's replay (:class:`readers.scan.StateScan`, kind
``replay``) and folded into the checks (:mod:`app.analysis.expired_fold`: one pass per store, which a
caller holding a :class:`readers.scan.Replay` can go on feeding); only the timeout slot of changed values
is read, and only reported keys are decoded. Findings are handed to a sink as
they are found, in walk order (operator, store, partition, version, category); the result keeps exact
counts per partition, version and category and a capped number of examples, so memory does not grow
with the number of findings. With a Spark backend the same checks run on the rows Spark's
``statestore`` source returns (:class:`app.analysis.expired_sources.RowSource`), or inside Spark
(:mod:`app.analysis.expired_spark`).

The rooms: :mod:`app.analysis.expired_result` (findings, the result, the summary line of a store),
:mod:`app.analysis.timeout_kind` (event or processing time), :mod:`app.analysis.expired_sources` (where
the state comes from), :mod:`app.analysis.expired_fold` (the checks as folds over versions),
:mod:`app.analysis.tws` (transformWithState's timers); this module runs them over a checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from statelens.app.analysis._common import BatchClock
from statelens.app.analysis.expired_fold import (
    EvictionFold,
    TimeoutFold,
    eviction_column,
    timeout_column,
    walk_store,
)
from statelens.app.analysis.expired_result import (
    CATEGORIES,
    DEFAULT_MAX_EXAMPLES,
    DEFAULT_STALE_AFTER,
    TIMEOUT_KINDS,
    Emitter,
    ExpiredFinding,
    ExpiredResult,
    OperatorExpiry,
    TimeoutKindEvidence,
)
from statelens.app.analysis.expired_sources import RowSource, ScanSource, state_source
from statelens.app.analysis.findings import NO_TIMESTAMP
from statelens.app.analysis.timeout_kind import infer_timeout_kind
from statelens.app.analysis.tws import check_transform_with_state
from statelens.readers.errors import BackendUnavailableError, StatelensError, UsageError
from statelens.readers.model import OperatorKind, Progress

if TYPE_CHECKING:
    from statelens.readers.backends import BackendChooser

__all__ = [
    "CATEGORIES",
    "DEFAULT_MAX_EXAMPLES",
    "DEFAULT_STALE_AFTER",
    "TIMEOUT_KINDS",
    "ExpiredFinding",
    "ExpiredResult",
    "OperatorExpiry",
    "TimeoutKindEvidence",
    "infer_timeout_kind",
    "iter_expired",
    "state_source",
]

_TIMEOUT_OPERATORS = (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE)
_EVICTING_OPERATORS = (
    OperatorKind.AGGREGATION,
    OperatorKind.DEDUPLICATION,
    OperatorKind.DEDUPLICATION_WITHIN_WATERMARK,
    OperatorKind.JOIN,
    OperatorKind.SESSION_WINDOW,
)
_JOIN_NOTE = (
    "joins with a time-range condition keep rows up to the range width behind the watermark by design"
)


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
    out = Emitter(result, sink)
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
            col = eviction_column(op, st)
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
            yield from check_transform_with_state(
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
        fold = yield from (
            _timeout_fold(
                op,
                source,
                clock,
                summary,
                out,
                problems,
                all_versions,
                stale_after,
                timeout_kind,
                version_counts,
            )
            if col is None
            else _eviction_fold(op, source, clock, col, summary, out, problems, all_versions, version_counts)
        )
        if fold is not None:  # not checked where the backend's engine runs: the rows are walked here
            yield from walk_store(source, fold, problems, cancelled)
        if source.feed_note:
            summary.reason = source.feed_note
    yield Progress(len(jobs), len(jobs), "expired keys")
    unique: dict[str, StatelensError] = {}
    for err in problems:  # the inference pass and the main pass meet the same bad files
        unique.setdefault(str(err), err)
    result.problems = list(unique.values())
    return result


def _timeout_fold(
    op: Any,
    source: ScanSource | RowSource,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    stale_after: int | None,
    override: str | None,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, TimeoutFold | None]:
    """The timeout checks of one store: the kind decided (given, or inferred from the timeouts batches
    set), then run where the backend's engine runs, or else the fold the walk feeds (returned)."""
    path = timeout_column(op, source.store_name)
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
    summary.partitions = len(source.partition_ids())
    pushed = yield from source.check_timeouts_elsewhere(
        op, clock, kind, path, ev_text, summary, out, problems, stale_after, all_versions, version_counts
    )
    if pushed:
        return None
    return TimeoutFold(
        summary,
        out,
        clock,
        source.key_decoder,
        all_versions,
        version_counts,
        ev_text,
        read_timeout=read_timeout,
        kind=kind,
        tiebreak=source.tiebreak,
        stale_after=stale_after,
    )


def _eviction_fold(
    op: Any,
    source: ScanSource | RowSource,
    clock: BatchClock,
    col: tuple[str, tuple[int, ...], str, str],
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, EvictionFold | None]:
    """The eviction check of one store: run where the backend's engine runs, or else the fold the walk
    feeds (returned)."""
    side, path, unit, name = col
    read = source.key_reader(path) if side == "key" else source.value_reader(path)
    summary.timeout_kind = TimeoutKindEvidence(
        "event_time", "schema", f"Spark evicts rows whose {side} field {name} is behind the watermark"
    )
    note = _JOIN_NOTE if op.kind == OperatorKind.JOIN else ""
    ev_text = f"schema: {summary.timeout_kind.evidence}"
    summary.partitions = len(source.partition_ids())
    pushed = yield from source.check_eviction_elsewhere(
        op, clock, col, note, ev_text, summary, out, problems, all_versions, version_counts
    )
    if pushed:
        return None
    return EvictionFold(
        summary,
        out,
        clock,
        source.key_decoder,
        all_versions,
        version_counts,
        ev_text,
        read_time=read,
        side=side,
        unit=unit,
        note=note,
    )

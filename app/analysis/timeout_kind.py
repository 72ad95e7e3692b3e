"""Whether a store's timeouts are event- or processing-time, inferred from the timeouts batches set
(the checkpoint does not record it; :mod:`app.analysis.expired`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statelens.app.analysis._common import BatchClock
from statelens.app.analysis.expired_result import TimeoutKindEvidence
from statelens.app.analysis.findings import NO_TIMESTAMP
from statelens.readers.errors import StatelensError

if TYPE_CHECKING:
    from statelens.app.analysis.expired_sources import RowSource, ScanSource

#: Fresh timeout samples after which the timeout-kind inference stops reading.
_INFERENCE_SAMPLES = 500


def infer_timeout_kind(
    source: ScanSource | RowSource,
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
    source : ScanSource or RowSource
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

"""What a finding says: one definition of each category's fields, whether the native walk or a Spark
query found it (:mod:`app.analysis.expired`, :mod:`app.analysis.expired_spark`, :mod:`app.analysis.tws`).
"""

from __future__ import annotations

from typing import Any

#: The stored timeout of a key that has none (GroupState's ``NO_TIMESTAMP``).
NO_TIMESTAMP = -1


def age_in_batches(version: int, batch_id: int | None) -> int | None:
    """Batches run after batch ``batch_id`` (the one that fired a timeout, passed a row with the
    watermark or last wrote a key) up to state ``version``: 0 at the version that batch wrote
    (``batch_id + 1``), the same for every operator and backend (``docs/findings.md``)."""
    return None if batch_id is None else version - 1 - batch_id


def zombie_fields(
    v: int,
    b0: int | None,
    t0: int,
    thr0: int | None,
    stored: int | None,
    thr: int | None,
    kind_label: str,
    evidence: str,
) -> dict[str, Any]:
    """A key still held at version ``v`` after its timeout ``t0`` fired in batch ``b0`` (threshold
    ``thr0``); ``stored`` is the timeout it holds now, ``thr`` the threshold of the batch that wrote ``v``.

    ``age_batches`` (:func:`age_in_batches`) is 0 at the version the firing batch wrote."""
    return dict(
        category="zombie",
        batch_id=b0,
        timeout_ms=t0,
        threshold_ms=thr0,
        timeout_kind=kind_label,
        age_batches=age_in_batches(v, b0),
        age_ms=(thr - t0) if thr is not None else None,
        stored_timeout_ms=stored,
        note=(
            "old expired timeout left in place: fires again every batch"
            if stored == t0
            else "stored again without a timeout (-1): never fires again"
        ),
        evidence=evidence,
    )


def overdue_fields(v: int, t: int, nthr: int, source: str, kind_label: str, evidence: str) -> dict[str, Any]:
    """An armed timeout ``t`` below the next batch's threshold ``nthr`` (from ``source``) at version ``v``."""
    return dict(
        category="overdue",
        batch_id=v,
        timeout_ms=t,
        threshold_ms=nthr,
        timeout_kind=kind_label,
        age_batches=0,
        age_ms=nthr - t,
        stored_timeout_ms=t,
        note=f"no batch processed it; next threshold from {source}",
        evidence=evidence,
    )


def stale_fields(v: int, written: int, ts_now: int | None, ts_then: int | None) -> dict[str, Any]:
    """A key without timeout at version ``v``, last written by version ``written`` (batch timestamps of both)."""
    return dict(
        category="stale",
        batch_id=written - 1,
        timeout_ms=NO_TIMESTAMP,
        threshold_ms=None,
        timeout_kind="none",
        age_batches=age_in_batches(v, written - 1),
        age_ms=(ts_now - ts_then) if ts_now is not None and ts_then is not None else None,
        stored_timeout_ms=NO_TIMESTAMP,
        note="no timeout and not written since" + (" (at least)" if written == v else ""),
        evidence="no timeout set on the key",
    )


def eviction_fields(v: int, b0: int | None, t: int, wm: int, note: str, evidence: str) -> dict[str, Any]:
    """A row at version ``v`` whose event time ``t`` is behind that batch's watermark ``wm`` (first passed
    in batch ``b0``)."""
    return dict(
        batch_id=b0,
        category="eviction_lag",
        timeout_ms=t,
        threshold_ms=wm,
        timeout_kind="event_time",
        age_batches=age_in_batches(v, b0),
        age_ms=wm - t,
        stored_timeout_ms=None,
        note=note,
        evidence=evidence,
    )


def timer_fields(
    v: int, b: int, expiry: int, threshold: int | None, now: int | None, kind: str, evidence: str
) -> dict[str, Any]:
    """What a transformWithState zombie finding says (whether the walk or a Spark query found it)."""
    return dict(
        batch_id=b,
        category="zombie",
        timeout_ms=expiry,
        threshold_ms=threshold,
        timeout_kind=kind,
        age_batches=age_in_batches(v, b),
        age_ms=(now - expiry) if now is not None else None,
        stored_timeout_ms=None,
        note="timer fired; the handler kept this state and registered no new timer",
        evidence=evidence,
    )

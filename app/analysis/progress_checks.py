"""``doctor --event-log``: what the query reported (event logs, driver logs) against what the checkpoint holds.

* The logs' progress belongs to this checkpoint's query (the query id in ``metadata``); progress of
  other queries is named, never compared.
* Batches the logs report after the checkpoint's last batch mean the copy is older than the query's
  life (a restart from it re-runs them); batches of the checkpoint the logs do not cover are a note.
* For single-store operators, ``numRowsTotal`` of a batch's progress equals the rows of the state
  version that batch wrote (version = batch + 1), counted natively; the last few reported batches are
  compared. A difference means the state files are not what the query committed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from statelens.readers.backends import native_backend
from statelens.readers.errors import StatelensError
from statelens.readers.eventlog import iter_read_event_logs
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan
from statelens.readers.textfmt import ranges

#: Reported batches whose state row counts are compared (the most recent ones, which a restart uses).
COMPARED_BATCHES = 5


def iter_check_progress(
    ckpt: Any,
    event_logs: list[str],
    add: Callable[..., None],
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, None]:
    """Run the cross-checks; ``add(check, severity, message, files, **ctx)`` records each finding."""

    read = yield from iter_read_event_logs(event_logs, storage_options, cancelled)
    files = list(event_logs)
    for w in read.warnings:
        add("event_log_unreadable", "warning", f"{w.path}: {w.message}", [w.path or files[0]])
    others = read.other_queries(ckpt.query_id)
    reported = read.for_query(ckpt.query_id)
    if others:
        add(
            "event_log_other_query",
            "warning" if not reported else "info",
            "the event logs hold progress of other queries ("
            + ", ".join(f"{q}: {n} batches" for q, n in sorted(others.items()))
            + f"), not of this checkpoint's query {ckpt.query_id}"
            + ("" if reported else ": nothing to compare"),
            files,
        )
    if not reported:
        if not others:
            add("event_log_no_progress", "warning", "the event logs hold no streaming query progress", files)
        return
    batch_ids = {b.batch_id for b in ckpt.batches}
    last = max(batch_ids) if batch_ids else -1
    beyond = sorted(b for b in reported if b > last)
    if beyond:
        add(
            "event_log_beyond_checkpoint",
            "warning",
            f"the query reported batches {ranges(beyond)} after this checkpoint's last batch ({last}): the copy is "
            "older than the query's life, and a restart from it runs those batches again",
            files,
        )
    uncovered = sorted(b for b in batch_ids if b not in reported)
    if uncovered:
        add(
            "event_log_not_covering",
            "info",
            f"batches {ranges(uncovered)} of the checkpoint have no progress in these logs",
            files,
        )
    yield from _compare_rows(ckpt, reported, add, files, cancelled)


def _compare_rows(
    ckpt: Any,
    reported: dict[int, Any],
    add: Callable[..., None],
    files: list[str],
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, None]:
    """``numRowsTotal`` of the last reported batches against the live rows of the versions they wrote,
    counted by one stats scan per store (:class:`readers.scan.StateScan`); versions the scan could not
    count whole (a file unreadable in some partition) are not compared: the file checks report them."""
    batches = sorted(reported)[-COMPARED_BATCHES:]
    if not batches:
        return
    native = native_backend(ckpt)
    stores = [op for op in ckpt.operators if len(op.stores) == 1]  # joins: numRowsTotal sums stores
    for n, op in enumerate(stores):  # whose rows mean different things
        if cancelled is not None and cancelled():
            return
        store = op.stores[0]
        yield Progress(n, len(stores), f"operator {op.operator_id}: state rows of batches vs their progress")
        scan = StateScan(
            native,
            op.operator_id,
            store.store_name,
            "stats",
            start_version=batches[0] + 1,
            end_version=batches[-1] + 1,
            cancelled=cancelled,
        )
        counted: dict[int, int] = {}
        try:
            for st in scan.iter_stats():
                counted[st.version] = counted.get(st.version, 0) + st.rows
        except StatelensError:
            continue  # column families, unreadable stores: reported by the other checks
        damaged_from = min((u.version or 0 for u in scan.unreadable), default=None)
        for b in batches:
            version = b + 1
            if version not in counted or (damaged_from is not None and version >= damaged_from):
                continue  # cleaned up since, or not counted whole
            ops = reported[b].raw.get("stateOperators") or []
            if op.operator_id >= len(ops):
                continue
            want, got = ops[op.operator_id].get("numRowsTotal"), counted[version]
            if isinstance(want, int) and want != got:
                add(
                    "progress_rows_disagree",
                    "warning",
                    f"operator {op.operator_id} store {store.store_name}: batch {b} reported {want:,} state rows "
                    f"(numRowsTotal), the state files of version {version} hold {got:,}",
                    [f"state/{op.operator_id}", *files],
                    batch_id=b,
                    operator_id=op.operator_id,
                    store_name=store.store_name,
                )

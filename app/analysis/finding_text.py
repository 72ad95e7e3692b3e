"""How an expired-key finding's batch reads in tables (command line, app, report)."""

from __future__ import annotations


def batch_text(category: str, batch_id: int | None) -> str:
    """``6``, or ``7 (next, not run yet)`` for an overdue key.

    An overdue key's batch is the one that would remove it: the next batch, which the checkpoint has
    not run (the query stopped first), so its id is past the last batch of the logs.

    Parameters
    ----------
    category : str
        ``zombie``, ``overdue``, ``stale`` or ``eviction_lag``.
    batch_id : int or None

    Returns
    -------
    str
    """
    if batch_id is None:
        return ""
    return f"{batch_id} (next, not run yet)" if category == "overdue" else str(batch_id)

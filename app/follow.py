"""Follow mode's Qt-free half: one poll of a live checkpoint, and the status line it gives.

The desktop app's follow mode (:mod:`app.gui.follow`) runs :func:`iter_poll` on a worker thread every
few seconds. A poll goes through one small adapter, a :class:`Poller`, whose :meth:`Poller.poll` says
which batches committed since the last poll; :class:`ReopeningPoller` opens the checkpoint again (one
listing, the logs and the operators, no state file read) and compares its newest committed batch with
the one seen before. The checkpoint it opened is handed on, so the app's refresh lists nothing twice.
What the views read then: the state browser nothing (its rows stay), the browser and the SQL view
versions decoded before from the on-disk cache (:mod:`readers.cache`); the verdicts, growth and expired
keys are computed again from the state files.

:func:`follow_status` turns the polls into the line the status bar shows ("batch 42 started 3 s ago; 2
new batches", "no new batch for 60 s — query stopped?").
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from statelens.readers.checkpoint import Checkpoint, open_checkpoint
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress

#: Seconds between two polls, unless the user chose another interval.
DEFAULT_INTERVAL_S = 5.0
#: Polls in a row without a new batch after which the status line asks whether the query stopped.
QUIET_POLLS = 12


@dataclass(frozen=True)
class FollowPoll:
    """What one poll found.

    Attributes
    ----------
    new_batches : tuple of int
        Batches committed since the previous poll, ascending (empty when none).
    last_committed : int or None
        The newest committed batch (None when the checkpoint has none yet).
    batch_time_ms : int or None
        When ``last_committed`` started (its offsets file's batch timestamp), epoch milliseconds.
    restarted : bool
        The query restarted (a new run) since the previous poll, when the poller can tell
        (:class:`ReopeningPoller` cannot: Spark's logs of format 1 name no run).
    went_back : bool
        The commit log went back: the checkpoint was replaced, or its newest commits were deleted.
    checkpoint : Checkpoint or None
        The checkpoint as this poll opened it (the app shows it when batches committed).
    problem : str
        Why the poll could not read the checkpoint ("" when it could); the next poll tries again.
    """

    new_batches: tuple[int, ...] = ()
    last_committed: int | None = None
    batch_time_ms: int | None = None
    restarted: bool = False
    went_back: bool = False
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)
    problem: str = ""

    @property
    def changed(self) -> bool:
        """Whether the views have something new to show."""
        return bool(self.new_batches) or self.restarted or self.went_back


class Poller(Protocol):
    """One poll of a live checkpoint: which batches committed since the previous call."""

    def poll(self, cancelled: Callable[[], bool] | None = None) -> FollowPoll:
        """Look at the checkpoint once (one listing)."""
        ...


class ReopeningPoller:
    """A :class:`Poller` that opens the checkpoint again at every poll and compares its newest commit.

    Parameters
    ----------
    url : str
        Local path or fsspec URL.
    storage_options : dict, optional
    last_committed : int or None
        The newest committed batch already shown (batches after it are new at the first poll).
    """

    def __init__(
        self, url: str, storage_options: dict[str, Any] | None = None, last_committed: int | None = None
    ) -> None:
        self.url = url
        self.storage_options = storage_options
        self.last_committed = last_committed

    def poll(self, cancelled: Callable[[], bool] | None = None) -> FollowPoll:
        """Open the checkpoint again; a read that fails (a file gone between the listing and its read,
        storage unreachable) is the poll's ``problem``, and the next poll tries again."""
        try:
            ckpt = open_checkpoint(self.url, self.storage_options, cancelled=cancelled)
        except StatelensError as err:
            return FollowPoll(last_committed=self.last_committed, problem=str(err))
        last = ckpt.last_committed_batch_id
        before = self.last_committed
        went_back = before is not None and (last is None or last < before)
        if went_back:
            new: tuple[int, ...] = ()
        else:
            new = tuple(b for b in sorted(ckpt.commits) if before is None or b > before)
        entry = ckpt.offsets.get(last) if last is not None else None
        self.last_committed = last
        return FollowPoll(
            new_batches=new,
            last_committed=last,
            batch_time_ms=entry.timestamp_ms if entry is not None else None,
            went_back=went_back,
            checkpoint=ckpt,
        )


def iter_poll(
    poller: Poller, cancelled: Callable[[], bool] | None = None
) -> Generator[Progress, None, FollowPoll]:
    """One poll as a job of the app's runner (:mod:`app.gui.workers`).

    Parameters
    ----------
    poller : Poller
    cancelled : callable, optional
        The runner's quit flag, passed to the storage layer.

    Yields
    ------
    Progress

    Returns
    -------
    FollowPoll
    """
    yield Progress(0, 0, "looking for new batches")
    return poller.poll(cancelled)


@dataclass
class FollowLog:
    """What follow mode has seen, for the status line.

    Attributes
    ----------
    interval_s : float
        Seconds between polls.
    last_poll_ms : int or None
        When the last poll ended.
    last_new_ms : int or None
        When a poll last found a new batch (or follow mode started).
    last : FollowPoll or None
        The last poll.
    """

    interval_s: float = DEFAULT_INTERVAL_S
    last_poll_ms: int | None = None
    last_new_ms: int | None = None
    last: FollowPoll | None = None

    def start(self, now_ms: int) -> None:
        """Follow mode was turned on."""
        self.last_poll_ms, self.last_new_ms, self.last = None, now_ms, None

    def record(self, poll: FollowPoll, now_ms: int) -> None:
        """A poll ended at ``now_ms``."""
        self.last_poll_ms = now_ms
        if poll.changed or self.last_new_ms is None:
            self.last_new_ms = now_ms
        self.last = poll

    def status(self, now_ms: int, clock: Callable[[int], str]) -> str:
        """The status line (:func:`follow_status`)."""
        return follow_status(self, now_ms, clock)


def follow_status(log: FollowLog, now_ms: int, clock: Callable[[int], str]) -> str:
    """The follow status line: when the last poll ran and what it found.

    Parameters
    ----------
    log : FollowLog
    now_ms : int
        The time now, epoch milliseconds.
    clock : callable
        Formats an epoch-milliseconds time of day (in the zone the app shows times in).

    Returns
    -------
    str
        e.g. ``Following (every 5 s) · polled 12:03:07: batch 42 started 3 s ago; 2 new batches``.
    """
    every = f"{log.interval_s:g} s" if log.interval_s < 120 else _seconds(log.interval_s)
    head = f"Following (every {every})"
    poll = log.last
    if poll is None or log.last_poll_ms is None:
        return f"{head} · waiting for the first poll"
    head += f" · polled {clock(log.last_poll_ms)}"
    if poll.problem:
        return f"{head}: could not read the checkpoint ({poll.problem}); trying again"
    if poll.last_committed is None:
        return f"{head}: no batch committed yet"
    latest = f"batch {poll.last_committed}"
    if poll.batch_time_ms is not None:
        latest += f" started {_seconds(max(0, now_ms - poll.batch_time_ms) / 1000)} ago"
    if poll.went_back:
        return f"{head}: the commit log went back to {latest} (commits deleted, or the checkpoint replaced)"
    if poll.new_batches:
        n = len(poll.new_batches)
        found = f"{n} new batch{'es' if n != 1 else ''}"
        return f"{head}: {latest}; {found}" + ("; the query restarted" if poll.restarted else "")
    if poll.restarted:
        return f"{head}: {latest}; the query restarted"
    quiet_s = (now_ms - (log.last_new_ms or now_ms)) / 1000
    if quiet_s >= QUIET_POLLS * log.interval_s:
        return f"{head}: {latest}; no new batch for {_seconds(quiet_s)} — query stopped?"
    return f"{head}: {latest}; no new batch"


def _seconds(s: float) -> str:
    """``5 s``, ``90 s``, ``12 min``, ``3.5 h``."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"

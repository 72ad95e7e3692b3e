"""Follow mode's Qt-free half: one poll of a live checkpoint, and the status line it gives.

The desktop app's follow mode (:mod:`app.gui.follow`) runs :func:`iter_poll` on a worker thread every
few seconds. A poll goes through one small adapter, a :class:`Poller`, whose :meth:`Poller.poll` says
which batches committed since the last poll; :class:`WatcherPoller` reads each new version as
``statelens watch`` does (:class:`app.analysis.watch.Watcher`: one listing, the new log files, then the
state files the new versions wrote, through the scan's replay), and opens the checkpoint once more for
the views when batches committed. What the views read then: the state browser nothing (its rows stay),
the browser and the SQL view versions decoded before from the on-disk cache (:mod:`readers.cache`); the
verdicts, growth and expired keys are computed again from the state files.

:func:`follow_status` turns the polls into the line the status bar shows ("batch 42 started 3 s ago; 2
new batches; +12 zombie keys (40 in all)", "no new batch for 60 s — query stopped?").
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from statelens.app.analysis.watch import Watcher, WatchPoll
from statelens.readers.checkpoint import Checkpoint, open_checkpoint
from statelens.readers.errors import StatelensError
from statelens.readers.logs import is_batch_file_name
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
        The query restarted since the previous poll: a new run id in the event log, or without one a
        long gap before a batch (Spark's logs name no run).
    went_back : bool
        The commit log went back: the checkpoint was replaced, or its newest commits were deleted.
    checkpoint : Checkpoint or None
        The checkpoint as this poll opened it (the app shows it when batches committed).
    problem : str
        Why the poll could not read the checkpoint ("" when it could); the next poll tries again.
    zombies_new : int or None
        Expired-but-unremoved keys the new batches added, over every store (None where no store has a
        check that applies): keys whose timeout fired and that were left in the state, and the change
        of the eviction lag.
    zombies : int or None
        Expired-but-unremoved keys in all after the newest of the new batches.
    gone : tuple of int
        New batches whose state versions were cleaned up before they were read (no rows).
    waiting : int
        Files listed but not readable yet (a batch whose state is not all there): read at the next poll.
    stopped : bool
        No new batch for :data:`QUIET_POLLS` polls.
    """

    new_batches: tuple[int, ...] = ()
    last_committed: int | None = None
    batch_time_ms: int | None = None
    restarted: bool = False
    went_back: bool = False
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)
    problem: str = ""
    zombies_new: int | None = None
    zombies: int | None = None
    gone: tuple[int, ...] = ()
    waiting: int = 0
    stopped: bool = False

    @property
    def changed(self) -> bool:
        """Whether the views have something new to show."""
        return bool(self.new_batches) or self.restarted or self.went_back


class Poller(Protocol):
    """One poll of a live checkpoint: which batches committed since the previous call."""

    def poll(self, cancelled: Callable[[], bool] | None = None) -> FollowPoll:
        """Look at the checkpoint once (one listing)."""
        ...


class WatcherPoller:
    """A :class:`Poller` backed by a :class:`~app.analysis.watch.Watcher`, as ``statelens watch`` polls.

    Each poll refreshes the watcher's checkpoint (one listing, then only the new log files) and advances
    every store through the scan's replay from the version it reached, so a batch costs what it wrote;
    the watcher says which batches committed and are readable, the zombies they added, versions gone or
    not readable yet, a restart of the query and a query that stopped. The watcher's checkpoint is
    refreshed in place and is never handed to the views (they read theirs on other threads while the
    next poll runs): when batches committed, the poll opens the checkpoint once more for the views (one
    more listing, the logs and the operators, no state file read), and only then.

    Parameters
    ----------
    url : str
        Local path or fsspec URL.
    storage_options : dict, optional
    last_committed : int or None
        The newest committed batch already shown (batches after it are new at the first poll).
    event_logs : list of str, optional
        The query's event logs: each batch's run id, so that a new run is a restart (without them a
        long gap between two batches is).
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        last_committed: int | None = None,
        event_logs: list[str] | None = None,
    ) -> None:
        self.url = url
        self.storage_options = storage_options
        self.event_logs = list(event_logs or [])
        self.last_committed = last_committed
        self.watcher = self._watcher()
        self._unshown: tuple[int, ...] = ()  # reported by the watcher, not shown yet (the re-open failed)

    def _watcher(self) -> Watcher:
        start = 0 if self.last_committed is None else self.last_committed + 1
        return Watcher(
            self.url,
            self.storage_options,
            event_logs=self.event_logs,
            from_batch=start,
            stop_after=QUIET_POLLS,
        )

    def poll(self, cancelled: Callable[[], bool] | None = None) -> FollowPoll:
        """Poll the watcher once; a poll that cannot read the checkpoint (not there, storage unreachable,
        a file gone between the listing and its read) says so in ``problem``, and the next poll tries
        again."""
        try:
            found = self.watcher.poll()
        except StatelensError as err:  # the first poll could not open it: the next one opens it again
            return FollowPoll(last_committed=self.last_committed, problem=str(err))
        if found.unlisted:
            return FollowPoll(last_committed=self.last_committed, problem=found.unlisted)
        ckpt = self.watcher.ckpt
        assert ckpt is not None
        listed = [int(e.name) for e in ckpt.fs.list_dir("commits") if is_batch_file_name(e.name)]
        before = self.last_committed
        if before is not None and (not listed or max(listed) < before):
            # Commits deleted, or the checkpoint replaced: what the watcher folded no longer stands.
            return self._went_back(cancelled)
        batches = found.batches
        if batches:
            self.last_committed = batches[-1].batch_id
        new = self._unshown + tuple(b.batch_id for b in batches)
        shown: Checkpoint | None = None
        if new:
            try:
                shown = open_checkpoint(self.url, self.storage_options, cancelled=cancelled)
            except StatelensError as err:
                self._unshown = new  # shown at the next poll that can open it
                return self._result(found, (), None, problem=str(err))
            self._unshown = ()
        return self._result(found, new, shown)

    def _went_back(self, cancelled: Callable[[], bool] | None) -> FollowPoll:
        try:
            shown = open_checkpoint(self.url, self.storage_options, cancelled=cancelled)
        except StatelensError as err:
            self.watcher = self._watcher()  # from the last batch shown, should the checkpoint come back
            return FollowPoll(last_committed=self.last_committed, problem=str(err))
        self.last_committed = shown.last_committed_batch_id
        self.watcher, self._unshown = self._watcher(), ()
        entry = shown.offsets.get(self.last_committed) if self.last_committed is not None else None
        return FollowPoll(
            last_committed=self.last_committed,
            batch_time_ms=entry.timestamp_ms if entry is not None else None,
            went_back=True,
            checkpoint=shown,
        )

    def _result(
        self, found: WatchPoll, new: tuple[int, ...], shown: Checkpoint | None, problem: str = ""
    ) -> FollowPoll:
        ckpt = self.watcher.ckpt
        assert ckpt is not None
        last = self.last_committed
        entry = ckpt.offsets.get(last) if last is not None else None
        stores = [s for b in found.batches if not b.gone for s in b.stores]
        added = [s.zombies_new for s in stores if s.zombies_new is not None]
        final = [s.zombies for s in found.batches[-1].stores] if found.batches else []
        return FollowPoll(
            new_batches=new,
            last_committed=last,
            batch_time_ms=entry.timestamp_ms if entry is not None else None,
            restarted=bool(found.restarted),
            checkpoint=shown,
            problem=problem,
            zombies_new=sum(added) if added else None,
            zombies=sum(z for z in final if z is not None) if any(z is not None for z in final) else None,
            gone=tuple(b.batch_id for b in found.batches if b.gone),
            waiting=len(found.waiting),
            stopped=found.stopped,
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
        text = f"{head}: {latest}; {n} new batch{'es' if n != 1 else ''}"
    else:
        text = f"{head}: {latest}"
    if poll.zombies_new:
        text += f"; {poll.zombies_new:+d} zombie key{'s' if abs(poll.zombies_new) != 1 else ''}"
        if poll.zombies is not None:
            text += f" ({poll.zombies} in all)"
    if poll.gone:
        gone = ", ".join(str(b) for b in poll.gone)
        text += f"; batch{'es' if len(poll.gone) != 1 else ''} {gone} cleaned up before read"
    if poll.restarted:
        text += "; the query restarted"
    if poll.waiting:
        text += f"; waiting for {poll.waiting} file{'s' if poll.waiting != 1 else ''} not readable yet"
    if poll.new_batches or poll.restarted:
        return text
    quiet_s = (now_ms - (log.last_new_ms or now_ms)) / 1000
    if quiet_s >= QUIET_POLLS * log.interval_s or poll.stopped:
        return f"{text}; no new batch for {_seconds(quiet_s)} — query stopped?"
    return f"{text}; no new batch"


def _seconds(s: float) -> str:
    """``5 s``, ``90 s``, ``12 min``, ``3.5 h``."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"

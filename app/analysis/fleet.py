"""Every checkpoint below a folder or prefix at once (``statelens fleet``, ``statelens.fleet()``): one row
per checkpoint with its first verdicts, worst first.

A row's verdicts are :func:`app.analysis.summary.iter_first_look`'s for that checkpoint, the verdicts
``statelens summary --latest`` prints (same backends: ``auto``, so a store only Spark reads is skipped,
never read by a JVM here), never a fleet-only path. Beside them the row carries what a fleet table
shows: the query id, the last committed batch and its time, stores, rows and key + value bytes at the
latest versions, zombies (keys whose timeout fired and are still in the state, counted at each
partition's latest version as ``statelens expired`` does), the restart verdict and the files that could
not be read. A checkpoint that cannot be opened or read is a row with its error.

:func:`check_checkpoint` computes one row from ``(url, storage_options, options)`` alone, so it can run
anywhere the checkpoint can be read (a thread here; a Spark task later). :func:`iter_fleet` finds the
checkpoints (:mod:`readers.discover`) and checks them ``jobs`` at a time, no more state bytes in flight
than a memory budget allows, handing out rows as they are done.

Incremental: a row is kept in a cache folder under a key made of the checkpoint's listing (every file's
path, size and ETag or modification time), the options and :data:`FORMAT`; a checkpoint whose listing
did not change is not read again (its listing is all a second run costs), and one that changed is read
through the file mirror and the decoded-state cache like any other command. :func:`compare` tells what
changed against a previous run's JSON (``--since``): new checkpoints, new leaks, new stalls, verdicts
that got worse.

Qt-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from statelens.app.analysis.fleet_row import (
    DAY_MS,
    DEFAULT_JOBS,
    DEFAULT_MEMORY_BYTES,
    EXIT_ERROR,
    FORMAT,
    FleetOptions,
    FleetRow,
    MemoryBudget,
    RowCache,
    add_trend,
    check_checkpoint,
    check_row,
    error_row,
    severity_rank,
    worst_first,
)
from statelens.app.analysis.fleet_spark import iter_spark_rows
from statelens.app.analysis.summary import SEVERITIES, Verdict
from statelens.readers.discover import DEFAULT_MAX_DEPTH, Discovery, FoundCheckpoint, iter_discover
from statelens.readers.errors import UsageError, redact
from statelens.readers.model import Progress

__all__ = [
    "DAY_MS",
    "DEFAULT_JOBS",
    "DEFAULT_MEMORY_BYTES",
    "FORMAT",
    "FleetOptions",
    "FleetResult",
    "FleetRow",
    "MemoryBudget",
    "RowCache",
    "add_trend",
    "check_checkpoint",
    "compare",
    "fleet",
    "iter_fleet",
    "worst_first",
]


# -- the fleet -----------------------------------------------------------------------------------------
@dataclass
class FleetResult:
    """Every row, worst first, and what the run cost."""

    root: str
    rows: list[FleetRow]
    scanned_ms: int
    discovery: Discovery = field(default_factory=Discovery)
    #: rows reused from the cache of rows (their checkpoint's files had not changed)
    cached: int = 0
    #: paths of a previous run (``--since``) no longer found
    gone: list[str] = field(default_factory=list)
    since_ms: int | None = None

    @property
    def exit_code(self) -> int:
        """``summary``'s exit code for the worst checkpoint (2 when none was found)."""
        if not self.rows:
            return EXIT_ERROR
        return max(r.exit_code for r in self.rows)

    def counts(self) -> dict[str, int]:
        """Checkpoints per worst severity, every severity present."""
        return {s: sum(1 for r in self.rows if r.severity == s) for s in SEVERITIES}

    def to_json(self) -> dict[str, Any]:
        """``statelens fleet --json``."""
        return {
            "root": self.root,
            "format": FORMAT,
            "scanned_ms": self.scanned_ms,
            "since_ms": self.since_ms,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "listings": self.discovery.listings,
            "cached": self.cached,
            "gone": list(self.gone),
            "checkpoints": [r.to_json(self.scanned_ms) for r in self.rows],
        }


def iter_fleet(
    root: str,
    storage_options: dict[str, Any] | None = None,
    *,
    options: FleetOptions | None = None,
    jobs: int = DEFAULT_JOBS,
    max_depth: int = DEFAULT_MAX_DEPTH,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    cancelled: Callable[[], bool] | None = None,
    on_row: Callable[[FleetRow], None] | None = None,
    stats: Discovery | None = None,
    spark: Any = None,
) -> Iterator[Progress | FleetRow]:
    """Find the checkpoints below ``root`` and check them ``jobs`` at a time: a :class:`Progress` record
    as each is found or done, each :class:`FleetRow` as it is done (in the order they finish), then
    the :class:`FleetResult` is what :func:`fleet` returns.

    Parameters
    ----------
    root : str
        Local folder or fsspec URL.
    storage_options : dict, optional
    options : FleetOptions, optional
    jobs : int
        Checkpoints read at once (threads: reads are I/O, the decoders release the GIL in numpy).
    max_depth : int
        Folder levels searched below the root (:func:`readers.discover.iter_discover`).
    memory_bytes : int
        Estimated decoded-state bytes in flight at once (:class:`MemoryBudget`).
    cancelled : callable, optional
    on_row : callable, optional
        Called with each row as it is done (the app fills its table from it).
    stats : Discovery, optional
        Counts the listings and reads the search made.
    spark : pyspark.sql.SparkSession, optional
        Compute the rows in Spark tasks (:mod:`app.analysis.fleet_spark`) instead of threads here:
        the search runs here first, then every checkpoint found goes to Spark (``jobs`` and
        ``memory_bytes`` are then Spark's business).

    Yields
    ------
    Progress or FleetRow
    """
    options = options or FleetOptions()
    if spark is not None:
        yield from _iter_spark_fleet(
            root, storage_options, options, max_depth, cancelled, on_row, stats, spark
        )
        return
    cache = RowCache() if options.cache else None
    budget = MemoryBudget(memory_bytes)
    found = 0
    done = 0
    stats = stats if stats is not None else Discovery()
    discovering = True
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="statelens-fleet") as pool:
        futures: dict[Future[FleetRow], FoundCheckpoint] = {}

        def finished(block: bool) -> Iterator[Progress | FleetRow]:
            nonlocal done
            if not futures:
                return
            ready, _ = wait(list(futures), timeout=None if block else 0, return_when=FIRST_COMPLETED)
            for fut in ready:
                f = futures.pop(fut)
                row = fut.result()
                done += 1
                if on_row is not None:
                    on_row(row)
                yield row
                yield Progress(done, found, f"{done}/{found}{'+' if discovering else ''} {f.display}")

        try:
            for f in iter_discover(
                root, storage_options, max_depth=max_depth, cancelled=cancelled, stats=stats
            ):
                found += 1
                if f.error is not None:
                    row = error_row(f.path, f.display, f.error)
                    done += 1
                    if on_row is not None:
                        on_row(row)
                    yield row
                    continue
                futures[
                    pool.submit(
                        check_row,
                        f.url,
                        storage_options,
                        options,
                        path=f.path,
                        display=f.display,
                        cache=cache,
                        budget=budget,
                        cancelled=cancelled,
                        entries=f.entries,
                    )
                ] = f
                yield Progress(done, found, f"found {f.display}")
                yield from finished(block=False)
            discovering = False
            while futures:
                yield from finished(block=True)
        finally:
            for fut in futures:
                fut.cancel()


def _iter_spark_fleet(
    root: str,
    storage_options: dict[str, Any] | None,
    options: FleetOptions,
    max_depth: int,
    cancelled: Callable[[], bool] | None,
    on_row: Callable[[FleetRow], None] | None,
    stats: Discovery | None,
    spark: Any,
) -> Iterator[Progress | FleetRow]:
    found: list[FoundCheckpoint] = []
    done = 0
    for f in iter_discover(root, storage_options, max_depth=max_depth, cancelled=cancelled, stats=stats):
        if f.error is not None:
            row = error_row(f.path, f.display, f.error)
            done += 1
            if on_row is not None:
                on_row(row)
            yield row
        else:
            found.append(replace(f, entries=None))  # the tasks list their own: the driver keeps paths only
        yield Progress(done, done + len(found), f"found {f.display}")
    total = done + len(found)
    for row in iter_spark_rows(spark, found, storage_options, options, cancelled):
        done += 1
        if on_row is not None:
            on_row(row)
        yield row
        yield Progress(done, total, f"{done}/{total} {row.location}")


def fleet(
    root: str,
    storage_options: dict[str, Any] | None = None,
    *,
    options: FleetOptions | None = None,
    jobs: int = DEFAULT_JOBS,
    max_depth: int = DEFAULT_MAX_DEPTH,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    cancelled: Callable[[], bool] | None = None,
    progress: Callable[[Progress], None] | None = None,
    on_row: Callable[[FleetRow], None] | None = None,
    spark: Any = None,
) -> FleetResult:
    """Run :func:`iter_fleet` to its end: every row, worst first.

    Parameters
    ----------
    root, storage_options, options, jobs, max_depth, memory_bytes, cancelled, on_row, spark
        As :func:`iter_fleet`.
    progress : callable, optional
        Called with every progress record.

    Returns
    -------
    FleetResult

    Raises
    ------
    NotACheckpointError, StorageError
        When the root itself cannot be listed.
    """
    started = int(time.time() * 1000)
    rows: list[FleetRow] = []
    stats = Discovery()
    gen = iter_fleet(
        root,
        storage_options,
        options=options,
        jobs=jobs,
        max_depth=max_depth,
        memory_bytes=memory_bytes,
        cancelled=cancelled,
        on_row=on_row,
        stats=stats,
        spark=spark,
    )
    for item in gen:
        if isinstance(item, FleetRow):
            rows.append(item)
        elif progress is not None:
            progress(item)
    return FleetResult(
        redact(root), worst_first(rows), started, stats, cached=sum(1 for r in rows if r.cached)
    )


# -- what changed since a previous run ----------------------------------------------------------------
def _worst_by_check(verdicts: Sequence[Verdict]) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    for v in verdicts:
        if v.check not in out or severity_rank(v.severity) < severity_rank(out[v.check].severity):
            out[v.check] = v
    return out


def compare(result: FleetResult, previous: dict[str, Any]) -> None:
    """Tell each row what changed since ``previous`` (a ``statelens fleet --json`` document): sets
    each row's ``changes`` and ``rows_change``, and the result's ``gone`` and ``since_ms``.

    Changes named: a new checkpoint; one that could be read and no longer can (or the reverse); no batch
    committed since the previous run (a stall); the first batch committed; zombies where there were
    none (a new leak) or more of them; a check whose worst verdict got worse, or a new warning or error.

    Parameters
    ----------
    result : FleetResult
    previous : dict
        The previous run's JSON.

    Raises
    ------
    UsageError
        When ``previous`` is not a fleet JSON document.
    """
    if not isinstance(previous, dict) or not isinstance(previous.get("checkpoints"), list):
        raise UsageError("not the JSON of 'statelens fleet --json' (no 'checkpoints' list)")
    before = {}
    for obj in previous["checkpoints"]:
        try:
            before[obj["path"]] = FleetRow.from_json(obj)
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"a checkpoint of the previous run cannot be read: {err!r}") from None
    result.since_ms = previous.get("scanned_ms")
    now = {r.path for r in result.rows}
    result.gone = sorted(p for p in before if p not in now)
    for row in result.rows:
        old = before.get(row.path)
        if old is None:
            row.changes.append("new checkpoint")
            continue
        if row.error is not None:
            if old.error is None:
                row.changes.append(f"cannot be read any more: {row.error.get('message')}")
            continue
        if old.error is not None:
            row.changes.append("readable again")
        if row.rows is not None and old.rows is not None:
            row.rows_change = row.rows - old.rows
        if row.last_batch is not None and row.last_batch == old.last_batch:
            row.changes.append(
                f"stalled: no batch committed since the previous run (last batch {row.last_batch})"
            )
        elif row.last_batch is not None and old.last_batch is None:
            row.changes.append(f"first batch committed ({row.last_batch})")
        if row.zombies:
            if not old.zombies:
                row.changes.append(f"new leak: {row.zombies:,} zombie keys (none before)")
            elif row.zombies > old.zombies:
                row.changes.append(f"more zombie keys: {old.zombies:,} -> {row.zombies:,}")
        was = _worst_by_check(old.verdicts)
        for check, v in _worst_by_check(row.verdicts).items():
            prior = was.get(check)
            if prior is None:
                if v.severity in ("error", "warning"):
                    row.changes.append(f"{check}: new {v.severity}: {v.text}")
            elif severity_rank(v.severity) < severity_rank(prior.severity):
                row.changes.append(f"{check}: {prior.severity} -> {v.severity}: {v.text}")

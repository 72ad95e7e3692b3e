"""One checkpoint's row of a fleet (:mod:`app.analysis.fleet`): its first verdicts and the counts a fleet
table shows, computed from ``(url, storage_options, options)`` alone by :func:`check_checkpoint`, so it
runs wherever the checkpoint can be read (a thread of ``statelens fleet``, or a Spark task of
:mod:`app.analysis.fleet_spark`); the cache of rows that makes a second run cost its listings; the memory
budget the threads share.

A row's verdicts are :func:`app.analysis.summary.iter_first_look`'s for that checkpoint, with the full
summary's expired verdicts beside them (see :mod:`app.analysis.fleet`).

Qt-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.growth import footprint
from statelens.app.analysis.summary import SEVERITIES, Verdict, expired_verdicts, iter_first_look
from statelens.readers.backends import BackendChooser
from statelens.readers.cache import CACHE_ENV, default_cache_dir
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import ReadCancelledError, StatelensError
from statelens.readers.fs import CheckpointFS
from statelens.readers.lru import LRUFolder
from statelens.readers.model import FileEntry
from statelens.readers.restart import RestartConf
from statelens.readers.textfmt import format_duration_ms

__all__ = [
    "DAY_MS",
    "DEFAULT_JOBS",
    "DEFAULT_MEMORY_BYTES",
    "EXIT_ERROR",
    "FORMAT",
    "FleetOptions",
    "FleetRow",
    "MemoryBudget",
    "RowCache",
    "add_trend",
    "check_checkpoint",
    "check_row",
    "error_row",
    "severity_rank",
    "worst_first",
]

#: Bump when a row's content or the verdicts' code changes: cached rows are then never found.
FORMAT = 2
#: Checkpoints checked at once.
DEFAULT_JOBS = 4
#: Estimated bytes of decoded state in flight at once (see :class:`MemoryBudget`).
DEFAULT_MEMORY_BYTES = 2 << 30
#: Decoded state held while a partition is read, per byte of its state files (compressed, and the
#: numpy arrays of a partition's records beside the bytes): the estimate a checkpoint weighs.
EXPANSION = 4
#: Bytes the cache of rows may hold.
ROW_CACHE_BYTES = 64 << 20
#: Milliseconds in a day: trends are given per day.
DAY_MS = 86_400_000
#: Exit codes as ``statelens summary``'s: 0 fine, 1 a finding or damage, 2 could not be read.
EXIT_ERROR = 2


@dataclass(frozen=True)
class FleetOptions:
    """What a row is computed with (plain values: a row can be computed in another process).

    Attributes
    ----------
    spark_version : str, optional
        The Spark that will restart the queries (``--spark-version``), for the restart verdict.
    conf : tuple of (str, str)
        Spark confs of the restart (``--conf``).
    zombies : bool
        Count zombies at each partition's latest version (reads those versions' keys a second time).
    mirror : bool
        Keep remote files read in the local mirror (``--no-cache``: False).
    cache : bool
        Reuse and keep rows of checkpoints whose listing did not change (``--no-cache``: False).
    """

    spark_version: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    zombies: bool = True
    mirror: bool = True
    cache: bool = True

    def restart(self) -> RestartConf:
        """The restart's Spark, as ``summary --spark-version --conf`` parses it."""
        return RestartConf.parse(self.spark_version, dict(self.conf))

    def key(self) -> dict[str, Any]:
        """What a cached row depends on."""
        return {"spark_version": self.spark_version, "conf": sorted(self.conf), "zombies": self.zombies}


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


@dataclass
class FleetRow:
    """One checkpoint of the fleet.

    Attributes
    ----------
    path : str
        Relative to the root ("" when the root is the checkpoint).
    location : str
        Where it is (without credentials).
    verdicts : list of Verdict
        ``summary --latest``'s verdicts, worst first (empty when ``error``).
    error : dict or None
        The error that kept the checkpoint from being read (``StatelensError.to_json()``).
    query_id : str or None
    last_batch : int or None
        The last committed batch.
    last_batch_ms : int or None
        Its timestamp (the offsets log's ``batchTimestampMs``).
    uncommitted : list of int
        Batches planned but not committed.
    stores : int
        State stores (of every operator).
    rows, state_bytes : int or None
        Rows and key + value bytes at each partition's latest version, every store (Spark's own
        bookkeeping stores included); None when no store could be counted.
    state_file_bytes : int
        Bytes of state files listed (the checkpoint's ``state/`` folder).
    zombies : int or None
        Zombie keys at the latest versions (None: not counted, or no store checkable).
    unreadable : int
        Files that could not be read or decoded (the ``unreadable`` verdict's count).
    problems : list of dict
        Every problem met, as ``summary --json`` lists them.
    exit_code : int
        ``summary --latest``'s exit code for this checkpoint (2 for a row with ``error``).
    store_rows : list of dict
        Each store counted: ``operator_id``, ``store_name``, ``version`` (the latest), ``rows``,
        ``state_bytes``, and its trend since the previous run that read this checkpoint (``rows_before``,
        ``state_bytes_before``, ``version_before``, ``rows_change``, ``state_bytes_change``,
        ``rows_per_day``; None without a previous run or a store new since).
    trend : dict or None
        Every store's change since the previous run that read this checkpoint (the same query id):
        ``since_ms`` (that run's ``checked_ms``), ``since_batch``, ``batches`` committed since,
        ``rows_change``, ``state_bytes_change``, ``rows_per_day``, ``state_bytes_per_day`` (the change
        over the time between the two reads, per day). None without such a run.
    checked_ms : int
        When the row was computed (epoch ms).
    cached : bool
        True when the row was reused from an earlier run (the checkpoint's listing had not changed).
    changes : list of str
        What changed since a previous run (:func:`compare`).
    rows_change : int or None
        Rows against the previous run.
    """

    path: str
    location: str
    verdicts: list[Verdict] = field(default_factory=list)
    error: dict[str, Any] | None = None
    query_id: str | None = None
    last_batch: int | None = None
    last_batch_ms: int | None = None
    uncommitted: list[int] = field(default_factory=list)
    stores: int = 0
    rows: int | None = None
    state_bytes: int | None = None
    state_file_bytes: int = 0
    zombies: int | None = None
    unreadable: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int = 0
    checked_ms: int = 0
    cached: bool = False
    changes: list[str] = field(default_factory=list)
    rows_change: int | None = None
    store_rows: list[dict[str, Any]] = field(default_factory=list)
    trend: dict[str, Any] | None = None

    @property
    def severity(self) -> str:
        """The worst verdict's severity (``error`` for a checkpoint that could not be read)."""
        if self.error is not None:
            return "error"
        if not self.verdicts:
            return "ok"
        return min((v.severity for v in self.verdicts), key=severity_rank)

    def verdict(self, check: str) -> Verdict | None:
        """The first verdict of ``check`` (``restart``, ``commit``, ``growth``...)."""
        return next((v for v in self.verdicts if v.check == check), None)

    @property
    def restart(self) -> str:
        """The restart verdict's severity ("" when the checkpoint could not be read)."""
        v = self.verdict("restart")
        return v.severity if v is not None else ""

    def trend_text(self) -> str:
        """The rows' trend as the table shows it (``+1,200/day``), "" without a previous run."""
        if self.trend is None or self.trend.get("rows_per_day") is None:
            return ""
        return f"{self.trend['rows_per_day']:+,.0f}/day"

    def headline(self) -> str:
        """The worst verdict's text, or the error."""
        if self.error is not None:
            return f"cannot read: {self.error.get('message')}"
        return self.verdicts[0].text if self.verdicts else ""

    def age_ms(self, now_ms: int) -> int | None:
        """Time since the last committed batch's timestamp."""
        return None if self.last_batch_ms is None else max(0, now_ms - self.last_batch_ms)

    def texts(self, now_ms: int) -> dict[str, Any]:
        """The row as a fleet table shows it, by column header (``statelens fleet``'s table and the
        app's fleet view pick their columns from it; "" where there is nothing to show)."""
        age = self.age_ms(now_ms)
        return {
            "checkpoint": self.path or self.location,
            "query id": (self.query_id or "")[:8],
            "last batch": "" if self.last_batch is None else self.last_batch,
            "age": "" if age is None else format_duration_ms(age, "compact"),
            "stores": self.stores if self.error is None else "",
            "rows": "" if self.rows is None else f"{self.rows:,}",
            "bytes": "" if self.state_bytes is None else f"{self.state_bytes:,}",
            "rows since": "" if self.rows_change is None else f"{self.rows_change:+,}",
            "trend": self.trend_text(),
            "zombies": "" if self.zombies is None else f"{self.zombies:,}",
            "restart": self.restart,
            "unreadable": self.unreadable or "",
            "worst finding": self.headline(),
        }

    def to_json(self, now_ms: int | None = None) -> dict[str, Any]:
        """The row as ``statelens fleet --json`` prints it (``age_ms`` from ``now_ms``)."""
        restart = self.verdict("restart")
        return {
            "path": self.path,
            "location": self.location,
            "query_id": self.query_id,
            "severity": self.severity,
            "exit_code": self.exit_code,
            "error": self.error,
            "last_batch": self.last_batch,
            "last_batch_ms": self.last_batch_ms,
            "age_ms": self.age_ms(now_ms) if now_ms is not None else None,
            "uncommitted": list(self.uncommitted),
            "stores": self.stores,
            "rows": self.rows,
            "state_bytes": self.state_bytes,
            "state_file_bytes": self.state_file_bytes,
            "rows_change": self.rows_change,
            "trend": None if self.trend is None else dict(self.trend),
            "store_rows": [dict(s) for s in self.store_rows],
            "zombies": self.zombies,
            "restart": None if restart is None else {"severity": restart.severity, "text": restart.text},
            "unreadable": self.unreadable,
            "verdicts": [v.to_json() for v in self.verdicts],
            "problems": list(self.problems),
            "checked_ms": self.checked_ms,
            "cached": self.cached,
            "changes": list(self.changes),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FleetRow:
        """A row from :meth:`to_json` (a cached row, or a previous run's)."""
        verdicts = [
            Verdict(
                v["check"],
                v["severity"],
                v["text"],
                v["value"],
                v["view"],
                v.get("operator_id"),
                v.get("store_name"),
                v.get("batch_id"),
                v.get("partition"),
                tuple(v.get("files") or ()),
            )
            for v in obj.get("verdicts", [])
        ]
        return cls(
            path=obj["path"],
            location=obj["location"],
            verdicts=verdicts,
            error=obj.get("error"),
            query_id=obj.get("query_id"),
            last_batch=obj.get("last_batch"),
            last_batch_ms=obj.get("last_batch_ms"),
            uncommitted=list(obj.get("uncommitted") or []),
            stores=int(obj.get("stores") or 0),
            rows=obj.get("rows"),
            state_bytes=obj.get("state_bytes"),
            state_file_bytes=int(obj.get("state_file_bytes") or 0),
            zombies=obj.get("zombies"),
            unreadable=int(obj.get("unreadable") or 0),
            problems=list(obj.get("problems") or []),
            exit_code=int(obj.get("exit_code") or 0),
            checked_ms=int(obj.get("checked_ms") or 0),
            cached=bool(obj.get("cached")),
            changes=list(obj.get("changes") or []),
            rows_change=obj.get("rows_change"),
            store_rows=[dict(s) for s in obj.get("store_rows") or []],
            trend=dict(obj["trend"]) if obj.get("trend") else None,
        )


def _sort_key(row: FleetRow) -> tuple[Any, ...]:
    counts = {s: sum(1 for v in row.verdicts if v.severity == s) for s in ("error", "warning")}
    return (
        row.error is None,  # a checkpoint that could not be read first
        severity_rank(row.severity),
        -counts["error"],
        -counts["warning"],
        -(row.zombies or 0),
        -(row.state_bytes or 0),
        row.path,
    )


def worst_first(rows: Sequence[FleetRow]) -> list[FleetRow]:
    """Rows that could not be read, then by worst severity, errors and warnings, zombies, bytes, path."""
    return sorted(rows, key=_sort_key)


# -- the memory budget ---------------------------------------------------------------------------------
class MemoryBudget:
    """Estimated bytes of decoded state in flight, across the checkpoints read at once.

    A checkpoint weighs :data:`EXPANSION` times the bytes of its live state files (those a version still
    retained loads, from the listing: nothing read). It starts when its weight fits beside the others in
    flight; one heavier than the whole budget starts alone.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max(1, max_bytes)
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, weight: int, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
        """Hold ``weight`` bytes (capped at the budget) while the block runs."""
        n = min(max(0, weight), self.max_bytes)
        with self._cond:
            while self.used and self.used + n > self.max_bytes:
                if cancelled is not None and cancelled():
                    raise ReadCancelledError("cancelled while waiting for memory")
                self._cond.wait(0.1)
            self.used += n
            self.peak = max(self.peak, self.used)
        try:
            yield
        finally:
            with self._cond:
                self.used -= n
                self._cond.notify_all()


# -- the cache of rows ---------------------------------------------------------------------------------
def _row_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return default_cache_dir() / "fleet"
    return default_cache_dir().parent / "fleet"


class RowCache:
    """Rows of checkpoints by a key of their listing (see the module docstring); a cache never fails a
    run: an entry that cannot be read or written is ignored."""

    def __init__(self, root: Path | None = None, max_bytes: int = ROW_CACHE_BYTES):
        self.folder = LRUFolder(root or _row_cache_dir(), max_bytes, ".json", "statelens fleet cache")
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(fs: CheckpointFS, options: FleetOptions) -> str:
        """A hash of the location, every file's path, size and version tag, the options and :data:`FORMAT`."""
        h = hashlib.sha256()
        h.update(json.dumps([FORMAT, fs.display_root, options.key()], sort_keys=True).encode())
        for e in fs.walk_files(""):
            h.update(f"\n{e.path}\t{e.size_bytes}\t{e.version_tag}".encode())
        return h.hexdigest()

    @staticmethod
    def latest_key(fs: CheckpointFS, options: FleetOptions) -> str:
        """The key of the latest row computed for this location and options, whatever its files (the
        trend's previous row)."""
        h = hashlib.sha256()
        h.update(json.dumps(["latest", FORMAT, fs.display_root, options.key()], sort_keys=True).encode())
        return h.hexdigest()

    def get(self, key: str) -> FleetRow | None:
        path = self.folder.path(key)
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            row = FleetRow.from_json(obj)
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.folder.touch(path)
        self.hits += 1
        return row

    def put(self, key: str, row: FleetRow) -> None:
        text = json.dumps(row.to_json())

        def fill(tmp: str) -> None:
            Path(tmp).write_text(text, encoding="utf-8")

        self.folder.write(key, fill)


# -- one checkpoint ------------------------------------------------------------------------------------
def error_row(path: str, location: str, err: BaseException) -> FleetRow:
    if isinstance(err, StatelensError):
        error = err.to_json()
    else:  # not a typed error: still one row, the run goes on
        error = {"error": type(err).__name__, "path": None, "offset": None, "message": str(err)}
    return FleetRow(path, location, error=error, exit_code=EXIT_ERROR, checked_ms=int(time.time() * 1000))


def _live_state_bytes(ckpt: Any) -> int:
    fp = footprint(ckpt)
    return max(0, fp.areas.get("state", [0, 0])[1] - fp.old_state_bytes)


def _row(ckpt: Any, path: str, options: FleetOptions, cancelled: Callable[[], bool] | None) -> FleetRow:
    """The row of an opened checkpoint: ``summary --latest``'s verdicts and the counts beside them."""
    chooser = BackendChooser(ckpt, "auto")  # summary's default: a store only Spark reads is skipped there
    try:
        summary = run_to_end(
            iter_first_look(ckpt, backends=chooser, restart=options.restart(), cancelled=cancelled)
        )
    finally:
        chooser.close()
    growth = summary.growth
    rows: int | None = None
    sbytes: int | None = None
    store_rows: list[dict[str, Any]] = []
    if growth is not None:
        counted = [g for g in growth.stores if not g.skipped and g.versions]
        if counted:
            rows = sum(g.total_rows()[-1] for g in counted)
            sbytes = sum(g.total_state_bytes()[-1] for g in counted)
        store_rows = [
            {
                "operator_id": g.operator_id,
                "store_name": g.store_name,
                "version": g.versions[-1],
                "rows": g.total_rows()[-1],
                "state_bytes": g.total_state_bytes()[-1],
            }
            for g in counted
        ]
    zombies: int | None = None
    verdicts = list(summary.verdicts)
    exit_code = summary.exit_code
    if options.zombies:
        native = BackendChooser(ckpt, "native")  # never a JVM for a count beside the verdicts
        earlier: Counter[tuple[int, str, int, str]] = Counter()
        try:
            expired = run_to_end(
                iter_expired(
                    ckpt, cancelled=cancelled, max_examples=0, backends=native, version_counts=earlier
                )
            )
        finally:
            native.close()
        if any(o.check != "skipped" for o in expired.operators):
            zombies = expired.counts()["zombie"]
        # the full summary's expired verdicts: a leaking query ranks as ``summary`` ranks it
        found = expired_verdicts(ckpt, expired, earlier)
        verdicts = sorted([*verdicts, *found], key=lambda v: severity_rank(v.severity))
        if any(v.severity in ("error", "warning") for v in found):
            exit_code = 1
    unreadable = next((v for v in summary.verdicts if v.check == "unreadable"), None)
    last = ckpt.last_committed_batch_id
    batch = next((b for b in ckpt.batches if b.batch_id == last), None) if last is not None else None
    state_files = sum(e.size_bytes for e in ckpt.fs.walk_files("state"))
    return FleetRow(
        path=path,
        location=str(ckpt.location),
        verdicts=verdicts,
        query_id=ckpt.query_id,
        last_batch=last,
        last_batch_ms=batch.timestamp_ms if batch is not None else None,
        uncommitted=list(ckpt.uncommitted_batches()),
        stores=sum(len(op.stores) for op in ckpt.operators),
        rows=rows,
        state_bytes=sbytes,
        state_file_bytes=state_files,
        zombies=zombies,
        unreadable=int(unreadable.value or 0) if unreadable is not None else 0,
        problems=[p.to_json() for p in summary.problems],
        exit_code=exit_code,
        checked_ms=int(time.time() * 1000),
        store_rows=store_rows,
    )


def _per_day(change: int, elapsed_ms: int) -> float | None:
    return change * DAY_MS / elapsed_ms if elapsed_ms > 0 else None


def add_trend(row: FleetRow, before: FleetRow | None) -> None:
    """Set ``row``'s trend (and each store's) from ``before``, the row the previous run that read this
    checkpoint computed: nothing when there is none, either could not be read, or the query id changed
    (another query's checkpoint at the same place)."""
    if before is None or row.error is not None or before.error is not None:
        return
    if row.query_id != before.query_id or row.rows is None or before.rows is None:
        return
    elapsed = row.checked_ms - before.checked_ms
    old = {(s["operator_id"], s["store_name"]): s for s in before.store_rows}
    for s in row.store_rows:
        prev = old.get((s["operator_id"], s["store_name"]))
        if prev is None:
            continue
        s["rows_before"] = prev["rows"]
        s["state_bytes_before"] = prev["state_bytes"]
        s["version_before"] = prev["version"]
        s["rows_change"] = s["rows"] - prev["rows"]
        s["state_bytes_change"] = s["state_bytes"] - prev["state_bytes"]
        s["rows_per_day"] = _per_day(s["rows_change"], elapsed)
    rows_change = row.rows - before.rows
    bytes_change = (row.state_bytes or 0) - (before.state_bytes or 0)
    batches = None
    if row.last_batch is not None:
        batches = row.last_batch - (before.last_batch if before.last_batch is not None else -1)
    row.trend = {
        "since_ms": before.checked_ms,
        "since_batch": before.last_batch,
        "batches": batches,
        "rows_change": rows_change,
        "state_bytes_change": bytes_change,
        "rows_per_day": _per_day(rows_change, elapsed),
        "state_bytes_per_day": _per_day(bytes_change, elapsed),
    }


def check_row(
    url: str,
    storage_options: dict[str, Any] | None,
    options: FleetOptions,
    *,
    path: str = "",
    display: str | None = None,
    cache: RowCache | None = None,
    budget: MemoryBudget | None = None,
    cancelled: Callable[[], bool] | None = None,
    entries: Sequence[FileEntry] | None = None,
) -> FleetRow:
    location = display or url
    try:
        fs = CheckpointFS(url, storage_options, cancelled=cancelled, mirror=options.mirror, entries=entries)
        key = RowCache.key(fs, options) if cache is not None else ""
        if cache is not None:
            kept = cache.get(key)
            if kept is not None:
                kept.path, kept.location, kept.cached = path, fs.display_root, True
                return kept
        ckpt = open_checkpoint(url, storage_options, cancelled=cancelled, mirror=options.mirror, fs=fs)
        if budget is None:
            row = _row(ckpt, path, options, cancelled)
        else:
            with budget.hold(EXPANSION * _live_state_bytes(ckpt), cancelled):
                row = _row(ckpt, path, options, cancelled)
        row.location = fs.display_root
        if cache is not None:
            add_trend(row, cache.get(RowCache.latest_key(fs, options)))
    except ReadCancelledError:
        raise
    except Exception as err:  # one checkpoint that cannot be read is a row, never the end
        if not isinstance(err, StatelensError) and os.environ.get("STATELENS_RAISE") == "1":
            raise  # a bug, not a checkpoint's damage: shown whole when asked (the tests ask)
        return error_row(path, location, err)
    if cache is not None:
        cache.put(key, row)
        if row.error is None:
            cache.put(RowCache.latest_key(fs, options), row)
    return row


def check_checkpoint(url: str, storage_options: dict[str, Any] | None, options: FleetOptions) -> FleetRow:
    """One checkpoint's row, from its location alone (no state shared with other checkpoints; runs in
    a thread, a process or a Spark task next to the data).

    Parameters
    ----------
    url : str
        The checkpoint (local path or fsspec URL).
    storage_options : dict or None
        fsspec options.
    options : FleetOptions

    Returns
    -------
    FleetRow
        With ``error`` set when the checkpoint could not be opened or read; never raises for that.
    """
    return check_row(url, storage_options, options, cache=RowCache() if options.cache else None)

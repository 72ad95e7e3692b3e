"""State growth and skew per operator and store, and the checkpoint's on-disk footprint.

For every store partition, rows and key+value bytes of the state at each version (what an executor holds
in memory, give or take the JVM's overhead), and the bytes of the files written for that version
(``<v>.delta`` / ``<v>.snapshot``, ``docs/format.md`` §3; ``<v>.changelog`` / ``<v>.zip``, §4). Version
``v`` is the state after batch ``v-1`` (§1.2). A fold over a stats scan of each store
(:func:`readers.scan_sizes.iter_sizes`: counted from every version's records at once where the files
allow, else replayed version by version, which also reports a file that cannot be read); through an
engine (Spark), rows and file bytes from its change feed.

Footprint: every file under the checkpoint by area (state, offsets, commits, sources, metadata...),
small files, leftover temp files (§1.3), and the state files older than the newest snapshot each
partition's latest version needs (§3.4–§3.5): Spark keeps ``minBatchesToRetain`` versions on purpose,
but these bytes are not needed to read the latest state.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis._common import BatchClock, finite
from statelens.app.analysis.heavy import StoreTopKeys, StoreWeigher
from statelens.readers.backends import BackendChooser, native_backend
from statelens.readers.errors import BackendUnavailableError, FilesUnavailableError, StatelensError
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan
from statelens.readers.scan_sizes import iter_sizes, superseded_state_files

#: Files below this size count as small (object stores and HDFS pay per file, not per byte).
SMALL_FILE_BYTES = 64 * 1024
#: Versions the growth rate is fitted over (the most recent ones).
RATE_WINDOW = 10
TOP_PARTITIONS = 5


@dataclass
class StoreGrowth:
    """Rows and bytes of one store, per partition and version, with the derived numbers."""

    operator_id: int
    store_name: str
    kind: str
    partitions: list[int]
    versions: list[int]
    # partition -> version -> value
    rows: dict[int, dict[int, int]] = field(default_factory=dict)
    state_bytes: dict[int, dict[int, int]] = field(default_factory=dict)
    file_bytes: dict[int, dict[int, int]] = field(default_factory=dict)
    zombie_rows: int | None = None
    skipped: str = ""
    backend: str = "native"  # what read the rows, for the user ("spark": rows and file bytes from Spark)
    state_bytes_known: bool = True  # False when read as decoded rows: key + value bytes unknown
    top_keys: StoreTopKeys | None = None  # weighed on the walk's last version, when asked (``top_keys``)

    # -- totals ---------------------------------------------------------------------------------------
    def _total(self, table: dict[int, dict[int, int]], version: int) -> int:
        return sum(per.get(version, 0) for per in table.values())

    def total_rows(self) -> list[int]:
        return [self._total(self.rows, v) for v in self.versions]

    def total_state_bytes(self) -> list[int]:
        return [self._total(self.state_bytes, v) for v in self.versions]

    def total_file_bytes(self) -> list[int]:
        return [self._total(self.file_bytes, v) for v in self.versions]

    def partitions_at(self, version: int) -> int:
        return sum(1 for per in self.rows.values() if version in per)

    @property
    def latest_version(self) -> int | None:
        return self.versions[-1] if self.versions else None

    def latest_rows(self) -> dict[int, int]:
        """Rows per partition at each partition's latest version."""
        return {pid: per[max(per)] for pid, per in self.rows.items() if per}

    # -- derived --------------------------------------------------------------------------------------
    def rows_per_batch(self) -> float | None:
        """Least-squares slope of total rows over the last :data:`RATE_WINDOW` versions."""
        pairs = [
            (v, r)
            for v, r in zip(self.versions, self.total_rows(), strict=True)
            if self.partitions_at(v) == len(self.rows)
        ][-RATE_WINDOW:]
        if len(pairs) < 2:
            return None
        xs = [p[0] for p in pairs]
        ys = [p[1] for p in pairs]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None

    def skew(self) -> float | None:
        """Max over median of rows per partition at the latest version (1.0 = even)."""
        rows = list(self.latest_rows().values())
        if not rows:
            return None
        med = statistics.median(rows)
        if med == 0:
            return None if max(rows) == 0 else float("inf")
        return max(rows) / med

    def top_partitions(self, n: int = TOP_PARTITIONS) -> list[tuple[int, int]]:
        return sorted(self.latest_rows().items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def zombie_share(self) -> float | None:
        total = sum(self.latest_rows().values())
        if self.zombie_rows is None or not total:
            return None
        return self.zombie_rows / total

    def projection(self, target_rows: int, batch_interval_ms: float | None) -> dict[str, Any]:
        """When the store reaches ``target_rows`` at the current rate (batches and ms from the latest)."""
        rate = self.rows_per_batch()
        now = sum(self.latest_rows().values())
        out: dict[str, Any] = {"target_rows": target_rows, "rows_now": now, "rows_per_batch": rate}
        if now >= target_rows:
            out.update(batches=0, ms=0, reached=True)
        elif rate is None or rate <= 0:
            out.update(batches=None, ms=None, reached=False)
        else:
            batches = (target_rows - now) / rate
            out.update(
                batches=batches,
                ms=batches * batch_interval_ms if batch_interval_ms else None,
                reached=False,
            )
        return out

    def to_json(
        self, target_rows: int | None = None, batch_interval_ms: float | None = None
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "kind": self.kind,
            "skipped": self.skipped,
            "partitions": self.partitions,
            "versions": self.versions,
            "total_rows": self.total_rows(),
            "total_state_bytes": self.total_state_bytes(),
            "total_file_bytes": self.total_file_bytes(),
            "rows_per_batch": self.rows_per_batch(),
            "skew": finite(self.skew()),
            "top_partitions": [{"partition": p, "rows": r} for p, r in self.top_partitions()],
            "zombie_rows": self.zombie_rows,
            "zombie_share": self.zombie_share(),
            "backend": self.backend,
            "per_partition": [
                {
                    "partition": pid,
                    "version": v,
                    "rows": self.rows[pid][v],
                    "state_bytes": self.state_bytes.get(pid, {}).get(v),
                    "file_bytes": self.file_bytes[pid].get(v, 0),
                }
                for pid in sorted(self.rows)
                for v in sorted(self.rows[pid])
            ],
        }
        if target_rows is not None:
            doc["projection"] = self.projection(target_rows, batch_interval_ms)
        return doc


@dataclass
class Footprint:
    """Files and bytes of the whole checkpoint."""

    areas: dict[str, list[int]]  # area -> [files, bytes]
    small_files: int
    temp_files: list[str]
    old_state_files: int
    old_state_bytes: int

    @property
    def total_files(self) -> int:
        return sum(f for f, _ in self.areas.values())

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.areas.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "areas": {k: {"files": f, "bytes": b} for k, (f, b) in sorted(self.areas.items())},
            "total_files": self.total_files,
            "total_bytes": self.total_bytes,
            "small_files": self.small_files,
            "small_file_bytes_limit": SMALL_FILE_BYTES,
            "temp_files": self.temp_files,
            "old_state_files": self.old_state_files,
            "old_state_bytes": self.old_state_bytes,
        }


@dataclass
class GrowthResult:
    stores: list[StoreGrowth]
    footprint: Footprint
    median_interval_ms: float | None
    problems: list[StatelensError]

    def to_json(self, target_rows: int | None = None) -> dict[str, Any]:
        return {
            "stores": [s.to_json(target_rows, self.median_interval_ms) for s in self.stores],
            "footprint": self.footprint.to_json(),
            "median_interval_ms": self.median_interval_ms,
            "problems": [p.to_json() for p in self.problems],
        }


def _area(path: str) -> str:
    head = path.split("/", 1)[0]
    if head.startswith(".") and head.endswith(".crc"):  # Hadoop sidecar of a top-level file (§1.3)
        head = head[1:-4]
    if head in ("offsets", "commits", "sources", "state", "metadata"):
        return head
    return "other"


def footprint(ckpt: Any) -> Footprint:
    """On-disk footprint of the checkpoint (listing only, nothing read).

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    Footprint
    """
    areas: dict[str, list[int]] = {}
    small = 0
    temps: list[str] = []
    for e in ckpt.fs.walk_files(""):
        a = areas.setdefault(_area(e.path), [0, 0])
        a[0] += 1
        a[1] += e.size_bytes
        if e.size_bytes < SMALL_FILE_BYTES:
            small += 1
        if e.name.startswith(".") and e.name.endswith(".tmp"):  # a write Spark did not finish (§1.3)
            temps.append(e.path)
    old = superseded_state_files(ckpt)
    return Footprint(areas, small, temps, len(old), sum(f.size_bytes for f in old))


def _store_jobs(ckpt: Any, backends: BackendChooser | None) -> list[tuple[Any, Any, Any]]:
    """``(operator, store, backend)`` of every store, with the backend that reads it (native unless
    ``backends`` picks another)."""
    native = native_backend(ckpt, backends)
    return [
        (op, st, backends.for_store(op.operator_id, st.store_name) if backends is not None else native)
        for op in ckpt.operators
        for st in op.stores
    ]


def iter_growth(
    ckpt: Any,
    zombie_rows: dict[tuple[int, str], int] | None = None,
    cancelled: Callable[[], bool] | None = None,
    backends: BackendChooser | None = None,
    top_keys: int | None = None,
) -> Generator[Progress, None, GrowthResult]:
    """Rows and bytes of every HDFS store per partition and version, plus the footprint.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    zombie_rows : dict, optional
        ``(operator_id, store_name)`` to the number of zombie keys at the latest version (from
        :func:`app.analysis.expired.iter_expired`), for the zombie share; stores not in it (no
        timeouts to check) get no share.
    cancelled : callable, optional
        Polled between versions.
    backends : readers.backends.BackendChooser, optional
        Picks native or Spark per store (default native). Through Spark, rows per partition and
        version come from its change feed in one job (``SparkBackend.iter_stats``), file bytes from
        the listing; key + value bytes are not known (``state_bytes`` stays empty).
    top_keys : int, optional
        Also weigh the heaviest keys of each natively read store with a schema, this many per partition
        and per store (``StoreGrowth.top_keys``), from the last state the count reaches in each partition
        (the store's newest version; partitions whose newest version is older are left out, as in
        :func:`app.analysis.heavy.iter_top_keys`).

    Yields
    ------
    Progress

    Returns
    -------
    GrowthResult
    """
    problems: list[StatelensError] = []
    stores: list[StoreGrowth] = []
    jobs = _store_jobs(ckpt, backends)
    last_tick = time.monotonic()
    for n, (op, st, backend) in enumerate(jobs):
        yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name}")
        g = StoreGrowth(op.operator_id, st.store_name, op.kind.value, list(st.partitions), list(st.versions))
        stores.append(g)
        scan = StateScan(backend, op.operator_id, st.store_name, "stats", cancelled=cancelled)
        try:
            # The heaviest keys come from the count's last state of each partition: no second read.
            weigher = StoreWeigher(scan, top_keys) if top_keys and scan.schema is not None else None
            parts = iter_sizes(scan, live=weigher is not None)
        except FilesUnavailableError:  # rows decoded by an engine (Spark): no key + value bytes
            yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name}: read by {backend.name}")
            _growth_from_stats(backend, g, problems)
            weigher, parts = None, iter(())
        except BackendUnavailableError as err:  # e.g. RocksDB column families (transformWithState)
            g.skipped = err.message
            continue
        seen = 0  # the scan's problems passed on so far (in partition order, each before the weighing's)
        for part in parts:
            pid = part.partition_id
            g.rows[pid], g.state_bytes[pid], g.file_bytes[pid] = part.rows, part.state_bytes, part.file_bytes
            problems.extend(scan.problems[seen:])
            seen = len(scan.problems)
            if weigher is not None and part.live is not None and part.rows:
                try:
                    weigher.weigh(pid, max(part.rows), part.live)
                except StatelensError as err:
                    problems.append(err)
            if time.monotonic() - last_tick > 0.1:
                last_tick = time.monotonic()
                yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name} p{pid}")
        if weigher is not None:
            g.top_keys = weigher.result()
        g.versions = sorted({v for per in g.rows.values() for v in per})
        if zombie_rows is not None:
            g.zombie_rows = zombie_rows.get((op.operator_id, st.store_name))
    yield Progress(len(jobs), len(jobs), "footprint")
    fp = footprint(ckpt)
    intervals = []
    clock = BatchClock(ckpt)
    ids = clock.batches_with_timestamp()
    for a, b in zip(ids, ids[1:], strict=False):
        if b == a + 1:
            intervals.append(clock.timestamp_ms[b] - clock.timestamp_ms[a])
    median = statistics.median(intervals) if intervals else None
    return GrowthResult(stores, fp, median, problems)


def iter_latest_growth(
    ckpt: Any,
    cancelled: Callable[[], bool] | None = None,
    backends: BackendChooser | None = None,
) -> Generator[Progress, None, GrowthResult]:
    """Rows and key + value bytes of every store at each partition's latest version only, read from the
    files that version loads (the newest snapshot and the deltas after it, the zip and the changelogs
    after it): what a restart loads, not the history. The overview's first verdicts come from it while
    :func:`iter_growth` replays every version.

    Each partition is read whole through one :class:`readers.scan.StateScan` (``iter_live``: its records
    as stored, not decoded), so the numbers are those :func:`iter_growth` counts at the same versions;
    a file that cannot be read is in ``problems`` with its partition left out. A store whose rows only an
    engine reads (Spark), or that cannot be read natively, is ``skipped`` with the reason.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    cancelled : callable, optional
        Polled between partitions.
    backends : readers.backends.BackendChooser, optional
        Where each store is read (default native).

    Yields
    ------
    Progress

    Returns
    -------
    GrowthResult
        One version per store (the store's latest; ``rows`` holds each partition's latest version, as
        :meth:`StoreGrowth.latest_rows` reads it), the footprint (from the listing), no batch interval.
    """
    problems: list[StatelensError] = []
    stores: list[StoreGrowth] = []
    jobs = _store_jobs(ckpt, backends)
    last_tick = time.monotonic()
    for n, (op, st, backend) in enumerate(jobs):
        yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name}: latest version")
        g = StoreGrowth(op.operator_id, st.store_name, op.kind.value, list(st.partitions), [])
        stores.append(g)
        if not backend.capabilities.raw_records:
            g.skipped = f"read by {backend.name}: counted with every version"
            continue
        scan = StateScan(backend, op.operator_id, st.store_name, "rows", cancelled=cancelled)
        try:
            for pid, version, (_buf, kstart, klen, _vstart, vlen) in scan.iter_live():
                g.rows[pid] = {version: len(kstart)}
                g.state_bytes[pid] = {version: int(klen.sum()) + int(vlen.sum())}
                if time.monotonic() - last_tick > 0.1:
                    last_tick = time.monotonic()
                    yield Progress(n, len(jobs), f"operator {op.operator_id} {st.store_name} p{pid}")
        except BackendUnavailableError as err:  # a store the native readers cannot read
            g.skipped = err.message
            continue
        problems.extend(scan.problems)
        latest = [v for per in g.rows.values() for v in per]
        g.versions = [max(latest)] if latest else []
    yield Progress(len(jobs), len(jobs), "latest versions")
    return GrowthResult(stores, footprint(ckpt), None, problems)


def _growth_from_stats(backend: Any, g: StoreGrowth, problems: list[StatelensError]) -> None:
    """Fill ``g``'s rows and file bytes from the backend's per-version statistics (key + value bytes are
    not known): for a backend that reads decoded rows, not files; the caller sets ``g.versions``."""
    g.backend = backend.name
    g.state_bytes_known = False
    scan = StateScan(backend, g.operator_id, g.store_name, "stats")
    try:
        for s in scan.iter_stats():
            g.rows.setdefault(s.partition_id, {})[s.version] = s.rows
            g.file_bytes.setdefault(s.partition_id, {})[s.version] = s.bytes
    except StatelensError as err:  # the store as a whole (an engine that cannot be reached)
        problems.append(err)
        g.skipped = f"{backend.describe()} could not read this store: {err.message}"
    problems.extend(scan.problems)


#: The fields of each record, in order.
GROWTH_FIELDS = ("operator_id", "store_name", "version", "batch_id", "partition_id", "rows", "bytes")


def iter_growth_records(
    ckpt: Any, progress: Callable[[Any], None] | None = None, backends: Any = None
) -> Iterable[dict[str, Any]]:
    """Rows and on-disk bytes for every operator, store, version and partition as plain records
    (streamed), counted by a stats scan of each store (:func:`store_growth`): what ``statelens growth
    --json`` prints and :meth:`statelens.Checkpoint.growth_table` holds (no key + value bytes)."""
    backends = backends or BackendChooser(ckpt, "native")
    stores = [(op, s) for op in ckpt.operators for s in op.stores]
    for n, (op, s) in enumerate(stores):
        if progress:
            progress(Progress(n, len(stores), f"operator {op.operator_id} {s.store_name}"))
        yield from store_growth(ckpt, backends, op.operator_id, s.store_name)


def store_growth(ckpt: Any, backends: Any, operator_id: int, store_name: str) -> Iterator[dict[str, Any]]:
    """One store's records (:data:`GROWTH_FIELDS`), counted by a stats scan
    (:class:`readers.scan.StateScan`) of the backend ``backends`` picks for it; what the scan could not
    read goes to the checkpoint's report."""
    scan = StateScan(backends.for_store(operator_id, store_name), operator_id, store_name, "stats")
    for st in scan.iter_stats():
        yield {
            "operator_id": st.operator_id,
            "store_name": st.store_name,
            "version": st.version,
            "batch_id": st.version - 1,
            "partition_id": st.partition_id,
            "rows": st.rows,
            "bytes": st.bytes,
        }
    for err in scan.problems:
        ckpt.report.add(err)

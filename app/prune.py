"""Prune: a repaired copy of a checkpoint with chosen keys removed, that Spark restarts from.

The copy gains one batch that reads no data, as a batch Spark runs when only the watermark moved
(docs/prune.md, docs/format.md §12): with ``N`` the last committed batch, ``offsets/N+1`` repeats the
source offsets of ``offsets/N`` (with the watermark ``commits/N`` carried forward), ``commits/N+1``
repeats ``commits/N``, and state version ``N+2`` of every partition of every store holds the removals
(:mod:`readers.rewrite`: a delta, a changelog, or a zip and one SST). Spark restarted on the copy loads version ``N+2`` (version ``N+1`` with the
removals applied) and runs batch ``N+2`` next. Nothing else in the copy changes, so its history stays
readable and the original version ``N+1`` stays beside the pruned one; only a few small files are
written, however large the state.

Which keys: the expired-but-unremoved keys ``statelens expired`` reports (:func:`iter_expired`), keys
listed in JSON lines (``statelens expired --jsonl`` output), or a DuckDB predicate over the ``state``
table ``statelens sql`` shows. The rows are read through the scan (:class:`readers.scan.StateScan`
with ``raw``), so the stored key bytes removed are the ones the other commands read. After writing, the
copy is read back and compared with the original, store by store and partition by partition, byte for
byte (:class:`Proof`).

Before anything is read to choose keys, the checks of ``statelens doctor`` (:func:`iter_doctor` with
``restart_only``) run on what the copy carries and a restart of it loads: the logs and metadata, the
schema files and the state files of the version the new one is built on. An error there refuses the
prune (:class:`DamagedSourceError`) unless ``force``; a forced copy records each carried finding
(:attr:`PrunePlan.findings`). Findings about files the copy leaves out (``drop_uncommitted``) do not count.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from statelens.app.analysis._common import counted
from statelens.app.analysis.doctor import DoctorFinding, iter_doctor
from statelens.app.analysis.expired import iter_expired
from statelens.app.output import dumps_jsonl
from statelens.readers.backends.native import NativeBackend
from statelens.readers.checkpoint import JOIN_STORE_ORDER, open_checkpoint
from statelens.readers.checksums import crc_sidecar_path, hadoop_crc
from statelens.readers.errors import BackendUnavailableError, RefusedError, StatelensError, UsageError
from statelens.readers.mirror import iter_copy_checkpoint, refuse_overlap, write_file_atomic
from statelens.readers.model import OperatorKind, Progress
from statelens.readers.restart import REPAIR_ENABLED, RestartConf
from statelens.readers.rewrite import cannot_write, removal_files
from statelens.readers.scan import StateScan
from statelens.readers.values import row_to_json

__all__ = ["CATEGORIES", "DamagedSourceError", "PrunePlan", "Selection", "iter_prune", "read_key_lines"]

#: What ``--category`` picks from (``statelens expired``'s categories).
CATEGORIES = ("zombie", "overdue", "stale", "eviction_lag")


@dataclass(frozen=True)
class Selection:
    """Which keys to remove.

    Parameters
    ----------
    zombies : bool
        The keys ``statelens expired`` reports at the last committed version, in ``categories``.
    categories : tuple of str
        Of :data:`CATEGORIES` (default: ``zombie`` only).
    keys : sequence of dict, optional
        JSON objects with a ``key`` (as statelens prints keys) and optionally ``operator_id``,
        ``store_name`` and ``partition`` to narrow where it is removed.
    where : str, optional
        A DuckDB predicate over the ``state`` table of ``statelens sql`` (``operator_id, store_name,
        version, partition_id, key, value``).
    operator_id, store_name : optional
        Only this operator / store.
    """

    zombies: bool = False
    categories: tuple[str, ...] = ("zombie",)
    keys: Sequence[dict[str, Any]] | None = None
    where: str | None = None
    operator_id: int | None = None
    store_name: str | None = None

    def __post_init__(self) -> None:
        if not (self.zombies or self.keys is not None or self.where):
            raise UsageError("say which keys to remove: --zombies, --keys FILE or --where SQL")
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise UsageError(f"unknown category {unknown[0]!r}; choose from {', '.join(CATEGORIES)}")


@dataclass
class PartitionPrune:
    """What is removed from one partition: rows and bytes (key + value as stored), and the keys."""

    partition: int
    rows: int | None  # None: not read (a store nothing is chosen from)
    removed_rows: int = 0
    removed_bytes: int = 0
    keys: list[bytes] = field(default_factory=list, repr=False)
    shown: list[Any] = field(default_factory=list, repr=False)  # the keys as statelens prints them

    def to_json(self, with_keys: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partition": self.partition,
            "rows": self.rows,
            "removed_rows": self.removed_rows,
            "removed_bytes": self.removed_bytes,
        }
        if with_keys:
            out["removed_keys"] = self.shown
        return out


@dataclass
class StorePrune:
    """One store of the copy: its partitions' removals (empty for a store nothing is removed from)."""

    operator_id: int
    store_name: str
    provider: str
    partitions: list[PartitionPrune] = field(default_factory=list)

    @property
    def removed_rows(self) -> int:
        return sum(p.removed_rows for p in self.partitions)

    @property
    def removed_bytes(self) -> int:
        return sum(p.removed_bytes for p in self.partitions)

    @property
    def rows(self) -> int | None:
        counts = [p.rows for p in self.partitions]
        return None if None in counts else sum(c for c in counts if c is not None)

    def to_json(self, with_keys: bool = True) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "provider": self.provider,
            "rows": self.rows,
            "removed_rows": self.removed_rows,
            "removed_bytes": self.removed_bytes,
            "partitions": [p.to_json(with_keys) for p in self.partitions if p.removed_rows or with_keys],
        }


@dataclass
class WrittenFile:
    """A file prune wrote into the copy, for the incident record."""

    path: str
    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size_bytes, "sha256": self.sha256}


@dataclass
class Proof:
    """The copy read back: every store and partition compared with the original, byte for byte."""

    partitions: int = 0
    kept_rows: int = 0
    gone_rows: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "partitions_compared": self.partitions,
            "rows_kept_identical": self.kept_rows,
            "rows_removed_and_gone": self.gone_rows,
            "mismatches": self.mismatches,
        }


#: Doctor checks of state files prune itself reads and decodes to build and prove the new version:
#: ``force`` cannot carry an error of these (the copy could not be written, or proved, from them).
UNFORCEABLE_CHECKS = frozenset(
    {
        "undecodable_file",
        "row_checksum",
        "rows_disagree_with_schema",
        "rocksdb_restart_zip",
        "rocksdb_restart_changelog",
    }
)


class DamagedSourceError(RefusedError):
    """The copy would carry files ``statelens doctor`` finds errors in, which a restart of it loads.

    Parameters
    ----------
    findings : list of DoctorFinding
        The errors, each naming its files.
    forceable : bool
        ``force`` would copy them anyway (False: prune itself cannot read them).
    """

    def __init__(self, findings: list[DoctorFinding], forceable: bool):
        self.findings = findings
        self.forceable = forceable
        lines = "".join(f"\n  {finding_text(f)}" for f in findings)
        tail = (
            "--force copies them anyway and records each in the report"
            if forceable
            else "--force cannot carry them: prune reads these files to build and prove the new version"
        )
        super().__init__(
            f"nothing written: the copy would carry {counted(len(findings), 'error')} statelens doctor finds in "
            f"files a restart of it loads:{lines}\n{tail}"
        )


def finding_text(f: DoctorFinding) -> str:
    """One line for a doctor finding in prune's messages: its files, then what is wrong."""
    return f"{', '.join(f.files) or '(checkpoint)'}: {f.message} [{f.check}]"


@dataclass
class PrunePlan:
    """What prune removes (a dry run) and, once applied, what it wrote and the proof."""

    checkpoint: str
    last_batch: int
    stores: list[StorePrune]
    dropped_uncommitted: list[int] = field(default_factory=list)
    target: str | None = None
    applied: bool = False
    copied_files: int = 0
    written: list[WrittenFile] = field(default_factory=list)
    proof: Proof | None = None
    #: What ``statelens doctor`` finds in the files the copy carries and a restart of it loads (errors
    #: only with ``force``), worst first.
    findings: list[DoctorFinding] = field(default_factory=list)
    forced: bool = False

    @property
    def carried_errors(self) -> list[DoctorFinding]:
        """The errors the copy carries (only a forced copy has any)."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def new_batch(self) -> int:
        """The batch the copy gains (it reads no data)."""
        return self.last_batch + 1

    @property
    def base_version(self) -> int:
        """The state version the keys are removed from (written by the last committed batch)."""
        return self.last_batch + 1

    @property
    def new_version(self) -> int:
        """The state version that holds the removals."""
        return self.last_batch + 2

    @property
    def removed_rows(self) -> int:
        return sum(s.removed_rows for s in self.stores)

    @property
    def removed_bytes(self) -> int:
        return sum(s.removed_bytes for s in self.stores)

    def to_json(self, with_keys: bool = True) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "target": self.target,
            "applied": self.applied,
            "last_committed_batch": self.last_batch,
            "new_batch": self.new_batch,
            "base_version": self.base_version,
            "new_version": self.new_version,
            "dropped_uncommitted_batches": self.dropped_uncommitted,
            "removed_rows": self.removed_rows,
            "removed_bytes": self.removed_bytes,
            "stores": [s.to_json(with_keys) for s in self.stores],
            "copied_files": self.copied_files,
            "written_files": [w.to_json() for w in self.written],
            "proof": self.proof.to_json() if self.proof is not None else None,
            "forced": self.forced,
            "carried_errors": len(self.carried_errors),
            "findings": [f.to_json() for f in self.findings],
        }


def read_key_lines(lines: Iterable[str], source: str) -> list[dict[str, Any]]:
    """Parse JSON lines of keys (``{"key": ...}``, e.g. ``statelens expired --jsonl``); blank lines skip.

    Raises
    ------
    UsageError
        A line that is not a JSON object with a ``key``, naming the line.
    """
    out: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as err:
            raise UsageError(f"{source} line {n} is not JSON: {err}") from err
        if not isinstance(doc, dict) or "key" not in doc:
            raise UsageError(f'{source} line {n} is not a JSON object with a "key"')
        out.append(doc)
    return out


def _canonical(key: Any) -> str:
    """One text per key, whichever way it was written (field order and JSON spacing do not matter)."""
    return json.dumps(_plain(key), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _plain(key: Any) -> Any:
    """A key as plain JSON values (an ordered :class:`readers.values.JsonObject` becomes a dict)."""

    return json.loads(dumps_jsonl(key))


# -- checks before anything is read or written -----------------------------------------------------------
def _last_committed(ckpt: Any, drop_uncommitted: bool) -> tuple[int, list[int]]:
    last = ckpt.last_committed_batch_id
    if last is None:
        raise RefusedError("no batch of this checkpoint committed: there is no state to prune")
    later = [b for b in ckpt.uncommitted_batches() if b > last]
    if later and not drop_uncommitted:
        unread = [e for e in ckpt.report.problems if e.path == f"commits/{later[-1]}"]
        raise RefusedError(
            f"batch {later[-1]} was planned (offsets/{later[-1]}) but never committed"
            + (f" (commits/{later[-1]} cannot be read: {unread[0].message})" if unread else "")
            + "; a restart re-runs it, "
            f"so no batch can be added after it. Prune on top of the last committed batch {last} with "
            "--drop-uncommitted (the copy leaves that batch out and the restart plans its data again), "
            "or let the query commit it first",
            path=f"offsets/{later[-1]}",
        )
    return last, later


def _writable_stores(ckpt: Any, backend: Any, base: int) -> list[Any]:
    """Every store of every operator, refused when one of them cannot be written: Spark loads every store
    at the new version, so every store needs its file."""

    out: list[Any] = []
    for op in ckpt.operators:
        for st in op.stores:
            where = f"operator {op.operator_id} store {st.store_name!r}"
            try:
                reason = cannot_write(backend, op.operator_id, st.store_name, base)
            except BackendUnavailableError as err:
                raise RefusedError(f"{where} cannot be written: {err.message}", path=err.path) from err
            if reason is not None:
                raise RefusedError(f"{where} cannot be written: {reason}", path=f"state/{op.operator_id}")
            if not backend.can_read(op.operator_id, st.store_name):  # no schema
                unread = [
                    e
                    for e in ckpt.report.problems
                    if (e.path or "").startswith(f"state/{op.operator_id}/")
                    and "_metadata/schema" in (e.path or "")
                ]
                raise RefusedError(
                    (
                        f"{where}: its schema file cannot be read ({unread[0].message})"
                        if unread
                        else f"{where} has no schema file"
                    )
                    + ": its rows cannot be decoded to choose keys (not even with --force)",
                    path=unread[0].path if unread else None,
                )
            out.append(st)
    if not out:
        raise RefusedError("this checkpoint has no state stores: nothing to prune")
    return out


def _check_carried(
    ckpt: Any, skip: Callable[[str], bool] | None, force: bool, cancelled: Callable[[], bool] | None
) -> Generator[Progress, None, list[DoctorFinding]]:
    """The doctor's findings on what the copy carries and a restart of it loads (a finding whose files
    the copy all leaves out does not count; notes are left out), refused when one is an error unless
    ``force`` (and always when prune cannot read the file itself)."""

    # prune reads the last committed version itself, from its newest snapshot: judged without auto
    # snapshot repair, a damaged snapshot there is one prune cannot read
    no_repair = RestartConf(conf={REPAIR_ENABLED: "false"})
    result = yield from iter_doctor(ckpt, restart_only=True, cancelled=cancelled, restart=no_repair)
    if cancelled is not None and cancelled():
        raise StatelensError("prune cancelled before anything was written")
    findings = [
        f
        for f in result.findings
        if f.severity != "info" and not (skip is not None and f.files and all(skip(p) for p in f.files))
    ]
    errors = [f for f in findings if f.severity == "error"]
    unforceable = [f for f in errors if f.check in UNFORCEABLE_CHECKS]
    if unforceable or (errors and not force):
        raise DamagedSourceError(unforceable or errors, forceable=not unforceable)
    return findings


# -- choosing the keys -------------------------------------------------------------------------------------
def _zombie_keys(
    ckpt: Any, sel: Selection, base: int, cancelled: Callable[[], bool] | None
) -> Generator[Progress, None, dict[tuple[int, str, int], set[str | bytes]]]:
    """The keys ``expired`` reports at version ``base``, per store partition: their stored bytes (the
    native walk has them), else their canonical JSON."""

    wanted: dict[tuple[int, str, int], set[str | bytes]] = {}
    elsewhere: list[Any] = []

    def sink(f: Any) -> None:
        if f.category not in sel.categories:
            return
        if f.version != base:
            elsewhere.append(f)
            return
        key = f.raw_key if f.raw_key is not None else _canonical(f.key)
        wanted.setdefault((f.operator_id, f.store_name, f.partition), set()).add(key)

    result = yield from iter_expired(ckpt, sel.operator_id, sink=sink, cancelled=cancelled)
    if result.problems:
        raise result.problems[0]
    if elsewhere:
        f = elsewhere[0]
        raise RefusedError(
            f"{len(elsewhere)} expired key(s) were found at a version other than {base} (e.g. partition "
            f"{f.partition} version {f.version}): the state beyond the last committed batch belongs to a "
            "batch that did not commit"
        )
    return wanted


def _listed_keys(keys: Sequence[dict[str, Any]]) -> list[tuple[int | None, str | None, int | None, str]]:
    return [
        (doc.get("operator_id"), doc.get("store_name"), doc.get("partition"), _canonical(doc["key"]))
        for doc in keys
    ]


def _key_matches(table: Any, scan: StateScan, st: Any, pid: int, wanted: set[str | bytes]) -> set[int]:
    """Row positions of one partition's table whose key is one of ``wanted``: stored key bytes (compared
    column-wise), or canonical JSON (the partition's keys decoded to compare)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    out: set[int] = set()
    raw = [k for k in wanted if isinstance(k, bytes)]
    if raw:
        hit = pc.is_in(table.column("key_bytes"), value_set=pa.array(raw, pa.large_binary()))
        out.update(np.flatnonzero(hit.to_numpy(zero_copy_only=False)).tolist())
    text = {k for k in wanted if isinstance(k, str)}
    if text:
        shown = _shown(scan, st, pid, table.column("key_bytes").to_pylist())
        out.update(i for i, key in enumerate(shown) if _canonical(key) in text)
    return out


#: Rows of several partitions put before DuckDB in one query (bounded memory, few queries).
WHERE_ROWS_PER_QUERY = 1 << 18


def _where_matches(tables: list[Any], st: Any, where: str, base: int, con: Any) -> dict[int, set[int]]:
    """Row positions, per partition, that the predicate ``where`` picks from these partitions' tables,
    in one DuckDB query over the ``state`` table's columns."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    n = sum(t.num_rows for t in tables)
    state = pa.table(
        {
            "operator_id": pa.array([st.operator_id] * n, pa.int32()),
            "store_name": pa.array([st.store_name] * n, pa.string()),
            "version": pa.array([base] * n, pa.int64()),
            "partition_id": pa.chunked_array([t.column("partition") for t in tables]),
            "key": pa.chunked_array([c for t in tables for c in t.column("key").chunks]),
            "value": pa.chunked_array([c for t in tables for c in t.column("value").chunks]),
            "__row": pa.chunked_array([pa.array(range(t.num_rows), pa.int64()) for t in tables]),
        }
    )
    con.register("state", state)
    try:
        got = con.execute(f"SELECT partition_id, __row FROM state WHERE {where}").fetchall()  # noqa: S608
    except Exception as err:  # duckdb.Error and its subclasses: the predicate is the user's
        raise UsageError(
            f"--where does not apply to operator {st.operator_id} store {st.store_name!r}: "
            f"{str(err).splitlines()[0]}"
        ) from err
    finally:
        con.unregister("state")
    out: dict[int, set[int]] = {}
    for pid, row in got:
        out.setdefault(pid, set()).add(row)
    return out


def _shown(scan: StateScan, st: Any, pid: int, keys: list[bytes]) -> list[Any]:
    """Keys as statelens prints them (``statelens rows``/``expired``), from their stored bytes."""

    decoded = scan.decode(pid, [(k, None) for k in keys])
    return [_plain(row_to_json(key, st.schema.key_schema)) for key, _ in decoded]


def _removal(scan: StateScan, st: Any, pid: int, table: Any, picks: list[int]) -> PartitionPrune:
    """What removing rows ``picks`` of one partition's table removes: rows, bytes as stored, the keys."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    part = PartitionPrune(pid, rows=table.num_rows)
    if picks:
        chosen = table.take(pa.array(picks, pa.int64()))
        kb = chosen.column("key_bytes").to_pylist()
        vb = chosen.column("value_bytes").to_pylist()
        part.keys = kb
        part.removed_rows = len(kb)
        part.removed_bytes = sum(len(k) + len(v) for k, v in zip(kb, vb, strict=True))
        part.shown = _shown(scan, st, pid, kb)
    return part


def _plan_store(
    backend: Any,
    st: Any,
    sel: Selection,
    base: int,
    wanted: dict[int | None, set[str | bytes]],
    con: Any,
    join: bool = False,
) -> StorePrune:
    """What removing the chosen keys removes from one store, a partition at a time (``join``: the store is
    a stream-stream join's, whose state is never pruned)."""

    out = StorePrune(st.operator_id, st.store_name, st.provider)
    in_scope = (sel.operator_id is None or sel.operator_id == st.operator_id) and (
        sel.store_name is None or sel.store_name == st.store_name
    )
    chooses = in_scope and (bool(wanted) or bool(sel.where))
    scan = StateScan(backend, st.operator_id, st.store_name, version=base, raw=chooses, strict=True)
    if not chooses:
        out.partitions.extend(PartitionPrune(pid, rows=None) for pid in scan.partition_ids())
        return out
    seen: set[int] = set()
    pending: list[tuple[int, Any]] = []

    def flush() -> None:
        chosen_by_where = (
            _where_matches([t for _, t in pending], st, sel.where, base, con) if sel.where and pending else {}
        )
        for pid, table in pending:
            keys = wanted.get(pid, set()) | wanted.get(None, set())
            picks = _key_matches(table, scan, st, pid, keys) | chosen_by_where.get(pid, set())
            out.partitions.append(_removal(scan, st, pid, table, sorted(picks)))
        pending.clear()

    for table in scan.iter_tables():
        pid = int(table.column("partition")[0].as_py())
        seen.add(pid)
        pending.append((pid, table))
        if join:
            flush()
            if out.removed_rows:
                raise RefusedError(
                    f"operator {st.operator_id} is a stream-stream join: each buffered row is kept in two "
                    f"stores of its side ({st.store_name!r} and its twin), which must change together; statelens "
                    "does not prune join state",
                    path=f"state/{st.operator_id}",
                )
        if sum(t.num_rows for _, t in pending) >= WHERE_ROWS_PER_QUERY:
            flush()
    flush()
    out.partitions.extend(PartitionPrune(pid, rows=0) for pid in scan.partition_ids() if pid not in seen)
    out.partitions.sort(key=lambda p: p.partition)
    return out


# -- writing -------------------------------------------------------------------------------------------------
class _LocalTarget:
    """A local folder: files written as Spark writes them (temporary name, rename) with Hadoop ``.crc``."""

    def __init__(self, root: Path):
        self.root = root
        self.url = str(root)

    def copy(
        self, ckpt: Any, skip: Callable[[str], bool] | None, cancelled: Callable[[], bool] | None
    ) -> Generator[Progress, None, int]:
        copied = yield from iter_copy_checkpoint(ckpt.fs, self.root, cancelled, skip=skip)
        _copy_failed(copied.failed, self.url)
        return copied.copied

    def write(self, rel: str, data: bytes, written: list[WrittenFile]) -> None:
        for path, body in ((rel, data), (crc_sidecar_path(rel), hadoop_crc(data))):
            write_file_atomic(self.root / path, body)
            written.append(WrittenFile(path, len(body), hashlib.sha256(body).hexdigest()))


class _RemoteTarget:
    """A folder on object storage (any fsspec URL): files put whole, many at a time; no ``.crc`` sidecars
    (object stores have none, and S3A reads none)."""

    #: Files put per request batch.
    BATCH = 64

    def __init__(self, url: str, storage_options: dict[str, Any] | None):
        import fsspec  # deferred: fsspec (slow import)

        self.url = url.rstrip("/")
        self.options = storage_options or {}
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)

    def _path(self, rel: str) -> str:
        return f"{self.root.rstrip('/')}/{rel}"

    def copy(
        self, ckpt: Any, skip: Callable[[str], bool] | None, cancelled: Callable[[], bool] | None
    ) -> Generator[Progress, None, int]:
        entries = [e for e in ckpt.fs.walk_files() if skip is None or not skip(e.path)]
        ckpt.fs.read_ahead(e.path for e in entries)
        failed: list[StatelensError] = []
        try:
            for start in range(0, len(entries), self.BATCH):
                if cancelled is not None and cancelled():
                    raise StatelensError(f"copy to {self.url} cancelled; remove the folder and start again")
                yield Progress(start, len(entries), entries[start].path)
                chunk: dict[str, bytes] = {}
                for e in entries[start : start + self.BATCH]:
                    try:
                        data = ckpt.fs.read_bytes(e.path, cancelled=cancelled)
                    except StatelensError as err:
                        failed.append(err)
                        continue
                    if len(data) != e.size_bytes:
                        failed.append(
                            StatelensError(f"read {len(data)} bytes, listed {e.size_bytes}", e.path)
                        )
                        continue
                    chunk[self._path(e.path)] = data
                self.fs.pipe(chunk)
        finally:
            ckpt.fs.cancel_read_ahead()
        _copy_failed(failed, self.url)
        return len(entries)

    def write(self, rel: str, data: bytes, written: list[WrittenFile]) -> None:
        self.fs.pipe_file(self._path(rel), data)
        written.append(WrittenFile(rel, len(data), hashlib.sha256(data).hexdigest()))


def _copy_failed(failed: list[Any], where: str) -> None:
    if failed:
        raise RefusedError(
            f"{len(failed)} file(s) could not be copied (first: {failed[0]}); the copy in {where} is incomplete "
            "and nothing was pruned: fix the source or remove the folder and try again"
        )


def _check_target(ckpt: Any, target: str, storage_options: dict[str, Any] | None = None) -> Any:
    """The target of a copy, after checking it is not the checkpoint, not inside it, and empty."""
    if "://" in target and not target.startswith("file://"):
        remote = _RemoteTarget(target, storage_options)
        source = ckpt.fs.url.rstrip("/") + "/"
        if (remote.url + "/").startswith(source) or source.startswith(remote.url + "/"):
            raise RefusedError(
                f"{target} overlaps the checkpoint {ckpt.location}: statelens never writes there"
            )
        try:
            found = remote.fs.find(remote.root, maxdepth=None)
        except FileNotFoundError:
            found = []
        if found:
            raise RefusedError(
                f"{target} is not empty: prune writes a new checkpoint into an empty or new folder"
            )
        return remote

    path = Path(target.removeprefix("file://")).expanduser().absolute()
    refuse_overlap(ckpt.fs, path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise RefusedError(f"{path} is not empty: prune writes a new checkpoint into an empty or new folder")
    return _LocalTarget(path)


def _skip_uncommitted(ckpt: Any, last: int, later: list[int]) -> Callable[[str], bool]:
    """Paths the copy leaves out with --drop-uncommitted: the logs of the later batches and the state
    files (and sidecars) of the versions they wrote."""
    dropped = {f"offsets/{b}" for b in later} | {f"commits/{b}" for b in later}
    newest = last + 1

    def skip(path: str) -> bool:
        folder, _, name = path.rpartition("/")
        bare = name.lstrip(".").removesuffix(".crc")
        if f"{folder}/{bare}".lstrip("/") in dropped:
            return True
        if not path.startswith("state/"):
            return False
        head = bare.split(".", 1)[0].split("_", 1)[0]
        kind = bare.split(".", 1)[1].split(".", 1)[0] if "." in bare else ""
        return head.isdigit() and kind in ("delta", "snapshot", "zip", "changelog") and int(head) > newest

    return skip


def _log_files(ckpt: Any, last: int) -> tuple[bytes, bytes]:
    """``offsets/N+1`` and ``commits/N+1`` of the new batch, from those of batch N (the commit as it is:
    :func:`_with_unique_ids` names the files written)."""

    offsets = ckpt.fs.read_bytes(f"offsets/{last}").decode("utf-8", "replace")
    lines = offsets.split("\n")
    try:
        meta = json.loads(lines[1]) if len(lines) >= 2 and lines[0].startswith("v") else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise RefusedError(
            "is not an offsets log entry Spark writes: the added batch's offsets are made from it, so no "
            "copy can be written (not even with --force)",
            path=f"offsets/{last}",
        )
    meta["batchWatermarkMs"] = ckpt.commits[last].next_watermark_ms
    lines[1] = json.dumps(meta, separators=(",", ":"), ensure_ascii=False)
    return "\n".join(lines).encode("utf-8"), ckpt.fs.read_bytes(f"commits/{last}")


def _with_unique_ids(commit: bytes, unique_ids: dict[tuple[int, str, int], str]) -> bytes:
    """With checkpoint format v2, the commit names ``unique_ids`` (operator, store, partition -> the id of
    the file written), as ``stateUniqueIds`` lists them: per operator, per partition, per store in the
    join's order."""
    if unique_ids:
        head, _, body = commit.decode("utf-8").partition("\n")
        doc = json.loads(body)
        ids: dict[str, list[list[str]]] = {}
        for (op, _store, pid), uid in sorted(
            unique_ids.items(),
            key=lambda i: (
                i[0][0],
                i[0][2],
                JOIN_STORE_ORDER.index(i[0][1]) if i[0][1] in JOIN_STORE_ORDER else 0,
            ),
        ):
            parts = ids.setdefault(str(op), [])
            while len(parts) <= pid:
                parts.append([])
            parts[pid].append(uid)
        doc["stateUniqueIds"] = ids
        commit = (head + "\n" + json.dumps(doc, separators=(",", ":"))).encode("utf-8")
    return commit


def _raw_partition(backend: Any, op: int, name: str, version: int, pid: int) -> dict[bytes, bytes]:
    """One partition's stored rows at one version, key bytes -> value bytes, through the scan."""

    table = StateScan(backend, op, name, version=version, partitions=[pid], raw=True, strict=True).to_arrow()
    return dict(
        zip(table.column("key_bytes").to_pylist(), table.column("value_bytes").to_pylist(), strict=True)
    )


def _prove(ckpt: Any, copy: Any, plan: PrunePlan) -> Generator[Progress, None, Proof]:
    """Read every store of the copy at the new version and the original at the base version, a partition
    at a time (memory: two partitions): the copy must hold every original row byte for byte except the
    removed keys, which must be gone."""

    proof = Proof()
    if copy.last_committed_batch_id != plan.new_batch:
        proof.mismatches.append(
            f"the copy's last committed batch is {copy.last_committed_batch_id}, not {plan.new_batch}"
        )
    removed = {
        (s.operator_id, s.store_name, p.partition): set(p.keys) for s in plan.stores for p in s.partitions
    }
    original, pruned = NativeBackend(ckpt), NativeBackend(copy)
    jobs = [(st.operator_id, st.store_name, p.partition) for st in plan.stores for p in st.partitions]
    for n, (op, name, pid) in enumerate(jobs):
        yield Progress(n, len(jobs), f"proof: operator {op} {name} partition {pid}")
        old = _raw_partition(original, op, name, plan.base_version, pid)
        new = _raw_partition(pruned, op, name, plan.new_version, pid)
        proof.partitions += 1
        gone = removed.get((op, name, pid), set())
        expect = {k: v for k, v in old.items() if k not in gone}
        if new == expect:
            proof.kept_rows += len(new)
            proof.gone_rows += len(gone & old.keys())
            continue
        extra = sum(1 for k in new if k not in expect)
        lost = sum(1 for k in expect if k not in new)
        changed = sum(1 for k in expect if k in new and new[k] != expect[k])
        proof.mismatches.append(
            f"operator {op} store {name!r} partition {pid}: {extra} row(s) that should be gone, "
            f"{lost} missing, {changed} changed"
        )
    return proof


def iter_prune(
    ckpt: Any,
    selection: Selection,
    target: str | None = None,
    *,
    apply: bool = False,
    drop_uncommitted: bool = False,
    force: bool = False,
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, PrunePlan]:
    """Plan a prune (what would be removed, per store and partition) and, with ``apply``, write the copy.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint (read only: nothing is ever written inside it).
    selection : Selection
        Which keys.
    target : str, optional
        A new or empty folder for the copy, local or any fsspec URL (needed with ``apply``).
    apply : bool
        Write the copy; without it nothing is written (a dry run).
    drop_uncommitted : bool
        When the last planned batch never committed, prune on top of the last committed one and leave
        the later batch out of the copy.
    force : bool
        Copy even when ``statelens doctor`` finds errors in files the copy carries and a restart of it
        loads; each is recorded in the plan's ``findings``.
    storage_options : dict, optional
        fsspec options of a remote ``target`` (credentials, endpoint).
    cancelled : callable, optional
        Polled between steps.

    Yields
    ------
    Progress

    Returns
    -------
    PrunePlan
        With ``written`` and ``proof`` when applied.

    Raises
    ------
    RefusedError
        Before anything is written: the target is inside the checkpoint or not empty, the last batch did
        not commit, a store's format cannot be written safely (the message says which and why), or the
        copy could not be made whole.
    DamagedSourceError
        Before anything is written: ``statelens doctor`` finds errors in files the copy would carry and
        a restart of it loads (without ``force``, or files prune cannot read itself), each named.
    UsageError
        No selection, an unknown category, a ``--where`` that does not apply.
    StatelensError
        A file that cannot be read while choosing keys (prune reads strictly: a partition it cannot
        read is an error, never a partition left as it is).
    """
    import duckdb  # deferred: duckdb (heavy)

    last, later = _last_committed(ckpt, drop_uncommitted)
    base = last + 1
    root = _check_target(ckpt, target, storage_options) if target is not None else None
    if apply and root is None:
        raise UsageError("--apply needs --out NEW: the folder the pruned copy is written to")
    skip = _skip_uncommitted(ckpt, last, later) if later else None
    findings = yield from _check_carried(ckpt, skip, force, cancelled)
    backend = NativeBackend(ckpt)
    stores = _writable_stores(ckpt, backend, base)
    if selection.operator_id is not None or selection.store_name is not None:
        chosen = [
            st
            for st in stores
            if selection.operator_id in (None, st.operator_id)
            and selection.store_name in (None, st.store_name)
        ]
        if not chosen:
            raise UsageError("no store matches --operator/--store")
    wanted: dict[tuple[int, str], dict[int | None, set[str | bytes]]] = {}
    if selection.zombies:
        found = yield from _zombie_keys(ckpt, selection, base, cancelled)
        for (op, name, pid), keys in found.items():
            wanted.setdefault((op, name), {}).setdefault(pid, set()).update(keys)
    if selection.keys is not None:
        for want_op, want_store, want_pid, key in _listed_keys(selection.keys):
            for st in stores:
                if want_op in (None, st.operator_id) and want_store in (None, st.store_name):
                    wanted.setdefault((st.operator_id, st.store_name), {}).setdefault(want_pid, set()).add(
                        key
                    )
    plan = PrunePlan(
        ckpt.location,
        last,
        [],
        dropped_uncommitted=later,
        target=root.url if root else None,
        findings=findings,
        forced=force,
    )
    con = duckdb.connect(":memory:")
    try:
        for n, st in enumerate(stores):
            if cancelled is not None and cancelled():
                raise StatelensError("prune cancelled before anything was written")
            yield Progress(n, len(stores), f"operator {st.operator_id} {st.store_name}")
            plan.stores.append(
                _plan_store(
                    backend,
                    st,
                    selection,
                    base,
                    wanted.get((st.operator_id, st.store_name), {}),
                    con,
                    ckpt.operator(st.operator_id).kind == OperatorKind.JOIN,
                )
            )
    finally:
        con.close()
    if not apply:
        return plan
    assert root is not None
    logs = _log_files(ckpt, last)  # the added batch's logs can be made, before anything is written
    yield from _apply(ckpt, backend, plan, logs, root, skip, cancelled)
    return plan


def _apply(
    ckpt: Any,
    backend: Any,
    plan: PrunePlan,
    logs: tuple[bytes, bytes],
    root: Any,
    skip: Callable[[str], bool] | None,
    cancelled: Callable[[], bool] | None,
) -> Generator[Progress, None, None]:
    plan.copied_files = yield from root.copy(ckpt, skip, cancelled)
    # State first, logs last: a copy stopped half-way has no batch that points at missing state.
    unique_ids: dict[tuple[int, str, int], str] = {}
    for st in plan.stores:
        for part in st.partitions:
            where = (st.operator_id, st.store_name, part.partition)
            for new in removal_files(backend, *where, plan.new_version, part.keys):
                root.write(new.path, new.data, plan.written)
                if new.unique_id is not None:
                    unique_ids[where] = new.unique_id
    offsets, commit = logs
    root.write(f"offsets/{plan.new_batch}", offsets, plan.written)
    root.write(f"commits/{plan.new_batch}", _with_unique_ids(commit, unique_ids), plan.written)
    plan.applied = True
    options = getattr(root, "options", None)
    copy = open_checkpoint(root.url, storage_options=options, mirror=False)
    plan.proof = yield from _prove(ckpt, copy, plan)

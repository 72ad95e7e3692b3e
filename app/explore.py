"""Qt-free data behind the explorer views: expired keys, a key's history, schemas and the session conf.

Long work is a generator yielding :class:`~readers.model.Progress` and returning its result,
run by the GUI through ``app/gui/workers.py``; everything here also runs headless (tests, scripts).

* :func:`iter_expired_overview` runs :func:`app.analysis.expired.iter_expired` over every version and
  arranges its findings for plotting: counts per category over versions and per partition, and the
  findings at each partition's latest version (exactly what ``statelens expired --json`` lists).
* :func:`iter_key_history` walks the versions of one partition and follows one key: when it appeared,
  changed, was rewritten or removed, with its value (and timeout) at each version.
* :func:`read_schema_history` lists every schema file of every store, oldest first, and what changed.
* :func:`conf_changes` compares the session conf pinned in consecutive offsets files.

Version ``v`` is the state after batch ``v-1`` (``docs/format.md`` §1.2).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis._common import key_text, row_converter
from statelens.app.analysis.expired import (
    CATEGORIES,
    ExpiredFinding,
    ExpiredResult,
    OperatorExpiry,
    iter_expired,
)
from statelens.app.analysis.finding_text import batch_text
from statelens.app.columns import ColumnSpec, DisplayColumn, ValueColumn, sort_getter, state_columns
from statelens.app.state_table import _require_schema
from statelens.readers import schemas
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.model import BatchInfo, Progress, StoreSchema
from statelens.readers.scan import StateScan
from statelens.readers.textfmt import format_duration_ms, format_epoch_ms


# -- expired keys --------------------------------------------------------------------------------------
@dataclass
class StoreExpiry:
    """Expired-but-present keys of one store, arranged for the expired view.

    Attributes
    ----------
    versions : list of int
        Every version the walk read, ascending.
    counts : dict of str to list of int
        Per category of :data:`app.analysis.expired.CATEGORIES`: findings at each of ``versions``
        (summed over partitions; ``overdue`` exists only at the latest version).
    partitions : list of int
    partition_counts : dict of str to list of int
        Per category: findings at each partition's latest version, aligned with ``partitions``.
    examples : list of ExpiredFinding
        The findings at each partition's latest version (as ``statelens expired`` reports them), at
        most ``max_examples`` per category: the most overdue (``ExpiredResult.examples`` of this store).
    summary : OperatorExpiry
        What was checked and how (timeout kind and its evidence, or why the store was skipped).
    total_findings : int
        Findings at each partition's latest version (exact; ``examples`` may list fewer).
    unreadable : list of int
        Partitions with a file the walk could not read (each in the run's problems): marked in the view,
        never counted as 0 keys.
    """

    operator_id: int
    store_name: str
    versions: list[int]
    counts: dict[str, list[int]]
    partitions: list[int]
    partition_counts: dict[str, list[int]]
    examples: list[ExpiredFinding]
    summary: OperatorExpiry
    total_findings: int = 0
    unreadable: list[int] = field(default_factory=list)

    def describe(self) -> str:
        """One line: what was checked, the timeout kind and its evidence, or why nothing was."""
        s = self.summary
        if s.check == "skipped":
            return f"not checked: {s.reason}"
        text = f"{s.check} checked on {s.partitions} partitions, {s.versions_read} versions read"
        if s.backend != "native":
            text += f" (read by {s.backend})"
        tk = s.timeout_kind
        if tk is not None:
            text += f"; timeout kind {tk.timeout_kind or 'unknown'} ({tk.source}: {tk.evidence})"
        if len(self.examples) < self.total_findings:
            text += (
                f"; listing the {len(self.examples):,} most overdue of {self.total_findings:,} keys "
                "(statelens expired lists them all)"
            )
        return text


@dataclass
class ExpiredOverview:
    """Every store's :class:`StoreExpiry`, the latest-version result and the problems met."""

    stores: list[StoreExpiry]
    result: ExpiredResult
    problems: list[StatelensError] = field(default_factory=list)

    def store(self, operator_id: int, store_name: str) -> StoreExpiry | None:
        return next(
            (s for s in self.stores if (s.operator_id, s.store_name) == (operator_id, store_name)), None
        )

    def findings_per_store(self) -> dict[tuple[int, str], int]:
        """Findings of each store analysed (all of them, not only the examples listed)."""
        return {(s.operator_id, s.store_name): s.total_findings for s in self.stores}


def order_stores(
    keys: Sequence[tuple[int, str]],
    findings: Mapping[tuple[int, str], int],
    sizes: Mapping[tuple[int, str], int],
    groups: Mapping[tuple[int, str], str] | None = None,
    rows_sides: Collection[tuple[int, str]] = (),
) -> list[tuple[int, str]]:
    """Stores for a picker: the most findings first, then by rows, largest first.

    Parameters
    ----------
    keys : sequence of (int, str)
        ``(operator_id, store_name)`` of the stores, in the checkpoint's order.
    findings : mapping
        Findings per store (missing: none).
    sizes : mapping
        Bytes (or rows) per store: how much it holds.
    groups : mapping, optional
        Group of a store (e.g. a transformWithState operator's state variables). Stores of one group
        stay together: a group ranks by its best store, and its stores by theirs within it.
    rows_sides : collection, optional
        Stores holding a join's buffered rows (``keyWithIndexToValue``): they rank before bigger
        stores that only index them (``LoadedCheckpoint.rows_sides``), as the browser's default store.

    Returns
    -------
    list of (int, str)
        ``keys`` reordered; ties keep ``keys``' order.
    """
    groups = groups or {}
    rows = frozenset(rows_sides)

    def group(key: tuple[int, str]) -> Any:
        return groups.get(key) or key

    def weight(key: tuple[int, str]) -> tuple[int, bool, int]:
        return findings.get(key, 0), key in rows, sizes.get(key, 0)

    best: dict[Any, tuple[int, bool, int]] = {}
    first: dict[Any, int] = {}
    for i, key in enumerate(keys):
        g = group(key)
        best[g] = max(best.get(g, (0, False, 0)), weight(key))
        first.setdefault(g, i)
    position = {key: i for i, key in enumerate(keys)}

    def rank(key: tuple[int, str]) -> tuple[Any, ...]:
        f, r, size = best[group(key)]
        own = weight(key)
        return (-f, not r, -size, first[group(key)], -own[0], not own[1], -own[2], position[key])

    return sorted(keys, key=rank)


def iter_expired_overview(
    ckpt: Any,
    *,
    stale_after: int | None = None,
    timeout_kind: str | None = None,
    cancelled: Callable[[], bool] | None = None,
    max_examples: int | None = None,
    backends: Any = None,
) -> Generator[Progress, None, ExpiredOverview]:
    """Run the expired-keys analysis and arrange it per store: counts over versions, keys at the latest.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    stale_after, timeout_kind, max_examples, backends
        As for :func:`app.analysis.expired.iter_expired` (None uses its default).
    cancelled : callable, optional

    Yields
    ------
    Progress

    Returns
    -------
    ExpiredOverview
        ``result`` is what ``iter_expired`` gives without ``all_versions``: exact counts at each
        partition's latest version and the most overdue findings there as examples (all of them up to
        ``max_examples`` per store and category); earlier versions are counted, not listed.
    """
    kwargs: dict[str, Any] = {"timeout_kind": timeout_kind, "cancelled": cancelled, "backends": backends}
    if stale_after is not None:
        kwargs["stale_after"] = stale_after
    if max_examples is not None:
        kwargs["max_examples"] = max_examples
    # Earlier versions are only counted (no keys decoded, no findings kept), the latest ones counted
    # exactly with a capped list of examples: memory does not grow with the number of findings.
    earlier: Counter[tuple[int, str, int, str]] = Counter()
    result = yield from iter_expired(ckpt, version_counts=earlier, **kwargs)
    return arrange_expired(ckpt, result, earlier)


def arrange_expired(
    ckpt: Any, result: ExpiredResult, earlier: Counter[tuple[int, str, int, str]]
) -> ExpiredOverview:
    """Arrange a run of :func:`app.analysis.expired.iter_expired` (with ``version_counts=earlier``, not
    ``all_versions``) per store, as :func:`iter_expired_overview` does.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    result : ExpiredResult
    earlier : Counter
        The run's ``version_counts``.

    Returns
    -------
    ExpiredOverview
    """
    by_store: dict[tuple[int, str], list[ExpiredFinding]] = {}
    for f in result.examples:
        by_store.setdefault((f.operator_id, f.store_name), []).append(f)
    stores: list[StoreExpiry] = []
    for summary in result.operators:
        key = (summary.operator_id, summary.store_name)
        tally = result.store_tally(*key)
        st = ckpt.operator(summary.operator_id).store(summary.store_name)
        pids = list(st.partitions)
        counted = {(v, c): n for (op, name, v, c), n in earlier.items() if (op, name) == key}
        versions = sorted(set(st.versions) | {v for _, v, _ in tally} | {v for v, _ in counted})
        col = {v: i for i, v in enumerate(versions)}
        counts = {c: [0] * len(versions) for c in CATEGORIES}
        for (v, c), n in counted.items():
            counts[c][col[v]] += n
        pcol = {p: i for i, p in enumerate(pids)}
        pcounts = {c: [0] * len(pids) for c in CATEGORIES}
        for (pid, v, c), n in tally.items():
            counts[c][col[v]] += n
            if pid in pcol:
                pcounts[c][pcol[pid]] += n
        unreadable = sorted(
            {
                int(e.context["partition_id"])
                for e in result.problems
                if "partition_id" in e.context
                and e.context.get("operator_id", summary.operator_id) == summary.operator_id
                and e.context.get("store_name", summary.store_name) == summary.store_name
            }
        )
        stores.append(
            StoreExpiry(
                summary.operator_id,
                summary.store_name,
                versions,
                counts,
                pids,
                pcounts,
                by_store.get(key, []),
                summary,
                sum(tally.values()),
                unreadable,
            )
        )
    return ExpiredOverview(stores, result, result.problems)


def findings_table(
    findings: Sequence[ExpiredFinding],
    time_text: Callable[[int | None], str] = format_epoch_ms,
    zone: str = "UTC",
) -> tuple[list[str], list[Sequence[str]], list[Sequence[Any]]]:
    """Display columns of findings (plain text) and their sort keys.

    Parameters
    ----------
    findings : sequence of ExpiredFinding
    time_text : callable, optional
        Epoch milliseconds to text for the timeout and threshold columns (UTC by default; the GUI
        passes its local-or-UTC setting).
    zone : str
        The zone ``time_text`` shows, for the first time column's header (``UTC``, ``local, UTC+01:00``).

    Returns
    -------
    headers, columns, sort_keys
        For :class:`viewers.tables.ColumnTableModel`.
    """
    specs = [
        ColumnSpec("category", lambda f: f.category, str, False),
        ColumnSpec("store", lambda f: f.store_name, str, False),
        ColumnSpec("partition", lambda f: f.partition, str, True),
        ColumnSpec("key", lambda f: f.key, key_text, False),
        ColumnSpec(f"timeout / event time ({zone})", lambda f: f.timeout_ms, time_text, True),
        # The zone is said once, in the first time column: the three are in the same zone.
        ColumnSpec("stored timeout", lambda f: f.stored_timeout_ms, time_text, True),
        ColumnSpec("threshold", lambda f: f.threshold_ms, time_text, True),
        ColumnSpec("age (batches)", lambda f: f.age_batches, lambda v: "" if v is None else f"{v:,}", True),
        ColumnSpec("age (time)", lambda f: f.age_ms, format_duration_ms, True),
        ColumnSpec("expired in batch", lambda f: f.batch_id, str, True),
        ColumnSpec("version", lambda f: f.version, str, True),
        ColumnSpec("note", lambda f: f.note, str, False),
    ]
    columns: list[Sequence[str]] = []
    sort_keys: list[Sequence[Any]] = []
    for spec in specs:
        col = DisplayColumn(findings, spec.getter, spec.formatter)
        if spec.header == "expired in batch":  # an overdue key's batch has not run: say so
            col = DisplayColumn(findings, lambda f: f, lambda f: batch_text(f.category, f.batch_id))
        columns.append(col)
        sort_keys.append(ValueColumn(findings, spec.getter) if spec.numeric else col)
    return [s.header for s in specs], columns, sort_keys


# -- a key's history -----------------------------------------------------------------------------------
@dataclass
class KeyHistory:
    """One key of one store partition across its versions.

    Attributes
    ----------
    key : JsonObject
        The key in the JSON form of ``statelens rows``.
    headers, columns, sort_keys
        The table: ``version``, ``batch``, ``change``, then the value's fields.
    versions : list of int
        Versions at which the key is in the state.
    changes : list of str
        Per table row (``row_versions`` gives its version): ``added``, ``updated``, ``rewritten (same value)``, ``unchanged``, ``removed``,
        or ``present (state rebuilt)`` after a snapshot-only or unreadable step.
    versions_read : int
    problems : list of StatelensError
    """

    operator_id: int
    store_name: str
    partition_id: int
    key: Any
    headers: list[str]
    columns: list[Sequence[str]]
    sort_keys: list[Sequence[Any]]
    versions: list[int]
    changes: list[str]
    row_versions: list[int] = field(default_factory=list)
    versions_read: int = 0
    problems: list[StatelensError] = field(default_factory=list)

    @property
    def key_text(self) -> str:
        return key_text(self.key)

    def describe(self) -> str:
        """One line for the status: where the key was seen."""
        where = f"operator {self.operator_id} {self.store_name}, partition {self.partition_id}"
        if not self.versions:
            return f"key {self.key_text} not found in {where} ({self.versions_read} versions read)"
        n = Counter(self.changes)
        parts = [f"{n[c]} {c}" for c in ("added", "updated", "rewritten (same value)", "removed") if n.get(c)]
        return (
            f"key {self.key_text} in {where}: present in {len(self.versions)} of {self.versions_read} versions "
            f"({self.versions[0]}–{self.versions[-1]})" + (f"; {', '.join(parts)}" if parts else "")
        )


def _identity(x: Any) -> Any:
    return x


def _value_text(spec: ColumnSpec) -> Callable[[Any], str]:
    """Display text of a value field; a removed row has no value: empty, not "null"."""
    get, fmt = spec.getter, spec.formatter

    def text(record: Any) -> str:
        return "" if record.value is None else fmt(get(record))

    return text


class _HistoryRow:
    __slots__ = ("version", "change", "partition_id", "key", "value")

    def __init__(self, version: int, change: str, partition_id: int, key: Any, value: Any):
        self.version = version
        self.change = change
        self.partition_id = partition_id
        self.key = key
        self.value = value


def iter_key_history(
    scan: StateScan,
    partition_id: int,
    key: Any,
    time_columns: Sequence[Any] = (),
    batch_times: dict[int, tuple[int | None, int | None]] | None = None,
    cancelled: Callable[[], bool] | None = None,
    time_text: Callable[[int | None], str] = format_epoch_ms,
    zone: str = "UTC",
) -> Generator[Progress, None, KeyHistory]:
    """Follow one key through every readable version of one store partition (the partition's replay,
    :meth:`readers.scan.StateScan.iter_replay`).

    Keys are matched on their raw UnsafeRow bytes once found: each distinct key of the partition is
    decoded at most once (until the key is found), and its value only when its bytes change.

    Parameters
    ----------
    scan : readers.scan.StateScan
        The store's scan (its backend, operator and store name), on a backend that reads files.
    partition_id : int
    key : tuple or JsonObject
        The decoded key (positional tuple) or its JSON form.
    time_columns : sequence of readers.model.TimeColumn
        Value time columns (timeouts) show as UTC times.
    batch_times : dict, optional
        ``batch_id -> (timestamp_ms, watermark_ms)`` from the offsets log: adds the start and the
        watermark of the batch that wrote each version (to read timeouts against).
    cancelled : callable, optional
    time_text : callable, optional
        Epoch milliseconds to text for the batch start and watermark columns (UTC by default).
        Values decoded from the state (timeouts included) stay in UTC.
    zone : str
        The zone ``time_text`` shows, for the headers.

    Yields
    ------
    Progress

    Returns
    -------
    KeyHistory

    Raises
    ------
    UsageError
        Unknown partition.
    SchemaMismatchError
        The store has no schema.
    """
    schema = _require_schema(scan)
    if partition_id not in scan.partition_ids():
        raise UsageError(
            f"store {scan.store_name!r} of operator {scan.operator_id} has no partition {partition_id}"
        )
    replay = dataclasses.replace(scan, kind="replay", partitions=[partition_id], cancelled=cancelled)
    convert = row_converter(schema.key_schema)
    target = convert(key) if isinstance(key, tuple) else key
    checked: set[bytes] = set()
    raw_key: bytes | None = None
    decoded_key: Any = None
    prev_value: bytes | None = None
    prev_decoded: Any = None
    rows: list[_HistoryRow] = []
    total = len(scan.versions(partition_id))
    last_tick = time.monotonic()
    read = 0
    for n, step in enumerate(replay.iter_replay()):
        v, state, changes = step.version, step.state, step.changes
        read += 1
        if time.monotonic() - last_tick > 0.1:
            last_tick = time.monotonic()
            yield Progress(n, total, f"following the key through version {v}")
        if raw_key is None:
            cands = [
                k
                for k, val in (changes if changes is not None else state.items())
                if val is not None and k not in checked and k in state
            ]
            checked.update(cands)
            for start in range(0, len(cands), 10_000):
                chunk = cands[start : start + 10_000]
                for raw, (dk, _) in zip(
                    chunk, replay.decode(partition_id, [(k, None) for k in chunk]), strict=True
                ):
                    if convert(dk) == target:
                        raw_key, decoded_key = raw, dk
                        break
                if raw_key is not None:
                    break
            if raw_key is None:
                continue
            checked.clear()
        value = state.get(raw_key)
        if value is None:
            if prev_value is not None:
                rows.append(_HistoryRow(v, "removed", partition_id, decoded_key, None))
            prev_value, prev_decoded = None, None
            continue
        written = changes is not None and any(k == raw_key for k, _ in changes)
        if prev_value is None:
            change = "added" if changes is not None or not rows else "present (state rebuilt)"
        elif changes is None:
            change = "present (state rebuilt)"
        elif written:
            change = "updated" if value != prev_value else "rewritten (same value)"
        else:
            change = "unchanged"
        if value != prev_value or prev_decoded is None:
            prev_decoded = replay.decode(partition_id, [(raw_key, value)], v)[0][1]
        prev_value = value
        rows.append(_HistoryRow(v, change, partition_id, decoded_key, prev_decoded))
    yield Progress(total, total, "key history")
    value_specs = [
        s for s in state_columns(schema, scan.store_name or "", time_columns) if s.header.startswith("value.")
    ]
    # Time columns (the timeout) first: they are what a history is read for, next to the watermark.
    value_specs.sort(key=lambda spec: spec.unit is None)
    specs = [
        ColumnSpec("version", lambda r: r.version, str, True),
        ColumnSpec("batch", lambda r: r.version - 1, str, True),
    ]
    if batch_times:
        times = batch_times
        specs += [
            ColumnSpec(
                f"batch start ({zone})", lambda r: times.get(r.version - 1, (None, None))[0], time_text, True
            ),
            ColumnSpec(
                f"batch watermark ({zone})",
                lambda r: times.get(r.version - 1, (None, None))[1],
                lambda ms: "0 (none yet)" if ms == 0 else time_text(ms),
                True,
            ),
        ]
    specs += [ColumnSpec("change", lambda r: r.change, str, False), *value_specs]
    columns: list[Sequence[str]] = []
    sort_keys: list[Sequence[Any]] = []
    for spec in specs:
        if spec.header.startswith("value."):
            col = DisplayColumn(rows, _identity, _value_text(spec))
        else:
            col = DisplayColumn(rows, spec.getter, spec.formatter)
        columns.append(col)
        sort_keys.append(ValueColumn(rows, sort_getter(spec)) if spec.numeric else col)
    return KeyHistory(
        scan.operator_id,
        scan.store_name or "",
        partition_id,
        target,
        [s.header for s in specs],
        columns,
        sort_keys,
        [r.version for r in rows if r.change != "removed"],
        [r.change for r in rows],
        [r.version for r in rows],
        read,
        replay.problems,
    )


# -- schemas -------------------------------------------------------------------------------------------
@dataclass
class SchemaVersion:
    """One schema file of one store and what changed from the previous one.

    Attributes
    ----------
    from_batch : int or None
        The batch that wrote it (v3 files are named ``<batch>_<uuid>``); None for v1/v2 files.
    changes : list of str
        ``key: added field x long``... compared with the previous file (empty for the first).
    """

    operator_id: int
    store_name: str
    path: str
    from_batch: int | None
    schema: StoreSchema
    changes: list[str] = field(default_factory=list)


def _leaves(struct: Any, prefix: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for f in list(getattr(struct, "fields", None) or []):
        name = f"{prefix}.{f.name}"
        if getattr(f.dataType, "fields", None) is not None:
            out.extend(_leaves(f.dataType, name))
        else:
            out.append((name, f.dataType.simpleString()))
    return out


def schema_changes(old: StoreSchema, new: StoreSchema) -> list[str]:
    """What changed between two schemas of one store, one line per field (repeated names kept apart).

    Parameters
    ----------
    old, new : readers.model.StoreSchema

    Returns
    -------
    list of str
    """
    out: list[str] = []
    for side in ("key", "value"):
        a = _leaves(getattr(old, f"{side}_schema"), side)
        b = _leaves(getattr(new, f"{side}_schema"), side)
        if a == b:
            continue

        # Compare by position among fields of the same name: aggregation buffers repeat names.
        def keyed(items: list[tuple[str, str]]) -> dict[tuple[str, int], str]:
            seen: Counter[str] = Counter()
            out_: dict[tuple[str, int], str] = {}
            for name, t in items:
                out_[(name, seen[name])] = t
                seen[name] += 1
            return out_

        ka, kb = keyed(a), keyed(b)
        for k in kb:
            if k not in ka:
                out.append(f"added {k[0]} {kb[k]}")
            elif ka[k] != kb[k]:
                out.append(f"changed {k[0]} {ka[k]} -> {kb[k]}")
        for k in ka:
            if k not in kb:
                out.append(f"removed {k[0]} {ka[k]}")
        if not out or [n for n, _ in a] != [n for n, _ in b] and sorted(a) == sorted(b):
            out.append(f"{side} fields reordered")
    return out


def read_schema_history(ckpt: Any) -> tuple[list[SchemaVersion], list[StatelensError]]:
    """Every schema file of every store, oldest first, each with its changes from the previous one.

    v1/v2 stores keep one ``_metadata/schema`` per store; v3 (``_stateSchema/<store>/<batch>_<uuid>``)
    writes a new file when the query restarts with another schema.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    versions : list of SchemaVersion
    problems : list of StatelensError
        Schema files that could not be read.
    """

    out: list[SchemaVersion] = []
    problems: list[StatelensError] = []
    for op in ckpt.operators:
        for st in op.stores:
            physical = ckpt.physical_store(op.operator_id, st.store_name)  # column families: their store
            sub = "" if physical == "default" else f"/{physical}"
            found: list[tuple[int | None, str, StoreSchema]] = []
            legacy = f"state/{op.operator_id}/0{sub}/_metadata/schema"
            try:
                if ckpt.fs.exists(legacy):
                    found.append(
                        (None, legacy, schemas.parse_schema_file(ckpt.fs.read_bytes(legacy), legacy))
                    )
                v3_dir = f"state/{op.operator_id}/_stateSchema/{physical}"
                files = [e for e in ckpt.fs.list_dir(v3_dir) if not e.is_dir and not e.name.startswith(".")]
            except StatelensError as err:
                problems.append(err)
                files = []
            for e in sorted(files, key=lambda e: (_batch_of(e.name) is None, _batch_of(e.name) or 0, e.name)):
                try:
                    families = schemas.parse_schema_v3(ckpt.fs.read_bytes(e.path), e.path)
                except StatelensError as err:
                    problems.append(err)
                    continue
                sch = (
                    families.get(st.store_name)
                    or families.get("default")
                    or next(iter(families.values()), None)
                )
                if sch is not None:
                    found.append((_batch_of(e.name), e.path, sch))
            if not found and st.schema is not None:
                found.append((None, st.schema.path, st.schema))
            prev: StoreSchema | None = None
            for batch, path, sch in found:
                changes = schema_changes(prev, sch) if prev is not None else []
                out.append(SchemaVersion(op.operator_id, st.store_name, path, batch, sch, changes))
                prev = sch
    return out, problems


def _batch_of(name: str) -> int | None:
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


# -- conf ----------------------------------------------------------------------------------------------
def conf_changes(batches: Sequence[BatchInfo]) -> dict[int, dict[str, tuple[str | None, str | None]]]:
    """Conf keys whose value differs from the previous batch's offsets file, per batch.

    Parameters
    ----------
    batches : sequence of readers.model.BatchInfo

    Returns
    -------
    dict
        ``batch_id -> {key: (before, after)}`` for batches whose conf differs from the last batch
        before them that had one (batches without an offsets file are skipped).
    """
    out: dict[int, dict[str, tuple[str | None, str | None]]] = {}
    prev: dict[str, str] | None = None
    for b in batches:
        conf = b.offsets.conf if b.offsets is not None else None
        if not conf:
            continue
        if prev is not None:
            diff = {
                k: (prev.get(k), conf.get(k))
                for k in sorted(set(prev) | set(conf))
                if prev.get(k) != conf.get(k)
            }
            if diff:
                out[b.batch_id] = diff
        prev = conf
    return out

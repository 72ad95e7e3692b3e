"""The heaviest keys of every store: which keys dominate the state (the first question of every
out-of-memory post-mortem).

For one version of each store, every partition's state is read raw (key and value bytes, no decoding) and
each key is weighed by its encoded bytes, key plus value, as the state store holds them. A list or map
state variable of transformWithState (and a multi-value join family of state format 4) is weighed per
*grouping key*: the bytes of all its elements (list elements, or map entries) together, with their count
in ``elements``. Only the keys that make the top ``n`` of a partition are decoded, so the cost is one
read of each partition's state, like ``growth`` at one version; memory is one partition's raw state.

Stores read by Spark (``--backend spark``) are weighed inside Spark where their weight is the UnsafeRow
size of the decoded key and value (:mod:`app.analysis.heavy_spark`, exact); the others (transformWithState
column families, state format 4 joins) natively where the native decoder can read them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from statelens.app.analysis._common import key_text
from statelens.app.analysis.heavy_spark import top_keys_in_spark, weight_sql
from statelens.readers.arrow_values import binary_array, numbers
from statelens.readers.backends import native_backend
from statelens.readers.errors import BackendUnavailableError, StatelensError, UsageError
from statelens.readers.model import OperatorKind, Progress
from statelens.readers.scan import StateScan
from statelens.readers.values import row_to_json

#: Keys listed per partition and per store unless asked otherwise.
DEFAULT_TOP_KEYS = 10


@dataclass(frozen=True)
class HeavyKey:
    """One key of a store and what it weighs at one version.

    ``key`` is the decoded key as a JSON-ready object (Spark's field names, ``readers.values``);
    ``bytes`` the encoded key plus value bytes (for a grouping key of list/map state, of all its
    elements); ``elements`` the number of list elements or map entries, ``None`` for single values.
    """

    partition_id: int
    key: Any
    bytes: int
    elements: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition_id,
            "key": self.key,
            "bytes": self.bytes,
            "elements": self.elements,
        }

    @property
    def key_text(self) -> str:
        return key_text(self.key)


@dataclass
class StoreTopKeys:
    """The heaviest keys of one store at one version, overall and per partition."""

    operator_id: int
    store_name: str
    version: int | None
    grouping: str | None  # what ``elements`` counts: "list" elements, "map" entries, join "values", or None
    overall: list[HeavyKey] = field(default_factory=list)
    by_partition: dict[int, list[HeavyKey]] = field(default_factory=dict)
    keys: int = 0  # keys (grouping keys) weighed, over all partitions
    skipped: str = ""
    weighed_in_spark: bool = False  # a Spark query weighed the keys (heavy_spark): only the top came back

    def to_json(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "version": self.version,
            "batch_id": None if self.version is None else self.version - 1,
            "keys": self.keys,
            "elements_of": self.grouping,
            "top_keys": [k.to_json() for k in self.overall],
            "top_keys_by_partition": {
                str(p): [k.to_json() for k in ks] for p, ks in sorted(self.by_partition.items())
            },
            "skipped": self.skipped or None,
        }


def _top_of_arrays(
    buf: bytes, ks: Any, kl: Any, vs: Any, vl: Any, n: int
) -> list[tuple[int, int | None, bytes, bytes | None]]:
    """The ``n`` heaviest ``(bytes, None, raw key, raw value)`` of an ungrouped state held as offset arrays,
    heaviest first; of keys tied in weight the smallest key bytes (sorted by Arrow)."""
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    count = len(ks)
    if not count:
        return []
    sizes = np.asarray(kl, dtype=np.int64) + np.asarray(vl, dtype=np.int64)
    take = min(n, count)
    chosen = np.arange(count)
    if take < count:
        cut = np.partition(sizes, count - take)[count - take]
        above = np.flatnonzero(sizes > cut)
        tied = np.flatnonzero(sizes == cut)
        need = take - len(above)
        tied_keys = binary_array(buf, ks[tied], kl[tied])
        smallest = numbers(pc.select_k_unstable(tied_keys, k=need, sort_keys=[("key", "ascending")]))
        chosen = np.concatenate([above, tied[smallest]])
    out: list[tuple[int, int | None, bytes, bytes | None]] = [
        (int(sizes[i]), None, buf[ks[i] : ks[i] + kl[i]], buf[vs[i] : vs[i] + vl[i]]) for i in chosen.tolist()
    ]
    out.sort(key=lambda t: (-t[0], t[2]))
    return out


def _top_of_state(
    raw: dict[bytes, bytes], n: int, group: Callable[[bytes], bytes], list_like: bool = True
) -> tuple[list[tuple[int, int | None, bytes, bytes | None]], int]:
    """The ``n`` heaviest ``(bytes, elements, raw key, raw value)`` grouping keys of one partition's raw
    state of list or map state (or join values), and their count. Keys of equal weight rank by their key
    bytes, whatever order the state was built in; the raw key and value are those of the group's first
    element (enough to decode the grouping key).
    """
    # A list is stored as one key and its elements; every map entry is a key of its own (grouping key +
    # user key) with its value. Flat list keys end in a 4-byte position that is not stored.
    entry_key_bytes = not list_like
    groups: dict[bytes, list[Any]] = {}
    for key, value in raw.items():
        size = len(value) + (len(key) if entry_key_bytes else 0)
        g = groups.get(gk := group(key))
        if g is None:
            groups[gk] = [size + (0 if entry_key_bytes else len(gk)), 1, key, value]
        else:
            g[0] += size
            g[1] += 1
    top = heapq.nsmallest(n, groups.values(), key=lambda g: (-g[0], group(g[2])))  # ties by key bytes
    return [(int(g[0]), int(g[1]), g[2], g[3]) for g in top], len(groups)


class StoreWeigher:
    """Weighs the keys of one store partition by partition, from the live records handed to it (a read of
    one version, or the last state of ``growth``'s count), keeping only each partition's top ``n`` decoded.

    Parameters
    ----------
    scan : readers.scan.StateScan
        A scan of the store on a backend that reads its records as stored (it groups and decodes the
        chosen keys); the store's schema must be known.
    n : int
        Keys kept per partition and per store.
    """

    def __init__(self, scan: StateScan, n: int):
        if n < 1:
            raise ValueError(f"top keys: n must be at least 1, not {n}")
        self.scan = scan
        self.n = n
        self.kind, self.group = scan.element_grouping()
        schema = scan.schema
        if schema is None:
            raise UsageError("no schema file: keys cannot be decoded")
        key_schema = schema.key_schema
        if self.kind == "map":  # the grouping key is the key's first numColsPrefixKey columns
            from pyspark.sql.types import StructType  # deferred: pyspark (heavy)

            prefix = int((schema.key_encoder or {}).get("numColsPrefixKey", 1))
            key_schema = StructType(key_schema.fields[:prefix])
        self.key_schema = key_schema
        self._parts: dict[int, tuple[int, int, list[HeavyKey]]] = {}  # pid -> (version, keys, top)

    def weigh(self, partition_id: int, version: int, live: tuple[Any, Any, Any, Any, Any]) -> None:
        """Weigh one partition's live records at ``version``, as one buffer and offset arrays ``(buffer,
        key_start, key_len, value_start, value_len)``: only the chosen keys become Python bytes (list and
        map state are grouped per key in Python). Raises StatelensError when a key cannot be decoded."""
        buf, ks, kl, vs, vl = live
        if self.group is not None:
            raw = {buf[a : a + b]: buf[c : c + d] for a, b, c, d in zip(ks, kl, vs, vl, strict=True)}
            top, count = _top_of_state(raw, self.n, self.group, self.kind != "map")
        else:
            top, count = _top_of_arrays(buf, ks, kl, vs, vl, self.n), len(ks)
        kind = self.kind
        decoded = self.scan.decode(partition_id, [(k, v) for _, _, k, v in top], version)
        ncols = len(self.key_schema.fields)  # map state: the grouping key is the key's first columns
        self._parts[partition_id] = (
            version,
            count,
            [
                HeavyKey(
                    partition_id,
                    row_to_json(key[:ncols] if kind == "map" else key, self.key_schema),
                    size,
                    elements,
                )
                for (size, elements, _, _), (key, _) in zip(top, decoded, strict=True)
            ],
        )

    def result(self, version: int | None = None) -> StoreTopKeys:
        """The store's top keys at ``version`` (default: the newest version weighed): partitions weighed
        at another version are left out."""
        chosen = (
            version if version is not None else max((v for v, _, _ in self._parts.values()), default=None)
        )
        out = StoreTopKeys(self.scan.operator_id, str(self.scan.store_name), chosen, self.kind)
        for pid in sorted(self._parts):
            v, count, heavy = self._parts[pid]
            if v != chosen:
                continue
            out.keys += count
            out.by_partition[pid] = heavy
        out.overall = merge_top(out.by_partition, self.n)
        return out


def iter_top_keys(
    ckpt: Any,
    n: int = DEFAULT_TOP_KEYS,
    version: int | None = None,
    cancelled: Callable[[], bool] | None = None,
    only: tuple[int, str] | None = None,
    backends: Any = None,
) -> Generator[Progress, None, tuple[list[StoreTopKeys], list[StatelensError]]]:
    """The ``n`` heaviest keys of every store, per partition and overall, at one version.

    Stores that ``backends`` reads with Spark are weighed inside Spark where the weight is the UnsafeRow
    size (:mod:`app.analysis.heavy_spark`): only each partition's top keys come back.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    n : int
        Keys kept per partition and per store.
    version : int, optional
        State version to weigh (default: each store's latest readable version).
    cancelled : callable, optional
        Polled between partitions.
    only : (int, str), optional
        Weigh this ``(operator_id, store_name)`` only.
    backends : readers.backends.BackendChooser, optional
        Which stores Spark reads (default: every store weighed natively).

    Yields
    ------
    Progress

    Returns
    -------
    tuple
        One :class:`StoreTopKeys` per store, and the problems met (files that could not be read; the
        partition is left out and the rest is still weighed).
    """
    if n < 1:
        raise ValueError(f"top keys: n must be at least 1, not {n}")
    problems: list[StatelensError] = []
    out: list[StoreTopKeys] = []
    jobs = [
        (op, st)
        for op in ckpt.operators
        for st in op.stores
        if only is None or (op.operator_id, st.store_name) == only
    ]
    native = native_backend(ckpt)
    for done, (op, st) in enumerate(jobs):
        yield Progress(done, len(jobs), f"heaviest keys: operator {op.operator_id} {st.store_name}")
        result = StoreTopKeys(op.operator_id, st.store_name, None, None)
        out.append(result)
        in_spark = yield from _top_keys_in_spark(op, st, n, version, backends, problems)
        if in_spark is not None:
            out[-1] = in_spark
            continue
        scan = StateScan(native, op.operator_id, st.store_name, cancelled=cancelled)
        try:
            result.grouping = scan.element_grouping()[0]
        except BackendUnavailableError as err:
            result.skipped = err.message
            continue
        versions = {pid: scan.versions(pid) for pid in scan.partition_ids()}
        chosen = version if version is not None else max((v[-1] for v in versions.values() if v), default=0)
        result.version = chosen or None
        if not chosen:
            result.skipped = "no readable version"
            continue
        if scan.schema is None:
            result.skipped = "no schema file: keys cannot be decoded"
            continue
        weigher = StoreWeigher(scan, n)
        holding = [pid for pid, v in versions.items() if chosen in v]  # older partitions are left out
        scan = replace(scan, version=chosen, partitions=holding)
        try:
            for pid, _, live in scan.iter_live():  # as stored: only the chosen keys are decoded
                yield Progress(
                    done, len(jobs), f"heaviest keys: operator {op.operator_id} {st.store_name} p{pid}"
                )
                try:
                    weigher.weigh(pid, chosen, live)
                except StatelensError as err:  # a key that cannot be decoded
                    problems.append(err)
        except StatelensError as err:  # the one partition asked for cannot be read
            problems.append(err)
        problems.extend(scan.problems)
        if cancelled is not None and cancelled():
            return out, problems
        out[-1] = weigher.result(chosen)
    yield Progress(len(jobs), len(jobs), "heaviest keys")
    return out, problems


def _top_keys_in_spark(
    op: Any, st: Any, n: int, version: int | None, backends: Any, problems: list[StatelensError]
) -> Generator[Progress, None, StoreTopKeys | None]:
    """One store's heaviest keys weighed by a Spark query, or None when Spark does not read this store or
    its weight is not the UnsafeRow size (the native weighing runs instead)."""

    backend = backends.for_store(op.operator_id, st.store_name) if backends is not None else None
    if backend is None or not backend.capabilities.engine_queries:
        return None
    encoder = str(((st.schema.key_encoder or {}) if st.schema else {}).get("keyStateEncoderType", ""))
    if st.schema is None or op.kind == OperatorKind.TRANSFORM_WITH_STATE or encoder.startswith("TimestampAs"):
        return None  # column families, lists per grouping key, no schema: weighed natively

    sizes = weight_sql(st.schema)
    if sizes is None:
        return None
    chosen = version if version is not None else backend.latest_version(op.operator_id, st.store_name)
    result = StoreTopKeys(op.operator_id, st.store_name, chosen, None, weighed_in_spark=True)
    try:
        rows = yield from top_keys_in_spark(backend, op.operator_id, st.store_name, chosen, sizes, n)
    except StatelensError as err:
        problems.append(err)
        result.skipped = f"not weighed: {err.message}"
        return result
    for pid in sorted(st.partitions):
        result.by_partition[pid] = []
    counted: set[int] = set()
    for pid, key, size, keys in rows:
        result.by_partition.setdefault(pid, []).append(
            HeavyKey(pid, row_to_json(key, st.schema.key_schema), size, None)
        )
        if pid not in counted:
            counted.add(pid)
            result.keys += keys
    result.overall = merge_top(result.by_partition, n)
    return result


def merge_top(by_partition: dict[int, list[HeavyKey]], n: int) -> list[HeavyKey]:
    """The ``n`` heaviest of every partition's top keys: ties in partition order, then each one's own."""
    merged: list[tuple[int, int, HeavyKey]] = []
    for pid in sorted(by_partition):
        merged.extend((h.bytes, -len(merged), h) for h in by_partition[pid])
    return [h for _, _, h in heapq.nlargest(n, merged)]


def with_top_keys(records: list[dict[str, Any]], stores: list[StoreTopKeys]) -> list[dict[str, Any]]:
    """``growth --json`` records with the heaviest keys added.

    Each record of a weighed store's partition at the weighed version gains ``top_keys`` (that
    partition's heaviest keys), and every weighed store gets one more record with ``"partition_id":
    null``: all partitions at that version (``rows`` and ``bytes`` summed) with the store's overall
    ``top_keys`` and ``keys`` weighed.

    Parameters
    ----------
    records : list of dict
        ``growth`` records (``operator_id``, ``store_name``, ``version``, ``partition_id``, ``rows``,
        ``bytes``...).
    stores : list of StoreTopKeys

    Returns
    -------
    list of dict
    """
    weighed = {(s.operator_id, s.store_name): s for s in stores if s.version is not None and not s.skipped}
    out: list[dict[str, Any]] = []
    totals: dict[tuple[int, str], list[int]] = {}
    for r in records:
        s = weighed.get((r["operator_id"], r["store_name"]))
        if s is not None and r["version"] == s.version:
            r = {**r, "top_keys": [k.to_json() for k in s.by_partition.get(r["partition_id"], [])]}
            t = totals.setdefault((s.operator_id, s.store_name), [0, 0])
            t[0] += r["rows"]
            t[1] += r["bytes"]
        out.append(r)
    for (op, name), s in weighed.items():
        rows, nbytes = totals.get((op, name), [0, 0])
        out.append(
            {
                "operator_id": op,
                "store_name": name,
                "version": s.version,
                "batch_id": s.version - 1,  # type: ignore[operator]
                "partition_id": None,
                "rows": rows,
                "bytes": nbytes,
                "keys": s.keys,
                "elements_of": s.grouping,
                "top_keys": [k.to_json() for k in s.overall],
            }
        )
    return out

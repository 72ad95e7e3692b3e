"""What each store of a checkpoint holds, in words: transformWithState variables and Spark's internal
column families, join stores, and one line per operator for the Overview (Qt-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statelens.readers.model import OperatorInfo, OperatorKind, StoreInfo

#: Group of transformWithState stores the user declared (``getValueState``...), listed first.
GROUP_VARIABLES = "state variables"
#: Group of Spark's own column families of a transformWithState operator (``$ttl_*``, timers...).
GROUP_INTERNAL = "Spark's internal column families"

_TWS_TYPES = {
    "ValueState": "one value per grouping key",
    "ListState": "a list per grouping key, one row per element",
    "MapState": "a map per grouping key, one row per user key",
}
#: Prefix of an internal family -> (short text, description); ``{}`` is the variable it serves.
_TWS_INTERNAL = {
    "$ttl_": (
        "TTL index of {}",
        "(expiration ms, key) of every entry of {} with a TTL; Spark scans it to remove expired entries",
    ),
    "$min_": ("earliest TTL expiry of {}", "the earliest expiration (ms) among each key's elements of {}"),
    "$count_": ("TTL element count of {}", "the number of elements of {} per key, kept for its TTL"),
    "$rowCounter_": ("list size of {}", "the number of elements of the list {} per key"),
}
_TIMER_FAMILIES = {
    "$procTimers_keyToTimestamp": ("processing-time timers by key", "registered timers: (key, expiry ms)"),
    "$procTimers_timestampToKey": (
        "processing-time timers by time",
        "registered timers: (expiry ms, key), the order Spark fires them in",
    ),
    "$eventTimers_keyToTimestamp": ("event-time timers by key", "registered timers: (key, expiry ms)"),
    "$eventTimers_timestampToKey": (
        "event-time timers by time",
        "registered timers: (expiry ms, key), the order Spark fires them in",
    ),
}
#: Join store suffix -> (short text, description) for ``left-``/``right-`` stores (every state format).
_JOIN_STORES = {
    "keyToNumValues": ("rows per key", "how many rows of this side each join key holds"),
    "keyWithIndexToValue": ("buffered rows by key and index", "the buffered input rows of this side"),
    "keyWithTsToValues": (
        "buffered rows by key and event time",
        "the buffered input rows of this side, keyed by join key and event time (µs)",
    ),
    "tsWithKey": ("keys by event time", "join keys ordered by event time (µs): the index Spark evicts with"),
}


@dataclass(frozen=True)
class StoreRole:
    """What one store holds, for labels and tooltips (transformWithState variables, join stores).

    Attributes
    ----------
    text : str
        Short: ``ValueState``, ``MapState · TTL``, ``internal: TTL index of ttlv``, ``left: rows per key``.
    description : str
        One sentence for tooltips.
    group : str or None
        :data:`GROUP_VARIABLES` or :data:`GROUP_INTERNAL` for transformWithState stores, else None.
    internal : bool
        One of Spark's own column families (``$...``), not declared by the user.
    column_family_of : str or None
        The RocksDB store this is a virtual column family of (None: a store of its own).
    """

    text: str
    description: str
    group: str | None = None
    internal: bool = False
    column_family_of: str | None = None


def store_role(op: OperatorInfo, store: StoreInfo, physical: str | None = None) -> StoreRole | None:
    """What a store of ``op`` holds, when there is more to say than its name (None otherwise).

    Parameters
    ----------
    op : readers.model.OperatorInfo
    store : readers.model.StoreInfo
    physical : str, optional
        The store folder it lives in (``Checkpoint.physical_store``): another name means a column family.

    Returns
    -------
    StoreRole or None
    """

    cf = physical if physical is not None and physical != store.store_name else None
    name = store.store_name
    if op.kind == OperatorKind.TRANSFORM_WITH_STATE:
        declared = {
            str(v.get("stateName")): v
            for v in op.properties.get("stateVariables") or []
            if isinstance(v, dict)
        }
        meta = declared.get(name, {})
        vtype = str(meta.get("stateVariableType") or "")
        if name in _TIMER_FAMILIES:
            short, long = _TIMER_FAMILIES[name]
            return StoreRole(f"internal: {short}", f"Spark's {short}: {long}", GROUP_INTERNAL, True, cf)
        if name.startswith("$"):
            for prefix, (short, long) in _TWS_INTERNAL.items():
                if name.startswith(prefix):
                    var = name[len(prefix) :]
                    return StoreRole(
                        f"internal: {short.format(var)}",
                        f"Spark's {long.format(var)}",
                        GROUP_INTERNAL,
                        True,
                        cf,
                    )
            return StoreRole("internal", "one of Spark's internal column families", GROUP_INTERNAL, True, cf)
        if vtype in _TWS_TYPES:
            ttl = bool(meta.get("ttlEnabled", False))
            text = vtype + (" · TTL" if ttl else "")
            description = f"{vtype} {name!r}: {_TWS_TYPES[vtype]}" + (
                "; entries expire after their TTL (ttlExpirationMs)" if ttl else ""
            )
            return StoreRole(text, description, GROUP_VARIABLES, False, cf)
        return StoreRole(
            "column family",
            f"column family {name!r} (not a declared state variable)",
            GROUP_INTERNAL,
            True,
            cf,
        )
    if op.kind == OperatorKind.JOIN:
        side, _, kind = name.partition("-")
        if side in ("left", "right") and kind in _JOIN_STORES:
            short, long = _JOIN_STORES[kind]
            return StoreRole(f"{side}: {short}", f"{side} side: {long}", None, False, cf)
    return None


def store_roles(ckpt: Any) -> dict[tuple[int, str], StoreRole]:
    """:func:`store_role` of every store of a checkpoint that has one.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    dict
        ``(operator_id, store_name) -> StoreRole``.
    """
    out: dict[tuple[int, str], StoreRole] = {}
    for op in ckpt.operators:
        for s in op.stores:
            role = store_role(op, s, ckpt.physical_store(op.operator_id, s.store_name))
            if role is not None:
                out[(op.operator_id, s.store_name)] = role
    return out


def describe_operator(op: OperatorInfo, conf: dict[str, str] | None = None) -> str:
    """One line on what a stateful operator is and what its stores hold (the Overview's State line).

    Parameters
    ----------
    op : readers.model.OperatorInfo
    conf : dict, optional
        The session conf (the join state format comes from it).

    Returns
    -------
    str
        e.g. ``operator 0: transformWithState (transformWithStateInPandasExec, timeMode ProcessingTime):
        4 state variables (cnt, ttll, ttlm, ttlv) and 8 internal column families``.
    """

    details = [op.operator_name] if op.operator_name and op.operator_name != op.kind.value else []
    stores = [s.store_name for s in op.stores]
    if op.kind == OperatorKind.TRANSFORM_WITH_STATE:
        mode = op.properties.get("timeMode")
        if mode:
            details.append(f"timeMode {mode}")
        user = [n for n in stores if not n.startswith("$")]
        internal = len(stores) - len(user)
        what = f"{len(user)} state variable{'s' if len(user) != 1 else ''} ({', '.join(user)})"
        if internal:
            what += f" and {internal} internal column famil{'ies' if internal != 1 else 'y'}"
    else:
        if op.kind == OperatorKind.JOIN and conf and conf.get("spark.sql.streaming.join.stateFormatVersion"):
            details.append(f"state format {conf['spark.sql.streaming.join.stateFormatVersion']}")
        what = f"{len(stores)} store{'s' if len(stores) != 1 else ''} ({', '.join(stores)})"
    head = f"operator {op.operator_id}: {op.kind.value}" + (f" ({', '.join(details)})" if details else "")
    return f"{head}: {what}"


def describe_state(ckpt: Any) -> list[str]:
    """Lines on the checkpoint's state for the Overview: each operator, then how rows are stored.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    list of str
        :func:`describe_operator` of each operator, then notes on row checksums and Avro encoding.
    """
    conf = dict(getattr(ckpt, "conf", {}) or {})
    lines = [describe_operator(op, conf) for op in ckpt.operators]
    if not ckpt.operators:
        return lines
    if conf.get("spark.sql.streaming.stateStore.rowChecksum.enabled", "").lower() == "true":
        lines.append(
            "row checksums on (stateStore.rowChecksum.enabled): every row's CRC-32C is checked while decoding"
        )
    if conf.get("spark.sql.streaming.stateStore.encodingFormat", "unsaferow") != "unsaferow":
        lines.append(
            f"state encoded as {conf['spark.sql.streaming.stateStore.encodingFormat']} "
            "(stateStore.encodingFormat)"
        )
    return lines

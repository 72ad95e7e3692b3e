"""Recognise what each stateful operator is and where it keeps its event time or timeout.

Follows ``docs/format.md`` §7 (per-operator layouts) and §8 (operator names in the
operator metadata written by Spark 4.0+). Checkpoints written before 4.0 have no operator metadata:
the kind is then inferred from store names and key/value schemas.
"""

from __future__ import annotations

from collections.abc import Sequence

from statelens.readers.model import FieldOutline, OperatorKind, StoreSchema, TimeColumn

#: operatorName written in operator metadata (§8.1) -> kind.
OPERATOR_NAMES: dict[str, OperatorKind] = {
    "stateStoreSave": OperatorKind.AGGREGATION,
    "dedupe": OperatorKind.DEDUPLICATION,
    "dedupeWithinWatermark": OperatorKind.DEDUPLICATION_WITHIN_WATERMARK,
    "flatMapGroupsWithState": OperatorKind.FLAT_MAP_GROUPS_WITH_STATE,
    "applyInPandasWithState": OperatorKind.APPLY_IN_PANDAS_WITH_STATE,
    "symmetricHashJoin": OperatorKind.JOIN,
    "sessionWindowStateStoreSaveExec": OperatorKind.SESSION_WINDOW,
    "globalLimit": OperatorKind.LIMIT,
    "transformWithStateExec": OperatorKind.TRANSFORM_WITH_STATE,
    "transformWithStateInPandasExec": OperatorKind.TRANSFORM_WITH_STATE,
    "transformWithStateInPySparkExec": OperatorKind.TRANSFORM_WITH_STATE,
}

JOIN_STORE_NAMES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)

WATERMARK_META = "spark.watermarkDelayMs"
WINDOW_META = "spark.timeWindow"
SESSION_WINDOW_META = "spark.sessionWindow"


def _names(fields: Sequence[FieldOutline]) -> list[str]:
    """Field names of a struct type, in order (names may repeat)."""
    return [f.name for f in fields]


def infer_kind(
    operator_name: str | None, store_names: Sequence[str], schemas: dict[str, StoreSchema]
) -> OperatorKind:
    """Name an operator's kind from its metadata name, else from its stores and schemas.

    Parameters
    ----------
    operator_name : str or None
        ``operatorName`` from ``state/<op>/_metadata`` (Spark 4.0+), if any.
    store_names : sequence of str
        Store folder names found on disk (``default`` or the four join stores).
    schemas : dict
        Store name to its schema, where a schema file was found.

    Returns
    -------
    OperatorKind
    """
    if operator_name:
        return OPERATOR_NAMES.get(operator_name, OperatorKind.UNKNOWN)
    if any(name in JOIN_STORE_NAMES for name in store_names):
        return OperatorKind.JOIN
    schema = schemas.get("default")
    if schema is None:
        return OperatorKind.UNKNOWN
    key, value = schema.key_fields, schema.value_fields
    vnames, knames = _names(value), _names(key)
    vtypes = [f.type_name for f in value]
    if vnames == ["__dummy__"]:
        return OperatorKind.DEDUPLICATION
    if vnames == ["expiresAtMicros"]:
        return OperatorKind.DEDUPLICATION_WITHIN_WATERMARK
    if vnames[:1] == ["groupState"] and vtypes[:1] == ["struct"] and vnames[1:] in ([], ["timeoutTimestamp"]):
        return OperatorKind.FLAT_MAP_GROUPS_WITH_STATE
    if vnames and vnames[-1] == "timeoutTimestamp":
        return OperatorKind.FLAT_MAP_GROUPS_WITH_STATE  # state format v1: flattened state + timeout
    ktypes = [f.type_name for f in key]
    if knames == ["key"] and ktypes == ["void"] and vnames == ["value"] and vtypes == ["long"]:
        # globalLimit's key is always a null of type void (§7.6); a grouping column named "key" with a
        # typed Aggregator's buffer ("value long") is an aggregation.
        return OperatorKind.LIMIT
    if knames and knames[-1] == "sessionStartTime":
        return OperatorKind.SESSION_WINDOW
    return OperatorKind.AGGREGATION


def _event_time_in(fields: Sequence[FieldOutline], store: str, side: str) -> list[TimeColumn]:
    """Fields tagged with the watermark delay, or a ``window`` struct (its ``end`` bounds eviction)."""
    out: list[TimeColumn] = []
    for i, f in enumerate(fields):
        meta, tname = f.metadata, f.type_name
        if meta.get(WINDOW_META) or (
            tname == "struct" and f.names == ["start", "end"] and WATERMARK_META in meta
        ):
            out.append(TimeColumn(store, side, (i, 1), f"{f.name}.end", "us", "event_time"))
        elif WATERMARK_META in meta and tname in ("timestamp", "timestamp_ntz", "long"):
            out.append(TimeColumn(store, side, (i,), f.name, "us" if tname != "long" else "ms", "event_time"))
    return out


def _session_end_in(fields: Sequence[FieldOutline], store: str) -> list[TimeColumn]:
    """The ``end`` of the session struct in a session-window value row (§7.5).

    Spark evicts a session when ``session_window.end <= watermark`` (``WatermarkSupport`` compares the
    struct's second field), evaluated on the *value* row. The key's ``sessionStartTime`` only orders the
    sessions of a group: a live session's start is routinely behind the watermark.
    """
    shaped = [i for i, f in enumerate(fields) if f.type_name == "struct" and f.names == ["start", "end"]]
    tagged = [i for i in shaped if SESSION_WINDOW_META in fields[i].metadata]
    tagged = tagged or [i for i in shaped if WATERMARK_META in fields[i].metadata]
    chosen = (tagged or shaped)[:1]  # schema files without field metadata: the (first) session struct
    return [TimeColumn(store, "value", (i, 1), f"{fields[i].name}.end", "us", "event_time") for i in chosen]


def find_time_columns(kind: OperatorKind, schemas: dict[str, StoreSchema]) -> list[TimeColumn]:
    """Where each kind keeps the time that decides eviction (event time) or timeouts.

    Aggregations and deduplication keep the event time (or a ``window``) in the key; joins keep it in
    the buffered input rows; dedup-within-watermark keeps ``expiresAtMicros``; session windows keep the
    session's ``end`` in the value row; (flat)MapGroupsWithState and applyInPandasWithState keep
    ``timeoutTimestamp`` (ms, ``-1`` = none) as the last value field.
    """
    out: list[TimeColumn] = []
    for store, schema in schemas.items():
        if kind in (OperatorKind.FLAT_MAP_GROUPS_WITH_STATE, OperatorKind.APPLY_IN_PANDAS_WITH_STATE):
            names = _names(schema.value_fields)
            if names and names[-1] == "timeoutTimestamp":
                out.append(TimeColumn(store, "value", (len(names) - 1,), "timeoutTimestamp", "ms", "timeout"))
            continue
        if kind == OperatorKind.DEDUPLICATION_WITHIN_WATERMARK:
            out.append(TimeColumn(store, "value", (0,), "expiresAtMicros", "us", "event_time"))
            continue
        if kind == OperatorKind.SESSION_WINDOW:
            out.extend(_session_end_in(schema.value_fields, store))
            continue
        out.extend(_event_time_in(schema.key_fields, store, "key"))
        if kind == OperatorKind.JOIN:
            out.extend(_event_time_in(schema.value_fields, store, "value"))
    return out


def fmgws_v1_long_fields(kind: OperatorKind, schema: StoreSchema | None) -> frozenset[int]:
    """Value positions declared ``integer`` but stored as int64 (FMGWS state format v1 timeout, §7.3)."""
    if schema is None or kind not in (
        OperatorKind.FLAT_MAP_GROUPS_WITH_STATE,
        OperatorKind.APPLY_IN_PANDAS_WITH_STATE,
    ):
        return frozenset()
    fields = schema.value_fields
    if fields and fields[-1].name == "timeoutTimestamp" and fields[-1].type_name == "integer":
        return frozenset({len(fields) - 1})
    return frozenset()

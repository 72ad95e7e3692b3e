"""The timeout and eviction checks of :mod:`app.analysis.expired` as Spark SQL queries: findings computed
where Spark runs (a cluster), only the findings come back.

The walk in :class:`app.analysis.expired_fold.TimeoutState` replays a store version by version. Here the
same rules are folded per key over its changes (docs in the query's comments):

* a key's history is a list of **segments**: the timeout ``t`` stored at version ``a`` (the first
  version read whole, then each change of the change feed; the last change of a version wins) until
  the next change at ``a_next`` (or a removal);
* a segment **fires** at the first version in ``(a, a_next]`` whose batch threshold exceeds ``t``
  (the per-version thresholds are a small array: a filter over it per segment, no join);
* whether a key is a zombie is a **set/reset latch** over segment boundaries: set by a firing at the
  end of the previous segment (or, at the first version, by a timeout already below that batch's
  threshold), reset by a removal or a re-arm (a new timeout at or above the threshold of the batch
  that wrote it; when that batch has no threshold, any new timeout). A reset at the same boundary
  wins. The zombie's fields come from the set that started the run. Window functions compute it;
* zombies of a segment not latched come from its own firing: from the firing version to its end;
* ``stale``: a segment without timeout, not a zombie, at least ``stale_after`` versions old;
  ``overdue`` (latest version only): an armed timeout below the next batch's threshold.

transformWithState's timer leak (:mod:`app.analysis.tws`) reads every version's registered timers (Spark's
reader has no change feed of timers): a key whose timers disappear at version ``w`` fired when the latest of
them was due by batch ``w - 1``'s threshold; it is a zombie at each version until its next disappearance
where it has no timer and still holds rows of the variable (its change feed, as segments).

Eviction lag (aggregation, deduplication, join, session window) is simpler: the rows each version holds
whose event time is behind that batch's watermark, from the same segments.

The results equal the walk's findings (tested on every scenario with timeouts and four with eviction,
through ``local[*]``, the standalone cluster and Spark Connect). Keys with map columns cannot be grouped
by Spark: those stores, and a Spark without a change feed, keep the walk (which streams every row here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from statelens.app.analysis.findings import (
    eviction_fields,
    overdue_fields,
    stale_fields,
    timer_fields,
    zombie_fields,
)
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress

if TYPE_CHECKING:
    from statelens.app.analysis._common import BatchClock
    from statelens.app.analysis.expired_result import Emitter, OperatorExpiry

# The zombie, stale and overdue rows of one store; {events}, {thr}, {series}, {ts} are tables the backend
# registers (SparkEngine.query); <FIRST> etc. are substituted below.
_QUERY = """
WITH ev AS (
  SELECT p, v, o, key, coalesce(c = 'delete', false) AS removed,
         CASE WHEN coalesce(c = 'delete', false) THEN NULL ELSE coalesce(CAST(<TIMEOUT> AS BIGINT), -1) END AS t
  FROM {events}
),
one AS (  -- the last change of a key in a version
  SELECT p, v, key, removed, t FROM (
    SELECT *, row_number() OVER (PARTITION BY p, key, v ORDER BY o DESC) AS rn FROM ev
  ) WHERE rn = 1
),
arr AS (
  SELECT (SELECT sort_array(collect_list(named_struct('v', v, 'thr', thr))) FROM {thr}) AS thrs,
         (SELECT map_from_entries(collect_list(struct(v, thr))) FROM {thr}) AS thrmap,
         (SELECT sort_array(collect_list(named_struct('b', b, 'thr', thr))) FROM {series}) AS ser,
         (SELECT map_from_entries(collect_list(struct(b, ts))) FROM {ts}) AS tsmap
),
seg AS (
  SELECT p, key, v AS a, removed, t,
         lead(v) OVER w AS a_next,
         lag(t) OVER w AS t_prev,
         row_number() OVER w AS i
  FROM one WINDOW w AS (PARTITION BY p, key ORDER BY v)
),
fire AS (  -- when each segment fires: within itself (fv_in), or up to the next change included (fv_full)
  SELECT s.*, arr.thrmap, arr.tsmap,
         coalesce(s.a_next - 1, <LAST>) AS hi,
         try_element_at(arr.thrmap, s.a) AS thr_a,
         CASE WHEN NOT s.removed AND s.t != -1 THEN array_min(filter(arr.thrs, x ->
           x.v > s.a AND x.v <= coalesce(s.a_next - 1, <LAST>) AND x.thr IS NOT NULL AND x.thr > s.t)) END AS fv_in,
         CASE WHEN NOT s.removed AND s.t != -1 AND s.a_next IS NOT NULL THEN array_min(filter(arr.thrs, x ->
           x.v > s.a AND x.v <= s.a_next AND x.thr IS NOT NULL AND x.thr > s.t)) END AS fv_full,
         (s.i = 1 AND s.a = <FIRST> AND NOT s.removed AND s.t != -1
           AND try_element_at(arr.thrmap, s.a) IS NOT NULL AND s.t < try_element_at(arr.thrmap, s.a)) AS init_z,
         array_min(filter(arr.ser, x -> x.b <= s.a - 1 AND x.thr IS NOT NULL AND x.thr != 0 AND x.thr > s.t))
           AS init_b0
  FROM seg s CROSS JOIN arr
),
prev AS (
  SELECT f.*, lag(f.fv_full) OVER (PARTITION BY f.p, f.key ORDER BY f.i) AS prev_fv FROM fire f
),
edges AS (  -- the latch's set and reset at the start of each segment
  SELECT f.*,
         (f.i = 1 AND f.init_z) OR f.prev_fv IS NOT NULL AS set_in,
         f.removed OR (f.i >= 2 AND f.t != -1 AND CASE WHEN f.thr_a IS NULL
           THEN (f.t_prev IS NULL OR f.t != f.t_prev) ELSE f.t >= f.thr_a END) AS reset_in,
         CASE WHEN f.i = 1 AND f.init_z
           THEN named_struct('b', f.init_b0.b, 't', f.t, 'thr', f.init_b0.thr)
           ELSE named_struct('b', f.prev_fv.v - 1, 't', f.t_prev, 'thr', f.prev_fv.thr)
         END AS set_fields
  FROM prev f
),
latch AS (
  SELECT e.*,
         max(CASE WHEN set_in THEN i END) OVER (PARTITION BY p, key ORDER BY i) AS last_set,
         max(CASE WHEN reset_in THEN i END) OVER (PARTITION BY p, key ORDER BY i) AS last_reset,
         max(CASE WHEN set_in THEN i END) OVER (PARTITION BY p, key ORDER BY i
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_set
  FROM edges e
),
runs AS (
  SELECT l.*,
         (l.last_set IS NOT NULL AND l.last_set > coalesce(l.last_reset, 0)) AS latched,
         last(CASE WHEN l.set_in AND NOT l.reset_in AND (l.prev_set IS NULL OR l.prev_set <= coalesce(l.last_reset, 0))
                   THEN l.set_fields END, true) OVER (PARTITION BY l.p, l.key ORDER BY l.i) AS run_fields
  FROM latch l
),
live AS (SELECT * FROM runs WHERE NOT removed),
found AS (
  SELECT p, key, 0 AS cat, CASE WHEN latched THEN a ELSE fv_in.v END AS lo, hi,
         CASE WHEN latched THEN run_fields ELSE named_struct('b', fv_in.v - 1, 't', t, 'thr', fv_in.thr) END AS z,
         t, a, thrmap, tsmap
  FROM live WHERE latched OR fv_in IS NOT NULL
  UNION ALL
  SELECT p, key, 2 AS cat, a + <STALE> AS lo, hi, NULL AS z, t, a, thrmap, tsmap
  FROM live WHERE <STALE> > 0 AND t = -1 AND NOT latched
  UNION ALL
  SELECT p, key, 1 AS cat, <LAST> AS lo, <LAST> AS hi, NULL AS z, t, a, thrmap, tsmap
  FROM live WHERE a_next IS NULL AND t != -1 AND <NTHR> IS NOT NULL AND t < <NTHR> AND NOT latched AND fv_in IS NULL
),
hits AS (
  SELECT f.*, explode(sequence(greatest(f.lo, <FROM>), f.hi)) AS v FROM found f WHERE f.lo <= f.hi AND f.hi >= <FROM>
)
"""

_FINDINGS = (
    _QUERY
    + """
SELECT p, v, cat, key, z.b AS b0, z.t AS t0, z.thr AS thr0, t, a,
       try_element_at(thrmap, v) AS thr_v,
       try_element_at(tsmap, v - 1) AS ts_now, try_element_at(tsmap, a - 1) AS ts_then
FROM hits ORDER BY p, v, cat
"""
)

_COUNTS = (
    _QUERY
    + """
SELECT v, cat, count(*) AS n FROM hits WHERE v < <LAST> GROUP BY v, cat
"""
)

_KEYS_AT_LATEST = (
    _QUERY
    + """
SELECT count(*) AS n FROM live WHERE a_next IS NULL
"""
)

_CATEGORIES = ("zombie", "overdue", "stale")


def _bind(text: str, **values: Any) -> str:
    """``text`` with each ``<NAME>`` marker replaced by ``values["NAME"]`` (numbers and SQL snippets)."""
    for name, value in values.items():
        text = text.replace(f"<{name}>", str(value))
    return text


def _emit_by_version(
    rows: Iterator[tuple[Any, ...]],
    finding: Callable[[tuple[Any, ...]], tuple[Any, dict[str, Any]]],
    emit: Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None],
    operator_id: int,
) -> Generator[Progress, None, None]:
    """Hand rows sorted by ``(partition, version, ...)`` to ``emit`` one partition and version at a time."""
    current: tuple[int, int] | None = None
    batch: list[tuple[Any, dict[str, Any]]] = []
    for row in rows:
        if (row[0], row[1]) != current:
            if current is not None:
                emit(*current, batch)
                yield Progress(0, 1, f"operator {operator_id}: partition {current[0]}, version {current[1]}")
            current, batch = (row[0], row[1]), []
        batch.append(finding(row))
    if current is not None:
        emit(*current, batch)


def timeout_column_sql(schema: Any, path: tuple[int, ...]) -> str | None:
    """``value.`a`.`b``` of the timeout field at ``path`` (by position), or None when a name on the way is
    not unique (Spark resolves fields by name)."""
    found = _field_sql(schema.value_schema, "value", path)
    return found[0] if found is not None else None


def _field_sql(struct: Any, root: str, path: tuple[int, ...]) -> tuple[str, Any] | None:
    """``root.`a`.`b``` of the field at ``path`` (by position) and its type, or None when a name on the way
    is not unique (Spark resolves fields by name)."""
    parts = [root]
    dtype = struct
    for index in path:
        fields = dtype.fields
        name = fields[index].name
        if sum(f.name == name for f in fields) != 1 or "`" in name:
            return None
        parts.append(f"`{name}`")
        dtype = fields[index].dataType
    return ".".join(parts), dtype


def event_time_sql(schema: Any, side: str, path: tuple[int, ...], unit: str) -> str | None:
    """The event time that decides eviction, in milliseconds (floored, as ``to_ms``), as Spark SQL over a
    ``key``/``value`` column; None for a type or name Spark SQL cannot read the same way."""
    from pyspark.sql.types import IntegerType, LongType, TimestampType  # deferred: pyspark (heavy)

    found = _field_sql(schema.key_schema if side == "key" else schema.value_schema, side, path)
    if found is None:
        return None
    column, dtype = found
    if isinstance(dtype, TimestampType):
        raw = f"unix_micros({column})"
    elif isinstance(dtype, (LongType, IntegerType)):
        raw = f"CAST({column} AS BIGINT)"
    else:
        return None
    return f"(({raw} - pmod({raw}, 1000)) DIV 1000)" if unit == "us" else raw


def groupable(data_type: Any) -> bool:
    """Whether Spark can group and partition by a column of this type (no maps inside)."""
    from pyspark.sql.types import ArrayType, MapType, StructType  # deferred: pyspark (heavy)

    if isinstance(data_type, MapType):
        return False
    if isinstance(data_type, StructType):
        return all(groupable(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return groupable(data_type.elementType)
    return True


def check_timeouts_in_spark(
    source: Any,
    clock: Any,
    kind: str | None,
    timeout_sql: str,
    stale_after: int | None,
    all_versions: bool,
    version_counts: Any,
    emit: Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None],
    evidence: str,
    operator_id: int,
) -> Generator[Progress, None, tuple[int, int]]:
    """Run the checks of one store in Spark; findings go to ``emit(partition, version, candidates)`` in
    partition then version order (each version's findings in category order). Returns the number of
    keys at the latest version and of versions looked at. Raises StatelensError when Spark cannot run
    the queries."""
    versions = source.versions
    first, last = versions[0], versions[-1]
    nthr, nsource = clock.next_threshold(last - 1, kind) if kind else (None, "")
    params = {
        "TIMEOUT": timeout_sql,
        "FIRST": first,
        "LAST": last,
        "STALE": int(stale_after or 0),
        "NTHR": "CAST(NULL AS BIGINT)" if nthr is None else int(nthr),
    }

    tables = {
        "thr": (
            "v bigint, thr bigint",
            [(v, clock.threshold(v - 1, kind) if kind else None) for v in versions],
        ),
        "series": ("b bigint, thr bigint", list(clock.series(kind)) if kind else []),
        "ts": ("b bigint, ts bigint", sorted(clock.timestamp_ms.items())),
    }
    backend, op, store = source.backend, source.operator_id, source.store_name

    def run(text: str, since: int, columns: list[str], what: str) -> Any:
        """The query with its values in place (findings from version ``since`` on), streamed."""
        query = _bind(text, **params, FROM=since)
        return backend.engine.query(
            what, lambda f: {"events": f.history(op, store, first, last)}, query, columns, tables
        )

    yield Progress(0, 1, f"operator {op}: checking timeouts in Spark")
    (keys_at_latest,) = next(iter(run(_KEYS_AT_LATEST, last, ["n"], "keys")))
    kind_label = kind or "none"
    rows = run(
        _FINDINGS,
        first if all_versions else last,
        ["p", "v", "cat", "key", "b0", "t0", "thr0", "t", "a", "thr_v", "ts_now", "ts_then"],
        f"expired keys of operator {op}",
    )

    def finding(row: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        _p, v, cat, key, b0, t0, thr0, t, a, thr_v, ts_now, ts_then = row
        fields = _fields(
            _CATEGORIES[cat],
            v,
            b0,
            t0,
            thr0,
            t,
            a,
            thr_v,
            ts_now,
            ts_then,
            kind_label,
            evidence,
            nthr,
            nsource,
        )
        return key, fields

    yield from _emit_by_version(rows, finding, emit, op)
    if version_counts is not None and not all_versions:
        for v, cat, n in run(_COUNTS, first, ["v", "cat", "n"], "counts per version"):
            version_counts[(operator_id, store, int(v), _CATEGORIES[cat])] += int(n)
    return int(keys_at_latest), len(versions)


def _fields(
    category: str,
    v: int,
    b0: int | None,
    t0: int | None,
    thr0: int | None,
    t: int,
    a: int,
    thr_v: int | None,
    ts_now: int | None,
    ts_then: int | None,
    kind_label: str,
    evidence: str,
    nthr: int | None,
    nsource: str,
) -> dict[str, Any]:
    """The finding fields the walk gives (``_timeout_candidates``) for one row of the query."""

    if category == "zombie":
        assert t0 is not None
        return zombie_fields(v, b0, t0, thr0, t, thr_v, kind_label, evidence)
    if category == "overdue":
        assert nthr is not None
        return overdue_fields(v, t, nthr, nsource, kind_label, evidence)
    return stale_fields(v, a, ts_now, ts_then)


# Eviction lag (aggregations, deduplication, joins, session windows): rows still there whose event time is
# behind the watermark of the batch that wrote the version. <TIME> is the event time in ms.
_EVICTION = """
WITH ev AS (
  SELECT p, v, o, key, coalesce(c = 'delete', false) AS removed, <TIME> AS t FROM {events}
),
one AS (
  SELECT p, v, key, removed, t FROM (
    SELECT *, row_number() OVER (PARTITION BY p, key, v ORDER BY o DESC) AS rn FROM ev
  ) WHERE rn = 1
),
seg AS (
  SELECT p, key, v AS a, removed, t, lead(v) OVER (PARTITION BY p, key ORDER BY v) AS a_next FROM one
),
arr AS (
  SELECT (SELECT sort_array(collect_list(named_struct('v', v, 'wm', wm))) FROM {wm}) AS wms,
         (SELECT sort_array(collect_list(named_struct('b', b, 'thr', thr))) FROM {series}) AS ser
),
hits AS (
  SELECT s.p, s.key, s.t, x.v AS v, x.wm AS wm, arr.ser
  FROM seg s CROSS JOIN arr
  LATERAL VIEW explode(filter(arr.wms, x -> x.v >= s.a AND x.v <= coalesce(s.a_next - 1, <LAST>)
    AND x.v >= <FROM> AND x.wm IS NOT NULL AND x.wm != 0 AND s.t IS NOT NULL AND s.t < x.wm)) e AS x
  WHERE NOT s.removed
)
"""

_EVICTION_FINDINGS = (
    _EVICTION
    + """
SELECT p, v, key, t, wm,
       array_min(filter(ser, y -> y.b <= v - 1 AND y.thr IS NOT NULL AND y.thr != 0 AND y.thr > t)).b AS b0
FROM hits ORDER BY p, v
"""
)

_EVICTION_COUNTS = _EVICTION + "SELECT v, count(*) AS n FROM hits WHERE v < <LAST> GROUP BY v"

_EVICTION_KEYS = _EVICTION + "SELECT count(*) AS n FROM seg WHERE a_next IS NULL AND NOT removed"


def check_eviction_in_spark(
    source: Any,
    clock: Any,
    time_sql: str,
    all_versions: bool,
    version_counts: Any,
    emit: Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None],
    note: str,
    evidence: str,
    operator_id: int,
) -> Generator[Progress, None, tuple[int, int]]:
    """The eviction check of one store in Spark: keys still held behind the watermark, found from the
    first version and the change feed (only the latest version read when nothing earlier is asked for);
    findings go to ``emit`` in partition then version order. Returns the keys at the latest version and
    the number of versions looked at."""
    versions = source.versions
    last = versions[-1]
    first = versions[0] if all_versions or version_counts is not None else last
    walked = [v for v in versions if v >= first]
    tables = {
        "wm": ("v bigint, wm bigint", [(v, clock.watermark_ms.get(v - 1)) for v in walked]),
        "series": ("b bigint, thr bigint", list(clock.series("event_time"))),
    }

    backend, op, store = source.backend, source.operator_id, source.store_name

    def run(text: str, since: int, columns: list[str], what: str) -> Any:
        query = _bind(text, TIME=time_sql, LAST=last, FROM=since)
        return backend.engine.query(
            what, lambda f: {"events": f.history(op, store, first, last)}, query, columns, tables
        )

    yield Progress(0, 1, f"operator {op}: checking eviction in Spark")
    (keys_at_latest,) = next(iter(run(_EVICTION_KEYS, last, ["n"], "keys")))
    rows = run(
        _EVICTION_FINDINGS,
        first if all_versions else last,
        ["p", "v", "key", "t", "wm", "b0"],
        f"eviction lag of operator {op}",
    )

    def finding(row: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        _p, v, key, t, wm, b0 = row
        return key, eviction_fields(v, b0, t, wm, note, evidence)

    yield from _emit_by_version(rows, finding, emit, op)
    if version_counts is not None and not all_versions:
        for v, n in run(_EVICTION_COUNTS, first, ["v", "n"], "counts per version"):
            version_counts[(operator_id, store, int(v), "eviction_lag")] += int(n)
    return int(keys_at_latest), len(walked)


# transformWithState (app.analysis.tws): a key whose last timer fired, with no timer left, that still holds
# rows of a state variable without TTL. {timers} holds every timer of every version; {held} the variable's
# rows at its first version and its change feed after.
_TIMERS = """
WITH armed AS (  -- each timer's runs of consecutive versions at which it is registered
  SELECT p, key, x, v, v - row_number() OVER (PARTITION BY p, key, x ORDER BY v) AS run FROM {timers}
),
runs AS (SELECT p, key, x, min(v) AS lo, max(v) AS hi FROM armed GROUP BY p, key, x, run),
gone AS (  -- timers of a key that disappear at version w; the latest expiry decides (as the walk)
  SELECT p, key, hi + 1 AS w, max(x) AS x FROM runs WHERE hi < <LAST> GROUP BY p, key, hi + 1
),
marks AS (
  SELECT g.p, g.key, g.w, g.x, t.thr, lead(g.w) OVER (PARTITION BY g.p, g.key ORDER BY g.w) AS w_next
  FROM gone g LEFT JOIN {thr} t ON t.v = g.w
),
fired AS (  -- fired when due by the threshold of batch w - 1; until the key's next disappearance
  SELECT p, key, w, x, thr, explode(sequence(greatest(w, <FROM>), coalesce(w_next - 1, <LAST>))) AS v
  FROM marks WHERE thr IS NOT NULL AND x <= thr AND coalesce(w_next - 1, <LAST>) >= greatest(w, <FROM>)
),
bare AS (  -- ... at versions where no timer is registered for the key
  SELECT f.* FROM fired f LEFT ANTI JOIN runs r ON r.p = f.p AND r.key = f.key AND f.v BETWEEN r.lo AND r.hi
),
hev AS (SELECT p, v, o, key, u, coalesce(c = 'delete', false) AS removed FROM {held}),
hone AS (  -- the last change of a row in a version
  SELECT p, v, key, u, removed FROM (
    SELECT *, row_number() OVER (PARTITION BY p, key, u, v ORDER BY o DESC) AS rn FROM hev
  ) WHERE rn = 1
),
hseg AS (
  SELECT p, key, v AS lo, removed, coalesce(lead(v) OVER (PARTITION BY p, key, u ORDER BY v) - 1, <LAST>) AS hi
  FROM hone
),
found AS (
  SELECT b.* FROM bare b
  LEFT SEMI JOIN hseg h ON h.p = b.p AND h.key = b.key AND NOT h.removed AND b.v BETWEEN h.lo AND h.hi
)
"""

_TIMER_FINDINGS = _TIMERS + "SELECT p, v, key, w - 1 AS b, x, thr FROM found ORDER BY p, v"

_TIMER_COUNTS = _TIMERS + "SELECT v, count(*) AS n FROM found WHERE v < <LAST> GROUP BY v"


def check_timers_in_spark(
    backend: Any,
    operator_id: int,
    variable: str,
    versions: list[int],
    clock: Any,
    kind: str,
    all_versions: bool,
    version_counts: Any,
    emit: Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None],
    evidence: str,
) -> Generator[Progress, None, tuple[int, int]]:
    """The timer leak check of one transformWithState variable in Spark (:mod:`app.analysis.tws`'s rules):
    findings go to ``emit`` in partition then version order, keys in the walk's order. Returns the rows
    the variable holds at the latest version and the number of versions looked at."""
    first, last = versions[0], versions[-1]
    since = first if all_versions or version_counts is not None else last
    tables = {"thr": ("v bigint, thr bigint", [(v, clock.threshold(v - 1, kind)) for v in versions])}

    def frames(f: Any) -> dict[str, Any]:
        """``{timers}``: ``p, v, key, x``, every timer registered at each version (Spark's reader has no
        change feed of timers: each version is read whole); ``{held}``: the variable's rows at ``since``
        then its change feed, ``u`` a map state's user key (null otherwise)."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        timers = None
        for v in range(first, last + 1):
            one = f.timers(operator_id, v).select(
                F.col("partition_id").cast("int").alias("p"),
                F.lit(v).cast("long").alias("v"),
                "key",
                F.col("expiration_timestamp_ms").cast("long").alias("x"),
            )
            timers = one if timers is None else timers.unionByName(one)
        held = f.history(
            operator_id,
            variable,
            since,
            last,
            lambda df: [(F.col("user_map_key") if "user_map_key" in df.columns else F.lit(None)).alias("u")],
        )
        return {"timers": timers, "held": held}

    def run(text: str, start: int, columns: list[str], what: str) -> Any:
        return backend.engine.query(what, frames, _bind(text, LAST=last, FROM=start), columns, tables)

    yield Progress(0, 1, f"operator {operator_id}: checking timers in Spark")
    rows = run(
        _TIMER_FINDINGS,
        first if all_versions else last,
        ["p", "v", "key", "b", "x", "thr"],
        f"timer zombies of operator {operator_id} {variable}",
    )

    def finding(row: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        _p, v, key, b, x, thr = row
        now = clock.threshold(v - 1, kind)
        return key, timer_fields(v, b, x, thr, now, kind, evidence)

    def in_order(pid: int, v: int, candidates: list[tuple[Any, dict[str, Any]]]) -> None:
        emit(pid, v, sorted(candidates, key=lambda c: repr(c[0])))  # the walk's order

    yield from _emit_by_version(rows, finding, in_order, operator_id)
    if version_counts is not None and not all_versions:
        for v, n in run(_TIMER_COUNTS, first, ["v", "n"], "counts per version"):
            version_counts[(operator_id, variable, int(v), "zombie")] += int(n)
    held = sum(backend.engine.row_counts(operator_id, variable, last).values())
    return held, len(versions)


# -- running a store's check as a Spark query ---------------------------------------------------------
def _in_spark(
    source: Any,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    what: str,
    run: Callable[
        [Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None]],
        Generator[Progress, None, tuple[int, int]],
    ],
) -> Generator[Progress, None, bool]:
    """Run one store's check as a Spark query (this module): ``run(emit)`` hands
    findings to ``emit(partition, version, candidates)`` and returns the keys at the latest version and
    the versions looked at. False (nothing done) when the store's versions have a gap or Spark cannot
    run the query before its first finding (the walk then reads the rows instead)."""
    vs = source.versions
    if not vs or vs != list(range(vs[0], vs[-1] + 1)) or not source.backend.capabilities.engine_queries:
        return False
    refused = yield from pushed(summary, out, problems, source.key_decoder, len(source.partition_ids()), run)
    if refused is not None:
        source.feed_note = f"{what} not checked inside Spark ({refused}): rows streamed instead"
        return False
    return True


def pushed(
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    keys: Callable[[int], Any],
    partitions: int,
    run: Callable[
        [Callable[[int, int, list[tuple[Any, dict[str, Any]]]], None]],
        Generator[Progress, None, tuple[int, int]],
    ],
) -> Generator[Progress, None, str | None]:
    """Run a check as a Spark query: ``run(emit)`` hands findings to ``emit(partition, version,
    candidates)`` (decoded with ``keys(partition)``) and returns the keys at the latest version and the
    versions looked at, added to ``summary``. None when done; Spark's reason when it failed before its
    first finding (nothing reported: the caller checks another way). A failure after findings were
    reported goes to ``problems``."""
    emitted = 0

    def emit(pid: int, v: int, candidates: list[tuple[Any, dict[str, Any]]]) -> None:
        nonlocal emitted
        emitted += 1
        out.emit(summary, pid, v, candidates, keys(pid))

    try:
        keys_at_latest, walked = yield from run(emit)
    except StatelensError as err:
        if emitted:  # findings already reported: the rest is lost, say so
            problems.append(err)
            return None
        return err.message
    summary.keys_at_latest += keys_at_latest
    summary.versions_read += partitions * walked
    summary.in_spark = True
    return None


def timeouts_in_spark(
    op: Any,
    source: Any,
    clock: BatchClock,
    kind: str | None,
    path: tuple[int, ...] | None,
    evidence: str,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    stale_after: int | None,
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The timeout checks of one store computed inside Spark: only findings come back. False (nothing
    done) when the store's keys or timeout column cannot be named in Spark SQL (or as :func:`_in_spark`)."""

    timeout_sql = "NULL" if path is None else timeout_column_sql(source.schema, path)
    if timeout_sql is None or not groupable(source.schema.key_schema):
        return False
    return (
        yield from _in_spark(
            source,
            summary,
            out,
            problems,
            "timeouts",
            lambda emit: check_timeouts_in_spark(
                source,
                clock,
                kind,
                timeout_sql,
                stale_after,
                all_versions,
                version_counts,
                emit,
                evidence,
                op.operator_id,
            ),
        )
    )


def eviction_in_spark(
    op: Any,
    source: Any,
    clock: BatchClock,
    col: tuple[str, tuple[int, ...], str, str],
    note: str,
    evidence: str,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The eviction check of one store computed inside Spark; False where it cannot be (an event-time
    column Spark SQL cannot read the same way, or as :func:`_in_spark`)."""

    side, path, unit, _name = col
    time_sql = event_time_sql(source.schema, side, path, unit)
    if time_sql is None or not groupable(source.schema.key_schema):
        return False
    return (
        yield from _in_spark(
            source,
            summary,
            out,
            problems,
            "eviction",
            lambda emit: check_eviction_in_spark(
                source, clock, time_sql, all_versions, version_counts, emit, note, evidence, op.operator_id
            ),
        )
    )

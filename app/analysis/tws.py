"""Zombie keys of transformWithState: a timer fired, the handler kept the state, and nothing will remove it.

transformWithState has no timeout attached to the state: the user registers timers and decides in
``handleExpiredTimer`` what to clear. The classic leak of ``mapGroupsWithState`` code (forgetting
``state.remove()``) becomes: the timer fires, the handler does not clear the state and registers no new
timer — the key's state then stays forever unless a TTL covers it (docs/format.md §7.7).

On disk (Spark's internal column families, decoded natively): the timers are ``$procTimers_keyToTimestamp``
(``$eventTimers_...`` in event time), keyed by (grouping key, expiry ms). Between versions ``v-1`` and
``v`` (batch ``b = v-1``) a timer that disappears with an expiry at or before batch ``b``'s threshold
(its timestamp in processing time, its watermark in event time) *fired*; one that disappears before
its time was deleted by the user (when several of a key's timers disappear at once, the one with the
latest expiry decides). A key is a **zombie** at version ``v`` when its last timer fired, no
timer is registered for it at ``v``, and it still holds rows in a state variable without TTL. The
finding names that variable; ``batch_id`` is the batch in which the timer fired.

The timers family and the variable are read through the scan's replay (:class:`readers.scan.StateScan`,
kind ``replay``): the timers fed version by version (only the timers a version adds are decoded), the
variable's state found at the versions that report, resumed from the last one reached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statelens.app.analysis._common import BatchClock, row_converter
from statelens.app.analysis.expired_result import Emitter, OperatorExpiry, TimeoutKindEvidence
from statelens.app.analysis.expired_sources import DecodedKeys
from statelens.app.analysis.expired_spark import check_timers_in_spark, groupable, pushed
from statelens.app.analysis.findings import timer_fields
from statelens.readers.backends import native_backend
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.readers.scan import Replay, StateScan

if TYPE_CHECKING:
    from statelens.readers.backends import BackendChooser

TIME_MODES = {"ProcessingTime": "processing_time", "EventTime": "event_time"}
USER_TYPES = ("ValueState", "ListState", "MapState")
#: Spark's column families of timers by key, processing and event time.
TIMER_FAMILIES = ("$procTimers_keyToTimestamp", "$eventTimers_keyToTimestamp")


@dataclass(frozen=True)
class TimerZombie:
    """One key holding state in one variable after its last timer fired, with no timer left."""

    partition: int
    version: int
    variable: str
    key: tuple[Any, ...]
    fired_batch: int
    expiry_ms: int
    threshold_ms: int | None
    timeout_kind: str
    latest: bool = False  # at its partition's latest version


def leak_check_plan(ckpt: Any, operator_id: int) -> tuple[str | None, list[str], str]:
    """``(timeout kind, variables checked, reason)`` for one transformWithState operator.

    The kind is ``None`` (and ``reason`` says why) when the operator cannot leak this way: no timers,
    or every variable has a TTL.
    """
    op = ckpt.operator(operator_id)
    mode = str(op.properties.get("timeMode", ""))
    kind = TIME_MODES.get(mode)
    variables = [v for v in op.properties.get("stateVariables", []) or [] if isinstance(v, dict)]
    plain = [
        str(v["stateName"])
        for v in variables
        if v.get("stateVariableType") in USER_TYPES and not v.get("ttlEnabled", False)
    ]
    if kind is None:
        return None, plain, f"timeMode {mode or 'None'}: no timers, state is removed only by the function"
    if not plain:
        return None, plain, "every state variable has a TTL: Spark removes expired state itself"
    return kind, plain, ""


class TimerWalk:
    """Zombie keys of one transformWithState operator, partition by partition, versions in order.

    Every version's timers are read (timers fire between versions); zombies are reported at each
    partition's latest version, or at every version with ``all_versions``, for every variable without TTL
    (or only ``variables``). Files that cannot be read go to ``problems`` (the scan's error policy: a
    partition's replay goes on from the next version it can rebuild) and the others are still checked.

    Attributes
    ----------
    versions_read : int
        Versions of the timers replayed.
    rows_at_latest : Counter
        Per variable: its rows (list elements, map entries) at each partition's latest version.
    """

    def __init__(
        self,
        ckpt: Any,
        operator_id: int,
        clock: BatchClock,
        problems: list[StatelensError],
        all_versions: bool = False,
        cancelled: Callable[[], bool] | None = None,
        variables: list[str] | None = None,
    ):
        self.ckpt = ckpt
        self.operator_id = operator_id
        self.clock = clock
        self.problems = problems
        self.all_versions = all_versions
        self.cancelled = cancelled
        self.kind, plain, _reason = leak_check_plan(ckpt, operator_id)
        self.variables = plain if variables is None else [v for v in plain if v in variables]
        self.versions_read = 0
        self.rows_at_latest: Counter[str] = Counter()
        op = ckpt.operator(operator_id)
        types = {
            str(v.get("stateName")): v.get("stateVariableType")
            for v in op.properties.get("stateVariables", []) or []
            if isinstance(v, dict)
        }
        self.maps = {name for name in self.variables if types.get(name) == "MapState"}  # map state variables
        names = {s.store_name for s in op.stores}
        self.timer_family = next((name for name in TIMER_FAMILIES if name in names), None)

    def __iter__(self) -> Iterator[TimerZombie]:
        if self.kind is None or self.timer_family is None:
            return
        backend = native_backend(self.ckpt)
        timers = StateScan(
            backend, self.operator_id, self.timer_family, kind="replay", cancelled=self.cancelled
        )
        part: _PartitionTimers | None = None
        try:
            for step in timers.iter_replay():
                if part is None or part.pid != step.partition_id:
                    if part is not None:
                        self._finish(part)
                    last = backend.latest_version(self.operator_id, self.timer_family, step.partition_id)
                    part = _PartitionTimers(self, timers, backend, step.partition_id, last)
                self.versions_read += 1
                yield from part.step(step.version, step.state, step.changes)
            if part is not None:
                self._finish(part)
        finally:
            self.problems.extend(timers.problems)
            if part is not None:
                part.close()

    def _finish(self, part: _PartitionTimers) -> None:
        """Count each variable's rows at the partition's latest version, and let its replays go."""
        for name in self.variables:
            state = part.holders(name).at(part.last)
            if state is not None:
                self.rows_at_latest[name] += len(state)
        part.close()


class _VariableAt:
    """One variable's stored records of one partition at the versions asked for, in order: a replay that
    starts at the first version asked and is resumed from there (:meth:`readers.scan.Replay.advance`)."""

    def __init__(self, backend: Any, operator_id: int, name: str, pid: int, walk: TimerWalk):
        self.scan = StateScan(
            backend, operator_id, name, kind="replay", partitions=[pid], cancelled=walk.cancelled
        )
        self.pid = pid
        self.is_map = name in walk.maps
        self.replay: Replay | None = None
        self.version: int | None = None  # the version :attr:`state` is at
        self.state: Mapping[bytes, bytes] | None = None

    def at(self, version: int) -> Mapping[bytes, bytes] | None:
        """The variable's records at ``version`` (None when its files cannot be read there)."""
        if self.replay is None:
            self.scan.start_version = version  # nothing before it is needed
            self.replay = self.scan.replay()
        if version != self.version:
            self.version, self.state = version, None
            for step in self.replay.advance(until=version):
                self.state = step.state if step.version == version else None
        return self.state

    def holders(self, version: int) -> set[Any] | None:
        """The grouping keys holding records at ``version`` (a map's without the user key)."""
        state = self.at(version)
        if state is None:
            return None
        keys = [key for key, _ in self.scan.decode(self.pid, [(k, None) for k in state])]
        return {k[0] for k in keys} if self.is_map else set(keys)


class _PartitionTimers:
    """The timers of one partition, fed version by version: which keys' last timer fired, and when."""

    def __init__(self, walk: TimerWalk, timers: StateScan, backend: Any, pid: int, last: int):
        self.walk = walk
        self.timers = timers
        self.backend = backend
        self.pid = pid
        self.last = last
        self.decoded: dict[bytes, tuple[Any, int]] = {}  # stored timer key -> (grouping key, expiry)
        self.previous: set[tuple[Any, int]] = set()
        self.fired: dict[
            Any, tuple[int, int]
        ] = {}  # key -> (batch it fired in, expiry) of its last fired timer
        self.prev_version: int | None = None
        self._holders: dict[str, _VariableAt] = {}

    def holders(self, name: str) -> _VariableAt:
        if name not in self._holders:
            w = self.walk
            self._holders[name] = _VariableAt(self.backend, w.operator_id, name, self.pid, w)
        return self._holders[name]

    def close(self) -> None:
        for got in self._holders.values():
            self.walk.problems.extend(got.scan.problems)
        self._holders = {}

    def _decode(self, state: Mapping[bytes, bytes], changes: Any) -> None:
        """Bring :attr:`decoded` to ``state``: only keys it does not hold yet are decoded."""
        if changes is None:
            self.decoded = {}
            todo = list(state)
        else:
            todo = []
            for k, _ in changes:
                if k not in state:
                    self.decoded.pop(k, None)
                elif k not in self.decoded:
                    todo.append(k)
            todo = list(dict.fromkeys(todo))
        if todo:
            for raw, (key, _) in zip(
                todo, self.timers.decode(self.pid, [(k, None) for k in todo]), strict=True
            ):
                self.decoded[raw] = (key[0], int(key[1]))

    def step(self, v: int, state: Mapping[bytes, bytes], changes: Any) -> Iterator[TimerZombie]:
        walk, clock, kind, fired = self.walk, self.walk.clock, self.walk.kind, self.fired
        assert kind is not None
        self._decode(state, changes)
        timers = set(self.decoded.values())
        b = v - 1
        if self.prev_version == v - 1:
            threshold = clock.threshold(b, kind)
            # A key's timers in expiry order: when several disappear at once, its latest decides.
            for key, expiry in sorted(self.previous - timers, key=lambda timer: timer[1]):
                if threshold is not None and expiry <= threshold:
                    fired[key] = (b, expiry)  # fired in batch b
                else:
                    fired.pop(key, None)  # deleted by the user before its time
        for key, _ in timers:
            fired.pop(key, None)  # a timer registered again: not a zombie (yet)
        self.previous, self.prev_version = timers, v
        latest = v == self.last
        if not fired or (not latest and not walk.all_versions):
            return
        for variable in walk.variables:
            holders = self.holders(variable).holders(v)
            if holders is None:
                continue  # its files cannot be read here: in problems
            for key in sorted(holders & fired.keys(), key=repr):
                b_fired, expiry = fired[key]
                yield TimerZombie(
                    self.pid, v, variable, key, b_fired, expiry, clock.threshold(b_fired, kind), kind, latest
                )


def check_transform_with_state(
    ckpt: Any,
    op: Any,
    st: Any,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    cancelled: Callable[[], bool] | None,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
    backends: BackendChooser | None = None,
) -> Generator[Progress, None, None]:
    """transformWithState: keys whose timer fired and whose state was kept, for one variable (``st``).

    With the Spark backend the check runs as a Spark query (:func:`_timers_in_spark`); otherwise, or when
    Spark cannot run it, the timer families are walked natively.
    """

    kind, plain, reason = leak_check_plan(ckpt, op.operator_id)
    if kind is None or st.store_name not in plain:
        summary.reason = reason or (
            "Spark's internal column family"
            if st.store_name.startswith("$")
            else "state with a TTL: Spark removes expired entries itself"
        )
        return
    summary.check = "timers"
    evidence = f"transformWithState timeMode={op.properties.get('timeMode')}"
    summary.timeout_kind = TimeoutKindEvidence(kind, "schema", evidence)
    summary.partitions = len(StateScan(native_backend(ckpt), op.operator_id, st.store_name).partition_ids())
    key_schema: Any = st.schema.key_schema
    walk = TimerWalk(
        ckpt,
        op.operator_id,
        clock,
        problems,
        all_versions or version_counts is not None,
        cancelled,
        [st.store_name],
    )
    if st.store_name in walk.maps:
        key_schema = key_schema.fields[0].dataType  # the grouping key, without the user key
    keys = DecodedKeys(row_converter(key_schema))
    backend = backends.for_store(op.operator_id, st.store_name) if backends is not None else None
    if backend is not None and backend.capabilities.engine_queries:
        done = yield from _timers_in_spark(
            backend,
            ckpt,
            op,
            st,
            kind,
            key_schema,
            clock,
            summary,
            out,
            problems,
            all_versions,
            version_counts,
        )
        if done:
            return
    yield Progress(0, 1, f"operator {op.operator_id} {st.store_name}: timers")
    by_place: dict[tuple[int, int], list[tuple[Any, dict[str, Any]]]] = {}
    for z in walk:
        if not all_versions and not z.latest:
            version_counts[(op.operator_id, st.store_name, z.version, "zombie")] += 1  # type: ignore[index]
            continue
        now = clock.threshold(z.version - 1, kind)
        by_place.setdefault((z.partition, z.version), []).append(
            (z.key, timer_fields(z.version, z.fired_batch, z.expiry_ms, z.threshold_ms, now, kind, evidence))
        )
    summary.versions_read += walk.versions_read
    summary.keys_at_latest += walk.rows_at_latest[st.store_name]
    for (pid, version), candidates in sorted(by_place.items()):
        out.emit(summary, pid, version, candidates, keys)


def _timers_in_spark(
    backend: Any,
    ckpt: Any,
    op: Any,
    st: Any,
    kind: str,
    key_schema: Any,
    clock: BatchClock,
    summary: OperatorExpiry,
    out: Emitter,
    problems: list[StatelensError],
    all_versions: bool,
    version_counts: Counter[tuple[int, str, int, str]] | None,
) -> Generator[Progress, None, bool]:
    """The timer leak check of one transformWithState variable as a Spark query: only findings come back.
    False (nothing done) when its keys cannot be grouped by Spark, its versions have a gap, or Spark
    cannot run the query before its first finding (the native walk then runs)."""

    versions = [v for v in st.versions if v - 1 in ckpt.commits]
    if not versions or versions != list(range(versions[0], versions[-1] + 1)) or not groupable(key_schema):
        return False
    keys = DecodedKeys(row_converter(key_schema))
    evidence = f"transformWithState timeMode={op.properties.get('timeMode')}"
    refused = yield from pushed(
        summary,
        out,
        problems,
        lambda _pid: keys,
        summary.partitions,
        lambda emit: check_timers_in_spark(
            backend,
            op.operator_id,
            st.store_name,
            versions,
            clock,
            kind,
            all_versions,
            version_counts,
            emit,
            evidence,
        ),
    )
    if refused is not None:
        summary.reason = f"timers not checked inside Spark ({refused}): read natively instead"
        return False
    summary.backend = "spark"
    return True

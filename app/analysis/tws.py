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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from statelens.app.analysis._common import BatchClock
from statelens.readers.backends import native_backend
from statelens.readers.errors import StatelensError

TIME_MODES = {"ProcessingTime": "processing_time", "EventTime": "event_time"}
USER_TYPES = ("ValueState", "ListState", "MapState")


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


def iter_timer_zombies(
    ckpt: Any,
    operator_id: int,
    clock: BatchClock,
    problems: list[StatelensError],
    all_versions: bool = False,
    cancelled: Callable[[], bool] | None = None,
    variables: list[str] | None = None,
) -> Iterator[TimerZombie]:
    """Zombie keys of one transformWithState operator, partition by partition, versions in order.

    Every version is read (timers fire between versions); zombies are reported at each partition's
    latest version, or at every version with ``all_versions``, for every variable without TTL (or
    only ``variables``). A partition whose files cannot be read goes to ``problems`` and the others
    are still checked.
    """
    kind, plain, _reason = leak_check_plan(ckpt, operator_id)
    if kind is None:
        return
    if variables is not None:
        plain = [v for v in plain if v in variables]
    reader = native_backend(ckpt).column_families(operator_id)
    timer_family = reader.timer_family()
    if timer_family is None:
        return
    for pid in reader.partition_ids():
        versions = reader.versions(pid)
        if not versions:
            continue
        try:
            yield from _partition_zombies(reader, pid, versions, plain, kind, clock, all_versions, cancelled)
        except StatelensError as err:
            problems.append(err)
        if cancelled is not None and cancelled():
            return


def _partition_zombies(
    reader: Any,
    pid: int,
    versions: list[int],
    plain: list[str],
    kind: str,
    clock: BatchClock,
    all_versions: bool,
    cancelled: Callable[[], bool] | None,
) -> Iterator[TimerZombie]:
    previous: set[tuple[Any, int]] = set()
    fired: dict[Any, tuple[int, int]] = {}  # key -> (batch it fired in, expiry) of its last fired timer
    last = versions[-1]
    prev_version: int | None = None
    for v in versions:
        if cancelled is not None and cancelled():
            return
        b = v - 1
        timers = {(key, expiry) for _, key, expiry in reader.read_timers(pid, v)}
        if prev_version == v - 1:
            threshold = clock.threshold(b, kind)
            # A key's timers in expiry order: when several disappear at once, its latest decides.
            for key, expiry in sorted(previous - timers, key=lambda timer: timer[1]):
                if threshold is not None and expiry <= threshold:
                    fired[key] = (b, expiry)  # fired in batch b
                else:
                    fired.pop(key, None)  # deleted by the user before its time
        armed = {key for key, _ in timers}
        for key in armed:
            fired.pop(key, None)  # a timer registered again: not a zombie (yet)
        previous, prev_version = timers, v
        if not fired or (v != last and not all_versions):
            continue
        for variable in plain:
            holders: set[Any] = set()
            for row in reader.read_variable(pid, v, variable):
                holders.add(row.key)  # the grouping key (map state: without the user key)
            for key in sorted(holders & fired.keys(), key=repr):
                b_fired, expiry = fired[key]
                yield TimerZombie(
                    pid, v, variable, key, b_fired, expiry, clock.threshold(b_fired, kind), kind
                )

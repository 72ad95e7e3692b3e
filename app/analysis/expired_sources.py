"""Where the expired-keys analysis reads a store from (:mod:`app.analysis.expired`): its stored records
replayed by the scan (:class:`ScanSource`, a backend that reads files), or decoded rows from a backend that
reads through an engine (:class:`RowSource`, Spark's ``statestore`` source).

Both walk ``(partition, version, state, changes)`` steps, oldest version first; both give a reader of the
timeout or event-time field of a stored value (or key), and the decoder of the keys that are reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statelens.app.analysis._common import row_converter
from statelens.app.analysis.expired_spark import eviction_in_spark, timeouts_in_spark
from statelens.readers.backends import native_backend
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan
from statelens.readers.values import json_converter

if TYPE_CHECKING:
    from statelens.readers.backends import BackendChooser

StateWalk = Generator[tuple[int, int, Mapping[Any, Any], "list[tuple[Any, Any]] | None"], None, None]
#: Decoded keys cached per partition (zombies repeat at every version with --all-versions).
_KEY_CACHE = 65536


#: The rows of the first version (change null), then the change feed (put/remove, a remove's value null),
#: partition by partition, in the feed's order within a version.
_EVENTS_IN_ORDER = """
SELECT p, v,
       CASE WHEN c IS NULL THEN NULL WHEN c = 'delete' THEN 'remove' WHEN c = 'append' THEN 'append'
            ELSE 'put' END AS change,
       key, CASE WHEN c = 'delete' THEN NULL ELSE value END AS value
FROM {events} ORDER BY p, v, o
"""


class ScanSource:
    """One store's stored records, replayed by the scan (:meth:`readers.scan.StateScan.iter_replay`): raw
    key bytes identify keys, raw value bytes are values.

    Walks partition by partition, so only one partition's state is in memory at a time; files that cannot
    be read go to the walk's ``problems`` (the scan's error policy: the partition's replay goes on from
    the next version it can rebuild).

    Raises
    ------
    BackendUnavailableError
        The backend cannot read this store's files (from the constructor, as the store is listed).
    """

    partition_major = True
    feed_note = ""  # the walk always replays the files: nothing to say about a change feed

    def __init__(self, backend: Any, store: Any):
        self.name = backend.name  # what read the rows, for the user
        self.operator_id = store.operator_id
        self.store_name = store.store_name
        self.scan = StateScan(backend, store.operator_id, store.store_name, kind="replay")
        self.pids = self.scan.partition_ids()
        self._convert = row_converter(store.schema.key_schema) if store.schema is not None else None

    def partition_ids(self) -> list[int]:
        return list(self.pids)

    def last_version(self, partition_id: int) -> int | None:
        return self.scan.backend.latest_version(self.operator_id, self.store_name, partition_id) or None

    def walk(
        self,
        problems: list[StatelensError],
        cancelled: Callable[[], bool] | None = None,
        *,
        need_state: bool = True,
        only_last: bool = False,
    ) -> StateWalk:
        """``(partition, version, state, changes)`` of every :class:`readers.scan.ReplayStep`, partition by
        partition; every version is read (the delta chain must be replayed), whatever ``only_last`` says.
        """
        scan = StateScan(
            self.scan.backend, self.operator_id, self.store_name, kind="replay", cancelled=cancelled
        )
        try:
            for step in scan.iter_replay():
                yield step.partition_id, step.version, step.state, step.changes
        finally:
            problems.extend(scan.problems)

    def value_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return self.scan.field_reader("value", path)

    def key_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return self.scan.field_reader("key", path)

    def key_decoder(self, partition_id: int) -> Any:
        return _ScanKeys(self.scan, partition_id, self._convert)

    @staticmethod
    def tiebreak(key: Any) -> Any:
        return key  # raw bytes: equal timeouts pop in key-byte order

    def check_timeouts_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The timeout checks run here, on the replay: nothing is run elsewhere (False)."""
        yield from ()
        return False

    def check_eviction_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The eviction check runs here, on the replay: nothing is run elsewhere (False)."""
        yield from ()
        return False


class _ScanKeys:
    """Decodes reported raw keys of one partition through the scan, caching the JSON form of up to
    :data:`_KEY_CACHE`."""

    def __init__(self, scan: StateScan, partition_id: int, convert: Any):
        self.scan = scan
        self.partition_id = partition_id
        self.cache: dict[bytes, Any] = {}
        self.convert = convert

    def decode(self, keys: list[bytes]) -> None:
        todo = [k for k in keys if k not in self.cache]
        if not todo:
            return
        if len(self.cache) + len(todo) > _KEY_CACHE:
            # Keeps --all-versions from re-decoding the same zombies at every version, in bounded memory.
            self.cache = {k: self.cache[k] for k in keys if k in self.cache}
        decoded = self.scan.decode(self.partition_id, [(k, None) for k in todo])
        convert = self.convert
        for raw, (key, _) in zip(todo, decoded, strict=True):
            self.cache[raw] = convert(key)

    def __getitem__(self, raw: bytes) -> Any:
        return self.cache[raw]


class RowSource:
    """One store read as decoded rows from a backend that does not hand out files (Spark's ``statestore``
    source).

    Keys are identified by their decoded key tuple, values are decoded rows. Such a backend answers for
    every partition of a version in one job, so the walk goes version by version (then partition): the
    first version, and any version after a failed read, is read whole (a rows scan); the others
    through Spark's change feed for that one batch (a changes scan), or whole again when the feed
    is unavailable (RocksDB without changelog checkpointing). Only committed versions are read.
    """

    partition_major = False

    def __init__(self, backend: Any, ckpt: Any, store: Any):
        self.backend = backend
        self.name = backend.name  # what read the rows, for the user
        self.operator_id = store.operator_id
        self.store_name = store.store_name
        self.schema = store.schema
        self.pids = sorted(store.partitions)
        self.versions = [v for v in store.versions if v - 1 in ckpt.commits]
        self._convert = json_converter(store.schema.key_schema)
        self._ties = itertools.count()
        self.feed_note = ""

    def partition_ids(self) -> list[int]:
        return list(self.pids)

    def last_version(self, partition_id: int) -> int | None:
        return self.versions[-1] if self.versions else None

    def walk(
        self,
        problems: list[StatelensError],
        cancelled: Callable[[], bool] | None = None,
        *,
        need_state: bool = True,
        only_last: bool = False,
    ) -> StateWalk:
        """``(partition, version, state, changes)``, version by version, every partition at each.

        ``state`` is the whole partition when ``changes`` is None, else empty (the changes were read,
        not the state). ``need_state`` reads every version whole; ``only_last`` reads the last only.
        Without either, on a classic session with an unbroken run of versions, the first version and the
        change feed are streamed partition by partition instead (one job; this process holds one
        partition at a time, whatever the store's size).
        """
        if not need_state and not only_last and self._streamable():
            streamed = self._walk_streamed(cancelled)
            try:
                head = next(streamed)
            except StopIteration:
                return
            except StatelensError as err:  # Spark Connect, or no change feed: versions one by one below
                self.feed_note = f"streaming unavailable ({err}): versions read one by one"
            else:
                self.partition_major = True
                yield head
                yield from streamed
                return
        self.partition_major = False
        op, store = self.operator_id, self.store_name
        use_feed = not need_state
        previous: int | None = None
        for v in self.versions[-1:] if only_last else self.versions:
            if cancelled is not None and cancelled():
                return
            if use_feed and previous == v - 1:
                try:
                    feed = StateScan(
                        self.backend, op, store, "changes", start_version=v, end_version=v, strict=True
                    )
                    records = list(feed.iter_records())
                except StatelensError as err:
                    use_feed = False
                    self.feed_note = f"Spark's change feed is unavailable ({err}): every version read whole"
                else:
                    changes: dict[int, list[tuple[Any, Any]]] = {}
                    for ch in records:
                        changes.setdefault(ch.partition_id, []).append((_identity(ch.key), ch.value))
                    previous = v
                    for pid in sorted(set(self.pids) | set(changes)):
                        yield pid, v, {}, changes.pop(pid, [])
                    continue
            # The version whole, streamed in partition order: one partition in memory at a time.
            whole = StateScan(self.backend, op, store, version=v, strict=True)
            rows = ((r.partition_id, r.key, r.value) for r in whole.iter_records())
            try:
                for pid, part in _group_by_partition(rows, self.pids):
                    yield pid, v, {_identity(k): val for _, k, val in part}, None
            except StatelensError as err:
                problems.append(err)
                previous = None
                continue
            previous = v

    def _streamable(self) -> bool:
        vs = self.versions
        return (
            len(vs) >= 2 and vs == list(range(vs[0], vs[-1] + 1)) and self.backend.capabilities.engine_queries
        )

    def _walk_streamed(self, cancelled: Callable[[], bool] | None) -> StateWalk:
        """Partition-major walk over Spark's stream of the first version's rows and the change feed."""
        versions = self.versions
        first, last = versions[0], versions[-1]
        rows = self.backend.engine.query(
            f"state and changes of operator {self.operator_id}",
            lambda f: {"events": f.history(self.operator_id, self.store_name, first, last)},
            _EVENTS_IN_ORDER,
            ["p", "v", "change", "key", "value"],
        )
        try:
            for pid, part in _group_by_partition(rows, self.pids):
                state: dict[Any, Any] = {}
                changes: dict[int, list[tuple[Any, Any]]] = {}
                for _, v, change, key, value in part:
                    if change is None:
                        state[_identity(key)] = value
                    else:
                        changes.setdefault(v, []).append((_identity(key), value))
                del part
                if cancelled is not None and cancelled():
                    return
                yield pid, versions[0], state, None
                del state
                for v in versions[1:]:
                    yield pid, v, {}, changes.pop(v, [])
        finally:
            rows.close()

    def value_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        return _tuple_reader(path)

    def key_reader(self, path: tuple[int, ...]) -> Callable[[Any], int | None]:
        read = _tuple_reader(path)
        return lambda key: read(key.key if isinstance(key, _FrozenKey) else key)

    def key_decoder(self, partition_id: int) -> Any:
        return DecodedKeys(self._convert)

    def tiebreak(self, key: Any) -> Any:
        return next(self._ties)  # decoded keys may not be comparable (None, mixed types)

    def check_timeouts_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The timeout checks as a query where the backend's engine runs
        (:func:`app.analysis.expired_spark.timeouts_in_spark`): True when done there, False when the rows
        must be walked here instead."""
        return timeouts_in_spark(op, self, *rest)

    def check_eviction_elsewhere(self, op: Any, *rest: Any) -> Generator[Progress, None, bool]:
        """The eviction check as a query where the backend's engine runs
        (:func:`app.analysis.expired_spark.eviction_in_spark`): True when done there, False when the rows
        must be walked here instead."""
        return eviction_in_spark(op, self, *rest)


def _group_by_partition(
    rows: Iterator[tuple[Any, ...]], known: Iterable[int]
) -> Iterator[tuple[int, list[Any]]]:
    """``(partition, its rows)`` in partition order, from rows sorted by partition (``row[0]``); every
    partition of ``known`` comes out, with no rows when the stream has none for it."""
    ids = sorted(known)
    i = 0
    end = float("inf")
    row = next(rows, None)
    while i < len(ids) or row is not None:
        pid = int(min(ids[i] if i < len(ids) else end, row[0] if row is not None else end))
        if i < len(ids) and ids[i] == pid:
            i += 1
        part = []
        while row is not None and row[0] == pid:
            part.append(row)
            row = next(rows, None)
        yield pid, part


def state_source(ckpt: Any, store: Any, backends: BackendChooser | None = None) -> ScanSource | RowSource:
    """The source :func:`app.analysis.expired.iter_expired` reads one store from.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    store : readers.model.StoreInfo
    backends : readers.backends.BackendChooser, optional
        Picks native or Spark per store (``auto``: native where it can decode); default native.

    Returns
    -------
    ScanSource or RowSource
        The store's records replayed where the backend reads files, else its decoded rows.

    Raises
    ------
    BackendUnavailableError
        The native decoders cannot read this store (and the native backend was asked for).
    """
    backend = (
        backends.for_store(store.operator_id, store.store_name)
        if backends is not None
        else native_backend(ckpt)
    )
    if backend.capabilities.raw_records:
        return ScanSource(backend, store)
    return RowSource(backend, ckpt, store)  # decoded rows from another engine (Spark)


class _FrozenKey:
    """A decoded key that is not hashable as it is (arrays, maps) or holds NaN: compared by value."""

    __slots__ = ("_id", "key")

    def __init__(self, key: Any):
        self.key = key
        self._id = _freeze(key)

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FrozenKey) and self._id == other._id


def _freeze(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float) and value != value:
        return ("NaN",)  # NaN != NaN: the same key must still find itself
    return value


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    if isinstance(value, (tuple, list)):
        return any(_has_nan(v) for v in value)
    return False


def _identity(key: Any) -> Any:
    """A dict key for a decoded key tuple (the tuple itself when it is hashable and NaN-free)."""
    try:
        hash(key)
    except TypeError:
        return _FrozenKey(key)
    return _FrozenKey(key) if _has_nan(key) else key


def _tuple_reader(path: tuple[int, ...]) -> Callable[[Any], int | None]:
    """Reads an integer field of a decoded row by positional path (``None`` when null or not an int)."""

    def read(row: Any) -> int | None:
        for index in path:
            if row is None or index >= len(row):
                return None
            row = row[index]
        return row if isinstance(row, int) and not isinstance(row, bool) else None

    return read


class DecodedKeys:
    """The JSON form of decoded keys (Spark): nothing to decode, only to convert."""

    def __init__(self, convert: Callable[[Any], Any]):
        self.convert = convert

    def decode(self, keys: list[Any]) -> None:
        """Nothing to do: Spark decoded them."""

    def __getitem__(self, key: Any) -> Any:
        return self.convert(key.key if isinstance(key, _FrozenKey) else key)

"""The shared, Qt-free data model of statelens.

Plain frozen dataclasses that every layer passes around: log entries, batches, operators, stores,
state files, decoded rows and changes, progress records and the load report. Decoded Spark values use
one Python representation everywhere (see :data:`VALUE_REPRESENTATION`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from statelens.readers.errors import CorruptFileError, UsageError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from statelens.readers.errors import StatelensError

#: How decoded Spark SQL values are represented in Python, by type.
VALUE_REPRESENTATION = {
    "boolean": "bool",
    "byte/short/integer/long": "int",
    "float/double": "float (NaN and infinities as floats)",
    "string": "str",
    "binary": "bytes",
    "date": "int, days since 1970-01-01",
    "timestamp / timestamp_ntz": "int, microseconds since the epoch",
    "interval day to second": "int, microseconds",
    "interval year to month": "int, months",
    "interval (calendar)": "CalendarInterval(months, days, microseconds)",
    "decimal": "decimal.Decimal",
    "struct": "tuple, positional (field names may repeat)",
    "array": "list",
    "map": "list of (key, value) tuples, in stored order",
    "void / null": "None",
}


class CalendarInterval(NamedTuple):
    """Spark's ``interval`` (CalendarIntervalType) value."""

    months: int
    days: int
    microseconds: int


@dataclass(frozen=True)
class Progress:
    """One step of long work: ``done`` of ``total`` units, working on ``what``."""

    done: int
    total: int
    what: str = ""


class OperatorKind(str, enum.Enum):
    """What a stateful operator is, as far as statelens can tell."""

    AGGREGATION = "aggregation"
    DEDUPLICATION = "deduplication"
    DEDUPLICATION_WITHIN_WATERMARK = "deduplication_within_watermark"
    JOIN = "join"
    FLAT_MAP_GROUPS_WITH_STATE = "flatMapGroupsWithState"
    APPLY_IN_PANDAS_WITH_STATE = "applyInPandasWithState"
    SESSION_WINDOW = "session_window"
    TRANSFORM_WITH_STATE = "transformWithState"
    LIMIT = "limit"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class SourceOffset:
    """One source's entry in an offsets file.

    ``raw`` is the JSON text Spark wrote (``None`` for ``-``, no offset yet); ``parsed`` is that JSON
    decoded; ``source_kind`` is a guess from its shape: ``kafka``, ``file``, ``long``, ``rate`` or
    ``unknown``.
    """

    index: int
    raw: str | None
    parsed: Any
    source_kind: str
    source_id: str | None = None


@dataclass(frozen=True)
class OffsetLogEntry:
    """``offsets/<batch_id>``: what a batch was planned to read, written before it runs."""

    batch_id: int
    format_version: int
    watermark_ms: int
    timestamp_ms: int | None
    conf: dict[str, str]
    sources: tuple[SourceOffset, ...]
    path: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitLogEntry:
    """``commits/<batch_id>``: written after a batch completed."""

    batch_id: int
    format_version: int
    next_watermark_ms: int
    path: str
    state_unique_ids: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchInfo:
    """A batch as the logs tell it."""

    batch_id: int
    offsets: OffsetLogEntry | None
    commit: CommitLogEntry | None

    @property
    def committed(self) -> bool:
        return self.commit is not None

    @property
    def timestamp_ms(self) -> int | None:
        return self.offsets.timestamp_ms if self.offsets else None

    @property
    def watermark_ms(self) -> int | None:
        return self.offsets.watermark_ms if self.offsets else None


@dataclass(frozen=True)
class FieldOutline:
    """One field of a struct type as its schema JSON spells it, without pyspark: what opening a
    checkpoint classifies operators and finds time columns by (:attr:`StoreSchema.key_fields`).

    ``type_name`` is ``struct``, ``array`` or ``map`` for those, else the type's JSON name (``long``,
    ``timestamp``, ``decimal(10,2)``, ...); ``children`` are a struct's fields.
    """

    name: str
    type_name: str
    metadata: dict[str, Any]
    children: tuple[FieldOutline, ...] = ()

    @property
    def names(self) -> list[str]:
        """The names of a struct's fields, in order (names may repeat)."""
        return [f.name for f in self.children]


def outline_fields(struct: dict[str, Any]) -> tuple[FieldOutline, ...]:
    """The fields of a struct type's JSON value (one :func:`readers.schemas.struct_json` accepted)."""
    out = []
    for f in struct["fields"]:
        kind = f["type"]
        if isinstance(kind, dict):
            name = str(kind["type"])
            children = outline_fields(kind) if name == "struct" else ()
        else:
            name, children = str(kind), ()
        out.append(FieldOutline(f["name"], name, f.get("metadata") or {}, children))
    return tuple(out)


def struct_type(value: dict[str, Any], path: str | None, offset: int | None = None) -> StructType:
    """pyspark's ``StructType`` of a struct type's JSON value: where schema files are parsed
    (:mod:`readers.schemas`) and where a :class:`StoreSchema`'s text becomes types.

    Raises
    ------
    CorruptFileError
        pyspark refuses it (or it is nested too deeply), naming ``path`` and ``offset``.
    """
    from pyspark.sql.types import StructType  # deferred: pyspark (heavy)

    try:
        return StructType.fromJson(value)
    except RecursionError as err:
        raise CorruptFileError("schema JSON is nested too deeply", path, offset) from err
    except Exception as err:  # pyspark raises PySparkValueError, KeyError, TypeError... on bad schemas
        raise CorruptFileError(f"schema JSON is not a valid Spark schema: {err}", path, offset) from err


@dataclass(frozen=True)
class StoreSchema:
    """Key and value schema of one state store (or one column family).

    Held as the JSON text of each struct type (``key_json``, ``value_json`` and, for a MapState column
    family, ``user_key_json``), checked when the file was read and spelled as pyspark's
    ``StructType.json()`` spells it (keys sorted; :func:`readers.schemas.struct_json`).
    :attr:`key_schema`, :attr:`value_schema` and :attr:`user_key_schema` are pyspark ``StructType``
    made on first use, so that a command that only counts rows never imports pyspark (~45 ms);
    :attr:`key_fields` and :attr:`value_fields` outline the fields without it. Build one from pyspark
    types with :meth:`from_types`.
    """

    key_json: str
    value_json: str
    schema_version: int
    path: str
    key_encoder: dict[str, Any] | None = None
    user_key_json: str | None = None

    @classmethod
    def from_types(
        cls,
        key_schema: StructType,
        value_schema: StructType,
        schema_version: int,
        path: str,
        key_encoder: dict[str, Any] | None = None,
        user_key_schema: StructType | None = None,
    ) -> StoreSchema:
        """A schema of pyspark struct types (kept as they are, not parsed again)."""
        user_json = None if user_key_schema is None else user_key_schema.json()
        out = cls(key_schema.json(), value_schema.json(), schema_version, path, key_encoder, user_json)
        out.__dict__.update(key_schema=key_schema, value_schema=value_schema, user_key_schema=user_key_schema)
        return out

    @cached_property
    def key_schema(self) -> StructType:
        """The key's struct type (pyspark)."""
        return struct_type(json.loads(self.key_json), self.path)

    @cached_property
    def value_schema(self) -> StructType:
        """The value's struct type (pyspark)."""
        return struct_type(json.loads(self.value_json), self.path)

    @cached_property
    def user_key_schema(self) -> StructType | None:
        """A MapState column family's user key struct type (pyspark), else None."""
        return None if self.user_key_json is None else struct_type(json.loads(self.user_key_json), self.path)

    @cached_property
    def key_fields(self) -> tuple[FieldOutline, ...]:
        """The key's fields, outlined without pyspark."""
        return outline_fields(json.loads(self.key_json))

    @cached_property
    def value_fields(self) -> tuple[FieldOutline, ...]:
        """The value's fields, outlined without pyspark."""
        return outline_fields(json.loads(self.value_json))


@dataclass(frozen=True)
class StateFile:
    """One state file of a store partition: a delta, snapshot, RocksDB zip or changelog."""

    path: str
    partition_id: int
    version: int
    kind: str  # "delta" | "snapshot" | "zip" | "changelog"
    size_bytes: int
    unique_id: str | None = None


@dataclass(frozen=True)
class StoreInfo:
    """A state store of an operator, across its partitions."""

    operator_id: int
    store_name: str
    provider: str  # "hdfs" | "rocksdb"
    partitions: tuple[int, ...]
    versions: tuple[int, ...]  # every version any partition can be rebuilt at, ascending
    schema: StoreSchema | None
    codec: str

    @property
    def key_schema(self) -> StructType | None:
        return self.schema.key_schema if self.schema else None

    @property
    def value_schema(self) -> StructType | None:
        return self.schema.value_schema if self.schema else None


@dataclass(frozen=True)
class TimeColumn:
    """Where an operator keeps a time that decides eviction or timeouts.

    ``side`` is ``key`` or ``value``; ``path`` is the positional path of field indices into that row
    (e.g. ``(0, 1)`` is the ``end`` of a ``window`` struct at key position 0); ``unit`` is ``us`` or
    ``ms``; ``role`` is ``event_time`` (evicted behind the watermark) or ``timeout`` (a
    (flat)MapGroupsWithState timeout timestamp, ``-1`` meaning none).
    """

    store_name: str
    side: str
    path: tuple[int, ...]
    name: str
    unit: str
    role: str


@dataclass(frozen=True)
class OperatorInfo:
    """A stateful operator of the query."""

    operator_id: int
    kind: OperatorKind
    operator_name: str | None
    stores: tuple[StoreInfo, ...]
    time_columns: tuple[TimeColumn, ...] = ()
    timeout_kind: str | None = None  # "event_time" | "processing_time" | "none" | None (unknown)
    properties: dict[str, Any] = field(default_factory=dict)

    def store(self, store_name: str) -> StoreInfo:
        for s in self.stores:
            if s.store_name == store_name:
                return s

        names = ", ".join(s.store_name for s in self.stores)
        raise UsageError(f"operator {self.operator_id} has no store {store_name!r}; it has: {names}")


class StateRow(NamedTuple):
    """One decoded state entry (a named tuple: millions are built, so construction must be cheap)."""

    partition_id: int
    key: tuple[Any, ...]
    value: tuple[Any, ...] | None


class StateChange(NamedTuple):
    """One change of a version: a ``put`` (value set) or a ``remove`` (value ``None``). ``derived`` is
    True when the store recorded no change of that version (RocksDB without changelog checkpointing) and
    the change is the difference of the version and the one before it."""

    version: int
    partition_id: int
    change: str  # "put" | "remove"
    key: tuple[Any, ...]
    value: tuple[Any, ...] | None
    derived: bool = False


@dataclass(frozen=True)
class PartitionVersionStats:
    """Size of one store partition at one version."""

    operator_id: int
    store_name: str
    version: int
    partition_id: int
    rows: int
    bytes: int


@dataclass
class LoadReport:
    """Every per-file problem met while loading a checkpoint; nothing is skipped unreported."""

    problems: list[StatelensError] = field(default_factory=list)

    def add(self, error: StatelensError) -> None:
        self.problems.append(error)

    def __bool__(self) -> bool:
        return bool(self.problems)


@dataclass(frozen=True)
class FileEntry:
    """One listed file or folder, with its path relative to the checkpoint root."""

    path: str
    size_bytes: int
    is_dir: bool
    #: What changes when the file is rewritten: the object's ETag on object stores, else its mtime.
    version_tag: str = ""
    #: When the file was last written, in epoch milliseconds, as the listing gave it (an object's
    #: ``LastModified`` on object stores, ``mtime`` on disk); None when the listing has no time.
    modified_ms: int | None = None

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

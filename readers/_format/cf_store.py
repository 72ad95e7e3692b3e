"""Keys of RocksDB virtual column families, and one column family read as a store of its own.

Stores with virtual column families (transformWithState; stream-stream join state formats 3 and 4) keep
several logical stores in one RocksDB: every key starts with ``cfId:u16 LE`` and the rest is encoded by
the family's key encoder (docs/format.md §4.3, §7.4.1, §7.7):

* ``NoPrefixKeyStateEncoderSpec``: ``00`` + key UnsafeRow.
* ``PrefixKeyScanStateEncoderSpec(n)``: ``len:i32 LE`` + ``00`` + row of the first ``n`` key columns +
  ``00`` + row of the others (``len`` counts the first version byte).
* ``RangeKeyScanStateEncoderSpec(ordinals)``: ``len:i32 LE`` + ``00`` + a row whose fields are the ordering
  columns rewritten as ``binary`` (marker ``00`` negative / ``01`` positive / ``02`` null, then the value
  big-endian; negative floats and doubles with every bit flipped) + ``00`` + row of the other columns
  (absent when every column orders).
* ``TimestampAsPostfixKeyStateEncoderSpec``: ``00`` + row of the key columns but the last + the last
  (``__event_time``) as 8 bytes big-endian with the sign bit flipped; ``...AsPrefix``: the 8 bytes first,
  then ``00`` + the row (verified on Spark 4.3.0 files: the version byte follows the time, unlike spec
  §7.4.1 says).

:func:`decode_keys` turns such keys into tuples in the key schema's column order.
:class:`ColumnFamilyStoreReader` reads one family of such a store with the interface of a plain store
reader, so a join in state format 3 or 4 is read, replayed, analysed and shown like any other join.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from statelens.readers._format.cf_codec import (
    _POSITION,
    _SIGN,
    _U16_LE,
    STATE_ENCODING_VERSION,
    decode_all,
    decode_keys,
    decode_values,
    split_prefix_key,
    strip_version,
)
from statelens.readers._format.rocksdb_store import RocksDBStoreReader
from statelens.readers._format.store_base import RawState, StoreReaderBase, diff_raw
from statelens.readers._format.unsaferow import compile_layout
from statelens.readers.model import PartitionVersionStats, StateChange, StateFile

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.readers._format.rocksdb_store import RocksDBColumnFamilyReader

__all__ = [
    "STATE_ENCODING_VERSION",
    "ColumnFamilyStoreReader",
    "decode_all",
    "decode_keys",
    "decode_values",
    "split_prefix_key",
    "strip_version",
]

_COLUMNAR_ENCODERS = frozenset(
    {
        "NoPrefixKeyStateEncoderSpec",
        "PrefixKeyScanStateEncoderSpec",
        "TimestampAsPostfixKeyStateEncoderSpec",
        "TimestampAsPrefixKeyStateEncoderSpec",
    }
)


def _layout(schema: Any) -> Any:
    """The compiled UnsafeRow layout of a schema (memoised by its JSON: families share few schemas)."""
    text = schema.json()
    got = _LAYOUTS.get(text)
    if got is None:
        got = _LAYOUTS[text] = compile_layout(schema)
    return got


_LAYOUTS: dict[str, Any] = {}


def _version_bytes_at(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray, at: int) -> bool:
    """Every row (``starts``, ``lens``) is longer than ``at`` and has the version byte 00 at ``at``."""
    if not len(starts):
        return True
    if (lens <= at).any():
        return False
    return bool((u8[starts + at] == STATE_ENCODING_VERSION).all())


def _gather(u8: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each offset, one row each (C-contiguous, to be viewed as a wider type)."""
    return np.ascontiguousarray(u8[starts[:, None] + np.arange(width)])


class ColumnFamilyStoreReader(StoreReaderBase):
    """One column family of a RocksDB store, read as a store (join state formats 3/4, transformWithState).

    Raw keys are the key bytes after the column family id (for no-prefix families the key UnsafeRow,
    exactly what a plain store's raw key is) and raw values the value row. A multi-value family (list
    state, join format 4) is flattened: one raw entry per element, keyed by the key bytes plus the
    element's position (4 bytes), so rows, growth and replay count elements as Spark's reader shows them.
    Raw changes (:meth:`iter_raw_changes`) are the difference between consecutive versions in that flat
    form; :meth:`read_changes` keeps the changelog's own records (``put`` / ``remove`` / ``append``).

    Parameters
    ----------
    families : RocksDBColumnFamilyReader
        Reader of the whole physical store.
    family : str
        Column family read as this store.
    """

    provider = "rocksdb"

    def __init__(self, families: RocksDBColumnFamilyReader, family: str):
        files = families.files
        cf = families.families[family]
        super().__init__(
            files.fs, files.operator_id, family, files.partitions, cf.schema, files.codec, row_checksum=False
        )
        self.physical = families
        self.family = cf
        self.plain = cf.encoder == "NoPrefixKeyStateEncoderSpec"
        self.multi = cf.multi_value

    def files(self) -> list[StateFile]:
        return self.physical.files.files()

    def physical_rocksdb(self) -> RocksDBStoreReader | None:
        files = self.physical.files
        return files if isinstance(files, RocksDBStoreReader) else None

    def element_grouping(self) -> tuple[str | None, Callable[[bytes], bytes] | None]:
        """How raw entries group into keys: list elements and join values share their key bytes (the
        flat key ends in a 4-byte position), map entries their grouping key (prefix of the key)."""
        if self.multi:
            return ("list" if self.family.variable_type == "ListState" else "values"), lambda raw: raw[:-4]
        if self.family.variable_type == "MapState":
            path = self.family.name
            return "map", lambda raw: split_prefix_key(raw, path)[0]
        return None, None

    def _prefix(self, partition_id: int) -> bytes | None:
        ids = self.physical.column_family_ids(partition_id)
        return _U16_LE.pack(ids[self.family.name]) if self.family.name in ids else None

    def _own(self, partition_id: int, prefix: bytes, full: dict[bytes, Any]) -> RawState:
        """This family's (``prefix``) entries of a physical state, flat (one per list element)."""
        path = f"{self._partition(partition_id).directory}"
        out: RawState = {}
        for key, value in full.items():
            if key[:2] != prefix:
                continue
            raw_key = self._raw_key(key[2:], path)
            if self.multi:
                for n, element in enumerate(value):
                    out[raw_key + _POSITION.pack(n)] = element
            else:
                out[raw_key] = strip_version(value, path)
        return out

    def _raw_key(self, key: bytes, path: str) -> bytes:
        return strip_version(key, path) if self.plain else key

    # -- raw state -------------------------------------------------------------------------------------
    def read_raw(self, partition_id: int, version: int) -> RawState:
        prefix = self._prefix(partition_id)
        if prefix is None:
            return {}
        return self._own(partition_id, prefix, self.physical.read_raw(partition_id, version, only=prefix))

    def iter_raw_changes(self, partition_id: int, version: int) -> Iterator[tuple[bytes, bytes | None]]:
        """What changed in this family from ``version - 1`` to ``version`` (``None`` value = removed)."""
        before = self.read_raw(partition_id, version - 1) if version > 1 else {}
        return iter(diff_raw(before, self.read_raw(partition_id, version)))

    def iter_versions_raw(
        self, partition_id: int, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, RawState, int]]:
        """Every readable version of a partition, oldest first (physical states replayed incrementally)."""
        pf = self._partition(partition_id)
        for v in pf.readable_versions():
            if cancelled is not None and cancelled():
                return
            yield v, self.read_raw(partition_id, v), self._on_disk(pf, v)

    def _iter_partition_stats(
        self, pid: int, cancelled: Callable[[], bool] | None
    ) -> Iterator[PartitionVersionStats]:
        for v, state, on_disk in self.iter_versions_raw(pid, cancelled):
            yield PartitionVersionStats(self.operator_id, self.store_name, v, pid, len(state), on_disk)

    # -- decoding --------------------------------------------------------------------------------------
    #: read_changes keeps the changelog's own records (put/remove/append): decoded per row.
    columnar_changes = False

    @property
    def columnar(self) -> bool:  # type: ignore[override]
        """:meth:`read_arrow` replays and decodes this family column by column (:meth:`_columnar_arrow`):
        UnsafeRow encoding without row checksums, keys without range-scan ordering columns. Avro rows,
        checksummed rows and range-scan keys (internal TTL/timer indexes) are decoded per row."""
        return (
            not self.physical.avro
            and not self.physical.row_checksum
            and self.family.encoder in _COLUMNAR_ENCODERS
        )

    def _decode_arrow(
        self, partition_id: int, version: int, unique_names: bool, raw: bool = False
    ) -> pa.Table:
        if raw:  # the stored bytes are the family's rows as the base reader lays them out
            return super()._decode_arrow(partition_id, version, unique_names, raw=True)
        if self.columnar:
            table = self._columnar_arrow(partition_id, version, unique_names)
            if table is not None:
                return table
        return self._rows_arrow(partition_id, version, unique_names)

    def _columnar_arrow(self, partition_id: int, version: int, unique_names: bool) -> pa.Table | None:
        """The family at ``version`` replayed as arrays (:meth:`RocksDBColumnFamilyReader.family_arrays`)
        and decoded into Arrow columns; None when a key or value is not shaped as its encoder writes it
        (the per-row path then reads it again and names the damage)."""
        from statelens.readers._format.unsaferow_arrow import decode_arrow  # deferred: loads pyarrow

        key_type, value_type, empty = self._arrow_types(unique_names, False)
        prefix = self._prefix(partition_id)
        if prefix is None:  # declared, never created in this partition
            return empty
        buf, kstart, klen, vstart, vlen = self.physical.family_arrays(partition_id, version, prefix)
        path = f"{self._partition(partition_id).directory}/{version}"
        u8 = np.frombuffer(buf, dtype=np.uint8)
        keys = self._key_column(buf, u8, kstart, klen, key_type, path)
        if keys is None:
            return None
        if not self.multi:  # the value as stored: version byte, then the row
            if not _version_bytes_at(u8, vstart, vlen, 0):
                return None
            vstart, vlen = vstart + 1, vlen - 1
        assert self.schema is not None
        values = decode_arrow(buf, vstart, vlen, _layout(self.schema.value_schema), value_type, path=path)
        return self._state_table(partition_id, keys, values, unique_names)

    def _key_column(
        self, buf: bytes, u8: np.ndarray, ks: np.ndarray, kl: np.ndarray, key_type: pa.StructType, path: str
    ) -> pa.StructArray | None:
        """Keys (bytes after the family id) of this family's encoder as one struct column, or None."""
        import pyarrow as pa  # deferred: pyarrow (heavy)
        from pyspark.sql.types import StructType  # deferred: pyspark (heavy)

        from statelens.readers._format.unsaferow_arrow import decode_arrow  # deferred: loads pyarrow

        assert self.schema is not None
        fields = list(self.schema.key_schema.fields)
        encoder = self.family.encoder
        n = len(fields)

        def part(starts: np.ndarray, lens: np.ndarray, lo: int, hi: int) -> list[pa.Array]:
            if lo == hi:
                return []
            arrow = pa.struct([key_type.field(i) for i in range(lo, hi)])
            got = decode_arrow(buf, starts, lens, _layout(StructType(fields[lo:hi])), arrow, path=path)
            return [got.field(i) for i in range(hi - lo)]

        if encoder == "NoPrefixKeyStateEncoderSpec":
            if not _version_bytes_at(u8, ks, kl, 0):
                return None
            children = part(ks + 1, kl - 1, 0, n)
        elif encoder == "PrefixKeyScanStateEncoderSpec":
            cols = (self.schema.key_encoder or {}).get("numColsPrefixKey", 1)
            if not isinstance(cols, int) or isinstance(cols, bool) or not 1 <= cols < n or (kl < 4).any():
                return None  # a prefix of every column, or a damaged spec: per row
            size = _gather(u8, ks, 4).view("<i4").reshape(-1).astype(np.int64)
            rest = kl - 4 - size
            if (size < 1).any() or (rest < 1).any():
                return None
            if not (_version_bytes_at(u8, ks + 4, size, 0) and _version_bytes_at(u8, ks + 4 + size, rest, 0)):
                return None
            children = part(ks + 5, size - 1, 0, cols) + part(ks + 5 + size, rest - 1, cols, n)
        else:  # Timestamp as postfix / prefix: 8 bytes big-endian, sign bit flipped
            if (kl < 9).any() or not pa.types.is_int64(key_type.field(n - 1).type):
                return None
            postfix = encoder.startswith("TimestampAsPostfix")
            row_at = ks if postfix else ks + 8
            if not _version_bytes_at(u8, row_at, kl - 8, 0):
                return None
            stamp = _gather(u8, ks + kl - 8 if postfix else ks, 8).view(">u8").reshape(-1)
            times = (stamp ^ np.uint64(_SIGN)).astype(np.uint64).view(np.int64)
            children = part(row_at + 1, kl - 9, 0, n - 1) + [pa.array(times, type=pa.int64())]
        fields_out = [
            key_type.field(i) if key_type.field(i).type == c.type else key_type.field(i).with_type(c.type)
            for i, c in enumerate(children)
        ]
        if not children:
            return pa.array([{}] * len(ks), type=key_type)
        return pa.StructArray.from_arrays(children, fields=fields_out)

    def decode_pairs(
        self, pairs: list[tuple[bytes, bytes | None]], path: str
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
        """Decode flat (key, value) pairs (a multi-value key carries its element position at the end)."""
        keys_raw = [k[: -_POSITION.size] if self.multi else k for k, _ in pairs]
        if self.plain:  # raw keys are the key rows already (Avro: schema id + record)
            keys = decode_values(keys_raw, self.family.schema.key_schema, path, self.physical.avro)
        else:
            keys = decode_keys(self.family, keys_raw, path, self.physical.avro)
        present = [i for i, (_, v) in enumerate(pairs) if v is not None]
        values = decode_values(
            [pairs[i][1] for i in present],  # type: ignore[misc]
            self.family.schema.value_schema,
            path,
            self.physical.avro,
        )
        out: list[tuple[tuple[Any, ...], tuple[Any, ...] | None]] = [(k, None) for k in keys]
        for i, decoded in zip(present, values, strict=True):
            out[i] = (keys[i], decoded)
        return out

    def read_changes(self, partition_id: int, version: int) -> list[StateChange]:
        """The changelog's records of this family: ``put``, ``remove``, or ``append`` (list elements merged
        in); without a changelog of ``version``, the difference with the version before (``derived``)."""
        if self.changes_derived(partition_id, version):
            return super().read_changes(partition_id, version)
        out: list[StateChange] = []
        for change, row in self.physical.read_variable_changes(partition_id, version, self.family.name):
            key = row.key if row.user_key is None else (row.key, row.user_key)
            out.append(StateChange(version, partition_id, change, key, row.value))
        return out

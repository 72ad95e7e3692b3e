"""Keys of RocksDB virtual column families, and one column family read as a store of its own.

Stores with virtual column families (transformWithState; stream-stream join state formats 3 and 4) keep
several logical stores in one RocksDB: every key starts with ``cfId:u16 LE`` and the rest is encoded by
the family's key encoder (spec §4.3, §7.4.1, §7.7):

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

import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from readers.errors import CorruptFileError, UnsupportedVersionError
from readers.model import PartitionVersionStats, StateChange, StateFile, StateRow
from readers.store_base import RawState, StoreReaderBase
from readers.unsaferow import compile_layout, decode_rows

if TYPE_CHECKING:
    from readers.rocksdb_store import ColumnFamily, RocksDBColumnFamilyReader

__all__ = ["ColumnFamilyStoreReader", "decode_keys", "split_prefix_key", "strip_version"]

STATE_ENCODING_VERSION = 0
_I32_LE = struct.Struct("<i")
_U16_LE = struct.Struct("<H")
_SIGN = 1 << 63
_NEGATIVE, _POSITIVE, _NULL = 0, 1, 2


def strip_version(row: bytes, path: str) -> bytes:
    """The UnsafeRow after the state encoding version byte ``00``."""
    if not row or row[0] != STATE_ENCODING_VERSION:
        raise CorruptFileError(
            f"row {row[:12].hex(' ')}... does not start with the state encoding version byte 00", path
        )
    return row[1:]


def split_prefix_key(key: bytes, path: str) -> tuple[bytes, bytes]:
    """``len:i32 LE`` + ``00`` + first row + ``00`` + second row -> the two rows (second may be empty)."""
    if len(key) < 4:
        raise CorruptFileError(f"prefix/range-scan key of {len(key)} bytes has no length word", path)
    size = _I32_LE.unpack_from(key, 0)[0]
    if size < 1 or 4 + size > len(key):
        raise CorruptFileError(f"prefix/range-scan key declares a {size}-byte prefix in {len(key) - 4} bytes", path)
    rest = key[4 + size :]
    return strip_version(key[4 : 4 + size], path), (strip_version(rest, path) if rest else b"")


def decode_all(rows: list[bytes], schema: Any, path: str) -> list[tuple[Any, ...]]:
    """Decode UnsafeRows of one schema, column-wise."""
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(rows) else lens
    return list(decode_rows(b"".join(rows), starts, lens, compile_layout(schema), path=path))


def _range_value(raw: bytes | None, data_type: Any, path: str) -> Any:
    """One ordering column of a range-scan key: marker byte + big-endian value (spec §4.3)."""
    from pyspark.sql.types import (
        ByteType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        ShortType,
        TimestampType,
    )

    if raw is None or not raw:
        raise CorruptFileError("range-scan column without its marker byte", path)
    marker, body = raw[0], raw[1:]
    if marker == _NULL:
        return None
    if marker not in (_NEGATIVE, _POSITIVE):
        raise CorruptFileError(f"range-scan column has marker {marker:02x} (expected 00, 01 or 02)", path)
    sizes = {ByteType: 1, ShortType: 2, IntegerType: 4, LongType: 8, TimestampType: 8, FloatType: 4, DoubleType: 8}
    size = sizes.get(type(data_type))
    if size is None:
        raise UnsupportedVersionError(
            f"range-scan ordering column of type {data_type.simpleString()} is not decoded natively; "
            "use --backend spark",
            path,
        )
    if len(body) < size:
        raise CorruptFileError(f"range-scan {data_type.simpleString()} column has {len(body)} of {size} bytes", path)
    body = body[:size]
    if isinstance(data_type, (FloatType, DoubleType)):
        bits = int.from_bytes(body, "big")
        if marker == _NEGATIVE:
            bits ^= (1 << (8 * size)) - 1
        fmt = ">f" if size == 4 else ">d"
        return struct.unpack(fmt, bits.to_bytes(size, "big"))[0]
    return int.from_bytes(body, "big", signed=True)


def decode_values(rows: list[bytes], schema: Any, path: str, avro: bool = False) -> list[tuple[Any, ...]]:
    """Decode value rows (version byte removed): UnsafeRows, or ``schemaId`` + Avro with ``avro``."""
    if not avro:
        return decode_all(rows, schema, path)
    from readers.avro_rows import decode_avro, split_schema_id

    return decode_avro([split_schema_id(r, path)[1] for r in rows], schema, path)


def decode_keys(family: ColumnFamily, keys: list[bytes], path: str, avro: bool = False) -> list[tuple[Any, ...]]:
    """Decode column family keys (``cfId`` removed) into tuples in the key schema's column order.

    With ``avro`` the rows are Avro-encoded (spec §4.3): a schema id after each version byte, except in
    the prefix part of a prefix-scan key.
    """
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = family.schema
    fields = list(schema.key_schema.fields)
    encoder = family.encoder
    if avro and encoder not in ("NoPrefixKeyStateEncoderSpec", "PrefixKeyScanStateEncoderSpec"):
        raise UnsupportedVersionError(
            f"Avro-encoded {encoder} keys (column family {family.name!r}) are not decoded natively; "
            "use --backend spark",
            path,
        )
    if encoder == "NoPrefixKeyStateEncoderSpec":
        return decode_values([strip_version(k, path) for k in keys], schema.key_schema, path, avro)
    if encoder == "PrefixKeyScanStateEncoderSpec":
        n = int((schema.key_encoder or {}).get("numColsPrefixKey", 1))
        split = [split_prefix_key(k, path) for k in keys]
        if avro:
            from readers.avro_rows import decode_avro

            firsts = decode_avro([a for a, _ in split], StructType(fields[:n]), path)
        else:
            firsts = decode_all([a for a, _ in split], StructType(fields[:n]), path)
        rests = decode_values([b for _, b in split], StructType(fields[n:]), path, avro)
        return [a + b for a, b in zip(firsts, rests, strict=True)]
    if encoder == "RangeKeyScanStateEncoderSpec":
        ordinals = [int(o) for o in (schema.key_encoder or {}).get("orderingOrdinals", [0])]
        if any(o < 0 or o >= len(fields) for o in ordinals):
            raise CorruptFileError(f"range-scan ordinals {ordinals} outside the {len(fields)}-column key", path)
        others = [i for i in range(len(fields)) if i not in ordinals]
        binary = StructType([StructField(fields[o].name, BinaryType()) for o in ordinals])
        split = [split_prefix_key(k, path) for k in keys]
        ordered = decode_all([a for a, _ in split], binary, path)
        rests = decode_all([b for _, b in split], StructType([fields[i] for i in others]), path) if others else []
        out: list[tuple[Any, ...]] = []
        for n, raw_cols in enumerate(ordered):
            row: list[Any] = [None] * len(fields)
            for o, raw in zip(ordinals, raw_cols, strict=True):
                row[o] = _range_value(raw, fields[o].dataType, path)
            for i, value in zip(others, rests[n] if others else (), strict=True):
                row[i] = value
            out.append(tuple(row))
        return out
    if encoder in ("TimestampAsPostfixKeyStateEncoderSpec", "TimestampAsPrefixKeyStateEncoderSpec"):
        postfix = encoder.startswith("TimestampAsPostfix")
        key_rows: list[bytes] = []
        times: list[int] = []
        for k in keys:
            if len(k) < 9:
                raise CorruptFileError(f"timestamp-keyed key of {len(k)} bytes has no 8-byte event time", path)
            if postfix:
                stamp, key_row = k[-8:], strip_version(k[:-8], path)
            else:
                stamp, key_row = k[:8], strip_version(k[8:], path)
            unsigned = int.from_bytes(stamp, "big") ^ _SIGN
            times.append(unsigned - (1 << 64) if unsigned >= _SIGN else unsigned)
            key_rows.append(key_row)
        decoded = decode_all(key_rows, StructType(fields[:-1]), path)
        return [d + (t,) for d, t in zip(decoded, times, strict=True)]
    raise UnsupportedVersionError(
        f"column family {family.name!r} uses key encoder {encoder}, which the native decoder does not know; "
        "use --backend spark",
        path,
    )


class ColumnFamilyStoreReader(StoreReaderBase):
    """One column family of a RocksDB store, read as a store (join state formats 3 and 4).

    Raw keys are the key bytes after the column family id (for no-prefix families: the key UnsafeRow,
    exactly what a plain store's raw key is), raw values the value row, or for multi-value families a
    tuple of element rows (one decoded row per element, as Spark's reader shows them).

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

    def files(self) -> list[StateFile]:
        return self.physical.files.files()

    def _prefix(self, partition_id: int) -> bytes | None:
        ids = self.physical.column_family_ids(partition_id)
        return _U16_LE.pack(ids[self.family.name]) if self.family.name in ids else None

    def _own(self, partition_id: int, full: dict[bytes, Any]) -> RawState:
        prefix = self._prefix(partition_id)
        if prefix is None:
            return {}
        path = f"{self._partition(partition_id).directory}"
        out: RawState = {}
        for key, value in full.items():
            if key[:2] != prefix:
                continue
            out[self._raw_key(key[2:], path)] = self._raw_value(value, path)
        return out

    def _raw_key(self, key: bytes, path: str) -> bytes:
        return strip_version(key, path) if self.plain else key

    def _raw_value(self, value: Any, path: str) -> Any:
        if isinstance(value, list):
            return tuple(value)
        return strip_version(value, path)

    # -- raw state -------------------------------------------------------------------------------------
    def read_raw(self, partition_id: int, version: int) -> RawState:
        return self._own(partition_id, self.physical.read_raw(partition_id, version))

    def iter_raw_changes(self, partition_id: int, version: int) -> Iterator[tuple[bytes, bytes | None]]:
        """The family's records of one changelog; a merge (list append) is one put per element appended."""
        prefix = self._prefix(partition_id)
        path = self._partition(partition_id).directory
        for kind, key, value in self.physical.iter_changelog(partition_id, version):
            if prefix is None or key[:2] != prefix:
                continue
            raw_key = self._raw_key(key[2:], path)
            if value is None:
                yield raw_key, None
            elif isinstance(value, list):
                yield raw_key, tuple(value) if kind == "put" else ("append", *value)  # type: ignore[misc]
            else:
                yield raw_key, strip_version(value, path)

    def iter_versions_raw(
        self, partition_id: int, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, RawState, int]]:
        """Every readable version of a partition, oldest first (the state is rebuilt per version)."""
        pf = self._partition(partition_id)
        for v in pf.readable_versions():
            if cancelled is not None and cancelled():
                return
            yield v, self.read_raw(partition_id, v), self._on_disk(pf, v)

    def _iter_partition_stats(
        self, pid: int, cancelled: Callable[[], bool] | None
    ) -> Iterator[PartitionVersionStats]:
        for v, state, on_disk in self.iter_versions_raw(pid, cancelled):
            rows = sum(len(x) if isinstance(x, tuple) else 1 for x in state.values())
            yield PartitionVersionStats(self.operator_id, self.store_name, v, pid, rows, on_disk)

    # -- decoding --------------------------------------------------------------------------------------
    def decode_pairs(
        self, pairs: list[tuple[bytes, bytes | None]], path: str
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
        """Decode (key, value) pairs; a multi-value entry gives one pair per element."""
        expanded: list[tuple[bytes, Any]] = []
        for key, value in pairs:
            entry: Any = value
            if isinstance(entry, tuple):
                elements = entry[1:] if entry and entry[0] == "append" else entry
                expanded.extend((key, e) for e in elements)
            else:
                expanded.append((key, entry))
        if self.plain:  # raw keys are the key rows already
            keys = decode_all([k for k, _ in expanded], self.family.schema.key_schema, path)
        else:
            keys = decode_keys(self.family, [k for k, _ in expanded], path)
        present = [i for i, (_, v) in enumerate(expanded) if v is not None]
        values = decode_all([expanded[i][1] for i in present], self.family.schema.value_schema, path)
        out: list[tuple[tuple[Any, ...], tuple[Any, ...] | None]] = [(k, None) for k in keys]
        for i, decoded in zip(present, values, strict=True):
            out[i] = (keys[i], decoded)
        return out

    def read_rows(self, partition_id: int, version: int) -> list[StateRow]:
        path = f"{self._partition(partition_id).directory}/{version}"
        decoded = self.decode_pairs(list(self.read_raw(partition_id, version).items()), path)
        return [StateRow(partition_id, k, v) for k, v in decoded]

    def read_changes(self, partition_id: int, version: int) -> list[StateChange]:
        """Decoded records of one version: ``put``, ``remove``, or ``append`` (list element merged in)."""
        path = self._partition(partition_id).deltas[version].path
        out: list[StateChange] = []
        for key, value in self.iter_raw_changes(partition_id, version):
            appended = isinstance(value, tuple) and bool(value) and value[0] == "append"
            for k, v in self.decode_pairs([(key, value)], path):
                change = "remove" if v is None else ("append" if appended else "put")
                out.append(StateChange(version, partition_id, change, k, v))
        return out

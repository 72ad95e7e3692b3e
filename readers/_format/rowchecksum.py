"""Row checksums of state stores (``spark.sql.streaming.stateStore.rowChecksum.enabled``, Spark 4.3+, docs/format.md §3.6).

With the setting on (it is pinned in the offsets ``conf``), every stored row carries a CRC-32C
(Castagnoli, ``java.util.zip.CRC32C``) written little-endian in front of it:

* HDFS put / snapshot entry: value bytes = ``crc:u32 LE`` + value UnsafeRow; the CRC covers
  key row ++ value row.
* HDFS remove: key bytes = ``crc:u32 LE`` + key UnsafeRow; the CRC covers the key row.
* RocksDB value (zip or changelog): ``crc:u32 LE`` + ``len:i32 LE`` + the encoded value (``00`` + row);
  the CRC covers the encoded key (version byte included) ++ the encoded value. Keys of puts and keys in
  zips are not wrapped; the key of a changelog *remove* is ``crc:u32 LE`` + the encoded key, the CRC over
  the encoded key (verified on Spark 4.3.0 files; the spec has keys never wrapped).

Each function checks every CRC and strips the prefix; a mismatch is a :class:`ChecksumError` that names
the file and the record, so a flipped bit in state is reported instead of decoded into a wrong value.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

from statelens.readers.errors import ChecksumError, CorruptFileError

__all__ = ["crc32c", "strip_hdfs", "strip_rocksdb_removed_key", "strip_rocksdb_value", "ROCKSDB_VALUE_HEADER"]

_U32_LE = struct.Struct("<I")
_CRC_LEN = struct.Struct("<Ii")
#: Bytes in front of a RocksDB value's ``00`` version byte when rows carry checksums.
ROCKSDB_VALUE_HEADER = 8


@functools.cache
def _crc32c() -> Callable[..., int]:
    """The CRC32C function of the ``crc32c`` package, imported on first use."""
    from crc32c import crc32c  # deferred: crc32c loads importlib.metadata and its CLI (~40 ms of every start)

    return crc32c  # type: ignore[no-any-return]


def crc32c(data: bytes, value: int = 0) -> int:
    """The CRC-32C of ``data`` (continuing from ``value``), as ``java.util.zip.CRC32C`` computes it."""
    return _crc32c()(data, value)


def _mismatch(what: str, stored: int, computed: int, path: str, record: int) -> ChecksumError:
    return ChecksumError(
        f"row checksum of record {record} ({what}) does not match: stored {stored:08x}, computed "
        f"{computed:08x} (CRC-32C); the row is damaged",
        path,
        record=record,
    )


def strip_hdfs(
    keys: list[bytes], values: list[bytes | None], path: str
) -> tuple[list[bytes], list[bytes | None]]:
    """Check and remove the CRC prefixes of one HDFS delta/snapshot's records (``None`` value = remove).

    Raises
    ------
    ChecksumError
        A stored CRC does not match the row.
    CorruptFileError
        A row shorter than its 4-byte checksum.
    """
    crc = _crc32c()
    out_keys: list[bytes] = []
    out_values: list[bytes | None] = []
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        if value is None:
            out_keys.append(_strip_key_checksum(key, path, i))
            out_values.append(None)
            continue
        if len(value) < 4:
            raise CorruptFileError(f"value of record {i} is shorter than its row checksum", path, record=i)
        stored, row = _U32_LE.unpack_from(value)[0], value[4:]
        computed = crc(row, crc(key))
        if stored != computed:
            raise _mismatch("put", stored, computed, path, i)
        out_keys.append(key)
        out_values.append(row)
    return out_keys, out_values


def strip_rocksdb_value(key: bytes, value: bytes, path: str, record: int) -> bytes:
    """The encoded value (``00`` + row) inside a checksummed RocksDB value, after checking its CRC.

    ``key`` is the RocksDB key as stored (version byte, or column family id, included).

    Raises
    ------
    ChecksumError, CorruptFileError
    """
    if len(value) < ROCKSDB_VALUE_HEADER:
        raise CorruptFileError(
            f"value of record {record} ({len(value)} bytes) is shorter than its checksum header",
            path,
            record=record,
        )
    stored, size = _CRC_LEN.unpack_from(value)
    body = value[ROCKSDB_VALUE_HEADER:]
    if size != len(body):
        raise CorruptFileError(
            f"value of record {record} declares {size} bytes after its checksum but has {len(body)}",
            path,
            record=record,
        )
    crc = _crc32c()
    computed = crc(body, crc(key))
    if stored != computed:
        raise _mismatch("value", stored, computed, path, record)
    return body


def _strip_key_checksum(key: bytes, path: str, record: int) -> bytes:
    """A removed key without its ``crc:u32 LE`` prefix (the CRC covers the rest), after checking it."""
    if len(key) < 5:
        raise CorruptFileError(
            f"removed key of record {record} is shorter than its row checksum", path, record=record
        )
    stored, body = _U32_LE.unpack_from(key)[0], key[4:]
    computed = _crc32c()(body)
    if stored != computed:
        raise _mismatch("remove", stored, computed, path, record)
    return body


def strip_rocksdb_removed_key(key: bytes, path: str, record: int) -> bytes:
    """The encoded key (``00`` + row) of a changelog remove, after checking its CRC prefix.

    Raises
    ------
    ChecksumError, CorruptFileError
    """
    return _strip_key_checksum(key, path, record)

"""Write one new state version that removes chosen keys, in the format Spark writes (``statelens prune``).

A pruned copy of a checkpoint gains one batch that reads no data (docs/format.md §12): its state
version ``v`` is, in every partition of every store, one file holding the removals of that partition:

* HDFS stores: ``<v>.delta``, the record stream of §3.3 with one ``remove`` record per key
  (``keyLen key -1``; with row checksums the key carries its CRC-32C, §3.6) and the end marker, in the
  store's codec (§3.2);
* RocksDB stores with changelog checkpointing: ``<v>.changelog`` in format v1 (§4.4), the same
  records over the RocksDB key bytes (``00`` + key row).

Spark's ``loadMap(v)`` / ``RocksDB.load(v)`` rebuild version ``v - 1`` as before and apply these
removals, so no SST, zip or snapshot is rewritten. What cannot be written this way is refused, with the
reason, before anything is written (:func:`cannot_write`): RocksDB stores without changelogs (a new
version would be a zip of rewritten SSTs), virtual column families (transformWithState, joins v3/v4:
changelog v2 records), and checkpoint format v2 (unique ids that the commit log must name).

On local file systems every written file also gets the hidden Hadoop checksum sidecar that Spark's
``ChecksumFileSystem`` writes beside it (§1.3, :func:`hadoop_crc`).
"""

from __future__ import annotations

import posixpath
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from statelens.readers.codecs import compress, decompress, sniff_codec
from statelens.readers.hdfs_store import HDFSStoreReader
from statelens.readers.records import changelog_header
from statelens.readers.rocksdb_store import RocksDBStoreReader

__all__ = ["NewFile", "cannot_write", "crc_sidecar_path", "hadoop_crc", "removal_files"]

_I32_BE = struct.Struct(">i")
_U32_BE = struct.Struct(">I")
_U32_LE = struct.Struct("<I")
_END = _I32_BE.pack(-1)
#: ``io.bytes.per.checksum``, Hadoop's default for ``ChecksumFileSystem``.
_BYTES_PER_CHECKSUM = 512


@dataclass(frozen=True)
class NewFile:
    """A file to write into the copy: its path relative to the checkpoint root, and its bytes."""

    path: str
    data: bytes


def hadoop_crc(data: bytes, bytes_per_checksum: int = _BYTES_PER_CHECKSUM) -> bytes:
    """The ``.<name>.crc`` sidecar Hadoop's ``ChecksumFileSystem`` keeps beside a local file: ``crc\\0``,
    the chunk size (i32 BE), then the CRC-32 (u32 BE) of every ``bytes_per_checksum`` chunk."""
    out = bytearray(b"crc\x00" + _I32_BE.pack(bytes_per_checksum))
    for i in range(0, len(data), bytes_per_checksum):
        out += _U32_BE.pack(zlib.crc32(data[i : i + bytes_per_checksum]))
    return bytes(out)


def crc_sidecar_path(path: str) -> str:
    """``dir/name`` -> ``dir/.name.crc``."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}.crc")


def cannot_write(reader: Any, base: int) -> str | None:
    """Why a removal version on top of version ``base`` cannot be written for this store (None when it
    can): every partition must be at ``base`` and, for RocksDB, have its changelog in format v1.

    Reads the changelog of ``base`` of each RocksDB partition (its header).
    """
    kind = type(reader)
    if kind is HDFSStoreReader:
        return None
    if kind is not RocksDBStoreReader:
        return (
            "a RocksDB store with virtual column families (transformWithState, stream-stream join "
            "formats 3 and 4): writing its changelog v2 records is not supported"
        )
    for pid in reader.partition_ids():
        pf = reader.partitions[pid]
        if base not in pf.readable_versions():
            return (
                f"partition {pid} cannot rebuild version {base} (its versions end at {pf.latest_version()})"
            )
        sf = pf.deltas.get(base)
        if sf is None:
            return (
                f"RocksDB without changelog checkpointing (partition {pid} version {base} is a zip "
                "only): a new version would be a zip of rewritten SST files, which statelens does not write"
            )
        if sf.unique_id is not None:
            return (
                "RocksDB checkpoint format v2 (stateStore.checkpointFormatVersion=2): new versions need "
                "unique ids the commit log names, which statelens does not write"
            )
        data = decompress(reader.fs.read_bytes(sf.path), sf.path, reader.codec)
        fmt, _ = changelog_header(data, sf.path)
        if fmt != 1:
            return f"RocksDB changelog format v{fmt} ({sf.path}): only format v1 is written"
    return None


def removal_files(reader: Any, partition_id: int, version: int, keys: Iterable[bytes]) -> list[NewFile]:
    """The state files of ``version`` of one partition that remove ``keys`` (raw key rows, as
    :meth:`~readers.store_base.StoreReaderBase.read_raw` gives them) from version ``version - 1``:
    one delta or changelog.

    The codec is the one the partition's newest earlier file is written in (its magic bytes decide, as when
    reading). Call :func:`cannot_write` first: this assumes the store can be written.
    """
    pf = reader.partitions[partition_id]
    before = max((sf for sf in pf.deltas.values() if sf.version < version), key=lambda sf: sf.version)
    codec = sniff_codec(reader.fs.read_bytes(before.path)[:8]) or reader.codec
    rocks = type(reader) is RocksDBStoreReader
    out = bytearray()
    for key in keys:
        stored = b"\x00" + key if rocks else key
        if reader.row_checksum:
            stored = _U32_LE.pack(crc32c(stored)) + stored
        out += _I32_BE.pack(len(stored)) + stored + _END
    out += _END
    name = f"{version}.{'changelog' if rocks else 'delta'}"
    return [NewFile(posixpath.join(pf.directory, name), compress(bytes(out), codec))]

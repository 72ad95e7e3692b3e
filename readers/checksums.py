"""Hadoop's checksum sidecars (docs/format.md §1.3): the ``.<name>.crc`` file Hadoop's
``ChecksumFileSystem`` writes beside every file on a local (``file:``) file system. The sidecar is
``crc\0``, the chunk size (i32 big-endian, 512 as Spark writes it), then the CRC-32 (u32 big-endian) of
every chunk of the file, the last one short.

A file whose bytes no longer match its sidecar changed after it was written (edited by hand, even only
saved again by an editor that adds a final newline; damaged on disk). Spark checks the sidecar only where
it reads through Hadoop's ``FileSystem``: RocksDB zips and SSTs, which a load copies to local disk and
refuses with ``org.apache.hadoop.fs.ChecksumException: Checksum error: <file> at <offset>``. Logs and the
other state files go through its checkpoint file manager (``FileContext``), which reads them unchecked.
Object stores (S3A, ABFS, GCS) keep no sidecars and check none.
"""

from __future__ import annotations

import posixpath
import struct
import zlib

from statelens.readers.errors import ChecksumError, CorruptFileError

__all__ = ["MAGIC", "check_against_sidecar", "crc_sidecar_path", "hadoop_crc", "sidecar_target"]

#: The first four bytes of a sidecar.
MAGIC = b"crc\x00"
#: The chunk size Hadoop writes (``file.bytes-per-checksum``).
BYTES_PER_CHECKSUM = 512
_I32_BE = struct.Struct(">i")
_U32_BE = struct.Struct(">I")
_HEADER = len(MAGIC) + _I32_BE.size


def hadoop_crc(data: bytes, bytes_per_checksum: int = BYTES_PER_CHECKSUM) -> bytes:
    """The ``.<name>.crc`` sidecar Hadoop's ``ChecksumFileSystem`` keeps beside a local file: ``crc\\0``,
    the chunk size (i32 BE), then the CRC-32 (u32 BE) of every ``bytes_per_checksum`` chunk."""
    out = bytearray(MAGIC + _I32_BE.pack(bytes_per_checksum))
    for i in range(0, len(data), bytes_per_checksum):
        out += _U32_BE.pack(zlib.crc32(data[i : i + bytes_per_checksum]))
    return bytes(out)


def crc_sidecar_path(path: str) -> str:
    """``dir/name`` -> ``dir/.name.crc``."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}.crc")


def sidecar_target(path: str) -> str | None:
    """``dir/.name.crc`` -> ``dir/name``, the file a sidecar checks; None for any other name."""
    folder, name = posixpath.split(path)
    if not (name.startswith(".") and name.endswith(".crc")) or len(name) <= len("..crc"):
        return None
    return posixpath.join(folder, name[1 : -len(".crc")])


def check_against_sidecar(data: bytes, sidecar: bytes, path: str) -> None:
    """Check a file's bytes against its sidecar as Hadoop's checked read does.

    Parameters
    ----------
    data : bytes
        The file, whole.
    sidecar : bytes
        Its ``.<name>.crc``.
    path : str
        The file, for the error.

    Raises
    ------
    CorruptFileError
        The sidecar itself is not one (bad magic, chunk size or length); names the sidecar.
    ChecksumError
        A chunk's CRC-32 differs, or the file has more or fewer chunks than the sidecar covers; names the
        file and the offset of the first chunk that differs (Hadoop's ``at <offset>``), with the expected
        and computed CRCs.
    """
    where = crc_sidecar_path(path)
    if len(sidecar) < _HEADER or sidecar[: len(MAGIC)] != MAGIC:
        raise CorruptFileError("not a Hadoop checksum file (no crc\\0 header)", path=where, offset=0)
    (chunk,) = _I32_BE.unpack_from(sidecar, len(MAGIC))
    if chunk <= 0:
        raise CorruptFileError(f"chunk size {chunk} in the header", path=where, offset=len(MAGIC))
    body = len(sidecar) - _HEADER
    if body % _U32_BE.size:
        raise CorruptFileError(
            f"{body} bytes of checksums, not a whole number of 4-byte CRCs", path=where, offset=_HEADER
        )
    stored = body // _U32_BE.size
    chunks = -(-len(data) // chunk)
    view = memoryview(data)
    computed = [zlib.crc32(view[i : i + chunk]) for i in range(0, min(stored, chunks) * chunk, chunk)]
    recorded = struct.unpack_from(f">{len(computed)}I", sidecar, _HEADER)
    if list(recorded) != computed:
        n = next(
            i for i, (got, expected) in enumerate(zip(computed, recorded, strict=True)) if got != expected
        )
        got, expected = computed[n], recorded[n]
        raise ChecksumError(
            f"does not match its Hadoop checksum {posixpath.basename(where)}: the {chunk}-byte chunk at "
            f"byte {n * chunk} has CRC-32 {got}, the sidecar says {expected}",
            path=path,
            offset=n * chunk,
            expected=expected,
            got=got,
        )
    if stored != chunks:
        raise ChecksumError(
            f"is {len(data)} bytes, {chunks} chunk(s) of {chunk}, but its Hadoop checksum "
            f"{posixpath.basename(where)} covers {stored}",
            path=path,
            offset=min(stored, chunks) * chunk,
        )

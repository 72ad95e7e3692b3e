"""RocksDB state store: ``<v>.zip`` + ``SSTs/`` and ``<v>.changelog`` files of one store, all partitions.

Written by ``RocksDBStateStoreProvider`` (Spark 3.2+; changelog checkpointing 3.4+; checkpoint format v2
with ``<v>_<uniqueId>`` file names 4.0+). Follows ``docs/format.md`` §4:

* a ``<v>.zip`` holds a RocksDB checkpoint directory without its SST files plus Spark's ``metadata``
  JSON naming the SSTs (``SSTs/<dfsSstFileName>`` to be placed under ``<localFileName>``, §4.2);
* a ``<v>.changelog`` holds the puts and deletes of version ``v`` in the delta framing (§4.4), parsed by
  :func:`readers._format.records.scan_changelog`;
* version ``v`` is the newest zip ``s <= v`` plus the changelogs ``s+1 .. v`` (§4.5); without changelog
  checkpointing every version has its own zip.

Keys and values in RocksDB and in changelogs carry a ``00`` version byte before the UnsafeRow (§4.3);
it is stripped, so the raw bytes handed out are exactly the UnsafeRows of an HDFS store. Stores with
virtual column families (transformWithState, join v3/v4: 2-byte column family prefix, changelog v2/v4)
are recognised by :func:`readers.checkpoint.Checkpoint.store_reader`, which refuses them for now.

SST files are opened with ``rocksdict`` (read-only) after the zip is extracted into a temporary folder
**outside the checkpoint**; SSTs are copied there (never linked: RocksDB and rocksdict write small files
into the folder they open). Every temporary folder is removed in ``finally`` blocks, also when a
generator is closed early. Extraction is defensive: only flat entry names, no links, sizes capped.
"""

from __future__ import annotations

import io
import json
import os
import re
import reprlib
import shutil
import stat
import struct
import tempfile
import threading
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from statelens.readers._format.cf_codec import decode_keys, decode_values, strip_version
from statelens.readers._format.codecs import decompress
from statelens.readers._format.keyids import PaddedKeys, bytewise_order
from statelens.readers._format.records import (
    KIND_MERGE,
    KIND_PUT,
    KIND_REMOVE,
    RecordIndex,
    SizedLayout,
    SizeRuns,
    changelog_header,
    frame_records,
    gather_bytes,
    scan_changelog,
    sized_prefix,
)
from statelens.readers._format.records import KIND_MERGE as MERGE
from statelens.readers._format.records import KIND_REMOVE as REMOVE
from statelens.readers._format.rowchecksum import (
    ROCKSDB_VALUE_HEADER,
    strip_rocksdb_removed_key,
    strip_rocksdb_value,
)
from statelens.readers._format.store_base import (
    RawArrays,
    RawState,
    ReplayRecords,
    StoreReaderBase,
    VersionArrays,
    VersionRows,
    file_groups,
)
from statelens.readers.arrow_values import binary_array, key_ids, numbers
from statelens.readers.errors import (
    BackendUnavailableError,
    BadMagicError,
    ChecksumError,
    CorruptFileError,
    LimitExceededError,
    MissingFileError,
    StatelensError,
    TruncatedFileError,
    UnsupportedVersionError,
    UsageError,
)
from statelens.readers.fs import CheckpointFS
from statelens.readers.model import PartitionVersionStats, StateFile, StoreSchema
from statelens.readers.parallel import in_order

__all__ = [
    "ColumnFamily",
    "ColumnFamilyRow",
    "RocksDBColumnFamilyReader",
    "ZipLimits",
    "RocksDBPartitionFiles",
    "RocksDBStoreReader",
    "list_rocksdb_partition_files",
    "parse_zip_metadata",
    "sniff_rocksdb_file_name",
    "split_list_value",
    "workspace_base",
]

# ``^\d+(_<uuid>)?\.(zip|changelog)$`` (docs/format.md §1.3): ``2.zip.crc`` sidecars and temp files never match.
_ROCKS_FILE_RE = re.compile(r"^(\d+)(?:_([0-9A-Za-z-]{1,64}))?\.(zip|changelog)$")
# Zip entries of a RocksDB checkpoint folder are flat file names (CURRENT, MANIFEST-n, OPTIONS-n, n.log,
# metadata); SST names in the metadata likewise.
_FLAT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
_LOCAL_SST_RE = re.compile(r"^\d+\.(sst|log)$")
# Compression methods of the entries Spark writes; general-purpose flags it never sets (bit 0 encrypted,
# bit 5 patched data, bit 6 strong encryption).
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_ZIP_UNSUPPORTED_FLAGS = 0x0001 | 0x0020 | 0x0040


#: Spark's ``STATE_ENCODING_VERSION`` byte in front of every key and value row (docs/format.md §4.3).
STATE_ENCODING_VERSION = 0

#: A version's live records are replayed from its changelogs rather than read from its zip through RocksDB
#: while the changelogs up to the zip's version hold at most this many times the bytes of the SSTs it
#: names (0.1-0.6x in the stores measured: aggregations whose batches add keys; a store whose batches
#: rewrite every key would replay its whole history).
CHANGELOG_REPLAY_RATIO = 4


@dataclass(frozen=True)
class ZipLimits:
    """Safety caps for extracting a ``<v>.zip`` (zip bombs are refused with :class:`LimitExceededError`).

    Real zips hold a few small RocksDB metadata files (KiB to a few MiB of MANIFEST); SSTs are separate.
    """

    max_zip_bytes: int = 1 << 30
    max_entries: int = 1_000
    max_entry_bytes: int = 1 << 30
    max_total_bytes: int = 2 << 30
    max_metadata_bytes: int = 64 << 20


def sniff_rocksdb_file_name(name: str) -> tuple[int, str | None, str] | None:
    """Return ``(version, unique_id or None, kind)`` for ``<v>[_<id>].zip|changelog``, else ``None``."""
    m = _ROCKS_FILE_RE.match(name)
    if not m:
        return None
    return int(m.group(1)), m.group(2), m.group(3)


@dataclass
class RocksDBPartitionFiles:
    """The state files of one partition of one RocksDB store.

    ``deltas`` (changelogs) and ``snapshots`` (zips) hold, per version, the file that counts: with
    checkpoint format v2 the one whose unique id the commit log names. Files of the same version with
    another id (retried batches) are kept in ``ignored``. The names ``deltas``/``snapshots`` match
    :class:`readers._format.hdfs_store.PartitionFiles`, so code that only needs sizes per version reads both.
    """

    partition_id: int
    directory: str
    deltas: dict[int, StateFile] = field(default_factory=dict)
    snapshots: dict[int, StateFile] = field(default_factory=dict)
    sst_sizes: dict[str, int] = field(default_factory=dict)
    log_sizes: dict[str, int] = field(default_factory=dict)
    ignored: list[StateFile] = field(default_factory=list)

    def readable_versions(self) -> list[int]:
        """Versions that can be rebuilt: a zip, or a base (zip or empty version 0) plus unbroken changelogs."""
        out: set[int] = set(self.snapshots)
        starts = ([0] if 1 in self.deltas else []) + sorted(self.snapshots)
        for start in starts:
            v = start + 1
            while v in self.deltas:
                out.add(v)
                v += 1
        return sorted(out)

    def latest_version(self) -> int:
        return max([*self.deltas, *self.snapshots], default=0)

    def files(self) -> list[StateFile]:
        """Changelogs then zips, by version (SSTs are shared between versions and not listed)."""
        return [self.deltas[v] for v in sorted(self.deltas)] + [
            self.snapshots[v] for v in sorted(self.snapshots)
        ]


def list_rocksdb_partition_files(
    fs: CheckpointFS,
    directory: str,
    partition_id: int,
    unique_ids: dict[int, str] | None = None,
) -> RocksDBPartitionFiles:
    """Collect the zips, changelogs and SSTs of one RocksDB store partition folder.

    Parameters
    ----------
    fs : CheckpointFS
        The checkpoint.
    directory : str
        The store folder (``state/<op>/<partition>[/<store>]``).
    partition_id : int
        For the results.
    unique_ids : dict of int to str, optional
        Checkpoint format v2: version -> the unique id the commit log names for this store partition
        (``commits/<v-1>`` ``stateUniqueIds``, docs/format.md §2.5). For a version without one, a single file of that
        version and kind is used; several are all ignored (no way to tell which one Spark committed).
    """
    pf = RocksDBPartitionFiles(partition_id, directory)
    found: dict[tuple[int, str], list[StateFile]] = {}
    for entry in fs.list_dir(directory):
        if entry.is_dir:
            continue
        parsed = sniff_rocksdb_file_name(entry.name)
        if parsed is None:
            continue
        version, uid, kind = parsed
        found.setdefault((version, kind), []).append(
            StateFile(entry.path, partition_id, version, kind, entry.size_bytes, unique_id=uid)
        )
    wanted = unique_ids or {}
    for (version, kind), candidates in sorted(found.items()):
        target = pf.deltas if kind == "changelog" else pf.snapshots
        uid = wanted.get(version)
        if uid is not None:
            chosen = [c for c in candidates if c.unique_id == uid]
        elif len(candidates) == 1:
            chosen = candidates
        else:
            chosen = []
        if chosen:
            target[version] = chosen[0]
        pf.ignored.extend(c for c in candidates if not chosen or c is not chosen[0])
    for sub, sizes in (("SSTs", pf.sst_sizes), ("logs", pf.log_sizes)):
        for entry in fs.list_dir(f"{directory}/{sub}"):
            if not entry.is_dir:
                sizes[entry.name] = entry.size_bytes
    return pf


# -- zip metadata --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZipMetadata:
    """Spark's ``metadata`` entry of a ``<v>.zip`` (``RocksDBCheckpointMetadata``, docs/format.md §4.2)."""

    sst_files: tuple[tuple[str, str, int], ...]  # (localFileName, dfsSstFileName, sizeBytes)
    log_files: tuple[tuple[str, str, int], ...]  # (localFileName, dfsLogFileName, sizeBytes)
    num_keys: int | None
    column_family_mapping: dict[str, int]
    raw: dict[str, Any]


def parse_zip_metadata(data: bytes, path: str) -> ZipMetadata:
    """Parse the ``metadata`` entry of a RocksDB ``<v>.zip``: ``v1`` then one JSON line.

    Raises
    ------
    UnsupportedVersionError
        A version line other than ``v1``.
    CorruptFileError
        Bad JSON or a field of the wrong shape (also unsafe file names).
    """
    text = data.decode("utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    if first.strip() != "v1":
        if first.startswith("v") and first[1:].strip().isdigit():
            raise UnsupportedVersionError(
                f"zip 'metadata' entry is {first.strip()!r}; statelens reads v1", path
            )
        raise CorruptFileError("zip 'metadata' entry does not start with 'v1'", path)
    try:
        doc = json.loads(rest)
    except ValueError as err:
        raise CorruptFileError(f"zip 'metadata' entry is not JSON: {err}", path) from err
    except RecursionError as err:
        raise CorruptFileError("zip 'metadata' entry JSON is nested too deeply", path) from err
    if not isinstance(doc, dict):
        raise CorruptFileError("zip 'metadata' entry is not a JSON object", path)

    def files(key: str, dfs_key: str) -> tuple[tuple[str, str, int], ...]:
        items = doc.get(key) or []
        out = []
        if not isinstance(items, list):
            raise CorruptFileError(f"zip 'metadata' {key!r} is not a list", path)
        for item in items:
            try:
                local, dfs, size = item["localFileName"], item[dfs_key], item["sizeBytes"]
            except (TypeError, KeyError) as err:
                raise CorruptFileError(
                    f"zip 'metadata' {key!r} entry {_short_repr(item)} lacks a name or size", path
                ) from err
            if not _is_count(size):  # a JSON integer (1e999 is a float, inf: no int() of it)
                raise CorruptFileError(
                    f"zip 'metadata' {key!r} entry {_short_repr(item)} has no integer sizeBytes", path
                )
            if not (isinstance(local, str) and _LOCAL_SST_RE.match(local)) or not (
                isinstance(dfs, str) and _FLAT_NAME_RE.match(dfs)
            ):
                raise CorruptFileError(
                    f"zip 'metadata' names an unsafe file: {_short_repr(local)} / {_short_repr(dfs)}", path
                )
            out.append((local, dfs, size))
        return tuple(out)

    mapping = doc.get("columnFamilyMapping") or {}
    if not isinstance(mapping, dict) or not all(_is_count(v) for v in mapping.values()):
        raise CorruptFileError("zip 'metadata' 'columnFamilyMapping' is not an object of integer ids", path)
    num_keys = doc.get("numKeys")
    return ZipMetadata(
        files("sstFiles", "dfsSstFileName"),
        files("logFiles", "dfsLogFileName"),
        int(num_keys) if isinstance(num_keys, int) else None,
        {str(k): int(v) for k, v in mapping.items()},
        doc,
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short_repr(value: Any) -> str:
    """A bounded repr for messages (depth and length capped: values come from an untrusted file)."""

    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 3, 60, 60
    return short.repr(value)


def _zip_error(err: Exception, data: bytes, path: str) -> StatelensError:
    if not data.startswith(b"PK"):
        return BadMagicError(
            f"not a zip file (starts with {data[:4].hex(' ') or 'nothing'}, expected 50 4b 'PK')", path, 0
        )
    return TruncatedFileError(f"zip cannot be opened ({err}); the file is probably cut short", path)


def read_zip(data: bytes, path: str, limits: ZipLimits) -> dict[str, bytes]:
    """The entries of a RocksDB ``<v>.zip`` as ``{name: bytes}``, after every safety check.

    Raises
    ------
    BadMagicError, TruncatedFileError
        Not a zip / no central directory (cut short).
    CorruptFileError
        An entry name that is not a flat file name (``..``, absolute, folders), a link, a duplicate.
    ChecksumError
        An entry's CRC-32 does not match.
    LimitExceededError
        Too many entries, or entries larger than the caps (declared or actual).
    """
    if len(data) > limits.max_zip_bytes:
        raise LimitExceededError(f"zip is {len(data)} bytes, over the limit of {limits.max_zip_bytes}", path)
    plain = _read_plain_zip(data, limits)
    if plain is not None:
        return plain
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except NotImplementedError as err:  # "zip file version 7.8": a feature Python's zipfile lacks
        raise UnsupportedVersionError(f"zip uses a feature statelens cannot read ({err})", path) from err
    except (zipfile.BadZipFile, EOFError, ValueError) as err:
        raise _zip_error(err, data, path) from err
    out: dict[str, bytes] = {}
    total = 0
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_entries:
            raise LimitExceededError(
                f"zip has {len(infos)} entries, over the limit of {limits.max_entries}", path
            )
        for info in infos:
            name = info.filename
            if name.endswith("/") and info.file_size == 0 and _FLAT_NAME_RE.match(name[:-1] or "-"):
                continue  # an empty folder entry: nothing to extract
            if not _FLAT_NAME_RE.match(name) or name in (".", ".."):
                raise CorruptFileError(
                    f"zip entry {name!r} is not a plain file name (paths, '..' and absolute names are refused)",
                    path,
                    info.header_offset,
                )
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode) or (mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG)):
                raise CorruptFileError(
                    f"zip entry {name!r} is a link or special file", path, info.header_offset
                )
            if name in out:
                raise CorruptFileError(f"zip entry {name!r} appears twice", path, info.header_offset)
            if info.compress_type not in _ZIP_METHODS or info.flag_bits & _ZIP_UNSUPPORTED_FLAGS:
                # Spark's java.util.zip writes deflated or stored entries, never encrypted or patched
                # ones; refusing the rest keeps bzip2/lzma and their own error types out.
                raise UnsupportedVersionError(
                    f"zip entry {name!r} uses compression method {info.compress_type} with flags "
                    f"0x{info.flag_bits:04x}; Spark writes deflated or stored entries, unencrypted",
                    path,
                    info.header_offset,
                )
            cap = limits.max_metadata_bytes if name == "metadata" else limits.max_entry_bytes
            if info.file_size > cap or total + info.file_size > limits.max_total_bytes:
                raise LimitExceededError(
                    f"zip entry {name!r} declares {info.file_size} bytes, over the limit "
                    f"({cap} per entry, {limits.max_total_bytes} in all)",
                    path,
                    info.header_offset,
                )
            out[name] = _read_entry(zf, info, path, min(cap, limits.max_total_bytes - total))
            total += len(out[name])
    return out


_ZIP_END = struct.Struct("<4s4H2LH")  # end of central directory record
_ZIP_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # central directory file header
_ZIP_LOCAL = struct.Struct("<4s2B4HL2L2H")  # local file header
_ZIP_MAX_EXTRACT_VERSION = 63  # zipfile's MAX_EXTRACT_VERSION: later versions are refused


def _read_plain_zip(data: bytes, limits: ZipLimits) -> dict[str, bytes] | None:
    """The entries of a zip laid out as Spark's ``java.util.zip`` writes it, read with ``struct`` and
    ``zlib`` alone (:mod:`zipfile` spends more than half of a check of a Spark zip on its Python objects
    and seeks), or None to read it with :mod:`zipfile`, whose errors :func:`read_zip` reports.

    Anything unusual (a comment, bytes before the zip, Zip64, extra fields, names that are not plain ASCII
    file names, links, duplicates, other methods or flags, entries out of order, overlapping or over the
    limits) or wrong (a size, a CRC-32, a deflate stream that does not end exactly at its compressed
    size) gives None. What this returns passes every check :func:`read_zip` makes, and holds the bytes
    :mod:`zipfile` gives, in the central directory's order.
    """
    n = len(data)
    end = n - _ZIP_END.size
    if end < 0:
        return None
    sig, disk, cd_disk, count_here, count, cd_size, cd_offset, comment = _ZIP_END.unpack_from(data, end)
    if (
        sig != b"PK\x05\x06"
        or comment
        or disk
        or cd_disk
        or count_here != count
        or count > limits.max_entries
        or cd_offset + cd_size != end
        or (end >= 20 and data[end - 20 : end - 16] == b"PK\x06\x07")  # a Zip64 locator
    ):
        return None
    entries: list[tuple[str, int, int, int, int, int]] = []
    pos = cd_offset
    while pos < end:
        if pos + _ZIP_CENTRAL.size > end:
            return None
        (sig, _, _, extract, _, flags, method, _, _, crc, csize, usize, name_len, extra_len, comment_len,
         _, _, external, offset) = _ZIP_CENTRAL.unpack_from(data, pos)  # fmt: skip
        raw_name = data[pos + _ZIP_CENTRAL.size : pos + _ZIP_CENTRAL.size + name_len]
        pos += _ZIP_CENTRAL.size + name_len + extra_len + comment_len
        mode = external >> 16
        if (
            sig != b"PK\x01\x02"
            or extract > _ZIP_MAX_EXTRACT_VERSION
            or extra_len
            or comment_len
            or method not in _ZIP_METHODS
            or flags & _ZIP_UNSUPPORTED_FLAGS
            or not raw_name.isascii()
            or not _FLAT_NAME_RE.match(raw_name.decode("ascii"))
            or (mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG))
        ):
            return None
        entries.append((raw_name.decode("ascii"), method, crc, csize, usize, offset))
    if pos != end or len(entries) != count or len({e[0] for e in entries}) != count:
        return None
    out: dict[str, bytes] = {}
    total = 0
    bounds = sorted((e[5], i) for i, e in enumerate(entries))
    for (offset, i), (following, _) in zip(bounds, [*bounds[1:], (cd_offset, -1)], strict=True):
        next_offset = min(following, cd_offset)  # an entry's bytes end before the next, and the directory
        name, method, crc, csize, usize, _ = entries[i]
        cap = limits.max_metadata_bytes if name == "metadata" else limits.max_entry_bytes
        total += usize
        if usize > cap or total > limits.max_total_bytes or offset + _ZIP_LOCAL.size > next_offset:
            return None
        sig, _, _, flags, _, _, _, _, _, _, name_len, extra_len = _ZIP_LOCAL.unpack_from(data, offset)
        start = offset + _ZIP_LOCAL.size + name_len + extra_len
        if (
            sig != b"PK\x03\x04"
            or flags & _ZIP_UNSUPPORTED_FLAGS
            or data[offset + _ZIP_LOCAL.size : offset + _ZIP_LOCAL.size + name_len] != name.encode("ascii")
            or start + csize > next_offset
        ):
            return None
        raw = data[start : start + csize]
        if method == zipfile.ZIP_STORED:
            content = raw
        else:
            inflate = zlib.decompressobj(-15)
            try:
                content = inflate.decompress(raw, usize + 1)
            except zlib.error:
                return None
            if not inflate.eof or inflate.unconsumed_tail or inflate.unused_data:
                return None
        if len(content) != usize or zlib.crc32(content) != crc:
            return None
        out[name] = content
    return {name: out[name] for name, *_ in entries}


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, cap: int) -> bytes:
    """Read one entry in chunks, never past ``cap`` bytes whatever its header claims."""
    chunks = []
    got = 0
    try:
        with zf.open(info) as fh:
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
                if got > cap:
                    raise LimitExceededError(
                        f"zip entry {info.filename!r} inflates past {cap} bytes (declared {info.file_size})",
                        path,
                        info.header_offset,
                    )
                chunks.append(chunk)
    except zipfile.BadZipFile as err:
        if "CRC" in str(err):
            raise ChecksumError(f"zip entry {info.filename!r}: {err}", path, info.header_offset) from err
        raise TruncatedFileError(
            f"zip entry {info.filename!r} cannot be read: {err}", path, info.header_offset
        ) from err
    except (EOFError, zlib.error, ValueError) as err:
        raise TruncatedFileError(
            f"zip entry {info.filename!r} is cut or corrupt: {err}", path, info.header_offset
        ) from err
    except (NotImplementedError, RuntimeError) as err:  # the local header asks for encryption or patching
        raise UnsupportedVersionError(
            f"zip entry {info.filename!r} cannot be read: {err}", path, info.header_offset
        ) from err
    return b"".join(chunks)


def _next_prefix(prefix: bytes) -> bytes | None:
    """The smallest byte string after every string starting with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None


def _load_rocksdict() -> Any:
    try:
        import rocksdict  # deferred: rocksdict (native library)
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise BackendUnavailableError(
            "reading RocksDB snapshot zips needs rocksdict: pip install rocksdict (or use --backend spark)"
        ) from err
    return rocksdict


#: A memory file system (Linux) that RocksDB workspaces use by default when it has room (:func:`workspace_base`).
MEMORY_TMP = "/dev/shm"
#: What :data:`MEMORY_TMP` must have free, at least, to be used (Docker gives containers 64 MiB).
MEMORY_TMP_MIN_FREE = 1 << 30


def workspace_base(store_bytes: int) -> str | None:
    """Where a store's workspaces go when the reader was given no folder: ``$STATELENS_TMPDIR``; else
    the system's temporary folder when ``$TMPDIR`` names one; else :data:`MEMORY_TMP` when it is a
    writable folder with :data:`MEMORY_TMP_MIN_FREE` and four times ``store_bytes`` (the store's state
    files) free; else the system's temporary folder (None).

    Restoring a zip and opening it with RocksDB is mostly making, writing and removing files, which a
    journaled disk makes slow: ``growth`` of a 200-partition store without changelogs took 7.2-8.2 s with
    its workspaces on this machine's disk and 2.4 s in memory.
    """
    explicit = os.environ.get("STATELENS_TMPDIR")
    if explicit:
        return explicit
    if os.environ.get("TMPDIR"):
        return None
    try:
        st = os.statvfs(MEMORY_TMP)
    except (OSError, AttributeError):  # no such folder; no statvfs (Windows)
        return None
    free = st.f_bavail * st.f_frsize
    if free >= max(MEMORY_TMP_MIN_FREE, 4 * store_bytes) and os.access(MEMORY_TMP, os.W_OK | os.X_OK):
        return MEMORY_TMP
    return None


class _Workspace:
    """A temporary folder outside the checkpoint where zips are extracted and SSTs copied (once each)."""

    def __init__(self, fs: CheckpointFS, base: str | None):
        root = tempfile.mkdtemp(prefix="statelens-rocksdb-", dir=base)
        self.root = root
        if fs.is_local:
            ckpt = os.path.realpath(fs.full_path(""))
            real = os.path.realpath(root)
            if real == ckpt or real.startswith(ckpt.rstrip(os.sep) + os.sep):
                shutil.rmtree(root, ignore_errors=True)
                raise UsageError(
                    f"the temporary folder {root} would be inside the checkpoint; set TMPDIR to another folder"
                )
        self.sst_dir = os.path.join(root, "ssts")
        os.mkdir(self.sst_dir)
        self.cached: dict[str, str] = {}
        self._n = 0
        self._emptied: list[str] = []

    def new_db_dir(self) -> str:
        """An empty folder for one snapshot: one :meth:`release` gave back, else a new one."""
        if self._emptied:
            return self._emptied.pop()
        self._n += 1
        d = os.path.join(self.root, f"db{self._n}")
        os.mkdir(d)
        return d

    def release(self, db_dir: str) -> None:
        """Empty a folder of :meth:`new_db_dir` once its snapshot is read, for the next one (a snapshot
        per version: a folder made and removed for each costs ~0.3 ms more on a journaled file system);
        a folder that cannot be emptied is removed."""
        try:
            with os.scandir(db_dir) as entries:
                for entry in entries:
                    os.unlink(entry.path)  # RocksDB's files and the snapshot's (no folders: else removed)
        except OSError:
            shutil.rmtree(db_dir, ignore_errors=True)
        else:
            self._emptied.append(db_dir)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# -- the reader ----------------------------------------------------------------------------------------
class RocksDBStoreReader(StoreReaderBase):
    """Reads every partition of one RocksDB store without virtual column families.

    Same interface as :class:`readers._format.hdfs_store.HDFSStoreReader`: raw states and changes are keyed by
    the key UnsafeRow bytes (version byte removed), so :meth:`decode_pairs` decodes them alike.

    Parameters
    ----------
    fs : CheckpointFS
        The checkpoint.
    operator_id, store_name : int, str
        Which store (for messages and results).
    partitions : dict[int, RocksDBPartitionFiles]
        Files per partition id.
    schema : StoreSchema or None
        Key/value schema; without it rows cannot be decoded (raw reads still work).
    codec : str
        The changelog codec in the offsets conf (a hint; the magic bytes decide).
    long_value_fields : frozenset of int
        Value field positions stored as int64 whatever their declared type (FMGWS v1 timeout).
    row_checksum : bool
        ``spark.sql.streaming.stateStore.rowChecksum.enabled`` (values carry ``crc:u32 len:i32`` first).
    limits : ZipLimits
        Caps for zip extraction.
    temp_dir : str, optional
        Where temporary folders go (default: :func:`workspace_base`; outside the checkpoint).
    """

    provider = "rocksdb"

    def __init__(
        self,
        fs: CheckpointFS,
        operator_id: int,
        store_name: str,
        partitions: dict[int, RocksDBPartitionFiles],
        schema: StoreSchema | None,
        codec: str,
        long_value_fields: frozenset[int] = frozenset(),
        row_checksum: bool = False,
        limits: ZipLimits | None = None,
        temp_dir: str | None = None,
    ):
        super().__init__(
            fs, operator_id, store_name, partitions, schema, codec, long_value_fields, row_checksum
        )
        self.value_skip = ROCKSDB_VALUE_HEADER + 1 if row_checksum else 1
        self.limits = limits or ZipLimits()
        self.temp_dir = temp_dir
        self._state_bytes: int | None = None

    def physical_rocksdb(self) -> RocksDBStoreReader | None:
        return self

    def files(self) -> list[StateFile]:
        out: list[StateFile] = []
        for pid in self.partition_ids():
            out.extend(self.partitions[pid].files())
        return out

    def ignored_files(self) -> list[StateFile]:
        """Files of a version with a unique id other than the committed one (retries; checkpoint v2)."""
        return [f for pid in self.partition_ids() for f in self.partitions[pid].ignored]

    @contextmanager
    def _located(self, partition_id: int, version: int) -> Iterator[None]:
        try:
            yield
        except StatelensError as err:
            for k, v in self._ctx(partition_id, version).items():
                err.context.setdefault(k, v)
            raise

    # -- changelogs ----------------------------------------------------------------------------------
    def _changelog_index(self, sf: StateFile) -> tuple[bytes, RecordIndex]:
        """One changelog decompressed and indexed, its records' version bytes checked (unless rows carry
        checksums, checked record by record by :meth:`_checked_changelog_pairs`)."""
        data = self._changelog_bytes(sf)
        return data, self._checked_index(sf, data)

    def _changelog_bytes(self, sf: StateFile) -> bytes:
        """The decompressed bytes of one changelog; errors name the store, partition and version."""
        try:  # not _located: this runs once per file of every count (a context manager is ~2 us)
            return decompress(self.fs.read_bytes(sf.path), sf.path, self.codec)
        except StatelensError as err:
            for k, v in self._ctx(sf.partition_id, sf.version).items():
                err.context.setdefault(k, v)
            raise

    def _checked_index(self, sf: StateFile, data: bytes) -> RecordIndex:
        """The index of one decompressed changelog, its records' version bytes checked (unless rows
        carry checksums); errors name the file, the store, partition and version."""
        with self._located(sf.partition_id, sf.version):
            fmt, _lineage, idx = scan_changelog(data, sf.path)
            if fmt in (2, 4) or (idx.kind == KIND_MERGE).any():
                raise BackendUnavailableError(
                    f"changelog format v{fmt} (virtual column families or merge records) in a store read as a "
                    "plain key/value store; use --backend spark",
                    sf.path,
                )
            if not self.row_checksum:
                put = idx.val_len >= 0
                self._check_version_bytes(data, idx.key_start, idx.key_len, sf.path, "key", 1)
                self._check_version_bytes(
                    data, idx.val_start[put], idx.val_len[put], sf.path, "value", self.value_skip
                )
        return idx

    def _changelog_pairs(self, sf: StateFile) -> tuple[list[bytes], list[bytes | None]]:
        """Keys and values (``None`` = delete) of one changelog, version bytes removed, in file order."""
        data, idx = self._changelog_index(sf)
        skip = self.value_skip
        if self.row_checksum:
            with self._located(sf.partition_id, sf.version):
                return self._checked_changelog_pairs(data, idx, sf.path)
        ks, kl, vs, vl = (a.tolist() for a in (idx.key_start, idx.key_len, idx.val_start, idx.val_len))
        keys = [data[s + 1 : s + n] for s, n in zip(ks, kl, strict=True)]
        values = [data[s + skip : s + n] if n >= 0 else None for s, n in zip(vs, vl, strict=True)]
        return keys, values

    def _checked_changelog_pairs(
        self, data: bytes, idx: Any, path: str
    ) -> tuple[list[bytes], list[bytes | None]]:
        """Keys and values of a changelog whose rows carry checksums (docs/format.md §3.6), every CRC checked.

        Puts: the value is ``crc`` + ``len`` + ``00`` + row. Removes: the *key* is ``crc:u32 LE`` (over the
        encoded key) + ``00`` + key row (observed on Spark 4.3.0 files; the spec says RocksDB keys are
        never wrapped, which holds for puts and for keys inside zips).
        """
        ks, kl, vs, vl = (a.tolist() for a in (idx.key_start, idx.key_len, idx.val_start, idx.val_len))
        keys: list[bytes] = []
        values: list[bytes | None] = []
        for i, (k0, kn, v0, vn) in enumerate(zip(ks, kl, vs, vl, strict=True)):
            key = data[k0 : k0 + kn]
            if vn < 0:
                key = strip_rocksdb_removed_key(key, path, i)
            if not key or key[0] != STATE_ENCODING_VERSION:
                raise CorruptFileError(
                    f"key of record {i} does not start with the state encoding version byte 00",
                    path,
                    k0,
                    record=i,
                )
            keys.append(key[1:])
            values.append(None if vn < 0 else strip_rocksdb_value(key, data[v0 : v0 + vn], path, i)[1:])
        return keys, values

    @staticmethod
    def _checked_values(keys: list[bytes], values: list[bytes | None], path: str) -> list[bytes | None]:
        """Value rows (version byte removed) of checksummed values, each CRC checked (docs/format.md §3.6)."""
        return [
            None if v is None else strip_rocksdb_value(k, v, path, i)[1:]
            for i, (k, v) in enumerate(zip(keys, values, strict=True))
        ]

    @staticmethod
    def _check_version_bytes(data: bytes, starts: Any, lens: Any, path: str, what: str, skip: int) -> None:
        """Every row must start (after ``skip - 1`` checksum bytes) with the version byte ``00``."""

        if not len(starts):
            return
        buf = np.frombuffer(data, dtype=np.uint8)
        short = lens < skip
        first = buf[np.where(short, 0, starts + skip - 1)]
        bad = short | (first != STATE_ENCODING_VERSION)
        if bad.any():
            i = int(np.argmax(bad))
            found = "nothing" if short[i] else f"{int(first[i]):02x}"
            raise CorruptFileError(
                f"{what} of record {i} does not start with the state encoding version byte 00 (found {found}); "
                "is this a column family store?",
                path,
                int(starts[i]),
                record=i,
            )

    def _apply_changelog(self, state: RawState, sf: StateFile) -> None:
        self.apply_records(state, *self._changelog_pairs(sf))

    def _apply_changelog_keys(self, live: set[bytes], sf: StateFile) -> None:
        keys, values = self._changelog_pairs(sf)
        for key, value in zip(keys, values, strict=True):
            if value is None:
                live.discard(key)
            else:
                live.add(key)

    # -- zips ----------------------------------------------------------------------------------------
    @contextmanager
    def workspace(self) -> Iterator[_Workspace]:
        """A temporary folder for opening zips, removed on exit (SST copies are shared inside it): in
        ``temp_dir``, else where :func:`workspace_base` says."""
        base = self.temp_dir
        if base is None:
            if self._state_bytes is None:
                self._state_bytes = sum(sf.size_bytes for sf in self.files())
            base = workspace_base(self._state_bytes)
        ws = _Workspace(self.fs, base)
        try:
            yield ws
        finally:
            ws.close()

    def zip_metadata(self, partition_id: int, version: int) -> ZipMetadata:
        """Spark's ``metadata`` of the zip of one version (no RocksDB needed)."""
        sf = self._zip_file(partition_id, version)
        with self._located(partition_id, version):
            entries = read_zip(self._read_zip_bytes(sf), sf.path, self.limits)
            return self._metadata_of(entries, sf)

    def check_snapshot(self, partition_id: int, version: int) -> None:
        """Open the zip of ``version`` (when there is one) and check its entries and ``metadata``: a
        restart of version ``version`` loads that zip (``docs/format.md`` §5), so a walk that reaches the
        version by changelogs must not pass over a damaged zip unseen. Each zip is checked once."""
        if version in self._partition(partition_id).snapshots:
            self._zip_meta(partition_id, version)

    def _zip_meta(self, partition_id: int, version: int) -> ZipMetadata:
        """:meth:`zip_metadata`, each zip read once (then kept for the reader's life)."""
        cache = self.__dict__.setdefault("_zip_metas", {})
        meta = cache.get((partition_id, version))
        if meta is None:
            meta = cache[(partition_id, version)] = self.zip_metadata(partition_id, version)
        return meta  # type: ignore[no-any-return]

    # -- verification (doctor) -------------------------------------------------------------------------
    def verify_zip(self, partition_id: int, version: int, workspace: _Workspace | None = None) -> ZipMetadata:
        """Check that the zip of ``version`` can be loaded as Spark loads it on a restart.

        The zip must open, carry Spark's ``metadata``, and every SST and log file it names must be in
        the store folder with the recorded size; RocksDB must then open the snapshot and read every
        key (values are not decoded, so stores with column families are checked too).

        Parameters
        ----------
        partition_id, version : int
            The zip.
        workspace : optional
            A :meth:`workspace` to restore it in, shared by the zips of a partition (each SST copied
            once for all of them); by default one of its own.

        Returns
        -------
        ZipMetadata
            The zip's metadata (the SST files it names, for the orphan check).

        Raises
        ------
        StatelensError
            The first problem, naming the file (``MissingFileError`` for a missing SST,
            ``TruncatedFileError``/``CorruptFileError`` for a wrong size or unreadable bytes).
        """
        if workspace is not None:
            self._zip_items(workspace, partition_id, version, keys_only=True, column_families=True)
        else:
            with self.workspace() as ws:
                self._zip_items(ws, partition_id, version, keys_only=True, column_families=True)
        return self.zip_metadata(partition_id, version)

    def verify_changelog(self, partition_id: int, version: int) -> int:
        """Check that the changelog of ``version`` decompresses and frames whole records (any format
        version, column families included); returns its record count.

        Raises
        ------
        StatelensError
            Missing, truncated or corrupt, naming the file.
        """
        pf = self._partition(partition_id)
        if version not in pf.deltas:
            raise MissingFileError(
                f"no changelog for version {version}",
                path=f"{pf.directory}/{version}.changelog",
                **self._ctx(partition_id, version),
            )
        sf = pf.deltas[version]
        with self._located(partition_id, version):
            data = decompress(self.fs.read_bytes(sf.path), sf.path, self.codec)
            _fmt, _lineage, idx = scan_changelog(data, sf.path)
        return int(idx.count)

    def _zip_file(self, partition_id: int, version: int) -> StateFile:
        pf = self._partition(partition_id)
        if version not in pf.snapshots:
            raise MissingFileError(
                f"no snapshot zip for version {version}",
                path=f"{pf.directory}/{version}.zip",
                **self._ctx(partition_id, version),
            )
        return pf.snapshots[version]

    def _read_zip_bytes(self, sf: StateFile) -> bytes:
        if sf.size_bytes > self.limits.max_zip_bytes:
            raise LimitExceededError(
                f"zip is {sf.size_bytes} bytes, over the limit of {self.limits.max_zip_bytes}", sf.path
            )
        return self.fs.read_bytes(sf.path)

    @staticmethod
    def _metadata_of(entries: dict[str, bytes], sf: StateFile) -> ZipMetadata:
        if "metadata" not in entries:
            raise CorruptFileError("zip has no 'metadata' entry (not a Spark RocksDB snapshot)", sf.path)
        return parse_zip_metadata(entries["metadata"], sf.path)

    def _read_zip_state(
        self, ws: _Workspace, partition_id: int, version: int, keys_only: bool = False
    ) -> Any:
        """The raw state stored in the zip of ``version`` (a dict, or a set of keys with ``keys_only``)."""
        sf = self._zip_file(partition_id, version)
        items = self._zip_items(ws, partition_id, version, keys_only, column_families=False)
        skip = self.value_skip
        if keys_only:
            self._check_rows(items, 1, sf.path, "key")
            return {k[1:] for k in items}
        self._check_rows([k for k, _ in items], 1, sf.path, "key")
        self._check_rows([v for _, v in items], skip, sf.path, "value")
        if self.row_checksum:
            with self._located(partition_id, version):
                values = self._checked_values([k for k, _ in items], [v for _, v in items], sf.path)
            return {k[1:]: v for (k, _), v in zip(items, values, strict=True)}
        return {k[1:]: v[skip:] for k, v in items}

    def _zip_items(
        self,
        ws: _Workspace,
        partition_id: int,
        version: int,
        keys_only: bool,
        column_families: bool,
        prefix: bytes | None = None,
    ) -> Any:
        """Every RocksDB key (``keys_only``) or ``(key, value)`` of the zip of ``version``, bytes as stored;
        with ``prefix`` only the keys starting with it (a column family: RocksDB seeks to its range)."""
        sf = self._zip_file(partition_id, version)
        db_dir, _meta = self.restore(ws, partition_id, version, column_families=column_families)
        try:
            with self._located(partition_id, version):
                return self._scan_db(db_dir, sf, keys_only, prefix)
        finally:
            ws.release(db_dir)

    def restore(
        self, ws: _Workspace, partition_id: int, version: int, *, column_families: bool = False
    ) -> tuple[str, ZipMetadata]:
        """Lay out the zip of ``version`` in a new folder of ``ws`` as Spark's ``loadCheckpointFromDfs``
        does: the zip's entries (its ``metadata`` too), then every SST and log file it names under its
        local name, each checked against the recorded size.

        Returns
        -------
        tuple of (str, ZipMetadata)
            The folder, ready for RocksDB to open (it lives until ``ws`` closes), and the zip's metadata.

        Raises
        ------
        StatelensError
            The zip cannot be read, an SST is missing or of the wrong size, or (without
            ``column_families``) the store uses virtual column families.
        """
        pf = self._partition(partition_id)
        sf = self._zip_file(partition_id, version)
        with self._located(partition_id, version):
            entries = read_zip(self._read_zip_bytes(sf), sf.path, self.limits)
            meta = self._metadata_of(entries, sf)
            if meta.column_family_mapping and not column_families:
                names = ", ".join(sorted(meta.column_family_mapping))
                raise BackendUnavailableError(
                    f"this store uses virtual column families ({names}), which the native decoder does not "
                    "read yet; use --backend spark",
                    sf.path,
                )
            db_dir = ws.new_db_dir()
            self.fs.read_ahead(  # remote storage: the SSTs and logs this zip names, many at a time
                f"{pf.directory}/{folder}/{dfs}"
                for folder, named in (("SSTs", meta.sst_files), ("logs", meta.log_files))
                for _, dfs, _ in named
                if f"{pf.directory}/{folder}/{dfs}" not in ws.cached
            )
            try:
                for name, content in entries.items():
                    with open(os.path.join(db_dir, name), "xb") as fh:
                        fh.write(content)
                for local, dfs, size in meta.sst_files:
                    self._place(ws, pf, "SSTs", pf.sst_sizes, dfs, size, os.path.join(db_dir, local), sf)
                for local, dfs, size in meta.log_files:
                    self._place(ws, pf, "logs", pf.log_sizes, dfs, size, os.path.join(db_dir, local), sf)
            except BaseException:
                shutil.rmtree(db_dir, ignore_errors=True)
                raise
        return db_dir, meta

    def _place(
        self,
        ws: _Workspace,
        pf: RocksDBPartitionFiles,
        folder: str,
        listed: dict[str, int],
        dfs_name: str,
        size: int,
        target: str,
        zip_file: StateFile,
    ) -> None:
        """Copy ``<folder>/<dfs_name>`` of the checkpoint to ``target`` (through the workspace cache)."""
        rel = self._check_listed(pf, folder, listed, dfs_name, size, zip_file)
        cached = ws.cached.get(rel)
        if cached is None:
            cached = os.path.join(ws.sst_dir, f"{len(ws.cached)}-{dfs_name}")
            data = self.fs.read_bytes(rel)
            if len(data) != size:
                raise TruncatedFileError(f"read {len(data)} bytes, {zip_file.path} records {size}", rel)
            with open(cached, "xb") as fh:
                fh.write(data)
            ws.cached[rel] = cached
        try:
            os.link(cached, target)  # both inside our temporary folder
        except OSError:
            shutil.copyfile(cached, target)

    @staticmethod
    def _check_listed(
        pf: RocksDBPartitionFiles,
        folder: str,
        listed: dict[str, int],
        dfs_name: str,
        size: int,
        zip_file: StateFile,
    ) -> str:
        """``<folder>/<dfs_name>``, which ``zip_file`` names, must be listed at ``size`` bytes; its path."""
        rel = f"{pf.directory}/{folder}/{dfs_name}"
        if dfs_name not in listed:
            raise MissingFileError(
                f"{folder[:-1] if folder.endswith('s') else folder} file named by {zip_file.path} is missing",
                rel,
            )
        if listed[dfs_name] != size:
            cls = TruncatedFileError if listed[dfs_name] < size else CorruptFileError
            raise cls(f"is {listed[dfs_name]} bytes but {zip_file.path} records {size}", rel)
        return rel

    def _scan_db(self, db_dir: str, sf: StateFile, keys_only: bool, prefix: bytes | None = None) -> Any:
        rocksdict = _load_rocksdict()
        bounds: dict[str, Any] = {}
        if prefix is not None:  # keys sort bytewise: a prefix is one range [prefix, next prefix)
            read_opt = rocksdict.ReadOptions()
            read_opt.set_iterate_lower_bound(prefix)
            upper = _next_prefix(prefix)
            if upper is not None:
                read_opt.set_iterate_upper_bound(upper)
            bounds = {"from_key": prefix, "read_opt": read_opt}
        options = rocksdict.Options(raw_mode=True)
        # The SSTs are opened one after another: RocksDB's default pool of 16 threads for opening them
        # costs ~1.5 ms of a 2.3 ms open of a snapshot of a few SSTs (a zip per version: most of the time).
        options.set_max_file_opening_threads(1)
        try:
            db = rocksdict.Rdict(db_dir, options=options, access_type=rocksdict.AccessType.read_only())
        except Exception as err:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status text
            raise CorruptFileError(f"RocksDB cannot open this snapshot: {err}", sf.path) from err
        try:
            return list(db.keys(**bounds)) if keys_only else list(db.items(**bounds))
        except Exception as err:  # noqa: BLE001 - corruption found while iterating (bad block, checksum)
            raise CorruptFileError(f"RocksDB failed reading this snapshot's SSTs: {err}", sf.path) from err
        finally:
            db.close()

    @staticmethod
    def _check_rows(rows: list[bytes], skip: int, path: str, what: str) -> None:
        """Every row must carry the version byte ``00`` at ``skip - 1``: checked in the rows laid end to
        end (one join and one gather, no Python per row); the first that does not is named."""
        if not rows:
            return
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        bad = lens < skip
        joined = np.frombuffer(b"".join(rows), dtype=np.uint8)
        if len(joined):
            ends = np.cumsum(lens)
            bad |= joined[np.where(bad, 0, ends - lens + skip - 1)] != STATE_ENCODING_VERSION
        if bad.any():
            i = int(np.argmax(bad))
            raise CorruptFileError(
                f"RocksDB {what} {i} ({rows[i][:12].hex(' ')}...) does not carry the state encoding version "
                "byte 00 (a column family store?)",
                path,
                record=i,
            )

    # -- raw states ----------------------------------------------------------------------------------
    def _base_for(self, pf: RocksDBPartitionFiles, version: int) -> int | None:
        """Newest zip ``<= version`` with an unbroken changelog chain up to ``version``; 0 = from empty."""
        for s in sorted((s for s in pf.snapshots if s <= version), reverse=True):
            if all(v in pf.deltas for v in range(s + 1, version + 1)):
                return s
        if all(v in pf.deltas for v in range(1, version + 1)):
            return 0
        return None

    def read_raw(self, partition_id: int, version: int, *, _ws: _Workspace | None = None) -> RawState:
        """The raw key/value bytes of one partition at one version (version bytes removed).

        Raises
        ------
        MissingFileError
            When no zip plus unbroken changelog chain reaches ``version``.
        """
        pf = self._partition(partition_id)
        if version == 0:
            return {}
        base = self._base_for(pf, version)
        if base is None:
            start = max((s for s in pf.snapshots if s <= version), default=0)
            gap = next(v for v in range(start + 1, version + 1) if v not in pf.deltas)
            raise MissingFileError(
                f"cannot rebuild version {version}: no zip of it, and {gap}.changelog is missing after "
                f"{'zip ' + str(start) if start else 'the start'}",
                path=f"{pf.directory}/{gap}.changelog",
                **self._ctx(partition_id, version),
            )
        self._read_ahead(("chain", version), partition_id, lambda pid: self._chain_files(pid, version))
        state: RawState = {}
        if base:
            if _ws is not None:
                state = self._read_zip_state(_ws, partition_id, base)
            else:
                with self.workspace() as ws:
                    state = self._read_zip_state(ws, partition_id, base)
        for v in range(base + 1, version + 1):
            self._apply_changelog(state, pf.deltas[v])
        return state

    def iter_raw_changes(self, partition_id: int, version: int) -> Iterator[tuple[bytes, bytes | None]]:
        """The records of version ``version``'s changelog in file order (``None`` value = delete)."""
        pf = self._partition(partition_id)
        if version not in pf.deltas:
            raise MissingFileError(
                f"no changelog for version {version} (changes are only recorded with changelog checkpointing)",
                path=f"{pf.directory}/{version}.changelog",
                **self._ctx(partition_id, version),
            )
        keys, values = self._changelog_pairs(pf.deltas[version])
        yield from zip(keys, values, strict=True)

    def iter_versions_raw(
        self, partition_id: int, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[tuple[int, RawState, int]]:
        """Walk every readable version of a partition once, oldest first.

        Yields ``(version, state, bytes_on_disk)``; ``state`` is the live raw map (do not keep it across
        iterations); ``bytes_on_disk`` counts the zip and changelog of that version (shared SSTs are not
        attributed to a version). Changelogs are applied where they continue the previous version; a
        zip is opened only where they do not.
        """
        pf = self._partition(partition_id)
        self._read_ahead("replay", partition_id, self._replay_files)
        with self.workspace() as ws:
            state: RawState = {}
            for v, continues in self._replay_plan(partition_id, cancelled):
                if continues:
                    self.check_snapshot(partition_id, v)
                    self._apply_changelog(state, pf.deltas[v])
                else:
                    state = self.read_raw(partition_id, v, _ws=ws)
                yield v, state, self._on_disk(pf, v)

    # -- statistics ----------------------------------------------------------------------------------
    def _stats_plan(self, cancelled: Callable[[], bool] | None) -> Iterator[tuple[int, VersionRows | None]]:
        """Partitions replayed from changelogs alone are counted from their keys' ids
        (:meth:`version_rows`); the others (a zip to open, or a file that cannot be read) are walked,
        which reads what it can and reports the file."""

        for pid, rows, _ in in_order(self.version_rows, self.partition_ids(), 1, cancelled):
            yield pid, rows

    def version_rows(self, partition_id: int) -> VersionRows | None:
        """Live rows of one partition at every readable version, counted from the ids of its records'
        keys (:meth:`_replay_records`, :meth:`readers._format.store_base.ReplayRecords.version_rows`) with no
        Python object per changelog record: what ``growth``'s walk over a set of keys counts, as
        :meth:`readers._format.hdfs_store.HDFSStoreReader.version_rows` does for deltas. None where
        :meth:`version_arrays` does not apply. A file that cannot be read raises.
        """
        replay = self._replay_records(partition_id, keep=False)
        return None if replay is None else replay.version_rows()

    def version_arrays(self, partition_id: int) -> VersionArrays | None:
        """Rows and key + value bytes of one partition at every readable version, and its live records at
        the last (version bytes removed, as :meth:`read_raw` gives them), with no Python object per
        changelog record: what ``growth``'s walk computes record by record, counted as
        :meth:`readers._format.hdfs_store.HDFSStoreReader.version_arrays` counts deltas
        (:meth:`readers._format.store_base.ReplayRecords.version_arrays`).

        The first version is rebuilt as :meth:`read_raw` rebuilds it (its zip, read once, or the
        changelogs from version 1), then each later version's changelog is applied (:meth:`_replay_records`).
        A store without changelogs (a zip per version, as every Spark 3.4 RocksDB store) is counted zip
        by zip instead (:meth:`_zip_version_arrays`). None when neither applies: row checksums (checked
        per record), or a store with changelogs whose versions have a gap or miss some changelogs. A
        file that cannot be read raises, and so does a damaged zip of a version reached by its
        changelog (a restart would load it; the walk reports it).
        """
        replay = self._replay_records(partition_id, keep=True)
        if replay is None:
            return self._zip_version_arrays(partition_id)
        return replay.version_arrays(key_skip=1, value_skip=self.value_skip)

    def _zip_version_arrays(self, partition_id: int) -> VersionArrays | None:
        """:meth:`version_arrays` of a partition without changelogs: every version is its own zip, whose
        rows and key + value bytes are counted as it is read (each zip once, its SSTs copied once for
        all), with no state carried from one version to the next and no difference taken (what the
        walk does); the last zip's records are the live ones. None with changelogs or row checksums."""

        pf = self._partition(partition_id)
        versions = self.versions(partition_id)
        if self.row_checksum or pf.deltas or not versions:
            return None
        skip = self.value_skip
        rows = np.zeros(len(versions), dtype=np.int64)
        nbytes = np.zeros(len(versions), dtype=np.int64)
        keys: list[bytes] = []
        values: list[bytes] = []
        self._read_ahead("replay", partition_id, self._replay_files)
        with self.workspace() as ws:
            for i, v in enumerate(versions):
                sf = self._zip_file(partition_id, v)
                items = self._zip_items(ws, partition_id, v, False, column_families=False)
                keys = [k for k, _ in items]
                values = [x for _, x in items]
                with self._located(partition_id, v):
                    self._check_rows(keys, 1, sf.path, "key")
                    self._check_rows(values, skip, sf.path, "value")
                rows[i] = len(items)
                nbytes[i] = sum(map(len, keys)) + sum(map(len, values)) - len(items) * (1 + skip)
        data, idx = frame_records(keys, values)  # the last version's records, version bytes cut off
        return (
            versions,
            rows,
            nbytes,
            (data, idx.key_start + 1, idx.key_len - 1, idx.val_start + skip, idx.val_len - skip),
        )

    def _version_arrays_workers(self) -> int | None:
        """Partitions on :data:`readers.parallel.WORKERS` threads for a :meth:`big` store, else one."""
        return None if self.big() else 1

    def _raw_arrays(self, partition_id: int, version: int) -> RawArrays:
        """The live records of one partition at one version (what :meth:`read_raw` gives, in its order),
        replayed from the changelogs as arrays where they reach back to the start
        (:meth:`_changelog_raw_arrays`: no RocksDB to open, no Python object per record); else
        :meth:`read_raw`'s zip and changelogs."""
        got = self._changelog_raw_arrays(partition_id, version)
        return got if got is not None else super()._raw_arrays(partition_id, version)

    def _changelog_raw_arrays(self, partition_id: int, version: int) -> RawArrays | None:
        """:meth:`read_raw` of ``version`` from the changelogs of versions 1 to ``version``, as arrays.

        The zip :meth:`read_raw` would start from (the newest at or before ``version`` that the
        changelogs continue) is still opened and its ``metadata`` read, and the SST and log files it
        names must be listed at their recorded sizes, with the errors :meth:`read_raw` raises; its
        ``numKeys`` must equal the keys live after the changelogs up to its version. The rows come in
        :meth:`read_raw`'s order: the zip's keys (RocksDB's bytewise order) that no later changelog
        removes, then the others in the order each was last put into the state. None (read the zip)
        for row checksums (checked per record), a changelog missing before ``version``, a changelog
        that cannot be read or indexed (a restart does not read those before the zip), or a zip whose
        key count differs, or changelogs up to the zip over :data:`CHANGELOG_REPLAY_RATIO` times the
        bytes of its SSTs.
        """
        pf = self._partition(partition_id)
        if self.row_checksum or version < 1 or any(v not in pf.deltas for v in range(1, version + 1)):
            return None
        base = self._base_for(pf, version)
        if base is None:
            return None
        meta = self._zip_meta(partition_id, base) if base else None
        if meta is not None:
            sf = pf.snapshots[base]
            with self._located(partition_id, base):
                if meta.column_family_mapping:
                    raise BackendUnavailableError(
                        f"this store uses virtual column families ({', '.join(sorted(meta.column_family_mapping))}"
                        "), which the native decoder does not read yet; use --backend spark",
                        sf.path,
                    )
                for folder, listed, named in (
                    ("SSTs", pf.sst_sizes, meta.sst_files),
                    ("logs", pf.log_sizes, meta.log_files),
                ):
                    for _local, dfs, size in named:
                        self._check_listed(pf, folder, listed, dfs, size, sf)
        files = [pf.deltas[v] for v in range(1, version + 1)]
        if meta is not None and sum(
            changelog.size_bytes for changelog in files[:base]
        ) > CHANGELOG_REPLAY_RATIO * max(sum(size for _, _, size in meta.sst_files), 1):
            return None  # history much larger than the state it left: RocksDB reads the state faster
        replay = ReplayRecords(list(range(1, version + 1)), list(range(version)))
        try:
            self._add_changelog_records(replay, files, keep=True)
        except StatelensError:
            return None  # read as a restart reads it: from the zip (which reports a later changelog too)
        kstart, klen, vstart, vlen = replay.positions()
        n = len(kstart)
        ids = key_ids(replay.pieces).astype(np.int64)
        nid = int(ids.max()) + 1 if n else 0
        at = np.arange(n, dtype=np.int64)
        put = vlen >= 0
        last = np.full(nid, -1, dtype=np.int64)
        np.maximum.at(last, ids, at)
        # the zip's keys: those whose last record up to the zip's version is a put
        pre = int(sum(replay.counts[:base]))
        last_pre = np.full(nid, -1, dtype=np.int64)
        np.maximum.at(last_pre, ids[:pre], at[:pre])
        in_zip = last_pre >= 0
        in_zip[in_zip] = put[last_pre[in_zip]]
        if meta is not None and meta.num_keys is not None and int(in_zip.sum()) != meta.num_keys:
            return None
        # after the zip, a key removed and put again goes to the end (a dict's order)
        post = at >= pre
        last_remove = np.full(nid, -1, dtype=np.int64)
        np.maximum.at(last_remove, ids[post & ~put], at[post & ~put])
        added = post & put & (at > last_remove[ids])
        first_put = np.full(nid, n, dtype=np.int64)
        np.minimum.at(first_put, ids[added], at[added])
        live = (last >= 0) & put[np.maximum(last, 0)]
        kept = live & in_zip & (last_remove < 0)
        later = live & ~kept
        buf = replay.datas[0] if len(replay.datas) == 1 else b"".join(replay.datas)
        zip_rows = last[kept]
        if len(zip_rows):  # in RocksDB's order: bytewise
            padded = PaddedKeys.gather(buf, kstart[zip_rows], klen[zip_rows])
            if padded is not None:
                order = bytewise_order(padded)
            else:  # a few long keys among many short ones: Arrow sorts them as they are
                import pyarrow.compute as pc  # deferred: pyarrow (heavy)

                order = numbers(pc.sort_indices(binary_array(buf, kstart[zip_rows], klen[zip_rows])))
            zip_rows = zip_rows[order]
        later_ids = np.flatnonzero(later)
        rows = np.concatenate([zip_rows, last[later_ids[np.argsort(first_put[later_ids], kind="stable")]]])
        skip = self.value_skip
        return buf, kstart[rows] + 1, klen[rows] - 1, vstart[rows] + skip, vlen[rows] - skip

    def _replay_records(self, partition_id: int, keep: bool) -> ReplayRecords | None:
        """The records of a partition's replay of every readable version, in order: those that rebuild
        the first version (its zip's keys and values framed as a delta's, or the changelogs from
        version 1), then each later version's changelog; with ``keep`` the decompressed files too (else
        a zip's keys alone are read). None for row checksums (checked record by record), versions with
        a gap, or a version after the first without its changelog.

        Changelogs without a header (v1) whose records come in one size or a few (the common case) are
        checked and cut a run of files at a time (:func:`readers._format.records.sized_prefix`), as deltas
        are; the others are indexed one by one.
        """
        versions = self._replay_versions(partition_id)
        if versions is None:
            return None
        pf = self._partition(partition_id)
        chain = self._chain_files(partition_id, versions[0])
        for v in versions[1:]:  # a restart loads these zips: a damaged one is met here too (walked)
            self.check_snapshot(partition_id, v)
        self._read_ahead("replay", partition_id, self._replay_files)
        out = ReplayRecords(versions, [0] * len(chain) + list(range(1, len(versions))))
        changelogs = [*chain, *(pf.deltas[v] for v in versions[1:])]
        if chain and chain[0].kind == "zip":
            self._add_zip_records(out, chain[0], keep)
            changelogs = changelogs[1:]
        self._add_changelog_records(out, changelogs, keep)
        return out

    def _add_changelog_records(self, out: ReplayRecords, changelogs: list[StateFile], keep: bool) -> None:
        """The records of ``changelogs`` in order into ``out`` (with ``keep`` the decompressed files too):
        v1 files checked and cut a run of files at a time (:meth:`_sized_changelog_run`: files of
        fixed-width rows, and files of a few record sizes cut run by run, as deltas are cut), the others
        indexed one by one (:meth:`_checked_index`, which names the file and record of a bad one)."""
        for group in file_groups(changelogs):
            datas = [self._changelog_bytes(sf) for sf in group]
            at = v1_end = 0
            while at < len(group):
                if v1_end <= at:  # the v1 files from here: headers read as far as the first other one
                    v1_end = at
                    while v1_end < len(group) and changelog_header(datas[v1_end], group[v1_end].path)[0] == 1:
                        v1_end += 1
                run, taken = self._sized_changelog_run(group[at:v1_end], datas[at:v1_end])
                if run is not None:
                    out.add_sized(*run)
                else:  # a header (v2-v4), variable-width rows or a failed check: indexed alone, named
                    out.add_indexed(datas[at], self._checked_index(group[at], datas[at]))
                    taken = 1
                at += taken
            if keep:
                out.datas.extend(datas)

    def _add_zip_records(self, out: ReplayRecords, sf: StateFile, keep: bool) -> None:
        """The keys (and with ``keep`` the values) of one zip, read once through RocksDB, into ``out`` as
        the records of a delta holding them (:func:`readers._format.records.frame_records`), version bytes
        checked as :meth:`read_raw` checks them."""
        with self.workspace() as ws:
            items = self._zip_items(ws, sf.partition_id, sf.version, not keep, column_families=False)
        keys = items if not keep else [k for k, _ in items]
        values = None if not keep else [v for _, v in items]
        with self._located(sf.partition_id, sf.version):
            self._check_rows(keys, 1, sf.path, "key")
            if values is not None:
                self._check_rows(values, self.value_skip, sf.path, "value")
        data, idx = frame_records(keys, values)
        out.add_indexed(data, idx)
        if keep:
            out.datas.append(data)

    def _sized_changelog_run(
        self, group: list[StateFile], datas: list[bytes]
    ) -> tuple[tuple[Any, list[int], list[SizedLayout]] | None, int]:
        """The keys (size word in front) of the longest run of leading v1 changelogs cut without a walk
        record by record, each file's record count and layout (:func:`readers._format.records.sized_prefix`),
        their version bytes checked at once, and how many files that is; ``(None, 0)`` when the first file
        cannot be cut so or fails a check. The files must be v1 changelogs (no header). A run ends where
        :func:`readers._format.records.sized_prefix` ends it, or before the first file with a version byte
        that is not 00 (that file is then indexed alone, which names the file and record)."""
        if not group:
            return None, 0
        run, taken = sized_prefix(datas, [True] * len(datas))
        if run is None:
            return None, 0
        keys, counts, layouts = run
        rows, lens = (keys.rows, keys.lens) if isinstance(keys, PaddedKeys) else (keys, None)
        if rows.shape[1] < 5 or (lens is not None and int(lens.min()) < 5):
            return None, 0  # no records, or keys too short for a version byte
        bad = np.flatnonzero(rows[:, 4])  # the key row's version byte, after the size word
        if len(bad):
            taken = int(np.searchsorted(np.cumsum(counts), bad[0], side="right"))
        skip = self.value_skip
        for i, (data, count, layout) in enumerate(zip(datas[:taken], counts, layouts, strict=False)):
            if not count:
                continue
            if isinstance(layout, SizeRuns):  # a few runs of one size each: a strided slice per run
                runs = layout.runs
            else:  # each value's version byte: a strided slice, no array per file
                klen, vlen = layout
                if vlen < 0:
                    continue
                runs = [(4, count, 8 + klen + vlen, klen, vlen)]
            for first, n, stride, klen, vlen in runs:
                at = first + klen + 4 + skip - 1
                if vlen >= 0 and (vlen < skip or bytes(data[at : at + n * stride : stride]).count(0) != n):
                    taken = i
                    break
            else:
                continue
            break
        if not taken:
            return None, 0
        if taken < len(counts):
            cut = sum(counts[:taken])
            keys = rows[:cut] if lens is None else PaddedKeys(rows[:cut], lens[:cut])
            counts, layouts = counts[:taken], layouts[:taken]
        return (keys, counts, layouts), taken

    def _iter_partition_stats(
        self, pid: int, cancelled: Callable[[], bool] | None
    ) -> Iterator[PartitionVersionStats]:
        pf = self.partitions[pid]
        self._read_ahead("replay", pid, self._replay_files)
        with self.workspace() as ws:
            live: set[bytes] = set()
            for v, continues in self._replay_plan(pid, cancelled):
                if continues:
                    self.check_snapshot(pid, v)
                    try:
                        self._apply_changelog_keys(live, pf.deltas[v])
                    except StatelensError as err:
                        if v not in pf.snapshots:
                            raise
                        # A damaged changelog of a version that has its zip: the version still loads
                        # (as Spark loads it, from the zip); the changelog's error is reported.
                        self.deferred_errors.append(err)
                        with self._located(pid, v):
                            live = self._read_zip_state(ws, pid, v, keys_only=True)
                else:
                    base = self._base_for(pf, v)
                    if base == v:
                        with self._located(pid, v):
                            live = self._read_zip_state(ws, pid, v, keys_only=True)
                    else:
                        live = set(self.read_raw(pid, v, _ws=ws))
                yield PartitionVersionStats(
                    self.operator_id, self.store_name, v, pid, len(live), self._on_disk(pf, v)
                )

    # -- reading ahead on remote storage -------------------------------------------------------------
    def _chain_files(self, partition_id: int, version: int) -> list[StateFile]:
        """The zip and changelogs that rebuild ``version`` (none when no chain reaches it)."""
        pf = self._partition(partition_id)
        base = self._base_for(pf, version) if version else None
        if base is None:
            return []
        return ([pf.snapshots[base]] if base else []) + [pf.deltas[v] for v in range(base + 1, version + 1)]

    def _replay_files(self, partition_id: int) -> list[StateFile]:
        """The zips and changelogs a walk over every version of a partition reads, in order."""
        pf = self._partition(partition_id)
        out: dict[str, StateFile] = {}
        for v, continues in self._replay_plan(partition_id):
            for sf in [pf.deltas[v]] if continues else self._chain_files(partition_id, v):
                out.setdefault(sf.path, sf)
        return list(out.values())


# -- stores with virtual column families (transformWithState) -----------------------------------------
class ColumnFamilyRow(NamedTuple):
    """One decoded entry of a column family, shaped like Spark's ``statestore`` rows for ``stateVarName``.

    ``key`` is the grouping key; ``value`` the value (one list element per row for list state);
    ``user_key`` the map key of map state (``None`` otherwise).
    """

    partition_id: int
    key: tuple[Any, ...]
    value: tuple[Any, ...] | None
    user_key: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class ColumnFamily:
    """A virtual column family of a store: its schema (v3 file) and, for user state, its variable type."""

    name: str
    schema: StoreSchema
    variable_type: str | None  # ValueState | ListState | MapState | TimerState | None (internal)

    @property
    def encoder(self) -> str:
        return str((self.schema.key_encoder or {}).get("keyStateEncoderType", "NoPrefixKeyStateEncoderSpec"))

    @property
    def multi_value(self) -> bool:
        """Values are lists of elements: list state, and join state format 4 (timestamp-keyed families)."""
        return self.variable_type == "ListState" or self.encoder.startswith("TimestampAs")


_I32_LE = struct.Struct("<i")
_U16_LE = struct.Struct("<H")
_MERGE_DELIMITER = 0x2C  # ',' of merge operator v1 (and of rocksdict's own StringAppendOperator)


#: Items found so far while splitting a value: ``(last item, earlier items)``, ``None`` for none.
_Chain = tuple[Any, "_Chain"] | None


def _unchain(chain: _Chain) -> list[Any]:
    out = []
    while chain is not None:
        item, chain = chain
        out.append(item)
    return out[::-1]


def _split_joined(value: bytes, read_at: Callable[[int], tuple[int, Any] | None]) -> list[Any] | None:
    """Split ``value`` into items joined by an optional ``,`` (merge operator v1, or nothing with v2, or a
    mix in values rocksdict merged itself); ``read_at(pos)`` reads one item: ``(end, item)`` or None.

    Returns the items of the first split that ends exactly, ``,`` tried first where both read (None when
    none does). A greedy walk makes those first choices; the search runs only where it gets stuck. The
    search explores each position once (whether the rest splits depends on the position alone) and keeps
    the items so far as a linked list (last, earlier): linear time (a tuple copied per item took 49 s
    for a list of 40,000 elements).
    """
    n = len(value)
    items: list[Any] = []
    pos = 0
    while pos < n:
        got = read_at(pos + 1) if items and value[pos] == _MERGE_DELIMITER else None
        if got is None:
            got = read_at(pos)
        if got is None:
            break
        pos = got[0]
        items.append(got[1])
    if pos == n and items:
        return items
    stack: list[tuple[int, _Chain]] = [(0, None)]
    seen: set[tuple[int, bool]] = set()
    while stack:
        pos, found = stack.pop()
        if pos == n and found is not None:
            return _unchain(found)
        if (pos, found is not None) in seen:
            continue
        seen.add((pos, found is not None))
        starts = [pos] + (
            [pos + 1] if found is not None and pos < n and value[pos] == _MERGE_DELIMITER else []
        )
        for start in starts:
            got = read_at(start)
            if got is not None:
                stack.append((got[0], (got[1], found)))
    return None


def split_list_value(value: bytes, path: str) -> list[bytes]:
    """The element rows of a multi-value (list state) RocksDB value (docs/format.md §4.3, §4.6).

    Elements are ``len:i32 LE`` + ``00`` + UnsafeRow, joined by ``,`` (merge operator v1) or by nothing
    (v2) — and, in values ``rocksdict`` merged itself, by a mix of both. Walks the ways the bytes can be
    split that way (:func:`_split_joined`) and returns the element rows (version byte removed) of the
    first one that ends exactly.

    Raises
    ------
    CorruptFileError
        When no split reaches the end of the value.
    """
    n = len(value)
    if n >= 5 and value[4] == STATE_ENCODING_VERSION and _I32_LE.unpack_from(value, 0)[0] == n - 4:
        return [value[5:]]  # one element (every list append in a changelog): no search

    def element_at(pos: int) -> tuple[int, bytes] | None:
        if pos + 5 > n:
            return None
        size = _I32_LE.unpack_from(value, pos)[0]
        if size < 1 or pos + 4 + size > n or value[pos + 4] != STATE_ENCODING_VERSION:
            return None
        return pos + 4 + size, value[pos + 5 : pos + 4 + size]

    elements = _split_joined(value, element_at)
    if elements is None:
        raise CorruptFileError(
            f"list value of {n} bytes ({value[:12].hex(' ')}...) is not a sequence of length-prefixed rows",
            path,
        )
    return elements


def split_checked_operands(key: bytes, value: bytes, path: str, record: int) -> list[bytes]:
    """The operand bodies of a merged value whose operands carry row checksums (``crc`` + ``len`` + body).

    Operands may be joined by the ``,`` delimiter or by nothing (:func:`_split_joined`); where a ``,``
    could also be the first byte of a CRC, both readings are tried and the CRCs decide.

    Raises
    ------
    CorruptFileError
        When no reading of the bytes gives operands whose checksums all match.
    """
    n = len(value)

    def operand_at(pos: int) -> tuple[int, bytes] | None:
        if pos + ROCKSDB_VALUE_HEADER > n:
            return None
        size = _I32_LE.unpack_from(value, pos + 4)[0]
        end = pos + ROCKSDB_VALUE_HEADER + size
        if size < 0 or end > n:
            return None
        try:
            return end, strip_rocksdb_value(key, value[pos:end], path, record)
        except StatelensError:
            return None

    operands = _split_joined(value, operand_at)
    if operands is None:
        raise CorruptFileError(
            f"list value of record {record} ({n} bytes) is not a sequence of checksummed operands whose "
            "CRC-32C match",
            path,
            record=record,
        )
    return operands


class _FamilyReplay:
    """The records of one column family, source after source (zip, then changelogs in version order),
    as offset arrays into buffers laid end to end; :meth:`live` replays them (:meth:`~RocksDBColumnFamilyReader.family_arrays`).

    Per record: key offset/length and kind. Per value element (a non-multi value is one element, as
    stored; a list value one element per list item, version byte removed): its record and offset/length.
    """

    def __init__(self, multi: bool):
        self.multi = multi
        self.chunks: list[bytes] = []
        self.size = 0
        self.records: list[tuple[Any, Any, Any]] = []  # (key_start, key_len, kind) per source
        self.elements: list[tuple[Any, Any, Any]] = []  # (record, start, len) per source
        self.count = 0

    def _chunk(self, data: bytes) -> int:
        at = self.size
        self.chunks.append(data)
        self.size += len(data)
        return at

    def _list_values(self, data: bytes, offset: int, vs: Any, vl: Any, records: Any, path: str) -> None:
        """The elements of list values ``data[vs : vs + vl]`` (of ``records``; ``data`` is the chunk at
        ``offset``): a value of one element (``len:i32 LE`` + ``00`` + row, every append) is cut in place
        with numpy, the others are split in Python (:meth:`_lists`)."""

        u8 = np.frombuffer(data, dtype=np.uint8)
        ok = vl >= 5
        if len(u8) < 5 or not ok.any():
            single = np.zeros(0, dtype=np.int64)
            one = np.zeros(len(vs), dtype=bool)
        else:
            head = np.where(ok, vs, 0)
            size = u8[head[:, None] + np.arange(4)].view("<i4").reshape(-1).astype(np.int64)
            one = ok & (size == vl - 4) & (u8[np.where(ok, vs + 4, 0)] == STATE_ENCODING_VERSION)
            single = np.flatnonzero(one)
        self.elements.append((records[single], vs[single] + 5 + offset, vl[single] - 5))
        other = np.flatnonzero(~one)
        if len(other):
            values = [data[s : s + m] for s, m in zip(vs[other].tolist(), vl[other].tolist(), strict=True)]
            self._lists(values, records[other], path)

    def _lists(self, values: list[bytes], first_record: Any, path: str) -> None:
        """List values split in Python (values of more than one element, or odd ones)."""

        parts = [split_list_value(v, path) for v in values]
        counts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        _, at, starts, lens = self._lay([e for p in parts for e in p])
        self.elements.append((np.repeat(first_record, counts), starts + at, lens))

    def _lay(self, pieces: list[bytes]) -> tuple[bytes, int, Any, Any]:
        """Lay byte strings end to end as one chunk of the replay's buffer: the joined bytes, where the
        chunk starts in the buffer, and each string's start in the chunk and length."""

        lens = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        starts = np.zeros(len(pieces), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        joined = b"".join(pieces)
        return joined, self._chunk(joined), starts, lens

    def add_zip(self, items: list[tuple[bytes, bytes]], path: str) -> None:
        n = len(items)
        if not n:
            return
        _, at, kstart, klen = self._lay([k for k, _ in items])
        records = self.count + np.arange(n, dtype=np.int64)
        self.records.append((kstart + at, klen, np.full(n, KIND_PUT, dtype=np.uint8)))
        joined, at, vstart, vlen = self._lay([v for _, v in items])
        if self.multi:
            self._list_values(joined, at, vstart, vlen, records, path)
        else:
            self.elements.append((records, vstart + at, vlen))
        self.count += n

    def add_changelog(self, data: bytes, idx: Any, prefix: bytes, path: str) -> None:
        u8 = np.frombuffer(data, dtype=np.uint8)
        ks, kl = idx.key_start, idx.key_len
        long_enough = kl >= 2
        at = np.where(long_enough, ks, 0)
        mine = np.flatnonzero(
            long_enough & (u8[at] == prefix[0]) & (u8[np.minimum(at + 1, len(u8) - 1)] == prefix[1])
        )
        if not len(mine):
            return
        n = len(mine)
        kind = idx.kind[mine]
        records = self.count + np.arange(n, dtype=np.int64)
        has_value = np.flatnonzero(kind != KIND_REMOVE)
        ks, kl = ks[mine], kl[mine]
        vs, vl = idx.val_start[mine][has_value], idx.val_len[mine][has_value]
        lens = np.concatenate((kl, vl))
        if 2 * int(lens.sum()) < len(data):  # other families' records dominate: copy out this family's
            ends = np.cumsum(lens)
            data = gather_bytes(u8, np.concatenate((ks, vs)), lens, np.concatenate(([0], ends))).tobytes()
            starts = ends - lens
            ks, vs = starts[:n], starts[n:]
        offset = self._chunk(data)
        self.records.append((ks + offset, kl, kind))
        if not self.multi:
            self.elements.append((records[has_value], vs + offset, vl))
        else:
            self._list_values(data, offset, vs, vl, records[has_value], path)
        self.count += n

    def live(self) -> RawArrays:
        """Replay: per key, the last put or remove resets it; a list keeps that put's elements and every
        merge after it (a merge after a remove starts a new list)."""

        empty = np.zeros(0, dtype=np.int64)
        if not self.count:
            return b"", empty, empty, empty, empty
        buf = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks = []
        kstart, klen, kind = (np.concatenate(c) for c in zip(*self.records, strict=True))
        e_rec, e_start, e_len = (np.concatenate(c) for c in zip(*self.elements, strict=True))
        n = self.count
        keys = binary_array(buf, kstart, klen)
        group = key_ids([keys]).astype(np.int64)  # first-seen order
        seq = np.arange(n, dtype=np.int64)
        resets = np.flatnonzero(kind != KIND_MERGE) if self.multi else seq
        last_reset = np.full(int(group.max()) + 1, -1, dtype=np.int64)
        np.maximum.at(last_reset, group[resets], resets)
        live = (seq >= last_reset[group]) & (kind != KIND_REMOVE)
        keep = np.flatnonzero(live[e_rec])
        e_rec, e_start, e_len = e_rec[keep], e_start[keep], e_len[keep]
        order = np.lexsort((np.arange(len(e_rec)), e_rec, group[e_rec]))  # key, record, element order
        e_rec, e_start, e_len = e_rec[order], e_start[order], e_len[order]
        return buf, kstart[e_rec] + 2, klen[e_rec] - 2, e_start, e_len


class RocksDBColumnFamilyReader:
    """Reads a RocksDB store with virtual column families (transformWithState), one state variable at a time.

    Keys are ``cfId:u16 LE`` + the key encoding of that family; changelogs are format v2/v4 with merge
    records for list appends (docs/format.md §4.3, §4.4, §7.7). Decodes value, list and map state, timers and
    every internal family (``$rowCounter_*``, TTL indexes and timers by time, which are range-scan keyed;
    Spark's reader does not show those); the key encoders are in :mod:`readers._format.cf_store`. Versions are
    rebuilt like other RocksDB stores: the newest zip ``<= v`` plus the changelogs after it.

    Parameters
    ----------
    files : RocksDBStoreReader
        The store's files (inventory, zip extraction); its own schema is not used.
    families : dict of str to StoreSchema
        The column families of the store's v3 schema file.
    variable_types : dict of str to str
        State variable name -> ``ValueState`` / ``ListState`` / ``MapState`` / ``TimerState`` (operator
        metadata v2 ``stateVariables``).
    avro : bool
        Rows are Avro-encoded (``stateStore.encodingFormat=avro``, :mod:`readers._format.avro_rows`).
    row_checksum : bool
        Values (and the keys of changelog removes) carry CRC-32C checksums, checked (docs/format.md §3.6).
    """

    provider = "rocksdb"
    #: (Partition, family) states kept, the last read (memory: that many partition states at most).
    held_partitions = 8
    #: Decompressed, indexed changelogs kept for the other families of the same files (bytes at most):
    #: every family reads every changelog of its partition, so reading a store's families one after
    #: another decompresses and scans each file once instead of once per family.
    held_changelog_bytes = 128 << 20

    def __init__(
        self,
        files: RocksDBStoreReader,
        families: dict[str, StoreSchema],
        variable_types: dict[str, str],
        avro: bool = False,
        row_checksum: bool = False,
    ):
        self.files = files
        self.avro = avro
        self.row_checksum = row_checksum
        # The last state read per (partition, family or None), for the few read last (one version each).
        self._states: OrderedDict[tuple[int, bytes | None], tuple[int, dict[bytes, Any]]] = OrderedDict()
        self.operator_id = files.operator_id
        self.store_name = files.store_name
        self.families = {
            name: ColumnFamily(name, schema, variable_types.get(name)) for name, schema in families.items()
        }
        self._ids: dict[int, dict[str, int]] = {}
        self._changelogs: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()
        self._changelog_bytes = 0
        self._changelog_lock = threading.Lock()  # partitions are read on several threads

    # -- inventory (same as the plain reader) ---------------------------------------------------------
    def partition_ids(self) -> list[int]:
        return self.files.partition_ids()

    def versions(self, partition_id: int | None = None) -> list[int]:
        return self.files.versions(partition_id)

    def delta_versions(self, partition_id: int) -> list[int]:
        return self.files.delta_versions(partition_id)

    def state_variables(self) -> list[str]:
        """User state variable names (no internal ``$`` families), in schema file order."""
        return [
            n
            for n, f in self.families.items()
            if f.variable_type is not None and f.variable_type != "TimerState"
        ]

    def column_family_ids(self, partition_id: int) -> dict[str, int]:
        """Column family name -> id of one partition, from the newest zip's ``columnFamilyMapping``."""
        if partition_id not in self._ids:
            pf = self.files._partition(partition_id)
            if not pf.snapshots:
                raise MissingFileError(
                    "no snapshot zip in this partition: the column family ids are recorded only in zips",
                    path=pf.directory,
                    operator_id=self.operator_id,
                    partition_id=partition_id,
                )
            newest = max(pf.snapshots)
            self._ids[partition_id] = self.files.zip_metadata(partition_id, newest).column_family_mapping
        return self._ids[partition_id]

    # -- raw state: full RocksDB key -> value bytes, or list of element rows for multi-value families -----
    def _multi_value_prefixes(self, partition_id: int) -> set[bytes]:
        ids = self.column_family_ids(partition_id)
        return {_U16_LE.pack(ids[n]) for n, f in self.families.items() if f.multi_value and n in ids}

    def read_raw(self, partition_id: int, version: int, only: bytes | None = None) -> dict[bytes, Any]:
        """Every entry at ``version``: full key bytes -> value bytes (``list`` of element rows for lists).

        With ``only`` (a column family id, 2 bytes) just that family's entries: the files are read all the
        same, but other families' records are skipped before anything is sliced or split.

        The last state read is kept for the :attr:`held_partitions` (partition, family) pairs read last,
        one version each: a walk reads version after version. Callers must not change the returned dict.
        """
        slot = (partition_id, only)
        held = self._states.get(slot)
        if held is not None and held[0] == version:
            self._states.move_to_end(slot)
            return held[1]
        pf = self.files._partition(partition_id)
        if held is not None and held[0] == version - 1 and version in pf.deltas:
            # The next version of the one read last: replay its changelog on a copy (lists copied too).
            state = {k: list(v) if isinstance(v, list) else v for k, v in held[1].items()}
            self._apply_changelog(state, pf.deltas[version], self._multi_value_prefixes(partition_id), only)
        else:
            state = self._read_raw(partition_id, version, only)
        self._states[slot] = (version, state)
        self._states.move_to_end(slot)
        while len(self._states) > self.held_partitions:
            self._states.popitem(last=False)
        return state

    def _read_raw(self, partition_id: int, version: int, only: bytes | None = None) -> dict[bytes, Any]:
        pf = self.files._partition(partition_id)
        if version == 0:
            return {}
        base = self.files._base_for(pf, version)
        if base is None:
            self.files.read_raw(partition_id, version)  # raises the located MissingFileError
        assert base is not None
        multi = self._multi_value_prefixes(partition_id)
        state: dict[bytes, Any] = {}
        if base:
            sf = pf.snapshots[base]
            with self.files.workspace() as ws:
                items = self.files._zip_items(ws, partition_id, base, False, column_families=True)
            for n, (key, value) in enumerate(items):
                if only is None or key[:2] == only:
                    state[key] = self._stored_value(key, value, key[:2] in multi, sf.path, n)
        for v in range(base + 1, version + 1):
            self._apply_changelog(state, pf.deltas[v], multi, only)
        return state

    def family_arrays(self, partition_id: int, version: int, prefix: bytes) -> RawArrays:
        """One column family's live entries at ``version`` as one buffer and int64 offset arrays
        ``(buffer, key_start, key_len, value_start, value_len)``, replayed without a Python object per
        changelog record (for columnar decoding; :meth:`read_raw` is the per-record replay).

        Keys are the key bytes after the 2-byte family id ``prefix``. A multi-value family gives one
        entry per list element (the element row, version byte removed), its key repeated, elements in
        list order; other families give each value as stored (version byte first). Entries come in the
        order of each key's first record (:meth:`read_raw`'s order, except for a key removed and put
        again). The zip's entries come from RocksDB one by one (that is the floor); each changelog is
        indexed once, its records of other families skipped with numpy, and the last record of each
        key found by Arrow's hashing. Not for stores with row checksums (:attr:`row_checksum`: every
        CRC is checked on the per-record path).
        """

        if self.row_checksum:
            raise ValueError("family_arrays reads stores without row checksums only")
        pf = self.files._partition(partition_id)
        empty = np.zeros(0, dtype=np.int64)
        if version == 0:
            return b"", empty, empty, empty, empty
        base = self.files._base_for(pf, version)
        if base is None:
            self.files.read_raw(partition_id, version)  # raises the located MissingFileError
        assert base is not None
        multi = prefix in self._multi_value_prefixes(partition_id)
        replay = _FamilyReplay(multi)
        if base:
            sf = pf.snapshots[base]
            with self.files.workspace() as ws:
                own = self.files._zip_items(
                    ws, partition_id, base, False, column_families=True, prefix=prefix
                )
            replay.add_zip(own, sf.path)
        for v in range(base + 1, version + 1):
            sf = pf.deltas[v]
            with self.files._located(sf.partition_id, sf.version):
                data, idx = self._changelog_index(sf)
                replay.add_changelog(data, idx, prefix, sf.path)
        return replay.live()

    def changelog(self, partition_id: int, version: int) -> StateFile:
        """The changelog file of ``version``.

        Raises
        ------
        MissingFileError
            When the partition has no changelog for that version.
        """
        pf = self.files._partition(partition_id)
        sf = pf.deltas.get(version)
        if sf is None:
            raise MissingFileError(
                f"no changelog for version {version}",
                path=f"{pf.directory}/{version}.changelog",
                operator_id=self.operator_id,
                store_name=self.store_name,
                partition_id=partition_id,
                version=version,
            )
        return sf

    def _changelog_index(self, sf: StateFile) -> tuple[bytes, Any]:
        """A changelog decompressed and indexed; column family stores write formats v2 and v4 only.

        Kept for the next family's read while the kept files stay under :attr:`held_changelog_bytes`
        (least recently used out), named by path and size (the inventory this reader was opened on)."""
        tag = f"{sf.path}\0{sf.size_bytes}"
        with self._changelog_lock:
            held = self._changelogs.get(tag)
            if held is not None:
                self._changelogs.move_to_end(tag)
                return held
        got = self._read_changelog_index(sf)
        size = len(got[0])
        if size <= self.held_changelog_bytes:
            with self._changelog_lock:
                if tag not in self._changelogs:
                    self._changelogs[tag] = got
                    self._changelog_bytes += size
                while self._changelog_bytes > self.held_changelog_bytes:
                    _, (old, _) = self._changelogs.popitem(last=False)
                    self._changelog_bytes -= len(old)
        return got

    def _read_changelog_index(self, sf: StateFile) -> tuple[bytes, Any]:
        data = decompress(self.files.fs.read_bytes(sf.path), sf.path, self.files.codec)
        fmt, _lineage, idx = scan_changelog(data, sf.path)
        if fmt not in (2, 4):
            raise CorruptFileError(
                f"changelog format v{fmt} in a column family store (expected v2 or v4)", sf.path, 0
            )
        return data, idx

    def iter_changelog(self, partition_id: int, version: int) -> Iterator[tuple[str, bytes, Any]]:
        """The records of one changelog as ``(kind, full key, value)`` in file order.

        ``kind`` is ``put``, ``remove`` (value ``None``) or ``merge`` (a list append); values of
        multi-value families are lists of element rows, others the value bytes as stored.
        """

        sf = self.changelog(partition_id, version)
        multi = self._multi_value_prefixes(partition_id)
        with self.files._located(sf.partition_id, sf.version):
            data, idx = self._changelog_index(sf)
            for n, (kind, ks, kl, vs, vl) in enumerate(
                zip(
                    idx.kind.tolist(),
                    idx.key_start.tolist(),
                    idx.key_len.tolist(),
                    idx.val_start.tolist(),
                    idx.val_len.tolist(),
                    strict=True,
                )
            ):
                key = data[ks : ks + kl]
                if kind == KIND_REMOVE:
                    if self.row_checksum:
                        key = strip_rocksdb_removed_key(key, sf.path, n)
                    yield "remove", key, None
                    continue
                value = data[vs : vs + vl]
                if self.row_checksum:  # one operand: crc + len + the value (or the appended element)
                    value = strip_rocksdb_value(key, value, sf.path, n)
                name = "put" if kind == KIND_PUT else "merge"
                yield name, key, (split_list_value(value, sf.path) if key[:2] in multi else value)

    def _apply_changelog(
        self, state: dict[bytes, Any], sf: StateFile, multi: set[bytes], only: bytes | None = None
    ) -> None:
        if self.row_checksum:  # every record checked: the general walk
            for kind, key, value in self.iter_changelog(sf.partition_id, sf.version):
                if only is not None and key[:2] != only:
                    continue
                if kind == "remove":
                    state.pop(key, None)
                elif kind == "merge" and key[:2] in multi:
                    state.setdefault(key, []).extend(value)
                else:
                    state[key] = value
            return

        with self.files._located(sf.partition_id, sf.version):  # the same records, one tight loop
            data, idx = self._changelog_index(sf)
            for kind, ks, kl, vs, vl in zip(
                idx.kind.tolist(),
                idx.key_start.tolist(),
                idx.key_len.tolist(),
                idx.val_start.tolist(),
                idx.val_len.tolist(),
                strict=True,
            ):
                key = data[ks : ks + kl]
                if only is not None and key[:2] != only:
                    continue
                if kind == REMOVE:
                    state.pop(key, None)
                elif key[:2] not in multi:
                    state[key] = data[vs : vs + vl]
                elif kind == MERGE:
                    state.setdefault(key, []).extend(split_list_value(data[vs : vs + vl], sf.path))
                else:
                    state[key] = split_list_value(data[vs : vs + vl], sf.path)

    # -- decoding ------------------------------------------------------------------------------------
    def read_variable(self, partition_id: int, version: int, name: str) -> list[ColumnFamilyRow]:
        """Decoded entries of one column family at ``version``, as Spark's ``stateVarName`` read shows them.

        Raises
        ------
        UsageError
            Unknown column family.
        UnsupportedVersionError
            A family whose key encoder is unknown, or a range-scan column of a type not decoded natively.
        """
        family = self.families.get(name)
        if family is None:
            have = ", ".join(self.families)
            raise UsageError(f"no column family {name!r} in this store; it has: {have}")
        ids = self.column_family_ids(partition_id)
        if name not in ids:
            return []  # declared in the schema but never created in this partition
        prefix = _U16_LE.pack(ids[name])
        raw = self.read_raw(partition_id, version, only=prefix)
        path = f"{self.files._partition(partition_id).directory}/{version}"
        entries = [(k[2:], v) for k, v in raw.items() if k[:2] == prefix]
        return self._decode_family(partition_id, family, entries, path)

    def _stored_value(self, key: bytes, value: bytes, multi: bool, path: str, record: int) -> Any:
        """A value as stored in a snapshot's SSTs: bytes, or the element rows of a list value.

        With row checksums every merge operand is ``crc`` + ``len`` + its bytes, operands joined as the
        merge operator joins them (``,`` or nothing); each operand's CRC is checked.
        """
        if not self.row_checksum:
            return split_list_value(value, path) if multi else value
        if not multi:
            return strip_rocksdb_value(key, value, path, record)
        elements: list[bytes] = []
        for operand in split_checked_operands(key, value, path, record):
            elements.extend(split_list_value(operand, path))
        return elements

    def _family_prefix(self, partition_id: int, name: str) -> tuple[ColumnFamily, bytes | None]:
        family = self.families.get(name)
        if family is None:
            have = ", ".join(self.families)
            raise UsageError(f"no column family {name!r} in this store; it has: {have}")
        ids = self.column_family_ids(partition_id)
        return family, (_U16_LE.pack(ids[name]) if name in ids else None)

    def read_variable_changes(
        self, partition_id: int, version: int, name: str
    ) -> list[tuple[str, ColumnFamilyRow]]:
        """The changes of one column family written by batch ``version - 1``, in changelog order.

        Each is ``(change, row)``: ``put`` (value replaced; a list put gives one row per element),
        ``remove`` (row value ``None``) or ``append`` (list elements merged in).
        """
        family, prefix = self._family_prefix(partition_id, name)
        if prefix is None:
            return []
        path = self.changelog(partition_id, version).path
        kinds: list[str] = []
        entries: list[tuple[bytes, Any]] = []
        for kind, key, value in self.iter_changelog(partition_id, version):
            if key[:2] != prefix:
                continue
            kinds.append({"merge": "append"}.get(kind, kind))
            entries.append((key[2:], value))
        out: list[tuple[str, ColumnFamilyRow]] = []
        live = [(k, v) for k, v in entries if v is not None]
        decoded = iter(self._decode_family(partition_id, family, live, path))
        removed = iter(self._decode_keys_only(family, [k for k, v in entries if v is None], path))
        for kind, (_, value) in zip(kinds, entries, strict=True):
            if value is None:
                gone_key, gone_user_key = next(removed)
                out.append((kind, ColumnFamilyRow(partition_id, gone_key, None, gone_user_key)))
            elif family.multi_value:
                out.extend((kind, next(decoded)) for _ in value)
            else:
                out.append((kind, next(decoded)))
        return out

    def _decode_keys_only(
        self, family: ColumnFamily, keys: list[bytes], path: str
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
        decoded = decode_keys(family, keys, path, self.avro)
        if self._is_map(family):
            return [(k[0], k[1]) for k in decoded]
        return [(k, None) for k in decoded]

    @staticmethod
    def _is_map(family: ColumnFamily) -> bool:
        n_prefix = (family.schema.key_encoder or {}).get("numColsPrefixKey", 1)
        return (
            family.variable_type == "MapState"
            and family.encoder == "PrefixKeyScanStateEncoderSpec"
            and n_prefix
            == 1  # not int(): the spec is JSON of the schema file, "x" or 1e400 there is refused later
        )

    def timer_family(self) -> str | None:
        """The column family of timers by key (processing or event time), if the operator has timers."""
        for name in ("$procTimers_keyToTimestamp", "$eventTimers_keyToTimestamp"):
            if name in self.families:
                return name
        return None

    def read_timers(self, partition_id: int, version: int) -> list[tuple[int, Any, int]]:
        """Registered timers at ``version``: ``(partition, grouping key, expiry ms)`` (``readRegisteredTimers``)."""
        name = self.timer_family()
        if name is None:
            return []
        return [
            (r.partition_id, r.key[0], int(r.key[1])) for r in self.read_variable(partition_id, version, name)
        ]

    def _decode_family(
        self, partition_id: int, family: ColumnFamily, entries: list[tuple[bytes, Any]], path: str
    ) -> list[ColumnFamilyRow]:
        schema = family.schema
        keys = decode_keys(family, [k for k, _ in entries], path, self.avro)
        user_keys: list[tuple[Any, ...] | None] = [None] * len(keys)
        if self._is_map(family):
            user_keys = [k[1] for k in keys]  # the user key struct
            keys = [k[0] for k in keys]  # the grouping key struct
        if family.multi_value:
            owners = [(i, row) for i, (_, v) in enumerate(entries) for row in v]
            values = decode_values([row for _, row in owners], schema.value_schema, path, self.avro)
            return [
                ColumnFamilyRow(partition_id, keys[i], value, user_keys[i])
                for (i, _), value in zip(owners, values, strict=True)
            ]
        values = decode_values(
            [strip_version(v, path) for _, v in entries], schema.value_schema, path, self.avro
        )
        return [
            ColumnFamilyRow(partition_id, key, value, user_key)
            for key, user_key, value in zip(keys, user_keys, values, strict=True)
        ]

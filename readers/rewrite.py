"""Write one new state version that removes chosen keys, in the format Spark writes (``statelens prune``).

A pruned copy of a checkpoint gains one batch that reads no data (docs/format.md §12): its state
version ``v`` is, in every partition of every store, the files that remove that partition's keys:

* HDFS stores: ``<v>.delta``, the record stream of §3.3 with one ``remove`` record per key
  (``keyLen key -1``; with row checksums the key carries its CRC-32C, §3.6) and the end marker, in the
  store's codec (§3.2);
* RocksDB stores with changelog checkpointing: ``<v>.changelog`` in format v1 (§4.4), the same
  records over the RocksDB key bytes (``00`` + key row);
* RocksDB stores without changelog checkpointing (Spark's default, and every Spark 3.4 store):
  ``<v>.zip`` and the new ``SSTs/<n>-<uuid>.sst`` files, as ``RocksDBFileManager.saveCheckpointToDfs``
  writes them (§4.7): version ``v - 1`` is restored into a temporary folder, opened with RocksDB
  (``rocksdict``), the keys deleted and flushed, and a RocksDB checkpoint of the result zipped with a
  ``metadata`` that names the unchanged SSTs by their existing names and the new one by a new name.

Spark's ``loadMap(v)`` / ``RocksDB.load(v)`` then load version ``v - 1`` with the removals applied; no
existing file is rewritten. What cannot be written this way is refused, with the reason, before
anything is written (:func:`cannot_write`): virtual column families (transformWithState, joins v3/v4:
changelog v2 records), checkpoint format v2 (unique ids that the commit log must name), and zips written
by a RocksDB newer than the one ``rocksdict`` bundles.

On local file systems every written file also gets the hidden Hadoop checksum sidecar that Spark's
``ChecksumFileSystem`` writes beside it (§1.3, :func:`readers.checksums.hadoop_crc`).
"""

from __future__ import annotations

import functools
import io
import json
import os
import posixpath
import re
import shutil
import struct
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from statelens.readers._format.codecs import compress, decompress, sniff_codec
from statelens.readers._format.hdfs_store import HDFSStoreReader
from statelens.readers._format.records import changelog_header, scan_changelog
from statelens.readers._format.rocksdb_store import (
    RocksDBStoreReader,
    ZipMetadata,
    _load_rocksdict,
    parse_zip_metadata,
    read_zip,
)
from statelens.readers._format.rowchecksum import crc32c
from statelens.readers.backends.base import files_of
from statelens.readers.errors import CorruptFileError, StatelensError, UnsupportedVersionError

__all__ = [
    "NewFile",
    "bundled_rocksdb_version",
    "cannot_write",
    "removal_files",
    "zip_removal_files",
]

_I32_BE = struct.Struct(">i")
_U32_LE = struct.Struct("<I")
_END = _I32_BE.pack(-1)
#: ``io.bytes.per.checksum``, Hadoop's default for ``ChecksumFileSystem``.
#: ``rocksdb_version=9.8.4`` in a RocksDB ``OPTIONS-<n>`` file.
_ROCKSDB_VERSION_RE = re.compile(rb"^\s*rocksdb_version=(\d+)\.(\d+)\.(\d+)\s*$", re.MULTILINE)
#: The file ``rocksdict`` writes into every folder it opens (its own settings, not RocksDB's).
_ROCKSDICT_CONFIG = "rocksdict-config.json"


@dataclass(frozen=True)
class NewFile:
    """A file to write into the copy: its path relative to the checkpoint root, and its bytes;
    ``unique_id`` names a checkpoint format v2 state file (the commit log must name it)."""

    path: str
    data: bytes
    unique_id: str | None = None


def cannot_write(backend: Any, operator_id: int, store_name: str, base: int) -> str | None:
    """Why a removal version on top of version ``base`` cannot be written for this store (None when it
    can): every partition must be at ``base`` and, for RocksDB, have its changelog in format v1 or, without
    changelogs, a zip of a plain store (no column families, no archived WAL files) written by a RocksDB
    no newer than the one ``rocksdict`` bundles.

    Reads the changelog of ``base`` (its header) or the zip of ``base`` of each RocksDB partition.
    Raises ``BackendUnavailableError`` when the backend does not read this store's files.
    """
    reader = files_of(backend, operator_id, store_name)
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
        sf = pf.deltas.get(base) or pf.snapshots[base]
        if sf.unique_id is not None and sf.kind == "zip":
            return (
                "RocksDB checkpoint format v2 (stateStore.checkpointFormatVersion=2) without changelog "
                f"checkpointing (partition {pid} version {base} is a zip only): not written"
            )
        if sf.kind == "zip":
            reason = _zip_cannot_write(reader, sf.path)
            if reason is not None:
                return f"partition {pid} version {base}: {reason}"
            continue
        try:
            data = decompress(reader.fs.read_bytes(sf.path), sf.path, reader.codec)
        except StatelensError:
            if sf.unique_id is not None or base not in pf.snapshots:
                raise
            # A load of version base (and of the removal version after it) starts from its zip, not
            # this changelog: what the store is is read there.
            reason = _zip_cannot_write(reader, pf.snapshots[base].path)
            if reason is not None:
                return f"partition {pid} version {base}: {reason}"
            continue
        fmt, _ = changelog_header(data, sf.path)
        if fmt != (1 if sf.unique_id is None else 3):
            return f"RocksDB changelog format v{fmt} ({sf.path}): only formats v1 and v3 are written"
    return None


def _zip_cannot_write(reader: Any, path: str) -> str | None:
    """Why a new zip cannot be written on top of the zip at ``path`` (None when it can)."""
    entries = read_zip(reader.fs.read_bytes(path), path, reader.limits)
    if "metadata" not in entries:
        raise CorruptFileError("zip has no 'metadata' entry (not a Spark RocksDB snapshot)", path)
    meta = parse_zip_metadata(entries["metadata"], path)
    if meta.column_family_mapping:
        return (
            f"{path} has virtual column families ({', '.join(sorted(meta.column_family_mapping))}), "
            "which statelens does not write"
        )
    if meta.log_files:
        return f"{path} names archived WAL files (logs/), which statelens does not carry into a new version"
    written = _zip_rocksdb_version(entries)
    bundled = bundled_rocksdb_version(reader.temp_dir)
    if written is not None and written[:2] > bundled[:2]:
        return (
            f"{path} was written by RocksDB {'.'.join(map(str, written))}, newer than the RocksDB "
            f"{'.'.join(map(str, bundled))} statelens writes with (rocksdict): a new version opened and "
            "rewritten by an older RocksDB could lose what the newer one recorded; upgrade rocksdict"
        )
    return None


def _zip_rocksdb_version(entries: dict[str, bytes]) -> tuple[int, ...] | None:
    """The RocksDB version the newest ``OPTIONS-<n>`` entry of a zip names (None without one)."""
    options = [n for n in entries if n.startswith("OPTIONS-") and n[8:].isdigit()]
    if not options:
        return None
    m = _ROCKSDB_VERSION_RE.search(entries[max(options, key=lambda n: int(n[8:]))])
    return tuple(int(g) for g in m.groups()) if m else None


@functools.cache
def bundled_rocksdb_version(temp_dir: str | None = None) -> tuple[int, ...]:
    """The version of the RocksDB ``rocksdict`` bundles, read from the ``OPTIONS`` file of an empty
    database it creates in a temporary folder."""
    rocksdict = _load_rocksdict()
    root = tempfile.mkdtemp(prefix="statelens-rocksdb-", dir=temp_dir)
    try:
        folder = os.path.join(root, "db")
        rocksdict.Rdict(folder).close()
        entries = {}
        for name in os.listdir(folder):
            if name.startswith("OPTIONS-"):
                with open(os.path.join(folder, name), "rb") as fh:
                    entries[name] = fh.read()
        version = _zip_rocksdb_version(entries)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if version is None:  # pragma: no cover - every RocksDB writes its version there
        raise UnsupportedVersionError("rocksdict's RocksDB wrote no version into its OPTIONS file")
    return version


def removal_files(
    backend: Any, operator_id: int, store_name: str, partition_id: int, version: int, keys: Iterable[bytes]
) -> list[NewFile]:
    """The state files of ``version`` of one store partition that remove ``keys`` (stored key rows, as a
    raw scan's ``key_bytes`` gives them) from version ``version - 1``: one delta or changelog; for a
    RocksDB store without changelogs the new SST files, then the zip.

    The codec is the one the partition's newest earlier file is written in (its magic bytes decide, as when
    reading). Call :func:`cannot_write` first: this assumes the store can be written.
    """
    reader = files_of(backend, operator_id, store_name)
    pf = reader.partitions[partition_id]
    rocks = type(reader) is RocksDBStoreReader
    if rocks and version - 1 not in pf.deltas:
        return zip_removal_files(reader, partition_id, version, keys)
    before = max((sf for sf in pf.deltas.values() if sf.version < version), key=lambda sf: sf.version)
    raw = reader.fs.read_bytes(before.path)
    codec = sniff_codec(raw[:8]) or reader.codec
    out = bytearray()
    unique_id = None
    if rocks and before.unique_id is not None:  # checkpoint format v2: a v3 changelog with its lineage
        unique_id = str(uuid.uuid4())
        out += _utf(b"v3") + _utf(_lineage(pf, before, decompress(raw, before.path, reader.codec)).encode())
    for key in keys:
        stored = b"\x00" + key if rocks else key
        if reader.row_checksum:
            stored = _U32_LE.pack(crc32c(stored)) + stored
        out += _I32_BE.pack(len(stored)) + stored + _END
    out += _END
    name = f"{version}{'_' + unique_id if unique_id else ''}.{'changelog' if rocks else 'delta'}"
    return [NewFile(posixpath.join(pf.directory, name), compress(bytes(out), codec), unique_id)]


def _utf(text: bytes) -> bytes:
    """``DataOutputStream.writeUTF`` of ASCII/UTF-8 text (length u16 BE, then the bytes)."""
    return struct.pack(">H", len(text)) + text


def _lineage(pf: Any, before: Any, data: bytes) -> str:
    """The lineage JSON of the changelog that follows ``before`` (checkpoint format v2, docs/format.md
    §4.4): ``before``'s lineage and ``before`` itself, from the newest entry whose zip is in the folder
    (what a load of ``before`` started from), as Spark's ``RocksDB.commit`` writes it."""
    _, lineage_text, _ = scan_changelog(data, before.path)
    items = json.loads(lineage_text or "[]") + [
        {"version": before.version, "checkpointUniqueId": before.unique_id}
    ]
    start = 0
    for i, item in enumerate(items):
        zip_file = pf.snapshots.get(item["version"])
        if zip_file is not None and zip_file.unique_id == item["checkpointUniqueId"]:
            start = i
    return json.dumps(items[start:], separators=(",", ":"))


def zip_removal_files(reader: Any, partition_id: int, version: int, keys: Iterable[bytes]) -> list[NewFile]:
    """``<version>.zip`` of a RocksDB partition without changelogs: the zip of ``version - 1`` with
    ``keys`` (raw key rows) deleted, and the SST files it adds (docs/format.md §4.7).

    The zip of ``version - 1`` is restored into a temporary folder as Spark restores it, opened with
    RocksDB (its own ``OPTIONS`` file, automatic compactions off so no existing SST is rewritten), the
    keys (``00`` + key row: RocksDB keys carry no row checksum) deleted and flushed, and a RocksDB
    checkpoint taken. As ``RocksDBFileManager.saveCheckpointToDfs``: every SST whose local name and size
    the old ``metadata`` lists keeps its ``SSTs/`` name, every other one gets ``<n>-<uuid>.sst``; the zip
    holds the checkpoint's other files and ``metadata`` (the old one's fields, with the new ``sstFiles``
    and ``numKeys`` lowered by the keys that were there). A partition with nothing to remove gets a
    copy of the old zip, which names the same SSTs.

    Raises
    ------
    StatelensError
        The old version cannot be restored (missing or damaged SST, zip), or RocksDB cannot open it.
    """
    pf = reader.partitions[partition_id]
    old = pf.snapshots[version - 1]
    stored = [b"\x00" + key for key in keys]
    target = posixpath.join(pf.directory, f"{version}.zip")
    if not stored:
        return [NewFile(target, reader.fs.read_bytes(old.path))]
    rocksdict = _load_rocksdict()
    with reader.workspace() as ws:
        db_dir, meta = reader.restore(ws, partition_id, version - 1)
        os.remove(os.path.join(db_dir, "metadata"))
        try:
            options, families = rocksdict.Options.load_latest(db_dir)
            if set(families) != {"default"}:
                raise CorruptFileError(
                    f"RocksDB column families {sorted(families)} in a store Spark keeps in 'default'",
                    old.path,
                )
            options.create_if_missing(False)
            options.set_disable_auto_compactions(True)
            # The column family's own options (from the OPTIONS file) decide its compactions: without
            # them the flush of the deletions could start one, which rewrites or drops existing SSTs.
            for family in families.values():
                family.set_disable_auto_compactions(True)
            db = rocksdict.Rdict(db_dir, options=options, column_families=families)
        except CorruptFileError:
            raise
        except Exception as err:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status text
            raise CorruptFileError(f"RocksDB cannot open this snapshot to write: {err}", old.path) from err
        checkpoint = os.path.join(ws.root, f"checkpoint-{version}")
        try:
            removed = 0
            for key in stored:
                if db.get(key) is not None:
                    removed += 1
                db.delete(key)
            db.flush()
            rocksdict.Checkpoint(db).create_checkpoint(checkpoint)
        except Exception as err:  # noqa: BLE001 - RocksDB's status text (a damaged block found while reading)
            raise CorruptFileError(
                f"RocksDB failed deleting keys from this snapshot: {err}", old.path
            ) from err
        finally:
            db.close()
        return _saved_checkpoint(pf.directory, meta, checkpoint, target, removed)


def _saved_checkpoint(
    directory: str, meta: ZipMetadata, checkpoint: str, target: str, removed: int
) -> list[NewFile]:
    """The new SSTs and the zip of a local RocksDB checkpoint folder, as Spark saves one."""
    known = {local: (dfs, size) for local, dfs, size in meta.sst_files}
    out: list[NewFile] = []
    ssts: list[dict[str, Any]] = []
    others: list[tuple[str, bytes]] = []
    for name in sorted(os.listdir(checkpoint)):
        path = os.path.join(checkpoint, name)
        if name == _ROCKSDICT_CONFIG:
            continue
        if os.path.isdir(path):  # archive/ (WAL files kept by a TTL): Spark disables the WAL
            if os.listdir(path):
                raise CorruptFileError(f"the RocksDB checkpoint has archived WAL files in {name}/", target)
            continue
        size = os.path.getsize(path)
        if name.endswith(".sst"):
            dfs, listed = known.get(name, (None, None))
            if dfs is None or listed != size:
                dfs = f"{name[:-4]}-{uuid.uuid4()}.sst"
                with open(path, "rb") as fh:
                    out.append(NewFile(posixpath.join(directory, "SSTs", dfs), fh.read()))
            ssts.append({"localFileName": name, "dfsSstFileName": dfs, "sizeBytes": size})
        else:
            with open(path, "rb") as fh:
                others.append((name, fh.read()))
    doc = dict(meta.raw)
    doc["sstFiles"] = ssts
    doc.pop("logFiles", None)  # Spark leaves an empty list out
    if meta.num_keys is not None and meta.num_keys >= 0:  # a negative count (not tracked) stays: Spark counts
        doc["numKeys"] = meta.num_keys - removed
    metadata = b"v1\n" + json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    buf = io.BytesIO()
    stamp = time.localtime()[:6]
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in [*others, ("metadata", metadata)]:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    out.append(NewFile(target, buf.getvalue()))
    return out

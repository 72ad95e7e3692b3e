"""The files of one store, listed and checked one by one (``statelens doctor``): a sibling of
:class:`readers.scan.StateScan` with its error policy. A store that cannot be listed, and every file that
cannot be read, goes to :attr:`StoreFiles.problems` (the error names the file and, where known, the
offset) and :attr:`StoreFiles.unreadable`; with ``strict`` it is raised. A column family shown as a store
is listed and checked through the files of the store that holds it.

:func:`iter_sidecar_checks` checks the logs, schemas, source logs, RocksDB zips and SSTs of a checkpoint on
a local file system against the Hadoop checksum sidecar beside each (:mod:`readers.checksums`).

A file found sound is remembered for the process by what identifies its bytes (the checkpoint, its path,
the size and version tag of its listing entry) and how it was checked (reader, codec, schema, sample):
checking the same store again (the app following a running query refreshes its verdicts at every new
batch) reads only the files that are new or changed. A RocksDB zip is remembered with the SSTs it names
and their sizes, which must still be listed so. A file at fault is checked again every time.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statelens.readers.backends.base import files_of
from statelens.readers.checksums import check_against_sidecar, sidecar_target
from statelens.readers.errors import StatelensError
from statelens.readers.restart import PartitionFiles
from statelens.readers.scan import Unreadable

if TYPE_CHECKING:
    from statelens.readers.backends.base import StateBackend
    from statelens.readers.fs import CheckpointFS
    from statelens.readers.model import FileEntry, StateFile

__all__ = ["FileCheck", "StoreFiles", "iter_sidecar_checks", "sidecar_pairs"]

#: State files :meth:`StoreFiles.iter_checks` reads whole through their codec's own checksums and
#: framing, and that Spark reads without checking the sidecar: their sidecars are not read (a mismatch
#: would only be a note, at the cost of reading every file twice).
_CHECKED_BY_FORMAT = (".delta", ".snapshot", ".changelog")
#: How many sound files are remembered (a key is a few hundred bytes: tens of MB at most).
SOUND_FILES_MAX = 200_000
#: Sound files: identity -> the SSTs a zip names with their sizes (empty for other files).
_SOUND: OrderedDict[tuple[Any, ...], tuple[tuple[str, int], ...]] = OrderedDict()
_SOUND_LOCK = threading.Lock()


@dataclass(frozen=True)
class FileCheck:
    """One state file checked (:meth:`StoreFiles.iter_checks`).

    Attributes
    ----------
    file : readers.model.StateFile
    error : StatelensError or None
        What is wrong (naming the file, or the SST of a zip at fault); ``None``: the file is sound.
    stage : str or None
        What failed: ``scan``, ``row_checksum`` or ``schema`` (HDFS), ``zip`` or ``changelog`` (RocksDB).
    sst_names : frozenset of str
        A sound zip: the SST files its ``metadata`` names.
    """

    file: StateFile
    error: StatelensError | None = None
    stage: str | None = None
    sst_names: frozenset[str] = frozenset()


class StoreFiles:
    """The state files of one store, per partition and version, and their checks.

    Parameters
    ----------
    backend : readers.backends.base.StateBackend
        A backend that reads files (``capabilities.raw_records``: the native decoder).
    operator_id : int
    store_name : str, optional
        Default: the operator's only store.
    strict : bool
        Raise the first error instead of collecting it.

    Attributes
    ----------
    problems : list of StatelensError
    unreadable : list of readers.scan.Unreadable
        Where they are: the store (partition ``None``), or a partition at a version.
    """

    def __init__(
        self, backend: StateBackend, operator_id: int, store_name: str | None = None, *, strict: bool = False
    ):
        self.strict = strict
        self.problems: list[StatelensError] = []
        self.unreadable: list[Unreadable] = []
        self._reader: Any = None
        self._how: tuple[Any, ...] | None = None
        try:
            self._reader = files_of(backend, operator_id, store_name)
        except StatelensError as err:
            self._problem(None, None, err)

    def _problem(self, partition_id: int | None, version: int | None, err: StatelensError) -> None:
        if self.strict:
            raise err
        self.problems.append(err)
        self.unreadable.append(Unreadable(partition_id, version, err))

    @property
    def provider(self) -> str:
        """``hdfs`` or ``rocksdb`` (empty when the store could not be listed)."""
        return str(self._reader.provider) if self._reader is not None else ""

    def partition_ids(self) -> list[int]:
        """The partitions listed, in order."""
        return self._reader.partition_ids() if self._reader is not None else []

    def listing(self, partition_id: int) -> Any:
        """One partition's files: ``snapshots`` and ``deltas`` (version -> :class:`readers.model.StateFile`;
        RocksDB zips and changelogs), ``directory``, ``readable_versions()`` (the versions they rebuild)
        and, for RocksDB, ``sst_sizes`` (SST name -> bytes); ``None`` for a partition not listed."""
        return self._reader.partitions.get(partition_id) if self._reader is not None else None

    def restart_files(self, partition_id: int, damaged: dict[str, str] | None = None) -> PartitionFiles:
        """One partition's files as a restart plans its load (:func:`readers.restart.plan_load`), with the
        damaged ones (path -> what is wrong); RocksDB repairs only when the store writes changelogs."""
        pf = self.listing(partition_id)
        return PartitionFiles(
            self.provider,
            {v: f.path for v, f in pf.snapshots.items()},
            {v: f.path for v, f in pf.deltas.items()},
            damaged or {},
            pf.directory,
            changelog_checkpointing=self.provider != "rocksdb" or bool(pf.deltas),
        )

    def file_of(self, partition_id: int, err: StatelensError) -> StateFile | None:
        """The state file of one partition an error is about: itself, or the zip whose SST it names."""
        pf = self.listing(partition_id)
        version = err.context.get("version")
        if "/SSTs/" in str(err.path) and isinstance(version, int) and version in pf.snapshots:
            return pf.snapshots[version]  # type: ignore[no-any-return]
        return next((sf for sf in (*pf.snapshots.values(), *pf.deltas.values()) if sf.path == err.path), None)

    def state_files(
        self, partition_id: int | None = None, only: Container[str] | None = None
    ) -> list[StateFile]:
        """The files :meth:`iter_checks` checks, in its order (partition by partition, HDFS deltas then
        snapshots, RocksDB zips then changelogs), of one partition or all, ``only`` those whose path is in
        it."""
        if self._reader is None:
            return []
        listed = self._reader.files()  # partition by partition: deltas or changelogs, then snapshots or zips
        if self.provider == "rocksdb":  # zips first: a restart starts from one
            listed.sort(key=lambda sf: (sf.partition_id, sf.kind != "zip", sf.version))
        return [
            sf
            for sf in listed
            if partition_id in (None, sf.partition_id) and (only is None or sf.path in only)
        ]

    def iter_checks(self, files: Sequence[StateFile], sample_rows: int = 64) -> Iterator[FileCheck]:
        """Check each file of :meth:`state_files` as a read uses it, in order.

        HDFS: it decompresses and its records frame (stage ``scan``), and its first ``sample_rows`` rows
        carry valid row checksums where the store writes them (``row_checksum``) and decode against the
        store's schema (``schema``). RocksDB: a zip
        opens with Spark's ``metadata``, every SST and log it names is there with the recorded size, and
        RocksDB opens the snapshot and reads every key (one workspace per partition: each SST copied once
        for all its zips); a changelog decompresses and frames whole records. A file at fault goes to
        :attr:`problems` too.
        """
        reader = self._reader
        if self.provider != "rocksdb":
            for sf in files:
                key = self._identity(sf, sample_rows)
                if self._known(sf, key) is not None:
                    yield FileCheck(sf)
                    continue
                failed = reader.check_file(sf, sample_rows)
                if failed is None:
                    _remember(key, ())
                    yield FileCheck(sf)
                else:
                    yield self._failed(sf, failed[1], failed[0])
            return
        physical = reader.physical_rocksdb()
        for _, in_partition in itertools.groupby(files, key=lambda sf: sf.partition_id):
            group = [(sf, self._identity(sf, 0)) for sf in in_partition]
            known = {sf.path: self._known(sf, key) for sf, key in group}
            fresh: dict[str, FileCheck] = {}
            if any(names is None for names in known.values()):
                with physical.workspace() as ws:
                    for sf, key in group:
                        if known[sf.path] is None:
                            fresh[sf.path] = checked = self._verify(physical, sf, ws)
                            if checked.error is None:
                                _remember(key, self._sst_sizes(sf, checked.sst_names))
            for sf, _ in group:
                names = known[sf.path]
                yield fresh[sf.path] if names is None else FileCheck(sf, sst_names=names)

    def _identity(self, sf: StateFile, sample_rows: int) -> tuple[Any, ...] | None:
        """What identifies a file's bytes and its check, or None when the listing gives no version tag."""
        fs = self._reader.fs
        try:
            entry = fs.entry(sf.path)
        except StatelensError:
            return None
        if not entry.version_tag:
            return None
        if self._how is None:
            r = self._reader
            self._how = (type(r).__name__, r.codec, r.row_checksum, r.long_value_fields, repr(r.schema))
        return (fs.display_root, sf.path, entry.size_bytes, entry.version_tag, sample_rows, self._how)

    def _known(self, sf: StateFile, key: tuple[Any, ...] | None) -> frozenset[str] | None:
        """The SSTs a remembered sound file names (empty for other files), or None when it must be
        checked: not remembered, or a zip whose SSTs are no longer listed with their sizes."""
        ssts = _recall(key)
        if ssts is None:
            return None
        if ssts:
            listed = getattr(self.listing(sf.partition_id), "sst_sizes", None) or {}
            if any(listed.get(name) != size for name, size in ssts):
                return None
        return frozenset(name for name, _ in ssts)

    def _sst_sizes(self, sf: StateFile, names: frozenset[str]) -> tuple[tuple[str, int], ...]:
        listed = getattr(self.listing(sf.partition_id), "sst_sizes", None) or {}
        return tuple(sorted((name, listed.get(name, -1)) for name in names))

    def _verify(self, physical: Any, sf: StateFile, ws: Any) -> FileCheck:
        try:
            if sf.kind == "zip":
                meta = physical.verify_zip(sf.partition_id, sf.version, ws)
                return FileCheck(sf, sst_names=frozenset(dfs for _, dfs, _ in meta.sst_files))
            physical.verify_changelog(sf.partition_id, sf.version)
        except StatelensError as err:
            return self._failed(sf, err, sf.kind)
        return FileCheck(sf)

    def _failed(self, sf: StateFile, err: StatelensError, stage: str) -> FileCheck:
        self._problem(sf.partition_id, sf.version, err)
        return FileCheck(sf, err, stage)

    def orphan_ssts(self, partition_id: int, checks: Iterable[FileCheck]) -> dict[str, int]:
        """SST files of a RocksDB partition (name -> bytes) that no zip of it names, when ``checks`` (of
        that partition) read every zip whole; empty otherwise. The ``.<name>.crc`` sidecars the local file
        system writes beside them are not SSTs."""
        pf = self.listing(partition_id)
        named = [c.sst_names for c in checks if c.file.kind == "zip" and c.error is None]
        if pf is None or not getattr(pf, "sst_sizes", None) or len(named) != len(pf.snapshots):
            return {}
        known = set().union(*named)
        return {
            n: size
            for n, size in sorted(pf.sst_sizes.items())
            if n.endswith(".sst") and not n.startswith(".") and n not in known
        }


def _recall(key: tuple[Any, ...] | None) -> tuple[tuple[str, int], ...] | None:
    """What :func:`_remember` kept for a sound file (the SSTs a zip names, else empty), or None."""
    if key is None:
        return None
    with _SOUND_LOCK:
        ssts = _SOUND.get(key)
        if ssts is not None:
            _SOUND.move_to_end(key)
    return ssts


def _remember(key: tuple[Any, ...] | None, ssts: tuple[tuple[str, int], ...]) -> None:
    if key is None:
        return
    with _SOUND_LOCK:
        _SOUND[key] = ssts
        _SOUND.move_to_end(key)
        while len(_SOUND) > SOUND_FILES_MAX:
            _SOUND.popitem(last=False)


def sidecar_pairs(fs: CheckpointFS) -> list[tuple[str, FileEntry]]:
    """``(path, sidecar entry)`` of every file :func:`iter_sidecar_checks` checks, in listing order: on a
    local file system, the listed files with a Hadoop checksum sidecar (``.<name>.crc``) beside them but
    for temporary files (the temp-file check's) and deltas, snapshots and changelogs
    (:data:`_CHECKED_BY_FORMAT`): the logs, schemas, source logs, RocksDB zips and SSTs. Empty on object
    stores, which keep no sidecars and where Spark checks none (a sidecar uploaded with a copy is not
    checked either)."""
    if not fs.is_local:
        return []
    pairs = []
    for entry in fs.walk_files(""):
        target = sidecar_target(entry.path)
        if target is None or target.rpartition("/")[2].startswith(".") or not fs.exists(target):
            continue
        if not fs.is_dir(target) and not target.endswith(_CHECKED_BY_FORMAT):
            pairs.append((target, entry))
    return pairs


def iter_sidecar_checks(
    fs: CheckpointFS,
    cancelled: Callable[[], bool] | None = None,
    pairs: list[tuple[str, FileEntry]] | None = None,
) -> Iterator[tuple[str, StatelensError | None]]:
    """The files of :func:`sidecar_pairs` checked against their sidecars: ``(path, None)`` when it
    matches, ``(path, error)`` when not (:func:`readers.checksums.check_against_sidecar`) or when either
    cannot be read. Files found to match are remembered as :meth:`StoreFiles.iter_checks` remembers sound
    files.

    Parameters
    ----------
    fs : readers.fs.CheckpointFS
    cancelled : callable, optional
        Polled between files: the walk stops when it turns true.
    pairs : list, optional
        :func:`sidecar_pairs` of ``fs``, when the caller has them (to count them first).
    """

    def check(pair: tuple[str, FileEntry]) -> StatelensError | None:
        target, sidecar = pair
        file = fs.entry(target)
        key = None
        if file.version_tag and sidecar.version_tag:
            key = (fs.display_root, target, file.size_bytes, file.version_tag, sidecar.version_tag, "sidecar")
            if _recall(key) is not None:
                return None
        try:
            check_against_sidecar(fs.read_bytes(target), fs.read_bytes(sidecar.path), target)
        except StatelensError as err:
            return err
        _remember(key, ())
        return None

    for pair in sidecar_pairs(fs) if pairs is None else pairs:
        if cancelled is not None and cancelled():
            return
        yield pair[0], check(pair)

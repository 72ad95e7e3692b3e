"""The files of one store, listed and checked one by one (``statelens doctor``): a sibling of
:class:`readers.scan.StateScan` with its error policy. A store that cannot be listed, and every file that
cannot be read, goes to :attr:`StoreFiles.problems` (the error names the file and, where known, the
offset) and :attr:`StoreFiles.unreadable`; with ``strict`` it is raised. A column family shown as a store
is listed and checked through the files of the store that holds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statelens.readers.backends.base import files_of
from statelens.readers.errors import StatelensError
from statelens.readers.restart import PartitionFiles
from statelens.readers.scan import Unreadable

if TYPE_CHECKING:
    from statelens.readers.backends.base import StateBackend
    from statelens.readers.model import StateFile

__all__ = ["FileCheck", "StoreFiles"]


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
                failed = reader.check_file(sf, sample_rows)
                yield FileCheck(sf) if failed is None else self._failed(sf, failed[1], failed[0])
            return
        physical = reader.physical_rocksdb()
        for _, group in itertools.groupby(files, key=lambda sf: sf.partition_id):
            with physical.workspace() as ws:
                checks = [self._verify(physical, sf, ws) for sf in group]
            yield from checks

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

"""Open a Structured Streaming checkpoint: logs, batches, operators, stores and their readers.

Claims a folder as a checkpoint by its structure (``metadata``, ``offsets/``, ``commits/``, ``state/``,
§1 of ``docs/format.md``). Every per-file problem goes into the load report and the
rest of the checkpoint stays usable; only "this is not a checkpoint at all" is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from statelens.readers import logs, opmeta, schemas
from statelens.readers._format.cf_store import ColumnFamilyStoreReader
from statelens.readers._format.hdfs_store import HDFSStoreReader, PartitionFiles, list_partition_files
from statelens.readers._format.rocksdb_store import (
    RocksDBColumnFamilyReader,
    RocksDBPartitionFiles,
    RocksDBStoreReader,
    list_rocksdb_partition_files,
)
from statelens.readers.errors import BackendUnavailableError, NotACheckpointError, StatelensError, UsageError
from statelens.readers.fs import CheckpointFS
from statelens.readers.model import (
    BatchInfo,
    CommitLogEntry,
    LoadReport,
    OffsetLogEntry,
    OperatorInfo,
    OperatorKind,
    Progress,
    StateFile,
    StoreInfo,
    StoreSchema,
)
from statelens.readers.operators import find_time_columns, fmgws_v1_long_fields, infer_kind

ROCKSDB_PROVIDER_HINT = "RocksDBStateStoreProvider"

#: Order of the stores of a stream-stream join (v1/v2) in commit ``stateUniqueIds`` (docs/format.md §2.5).
JOIN_STORE_ORDER = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)

StoreReader = HDFSStoreReader | RocksDBStoreReader | ColumnFamilyStoreReader


def _is_int(name: str) -> bool:
    return name.isdigit()


@dataclass(frozen=True)
class Refresh:
    """What :meth:`Checkpoint.refresh` found new.

    Attributes
    ----------
    new_offsets, new_commits : list of int
        Batch ids whose offsets / commit file was read for the first time, ascending.
    waiting : list of str
        Log files listed but not readable yet (or deleted under the reader), left for the next refresh.
    reshaped : bool
        Operators or partitions appeared: the operators were listed again, readers must be fetched again.
    """

    new_offsets: list[int]
    new_commits: list[int]
    waiting: list[str]
    reshaped: bool


class Checkpoint:
    """A checkpoint opened read-only: its logs, batches, operators and state stores.

    Use :func:`open_checkpoint` (or :func:`iter_open_checkpoint` for progress) to build one.

    Attributes
    ----------
    fs : CheckpointFS
        The read-only filesystem view.
    query_id : str or None
        From ``metadata``.
    offsets, commits : dict
        Batch id to parsed log entry.
    batches : list of BatchInfo
        Every batch id with an offsets or commit file, ascending.
    conf : dict
        The session conf pinned in the earliest offsets file, with Spark's defaults filled in.
    operators : list of OperatorInfo
        Stateful operators found under ``state/``.
    report : LoadReport
        Every file that could not be read, with its typed error.
    """

    def __init__(self, fs: CheckpointFS):
        self.fs = fs
        self.report = LoadReport()
        self.query_id: str | None = None
        self.offsets: dict[int, OffsetLogEntry] = {}
        self.commits: dict[int, CommitLogEntry] = {}
        self.batches: list[BatchInfo] = []
        self.conf: dict[str, str] = {}
        self.operators: list[OperatorInfo] = []
        self.operator_metadata: dict[int, Any] = {}
        self._store_files: dict[tuple[int, str], dict[int, PartitionFiles | RocksDBPartitionFiles]] = {}
        # Column families of stores whose schema is a v3 file (transformWithState, join v3/v4).
        self._store_families: dict[tuple[int, str], dict[str, StoreSchema]] = {}
        # Join state formats 3/4: each column family is shown as a store; (op, family) -> physical store.
        self._virtual_stores: dict[tuple[int, str], str] = {}
        self._family_readers: dict[tuple[int, str], RocksDBColumnFamilyReader] = {}
        self._readers: dict[tuple[int, str], StoreReader] = {}
        #: Things worth knowing that are not errors (e.g. state files of retried batches, ignored).
        self.notes: list[str] = []
        #: Operator and partition folders when the operators were listed (:meth:`refresh`).
        self._listed_layout: tuple[tuple[int, tuple[str, ...]], ...] = ()

    # -- public helpers ------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        return self.fs.display_root

    @property
    def last_batch_id(self) -> int | None:
        return self.batches[-1].batch_id if self.batches else None

    @property
    def last_committed_batch_id(self) -> int | None:
        return max(self.commits) if self.commits else None

    def uncommitted_batches(self) -> list[int]:
        """Batches with an offsets file but no commit (the last one is re-run on restart)."""
        return [b.batch_id for b in self.batches if b.offsets is not None and b.commit is None]

    @property
    def _row_checksum(self) -> bool:
        """Rows carry CRC-32C checksums (``stateStore.rowChecksum.enabled``, pinned in the offsets conf)."""
        return self.conf.get("spark.sql.streaming.stateStore.rowChecksum.enabled", "").lower() == "true"

    def operator(self, operator_id: int) -> OperatorInfo:
        for op in self.operators:
            if op.operator_id == operator_id:
                return op
        have = ", ".join(str(o.operator_id) for o in self.operators) or "none"
        raise UsageError(f"no stateful operator {operator_id} in this checkpoint; operators: {have}")

    def physical_store(self, operator_id: int, store_name: str) -> str:
        """The store folder a store lives in: itself, or for a column family shown as a store, its store."""
        return self._virtual_stores.get((operator_id, store_name), store_name)

    def store_reader(self, operator_id: int, store_name: str | None = None) -> StoreReader:
        """The reader of one store (``store_name`` may be omitted for single-store operators).

        Raises
        ------
        BackendUnavailableError
            For transformWithState stores (virtual column families), which are read per state variable
            (:meth:`column_family_reader`); join state formats 3/4 are shown as one store per family.
        UsageError
            Unknown operator or store, or a store name missing for a multi-store operator.
        """
        op = self.operator(operator_id)
        if store_name is None:
            if len(op.stores) != 1:
                names = ", ".join(s.store_name for s in op.stores)
                raise UsageError(f"operator {operator_id} has several stores; pick one with --store: {names}")
            store_name = op.stores[0].store_name
        store = op.store(store_name)
        key = (operator_id, store.store_name)
        if key not in self._readers and key in self._virtual_stores:
            physical = self.column_family_reader(operator_id, self._virtual_stores[key])
            self._readers[key] = ColumnFamilyStoreReader(physical, store.store_name)
        if key not in self._readers:
            if store.provider == "rocksdb":
                self._readers[key] = self._rocksdb_reader(op, store)
                return self._readers[key]
            self._readers[key] = HDFSStoreReader(
                self.fs,
                operator_id,
                store.store_name,
                self._store_files[key],  # type: ignore[arg-type]
                store.schema,
                store.codec,
                long_value_fields=fmgws_v1_long_fields(op.kind, store.schema),
                row_checksum=self._row_checksum,
            )
        return self._readers[key]

    def column_family_reader(
        self, operator_id: int, store_name: str | None = None
    ) -> RocksDBColumnFamilyReader:
        """The reader of a RocksDB store with virtual column families (transformWithState), by state variable.

        Raises
        ------
        UsageError
            The store has no column families (use :meth:`store_reader`), or is unknown.
        BackendUnavailableError
            A state encoding format other than ``unsaferow`` and ``avro``.
        """

        op = self.operator(operator_id)
        name = store_name or op.stores[0].store_name
        name = self.physical_store(operator_id, name)
        cached = self._family_readers.get((operator_id, name))
        if cached is not None:
            return cached
        families = self._store_families.get((operator_id, name))
        provider = next((s.provider for s in op.stores if s.store_name == name), "rocksdb")
        if provider != "rocksdb" or families is None:
            raise UsageError(
                f"operator {operator_id} store {name!r} has no column families; use store_reader"
            )
        encoding = self.conf.get("spark.sql.streaming.stateStore.encodingFormat", "unsaferow")
        if encoding not in ("unsaferow", "avro"):
            raise BackendUnavailableError(
                f"state encoding format {encoding!r} is not decoded natively; use --backend spark",
                path=f"state/{operator_id}",
            )
        files = RocksDBStoreReader(
            self.fs,
            operator_id,
            name,
            self._store_files[(operator_id, name)],  # type: ignore[arg-type]
            None,
            self.conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4"),
        )
        variables = op.properties.get("stateVariables") or []
        types = {
            str(v.get("stateName")): str(v.get("stateVariableType"))
            for v in variables
            if isinstance(v, dict) and v.get("stateName")
        }
        reader = RocksDBColumnFamilyReader(
            files, families, types, avro=encoding == "avro", row_checksum=self._row_checksum
        )
        self._family_readers[(operator_id, name)] = reader
        return reader

    def state_variables(self, operator_id: int) -> list[dict[str, Any]]:
        """The state variables (column families) of a transformWithState operator, with their schemas.

        One dict per column family: ``name``, ``variable_type`` (``ValueState``/``ListState``/
        ``MapState``/``TimerState``, ``None`` for Spark's internal families), ``ttl``, ``key_encoder``,
        ``key_schema``, ``value_schema``, ``user_key_schema``. Empty for operators without column families.
        """
        op = self.operator(operator_id)
        if op.kind != OperatorKind.TRANSFORM_WITH_STATE:
            return []
        declared = {
            str(v.get("stateName")): v
            for v in op.properties.get("stateVariables", []) or []
            if isinstance(v, dict)
        }
        physical = list(dict.fromkeys(self.physical_store(operator_id, s.store_name) for s in op.stores))
        out: list[dict[str, Any]] = []
        for store_name in physical:
            for name, schema in (self._store_families.get((operator_id, store_name)) or {}).items():
                meta = declared.get(name, {})
                out.append(
                    {
                        "name": name,
                        "store_name": store_name,
                        "variable_type": meta.get("stateVariableType"),
                        "ttl": bool(meta.get("ttlEnabled", False)),
                        "key_encoder": schema.key_encoder,
                        "key_schema": schema.key_schema,
                        "value_schema": schema.value_schema,
                        "user_key_schema": schema.user_key_schema,
                    }
                )
        return out

    def _rocksdb_reader(self, op: OperatorInfo, store: StoreInfo) -> RocksDBStoreReader:
        key = (op.operator_id, store.store_name)
        families = self._store_families.get(key)
        if families is not None:
            shown = ", ".join(families) if families else "none listed"
            raise BackendUnavailableError(
                f"operator {op.operator_id} store {store.store_name!r} is a RocksDB store with virtual column "
                f"families ({shown}); it is read per state variable: rows --state-var NAME or --timers "
                "(natively, see info for the names), or as a store with --backend spark",
                path=f"state/{op.operator_id}/_stateSchema/{store.store_name}",
                operator_id=op.operator_id,
                store_name=store.store_name,
            )
        return RocksDBStoreReader(
            self.fs,
            op.operator_id,
            store.store_name,
            self._store_files[key],  # type: ignore[arg-type]
            store.schema,
            store.codec,
            long_value_fields=fmgws_v1_long_fields(op.kind, store.schema),
            row_checksum=self._row_checksum,
        )

    def _unique_ids(self, op_id: int, partition_id: int, store_name: str) -> dict[int, str]:
        """Version -> checkpoint unique id of one store partition, from the v2 commit log (docs/format.md §2.5)."""
        index = JOIN_STORE_ORDER.index(store_name) if store_name in JOIN_STORE_ORDER else 0
        out: dict[int, str] = {}
        for batch_id, commit in self.commits.items():
            parts = (commit.state_unique_ids or {}).get(str(op_id))
            if parts is None or partition_id >= len(parts) or index >= len(parts[partition_id]):
                continue
            out[batch_id + 1] = parts[partition_id][index]
        return out

    # -- loading -------------------------------------------------------------------------------------
    def _read(self, path: str) -> bytes | None:
        try:
            return self.fs.read_bytes(path)
        except StatelensError as err:
            self.report.add(err)
            return None

    def _load_metadata(self) -> None:
        if not self.fs.exists("metadata"):
            return
        data = self._read("metadata")
        if data is None:
            return
        try:
            self.query_id = logs.parse_metadata(data, "metadata")
        except StatelensError as err:
            self.report.add(err)

    def _iter_load_logs(self) -> Iterator[Progress]:
        paths: list[tuple[str, str, int]] = []
        for folder in ("offsets", "commits"):
            for entry in self.fs.list_dir(folder):
                if not entry.is_dir and logs.is_batch_file_name(entry.name):
                    paths.append((folder, entry.path, int(entry.name)))
        total = len(paths)
        done = 0
        contents = self.fs.read_many(p for _, p, _ in paths)
        for folder, path, batch_id in paths:
            data = contents[path]
            done += 1
            if isinstance(data, StatelensError):
                self.report.add(data)
                continue
            try:
                if folder == "offsets":
                    self.offsets[batch_id] = logs.parse_offsets(data, path, batch_id)
                else:
                    self.commits[batch_id] = logs.parse_commit(data, path, batch_id)
            except StatelensError as err:
                self.report.add(err)
            if done % 200 == 0:
                yield Progress(done, total, "logs")
        ids = sorted(set(self.offsets) | set(self.commits))
        self.batches = [BatchInfo(b, self.offsets.get(b), self.commits.get(b)) for b in ids]
        self.conf = logs.effective_conf([self.offsets[b] for b in sorted(self.offsets)])
        yield Progress(total, total, "logs")

    def _load_schema(self, op_id: int, store_dir: str, store_name: str, meta: Any) -> StoreSchema | None:
        """The schema of one store: the v1/v2 file in partition 0, else a v3 file from ``_stateSchema``."""
        path = f"{store_dir}/_metadata/schema"
        if self.fs.exists(path):
            data = self._read(path)
            if data is None:
                return None
            try:
                return schemas.parse_schema_file(data, path)
            except StatelensError as err:
                self.report.add(err)
                return None
        v3_dir = f"state/{op_id}/_stateSchema/{store_name}"
        files = [e for e in self.fs.list_dir(v3_dir) if not e.is_dir and not e.name.startswith(".")]
        if not files:
            return None
        wanted = None
        if meta is not None:
            names = {opmeta.schema_file_name(p) for s in meta.stores for p in s.state_schema_file_paths}
            wanted = next((e for e in files if e.name in names), None)
        entry = wanted or max(
            files, key=lambda e: int(e.name.split("_", 1)[0]) if e.name[0].isdigit() else -1
        )
        data = self._read(entry.path)
        if data is None:
            return None
        try:
            families = schemas.parse_schema_v3(data, entry.path)
        except StatelensError as err:
            self.report.add(err)
            return None
        self._store_families[(op_id, store_name)] = families
        return families.get("default") or next(iter(families.values()), None)

    def _load_operator_metadata(self, op_id: int) -> Any:
        base = f"state/{op_id}/_metadata"
        candidates = []
        v2 = [e for e in self.fs.list_dir(f"{base}/v2") if not e.is_dir and logs.is_batch_file_name(e.name)]
        if v2:
            candidates.append(max(v2, key=lambda e: int(e.name)).path)
        if self.fs.exists(f"{base}/metadata"):
            candidates.append(f"{base}/metadata")
        for path in candidates:
            data = self._read(path)
            if data is None:
                continue
            try:
                return opmeta.parse_operator_metadata(data, path)
            except StatelensError as err:
                self.report.add(err)
        return None

    def _iter_load_operators(self) -> Iterator[Progress]:
        op_ids = sorted(int(e.name) for e in self.fs.list_dir("state") if e.is_dir and _is_int(e.name))
        provider_conf = self.conf.get("spark.sql.streaming.stateStore.providerClass", "")
        codec = self.conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4")
        for n, op_id in enumerate(op_ids):
            yield Progress(n, len(op_ids), f"operator {op_id}")
            meta = self._load_operator_metadata(op_id)
            self.operator_metadata[op_id] = meta
            part_dirs = sorted(
                (int(e.name), e.path)
                for e in self.fs.list_dir(f"state/{op_id}")
                if e.is_dir and _is_int(e.name)
            )
            # Store folders: the partition folder itself ("default") or named sub-folders (joins).
            store_names: set[str] = set()
            for _, pdir in part_dirs:
                for e in self.fs.list_dir(pdir):
                    if (
                        e.is_dir
                        and e.name not in ("_metadata", "SSTs", "logs")
                        and not e.name.startswith(".")
                    ):
                        store_names.add(e.name)
            if not store_names:
                store_names = {"default"}
            stores_schemas: dict[str, StoreSchema] = {}
            stores: list[StoreInfo] = []
            for store_name in sorted(store_names):
                sub = "" if store_name == "default" else f"/{store_name}"
                files: dict[int, PartitionFiles | RocksDBPartitionFiles] = {}
                sdirs = [(pid, pdir + sub) for pid, pdir in part_dirs if self.fs.is_dir(pdir + sub)]
                rocks = any(
                    e.path.endswith((".zip", ".changelog", "/SSTs"))
                    for _, sdir in sdirs
                    for e in self.fs.list_dir(sdir)
                )
                provider = "rocksdb" if rocks or ROCKSDB_PROVIDER_HINT in provider_conf else "hdfs"
                for pid, sdir in sdirs:
                    if provider == "rocksdb":
                        rpf = list_rocksdb_partition_files(
                            self.fs, sdir, pid, self._unique_ids(op_id, pid, store_name)
                        )
                        for f in rpf.ignored:
                            self.notes.append(
                                f"{f.path}: ignored, the commit log names another unique id for version {f.version}"
                            )
                        files[pid] = rpf
                    else:
                        files[pid] = list_partition_files(self.fs, sdir, pid)
                schema = self._load_schema(op_id, f"state/{op_id}/0{sub}", store_name, meta)
                if schema is not None:
                    stores_schemas[store_name] = schema
                versions: set[int] = set()
                for pf in files.values():
                    versions.update(pf.readable_versions())
                self._store_files[(op_id, store_name)] = files
                stores.append(
                    StoreInfo(
                        op_id,
                        store_name,
                        provider,
                        tuple(sorted(files)),
                        tuple(sorted(versions)),
                        schema,
                        codec,
                    )
                )
            name = getattr(meta, "operator_name", None)
            kind = infer_kind(name, sorted(store_names), stores_schemas)
            families = self._store_families.get((op_id, "default"))
            if families is not None and len(stores) == 1 and kind in _FAMILY_STORE_KINDS:
                stores, stores_schemas = self._family_stores(stores[0], families)
            self.operators.append(
                OperatorInfo(
                    op_id,
                    kind,
                    name,
                    tuple(stores),
                    tuple(find_time_columns(kind, stores_schemas)),
                    properties=dict(getattr(meta, "properties", None) or {}),
                )
            )
        yield Progress(len(op_ids), len(op_ids), "operators")

    def _family_stores(
        self, physical: StoreInfo, families: dict[str, StoreSchema]
    ) -> tuple[list[StoreInfo], dict[str, StoreSchema]]:
        """Show each column family of a store as a store of its own.

        Join state formats 3/4 keep the four logical join stores as column families; transformWithState
        one family per state variable plus Spark's internal ones (list counters, TTL indexes, timers). As
        stores they are listed, read, replayed, measured and analysed like any other; the physical store
        stays reachable through :meth:`column_family_reader`.
        """
        stores: list[StoreInfo] = []
        schemas_: dict[str, StoreSchema] = {}
        ordered = sorted(
            families.items(), key=lambda item: item[0].startswith(("$", "_"))
        )  # user state first
        for cf, schema in ordered:
            if cf == "default":
                continue  # created always, unused by joins
            self._virtual_stores[(physical.operator_id, cf)] = physical.store_name
            schemas_[cf] = schema
            stores.append(
                StoreInfo(
                    physical.operator_id,
                    cf,
                    physical.provider,
                    physical.partitions,
                    physical.versions,
                    schema,
                    physical.codec,
                )
            )
        return stores, schemas_

    # -- following a running query ------------------------------------------------------------------
    def refresh(self) -> Refresh:
        """List the checkpoint again and take in what a running query wrote since: new offsets and
        commit files, and each store partition's state files.

        One listing of the storage (:meth:`readers.fs.CheckpointFS.relist`), then only the new log files
        are read; nothing is read twice. A log file listed but not readable (renamed, uploaded or deleted
        under the reader, an S3 object listed before it can be read) is left for the next refresh, not
        reported as damage. The store readers handed out before see the new files (their file maps are
        updated in place). When operators or partitions appear (a query's first batch), the operators
        are listed again and ``reshaped`` says so: readers handed out before must be fetched again.

        Returns
        -------
        Refresh
            The batch ids newly planned and newly committed, and the log files left for later.

        Raises
        ------
        StorageError
            When the storage cannot be listed.
        """
        self.fs.relist()
        paths: list[tuple[str, str, int]] = []
        for folder, known in (("offsets", self.offsets), ("commits", self.commits)):
            for entry in self.fs.list_dir(folder):
                if not entry.is_dir and logs.is_batch_file_name(entry.name) and int(entry.name) not in known:
                    paths.append((folder, entry.path, int(entry.name)))
        contents = self.fs.read_many(p for _, p, _ in paths)
        new_offsets: list[int] = []
        new_commits: list[int] = []
        waiting: list[str] = []
        for folder, path, batch_id in paths:
            data = contents[path]
            try:
                if isinstance(data, StatelensError):
                    raise data
                if folder == "offsets":
                    self.offsets[batch_id] = logs.parse_offsets(data, path, batch_id)
                    new_offsets.append(batch_id)
                else:
                    self.commits[batch_id] = logs.parse_commit(data, path, batch_id)
                    new_commits.append(batch_id)
            except StatelensError as err:  # not all there yet, or gone: read again at the next refresh
                waiting.append(str(err))
        if paths:
            ids = sorted(set(self.offsets) | set(self.commits))
            self.batches = [BatchInfo(b, self.offsets.get(b), self.commits.get(b)) for b in ids]
            if not self.conf and self.offsets:
                self.conf = logs.effective_conf([self.offsets[b] for b in sorted(self.offsets)])
        reshaped = self._state_layout() != self._listed_layout
        if reshaped:
            self._reload_operators()
            self._listed_layout = self._state_layout()
        else:
            self._relist_state_files()
        return Refresh(sorted(new_offsets), sorted(new_commits), waiting, reshaped)

    def _state_layout(self) -> tuple[tuple[int, tuple[str, ...]], ...]:
        """Operator folders and their partition folders as listed now."""
        out = []
        for e in self.fs.list_dir("state"):
            if e.is_dir and _is_int(e.name):
                parts = tuple(
                    sorted(p.name for p in self.fs.list_dir(e.path) if p.is_dir and _is_int(p.name))
                )
                out.append((int(e.name), parts))
        return tuple(sorted(out))

    def _reload_operators(self) -> None:
        self.operators = []
        self.operator_metadata = {}
        self._store_files = {}
        self._store_families = {}
        self._virtual_stores = {}
        self._family_readers = {}
        self._readers = {}
        for _ in self._iter_load_operators():
            pass

    def _relist_state_files(self) -> None:
        """Each store partition's files from the new listing, into the maps the readers hold."""
        for (op_id, store_name), files in self._store_files.items():
            for pid, pf in list(files.items()):
                if isinstance(pf, RocksDBPartitionFiles):
                    files[pid] = list_rocksdb_partition_files(
                        self.fs, pf.directory, pid, self._unique_ids(op_id, pid, store_name)
                    )
                else:
                    files[pid] = list_partition_files(self.fs, pf.directory, pid)
        ops = []
        for op in self.operators:
            stores = []
            for st in op.stores:
                parts = self._store_files.get(
                    (op.operator_id, self.physical_store(op.operator_id, st.store_name))
                )
                versions: set[int] = set()
                for pf in (parts or {}).values():
                    versions.update(pf.readable_versions())
                stores.append(replace(st, versions=tuple(sorted(versions))))
            ops.append(replace(op, stores=tuple(stores)))
        self.operators = ops

    def iter_state_files(self) -> Iterator[tuple[int, str, StateFile]]:
        """Every state file as ``(operator_id, store_name, file)``: deltas and snapshots (HDFS), changelogs
        and zips (RocksDB; the SSTs they share are not listed)."""
        for (op_id, store_name), parts in sorted(self._store_files.items()):
            for _, pf in sorted(parts.items()):
                for sf in [*pf.deltas.values(), *pf.snapshots.values()]:
                    yield op_id, store_name, sf


#: Operators whose column families are shown as stores (see :meth:`Checkpoint._family_stores`).
_FAMILY_STORE_KINDS = (OperatorKind.JOIN, OperatorKind.TRANSFORM_WITH_STATE)


def _looks_like_checkpoint(fs: CheckpointFS) -> bool:
    return any(fs.exists(name) for name in ("metadata", "offsets", "commits", "state"))


def iter_open_checkpoint(
    url: str,
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
    mirror: bool = True,
    *,
    fs: CheckpointFS | None = None,
) -> Iterator[Progress | Checkpoint]:
    """Open a checkpoint, yielding :class:`Progress` records, then the :class:`Checkpoint` last.

    ``mirror=False`` reads a remote checkpoint without the local mirror of its files
    (:mod:`readers.mirror`; ``--no-cache``). ``fs``: the checkpoint's listing already made (``url``,
    ``storage_options`` and ``mirror`` are then those it was made with), e.g. by a caller that looked at
    the listing first.

    Raises
    ------
    NotACheckpointError
        When the folder holds none of ``metadata``, ``offsets/``, ``commits/``, ``state/``.
    StorageError
        When the storage cannot be listed.
    """
    if fs is None:
        fs = CheckpointFS(url, storage_options, cancelled=cancelled, mirror=mirror)
    if not _looks_like_checkpoint(fs):
        raise NotACheckpointError(
            "not a Structured Streaming checkpoint: no metadata, offsets/, commits/ or state/ inside",
            path=fs.display_root,
        )
    ckpt = Checkpoint(fs)
    ckpt._load_metadata()
    yield from ckpt._iter_load_logs()
    yield from ckpt._iter_load_operators()
    ckpt._listed_layout = ckpt._state_layout()
    yield ckpt


def open_checkpoint(
    url: str,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[Progress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    mirror: bool = True,
    *,
    fs: CheckpointFS | None = None,
) -> Checkpoint:
    """Open a checkpoint and return it (see :func:`iter_open_checkpoint`).

    ``cancelled`` is polled by the storage layer (listing, reads, retry waits): when it returns true
    the open stops within about a second with :class:`readers.errors.ReadCancelledError`.
    """
    for item in iter_open_checkpoint(url, storage_options, cancelled, mirror, fs=fs):
        if isinstance(item, Checkpoint):
            return item
        if progress is not None:
            progress(item)
    raise AssertionError("iter_open_checkpoint ended without a checkpoint")  # pragma: no cover

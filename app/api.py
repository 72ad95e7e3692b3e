"""statelens as a library: open a checkpoint in a notebook or a script and ask it what happened.

``statelens.open(path_or_url)`` returns a :class:`Checkpoint`; its state reads are
:class:`readers.scan.StateScan` objects whose output format is chosen last (``to_arrow``, ``to_batches``,
``to_pandas``, ``to_polars``, ``to_duckdb``); the analyses return typed results or Arrow tables. It reads
through the same backends, scan and analyses as the command line and the app, so all three give the same
answer about the same bytes. Documented in ``docs/api.md``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statelens.app.analysis import fleet as _fleet
from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.doctor import iter_doctor
from statelens.app.analysis.expired import iter_expired
from statelens.app.analysis.growth import GROWTH_FIELDS, iter_growth, iter_growth_records
from statelens.app.analysis.runs import Run, iter_runs
from statelens.app.analysis.sql import iter_sql
from statelens.app.prune import Selection, iter_prune
from statelens.readers.arrow_values import to_polars
from statelens.readers.backends import BackendChooser
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import UsageError
from statelens.readers.model import BatchInfo, OperatorInfo
from statelens.readers.restart import RestartConf
from statelens.readers.scan import ScanKind, StateScan

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.app.analysis.doctor import DoctorResult
    from statelens.app.analysis.expired import ExpiredResult
    from statelens.app.analysis.fleet import FleetResult, FleetRow
    from statelens.app.analysis.growth import GrowthResult
    from statelens.app.prune import PrunePlan

__all__ = ["Checkpoint", "Fleet", "fleet", "open"]


def open(  # noqa: A001  # statelens.open, as io.open / fsspec.open
    path: str,
    *,
    storage_options: dict[str, Any] | None = None,
    backend: str = "native",
    spark: Any = None,
    remote: str | None = None,
) -> Checkpoint:
    """Open a Structured Streaming checkpoint (a local folder or any fsspec URL, e.g. ``s3://...``).

    Parameters
    ----------
    path : str
        The checkpoint root (the folder holding ``offsets/``, ``commits/`` and ``state/``).
    storage_options : dict, optional
        fsspec options (e.g. ``{"anon": True}`` or an ``endpoint_url`` for S3-compatible storage).
    backend : {"native", "spark", "auto"}
        Who decodes state: statelens' own decoder (no JVM), Spark's state data sources, or native
        where it can decode a store and Spark otherwise.
    spark : pyspark.sql.SparkSession, optional
        The session for the Spark backend (e.g. a Databricks notebook's ``spark``); started on first
        use when not given.
    remote : str, optional
        A Spark Connect endpoint (``sc://host:port``) for the Spark backend.

    Returns
    -------
    Checkpoint

    Raises
    ------
    statelens.readers.errors.StatelensError
        The path is not a checkpoint or cannot be read (the message names the file).

    Examples
    --------
    >>> import statelens
    >>> ck = statelens.open("resources/sample_checkpoint")  # doctest: +SKIP
    >>> ck.state(0).to_arrow().num_rows  # doctest: +SKIP
    """
    BackendChooser.check_name(backend)  # before opening: a bad name costs no listing
    ckpt = open_checkpoint(path, storage_options=storage_options)
    return Checkpoint(ckpt, BackendChooser(ckpt, backend, spark=spark, remote=remote), storage_options)


class Checkpoint:
    """An opened checkpoint: its batches, operators, state and the post-mortem analyses.

    Made by :func:`open`. Close it (or use it as a context manager) to stop a Spark session it started.
    """

    def __init__(self, ckpt: Any, backends: BackendChooser, storage_options: dict[str, Any] | None = None):
        self._ckpt = ckpt
        self._backends = backends
        self._storage_options = storage_options

    # -- what the logs say ----------------------------------------------------------------------------
    @property
    def location(self) -> str:
        """Where the checkpoint is (a path or URL)."""
        return str(self._ckpt.location)

    @property
    def query_id(self) -> str | None:
        """The query's id (``metadata``)."""
        return self._ckpt.query_id  # type: ignore[no-any-return]

    @property
    def batches(self) -> list[BatchInfo]:
        """Every batch in the offset and commit logs, oldest first (``committed``, ``timestamp_ms``...)."""
        return list(self._ckpt.batches)

    @property
    def last_committed_batch(self) -> int | None:
        """The last batch whose commit is written (a restart resumes after it)."""
        return self._ckpt.last_committed_batch_id  # type: ignore[no-any-return]

    @property
    def operators(self) -> list[OperatorInfo]:
        """The stateful operators with their stores (partitions, versions, schemas)."""
        return list(self._ckpt.operators)

    @property
    def problems(self) -> list[Any]:
        """Files that could not be read while opening (logs, schemas), each naming file and offset."""
        return list(self._ckpt.report.problems)

    # -- state ----------------------------------------------------------------------------------------
    def _store(self, operator: int | None, store: str | None) -> tuple[int, str]:
        ops = self._ckpt.operators
        if operator is None:
            if len(ops) != 1:
                ids = ", ".join(str(o.operator_id) for o in ops) or "none"
                raise UsageError(f"this checkpoint has several stateful operators ({ids}); pick one")
            operator = ops[0].operator_id
        op = self._ckpt.operator(operator)
        if store is None:
            return operator, op.stores[0].store_name
        return operator, op.store(store).store_name

    def state(
        self,
        operator: int | None = None,
        *,
        store: str | None = None,
        version: int | None = None,
        partition: int | Sequence[int] | None = None,
    ) -> StateScan:
        """The rows of one store at ``version`` (default: each partition's latest).

        Parameters
        ----------
        operator : int, optional
            Operator id (needed when the query has several stateful operators).
        store : str, optional
            Store name (default the operator's first, ``default`` for most operators).
        version : int, optional
            State version (version ``v`` is the state after batch ``v - 1``).
        partition : int or sequence of int, optional
            Only these partitions.

        Returns
        -------
        StateScan
            Read when an output is asked for: ``.to_arrow()``, ``.to_batches()``, ``.to_pandas()``...
        """
        return self._scan("rows", operator, store, partition, version=version)

    def changes(
        self,
        operator: int | None = None,
        *,
        store: str | None = None,
        start: int | None = None,
        end: int | None = None,
        partition: int | Sequence[int] | None = None,
    ) -> StateScan:
        """The change feed of one store: every put and remove of versions ``start .. end``.

        Recorded changes where the store has them (HDFS deltas, RocksDB changelogs), else the difference
        of consecutive versions (``derived`` is true); a version whose changes can be neither read nor
        derived is an error naming the file, never an empty answer.
        """
        return self._scan("changes", operator, store, partition, start_version=start, end_version=end)

    def stats(
        self,
        operator: int | None = None,
        *,
        store: str | None = None,
        version: int | None = None,
        start: int | None = None,
        end: int | None = None,
        partition: int | Sequence[int] | None = None,
    ) -> StateScan:
        """Live rows and on-disk bytes of one store per partition and version (``version`` alone, or
        ``start .. end``; default every readable version), counted without decoding rows where the
        backend can.

        Returns
        -------
        StateScan
            ``.to_arrow()`` has columns ``version, partition, rows, bytes``; ``.iter_stats()`` gives
            :class:`readers.model.PartitionVersionStats`. A partition whose files cannot be read stops
            at the version before the damaged file and is listed in ``.unreadable`` with the error.
        """
        if version is not None and (start is not None or end is not None):
            raise UsageError("give version, or start and end, not both")
        return self._scan("stats", operator, store, partition, version, start, end)

    def _scan(
        self,
        kind: ScanKind,
        operator: int | None,
        store: str | None,
        partition: int | Sequence[int] | None,
        version: int | None = None,
        start_version: int | None = None,
        end_version: int | None = None,
    ) -> StateScan:
        op, name = self._store(operator, store)
        return StateScan(
            self._backends.for_store(op, name),
            op,
            name,
            kind,
            version,
            start_version,
            end_version,
            partitions=_partitions(partition),
        )

    # -- analyses -------------------------------------------------------------------------------------
    def growth(self) -> GrowthResult:
        """Rows and bytes of every store per partition and version, and the checkpoint's footprint."""

        return run_to_end(iter_growth(self._ckpt, backends=self._backends))

    def growth_table(self) -> pa.Table:
        """Rows and on-disk bytes of every store partition at every version as one Arrow table, the
        records of ``statelens growth --json``: ``operator_id, store_name, version, batch_id,
        partition_id, rows, bytes`` (bytes of the files written for that version)."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        records = list(iter_growth_records(self._ckpt, backends=self._backends))
        return pa.table({k: [r[k] for r in records] for k in GROWTH_FIELDS})

    def expired(self, operator: int | None = None, **options: Any) -> ExpiredResult:
        """Expired-but-unremoved keys (zombies, overdue, stale, eviction lag) with their evidence.

        ``options`` are those of :func:`app.analysis.expired.iter_expired` (``all_versions``,
        ``stale_after``, ``timeout_kind``...). The result's ``findings`` are typed
        (:class:`app.analysis.expired.ExpiredFinding`, each with ``to_json()``), with exact counts per
        category (``counts()``).
        """

        return run_to_end(iter_expired(self._ckpt, operator, backends=self._backends, **options))

    def runs(self, event_logs: Sequence[str] | None = None) -> list[Run]:
        """The runs (starts and restarts) of the checkpoint's query, oldest first: from the event logs'
        run ids when given, else from its operator metadata files or the gaps in its batch times
        (:func:`app.analysis.runs.find_runs`; ``before_after`` gives the rates around the last one)."""

        return run_to_end(iter_runs(self._ckpt, event_logs, self._storage_options))

    def doctor(
        self, *, spark_version: str | None = None, conf: Mapping[str, str] | None = None, **options: Any
    ) -> DoctorResult:
        """Will a restart succeed? Every health check, worst finding first (``exit_code`` as the CLI).

        Parameters
        ----------
        spark_version : str, optional
            The Spark that will restart the query (``"3.5"``, ``"4.3"``): whether auto snapshot repair
            (Spark 4.1+) gets past a damaged newest snapshot; unknown by default, and the findings say
            what depends on it. ``result.restart_loads`` holds each partition's plan.
        conf : mapping, optional
            Spark confs of the restart (``spark.sql.streaming.stateStore.autoSnapshotRepair.enabled``...).
        **options
            As :func:`app.analysis.doctor.iter_doctor` takes them (``decode_files``, ``event_logs``...).
        """

        options.setdefault("storage_options", self._storage_options)
        restart = RestartConf.parse(spark_version, conf)
        return run_to_end(iter_doctor(self._ckpt, backends=self._backends, restart=restart, **options))

    def prune(
        self,
        *,
        zombies: bool = False,
        categories: Sequence[str] = ("zombie",),
        keys: Sequence[dict[str, Any]] | None = None,
        where: str | None = None,
        operator: int | None = None,
        store: str | None = None,
        out: str | None = None,
        apply: bool = False,
        drop_uncommitted: bool = False,
        force: bool = False,
    ) -> PrunePlan:
        """What ``statelens prune`` removes (a dry run) and, with ``out`` and ``apply``, the pruned copy.

        Parameters
        ----------
        zombies, categories
            The expired-but-unremoved keys :meth:`expired` reports at the last committed version.
        keys : sequence of dict, optional
            ``{"key": ...}`` objects as statelens prints keys (``operator_id``, ``store_name``,
            ``partition`` narrow them), e.g. ``[f.to_json() for f in ckpt.expired().findings]``.
        where : str, optional
            A DuckDB predicate over the ``state`` table of :meth:`sql`.
        operator, store : optional
            Only this operator / store.
        out : str, optional
            A new or empty folder for the copy: a local path or any fsspec URL (the checkpoint's
            storage options apply to it).
        apply : bool
            Write the copy (default: a dry run that writes nothing).
        drop_uncommitted : bool
            Build on the last committed batch when the last planned one never committed.
        force : bool
            Copy even when :meth:`doctor`'s checks find errors in files the copy carries and a restart
            of it loads; the plan's ``findings`` record each.

        Returns
        -------
        app.prune.PrunePlan
            Rows and bytes removed per store and partition (``to_json()``); once applied, the files
            written with their SHA-256 and the proof (``proof.ok``).

        Raises
        ------
        RefusedError
            Before anything is written, when the copy would not be safe (the message says why); a
            ``DamagedSourceError`` lists the doctor's errors in what the copy would carry.
        """

        selection = Selection(
            zombies=zombies,
            categories=tuple(categories),
            keys=keys,
            where=where,
            operator_id=operator,
            store_name=store,
        )
        return run_to_end(
            iter_prune(
                self._ckpt,
                selection,
                out,
                apply=apply,
                drop_uncommitted=drop_uncommitted,
                force=force,
                storage_options=self._storage_options,
            )
        )

    def sql(
        self, query: str, *, operator: int | None = None, store: str | None = None, version: int | None = None
    ) -> pa.Table:
        """Run a DuckDB query over the tables ``batches``, ``growth``, ``expired``, ``state`` and
        ``changes`` (see ``statelens sql --help``) and return its answer as an Arrow table."""
        import pyarrow as pa  # deferred: pyarrow (heavy)

        result = run_to_end(
            iter_sql(
                self._ckpt,
                query,
                operator_id=operator,
                store_name=store,
                version=version,
                backends=self._backends,
            )
        )
        try:
            batches = list(result.batches)
            if batches:
                return pa.Table.from_batches(batches)
            return pa.table({c: pa.array([], pa.null()) for c in result.columns})
        finally:
            self._ckpt.report.problems.extend(
                p for p in result.problems if p not in self._ckpt.report.problems
            )
            result.close()

    # -- lifecycle and display --------------------------------------------------------------------------
    def close(self) -> None:
        """Stop a Spark session the Spark backend started (one passed in keeps running)."""
        self._backends.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        last = self.last_committed_batch
        return (
            f"<statelens.Checkpoint {self.location!r}: {len(self.batches)} batches, last committed "
            f"{'none' if last is None else last}, {len(self.operators)} stateful operators>"
        )

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{o.operator_id}</td><td>{e(o.kind.value if hasattr(o.kind, 'value') else str(o.kind))}"
            f"</td><td>{e(', '.join(s.store_name for s in o.stores))}</td>"
            f"<td>{len(o.stores[0].partitions) if o.stores else 0}</td>"
            f"<td>{max((s.versions[-1] for s in o.stores if s.versions), default=0)}</td></tr>"
            for o in self.operators
        )
        last = self.last_committed_batch
        problems = len(self.problems)
        return (
            f"<div><b>statelens checkpoint</b> <code>{e(self.location)}</code><br>"
            f"{len(self.batches)} batches, last committed: {'none' if last is None else last}; "
            f"{'no problems reading the logs' if not problems else f'{problems} unreadable files'}"
            "<table><tr><th>operator</th><th>kind</th><th>stores</th><th>partitions</th>"
            f"<th>latest version</th></tr>{rows}</table></div>"
        )


def _partitions(partition: int | Sequence[int] | None) -> list[int] | None:
    if partition is None:
        return None
    if isinstance(partition, int):
        return [partition]
    return [int(p) for p in partition]


# -- many checkpoints ----------------------------------------------------------------------------------
#: The columns of :meth:`Fleet.to_arrow`, in order (``docs/fleet.md``).
FLEET_COLUMNS = (
    "path",
    "location",
    "query_id",
    "severity",
    "exit_code",
    "error",
    "last_batch",
    "last_batch_ms",
    "age_ms",
    "uncommitted",
    "stores",
    "rows",
    "state_bytes",
    "state_file_bytes",
    "rows_change",
    "rows_per_day",
    "zombies",
    "restart",
    "unreadable",
    "finding",
    "verdicts",
    "changes",
    "cached",
)


def fleet(
    root: str,
    *,
    storage_options: dict[str, Any] | None = None,
    jobs: int | None = None,
    max_depth: int | None = None,
    memory_budget: int | None = None,
    zombies: bool = True,
    spark_version: str | None = None,
    conf: Mapping[str, str] | None = None,
    cache: bool = True,
    since: Mapping[str, Any] | None = None,
    on_row: Any = None,
    spark: Any = None,
) -> Fleet:
    """Every checkpoint below a folder or prefix, one row each with its first verdicts, worst first
    (``statelens fleet``; ``docs/fleet.md``).

    Parameters
    ----------
    root : str
        A local folder or any fsspec URL (``s3://bucket/prefix``).
    storage_options : dict, optional
        fsspec options.
    jobs : int, optional
        Checkpoints read at once (default :data:`app.analysis.fleet.DEFAULT_JOBS`).
    max_depth : int, optional
        Folder levels searched below ``root`` (default :data:`readers.discover.DEFAULT_MAX_DEPTH`).
    memory_budget : int, optional
        Estimated bytes of decoded state in memory at once (default 2 GiB).
    zombies : bool
        Count zombie keys at each partition's latest version.
    spark_version, conf : optional
        The Spark that will restart the queries, for the restart verdict (as ``summary``'s options).
    cache : bool
        Reuse rows of checkpoints whose files did not change since an earlier run, and keep remote files
        read in the mirror (False: ``--no-cache``).
    since : mapping, optional
        A previous run's :meth:`Fleet.to_json`: each row then says what changed.
    on_row : callable, optional
        Called with each :class:`app.analysis.fleet.FleetRow` as it is done.
    spark : pyspark.sql.SparkSession, optional
        Read the checkpoints in Spark tasks next to the data (e.g. a Databricks notebook's ``spark``;
        statelens installed on the executors); the search for them runs here.

    Returns
    -------
    Fleet

    Raises
    ------
    statelens.readers.errors.StatelensError
        When ``root`` itself cannot be listed (a checkpoint that cannot be read is a row with its error).

    Examples
    --------
    >>> import statelens
    >>> f = statelens.fleet("s3://company-checkpoints/prod")  # doctest: +SKIP
    >>> f.to_pandas()[["path", "severity", "rows", "zombies"]]  # doctest: +SKIP
    """
    options = _fleet.FleetOptions(
        spark_version=spark_version,
        conf=tuple(sorted((conf or {}).items())),
        zombies=zombies,
        mirror=cache,
        cache=cache,
    )
    try:
        options.restart()
    except ValueError as err:
        raise UsageError(str(err)) from None
    result = _fleet.fleet(
        root,
        storage_options,
        options=options,
        jobs=jobs or _fleet.DEFAULT_JOBS,
        max_depth=_fleet.DEFAULT_MAX_DEPTH if max_depth is None else max_depth,
        memory_bytes=memory_budget or _fleet.DEFAULT_MEMORY_BYTES,
        on_row=on_row,
        spark=spark,
    )
    if since is not None:
        _fleet.compare(result, dict(since))
    return Fleet(result)


class Fleet:
    """The rows of :func:`fleet`, worst first: iterate them, or take them as a table (``to_arrow``,
    ``to_pandas``, ``to_polars``) or as JSON (``to_json``, what ``statelens fleet --json`` prints)."""

    def __init__(self, result: FleetResult):
        self.result = result

    @property
    def rows(self) -> list[FleetRow]:
        """One :class:`app.analysis.fleet.FleetRow` per checkpoint, worst first."""
        return list(self.result.rows)

    @property
    def exit_code(self) -> int:
        """``summary``'s exit code for the worst checkpoint (2: one could not be read, or none found)."""
        return self.result.exit_code

    def __len__(self) -> int:
        return len(self.result.rows)

    def __iter__(self) -> Any:
        return iter(self.result.rows)

    def to_json(self) -> dict[str, Any]:
        """The document ``statelens fleet --json`` prints."""
        return self.result.to_json()

    def to_arrow(self) -> pa.Table:
        """One row per checkpoint, worst first; columns :data:`FLEET_COLUMNS` (``verdicts`` a list of
        ``check, severity, text`` structs; times are epoch milliseconds)."""
        import pyarrow as pa  # deferred: pyarrow

        now = self.result.scanned_ms
        verdict = pa.struct([("check", pa.string()), ("severity", pa.string()), ("text", pa.string())])
        schema = pa.schema(
            [
                ("path", pa.string()),
                ("location", pa.string()),
                ("query_id", pa.string()),
                ("severity", pa.string()),
                ("exit_code", pa.int8()),
                ("error", pa.string()),
                ("last_batch", pa.int64()),
                ("last_batch_ms", pa.int64()),
                ("age_ms", pa.int64()),
                ("uncommitted", pa.list_(pa.int64())),
                ("stores", pa.int32()),
                ("rows", pa.int64()),
                ("state_bytes", pa.int64()),
                ("state_file_bytes", pa.int64()),
                ("rows_change", pa.int64()),
                ("rows_per_day", pa.float64()),
                ("zombies", pa.int64()),
                ("restart", pa.string()),
                ("unreadable", pa.int64()),
                ("finding", pa.string()),
                ("verdicts", pa.list_(verdict)),
                ("changes", pa.list_(pa.string())),
                ("cached", pa.bool_()),
            ]
        )
        records = [
            {
                "path": r.path,
                "location": r.location,
                "query_id": r.query_id,
                "severity": r.severity,
                "exit_code": r.exit_code,
                "error": None if r.error is None else str(r.error.get("message")),
                "last_batch": r.last_batch,
                "last_batch_ms": r.last_batch_ms,
                "age_ms": r.age_ms(now),
                "uncommitted": list(r.uncommitted),
                "stores": r.stores,
                "rows": r.rows,
                "state_bytes": r.state_bytes,
                "state_file_bytes": r.state_file_bytes,
                "rows_change": r.rows_change,
                "rows_per_day": None if r.trend is None else r.trend.get("rows_per_day"),
                "zombies": r.zombies,
                "restart": r.restart or None,
                "unreadable": r.unreadable,
                "finding": r.headline(),
                "verdicts": [{"check": v.check, "severity": v.severity, "text": v.text} for v in r.verdicts],
                "changes": list(r.changes),
                "cached": r.cached,
            }
            for r in self.result.rows
        ]
        return pa.Table.from_pylist(records, schema=schema)

    def to_pandas(self) -> Any:
        """A pandas DataFrame (``to_arrow().to_pandas()``)."""
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """A polars DataFrame (needs polars installed).

        Raises
        ------
        BackendUnavailableError
            polars is not installed (the message says how to install it).
        """
        return to_polars(self.to_arrow())

    def __repr__(self) -> str:
        c = self.result.counts()
        return (
            f"<statelens fleet {self.result.root}: {len(self)} checkpoints, {c['error']} with errors, "
            f"{c['warning']} with warnings>"
        )

"""``statelens fleet --backend spark``: the checkpoints found spread over Spark tasks, each task running
:func:`app.analysis.fleet.check_checkpoint` (the native first look, ``summary --latest``'s verdicts) on
its checkpoints next to the data, the rows gathered back one partition at a time.

The driving process holds the list of paths and one partition of rows at a time
(``toLocalIterator``), whatever the fleet's size. The executors need statelens importable (the same
version) and the storage reachable; each keeps its own cache of rows on its local disk, so a second run
on the same hosts reads only what changed there. Works through Spark Connect too (``mapInArrow`` runs on
the server's Python workers).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from statelens.app.analysis.fleet_row import FleetOptions, FleetRow, check_checkpoint
from statelens.readers.backends.spark import DEFAULT_MASTER, MASTER_ENV
from statelens.readers.discover import FoundCheckpoint
from statelens.readers.errors import BackendUnavailableError

#: Tasks at most: one checkpoint per task up to this many, then several per task.
MAX_TASKS = 1000


def arrow_rows(batches: Iterable[Any], storage_options_json: str, options_json: str) -> Iterator[Any]:
    """The body of each Spark task: ``(url, path)`` Arrow batches in, ``(path, row)`` batches out, ``row``
    being :meth:`FleetRow.to_json` as JSON text.

    Parameters
    ----------
    batches : iterable of pyarrow.RecordBatch
        Columns ``url`` and ``path``.
    storage_options_json, options_json : str
        The fsspec options and :class:`FleetOptions` fields, as JSON.

    Yields
    ------
    pyarrow.RecordBatch
    """
    import pyarrow as pa  # deferred: pyarrow

    storage_options = json.loads(storage_options_json) or None
    fields = json.loads(options_json)
    fields["conf"] = tuple(tuple(kv) for kv in fields.get("conf", ()))
    options = FleetOptions(**fields)
    for batch in batches:
        paths: list[str] = []
        rows: list[str] = []
        for url, path in zip(batch.column("url").to_pylist(), batch.column("path").to_pylist(), strict=True):
            row = check_checkpoint(url, storage_options, options)
            row.path = path
            paths.append(path)
            rows.append(json.dumps(row.to_json()))
        yield pa.RecordBatch.from_pydict({"path": paths, "row": rows})


def spark_session(
    master: str | None = None, remote: str | None = None, conf: dict[str, str] | None = None
) -> tuple[Any, bool]:
    """A SparkSession for the fleet (Spark Connect when ``remote``), or the one running in this process,
    and whether it was started here (then the caller stops it; one found running is left running).

    Raises
    ------
    BackendUnavailableError
        PySpark or Java missing, or Spark cannot start or be reached.
    """
    try:
        from pyspark.sql import SparkSession  # deferred: pyspark (heavy)
    except ImportError as err:
        raise BackendUnavailableError("--backend spark needs PySpark: pip install 'pyspark>=3.4'") from err
    builder = SparkSession.builder.appName("statelens fleet").config("spark.sql.session.timeZone", "UTC")
    if remote:
        builder = builder.remote(remote)
    else:
        builder = (
            builder.master(master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    if remote:
        from pyspark.sql.connect.session import SparkSession as RemoteSession  # deferred: pyspark

        owned = RemoteSession.getActiveSession() is None
    else:
        from pyspark import SparkContext  # deferred: pyspark

        owned = SparkContext._active_spark_context is None
    try:
        spark = builder.getOrCreate()
    except Exception as err:  # noqa: BLE001 - py4j/grpc start-up errors have no common type
        raise BackendUnavailableError(
            f"Spark could not start or be reached: {str(err).strip().splitlines()[0]}"
        ) from err
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")  # the rows say what failed
    return spark, owned


def iter_spark_rows(
    spark: Any,
    found: Sequence[FoundCheckpoint],
    storage_options: dict[str, Any] | None,
    options: FleetOptions,
    cancelled: Callable[[], bool] | None = None,
) -> Iterator[FleetRow]:
    """The rows of ``found`` computed by Spark tasks, in the order their partitions come back.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    found : sequence of FoundCheckpoint
        Checkpoints (not folders that could not be listed).
    storage_options : dict or None
        fsspec options (sent to the tasks: give ones the executors can use).
    options : FleetOptions
    cancelled : callable, optional
        Checked between partitions.

    Yields
    ------
    FleetRow
    """
    if not found:
        return
    so_json = json.dumps(storage_options or {})
    opts_json = json.dumps(dataclasses.asdict(options))
    df = spark.createDataFrame([(f.url, f.path) for f in found], "url string, path string")
    df = df.repartition(min(len(found), MAX_TASKS))

    def task(batches: Iterable[Any]) -> Iterator[Any]:
        yield from arrow_rows(batches, so_json, opts_json)

    result = df.mapInArrow(task, "path string, row string")
    for r in result.toLocalIterator():
        if cancelled is not None and cancelled():
            return
        yield FleetRow.from_json(json.loads(r["row"]))

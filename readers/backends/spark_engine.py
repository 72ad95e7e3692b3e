"""Queries that run where Spark runs: the frames a Spark backend offers an analysis, and one way to run
the analysis's own SQL over them (:class:`SparkEngine`).

An analysis that pushes its work into Spark (``app/analysis/expired_spark.py``, ``heavy_spark.py``)
writes its SQL itself and names its inputs ``{name}``; it asks the backend's :attr:`engine` for the
frames behind those names (a store's rows at a version, its history, a transformWithState operator's
timers) and for small tables of its own values; only the answer's rows come to this process. A backend
without an engine (the native decoder) has ``engine`` None, declared, never a method that raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SparkEngine", "SparkFrames"]

#: Small inputs from this process: ``name -> (DDL schema, rows)``.
Tables = dict[str, tuple[str, list[tuple[Any, ...]]]]


class SparkFrames:
    """The DataFrames of one checkpoint inside one Spark job (:meth:`SparkEngine.query` hands them out).

    Attributes
    ----------
    spark : SparkSession
        The job's session (for ``pyspark.sql.functions`` and unions of frames).
    """

    def __init__(self, backend: Any, spark: Any, unique_column: Callable[[str, Any], Any]):
        self._backend = backend
        self._unique_column = unique_column
        self.spark = spark

    def state(self, operator_id: int, store_name: str | None, version: int) -> Any:
        """``p int, key, value``: one store's rows at ``version``, with repeated struct field names made
        unique (``sum, sum_2``) and calendar intervals as ``struct<months, days, microseconds>``."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        b = self._backend
        b._check_version(version)
        store = b._typed_store(operator_id, store_name)
        return b._state_frame(self.spark, operator_id, store_name, version - 1).select(
            F.col("partition_id").cast("int").alias("p"),
            self._unique_column("key", store.key_schema),
            self._unique_column("value", store.value_schema),
        )

    def history(
        self,
        operator_id: int,
        store_name: str | None,
        first: int,
        last: int,
        payload: Callable[[Any], list[Any]] | None = None,
    ) -> Any:
        """``p int, v bigint, c string, key, value, o bigint``: one store's rows at version ``first``
        (``c`` null), then its change feed up to ``last`` (``c`` the feed's ``change_type``:
        ``update``/``delete``); ``o`` orders the records of a version. ``payload(frame)`` gives the
        columns after ``key`` (default ``value``)."""
        self._backend._check_version(last)
        return self._backend._history_frame(self.spark, operator_id, store_name, first, last, payload)

    def timers(self, operator_id: int, version: int) -> Any:
        """``key, expiration_timestamp_ms, partition_id``: the timers a transformWithState operator had
        registered at ``version`` (Spark's ``readRegisteredTimers``; it has no change feed of timers)."""
        self._backend._check_version(version)
        return self._backend._timers_frame(self.spark, operator_id, version - 1)


class SparkEngine:
    """Runs an analysis's SQL over a checkpoint's frames where Spark runs, in the backend's cancellable
    job groups (:meth:`readers.backends.spark.SparkBackend.cancel` stops it).

    Parameters
    ----------
    backend : readers.backends.spark.SparkBackend
    convert : callable
        ``(DataFrame, columns) -> rows``: how the backend brings an answer's rows here as Python values.
    unique_column : callable
        ``(name, type) -> Column``: a struct column with repeated field names made unique.
    """

    def __init__(
        self,
        backend: Any,
        convert: Callable[[Any, list[str]], Iterator[tuple[Any, ...]]],
        unique_column: Callable[[str, Any], Any],
    ):
        self._backend = backend
        self._convert = convert
        self._unique_column = unique_column

    def query(
        self,
        what: str,
        frames: Callable[[SparkFrames], dict[str, Any]],
        query: str,
        columns: list[str],
        tables: Tables | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        """Stream ``columns`` of ``query`` (values converted to Python as the backend's rows are), its
        ``{name}`` placeholders bound to temporary views of ``frames(...)`` and of ``tables``, dropped
        after.

        Raises
        ------
        StatelensError
            Spark cannot read the frames, or the query fails (its message kept).
        ReadCancelledError
            The backend was cancelled meanwhile.
        """
        with self._backend._job(what) as spark:
            views = frames(SparkFrames(self._backend, spark, self._unique_column))
            tables = tables or {}
            suffix = uuid.uuid4().hex[:12]
            names = {name: f"statelens_{name}_{suffix}" for name in [*views, *tables]}
            for name, frame in views.items():
                frame.createOrReplaceTempView(names[name])
            for name, (schema, rows) in tables.items():
                spark.createDataFrame(rows, schema).createOrReplaceTempView(names[name])
            try:
                yield from self._convert(spark.sql(query.format(**names)), columns)
            finally:
                for view in names.values():
                    spark.catalog.dropTempView(view)

    def job_progress(self) -> Any:
        """How far the Spark jobs in flight are (a :class:`readers.model.Progress`, or None when none
        runs or Spark Connect gives no tracker here)."""
        return self._backend.job_progress()

    def row_counts(self, operator_id: int, store_name: str | None, version: int) -> dict[int, int]:
        """Rows per partition of one store at ``version``."""
        return self._backend.row_counts(operator_id, store_name, version)

    def dataframe(
        self,
        operator_id: int,
        store_name: str | None,
        *,
        changes: bool = False,
        version: int | None = None,
        start_version: int | None = None,
        end_version: int | None = None,
        partitions: list[int] | None = None,
    ) -> Any:
        """Spark's own DataFrame of one store's rows (or change feed), lazy, where Spark runs."""
        return self._backend.dataframe(
            operator_id,
            store_name,
            changes=changes,
            version=version,
            start_version=start_version,
            end_version=end_version,
            partitions=partitions,
        )

    def write_parquet(
        self,
        operator_id: int,
        store_name: str | None,
        url: str,
        *,
        version: int | None = None,
        changes: bool = False,
        partition_id: int | None = None,
    ) -> int:
        """One store's rows (or change feed) as a folder of Parquet part files written where Spark runs
        (:meth:`readers.backends.spark.SparkBackend.write_parquet`); returns the rows written."""
        return self._backend.write_parquet(
            operator_id, store_name, url, version=version, changes=changes, partition_id=partition_id
        )

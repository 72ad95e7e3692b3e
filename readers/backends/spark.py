"""The PySpark backend: reads state through Spark's own ``statestore`` / ``state-metadata`` sources.

The authority when something looks odd, and the way to scale past one desktop: an embedded ``local[*]``
session started lazily on first use, or any master the user names (``--spark-master``,
``STATELENS_SPARK_MASTER``, or a ``spark-defaults``-style conf file). The state data sources exist from
Spark 4.0 on and read checkpoints written by 3.2+ (§9 of ``docs/format.md``). Values
are converted exactly (no time zone, no float rounding) to :data:`readers.model.VALUE_REPRESENTATION`.

Same contract as :mod:`readers.backends.native`, with two differences Spark imposes: versions of
uncommitted batches cannot be read, and maps come back as hash maps (their entries are returned
sorted by key, not in stored order).
"""

from __future__ import annotations

import contextlib
import datetime as dt_module
import functools
import itertools
import math
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from statelens.readers.backends.base import Capabilities
from statelens.readers.backends.spark_engine import SparkEngine
from statelens.readers.errors import (
    BackendUnavailableError,
    FilesUnavailableError,
    ReadCancelledError,
    SchemaMismatchError,
    SparkReadError,
    StatelensError,
    UsageError,
)
from statelens.readers.model import (
    CalendarInterval,
    OperatorKind,
    PartitionVersionStats,
    Progress,
    StateChange,
    StateRow,
)
from statelens.readers.values import dedupe_names, rows_to_arrow, state_row_schema

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.readers.checkpoint import Checkpoint

MASTER_ENV = "STATELENS_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
#: Spark Connect endpoint (``sc://host:port``): when set, no local JVM is started.
REMOTE_ENV = "STATELENS_SPARK_REMOTE"

_SESSION_LOCK = threading.Lock()
#: Whether a SparkBackend of this process launched PySpark's JVM gateway (see :func:`stop_gateway`).
_GATEWAY_LAUNCHED = False


def parse_spark_defaults(path: str | Path) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file: ``key value`` (or ``key=value``) per line, ``#`` comments."""
    conf: dict[str, str] = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line and (" " not in line or line.index("=") < line.index(" ")):
            key, _, value = line.partition("=")
        else:
            key, _, value = line.partition(" ")
        conf[key.strip()] = value.strip()
    return conf


def check_spark_available() -> None:
    """Raise :class:`BackendUnavailableError` when PySpark or a Java runtime is missing."""
    try:
        import pyspark  # deferred: pyspark (heavy)
    except ImportError as err:
        raise BackendUnavailableError(
            "PySpark is not installed; install it with: pip install 'pyspark>=4.0'"
        ) from err
    major = int(pyspark.__version__.split(".")[0])
    if major < 4:
        raise BackendUnavailableError(
            f"PySpark {pyspark.__version__} has no state data sources (they exist from Spark 4.0); "
            "install pyspark>=4.0 — a 4.x session also reads checkpoints written by Spark 3.x"
        )
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and Path(java_home, "bin", "java").exists()):
        raise BackendUnavailableError(
            "no Java runtime found (Spark needs Java 17+): install one (Debian: apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )


class SparkBackend:
    """Reads a checkpoint through Spark's state data sources.

    Parameters
    ----------
    ckpt : Checkpoint
        The checkpoint opened by the native layer (its listing gives on-disk sizes and the commit log
        version; its state files are not decoded here).
    master : str, optional
        Spark master URL; default ``$STATELENS_SPARK_MASTER`` or ``local[*]``.
    conf : dict, optional
        Extra Spark confs (e.g. the user's Hadoop S3A settings, from :func:`parse_spark_defaults`).
    spark : SparkSession, optional
        Use this session instead of starting one (tests share one).
    remote : str, optional
        A Spark Connect endpoint (``sc://host:port``; default ``$STATELENS_SPARK_REMOTE``): the reads run
        there and no JVM starts here; ``master`` is then the server's business.

    Notes
    -----
    Thread-safe for one reading thread plus :meth:`cancel` and :meth:`close` from another (the GUI):
    ``cancel`` stops the read in flight, including one whose session is still starting or whose job is
    not submitted yet; ``close`` cancels, then stops the session if this backend started it (a session
    it was given, or found already running in the process, is left running).
    """

    name = "spark"
    capabilities = Capabilities(engine_queries=True, partition_reads=False)

    def __init__(
        self,
        ckpt: Checkpoint,
        master: str | None = None,
        conf: dict[str, str] | None = None,
        spark: Any = None,
        remote: str | None = None,
    ):
        self.ckpt = ckpt
        self.remote = remote or os.environ.get(REMOTE_ENV) or None
        self.master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
        self.conf = dict(conf or {})
        self._spark = spark
        self.start_seconds: float | None = None
        self._group = f"statelens-{uuid.uuid4().hex[:8]}"
        self._job_ids = itertools.count(1)
        self._lock = threading.Lock()  # held briefly, never while Spark starts or runs a job
        self._owned = False  # this backend started the session: close() stops it
        self._closed = False
        self._generation = 0  # bumped by cancel(): reads begun before it stop
        self._active_groups: set[str] = set()

    @functools.cached_property
    def engine(self) -> SparkEngine:
        """Where an analysis runs its own SQL over this checkpoint's frames (:mod:`readers.backends.spark_engine`)."""
        return SparkEngine(self, stream_converted, _unique_column)

    # -- session ---------------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The checkpoint location as Spark should see it (``s3://`` becomes ``s3a://``)."""
        url = self.ckpt.fs.url
        return "s3a://" + url[len("s3://") :] if url.startswith("s3://") else url

    def session(self) -> Any:
        """The SparkSession, started on first use.

        Raises
        ------
        BackendUnavailableError
            PySpark or Java is missing, or Spark cannot start.
        ReadCancelledError
            The backend was closed (also while Spark was starting: the new session is stopped again).
        """
        global _GATEWAY_LAUNCHED
        with self._lock:
            if self._closed:
                raise ReadCancelledError("the Spark backend is closed")
            if self._spark is not None:
                return self._spark
        if self.remote:
            return self._remote_session()
        check_spark_available()
        with _SESSION_LOCK:
            with self._lock:
                if self._spark is not None:
                    return self._spark
            from pyspark import SparkContext  # deferred: pyspark (heavy)
            from pyspark.sql import SparkSession  # deferred: pyspark (heavy)

            # getOrCreate hands out a session already running in this process (a notebook's, the tests'):
            # that one is not ours to stop.
            owned = SparkContext._active_spark_context is None
            gateway_before = SparkContext._gateway
            t = time.monotonic()
            builder = (
                SparkSession.builder.master(self.master)
                .appName("statelens")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.ui.showConsoleProgress", "false")
            )
            for k, v in self.conf.items():
                builder = builder.config(k, v)
            try:
                spark = builder.getOrCreate()
            except Exception as err:  # noqa: BLE001 - py4j/JVM start-up errors have no common type
                raise BackendUnavailableError(
                    f"Spark could not start on master {self.master}: {err}"
                ) from err
            if gateway_before is None and SparkContext._gateway is not None:
                _GATEWAY_LAUNCHED = True
            spark.sparkContext.setLogLevel("ERROR")  # our own errors say what failed
            with self._lock:
                closed = self._closed
                if not closed:
                    self._spark, self._owned = spark, owned
                    self.start_seconds = time.monotonic() - t
        if closed:  # close() came while Spark started: it could not stop what did not exist yet
            if owned:
                spark.stop()
                stop_gateway()  # nothing else will, if the app is closing
            raise ReadCancelledError("the Spark backend was closed while Spark was starting")
        return spark

    def _remote_session(self) -> Any:
        """A Spark Connect session to :attr:`remote` (no local JVM; PySpark's ``connect`` extra)."""
        try:
            from pyspark.sql import SparkSession  # deferred: pyspark (heavy)
            from pyspark.sql.connect.session import SparkSession as RemoteSession  # deferred: pyspark (heavy)
        except ImportError as err:
            raise BackendUnavailableError(
                f"Spark Connect needs PySpark's connect extra: pip install 'pyspark[connect]' ({err})"
            ) from err
        _check_reachable(str(self.remote))
        with _SESSION_LOCK:
            with self._lock:
                if self._spark is not None:
                    return self._spark
            owned = RemoteSession.getActiveSession() is None
            t = time.monotonic()
            builder = SparkSession.builder.remote(str(self.remote)).config(
                "spark.sql.session.timeZone", "UTC"
            )
            for k, v in self.conf.items():
                builder = builder.config(k, v)
            try:
                spark = builder.getOrCreate()
                spark.version  # noqa: B018 - a round trip: an unreachable server fails here, not mid-read
            except Exception as err:  # noqa: BLE001 - grpc errors have no common type
                raise BackendUnavailableError(
                    f"Spark Connect at {self.remote} is unreachable: {str(err).strip().splitlines()[0]}"
                ) from err
            with self._lock:
                closed = self._closed
                if not closed:
                    self._spark, self._owned = spark, owned
                    self.start_seconds = time.monotonic() - t
        if closed:
            if owned:
                spark.stop()
            raise ReadCancelledError("the Spark backend was closed while connecting")
        return spark

    def describe(self) -> str:
        """One line for the user: Spark version, master (or Connect endpoint), how long the session took."""
        import pyspark  # deferred: pyspark (heavy)

        started = f", started in {self.start_seconds:.1f} s" if self.start_seconds is not None else ""
        if self.remote:
            return f"Spark Connect at {self.remote} (PySpark {pyspark.__version__}){started}"
        return f"Spark {pyspark.__version__} on {self.master}{started}"

    def job_progress(self) -> Progress | None:
        """How far the Spark jobs of the reads in flight are, from Spark's status tracker (any thread):
        tasks completed of all their stages so far, or None when no job runs (or through Spark Connect,
        which has no tracker here)."""
        with self._lock:
            spark = self._spark
            groups = list(self._active_groups)
        if spark is None or not groups or _is_remote(spark):
            return None
        try:
            tracker = spark.sparkContext.statusTracker()
            done = total = stages = active = 0
            for group in groups:
                for job_id in tracker.getJobIdsForGroup(group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in job.stageIds if job is not None else ():
                        stage = tracker.getStageInfo(stage_id)
                        if stage is None:
                            continue
                        stages += 1
                        active += stage.numActiveTasks
                        done += stage.numCompletedTasks
                        total += stage.numTasks
        except Exception:  # noqa: BLE001 - the session is stopping under a cancel: no progress to show
            return None
        if total == 0:
            return None
        return Progress(
            done, total, f"Spark: {done:,} of {total:,} tasks done, {active} running ({stages} stages)"
        )

    def cancel(self) -> None:
        """Stop the reads in flight: their Spark jobs, and jobs they have not submitted yet (any thread)."""
        with self._lock:
            self._generation += 1
            spark = self._spark
            groups = list(self._active_groups)
        if spark is not None:
            for group in groups:
                _cancel_job_group(spark, group)

    def repartition_checkpoint(self, location: str, partitions: int) -> None:
        """Run Spark's own ``checkpointManager.repartition`` (Spark 4.2+, classic sessions) on ``location``,
        which it rewrites in place: it adds a batch whose state has ``partitions`` partitions. Only ever
        called on a copy (``statelens repartition``).

        Raises
        ------
        BackendUnavailableError
            Spark before 4.2, or a Spark Connect session.
        SparkReadError
            Spark refused or failed (its message is kept).
        """
        if self.remote:
            raise BackendUnavailableError(
                "Spark's checkpoint repartition runs on a classic session, not Spark Connect"
            )
        spark = self.session()
        manager = getattr(spark, "_streamingCheckpointManager", None)
        if manager is None:
            raise BackendUnavailableError(
                f"Spark {spark.version} has no checkpointManager.repartition (Spark 4.2 or later has)"
            )
        try:
            manager.repartition(location, partitions)
        except Exception as err:  # noqa: BLE001 - py4j errors carry Spark's message
            text = str(err).strip()
            found = next((line for line in text.splitlines() if "STATE_REPARTITION" in line), None)
            raise SparkReadError(
                "Spark's repartition failed: "
                + (found or text.splitlines()[0] if text else type(err).__name__)
            ) from err

    def close(self) -> None:
        """Cancel the reads in flight; stop the session if this backend started it (any thread)."""
        self.cancel()
        with self._lock:
            self._closed = True
            spark, self._spark = (self._spark, None) if self._owned else (None, self._spark)
            self._owned = False
        if spark is not None:
            spark.stop()

    def _check_cancelled(self, generation: int, what: str) -> None:
        if self._generation != generation or self._closed:
            raise ReadCancelledError(f"cancelled: {what}")

    @contextlib.contextmanager
    def _job(self, what: str, since: int | None = None) -> Iterator[Any]:
        """Run Spark work for ``what`` in its own job group, cancellable by :meth:`cancel`.

        ``since``: the :attr:`_generation` the read began at, for reads made of several jobs.
        """
        with self._lock:
            generation = self._generation if since is None else since
            group = f"{self._group}-{next(self._job_ids)}"
            self._active_groups.add(group)
        try:
            spark = self.session()
            self._check_cancelled(generation, what)
            if _is_remote(spark):
                spark.addTag(group)  # Spark Connect: operations of this thread carry the tag
            else:
                spark.sparkContext.setJobGroup(group, f"statelens: {what}", interruptOnCancel=True)
            # Checkpoint format v2 (unique-id file names) is not recorded in the offsets conf: the reading
            # session must be told (docs/format.md §10.4). The session may be shared (tests, a user's own), so the
            # previous value is put back afterwards: a leftover "2" breaks HDFS-backed queries and reads.
            key = "spark.sql.streaming.stateStore.checkpointFormatVersion"
            before = spark.conf.get(key, None)
            if any(c.format_version >= 2 for c in self.ckpt.commits.values()):
                spark.conf.set(key, "2")
            else:
                spark.conf.unset(key)
            try:
                self._check_cancelled(generation, what)  # a cancel before the group was set
                yield spark
            except StatelensError:
                raise
            except Exception as err:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ...
                if self._generation != generation or self._closed:
                    raise ReadCancelledError(f"cancelled: {what}") from err
                raise _spark_error(err, what) from err
            finally:
                try:
                    if before is None:
                        spark.conf.unset(key)
                    else:
                        spark.conf.set(key, before)
                except Exception:  # noqa: BLE001 - the session was stopped under a cancelled read
                    if not self._closed:
                        raise
        finally:
            with self._lock:
                self._active_groups.discard(group)
                spark = self._spark
            if spark is not None and _is_remote(spark):
                with contextlib.suppress(Exception):
                    spark.removeTag(group)

    # -- reads -----------------------------------------------------------------------------------------
    def _reader(self, spark: Any, operator_id: int, store_name: str | None) -> Any:
        r = spark.read.format("statestore").option("operatorId", str(operator_id))
        if self._is_state_variable(operator_id, store_name):
            r = r.option("stateVarName", store_name)
        elif store_name and store_name != "default":
            r = r.option("storeName", store_name)
        return r

    def _state_frame(
        self,
        spark: Any,
        operator_id: int,
        store_name: str | None,
        batch_id: int,
        partition_id: int | None = None,
    ) -> Any:
        """The ``statestore`` DataFrame of one store after batch ``batch_id`` (of one partition, or all)."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        df = self._reader(spark, operator_id, store_name).option("batchId", str(batch_id)).load(self.path)
        return df if partition_id is None else df.where(F.col("partition_id") == partition_id)

    def _change_feed(
        self,
        spark: Any,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None,
    ) -> Any:
        """The change feed of versions ``start_version .. end_version`` of one store (or state variable):
        Spark's ``readChangeFeed`` where the store records its changes, else derived from Spark's reads of
        consecutive versions (:meth:`_derived_change_feed`), with the same columns."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        if not self.records_changes(operator_id, store_name):
            return self._derived_change_feed(
                spark, operator_id, store_name, start_version, end_version, partition_id
            )
        df = (
            self._reader(spark, operator_id, store_name)
            .option("readChangeFeed", "true")
            .option("changeStartBatchId", str(max(start_version - 1, 0)))
            .option("changeEndBatchId", str(end_version - 1))
            .load(self.path)
        )
        return df if partition_id is None else df.where(F.col("partition_id") == partition_id)

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
        """Spark's own DataFrame of one store: its rows at ``version`` (default the latest committed) or,
        with ``changes``, its change feed of versions ``start_version .. end_version`` (recorded or
        derived, as :meth:`read_changes`). Lazy: nothing is read until an action runs, where Spark runs."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        spark = self.session()
        last = self.latest_version(operator_id, store_name)
        if changes:
            end = end_version if end_version is not None else last
            self._check_version(end)
            df = self._change_feed(spark, operator_id, store_name, start_version or 1, end, None)
        else:
            v = version if version is not None else last
            self._check_version(v)
            df = self._state_frame(spark, operator_id, store_name, v - 1)
        return df if partitions is None else df.where(F.col("partition_id").isin(list(partitions)))

    def records_changes(self, operator_id: int, store_name: str | None) -> bool:
        """True when the store records each version's changes (HDFS deltas, RocksDB changelogs), so
        Spark's change feed reads them; False for RocksDB stores written without changelog checkpointing
        (every Spark 3.4 RocksDB store), whose changes are derived (from the checkpoint's listing)."""
        if self._is_state_variable(operator_id, store_name):
            return True
        op = self.ckpt.operator(operator_id)
        store = op.stores[0] if store_name is None else op.store(store_name)
        if store.provider != "rocksdb":
            return True
        files = self.ckpt.store_reader(operator_id, store.store_name)
        return any(files.delta_versions(p) for p in files.partition_ids())

    def _derived_change_feed(
        self,
        spark: Any,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None,
    ) -> Any:
        """The changes of each version ``start_version .. end_version`` as the difference of Spark's reads
        of the version before and that version (``docs/format.md`` §5): a ``delete`` for every key gone,
        an ``update`` for every key added or whose value changed, in ``readChangeFeed``'s columns. Keys
        and values are compared as JSON text (struct equality does not hold for maps)."""

        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        def state(v: int) -> Any:
            df = self._state_frame(spark, operator_id, store_name, v - 1, partition_id)
            return df.select(
                "partition_id", "key", "value", F.to_json("key").alias("_k"), F.to_json("value").alias("_v")
            )

        parts = []
        first = max(start_version, 1)
        old = state(first - 1) if first > 1 else None
        for v in range(first, end_version + 1):
            new = state(v)
            old = new.limit(0) if old is None else old
            batch = F.lit(v - 1).cast("long").alias("batch_id")
            puts = (
                new.join(
                    old.select("partition_id", "_k", F.col("_v").alias("_o")), ["partition_id", "_k"], "left"
                )
                .where(F.col("_o").isNull() | (F.col("_o") != F.col("_v")))
                .select(batch, F.lit("update").alias("change_type"), "key", "value", "partition_id")
            )
            removes = old.join(new.select("partition_id", "_k"), ["partition_id", "_k"], "left_anti").select(
                batch, F.lit("delete").alias("change_type"), "key", F.lit(None).alias("value"), "partition_id"
            )
            removes = removes.withColumn("value", F.col("value").cast(new.schema["value"].dataType))
            parts += [removes, puts]
            old = new  # version v's read is the next version's "before", one frame for both
        if not parts:
            raise UsageError(f"no versions between {start_version} and {end_version}")
        return reduce(lambda a, b: a.unionByName(b), parts)

    def _history_frame(
        self,
        spark: Any,
        operator_id: int,
        store_name: str | None,
        first: int,
        last: int,
        payload: Callable[[Any], list[Any]] | None = None,
    ) -> Any:
        """``p, v, c, key, <payload>, o``: one store's rows at version ``first`` (``c`` null), then its
        change feed up to ``last`` (``c`` the feed's ``change_type``); ``o`` orders the records of a
        version. ``payload(frame)`` gives the columns after ``key`` (default: ``value``)."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        def shaped(df: Any, v: Any, c: Any) -> Any:
            rest = payload(df) if payload is not None else [F.col("value")]
            return df.select(
                F.col("partition_id").cast("int").alias("p"), v.alias("v"), c.alias("c"), "key", *rest
            )

        state = self._state_frame(spark, operator_id, store_name, first - 1)
        frame = shaped(state, F.lit(first).cast("long"), F.lit(None).cast("string"))
        if last > first:
            feed = self._change_feed(spark, operator_id, store_name, first + 1, last, None)
            frame = frame.unionByName(
                shaped(feed, (F.col("batch_id") + 1).cast("long"), F.col("change_type"))
            )
        return frame.withColumn("o", F.monotonically_increasing_id())

    def _count_per_version(self, operator_id: int, store_name: str | None) -> bool:
        """Stores whose change feed is not keyed by row: transformWithState variables (list elements, map
        entries under one grouping key) and join format 4 (list values). Their rows are counted per version."""
        if store_name is None:
            return False
        if self._is_state_variable(operator_id, store_name):
            return True
        schema = self.ckpt.operator(operator_id).store(store_name).schema
        encoder = str((schema.key_encoder or {}).get("keyStateEncoderType", "")) if schema else ""
        return encoder.startswith("TimestampAs")

    def _is_state_variable(self, operator_id: int, store_name: str | None) -> bool:
        """A transformWithState column family shown as a store (read by ``stateVarName``, not ``storeName``)."""

        return (
            store_name is not None
            and self.ckpt.operator(operator_id).kind == OperatorKind.TRANSFORM_WITH_STATE
            and store_name != "default"
        )

    def _check_version(self, version: int) -> None:
        batch = version - 1
        if batch not in self.ckpt.commits:
            raise UsageError(
                f"Spark reads only committed versions; version {version} (batch {batch}) has no commit — "
                "the native backend can still show it"
            )

    def arrow_entry(
        self,
        operator_id: int,
        store_name: str | None,
        version: int,
        partition_id: int,
        cache: Any,
        *,
        unique_names: bool = False,
    ) -> tuple[Path | None, pa.Table]:
        """:meth:`read_arrow`, and no cache file: Spark's answers are not cached (``(None, table)``)."""
        return None, self.read_arrow(
            operator_id, store_name, version, partition_id, unique_names=unique_names
        )

    def can_read(self, operator_id: int, store_name: str | None = None) -> bool:
        """True when Spark can be asked (always, given PySpark 4 and Java, or a Connect endpoint); errors
        come at read time."""
        if self.remote:
            return True
        try:
            check_spark_available()
        except BackendUnavailableError:
            return False
        return True

    def partition_ids(self, operator_id: int, store_name: str | None = None) -> list[int]:
        op = self.ckpt.operator(operator_id)
        return list(op.stores[0].partitions if store_name is None else op.store(store_name).partitions)

    def latest_version(
        self, operator_id: int, store_name: str | None = None, partition_id: int | None = None
    ) -> int:
        """Newest version Spark can read: the last committed batch + 1."""
        last = self.ckpt.last_committed_batch_id
        return 0 if last is None else last + 1

    def read_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> list[StateRow]:
        """Rows of one store at ``version`` (``batchId = version - 1``), all partitions or one."""
        if self._is_state_variable(operator_id, store_name):
            # transformWithState families are read by stateVarName; map state's key is (key, user key).
            entries = self.read_state_variable(operator_id, str(store_name), version, partition_id)
            return [StateRow(p, k if u is None else (k, u), v) for p, k, v, u in entries]
        self._check_version(version)
        with self._job(f"rows of operator {operator_id} version {version}") as spark:
            df = self._state_frame(spark, operator_id, store_name, version - 1, partition_id)
            rows = collect_converted(df, ["partition_id", "key", "value"])
        return [StateRow(int(p), k, v) for p, k, v in rows]

    def iter_rows(
        self, operator_id: int, store_name: str | None, version: int, partition_id: int | None = None
    ) -> Iterator[StateRow]:
        """:meth:`read_rows`, streamed from one job a Spark partition at a time (classic sessions), so this
        process holds a batch of rows, not the store."""
        if self._is_state_variable(operator_id, store_name):
            yield from sorted(
                self.read_rows(operator_id, store_name, version, partition_id), key=lambda r: r.partition_id
            )
            return
        self._check_version(version)
        with self._job(f"rows of operator {operator_id} version {version}") as spark:
            df = self._state_frame(spark, operator_id, store_name, version - 1, partition_id)
            for p, k, v in stream_converted(df.orderBy("partition_id"), ["partition_id", "key", "value"]):
                yield StateRow(int(p), k, v)

    def iter_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> Iterator[StateChange]:
        """:meth:`read_changes`, streamed from one job (classic sessions)."""
        if self._is_state_variable(operator_id, store_name):
            yield from self.read_changes(operator_id, store_name, start_version, end_version, partition_id)
            return
        self._check_version(end_version)
        with self._job(f"changes of operator {operator_id}") as spark:
            df = self._change_feed(spark, operator_id, store_name, start_version, end_version, partition_id)
            cols = ["batch_id", "change_type", "partition_id", "key", "value"]
            derived = not self.records_changes(operator_id, store_name)
            for b, t, p, k, v in stream_converted(df, cols):
                yield StateChange(
                    int(b) + 1, int(p), _CHANGE_KINDS.get(t, "put"), k, v if t != "delete" else None, derived
                )

    def read_arrow(
        self,
        operator_id: int,
        store_name: str | None,
        version: int,
        partition_id: int,
        *,
        unique_names: bool = False,
        cache: Any = None,
        raw: bool = False,
    ) -> pa.Table:
        """One partition of one store at ``version`` as Arrow (see ``NativeBackend.read_arrow``; Spark's
        answers are not cached: ``cache`` is accepted for the common signature and unused).

        Raises
        ------
        BackendUnavailableError
            ``raw``: Spark answers with decoded rows, not the stored bytes.
        """

        if raw:
            raise FilesUnavailableError(
                "the stored key and value bytes are read by the native backend only (--backend native)"
            )

        store = self._typed_store(operator_id, store_name)
        rows = [
            (r.partition_id, r.key, r.value)
            for r in self.read_rows(operator_id, store_name, version, partition_id)
        ]
        return rows_to_arrow(
            rows, state_row_schema(store.key_schema, store.value_schema), unique_names=unique_names
        )

    def _typed_store(self, operator_id: int, store_name: str | None) -> Any:
        """The store's description, which must have its key and value schemas (for Arrow types)."""
        op = self.ckpt.operator(operator_id)
        store = op.stores[0] if store_name is None else op.store(store_name)
        if store.key_schema is None or store.value_schema is None:
            raise SchemaMismatchError(
                "this store has no readable schema file, so its rows cannot be typed",
                path=f"state/{operator_id}/0/_metadata/schema",
                operator_id=operator_id,
                store_name=store.store_name,
            )
        return store

    def read_changes_arrow(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int,
        *,
        unique_names: bool = False,
    ) -> list[pa.Table]:
        """The change feed as Arrow (see ``NativeBackend.read_changes_arrow``), one table in all."""

        store = self._typed_store(operator_id, store_name)
        rows = [
            (c.version, c.partition_id, c.change, c.key, c.value, c.derived)
            for c in self.read_changes(operator_id, store_name, start_version, end_version, partition_id)
        ]
        schema = state_row_schema(store.key_schema, store.value_schema, changes=True)
        return [rows_to_arrow(rows, schema, unique_names=unique_names)]

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
        """Write one store's rows (or its change feed) as Parquet with Spark, where Spark runs: nothing is
        collected to this process, whatever the store's size.

        The columns are those of ``rows --format parquet`` on the native backend (``partition, key,
        value``; with ``changes``: ``version, partition, change, key, value``), repeated field names made
        unique the same way, calendar intervals as ``struct<months, days, microseconds>``, timestamps as
        microseconds. ``url`` is a folder of part files Spark creates (a local path, ``s3a://``, ``hdfs://``:
        on a cluster it must be a path every executor can write); it must not exist yet.

        Parameters
        ----------
        version : int, optional
            State version (default: the last committed batch + 1); with ``changes``, the changes of
            that version only (default: of every version).
        changes : bool
            The change feed instead of the rows at one version.
        partition_id : int, optional
            One partition only.

        Returns
        -------
        int
            Rows written (counted from the written files' footers).
        """
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        store = self._typed_store(operator_id, store_name)
        if self._is_state_variable(operator_id, store_name):
            raise UsageError(
                "writing with Spark reads stores, not transformWithState variables; use --backend native"
            )
        target = self._output_url(url)
        last = self.latest_version(operator_id, store_name)
        if changes:
            start, end = (version, version) if version is not None else (1, last)
            self._check_version(end)
            what = f"writing the changes of operator {operator_id} to {target}"
        else:
            version = version if version is not None else last
            self._check_version(version)
            batch = version - 1
            what = f"writing operator {operator_id} version {version} to {target}"
        with self._job(what) as spark:
            if changes:
                df = self._change_feed(spark, operator_id, store_name, start, end, partition_id)
                kind = F.col("change_type")
                cols = [
                    (F.col("batch_id") + 1).cast("long").alias("version"),
                    F.col("partition_id").cast("int").alias("partition"),
                    _change_kind(kind).alias("change"),
                    _unique_column("key", store.key_schema),
                    F.when(kind == "delete", F.lit(None))
                    .otherwise(_prepare(F.col("value"), store.value_schema))
                    .cast(unique_struct(store.value_schema))
                    .alias("value"),
                    F.lit(not self.records_changes(operator_id, store_name)).alias("derived"),
                ]
            else:
                df = self._state_frame(spark, operator_id, store_name, batch, partition_id)
                cols = [
                    F.col("partition_id").cast("int").alias("partition"),
                    _unique_column("key", store.key_schema),
                    _unique_column("value", store.value_schema),
                ]
            with _micros_timestamps(spark):
                df.select(*cols).write.mode("error").parquet(target)
            return int(spark.read.parquet(target).count())

    def sql_answer(
        self,
        query: str,
        views: list[str],
        tables: dict[str, Any],
        store: tuple[int, str] | None,
        version: int | None,
        *,
        max_rows: int,
        output_url: str | None = None,
    ) -> tuple[list[str], Any, int]:
        """Run a Spark SQL ``query`` where Spark runs, over temporary views named ``views``:

        * ``state``: ``store``'s rows at ``version`` (default: the last committed batch + 1):
          ``operator_id, store_name, version, partition_id, key, value``;
        * ``changes``: its change feed over every committed version: ``version, partition_id, change,
          key, value`` (``change`` ``put``/``remove``/``append``, value null for a remove);
        * any other view: the Arrow table ``tables[name]`` sent from this process (small: the timeline,
          growth counts, expired findings).

        Repeated struct field names are made unique (``sum, sum_2``) and calendar intervals become
        ``struct<months, days, microseconds>``, as in :meth:`write_parquet` and the DuckDB tables.
        transformWithState variables keep the columns Spark's reader gives them (``list_element``,
        ``user_map_key``...).

        Returns ``(columns, answer, rows)``: the answer as a pyarrow Table of at most ``max_rows`` rows,
        or None when ``output_url`` was given (Spark wrote it there as Parquet; ``rows`` written).

        Raises
        ------
        UsageError
            Spark refuses the query (the message is Spark's), the answer has more than ``max_rows`` rows,
            or ``output_url`` is inside the checkpoint.
        StatelensError
            Spark cannot read the store.
        """
        target = self._output_url(output_url) if output_url is not None else None
        if version is not None:
            self._check_version(version)
        with self._job("SQL query") as spark:
            made: list[str] = []
            try:
                for name in views:
                    if name in ("state", "changes"):
                        assert store is not None
                        frame = self._sql_store_view(spark, store[0], store[1], version, name == "changes")
                    else:
                        frame = spark.createDataFrame(tables[name])
                    frame.createOrReplaceTempView(name)
                    made.append(name)
                try:
                    answer = spark.sql(query)
                    columns = list(answer.columns)
                    if target is not None:
                        with _micros_timestamps(spark):
                            answer.write.mode("error").parquet(target)
                        return columns, None, int(spark.read.parquet(target).count())
                    table = answer.limit(max_rows + 1).toArrow()
                except Exception as err:  # noqa: BLE001 - AnalysisException, ParseException...
                    if _is_query_error(err):
                        raise UsageError(f"the query failed: {_first_line(err)}") from err
                    raise
                if table.num_rows > max_rows:
                    raise UsageError(
                        f"the answer has more than {max_rows:,} rows: aggregate it, or write it where Spark "
                        "runs with --parquet -o URL"
                    )
                return columns, table, table.num_rows
            finally:
                for name in made:
                    with contextlib.suppress(Exception):
                        spark.catalog.dropTempView(name)

    def _sql_store_view(
        self, spark: Any, operator_id: int, store_name: str, version: int | None, changes: bool
    ) -> Any:
        """The ``state`` (or ``changes``) view of :meth:`sql_answer`."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        head = [
            F.lit(operator_id).cast("int").alias("operator_id"),
            F.lit(store_name).alias("store_name"),
        ]
        last = self.latest_version(operator_id, store_name)
        if changes:
            self._check_version(last)
            df = self._change_feed(spark, operator_id, store_name, 1, last, None)
            kind = F.col("change_type")
            head += [
                (F.col("batch_id") + 1).cast("long").alias("version"),
                F.col("partition_id").cast("int").alias("partition_id"),
                _change_kind(kind).alias("change"),
            ]
            skip = {"batch_id", "change_type", "partition_id"}
        else:
            v = version if version is not None else last
            self._check_version(v)
            df = self._state_frame(spark, operator_id, store_name, v - 1)
            head += [
                F.lit(v).cast("long").alias("version"),
                F.col("partition_id").cast("int").alias("partition_id"),
            ]
            skip = {"partition_id"}
        types = {f.name: f.dataType for f in df.schema.fields}
        rest = [_unique_column(c, types[c], arrow=True) for c in df.columns if c not in skip]
        if changes:  # as the native changes table: recorded, or derived from the version before
            rest.append(F.lit(not self.records_changes(operator_id, store_name)).alias("derived"))
        return df.select(*head, *rest)

    def _output_url(self, url: str) -> str:
        """``url`` as Spark should write it (absolute; ``s3://`` as ``s3a://``), refused inside the checkpoint."""
        if "://" not in url:
            url = os.path.abspath(url)
            root = self.ckpt.fs.url
            if "://" not in root and os.path.commonpath([url, os.path.abspath(root)]) == os.path.abspath(
                root
            ):
                raise UsageError(f"{url} is inside the checkpoint {root}: statelens never writes there")
            return url
        target = "s3a://" + url[len("s3://") :] if url.startswith("s3://") else url
        if target.rstrip("/").startswith(self.path.rstrip("/") + "/") or target.rstrip(
            "/"
        ) == self.path.rstrip("/"):
            raise UsageError(
                f"{url} is inside the checkpoint {self.ckpt.fs.url}: statelens never writes there"
            )
        return target

    def read_changes(
        self,
        operator_id: int,
        store_name: str | None,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[StateChange]:
        """Put/remove records of versions ``start_version .. end_version`` from Spark's change feed."""

        if self._is_state_variable(operator_id, store_name):
            changes = self.read_state_variable_changes(
                operator_id, str(store_name), start_version, end_version, partition_id
            )
            return [StateChange(v, p, c, k if u is None else (k, u), val) for v, p, c, k, val, u in changes]

        self._check_version(end_version)
        with self._job(f"changes of operator {operator_id}") as spark:
            df = self._change_feed(spark, operator_id, store_name, start_version, end_version, partition_id)
            rows = collect_converted(df, ["batch_id", "change_type", "partition_id", "key", "value"])
        derived = not self.records_changes(operator_id, store_name)
        return [
            StateChange(
                int(b) + 1, int(p), _CHANGE_KINDS.get(t, "put"), k, v if t != "delete" else None, derived
            )
            for b, t, p, k, v in rows
        ]

    def iter_stats(
        self,
        operator_id: int,
        store_name: str | None = None,
        on_error: Callable[[StatelensError], None] | None = None,
    ) -> Iterator[PartitionVersionStats]:
        """Rows per partition per committed version, from the change feed in one Spark job.

        Falls back to one ``statestore`` read per committed version when the change feed cannot start
        at batch 0 (early deltas already cleaned up), and says so through ``self.notes``. On-disk bytes
        come from the checkpoint listing (nothing is decoded natively).
        """
        store = store_name or "default"
        if self._count_per_version(operator_id, store_name):
            # The change feed's keys are not the rows here (list elements, map entries): count instead.
            self.notes = ["rows counted by one statestore read per version (list or map valued store)"]
            counts = self._stats_per_version(operator_id, store_name)
        else:
            try:
                counts = self._stats_from_change_feed(operator_id, store_name)
                self.notes = ["growth computed from Spark's change feed in one job"]
            except StatelensError as err:
                self.notes = [
                    f"change feed unavailable ({err.message}); one statestore read per version instead"
                ]
                counts = self._stats_per_version(operator_id, store_name)
        sizes = self._sizes(operator_id, self.ckpt.physical_store(operator_id, store))
        for (pid, version), rows in sorted(counts.items()):
            yield PartitionVersionStats(operator_id, store, version, pid, rows, sizes.get((pid, version), 0))

    def _sizes(self, operator_id: int, store: str) -> dict[tuple[int, int], int]:
        parts = self.ckpt._store_files.get((operator_id, store), {})
        out: dict[tuple[int, int], int] = {}
        for pid, pf in parts.items():
            for v, f in [*pf.deltas.items(), *pf.snapshots.items()]:
                out[(pid, v)] = out.get((pid, v), 0) + f.size_bytes
        return out

    def _stats_from_change_feed(self, operator_id: int, store_name: str | None) -> dict[tuple[int, int], int]:
        from pyspark.sql import Window  # deferred: pyspark (heavy)
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        committed = sorted(self.ckpt.commits)
        if not committed:
            return {}
        with self._job(f"growth of operator {operator_id}") as spark:
            cf = (
                self._reader(spark, operator_id, store_name)
                .option("readChangeFeed", "true")
                .option("changeStartBatchId", "0")
                .option("changeEndBatchId", str(committed[-1]))
                .load(self.path)
                .select("batch_id", "change_type", "partition_id", "key")
                # Rows of one partition come in file order from one task: the id orders records in a delta.
                .withColumn("seq", F.monotonically_increasing_id())
            )
            last = Window.partitionBy("partition_id", "key", "batch_id").orderBy(F.desc("seq"))
            by_key = Window.partitionBy("partition_id", "key").orderBy("batch_id")
            alive = (
                cf.withColumn("rn", F.row_number().over(last))
                .where("rn = 1")
                .withColumn("alive", F.col("change_type") != "delete")
                .withColumn("was", F.lag("alive", 1, False).over(by_key))
            )
            delta = (
                F.when(F.col("alive") & ~F.col("was"), 1)
                .when(~F.col("alive") & F.col("was"), -1)
                .otherwise(0)
            )
            rows = alive.groupBy("partition_id", "batch_id").agg(F.sum(delta).alias("d")).collect()
        moves: dict[tuple[int, int], int] = {(r["partition_id"], r["batch_id"]): int(r["d"]) for r in rows}
        out: dict[tuple[int, int], int] = {}
        for pid in self.partition_ids(operator_id, store_name):
            live = 0
            for b in committed:
                live += moves.get((pid, b), 0)
                out[(pid, b + 1)] = live
        return out

    def _stats_per_version(self, operator_id: int, store_name: str | None) -> dict[tuple[int, int], int]:
        out: dict[tuple[int, int], int] = {}
        pids = self.partition_ids(operator_id, store_name)
        since = self._generation
        for b in sorted(self.ckpt.commits):
            with self._job(f"row counts of operator {operator_id} batch {b}", since) as spark:
                rows = (
                    self._state_frame(spark, operator_id, store_name, b)
                    .groupBy("partition_id")
                    .count()
                    .collect()
                )
            counts = {r["partition_id"]: r["count"] for r in rows}
            for pid in pids:
                out[(pid, b + 1)] = int(counts.get(pid, 0))
        return out

    def row_counts(self, operator_id: int, store_name: str | None, version: int) -> dict[int, int]:
        """Rows per partition of one store at ``version``, counted by Spark (only the counts are collected)."""
        self._check_version(version)
        with self._job(f"row counts of operator {operator_id} version {version}") as spark:
            rows = (
                self._state_frame(spark, operator_id, store_name, version - 1)
                .groupBy("partition_id")
                .count()
                .collect()
            )
        return {int(r["partition_id"]): int(r["count"]) for r in rows}

    def read_state_variable(
        self, operator_id: int, name: str, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, Any, Any]]:
        """Entries of one transformWithState variable (``stateVarName``): ``(partition, key, value, user_key)``.

        List state comes back one row per element (``list_element``), map state one row per entry
        (``user_map_key``, ``user_map_value``), as Spark's reader flattens them by default.
        """
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        self._check_version(version)
        with self._job(f"state variable {name} of operator {operator_id} version {version}") as spark:
            df = (
                spark.read.format("statestore")
                .option("operatorId", str(operator_id))
                .option("stateVarName", name)
                .option("batchId", str(version - 1))
                .load(self.path)
            )
            if partition_id is not None:
                df = df.where(F.col("partition_id") == partition_id)
            rows = _collect_variable(df, ["partition_id", "key"])
        return [(int(p), k, v, u) for p, k, v, u in rows]

    def read_state_variable_changes(
        self,
        operator_id: int,
        name: str,
        start_version: int,
        end_version: int,
        partition_id: int | None = None,
    ) -> list[tuple[int, int, str, Any, Any, Any]]:
        """Change feed of one transformWithState variable: ``(version, partition, change, key, value, user_key)``."""

        self._check_version(end_version)
        with self._job(f"changes of state variable {name} of operator {operator_id}") as spark:
            df = self._change_feed(spark, operator_id, name, start_version, end_version, partition_id)
            rows = _collect_variable(df, ["batch_id", "change_type", "partition_id", "key"])
        return [
            (int(b) + 1, int(p), _CHANGE_KINDS.get(t, "put"), k, None if t == "delete" else v, u)
            for b, t, p, k, v, u in rows
        ]

    def read_timers(
        self, operator_id: int, version: int, partition_id: int | None = None
    ) -> list[tuple[int, Any, int]]:
        """Registered timers of a transformWithState operator: ``(partition, grouping key, expiry ms)``."""
        from pyspark.sql import functions as F  # deferred: pyspark (heavy)

        self._check_version(version)
        with self._job(f"timers of operator {operator_id} version {version}") as spark:
            df = self._timers_frame(spark, operator_id, version - 1)
            if partition_id is not None:
                df = df.where(F.col("partition_id") == partition_id)
            rows = collect_converted(df, ["partition_id", "key", "expiration_timestamp_ms"])
        return [(int(p), k, int(t)) for p, k, t in rows]

    def _timers_frame(self, spark: Any, operator_id: int, batch_id: int) -> Any:
        """Spark's ``readRegisteredTimers`` read after batch ``batch_id``: ``key, expiration_timestamp_ms,
        partition_id``."""
        return (
            spark.read.format("statestore")
            .option("operatorId", str(operator_id))
            .option("readRegisteredTimers", "true")
            .option("batchId", str(batch_id))
            .load(self.path)
        )

    def state_metadata(self) -> list[dict[str, Any]]:
        """Rows of Spark's ``state-metadata`` source, including the hidden ``_numColsPrefixKey``."""
        with self._job("state metadata") as spark:
            df = spark.read.format("state-metadata").load(self.path)
            return [r.asDict() for r in df.select(*df.columns, "_numColsPrefixKey").collect()]


def _collect_variable(df: Any, head: list[str]) -> list[tuple[Any, ...]]:
    """Rows of a ``stateVarName`` read as ``(*head, value, user_key)``: list state's ``list_element`` and
    map state's ``user_map_value`` are the value, ``user_map_key`` the user key (``None`` otherwise)."""
    cols = set(df.columns)
    if "user_map_key" in cols:
        return collect_converted(df, [*head, "user_map_value", "user_map_key"])
    value = "list_element" if "list_element" in cols else "value"
    return [(*r, None) for r in collect_converted(df, [*head, value])]


#: Spark's change feed ``change_type`` -> statelens' change kind.
_CHANGE_KINDS = {"update": "put", "delete": "remove", "append": "append"}


#: Seconds to wait for a Spark Connect endpoint to accept a connection before calling it unreachable.
CONNECT_TIMEOUT_S = 10.0


def _check_reachable(url: str) -> None:
    """Fail fast when nothing accepts connections at a Spark Connect URL (``sc://host[:port][/;params]``):
    PySpark's client would retry for minutes before saying so."""

    parsed = urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise UsageError(f"not a Spark Connect URL: {url!r} (expected sc://host:port)")
    port = parsed.port or 15002
    try:
        with socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise BackendUnavailableError(
            f"Spark Connect at {url} is unreachable: {err.strerror or err} ({parsed.hostname}:{port})"
        ) from err


def _is_remote(spark: Any) -> bool:
    """True for a Spark Connect session (no SparkContext here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _cancel_job_group(spark: Any, group: str) -> None:
    """Cancel a job group's running jobs and the ones it submits later (a cancel may come first)."""
    if _is_remote(spark):
        with contextlib.suppress(Exception):
            spark.interruptTag(group)
        return
    sc = spark.sparkContext
    try:
        sc._jsc.sc().cancelJobGroupAndFutureJobs(group)  # Spark 4.0+
    except Exception:  # noqa: BLE001 - older Spark, or the context is stopping: running jobs only
        with contextlib.suppress(Exception):
            sc.cancelJobGroup(group)


def stop_gateway(timeout_s: float = 10.0) -> bool:
    """Shut PySpark's JVM gateway down if a :class:`SparkBackend` launched it and no session is left.

    For the desktop app's exit: stopping a session leaves the gateway (the JVM process and py4j's
    threads) running for the next session of the process. A gateway launched by someone else (a
    notebook, the tests) is left alone.

    Returns
    -------
    bool
        True when a gateway was shut down.
    """
    global _GATEWAY_LAUNCHED
    if not _GATEWAY_LAUNCHED or not _SESSION_LOCK.acquire(timeout=timeout_s):
        return False
    try:
        from pyspark import SparkContext  # deferred: pyspark (heavy)

        if SparkContext._active_spark_context is not None or SparkContext._gateway is None:
            return False
        gateway = SparkContext._gateway
        SparkContext._gateway = None  # the next session launches a new one
        SparkContext._jvm = None
        _GATEWAY_LAUNCHED = False
    finally:
        _SESSION_LOCK.release()
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        # PySpark's JVM exits when its standard input closes (java_gateway.launch_gateway).
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout_s)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: do not leave it behind
            proc.kill()
    return True


def _unique_column(name: str, dt: Any, arrow: bool = False) -> Any:
    """Column ``name`` of type ``dt`` as the outputs show it: :func:`_prepare`'d, then cast to
    :func:`unique_struct` (repeated field names made unique), under its own name."""
    from pyspark.sql import functions as F  # deferred: pyspark (heavy)

    return _prepare(F.col(name), dt, arrow).cast(unique_struct(dt, arrow)).alias(name)


def _change_kind(change_type: Any) -> Any:
    """Spark's ``change_type`` column as statelens' change kinds (:data:`_CHANGE_KINDS`)."""
    from pyspark.sql import functions as F  # deferred: pyspark (heavy)

    return (
        F.when(change_type == "update", "put").when(change_type == "delete", "remove").otherwise(change_type)
    )


@contextlib.contextmanager
def _micros_timestamps(spark: Any) -> Iterator[None]:
    """Parquet written meanwhile stores timestamps as microseconds, not INT96 (every reader reads these)."""
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        spark.conf.set(key, before) if before is not None else spark.conf.unset(key)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _is_query_error(err: Exception) -> bool:
    """Whether Spark refused a query as written (parse or analysis error), not failed to run it."""
    try:
        from pyspark.errors import AnalysisException, ParseException  # deferred: pyspark (heavy)
    except ImportError:  # pragma: no cover - PySpark without pyspark.errors
        return False
    return isinstance(err, (AnalysisException, ParseException))


def _spark_error(err: Exception, what: str) -> StatelensError:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return SparkReadError(f"Spark could not read the {what}: {text}")


# -- exact conversion of Spark values ----------------------------------------------------------------------
def stream_converted(df: Any, columns: list[str]) -> Iterator[tuple[Any, ...]]:
    """``columns`` of ``df`` as :func:`collect_converted` gives them, but streamed: a Spark partition at a
    time (``toLocalIterator``) on a classic session, the server's Arrow batches through Spark Connect."""
    if _is_remote(df.sparkSession):
        schema = df.select(*columns).schema
        prepared = df.select(*[_prepare(df[c], schema[c].dataType, arrow=True).alias(c) for c in columns])
        for table in _remote_arrow_tables(prepared):
            yield from _converted_rows(table, prepared.schema, schema)
        return
    schema = df.select(*columns).schema
    prepared = df.select(*[_prepare(df[c], schema[c].dataType).alias(c) for c in columns])
    types = [f.dataType for f in schema.fields]
    with _raw_rows():
        rows = prepared.toLocalIterator()
        try:
            for row in rows:
                yield tuple(convert(v, t) for v, t in zip(row, types, strict=True))
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()


def collect_converted(df: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    """Collect ``columns`` of ``df`` as tuples in statelens' value representation (exact, schema-directed)."""
    schema = df.select(*columns).schema
    remote = _is_remote(df.sparkSession)
    prepared = df.select(*[_prepare(df[c], schema[c].dataType, arrow=remote).alias(c) for c in columns])
    if remote:
        return _collect_arrow(prepared, schema)
    return [
        tuple(convert(v, f.dataType) for v, f in zip(row, schema.fields, strict=True))
        for row in _collect_internal(prepared)
    ]


_RAW_LOCK = threading.RLock()  # held while a streamed read is consumed (same thread may collect meanwhile)


@contextlib.contextmanager
def _raw_rows() -> Iterator[None]:
    # PySpark rebuilds each collected row by calling types._create_row_inbound_converter(schema) on the
    # *internal* values, then runs fromInternal (timestamps become local datetimes; year-month intervals
    # are not supported at all). Swapping it for the identity keeps the internal values, which are
    # exactly statelens' representation. Pinned PySpark 4.3; checked after collect (see below).
    import pyspark.sql.types as T  # deferred: pyspark (heavy)

    with _RAW_LOCK:
        original = T._create_row_inbound_converter
        T._create_row_inbound_converter = lambda _dt: lambda *values: values  # type: ignore[assignment]
        try:
            yield
        finally:
            T._create_row_inbound_converter = original


def _collect_internal(df: Any) -> list[tuple[Any, ...]]:
    from pyspark.sql import Row  # deferred: pyspark (heavy)

    with _raw_rows():
        rows = df.collect()
    if rows and isinstance(rows[0], Row):  # pragma: no cover - PySpark changed its pickling
        raise BackendUnavailableError(
            "this PySpark version cannot hand over raw values; use the native backend"
        )
    return [tuple(r) for r in rows]


def _has_type(dt: Any, kind: type) -> bool:
    """True when ``dt`` is, or nests (structs, arrays, maps), a ``kind`` type."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, kind):
        return True
    if isinstance(dt, T.StructType):
        return any(_has_type(f.dataType, kind) for f in dt.fields)
    if isinstance(dt, T.ArrayType):
        return _has_type(dt.elementType, kind)
    if isinstance(dt, T.MapType):
        return _has_type(dt.keyType, kind) or _has_type(dt.valueType, kind)
    return False


def _has_calendar_interval(dt: Any) -> bool:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    return _has_type(dt, T.CalendarIntervalType)


def _renamed(dt: Any) -> Any:
    """Same type with struct fields renamed ``_0, _1, ...`` (unique), recursively."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, T.StructType):
        return T.StructType(
            [T.StructField(f"_{i}", _renamed(f.dataType), f.nullable) for i, f in enumerate(dt.fields)]
        )
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_renamed(dt.elementType), dt.containsNull)
    if isinstance(dt, T.MapType):
        return T.MapType(_renamed(dt.keyType), _renamed(dt.valueType), dt.valueContainsNull)
    return dt


def unique_struct(dt: Any, arrow: bool = False) -> Any:
    """``dt`` with repeated struct field names made unique as ``readers.values`` does for Parquet
    (``sum, sum`` -> ``sum, sum_2``), recursively, and calendar intervals as the struct :func:`_prepare`
    makes of them (with ``arrow``, year-month intervals as its int months too)."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if arrow and isinstance(dt, T.YearMonthIntervalType):
        return T.IntegerType()

    if isinstance(dt, T.CalendarIntervalType):
        return T.StructType(
            [
                T.StructField("months", T.IntegerType()),
                T.StructField("days", T.IntegerType()),
                T.StructField("microseconds", T.LongType()),
            ]
        )
    if isinstance(dt, T.StructType):
        names = dedupe_names([f.name for f in dt.fields])
        return T.StructType(
            [
                T.StructField(n, unique_struct(f.dataType, arrow), f.nullable)
                for n, f in zip(names, dt.fields, strict=True)
            ]
        )
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(unique_struct(dt.elementType, arrow), dt.containsNull)
    if isinstance(dt, T.MapType):
        return T.MapType(
            unique_struct(dt.keyType, arrow), unique_struct(dt.valueType, arrow), dt.valueContainsNull
        )
    return dt


def _collect_arrow(prepared: Any, schema: Any) -> list[tuple[Any, ...]]:
    """Spark Connect's collect: Arrow record batches, struct fields renamed by position first (repeated
    names would collapse in Python dicts), each value brought to Spark's internal form, then converted
    as the classic path converts."""
    table = _by_position(prepared).toArrow()
    return list(_converted_rows(table, prepared.schema, schema))


def _by_position(prepared: Any) -> Any:
    """``prepared`` with every struct's fields renamed ``_0, _1...`` (Arrow to Python keeps repeats apart)."""
    return prepared.select(
        *[prepared[f.name].cast(_renamed(f.dataType)).alias(f.name) for f in prepared.schema.fields]
    )


def _remote_arrow_tables(prepared: Any) -> Iterator[Any]:
    """The Arrow tables a Spark Connect server streams for ``prepared`` (renamed by position), one batch
    group at a time, as ``DataFrame.toLocalIterator`` receives them before making Rows (PySpark 4.3)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    renamed = _by_position(prepared)
    try:
        client = renamed._session.client
        query = renamed._plan.to_proto(client)
        stream = client.to_table_as_iterator(query, renamed._plan.observations)
    except AttributeError:  # pragma: no cover - another PySpark: collect instead
        yield renamed.toArrow()
        return
    for item in stream:
        if isinstance(item, pa.Table):
            yield item


def _converted_rows(table: Any, pschema: Any, schema: Any) -> Iterator[tuple[Any, ...]]:
    """Rows of one Arrow table (fields renamed by position, of ``pschema``) in statelens' representation
    (``schema``: the types before :func:`_prepare`)."""
    columns = [
        [_internal(v, f.dataType) for v in table.column(i).to_pylist()] for i, f in enumerate(pschema.fields)
    ]
    for row in zip(*columns, strict=True):
        yield tuple(convert(v, f.dataType) for v, f in zip(row, schema.fields, strict=True))


_EPOCH = dt_module.datetime(1970, 1, 1, tzinfo=dt_module.timezone.utc)


def _micros(delta: dt_module.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _internal(value: Any, dt: Any) -> Any:
    """A value as pyarrow hands it over -> Spark's internal form (what the classic collect keeps):
    structs as tuples, timestamps as microseconds since the epoch, dates as days, day-time intervals as
    microseconds, maps as dicts."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if value is None:
        return None
    if isinstance(dt, T.StructType):
        return tuple(_internal(v, f.dataType) for v, f in zip(value.values(), dt.fields, strict=True))
    if isinstance(dt, T.ArrayType):
        return [_internal(v, dt.elementType) for v in value]
    if isinstance(dt, T.MapType):
        return [(_internal(k, dt.keyType), _internal(v, dt.valueType)) for k, v in value]
    if isinstance(dt, T.TimestampType):
        return _micros(value - _EPOCH)
    if isinstance(dt, T.TimestampNTZType):
        return _micros(value - _EPOCH.replace(tzinfo=None))
    if isinstance(dt, T.DateType):
        return (value - dt_module.date(1970, 1, 1)).days
    if isinstance(dt, T.DayTimeIntervalType):
        return _micros(value)
    return value


def _prepare(col: Any, dt: Any, arrow: bool = False) -> Any:
    """Spark-side rewrite: every CalendarInterval becomes struct<months int, days int, microseconds long>;
    with ``arrow`` (Spark Connect's collect), year-month intervals become int months as well (Arrow
    conversion does not take them)."""
    from pyspark.sql import functions as F  # deferred: pyspark (heavy)
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if arrow and _has_year_month(dt):
        if isinstance(dt, T.YearMonthIntervalType):
            return (F.extract(F.lit("YEAR"), col) * 12 + F.extract(F.lit("MONTH"), col)).cast("int")
        return _rewrite(col, dt, lambda c, t: _prepare(c, t, arrow))
    if not _has_calendar_interval(dt):
        return col
    if isinstance(dt, T.CalendarIntervalType):

        def part(unit: str) -> Any:
            return F.extract(F.lit(unit), col)

        months = part("YEAR").cast("int") * 12 + part("MONTH").cast("int")
        micros = (
            part("HOUR").cast("long") * 3_600_000_000
            + part("MINUTE").cast("long") * 60_000_000
            + (part("SECOND") * 1_000_000).cast("long")
        )
        converted = F.struct(
            months.alias("months"), part("DAY").cast("int").alias("days"), micros.alias("microseconds")
        )
        return F.when(col.isNull(), F.lit(None)).otherwise(converted)
    if isinstance(dt, T.StructType):
        renamed = col.cast(_renamed(dt))
        fields = [
            _prepare(renamed.getField(f"_{i}"), f.dataType, arrow).alias(f"_{i}")
            for i, f in enumerate(dt.fields)
        ]
        return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(dt, T.ArrayType):
        return F.transform(col, lambda x: _prepare(x, dt.elementType, arrow))
    if isinstance(dt, T.MapType):
        if _has_calendar_interval(dt.keyType):
            raise BackendUnavailableError("map keys of type interval cannot be read through Spark")
        return F.transform_values(col, lambda _k, v: _prepare(v, dt.valueType, arrow))
    raise AssertionError(dt)  # pragma: no cover


def _rewrite(col: Any, dt: Any, inner: Callable[[Any, Any], Any]) -> Any:
    """``col`` (struct, array or map of ``dt``) with ``inner(child column, child type)`` applied to each child."""
    from pyspark.sql import functions as F  # deferred: pyspark (heavy)
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if isinstance(dt, T.StructType):
        renamed = col.cast(_renamed(dt))
        fields = [
            inner(renamed.getField(f"_{i}"), f.dataType).alias(f"_{i}") for i, f in enumerate(dt.fields)
        ]
        return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(dt, T.ArrayType):
        return F.transform(col, lambda x: inner(x, dt.elementType))
    if isinstance(dt, T.MapType):
        if _has_year_month(dt.keyType):
            raise BackendUnavailableError("map keys of type interval cannot be read through Spark Connect")
        return F.transform_values(col, lambda _k, v: inner(v, dt.valueType))
    return inner(col, dt)


def _has_year_month(dt: Any) -> bool:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    return _has_type(dt, T.YearMonthIntervalType)


def convert(value: Any, dt: Any) -> Any:
    """One internal Spark value → statelens' representation (maps sorted by key: Spark lost the order)."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if value is None:
        return None
    if isinstance(dt, T.StructType):
        return tuple(convert(v, f.dataType) for v, f in zip(value, dt.fields, strict=True))
    if isinstance(dt, T.ArrayType):
        return [convert(v, dt.elementType) for v in value]
    if isinstance(dt, T.MapType):
        pairs = value.items() if isinstance(value, dict) else value  # Spark Connect: a list of pairs
        items = [(convert(k, dt.keyType), convert(v, dt.valueType)) for k, v in pairs]
        items.sort(key=lambda kv: sort_key(kv[0]))
        return items
    if isinstance(dt, T.CalendarIntervalType):
        months, days, micros = value
        return CalendarInterval(int(months), int(days), int(micros))
    if isinstance(dt, T.BinaryType):
        return bytes(value)
    if isinstance(dt, T.BooleanType):
        return bool(value)
    if isinstance(dt, (T.FloatType, T.DoubleType)):
        return float(value)
    if isinstance(dt, T.DecimalType):
        return value if isinstance(value, Decimal) else Decimal(value)
    if isinstance(dt, T.StringType):
        return str(value)
    if isinstance(dt, T.NullType):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # integral types, dates, timestamps, ANSI intervals: internal ints
    raise SparkReadError(f"no conversion for {dt.simpleString()} value {value!r}")


def sort_key(v: Any) -> tuple[Any, ...]:
    """A total order over decoded values (None first, NaN after numbers), for stable sorting only."""

    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, v)
    if isinstance(v, (int, float, Decimal)):
        if isinstance(v, float) and math.isnan(v):
            return (2, 1, 0)
        return (2, 0, v)
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, (bytes, bytearray)):
        return (4, bytes(v))
    if isinstance(v, (tuple, list)):
        return (5, tuple(sort_key(x) for x in v))
    return (6, repr(v))

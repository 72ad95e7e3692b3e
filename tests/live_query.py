"""A live PySpark streaming query for the tests: a processing-time trigger, a checkpoint being written.

:class:`LiveQuery` runs, in a subprocess (its own JVM, so the test's SparkSession is not involved),
one or two streaming queries over Spark's ``rate-micro-batch`` source (``rowsPerBatch`` rows per batch,
whatever the wall clock does), each writing its own checkpoint under ``root``:

``agg``
    ``groupBy(value % AGG_KEYS).count()`` in update mode: an HDFS-backed aggregation store that stops
    growing once every group has been seen;
``leak``
    ``applyInPandasWithState`` with a processing-time timeout: every row is a new key
    (``k<value>``), each arms ``setTimeoutDuration(timeout_ms)``. When the timeout fires the leaking
    function does nothing (the key stays, with its expired timeout: a zombie); run with ``fixed=True``
    it calls ``state.remove()`` (the fix).

Both write to Spark's ``noop`` sink. The subprocess appends every batch's progress, as the query
reported it (``StreamingQueryProgress.json``: ``id``, ``batchId``, ``runId``,
``stateOperators[].numRowsTotal``, ...), to ``<name>.progress.jsonl`` under ``root``, one JSON object per
line (progress JSON lines, as ``--event-log`` reads them); ``starts.jsonl`` gets
``{"query", "runId", "fixed"}`` for every start.
It stops when every query has reported batch ``until_batch`` (or at once when ``root/stop`` appears),
so the same checkpoints can be restarted with the leak fixed.

Expectations come from what the query recorded (its progress, its checkpoint read by Spark's own
``statestore`` source in :mod:`tests.oracle`), never from the wall clock: the trigger only paces it.

CLI (what the subprocess runs)::

    python -m tests.live_query ROOT [--fixed] [--until-batch N] [--trigger-ms MS] [--queries agg,leak]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: Groups of the aggregation (``value % AGG_KEYS``).
AGG_KEYS = 6
#: Rows per batch of the rate source.
ROWS_PER_BATCH = 4
#: The leak's timeout: shorter than the trigger, so a key armed in batch ``b`` has timed out by ``b+1``.
TIMEOUT_MS = 400
QUERIES = ("agg", "leak")
_STATE_SCHEMA = "cnt LONG"
_OUTPUT_SCHEMA = "key STRING, action STRING"


def _leak_func(fixed: bool) -> Any:
    """The state function: counts a key's rows; on timeout does nothing (leak) or removes (fixed)."""

    def func(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        if state.hasTimedOut:
            if fixed:
                state.remove()
                action = "remove"
            else:
                action = "ignore"
        else:
            cnt = state.get[0] if state.exists else 0
            for pdf in pdfs:
                cnt += len(pdf)
            state.update((cnt,))
            state.setTimeoutDuration(TIMEOUT_MS)
            action = "update"
        yield pd.DataFrame({"key": [key[0]], "action": [action]})

    return func


def _run(root: Path, fixed: bool, until_batch: int | None, trigger_ms: int, queries: list[str]) -> int:
    """Start the queries, append their progress, stop them; the subprocess's body."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("statelens-live-query")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.warehouse.dir", str(root / "warehouse"))
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stop_path = root / "stop"

    def source() -> Any:
        return (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", str(ROWS_PER_BATCH))
            .option("numPartitions", "1")
            .load()
        )

    started: dict[str, Any] = {}
    for name in queries:
        if name == "agg":
            df = source().groupBy((F.col("value") % AGG_KEYS).alias("g")).count()
            mode = "update"
        else:
            df = (
                source()
                .select(F.concat(F.lit("k"), F.col("value").cast("string")).alias("key"), "value")
                .groupBy("key")
                .applyInPandasWithState(
                    _leak_func(fixed),
                    _OUTPUT_SCHEMA,
                    _STATE_SCHEMA,
                    "append",
                    GroupStateTimeout.ProcessingTimeTimeout,
                )
            )
            mode = "append"
        q = (
            df.writeStream.format("noop")
            .outputMode(mode)
            .queryName(name)
            .option("checkpointLocation", str(root / name))
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .start()
        )
        started[name] = q
        with (root / "starts.jsonl").open("a") as f:
            f.write(json.dumps({"query": name, "runId": str(q.runId), "fixed": fixed}) + "\n")
    seen: dict[str, int] = {name: -1 for name in started}
    status = 0
    try:
        while started:
            for name, q in list(started.items()):
                reports = [json.loads(p.json) if hasattr(p, "json") else p for p in q.recentProgress]
                new = [p for p in reports if p["batchId"] > seen[name]]
                if new:
                    with (root / f"{name}.progress.jsonl").open("a") as f:
                        for p in sorted(new, key=lambda p: p["batchId"]):
                            f.write(json.dumps(p) + "\n")
                    seen[name] = max(p["batchId"] for p in new)
                if q.exception() is not None:
                    print(f"{name}: {q.exception()}", file=sys.stderr)
                    status = 1
                    started.pop(name)
                elif stop_path.exists() or (until_batch is not None and seen[name] >= until_batch):
                    q.stop()
                    started.pop(name)
            time.sleep(0.1)
    finally:
        for q in started.values():
            q.stop()
        spark.stop()
    return status


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    # Only whole lines: the subprocess may be writing the last one.
    lines = path.read_text().split("\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


class LiveQuery:
    """The live queries of one test: their root folder, the running subprocess, what they reported.

    Parameters
    ----------
    root : Path
        Holds ``agg/`` and ``leak/`` (the checkpoints), their progress, the starts and the subprocess's
        log.
    queries : tuple of str
        Which of :data:`QUERIES` to run.
    trigger_ms : int
        The processing-time trigger's interval.
    """

    def __init__(self, root: Path, *, queries: tuple[str, ...] = QUERIES, trigger_ms: int = 1000):
        self.root = root
        self.queries = queries
        self.trigger_ms = trigger_ms
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)

    def checkpoint(self, name: str) -> Path:
        """The checkpoint folder of query ``name``."""
        return self.root / name

    def start(self, *, fixed: bool = False, until_batch: int | None = None) -> None:
        """Start (or restart, on the same checkpoints) the queries in a subprocess."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        (self.root / "stop").unlink(missing_ok=True)
        env = {**os.environ, "TZ": "UTC", "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
        args = [
            sys.executable,
            "-m",
            "tests.live_query",
            str(self.root),
            "--trigger-ms",
            str(self.trigger_ms),
        ]
        args += ["--queries", ",".join(self.queries)]
        if fixed:
            args.append("--fixed")
        if until_batch is not None:
            args += ["--until-batch", str(until_batch)]
        log = (self.root / "query.log").open("ab")
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait(self, timeout_s: float = 300.0) -> int:
        """Wait for the subprocess to end; its exit code (it is killed after ``timeout_s``)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def stop(self, timeout_s: float = 120.0) -> int:
        """Ask the queries to stop now, and wait for the subprocess."""
        (self.root / "stop").touch()
        return self.wait(timeout_s)

    def wait_for_batch(self, name: str, batch_id: int, timeout_s: float = 300.0) -> None:
        """Wait until query ``name`` has reported batch ``batch_id`` (raises if the subprocess ended)."""
        deadline = time.monotonic() + timeout_s
        while not any(p["batchId"] >= batch_id for p in self.progress(name)):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the live query ended before batch {batch_id}: {self.log()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no batch {batch_id} of {name} within {timeout_s} s")
            time.sleep(0.2)

    def progress_path(self, name: str) -> Path:
        """Query ``name``'s progress JSON lines (what ``--event-log`` reads)."""
        return self.root / f"{name}.progress.jsonl"

    def progress(self, name: str) -> list[dict[str, Any]]:
        """Query ``name``'s progress reports, in the order reported (a re-run batch appears twice)."""
        return _json_lines(self.progress_path(name))

    def runs(self, name: str) -> list[str]:
        """The run ids of query ``name``'s starts, in order."""
        return [d["runId"] for d in _json_lines(self.root / "starts.jsonl") if d["query"] == name]

    def log(self) -> str:
        """The subprocess's output."""
        path = self.root / "query.log"
        return path.read_text(errors="replace") if path.exists() else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.live_query")
    parser.add_argument("root", type=Path)
    parser.add_argument("--fixed", action="store_true", help="remove a key's state when its timeout fires")
    parser.add_argument("--until-batch", type=int, default=None)
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--queries", default=",".join(QUERIES))
    args = parser.parse_args(argv)
    queries = [q for q in args.queries.split(",") if q]
    unknown = set(queries) - set(QUERIES)
    if unknown:
        parser.error(f"unknown queries: {', '.join(sorted(unknown))}")
    args.root.mkdir(parents=True, exist_ok=True)
    return _run(args.root, args.fixed, args.until_batch, args.trigger_ms, queries)


if __name__ == "__main__":
    sys.exit(main())

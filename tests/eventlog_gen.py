"""Real Spark event logs next to their checkpoints, written by PySpark in processes of their own.

Event log settings are read when a SparkSession starts, so each variant runs this module as a subprocess
(``python -m tests.eventlog_gen VARIANT OUT``) with its own session: a small file-source aggregation
(three files, one per batch, ``availableNow``) with ``spark.eventLog.enabled``. The query's own progress
objects (``query.recentProgress``) are saved beside, per run, to compare every figure with.

Variants:

* ``zstd_rolling``: Spark 4's defaults (compressed with zstd, a rolling ``eventlog_v2_*`` folder);
* ``lz4``: ``spark.eventLog.compression.codec=lz4``, rolling, and the driver log at INFO (the
  "Streaming query made progress" blocks) in ``driver.log``;
* ``lzf``, ``snappy``: compressed with those codecs, rolling;
* ``plain``: uncompressed, not rolling (one JSON-lines file);
* ``restart``: two runs on one checkpoint (two run ids), the second reading two more files.

Folder: ``OUT/checkpoint``, ``OUT/events/...``, ``OUT/progress.json`` (a list of runs, each the list of
its progress objects), ``OUT/driver.log`` (``lz4`` only).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SOURCE_HASH = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:12]
VARIANTS = ("zstd_rolling", "lz4", "lzf", "snappy", "plain", "restart")


def cache_dir() -> Path:
    import pyspark

    base = os.environ.get("STATELENS_TEST_CACHE")
    root = Path(base) if base else REPO / ".cache" / "checkpoints"
    return root / f"eventlogs-{pyspark.__version__}-{_SOURCE_HASH}"


def get_event_log(variant: str) -> Path:
    """The folder of ``variant`` (generated on first use by a subprocess, then cached)."""
    out = cache_dir() / variant
    if (out / "done").is_file():
        return out
    tmp = out.with_name(f"{variant}.tmp-{os.getpid()}")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    env = {**os.environ, "TZ": "UTC", "PYTHONWARNINGS": "ignore"}
    log = open(tmp / "driver.log", "w")  # noqa: SIM115 - closed below
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.eventlog_gen", variant, str(tmp)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=900,
        )
    finally:
        log.close()
    if proc.returncode != 0:
        tail = "\n".join((tmp / "driver.log").read_text().splitlines()[-20:])
        raise RuntimeError(f"event log variant {variant!r} failed:\n{proc.stdout}\n{tail}")
    if variant != "lz4":
        (tmp / "driver.log").unlink()
    (tmp / "done").write_text("ok")
    try:
        os.rename(tmp, out)
    except OSError:
        if not (out / "done").is_file():
            raise
    return out


_LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.streaming.name = org.apache.spark.sql.execution.streaming
logger.streaming.level = info
"""


def _write_inputs(folder: Path, first: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + count):
        rows = [json.dumps({"k": f"k{j % 5}", "v": j}) for j in range(10 * i, 10 * i + 10 + i)]
        path = folder / f"part-{i:03d}.json"
        path.write_text("\n".join(rows) + "\n")
        os.utime(path, (1_704_067_200 + 10 * i, 1_704_067_200 + 10 * i))


def _run(variant: str, out: Path) -> None:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", str(out / "events"))
    )
    if variant == "plain":
        builder = builder.config("spark.eventLog.compress", "false").config(
            "spark.eventLog.rolling.enabled", "false"
        )
    elif variant == "lz4":
        builder = builder.config("spark.eventLog.compress", "true").config(
            "spark.eventLog.compression.codec", "lz4"
        )
        # The driver log with the streaming classes at INFO carries "Streaming query made progress"; PySpark
        # sets the root logger to WARN itself unless a log4j2 configuration is given.
        log4j = out / "log4j2.properties"
        log4j.write_text(_LOG4J)
        builder = builder.config("spark.eventLog.rolling.enabled", "true").config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}"
        )
    elif variant in ("lzf", "snappy"):
        builder = builder.config("spark.eventLog.compress", "true").config(
            "spark.eventLog.compression.codec", variant
        )
    (out / "events").mkdir(parents=True, exist_ok=True)
    inputs = out / "input"
    _write_inputs(inputs, 0, 3)
    runs = []
    for attempt in range(2 if variant == "restart" else 1):
        if attempt == 1:
            _write_inputs(inputs, 3, 2)
        spark = builder.getOrCreate()
        df = spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(inputs))
        query = (
            df.groupBy("k")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        runs.append([json.loads(p.json) for p in query.recentProgress])
        spark.stop()  # a restart is a new application: a new event log, a new run id
    (out / "progress.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    _run(sys.argv[1], Path(sys.argv[2]))

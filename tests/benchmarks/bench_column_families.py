"""Benchmark: column family stores (a stream-stream join in state format 4 on RocksDB) read three ways.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_column_families [--partitions 20] [--batches 8] [--rows 400000] [--json OUT]
    python -m tests.benchmarks.bench_column_families --rows 5000000 --skip-rows --spark-hash   # 20M state rows

It builds (once, cached under ``.cache/bench/``) a checkpoint written by PySpark 4.3: an inner join of two
file streams with watermarks, ``--rows`` rows per side in all, join state format 4 (the four logical
stores as column families of one RocksDB store, changelog checkpointing on). Then, in one run:

* ``raw``: for every partition, the newest zip extracted and its SSTs scanned through rocksdict, plus every
  later changelog read and decompressed (the floor: bytes out of the files, nothing decoded);
* ``native``: every row of every column family store at the latest version, decoded by statelens into
  Python rows (``read_rows``: the per-record replay);
* ``arrow`` / ``arrow_threads``: the same rows into Arrow columns (``read_arrow``: the columnar replay
  and decode), partitions on one thread, then on two (the app's partition threads), each on a fresh
  open of the checkpoint;
* ``spark``: the same rows from Spark's ``statestore`` reader (``storeName`` = the family), collected.

Results are ratios measured in the same run, never timed assertions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STORES = ["left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey"]


def build_checkpoint(partitions: int, batches: int, rows: int) -> Path:
    """Generate (or reuse) the benchmark checkpoint in place (Spark's reader needs its original path)."""
    root = REPO / ".cache" / "bench" / f"join4-p{partitions}-b{batches}-r{rows}"
    ckpt = root / "checkpoint"
    if (root / "done").exists():
        return ckpt
    shutil.rmtree(root, ignore_errors=True)
    per_batch = rows // batches
    for side in ("left", "right"):
        (root / side).mkdir(parents=True)
        for b in range(batches):
            with open(root / side / f"part-{b:04d}.json", "w") as f:
                for i in range(per_batch):
                    n = b * per_batch + i
                    # Event time moves 1 s per batch; keys repeat across sides so rows match and stay.
                    f.write(
                        json.dumps(
                            {
                                "k": n % (rows // 4),
                                "ts_ms": 1_704_067_200_000 + b * 1000 + i % 1000,
                                "v": f"{side}-{n}",
                            }
                        )
                        + "\n"
                    )
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("statelens-bench")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.join.stateFormatVersion", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "6g")
        .getOrCreate()
    )

    def side(name: str) -> Any:
        return (
            spark.readStream.schema("k LONG, ts_ms LONG, v STRING")
            .option("maxFilesPerTrigger", "1")
            .json(str(root / name))
            .withColumn(f"{name[0]}ts", F.timestamp_millis("ts_ms"))
            .withWatermark(f"{name[0]}ts", "1 hour")
            .select(F.col("k").alias(f"{name[0]}k"), f"{name[0]}ts", F.col("v").alias(f"{name[0]}v"))
        )

    joined = side("left").join(side("right"), F.expr("lk = rk AND rts BETWEEN lts - INTERVAL 1 HOUR AND lts"))
    q = (
        joined.writeStream.format("noop")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    spark.stop()
    (root / "done").write_text("ok\n")
    return ckpt


def measure_raw(ckpt: Path) -> dict[str, float]:
    """Newest zip per partition extracted and scanned, later changelogs decompressed: the floor."""
    from statelens.readers._format.codecs import decompress
    from statelens.readers.checkpoint import open_checkpoint

    t = time.perf_counter()
    c = open_checkpoint(str(ckpt))
    physical = c.column_family_reader(0)
    files = physical.files
    entries = 0
    for pid in files.partition_ids():
        pf = files.partitions[pid]
        latest = pf.latest_version()
        base = files._base_for(pf, latest) or 0
        if base:
            with files.workspace() as ws:
                entries += len(files._zip_items(ws, pid, base, False, column_families=True))
        for v in range(base + 1, latest + 1):
            sf = pf.deltas[v]
            decompress(files.fs.read_bytes(sf.path), sf.path, files.codec)
    return {"seconds": time.perf_counter() - t, "zip_entries": entries}


def measure_native(ckpt: Path) -> dict[str, float]:
    from statelens.readers.checkpoint import open_checkpoint

    t = time.perf_counter()
    c = open_checkpoint(str(ckpt))
    rows = 0
    for store in STORES:
        reader = c.store_reader(0, store)
        for pid in reader.partition_ids():
            rows += len(reader.read_rows(pid, reader.versions(pid)[-1]))
    return {"seconds": time.perf_counter() - t, "rows": rows}


def measure_arrow(ckpt: Path, threads: int) -> dict[str, float]:
    from concurrent.futures import ThreadPoolExecutor

    from statelens.readers.checkpoint import open_checkpoint

    t = time.perf_counter()
    c = open_checkpoint(str(ckpt))
    rows = 0
    with ThreadPoolExecutor(threads) as pool:
        for store in STORES:
            reader = c.store_reader(0, store)
            rows += sum(
                pool.map(
                    lambda pid, r=reader: r.read_arrow(pid, r.versions(pid)[-1]).num_rows,
                    reader.partition_ids(),
                )
            )
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "rows": rows, "rows_per_second": rows / seconds, "threads": threads}


def measure_spark(ckpt: Path, collect: bool = True) -> dict[str, float]:
    """Spark's ``statestore`` reader on the same rows: collected into Python (``collect``), or, for
    stores too big to collect, every row's key and value hashed and summed in Spark (each row decoded,
    nothing brought back)."""
    from pyspark.sql import SparkSession

    from statelens.readers.backends.spark import collect_converted

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.range(1).count()  # JVM warm, not timed
    t = time.perf_counter()
    rows = 0
    for store in STORES:
        df = spark.read.format("statestore").option("storeName", store).load(str(ckpt))
        if collect:
            rows += len(collect_converted(df, ["partition_id", "key", "value"]))
        else:
            got = df.selectExpr("hash(partition_id, key, value) AS h").agg({"h": "sum", "*": "count"}).first()
            rows += int(got["count(1)"])
    seconds = time.perf_counter() - t
    spark.stop()
    return {"seconds": seconds, "rows": rows, "collected": collect}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--skip-rows", action="store_true", help="skip the decode into Python rows (for 20M rows: GBs)"
    )
    parser.add_argument(
        "--spark-hash", action="store_true", help="Spark hashes every row instead of collecting them"
    )
    args = parser.parse_args(argv)
    ckpt = build_checkpoint(args.partitions, args.batches, args.rows)
    raw = measure_raw(ckpt)
    native = measure_native(ckpt) if not args.skip_rows else None
    measure_arrow(ckpt, 1)  # imports and compiled-code loading, not timed
    arrow = measure_arrow(ckpt, 1)
    arrow_threads = measure_arrow(ckpt, 2)
    spark = measure_spark(ckpt, collect=not args.spark_hash)
    out: dict[str, Any] = {
        "checkpoint": str(ckpt),
        "raw": raw,
        "native": native,
        "arrow": arrow,
        "arrow_threads": arrow_threads,
        "spark": spark,
        "arrow_over_raw": arrow["seconds"] / raw["seconds"],
        "spark_over_arrow": spark["seconds"] / arrow["seconds"],
        "rows_agree": spark["rows"] == arrow["rows"] == arrow_threads["rows"],
    }
    if native is not None:
        out.update(
            native_over_raw=native["seconds"] / raw["seconds"],
            arrow_speedup_over_rows=native["seconds"] / arrow["seconds"],
            spark_over_native=spark["seconds"] / native["seconds"],
            rows_agree=out["rows_agree"] and native["rows"] == arrow["rows"],
        )
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: native ``growth`` vs Spark's ``statestore`` reader vs raw read-and-decompress.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_growth [--partitions 200] [--batches 32] [--keys 2000000]
        [--key-styles fixed,variable] [--providers hdfs,rocksdb-changelog,rocksdb]
        [--patterns new,spread] [--json OUT]

It builds (once, cached under ``.cache/bench/``) checkpoints written by PySpark: a ``groupBy(key)``
aggregation over ``--batches`` micro-batches adding ``--keys`` distinct keys in all, with some updates of
old keys in every batch, on ``--partitions`` shuffle partitions; its keys spelled at one width
(``key-000000001``) or at several (``user-1`` ... ``user-1999999``, like real ids), each batch adding the
next keys in order or keys from all over the key space (:data:`PATTERNS`), its state kept by the
HDFS-backed provider or by RocksDB with and without changelog checkpointing (the same input for all).
Then, in one run, for every checkpoint (the *variants*; the runs of each measurement interleaved, a round
measuring every variant once, so the ratios between variants hold on a busy machine):

* ``raw``: reading every state file (SSTs too) and decompressing every delta, snapshot and changelog
  (the floor for any reader; the checkpoint is opened before the clock starts), best of three after a
  pass that brings the files into the page cache;
* ``native_growth``: ``statelens growth`` in this process (rows of every partition at every version),
  opening included and apart, best of three;
* ``growth_view``: the app's growth view computed in this process (``app.analysis.growth.iter_growth``:
  rows and key + value bytes of every partition at every version, and the footprint), opening
  included, best of three;
* ``fresh_growth`` and ``fresh_info``: ``statelens growth --json`` and ``statelens info`` in a fresh
  process (imports included, as a user runs them), wall and CPU seconds, best of three;
* peak resident memory of the native growth (in a fresh subprocess).

And for the first variant only:

* ``native_decode``: decoding every row of the latest version (rows/s);
* ``native_decode_arrow``: the same into Arrow columns (``read_arrow``, no Python object per row);
* ``native_decode_arrow_threads``: the same on the threads the browser decodes with (``readers.parallel``);
* ``spark_decode``: Spark's ``statestore`` reader on the latest version (every column hashed);
* ``spark_growth``: the same answer from Spark: one ``statestore`` read per committed batch, counted per
  partition;
* ``spark_backend_growth``: the same answer from statelens' Spark backend (the change feed, one job).

Results are ratios measured in the same run, never timed assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


#: Key spellings: ``fixed`` keys all have the same width (``key-000000001``), the layout the fixed-width
#: fast paths read; ``variable`` keys are ``user-1`` ... ``user-1999999``, like real user, session and
#: device ids, whose UnsafeRows differ in length.
KEY_STYLES = {"fixed": "key-{:09d}", "variable": "user-{}"}

#: Update patterns: ``new`` batches add the next keys in order (``key-000000001`` ... or ``user-1`` ...,
#: neighbours in the key space, mostly of one width in a batch) and update a tenth as many older ones;
#: ``spread`` batches add as many keys drawn from all over the key space (a shuffled order of the same
#: keys, so every batch holds keys of every width) and update a tenth as many older ones alike. The same
#: keys and the same number of records in both: only which keys a batch touches differs.
PATTERNS = ("new", "spread")

#: State store providers: the HDFS-backed one, and RocksDB with and without changelog checkpointing.
PROVIDERS = ("hdfs", "rocksdb-changelog", "rocksdb")

_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def checkpoint_name(
    partitions: int,
    batches: int,
    keys: int,
    key_style: str = "fixed",
    provider: str = "hdfs",
    pattern: str = "new",
) -> str:
    """The cache folder of one benchmark checkpoint (the fixed-width HDFS one keeps its first name)."""
    name = f"agg-p{partitions}-b{batches}-k{keys}"
    if key_style != "fixed":
        name += f"-{key_style}"
    if pattern != "new":
        name += f"-{pattern}"
    if provider != "hdfs":
        name += f"-{provider}"
    return name


def build_checkpoint(
    partitions: int,
    batches: int,
    keys: int,
    key_style: str = "fixed",
    provider: str = "hdfs",
    pattern: str = "new",
) -> Path:
    """Generate (or reuse) the benchmark checkpoint; returns the checkpoint folder.

    The same input (the same keys, in the same batches, with the same updates) for every provider, so
    an HDFS checkpoint and its RocksDB twins hold the same state; ``pattern`` (:data:`PATTERNS`) says
    which keys each batch touches.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown update pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    root = (
        REPO / ".cache" / "bench" / checkpoint_name(partitions, batches, keys, key_style, provider, pattern)
    )
    ckpt = root / "checkpoint"
    if (root / "done").exists():
        return ckpt
    shutil.rmtree(root, ignore_errors=True)
    inputs = root / "input"
    inputs.mkdir(parents=True)
    spell = KEY_STYLES[key_style]
    rng = random.Random(7)
    per_batch = keys // batches
    order = list(range(keys))  # the i-th key added
    if pattern == "spread":
        random.Random(11).shuffle(order)
    next_key = 0
    for b in range(batches):
        with open(inputs / f"part-{b:04d}.json", "w") as f:
            for _ in range(per_batch):
                f.write(f'{{"k":"{spell.format(order[next_key])}","n":{b}}}\n')
                next_key += 1
            for _ in range(per_batch // 10 if next_key else 0):  # updates of older keys
                f.write(f'{{"k":"{spell.format(order[rng.randrange(next_key)])}","n":{b}}}\n')
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g" if keys <= 5_000_000 else "14g")  # HDFS stores live in memory
        .config("spark.sql.session.timeZone", "UTC")
    )
    if provider != "hdfs":
        builder = builder.config("spark.sql.streaming.stateStore.providerClass", _ROCKSDB_PROVIDER).config(
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
            str(provider == "rocksdb-changelog").lower(),
        )
    spark = builder.getOrCreate()
    df = spark.readStream.schema("k string, n long").option("maxFilesPerTrigger", 1).json(str(inputs))
    q = (
        df.groupBy("k")
        .agg(F.count("*").alias("c"), F.sum("n").alias("s"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    spark.stop()
    (root / "done").write_text("ok")
    return ckpt


def measure_raw(ckpt: Path) -> dict[str, float]:
    """Every state file read (SSTs too), every delta, snapshot and changelog decompressed."""
    from statelens.readers._format.codecs import decompress
    from statelens.readers.checkpoint import open_checkpoint

    c = open_checkpoint(str(ckpt))
    t = time.perf_counter()
    n_files = n_bytes = out_bytes = 0
    state = ckpt / "state"
    for folder, _, names in os.walk(state):
        for name in names:
            if (
                name.startswith(".")
                or name.endswith(".crc")
                or "_metadata" in folder
                or "_stateSchema" in folder
            ):
                continue
            path = os.path.join(folder, name)
            data = c.fs.read_bytes(os.path.relpath(path, ckpt))
            if name.endswith((".delta", ".snapshot", ".changelog")):
                out_bytes += len(decompress(data, path))
            n_files += 1
            n_bytes += len(data)
    return {
        "seconds": time.perf_counter() - t,
        "files": n_files,
        "bytes": n_bytes,
        "decompressed_bytes": out_bytes,
    }


def measure_native_growth(ckpt: Path) -> dict[str, float]:
    from statelens.app.cli import iter_growth_records
    from statelens.readers.checkpoint import open_checkpoint

    t = time.perf_counter()
    c = open_checkpoint(str(ckpt))
    opened = time.perf_counter()
    records = list(iter_growth_records(c))
    secs = time.perf_counter() - t
    latest = max(r["version"] for r in records)
    total = sum(r["rows"] for r in records if r["version"] == latest)
    return {
        "seconds": secs,
        "open_seconds": opened - t,
        "records": len(records),
        "latest_version": latest,
        "latest_rows": total,
    }


def measure_growth_view(ckpt: Path) -> dict[str, float]:
    """What the app's growth view computes (``app.analysis.growth.iter_growth``), opening included."""
    from statelens.app.analysis._common import run_to_end
    from statelens.app.analysis.growth import iter_growth
    from statelens.readers.checkpoint import open_checkpoint

    t = time.perf_counter()
    result = run_to_end(iter_growth(open_checkpoint(str(ckpt))))
    secs = time.perf_counter() - t
    if result.problems:
        raise RuntimeError(f"growth view: {result.problems[0]}")
    return {"seconds": secs, "latest_rows": sum(g.total_rows()[-1] for g in result.stores if g.versions)}


def best_of(runs: int, measure: Any, ckpt: Path) -> dict[str, Any]:
    """The run of ``measure(ckpt)`` with the fewest seconds, out of ``runs``."""
    return min((measure(ckpt) for _ in range(runs)), key=lambda r: r["seconds"])  # type: ignore[no-any-return]


def measure_native_decode(ckpt: Path) -> dict[str, float]:
    from statelens.readers.checkpoint import open_checkpoint

    c = open_checkpoint(str(ckpt))
    reader = c.store_reader(0)
    t = time.perf_counter()
    rows = 0
    for pid in reader.partition_ids():
        rows += len(reader.read_rows(pid, reader.versions(pid)[-1]))
    secs = time.perf_counter() - t
    return {"seconds": secs, "rows": rows, "rows_per_second": rows / secs if secs else 0.0}


def measure_native_decode_arrow(ckpt: Path) -> dict[str, float]:
    """The latest version decoded into Arrow columns (``read_arrow``: no Python object per row)."""
    from statelens.readers.checkpoint import open_checkpoint

    c = open_checkpoint(str(ckpt))
    reader = c.store_reader(0)
    t = time.perf_counter()
    rows = 0
    for pid in reader.partition_ids():
        rows += reader.read_arrow(pid, reader.versions(pid)[-1]).num_rows
    secs = time.perf_counter() - t
    return {"seconds": secs, "rows": rows, "rows_per_second": rows / secs if secs else 0.0}


def measure_native_decode_arrow_threads(ckpt: Path) -> dict[str, float]:
    """``read_arrow`` of every partition on the threads the browser uses (``readers.parallel``), in order."""
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.parallel import WORKERS, in_order

    c = open_checkpoint(str(ckpt))
    reader = c.store_reader(0)
    t = time.perf_counter()
    rows = 0
    for _, table, err in in_order(
        lambda p: reader.read_arrow(p, reader.versions(p)[-1]), reader.partition_ids()
    ):
        if err is not None:
            raise err
        rows += table.num_rows
    secs = time.perf_counter() - t
    return {
        "seconds": secs,
        "rows": rows,
        "rows_per_second": rows / secs if secs else 0.0,
        "threads": WORKERS,
    }


def measure_spark_decode(ckpt: Path) -> dict[str, float]:
    """Spark's ``statestore`` reader decoding every row of the latest version (a hash over all columns
    forces every value to be read); session start measured apart."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    t = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    start = time.perf_counter() - t
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    t = time.perf_counter()
    df = spark.read.format("statestore").option("batchId", last).load(str(ckpt))
    row = df.agg(F.count("*").alias("n"), F.sum(F.hash("partition_id", "key", "value")).alias("h")).collect()[
        0
    ]
    secs = time.perf_counter() - t
    spark.stop()
    return {
        "seconds": secs,
        "session_start_seconds": start,
        "rows": row["n"],
        "rows_per_second": row["n"] / secs if secs else 0.0,
    }


def measure_spark_growth(ckpt: Path) -> dict[str, float]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    t = time.perf_counter()
    total = 0
    for b in commits:
        rows = (
            spark.read.format("statestore")
            .option("batchId", b)
            .load(str(ckpt))
            .groupBy("partition_id")
            .count()
            .collect()
        )
        total = sum(r["count"] for r in rows)
    secs = time.perf_counter() - t
    spark.stop()
    return {"seconds": secs, "batches": len(commits), "latest_rows": total}


def measure_spark_backend_growth(ckpt: Path) -> dict[str, float]:
    """statelens' own Spark backend: growth from the change feed in one Spark job (session start excluded)."""
    from statelens.readers.backends.spark import SparkBackend
    from statelens.readers.checkpoint import open_checkpoint

    c = open_checkpoint(str(ckpt))
    backend = SparkBackend(c, master="local[2]", conf={"spark.driver.memory": "4g"})
    backend.session()
    t = time.perf_counter()
    stats = list(backend.iter_stats(0, "default"))
    secs = time.perf_counter() - t
    latest = max(s.version for s in stats)
    backend.close()
    return {
        "seconds": secs,
        "session_start_seconds": backend.start_seconds or 0.0,
        "latest_rows": sum(s.rows for s in stats if s.version == latest),
        "method": backend.notes[0],
    }


def peak_memory_of_growth(ckpt: Path) -> float:
    """Peak RSS (MiB) of ``statelens growth --json`` in a fresh process."""
    code = (
        "import sys,io;from statelens.app.cli import main;from tests.benchmarks import peak_rss_kib;"
        "sys.stdout=io.StringIO();main(['growth','--json',sys.argv[1]]);"
        "sys.stderr.write(str(peak_rss_kib()))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ckpt)], cwd=REPO, capture_output=True, text=True, check=True
    )
    return int(proc.stderr.strip().splitlines()[-1]) / 1024


def fresh_command(ckpt: Path, *argv: str) -> dict[str, float]:
    """``statelens <argv> <ckpt>`` in a fresh process (the console script's entry point, output thrown
    away): wall seconds and the CPU seconds the process used."""
    code = "import sys;from statelens.app.launcher import main;sys.exit(main(sys.argv[1:]))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, argv[0], str(ckpt), *argv[1:]],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": wall, "cpu_seconds": cpu}


def best_fresh(runs: int, ckpt: Path, *argv: str) -> dict[str, float]:
    """The best of ``runs`` fresh-process runs, by wall time and (apart) by CPU time."""
    results = [fresh_command(ckpt, *argv) for _ in range(runs)]
    return {
        "seconds": min(r["seconds"] for r in results),
        "cpu_seconds": min(r["cpu_seconds"] for r in results),
    }


def measure_variant(ckpt: Path, runs: int) -> dict[str, Any]:
    """The floor, growth in process and in fresh processes, info in a fresh process, and peak memory."""
    return measure_variants({"": ckpt}, runs)[""]


def measure_variants(ckpts: dict[str, Path], runs: int) -> dict[str, dict[str, Any]]:
    """:func:`measure_variant` of every checkpoint, the runs interleaved: each round measures every
    variant once, so a busy moment of a shared machine slows the variants alike and the ratios between
    them hold (the best of ``runs`` rounds is kept for each)."""
    in_process = (
        ("raw", measure_raw),
        ("native_growth", measure_native_growth),
        ("growth_view", measure_growth_view),
    )
    out: dict[str, dict[str, Any]] = {name: {} for name in ckpts}
    for ckpt in ckpts.values():
        measure_raw(ckpt)  # the files into the page cache: the floor and growth both read them warm
        best_fresh(1, ckpt, "info")  # compiled modules and their caches written
    for _ in range(runs):
        for name, ckpt in ckpts.items():
            for key, measure in in_process:
                got = measure(ckpt)
                if key not in out[name] or got["seconds"] < out[name][key]["seconds"]:
                    out[name][key] = got
    for _ in range(runs):
        for name, ckpt in ckpts.items():
            for key, argv in (("fresh_growth", ("growth", "--json")), ("fresh_info", ("info",))):
                got = fresh_command(ckpt, *argv)
                had = out[name].get(key)
                out[name][key] = got if had is None else {k: min(had[k], got[k]) for k in got}
    for name, ckpt in ckpts.items():
        v = out[name]
        v["native_growth_peak_rss_mib"] = peak_memory_of_growth(ckpt)
        raw = v["raw"]["seconds"]
        v["ratio_to_raw"] = v["native_growth"]["seconds"] / raw
        v["fresh_growth_ratio_to_raw"] = v["fresh_growth"]["seconds"] / raw
        v["fresh_growth_cpu_ratio_to_raw"] = v["fresh_growth"]["cpu_seconds"] / raw
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument(
        "--key-styles", default="fixed,variable", help="comma-separated: " + ", ".join(KEY_STYLES)
    )
    ap.add_argument(
        "--providers", default=",".join(PROVIDERS), help="comma-separated: " + ", ".join(PROVIDERS)
    )
    ap.add_argument(
        "--patterns", default="new", help="comma-separated update patterns: " + ", ".join(PATTERNS)
    )
    ap.add_argument("--runs", type=int, default=3, help="runs of each measurement (the best is kept)")
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--skip-decode", action="store_true", help="skip the decode measurements")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    os.environ.setdefault("TZ", "UTC")
    from statelens.app import allocator

    allocator.tune()  # as the statelens command does: the floor and growth run under the same malloc
    styles = [k for k in args.key_styles.split(",") if k]
    providers = [p for p in args.providers.split(",") if p]
    patterns = [p for p in args.patterns.split(",") if p]
    # variable-width keys on every provider; fixed-width keys on HDFS (the fast paths' layout)
    variants = [
        (k, p, u) for u in patterns for k in styles for p in providers if k == "variable" or p == "hdfs"
    ]
    result: dict[str, Any] = {
        "partitions": args.partitions,
        "batches": args.batches,
        "keys": args.keys,
        "variants": {},
    }
    ckpts: dict[str, Path] = {}
    for key_style, provider, pattern in variants:
        t = time.perf_counter()
        ckpt = build_checkpoint(args.partitions, args.batches, args.keys, key_style, provider, pattern)
        name = f"{provider}/{key_style}" + (f"/{pattern}" if pattern != "new" else "")
        ckpts[name] = ckpt
        print(f"{name}: {ckpt} (ready in {time.perf_counter() - t:.1f}s)", flush=True)
    assert ckpts, "no variant selected"
    result["variants"] = measure_variants(ckpts, args.runs)
    for name, measured in result["variants"].items():
        print(f"{name}:", json.dumps(measured), flush=True)
    ckpt = next(iter(ckpts.values()))
    if not args.skip_decode:
        result["native_decode"] = measure_native_decode(ckpt)
        print("native decode latest:", result["native_decode"], flush=True)
        result["native_decode_arrow"] = measure_native_decode_arrow(ckpt)
        print("native decode latest into Arrow:", result["native_decode_arrow"], flush=True)
        result["native_decode_arrow_threads"] = measure_native_decode_arrow_threads(ckpt)
        print("the same on the browser's threads:", result["native_decode_arrow_threads"], flush=True)
        result["arrow_decode_vs_rows"] = (
            result["native_decode"]["seconds"] / result["native_decode_arrow"]["seconds"]
        )
    growth = next(iter(result["variants"].values()))["native_growth"]["seconds"]
    if not args.skip_spark:
        result["spark_backend_growth"] = measure_spark_backend_growth(ckpt)
        print("statelens spark backend growth:", result["spark_backend_growth"], flush=True)
        result["speedup_vs_spark_backend"] = result["spark_backend_growth"]["seconds"] / growth
        if not args.skip_decode:
            result["spark_decode"] = measure_spark_decode(ckpt)
            print("spark decode latest:", result["spark_decode"], flush=True)
            result["arrow_decode_vs_spark"] = (
                result["spark_decode"]["seconds"] / result["native_decode_arrow"]["seconds"]
            )
        result["spark_growth"] = measure_spark_growth(ckpt)
        print("spark growth:", result["spark_growth"], flush=True)
        result["speedup_vs_spark"] = result["spark_growth"]["seconds"] / growth
    print(summary(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def summary(result: dict[str, Any]) -> str:
    """One line per variant: the floor, growth in process and fresh (wall, CPU), info fresh, the growth
    view in process, and each RocksDB variant's figures against the HDFS one of the same keys (growth
    in process, fresh, and the growth view)."""
    lines = [
        f"{result['keys']} keys, {result['partitions']} partitions, {result['batches']} batches",
        f"{'variant':<35}{'raw s':>8}{'growth s':>10}{'x raw':>7}{'fresh s':>9}{'cpu s':>7}{'x raw':>7}"
        f"{'info s':>8}{'view s':>8}{'x hdfs: growth':>16}{'fresh':>7}{'view':>7}",
    ]
    variants = result["variants"]
    for name, v in variants.items():
        provider, rest = name.split("/", 1)
        twin = variants.get(f"hdfs/{rest}")
        vs_hdfs = ""
        if twin is not None and provider != "hdfs":
            vs_hdfs = (
                f"{v['native_growth']['seconds'] / twin['native_growth']['seconds']:>16.2f}"
                f"{v['fresh_growth']['seconds'] / twin['fresh_growth']['seconds']:>7.2f}"
                f"{v['growth_view']['seconds'] / twin['growth_view']['seconds']:>7.2f}"
            )
        lines.append(
            f"{name:<35}{v['raw']['seconds']:>8.3f}{v['native_growth']['seconds']:>10.3f}"
            f"{v['ratio_to_raw']:>7.1f}{v['fresh_growth']['seconds']:>9.2f}"
            f"{v['fresh_growth']['cpu_seconds']:>7.2f}{v['fresh_growth_ratio_to_raw']:>7.1f}"
            f"{v['fresh_info']['seconds']:>8.2f}{v['growth_view']['seconds']:>8.3f}{vs_hdfs}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: following a query on the 2M-key checkpoint, batch by batch, vs the raw floor.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_follow [--key-styles fixed,variable]
        [--providers hdfs,rocksdb-changelog] [--added 5] [--per-batch 10000] [--json OUT]

The checkpoints are the growth benchmark's 2M-key ones (:mod:`tests.benchmarks.bench_growth`: a
``groupBy(key)`` aggregation on 200 shuffle partitions, 30 batches), each continued by a real Spark run of
the same query on a copy (cached under ``.cache/bench/<name>-follow<per-batch>x<added>``) for ``--added``
more batches that add ``--per-batch`` new keys each (and update a tenth as many older ones), as a running
query would. The follow then starts at the last of the first 30 batches (the store's 2M keys replayed
once, the catch-up) and, per added batch:

* ``follow``: re-lists the checkpoint (a fresh listing), reads the new version of every partition
  through the scan's replay (:meth:`readers.scan.Replay.advance`, resumed where the last batch left it:
  only the version's delta or changelog is read) and folds the store's rows and their change per batch;
  wall seconds, and the peak resident memory of the process during the batch (``VmHWM``, reset before
  each batch through ``/proc/self/clear_refs``), with the whole store's replayed state held;
* ``raw``: the floor: reading the bytes of the files that batch added to the store (its deltas or its
  changelogs and SSTs), in the same run, right before.

Results are ratios measured in the same run, never timed assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_growth import REPO, build_checkpoint, checkpoint_name

#: The growth benchmark's checkpoints the follow starts from.
BASE = {"partitions": 200, "batches": 30, "keys": 2_000_000}

_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def follow_name(key_style: str, provider: str, per_batch: int, added: int) -> str:
    """The cache folder of the continued checkpoint."""
    base = checkpoint_name(BASE["partitions"], BASE["batches"], BASE["keys"], key_style, provider)
    return f"{base}-follow{per_batch}x{added}"


def build_follow_checkpoint(key_style: str, provider: str, per_batch: int, added: int) -> Path:
    """Generate (or reuse) a copy of the 2M-key checkpoint continued by ``added`` batches of the same
    query, each adding ``per_batch`` new keys and updating a tenth as many older ones; returns the
    checkpoint folder."""
    from tests.benchmarks.bench_growth import KEY_STYLES

    root = REPO / ".cache" / "bench" / follow_name(key_style, provider, per_batch, added)
    ckpt = root / "checkpoint"
    if (root / "done").exists():
        return ckpt
    base = build_checkpoint(BASE["partitions"], BASE["batches"], BASE["keys"], key_style, provider)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(base, ckpt)
    inputs = root / "input"  # only the new files: the copy's source log names the first 30 as read
    inputs.mkdir()
    spell = KEY_STYLES[key_style]
    rng = random.Random(13)
    next_key = BASE["keys"]
    for b in range(added):
        with open(inputs / f"part-{BASE['batches'] + b:04d}.json", "w") as f:
            for _ in range(per_batch):
                f.write(f'{{"k":"{spell.format(next_key)}","n":{BASE["batches"] + b}}}\n')
                next_key += 1
            for _ in range(per_batch // 10):
                f.write(f'{{"k":"{spell.format(rng.randrange(next_key))}","n":{BASE["batches"] + b}}}\n')
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", str(BASE["partitions"]))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if provider != "hdfs":
        builder = builder.config("spark.sql.streaming.stateStore.providerClass", _ROCKSDB_PROVIDER).config(
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
            str(provider == "rocksdb-changelog").lower(),
        )
    spark = builder.getOrCreate()
    # A glob, not the folder: Spark then sets no base path the first 30 batches' files (in the source
    # log, under the original's folder) would have to lie below when the last of them is prepared again.
    df = (
        spark.readStream.schema("k string, n long")
        .option("maxFilesPerTrigger", 1)
        .json(str(inputs / "part-*.json"))
    )
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


# -- the measurement (run in a subprocess per checkpoint and code: only ``statelens`` is imported, so the
# code before a change can be measured by putting its checkout first on the path) ------------------------
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Start the process's peak resident memory (``VmHWM``) afresh at its current size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _new_files(ckpt: Path, version: int) -> list[Path]:
    """The store files the batch that wrote ``version`` added: written after the commit of the batch
    before and no later than its own commit (the copy keeps the first 30 batches' times)."""
    after = (ckpt / "commits" / str(version - 2)).stat().st_mtime
    until = (ckpt / "commits" / str(version - 1)).stat().st_mtime
    out = []
    for folder, _, names in os.walk(ckpt / "state"):
        for name in names:
            if name.startswith(".") or name.endswith(".crc") or name.startswith("_"):
                continue
            path = Path(folder) / name
            if after < path.stat().st_mtime <= until and "_metadata" not in folder:
                out.append(path)
    return out


def measure_follow(ckpt: Path, first: int, last: int) -> dict[str, Any]:
    """Follow operator 0's store from version ``first`` (the catch-up) to ``last``, one version a batch;
    see the module's docstring."""
    from statelens.app import allocator
    from statelens.readers.backends import native_backend
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.scan import StateScan

    allocator.tune()  # as the statelens command does
    base_kib = _status_kib("VmRSS")
    _reset_peak()
    t = time.perf_counter()
    backend = native_backend(open_checkpoint(str(ckpt)))
    replay = StateScan(backend, 0, kind="replay").replay()
    rows: dict[int, int] = {}
    for step in replay.advance(until=first):
        rows[step.partition_id] = len(step.state)
    out: dict[str, Any] = {
        "catch_up_seconds": time.perf_counter() - t,
        "catch_up_peak_mib": _status_kib("VmHWM") / 1024,
        "held_mib": (_status_kib("VmRSS") - base_kib) / 1024,
        "rows": sum(rows.values()),
        "batches": [],
    }
    for version in range(first + 1, last + 1):
        files = _new_files(ckpt, version)
        t = time.perf_counter()
        raw_bytes = sum(len(p.read_bytes()) for p in files)
        raw = time.perf_counter() - t
        _reset_peak()
        t = time.perf_counter()
        open_checkpoint(str(ckpt))  # the re-listing a poll makes (the whole checkpoint opened again)
        relist = time.perf_counter() - t
        before = sum(rows.values())
        for step in replay.advance(until=version):
            rows[step.partition_id] = len(step.state)
        total = sum(rows.values())
        secs = time.perf_counter() - t
        out["batches"].append(
            {
                "version": version,
                "seconds": secs,
                "relist_seconds": relist,
                "replay_seconds": secs - relist,
                "peak_mib": _status_kib("VmHWM") / 1024,
                "raw_seconds": raw,
                "raw_files": len(files),
                "raw_bytes": raw_bytes,
                "ratio_to_raw": secs / raw if raw else None,
                "rows": total,
                "rows_delta": total - before,
            }
        )
    problems = replay._scan.problems  # noqa: SLF001
    if problems:
        raise RuntimeError(f"follow: {problems[0]}")
    return out


def run_follow(code: Path, ckpt: Path, first: int, last: int) -> dict[str, Any]:
    """:func:`measure_follow` in a fresh process importing ``statelens`` from ``code``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.run(
        [sys.executable, __file__, "--measure", str(ckpt), str(first), str(last)],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The follows of one checkpoint with one code: each batch's fewest seconds (and its floor's) and
    the catch-up's, the memory of the first follow (the same every time)."""
    out = dict(runs[0])
    out["catch_up_seconds"] = min(r["catch_up_seconds"] for r in runs)
    out["batches"] = []
    for batch in zip(*(r["batches"] for r in runs), strict=True):
        best = dict(min(batch, key=lambda b: b["seconds"]))
        best["raw_seconds"] = min(b["raw_seconds"] for b in batch)
        best["ratio_to_raw"] = best["seconds"] / best["raw_seconds"] if best["raw_seconds"] else None
        best["peak_mib"] = max(b["peak_mib"] for b in batch)
        out["batches"].append(best)
    out["summary"] = _batch_summary(out["batches"])
    return out


def _batch_summary(batches: list[dict[str, Any]]) -> dict[str, float]:
    worst = max(batches, key=lambda b: b["seconds"])
    return {
        "median_seconds": sorted(b["seconds"] for b in batches)[len(batches) // 2],
        "median_relist_seconds": sorted(b["relist_seconds"] for b in batches)[len(batches) // 2],
        "median_replay_seconds": sorted(b["replay_seconds"] for b in batches)[len(batches) // 2],
        "max_seconds": worst["seconds"],
        "max_peak_mib": max(b["peak_mib"] for b in batches),
        "median_raw_seconds": sorted(b["raw_seconds"] for b in batches)[len(batches) // 2],
        "median_ratio_to_raw": sorted(b["ratio_to_raw"] or 0 for b in batches)[len(batches) // 2],
        "rows_delta": batches[-1]["rows_delta"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--key-styles", default="fixed,variable")
    ap.add_argument("--providers", default="hdfs,rocksdb-changelog")
    ap.add_argument("--added", type=int, default=5, help="batches added to the 2M-key checkpoint")
    ap.add_argument("--per-batch", type=int, default=10_000, help="new keys a batch adds")
    ap.add_argument(
        "--before", metavar="CHECKOUT", help="also measure the code of this checkout (the code before)"
    )
    ap.add_argument(
        "--runs", type=int, default=1, help="follows of each checkpoint and code (each batch's best kept)"
    )
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    first = BASE["batches"]  # the version the first 30 batches left
    last = first + args.added
    codes = {"after": REPO}
    if args.before:
        codes = {"before": Path(args.before).resolve(), **codes}
    result: dict[str, Any] = {"per_batch": args.per_batch, "added": args.added, "variants": {}}
    for provider in args.providers.split(","):
        for key_style in args.key_styles.split(","):
            ckpt = build_follow_checkpoint(key_style, provider, args.per_batch, args.added)
            name = f"{provider}/{key_style}"
            runs: dict[str, list[dict[str, Any]]] = {code_name: [] for code_name in codes}
            for _ in range(args.runs):  # each round follows with every code, one right after the other
                for code_name, code in codes.items():
                    runs[code_name].append(run_follow(code, ckpt, first, last))
            for code_name, got_runs in runs.items():
                got = _best(got_runs)
                result["variants"].setdefault(name, {})[code_name] = got
                print(f"{name} {code_name}:", json.dumps({k: v for k, v in got.items() if k != "batches"}))
                print("  batches:", json.dumps(got["batches"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--measure":
        print(json.dumps(measure_follow(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
        sys.exit(0)
    sys.exit(main())

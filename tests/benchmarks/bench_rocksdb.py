"""Benchmark: a RocksDB checkpoint against its HDFS twin (the same job, the same input), in one run.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_rocksdb [--hdfs CKPT] [--rocksdb CKPT] [--pattern new|spread]
        [--rounds 3] [--json OUT]

By default the 2,000,000-key variable-width checkpoints of ``bench_growth`` (200 partitions, 30 batches;
the RocksDB one with changelog checkpointing; ``--pattern spread``: their twins whose batches touch keys
all over the key space), built once under ``.cache/bench/``. Each round measures,
for both checkpoints one after the other (so a busy moment of a shared machine slows both alike):

* ``growth``: ``statelens growth --json`` in a fresh process, wall and CPU seconds;
* ``growth_view``: the app started on the growth view, until its data is drawn (wall seconds, and the
  CPU seconds of the process until then: ``growth_view_cpu``);
* ``browser``: the app started on the state browser with an empty decoded-state cache, until the
  first page is drawn (wall seconds; ``browser_cpu`` likewise).

The median of the rounds is reported for each, and the median of each round's RocksDB figure over its
HDFS twin's (a round's two stores run back to back, so the ratio holds when the machine's load changes
from one round to the next). An app start whose view reports an error fails the benchmark.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_app import app_start, compile_package
from tests.benchmarks.bench_growth import PATTERNS, build_checkpoint, fresh_command


def measure_round(ckpt: Path) -> dict[str, float]:
    """One round's figures for one checkpoint."""
    growth = fresh_command(ckpt, "growth", "--json")
    out = {"growth": growth["seconds"], "growth_cpu": growth["cpu_seconds"]}
    for key, view in (("growth_view", "growth"), ("browser", "browser")):
        cache = Path(tempfile.mkdtemp(prefix="statelens-bench-cache-"))
        try:
            start = app_start(ckpt, view, cache)
            out[key], out[f"{key}_cpu"] = start["seconds"], start["cpu_seconds"]
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hdfs", type=Path, help="the HDFS checkpoint (default: bench_growth's)")
    ap.add_argument("--rocksdb", type=Path, help="its RocksDB twin (default: bench_growth's, changelogs)")
    ap.add_argument("--pattern", default="new", choices=PATTERNS, help="the update pattern (bench_growth)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (the median is reported)")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    compile_package()
    ckpts = {
        "hdfs": args.hdfs or build_checkpoint(200, 30, 2_000_000, "variable", "hdfs", args.pattern),
        "rocksdb": args.rocksdb
        or build_checkpoint(200, 30, 2_000_000, "variable", "rocksdb-changelog", args.pattern),
    }
    for ckpt in ckpts.values():
        fresh_command(ckpt, "info")  # files into the page cache, compiled kernels written
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in ckpts}
    for i in range(args.rounds):
        for name, ckpt in ckpts.items():
            rounds[name].append(measure_round(ckpt))
            print(f"round {i + 1} {name}: {json.dumps(rounds[name][-1])}", flush=True)
    result: dict[str, Any] = {"checkpoints": {k: str(v) for k, v in ckpts.items()}, "rounds": rounds}
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in rounds.items()
    }
    result["median"] = medians
    result["ratio"] = {  # each round's RocksDB figure over its HDFS twin's, measured just before it
        key: statistics.median(
            r[key] / h[key] for h, r in zip(rounds["hdfs"], rounds["rocksdb"], strict=True)
        )
        for key in medians["hdfs"]
    }
    print(f"{'figure':<14}{'hdfs s':>9}{'rocksdb s':>11}{'ratio':>8}")
    for key, ratio in result["ratio"].items():
        print(f"{key:<14}{medians['hdfs'][key]:>9.2f}{medians['rocksdb'][key]:>11.2f}{ratio:>8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

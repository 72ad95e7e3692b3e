"""Benchmark: the Spark backend past one process, on the 2M-key checkpoint of ``bench_growth`` (on demand).

    python -m tests.benchmarks.bench_cluster [--partitions 200] [--batches 32] [--keys 2000000] [--scale N]
                                             [--json OUT]

``--scale 10`` runs on a store ten times larger, scaled up from the real one's files as
``bench_memory`` does (its logs and schema, delta files written in Spark's layout), in a minute instead
of the hour PySpark needs to write 20M keys on two cores.

Starts a standalone cluster (master + two 1-core workers, ``tests/spark_cluster.py``) and a Spark Connect
server (``tests/spark_connect.py``) on loopback, then runs each command in a fresh statelens process
through ``local[*]``, the cluster, Spark Connect, and the native decoder, measuring wall time and the
statelens Python process's peak RSS (``ru_maxrss`` of that process: the JVM it starts is a child and is
not counted):

* ``growth --json --top-keys 10``;
* ``expired --json`` (an aggregation without watermark: nothing to check);
* ``expired --json`` on a windowed aggregation of as many (window, key) rows that leaks: one window in
  100 is never evicted (``bench_memory.build_windowed_checkpoint``: real logs and schema, delta files
  written in Spark's layout), so the eviction check has ``keys / 100`` findings to bring back;
* ``sql --in-spark`` (DuckDB natively) counting keys per partition;
* ``rows --format parquet -o OUT`` (a folder Spark writes on the Spark backend; a file natively).

On this 2-core machine the "cluster" shares the cores with everything else: the figures show what each
path costs the desktop process, not cluster speed-ups.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

_RUN = (
    "import sys;from statelens.app.launcher import main;from tests.benchmarks import peak_rss_kib;"
    "rc=main(sys.argv[1:]);sys.stderr.write('RSS %d\\n' % peak_rss_kib());sys.exit(rc)"
)


def run(argv: list[str]) -> dict[str, Any]:
    """Wall time and the statelens process's peak RSS of one command (stdout discarded)."""
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=3600,
        env={**os.environ, "STATELENS_CACHE_DIR": tempfile.mkdtemp(prefix="statelens-bench-cache-")},
    )
    secs = time.perf_counter() - t
    rss = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("RSS ")]
    if proc.returncode not in (0, 1):
        return {"failed": proc.stderr[-1500:], "seconds": round(secs, 2)}
    return {"seconds": round(secs, 2), "python_peak_rss_mib": round(rss[-1] / 1024, 1) if rss else None}


def main(argv: list[str] | None = None) -> int:
    from tests.benchmarks.bench_growth import build_checkpoint
    from tests.spark_cluster import StandaloneCluster
    from tests.spark_connect import ConnectServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--scale", type=int, default=1, help="scale the real checkpoint's state up N times")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    from tests.benchmarks.bench_memory import build_scaled_checkpoint, build_windowed_checkpoint

    base = build_checkpoint(args.partitions, args.batches, args.keys)
    if args.scale > 1:
        base = build_scaled_checkpoint(base, args.scale, args.keys, args.partitions, args.batches)
    ckpt = str(base)
    windowed = str(build_windowed_checkpoint(args.partitions, args.batches, args.keys * args.scale))
    skew = "SELECT partition_id, count(*) AS keys FROM state GROUP BY partition_id ORDER BY keys DESC"
    work = Path(tempfile.mkdtemp(prefix="statelens-bench-cluster-"))
    result: dict[str, Any] = {"keys": args.keys * args.scale, "scaled_up": args.scale > 1}
    cluster, server = StandaloneCluster(work / "cluster"), ConnectServer(work / "connect", master="local[*]")
    try:
        modes = {
            "native": ["--backend", "native"],
            "local": ["--backend", "spark", "--spark-master", "local[*]"],
            "standalone": ["--backend", "spark", "--spark-master", cluster.start()],
            "connect": ["--backend", "spark", "--spark-remote", server.start()],
        }
        for mode, flags in modes.items():
            out = work / f"rows-{mode}"
            result[mode] = {
                "growth_top_keys": run(["growth", ckpt, "--json", "--top-keys", "10", *flags]),
                "expired": run(["expired", ckpt, "--json", *flags]),
                "expired_leaking_windows": run(["expired", windowed, "--json", *flags]),
                "sql_keys_per_partition": run(
                    ["sql", ckpt, skew, "--json", *(["--in-spark", *flags] if mode != "native" else flags)]
                ),
                "rows_parquet": run(
                    ["rows", ckpt, "--operator", "0", "--format", "parquet", "-o", str(out), *flags]
                ),
            }
            print(mode, json.dumps(result[mode]), file=sys.stderr, flush=True)
    finally:
        server.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

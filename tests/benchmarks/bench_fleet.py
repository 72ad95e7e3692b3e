"""Benchmark: ``statelens fleet`` on many checkpoints, on demand (the tests check the rows, not the time).

    python -m tests.benchmarks.bench_fleet [--local 500] [--s3 40] [--jobs 16] [--delay-ms 25]

``--local N``: N copies of five generated scenarios (agg_count, pandas_state_event, rocks_agg_changelog,
join, uncommitted) in 20 team folders on local disk; the first run and a second with nothing new (every
row from the cache of rows), each timed, with the process' peak RSS.

``--s3 N``: N copies of four scenarios uploaded to moto's S3 server (in a process of its own, so that its
work does not share this one's GIL) behind the proxy of ``tests/test_fs_s3.py`` adding ``--delay-ms`` to
every request; the same files fetched 64 at a time (the floor), then the first and a second fleet run,
with their request counts.

Caches go to a temporary folder. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOCAL_KINDS = ("agg_count", "pandas_state_event", "rocks_agg_changelog", "join", "uncommitted")
S3_KINDS = ("agg_count", "pandas_state_event", "rocks_agg_changelog", "join")
BUCKET = "statelens-fleet-bench"


def _local(n: int, jobs: int, work: Path) -> None:
    from statelens.app.analysis.fleet import fleet
    from tests.spark_checkpoints import get_checkpoint

    root = work / "local"
    for i in range(n):
        shutil.copytree(
            get_checkpoint(LOCAL_KINDS[i % len(LOCAL_KINDS)]) / "checkpoint",
            root / f"team{i % 20}" / f"job{i}",
        )
    t = time.monotonic()
    first = fleet(str(root), jobs=jobs)
    t1 = time.monotonic() - t
    t = time.monotonic()
    second = fleet(str(root), jobs=jobs)
    t2 = time.monotonic() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"local: {len(first.rows)} checkpoints, first run {t1:.1f} s, second {t2:.1f} s ({t2 / t1:.0%}, "
        f"{second.cached} rows from the cache), peak RSS {rss:.0f} MB"
    )


def _moto() -> tuple[subprocess.Popen[bytes], str, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code = (
        "import logging, time; logging.getLogger('werkzeug').setLevel(logging.ERROR)\n"
        "from moto.server import ThreadedMotoServer as T\n"
        f"T(ip_address='127.0.0.1', port={port}, verbose=False).start(); time.sleep(86400)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, "127.0.0.1", port


def _s3(n: int, jobs: int, delay_ms: int) -> None:
    import boto3
    from botocore.config import Config

    from statelens.app.analysis.fleet import fleet
    from tests.spark_checkpoints import get_checkpoint
    from tests.test_fs_s3 import ACCESS_KEY, SECRET_KEY, Fault, FaultProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    proc, host, port = _moto()
    try:
        keys = {
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": "us-east-1",
        }
        client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", **keys)
        client.create_bucket(Bucket=BUCKET)
        files = {
            k: [
                (p.relative_to(src).as_posix(), p.read_bytes()) for p in sorted(src.rglob("*")) if p.is_file()
            ]
            for k in S3_KINDS
            for src in [get_checkpoint(k) / "checkpoint"]
        }
        names = []
        for i in range(n):
            for rel, data in files[S3_KINDS[i % len(S3_KINDS)]]:
                key = f"prod/team{i % 10}/job{i}/{rel}"
                client.put_object(Bucket=BUCKET, Key=key, Body=data)
                names.append(key)
        proxy = FaultProxy((host, port))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()

        def fresh() -> None:
            proxy.reset()
            proxy.inject(Fault("", "delay", times=-1, seconds=delay_ms / 1000, method="GET"))

        fresh()
        via = boto3.client("s3", endpoint_url=proxy.url, config=Config(max_pool_connections=64), **keys)
        t = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(lambda k: via.get_object(Bucket=BUCKET, Key=k)["Body"].read(), names))
        floor = time.monotonic() - t
        options = {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": proxy.url, "region_name": "us-east-1"},
        }
        fresh()
        t = time.monotonic()
        first = fleet(f"s3://{BUCKET}/prod", options, jobs=jobs)
        t1, r1 = time.monotonic() - t, len(proxy.requests)
        fresh()
        t = time.monotonic()
        second = fleet(f"s3://{BUCKET}/prod", options, jobs=jobs)
        t2, r2 = time.monotonic() - t, len(proxy.requests)
        print(
            f"s3 ({delay_ms} ms a request): {len(first.rows)} checkpoints, {len(names)} files; fetching them 64 at "
            f"a time {floor:.1f} s; first run {t1:.1f} s ({t1 / floor:.2f}x, {r1} requests); second {t2:.1f} s "
            f"({t2 / t1:.0%}, {r2} requests, {second.cached} rows from the cache)"
        )
    finally:
        proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", type=int, default=500, metavar="N", help="local checkpoints (0: none)")
    parser.add_argument("--s3", type=int, default=40, metavar="N", help="checkpoints on moto's S3 (0: none)")
    parser.add_argument("--jobs", type=int, default=16, metavar="N")
    parser.add_argument("--delay-ms", type=int, default=25, metavar="MS")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="statelens-bench-fleet-") as tmp:
        os.environ["STATELENS_CACHE_DIR"] = str(Path(tmp) / "cache")
        if args.local:
            _local(args.local, args.jobs, Path(tmp))
        if args.s3:
            _s3(args.s3, args.jobs, args.delay_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())

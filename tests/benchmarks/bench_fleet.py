"""Benchmark: ``statelens fleet`` on many checkpoints, on demand (the tests check the rows, not the time).

    python -m tests.benchmarks.bench_fleet [--local 500] [--s3 500] [--large 2] [--jobs 16] [--delay-ms 25]
                                           [--server FILE]

``--local N``: N copies of five generated scenarios (agg_count, pandas_state_event, rocks_agg_changelog,
join, uncommitted) in 20 team folders on local disk; the first run and a second with nothing new (every
row from the cache of rows), each timed, with the process' peak RSS.

``--s3 N``: N checkpoints on moto's S3 (in the server process of :mod:`tests.benchmarks.bench_s3`, so
that its work does not share this one's GIL) behind its proxy adding ``--delay-ms`` to every request and
counting them: N - ``--large`` copies of four scenarios in 10 team folders, and ``--large`` copies of the
2M-key checkpoints of ``bench_growth`` (13,000 files each, from ``$STATELENS_BENCH_CACHE``) in ``big/``,
all in one bucket. The same files fetched 64 at a time (the floor), then the first and a second fleet
run, with the requests of each. Uploading 75,000 files to moto takes about 10 minutes: keep a server
running and pass its addresses to upload once for several runs::

    sleep infinity | nice python -m tests.benchmarks.bench_s3 --serve 25 > /tmp/s3.json &
    nice python -m tests.benchmarks.bench_fleet --local 0 --s3 500 --server /tmp/s3.json

Caches go to a temporary folder. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOCAL_KINDS = ("agg_count", "pandas_state_event", "rocks_agg_changelog", "join", "uncommitted")
S3_KINDS = ("agg_count", "pandas_state_event", "rocks_agg_changelog", "join")
BUCKET = "statelens-fleet-bench"
#: The 2M-key checkpoints of bench_growth (13,000 files each), cached beside the others.
BENCH = Path(os.environ.get("STATELENS_BENCH_CACHE", "/work/main/.cache/bench"))
LARGE = ("agg-p200-b30-k2000000", "agg-p200-b30-k2000000-rocksdb-changelog")
KEY = "AKIAFAKESTATELENSBENCH"
SECRET = "fakeSecretStatelensBenchNOTREAL0123456789"
_KEYS = {"aws_access_key_id": KEY, "aws_secret_access_key": SECRET, "region_name": "us-east-1"}


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


def _upload(endpoint: str, trees: list[tuple[str, Path]]) -> list[str]:
    """Upload each ``(prefix, folder)`` to the bucket, unless the bucket already holds the file with its
    size (a server kept from an earlier run: ``--server``); returns every key."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, **_KEYS)
    if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=BUCKET)
    held: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        held.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    files = [
        (f"{prefix}/{p.relative_to(src).as_posix()}", p)
        for prefix, src in trees
        for p in sorted(src.rglob("*"))
        if p.is_file()
    ]
    missing = [(k, p) for k, p in files if held.get(k) != p.stat().st_size]

    def put(item: tuple[str, Path]) -> None:
        client.put_object(Bucket=BUCKET, Key=item[0], Body=item[1].read_bytes())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, missing))
    return [k for k, _ in files]


def _s3(n: int, large: int, jobs: int, delay_ms: int, server: Path | None) -> None:
    import boto3
    from botocore.config import Config

    from statelens.app.analysis.fleet import fleet
    from tests.benchmarks.bench_s3 import REPO, request_counts
    from tests.spark_checkpoints import get_checkpoint

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    proc = None
    if server is not None:
        addresses = json.loads(server.read_text().splitlines()[0])
    else:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.bench_s3", "--serve", str(delay_ms)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.stdout is not None
        addresses = json.loads(proc.stdout.readline())
    try:
        trees = [
            (f"prod/team{i % 10}/job{i}", get_checkpoint(S3_KINDS[i % len(S3_KINDS)]) / "checkpoint")
            for i in range(n - large)
        ]
        trees += [(f"prod/big/job{j}", BENCH / LARGE[j % len(LARGE)]) for j in range(large)]
        t = time.monotonic()
        names = _upload(addresses["moto"], trees)
        print(
            f"uploaded (or found uploaded) {len(names):,} files in {time.monotonic() - t:.0f} s", flush=True
        )
        proxy = addresses["proxies"][str(delay_ms)]
        via = boto3.client("s3", endpoint_url=proxy, config=Config(max_pool_connections=64), **_KEYS)
        request_counts(addresses, delay_ms)
        t = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(lambda k: via.get_object(Bucket=BUCKET, Key=k)["Body"].read(), names))
        floor = time.monotonic() - t
        r0 = request_counts(addresses, delay_ms)
        print(f"floor: {len(names):,} files 64 at a time {floor:.1f} s {r0}", flush=True)
        options = {
            "key": KEY,
            "secret": SECRET,
            "client_kwargs": {"endpoint_url": proxy, "region_name": "us-east-1"},
        }
        t = time.monotonic()
        first = fleet(f"s3://{BUCKET}/prod", options, jobs=jobs)
        t1, r1 = time.monotonic() - t, request_counts(addresses, delay_ms)
        print(f"first run {t1:.1f} s ({t1 / floor:.2f}x the floor) {r1}", flush=True)
        t = time.monotonic()
        second = fleet(f"s3://{BUCKET}/prod", options, jobs=jobs)
        t2, r2 = time.monotonic() - t, request_counts(addresses, delay_ms)
        print(f"second run {t2:.1f} s ({t2 / t1:.1%} of the first) {r2}", flush=True)
        # the same second run listing prefix by prefix (each folder, then each checkpoint's own listing),
        # as a fleet did before folders were listed whole
        from statelens.readers.fs import CheckpointFS

        whole = CheckpointFS.list_tree
        CheckpointFS.list_tree = lambda self, *a, **k: (None, 0)  # type: ignore[method-assign]
        try:
            t = time.monotonic()
            by_prefix = fleet(f"s3://{BUCKET}/prod", options, jobs=jobs)
            t3, r3 = time.monotonic() - t, request_counts(addresses, delay_ms)
        finally:
            CheckpointFS.list_tree = whole  # type: ignore[method-assign]
        print(
            f"second run prefix by prefix {t3:.1f} s ({t3 / t1:.1%} of the first) {r3}, "
            f"{by_prefix.cached} rows from the cache",
            flush=True,
        )
        errors = sum(1 for r in first.rows if r.error is not None)
        print(
            f"s3 ({delay_ms} ms a request): {len(first.rows)} checkpoints ({large} large, {errors} errors), "
            f"{len(names):,} files; fetching them 64 at a time {floor:.1f} s; first run {t1:.1f} s "
            f"({t1 / floor:.2f}x, {sum(r1.values())} requests); second {t2:.1f} s ({t2 / t1:.1%}, "
            f"{sum(r2.values())} requests {r2}, {second.cached} rows from the cache)"
        )
    finally:
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", type=int, default=500, metavar="N", help="local checkpoints (0: none)")
    parser.add_argument("--s3", type=int, default=500, metavar="N", help="checkpoints on moto's S3 (0: none)")
    parser.add_argument("--jobs", type=int, default=16, metavar="N")
    parser.add_argument("--delay-ms", type=int, default=25, metavar="MS")
    parser.add_argument(
        "--large", type=int, default=2, metavar="N", help="of the S3 ones, 2M-key checkpoints"
    )
    parser.add_argument(
        "--server",
        type=Path,
        metavar="FILE",
        help="use the running server whose addresses FILE holds (bench_s3 --serve's line) instead of one's own",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="statelens-bench-fleet-") as tmp:
        os.environ["STATELENS_CACHE_DIR"] = str(Path(tmp) / "cache")
        if args.local:
            _local(args.local, args.jobs, Path(tmp))
        if args.s3:
            _s3(args.s3, args.large, args.jobs, args.delay_ms, args.server)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: commands on a checkpoint on S3 with latency, against fetching its state files 64 at a time.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_s3 [--delays 25,80] [--keys 2000000] [--partitions 200] [--batches 32]
                                        [--checkpoint DIR] [--sequential] [--json OUT]

A server process runs moto's S3 server on loopback with one proxy per delay in front of it, each
adding that many milliseconds to every request (the round trip of S3 from a laptop, over a VPN). The
checkpoint (``--checkpoint``, else the aggregation of :mod:`tests.benchmarks.bench_growth` at
``--keys``/``--partitions``/``--batches``, built once and cached) is uploaded once. Then, per delay,
in one run:

* ``anchor``: one listing, then every state file (``<v>.delta``/``<v>.snapshot``, zips and changelogs)
  fetched with s3fs ``cat``, 64 requests at a time, through the same proxy: what a copy costs (the
  listing's share is printed too: every command lists once, and moto lists slowly);
* ``info``, ``growth --json``, ``rows --format parquet -o`` (the latest version of operator 0) and
  ``sql`` (a count over the ``state`` table), each a fresh ``statelens`` process reading through the
  proxy with an empty cache and no mirror;
* ``growth (mirror, 2nd run)``: ``growth`` twice with the mirror on, the second timed;
* ``growth (1 request at a time)`` with ``--sequential``: the read ahead limited to one request, which
  is how state files were read before they were read ahead (slow: one delay per file).

Every command is timed on the local copy as well, so the time storage adds (remote minus local) is
printed beside the total. Ratios to the anchor of the same delay are printed; no timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KEY = "AKIAFAKESTATELENSBENCH"
SECRET = "fakeSecretStatelensBenchNOTREAL0123456789"
BUCKET = "statelens-bench"
PREFIX = "ckpt"


# -- the server process --------------------------------------------------------------------------------
def serve(delays_ms: list[int]) -> None:
    """moto plus one delaying proxy per delay; prints their addresses as one JSON line, runs until stdin
    closes."""
    import threading
    import urllib.parse

    from moto.server import ThreadedMotoServer

    from tests.test_fs_s3 import Fault, FaultProxy

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    parsed = urllib.parse.urlparse(endpoint)
    proxies: dict[str, str] = {}
    FaultProxy.request_queue_size = 256  # 64 connections at once overflow socketserver's backlog of 5
    for delay in delays_ms:
        proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 80))
        proxy.inject(Fault("/", "delay", times=-1, seconds=delay / 1000))
        proxy.inject(
            *(Fault("/", "delay", times=-1, seconds=delay / 1000, method=m) for m in ("HEAD", "PUT"))
        )
        proxy.requests = _Discard()  # type: ignore[assignment]  # no log of millions of requests
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        proxies[str(delay)] = proxy.url
    sys.stdout.write(json.dumps({"moto": endpoint, "proxies": proxies}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()
    server.stop()


class _Discard(list):  # type: ignore[type-arg]
    def append(self, _: Any) -> None:
        pass


# -- helpers -------------------------------------------------------------------------------------------
def upload(endpoint: str, ckpt: Path) -> str:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    files = [p for p in sorted(ckpt.rglob("*")) if p.is_file()]

    def put(p: Path) -> None:
        client.put_object(
            Bucket=BUCKET, Key=f"{PREFIX}/{p.relative_to(ckpt).as_posix()}", Body=p.read_bytes()
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, files))
    return f"s3://{BUCKET}/{PREFIX}"


def is_state_file(name: str) -> bool:
    stem, _, ext = name.rpartition(".")
    return ext in ("delta", "snapshot", "zip", "changelog") and stem.split("_")[0].isdigit()


def anchor(url: str, endpoint: str) -> dict[str, Any]:
    """One listing, then every state file fetched 64 at a time with s3fs ``cat``."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=KEY,
        secret=SECRET,
        client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
        config_kwargs={"max_pool_connections": 64},
        skip_instance_cache=True,
    )
    started = time.perf_counter()
    paths = [p for p in fs.find(url) if is_state_file(p.rpartition("/")[2])]
    listed = time.perf_counter() - started
    got = fs.cat(paths, batch_size=64)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "listing_seconds": listed,
        "files": len(got),
        "bytes": sum(len(v) for v in got.values()),
    }


def run_cli(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "statelens.app.cli", *argv],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"statelens {' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def cli_env(endpoint: str, cache: str, mirror: bool, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "STATELENS_CACHE_DIR": cache,
            "STATELENS_MIRROR": "1" if mirror else "0",
            "PYTHONPATH": str(REPO),
        }
    )
    env.update(extra or {})
    return env


COMMANDS: dict[str, list[str]] = {
    "info": ["info", "{url}"],
    "growth": ["growth", "{url}", "--json"],
    "rows -o parquet": ["rows", "{url}", "--operator", "0", "--format", "parquet", "-o", "{out}"],
    "sql": ["sql", "{url}", "SELECT count(*) AS n, sum(length(CAST(key AS VARCHAR))) FROM state"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="25,80", help="milliseconds added per request, comma-separated")
    ap.add_argument("--checkpoint", type=Path, help="a local checkpoint to upload (default: bench_growth's)")
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--sequential", action="store_true", help="also growth with one request at a time")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    if args.checkpoint is not None:
        ckpt = args.checkpoint
    else:
        from tests.benchmarks.bench_growth import build_checkpoint

        ckpt = build_checkpoint(args.partitions, args.batches, args.keys)
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    state = [p for p in files if is_state_file(p.name)]
    print(
        f"checkpoint {ckpt}: {len(files):,} files, {sum(p.stat().st_size for p in files) / 2**20:.1f} MB; "
        f"{len(state):,} state files, {sum(p.stat().st_size for p in state) / 2**20:.1f} MB"
    )
    delays = [int(d) for d in args.delays.split(",")]
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.benchmarks.bench_s3", "--serve", ",".join(map(str, delays))],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    results: dict[str, Any] = {"checkpoint": str(ckpt), "files": len(files), "state_files": len(state)}
    try:
        assert server.stdout is not None
        addresses = json.loads(server.stdout.readline())
        started = time.perf_counter()
        url = upload(addresses["moto"], ckpt)
        print(f"uploaded in {time.perf_counter() - started:.1f} s")
        with tempfile.TemporaryDirectory(prefix="statelens-bench-s3-") as tmp:
            here: dict[str, float] = {}
            for name, template in COMMANDS.items():
                cmd = [a.format(url=str(ckpt), out=f"{tmp}/rows-local.parquet") for a in template]
                here[name] = run_cli(cmd, cli_env("", f"{tmp}/local-{len(here)}", False))
            results["local"] = here
            local = here["growth"]
            print("\nlocal disk: " + ", ".join(f"{name} {s:.2f} s" for name, s in here.items()))
            for delay in delays:
                endpoint = addresses["proxies"][str(delay)]
                row: dict[str, Any] = {"anchor": anchor(url, endpoint)}
                base = row["anchor"]["seconds"]
                print(
                    f"\n+{delay} ms a request: anchor (listing + {row['anchor']['files']:,} state files, 64 at a "
                    f"time) {base:.2f} s, of which the listing {row['anchor']['listing_seconds']:.2f} s"
                )
                for name, template in COMMANDS.items():
                    cmd = [a.format(url=url, out=f"{tmp}/rows-{delay}.parquet") for a in template]
                    seconds = run_cli(cmd, cli_env(endpoint, f"{tmp}/c-{delay}-{len(row)}", False))
                    row[name] = seconds
                    print(
                        f"  {name:<28} {seconds:7.2f} s   {seconds / base:5.2f}x the anchor; over local disk "
                        f"{seconds - here[name]:6.2f} s = {(seconds - here[name]) / base:5.2f}x the anchor"
                    )
                cache = f"{tmp}/mirror-{delay}"
                run_cli(["growth", url, "--json"], cli_env(endpoint, cache, True))
                seconds = run_cli(["growth", url, "--json"], cli_env(endpoint, cache, True))
                row["growth (mirror, 2nd run)"] = seconds
                print(
                    f"  {'growth (mirror, 2nd run)':<28} {seconds:7.2f} s   {seconds / base:5.2f}x the anchor, "
                    f"{seconds / local:5.2f}x local disk"
                )
                if args.sequential:
                    seconds = run_cli(
                        ["growth", url, "--json"],
                        cli_env(endpoint, f"{tmp}/seq-{delay}", False, {"STATELENS_REMOTE_REQUESTS": "1"}),
                    )
                    row["growth (1 request at a time)"] = seconds
                    print(
                        f"  {'growth (1 request at a time)':<28} {seconds:7.2f} s   {seconds / base:5.2f}x the anchor"
                    )
                results[f"+{delay}ms"] = row
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(30)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve([int(d) for d in sys.argv[2].split(",")])
    else:
        sys.exit(main())

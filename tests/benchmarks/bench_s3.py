"""Benchmark: commands and the app on a checkpoint on S3 with latency, against fetching its state files 64 at a time.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_s3 [--delays 25,80] [--keys 2000000] [--partitions 200] [--batches 32]
                                        [--checkpoint DIR] [--server FILE] [--sequential] [--no-app]
                                        [--json OUT]

A server process runs moto's S3 server on loopback with one proxy per delay in front of it, each
adding that many milliseconds to every request (the round trip of S3 from a laptop, over a VPN), and
counting the requests it forwards. The checkpoint (``--checkpoint``, else the aggregation of
:mod:`tests.benchmarks.bench_growth` at ``--keys``/``--partitions``/``--batches``, built once and
cached) is uploaded once, to a bucket named after its folder. Uploading 13,000 files to moto takes
minutes; to upload once for several runs, keep a server running and pass its addresses::

    sleep infinity | python -m tests.benchmarks.bench_s3 --serve 25,80 > /tmp/s3.json &
    python -m tests.benchmarks.bench_s3 --server /tmp/s3.json --checkpoint DIR

Then, per delay, in one run:

* ``anchor``: one listing, then every state file (``<v>.delta``/``<v>.snapshot``, zips and changelogs)
  fetched with s3fs ``cat``, 64 requests at a time, through the same proxy: what a copy costs (the
  listing's share is printed too: every command lists once, and moto lists slowly);
* ``info``, ``growth --json``, ``rows --format parquet -o`` (the latest version of operator 0) and
  ``sql`` (a count over the ``state`` table), each a fresh ``statelens`` process reading through the
  proxy with an empty cache and no mirror;
* the app's ``overview`` (until all its verdicts are drawn; ``overview first verdicts``: until the
  first ones, from each store's latest version, are) and ``growth view`` (until the growth chart is
  drawn), each a fresh ``statelens gui URL --screenshot --view V`` (timed as ``bench_app`` times it),
  empty cache, no mirror;
* ``<command> (mirror, 1st run)`` and ``(mirror, 2nd run)``: every command run twice with the mirror on
  (the default), both timed (a new decoded-state cache each time, so the second reads the mirror's
  files). The commands share one mirror, in the order above: ``info`` and ``growth`` start from an
  empty one, ``rows`` and ``sql`` find most files there already; the overview the same way with a
  mirror of its own, empty at first (what the app does on a first open);
* ``growth (1 request at a time)`` with ``--sequential``: the read ahead limited to one request, which
  is how state files were read before they were read ahead (slow: one delay per file).

Every command and view is timed on the local copy as well. Ratios to the anchor of the same delay and to
the local copy are printed, with the requests the proxy saw for each (``list``, ``get``, ``head``);
no timing is asserted. moto answers from one Python process, as does the proxy: with 64 requests in
flight they, not the delay, bound the anchor (200-300 small files a second on 2 cores shared with other
work, where real S3 would take about 6,400 x 25 ms / 64 = 2.5 s plus the transfer), and moto lists
slowly (0.3-0.5 s a page of 1,000 keys: 4-6 s for a 13,000-file checkpoint, paid once by every
command, the mirror's second runs included).
"""

from __future__ import annotations

import argparse
import functools
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
    """moto plus one delaying proxy per delay and a request counter; prints their addresses as one JSON
    line, runs until stdin closes.

    ``GET /counts`` on the counter's address answers the requests each proxy has seen since the last
    ``GET /counts?reset=1``, by method and kind (``list``, ``get``, ``head``, ...).
    """
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from moto.server import ThreadedMotoServer

    from tests.test_fs_s3 import Fault, FaultProxy

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    parsed = urllib.parse.urlparse(endpoint)
    proxies: dict[str, str] = {}
    tallies: dict[str, _Tally] = {}
    FaultProxy.request_queue_size = 256  # 64 connections at once overflow socketserver's backlog of 5
    for delay in delays_ms:
        proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 80))
        proxy.inject(Fault("/", "delay", times=-1, seconds=delay / 1000))
        proxy.inject(
            *(Fault("/", "delay", times=-1, seconds=delay / 1000, method=m) for m in ("HEAD", "PUT"))
        )
        tallies[str(delay)] = proxy.requests = _Tally()  # type: ignore[assignment]  # counts, no log
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        proxies[str(delay)] = proxy.url

    class Counts(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802  (BaseHTTPRequestHandler's name)
            data = json.dumps({d: t.snapshot("reset=1" in self.path) for d, t in tallies.items()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    counter = ThreadingHTTPServer(("127.0.0.1", 0), Counts)
    threading.Thread(target=counter.serve_forever, daemon=True).start()
    counts = f"http://127.0.0.1:{counter.server_address[1]}/counts"
    sys.stdout.write(json.dumps({"moto": endpoint, "proxies": proxies, "counts": counts}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()
    server.stop()


class _Tally(list):  # type: ignore[type-arg]
    """Stands in for a proxy's request log: counts requests by method and kind instead of keeping them."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def append(self, request: Any) -> None:
        method, path, _ = request
        query = path.partition("?")[2]
        if method == "GET" and ("list-type" in query or "prefix=" in query or "delimiter=" in query):
            kind = "list"
        elif method == "GET" and "/" not in path.partition("?")[0].strip("/"):
            kind = "bucket"
        else:
            kind = method.lower()
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def snapshot(self, reset: bool) -> dict[str, int]:
        with self.lock:
            out = dict(self.counts)
            if reset:
                self.counts.clear()
        return out


def request_counts(addresses: dict[str, Any], delay: int, reset: bool = True) -> dict[str, int]:
    """The requests the proxy of ``delay`` has seen since the last reset (and reset them)."""
    import urllib.request

    with urllib.request.urlopen(addresses["counts"] + ("?reset=1" if reset else "")) as resp:
        counts: dict[str, int] = json.loads(resp.read())[str(delay)]
    return counts


# -- helpers -------------------------------------------------------------------------------------------
def upload(endpoint: str, ckpt: Path) -> str:
    """Upload ``ckpt`` to a bucket of its own named after its folder (moto lists a prefix by going
    through every key of the bucket: other checkpoints in it would slow every listing), unless the
    bucket already holds every file with its size (a server kept from an earlier run: ``--server``);
    returns the checkpoint's URL."""
    import re

    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    name = ckpt.parent.name if ckpt.name == "checkpoint" else ckpt.name
    bucket = re.sub(r"[^a-z0-9-]+", "-", f"{BUCKET}-{name}".lower())[:63].strip("-")
    prefix = PREFIX
    url = f"s3://{bucket}/{prefix}"
    if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=bucket)
    held: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        held.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    files = [p for p in sorted(ckpt.rglob("*")) if p.is_file()]
    missing = [p for p in files if held.get(f"{prefix}/{p.relative_to(ckpt).as_posix()}") != p.stat().st_size]

    def put(p: Path) -> None:
        client.put_object(
            Bucket=bucket, Key=f"{prefix}/{p.relative_to(ckpt).as_posix()}", Body=p.read_bytes()
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, missing))
    return url


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


#: The app's views timed (each a fresh ``statelens gui URL --screenshot --view V``).
VIEWS = {"overview": "overview", "growth view": "growth"}
#: The overview until its first verdicts (from each store's latest version) are drawn.
FIRST = "overview first verdicts"


def fmt_counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


def record(
    row: dict[str, Any],
    counts: dict[str, dict[str, int]],
    addresses: dict[str, Any],
    delay: int,
    name: str,
    seconds: float,
    local: float | None,
    requests: bool = True,
) -> None:
    """Keep and print one timing of the ``delay`` run, with the requests its proxy saw for it (without
    ``requests``: a moment of the run timed just before, whose requests it counted)."""
    base = row["anchor"]["seconds"]
    row[name] = seconds
    if requests:
        counts[name] = request_counts(addresses, delay)
    versus = f"{seconds / local:5.2f}x local disk" if local else ""
    print(
        f"  {name:<30} {seconds:7.2f} s   {seconds / base:5.2f}x the anchor  {versus:<17} "
        f"[{fmt_counts(counts[name]) if requests else 'the run above'}]",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    from tests.benchmarks.bench_app import app_start, compile_package

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="25,80", help="milliseconds added per request, comma-separated")
    ap.add_argument("--checkpoint", type=Path, help="a local checkpoint to upload (default: bench_growth's)")
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument(
        "--server",
        type=Path,
        metavar="FILE",
        help="use the running server whose addresses FILE holds (the line --serve prints) instead of "
        "starting one; a checkpoint it already holds is not uploaded again",
    )
    ap.add_argument("--sequential", action="store_true", help="also growth with one request at a time")
    ap.add_argument("--no-app", action="store_true", help="skip the app's views")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    if args.checkpoint is not None:
        ckpt = args.checkpoint
    else:
        from tests.benchmarks.bench_growth import build_checkpoint

        ckpt = build_checkpoint(args.partitions, args.batches, args.keys)
    compile_package()
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    state = [p for p in files if is_state_file(p.name)]
    print(
        f"checkpoint {ckpt}: {len(files):,} files, {sum(p.stat().st_size for p in files) / 2**20:.1f} MB; "
        f"{len(state):,} state files, {sum(p.stat().st_size for p in state) / 2**20:.1f} MB"
    )
    print("load: " + subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    delays = [int(d) for d in args.delays.split(",")]
    server = None
    if args.server is not None:
        addresses = json.loads(args.server.read_text().splitlines()[0])
    else:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.bench_s3", "--serve", ",".join(map(str, delays))],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert server.stdout is not None
        addresses = json.loads(server.stdout.readline())
    results: dict[str, Any] = {"checkpoint": str(ckpt), "files": len(files), "state_files": len(state)}
    try:
        started = time.perf_counter()
        url = upload(addresses["moto"], ckpt)
        print(f"uploaded (or found uploaded) in {time.perf_counter() - started:.1f} s")
        with tempfile.TemporaryDirectory(prefix="statelens-bench-s3-") as tmp:
            here: dict[str, float] = {}
            for name, template in COMMANDS.items():
                cmd = [a.format(url=str(ckpt), out=f"{tmp}/rows-local.parquet") for a in template]
                here[name] = run_cli(cmd, cli_env("", f"{tmp}/local-{len(here)}", False))
            if not args.no_app:
                for name, view in VIEWS.items():
                    start = app_start(ckpt, view, f"{tmp}/local-{len(here)}")
                    here[name] = start["seconds"]
                    if view == "overview":
                        here[FIRST] = start["first_seconds"]
            results["local"] = here
            print("\nlocal disk: " + ", ".join(f"{name} {s:.2f} s" for name, s in here.items()), flush=True)
            for delay in delays:
                endpoint = addresses["proxies"][str(delay)]
                request_counts(addresses, delay)
                row: dict[str, Any] = {"anchor": anchor(url, endpoint)}
                counts: dict[str, dict[str, int]] = {"anchor": request_counts(addresses, delay)}
                base = row["anchor"]["seconds"]
                print(
                    f"\n+{delay} ms a request: anchor (listing + {row['anchor']['files']:,} state files, 64 at a "
                    f"time) {base:.2f} s, of which the listing {row['anchor']['listing_seconds']:.2f} s "
                    f"[{fmt_counts(counts['anchor'])}]"
                )

                report = functools.partial(record, row, counts, addresses, delay)

                for name, template in COMMANDS.items():
                    cmd = [a.format(url=url, out=f"{tmp}/rows-{delay}.parquet") for a in template]
                    env = cli_env(endpoint, f"{tmp}/c-{delay}-{len(row)}", False)
                    report(name, run_cli(cmd, env), here[name])
                if not args.no_app:
                    for name, view in VIEWS.items():
                        env = cli_env(endpoint, f"{tmp}/c-{delay}-{len(row)}", False)
                        start = app_start(url, view, env["STATELENS_CACHE_DIR"], env)
                        report(name, start["seconds"], here[name])
                        if view == "overview":
                            report(FIRST, start["first_seconds"], here[FIRST], requests=False)
                # the mirror: each command run twice with it on (a new decoded-state cache each time, so
                # the second run reads the mirror's files, not decoded state), both timed
                mirror = {"STATELENS_MIRROR_DIR": f"{tmp}/mirror-{delay}"}
                for name, template in COMMANDS.items():
                    cmd = [a.format(url=url, out=f"{tmp}/rows-{delay}.parquet") for a in template]
                    for run in ("1st", "2nd"):
                        env = cli_env(endpoint, f"{tmp}/m{run}-{delay}-{len(row)}", True, mirror)
                        report(f"{name} (mirror, {run} run)", run_cli(cmd, env), here[name])
                if not args.no_app:  # the overview's own mirror, empty at first (the app's default)
                    mirror = {"STATELENS_MIRROR_DIR": f"{tmp}/mirror-app-{delay}"}
                    for run in ("1st", "2nd"):
                        env = cli_env(endpoint, f"{tmp}/a{run}-{delay}-{len(row)}", True, mirror)
                        start = app_start(url, "overview", env["STATELENS_CACHE_DIR"], env)
                        report(f"overview (mirror, {run} run)", start["seconds"], here["overview"])
                        report(f"{FIRST} (mirror, {run} run)", start["first_seconds"], here[FIRST], False)
                if args.sequential:
                    seconds = run_cli(
                        ["growth", url, "--json"],
                        cli_env(endpoint, f"{tmp}/seq-{delay}", False, {"STATELENS_REMOTE_REQUESTS": "1"}),
                    )
                    report("growth (1 request at a time)", seconds, here["growth"])
                row["requests"] = counts
                results[f"+{delay}ms"] = row
    finally:
        if server is not None:
            if server.stdin is not None:
                server.stdin.close()
            server.wait(30)
    print("load: " + subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve([int(d) for d in sys.argv[2].split(",")])
    else:
        sys.exit(main())

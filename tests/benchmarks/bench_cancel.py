"""Benchmark: how fast a cancel stops a storage read, on demand (the tests check that it stops, not when).

    python -m tests.benchmarks.bench_cancel [--repeat 5] [--gui]

A real generated checkpoint (``agg_count``) is uploaded to moto's S3 server on loopback, read through the
fault-injecting proxy of ``tests/test_fs_s3.py``. For each case the cancel event is set once the read is
where the case wants it (its request held on the proxy's gate, or waiting to retry), and the time from
the event to the read's return is measured: a request in flight, a 30 s backoff, a batch of reads
(``read_many``), the listing. The figure is also given in polls of the storage layer
(``readers.fs.POLL_S``), the interval a waiting read looks at its cancel flag. ``--gui`` also runs
``tests/_close_probe.py`` (the desktop app closed while its own Spark session starts, then during a
Spark job) and prints how long each close took.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _setup() -> tuple[Any, Any, str]:
    """moto on loopback, the checkpoint uploaded, the fault proxy in front: ``(moto, proxy, url)``."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.spark_checkpoints import get_checkpoint
    from tests.test_fs_s3 import ACCESS_KEY, BUCKET, PREFIX, SECRET_KEY, FaultProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    local = get_checkpoint("agg_count") / "checkpoint"
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    for p in sorted(local.rglob("*")):
        if p.is_file():
            client.put_object(
                Bucket=BUCKET, Key=f"{PREFIX}/{p.relative_to(local).as_posix()}", Body=p.read_bytes()
            )
    parsed = urllib.parse.urlparse(endpoint)
    proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 80))
    threading.Thread(target=proxy.serve_forever, name="fault-proxy", daemon=True).start()
    return moto, proxy, f"s3://{BUCKET}/{PREFIX}"


def _timed(run: Callable[[Any], None], cancel: Any) -> float:
    """Seconds from the cancel event to ``run`` returning (it must raise or return on the cancel)."""
    run(cancel)
    cancel.join()
    return time.monotonic() - cancel.set_at


def measure(proxy: Any, url: str, repeat: int) -> dict[str, list[float]]:
    from statelens.readers.errors import StatelensError
    from statelens.readers.fs import CheckpointFS, RetryPolicy
    from tests.test_fs_s3 import BUCKET, PREFIX, CancelWhen, Fault, options

    def stalled_read(cancel: Any) -> None:
        fs = CheckpointFS(url, options(proxy.url))
        proxy.inject(Fault(f"{PREFIX}/offsets/0", "stall", times=-1, seconds=60))
        try:
            fs.read_bytes("offsets/0", cancelled=cancel.event)
        except StatelensError:
            return
        raise AssertionError("the stalled read was not cancelled")

    def backoff(cancel: Any) -> None:
        fs = CheckpointFS(
            url, options(proxy.url), retry=RetryPolicy(attempts=5, first_delay_s=30, max_delay_s=30)
        )
        proxy.inject(Fault(f"{PREFIX}/metadata", "503", times=-1))
        state["fs"] = fs
        try:
            fs.read_bytes("metadata", cancelled=cancel.event)
        except StatelensError:
            return
        raise AssertionError("the backoff was not cancelled")

    def batch(cancel: Any) -> None:
        fs = CheckpointFS(url, options(proxy.url))
        paths = [e.path for e in fs.walk_files()]
        proxy.inject(Fault(f"{PREFIX}/state/", "stall", times=-1, seconds=60))
        fs.read_many(paths, cancelled=cancel.event.is_set)

    def listing(cancel: Any) -> None:
        proxy.inject(Fault(f"/{BUCKET}", "stall", times=-1, seconds=60))
        try:
            CheckpointFS(url, options(proxy.url), cancelled=cancel.event)
        except StatelensError:
            return
        raise AssertionError("the listing was not cancelled")

    state: dict[str, Any] = {}
    cases: dict[str, tuple[Callable[[Any], None], Callable[[], bool]]] = {
        "request in flight": (stalled_read, lambda: proxy.held() > 0),
        "30 s backoff": (backoff, lambda: "fs" in state and state["fs"].stats["retries"] > 0),
        "batch of reads": (batch, lambda: proxy.held() > 0),
        "listing": (listing, lambda: proxy.held() > 0),
    }
    out: dict[str, list[float]] = {}
    for name, (run, ready) in cases.items():
        out[name] = []
        for _ in range(repeat):
            state.clear()
            proxy.release.clear()
            proxy.reset()
            out[name].append(_timed(run, CancelWhen(ready)))
            proxy.release.set()  # answer what is still held, then start the next round clean
            while proxy.held():
                time.sleep(0.01)
    return out


def close_probe() -> dict[str, Any]:
    from tests.spark_checkpoints import get_checkpoint

    path = get_checkpoint("agg_count") / "checkpoint"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests._close_probe", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    report: dict[str, Any] = json.loads(
        [line for line in proc.stdout.splitlines() if line.startswith("{")][-1]
    )
    return report


def main(argv: list[str] | None = None) -> None:
    from statelens.readers.fs import POLL_S

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--gui", action="store_true", help="also time the app's close (starts a JVM)")
    args = parser.parse_args(argv)
    moto, proxy, url = _setup()
    try:
        figures = measure(proxy, url, args.repeat)
    finally:
        proxy.release.set()
        proxy.shutdown()
        proxy.server_close()
        moto.stop()
    print(f"cancel to return, {args.repeat} runs each (poll interval {POLL_S * 1000:.0f} ms):")
    for name, seconds in figures.items():
        med, worst = statistics.median(seconds), max(seconds)
        print(
            f"  {name:18s} median {med * 1000:6.0f} ms ({med / POLL_S:4.1f} polls), max {worst * 1000:6.0f} ms"
        )
    if args.gui:
        report = close_probe()
        for phase in ("while_starting", "during_job"):
            print(f"  app close {phase:14s} {report[phase]['close_seconds']:.2f} s")


if __name__ == "__main__":
    main()

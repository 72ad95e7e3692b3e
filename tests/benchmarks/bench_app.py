"""Benchmark: the desktop app and the state browser on the 2M-key checkpoint of ``bench_growth`` (on demand).

    python -m tests.benchmarks.bench_app [--partitions 200] [--batches 32] [--keys 2000000]
        [--key-style fixed|variable] [--provider hdfs|rocksdb-changelog|rocksdb] [--pattern new|spread]

(``--key-style``, ``--provider`` and ``--pattern`` pick a variant of the checkpoint: see ``bench_growth``; run once per
variant to compare a RocksDB store with its HDFS twin.)

Measured in one run, each app start in a fresh process (``statelens gui CKPT --screenshot --view V``, which
returns once the view's data is drawn), wall time and peak RSS, the median of ``--starts`` starts (3; this
2-core machine varies by a second from one start to the next), statelens' modules compiled to bytecode
first as an install does (the machine sets ``PYTHONDONTWRITEBYTECODE``, so an edited module would
otherwise be compiled at every start):

* the growth view, drawn;
* the state browser, drawn, with an empty decoded-state cache (cold) and again with it filled (warm);
* the browser's paged path (versions over ``PAGED_ROWS`` rows, the app's default for them): the cached
  version opened as a DuckDB query table, then sorting by a number, by the key text, and filtering
  every column for a text (count and first page), each in a fresh process for its own peak RSS;
* the held path, for comparison: decoding the latest version into an in-memory table, then the same
  sorts and filter over numpy/Arrow, as the app did for every version before the paged path;
* the raw floor: reading every state file and decompressing every delta, snapshot and changelog.
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

from tests.benchmarks import peak_rss_kib

REPO = Path(__file__).resolve().parents[2]


def app_start(
    ckpt: Path | str, view: str, cache: Path | str, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Wall time and peak RSS of one app start until ``view`` is drawn (its screenshot saved; for the
    overview also until its first verdicts, from the latest versions' files, are drawn), and until
    the process has exited (Python and Qt tear down in ~0.5 s more); the CPU seconds (user and system,
    every thread) the process used until drawn, which a busy machine sways less than wall time.

    ``ckpt`` is a folder or a URL; ``env`` (default: this process's) is the app's environment, with
    ``STATELENS_CACHE_DIR`` set to ``cache``.
    """
    env = {
        **(os.environ if env is None else env),
        "QT_QPA_PLATFORM": "offscreen",
        "STATELENS_CACHE_DIR": str(cache),
    }
    shot = Path(tempfile.mkdtemp()) / "shot.png"
    code = (
        "import sys,time;from statelens.app.launcher import main;from tests.benchmarks import peak_rss_kib;"
        # when the overview's first verdicts (the latest versions' files) are drawn: FIRST <time>
        "from statelens.app.gui.controllers import overview as o;f=o.OverviewController._on_first_look;"
        "o.OverviewController._on_first_look=lambda self,c,s:(f(self,c,s),"
        "sys.stderr.write('FIRST %.6f\\n' % time.time()) if s is not None else None);"
        "rc=main(['gui',sys.argv[1],'--screenshot',sys.argv[2],'--view',sys.argv[3]]);"
        "import time,resource;sys.stderr.write('DRAWN %.6f\\n' % time.time());"
        "u=resource.getrusage(resource.RUSAGE_SELF);sys.stderr.write('CPU %.6f\\n' % (u.ru_utime+u.ru_stime));"
        "sys.stderr.write('RSS %d\\n' % peak_rss_kib());sys.exit(rc)"
    )
    wall = time.time()
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ckpt), str(shot), view],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    secs = time.perf_counter() - t
    rss = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("RSS ")]
    drawn = [float(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("DRAWN ")]
    cpu = [float(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("CPU ")]
    first = [float(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("FIRST ")]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("statelens: error:")]
    if proc.returncode != 0 or not shot.is_file() or not drawn or errors:
        # a view that says it failed is drawn fast: timing it would measure the error page
        raise RuntimeError(f"gui --view {view} failed: {errors[:3] or proc.stderr[-2000:]}")
    return {
        "seconds": round(drawn[-1] - wall, 2),
        "cpu_seconds": round(cpu[-1], 2) if cpu else -1.0,
        "exit_seconds": round(secs, 2),
        "peak_rss_mib": round(rss[-1] / 1024, 1) if rss else -1.0,
        # the overview's first verdicts drawn (-1 when that view was not the one asked for)
        "first_seconds": round(first[0] - wall, 2) if first else -1.0,
    }


def app_starts(ckpt: Path, view: str, starts: int, cache: Path | None = None) -> dict[str, Any]:
    """The median of ``starts`` app starts (each with a new empty cache when ``cache`` is None), and
    every start's figures."""
    import statistics

    runs = []
    for _ in range(starts):
        own = cache or Path(tempfile.mkdtemp(prefix="statelens-bench-cache-"))
        try:
            runs.append(app_start(ckpt, view, own))
        finally:
            if cache is None:
                shutil.rmtree(own, ignore_errors=True)
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
        "exit_seconds": statistics.median(r["exit_seconds"] for r in runs),
        "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
        "runs": runs,
    }


def compile_package() -> None:
    """Bytecode for statelens' modules, as ``pip install`` writes it."""
    import compileall

    for part in ("app", "readers", "viewers"):
        compileall.compile_dir(str(REPO / part), quiet=1)


def browser_work(ckpt: Path, cache: Path) -> dict[str, float]:
    from statelens.app.analysis._common import run_to_end
    from statelens.app.state_table import iter_state_table
    from statelens.readers.backends import native_backend
    from statelens.readers.cache import StateCache
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.scan import StateScan
    from statelens.viewers.tables import row_order

    c = open_checkpoint(str(ckpt))
    reader = c.store_reader(0, None)
    version = reader.latest_version()
    out: dict[str, float] = {}
    t = time.perf_counter()
    table = run_to_end(
        iter_state_table(StateScan(native_backend(c), 0, reader.store_name), version, cache=StateCache(cache))
    )
    out["decode_into_table_seconds"] = round(time.perf_counter() - t, 2)
    n = table.total_rows
    value_col = table.headers.index(next(h for h in table.headers if h.startswith("value.")))
    key_col = table.headers.index(next(h for h in table.headers if h.startswith("key.")))
    for name, col, needle in (
        ("sort_number", value_col, ""),
        ("sort_text", key_col, ""),
        ("filter", key_col, "-00123"),
    ):
        t = time.perf_counter()
        rows = row_order(table.sort_keys, table.columns, n, col, True, needle)
        out[f"{name}_seconds"] = round(time.perf_counter() - t, 2)
        out[f"{name}_rows"] = len(rows)
    out["rows"] = n
    out["peak_rss_mib"] = round(peak_rss_kib() / 1024, 1)
    return out


def paged_work(ckpt: Path, cache: Path) -> dict[str, float]:
    """The browser's path for versions over ``PAGED_ROWS``: the cached version paged by DuckDB.

    Run in a fresh process (peak RSS is this path's alone): opening the cached version as a query
    table, then each of sort by a number, sort by the key text and filter every column for a text
    (the count of matching rows plus the first page, as the app's worker asks).
    """
    from statelens.app.analysis._common import run_to_end
    from statelens.app.state_query import PAGED_ROWS
    from statelens.app.state_table import iter_state_table
    from statelens.readers.backends import native_backend
    from statelens.readers.cache import StateCache
    from statelens.readers.checkpoint import open_checkpoint
    from statelens.readers.scan import StateScan
    from statelens.viewers.tables import PAGE_ROWS

    c = open_checkpoint(str(ckpt))
    reader = c.store_reader(0, None)
    version = reader.latest_version()
    out: dict[str, float] = {}
    t = time.perf_counter()
    table = run_to_end(
        iter_state_table(
            StateScan(native_backend(c), 0, reader.store_name),
            version,
            cache=StateCache(cache),
            paged_over=min(PAGED_ROWS, 1),
        )
    )
    out["open_cached_seconds"] = round(time.perf_counter() - t, 2)
    query = table.query
    value_col = table.headers.index(next(h for h in table.headers if h.startswith("value.")))
    key_col = table.headers.index(next(h for h in table.headers if h.startswith("key.")))
    for name, col, needle in (
        ("first_page", -1, ""),
        ("sort_number", value_col, ""),
        ("sort_text", key_col, ""),
        ("filter", -1, "-00123"),
        ("filter_sorted", value_col, "-00123"),
    ):
        t = time.perf_counter()
        matching, _ = query.first_page(col, True, needle, PAGE_ROWS)
        out[f"{name}_seconds"] = round(time.perf_counter() - t, 2)
        out[f"{name}_rows"] = matching
    t = time.perf_counter()
    query.page(value_col, True, "", 20 * PAGE_ROWS, PAGE_ROWS)
    out["sorted_page_21_seconds"] = round(time.perf_counter() - t, 2)
    query.close()
    out["rows"] = table.total_rows
    out["peak_rss_mib"] = round(peak_rss_kib() / 1024, 1)
    return out


def in_fresh_process(func: str, ckpt: Path, cache: Path) -> dict[str, float]:
    """``func(ckpt, cache)`` of this module run in a new Python (its own peak RSS)."""
    code = f"import json,sys;from tests.benchmarks.bench_app import {func};print(json.dumps({func}(*map(__import__('pathlib').Path,sys.argv[1:]))))"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ckpt), str(cache)],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{func} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from tests.benchmarks.bench_growth import KEY_STYLES, PATTERNS, PROVIDERS, build_checkpoint, measure_raw

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument(
        "--key-style", choices=sorted(KEY_STYLES), default="fixed", help="keys of one width or several"
    )
    ap.add_argument("--provider", choices=PROVIDERS, default="hdfs", help="the state store the job wrote")
    ap.add_argument("--pattern", choices=PATTERNS, default="new", help="which keys each batch touches")
    ap.add_argument("--starts", type=int, default=3, help="app starts per figure (the median is reported)")
    args = ap.parse_args(argv)
    compile_package()
    ckpt = build_checkpoint(
        args.partitions, args.batches, args.keys, args.key_style, args.provider, args.pattern
    )
    cache = Path(tempfile.mkdtemp(prefix="statelens-bench-cache-"))
    try:
        result: dict[str, object] = {
            "keys": args.keys,
            "key_style": args.key_style,
            "provider": args.provider,
            "raw": measure_raw(ckpt),
        }
        # the browser first: any app start decodes the selected version, and fills the cache
        result["browser_cold"] = app_starts(ckpt, "browser", args.starts)
        app_start(ckpt, "browser", cache)  # fills the cache
        result["browser_warm"] = app_starts(ckpt, "browser", args.starts, cache)
        result["growth_view"] = app_starts(ckpt, "growth", args.starts, cache)
        result["paged_work"] = in_fresh_process("paged_work", ckpt, cache)
        result["browser_work"] = in_fresh_process("browser_work", ckpt, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

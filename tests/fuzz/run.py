"""Run every fuzz harness for a while and report executions, coverage and crashes.

On demand (the test suite runs a few seconds of each, ``tests/test_fuzz.py``)::

    python -m tests.fuzz.run --seconds 600            # every target, 600 s each
    python -m tests.fuzz.run --targets codecs,records --runs 200000 --json out.json

Each harness runs in its own process (``python -m tests.fuzz.fuzz_<target>``) with libFuzzer's
``-rss_limit_mb`` and ``-timeout`` (a slow input is a hang), on the committed seeds
``tests/fuzz/corpus/<target>/`` plus a working corpus (``.cache/fuzz/corpus/<target>/`` unless
``--work-dir`` says otherwise) that keeps what earlier runs found. A crashing, hanging or over-memory
input is written to ``--artifacts`` (default ``.cache/fuzz/artifacts/``); copy it to
``tests/fuzz/regressions/<target>/`` with a test named after it once the decoder is fixed.
Exit status 1 when any target crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.fuzz.targets import CORPUS

REPO = Path(__file__).resolve().parents[2]
TARGET_NAMES = (
    "codecs",
    "records",
    "unsaferow",
    "schemas",
    "logs",
    "opmeta",
    "rocksdb_zip",
    "changelog",
    "cf_rows",
    "row_checksums",
)
#: Targets fuzzed with a dictionary of tokens (libFuzzer ``-dict``): JSON inside, or zip structures.
_DICTS = {
    "schemas": "json.dict",
    "logs": "json.dict",
    "opmeta": "json.dict",
    "rocksdb_zip": "rocksdb.dict",
    "cf_rows": "json.dict",  # the key encoder spec item
}

_STAT_RE = re.compile(r"stat::(\w+):\s*(\d+)")
_STATUS_RE = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", re.M)
_ARTIFACT_RE = re.compile(r"Test unit written to (\S+)")
_PROBLEM_RE = re.compile(
    r"(Uncaught Python exception|ERROR: libFuzzer: (\S+)|ALARM: working on the last Unit)"
)


def run_target(
    name: str,
    *,
    seconds: float | None,
    runs: int | None,
    work_dir: Path,
    artifacts: Path,
    rss_limit_mb: int = 2048,
    timeout_s: int = 10,
    max_len: int = 8192,
    len_control: bool = True,
) -> dict[str, Any]:
    """Fuzz one target in a subprocess; return what happened.

    Returns
    -------
    dict
        ``target``, ``executions``, ``coverage`` (edges), ``features``, ``corpus`` (units kept),
        ``seconds``, ``crashed`` (bool), ``problem`` (libFuzzer's word for it) and ``artifact`` (the
        input's path), plus ``log_tail`` when it crashed.
    """
    new_corpus = work_dir / name
    new_corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        f"tests.fuzz.fuzz_{name}",
        str(new_corpus),
        str(CORPUS / name),
        f"-rss_limit_mb={rss_limit_mb}",
        f"-timeout={timeout_s}",
        f"-max_len={max_len}",
        f"-artifact_prefix={artifacts}/{name}-",
        "-print_final_stats=1",
    ]
    if name in _DICTS:
        cmd.append(f"-dict={Path(__file__).resolve().parent / _DICTS[name]}")
    if not len_control:
        cmd.append("-len_control=0")  # try long inputs from the start (e.g. a 5000-digit JSON number)
    if seconds is not None:
        cmd.append(f"-max_total_time={max(1, int(seconds))}")
    if runs is not None:
        cmd.append(f"-runs={runs}")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, errors="replace")
    elapsed = time.monotonic() - started
    log = proc.stderr + proc.stdout
    stats = {k: int(v) for k, v in _STAT_RE.findall(log)}
    status = _STATUS_RE.findall(log)
    executions = stats.get("number_of_executed_units") or (int(status[-1][0]) if status else 0)
    problem = _PROBLEM_RE.search(log)
    artifact = _ARTIFACT_RE.search(log)
    crashed = proc.returncode != 0 or problem is not None
    result: dict[str, Any] = {
        "target": name,
        "executions": executions,
        "coverage": int(status[-1][1]) if status else None,
        "features": int(status[-1][2]) if status else None,
        "corpus": int(status[-1][3]) if status else None,
        "seconds": round(elapsed, 1),
        "crashed": crashed,
        "problem": (problem.group(2) or problem.group(1)) if problem else None,
        "artifact": artifact.group(1) if artifact else None,
        "exit_code": proc.returncode,
    }
    if crashed:
        result["log_tail"] = log[-6000:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="time per target (default 60 s)")
    parser.add_argument("--runs", type=int, default=None, help="executions per target instead of time")
    parser.add_argument("--targets", default=",".join(TARGET_NAMES), help="comma-separated target names")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at the same time")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--max-len", type=int, default=8192)
    parser.add_argument(
        "--no-len-control", action="store_true", help="try inputs up to --max-len from the start"
    )
    parser.add_argument("--work-dir", type=Path, default=REPO / ".cache" / "fuzz" / "corpus")
    parser.add_argument("--artifacts", type=Path, default=REPO / ".cache" / "fuzz" / "artifacts")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    names = [n for n in args.targets.split(",") if n]
    unknown = sorted(set(names) - set(TARGET_NAMES))
    if unknown:
        parser.error(f"unknown targets {unknown}; targets: {', '.join(TARGET_NAMES)}")
    seconds = args.seconds if args.seconds is not None or args.runs is not None else 60.0

    def one(name: str) -> dict[str, Any]:
        result = run_target(
            name,
            seconds=seconds,
            runs=args.runs,
            work_dir=args.work_dir,
            artifacts=args.artifacts,
            rss_limit_mb=args.rss_limit_mb,
            timeout_s=args.timeout,
            max_len=args.max_len,
            len_control=not args.no_len_control,
        )
        flag = f"CRASH ({result['problem']}) -> {result['artifact']}" if result["crashed"] else "ok"
        print(
            f"{name:10s} {result['executions']:>10d} execs  cov {result['coverage']}  "
            f"corpus {result['corpus']}  {result['seconds']:>6.1f} s  {flag}",
            flush=True,
        )
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, names))
    total = sum(r["executions"] for r in results)
    crashes = [r for r in results if r["crashed"]]
    print(f"total {total} executions, {len(crashes)} crashing target(s)")
    for r in crashes:
        print(f"--- {r['target']}: {r['artifact']}\n{r['log_tail']}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps({"total_executions": total, "results": results}, indent=1) + "\n")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())

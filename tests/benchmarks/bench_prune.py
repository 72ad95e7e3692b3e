"""Benchmark: ``statelens prune`` of 1% of the keys of a 2M-key checkpoint, against copying it.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_prune [--variants agg-p200-b30-k2000000,...] [--runs 3] [--json OUT]

The checkpoints are the ones ``tests.benchmarks.bench_growth`` builds under ``.cache/bench/`` (2,000,000
keys, 200 partitions, 30 batches; fixed-width and variable-width keys; HDFS and RocksDB with changelog
checkpointing); build them first with ``python -m tests.benchmarks.bench_growth``. In one run, for each:

* ``raw``: every state file read and decompressed (the floor for reading the state once);
* ``copytree``: the checkpoint copied with ``shutil.copytree`` (the floor for any copy);
* ``prune_dry``: ``statelens prune CKPT --where "hash(key...) % 100 = 0"`` in a fresh process (choosing
  about 1% of the keys; nothing written);
* ``prune_apply``: the same with ``--out NEW --apply``: the copy, the new batch and the proof (every
  partition of the copy read back and compared with the original);
* peak resident memory of ``prune_apply``, and what it wrote: the files of the new batch only.

Best of ``--runs``. Results are ratios measured in the same run, never timed assertions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_growth import measure_raw

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / ".cache" / "bench"
VARIANTS = (
    "agg-p200-b30-k2000000",
    "agg-p200-b30-k2000000-variable",
    "agg-p200-b30-k2000000-variable-rocksdb-changelog",
)
#: About 1% of the keys (the key column of the benchmark's aggregation is ``k``).
WHERE = "hash(key.k) % 100 = 0"


def _fresh(*argv: str) -> tuple[float, float, str]:
    """``statelens <argv>`` in a fresh process: wall seconds, peak RSS (MiB) and its output."""
    code = (
        "import sys,io,resource;from statelens.app.cli import main;out=io.StringIO();sys.stdout=out;"
        "rc=main(sys.argv[1:]);sys.__stdout__.write(out.getvalue());"
        "sys.stderr.write('RSS %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss);sys.exit(rc)"
    )
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - t
    rss = int(proc.stderr.strip().splitlines()[-1].split()[1]) / 1024
    return wall, rss, proc.stdout


def measure(ckpt: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"checkpoint": ckpt.parent.name}
    out["raw_seconds"] = min(measure_raw(ckpt)["seconds"] for _ in range(runs))
    total = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    out["checkpoint_bytes"] = total
    copies = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            shutil.copytree(ckpt, Path(tmp) / "c")
            copies.append(time.perf_counter() - t)
    out["copytree_seconds"] = min(copies)
    dry = [_fresh("prune", str(ckpt), "--where", WHERE, "--json") for _ in range(runs)]
    out["prune_dry_seconds"] = min(d[0] for d in dry)
    out["prune_dry_peak_mib"] = min(d[1] for d in dry)
    applied: list[tuple[float, float, str]] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            applied.append(
                _fresh(
                    "prune", str(ckpt), "--where", WHERE, "--out", str(Path(tmp) / "c"), "--apply", "--json"
                )
            )
    best = min(applied, key=lambda a: a[0])
    doc = json.loads(best[2])
    assert doc["proof"]["ok"], doc["proof"]
    out["prune_apply_seconds"] = best[0]
    out["prune_apply_peak_mib"] = min(a[1] for a in applied)
    out["removed_rows"] = doc["removed_rows"]
    out["kept_rows"] = doc["proof"]["rows_kept_identical"]
    out["files_written"] = len(doc["written_files"])
    out["bytes_written"] = sum(w["size_bytes"] for w in doc["written_files"])
    out["files_copied"] = doc["copied_files"]
    out["apply_over_copy_plus_raw"] = out["prune_apply_seconds"] / (
        out["copytree_seconds"] + 2 * out["raw_seconds"]
    )
    out["dry_over_raw"] = out["prune_dry_seconds"] / out["raw_seconds"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    results = []
    for name in args.variants.split(","):
        ckpt = BENCH / name / "checkpoint"
        if not ckpt.is_dir():
            print(f"skip {name}: not built (python -m tests.benchmarks.bench_growth)", file=sys.stderr)
            continue
        r = measure(ckpt, args.runs)
        results.append(r)
        print(
            f"{name}: removed {r['removed_rows']:,} of {r['removed_rows'] + r['kept_rows']:,} rows; "
            f"dry run {r['prune_dry_seconds']:.2f} s ({r['dry_over_raw']:.1f}x raw {r['raw_seconds']:.2f} s, "
            f"{r['prune_dry_peak_mib']:.0f} MiB); apply {r['prune_apply_seconds']:.2f} s "
            f"({r['apply_over_copy_plus_raw']:.1f}x copytree {r['copytree_seconds']:.2f} s + 2x raw, "
            f"{r['prune_apply_peak_mib']:.0f} MiB); wrote {r['files_written']} files, {r['bytes_written']:,} bytes, "
            f"copied {r['files_copied']:,} files ({r['checkpoint_bytes'] / 2**20:.0f} MiB)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

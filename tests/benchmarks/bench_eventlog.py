"""Benchmark: reading a large Spark event log streams it (time, peak RSS), on demand.

    python -m tests.benchmarks.bench_eventlog [--mb 1024] [--codec plain|zstd]

It scales up the real event log of ``tests.eventlog_gen``'s ``plain`` variant (written by PySpark): the
log's lines are repeated, the progress events of each copy renumbered to new batch ids, until the file
reaches ``--mb`` MiB (zstd: compressed with the zstandard library in frames, as Spark writes it). Then,
in a fresh process, ``statelens timeline CKPT --json --event-log FILE`` runs and its wall time and peak
RSS are reported beside the file size and the raw read (or decompression) time of the same file.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def build(mb: int, codec: str, out: Path) -> tuple[Path, Path, int]:
    from tests.eventlog_gen import get_event_log

    folder = get_event_log("plain")
    (log,) = [p for p in (folder / "events").iterdir() if not p.name.startswith(".")]
    lines = log.read_text().splitlines()
    target = out / (f"events-{mb}mb" + (".zstd" if codec == "zstd" else ""))
    if target.exists():
        return folder / "checkpoint", target, sum(1 for _ in lines)
    writer: object
    raw = open(target, "wb")  # noqa: SIM115 - closed below
    if codec == "zstd":
        import zstandard

        writer = zstandard.ZstdCompressor(level=3).stream_writer(raw)
    else:
        writer = raw
    size = copies = 0
    limit = mb << 20
    while size < limit:
        for line in lines:
            if "QueryProgressEvent" in line:
                doc = json.loads(line)
                doc["progress"]["batchId"] += 1000 * copies
                line = json.dumps(doc)
            data = (line + "\n").encode()
            writer.write(data)  # type: ignore[attr-defined]
            size += len(data)
        copies += 1
    writer.close()  # type: ignore[attr-defined]
    if not raw.closed:
        raw.close()
    return folder / "checkpoint", target, copies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--codec", choices=("plain", "zstd"), default="plain")
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "bench")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ckpt, log, copies = build(args.mb, args.codec, args.out)
    t = time.perf_counter()
    with open(log, "rb") as f:
        if args.codec == "zstd":
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
            while reader.read(1 << 20):
                pass
        else:
            while f.read(1 << 20):
                pass
    raw_s = time.perf_counter() - t
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "statelens.app.cli", "timeline", str(ckpt), "--json", "--event-log", str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    secs = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    doc = json.loads(proc.stdout)
    result = {
        "file": str(log),
        "codec": args.codec,
        "file_mib": round(log.stat().st_size / 2**20, 1),
        "copies_of_the_real_log": copies,
        "timeline_seconds": round(secs, 2),
        "peak_rss_mib": round(peak_mib, 1),
        "raw_read_seconds": round(raw_s, 2),
        "ratio_to_raw": round(secs / raw_s, 1) if raw_s else None,
        "batches_with_progress": len(doc["event_logs"]["batches_with_progress"]),
        "exit_code": proc.returncode,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

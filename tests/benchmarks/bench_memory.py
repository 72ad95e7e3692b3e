"""Benchmark: peak memory of ``statelens growth --json``, ``expired`` and ``doctor``.

Run on demand (not collected by pytest)::

    python -m tests.benchmarks.bench_memory [--scale 10] [--checkpoints benchmark,scaled,windowed,windowed_scaled]

Each command runs in a fresh process (``python -m app.cli ...``, output to ``/dev/null``); its peak
resident memory comes from the kernel (``os.wait4`` resource usage, ``ru_maxrss``), and a sampler
reads ``VmRSS`` every 50 ms so the report also shows how resident memory evolves (quartiles of the
run): streaming through versions means it levels off instead of climbing with every version.

Checkpoints:

* the benchmark checkpoint of :mod:`tests.benchmarks.bench_growth` (written by PySpark: a
  ``groupBy(k)`` count/sum over 32 micro-batches, 2M keys, 200 partitions; built once and cached);
* a synthetic one ``--scale`` times larger (default 10x: 20M keys, the same 200 partitions and 32
  versions, so each partition's state is 10x larger). It copies the logs, schema and operator metadata
  of the real one and writes every ``<v>.delta`` itself, in the exact layout Spark writes (lz4-java
  ``LZ4Block`` frames around ``[keySize][key UnsafeRow][valueSize][value UnsafeRow]`` records,
  docs/format.md §3.2-§3.3, §6), with new keys and updates of older keys in every version like the real one.
  Built in about a minute, cached under ``.cache/bench/``.

Results are numbers and ratios for the README; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
COMMANDS: dict[str, list[str]] = {
    "info": ["info", "--json"],  # the floor: interpreter, imports, listing and logs
    "growth": ["growth", "--json"],
    "expired": ["expired", "--json"],
    "expired_all_versions": ["expired", "--all-versions", "--json"],
    "doctor": ["doctor", "--json"],
}


def _vm_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def measure(command: list[str], ckpt: Path) -> dict[str, Any]:
    """Run ``statelens <command> <ckpt>`` in a fresh process; its peak RSS, RSS quartiles and time."""
    args = [sys.executable, "-m", "statelens.app.cli", command[0], str(ckpt), *command[1:]]
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss = _vm_rss_kib(proc.pid)
            if rss is not None:
                samples.append((time.monotonic() - started, rss))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    seconds = time.monotonic() - started
    quartiles = []
    if samples:
        for q in (0.25, 0.5, 0.75, 1.0):
            upto = [rss for t, rss in samples if t <= q * seconds]
            quartiles.append(round(max(upto or [samples[0][1]]) / 1024, 1))
    return {
        "command": "statelens " + " ".join(command[:1] + ["<ckpt>"] + command[1:]),
        "exit_code": proc.returncode,
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "rss_mib_by_quarter_of_run": quartiles,
        "stderr_tail": stderr.decode(errors="replace")[-300:],
    }


# --------------------------------------------------------------------------------------------------
# a synthetic checkpoint N times larger, written in Spark's own delta layout

_LZ4_SEED = 0x9747B28C
_LZ4_BLOCK = 1 << 16  # lz4-java's default block size (token: log2(64 KiB) - 10 = 6)


def _lz4_block_stream(raw: bytes) -> bytes:
    """``LZ4BlockOutputStream`` framing (docs/format.md §3.2): 21-byte headers, LZ4 or RAW blocks, an end block."""
    import lz4.block
    import xxhash

    out = bytearray()
    for start in range(0, len(raw), _LZ4_BLOCK):
        chunk = raw[start : start + _LZ4_BLOCK]
        check = xxhash.xxh32_intdigest(chunk, _LZ4_SEED) & 0x0FFFFFFF
        packed = lz4.block.compress(chunk, store_size=False)
        method, payload = (0x20, packed) if len(packed) < len(chunk) else (0x10, chunk)
        out += b"LZ4Block" + bytes([method | 6]) + len(payload).to_bytes(4, "little")
        out += len(chunk).to_bytes(4, "little") + check.to_bytes(4, "little") + payload
    out += b"LZ4Block" + bytes([0x10 | 6]) + bytes(12)
    return bytes(out)


def _records(key_ids: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> bytes:
    """Puts of ``struct<k:string>`` -> ``struct<count:bigint,sum:bigint>`` rows, keys ``key-%09d``.

    Each record is 64 bytes: keySize 32 (BE), key row (8-byte null bitset, the string's
    ``offset << 32 | 13`` slot, 13 characters padded to 16), valueSize 24 (BE), value row (bitset, two
    little-endian int64 slots).
    """
    n = len(key_ids)
    rec = np.zeros((n, 64), dtype=np.uint8)
    rec[:, 0:4] = np.frombuffer((32).to_bytes(4, "big"), np.uint8)
    rec[:, 12:20] = np.frombuffer(((16 << 32) | 13).to_bytes(8, "little"), np.uint8)
    rec[:, 20:24] = np.frombuffer(b"key-", np.uint8)
    for d in range(9):
        rec[:, 24 + d] = (key_ids // 10 ** (8 - d)) % 10 + 48
    rec[:, 36:40] = np.frombuffer((24).to_bytes(4, "big"), np.uint8)
    rec[:, 48:56] = counts.astype("<i8").view(np.uint8).reshape(n, 8)
    rec[:, 56:64] = sums.astype("<i8").view(np.uint8).reshape(n, 8)
    return rec.tobytes()


def build_scaled_checkpoint(base: Path, scale: int, keys: int, partitions: int, batches: int) -> Path:
    """A copy of ``base`` whose state holds ``scale`` times as many keys per partition (cached)."""
    root = base.parent.parent / f"{base.parent.name}-x{scale}-synthetic"
    ckpt = root / "checkpoint"
    if (root / "done").exists():
        return ckpt
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(
        base,
        ckpt,
        ignore=lambda d, names: [
            n
            for n in names
            if n.endswith((".delta", ".snapshot")) or n.endswith((".delta.crc", ".snapshot.crc"))
        ],
    )
    rng = np.random.default_rng(7)
    new_per_version = max(1, keys * scale // batches // partitions)
    for p in range(partitions):
        folder = ckpt / "state" / "0" / str(p)
        folder.mkdir(parents=True, exist_ok=True)
        next_local = 0
        counts: dict[int, int] = {}
        for v in range(1, batches + 1):
            local = np.arange(next_local, next_local + new_per_version, dtype=np.int64)
            next_local += new_per_version
            if v > 1:  # updates of older keys of this partition, 10% of the new ones
                old = rng.integers(0, next_local - new_per_version, size=new_per_version // 10)
                local = np.concatenate([local, np.unique(old)])
            ids = local * partitions + p  # globally unique key ids, partition p owns ids = p mod P
            cnt = np.array([counts.get(int(i), 0) + 1 for i in local.tolist()], dtype=np.int64)
            counts.update(zip(local.tolist(), cnt.tolist(), strict=True))
            raw = _records(ids, cnt, cnt * (v - 1)) + b"\xff\xff\xff\xff"
            (folder / f"{v}.delta").write_bytes(_lz4_block_stream(raw))
    (root / "done").write_text(f"scale {scale}: {new_per_version} new keys per partition and version\n")
    return ckpt


def _window_records(key_ids: np.ndarray, start_us: int, end_us: int, removes: bool) -> bytes:
    """Puts (or removes) of ``struct<window:struct<start,end>,key:string>`` keys with 5-field values.

    Key row (64 bytes): bitset, ``window`` slot ``24 << 32 | 24``, ``key`` slot ``48 << 32 | 13``, the
    window row (bitset, start and end in microseconds), 13 key characters padded to 16. Value row
    (48 bytes): ``count, sum, sum, count, max`` as Spark's windowed count/sum/avg/max buffer stores them.
    """
    n = len(key_ids)
    width = 72 if removes else 120
    rec = np.zeros((n, width), dtype=np.uint8)
    rec[:, 0:4] = np.frombuffer((64).to_bytes(4, "big"), np.uint8)
    rec[:, 12:20] = np.frombuffer(((24 << 32) | 24).to_bytes(8, "little"), np.uint8)
    rec[:, 20:28] = np.frombuffer(((48 << 32) | 13).to_bytes(8, "little"), np.uint8)
    rec[:, 36:44] = np.frombuffer(start_us.to_bytes(8, "little", signed=True), np.uint8)
    rec[:, 44:52] = np.frombuffer(end_us.to_bytes(8, "little", signed=True), np.uint8)
    rec[:, 52:56] = np.frombuffer(b"key-", np.uint8)
    for d in range(9):
        rec[:, 56 + d] = (key_ids // 10 ** (8 - d)) % 10 + 48
    if removes:
        rec[:, 68:72] = 0xFF
    else:
        rec[:, 68:72] = np.frombuffer((48).to_bytes(4, "big"), np.uint8)
        ones = np.ones(n, dtype="<i8").view(np.uint8).reshape(n, 8)
        rec[:, 80:88] = ones  # count
        rec[:, 104:112] = ones  # count (avg buffer)
    return rec.tobytes()


def build_windowed_checkpoint(partitions: int, batches: int, keys: int, zombie_every: int = 100) -> Path:
    """A windowed count/sum/avg/max with a 10 s watermark, ``keys`` (window, key) rows over ``batches``.

    Logs, schema and operator metadata follow the ``window_agg_watermark`` test checkpoint (PySpark
    4.3); batch ``b`` adds the 10-second window starting at ``b * 10 s`` for its keys and removes the
    windows Spark evicts (end <= the batch's watermark), except every ``zombie_every``-th key: those
    stay behind the watermark, which ``statelens expired`` reports as eviction lag.
    """
    from tests.spark_checkpoints import get_checkpoint

    root = REPO / ".cache" / "bench" / f"window-p{partitions}-b{batches}-k{keys}-synthetic"
    ckpt = root / "checkpoint"
    if (root / "done").exists():
        return ckpt
    template = get_checkpoint("window_agg_watermark") / "checkpoint"
    shutil.rmtree(root, ignore_errors=True)
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    shutil.copy(template / "metadata", ckpt / "metadata")
    meta_line = (template / "offsets" / "0").read_text().splitlines()[1]
    meta = json.loads(meta_line)
    meta["conf"]["spark.sql.shuffle.partitions"] = str(partitions)
    t0_ms = 1_704_067_200_000  # 2024-01-01
    watermark = [max(0, t0_ms + (b - 1) * 10_000) if b >= 2 else 0 for b in range(batches + 1)]
    for b in range(batches):
        meta.update(batchWatermarkMs=watermark[b], batchTimestampMs=t0_ms + b * 10_000 + 5_000)
        (ckpt / "offsets" / str(b)).write_text(
            f'v1\n{json.dumps(meta, separators=(",", ":"))}\n{{"logOffset":{b}}}'
        )
        (ckpt / "commits" / str(b)).write_text(f'v1\n{{"nextBatchWatermarkMs":{watermark[b + 1]}}}')
    op_dir = ckpt / "state" / "0"
    (op_dir / "_metadata").mkdir(parents=True)
    (op_dir / "_metadata" / "metadata").write_text(
        'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},"stateStoreInfo":'
        f'[{{"storeName":"default","numColsPrefixKey":0,"numPartitions":{partitions}}}]}}'
    )
    per = max(1, keys // batches // partitions)
    for p in range(partitions):
        folder = op_dir / str(p)
        (folder / "_metadata").mkdir(parents=True)
        shutil.copy(template / "state" / "0" / "0" / "_metadata" / "schema", folder / "_metadata" / "schema")
        for b in range(batches):
            ids = (np.arange(per, dtype=np.int64) + b * per) * partitions + p
            start_us = (t0_ms + b * 10_000) * 1000
            raw = _window_records(ids, start_us, start_us + 10_000_000, removes=False)
            evicted = b - 2  # window end (b - 1) * 10 s <= watermark (b - 1) * 10 s
            if evicted >= 0:
                old = (np.arange(per, dtype=np.int64) + evicted * per) * partitions + p
                old = old[(old // partitions) % zombie_every != 0]
                ev_start = (t0_ms + evicted * 10_000) * 1000
                raw += _window_records(old, ev_start, ev_start + 10_000_000, removes=True)
            (folder / f"{b + 1}.delta").write_bytes(_lz4_block_stream(raw + b"\xff\xff\xff\xff"))
    (root / "done").write_text(f"{per} windows per partition and batch, 1 in {zombie_every} never evicted\n")
    return ckpt


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--scale", type=int, default=10, help="size factor of the synthetic checkpoints")
    ap.add_argument(
        "--checkpoints",
        default="benchmark,scaled",
        help="comma-separated: benchmark (PySpark), scaled (synthetic, --scale times the keys), windowed "
        "and windowed_scaled (synthetic windowed aggregation with a watermark and never-evicted windows, "
        "so expired has work)",
    )
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated: " + ", ".join(COMMANDS))
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    from tests.benchmarks.bench_growth import build_checkpoint

    builders = {
        "benchmark": lambda: build_checkpoint(args.partitions, args.batches, args.keys),
        "scaled": lambda: build_scaled_checkpoint(
            build_checkpoint(args.partitions, args.batches, args.keys),
            args.scale,
            args.keys,
            args.partitions,
            args.batches,
        ),
        "windowed": lambda: build_windowed_checkpoint(args.partitions, args.batches, args.keys),
        "windowed_scaled": lambda: build_windowed_checkpoint(
            args.partitions, args.batches, args.keys * args.scale
        ),
    }
    result: dict[str, Any] = {"runs": [], "build_seconds": {}}
    for label in args.checkpoints.split(","):
        t = time.monotonic()
        ckpt = builders[label]()
        result["build_seconds"][label] = round(time.monotonic() - t, 1)
        size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
        print(f"== {label}: {ckpt} ({size / 2**20:.0f} MiB on disk)", flush=True)
        for name in args.commands.split(","):
            run = measure(COMMANDS[name], ckpt)
            run.update(checkpoint=label, disk_mib=round(size / 2**20))
            result["runs"].append(run)
            print(
                f"{name:22s} exit {run['exit_code']}  {run['seconds']:8.1f} s  peak {run['peak_rss_mib']:7.1f} MiB"
                f"  by quarter {run['rss_mib_by_quarter_of_run']}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

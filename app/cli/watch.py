"""``statelens watch CKPT``: follow a running query's checkpoint, one line (or JSON object) per batch.

Exit codes as ``doctor``'s: 0 nothing found, 1 warnings (keys left behind by a timeout, a file not
readable yet at the end), 2 errors (a state file that cannot be read).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from statelens.app.analysis.watch import BatchReport, Watcher, WatchPoll
from statelens.app.cli._common import no_cache
from statelens.app.output import dumps_jsonl
from statelens.readers.textfmt import format_epoch_ms

DEFAULT_INTERVAL_S = 5.0
DEFAULT_STOP_AFTER = 3


def _signed(n: int | None) -> str:
    return "" if n is None else f" ({n:+,})"


def batch_line(batch: BatchReport) -> str:
    """One line of a batch, for people."""
    parts = [f"batch {batch.batch_id}"]
    if batch.commit_time_ms is not None:
        parts.append(f"committed {format_epoch_ms(batch.commit_time_ms)}")
    elif batch.batch_timestamp_ms is not None:
        parts.append(f"started {format_epoch_ms(batch.batch_timestamp_ms)}")
    parts.append(f"watermark {format_epoch_ms(batch.watermark_ms) if batch.watermark_ms else 'none'}")
    if batch.duration_ms is not None:
        parts.append(f"took {batch.duration_ms:,} ms")
    if batch.input_rows is not None:
        parts.append(f"input {batch.input_rows:,} rows")
    if batch.gone:
        parts.append("state cleaned up before it was read")
    for s in batch.stores:
        text = f"op {s.operator_id} {s.store_name}: "
        text += "rows ?" if s.rows is None else f"rows {s.rows:,}{_signed(s.rows_delta)}"
        if s.zombies is not None:
            label = "zombies" if s.check == "timeouts" else "behind watermark"
            text += f", {label} {s.zombies:,}"
            if s.zombies_new is not None and s.check == "timeouts":
                text += f" ({s.zombies_new:,} new)"
        parts.append(text)
    return "  ".join(parts)


def cmd_watch(
    args: argparse.Namespace,
    out: IO[str],
    *,
    sleep: Callable[[float], None] | None = None,
    monotonic: Callable[[], float] | None = None,
) -> int:
    """Run ``statelens watch`` (``sleep`` and ``monotonic`` default to :mod:`time`'s, looked up when called)."""
    sleep = sleep or time.sleep
    monotonic = monotonic or time.monotonic
    err = sys.stderr
    watcher = Watcher(
        args.checkpoint,
        getattr(args, "storage_options", None),
        event_logs=args.event_log,
        from_batch=args.from_batch,
        stop_after=args.stopped_after,
        mirror=not no_cache(args),
        wait_for_checkpoint=True,
    )
    deadline = None if args.for_seconds is None else monotonic() + args.for_seconds
    worst = 0
    said_stopped = False
    said_waiting = False
    last: WatchPoll | None = None
    try:
        while True:
            poll = watcher.poll()
            last = poll
            if watcher.ckpt is None and not said_waiting:
                err.write(f"statelens: waiting for a checkpoint at {args.checkpoint}: {poll.waiting[0]}\n")
                said_waiting = True
            for batch in poll.batches:
                if args.until_batch is not None and batch.batch_id > args.until_batch:
                    break
                for f in batch.findings:
                    worst = max(worst, 2 if f.severity == "error" else 1 if f.severity == "warning" else 0)
                if args.jsonl:
                    out.write(dumps_jsonl(batch.to_json()) + "\n")
                else:
                    if batch.restart:
                        out.write(f"-- {batch.restart}\n")
                    out.write(batch_line(batch) + "\n")
                    for s in batch.stores:
                        if s.since_fix is not None:
                            out.write(f"  op {s.operator_id} {s.store_name}: {s.since_fix_text()}\n")
                    for f in batch.findings:
                        out.write(f"  {f.severity.upper():8s} {f.check}: {f.message}\n")
                out.flush()
            if poll.stopped and not said_stopped:
                text = f"no new batch for {args.stopped_after} polls: the query looks stopped"
                err.write(f"statelens: {text}\n") if args.jsonl else out.write(f"-- {text}\n")
                out.flush()
            said_stopped = poll.stopped
            if args.until_batch is not None and (watcher.next_batch or 0) > args.until_batch:
                break
            if deadline is not None and monotonic() >= deadline:
                break
            wait = args.interval if deadline is None else min(args.interval, max(0.0, deadline - monotonic()))
            sleep(wait)
    except KeyboardInterrupt:
        err.write("statelens: watch stopped\n")
    if last is not None and last.waiting:
        for w in last.waiting:
            err.write(f"statelens: not readable yet: {w}\n")
    return worst


def _positive(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def add_commands(sub: Any) -> None:
    """Add ``watch`` to the ``statelens`` subparsers."""
    p = sub.add_parser(
        "watch",
        help="follow a running query: one line per newly committed batch (rows, change, zombies, watermark); "
        "exit 0 clean, 1 warnings, 2 errors",
        description="Poll a checkpoint a query is writing and report every batch committed since, once and "
        "in order: its watermark and per store its rows, the change since the batch before and the "
        "expired-but-unremoved keys (as 'statelens expired' counts them). Only what each batch wrote is "
        "read. Stops at --until-batch, after --for, or on Ctrl+C.",
    )
    p.add_argument("checkpoint")
    p.add_argument(
        "--interval",
        type=_positive,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"seconds between polls (default {DEFAULT_INTERVAL_S:g}); each poll lists the checkpoint once",
    )
    p.add_argument(
        "--until-batch", type=int, metavar="N", help="stop once batch N is reported (or is seen to be past)"
    )
    p.add_argument(
        "--for", type=_positive, dest="for_seconds", metavar="SECONDS", help="stop after this long"
    )
    p.add_argument(
        "--from-batch",
        type=int,
        metavar="N",
        help="report from batch N on (default: from the last batch committed when the watch starts)",
    )
    p.add_argument(
        "--stopped-after",
        type=int,
        default=DEFAULT_STOP_AFTER,
        metavar="POLLS",
        help=f"say the query stopped after this many polls without a new batch (default {DEFAULT_STOP_AFTER})",
    )
    p.add_argument(
        "--jsonl",
        action="store_true",
        help="one JSON object per batch and line: batch_id, watermark_ms, commit_time_ms, stores (operator_id, "
        "store_name, rows, rows_delta, zombies, zombies_new), findings",
    )
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="event log, driver log or progress JSON lines the query is writing (repeatable), read at each "
        "poll: each batch gains its duration and input rows, and a new run id is shown as a restart",
    )
    p.set_defaults(func=cmd_watch)

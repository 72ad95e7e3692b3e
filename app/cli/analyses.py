"""The post-mortem subcommands of ``statelens``: ``summary``, ``expired``, ``timeline``, ``doctor``, ``report``.

``statelens.app.cli.build_parser`` calls :func:`add_commands`. Exit codes follow ``statelens.app.cli``: 0 ok, 1 finished
but some files could not be read (or, for ``doctor``, warnings), 2 error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import IO, Any

from statelens.app.analysis._common import JsonArrayWriter, key_text, run_to_end, write_json
from statelens.app.analysis.doctor import DEFAULT_MIN_BATCHES_TO_RETAIN, iter_doctor
from statelens.app.analysis.expired import DEFAULT_STALE_AFTER, TIMEOUT_KINDS, iter_expired
from statelens.app.analysis.finding_text import batch_text
from statelens.app.analysis.report import iter_report
from statelens.app.analysis.summary import iter_first_look, iter_summary
from statelens.app.analysis.timeline import iter_timeline, progress_missing_reason
from statelens.app.cli import _common
from statelens.app.cli._common import (
    EXIT_OK,
    EXIT_PARTIAL,
    _open,
    _Progress,
    _report_problems,
    _say_backend,
    add_backend_options,
    format_table,
)
from statelens.app.output import dumps_jsonl
from statelens.readers.restart import RestartConf
from statelens.readers.textfmt import format_duration_ms, format_epoch_ms


def _dur(ms: int | None) -> str:
    return format_duration_ms(ms, "compact")


def _drive(gen: Any) -> Any:
    bar = _Progress()
    try:
        return run_to_end(gen, bar)
    finally:
        bar.close()


def _exit_for(ckpt: Any, problems: list[Any]) -> int:
    code = _report_problems(ckpt)
    seen = {str(p) for p in ckpt.report.problems}
    for err in problems:
        if str(err) not in seen:
            seen.add(str(err))
            sys.stderr.write(f"statelens: warning: {err}\n")
            code = EXIT_PARTIAL
    return code if code != EXIT_OK else EXIT_OK


def _fmt_ms(ms: int | None) -> str:
    return format_epoch_ms(ms) if ms is not None and ms > 0 else ("" if ms is None else str(ms))


# -- expired -------------------------------------------------------------------------------------------
EXPIRED_HEADERS = (
    "op",
    "store",
    "part",
    "version",
    "category",
    "key",
    "batch",
    "timeout/event time (UTC)",  # the zone said once: every time column is in UTC
    "threshold",
    "age_batches",
    "age",
    "stored timeout",
)


class _StreamingTable:
    """A text table written as rows arrive: column widths from the first :attr:`LEAD` rows.

    Later rows keep those widths (a wider cell pushes the rest of its line), so memory does not grow
    with the number of rows.
    """

    LEAD = 500

    def __init__(self, out: IO[str], headers: tuple[str, ...], before_write: Any = None):
        self.out = out
        self.headers = headers
        self.before_write = before_write
        self.lead: list[list[str]] = []
        self.widths: list[int] | None = None
        self.rows = 0

    def add(self, row: list[Any]) -> None:
        cells = ["" if c is None else str(c) for c in row]
        self.rows += 1
        if self.widths is None:
            self.lead.append(cells)
            if len(self.lead) >= self.LEAD:
                self._flush_lead()
            return
        self._write([cells])

    def close(self) -> None:
        """Write what is still held (a table shorter than :attr:`LEAD` rows)."""
        if self.widths is None and self.lead:
            self._flush_lead()

    def _flush_lead(self) -> None:
        widths = [len(h) for h in self.headers]
        for cells in self.lead:
            widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
        self.widths = widths
        lines = [
            "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True)).rstrip(),
            "  ".join("-" * w for w in widths),
        ]
        if self.before_write is not None:
            self.before_write()
        self.out.write("\n".join(lines) + "\n")
        lead, self.lead = self.lead, []
        self._write(lead)

    def _write(self, rows: list[list[str]]) -> None:
        if self.before_write is not None:
            self.before_write()
        widths = self.widths or []
        self.out.write(
            "".join(
                "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"
                for cells in rows
            )
        )


def _expired_row(f: Any) -> list[Any]:
    return [
        f.operator_id,
        f.store_name,
        f.partition,
        f.version,
        f.category,
        key_text(f.key),
        batch_text(f.category, f.batch_id),
        _fmt_ms(f.timeout_ms),
        _fmt_ms(f.threshold_ms),
        f.age_batches,
        _dur(f.age_ms),
        _stored_timeout(f.stored_timeout_ms),
    ]


def _stored_timeout(ms: int | None) -> str:
    """The timeout the state row holds, as a time; ``-1 (none)`` for Spark's "no timeout"."""
    if ms is None:
        return ""
    return format_epoch_ms(ms) if ms >= 0 else f"{ms} (none)"


def _close_backends(args: argparse.Namespace, chooser: Any) -> None:
    _say_backend(args, chooser)
    chooser.close()


def _run_analysis(args: argparse.Namespace, analysis: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """Open the checkpoint, run ``analysis(ckpt, backends)`` (a progress generator) to its end with a
    progress bar, and close the backends it used, saying which answered: ``(ckpt, result)``."""

    ckpt = _open(args)
    chooser = _common._backends(args, ckpt)
    try:
        return ckpt, _drive(analysis(ckpt, chooser))
    finally:
        _close_backends(args, chooser)


def _restart_conf(args: argparse.Namespace) -> RestartConf:
    """``--spark-version`` and ``--conf KEY=VALUE``: the Spark the restart verdict is judged for."""
    conf: dict[str, str] = {}
    for item in args.conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _common._usage(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value.strip()
    try:
        return RestartConf.parse(args.spark_version, conf)
    except ValueError as err:
        raise _common._usage(str(err)) from None


def _check_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options every health check takes from the command line (``--quick``, ``--event-log``,
    ``--spark-version``, ``--conf``)."""
    return {
        "decode_files": not args.quick,
        "event_logs": args.event_log,
        "storage_options": getattr(args, "storage_options", None),
        "restart": _restart_conf(args),
    }


def _add_restart_options(p: Any) -> None:
    p.add_argument(
        "--spark-version",
        metavar="X.Y",
        help="the Spark version that will restart the query (e.g. 3.5, 4.3): whether auto snapshot repair "
        "(Spark 4.1+) can load past a damaged snapshot; default: unknown, and the verdict says what depends "
        "on it",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark conf of the restart, repeatable (spark.sql.streaming.stateStore.autoSnapshotRepair."
        "enabled, ...maxChangeFileReplay)",
    )


def cmd_expired(args: argparse.Namespace, out: IO[str]) -> int:
    """Stream every finding as it is found (text rows, a JSON list or JSON lines); keep only counts."""

    ckpt = _open(args)
    bar = _Progress()
    # Rows and the progress bar may share one terminal: clear the bar's line before writing rows.
    clear = bar.close if out.isatty() else None
    sink: Any
    if args.json:
        array = JsonArrayWriter(out)

        def sink(f: Any) -> None:
            if clear is not None:
                clear()
            array.write(f.to_json())
    elif args.jsonl:

        def sink(f: Any) -> None:
            if clear is not None:
                clear()
            out.write(dumps_jsonl(f.to_json()) + "\n")
    else:
        table = _StreamingTable(out, EXPIRED_HEADERS, clear)
        sink = lambda f: table.add(_expired_row(f))  # noqa: E731
    chooser = _common._backends(args, ckpt)
    try:
        result = run_to_end(
            iter_expired(
                ckpt,
                args.operator,
                all_versions=args.all_versions,
                stale_after=args.stale_after,
                timeout_kind=args.timeout_kind,
                sink=sink,
                backends=chooser,
            ),
            bar,
        )
    finally:
        bar.close()
        _close_backends(args, chooser)
    if args.json:
        array.close()
    if args.json or args.jsonl:
        return _exit_for(ckpt, result.problems)
    table.close()
    w = out.write
    if table.rows:
        w("\n")
    else:
        w("No expired-but-present keys found.\n\n")
    internal: dict[int, list[str]] = {}
    for op in result.operators:
        if op.check == "skipped" and op.store_name.startswith("$"):
            internal.setdefault(op.operator_id, []).append(op.store_name)  # said once per operator, below
            continue
        w(f"operator {op.operator_id} ({op.kind}) store {op.store_name}: {op.describe()}\n")
    for op_id, names in internal.items():
        w(
            f"operator {op_id}: {len(names)} internal column families not checked (Spark's own bookkeeping: "
            f"{', '.join(names)})\n"
        )
    if table.rows:
        counts = ", ".join(f"{n} {c}" for c, n in result.counts().items() if n)
        w(f"\n{result.total()} findings: {counts}\n")
    return _exit_for(ckpt, result.problems)


# -- timeline ------------------------------------------------------------------------------------------
def _source_text(s: Any) -> str:
    if s.files is not None:
        return f"{s.index}:{s.kind} {s.files} files"
    if s.records is not None:
        return (
            f"{s.index}:{s.kind} {s.records} records"
            if s.kind == "kafka"
            else f"{s.index}:{s.kind} +{s.records}"
        )
    return f"{s.index}:{s.kind} ?" + (f" ({s.note})" if s.note else "")


def cmd_timeline(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt = _open(args)
    timeline = _drive(iter_timeline(ckpt, args.event_log, getattr(args, "storage_options", None)))
    if args.json:
        write_json(timeline.to_json(), out)
        return _exit_for(ckpt, timeline.problems)
    rows = []
    for r in timeline.rows:
        changes = "; ".join(
            f"{k.removeprefix('spark.sql.')}: {a} -> {b}" for k, (a, b) in r.conf_changes.items()
        )
        rows.append(
            [
                r.batch_id,
                _fmt_ms(r.timestamp_ms),
                _dur(r.interval_ms),
                _fmt_ms(r.watermark_ms),
                _dur(r.watermark_move_ms)
                if r.watermark_move_ms
                else ("" if r.watermark_move_ms is None else "0"),
                "yes" if r.committed else ("NO" if r.has_offsets else "no offsets"),
                ", ".join(_source_text(s) for s in r.sources),
                changes,
            ]
        )
        if timeline.event_logs is not None:
            pj = r.progress.to_json() if r.progress is not None else None
            rows[-1][3:3] = (
                [
                    _dur(pj["duration_ms"].get("triggerExecution")),
                    pj["num_input_rows"],
                    f"{pj['processed_rows_per_second']:.1f}"
                    if pj["processed_rows_per_second"] is not None
                    else "",
                ]
                if pj is not None
                else ["", "", ""]
            )
    out.write(
        format_table(
            [
                "batch",
                "start (UTC)",
                "interval",
                *(["duration", "input rows", "rows/s"] if timeline.event_logs is not None else []),
                "watermark",
                "wm moved",
                "committed",
                "sources",
                "conf changes",
            ],
            rows,
        )
        + "\n"
    )
    med = timeline.median_interval_ms()
    if med is not None:
        out.write(f"\nmedian interval {_dur(int(med))}, longest {_dur(max(timeline.intervals_ms()))}\n")
    if timeline.event_logs is not None:
        cover = timeline.progress_coverage()
        runs = [r for r in timeline.event_logs.runs.values() if r.query_id == ckpt.query_id]
        out.write(
            f"event logs: {len(timeline.event_logs.files)} file(s), {len(runs)} run(s) of this query, progress for "
            f"{len(cover['batches_with_progress'])} of {len(timeline.rows)} batches"
            + (
                f"; batches {cover['batches_not_in_checkpoint']} are in the logs but not in the checkpoint"
                if cover["batches_not_in_checkpoint"]
                else ""
            )
            + (f": {why}" if (why := progress_missing_reason(timeline.event_logs, ckpt.query_id)) else "")
            + "\n"
        )
    return _exit_for(ckpt, timeline.problems)


# -- doctor --------------------------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt, result = _run_analysis(
        args,
        lambda ckpt, chooser: iter_doctor(
            ckpt, min_batches_to_retain=args.min_batches_to_retain, backends=chooser, **_check_options(args)
        ),
    )
    if args.json:
        write_json(result.to_json(), out)
        return result.exit_code
    w = out.write
    w(f"Checkpoint  {ckpt.location}\n")
    w("Checked     " + "; ".join(result.checked) + "\n\n")
    if not result.findings:
        w("OK: no problems found.\n")
    for f in result.findings:
        w(f"{f.severity.upper():8s} {f.check}: {f.message}\n")
        for path in f.files:
            w(f"         - {path}\n")
    c = result.counts()
    w(f"\n{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)\n")
    return result.exit_code


# -- summary -------------------------------------------------------------------------------------------
SEVERITY_TAGS = {"error": "ERROR", "warning": "WARNING", "info": "note", "ok": "ok"}


def cmd_summary(args: argparse.Namespace, out: IO[str]) -> int:
    """One line per verdict, worst first, each with the view of ``statelens gui`` that shows it
    (``--latest``: the verdicts of each store's latest version only, as the app's overview shows first)."""

    if args.latest:
        if args.backend == "spark" or args.event_log or args.quick or args.fix_batch is not None:
            raise _common._usage(
                "--latest reads the files of each store's latest version natively: use it without "
                "--backend spark, --event-log, --quick and --fix-batch"
            )
        restart = _restart_conf(args)
        ckpt, result = _run_analysis(
            args, lambda ckpt, chooser: iter_first_look(ckpt, backends=chooser, restart=restart)
        )
    else:
        ckpt, result = _run_analysis(
            args,
            lambda ckpt, chooser: iter_summary(
                ckpt, backends=chooser, fix_batch=args.fix_batch, **_check_options(args)
            ),
        )
    if args.json:
        write_json(result.to_json(), out)
        return result.exit_code
    w = out.write
    w(f"Checkpoint  {ckpt.location}\n\n")
    width = max(len(t) for t in SEVERITY_TAGS.values())
    for v in result.verdicts:
        w(f"{SEVERITY_TAGS[v.severity]:<{width}}  {v.text}  [view: {v.view}]\n")
    c = result.counts()
    w(
        f"\n{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s), {c['ok']} fine; "
        f"open a view with: statelens gui {ckpt.location} --view VIEW\n"
    )
    if not result.complete:
        w(
            "Only each store's latest version was read: expired keys, growth over versions, older files "
            "and event logs are checked without --latest\n"
        )
    for err in result.problems:
        sys.stderr.write(f"statelens: warning: {err}\n")
    return int(result.exit_code)


# -- report --------------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt, result = _run_analysis(
        args,
        lambda ckpt, chooser: iter_report(
            ckpt,
            target_rows=args.target_rows,
            stale_after=args.stale_after,
            timeout_kind=args.timeout_kind,
            backends=chooser,
            **_check_options(args),
        ),
    )
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(result.html)
        sys.stderr.write(f"statelens: report written to {args.output}\n")
    else:
        out.write(result.html)
    return _exit_for(ckpt, result.problems)


# -- registration --------------------------------------------------------------------------------------
def add_commands(sub: Any) -> None:
    """Add ``summary``, ``expired``, ``timeline``, ``doctor`` and ``report`` to the ``statelens`` subparsers."""

    p = sub.add_parser(
        "summary",
        help="the verdicts, one line each: restart, commits, expired keys, growth and skew, watermark, "
        "slow batches, unreadable files; exit 0 all fine, 1 a finding or damage",
    )
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--quick", action="store_true", help="do not decode every state file (damage may go unseen)"
    )
    p.add_argument(
        "--latest",
        action="store_true",
        help="only the verdicts each store's latest version gives (restart, rows now, skew, commits, "
        "watermark), from the files a restart loads: the newest snapshot and the deltas after it, a few "
        "times fewer reads than every file on S3 (what the app's overview shows first)",
    )
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="event log, driver log or progress JSON lines of the query (repeatable): slowest batches, "
        "rows dropped by the watermark, and the runs (restarts) by their run ids",
    )
    p.add_argument(
        "--fix-batch",
        type=int,
        metavar="N",
        help="the batch the fix went in with: expired keys and rows per batch before and after it (default: "
        "the last restart, when the checkpoint holds two or more runs)",
    )
    _add_restart_options(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser(
        "expired",
        help="keys whose timeout fired but which are still in the state (zombies), overdue, stale, eviction lag",
    )
    p.add_argument("checkpoint")
    p.add_argument("--operator", type=int, metavar="N", help="only this stateful operator")
    p.add_argument(
        "--all-versions", action="store_true", help="report every readable version, not just the latest"
    )
    p.add_argument(
        "--stale-after",
        type=int,
        default=DEFAULT_STALE_AFTER,
        metavar="K",
        help=f"a key without timeout unwritten for K versions is stale (default {DEFAULT_STALE_AFTER}; 0 = off)",
    )
    p.add_argument(
        "--timeout-kind",
        choices=TIMEOUT_KINDS,
        help="override the inferred timeout kind of (flat)MapGroupsWithState/applyInPandasWithState",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json", action="store_true", help="print a JSON list of findings (written as they are found)"
    )
    fmt.add_argument("--jsonl", action="store_true", help="print one JSON object per finding and line")
    add_backend_options(p)
    p.set_defaults(func=cmd_expired)

    p = sub.add_parser(
        "doctor", help="health checks with severities and files; exit 0 clean, 1 warnings, 2 errors"
    )
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--quick", action="store_true", help="do not read every state file (skip decode checks)")
    p.add_argument(
        "--min-batches-to-retain",
        type=int,
        default=DEFAULT_MIN_BATCHES_TO_RETAIN,
        metavar="N",
        help="the query's spark.sql.streaming.minBatchesToRetain (not recorded in the checkpoint)",
    )
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="event log, driver log or progress JSON lines of the query (repeatable): check its progress "
        "against the checkpoint (query id, batches, state rows per operator)",
    )
    _add_restart_options(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "report",
        help="one self-contained HTML post-mortem report (overview, timeline, growth, expired keys, health)",
    )
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", metavar="FILE", help="write the HTML here (default: standard output)")
    p.add_argument(
        "--target-rows",
        type=int,
        metavar="N",
        help="project when each store reaches N rows (default: 10x the largest store)",
    )
    p.add_argument(
        "--stale-after",
        type=int,
        default=DEFAULT_STALE_AFTER,
        metavar="K",
        help="versions without a write before a key without timeout is stale (0 = off)",
    )
    p.add_argument("--timeout-kind", choices=TIMEOUT_KINDS, help="override the inferred timeout kind")
    p.add_argument("--quick", action="store_true", help="health checks without reading every state file")
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="event log, driver log or progress JSON lines of the query (repeatable): durations, rates and "
        "state metrics per batch in the timeline section",
    )
    _add_restart_options(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "timeline", help="per batch: start, interval, watermark, commit, records per source, conf changes"
    )
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="Spark event log (file or eventlog_v2_* folder, compressed or not), driver log or progress JSON "
        "lines, repeatable: each batch gains its duration, rows and state metrics as the query reported them",
    )
    p.set_defaults(func=cmd_timeline)

"""``statelens fleet ROOT``: every checkpoint below a folder or prefix, one row each, worst first
(:mod:`app.analysis.fleet`). ``statelens.app.cli.build_parser`` calls :func:`add_commands`.

Exit codes as ``summary``'s for the worst checkpoint: 0 every checkpoint fine, 1 a finding or damage in
one, 2 one could not be read (or none was found, or the root cannot be listed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import IO, Any

from statelens.app.analysis._common import run_to_end, write_json
from statelens.app.analysis.fleet import (
    DEFAULT_JOBS,
    DEFAULT_MEMORY_BYTES,
    FleetOptions,
    FleetResult,
    FleetRow,
    compare,
    fleet,
)
from statelens.app.analysis.fleet_report import render_fleet_html
from statelens.app.analysis.fleet_spark import spark_session
from statelens.app.analysis.report import iter_report
from statelens.app.cli import _common
from statelens.app.cli._common import _Progress, format_table, no_cache
from statelens.app.output import dumps_jsonl
from statelens.readers.backends import BackendChooser
from statelens.readers.backends.spark import parse_spark_defaults
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.discover import DEFAULT_MAX_DEPTH
from statelens.readers.errors import StatelensError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_TAGS = {"error": "ERROR", "warning": "WARNING", "info": "note", "ok": "ok"}
HEADERS = (
    "",
    "checkpoint",
    "query id",
    "last batch",
    "age",
    "stores",
    "rows",
    "bytes",
    "rows since",
    "trend",
    "zombies",
    "restart",
    "unreadable",
    "worst finding",
)
#: Characters of the worst finding shown in the table (``--json`` has every verdict whole).
FINDING_WIDTH = 90


def _size(text: str) -> int:
    """``2G``, ``512M``, ``1.5GiB`` or a number of bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def _options(args: argparse.Namespace) -> FleetOptions:
    conf: list[tuple[str, str]] = []
    for item in args.conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _common._usage(f"--conf takes KEY=VALUE, not {item!r}")
        conf.append((key.strip(), value.strip()))
    options = FleetOptions(
        spark_version=args.spark_version,
        conf=tuple(conf),
        zombies=not args.no_zombies,
        mirror=not no_cache(args),
        cache=not no_cache(args),
    )
    try:
        options.restart()
    except ValueError as err:
        raise _common._usage(str(err)) from None
    return options


def _cells(r: FleetRow, now_ms: int) -> list[Any]:
    texts = r.texts(now_ms)
    finding = texts["worst finding"]
    if len(finding) > FINDING_WIDTH:
        texts["worst finding"] = finding[: FINDING_WIDTH - 1] + "…"
    return [_TAGS.get(r.severity, r.severity), *(texts[h] for h in HEADERS[1:])]


def _slug(path: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", path.strip("/")) or "checkpoint"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def _write_reports(
    args: argparse.Namespace, result: FleetResult, page: Path, options: FleetOptions
) -> dict[str, str]:
    """Each chosen checkpoint's own report in ``<page>.reports/``: path -> link relative to the page."""
    if args.reports == "none":
        return {}
    rows = [
        r
        for r in result.rows
        if r.error is None and (args.reports == "all" or r.severity in ("error", "warning"))
    ]
    folder = page.with_name(page.name + ".reports")
    links: dict[str, str] = {}
    taken: set[str] = set()
    for n, r in enumerate(rows, 1):
        sys.stderr.write(f"statelens: report {n}/{len(rows)}: {r.location}\n")
        url = _url_of(args.root, r.path)
        try:
            ckpt = open_checkpoint(url, getattr(args, "storage_options", None), mirror=options.mirror)
            chooser = BackendChooser(ckpt, "native")
            try:
                report = run_to_end(iter_report(ckpt, backends=chooser, restart=options.restart()))
            finally:
                chooser.close()
        except StatelensError as err:
            sys.stderr.write(f"statelens: warning: no report for {r.location}: {err}\n")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        name = _slug(r.path, taken) + ".html"
        (folder / name).write_text(report.html, encoding="utf-8", newline="\n")
        links[r.path] = f"{folder.name}/{name}"
    return links


def _url_of(root: str, rel: str) -> str:
    if not rel:
        return root
    if "://" in root:
        return root.rstrip("/") + "/" + rel
    return str(Path(root) / rel)


def cmd_fleet(args: argparse.Namespace, out: IO[str]) -> int:
    """Find, check, print worst first."""
    options = _options(args)
    previous: dict[str, Any] | None = None
    if args.since:
        try:
            previous = json.loads(Path(args.since).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise _common._usage(
                f"--since {args.since}: cannot read a previous --json output: {err}"
            ) from None
    spark, owned = None, False
    if args.backend == "spark":
        conf = parse_spark_defaults(args.spark_conf) if args.spark_conf else None
        spark, owned = spark_session(args.spark_master, args.spark_remote, conf)
    elif args.spark_master or args.spark_remote or args.spark_conf:
        raise _common._usage("--spark-master, --spark-remote and --spark-conf go with --backend spark")
    bar = _Progress()
    stream_rows = args.jsonl and previous is None

    def on_row(row: FleetRow) -> None:
        if stream_rows:  # JSON lines as each checkpoint is done (the order they finish in)
            out.write(dumps_jsonl(row.to_json(row.checked_ms)) + "\n")
            out.flush()

    try:
        result = fleet(
            args.root,
            getattr(args, "storage_options", None),
            options=options,
            jobs=args.jobs,
            max_depth=args.max_depth,
            memory_bytes=args.memory_budget,
            progress=bar,
            on_row=on_row,
            spark=spark,
        )
    finally:
        bar.close()
        if spark is not None and owned:  # a session found running (a notebook's) is not ours to stop
            spark.stop()
    if previous is not None:
        compare(result, previous)
    if not result.rows:
        sys.stderr.write(
            f"statelens: no checkpoint found below {result.root} (--max-depth {args.max_depth})\n"
        )
    if args.html:
        page = Path(args.html)
        links = _write_reports(args, result, page, options)
        page.write_text(render_fleet_html(result, links), encoding="utf-8", newline="\n")
        sys.stderr.write(f"statelens: fleet report written to {page}\n")
    if args.json:
        write_json(result.to_json(), out)
        return result.exit_code
    if args.jsonl:
        if not stream_rows:
            for r in result.rows:
                out.write(dumps_jsonl(r.to_json(result.scanned_ms)) + "\n")
        return result.exit_code
    if result.rows:
        out.write(format_table(HEADERS, [_cells(r, result.scanned_ms) for r in result.rows]) + "\n")
    c = result.counts()
    out.write(
        f"\n{len(result.rows)} checkpoint(s) below {result.root}: {c['error']} with errors, {c['warning']} with "
        f"warnings, {c['info'] + c['ok']} fine; {result.discovery.listings} folder(s) listed, {result.cached} "
        "unchanged since the last run (not read again)\n"
    )
    changed = [r for r in result.rows if r.changes]
    if previous is not None:
        out.write(f"\nChanges since the previous run ({args.since}):\n")
        for r in changed:
            for change in r.changes:
                out.write(f"  {r.path or r.location}: {change}\n")
        for p in result.gone:
            out.write(f"  {p}: no longer found\n")
        if not changed and not result.gone:
            out.write("  none\n")
    out.write(
        "Verdicts of one checkpoint: statelens summary --latest CHECKPOINT; its report: statelens report CHECKPOINT\n"
    )
    return result.exit_code


def add_commands(sub: Any) -> None:
    """Add ``fleet`` to the ``statelens`` subparsers."""
    p = sub.add_parser(
        "fleet",
        help="every checkpoint below a folder or prefix, one row each with its first verdicts, worst first; "
        "exit code as summary's for the worst",
        description="Find every Structured Streaming checkpoint below ROOT (a folder holding offsets/ and "
        "commits/, or a metadata file with a query id; each folder listed once, never inside a checkpoint) "
        "and give each the verdicts of 'statelens summary --latest': restart, commits, rows and bytes now, "
        "skew, watermark, unreadable files, plus its zombie keys. One row per checkpoint, worst first. A "
        "checkpoint that cannot be read is a row with its error. A second run reads only checkpoints whose "
        "files changed.",
        epilog="Exit codes: 0 every checkpoint fine, 1 a finding or damage in one, 2 one could not be read, "
        "none was found or ROOT cannot be listed. Example: statelens fleet s3://company-checkpoints/prod "
        "--jobs 16 --json > today.json; statelens fleet s3://company-checkpoints/prod --since today.json",
    )
    p.add_argument("root", help="a local folder or an fsspec URL (s3://bucket/prefix)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print one JSON document (docs/fleet.md)")
    fmt.add_argument(
        "--jsonl",
        action="store_true",
        help="print one JSON object per checkpoint and line, as each is done (worst first with --since)",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write a fleet report: one row per checkpoint, linking to its own report (see --reports)",
    )
    p.add_argument(
        "--reports",
        choices=("flagged", "all", "none"),
        default="flagged",
        help="with --html: write the own report of the checkpoints with errors or warnings (flagged, "
        "default), of every checkpoint, or of none, into FILE.reports/ (each reads the whole checkpoint)",
    )
    p.add_argument(
        "--max-depth",
        type=int,
        default=DEFAULT_MAX_DEPTH,
        metavar="N",
        help=f"folder levels searched below ROOT (default {DEFAULT_MAX_DEPTH}); never inside a checkpoint",
    )
    p.add_argument(
        "--jobs",
        type=_positive,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"checkpoints read at once (default {DEFAULT_JOBS})",
    )
    p.add_argument(
        "--memory-budget",
        type=_size,
        default=DEFAULT_MEMORY_BYTES,
        metavar="SIZE",
        help="estimated decoded state in memory at once across the checkpoints read (e.g. 512M, 4G; "
        "default 2G); a checkpoint heavier than this is read alone",
    )
    p.add_argument(
        "--since",
        metavar="JSON",
        help="a previous 'statelens fleet --json' output: say what changed (new checkpoints, new leaks, "
        "stalls, verdicts that got worse) and the rows gained",
    )
    p.add_argument(
        "--no-zombies",
        action="store_true",
        help="do not count zombie keys (each store's latest version is then read once, not twice)",
    )
    p.add_argument(
        "--spark-version",
        metavar="X.Y",
        help="the Spark version that will restart the queries (as summary's --spark-version)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark conf of the restarts, repeatable (as summary's --conf)",
    )
    p.add_argument(
        "--backend",
        choices=("native", "spark"),
        default="native",
        help="where the checkpoints are read: threads of this process (native, default), or Spark tasks, "
        "each reading its checkpoints with statelens next to the data (spark: statelens installed on the "
        "executors; this process holds the list of paths and the rows)",
    )
    p.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master for --backend spark (default: $STATELENS_SPARK_MASTER or local[*])",
    )
    p.add_argument(
        "--spark-remote", metavar="sc://HOST:PORT", help="run --backend spark through Spark Connect"
    )
    p.add_argument("--spark-conf", metavar="FILE", help="spark-defaults style file of extra Spark confs")
    p.set_defaults(func=cmd_fleet)

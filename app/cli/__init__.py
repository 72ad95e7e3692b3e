"""The ``statelens`` command line.

Commands live in ``state`` (``info``, ``rows``, ``growth``, ``sql``, ``cache``, ``mirror``), ``analyses``
(``summary``, ``expired``, ``timeline``, ``doctor``, ``report``) and ``fleet`` (every checkpoint below a
root); what they share is in ``_common``; this module parses arguments and runs one (``gui`` opens the desktop app through the launcher).

Tables for people, ``--json`` (or JSON lines) for scripts. Exit codes: 0 success; 1 the command ran
but some files could not be read (each named on stderr); 2 the request failed (not a checkpoint,
unknown operator, unreadable file...). Tracebacks only with ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from statelens.app.analysis.views import VIEWS
from statelens.app.cli import analyses, fleet, prune, state, watch
from statelens.app.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PARTIAL,
    NO_CACHE_HELP,
    STORAGE_OPTION_HELP,
    _UsageFailure,
    add_backend_options,
    format_table,
    parse_storage_options,
    storage_option_value,
)
from statelens.app.cli.state import info_json, iter_growth_records
from statelens.readers.errors import BackendUnavailableError, StatelensError, StorageError
from statelens.readers.fs import is_unreachable
from statelens.readers.values import JsonObject

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "SUBCOMMANDS",
    "add_backend_options",
    "build_parser",
    "format_table",
    "info_json",
    "iter_growth_records",
    "main",
    "parse_storage_options",
    "storage_option_value",
]

SUBCOMMANDS = (
    "info",
    "rows",
    "growth",
    "sql",
    "gui",
    "summary",
    "expired",
    "doctor",
    "report",
    "timeline",
    "cache",
    "mirror",
    "prune",
    "repartition",
    "fleet",
    "watch",
)


# -- gui -----------------------------------------------------------------------------------------------
def cmd_gui(args: argparse.Namespace, out: IO[str]) -> int:
    runner = getattr(args, "gui_runner", None)
    if runner is None:
        raise BackendUnavailableError("the desktop app is started by the 'statelens' launcher (app.launcher)")
    return int(runner(args))


#: Options whose value is the next argument (not a checkpoint path) when looking for the first path.
_OPTIONS_WITH_VALUES = (
    "--screenshot",
    "--view",
    "--storage-option",
    "--event-log",
    "--operator",
    "--store",
    "--version",
    "--partition",
    "--key",
    "--interval",
)


def _json_key(text: str) -> Any:
    """``--key``: a key as JSON, objects kept as ordered ``(name, value)`` pairs (how keys compare)."""

    try:
        return json.loads(text, object_pairs_hook=JsonObject)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from err


def _positive_seconds(text: str) -> float:
    """``--interval``: a number of seconds above zero."""
    try:
        seconds = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from err
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``statelens --help``)."""
    parser = argparse.ArgumentParser(
        prog="statelens",
        description="Open a Spark Structured Streaming checkpoint and see what happened inside it. "
        "Run with no command (or 'gui') to open the desktop app; with no path it opens the bundled sample.",
        epilog="Exit codes: 0 ok, 1 finished but some files could not be read, 2 error.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action=_VersionAction, help="show the installed version and exit")
    parser.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        dest="storage_option",
        default=[],
        help=STORAGE_OPTION_HELP,
    )
    parser.add_argument("--no-cache", action="store_true", dest="no_cache_before", help=NO_CACHE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    state.add_commands(sub)
    analyses.add_commands(sub)
    prune.add_commands(sub)
    fleet.add_commands(sub)
    watch.add_commands(sub)

    p = sub.add_parser(
        "gui",
        help="open the desktop app (default command)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Open the desktop app, at a view, store, version, partition or key if asked.\n\nviews:\n"
        + "\n".join(f"  {name:<10}{view.what}" for name, view in VIEWS.items()),
        epilog='Example: statelens gui CKPT --view expired --operator 0 --store default --key \'{"key": "a"}\'',
    )
    p.add_argument("checkpoint", nargs="?", help="checkpoint to open (default: the bundled sample)")
    p.add_argument("--screenshot", metavar="PNG", help="render offscreen, save a PNG and exit")
    p.add_argument(
        "--view",
        default="overview",
        choices=tuple(VIEWS),
        help="view to show or screenshot (default: overview)",
    )
    p.add_argument(
        "--operator", type=int, metavar="N", dest="operator_id", help="open on this stateful operator"
    )
    p.add_argument(
        "--store", metavar="NAME", dest="store_name", help="open on this store (default: the operator's)"
    )
    p.add_argument(
        "--version", type=int, metavar="V", dest="state_version", help="open at this state version"
    )
    p.add_argument("--partition", type=int, metavar="P", dest="partition_id", help="open on this partition")
    p.add_argument(
        "--key",
        metavar="JSON",
        type=_json_key,
        help='select this key, as statelens prints it in JSON (e.g. \'{"key": "a"}\'); with --partition',
    )
    p.add_argument(
        "--event-log",
        action="append",
        default=[],
        metavar="PATH_OR_URL",
        help="event log, driver log or progress JSON lines of the query (repeatable): durations, rows and "
        "rates on the batch timeline",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="follow the checkpoint: poll it and show new batches as they commit, keeping what is selected "
        "(File > Follow the checkpoint in the app)",
    )
    p.add_argument(
        "--interval",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        dest="follow_interval",
        help="seconds between two polls of --follow (default: 5)",
    )
    p.set_defaults(func=cmd_gui)
    # Also after the command (``statelens info s3://b/p --storage-option anon=true``); kept apart from
    # the ones given before it, then both are used.
    for name, command in sub.choices.items():
        command.add_argument(
            "--storage-option",
            action="append",
            metavar="KEY=VALUE",
            dest="storage_option_after",
            default=[],
            help=STORAGE_OPTION_HELP,
        )
        if name not in ("cache", "mirror") and "--no-cache" not in command._option_string_actions:
            command.add_argument("--no-cache", action="store_true", dest="no_cache", help=NO_CACHE_HELP)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: prints ``statelens <version>`` and exits 0. The version is looked up only when
    asked (reading the package metadata costs ~40 ms, which every other command would pay)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib import metadata  # deferred: importlib.metadata (slow import)

        try:
            installed = metadata.version("statelens")
        except metadata.PackageNotFoundError:  # run from a tree that was never installed
            installed = "unknown"
        sys.stdout.write(f"statelens {installed}\n")
        parser.exit()


def _quiet_storage_retries(debug: bool) -> None:
    """Each storage retry is a log warning of the filesystem layer: shown with ``--debug`` only; the
    error that ends a failed read says how many attempts were made."""

    logger = logging.getLogger("statelens.readers.fs")
    # A handler on the logger keeps Python's last-resort handler (stderr) from printing each retry;
    # records still reach the root logger, for an application that configures logging.
    kind = logging.StreamHandler if debug else logging.NullHandler
    if not any(type(h) is kind for h in logger.handlers):
        for h in [h for h in logger.handlers if type(h) in (logging.StreamHandler, logging.NullHandler)]:
            logger.removeHandler(h)
        logger.addHandler(logging.StreamHandler(sys.stderr) if debug else logging.NullHandler())


def error_text(err: StatelensError) -> str:
    """The one line an error is told in; a storage endpoint that never answered is named as such.

    Parameters
    ----------
    err : StatelensError

    Returns
    -------
    str
    """

    cause = err.__cause__
    if isinstance(err, StorageError) and cause is not None and is_unreachable(cause):
        attempts = err.context.get("attempts")
        tried = f" ({attempts} attempts)" if attempts else ""
        return (
            f"{err.path}: cannot connect to the storage endpoint{tried}: {type(cause).__name__}: "
            f"{cause}. Check the endpoint URL (--storage-option endpoint_url=...), the network and "
            "that the service is running."
        )
    return str(err)


def main(argv: Sequence[str] | None = None, gui_runner: Callable[[Any], int] | None = None) -> int:
    """Run the command line; ``gui_runner(args)`` opens the desktop app (see :mod:`app.launcher`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # No command, or a bare path: the desktop app. Values of the app's own options are not paths.
    first = None
    i = 0
    while i < len(argv):
        if argv[i] in _OPTIONS_WITH_VALUES:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            first = i
            break
    lead = 0  # where "gui" goes when no command is given: after the top-level options
    while lead < len(argv):
        if argv[lead] in ("--debug", "--no-cache") or argv[lead].startswith("--storage-option="):
            lead += 1
        elif argv[lead] == "--storage-option":
            lead += 2
        else:
            break
    if first is None and not any(a in ("-h", "--help", "--version") for a in argv):
        argv.insert(min(lead, len(argv)), "gui")
    elif first is not None and argv[first] not in SUBCOMMANDS:
        argv.insert(first, "gui")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.gui_runner = gui_runner
    try:
        args.storage_options = parse_storage_options(
            [*args.storage_option, *getattr(args, "storage_option_after", [])]
        )
    except StatelensError as err:
        parser.error(str(err))
    debug = args.debug or os.environ.get("STATELENS_RAISE") == "1"
    _quiet_storage_retries(args.debug)
    try:
        return int(args.func(args, sys.stdout))
    except _UsageFailure as err:
        parser.error(str(err))
        return EXIT_ERROR  # pragma: no cover
    except StatelensError as err:
        if debug:
            raise
        sys.stderr.write(f"statelens: error: {error_text(err)}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("statelens: interrupted\n")
        return 130

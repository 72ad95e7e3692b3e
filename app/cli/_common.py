"""What every ``statelens`` command shares: exit codes, the progress bar, opening a checkpoint with
its storage options, problem reporting, tables, backend options and usage errors."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from typing import IO, Any

from statelens.readers.backends import BackendChooser
from statelens.readers.backends.spark import parse_spark_defaults
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import UsageError

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_ERROR = 2


class _Progress:
    """A one-line stderr progress bar, shown only on a terminal and only after a second."""

    def __init__(self, stream: IO[str] | None = None):
        self._time = time.monotonic
        self._start = self._time()
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty()
        self._shown = False

    def __call__(self, p: Any) -> None:
        if not self._enabled or self._time() - self._start < 1.0:
            return
        total = max(p.total, 1)
        width = 30
        filled = int(width * min(p.done, total) / total)
        self._stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {p.done}/{p.total} {p.what[:40]:<40}")
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._stream.write("\r" + " " * 90 + "\r")
            self._stream.flush()


def _open(args: argparse.Namespace):  # type: ignore[no-untyped-def]

    bar = _Progress()
    try:
        return open_checkpoint(
            args.checkpoint,
            storage_options=getattr(args, "storage_options", None),
            progress=bar,
            mirror=not no_cache(args),
        )
    finally:
        bar.close()


def no_cache(args: argparse.Namespace) -> bool:
    """``--no-cache``, given before the command or after it."""
    return bool(getattr(args, "no_cache", False) or getattr(args, "no_cache_before", False))


NO_CACHE_HELP = (
    "read and decode afresh, keep nothing on disk: neither the local mirror of files read from remote "
    "storage nor decoded state (default: both are kept under the user's cache folder, $STATELENS_CACHE_DIR, "
    "and reused while the files are unchanged); remote files read are kept in memory for the command only"
)


# -- storage options -----------------------------------------------------------------------------------
#: Option names whose values are credentials: never shown, not even in an error about the option.
_SECRET_KEY_RE = re.compile(r"(?i)key|secret|token|password|passwd|credential|session|auth|user|profile")
_OPTION_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")
_INT_RE = re.compile(r"^[+-]?\d{1,18}$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")


def storage_option_value(text: str) -> Any:
    """One ``--storage-option`` value: ``true``/``false``, ``none``/``null``, an int, a float, a JSON
    object or array, or else the text itself (quote it, ``'"123"'``, to keep digits a string)."""

    low = text.strip().lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("none", "null"):
        return None
    if _INT_RE.match(text.strip()):
        return int(text)
    if _FLOAT_RE.match(text.strip()):
        return float(text)
    if text[:1] in '{["' and text:
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def parse_storage_options(items: Sequence[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--storage-option``, repeatable) as fsspec ``storage_options``.

    ``client_kwargs.region_name=eu-west-1`` nests (``{"client_kwargs": {"region_name": ...}}``); a key
    given twice keeps its last value. Values are parsed by :func:`storage_option_value`, except those of
    credential-looking keys (``key``, ``secret``, ``token``...), which stay strings.

    Parameters
    ----------
    items : sequence of str, optional

    Returns
    -------
    dict

    Raises
    ------
    UsageError
        An item without ``=`` or with a malformed key, or a key used both as a value and as a group.
        Messages name the key (when it is not secret-looking) but never a value.
    """

    out: dict[str, Any] = {}
    for n, item in enumerate(items or (), start=1):
        key, sep, raw = item.partition("=")
        key = key.strip()
        hint = "e.g. endpoint_url=http://localhost:9000 or client_kwargs.region_name=eu-west-1"
        if not sep:  # perhaps a mistyped secret: described, never shown
            raise UsageError(f"--storage-option #{n} has no '=': expected KEY=VALUE ({hint})")
        if not _OPTION_KEY_RE.match(key):
            shown = "" if _SECRET_KEY_RE.search(key) else f" {key[:40]!r}"
            raise UsageError(
                f"--storage-option #{n}: key{shown} is not letters, digits, '_' or '-' "
                f"(dotted to nest; {hint})"
            )
        *parents, leaf = key.split(".")
        node = out
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(
                    f"--storage-option {'.'.join(parents[: depth + 1])} is given a value and also "
                    f"used as a group ({key})"
                )
            node = child
        if isinstance(node.get(leaf), dict):
            raise UsageError(f"--storage-option {key} is used as a group and also given a value")
        node[leaf] = raw if _SECRET_KEY_RE.search(leaf) else storage_option_value(raw)
    return out


def _report_problems(ckpt: Any, stream: IO[str] | None = None) -> int:
    stream = stream or sys.stderr
    for err in ckpt.report.problems:
        stream.write(f"statelens: warning: {err}\n")
    return EXIT_PARTIAL if ckpt.report.problems else EXIT_OK


# -- tables --------------------------------------------------------------------------------------------
def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned text table with a header rule."""
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
    return "\n".join(out)


# -- rows ----------------------------------------------------------------------------------------------
def _backends(args: argparse.Namespace, ckpt: Any) -> Any:
    conf = parse_spark_defaults(args.spark_conf) if getattr(args, "spark_conf", None) else None
    remote = getattr(args, "spark_remote", None)
    return BackendChooser(ckpt, args.backend, master=args.spark_master, conf=conf, remote=remote)


def _say_backend(args: argparse.Namespace, chooser: Any) -> None:
    if "spark" in chooser.used:  # say so whenever a JVM answered; native is the silent default
        sys.stderr.write(f"statelens: read with the {chooser.describe()}\n")


# -- parsing -------------------------------------------------------------------------------------------
class _UsageFailure(Exception):
    pass


def _usage(message: str) -> _UsageFailure:
    return _UsageFailure(message)


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """``--backend``, ``--spark-master``, ``--spark-remote``, ``--spark-conf`` for every command that reads state."""
    p.add_argument(
        "--backend",
        choices=("native", "spark", "auto"),
        default="auto",
        help="native decoder, Spark's state data sources, or auto: native where it can decode the "
        "files, Spark otherwise (default: auto)",
    )
    p.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master for --backend spark (default: $STATELENS_SPARK_MASTER or local[*])",
    )
    p.add_argument(
        "--spark-remote",
        metavar="sc://HOST:PORT",
        help="run the Spark backend through Spark Connect (no local JVM or Java needed; default: "
        "$STATELENS_SPARK_REMOTE); the server reads the checkpoint, so give a path it can reach",
    )
    p.add_argument(
        "--spark-conf", metavar="FILE", help="spark-defaults style file of extra Spark confs (S3A...)"
    )


STORAGE_OPTION_HELP = (
    "fsspec storage option for opening the checkpoint, repeatable: endpoint_url=http://localhost:9000, anon=true, "
    "client_kwargs.region_name=eu-west-1 (dots nest; true/false, null, numbers and JSON are parsed; values of "
    "key/secret/token options stay strings and are never shown)"
)

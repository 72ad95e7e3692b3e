"""Read-only access to a checkpoint folder through fsspec (local paths, ``file://``, ``s3://``...).

The wrapper offers listing, stat and read methods only: nothing in statelens can write, rename or
delete inside a checkpoint through it. The whole tree is listed once (one recursive ``find``, which
is a single paginated listing on object stores) and served from that cache; small files can be
fetched in parallel where latency dominates (object stores).

Flaky and slow storage. Every storage call (the listing, each file read) goes through one retry
loop: a transient failure (timeouts, dropped connections, throttling such as S3 ``SlowDown``/503,
server errors, ``EIO``/``EBUSY``) is retried with exponential backoff and jitter, bounded by a number of
attempts and a total time per file (:class:`RetryPolicy`); a file that stays unreadable raises one
:class:`~readers.errors.StorageError` naming it, the attempts and the last cause, while
:meth:`CheckpointFS.read_many` still returns every other file. Missing files and denied access are
not retried. On asynchronous filesystems (s3fs, gcsfs, http) each request runs on fsspec's event loop
and is awaited in slices of :data:`POLL_S`, so a ``cancelled`` callable (or a ``threading.Event``)
stops a stalled request, a backoff wait or a batch within a fraction of a second, and a request that
hangs longer than ``attempt_timeout_s`` is abandoned and retried. For ``s3://`` URLs the retries of
s3fs and botocore are turned off unless ``storage_options`` set them, so this loop is the only one
(attempts stay countable and cancellable); ``s3://KEY:SECRET@bucket/prefix`` is accepted and turned into
``key``/``secret`` options. Messages and log lines are passed through :func:`~readers.errors.redact`
and scrubbed of every credential given in ``storage_options`` or the URL; botocore's DEBUG request
dumps get a filter that hides the access key id of their ``Authorization`` header.

Latency. On remote storage a store reader announces the files it is about to read
(:meth:`CheckpointFS.read_ahead`, through :class:`PartitionReadAhead`: a partition's files, then the
next partitions' once it reads partitions one after another); they are fetched with up to
:data:`REMOTE_IN_FLIGHT` requests in flight while at most :data:`READ_AHEAD_BYTES` wait to be taken,
and :meth:`CheckpointFS.read_bytes` takes them in the order the replay needs. S3 objects are read with
one ``GetObject`` carrying the listed ETag (``If-Match``), never a ``HeadObject`` first; a file
rewritten since the listing (another ETag, or another size) raises
:class:`~readers.errors.FileChangedError` naming it. Files read from remote storage are kept in the
local mirror (:mod:`readers.mirror`) and read from there while their listed size and ETag are unchanged;
an open also keeps up to :data:`KEEP_BYTES` of them in memory for its own second reads.
The local disk keeps its own fast path: one ``os.scandir`` walk and plain ``open``/``read``, nothing
read ahead or mirrored.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import errno
import inspect
import logging
import os
import posixpath
import random
import re
import stat
import threading
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from statelens.readers.errors import (
    FileChangedError,
    MissingFileError,
    NotACheckpointError,
    ReadCancelledError,
    StatelensError,
    StorageError,
    redact,
)
from statelens.readers.mirror import FileMirror, mirror_enabled
from statelens.readers.model import FileEntry

log = logging.getLogger(__name__)

#: Requests in flight when reading ahead on remote storage, and connections s3fs may keep open
#: (``$STATELENS_REMOTE_REQUESTS`` overrides; botocore's own default pool is 10 connections).
REMOTE_IN_FLIGHT = max(1, int(os.environ.get("STATELENS_REMOTE_REQUESTS", "0") or 0) or 64)

#: Parallel reads of :meth:`CheckpointFS.read_many` (logs) on object stores; local disks gain nothing
#: from threads for small files.
REMOTE_READ_WORKERS = REMOTE_IN_FLIGHT

#: Bytes (by listed size) read ahead and not yet taken by a reader, those in flight included
#: (``$STATELENS_READ_AHEAD_BYTES`` overrides).
READ_AHEAD_BYTES = max(1, int(os.environ.get("STATELENS_READ_AHEAD_BYTES", "0") or 0) or 256 << 20)

#: How often a waiting read or backoff looks at its ``cancelled`` callable (seconds).
POLL_S = 0.05

#: Bytes of remote files one open keeps in memory, so that a second pass over the same files in one
#: command or app session (the verdicts' check of every file, then growth) neither fetches them again
#: nor reads them back from the mirror (with ``--no-cache`` there is none). Files read once it is full
#: are not kept: passes go through the files in the same order, so the first ones kept are the ones
#: read first again (dropping the oldest would leave a second pass nothing). ``$STATELENS_KEEP_BYTES``
#: overrides.
KEEP_BYTES = max(1, int(os.environ.get("STATELENS_KEEP_BYTES", "0") or 0) or 512 << 20)

#: ``errno`` values of failures worth another try (s3fs maps 500 to EREMOTEIO, 503/SlowDown to EBUSY).
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EIO",
        "EBUSY",
        "EAGAIN",
        "EREMOTEIO",
        "ECONNRESET",
        "ECONNABORTED",
        "ECONNREFUSED",
        "ETIMEDOUT",
        "EPIPE",
        "ENETDOWN",
        "ENETUNREACH",
        "ENETRESET",
        "EHOSTUNREACH",
        "EHOSTDOWN",
    )
    if hasattr(errno, name)
)
#: Exceptions of HTTP client libraries (botocore, aiohttp, urllib3) that s3fs may let through untranslated.
_TRANSIENT_NAME_PARTS = (
    "Timeout",
    "Connection",
    "Connect",
    "IncompleteRead",
    "Payload",
    "Disconnected",
    "ResponseStreaming",
    "ProtocolError",
    "ReadError",
)
_CLIENT_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "http.client", "fsspec")
#: fsspec protocols whose own retry layers are switched off (see the module docstring).
_S3_PROTOCOLS = ("s3", "s3a")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient storage failure.

    Attributes
    ----------
    attempts : int
        Tries per file (or listing), the first included; 1 means no retry.
    first_delay_s, max_delay_s : float
        Backoff before retry ``n`` (1-based) is ``min(max_delay_s, first_delay_s * 2 ** (n - 1))``,
        scaled by a random factor in ``[1 - jitter, 1 + jitter]``.
    deadline_s : float
        No retry starts once this many seconds have passed since the first attempt on the file.
    attempt_timeout_s : float or None
        A single request on an asynchronous filesystem that takes longer is abandoned and counts as
        a transient timeout (``None``: wait as long as the client library does).
    jitter : float
        Relative spread of the backoff, so parallel readers do not retry in lockstep.
    """

    attempts: int = 5
    first_delay_s: float = 0.2
    max_delay_s: float = 4.0
    deadline_s: float = 60.0
    attempt_timeout_s: float | None = 60.0
    jitter: float = 0.25

    def delay_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The backoff before retry number ``retry`` (1 for the first retry)."""
        base = min(self.max_delay_s, self.first_delay_s * (2 ** (retry - 1)))
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        return max(0.0, base * spread)


#: The policy used when none is given.
DEFAULT_RETRY = RetryPolicy()


def is_transient(err: BaseException) -> bool:
    """Whether a storage failure may go away on its own (worth a retry).

    Parameters
    ----------
    err : BaseException
        What the filesystem raised.

    Returns
    -------
    bool
        True for timeouts, dropped or refused connections, throttling and server errors; False for
        missing files, denied access, bad arguments and anything unknown.
    """
    if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(err, (TimeoutError, ConnectionError)):
        return True
    if type(err).__name__ == "TimeoutError" and type(err).__module__.startswith("asyncio"):
        return True  # Python 3.10's asyncio.TimeoutError (an alias of TimeoutError since 3.11)
    if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS:
        return True
    name = type(err).__name__
    module = type(err).__module__
    return module.startswith(_CLIENT_MODULES) and any(part in name for part in _TRANSIENT_NAME_PARTS)


#: Client exception names of a storage endpoint that never answered (connection refused, no such host).
UNREACHABLE_ERRORS = (
    "EndpointConnectionError",
    "ConnectionRefusedError",
    "ClientConnectorError",
    "gaierror",
    "ConnectError",
)


def is_unreachable(err: BaseException) -> bool:
    """Whether a storage failure says the endpoint could not be reached at all (no answer).

    Parameters
    ----------
    err : BaseException
        What the filesystem raised.

    Returns
    -------
    bool
        True for refused connections, unknown hosts and clients' "could not connect" errors.
    """
    return type(err).__name__ in UNREACHABLE_ERRORS


Cancelled = Callable[[], bool] | threading.Event | None


def _as_check(cancelled: Cancelled) -> Callable[[], bool] | None:
    if cancelled is None:
        return None
    if isinstance(cancelled, threading.Event):
        return cancelled.is_set
    return cancelled


class _Stop(Exception):
    """Internal: the caller cancelled while a request was in flight."""


def _version_tag(info: dict[str, Any]) -> str:
    """The listing's change marker of one file: ETag (object stores) or modification time."""
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated"):
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


def _modified_ms(info: dict[str, Any]) -> int | None:
    """When a listed file was last written, in epoch milliseconds: ``LastModified`` (s3fs and the S3
    API, a datetime), ``mtime`` (fsspec's local and memory filesystems: seconds or a datetime),
    ``last_modified`` (adlfs) or ``updated`` (gcsfs, ISO 8601); None when the listing gives none."""
    for key in ("LastModified", "mtime", "last_modified", "updated", "modified"):
        value = info.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, (int, float)):
            return int(value * 1000)
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            return int(value.timestamp() * 1000)
    return None


def _s3_userinfo(url: str, options: dict[str, Any]) -> str:
    """``s3://KEY:SECRET@bucket/p`` -> ``s3://bucket/p`` with ``key``/``secret`` options (s3fs reads no user info)."""
    scheme, rest = url.split("://", 1)
    netloc, sep, tail = rest.partition("/")
    if "@" not in netloc:
        return url
    userinfo, host = netloc.rsplit("@", 1)
    key, _, secret = userinfo.partition(":")
    options.setdefault("key", urllib.parse.unquote(key))
    if secret:
        options.setdefault("secret", urllib.parse.unquote(secret))
    return f"{scheme}://{host}{sep}{tail}"


def _storage_options(url: str, storage_options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    if protocol in _S3_PROTOCOLS:
        url = _s3_userinfo(url, options)
        # One retry loop (ours): botocore's would multiply attempts and hide them from cancel.
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        config.setdefault("max_pool_connections", REMOTE_IN_FLIGHT)  # reads ahead run this many at once
        options["config_kwargs"] = config
    return url, options


_CREDENTIAL_SCOPE_RE = re.compile(r"(Credential=)[^/,\s'\"]+")


class _RedactFilter(logging.Filter):
    """Strips credentials from records of a client library's logger (botocore logs request headers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(_CREDENTIAL_SCOPE_RE.sub(r"\1***", message))
        if clean != message:
            record.msg, record.args = clean, None
        return True


_REDACT_FILTER = _RedactFilter()


def _redact_client_logs() -> None:
    """botocore's DEBUG request dumps carry ``Authorization: ... Credential=<access key id>/...``."""
    for name in ("botocore.endpoint", "aiobotocore.endpoint", "botocore.auth"):
        logger = logging.getLogger(name)
        if _REDACT_FILTER not in logger.filters:
            logger.addFilter(_REDACT_FILTER)


_SECRET_OPTION_RE = re.compile(r"(?i)key|secret|token|password|passwd|credential|username|user")


def _secret_values(url: str, storage_options: dict[str, Any] | None) -> tuple[str, ...]:
    """Credential strings given in ``storage_options`` or a URL's user info, to scrub from messages."""
    found: set[str] = set()

    def walk(options: Any) -> None:
        if isinstance(options, dict):
            for name, value in options.items():
                if isinstance(value, str) and _SECRET_OPTION_RE.search(str(name)):
                    found.add(value)
                else:
                    walk(value)

    walk(storage_options)
    netloc = url.split("://", 1)[1].split("/", 1)[0] if "://" in url else ""
    if "@" in netloc:
        userinfo = netloc.rsplit("@", 1)[0]
        found.add(userinfo)
        found.update(userinfo.split(":", 1))
    found |= {urllib.parse.unquote(v) for v in found} | {urllib.parse.quote(v, safe="") for v in found}
    return tuple(sorted((v for v in found if len(v) >= 4), key=len, reverse=True))


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for value in secrets:
        text = text.replace(value, "***")
    return redact(text)


class _LocalDisk:
    """The filesystem calls :class:`CheckpointFS` makes on a local folder (it lists and reads the disk
    itself: :func:`_local_find`, :func:`_local_read`), so that a local checkpoint on a POSIX system is
    opened without importing fsspec, whose import brings asyncio and importlib.metadata (~40 ms of every
    command)."""

    protocol = ("file", "local")

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached."""

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


def _split_url(
    url: str, storage_options: dict[str, Any] | None, secrets: tuple[str, ...] = ()
) -> tuple[Any, str]:
    if "://" not in url and os.sep == "/" and not storage_options:  # a local path: fsspec is not needed
        return _LocalDisk(), url.rstrip("/") or "/"
    import fsspec  # deferred: fsspec (slow import: asyncio, ~40 ms), only for URLs

    try:
        url, options = _storage_options(url, storage_options)
        fs, root = fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError, TypeError) as err:
        raise StorageError(
            f"cannot open {_scrub(url, secrets)}: {_scrub(str(err), secrets)}", path=_scrub(url, secrets)
        ) from err
    if "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        _redact_client_logs()
        # s3fs retries as a class attribute; this instance is ours (its config_kwargs set the retries above)
        fs.retries = 1
    return fs, root.rstrip("/") or "/"


def _local_find(root: str) -> dict[str, FileEntry]:
    """Every file and folder under ``root`` on the local disk, by path relative to ``root``, as fsspec's
    ``find(root, withdirs=True, detail=True)`` lists them: symbolic links are entries of their own (not
    followed) with the size of what they point to; the version tag is the entry's own ``mtime``.

    Each folder is listed through a descriptor opened from the root's, so that each entry's ``stat``
    looks up one name in its folder, not every folder of its path (13,000 entries: ~40 -> ~30 ms of
    system calls); an error names the full path, as a listing by path would."""
    found: dict[str, FileEntry] = {}
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pending = [""]
        while pending:
            rel_dir = pending.pop()
            try:
                fd = os.open(rel_dir, os.O_RDONLY | os.O_DIRECTORY, dir_fd=top) if rel_dir else top
            except FileNotFoundError:
                continue  # removed while listing
            except OSError as err:  # an unreadable folder raises, naming itself
                raise _named(err, root, rel_dir) from None
            prefix = rel_dir + "/" if rel_dir else ""
            try:
                with os.scandir(fd) as it:  # lists a copy of ``fd``
                    for e in it:
                        rel = prefix + e.name
                        try:
                            st = e.stat(follow_symlinks=False)
                            mode = st.st_mode
                            size = st.st_size
                            if stat.S_ISLNK(mode):
                                try:
                                    size = e.stat(follow_symlinks=True).st_size
                                except OSError:
                                    size = 0
                        except FileNotFoundError:  # removed while listing
                            continue
                        except OSError as err:
                            raise _named(err, root, rel) from None
                        is_dir = stat.S_ISDIR(mode)
                        found[rel] = FileEntry(
                            rel, size, is_dir, f"mtime={st.st_mtime}", st.st_mtime_ns // 1_000_000
                        )
                        if is_dir:
                            pending.append(rel)
            finally:
                if fd != top:
                    os.close(fd)
    finally:
        os.close(top)
    return found


def _local_ls(folder: str, rel_dir: str) -> list[FileEntry]:
    """The entries of one local folder, relative paths under ``rel_dir``; a symbolic link to a folder is a
    folder (a tree of links to checkpoints is searched like the checkpoints themselves)."""
    out: list[FileEntry] = []
    prefix = rel_dir + "/" if rel_dir else ""
    with os.scandir(folder) as it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=True)
            except FileNotFoundError:  # removed while listing, or a dangling link
                continue
            except OSError as err:
                raise _named(err, folder, e.name) from None
            is_dir = stat.S_ISDIR(st.st_mode)
            modified = st.st_mtime_ns // 1_000_000
            out.append(FileEntry(prefix + e.name, st.st_size, is_dir, f"mtime={st.st_mtime}", modified))
    return out


def _named(err: OSError, root: str, rel: str) -> OSError:
    """``err`` naming ``root/rel`` (a call through a folder's descriptor names only what is in it)."""
    return type(err)(err.errno, err.strerror, os.path.join(root, rel) if rel else root)


class _KeptFiles:
    """Remote files' bytes kept in memory by relative path, the first ``max_bytes`` of them read (see
    :data:`KEEP_BYTES`) by one open, before the mirror (and in its place without one). The bytes are those
    of the listed file (its size checked when fetched)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.held = 0
        self._files: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __contains__(self, path: str) -> bool:
        return path in self._files

    def get(self, path: str) -> bytes | None:
        return self._files.get(path)

    def put(self, path: str, data: bytes) -> None:
        with self._lock:
            if path not in self._files and self.held + len(data) <= self.max_bytes:
                self._files[path] = data
                self.held += len(data)


def _local_read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _listed_etag(entry: FileEntry) -> str | None:
    """The ETag the listing gave a file (object stores), else None."""
    return entry.version_tag[5:] if entry.version_tag.startswith("ETag=") else None


async def _s3_get(fs: Any, full: str, etag: str | None) -> bytes:
    """One ``GetObject`` of a whole object, only if it still has the listed ETag (``If-Match``: S3 answers
    412 otherwise). No ``HeadObject`` first, which s3fs's ``cat_file`` sends to size large objects."""
    bucket, key, version_id = fs.split_path(full)
    extra: dict[str, str] = {}
    if etag:
        extra["IfMatch"] = etag
    if version_id:
        extra["VersionId"] = version_id
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    try:
        return bytes(await resp["Body"].read())
    finally:
        resp["Body"].close()


async def _s3_list_tree(fs: Any, full: str, max_pages: int) -> tuple[list[dict[str, Any]] | None, int]:
    """Every object below ``full`` in one recursive listing (``ListObjectsV2`` without a delimiter, 1,000
    keys a page), at most ``max_pages`` pages: (objects, pages), or (None, pages) when there are more."""
    bucket, key, _ = fs.split_path(full)
    prefix = key.rstrip("/") + "/" if key else ""
    out: list[dict[str, Any]] = []
    token = None
    pages = 0
    while True:
        kw: dict[str, Any] = {
            "Bucket": bucket,
            "Prefix": prefix,
            "MaxKeys": 1000,
            **getattr(fs, "req_kw", {}),
        }
        if token:
            kw["ContinuationToken"] = token
        resp = await fs._call_s3("list_objects_v2", **kw)
        pages += 1
        for c in resp.get("Contents", []):
            c["Key"] = c["Key"][len(prefix) :]
            out.append(c)
        if not resp.get("IsTruncated"):
            return out, pages
        if pages >= max_pages:
            return None, pages
        token = resp.get("NextContinuationToken")


def _precondition_failed(err: BaseException) -> bool:
    """Whether a storage error is S3's answer to a failed ``If-Match`` (412 PreconditionFailed)."""
    text = f"{err} {err.__cause__ or ''}"
    return "PreconditionFailed" in text or "Precondition Failed" in text or "(412)" in text


class CheckpointFS:
    """A read-only, listing-cached view of one checkpoint folder.

    Parameters
    ----------
    url : str
        Local path, ``file://`` URL or any fsspec URL (``s3://bucket/prefix``).
    storage_options : dict, optional
        Passed to fsspec (credentials come from the usual places when omitted; ``endpoint_url`` goes in
        ``client_kwargs`` for S3-compatible stores).
    retry : RetryPolicy, optional
        Retries of transient failures (default :data:`DEFAULT_RETRY`).
    cancelled : callable or threading.Event, optional
        Checked between attempts, between files and while a request is in flight; when it turns true
        the listing or read stops with :class:`ReadCancelledError`. Each read method also takes its own.
    mirror : FileMirror or bool, optional
        Where files read from remote storage are kept on the local disk and read again
        (:mod:`readers.mirror`): True (default) for the user's cache folder unless ``$STATELENS_MIRROR``
        is ``0``, False or None for none. Local checkpoints are never mirrored.
    keep_bytes : int, optional
        Remote files read are kept in memory up to this many bytes for reading again in this open
        (default :data:`KEEP_BYTES`; 0 keeps none, for a copy that reads each file once).

    Attributes
    ----------
    stats : dict
        ``requests`` (storage calls made), ``retries`` and ``failures`` (files given up on),
        ``mirrored`` (files served by the mirror), ``kept`` (files read again from memory:
        :data:`KEEP_BYTES`), since opening; for reports and tests.
    fetched : collections.Counter
        Remote files read from the storage (not the mirror), by relative path.

    Raises
    ------
    NotACheckpointError
        When the path does not exist or is not a folder.
    StorageError
        When the storage cannot be reached or listed (after retries).
    ReadCancelledError
        When ``cancelled`` turned true during the listing.
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        cancelled: Cancelled = None,
        mirror: FileMirror | bool | None = True,
        keep_bytes: int | None = None,
        listed: bool = True,
        entries: Iterable[FileEntry] | None = None,
    ):
        if "://" not in url:
            url = os.path.abspath(os.path.expanduser(url))
        self.url = url
        self.retry = retry or DEFAULT_RETRY
        self._cancelled = _as_check(cancelled)
        self._secrets = _secret_values(url, storage_options)
        self._display_root = _scrub(url, self._secrets)  # once: every mirror lookup names the location
        self._fs, self._root = _split_url(url, storage_options, self._secrets)
        self._protocol = self._fs.protocol if isinstance(self._fs.protocol, str) else self._fs.protocol[0]
        self._lock = threading.RLock()  # reentrant: a read ahead that is done at once calls back into it
        self._rng = random.Random()
        self.stats = {"requests": 0, "retries": 0, "failures": 0, "mirrored": 0, "kept": 0}
        self.fetched: Counter[str] = Counter()
        self._entries: dict[str, FileEntry] = {}
        self._children: dict[str, list[FileEntry]] = {}
        self._s3_get = (
            "s3" in (self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,))
            and hasattr(self._fs, "_call_s3")
            and getattr(self._fs, "async_impl", False)
            and not getattr(self._fs, "asynchronous", False)
        )
        self.mirror: FileMirror | None = None
        if not self.is_local and mirror is not None and mirror is not False:
            if mirror is True:
                self.mirror = FileMirror() if mirror_enabled() else None
            else:
                self.mirror = mirror
        #: remote files read in this open, kept in memory for its second reads
        keep = KEEP_BYTES if keep_bytes is None else keep_bytes
        self._kept = _KeptFiles(keep) if keep > 0 and not self.is_local else None
        # reads ahead (remote storage): paths not started yet, in order; started ones by path (done or
        # in flight, until a reader takes them); bytes they hold by listed size; a stop event per round
        self._ahead_queue: deque[str] = deque()
        self._ahead_mirrored: set[str] = set()  # announced and found in the mirror: not looked up again
        self._ahead_queued: set[str] = set()
        self._ahead: dict[str, Future[bytes]] = {}
        self._ahead_bytes = 0
        self._ahead_running = 0
        self._ahead_stop = threading.Event()
        self._ahead_pool: ThreadPoolExecutor | None = None
        if entries is not None:  # listed already, in this run (a fleet search's recursive listing)
            self._index({e.path: e for e in entries})
        elif listed:
            self._list_tree()

    # -- storage calls, retried ---------------------------------------------------------------------
    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _check(self, cancelled: Cancelled) -> Callable[[], bool]:
        own = _as_check(cancelled)
        default = self._cancelled
        if own is None and default is None:
            return lambda: False
        if own is None or default is None:
            return own or default  # type: ignore[return-value]
        return lambda: own() or default()

    def _call_once(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        stop: Callable[[], bool],
    ) -> Any:
        """One storage call; on an async filesystem it is awaited in slices so ``stop`` can end it.

        ``method`` names the fsspec method, or is a function to call (the local disk's fast paths), or a
        coroutine function to run on the filesystem's event loop (:func:`_s3_get`).
        """
        self._count("requests")
        fs = self._fs
        if callable(method):
            if not inspect.iscoroutinefunction(method):
                return method(*args, **kwargs)
            coro = method(*args, **kwargs)
        else:
            coro_fn = getattr(fs, "_" + method, None)
            if not (getattr(fs, "async_impl", False) and not getattr(fs, "asynchronous", False) and coro_fn):
                return getattr(fs, method)(*args, **kwargs)
            coro = coro_fn(*args, **kwargs)
        import asyncio  # deferred: asyncio (~40 ms of imports), only for a remote filesystem's coroutines

        future = asyncio.run_coroutine_threadsafe(coro, fs.loop)
        limit = self.retry.attempt_timeout_s
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            done, _ = concurrent.futures.wait([future], timeout=POLL_S)
            if done:
                return future.result()
            if stop():
                future.cancel()
                raise _Stop
            if deadline is not None and time.monotonic() > deadline:
                future.cancel()
                raise TimeoutError(f"no answer from the storage within {limit:g} s")

    def _sleep(self, seconds: float, stop: Callable[[], bool], path: str) -> None:
        end = time.monotonic() + seconds
        while True:
            if stop():
                raise ReadCancelledError("cancelled while waiting to retry", path=path)
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL_S, left))

    def _retrying(
        self,
        what: str,
        path: str,
        method: str | Callable[..., Any],
        args: tuple[Any, ...],
        stop: Callable[[], bool],
        **kwargs: Any,
    ) -> Any:
        """Call ``fs.<method>(*args)`` with the retry policy; typed errors naming ``path``."""
        policy = self.retry
        started = time.monotonic()
        attempt = 0
        while True:
            if stop():
                raise ReadCancelledError(f"cancelled before {what}", path=path)
            attempt += 1
            try:
                return self._call_once(method, args, kwargs, stop)
            except _Stop:
                raise ReadCancelledError(f"cancelled while {what}", path=path) from None
            except FileNotFoundError as err:
                raise MissingFileError(
                    "file disappeared after listing" if what == "reading" else f"not found while {what}",
                    path=path,
                ) from err
            except Exception as err:  # every client library raises its own classes: sort them below
                if _precondition_failed(err):
                    self._count("failures")
                    raise FileChangedError(
                        "changed since the checkpoint was listed (its ETag is no longer the listed one); "
                        "open the checkpoint again to read the new file",
                        path=path,
                    ) from None
                raw = str(err)
                clean = _scrub(raw, self._secrets)
                cause = f"{type(err).__name__}: {clean}".rstrip(": ")
                # a library message that quoted a credential must not reach a traceback either
                chained = err if clean == redact(raw) else None
                elapsed = time.monotonic() - started
                transient = is_transient(err)
                delay = policy.delay_s(attempt, self._rng)
                if not transient or attempt >= policy.attempts or elapsed + delay > policy.deadline_s:
                    self._count("failures")
                    tried = f"{attempt} attempt(s) over {elapsed:.1f} s"
                    if not transient:
                        message = f"{what} failed ({cause}); not retried, the error is not transient"
                    elif is_unreachable(err):
                        # Say what was seen: no answer at all (an endpoint URL, network or service down).
                        message = f"{what} failed: cannot connect to the storage endpoint ({tried}): {cause}"
                    else:
                        message = f"{what} still failing after {tried} (last: {cause}); try again later"
                    raise StorageError(message, path=path, attempts=attempt) from chained
                self._count("retries")
                log.warning(
                    "%s: %s failed (%s), attempt %d of %d; retrying in %.2f s",
                    _scrub(path, self._secrets),
                    what,
                    cause,
                    attempt,
                    policy.attempts,
                    delay,
                )
                self._sleep(delay, stop, path)

    # -- listing -------------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """True when the checkpoint is on the local disk."""
        return self._protocol in ("file", "local")

    @property
    def display_root(self) -> str:
        """The checkpoint location without credentials, for messages."""
        return self._display_root

    def _list_tree(self) -> None:
        stop = self._check(None)
        where = self.display_root
        self._fs.invalidate_cache(self._root)  # one fresh listing per open (a reload sees new files)
        prefix = self._root.rstrip("/") + "/"
        if self.is_local:
            self._check_folder(where, stop)
        if self.is_local and os.sep == "/":  # fsspec's listing without its per-file overhead (3x faster)
            self._entries = self._retrying("listing", where, _local_find, (self._root,), stop)
        else:
            # one paginated listing; the folder is checked only when it lists nothing under the prefix
            found = self._retrying("listing", where, "find", (self._root,), stop, withdirs=True, detail=True)
            if not self.is_local and not any(k.rstrip("/").startswith(prefix) for k in found):
                self._check_folder(where, stop)
            for full, info in found.items():
                full = full.rstrip("/")
                if not full.startswith(prefix):
                    continue
                rel = full[len(prefix) :]
                is_dir = info.get("type") == "directory"
                entry = FileEntry(
                    rel, int(info.get("size") or 0), is_dir, _version_tag(info), _modified_ms(info)
                )
                self._entries[rel] = entry
        self._index(self._entries)

    def _index(self, entries: dict[str, FileEntry]) -> None:
        """Keep ``entries`` (relative path -> entry) as the listing, with their parent folders."""
        self._entries = entries
        if not self.is_local:
            # Object stores have no folders, only key prefixes, and s3fs reports them only when its
            # listing cache is cold: every parent of a listed file is a folder.
            for rel in list(self._entries):
                parent = rel.rpartition("/")[0]
                while parent and parent not in self._entries:  # a listed folder's parents come in its turn
                    self._entries[parent] = FileEntry(parent, 0, True)
                    parent = parent.rpartition("/")[0]
        self._children[""] = []
        self._entries = dict(sorted(self._entries.items()))
        for rel, entry in self._entries.items():
            if entry.is_dir:
                self._children.setdefault(rel, [])
        for rel, entry in self._entries.items():
            self._children.setdefault(rel.rpartition("/")[0], []).append(entry)

    def list_tree(
        self, path: str, max_pages: int, *, cancelled: Cancelled = None
    ) -> tuple[list[FileEntry] | None, int]:
        """Every file below ``path`` in one recursive listing of at most ``max_pages`` pages (S3 only:
        ``ListObjectsV2`` without a delimiter, retried), not remembered here.

        Parameters
        ----------
        path : str
            Relative to the root.
        max_pages : int
            Pages (requests of 1,000 keys) at most.
        cancelled : callable or threading.Event, optional

        Returns
        -------
        (list of FileEntry or None, int)
            The files (paths relative to ``path``) and the pages read; None when there are more than
            ``max_pages`` pages, or when the storage has no such listing (then no page was read).

        Raises
        ------
        StorageError
            When the prefix cannot be listed (after retries).
        ReadCancelledError
        """
        if not self._s3_get or max_pages < 1:
            return None, 0
        stop = self._check(cancelled)
        where = posixpath.join(self.display_root, path) if path else self.display_root
        found, pages = self._retrying(
            "listing", where, _s3_list_tree, (self._fs, self.full_path(path), max_pages), stop
        )
        if found is None:
            return None, pages
        files = [
            FileEntry(c["Key"], int(c.get("Size") or 0), False, _version_tag(c), _modified_ms(c))
            for c in found
            if c["Key"] and not c["Key"].endswith("/")
        ]
        return files, pages

    def list_prefix(self, path: str = "", *, cancelled: Cancelled = None) -> list[FileEntry]:
        """List one folder (one ``ls``, retried; a paginated listing of one prefix on object stores),
        not the tree below it. Folders reached through a symbolic link on the local disk are folders.
        The entries are remembered, so that files listed here can be read with :meth:`read_bytes`.

        Parameters
        ----------
        path : str
            Relative to the root ("" for the root itself).
        cancelled : callable or threading.Event, optional

        Returns
        -------
        list of FileEntry
            Sorted by path, relative to the root.

        Raises
        ------
        NotACheckpointError
            When the root does not exist or is a file (listing the root only).
        StorageError
            When the folder cannot be listed (after retries); the message names it.
        ReadCancelledError
        """
        stop = self._check(cancelled)
        full = self.full_path(path)
        where = posixpath.join(self.display_root, path) if path else self.display_root
        if self.is_local and os.sep == "/":
            if not path:
                self._check_folder(where, stop)
            entries = self._retrying("listing", where, _local_ls, (full, path), stop)
        else:
            self._fs.invalidate_cache(full)
            found = self._retrying("listing", where, "ls", (full,), stop, detail=True)
            if not found and not path:
                self._check_folder(where, stop)
            prefix = full.rstrip("/") + "/"
            entries = []
            for info in found:
                name = str(info.get("name", "")).rstrip("/")
                if not name.startswith(prefix):
                    continue  # the folder itself (some filesystems list it)
                rel = posixpath.join(path, name[len(prefix) :]) if path else name[len(prefix) :]
                is_dir = info.get("type") == "directory"
                size = int(info.get("size") or 0)
                entries.append(FileEntry(rel, size, is_dir, _version_tag(info), _modified_ms(info)))
        entries.sort(key=lambda e: e.path)
        with self._lock:
            for e in entries:
                self._entries[e.path] = e
        return entries

    def relist(self) -> None:
        """List the checkpoint again (one listing, as at open), for a checkpoint a query is still writing.

        Files renamed into place, uploaded or deleted since the last listing are seen; a file read
        afterwards is checked against the new listing (its size, on S3 its ETag).

        Raises
        ------
        StorageError
            When the storage cannot be listed (the previous listing is kept).
        """
        with self._lock:
            entries, children = self._entries, self._children
            self._entries, self._children = {}, {}
            try:
                self._list_tree()
            except BaseException:
                self._entries, self._children = entries, children
                raise

    def _check_folder(self, where: str, stop: Callable[[], bool]) -> None:
        """Raise :class:`NotACheckpointError` unless the root is a folder."""
        if not self._retrying("checking the folder", where, "isdir", (self._root,), stop):
            if self._retrying("checking the folder", where, "exists", (self._root,), stop):
                raise NotACheckpointError("is a file, not a checkpoint folder", path=where)
            raise NotACheckpointError("no such folder", path=where)

    def exists(self, path: str) -> bool:
        """True when ``path`` (relative to the root) was listed."""
        return path in self._entries or path == ""

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a listed folder."""
        return path == "" or (path in self._entries and self._entries[path].is_dir)

    def list_dir(self, path: str = "") -> list[FileEntry]:
        """Entries directly inside folder ``path`` (empty when it does not exist)."""
        return list(self._children.get(path.rstrip("/"), []))

    def entry(self, path: str) -> FileEntry:
        """The listing entry of ``path``.

        Raises
        ------
        MissingFileError
            When ``path`` was not listed.
        """
        try:
            return self._entries[path]
        except KeyError:
            raise MissingFileError("file not found in the checkpoint", path=path) from None

    def walk_files(self, path: str = "") -> Iterable[FileEntry]:
        """Every file (not folder) under ``path``, in sorted path order."""
        prefix = path.rstrip("/") + "/" if path else ""
        for rel, entry in self._entries.items():
            if not entry.is_dir and rel.startswith(prefix):
                yield entry

    def total_files(self) -> int:
        """Number of files in the whole checkpoint."""
        return sum(1 for e in self._entries.values() if not e.is_dir)

    # -- reading -------------------------------------------------------------------------------------
    def full_path(self, path: str) -> str:
        """The storage path of a relative path (for messages, never for writing)."""
        return posixpath.join(self._root, path) if path else self._root

    def read_bytes(self, path: str, *, cancelled: Cancelled = None) -> bytes:
        """Read one whole file, retrying transient failures.

        Parameters
        ----------
        path : str
            Relative to the checkpoint root.
        cancelled : callable or threading.Event, optional
            Stops the read (in flight, or while waiting to retry) when it turns true; the one given
            to the constructor is honoured too.

        Returns
        -------
        bytes

        Raises
        ------
        MissingFileError
            When the file is not in the checkpoint (or vanished after the listing).
        StorageError
            When the storage fails to return it: at once for denied access, after the retry policy
            for transient failures. The message names the file, the attempts and the last cause.
        ReadCancelledError
            When cancelled.
        """
        if path not in self._entries:
            raise MissingFileError("file not found in the checkpoint", path=path)
        stop = self._check(cancelled)
        if self.is_local:
            return bytes(self._retrying("reading", path, _local_read, (self.full_path(path),), stop))
        data = self._take_ahead(path, stop)
        if data is None and self._kept is not None:
            data = self._kept.get(path)
            if data is not None:
                self._count("kept")
        if data is None and self.mirror is not None:
            data = self.mirror.get(self._display_root, self._entries[path])
            if data is not None:
                self._count("mirrored")
        if data is None:
            data = self._fetch(path, stop)
        return data

    def _fetch(self, path: str, stop: Callable[[], bool]) -> bytes:
        """Read one remote file from the storage (retried), check it against its listing, keep it in the
        mirror."""
        entry = self._entries[path]
        full = self.full_path(path)
        if self._s3_get:
            data = self._retrying("reading", path, _s3_get, (self._fs, full, _listed_etag(entry)), stop)
        else:
            data = bytes(self._retrying("reading", path, "cat_file", (full,), stop))
        with self._lock:
            self.fetched[path] += 1
        if len(data) != entry.size_bytes:
            self._count("failures")
            raise FileChangedError(
                f"changed since the checkpoint was listed: read {len(data)} bytes, the listing said "
                f"{entry.size_bytes}; open the checkpoint again to read the new file",
                path=path,
            )
        if self.mirror is not None:
            self.mirror.put(self._display_root, entry, data)
        if self._kept is not None:
            self._kept.put(path, data)
        return data

    # -- reading ahead (remote storage) --------------------------------------------------------------
    def read_ahead(self, paths: Iterable[str]) -> None:
        """Start fetching files a reader is about to read, in this order, many at a time.

        On remote storage, up to :data:`REMOTE_IN_FLIGHT` requests run at once while the files read
        ahead and not yet taken hold at most :data:`READ_AHEAD_BYTES` (by listed size); :meth:`read_bytes`
        then takes a file's bytes from there (waiting for it if it is still in flight), so a replay that
        reads its files one after another pays the latency of the storage once per batch of requests,
        not per file. Each file is fetched once; a failure is raised by the :meth:`read_bytes` that takes
        it, with the same retries and located errors as a direct read. Files already mirrored, already
        announced or not listed are skipped; on the local disk this does nothing.

        Parameters
        ----------
        paths : iterable of str
            Relative paths, in the order they will be read.
        """
        if self.is_local:
            return
        with self._lock:
            for p in paths:
                entry = self._entries.get(p)
                if entry is None or entry.is_dir or p in self._ahead or p in self._ahead_queued:
                    continue
                if p in self._ahead_mirrored or (self._kept is not None and p in self._kept):
                    continue
                if self.mirror is not None and self.mirror.has(self._display_root, entry):
                    self._ahead_mirrored.add(p)
                    continue
                self._ahead_queue.append(p)
                self._ahead_queued.add(p)
        self._pump()

    def cancel_read_ahead(self) -> None:
        """Stop every read ahead (queued or in flight) and drop what was read ahead and not taken."""
        with self._lock:
            self._ahead_stop.set()
            self._ahead_stop = threading.Event()
            self._ahead_queue.clear()
            self._ahead_queued.clear()
            for future in self._ahead.values():
                future.cancel()
            self._ahead.clear()
            self._ahead_bytes = 0

    def read_ahead_held(self) -> tuple[int, int]:
        """Files and bytes (listed size) read ahead or in flight and not taken yet."""
        with self._lock:
            return len(self._ahead), self._ahead_bytes

    def _pump(self) -> None:
        """Start queued reads ahead while the request and byte budgets allow (at least one at a time)."""
        with self._lock:
            stop_event = self._ahead_stop
            own = self._cancelled
            if own is not None and own():
                return
            while self._ahead_queue and self._ahead_running < REMOTE_IN_FLIGHT:
                size = self._entries[self._ahead_queue[0]].size_bytes
                if self._ahead and self._ahead_bytes + size > READ_AHEAD_BYTES:
                    break
                self._start_ahead(self._ahead_queue.popleft(), stop_event)

    def _start_ahead(self, path: str, stop_event: threading.Event) -> Future[bytes]:
        """Submit one read ahead (the lock is held)."""
        self._ahead_queued.discard(path)
        if self._ahead_pool is None:
            self._ahead_pool = ThreadPoolExecutor(REMOTE_IN_FLIGHT, thread_name_prefix="statelens-ahead")
        own = self._cancelled

        def stop() -> bool:
            return stop_event.is_set() or (own is not None and own())

        future = self._ahead_pool.submit(self._fetch, path, stop)
        self._ahead[path] = future
        self._ahead_bytes += self._entries[path].size_bytes
        self._ahead_running += 1
        future.add_done_callback(self._ahead_done)
        return future

    def _ahead_done(self, _: Future[bytes]) -> None:
        with self._lock:
            self._ahead_running -= 1
        self._pump()

    def _take_ahead(self, path: str, stop: Callable[[], bool]) -> bytes | None:
        """The bytes of ``path`` if it was read ahead (waiting while it is in flight; a queued one starts
        at once), else None. Errors of the read ahead are raised here."""
        with self._lock:
            future = self._ahead.pop(path, None)
            if future is None and path in self._ahead_queued:
                self._ahead_queue.remove(path)
                future = self._start_ahead(path, self._ahead_stop)
                self._ahead.pop(path)
            if future is None:
                return None
            self._ahead_bytes -= self._entries[path].size_bytes
        self._pump()
        while True:
            done, _ = concurrent.futures.wait([future], timeout=POLL_S)
            if done:
                break
            if stop():
                future.cancel()
                raise ReadCancelledError("cancelled while reading", path=path)
        if future.cancelled():
            raise ReadCancelledError("cancelled while reading", path=path)
        return future.result()

    def read_many(
        self,
        paths: Iterable[str],
        on_done: Callable[[str], None] | None = None,
        *,
        cancelled: Cancelled = None,
    ) -> dict[str, bytes | StatelensError]:
        """Read several files; a failure is returned in place of that file's bytes.

        Parameters
        ----------
        paths : iterable of str
            Relative paths.
        on_done : callable, optional
            Called with each path once it is read or has failed (for progress; from worker threads
            on remote storage).
        cancelled : callable or threading.Event, optional
            When it turns true, reads in flight stop and files not read yet are not started; they map
            to :class:`ReadCancelledError`. The call returns within about :data:`POLL_S` seconds plus
            the time a local read takes.

        Returns
        -------
        dict
            Path to bytes, or to the :class:`StatelensError` that reading it raised, in the order of
            ``paths``.
        """
        paths = list(paths)
        stop = self._check(cancelled)

        def one(p: str) -> bytes | StatelensError:
            result: bytes | StatelensError
            if stop():
                result = ReadCancelledError("cancelled before reading", path=p)
            else:
                try:
                    result = self.read_bytes(p, cancelled=stop)
                except StatelensError as err:
                    result = err
            if on_done is not None:
                on_done(p)
            return result

        if self.is_local or len(paths) < 4:
            return {p: one(p) for p in paths}
        with ThreadPoolExecutor(max_workers=REMOTE_READ_WORKERS, thread_name_prefix="statelens-read") as pool:
            futures = [pool.submit(one, p) for p in paths]
            return {p: f.result() for p, f in zip(paths, futures, strict=True)}


#: Partitions whose files :class:`PartitionReadAhead` announces beyond the one being read, once a
#: reader goes through partitions in order.
READ_AHEAD_PARTITIONS = 8


class PartitionReadAhead:
    """Announces to :meth:`CheckpointFS.read_ahead` the files a store reader is about to read.

    A reader calls :meth:`touch` when it starts reading a partition, naming the kind of read (a whole
    replay, one version's chain...) and how to list the files that kind of read needs in a partition.
    The partition's own files are announced at once; when the reader then reads another partition
    with the same kind of read (commands go through the partitions in order), the files of the
    following partitions are announced too (at least :data:`READ_AHEAD_PARTITIONS`, and enough for four
    times :data:`REMOTE_IN_FLIGHT` files), and so on, so the storage is always ahead of the replay.
    Reading one partition alone fetches nothing else.

    Parameters
    ----------
    fs : CheckpointFS
        The checkpoint (nothing happens on the local disk).
    partition_ids : list of int
        The store's partitions, in the order readers go through them.
    """

    def __init__(self, fs: CheckpointFS, partition_ids: list[int]):
        self.fs = fs
        self.order = {pid: i for i, pid in enumerate(partition_ids)}
        self.partition_ids = partition_ids
        self._last: dict[Any, int] = {}  # kind -> position of the partition touched last
        self._announced: dict[Any, int] = {}  # kind -> positions below this one are announced
        self._lock = threading.Lock()

    def touch(self, kind: Any, partition_id: int, files: Callable[[int], Iterable[str]]) -> None:
        """A reader starts reading ``partition_id``; ``files(pid)`` lists, in reading order, what this
        ``kind`` of read needs from partition ``pid`` (it may raise a ``StatelensError``: nothing is then
        announced for that partition, the read itself reports it)."""
        if self.fs.is_local or partition_id not in self.order:
            return
        at = self.order[partition_id]
        try:
            own = list(files(partition_id))
        except StatelensError:
            own = []
        # enough partitions ahead to keep every request slot busy across partition boundaries
        window = max(READ_AHEAD_PARTITIONS, -(-4 * REMOTE_IN_FLIGHT // max(1, len(own))))
        with self._lock:
            last = self._last.get(kind)
            self._last[kind] = at
            done = self._announced.get(kind, 0)
            # a second partition read the same way: a scan over partitions (threads may take them a
            # little out of order)
            sequential = last is not None and at != last
            end = min(len(self.partition_ids), at + 1 + window) if sequential else at + 1
            todo = [i for i in range(max(at + 1, done), end)]
            if sequential:
                self._announced[kind] = max(done, end)
        paths = own
        for i in todo:
            try:
                paths.extend(files(self.partition_ids[i]))
            except StatelensError:
                continue
        self.fs.read_ahead(paths)

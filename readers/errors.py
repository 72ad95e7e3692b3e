"""Typed, located errors for everything statelens reads.

Every failure a user can act on has its own class under :class:`StatelensError`. Each carries the
``path`` of the file involved, an optional byte ``offset`` and optional context (operator, partition,
version, record index), and its one-line ``str()`` names the file and what is wrong.
"""

from __future__ import annotations

import re
from typing import Any

_CREDENTIAL_RE = re.compile(
    r"(?i)((?:aws_)?(?:secret|access)[_-]?(?:access[_-]?)?key(?:[_-]?id)?|token|password|session[_-]?token)"
    r"(\s*[=:]\s*)([^\s&;,'\"]+)"
)
_URL_USERINFO_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact(text: str) -> str:
    """Remove credentials from a URL or message.

    Parameters
    ----------
    text : str
        Any text that may hold a URL with user info or ``key=value`` credentials.

    Returns
    -------
    str
        The text with user info and secret values replaced by ``***``.
    """
    text = _URL_USERINFO_RE.sub(r"\1***@", text)
    return _CREDENTIAL_RE.sub(r"\1\2***", text)


class StatelensError(Exception):
    """Root of every error statelens raises on purpose.

    Parameters
    ----------
    message : str
        What is wrong, in one sentence, without the path (it is prefixed).
    path : str, optional
        The file or folder involved, relative to the checkpoint root where possible.
    offset : int, optional
        Byte offset in the (decompressed, where stated) file where the problem was found.
    **context : Any
        Extra facts: ``operator_id``, ``partition_id``, ``store_name``, ``version``, ``record``...
    """

    kind = "error"

    def __init__(self, message: str, path: str | None = None, offset: int | None = None, **context: Any):
        self.message = redact(message)
        self.path = redact(path) if path is not None else None
        self.offset = offset
        self.context = {k: v for k, v in context.items() if v is not None}
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.offset is not None:
                where += f" at byte {self.offset}"
            where += ": "
        extra = ""
        if self.context:
            extra = " (" + ", ".join(f"{k}={v}" for k, v in self.context.items()) + ")"
        return f"{where}{self.message}{extra}"

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready description of this error."""
        return {
            "error": type(self).__name__,
            "path": self.path,
            "offset": self.offset,
            "message": self.message,
            **{k: v for k, v in self.context.items()},
        }


class NotACheckpointError(StatelensError):
    """The folder has none of ``metadata``, ``offsets/``, ``commits/`` or ``state/``."""


class MissingFileError(StatelensError):
    """A file the checkpoint needs is not there (e.g. a delta between a snapshot and a version)."""


class TruncatedFileError(StatelensError):
    """A file ends before the structure it holds does."""


class BadMagicError(StatelensError):
    """A file does not start with the bytes its format requires."""


class ChecksumError(StatelensError):
    """A stored checksum does not match the bytes."""


class UnknownCodecError(StatelensError):
    """The compression of a state file is not one Spark writes (lz4, zstd, snappy, lzf)."""


class CorruptFileError(StatelensError):
    """Bytes that are structurally impossible (negative sizes, lengths past the end, bad JSON)."""


class SchemaMismatchError(StatelensError):
    """A row's bytes do not fit the schema they are decoded with."""


class UnsupportedVersionError(StatelensError):
    """A log, schema or metadata file declares a format version statelens does not know."""


class LimitExceededError(StatelensError):
    """A size declared in a file is beyond a stated safety limit (decompression bombs, huge records)."""


class StorageError(StatelensError):
    """The storage (local disk, S3, ...) could not list or read a path."""


class ReadCancelledError(StorageError):
    """A read or listing stopped because the caller cancelled it (not a problem of the file)."""


class BackendUnavailableError(StatelensError):
    """An optional backend or library is missing (Java, PySpark, rocksdict...)."""


class FilesUnavailableError(BackendUnavailableError):
    """The backend reads decoded rows through another engine (Spark): the checkpoint's files and the raw
    bytes of keys and values are not available through it (read them with the native backend)."""


class SparkReadError(StatelensError):
    """Spark's own state data source refused or failed to read (its message is kept)."""


class UsageError(StatelensError):
    """The request does not fit the checkpoint (unknown operator, store, version, partition)."""


class FileChangedError(StorageError):
    """A file was rewritten between the listing and the read (its ETag or size is not the listed one)."""


class RefusedError(StatelensError):
    """statelens will not write this: into a checkpoint, into a non-empty folder, on top of an uncommitted
    batch, or a state format it cannot write safely (the message says which and why)."""

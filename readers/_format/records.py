"""Index the record stream inside a decompressed state file: HDFS deltas/snapshots and RocksDB changelogs.

Spark writes these streams with ``java.io.DataOutputStream``, so every length is an int32 big-endian
(``docs/format.md`` §3.3, §4.4, §11 item 2):

* ``<v>.delta`` / ``<v>.snapshot`` (``HDFSBackedStateStoreProvider.writeUpdateToDeltaFile``,
  ``writeRemoveToDeltaFile``, ``finalizeDeltaFile``, ``writeSnapshotFile``; Spark 2.x-4.x)::

      put    := keySize:i32 key valueSize:i32 value
      remove := keySize:i32 key -1:i32          (deltas only)
      file   := (put | remove)* -1:i32

* RocksDB ``<v>[_<uuid>].changelog`` (``StateStoreChangelogWriterV1``..``V4`` and
  ``StateStoreChangelogReaderFactory`` in ``StateStoreChangelog.scala``; Spark 3.4+): v1 is the delta
  layout; v2 starts with ``writeUTF("v2")`` and prefixes every record with a type byte (``01`` put,
  ``10`` delete, ``11`` merge) and ends with type ``00``; v3 and v4 are v1 and v2 with
  ``writeUTF("v3"|"v4")`` and ``writeUTF(<lineage JSON>)`` in front.

:func:`scan_records` and :func:`scan_changelog` make one pass over the length words only (no key or
value is copied) and return a :class:`RecordIndex` of int64 offset/length arrays into the decompressed
bytes. Every length is checked against the bytes left and ``max_record_bytes``; errors carry the file
path, the offset in the *decompressed* stream and the record number.

**Value-size quirk** (docs/format.md §3.3, §11 item 5): Spark points an HDFS value UnsafeRow at only
``(valueSize / 8) * 8`` bytes, because Spark < 2.3 appended 4 stray bytes to aggregation values. Decode
HDFS values with :attr:`RecordIndex.val_len_aligned` (or ``iter_records(..., aligned=True)``), never
with ``val_len``. With row checksums on (docs/format.md §3.6) Spark first strips the 4-byte CRC prefix and floors
the remaining row length, so there use ``floor((val_len - 4) / 8) * 8`` bytes after the prefix. It does not
apply to RocksDB changelog values (they carry their own header, docs/format.md §4.3).
"""

from __future__ import annotations

import json
import re
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from statelens.readers._format import keyids
from statelens.readers.errors import (
    CorruptFileError,
    LimitExceededError,
    TruncatedFileError,
    UnsupportedVersionError,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "KIND_MERGE",
    "KIND_PUT",
    "KIND_REMOVE",
    "RecordIndex",
    "changelog_header",
    "iter_records",
    "scan_changelog",
    "scan_records",
    "fixed_width_index",
    "frame_records",
    "gather_bytes",
    "SizeRuns",
    "SizedLayout",
    "sized_prefix",
]

#: Default cap on one key or value (256 MiB); Spark has none, but no real state row comes close.
DEFAULT_MAX_RECORD_BYTES = 1 << 28

#: Record kinds, with the byte values of Spark's ``RecordType`` (``getRecordTypeAsByte``).
KIND_PUT = 0x01
KIND_REMOVE = 0x10
KIND_MERGE = 0x11
_KIND_EOF = 0x00

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_SHORT_RE = re.compile(r"[+-]?\d+")  # java.lang.Short.parseShort accepts a sign and Unicode digits

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, eq=False)
class RecordIndex:
    """Where each record of a decompressed state stream is.

    All arrays are int64 (``kind`` is uint8) and have one entry per record, in file order. Offsets are
    into the decompressed bytes the index was built from.

    Attributes
    ----------
    key_start, key_len : numpy.ndarray
        Key bytes are ``data[key_start[i] : key_start[i] + key_len[i]]``.
    val_start, val_len : numpy.ndarray
        Value bytes likewise; ``val_len`` is ``-1`` for a remove, whose ``val_start`` is the offset just
        after its ``-1`` size word.
    kind : numpy.ndarray
        :data:`KIND_PUT`, :data:`KIND_REMOVE` or :data:`KIND_MERGE` per record.
    eof_offset : int
        Offset of the end marker (the ``-1`` key size, or the ``00`` type byte of changelog v2/v4).
    """

    key_start: np.ndarray
    key_len: np.ndarray
    val_start: np.ndarray
    val_len: np.ndarray
    kind: np.ndarray
    eof_offset: int

    @property
    def count(self) -> int:
        """Number of records (puts, removes and merges)."""
        return int(self.key_start.shape[0])

    @property
    def val_len_aligned(self) -> np.ndarray:
        """``val_len`` floored to a multiple of 8 (``-1`` kept): the bytes an HDFS value row spans.

        Not for stores with row checksums, whose 4-byte CRC prefix comes off before the floor.
        """
        return np.where(self.val_len >= 0, self.val_len & ~7, self.val_len)


def scan_records(
    data: Buffer,
    path: str,
    *,
    allow_removes: bool = True,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> RecordIndex:
    """Index the puts and removes of a decompressed ``.delta`` or ``.snapshot`` (or v1 changelog).

    Parameters
    ----------
    data : bytes-like
        The decompressed stream (from :func:`readers._format.codecs.decompress`).
    path : str
        The file's path, put into every error.
    allow_removes : bool
        ``False`` for snapshots: a value size of ``-1`` there is corruption.
    max_record_bytes : int
        Refuse keys or values longer than this.

    Returns
    -------
    RecordIndex
        The records, and the offset of the ``-1`` end marker.

    Raises
    ------
    TruncatedFileError
        The stream ends inside a record or before its end marker.
    CorruptFileError
        A size below ``-1``, a remove in a snapshot, or bytes after the end marker.
    LimitExceededError
        A key or value is longer than ``max_record_bytes``.
    """
    return _scan_sized(data, path, 0, allow_removes, max_record_bytes)


def uniform_keys(
    data: Buffer, *, allow_removes: bool = True, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
) -> tuple[list[bytes], bool] | None:
    """The keys of a ``.delta`` or ``.snapshot`` whose records all have one key size and one value size
    (fixed-width rows, the common case), and whether they are removes, cut straight out of the stream;
    ``None`` for any other stream, which :func:`scan_records` then indexes (and names what is wrong).
    """
    buf = _as_u8(data)
    found = _uniform_sized(buf, 0)
    if found is None:
        return None
    count, klen, vlen, stride = found
    if klen > max_record_bytes or vlen > max_record_bytes or (vlen < 0 and not allow_removes):
        return None
    return _fixed_width(buf, 4, count, klen, stride), vlen < 0


class SizeRuns:
    """A stream's records as a few runs of one key size and one value size each (:func:`_size_runs`),
    its :class:`RecordIndex` built when asked for.

    Parameters
    ----------
    runs : list of tuple
        ``(first key's start, records, stride, key size, value size)`` per run, in stream order.
    eof : int
        The offset of the end marker.
    """

    __slots__ = ("_index", "eof", "runs")

    def __init__(self, runs: list[tuple[int, int, int, int, int]], eof: int):
        self.runs = runs
        self.eof = eof
        self._index: RecordIndex | None = None

    @property
    def index(self) -> RecordIndex:
        """Where each record is."""
        if self._index is None:
            key_start, key_len, val_len = _runs_arrays(self.runs)
            kind = np.where(val_len < 0, KIND_REMOVE, KIND_PUT).astype(np.uint8)
            self._index = RecordIndex(key_start, key_len, key_start + key_len + 4, val_len, kind, self.eof)
        return self._index

    def puts(self) -> bool | np.ndarray:
        """True when every record is a put, False when every one is a remove, else a boolean mask."""
        removes = [vlen < 0 for _, _, _, _, vlen in self.runs]
        if not any(removes):
            return True
        if all(removes):
            return False
        return np.repeat(~np.asarray(removes), [n for _, n, _, _, _ in self.runs])


#: How a stream of :func:`sized_prefix`'s run is laid out: ``(key size, value size)`` for fixed-width
#: rows (value size -1: removes; ``(0, 0)`` for a stream without records), or its :class:`SizeRuns`
#: when its records come in a few runs of one size each.
SizedLayout = tuple[int, int] | SizeRuns


def sized_prefix(
    datas: Sequence[Buffer],
    allow_removes: Sequence[bool],
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> tuple[tuple[Any, list[int], list[SizedLayout]] | None, int]:
    """Every record's key with its size word in front, out of the longest run of leading ``.delta`` /
    ``.snapshot`` streams (a partition's files, in replay order) whose records are cut without a walk
    record by record: ``((keys, each stream's number of records, each stream's layout), how many
    streams that is)``; ``(None, 0)`` when the first stream is not so (:func:`scan_records` then indexes
    it and names what is wrong).

    ``keys`` is a ``(records, 4 + key size)`` uint8 array when every key has one size, else a
    :class:`readers._format.keyids.PaddedKeys` (each key zero-padded to the longest). A stream of
    fixed-width rows (the common case) has its sizes from its first record and its length; every such
    record's two size words and the end markers are checked in one vectorised comparison over the run
    (per stream only its first record is read in Python). A stream whose keys or values come in a few
    sizes (keys of a few widths, as ids with mostly the same number of digits once padded to
    UnsafeRow's 8-byte words, wherever a batch puts them) is cut run by run (:func:`_size_runs`) and
    stays in the run. The run ends before a stream whose sizes change more than :data:`MAX_SIZE_RUNS`
    times (walked record by record), a stream that fails a check, or one whose keys would take more
    padding than :data:`readers._format.keyids.PADDING_RATIO` allows.
    """
    views: list[np.ndarray] = []  # (records, 4 + key size) strided views, one per run of one key size
    v_words: list[np.ndarray] = []  # the value size words of the fixed-width streams
    v_want: list[int] = []  # and the value size each of those streams has
    v_files: list[int] = []  # which stream each of those is
    counts: list[int] = []
    layouts: list[SizedLayout] = []
    rows = key_bytes = 0
    widest = narrowest = 0
    for data, removes in zip(datas, allow_removes, strict=True):
        if len(data) == 4 and _I32.unpack_from(data)[0] == -1:  # type: ignore[arg-type]  # no records
            counts.append(0)
            layouts.append((0, 0))
            continue
        found = _sized_layout(data, 0)
        buf = np.frombuffer(data, dtype=np.uint8)
        if found is not None:  # fixed-width rows: one run, its size words checked below
            count, klen, vlen, stride = found
            if max(klen, vlen) > max_record_bytes or (vlen < 0 and not removes):
                break
            w = 4 + klen
            if w != widest or w != narrowest:
                wide, narrow = max(widest, w), min(narrowest, w) if narrowest else w
                if wide != narrow and _too_padded(rows + count, key_bytes + count * w, wide):
                    break
                widest, narrowest = wide, narrow
            views.append(np.ndarray((count, w), np.uint8, buf, 0, (stride, 1)))
            v_words.append(np.ndarray((count,), ">i4", buf, w, (stride,)))
            v_want.append(vlen)
            v_files.append(len(counts))
            layouts.append((klen, vlen))
            rows += count
            key_bytes += count * w
            counts.append(count)
            continue
        split = _size_runs(buf, 0)  # a few sizes: run by run (each run's size words checked as cut)
        if split is None or split[1] + 4 != buf.shape[0]:  # too many sizes, an oddity, bytes after
            break
        runs = split[0]
        if any(max(klen, vlen) > max_record_bytes or (vlen < 0 and not removes) for *_, klen, vlen in runs):
            break
        m = sum(n for _, n, _, _, _ in runs)
        more = sum(n * (4 + klen) for _, n, _, klen, _ in runs)
        wide = max(widest, *(4 + klen for *_, klen, _ in runs))
        narrow = min(narrowest or wide, *(4 + klen for *_, klen, _ in runs))
        if _too_padded(rows + m, key_bytes + more, wide):
            break
        widest, narrowest = wide, narrow
        for first, n, stride, klen, _ in runs:
            views.append(np.ndarray((n, 4 + klen), np.uint8, buf, first - 4, (stride, 1)))
        layouts.append(SizeRuns(runs, split[1]))
        rows += m
        key_bytes += more
        counts.append(m)
    taken = len(counts)
    if not views:
        return ((np.zeros((0, 4), np.uint8), counts, layouts) if taken else None), taken
    if widest == narrowest:
        block = np.concatenate(views) if len(views) > 1 else np.ascontiguousarray(views[0])
        size_words = np.ndarray((rows,), ">i4", block, 0, (widest,))
        odd_keys = size_words != widest - 4
    else:
        padded = np.zeros((rows, widest), np.uint8)
        lens = np.empty(rows, np.int64)
        at = 0
        for view in views:
            padded[at : at + len(view), : view.shape[1]] = view
            lens[at : at + len(view)] = view.shape[1]
            at += len(view)
        size_words = np.ndarray((rows,), ">i4", padded, 0, (widest,))
        odd_keys = size_words != lens - 4
    odd = np.flatnonzero(odd_keys)  # (a run's records were checked as it was cut: only the first's)
    stream_odd: int | None = None
    if len(odd):
        stream_odd = int(np.searchsorted(np.cumsum(counts), odd[0], side="right"))
    if v_words:
        value_words = np.concatenate(v_words) if len(v_words) > 1 else v_words[0]
        sized = [counts[j] for j in v_files]
        bad = np.flatnonzero(value_words != np.repeat(np.asarray(v_want), sized))
        if len(bad):
            j = v_files[int(np.searchsorted(np.cumsum(sized), bad[0], side="right"))]
            stream_odd = j if stream_odd is None else min(stream_odd, j)
    if stream_odd is None:
        keys = block if widest == narrowest else keyids.PaddedKeys(padded, lens)
        return (keys, counts, layouts), taken
    taken = stream_odd  # the stream holding the first odd record ends the run before it
    if not taken:
        return None, 0
    cut = sum(counts[:taken])
    keys = block[:cut] if widest == narrowest else keyids.PaddedKeys(padded[:cut], lens[:cut])
    return (keys, counts[:taken], layouts[:taken]), taken


def _too_padded(rows: int, key_bytes: int, widest: int) -> bool:
    """``rows`` keys of ``key_bytes`` bytes in all, each zero-padded to ``widest``, would take more room than
    :data:`readers._format.keyids.PADDING_RATIO` (and ``PADDING_SLACK``) allows."""
    return rows * widest > (1 + keyids.PADDING_RATIO) * key_bytes + keyids.PADDING_SLACK


def scan_changelog(
    data: Buffer,
    path: str,
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> tuple[int, str | None, RecordIndex]:
    """Index a decompressed RocksDB changelog of any format version (1-4).

    The version is detected as Spark's ``StateStoreChangelogReaderFactory`` does: ``readUTF`` the
    start of the stream; a string ``v<N>`` names version N, anything else (including end of data or
    a malformed string) means v1, which has no header.

    Parameters
    ----------
    data : bytes-like
        The decompressed changelog.
    path : str
        The file's path, put into every error.
    max_record_bytes : int
        Refuse keys or values longer than this.

    Returns
    -------
    tuple of (int, str or None, RecordIndex)
        The format version, the lineage JSON text (v3/v4; ``None`` otherwise) and the records.

    Raises
    ------
    UnsupportedVersionError
        The header names a version other than 1-4.
    TruncatedFileError, CorruptFileError, LimitExceededError
        As for :func:`scan_records`; also for a bad header or lineage, or an unknown record type.
    """
    version, start, lineage = _changelog_header(data, path)
    if version in (1, 3):
        index = _scan_sized(data, path, start, True, max_record_bytes)
    else:
        index = _scan_typed(data, path, start, max_record_bytes)
    return version, lineage, index


def changelog_header(data: Buffer, path: str) -> tuple[int, int]:
    """The format version (1-4) of a decompressed RocksDB changelog and the offset of its first record,
    read from its header as :func:`scan_changelog` does (v1 has none: offset 0).

    Raises
    ------
    UnsupportedVersionError, CorruptFileError, TruncatedFileError
        As :func:`scan_changelog` for a bad header or lineage.
    """
    version, start, _ = _changelog_header(data, path)
    return version, start


def iter_records(
    data: Buffer, index: RecordIndex, *, aligned: bool = False
) -> Iterator[tuple[bytes, bytes | None]]:
    """Yield ``(key_bytes, value_bytes or None)`` for each record, as Python bytes.

    Parameters
    ----------
    data : bytes-like
        The decompressed stream the index was built from.
    index : RecordIndex
        From :func:`scan_records` or :func:`scan_changelog`.
    aligned : bool
        Cut values to ``floor(len / 8) * 8`` bytes, as Spark does for HDFS values (module docstring).

    Yields
    ------
    tuple of (bytes, bytes or None)
        The key, and the value (``None`` for a remove).
    """
    val_len = index.val_len_aligned if aligned else index.val_len
    for ks, kl, vs, vl in zip(
        index.key_start.tolist(),
        index.key_len.tolist(),
        index.val_start.tolist(),
        val_len.tolist(),
        strict=True,
    ):
        yield bytes(data[ks : ks + kl]), (None if vl < 0 else bytes(data[vs : vs + vl]))


#: Below this many records :func:`slices` cuts in Python (numpy's set-up costs more than it saves).
_SLICES_MIN = 16


def slices(data: Buffer, start: np.ndarray, length: np.ndarray) -> list[bytes]:
    """``data[start[i] : start[i] + length[i]]`` as bytes for each record (lengths are not negative).

    When every slice has one length (fixed-width rows, the common case) the bytes are copied out in one
    strided or gathered numpy copy and cut into ``bytes`` objects by numpy in C, about twice as fast as
    slicing in Python.
    """
    n = len(start)
    if n == 0:
        return []
    size = int(length[0])
    if n < _SLICES_MIN or not (length == size).all():
        return [bytes(data[s : s + k]) for s, k in zip(start.tolist(), length.tolist(), strict=True)]
    buf = _as_u8(data)
    first = int(start[0])
    step = np.diff(start)
    stride = int(step[0])
    if stride >= size and (step == stride).all() and first + (n - 1) * stride + size <= buf.shape[0]:
        return _fixed_width(buf, first, n, size, stride)
    return _cut(buf[start[:, None] + np.arange(size)], size)


def _fixed_width(buf: np.ndarray, first: int, count: int, size: int, stride: int) -> list[bytes]:
    """``count`` slices of ``size`` bytes, the first at ``first``, one every ``stride`` bytes."""
    return _cut(np.ndarray((count, size), np.uint8, buf, first, (stride, 1)), size)  # a strided view


def _cut(block: np.ndarray, size: int) -> list[bytes]:
    """The rows of a ``(n, size)`` byte block as ``bytes`` objects, cut by numpy in C."""
    if size == 0:
        return [b""] * block.shape[0]
    return np.ascontiguousarray(block).view(f"V{size}").ravel().tolist()  # type: ignore[no-any-return]


def value_slices(data: Buffer, start: np.ndarray, length: np.ndarray) -> list[bytes | None]:
    """Like :func:`slices`, with ``None`` where the length is negative (a remove's value)."""
    removed = length < 0
    if not removed.any():
        return slices(data, start, length)  # type: ignore[return-value]  # list is invariant
    return [
        bytes(data[s : s + k]) if k >= 0 else None
        for s, k in zip(start.tolist(), length.tolist(), strict=True)
    ]


# ---------------------------------------------------------------------------------------------------
# The record walks: compiled (readers/_format/kernels.py) or in Python

#: Bytes of record streams walked in Python before the compiled walks are loaded. Loading numba and the
#: cached kernels costs a fresh process ~0.9 s (importing numba ~0.3 s, the first cached kernel ~0.55 s),
#: what the Python walk spends on about this many bytes of variable-width records; so a command that
#: walks less (``info``, a small checkpoint, one version) never pays it, and one that walks more pays at
#: most twice the better choice (and then walks at the compiled speed, ~30x the Python one).
PYTHON_WALK_BYTES = 64 * 1024 * 1024

_python_walked = 0  # bytes walked in Python so far in this process (threads may race: a rough count)


def _loaded() -> Any | None:
    """:mod:`readers._format.kernels` if this process has loaded it (then numba is paid for), else None.

    A module another thread is still importing is already in ``sys.modules`` without its kernels: it
    counts as loaded only once it holds every name it exports (else the caller imports it, which waits
    for that thread)."""
    kernels = sys.modules.get("statelens.readers._format.kernels")
    if kernels is None or not all(hasattr(kernels, name) for name in getattr(kernels, "__all__", ("-",))):
        return None
    return kernels


def _kernels(size: int) -> Any | None:
    """The compiled walks (:mod:`readers._format.kernels`) once they are loaded or the Python walks have spent
    :data:`PYTHON_WALK_BYTES`; None to walk these ``size`` bytes in Python (they are counted)."""
    global _python_walked
    kernels = _loaded()
    if kernels is not None:
        return kernels
    if _python_walked + size <= PYTHON_WALK_BYTES:
        _python_walked += size
        return None
    from statelens.readers._format import kernels  # deferred: kernels imports numba

    return kernels


def _walk_sized(data: Buffer, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`readers._format.kernels.walk_sized` in Python: the same arrays and end offset (-1 at the first
    oddity, which the checked walk then names)."""
    unpack = _I32.unpack_from
    starts: list[int] = []
    klens: list[int] = []
    vlens: list[int] = []
    add_start, add_klen, add_vlen = starts.append, klens.append, vlens.append
    eof = -1
    try:
        while True:
            klen = unpack(data, pos)[0]  # type: ignore[arg-type]  # every Buffer has the buffer protocol
            if klen < 0:
                eof = pos if klen == -1 else -1
                break
            pos += 4
            add_start(pos)
            add_klen(klen)
            pos += klen
            vlen = unpack(data, pos)[0]  # type: ignore[arg-type]
            add_vlen(vlen)
            pos += 4
            if vlen > 0:
                pos += vlen
            elif vlen < -1:
                break
    except struct.error:  # a size word past the end
        pass
    n = len(vlens)
    return (
        np.array(starts[:n], dtype=np.int64),
        np.array(klens[:n], dtype=np.int64),
        np.array(vlens, dtype=np.int64),
        eof,
    )


#: Changes of record size (key or value) up to which :func:`_runs_sized` cuts a stream run by run.
MAX_SIZE_RUNS = 32

#: Records whose size words one step of :func:`_runs_sized` compares at most.
_RUN_WINDOW = 4096

_BE_I32 = np.dtype(">i4")


def _size_runs(buf: np.ndarray, pos: int) -> tuple[list[tuple[int, int, int, int, int]], int] | None:
    """The records of a stream whose record sizes rarely change (keys mostly of one width, as ids with
    mostly the same number of digits are once padded to UnsafeRow's 8-byte words), as runs of one key
    size and one value size: ``(first key's start, records, stride, key size, value size)`` per run,
    and the offset of the end marker. From each run's first record, the size words of the records that
    would follow at its stride are compared at once, and the run ends at the first that differs. None
    when the sizes change more than :data:`MAX_SIZE_RUNS` times (the stream is walked record by record)
    or at the first oddity (the checked walk names it).

    A record found this way is a record: the first of a run is read where the one before it ended, and
    the next one can only start one stride further while the sizes stay the same.
    """
    n = buf.shape[0]
    unpack = _I32.unpack_from
    runs: list[tuple[int, int, int, int, int]] = []
    changes = 0
    while True:
        if pos + 4 > n:
            return None
        klen = unpack(buf, pos)[0]  # type: ignore[arg-type]  # a numpy array has the buffer protocol
        if klen == -1:
            break
        changes += 1
        if klen < 0 or changes > MAX_SIZE_RUNS or pos + 8 + klen > n:
            return None
        vlen = unpack(buf, pos + 4 + klen)[0]  # type: ignore[arg-type]
        if vlen < -1:
            return None
        stride = 8 + klen + max(vlen, 0)
        while True:  # one run, a window of records at a time
            fits = min((n - pos - 8 - klen) // stride + 1, _RUN_WINDOW)
            k_words = np.ndarray((fits,), _BE_I32, buf, pos, (stride,))
            v_words = np.ndarray((fits,), _BE_I32, buf, pos + 4 + klen, (stride,))
            odd = np.flatnonzero((k_words != klen) | (v_words != vlen))
            run = int(odd[0]) if len(odd) else fits
            if run:
                if runs and runs[-1][2:] == (stride, klen, vlen):  # a window more of the same run
                    runs[-1] = (runs[-1][0], runs[-1][1] + run, stride, klen, vlen)
                else:
                    runs.append((pos + 4, run, stride, klen, vlen))
            pos += run * stride
            if run < fits or pos + 8 + klen > n:
                break
    return runs, pos


def _runs_arrays(runs: list[tuple[int, int, int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Key start, key size and value size of every record of :func:`_size_runs`' runs."""
    if not runs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    first, count, stride_, klen_, vlen_ = (
        np.array(column, dtype=np.int64) for column in zip(*runs, strict=True)
    )
    before = np.zeros(len(runs), dtype=np.int64)
    np.cumsum(count[:-1], out=before[1:])
    strides = np.repeat(stride_, count)
    key_start = np.repeat(first - stride_ * before, count) + strides * np.arange(int(before[-1] + count[-1]))
    return key_start, np.repeat(klen_, count), np.repeat(vlen_, count)


def _runs_sized(buf: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """:func:`_walk_sized`'s arrays for a stream whose record sizes rarely change, cut run by run
    (:func:`_size_runs`); None where that answers None."""
    split = _size_runs(buf, pos)
    if split is None:
        return None
    runs, eof = split
    return (*_runs_arrays(runs), eof)


def _walk_typed(data: Buffer, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`readers._format.kernels.walk_typed` in Python: the same arrays and end offset (-1 at the first
    oddity, which the checked walk then names)."""
    unpack = _I32.unpack_from
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    n_bytes = len(view)
    starts: list[int] = []
    klens: list[int] = []
    vlens: list[int] = []
    kinds: list[int] = []
    eof = -1
    try:
        while pos < n_bytes:
            kind = view[pos]
            if kind == _KIND_EOF:
                eof = pos
                break
            if kind != KIND_PUT and kind != KIND_REMOVE and kind != KIND_MERGE:
                break
            klen = unpack(view, pos + 1)[0]
            if klen < 0:
                break
            pos += 5
            starts.append(pos)
            klens.append(klen)
            kinds.append(kind)
            pos += klen
            vlen = unpack(view, pos)[0]
            vlens.append(vlen)
            pos += 4
            if kind == KIND_REMOVE:
                if vlen != -1:
                    break
            elif vlen < 0:
                break
            else:
                pos += vlen
    except struct.error:  # a size word past the end
        pass
    n = len(vlens)
    return (
        np.array(starts[:n], dtype=np.int64),
        np.array(klens[:n], dtype=np.int64),
        np.array(vlens, dtype=np.int64),
        np.array(kinds[:n], dtype=np.uint8),
        eof,
    )


#: Distinct lengths (each at most this many bytes) up to which :func:`gather_bytes` copies with numpy.
_GATHER_LENGTHS = 16
_GATHER_MAX_LEN = 1 << 16


def gather_bytes(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``buf[starts[i] : starts[i] + lens[i]]`` laid end to end (``offsets``: where each one goes, the
    cumulative sums of ``lens`` with a leading 0), as one uint8 array.

    Records of a few lengths (keys of a few widths, the common case) are copied by numpy, one strided
    gather per length; others by :func:`readers._format.kernels.gather_bytes` (compiled), which is also used
    once it is loaded.
    """
    lens = np.asarray(lens, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    if _loaded() is None and (not len(lens) or int(lens.max()) <= _GATHER_MAX_LEN):
        counts = np.bincount(lens) if len(lens) else np.zeros(0, np.int64)
        lengths = np.flatnonzero(counts)
        if len(lengths) <= _GATHER_LENGTHS:
            out = np.empty(int(offsets[-1]), np.uint8)
            for size in lengths.tolist():
                if size == 0:
                    continue
                which = np.flatnonzero(lens == size) if len(lengths) > 1 else slice(None)
                rows = np.lib.stride_tricks.sliding_window_view(buf, size)[starts[which]]
                dest = np.lib.stride_tricks.as_strided(out, (out.shape[0] - size + 1, size), (1, 1))
                dest[np.asarray(offsets[:-1])[which]] = rows
            return out
    from statelens.readers._format.kernels import gather_bytes as compiled  # deferred: kernels imports numba

    return compiled(buf, starts, lens, np.asarray(offsets, dtype=np.int64))  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------------
# Sized records (delta, snapshot, changelog v1/v3)


def _sized_layout(data: Buffer | np.ndarray, start: int) -> tuple[int, int, int, int] | None:
    """The number of records, the key size, the value size and the record stride of a stream of
    fixed-width rows, read from its first record and its length (the end marker is at ``len - 4``); the
    other records' size words are not checked here. ``None`` when the first record or the end marker
    does not fit such a stream."""
    n = len(data)  # type: ignore[arg-type]  # every Buffer here (bytes, ndarray) has a length
    if n - start < 12:
        return None
    klen = _I32.unpack_from(data, start)[0]  # type: ignore[arg-type]  # ndarrays support the buffer protocol
    if klen < 0 or start + 8 + klen > n:
        return None
    vlen = _I32.unpack_from(data, start + 4 + klen)[0]  # type: ignore[arg-type]
    if vlen < -1:
        return None
    stride = 8 + klen + max(vlen, 0)
    count, rest = divmod(n - start - 4, stride)
    if rest or _I32.unpack_from(data, n - 4)[0] != -1:  # type: ignore[arg-type]  # the end marker
        return None
    return count, klen, vlen, stride


def _uniform_sized(buf: np.ndarray, start: int) -> tuple[int, int, int, int] | None:
    """The number of records, the key size, the value size and the record stride when every record has
    the first one's sizes (fixed-width rows; the end marker is then at ``len(buf) - 4``).

    One vectorised comparison of every record's two size words; ``None`` if the stream is not such a
    run of equal records followed by the end marker and nothing else.
    """
    found = _sized_layout(buf, start)
    if found is None:
        return None
    count, klen, vlen, stride = found
    # every record's two size words, as big-endian int32 views with the record stride (no copy)
    k_words = np.ndarray((count,), ">i4", buf, start, (stride,))
    v_words = np.ndarray((count,), ">i4", buf, start + 4 + klen, (stride,))
    if (k_words != klen).any() or (v_words != vlen).any():
        return None
    return found


def fixed_width_index(count: int, klen: int, vlen: int, start: int = 0) -> RecordIndex:
    """The index of ``count`` records of one key size and one value size (-1: removes) laid one after
    the other from ``start``, the end marker after them."""
    stride = 8 + klen + max(vlen, 0)
    key_start = np.arange(start + 4, start + 4 + stride * count, stride, dtype=np.int64)
    return RecordIndex(
        key_start,
        np.full(count, klen, np.int64),
        key_start + (klen + 4),
        np.full(count, vlen, np.int64),
        np.full(count, KIND_REMOVE if vlen < 0 else KIND_PUT, np.uint8),
        start + stride * count,
    )


def frame_records(keys: Sequence[bytes], values: Sequence[bytes] | None) -> tuple[bytes, RecordIndex]:
    """Puts laid out as a ``.delta`` / ``.snapshot`` stream holding them would be (``docs/format.md``
    §3.2: each key and value after its big-endian size word, the ``-1`` end marker last), and its index:
    records read another way (a RocksDB zip's keys and values) can then be replayed with those of the
    files around them. Without ``values`` every value is empty.
    """
    n = len(keys)
    klen = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    vlen = (
        np.fromiter(map(len, values), dtype=np.int64, count=n)
        if values is not None
        else np.zeros(n, np.int64)
    )
    joined = b"".join(keys) + (b"".join(values) if values is not None else b"")
    words = np.empty((n, 2), dtype=">i4")  # the size words, key's then value's, record after record
    words[:, 0] = klen
    words[:, 1] = vlen
    src = np.concatenate([words.reshape(-1).view(np.uint8), np.frombuffer(joined, dtype=np.uint8)])
    # Each record is four pieces of ``src``: key size word, key, value size word, value.
    kfrom = np.zeros(n, dtype=np.int64)
    np.cumsum(klen[:-1], out=kfrom[1:])
    vfrom = np.full(n, int(klen.sum()), dtype=np.int64)
    np.cumsum(vlen[:-1], out=vfrom[1:])
    vfrom[1:] += int(klen.sum())
    starts = np.empty((n, 4), dtype=np.int64)
    starts[:, 0] = np.arange(0, 8 * n, 8)
    starts[:, 1] = 8 * n + kfrom
    starts[:, 2] = starts[:, 0] + 4
    starts[:, 3] = 8 * n + vfrom
    lens = np.empty((n, 4), dtype=np.int64)
    lens[:, 0] = lens[:, 2] = 4
    lens[:, 1] = klen
    lens[:, 3] = vlen
    offsets = np.zeros(4 * n + 1, dtype=np.int64)
    np.cumsum(lens.reshape(-1), out=offsets[1:])
    body = gather_bytes(src, starts.reshape(-1), lens.reshape(-1), offsets)
    index = RecordIndex(
        offsets[1:-1:4].copy(),
        klen,
        offsets[3:-1:4].copy(),
        vlen,
        np.full(n, KIND_PUT, np.uint8),
        int(offsets[-1]),
    )
    return body.tobytes() + b"\xff\xff\xff\xff", index


def _scan_sized(data: Buffer, path: str, start: int, allow_removes: bool, max_record: int) -> RecordIndex:
    buf = _as_u8(data)
    found = _uniform_sized(buf, start)
    if found is not None:  # sizes are checked once; the stream ends at its end marker by construction
        count, klen, vlen, _ = found
        if klen > max_record or vlen > max_record or (vlen < 0 and not allow_removes):
            _checked_sized(data, path, start, allow_removes, max_record)
            raise AssertionError("unreachable: the checked scan found no error")  # pragma: no cover
        return fixed_width_index(count, klen, vlen, start)
    runs = _runs_sized(buf, start) if _loaded() is None else None  # compiled walks: as fast, no guess
    if runs is not None:
        key_start, key_len, val_len, eof = runs
    elif (kernels := _kernels(buf.shape[0] - start)) is None:
        key_start, key_len, val_len, eof = _walk_sized(data, start)
    else:
        key_start, key_len, val_len, eof = kernels.walk_sized(buf, start)
    if eof < 0:
        _checked_sized(data, path, start, allow_removes, max_record)
        raise AssertionError("unreachable: the checked scan found no error")  # pragma: no cover
    val_start = key_start + key_len + 4
    bad = (key_len > max_record) | (val_len > max_record)
    if not allow_removes:
        bad |= val_len < 0
    if bad.any():
        _checked_sized(data, path, start, allow_removes, max_record)
        raise AssertionError("unreachable: the checked scan found no error")  # pragma: no cover
    _check_tail(buf, path, eof + 4, len(key_start))
    kind = np.where(val_len < 0, KIND_REMOVE, KIND_PUT).astype(np.uint8)
    return RecordIndex(key_start, key_len, val_start, val_len, kind, eof)


def _checked_sized(data: Buffer, path: str, pos: int, allow_removes: bool, max_record: int) -> None:
    """Walk the records with every check, raising the first error in stream order."""
    n = len(data)
    record = 0
    while True:
        klen = _read_size(data, path, pos, record, "key size")
        if klen == -1:
            return
        _check_size(path, pos, record, "key", klen, n - pos - 4, max_record)
        pos += 4 + klen
        vlen = _read_size(data, path, pos, record, "value size")
        if vlen == -1:
            if not allow_removes:
                raise CorruptFileError(
                    "value size -1 (a remove) in a snapshot, which holds only puts", path, pos, record=record
                )
            vlen = 0
        else:
            _check_size(path, pos, record, "value", vlen, n - pos - 4, max_record)
        pos += 4 + vlen
        record += 1


def _read_size(data: Buffer, path: str, pos: int, record: int, what: str) -> int:
    n = len(data)
    if pos + 4 > n:
        if pos == n and what == "key size":
            raise TruncatedFileError(
                "decompressed stream ends without its -1 end marker", path, pos, record=record
            )
        raise TruncatedFileError(
            f"decompressed stream ends inside a {what} ({n - pos} of 4 bytes)", path, pos, record=record
        )
    return int(_I32.unpack_from(data, pos)[0])


def _check_size(path: str, pos: int, record: int, what: str, size: int, left: int, max_record: int) -> None:
    if size < 0:
        raise CorruptFileError(f"{what} size {size} is negative", path, pos, record=record)
    if size > max_record:
        raise LimitExceededError(
            f"{what} size {size} exceeds the limit of {max_record} bytes per key or value",
            path,
            pos,
            record=record,
        )
    if size > left:
        raise TruncatedFileError(
            f"{what} size {size} runs past the end of the decompressed stream ({left} bytes left)",
            path,
            pos,
            record=record,
        )


def _check_tail(buf: np.ndarray, path: str, end: int, count: int) -> None:
    extra = buf.shape[0] - end
    if extra:
        raise CorruptFileError(
            f"{extra} bytes follow the end marker (starting {bytes(buf[end : end + 8]).hex(' ')})",
            path,
            end,
            record=count,
        )


# ---------------------------------------------------------------------------------------------------
# Typed records (changelog v2/v4)


def _scan_typed(data: Buffer, path: str, start: int, max_record: int) -> RecordIndex:
    buf = _as_u8(data)
    kernels = _kernels(buf.shape[0] - start)
    if kernels is None:
        key_start, key_len, val_len, kind, eof = _walk_typed(data, start)
    else:
        key_start, key_len, val_len, kind, eof = kernels.walk_typed(buf, start)
    if eof < 0:
        _checked_typed(data, path, start, max_record)
        raise AssertionError("unreachable: the checked scan found no error")  # pragma: no cover
    val_start = key_start + key_len + 4
    if ((key_len > max_record) | (val_len > max_record)).any():
        _checked_typed(data, path, start, max_record)
        raise AssertionError("unreachable: the checked scan found no error")  # pragma: no cover
    _check_tail(buf, path, eof + 1, len(key_start))
    return RecordIndex(key_start, key_len, val_start, val_len, kind, eof)


def _checked_typed(data: Buffer, path: str, pos: int, max_record: int) -> None:
    n = len(data)
    record = 0
    while True:
        if pos >= n:
            raise TruncatedFileError(
                "decompressed changelog ends without its 00 end record", path, pos, record=record
            )
        kind = data[pos]
        if kind == _KIND_EOF:
            return
        if kind not in (KIND_PUT, KIND_REMOVE, KIND_MERGE):
            raise CorruptFileError(
                f"record type 0x{kind:02x} is none of 00 (end), 01 (put), 10 (delete), 11 (merge)",
                path,
                pos,
                record=record,
            )
        pos += 1
        klen = _read_size(data, path, pos, record, "key size")
        _check_size(path, pos, record, "key", klen, n - pos - 4, max_record)
        pos += 4 + klen
        vlen = _read_size(data, path, pos, record, "value size")
        if kind == KIND_REMOVE:
            if vlen != -1:
                raise CorruptFileError(
                    f"delete record has value size {vlen}; Spark writes -1", path, pos, record=record
                )
            vlen = 0
        else:
            _check_size(path, pos, record, "value", vlen, n - pos - 4, max_record)
        pos += 4 + vlen
        record += 1


def _changelog_header(data: Buffer, path: str) -> tuple[int, int, str | None]:
    """(version, offset of the first record, lineage JSON) as Spark's reader factory decides them."""
    if len(data) < 3 or data[2] != 0x76 or not (data[0] or data[1]):  # type: ignore[index]
        return 1, 0, None  # no "v..." string first (a v1 file's first key size): read as v1
    first = _read_utf(data, 0)
    if first is None:
        return 1, 0, None
    text, end = first
    if not text.startswith("v") or not _SHORT_RE.fullmatch(text[1:]):
        return 1, 0, None
    version = int(text[1:])
    if not -(1 << 15) <= version < (1 << 15):  # Short.parseShort overflows: Spark falls back to v1
        return 1, 0, None
    if version == 1:
        return 1, 0, None  # Spark's v1 reader re-reads the stream from its first byte
    if version not in (2, 3, 4):
        raise UnsupportedVersionError(
            f"changelog header says {text!r}; statelens reads changelog versions 1-4", path, 0
        )
    if text != f"v{version}":
        raise CorruptFileError(f"changelog header {text!r} is not the 'v{version}' Spark writes", path, 0)
    if version == 2:
        return 2, end, None
    second = _read_utf(data, end)
    if second is None:
        raise TruncatedFileError(f"changelog v{version} lineage string is cut or not UTF-8", path, end)
    lineage, start = second
    try:
        parsed = json.loads(lineage)
    except ValueError as err:
        raise CorruptFileError(f"changelog v{version} lineage is not JSON: {err}", path, end) from err
    except RecursionError as err:
        raise CorruptFileError(f"changelog v{version} lineage JSON is nested too deeply", path, end) from err
    if not isinstance(parsed, list):
        raise CorruptFileError(f"changelog v{version} lineage is not a JSON array", path, end)
    return version, start, lineage


def _read_utf(data: Buffer, pos: int) -> tuple[str, int] | None:
    """``DataInputStream.readUTF`` at ``pos``: (text, end offset), or None on end of data / bad UTF-8."""
    if pos + 2 > len(data):
        return None
    size = _U16.unpack_from(data, pos)[0]
    end = pos + 2 + size
    if end > len(data):
        return None
    try:
        return bytes(data[pos + 2 : end]).decode("utf-8"), end
    except UnicodeDecodeError:
        return None


# ---------------------------------------------------------------------------------------------------


def _as_u8(data: Buffer) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)

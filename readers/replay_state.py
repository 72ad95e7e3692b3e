"""A partition's raw state held compactly between the versions of a replay (:class:`readers.scan.Replay`).

A Python dict of key bytes to value bytes costs some 120 bytes a record over the bytes themselves (two
``bytes`` objects and a hash-table slot): the benchmark's store of 2M keys held whole to be followed
batch by batch takes 341 MiB that way, 154 MiB in these arrays (``docs/performance.md``). :class:`CompactState` keeps the records in numpy arrays instead: every key's
bytes in one buffer and every value's in another, with their offsets, ordered by the key's hash (so a key
is found by a binary search), plus a small dict of the records changed since the arrays were last
rebuilt (a removed key maps to ``None``). Applying a version's changes costs what the version wrote (the
dict grows); the arrays are rebuilt once the dict holds an eighth as many records as they do, which
amortises to a constant per change (the first time after a whole build, after one to eight eighths of
that, so partitions built together do not rebuild together).

The hash is Python's own ``hash`` of the key bytes: the arrays live in one process only and are never
written anywhere, so its per-process seed does not matter.
"""

from __future__ import annotations

import itertools
from collections.abc import ItemsView, Iterator, Mapping, MutableMapping, ValuesView
from typing import Any

import numpy as np

__all__ = ["CompactState"]

_MISSING: Any = object()

#: The arrays are rebuilt once the dict of changes holds more than this many records plus an eighth of
#: the arrays' (tests set -1: a rebuild at every change).
REBUILD_MIN = 64

#: Staggers the first rebuild of states built whole together (a replay's catch-up, every partition at
#: once): after ``k/8`` of the usual changes, ``k`` from 1 to 8 in turn, so the partitions of a store
#: followed batch by batch do not all rebuild in the same batch.
_stagger = itertools.count()


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """Offsets (``n + 1``, starting at 0) of segments of ``lengths``, int32 while they fit."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out.astype(np.int32) if out[-1] < 2**31 else out


def _take(blob: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The segments ``rows`` of ``blob`` (in that order) as a new buffer and its offsets: each run of
    consecutive rows is copied as one slice (a rebuild keeps most rows in place, so there are about as
    many runs as records changed)."""
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1].astype(np.int64) - starts
    new = _offsets(lengths)
    if len(rows) == 0:
        return np.zeros(0, np.uint8), new
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    first = np.concatenate([[0], cut])
    last = np.concatenate([cut, [len(rows)]]) - 1
    begin = starts[first].tolist()
    end = (starts[last] + lengths[last]).tolist()
    data = blob.data  # a memoryview of the bytes
    joined = b"".join([data[a:b] for a, b in zip(begin, end, strict=True)])
    return np.frombuffer(joined, np.uint8), new


def _pack(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as one buffer and its offsets."""
    lengths = np.fromiter(map(len, items), np.int64, len(items))
    return np.frombuffer(b"".join(items), np.uint8), _offsets(lengths)


def _append(blob: np.ndarray, offsets: np.ndarray, items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``blob`` and its offsets with ``items`` appended."""
    nb, no = _pack(items)
    return (
        np.concatenate([blob, nb]),
        np.concatenate([offsets[:-1].astype(np.int64), no.astype(np.int64) + len(blob)]),
    )


class CompactState(MutableMapping[bytes, bytes]):
    """A partition's raw records (key bytes to value bytes) in numpy arrays, changed in place as a dict
    is; see the module's docstring.

    Parameters
    ----------
    records : mapping of bytes to bytes, optional
        The records to start from (a version read whole).
    """

    __slots__ = ("_hashes", "_kblob", "_koff", "_vblob", "_voff", "_over", "_len", "_limit")

    def __init__(self, records: Mapping[bytes, bytes] | None = None):
        self._over: dict[bytes, bytes | None] = {}
        self._build(list(records.keys()) if records else [], list(records.values()) if records else [])
        self._limit = len(self._hashes) // 8 * (next(_stagger) % 8 + 1) // 8

    # -- the arrays -------------------------------------------------------------------------------------
    def _build(self, keys: list[bytes], values: list[bytes]) -> None:
        """The arrays from ``keys`` and ``values`` (distinct keys), the change dict emptied."""
        hashes = np.fromiter(map(hash, keys), np.int64, len(keys))
        order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[order]
        self._kblob, self._koff = _pack([keys[i] for i in order.tolist()])
        self._vblob, self._voff = _pack([values[i] for i in order.tolist()])
        self._over = {}
        self._len = len(keys)

    def _row(self, key: bytes) -> int:
        """The row of ``key`` in the arrays, or -1."""
        hashes = self._hashes
        h = hash(key)
        i = int(np.searchsorted(hashes, h))
        n = len(hashes)
        while i < n and hashes[i] == h:
            if self._kblob[self._koff[i] : self._koff[i + 1]].tobytes() == key:
                return i
            i += 1
        return -1

    def _base_get(self, key: bytes) -> bytes | None:
        i = self._row(key)
        return None if i < 0 else self._vblob[self._voff[i] : self._voff[i + 1]].tobytes()

    def _rows(self, keys: list[bytes]) -> np.ndarray:
        """The rows of ``keys`` in the arrays (-1 where absent), the hashes searched at once."""
        hashes, n = self._hashes, len(self._hashes)
        h = np.fromiter(map(hash, keys), np.int64, len(keys))
        out = np.full(len(keys), -1, np.int64)
        if n == 0 or not keys:
            return out
        pos = np.searchsorted(hashes, h)
        hit = np.flatnonzero(hashes[np.minimum(pos, n - 1)] == h)
        for i in hit.tolist():  # only keys whose hash is held: compared byte for byte
            out[i] = self._row(keys[i])
        return out

    def compact(self) -> None:
        """Fold the records changed since the last rebuild into the arrays."""
        over = self._over
        if not over:
            return
        n = len(self._hashes)
        keep = np.ones(n, bool)
        gone = self._rows(list(over))
        keep[gone[gone >= 0]] = False
        new_keys = [k for k, v in over.items() if v is not None]
        new_values: list[bytes] = [v for v in over.values() if v is not None]
        rows = np.flatnonzero(keep)
        new_hashes = np.fromiter(map(hash, new_keys), np.int64, len(new_keys))
        hashes = np.concatenate([self._hashes[rows], new_hashes])
        order = np.argsort(hashes, kind="stable")
        # The kept rows and the new ones as rows of one buffer (the old, then the new appended), taken
        # once in hash order.
        take = np.concatenate([rows, np.arange(n, n + len(new_keys))])[order]
        self._hashes = hashes[order]
        self._kblob, self._koff = _take(*_append(self._kblob, self._koff, new_keys), take)
        self._vblob, self._voff = _take(*_append(self._vblob, self._voff, new_values), take)
        self._over = {}
        self._len = len(hashes)
        self._limit = len(hashes) // 8

    def _maybe_compact(self) -> None:
        if len(self._over) > REBUILD_MIN + self._limit:
            self.compact()

    @property
    def nbytes(self) -> int:
        """Bytes the arrays and the change dict take (an estimate of the dict's)."""
        arrays = (self._hashes, self._kblob, self._koff, self._vblob, self._voff)
        over = sum(len(k) + len(v or b"") + 120 for k, v in self._over.items())
        return sum(a.nbytes for a in arrays) + over

    # -- the mapping ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes):
            return False
        got = self._over.get(key, _MISSING)
        if got is not _MISSING:
            return got is not None
        return self._row(key) >= 0

    def __getitem__(self, key: bytes) -> bytes:
        got = self._over.get(key, _MISSING)
        if got is _MISSING:
            got = self._base_get(key)
        if got is None:
            raise KeyError(key)
        return got  # type: ignore[no-any-return]

    def get(self, key: bytes, default: Any = None) -> Any:
        got = self._over.get(key, _MISSING)
        if got is _MISSING:
            got = self._base_get(key)
        return default if got is None else got

    def __setitem__(self, key: bytes, value: bytes) -> None:
        over = self._over
        got = over.get(key, _MISSING)
        if got is _MISSING:
            if self._row(key) < 0:
                self._len += 1
        elif got is None:
            self._len += 1
        over[key] = value
        self._maybe_compact()

    def __delitem__(self, key: bytes) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: bytes, default: Any = _MISSING) -> Any:
        over = self._over
        got = over.get(key, _MISSING)
        in_base = self._row(key) >= 0
        if got is _MISSING:
            got = self._base_get(key) if in_base else None
        if got is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        if in_base:
            over[key] = None
        else:
            del over[key]
        self._len -= 1
        self._maybe_compact()
        return got

    def update(self, other: Any = (), /) -> None:  # type: ignore[override]
        """Put every record of ``other`` (a mapping or pairs): the keys are looked up in the arrays at
        once (a version's puts)."""
        batch = dict(other.items() if isinstance(other, Mapping) else other)
        if len(batch) < 16:
            for key, value in batch.items():
                self[key] = value
            return
        over = self._over
        unknown = [k for k in batch if k not in over]
        held = self._rows(unknown)
        self._len += int((held < 0).sum())
        for key, value in batch.items():
            if over.get(key, value) is None:
                self._len += 1  # removed since the last rebuild: back
        over.update(batch)
        self._maybe_compact()

    def _base_items(self) -> Iterator[tuple[bytes, bytes]]:
        kb, vb = self._kblob.tobytes(), self._vblob.tobytes()
        ko, vo = self._koff.tolist(), self._voff.tolist()
        over = self._over
        for i in range(len(ko) - 1):
            key = kb[ko[i] : ko[i + 1]]
            if key not in over:
                yield key, vb[vo[i] : vo[i + 1]]
        for key, value in over.items():
            if value is not None:
                yield key, value

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self._base_items())

    def items(self) -> ItemsView[bytes, bytes]:
        return _Items(self)

    def values(self) -> ValuesView[bytes]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"CompactState({self._len} records, {self.nbytes} bytes)"


class _Items(ItemsView[bytes, bytes]):
    _mapping: CompactState

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self._mapping._base_items()


class _Values(ValuesView[bytes]):
    _mapping: CompactState

    def __iter__(self) -> Iterator[bytes]:
        return (v for _, v in self._mapping._base_items())

"""A partition's raw state held compactly between the versions of a replay (:class:`readers.scan.Replay`).

A Python dict of key bytes to value bytes costs some 200 bytes a record over the bytes themselves (two
``bytes`` objects and a hash-table slot): a store of 2M keys held whole to be followed batch by batch
would take half a gigabyte. :class:`CompactState` keeps the records in numpy arrays instead: every key's
bytes in one buffer and every value's in another, with their offsets, ordered by the key's hash (so a key
is found by a binary search), plus a small dict of the records changed since the arrays were last
rebuilt (a removed key maps to ``None``). Applying a version's changes costs what the version wrote (the
dict grows); the arrays are rebuilt once the dict holds an eighth as many records as they do, which
amortises to a constant per change.

The hash is Python's own ``hash`` of the key bytes: the arrays live in one process only and are never
written anywhere, so its per-process seed does not matter.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, MutableMapping, ValuesView
from typing import Any

import numpy as np

__all__ = ["CompactState"]

_MISSING: Any = object()


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """Offsets (``n + 1``, starting at 0) of segments of ``lengths``, int32 while they fit."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out.astype(np.int32) if out[-1] < 2**31 else out


def _take(blob: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The segments ``rows`` of ``blob`` (in that order) as a new buffer and its offsets."""
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1].astype(np.int64) - starts
    new = _offsets(lengths)
    total = int(new[-1])
    if total == 0:
        return np.zeros(0, np.uint8), new
    index = np.repeat(starts - new[:-1].astype(np.int64), lengths) + np.arange(total, dtype=np.int64)
    return blob[index], new


def _pack(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as one buffer and its offsets."""
    lengths = np.fromiter(map(len, items), np.int64, len(items))
    return np.frombuffer(b"".join(items), np.uint8).copy(), _offsets(lengths)


class CompactState(MutableMapping[bytes, bytes]):
    """A partition's raw records (key bytes to value bytes) in numpy arrays, changed in place as a dict
    is; see the module's docstring.

    Parameters
    ----------
    records : mapping of bytes to bytes, optional
        The records to start from (a version read whole).
    """

    __slots__ = ("_hashes", "_kblob", "_koff", "_vblob", "_voff", "_over", "_len")

    def __init__(self, records: Mapping[bytes, bytes] | None = None):
        self._over: dict[bytes, bytes | None] = {}
        self._build(list(records.keys()) if records else [], list(records.values()) if records else [])

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

    def compact(self) -> None:
        """Fold the records changed since the last rebuild into the arrays."""
        over = self._over
        if not over:
            return
        keep = np.ones(len(self._hashes), bool)
        for key in over:
            i = self._row(key)
            if i >= 0:
                keep[i] = False
        new_keys = [k for k, v in over.items() if v is not None]
        new_values: list[bytes] = [v for v in over.values() if v is not None]
        rows = np.flatnonzero(keep)
        new_hashes = np.fromiter(map(hash, new_keys), np.int64, len(new_keys))
        hashes = np.concatenate([self._hashes[rows], new_hashes])
        order = np.argsort(hashes, kind="stable")
        kb, ko = _take(self._kblob, self._koff, rows)
        vb, vo = _take(self._vblob, self._voff, rows)
        nkb, nko = _pack(new_keys)
        nvb, nvo = _pack(new_values)
        kb = np.concatenate([kb, nkb])
        vb = np.concatenate([vb, nvb])
        ko = np.concatenate([ko[:-1].astype(np.int64), nko.astype(np.int64) + len(kb) - len(nkb)])
        vo = np.concatenate([vo[:-1].astype(np.int64), nvo.astype(np.int64) + len(vb) - len(nvb)])
        self._hashes = hashes[order]
        self._kblob, self._koff = _take(kb, ko, order)
        self._vblob, self._voff = _take(vb, vo, order)
        self._over = {}
        self._len = len(hashes)

    def _maybe_compact(self) -> None:
        if len(self._over) > 64 + len(self._hashes) // 8:
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

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        items = other.items() if isinstance(other, Mapping) else other
        for key, value in items:
            self[key] = value

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

"""Compiled byte loops (numba): the record walks that numpy cannot vectorise.

A state stream is a chain of length-prefixed records: where the next record starts depends on the
length words of every record before it, so the walk is sequential. In Python it costs ~0.3 us per
record (0.49 s for the 1.6M records of the join benchmark's changelogs); compiled it costs ~0.01 us
(0.02 s), which moves the column family decode from record scanning to the floor (README, "Speed").

The kernels check only what keeps the walk safe (reads in bounds, known record types, sizes >= -1)
and report the first oddity with ``eof = -1``; the callers in :mod:`readers._format.records` then re-walk
with their checked Python walks, which name the error, its offset and its record. Compiled code is
cached on disk (``cache=True``: next to this file, or in the user's cache folder when that is not
writable), so only the first use after an install pays the ~2 s compilation. Loading them still costs a
fresh process ~0.9 s (numba itself and its first cached kernel), so :mod:`readers._format.records` walks in
Python until a process has walked ``records.PYTHON_WALK_BYTES`` and imports this module only then.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit  # type: ignore[import-untyped]

__all__ = ["gather_bytes", "walk_sized", "walk_typed"]

_PUT, _REMOVE, _MERGE, _EOF = 0x01, 0x10, 0x11, 0x00


@njit(cache=True, nogil=True, inline="always")  # type: ignore[misc]
def _i32(buf: Any, pos: int) -> int:  # pragma: no cover - compiled
    v = (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8)
    v |= np.int64(buf[pos + 3])
    return int(v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v)


@njit(cache=True, nogil=True)  # type: ignore[misc]
def _grow(arr: Any, count: int) -> Any:  # pragma: no cover - compiled
    out = np.empty(max(2 * arr.shape[0], 1024), arr.dtype)
    out[:count] = arr[:count]
    return out


@njit(cache=True, nogil=True)  # type: ignore[misc]
def walk_sized(buf: Any, pos: int) -> tuple[Any, Any, Any, int]:  # pragma: no cover - compiled
    """Records ``keySize:i32 key valueSize:i32 value`` up to the ``-1`` end marker.

    Returns ``(key_start, key_len, val_len, eof)`` (int64 arrays; ``val_len`` -1 for a remove) and the
    offset of the end marker, or ``eof = -1`` at the first oddity (a read past the end, a size < -1).
    """
    n = buf.shape[0]
    starts = np.empty(1024, np.int64)
    klens = np.empty(1024, np.int64)
    vlens = np.empty(1024, np.int64)
    count = 0
    while True:
        if pos + 4 > n:
            return starts[:count], klens[:count], vlens[:count], -1
        klen = _i32(buf, pos)
        if klen < 0:
            return starts[:count], klens[:count], vlens[:count], (pos if klen == -1 else -1)
        pos += 4
        if count == starts.shape[0]:
            starts, klens, vlens = _grow(starts, count), _grow(klens, count), _grow(vlens, count)
        starts[count] = pos
        klens[count] = klen
        pos += klen
        if pos + 4 > n:
            return starts[:count], klens[:count], vlens[:count], -1
        vlen = _i32(buf, pos)
        vlens[count] = vlen
        count += 1
        pos += 4
        if vlen > 0:
            pos += vlen
        elif vlen < -1:
            return starts[:count], klens[:count], vlens[:count], -1


@njit(cache=True, nogil=True)  # type: ignore[misc]
def walk_typed(buf: Any, pos: int) -> tuple[Any, Any, Any, Any, int]:  # pragma: no cover - compiled
    """Records ``type:u8 keySize:i32 key valueSize:i32 value`` (changelog v2/v4) up to type ``00``.

    Returns ``(key_start, key_len, val_len, kind, eof)`` and the offset of the ``00`` end record, or
    ``eof = -1`` at the first oddity (a read past the end, an unknown type, a negative key size, a put
    or merge with a negative value size, a delete whose value size is not -1).
    """
    n = buf.shape[0]
    starts = np.empty(1024, np.int64)
    klens = np.empty(1024, np.int64)
    vlens = np.empty(1024, np.int64)
    kinds = np.empty(1024, np.uint8)
    count = 0
    while True:
        if pos >= n:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        kind = buf[pos]
        if kind == _EOF:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], pos
        if (kind != _PUT and kind != _REMOVE and kind != _MERGE) or pos + 5 > n:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        klen = _i32(buf, pos + 1)
        if klen < 0:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        pos += 5
        if count == starts.shape[0]:
            starts, klens = _grow(starts, count), _grow(klens, count)
            vlens, kinds = _grow(vlens, count), _grow(kinds, count)
        starts[count] = pos
        klens[count] = klen
        kinds[count] = kind
        pos += klen
        if pos + 4 > n:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        vlen = _i32(buf, pos)
        vlens[count] = vlen
        count += 1
        pos += 4
        if kind == _REMOVE:
            if vlen != -1:
                return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        elif vlen < 0:
            return starts[:count], klens[:count], vlens[:count], kinds[:count], -1
        else:
            pos += vlen


@njit(cache=True, nogil=True)  # type: ignore[misc]
def gather_bytes(buf: Any, starts: Any, lens: Any, offsets: Any) -> Any:  # pragma: no cover - compiled
    """``buf[starts[i] : starts[i] + lens[i]]`` laid end to end (``offsets``: where each one goes, its
    cumulative sums with a leading 0): a byte copy, without numpy's per-byte index arrays."""
    out = np.empty(offsets[-1], np.uint8)
    for i in range(starts.shape[0]):
        out[offsets[i] : offsets[i + 1]] = buf[starts[i] : starts[i] + lens[i]]
    return out

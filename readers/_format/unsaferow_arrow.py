"""UnsafeRows straight to Arrow columns: no Python object per row.

:func:`decode_arrow` decodes many UnsafeRows of one schema into one ``pyarrow.StructArray`` whose values
equal ``to_arrow_array(decode_rows(...))`` (:mod:`readers._format.unsaferow`, :mod:`readers.values`), with the
same checks and the same :class:`~readers.errors.SchemaMismatchError` messages, because it walks the
rows with the same compiled layout and bounds checks. Fixed-width values (booleans, integers, floats,
dates, timestamps, intervals of one unit, decimals up to 18 digits) are gathered with numpy fancy
indexing into Arrow buffers; strings and binaries are cut out of the buffer with one vectorised gather
(offsets from a cumulative sum); structs recurse. Arrays, maps, calendar intervals and wide decimals,
rare in state, take the per-value path of :mod:`readers._format.unsaferow` and are converted by Arrow.

Invalid UTF-8 in a string (possible only in damaged or foreign bytes) is replaced as the per-row path
does (``errors="replace"``), by decoding that column through Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa  # noqa: TID253  (imported lazily itself, by the readers that produce Arrow)

from statelens.readers._format.unsaferow import (
    _CHUNK_ROWS,
    _NUMPY_DTYPE,
    _U64_DT,
    Kind,
    RowLayout,
    TypeLayout,
    _Buffer,
    _first,
    _outside_message,
    _row_null_masks,
    _Rows,
    _values,
    _Where,
)
from statelens.readers.arrow_values import numpy_array, validity_buffer
from statelens.readers.errors import SchemaMismatchError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["decode_arrow", "iter_decode_arrow"]


def iter_decode_arrow(
    buf: Any,
    starts: Any,
    lengths: Any,
    layout: RowLayout,
    arrow_type: pa.StructType,
    *,
    path: str | None = None,
    records: Any = None,
    chunk_rows: int = _CHUNK_ROWS,
) -> Iterator[pa.StructArray]:
    """Decode UnsafeRows into Arrow struct arrays of at most ``chunk_rows`` rows each.

    Parameters
    ----------
    buf : bytes-like
        Bytes holding the rows (a whole decompressed file, or rows joined together).
    starts, lengths : array-like of int
        Byte offset and size of each row (HDFS values: ``(size // 8) * 8``, as for ``decode_rows``).
    layout : RowLayout
        From :func:`readers._format.unsaferow.compile_layout`.
    arrow_type : pyarrow.StructType
        ``to_arrow_type(schema)`` of the same schema (:func:`readers.values.to_arrow_type`).
    path, records
        For error messages, as for ``decode_rows``.
    chunk_rows : int
        Rows per yielded array; bounds the index arrays of one pass.

    Yields
    ------
    pyarrow.StructArray

    Raises
    ------
    SchemaMismatchError
        If a row does not fit the schema (the message names the file, the record and the field).
    """
    b = _Buffer(buf)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = len(starts)
    if len(lengths) != n:
        raise ValueError(f"{n} starts but {len(lengths)} lengths")
    recs = (
        np.arange(n, dtype=np.int64) if records is None else np.asarray(records, dtype=np.int64).reshape(-1)
    )
    if len(arrow_type) != layout.num_fields:
        raise ValueError(f"Arrow type has {len(arrow_type)} fields, the layout {layout.num_fields}")
    outside = (starts < 0) | (lengths < 0) | (starts + lengths > len(b))
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise _Where(path, int(recs[i]), int(starts[i])).fail(
            "", f"row of {int(lengths[i])} bytes at {int(starts[i])} is outside the {len(b)}-byte buffer"
        )
    for lo in range(0, n, chunk_rows):
        s = slice(lo, lo + chunk_rows)
        yield _struct(b, starts[s], lengths[s], layout, arrow_type, _Rows(path, recs[s], starts[s]))


def decode_arrow(
    buf: Any, starts: Any, lengths: Any, layout: RowLayout, arrow_type: pa.StructType, **kwargs: Any
) -> pa.StructArray:
    """All rows of :func:`iter_decode_arrow` as one ``StructArray`` (same parameters)."""
    parts = list(iter_decode_arrow(buf, starts, lengths, layout, arrow_type, **kwargs))
    if not parts:
        return pa.nulls(0, arrow_type)
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _struct(
    b: _Buffer,
    starts: np.ndarray[Any, Any],
    lengths: np.ndarray[Any, Any],
    layout: RowLayout,
    arrow_type: pa.StructType,
    rows: _Rows,
    mask: np.ndarray[Any, Any] | None = None,
) -> pa.StructArray:
    """The rows at ``starts`` (inside ``b``) as one struct array; ``mask`` marks null rows (not read)."""
    n = len(starts)
    fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
    if mask is not None and mask.any():
        idx = np.flatnonzero(~mask)
        inner = _struct(b, starts[idx], lengths[idx], layout, arrow_type, rows.take(idx))
        return _scatter(inner, idx, n)
    if n == 0:
        return pa.nulls(0, arrow_type)
    nulls = _row_null_masks(b, starts, lengths, layout, rows)
    children = []
    for f, isnull, af in zip(layout.fields, nulls, fields, strict=True):
        t = f.type
        target = af.type
        if f.index in layout.long_fields:  # FMGWS v1: declared int, a long in the slot
            t, target = TypeLayout(Kind.LONG, "bigint"), pa.int64()
        children.append(
            _column(
                b, starts + f.slot, isnull, t, target, starts, layout.fixed_size, lengths, rows, f.qualname
            )
        )
    if not fields:
        return pa.array([{}] * n, type=arrow_type)
    # an FMGWS v1 long read from a field declared int keeps its 64 bits (the type says int64 then)
    fields = [
        af if c.type == af.type else pa.field(af.name, c.type, metadata=af.metadata)
        for af, c in zip(fields, children, strict=True)
    ]
    return pa.StructArray.from_arrays(children, fields=fields)


def _scatter(inner: pa.Array, idx: np.ndarray[Any, Any], n: int) -> pa.Array:
    """``inner`` (one value per ``idx``) placed into ``n`` rows, nulls elsewhere."""
    take = np.full(n, -1, dtype=np.int64)
    take[idx] = np.arange(len(idx), dtype=np.int64)
    return inner.take(numpy_array(take, take < 0))


def _column(
    b: _Buffer,
    slots: np.ndarray[Any, Any],
    isnull: np.ndarray[Any, Any],
    t: TypeLayout,
    target: pa.DataType,
    base: np.ndarray[Any, Any],
    lo: Any,
    hi: np.ndarray[Any, Any],
    rows: _Rows,
    field: str,
) -> pa.Array:
    """One field of many rows (slots at byte ``slots``) as an Arrow array of type ``target``."""
    kind = t.kind
    n = len(slots)
    mask = isnull if isnull.any() else None
    if kind == Kind.VOID:
        return pa.nulls(n, type=target)
    if kind == Kind.BOOLEAN:
        return numpy_array(b.u8[slots] != 0, mask).cast(target)
    if kind in _NUMPY_DTYPE:
        raw = b.view(_NUMPY_DTYPE[kind])[slots]
        if kind == Kind.DECIMAL_LONG and t.scale < 0:  # legacy negative scale: exact through Python
            return pa.array(_values(b, slots, isnull, t, base, lo, hi, rows, field, None), type=target)
        if kind == Kind.DECIMAL_LONG and t.scale >= 0 and pa.types.is_decimal(target):
            return _decimal128(raw, mask, target)
        arr = numpy_array(raw, mask)
        if arr.type == target:
            return arr
        if target.bit_width == arr.type.bit_width:  # date32, timestamp, duration, ... over the same ints
            return arr.view(target)
        return arr.cast(target)
    if kind in (Kind.STRING, Kind.BINARY, Kind.STRUCT):
        word = b.view(_U64_DT)[slots]
        offs = (word >> np.uint64(32)).astype(np.int64)
        sizes = (word & np.uint64(0xFFFFFFFF)).astype(np.int64)
        present = ~isnull
        i = _first(present & ((offs < lo) | (offs + sizes > hi)))
        if i is not None:
            low = int(lo[i]) if isinstance(lo, np.ndarray) else lo
            raise rows.fail(
                i, field, _outside_message(t, int(offs[i]), int(sizes[i]), low, int(hi[i]), element=False)
            )
        pos = base + offs
        if kind == Kind.STRUCT:
            assert t.row is not None
            return _struct(
                b, np.where(present, pos, 0), np.where(present, sizes, 0), t.row, target, rows, mask=isnull
            )
        arr = _bytes_column(b, pos, np.where(present, sizes, 0), mask, kind)
        if kind == Kind.STRING and target == pa.string():
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid:  # invalid UTF-8: decoded with replacement, as the per-row path does
                vals = _values(b, slots, isnull, t, base, lo, hi, rows, field, None)
                return pa.array(vals, type=target)
        return arr if arr.type == target else arr.cast(target)
    # arrays, maps, calendar intervals, wide decimals: the per-value path, converted by Arrow
    vals = _values(b, slots, isnull, t, base, lo, hi, rows, field, None)
    try:
        return pa.array(vals, type=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:  # damaged bytes: e.g. a null map key
        raise SchemaMismatchError(
            f"values of {t.type_name} that Arrow cannot hold: {err}", path=rows.path, field=field
        ) from err


def _bytes_column(
    b: _Buffer,
    pos: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    mask: np.ndarray[Any, Any] | None,
    kind: int,
) -> pa.Array:
    """Variable-length payloads (``sizes`` bytes at ``pos``) gathered into one Arrow string/binary array."""
    n = len(pos)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        gather = np.arange(total, dtype=np.int64) + np.repeat(pos - offsets[:-1], sizes)
        data = b.u8[gather]
    else:
        data = np.zeros(0, dtype=np.uint8)
    large = total >= 2**31
    typ = (
        (pa.large_string() if large else pa.string())
        if kind == Kind.STRING
        else (pa.large_binary() if large else pa.binary())
    )
    off_buf = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    validity = None if mask is None else validity_buffer(mask)
    return pa.Array.from_buffers(
        typ, n, [validity, off_buf, pa.py_buffer(data)], null_count=-1 if mask is None else int(mask.sum())
    )


def _decimal128(
    raw: np.ndarray[Any, Any], mask: np.ndarray[Any, Any] | None, target: pa.DataType
) -> pa.Array:
    """Unscaled int64 decimals as Arrow decimal128 (16-byte little-endian two's complement)."""
    n = len(raw)
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = raw
    words[:, 1] = raw >> 63  # sign extension
    validity = None if mask is None else validity_buffer(mask)
    return pa.Array.from_buffers(
        target, n, [validity, pa.py_buffer(words)], null_count=0 if mask is None else int(mask.sum())
    )

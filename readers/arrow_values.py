"""Arrow columns back to statelens' Python values, a page of rows at a time.

Decoded state travels as Arrow tables (``partition``, ``key``, ``value``: see
``StoreReaderBase.read_arrow``). Code that shows or exports a few rows at a time still wants the Python
representation of :data:`readers.model.VALUE_REPRESENTATION` (structs as positional tuples, timestamps as
integer microseconds, maps as lists of pairs...). :func:`values_converter` converts a whole Arrow
column to that representation with vectorised casts (no per-value type dispatch), and
:class:`ArrowStateRows` is a read-only sequence of :class:`~readers.model.StateRow` over Arrow tables
that converts one page of rows when one of them is asked for, keeping a few pages: memory follows the
Arrow tables (tens of bytes a row), not a Python object per row.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from statelens.readers._format.keyids import PaddedKeys, first_records, key_numbers
from statelens.readers._format.records import gather_bytes
from statelens.readers.errors import BackendUnavailableError
from statelens.readers.model import CalendarInterval, StateRow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType

__all__ = [
    "ArrowStateRows",
    "binary_array",
    "first_appearances",
    "first_of_ids",
    "fixed_binary_array",
    "key_ids",
    "numbers",
    "numpy_array",
    "validity_buffer",
    "values_converter",
]

_Conv = Callable[[Any], list[Any]]


def values_converter(data_type: DataType) -> _Conv:
    """A function from an Arrow array (of ``to_arrow_type(data_type)``) to a list of Python values.

    Parameters
    ----------
    data_type : pyspark.sql.types.DataType
        The Spark SQL type the column was decoded from (it tells a calendar interval from a struct
        of three fields, and a date from an int).
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    dt = data_type
    if isinstance(dt, T.UserDefinedType):
        return values_converter(dt.sqlType())
    if isinstance(dt, T.StructType):
        children = [values_converter(f.dataType) for f in dt.fields]

        def struct(arr: Any) -> list[Any]:
            n = len(arr)
            if not children:
                rows: list[Any] = [()] * n
            else:
                cols = [conv(child) for conv, child in zip(children, arr.flatten(), strict=True)]
                rows = list(zip(*cols, strict=True))
            return _nulls(arr, rows)

        return struct
    if isinstance(dt, T.CalendarIntervalType):

        def interval(arr: Any) -> list[Any]:
            m, d, u = (c.to_pylist() for c in arr.flatten())
            return _nulls(arr, [CalendarInterval(*t) for t in zip(m, d, u, strict=True)])

        return interval
    if isinstance(dt, T.ArrayType):
        element = values_converter(dt.elementType)

        def array(arr: Any) -> list[Any]:
            flat = element(arr.flatten())  # the values of the rows (null lists contribute none)
            offsets = arr.offsets.to_pylist()
            base = offsets[0]
            out = [flat[a - base : b - base] for a, b in zip(offsets, offsets[1:], strict=False)]
            return _nulls(arr, out)

        return array
    if isinstance(dt, T.MapType):
        key_conv, value_conv = values_converter(dt.keyType), values_converter(dt.valueType)

        def mapping(arr: Any) -> list[Any]:
            offsets = arr.offsets.to_pylist()
            base, end = offsets[0], offsets[-1]
            keys = key_conv(arr.keys.slice(base, end - base))
            items = value_conv(arr.items.slice(base, end - base))
            pairs = list(zip(keys, items, strict=True))
            return _nulls(
                arr, [pairs[a - base : b - base] for a, b in zip(offsets, offsets[1:], strict=False)]
            )

        return mapping
    as_int: pa.DataType | None = None
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType, T.DayTimeIntervalType)):
        as_int = pa.int64()
    elif isinstance(dt, T.DateType):
        as_int = pa.int32()
    elif type(dt).__name__ == "TimeType":
        as_int = pa.int64()
    if as_int is not None:
        target = as_int

        def integers(arr: Any) -> list[Any]:
            if arr.type.bit_width == target.bit_width and not pa.types.is_integer(arr.type):
                return list(arr.view(target).to_pylist())
            return list(arr.to_pylist())

        return integers
    if (
        isinstance(dt, T.DecimalType) and dt.scale < 0
    ):  # legacy: Arrow holds the integer, rows its scaled form
        shift = -dt.scale

        def negative_scale(arr: Any) -> list[Any]:
            return [
                None if v is None else Decimal(int(v) // 10**shift).scaleb(shift) for v in arr.to_pylist()
            ]

        return negative_scale

    def plain(arr: Any) -> list[Any]:
        return list(arr.to_pylist())

    return plain


def _nulls(arr: Any, values: list[Any]) -> list[Any]:
    if arr.null_count:
        for i, valid in enumerate(arr.is_valid().to_pylist()):
            if not valid:
                values[i] = None
    return values


class ArrowStateRows(Sequence[StateRow]):
    """Read-only rows (``StateRow``) over Arrow tables of ``partition, key, value``, converted a page at
    a time on access.

    Parameters
    ----------
    tables : sequence of pyarrow.Table
        E.g. one per partition, as ``read_arrow`` returns them.
    key_type, value_type : pyspark.sql.types.StructType
        The store's key and value schemas.
    page_rows : int
        Rows converted together.
    pages_kept : int
        Converted pages kept (least recently used go first).
    """

    def __init__(
        self,
        tables: Sequence[pa.Table],
        key_type: Any,
        value_type: Any,
        *,
        page_rows: int = 2048,
        pages_kept: int = 8,
    ):
        self._tables = [t for t in tables if t.num_rows]
        self._starts: list[int] = []
        total = 0
        for t in self._tables:
            self._starts.append(total)
            total += t.num_rows
        self._n = total
        self._key = values_converter(key_type)
        self._value = values_converter(value_type)
        self._page_rows = page_rows
        self._pages_kept = pages_kept
        self._pages: OrderedDict[int, list[StateRow]] = OrderedDict()
        self._lock = threading.Lock()  # the GUI thread and workers read the same rows

    @property
    def tables(self) -> list[pa.Table]:
        """The Arrow tables (for columnar consumers: export, queries)."""
        return list(self._tables)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._tables)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> StateRow: ...

    @overload
    def __getitem__(self, i: slice) -> list[StateRow]: ...

    def __getitem__(self, i: int | slice) -> StateRow | list[StateRow]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:  # a run of rows (a worker formatting a column): converted at once, not cached
                return self._convert(start, stop) if start < stop else []
            return [self[j] for j in range(start, stop, step)]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        page, at = divmod(i, self._page_rows)
        return self._page(page)[at]

    def __iter__(self) -> Iterator[StateRow]:
        for page in range((self._n + self._page_rows - 1) // self._page_rows):
            yield from self._page(page)

    def _page(self, page: int) -> list[StateRow]:
        with self._lock:
            rows = self._pages.get(page)
            if rows is not None:
                self._pages.move_to_end(page)
                return rows
        rows = self._convert(page * self._page_rows, min((page + 1) * self._page_rows, self._n))
        with self._lock:
            self._pages[page] = rows
            while len(self._pages) > self._pages_kept:
                self._pages.popitem(last=False)
        return rows

    def _convert(self, lo: int, hi: int) -> list[StateRow]:
        out: list[StateRow] = []
        t = bisect.bisect_right(self._starts, lo) - 1
        while lo < hi:
            table, start = self._tables[t], self._starts[t]
            take = min(hi, start + table.num_rows) - lo
            part = table.slice(lo - start, take)
            pids = part.column(0).to_pylist()
            keys = self._key(part.column(1).combine_chunks())
            values = self._value(part.column(2).combine_chunks())
            out.extend(StateRow(p, k, v) for p, k, v in zip(pids, keys, values, strict=True))
            lo += take
            t += 1
        return out


def binary_array(buf: bytes, starts: Any, lens: Any) -> Any:
    """The byte strings ``buf[starts[i] : starts[i] + lens[i]]`` as one Arrow binary array (one vectorised
    gather, no Python object per string), e.g. keys to hash-group with Arrow."""

    n = len(starts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    lens = np.asarray(lens, dtype=np.int64)
    if n and int(lens[0]) > 0 and bool((lens == lens[0]).all()):  # equal lengths (fixed-width rows): one copy
        u8 = np.frombuffer(buf, dtype=np.uint8)
        data = np.lib.stride_tricks.sliding_window_view(u8, int(lens[0]))[np.asarray(starts)].reshape(-1)
        return _binary(n, offsets, data)

    data = gather_bytes(
        np.frombuffer(buf, dtype=np.uint8),
        np.asarray(starts, dtype=np.int64),
        np.asarray(lens, dtype=np.int64),
        offsets,
    )
    return _binary(n, offsets, data)


def fixed_binary_array(block: Any) -> Any:
    """The rows of a contiguous ``(n, width)`` uint8 array as one Arrow ``fixed_size_binary(width)``
    array (no copy)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    n, width = block.shape
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(block)])


def numbers(array: Any) -> Any:
    """A numeric Arrow array (or chunked array) as a numpy array, without a copy where it can: Arrow's
    own ``to_numpy`` imports pandas (~0.3 s) on first use, which a command counting keys does not
    need. Arrays with nulls or of other types do go through ``to_numpy``."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if array.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return array.to_numpy(zero_copy_only=False)
    letter = "f" if pa.types.is_floating(kind) else "u" if pa.types.is_unsigned_integer(kind) else "i"
    dtype = np.dtype(f"{letter}{kind.bit_width // 8}")
    if not len(array):
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize)


def key_ids(pieces: Sequence[Any]) -> Any:
    """Ids of the byte strings of ``pieces``, one after the other: equal strings get equal ids, numbered
    in order of first appearance (so the distinct strings among the first ``i`` are
    ``max(ids[:i]) + 1``). An int32 numpy array; no Python object per string.

    A piece is a ``(n, width)`` uint8 numpy array (its rows are the strings; a strided view will do), a
    :class:`readers._format.keyids.PaddedKeys` or an Arrow binary array. Numpy pieces are numbered by
    :func:`readers._format.keyids.key_numbers` (no pyarrow import); anything it leaves (Arrow arrays,
    pieces of very unlike widths, a hash collision) goes to one Arrow hash dictionary, a run of numpy
    pieces of one width copied into one fixed-width Arrow array (and no pandas, which Arrow's
    ``to_numpy`` would import).
    """
    ids = key_numbers(pieces)
    if ids is not None:
        return ids
    import pyarrow as pa  # deferred: pyarrow (heavy)
    import pyarrow.compute as pc  # deferred: pyarrow (heavy)

    chunks: list[Any] = []
    run: list[Any] = []
    for piece in [*pieces, None]:
        if isinstance(piece, np.ndarray) and (not run or run[0].shape[1] == piece.shape[1]):
            run.append(piece)
            continue
        if run:
            chunks.append(
                fixed_binary_array(np.concatenate(run) if len(run) > 1 else np.ascontiguousarray(run[0]))
            )
            run = [piece] if isinstance(piece, np.ndarray) else []
        if isinstance(piece, PaddedKeys):
            width = piece.rows.shape[1]
            chunks.append(binary_array(piece.rows.tobytes(), np.arange(len(piece)) * width, piece.lens))
        elif piece is not None and not isinstance(piece, np.ndarray):
            chunks.append(piece)
    if not chunks:
        return np.zeros(0, dtype=np.int32)
    if len({c.type for c in chunks}) > 1:  # e.g. fixed-width files of two widths, or fixed and variable
        chunks = [c.cast(pa.large_binary()) for c in chunks]
    out = [numbers(encoded.indices) for encoded in pc.dictionary_encode(pa.chunked_array(chunks)).chunks]
    if not out:
        return np.zeros(0, dtype=np.int32)
    return out[0] if len(out) == 1 else np.concatenate(out)


def first_appearances(pieces: Sequence[Any]) -> Any:
    """Whether each byte string of ``pieces`` (one after the other, as for :func:`key_ids`) is the first
    of its value: a boolean numpy array, True where a string is unlike every string before it, so the
    distinct strings among the first ``i`` are ``first[:i].sum()``. What :func:`key_ids` tells of the
    strings when only their distinct values are counted, cheaper (no id is given to each string);
    pieces that :func:`readers._format.keyids.first_records` leaves are numbered by :func:`key_ids`.
    """
    first = first_records(pieces)
    return first_of_ids(key_ids(pieces)) if first is None else first


def first_of_ids(ids: Any) -> Any:
    """Where each id of ``ids`` (numbered from 0 in order of first appearance, :func:`key_ids`) appears
    first: a boolean numpy array."""
    ids = np.asarray(ids)
    first = np.ones(len(ids), dtype=bool)
    if len(ids) > 1:
        first[1:] = ids[1:] > np.maximum.accumulate(ids[:-1])
    return first


def numpy_array(values: Any, mask: Any = None) -> Any:
    """A 1-D numpy array of booleans or numbers as an Arrow array: what ``pa.array(values, mask=mask)``
    makes (numbers without a copy; ``mask`` marks nulls), built from buffers, because ``pa.array`` looks
    for pandas objects first and so imports pandas (~0.3 s) on first use, which decoding state does not
    need. Other arrays (byte-swapped, strided, objects) do go through ``pa.array``."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    values = np.asarray(values)
    if values.ndim != 1 or not values.dtype.isnative or values.dtype.kind not in "biuf":
        return pa.array(values, mask=mask)
    n = len(values)
    validity = None if mask is None else validity_buffer(mask)
    nulls = 0 if mask is None else int(np.count_nonzero(mask))
    if values.dtype.kind == "b":
        return pa.Array.from_buffers(
            pa.bool_(), n, [validity, pa.py_buffer(np.packbits(values, bitorder="little"))], null_count=nulls
        )
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(data.dtype), n, [validity, pa.py_buffer(data)], null_count=nulls
    )


def validity_buffer(mask: Any) -> Any:
    """The Arrow validity bitmap of the null mask ``mask`` (True where null)."""
    import pyarrow as pa  # deferred: pyarrow (heavy)

    return pa.py_buffer(np.packbits(~np.asarray(mask, dtype=np.bool_), bitorder="little"))


def _binary(n: int, offsets: Any, data: Any) -> Any:
    import pyarrow as pa  # deferred: pyarrow (heavy)

    large = offsets[-1] >= 2**31
    return pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        n,
        [None, pa.py_buffer(offsets if large else offsets.astype(np.int32)), pa.py_buffer(data)],
    )


def to_polars(table: pa.Table) -> Any:
    """A polars DataFrame of ``table`` (``to_polars()`` of a scan and of a fleet).

    Raises
    ------
    BackendUnavailableError
        polars is not installed (the message says how to install it).
    """
    try:
        import polars as pl  # deferred: optional, and heavy
    except ImportError as err:
        raise BackendUnavailableError("to_polars needs polars: pip install polars") from err
    return pl.from_arrow(table)

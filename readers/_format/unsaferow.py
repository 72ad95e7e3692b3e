"""Decode Spark's UnsafeRow bytes natively, without a JVM.

Spark writes every state-store key and value as an ``UnsafeRow`` (``UnsafeRow.java``,
``UnsafeArrayData.java``, ``UnsafeMapData.java`` and ``codegen/UnsafeRowWriter.java`` in
``sql/catalyst``), the same layout in Spark 2.1 to 4.3. This module follows
``docs/format.md`` §6 (layout), §5.4 (types) and §11 (pitfalls):

* a row is ``[null bitset][one 8-byte slot per field][variable-length payloads]``, all little-endian;
* fixed-width values live in their slot; everything else is an ``(offset << 32) | size`` word whose
  offset is relative to the start of the row (or of the array, for array elements);
* decimals with precision <= 18 are an int64 unscaled value, larger ones a big-endian two's-complement
  byte string (16 bytes reserved in rows, not in arrays);
* ``variant`` payloads are ``valueLength:i32 LE + value + metadata``; ``geometry``/``geography`` payloads
  are ``srid:i32 LE + WKB``: both are returned as opaque ``bytes`` of the whole payload;
* ``time(p)`` is an int64 of nanoseconds since midnight (Spark 4.1+).

Two entry points share one compiled :class:`RowLayout` (see :func:`compile_layout`):

* :func:`decode_row` decodes one row with ``struct`` and is meant for single keys;
* :func:`decode_rows` decodes many rows column by column: every fixed-width column is gathered for
  all rows at once with numpy through a sliding little-endian view of the buffer, null bits are
  tested with vectorised shifts, and nested structs are decoded as columns of their own. Only strings,
  binaries, arrays, maps and decimals become Python objects one by one.

Both return positional tuples in the representation of :data:`readers.model.VALUE_REPRESENTATION`.

Every offset, size and element count is checked against the row before it is used: bytes that do not
fit the schema raise :class:`~readers.errors.SchemaMismatchError` naming the file, the record and the
field, never ``IndexError``/``struct.error``, and never allocate more than the row's own size.

**FMGWS v1 quirk** (docs/format.md §7.3): ``flatMapGroupsWithState`` state format 1 declares its trailing
``timeoutTimestamp`` column as ``integer`` but writes a 64-bit long into the slot. Pass that column's
index in ``long_fields`` (:func:`readers.operators.fmgws_v1_long_fields` finds it) to read the slot as
int64.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from statelens.readers.errors import SchemaMismatchError
from statelens.readers.model import CalendarInterval

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "Kind",
    "TypeLayout",
    "FieldLayout",
    "RowLayout",
    "compile_layout",
    "decode_row",
    "decode_rows",
]


class Kind:
    """Physical kinds of UnsafeRow values (what the bytes look like, not the SQL type)."""

    VOID = 0
    BOOLEAN = 1
    BYTE = 2
    SHORT = 3
    INT = 4  # int, date, interval year to month
    LONG = 5  # long, timestamp(_ntz), interval day to second, time
    FLOAT = 6
    DOUBLE = 7
    DECIMAL_LONG = 8  # decimal(p <= 18, s): int64 unscaled
    DECIMAL_BIG = 9  # decimal(p > 18, s): BE two's complement payload
    STRING = 10
    BINARY = 11  # binary, variant, geometry, geography: bytes of the payload
    INTERVAL = 12  # calendar interval: i32 months, i32 days, i64 microseconds
    STRUCT = 13
    ARRAY = 14
    MAP = 15


#: Kinds stored entirely in their slot (or array element).
_FIXED_KINDS = frozenset(
    {
        Kind.VOID,
        Kind.BOOLEAN,
        Kind.BYTE,
        Kind.SHORT,
        Kind.INT,
        Kind.LONG,
        Kind.FLOAT,
        Kind.DOUBLE,
        Kind.DECIMAL_LONG,
    }
)

#: Packed element size inside UnsafeArrayData (docs/format.md §6.3); variable-length kinds use an 8-byte word.
_ELEMENT_SIZE = {
    Kind.BOOLEAN: 1,
    Kind.BYTE: 1,
    Kind.SHORT: 2,
    Kind.INT: 4,
    Kind.FLOAT: 4,
}

#: ``struct`` codes for fixed kinds (LE); BOOLEAN uses ``?`` (any non-zero byte is true, as in Java).
_STRUCT_CODE = {
    Kind.BOOLEAN: "?",
    Kind.BYTE: "b",
    Kind.SHORT: "h",
    Kind.INT: "i",
    Kind.LONG: "q",
    Kind.FLOAT: "f",
    Kind.DOUBLE: "d",
    Kind.DECIMAL_LONG: "q",
}

#: numpy dtype used to gather a fixed kind from its slot in the columnar path.
_NUMPY_DTYPE: dict[int, np.dtype[Any]] = {
    Kind.BYTE: np.dtype("<i1"),
    Kind.SHORT: np.dtype("<i2"),
    Kind.INT: np.dtype("<i4"),
    Kind.LONG: np.dtype("<i8"),
    Kind.FLOAT: np.dtype("<f4"),
    Kind.DOUBLE: np.dtype("<f8"),
    Kind.DECIMAL_LONG: np.dtype("<i8"),
}

_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_INTERVAL = struct.Struct("<iiq")
_MAX_DECIMAL_BYTES = 16  # a decimal(38, s) unscaled value fits in 16 bytes of two's complement
_DECIMAL_CONTEXT = Context(prec=100)  # exact for every Spark decimal (precision <= 38)


@dataclass(frozen=True, eq=False)
class TypeLayout:
    """How one Spark SQL type is laid out: its physical kind and what it nests.

    Attributes
    ----------
    kind : int
        One of the :class:`Kind` codes.
    type_name : str
        Spark's ``simpleString`` of the declared type, for messages.
    scale : int
        Decimal scale (0 otherwise).
    row : RowLayout or None
        Layout of a struct's fields.
    element, key, value : TypeLayout or None
        Layouts of an array's elements and of a map's keys and values.
    """

    kind: int
    type_name: str
    scale: int = 0
    row: RowLayout | None = None
    element: TypeLayout | None = None
    key: TypeLayout | None = None
    value: TypeLayout | None = None

    @property
    def element_size(self) -> int:
        """Bytes one value of this type takes as an UnsafeArrayData element."""
        return _ELEMENT_SIZE.get(self.kind, 8)


@dataclass(frozen=True, eq=False)
class FieldLayout:
    """One field of a row: its position, slot, null bit and type layout.

    ``null_word`` is the index of the 64-bit bitset word holding its null bit ``null_bit``; ``qualname``
    is the dotted path used in error messages (``groupState.tags``).
    """

    index: int
    name: str
    qualname: str
    slot: int
    null_word: int
    null_bit: int
    type: TypeLayout


@dataclass(frozen=True, eq=False)
class RowLayout:
    """The compiled layout of an UnsafeRow schema (computed once per schema, see :func:`compile_layout`).

    Attributes
    ----------
    fields : tuple of FieldLayout
        In schema order (names may repeat).
    bitset_bytes : int
        ``((n + 63) // 64) * 8``.
    fixed_size : int
        ``bitset_bytes + 8 * n``: the least number of bytes a row can have.
    long_fields : frozenset of int
        Top-level field indices read as int64 whatever their declared type (FMGWS v1 quirk).
    """

    fields: tuple[FieldLayout, ...]
    bitset_bytes: int
    fixed_size: int
    long_fields: frozenset[int] = frozenset()

    @property
    def num_fields(self) -> int:
        return len(self.fields)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


# ---------------------------------------------------------------------------------------------------
# Compiling a schema


_CACHE: dict[tuple[str, frozenset[int]], RowLayout] = {}
_CACHE_LOCK = threading.Lock()


def compile_layout(schema: StructType, long_fields: Iterable[int] = ()) -> RowLayout:
    """Compute (once, cached per schema) the UnsafeRow layout of ``schema``.

    Parameters
    ----------
    schema : pyspark.sql.types.StructType
        The row's schema, e.g. a store's key or value schema.
    long_fields : iterable of int, optional
        Indices of top-level fields whose slot holds an int64 whatever type they declare. This is
        for the ``flatMapGroupsWithState`` state format 1 quirk (docs/format.md §7.3): its ``timeoutTimestamp``
        column is declared ``integer`` but written with ``setLong``. Use
        :func:`readers.operators.fmgws_v1_long_fields` to find it.

    Returns
    -------
    RowLayout
        The compiled layout; the same object for equal schemas and ``long_fields``.

    Raises
    ------
    SchemaMismatchError
        If the schema holds a type this decoder does not know.
    ValueError
        If an index in ``long_fields`` is not a top-level field.
    """
    longs = frozenset(int(i) for i in long_fields)
    key = (schema.json(), longs)
    layout = _CACHE.get(key)
    if layout is not None:
        return layout
    for i in longs:
        if not 0 <= i < len(schema.fields):
            raise ValueError(f"long_fields index {i} is not a field of a {len(schema.fields)}-field schema")
    layout = _compile_struct(schema, "", longs)
    with _CACHE_LOCK:
        return _CACHE.setdefault(key, layout)


def _compile_struct(schema: StructType, prefix: str, long_fields: frozenset[int] = frozenset()) -> RowLayout:
    n = len(schema.fields)
    bitset = ((n + 63) // 64) * 8
    fields = []
    for i, f in enumerate(schema.fields):
        qualname = f"{prefix}{f.name}"
        if i in long_fields:
            tl = TypeLayout(Kind.LONG, "long")
        else:
            tl = _compile_type(f.dataType, qualname)
        fields.append(FieldLayout(i, f.name, qualname, bitset + 8 * i, i // 64, i % 64, tl))
    return RowLayout(tuple(fields), bitset, bitset + 8 * n, long_fields)


def _compile_type(dt: DataType, qualname: str) -> TypeLayout:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    name = dt.simpleString()
    if isinstance(dt, T.UserDefinedType):
        return _compile_type(dt.sqlType(), qualname)
    if isinstance(dt, T.StructType):
        return TypeLayout(Kind.STRUCT, name, row=_compile_struct(dt, qualname + "."))
    if isinstance(dt, T.ArrayType):
        return TypeLayout(Kind.ARRAY, name, element=_compile_type(dt.elementType, qualname + "[]"))
    if isinstance(dt, T.MapType):
        return TypeLayout(
            Kind.MAP,
            name,
            key=_compile_type(dt.keyType, qualname + "{key}"),
            value=_compile_type(dt.valueType, qualname + "{value}"),
        )
    if isinstance(dt, T.DecimalType):
        kind = Kind.DECIMAL_LONG if dt.precision <= 18 else Kind.DECIMAL_BIG
        return TypeLayout(kind, name, scale=dt.scale)
    simple: list[tuple[tuple[type, ...], int]] = [
        ((T.BooleanType,), Kind.BOOLEAN),
        ((T.ByteType,), Kind.BYTE),
        ((T.ShortType,), Kind.SHORT),
        ((T.IntegerType, T.DateType, T.YearMonthIntervalType), Kind.INT),
        ((T.LongType, T.TimestampType, T.TimestampNTZType, T.DayTimeIntervalType), Kind.LONG),
        ((T.FloatType,), Kind.FLOAT),
        ((T.DoubleType,), Kind.DOUBLE),
        ((T.StringType, T.CharType, T.VarcharType), Kind.STRING),
        ((T.BinaryType, T.VariantType), Kind.BINARY),
        ((T.CalendarIntervalType,), Kind.INTERVAL),
        ((T.NullType,), Kind.VOID),
    ]
    # Types that only newer PySpark versions have.
    for extra, kind in (
        ("TimeType", Kind.LONG),
        ("GeometryType", Kind.BINARY),
        ("GeographyType", Kind.BINARY),
    ):
        cls = getattr(T, extra, None)
        if cls is not None:
            simple.append(((cls,), kind))
    for classes, kind in simple:
        if isinstance(dt, classes):
            return TypeLayout(kind, name)
    raise SchemaMismatchError(
        f"field {qualname!r} has type {name!r}, which the UnsafeRow decoder does not know"
    )


# ---------------------------------------------------------------------------------------------------
# Errors


class _Where:
    """Where a row came from, for error messages (kept out of the hot path until something is wrong)."""

    __slots__ = ("path", "record", "origin")

    def __init__(self, path: str | None, record: int | None, origin: int | None):
        self.path = path
        self.record = record
        self.origin = origin

    def fail(self, field: str, message: str) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"row does not fit its schema: {message}",
            path=self.path,
            offset=self.origin,
            record=self.record,
            field=field or None,
        )


# ---------------------------------------------------------------------------------------------------
# One row at a time (struct.unpack_from); also used for arrays and maps by the columnar path


def decode_row(
    buf: Any,
    start: int,
    length: int,
    layout: RowLayout,
    *,
    path: str | None = None,
    record: int | None = None,
) -> tuple[Any, ...]:
    """Decode one UnsafeRow.

    Parameters
    ----------
    buf : bytes-like
        Bytes holding the row (``bytes``, ``bytearray``, ``memoryview`` or a ``numpy.uint8`` array).
    start : int
        Byte offset of the row in ``buf``.
    length : int
        The row's size in bytes. For HDFS values pass ``floor(size / 8) * 8`` (docs/format.md §3.3).
    layout : RowLayout
        From :func:`compile_layout`.
    path : str, optional
        File the bytes come from, for error messages.
    record : int, optional
        Record index in that file, for error messages.

    Returns
    -------
    tuple
        One value per field, positional, in the representation of ``VALUE_REPRESENTATION``.

    Raises
    ------
    SchemaMismatchError
        If the bytes do not fit the schema (too short, an offset, size or element count out of range).
    """
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    where = _Where(path, record, start)
    if start < 0 or length < 0 or start + length > len(mv):
        raise where.fail("", f"row of {length} bytes at {start} is outside the {len(mv)}-byte buffer")
    return _row_at(mv, start, length, layout, where)


def _row_at(mv: Any, start: int, length: int, layout: RowLayout, where: _Where) -> tuple[Any, ...]:
    if length < layout.fixed_size:
        raise where.fail(
            layout.fields[0].qualname.rpartition(".")[0] if layout.fields else "",
            f"a row of {len(layout.fields)} fields needs at least {layout.fixed_size} bytes "
            f"(null bitset and fixed slots), it has {length}",
        )
    nwords = layout.bitset_bytes // 8
    words = struct.unpack_from(f"<{nwords}Q", mv, start) if nwords else ()
    out: list[Any] = []
    append = out.append
    room = length - layout.fixed_size  # what the payloads may take in all (see _overlap_message)
    for f in layout.fields:
        if (words[f.null_word] >> f.null_bit) & 1:
            append(None)
            continue
        t = f.type
        kind = t.kind
        slot = start + f.slot
        if kind == Kind.BOOLEAN:
            append(mv[slot] != 0)
        elif kind in _STRUCT_CODE:
            v = struct.unpack_from("<" + _STRUCT_CODE[kind], mv, slot)[0]
            append(Decimal(v).scaleb(-t.scale, _DECIMAL_CONTEXT) if kind == Kind.DECIMAL_LONG else v)
        elif kind == Kind.VOID:
            append(None)
        else:
            word = _U64.unpack_from(mv, slot)[0]
            off = word >> 32
            size = word & 0xFFFFFFFF
            if off < layout.fixed_size or off + size > length:
                raise where.fail(
                    f.qualname,
                    _outside_message(t, off, size, layout.fixed_size, length, element=False),
                )
            room -= size
            if room < 0:
                raise where.fail(f.qualname, _overlap_message(length - layout.fixed_size, element=False))
            append(_payload(mv, start, off, size, length, t, f.qualname, where))
    return tuple(out)


def _outside_message(t: TypeLayout, off: int, size: int, lo: int, hi: int, *, element: bool) -> str:
    where = "of its array" if element else "of its row"
    what = "element payload" if element else "payload"
    return f"{t.type_name} {what} at offset {off} with size {size} is outside [{lo}, {hi}) {where}"


def _overlap_message(room: int, *, element: bool) -> str:
    # Spark's writers append every payload after the previous one, so payloads never share bytes and
    # their sizes add up to at most the variable-length part. Shared (overlapping) payloads would let a
    # small row decode to gigabytes (one string referenced by every element of every nested array).
    what = "element payloads of its array" if element else "payloads of its row"
    return f"the {what} add up to more than the {room} bytes after the fixed part (payloads overlap)"


def _interval_message(off: int, parent: int) -> str:
    return f"calendar interval needs 16 bytes at offset {off} of a {parent}-byte parent"


def _payload(
    mv: Any, base: int, off: int, size: int, parent: int, t: TypeLayout, field: str, where: _Where
) -> Any:
    """Decode the variable-length value of ``size`` bytes at ``off`` in the ``parent`` bytes at ``base``."""
    pos = base + off
    kind = t.kind
    if kind == Kind.STRING:
        return bytes(mv[pos : pos + size]).decode("utf-8", "replace")
    if kind == Kind.BINARY:
        return bytes(mv[pos : pos + size])
    if kind == Kind.DECIMAL_BIG:
        if not 1 <= size <= _MAX_DECIMAL_BYTES:
            raise where.fail(field, f"{t.type_name} payload of {size} bytes (expected 1 to 16)")
        unscaled = int.from_bytes(mv[pos : pos + size], "big", signed=True)
        return Decimal(unscaled).scaleb(-t.scale, _DECIMAL_CONTEXT)
    if kind == Kind.INTERVAL:
        if off + 16 > parent:
            raise where.fail(field, _interval_message(off, parent))
        return CalendarInterval(*_INTERVAL.unpack_from(mv, pos))
    if kind == Kind.STRUCT:
        assert t.row is not None
        return _row_at(mv, pos, size, t.row, where)
    if kind == Kind.ARRAY:
        assert t.element is not None
        return _array_at(mv, pos, size, t.element, field, where)
    if kind == Kind.MAP:
        return _map_at(mv, pos, size, t, field, where)
    raise AssertionError(f"kind {kind} has no payload")  # pragma: no cover


def _array_at(mv: Any, pos: int, size: int, et: TypeLayout, field: str, where: _Where) -> list[Any]:
    """Decode an UnsafeArrayData of ``size`` bytes at ``pos`` (docs/format.md §6.3)."""
    if size < 8:
        raise where.fail(field, f"array of {size} bytes has no room for its 8-byte element count")
    n = _I64.unpack_from(mv, pos)[0]
    esize = et.element_size
    # Every element takes at least one byte, so n <= size bounds every allocation below by the row size.
    if n < 0 or n > size:
        raise where.fail(field, f"array claims {n} elements in {size} bytes")
    bitset = ((n + 63) // 64) * 8
    values = 8 + bitset
    header = values + n * esize
    if header > size:
        raise where.fail(field, f"array of {n} {et.type_name} elements needs {header} bytes, it has {size}")
    if n == 0:
        return []
    nulls = int.from_bytes(mv[pos + 8 : pos + values], "little")
    kind = et.kind
    if kind == Kind.VOID:
        return [None] * n
    if kind in _STRUCT_CODE:
        out = list(struct.unpack_from(f"<{n}{_STRUCT_CODE[kind]}", mv, pos + values))
        if kind == Kind.DECIMAL_LONG:
            ctx, scale = _DECIMAL_CONTEXT, -et.scale
            out = [Decimal(v).scaleb(scale, ctx) for v in out]
    else:
        words = struct.unpack_from(f"<{n}Q", mv, pos + values)
        out = []
        room = size - header
        for i, word in enumerate(words):
            if (nulls >> i) & 1:
                out.append(None)
                continue
            off = word >> 32
            esz = word & 0xFFFFFFFF
            if off < header or off + esz > size:
                raise where.fail(
                    f"{field}[{i}]",
                    _outside_message(et, off, esz, header, size, element=True),
                )
            room -= esz
            if room < 0:
                raise where.fail(f"{field}[{i}]", _overlap_message(size - header, element=True))
            out.append(_payload(mv, pos, off, esz, size, et, f"{field}[{i}]", where))
        return out
    if nulls:
        for i in range(n):
            if (nulls >> i) & 1:
                out[i] = None
    return out


def _map_at(mv: Any, pos: int, size: int, t: TypeLayout, field: str, where: _Where) -> list[tuple[Any, Any]]:
    """Decode an UnsafeMapData of ``size`` bytes at ``pos`` (docs/format.md §6.4) as a list of (key, value)."""
    assert t.key is not None
    assert t.value is not None
    if size < 8:
        raise where.fail(field, f"map of {size} bytes has no room for its 8-byte key-array size")
    key_bytes = _I64.unpack_from(mv, pos)[0]
    if key_bytes < 0 or key_bytes > size - 8:
        raise where.fail(
            field, f"map key array claims {key_bytes} bytes, the map has {size - 8} after its header"
        )
    keys = _array_at(mv, pos + 8, key_bytes, t.key, field + "{key}", where)
    values = _array_at(mv, pos + 8 + key_bytes, size - 8 - key_bytes, t.value, field + "{value}", where)
    if len(keys) != len(values):
        raise where.fail(field, f"map has {len(keys)} keys but {len(values)} values")
    return list(zip(keys, values, strict=True))


# ---------------------------------------------------------------------------------------------------
# Many rows, column by column (numpy)


class _Buffer:
    """The bytes being decoded, with sliding little-endian views for gathering unaligned slots.

    ``view(dtype)[p]`` is the value of ``dtype`` stored at byte ``p``: an ndarray over the same memory
    with a stride of one byte, so fancy indexing with absolute byte positions gathers a whole column.
    """

    def __init__(self, buf: Any):
        self.u8 = np.frombuffer(buf if isinstance(buf, bytes) else memoryview(buf).cast("B"), dtype=np.uint8)
        self._bytes: bytes | None = buf if isinstance(buf, bytes) else None
        self._views: dict[np.dtype[Any], np.ndarray[Any, Any]] = {}

    def __len__(self) -> int:
        return len(self.u8)

    @property
    def bytes(self) -> bytes:
        """The buffer as ``bytes`` (slicing ``bytes`` and decoding is the fastest way to make strings)."""
        if self._bytes is None:
            self._bytes = self.u8.tobytes()
        return self._bytes

    def view(self, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        v = self._views.get(dtype)
        if v is None:
            count = max(len(self.u8) - dtype.itemsize + 1, 0)
            v = np.ndarray(shape=(count,), dtype=dtype, buffer=self.u8, offset=0, strides=(1,))
            self._views[dtype] = v
        return v


_U64_DT = np.dtype("<u8")
_I64_DT = np.dtype("<i8")
_I32_DT = np.dtype("<i4")
_ONE = np.uint64(1)
_CHUNK_ROWS = 1 << 17  # rows decoded together; bounds the index arrays of one pass


def decode_rows(
    buf: Any,
    starts: Any,
    lengths: Any,
    layout: RowLayout,
    *,
    path: str | None = None,
    records: Any = None,
) -> list[tuple[Any, ...]]:
    """Decode many UnsafeRows of one schema, column by column.

    Parameters
    ----------
    buf : bytes-like
        Bytes holding the rows (``bytes``, ``bytearray``, ``memoryview`` or a ``numpy.uint8`` array),
        e.g. a whole decompressed delta file.
    starts, lengths : array-like of int
        Byte offset and size of each row in ``buf``. For HDFS values pass ``(size // 8) * 8`` (docs/format.md §3.3).
    layout : RowLayout
        From :func:`compile_layout`.
    path : str, optional
        File the bytes come from, for error messages.
    records : array-like of int, optional
        Record index of each row in that file, for error messages (default: the row's position).

    Returns
    -------
    list of tuple
        One positional tuple per row, in the representation of ``VALUE_REPRESENTATION``; the same
        values :func:`decode_row` returns.

    Raises
    ------
    SchemaMismatchError
        If any row does not fit the schema; the message names the first such row's record and field
        (rows are checked column by column, so "first" is in field order, then row order).
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
    if len(recs) != n:
        raise ValueError(f"{n} starts but {len(recs)} record indices")
    if n == 0:
        return []
    outside = (starts < 0) | (lengths < 0) | (starts + lengths > len(b))
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise _Where(path, int(recs[i]), int(starts[i])).fail(
            "", f"row of {int(lengths[i])} bytes at {int(starts[i])} is outside the {len(b)}-byte buffer"
        )
    out: list[tuple[Any, ...]] = []
    for lo in range(0, n, _CHUNK_ROWS):
        s = slice(lo, lo + _CHUNK_ROWS)
        cols = _columns(b, starts[s], lengths[s], layout, _Rows(path, recs[s], starts[s]))
        out.extend(zip(*cols, strict=True) if cols else [()] * len(starts[s]))
    return out


class _Rows:
    """Error context of a set of values: file, record index and top-level row start of each."""

    __slots__ = ("path", "records", "origins")

    def __init__(self, path: str | None, records: np.ndarray[Any, Any], origins: np.ndarray[Any, Any]):
        self.path = path
        self.records = records
        self.origins = origins

    def take(self, idx: np.ndarray[Any, Any]) -> _Rows:
        return _Rows(self.path, self.records[idx], self.origins[idx])

    def fail(self, i: int, field: str, message: str) -> SchemaMismatchError:
        return _Where(self.path, int(self.records[i]), int(self.origins[i])).fail(field, message)


def _first(mask: np.ndarray[Any, Any]) -> int | None:
    """Index of the first true entry, or ``None``."""
    if not mask.any():
        return None
    return int(np.flatnonzero(mask)[0])


def _set_nulls(values: list[Any], isnull: np.ndarray[Any, Any]) -> list[Any]:
    for i in np.flatnonzero(isnull).tolist():
        values[i] = None
    return values


def _scatter(values: list[Any], idx: np.ndarray[Any, Any], n: int) -> list[Any]:
    """Place ``values`` (one per ``idx``) into a list of ``n`` Nones."""
    if len(idx) == n:
        return values
    out: list[Any] = [None] * n
    for j, v in zip(idx.tolist(), values, strict=True):
        out[j] = v
    return out


def _columns(
    b: _Buffer, starts: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any], layout: RowLayout, rows: _Rows
) -> list[list[Any]]:
    """Decode every field of the rows at ``starts`` (known to lie inside ``b``) into one list per field."""
    nulls = _row_null_masks(b, starts, lengths, layout, rows)
    return [
        _values(
            b, starts + f.slot, isnull, f.type, starts, layout.fixed_size, lengths, rows, f.qualname, None
        )
        for f, isnull in zip(layout.fields, nulls, strict=True)
    ]


def _row_null_masks(
    b: _Buffer, starts: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any], layout: RowLayout, rows: _Rows
) -> list[np.ndarray[Any, Any]]:
    """Check that the rows at ``starts`` hold their bitset and slots and that their variable-length
    payloads fit; return each field's null mask (the per-row and the Arrow decoders share this)."""
    i = _first(lengths < layout.fixed_size)
    if i is not None:
        raise rows.fail(
            i,
            layout.fields[0].qualname.rpartition(".")[0] if layout.fields else "",
            f"a row of {len(layout.fields)} fields needs at least {layout.fixed_size} bytes "
            f"(null bitset and fixed slots), it has {int(lengths[i])}",
        )
    u64 = b.view(_U64_DT)
    words = [u64[starts + 8 * w] for w in range(layout.bitset_bytes // 8)]
    nulls = [((words[f.null_word] >> np.uint64(f.null_bit)) & _ONE).astype(bool) for f in layout.fields]
    _check_room(
        b,
        [
            (starts + f.slot, isnull)
            for f, isnull in zip(layout.fields, nulls, strict=True)
            if f.type.kind not in _FIXED_KINDS
        ],
        layout.fixed_size,
        lengths,
        rows,
        False,
    )
    return nulls


def _values(
    b: _Buffer,
    slots: np.ndarray[Any, Any],
    isnull: np.ndarray[Any, Any],
    t: TypeLayout,
    base: np.ndarray[Any, Any],
    lo: Any,
    hi: np.ndarray[Any, Any],
    rows: _Rows,
    field: str,
    index: np.ndarray[Any, Any] | None,
) -> list[Any]:
    """Decode values of type ``t`` whose slots (fields or array elements) are at byte ``slots``.

    Offsets of variable-length values are relative to ``base`` (their row or array start) and must
    point into ``[lo, hi)`` of it. ``index`` holds array element indices, for messages.
    """
    kind = t.kind
    n = len(slots)
    anynull = bool(isnull.any())
    if kind == Kind.VOID:
        return [None] * n
    vals: list[Any]
    if kind == Kind.BOOLEAN:
        vals = (b.u8[slots] != 0).tolist()
        return _set_nulls(vals, isnull) if anynull else vals
    if kind in _NUMPY_DTYPE:
        vals = b.view(_NUMPY_DTYPE[kind])[slots].tolist()
        if kind == Kind.DECIMAL_LONG:
            ctx, scale = _DECIMAL_CONTEXT, -t.scale
            vals = [Decimal(v).scaleb(scale, ctx) for v in vals]
        return _set_nulls(vals, isnull) if anynull else vals

    def label(i: int) -> str:
        return field if index is None else f"{field}[{int(index[i])}]"

    word = b.view(_U64_DT)[slots]
    offs = (word >> np.uint64(32)).astype(np.int64)
    sizes = (word & np.uint64(0xFFFFFFFF)).astype(np.int64)
    present = ~isnull
    i = _first(present & ((offs < lo) | (offs + sizes > hi)))
    if i is not None:
        low = int(lo[i]) if isinstance(lo, np.ndarray) else lo
        raise rows.fail(
            i,
            label(i),
            _outside_message(t, int(offs[i]), int(sizes[i]), low, int(hi[i]), element=index is not None),
        )
    if kind == Kind.INTERVAL:
        i = _first(present & (offs + 16 > hi))
        if i is not None:
            raise rows.fail(
                i,
                label(i),
                _interval_message(int(offs[i]), int(hi[i])),
            )
    elif kind == Kind.DECIMAL_BIG:
        i = _first(present & ((sizes < 1) | (sizes > _MAX_DECIMAL_BYTES)))
        if i is not None:
            raise rows.fail(i, label(i), f"{t.type_name} payload of {int(sizes[i])} bytes (expected 1 to 16)")
    # Only present values are decoded: the words of null ones are leftovers and may point anywhere.
    idx = np.flatnonzero(present) if anynull else np.arange(n)
    if anynull:
        rows = rows.take(idx)
    pos = (base + offs)[idx]
    sizes = sizes[idx]
    if kind == Kind.STRUCT:
        assert t.row is not None
        cols = _columns(b, pos, sizes, t.row, rows)
        vals = list(zip(*cols, strict=True)) if cols else [()] * len(idx)
    elif kind == Kind.ARRAY:
        assert t.element is not None
        vals = _arrays(b, pos, sizes, t.element, rows, field)[0]
    elif kind == Kind.MAP:
        vals = _maps(b, pos, sizes, t, rows, field)
    elif kind == Kind.INTERVAL:
        i32 = b.view(_I32_DT)
        months = i32[pos].tolist()
        days = i32[pos + 4].tolist()
        micros = b.view(_I64_DT)[pos + 8].tolist()
        vals = [CalendarInterval(m, d, u) for m, d, u in zip(months, days, micros, strict=True)]
    else:
        raw = b.bytes
        p_list = pos.tolist()
        e_list = (pos + sizes).tolist()
        if kind == Kind.STRING:
            vals = [raw[p:e].decode("utf-8", "replace") for p, e in zip(p_list, e_list, strict=True)]
        elif kind == Kind.BINARY:
            vals = [raw[p:e] for p, e in zip(p_list, e_list, strict=True)]
        else:
            assert kind == Kind.DECIMAL_BIG
            ctx, scale = _DECIMAL_CONTEXT, -t.scale
            vals = [
                Decimal(int.from_bytes(raw[p:e], "big", signed=True)).scaleb(scale, ctx)
                for p, e in zip(p_list, e_list, strict=True)
            ]
    return _scatter(vals, idx, n)


def _check_room(
    b: _Buffer,
    slot_sets: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    lo: np.ndarray[Any, Any] | int,
    hi: np.ndarray[Any, Any],
    rows: _Rows,
    element: bool,
    owner: np.ndarray[Any, Any] | None = None,
    field: str = "",
) -> None:
    """Refuse parents whose variable-length payloads add up to more than their room (``_overlap_message``).

    ``slot_sets`` are (slot positions, null mask) of the parents' variable-length values, one entry per
    value (``owner`` maps each to its parent when there are several per parent, as for array
    elements). Parents with a payload outside ``[lo, hi)`` are left to the range check that follows.
    """
    m = len(hi)
    used = np.zeros(m, dtype=np.int64)
    outside = np.zeros(m, dtype=bool)
    u64 = b.view(_U64_DT)
    for slots, isnull in slot_sets:
        if len(slots) == 0:
            continue
        word = u64[slots]
        offs = (word >> np.uint64(32)).astype(np.int64)
        sizes = np.where(isnull, 0, (word & np.uint64(0xFFFFFFFF)).astype(np.int64))
        low = lo if owner is None or not isinstance(lo, np.ndarray) else lo[owner]
        high = hi if owner is None else hi[owner]
        bad = ~isnull & ((offs < low) | (offs + sizes > high))
        if owner is None:
            used += sizes
            outside |= bad
        else:
            used += np.bincount(owner, weights=sizes, minlength=m).astype(np.int64)
            outside |= np.bincount(owner, weights=bad, minlength=m) > 0
    room = hi - lo
    i = _first((used > room) & ~outside)
    if i is not None:
        limit = int(room[i]) if isinstance(room, np.ndarray) else int(room)
        raise rows.fail(i, field, _overlap_message(limit, element=element))


def _arrays(
    b: _Buffer, pos: np.ndarray[Any, Any], size: np.ndarray[Any, Any], et: TypeLayout, rows: _Rows, field: str
) -> tuple[list[list[Any]], np.ndarray[Any, Any]]:
    """Decode the UnsafeArrayData at ``pos`` (``size`` bytes each, docs/format.md §6.3) all at once.

    Every element of every array becomes one entry of a flat column decoded by :func:`_values`, then
    the column is cut back into one list per array. Returns the lists and the element counts.
    """
    m = len(pos)
    i = _first(size < 8)
    if i is not None:
        raise rows.fail(i, field, f"array of {int(size[i])} bytes has no room for its 8-byte element count")
    n = b.view(_I64_DT)[pos]
    # Every element takes at least one byte, so n <= size bounds every allocation by the data's size.
    i = _first((n < 0) | (n > size))
    if i is not None:
        raise rows.fail(i, field, f"array claims {int(n[i])} elements in {int(size[i])} bytes")
    esize = et.element_size
    values_at = 8 + ((n + 63) >> 6) * 8
    header = values_at + n * esize
    i = _first(header > size)
    if i is not None:
        raise rows.fail(
            i,
            field,
            f"array of {int(n[i])} {et.type_name} elements needs {int(header[i])} bytes, it has {int(size[i])}",
        )
    total = int(n.sum())
    if total == 0:
        return [[] for _ in range(m)], n
    owner = np.repeat(np.arange(m), n)
    ends = np.cumsum(n)
    j = np.arange(total, dtype=np.int64) - (ends - n)[owner]
    slots = (pos + values_at)[owner] + j * esize
    null_words = b.view(_U64_DT)[(pos + 8)[owner] + (j >> 6) * 8]
    isnull = ((null_words >> (j & 63).astype(np.uint64)) & _ONE).astype(bool)
    if et.kind not in _FIXED_KINDS:
        _check_room(b, [(slots, isnull)], header, size, rows, True, owner, field)
    flat = _values(b, slots, isnull, et, pos[owner], header[owner], size[owner], rows.take(owner), field, j)
    out = []
    start = 0
    for end in ends.tolist():
        out.append(flat[start:end])
        start = end
    return out, n


def _maps(
    b: _Buffer, pos: np.ndarray[Any, Any], size: np.ndarray[Any, Any], t: TypeLayout, rows: _Rows, field: str
) -> list[list[tuple[Any, Any]]]:
    """Decode the UnsafeMapData at ``pos`` (docs/format.md §6.4) as lists of (key, value) tuples."""
    assert t.key is not None
    assert t.value is not None
    i = _first(size < 8)
    if i is not None:
        raise rows.fail(i, field, f"map of {int(size[i])} bytes has no room for its 8-byte key-array size")
    key_bytes = b.view(_I64_DT)[pos]
    i = _first((key_bytes < 0) | (key_bytes > size - 8))
    if i is not None:
        raise rows.fail(
            i,
            field,
            f"map key array claims {int(key_bytes[i])} bytes, the map has {int(size[i]) - 8} after its header",
        )
    keys, nk = _arrays(b, pos + 8, key_bytes, t.key, rows, field + "{key}")
    values, nv = _arrays(b, pos + 8 + key_bytes, size - 8 - key_bytes, t.value, rows, field + "{value}")
    i = _first(nk != nv)
    if i is not None:
        raise rows.fail(i, field, f"map has {int(nk[i])} keys but {int(nv[i])} values")
    return [list(zip(k, v, strict=True)) for k, v in zip(keys, values, strict=True)]

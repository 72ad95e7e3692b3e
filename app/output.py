"""Writing decoded rows for people and scripts: JSON lines, CSV cells and Parquet files.

The value forms (JSON values, Arrow types) are defined in :mod:`readers.values`; this module writes
them: :func:`dumps_jsonl` (repeated struct keys kept, in order), :func:`flatten_row` /
:func:`flat_columns` / :func:`csv_cell` (structs flattened to dotted columns, the rest one JSON cell),
:func:`write_parquet` (typed, field names made unique). See the README for the contract of
``statelens rows``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from statelens.readers.values import (
    JsonObject,
    dedupe_names,
    rows_to_arrow,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = ["csv_cell", "dumps_jsonl", "flat_columns", "flatten_row", "write_parquet"]


# ---------------------------------------------------------------------------------------------------
# Writing JSON lines


def dumps_jsonl(obj: Any) -> str:
    """One line of JSON (no newline at the end, none inside) for a JSON-ready value.

    Parameters
    ----------
    obj : Any
        Built from ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``/``tuple``, ``dict`` and
        :class:`JsonObject` (whose repeated keys are written in order).

    Returns
    -------
    str
        Compact JSON (``", "`` and ``": "`` separators as ``json.dumps``), non-ASCII kept as is.

    Raises
    ------
    TypeError
        For any other type, or a non-string object key.
    ValueError
        For a NaN or infinite float (convert values with :func:`to_json_value` first).
    """
    out: list[str] = []
    _encode(obj, out)
    return "".join(out)


def _encode(o: Any, out: list[str]) -> None:
    t = type(o)
    # Exact-type checks first: they are the common case and much cheaper than isinstance chains.
    if t is str:
        out.append(encode_basestring(o))
    elif o is None:
        out.append("null")
    elif t is int:
        out.append(int.__repr__(o))
    elif t is JsonObject:
        _encode_object(o, out)
    elif t is list:
        _encode_array(o, out)
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif t is float:
        _encode_float(o, out)
    elif isinstance(o, str):
        out.append(encode_basestring(o))
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        _encode_float(o, out)
    elif isinstance(o, JsonObject):
        _encode_object(o, out)
    elif isinstance(o, dict):
        _encode_object(o.items(), out)
    elif isinstance(o, (list, tuple)):
        _encode_array(o, out)
    else:
        raise TypeError(f"{type(o).__name__} is not JSON-ready; convert it with to_json_value first")


def _encode_float(o: float, out: list[str]) -> None:
    if not math.isfinite(o):
        raise ValueError(f"{o!r} is not valid JSON; convert it with to_json_value first")
    out.append(float.__repr__(o))


def _encode_object(items: Iterable[tuple[Any, Any]], out: list[str]) -> None:
    out.append("{")
    first = True
    for k, v in items:
        if type(k) is not str and not isinstance(k, str):
            raise TypeError(f"JSON object keys must be strings, not {type(k).__name__}")
        if not first:
            out.append(", ")
        first = False
        out.append(encode_basestring(k))
        out.append(": ")
        _encode(v, out)
    out.append("}")


def _encode_array(items: Sequence[Any], out: list[str]) -> None:
    out.append("[")
    first = True
    for v in items:
        if not first:
            out.append(", ")
        first = False
        _encode(v, out)
    out.append("]")


# ---------------------------------------------------------------------------------------------------
# CSV


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def flatten_row(json_obj: Any, prefix: str = "", schema: DataType | None = None) -> list[tuple[str, Any]]:
    """Flatten a JSON-ready row into CSV columns.

    Parameters
    ----------
    json_obj : JsonObject or None
        A row from :func:`row_to_json` (or any JSON-ready value).
    prefix : str
        Name of the whole value, e.g. ``"key"``: columns are then ``key.window.start``.
    schema : pyspark.sql.types.StructType, optional
        The row's schema. With it every row gives the same columns: a null struct gives a null cell
        per leaf field and calendar intervals stay one cell. Without it every :class:`JsonObject`
        is flattened and a null struct is a single empty column.

    Returns
    -------
    list of (str, Any)
        ``(column name, cell)`` in order, repeated names kept; cells are ``None``, ``bool``, ``int``,
        ``float``, ``str``, or JSON text for arrays and maps (see :func:`csv_cell`).
    """
    out: list[tuple[str, Any]] = []
    _flatten(json_obj, prefix, schema, out)
    return out


def _flatten(obj: Any, name: str, dt: Any, out: list[tuple[str, Any]]) -> None:
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    if dt is not None and isinstance(dt, T.UserDefinedType):
        dt = dt.sqlType()
    is_struct = isinstance(dt, T.StructType) if dt is not None else isinstance(obj, JsonObject)
    if is_struct:
        if obj is None and dt is not None:
            for f in dt.fields:
                _flatten(None, _join(name, f.name), f.dataType, out)
            return
        if obj is not None:
            fields = dt.fields if dt is not None else [None] * len(obj)
            for (k, v), f in zip(obj, fields, strict=True):
                _flatten(v, _join(name, k), None if f is None else f.dataType, out)
            return
    if isinstance(obj, (list, tuple, dict)):
        out.append((name, dumps_jsonl(obj)))
    else:
        out.append((name, obj))


def flat_columns(schema: StructType, prefix: str = "") -> list[str]:
    """The CSV column names :func:`flatten_row` gives for ``schema`` (repeated names kept).

    Parameters
    ----------
    schema : pyspark.sql.types.StructType
        The row's schema.
    prefix : str
        As for :func:`flatten_row`.

    Returns
    -------
    list of str
        Dotted column names, in order.
    """
    return [name for name, _ in flatten_row(None, prefix, schema)]


def csv_cell(value: Any) -> str:
    """Text of one flattened cell: ``""`` for null, ``true``/``false``, JSON-style numbers.

    Parameters
    ----------
    value : Any
        A cell from :func:`flatten_row`.

    Returns
    -------
    str
        The text to write (quoting is the CSV writer's job).
    """
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return float.__repr__(value)
    return str(value)


def write_parquet(rows: Sequence[Any], path: Any, schema: StructType | None = None) -> None:
    """Write rows to a Parquet file, with names made unique (see the module docstring).

    Parameters
    ----------
    rows : sequence
        With ``schema``: decoded rows (positional tuples, e.g. ``(partition, key, value)`` for
        :func:`state_row_schema`), written with typed columns (timestamps, decimals, maps...).
        Without: JSON-ready documents (:class:`JsonObject`, e.g. from :func:`row_to_json`), whose
        types pyarrow infers from the JSON form (timestamps and decimals stay strings); a top-level
        column pyarrow cannot type is written with its lists as JSON text, or else wholly as JSON text.
    path : str or path-like
        Output file.
    schema : pyspark.sql.types.StructType, optional
        The rows' schema (preferred).
    """
    import pyarrow.parquet as pq  # deferred: pyarrow (heavy)

    if schema is not None:
        table = rows_to_arrow(rows, schema, unique_names=True)
    else:
        table = _json_documents_to_arrow(rows)
    pq.write_table(table, path)


def _json_documents_to_arrow(docs: Sequence[Any]) -> pa.Table:
    """Best-effort Arrow table of JSON-ready documents (the untyped path of :func:`write_parquet`).

    Each top-level column is typed by pyarrow if it can; if not, with every list as JSON text; if that
    fails too (e.g. ``"NaN"`` strings among floats), every value of the column is JSON text.
    """
    import pyarrow as pa  # deferred: pyarrow (heavy)

    records = [_plain(doc, lists_as_text=False) for doc in docs]
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r))
    arrays = [_json_column([r.get(name) for r in records]) for name in names]
    return pa.Table.from_arrays(arrays, names=list(names))


def _json_column(column: list[Any]) -> pa.Array:
    import pyarrow as pa  # deferred: pyarrow (heavy)

    try:
        return pa.array(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        pass
    try:
        return pa.array([_plain(v, lists_as_text=True) for v in column])
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([None if v is None else dumps_jsonl(v) for v in column], type=pa.string())


def _plain(obj: Any, *, lists_as_text: bool) -> Any:
    """JSON-ready value with objects as dicts (repeated keys renamed ``name_2``...)."""
    if isinstance(obj, JsonObject) or isinstance(obj, dict):
        items = list(obj) if isinstance(obj, JsonObject) else list(obj.items())
        names = dedupe_names(k for k, _ in items)
        return {n: _plain(v, lists_as_text=lists_as_text) for n, (_, v) in zip(names, items, strict=True)}
    if isinstance(obj, (list, tuple)):
        if lists_as_text:
            return dumps_jsonl(obj)
        return [_plain(v, lists_as_text=False) for v in obj]
    return obj

"""Parsers for state schema files: ``_metadata/schema`` (v1, v2) and ``_stateSchema/<store>/<batch>_<uuid>`` (v3).

Follows ``docs/format.md`` §5. Written by Spark's ``SchemaHelper`` (``SchemaV1Writer``
in 3.1, ``SchemaV2Writer`` since 3.2, ``SchemaV3Writer`` for transformWithState on 4.0+ and joins v3/v4
on 4.1+; ``sql/core/.../execution/streaming/state/SchemaHelper.scala``) through a Java
``DataOutputStream``:

* every string is ``writeUTF``: a big-endian u16 byte length and *modified* UTF-8 (``c0 80`` for U+0000,
  supplementary characters as two 3-byte surrogates);
* v1 = ``"v1"``, key JSON, value JSON;
* v2 = ``"v2"``, then for key and value an i32 BE chunk count and that many ``writeUTF`` chunks to
  concatenate (the JSON is cut into 65535-character pieces);
* v3 = ``"v3"``, an i32 BE column-family count, then per column family its name, an i16 key schema id,
  key chunks, an i16 value schema id, value chunks, key-encoder-spec chunks and user-key-schema chunks
  (``"{    }"`` when absent). Early 4.0 writers had no schema ids: both layouts are tried (§5.3).

The version string is dispatched through a dict of ``_v1``/``_v2``/``_v3`` functions. Running out of
bytes before a declared length or count is satisfied raises :class:`~readers.errors.TruncatedFileError`
(at the offset of the field that could not be read); impossible values (negative counts, bad modified
UTF-8, bad JSON, JSON that is not a schema) raise :class:`~readers.errors.CorruptFileError`.

Schema JSON is checked and kept as text after two rewrites: Spark 2.x's ``"null"`` type name becomes
``"void"``, and user-defined types are replaced by their ``sqlType`` (what their bytes are stored as; this
also avoids importing the ``pyClass`` a file names). It becomes a ``pyspark.sql.types.StructType``
(``StructType.fromJson``) when something decodes rows (:class:`~readers.model.StoreSchema`); types other
than the common ones are checked by that parser as the file is read (:func:`struct_json`).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statelens.readers.errors import CorruptFileError, TruncatedFileError, UnsupportedVersionError, UsageError
from statelens.readers.model import StoreSchema, struct_type

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ColumnFamilySchema",
    "decode_modified_utf8",
    "parse_schema_file",
    "parse_schema_v3",
    "parse_schema_v3_entries",
    "struct_json",
    "struct_type_from_json",
]

DEFAULT_COL_FAMILY_NAME = "default"

_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Type names that Spark 2.x wrote and pyspark no longer parses.
_LEGACY_TYPE_NAMES = {"null": "void"}


# --------------------------------------------------------------------------------------------------
# modified UTF-8 (java.io.DataInput.readUTF)


def decode_modified_utf8(data: bytes, path: str | None = None, offset: int = 0) -> str:
    """Decode Java's modified UTF-8 as ``DataInputStream.readUTF`` does.

    Differences from standard UTF-8: U+0000 is written ``c0 80`` (a plain ``00`` byte is accepted too),
    and characters above U+FFFF are two 3-byte encoded UTF-16 surrogates, joined here into one
    character. Like Java, two-byte forms are not checked for overlong encodings; a surrogate without
    its partner stays a lone surrogate.

    Parameters
    ----------
    data : bytes
        The encoded bytes (without the u16 length).
    path : str, optional
        The file, for error messages.
    offset : int
        Byte offset of ``data`` in the file, for error messages.

    Returns
    -------
    str

    Raises
    ------
    CorruptFileError
        A byte that cannot start a character, a bad continuation byte, or a partial character at the end.
    """
    raw = bytes(data)
    if raw.isascii():
        return raw.decode("ascii")
    units: list[int] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c < 0x80:
            units.append(c)
            i += 1
        elif c >> 5 == 0b110:
            if i + 1 >= n:
                raise CorruptFileError("modified UTF-8: partial character at end", path, offset=offset + i)
            c2 = raw[i + 1]
            if c2 >> 6 != 0b10:
                raise CorruptFileError("modified UTF-8: bad continuation byte", path, offset=offset + i + 1)
            units.append(((c & 0x1F) << 6) | (c2 & 0x3F))
            i += 2
        elif c >> 4 == 0b1110:
            if i + 2 >= n:
                raise CorruptFileError("modified UTF-8: partial character at end", path, offset=offset + i)
            c2, c3 = raw[i + 1], raw[i + 2]
            if c2 >> 6 != 0b10 or c3 >> 6 != 0b10:
                raise CorruptFileError("modified UTF-8: bad continuation byte", path, offset=offset + i + 1)
            units.append(((c & 0x0F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F))
            i += 3
        else:
            raise CorruptFileError(
                f"modified UTF-8: byte 0x{c:02x} cannot start a character", path, offset=offset + i
            )
    # UTF-16 code units -> str; surrogatepass joins valid pairs and keeps lone surrogates.
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")


# --------------------------------------------------------------------------------------------------
# byte cursor


class _Cursor:
    """Reads big-endian ``DataInputStream`` fields from bytes, raising located errors."""

    __slots__ = ("data", "path", "pos")

    def __init__(self, data: bytes, path: str, pos: int = 0):
        self.data = data
        self.path = path
        self.pos = pos

    def _take(self, size: int, what: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            left = len(self.data) - self.pos
            raise TruncatedFileError(
                f"file ends inside {what}: needs {size} bytes, {left} left", self.path, offset=self.pos
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def i16(self, what: str) -> int:
        return _I16.unpack(self._take(2, what))[0]

    def i32(self, what: str) -> int:
        return _I32.unpack(self._take(4, what))[0]

    def utf(self, what: str) -> str:
        start = self.pos
        (length,) = _U16.unpack(self._take(2, f"the length of {what}"))
        if self.pos + length > len(self.data):
            left = len(self.data) - self.pos
            raise TruncatedFileError(
                f"{what} declares {length} bytes but only {left} follow its length field "
                "(file cut short, or a corrupt length)",
                self.path,
                offset=start,
            )
        body_offset = self.pos
        return decode_modified_utf8(self._take(length, what), self.path, body_offset)

    def chunked_utf(self, what: str) -> tuple[str, int]:
        """An i32 chunk count then that many ``writeUTF`` chunks, concatenated; returns (text, offset)."""
        start = self.pos
        count = self.i32(f"the chunk count of {what}")
        if count < 0:
            raise CorruptFileError(f"{what} has a negative chunk count {count}", self.path, offset=start)
        # Each chunk takes at least its 2-byte length, so a corrupt huge count fails fast below.
        parts = [self.utf(f"chunk {i} of {what}") for i in range(count)]
        text = "".join(parts)
        if count > 1 and any("\ud800" <= p[-1] <= "\udbff" for p in parts[:-1] if p):
            # Spark cuts the JSON every 65535 UTF-16 units, which can split a surrogate pair across two
            # chunks; join the halves into one character again.
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return text, start


# --------------------------------------------------------------------------------------------------
# schema JSON -> StructType


def _rewrite_type(node: Any) -> Any:
    """Rewrite legacy type names and UDTs in a data type JSON value so pyspark can parse it."""
    if isinstance(node, str):
        return _LEGACY_TYPE_NAMES.get(node, node)
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "udt":
        # Never hand a UDT to pyspark: its fromJson imports the module the file names in "pyClass".
        if "sqlType" not in node:
            raise ValueError("user-defined type without 'sqlType'")
        return _rewrite_type(node["sqlType"])
    if kind == "struct" and isinstance(node.get("fields"), list):
        fields = []
        for f in node["fields"]:
            if isinstance(f, dict) and "type" in f:
                f = {**f, "type": _rewrite_type(f["type"])}
            fields.append(f)
        return {**node, "fields": fields}
    if kind == "array" and "elementType" in node:
        return {**node, "elementType": _rewrite_type(node["elementType"])}
    if kind == "map":
        out = dict(node)
        for key in ("keyType", "valueType"):
            if key in node:
                out[key] = _rewrite_type(node[key])
        return out
    return node


def _checked_struct(text: str, path: str | None, offset: int | None) -> dict[str, Any]:
    """The JSON value of a struct type's text, with :func:`_rewrite_type`'s rewrites; bad JSON, or JSON
    that is not a struct type, raises :class:`~readers.errors.CorruptFileError`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorruptFileError(f"bad schema JSON: {err.msg} (at character {err.pos})", path, offset) from err
    except RecursionError as err:
        raise CorruptFileError("schema JSON is nested too deeply", path, offset) from err
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        raise CorruptFileError(f"bad schema JSON: {err}", path, offset) from err
    if (
        not isinstance(value, dict)
        or value.get("type") != "struct"
        or not isinstance(value.get("fields"), list)
    ):
        raise CorruptFileError(
            'schema JSON is not a struct type {"type":"struct","fields":[...]}', path, offset
        )
    try:
        rewritten: dict[str, Any] = _rewrite_type(value)
    except ValueError as err:
        raise CorruptFileError(f"schema JSON is not a valid Spark schema: {err}", path, offset) from err
    except RecursionError as err:
        raise CorruptFileError("schema JSON is nested too deeply", path, offset) from err
    return rewritten


#: Type names taken without asking pyspark: those Spark writes for its common types, spelled as pyspark
#: spells them back. Any other spelling (char/varchar, collations, variant, geometry, ``decimal`` without
#: its precision, ...) is checked, and spelled, by pyspark's own parser.
_PLAIN_TYPES = frozenset(
    {
        "string",
        "binary",
        "boolean",
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "date",
        "timestamp",
        "timestamp_ntz",
        "void",
        "interval",
    }
)
#: Spellings with arguments pyspark parses for every value these allow (it matches the same patterns)
#: and spells back alike: an interval from one unit to the same one is not (pyspark writes the unit once).
_PLAIN_PATTERNS = re.compile(
    r"decimal\(\d+,-?\d+\)"
    r"|interval (day|hour|minute|second)(?: to (?!\1\Z)(?:day|hour|minute|second))?"
    r"|interval (year|month)(?: to (?!\2\Z)(?:year|month))?"
)


def _plain_type(node: Any) -> bool:
    """Whether pyspark parses this type JSON for sure: plain names, and structs, arrays and maps of
    them with every key pyspark reads present (pyspark is asked about anything else)."""
    if isinstance(node, str):
        return node in _PLAIN_TYPES or _PLAIN_PATTERNS.fullmatch(node) is not None
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind == "struct":
        return _plain_struct(node)
    if kind == "array":
        return isinstance(node.get("containsNull"), bool) and _plain_type(node.get("elementType"))
    if kind == "map":
        return (
            isinstance(node.get("valueContainsNull"), bool)
            and _plain_type(node.get("keyType"))
            and _plain_type(node.get("valueType"))
        )
    return False


def _plain_struct(node: dict[str, Any]) -> bool:
    fields = node.get("fields")
    if not isinstance(fields, list):
        return False
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            return False
        meta = f.get("metadata", {})
        if not isinstance(meta, dict) or any(k.startswith("__") for k in meta):  # e.g. __COLLATIONS
            return False
        if not isinstance(f.get("nullable", True), bool) or not _plain_type(f.get("type")):
            return False
    return True


def struct_json(text: str, path: str | None = None, offset: int | None = None) -> str:
    """Check a ``StructType.json`` string as :func:`struct_type_from_json` does and give it back with
    its rewrites, as :class:`~readers.model.StoreSchema` holds it: without importing pyspark (~45 ms)
    when every type in it is one Spark commonly writes (its JSON is then sure to parse), else with
    pyspark's parser.

    Raises
    ------
    CorruptFileError
        As :func:`struct_type_from_json`.
    """
    value = _checked_struct(text, path, offset)
    try:
        plain = _plain_struct(value)
    except RecursionError:
        plain = False
    if not plain:
        return struct_type(value, path, offset).json()
    return json.dumps(value, separators=(",", ":"), sort_keys=True)  # as pyspark's StructType.json()


def struct_type_from_json(text: str, path: str | None = None, offset: int | None = None) -> StructType:
    """Parse a ``StructType.json`` string into a pyspark ``StructType``.

    Parameters
    ----------
    text : str
        ``{"type":"struct","fields":[...]}`` (docs/format.md §5.4). Spark 2.x ``"null"`` types are read as
        ``void``; UDTs are replaced by their ``sqlType``.
    path : str, optional
        The file, for error messages.
    offset : int, optional
        Where the JSON starts in the file, for error messages.

    Returns
    -------
    pyspark.sql.types.StructType

    Raises
    ------
    CorruptFileError
        Bad JSON, or JSON that is not a struct type pyspark can parse.
    """
    return struct_type(_checked_struct(text, path, offset), path, offset)


# --------------------------------------------------------------------------------------------------
# versions


@dataclass(frozen=True)
class ColumnFamilySchema:
    """One column family of a v3 schema file (v1/v2 files have one, named ``default``, ids 0).

    ``key_schema_id``/``value_schema_id`` are the schema ids Spark bumps on evolution (``None`` when the
    file was written without ids, by early 4.0 writers); Avro-encoded rows carry them.
    """

    name: str
    schema: StoreSchema
    key_schema_id: int | None = 0
    value_schema_id: int | None = 0


def _read_v1(cur: _Cursor) -> tuple[ColumnFamilySchema, ...]:
    key_off = cur.pos
    key_json = cur.utf("the key schema")
    value_off = cur.pos
    value_json = cur.utf("the value schema")
    schema = StoreSchema(
        key_json=struct_json(key_json, cur.path, key_off),
        value_json=struct_json(value_json, cur.path, value_off),
        schema_version=1,
        path=cur.path,
    )
    return (ColumnFamilySchema(DEFAULT_COL_FAMILY_NAME, schema),)


def _read_v2(cur: _Cursor) -> tuple[ColumnFamilySchema, ...]:
    key_json, key_off = cur.chunked_utf("the key schema")
    value_json, value_off = cur.chunked_utf("the value schema")
    schema = StoreSchema(
        key_json=struct_json(key_json, cur.path, key_off),
        value_json=struct_json(value_json, cur.path, value_off),
        schema_version=2,
        path=cur.path,
    )
    return (ColumnFamilySchema(DEFAULT_COL_FAMILY_NAME, schema),)


def _read_v3_family(cur: _Cursor, with_ids: bool) -> ColumnFamilySchema:
    name = cur.utf("a column family name")
    what = f"column family {name!r}"
    key_id = cur.i16(f"the key schema id of {what}") if with_ids else None
    key_json, key_off = cur.chunked_utf(f"the key schema of {what}")
    value_id = cur.i16(f"the value schema id of {what}") if with_ids else None
    value_json, value_off = cur.chunked_utf(f"the value schema of {what}")
    spec_json, spec_off = cur.chunked_utf(f"the key encoder spec of {what}")
    user_json, user_off = cur.chunked_utf(f"the user key schema of {what}")
    key_text = struct_json(key_json, cur.path, key_off)
    value_text = struct_json(value_json, cur.path, value_off)
    try:
        spec = json.loads(spec_json)
    except json.JSONDecodeError as err:
        raise CorruptFileError(f"bad key encoder spec JSON of {what}: {err.msg}", cur.path, spec_off) from err
    except (RecursionError, ValueError) as err:  # nested too deeply, a 4300-digit integer
        raise CorruptFileError(f"bad key encoder spec JSON of {what}: {err}", cur.path, spec_off) from err
    if not isinstance(spec, dict) or not isinstance(spec.get("keyStateEncoderType"), str):
        raise CorruptFileError(f"key encoder spec of {what} has no 'keyStateEncoderType'", cur.path, spec_off)
    # Spark reads the user key schema with Try(StructType.fromString(..)).toOption: "{    }" means none.
    user_key_text = None
    try:
        user_value = json.loads(user_json)
    except json.JSONDecodeError as err:
        raise CorruptFileError(f"bad user key schema JSON of {what}: {err.msg}", cur.path, user_off) from err
    except (RecursionError, ValueError) as err:  # nested too deeply, a 4300-digit integer
        raise CorruptFileError(f"bad user key schema JSON of {what}: {err}", cur.path, user_off) from err
    if isinstance(user_value, dict) and user_value.get("type") == "struct":
        user_key_text = struct_json(user_json, cur.path, user_off)
    schema = StoreSchema(
        key_json=key_text,
        value_json=value_text,
        schema_version=3,
        path=cur.path,
        key_encoder=spec,
        user_key_json=user_key_text,
    )
    return ColumnFamilySchema(name, schema, key_id, value_id)


def _read_v3_layout(data: bytes, path: str, start: int, with_ids: bool) -> tuple[ColumnFamilySchema, ...]:
    cur = _Cursor(data, path, start)
    count_off = cur.pos
    count = cur.i32("the column family count")
    if count < 0:
        raise CorruptFileError(f"negative column family count {count}", path, offset=count_off)
    families = tuple(_read_v3_family(cur, with_ids) for _ in range(count))
    if cur.pos != len(data):
        raise CorruptFileError(
            f"{len(data) - cur.pos} unexpected bytes after the last column family", path, offset=cur.pos
        )
    return families


def _read_v3(cur: _Cursor) -> tuple[ColumnFamilySchema, ...]:
    # Spark 4.1+ writes i16 schema ids before the key and value schemas; an early 4.0 layout has none
    # (docs/format.md §5.3). Parse the whole file both ways and keep the one that fits to the last byte.
    start = cur.pos
    try:
        return _read_v3_layout(cur.data, cur.path, start, with_ids=True)
    except (CorruptFileError, TruncatedFileError) as with_ids_error:
        try:
            return _read_v3_layout(cur.data, cur.path, start, with_ids=False)
        except (CorruptFileError, TruncatedFileError) as without_ids_error:
            # Report the attempt that got further into the file.
            if (without_ids_error.offset or 0) > (with_ids_error.offset or 0):
                raise without_ids_error from None
            raise with_ids_error from None


_SCHEMA_READERS: dict[int, Callable[[_Cursor], tuple[ColumnFamilySchema, ...]]] = {
    1: _read_v1,
    2: _read_v2,
    3: _read_v3,
}


def _read_any(data: bytes, path: str) -> tuple[ColumnFamilySchema, ...]:
    raw = bytes(data)
    if not raw:
        raise TruncatedFileError("empty schema file", path, offset=0)
    cur = _Cursor(raw, path)
    tag = cur.utf("the version string")
    version = int(tag[1:]) if tag[:1] == "v" and tag[1:].isascii() and tag[1:].isdigit() else None
    if version is None or version <= 0:
        shown = tag if len(tag) <= 40 else tag[:40] + "..."
        raise CorruptFileError(
            f"schema file does not start with a version string such as 'v2' (got {shown!r})", path, offset=0
        )
    reader = _SCHEMA_READERS.get(version)
    if reader is None:
        known = ", ".join(f"v{v}" for v in _SCHEMA_READERS)
        raise UnsupportedVersionError(
            f"schema file version {tag!r} is not supported (statelens reads {known})", path, offset=0
        )
    families = reader(cur)
    if version < 3 and cur.pos != len(raw):
        raise CorruptFileError(
            f"{len(raw) - cur.pos} unexpected bytes after the value schema", path, offset=cur.pos
        )
    return families


def parse_schema_file(data: bytes, path: str) -> StoreSchema:
    """Parse a v1/v2 state schema file ``state/<op>/0/[<store>/]_metadata/schema`` (docs/format.md §5.2).

    Parameters
    ----------
    data : bytes
        The file's bytes.
    path : str
        Where they came from; stored in the result and used in errors.

    Returns
    -------
    StoreSchema
        Key and value ``StructType`` and ``schema_version`` 1 or 2.

    Raises
    ------
    UsageError
        The file is a v3 (column family) schema file: use :func:`parse_schema_v3`.
    UnsupportedVersionError
        An unknown version string.
    TruncatedFileError
        The file ends before a declared length.
    CorruptFileError
        Bad version string, modified UTF-8, JSON, or schema; trailing bytes.
    """
    families = _read_any(data, path)
    if not families or families[0].schema.schema_version >= 3:  # v3 files may hold no family
        raise UsageError("this is a v3 schema file with column families; read it with parse_schema_v3", path)
    return families[0].schema


def parse_schema_v3_entries(data: bytes, path: str) -> tuple[ColumnFamilySchema, ...]:
    """Parse any schema file into its column families, in file order, with their schema ids.

    Parameters
    ----------
    data : bytes
        A v3 file ``state/<op>/_stateSchema/<storeName>/<batchId>_<uuid>`` (docs/format.md §5.3), or a v1/v2
        file (one family named ``default``).
    path : str
        Where the bytes came from.

    Returns
    -------
    tuple of ColumnFamilySchema

    Raises
    ------
    UnsupportedVersionError, TruncatedFileError, CorruptFileError
        As :func:`parse_schema_file`.
    """
    return _read_any(data, path)


def parse_schema_v3(data: bytes, path: str) -> dict[str, StoreSchema]:
    """Parse a v3 schema file into ``{column family name: StoreSchema}``.

    Each schema carries ``key_encoder`` (the key encoder spec JSON, e.g.
    ``{"keyStateEncoderType":"PrefixKeyScanStateEncoderSpec","numColsPrefixKey":1}``) and
    ``user_key_schema`` (MapState user key, else ``None``). v1/v2 files give ``{"default": ...}``.

    Parameters
    ----------
    data : bytes
        The file's bytes.
    path : str
        Where they came from.

    Returns
    -------
    dict of str to StoreSchema
        In file order.

    Raises
    ------
    UnsupportedVersionError, TruncatedFileError, CorruptFileError
        As :func:`parse_schema_file`; also a column family name that repeats.
    """
    out: dict[str, StoreSchema] = {}
    for family in _read_any(data, path):
        if family.name in out:
            raise CorruptFileError(f"column family {family.name!r} appears twice", path)
        out[family.name] = family.schema
    return out

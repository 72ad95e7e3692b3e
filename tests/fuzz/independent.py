"""A second reading of the seeds whose format no library reads: UnsafeRow rows, column family keys and
values (UnsafeRow and Avro), row checksums and changelogs of formats 2-4.

Written for the tests from the format as Spark writes it (``docs/format.md`` §3.6, §4.3, §4.4, §6; Spark's
``UnsafeRow``, ``UnsafeArrayData``, ``UnsafeMapData``, ``RocksDBStateEncoder``, ``StateStoreChangelogWriterV2``
to ``V4``, ``StateStoreRowChecksum``) and sharing no code with ``readers/``: schemas are read as the JSON
Spark writes, bytes with :mod:`struct`, CRCs with the ``crc32c`` library; the only statelens name it
uses is the model's plain :class:`~statelens.readers.model.CalendarInterval`, the value type the decoders
return for a calendar interval. :func:`read_seed` returns the value the seed holds in the decoders'
representation (``readers.model.VALUE_REPRESENTATION``), so the two readings can be compared whole.

It reads what the real seeds hold and no more: a construct it does not know (a range-scan marker other
than the one for a non-negative number, an Avro decimal, a timestamp-ordered key) raises
:class:`NotCovered`, and ``python -m tests.fuzz.seeds`` then records no value for the seed.
"""

from __future__ import annotations

import json
import struct
from decimal import Context, Decimal
from typing import Any

from statelens.readers.model import CalendarInterval
from tests.fuzz import targets

Schema = dict[str, Any]


class NotCovered(Exception):
    """The seed holds something this reading does not know how to read."""


# --------------------------------------------------------------------------------------------------
# Spark SQL types, as the JSON of a schema file names them

_FIXED_WIDTH = {
    "boolean": 1,
    "byte": 1,
    "short": 2,
    "integer": 4,
    "float": 4,
    "date": 4,
    "long": 8,
    "double": 8,
    "timestamp": 8,
    "timestamp_ntz": 8,
}


def _decimal(t: Any) -> tuple[int, int] | None:
    if isinstance(t, str) and t.startswith("decimal(") and t.endswith(")"):
        precision, scale = t[len("decimal(") : -1].split(",")
        return int(precision), int(scale)
    return None


def _interval_kind(t: Any) -> str | None:
    """``"ym"`` (months, an int), ``"dt"`` (microseconds, a long), ``"cal"`` (CalendarInterval)."""
    if t == "interval":
        return "cal"
    if isinstance(t, str) and t.startswith("interval "):
        return "ym" if ("year" in t or "month" in t) else "dt"
    return None


def _element_width(t: Any) -> int:
    """The bytes one element of type ``t`` takes in an UnsafeArrayData (8 for variable-length ones)."""
    if isinstance(t, str):
        if t in _FIXED_WIDTH:
            return _FIXED_WIDTH[t]
        if _interval_kind(t) == "ym":
            return 4
        if t in ("void", "null"):
            return 1
    return 8


def _is_inline(t: Any) -> bool:
    """The value sits in its 8-byte slot (not in the variable-length part)."""
    if isinstance(t, str):
        if t in _FIXED_WIDTH or _interval_kind(t) in ("ym", "dt"):
            return True
        dec = _decimal(t)
        return dec is not None and dec[0] <= 18
    return False


# --------------------------------------------------------------------------------------------------
# UnsafeRow (docs/format.md §6)


def _scaled(unscaled: int, scale: int) -> Decimal:
    """``unscaled * 10**-scale``, every digit kept (Spark's decimals have at most 38)."""
    return Decimal(unscaled).scaleb(-scale, Context(prec=80))


def _inline(t: Any, data: bytes, pos: int, width: int) -> Any:
    """A value of type ``t`` stored in place, ``width`` bytes at ``pos`` (little-endian)."""
    if t == "boolean":
        return data[pos] != 0
    if t in ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz") or _interval_kind(t):
        fmt = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}[min(width, _FIXED_WIDTH.get(t, width))]
        return struct.unpack_from(fmt, data, pos)[0]
    if t == "float":
        return struct.unpack_from("<f", data, pos)[0]
    if t == "double":
        return struct.unpack_from("<d", data, pos)[0]
    dec = _decimal(t)
    if dec is not None:
        return _scaled(struct.unpack_from("<q", data, pos)[0], dec[1])
    raise NotCovered(f"inline type {t!r}")


def _variable(t: Any, data: bytes, start: int, size: int) -> Any:
    """A value of type ``t`` held in ``data[start:start + size]``."""
    body = data[start : start + size]
    if len(body) != size:
        raise NotCovered("a variable-length value past the end of its row")
    if t == "string":
        return body.decode("utf-8")
    if t == "binary":
        return bytes(body)
    if _interval_kind(t) == "cal":
        months, days, micros = struct.unpack_from("<iiq", body, 0)
        return CalendarInterval(months, days, micros)
    dec = _decimal(t)
    if dec is not None:
        return _scaled(int.from_bytes(body, "big", signed=True), dec[1])
    if isinstance(t, dict) and t["type"] == "struct":
        return unsafe_row(body, t)
    if isinstance(t, dict) and t["type"] == "array":
        return _array(body, t["elementType"])
    if isinstance(t, dict) and t["type"] == "map":
        (key_bytes,) = struct.unpack_from("<q", body, 0)
        keys = _array(body[8 : 8 + key_bytes], t["keyType"])
        values = _array(body[8 + key_bytes :], t["valueType"])
        if len(keys) != len(values):
            raise NotCovered("a map whose key and value arrays differ in length")
        return list(zip(keys, values, strict=True))
    raise NotCovered(f"variable-length type {t!r}")


def _array(data: bytes, element: Any) -> list[Any]:
    """An ``UnsafeArrayData``: ``numElements:i64``, a null bitset, the elements, then payloads."""
    (count,) = struct.unpack_from("<q", data, 0)
    if not 0 <= count <= len(data) * 8:
        raise NotCovered(f"an array of {count} elements")
    bitset = 8 + (count + 63) // 64 * 8
    width = _element_width(element)
    out: list[Any] = []
    for i in range(count):
        if data[8 + i // 8] >> (i % 8) & 1 or element in ("void", "null"):
            out.append(None)
            continue
        pos = bitset + i * width
        if _is_inline(element):
            out.append(_inline(element, data, pos, width))
        else:
            (word,) = struct.unpack_from("<q", data, pos)
            out.append(_variable(element, data, word >> 32, word & 0xFFFFFFFF))
    return out


def unsafe_row(data: bytes, schema: Schema) -> tuple[Any, ...]:
    """An ``UnsafeRow`` of ``schema`` (a struct's JSON): null bitset words, one slot per field, payloads."""
    fields = schema["fields"]
    bitset = (len(fields) + 63) // 64 * 8
    if len(data) < bitset + 8 * len(fields):
        raise NotCovered("a row shorter than its fixed part")
    out: list[Any] = []
    for i, field in enumerate(fields):
        t = field["type"]
        if data[i // 8] >> (i % 8) & 1 or t in ("void", "null"):
            out.append(None)
            continue
        slot = bitset + 8 * i
        if _is_inline(t):
            out.append(_inline(t, data, slot, 8))
        else:
            (word,) = struct.unpack_from("<q", data, slot)
            out.append(_variable(t, data, word >> 32, word & 0xFFFFFFFF))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Avro binary rows (Avro 1.11 specification, "Binary Encoding"; Spark makes every field a
# ``["null", T]`` union in state rows, branch 0 null and branch 1 the value, but a void field)


class _Avro:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise NotCovered("an Avro varint past the end")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise NotCovered("Avro bytes past the end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def nullable(self, t: Any) -> Any:
        branch = self.long()
        if branch == 0:
            return None
        if branch != 1:
            raise NotCovered(f"Avro union branch {branch}")
        return self.value(t)

    def value(self, t: Any) -> Any:
        if t in ("void", "null"):
            return None
        if t == "boolean":
            return self.raw(1) != b"\x00"
        if t in ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz"):
            return self.long()
        if t == "float":
            return struct.unpack("<f", self.raw(4))[0]
        if t == "double":
            return struct.unpack("<d", self.raw(8))[0]
        if t == "string":
            return self.raw(self.long()).decode("utf-8")
        if t == "binary":
            return bytes(self.raw(self.long()))
        if isinstance(t, dict) and t["type"] == "struct":
            return self.record(t)
        if isinstance(t, dict) and t["type"] == "array":
            out: list[Any] = []
            while True:
                count = self.long()
                if count == 0:
                    return out
                if count < 0:
                    count = -count
                    self.long()  # the block's size in bytes
                element = t["elementType"]
                for _ in range(count):
                    out.append(self.nullable(element) if t.get("containsNull") else self.value(element))
        raise NotCovered(f"Avro value of type {t!r}")

    def record(self, schema: Schema) -> tuple[Any, ...]:
        # a void field is Avro's null, not a union: no bytes at all
        return tuple(
            None if f["type"] in ("void", "null") else self.nullable(f["type"]) for f in schema["fields"]
        )


def avro_row(data: bytes, schema: Schema) -> tuple[Any, ...]:
    """One Avro record of ``schema`` that takes all of ``data``."""
    reader = _Avro(data)
    row = reader.record(schema)
    if reader.pos != len(data):
        raise NotCovered(f"{len(data) - reader.pos} bytes after an Avro record")
    return row


# --------------------------------------------------------------------------------------------------
# column family keys and values (docs/format.md §4.3, §7.7)

#: The sign marker a range-scan ordering column carries before a non-negative number (big-endian).
_NON_NEGATIVE = 0x01


def _struct_of(schema: Schema, ordinals: list[int]) -> Schema:
    return {"type": "struct", "fields": [schema["fields"][i] for i in ordinals]}


def _row_after_version(data: bytes, schema: Schema, avro: bool, schema_id: bool = True) -> tuple[Any, ...]:
    """``00`` (``STATE_ENCODING_VERSION``) then an UnsafeRow, or ``00 + schemaId:u16 LE`` then Avro."""
    if data[:1] != b"\x00":
        raise NotCovered(f"encoding version byte {data[:1].hex()}")
    if not avro:
        return unsafe_row(data[1:], schema)
    return avro_row(data[3:] if schema_id else data[1:], schema)


def _ordering_value(t: Any, marker: int, body: bytes) -> Any:
    if marker != _NON_NEGATIVE:
        raise NotCovered(f"range-scan marker {marker:#x}")
    if t in ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz"):
        return int.from_bytes(body, "big", signed=True)
    if t == "string":
        return body.decode("utf-8")
    raise NotCovered(f"range-scan ordering column of type {t!r}")


def _range_columns(data: bytes, schema: Schema, ordinals: list[int], avro: bool) -> list[Any]:
    """The ordering columns of a range-scan key: each a sign marker and the big-endian value, held in
    an UnsafeRow of one binary per column, or in Avro as two nullable bytes (marker, value)."""
    out = []
    if avro:
        if data[:1] != b"\x00":
            raise NotCovered("range-scan part without its version byte")
        reader = _Avro(data[1:])
        for i in ordinals:
            marker, body = reader.nullable("binary"), reader.nullable("binary")
            if marker is None or body is None or len(marker) != 1:
                raise NotCovered("a null ordering column")
            out.append(_ordering_value(schema["fields"][i]["type"], marker[0], body))
        if reader.pos != len(data) - 1:
            raise NotCovered("bytes after the range-scan columns")
        return out
    row = _row_after_version(data, {"type": "struct", "fields": [{"type": "binary"}] * len(ordinals)}, False)
    for i, cell in zip(ordinals, row, strict=True):
        if cell is None or not cell:
            raise NotCovered("a null ordering column")
        out.append(_ordering_value(schema["fields"][i]["type"], cell[0], cell[1:]))
    return out


def cf_key(data: bytes, schema: Schema, spec: dict[str, Any], avro: bool) -> tuple[Any, ...]:
    """A column family key (without its family id) as the key row, fields in schema order."""
    kind = spec.get("keyStateEncoderType")
    n = len(schema["fields"])
    if kind == "NoPrefixKeyStateEncoderSpec":
        return _row_after_version(data, schema, avro)
    if kind not in ("PrefixKeyScanStateEncoderSpec", "RangeKeyScanStateEncoderSpec"):
        raise NotCovered(f"key encoder {kind}")
    (head,) = struct.unpack_from("<i", data, 0)
    first, rest = data[4 : 4 + head], data[4 + head :]
    if kind == "PrefixKeyScanStateEncoderSpec":
        k = int(spec["numColsPrefixKey"])
        prefix = _row_after_version(first, _struct_of(schema, list(range(k))), avro, schema_id=False)
        remaining = _row_after_version(rest, _struct_of(schema, list(range(k, n))), avro)
        return prefix + remaining
    ordinals = [int(i) for i in spec["orderingOrdinals"]]
    others = [i for i in range(n) if i not in ordinals]
    ordered = _range_columns(first, schema, ordinals, avro)
    remaining = _row_after_version(rest, _struct_of(schema, others), avro) if others else ()
    if not others and rest:
        raise NotCovered("bytes after a key of ordering columns only")
    by_ordinal = dict(zip(ordinals, ordered, strict=True)) | dict(zip(others, remaining, strict=True))
    return tuple(by_ordinal[i] for i in range(n))


def list_elements(value: bytes) -> list[bytes]:
    """A list value: elements ``len:i32 LE + 00 + row``, with or without a ``,`` between them; the rows."""
    out: list[bytes] = []
    pos = 0
    while pos < len(value):
        if out and value[pos : pos + 1] == b",":
            pos += 1
        (size,) = struct.unpack_from("<i", value, pos)
        element = value[pos + 4 : pos + 4 + size]
        if size < 1 or len(element) != size or element[:1] != b"\x00":
            raise NotCovered("a list element that is not len + 00 + row")
        out.append(element[1:])
        pos += 4 + size
    return out


def _cf_rows(data: bytes) -> dict[str, Any]:
    families = json.loads((targets.HERE / "cf_families.json").read_text())
    family = families[data[0] % len(families)]
    key_schema, value_schema = json.loads(family["key_schema"]), json.loads(family["value_schema"])
    spec = family["key_encoder"]
    op, avro = data[1] & 3, bool(data[1] & 4)
    items = targets._split_items(data[2:])
    if op == 3:
        spec = json.loads(items[0])
        items = items[1:]
    if op in (0, 3):
        return {"keys": [cf_key(k, key_schema, spec, avro) for k in items]}
    if op == 1:
        return {"values": [_row_after_version(v, value_schema, avro) for v in items]}
    rows = [row for v in items for row in list_elements(v)]
    if avro:
        return {"values": [avro_row(r[2:], value_schema) for r in rows]}  # schemaId:u16, then Avro
    return {"values": [unsafe_row(r, value_schema) for r in rows]}


# --------------------------------------------------------------------------------------------------
# row checksums (docs/format.md §3.6: CRC-32C, little-endian, over the key and then the value row)


def _crc(*parts: bytes) -> int:
    from crc32c import crc32c

    crc = 0
    for part in parts:
        crc = crc32c(part, crc)
    return crc


def _checked(crc_bytes: bytes, *parts: bytes) -> None:
    if struct.unpack("<I", crc_bytes)[0] != _crc(*parts):
        raise NotCovered("a row checksum that does not match")


def _rocksdb_value(key: bytes, value: bytes) -> bytes:
    """``crc:u32 LE + len:i32 LE + value``: the value."""
    (size,) = struct.unpack_from("<i", value, 4)
    body = value[8 : 8 + size]
    if len(body) != size or len(value) != 8 + size:
        raise NotCovered("a checked value whose length is not its own")
    _checked(value[:4], key, body)
    return body


def _operands(key: bytes, value: bytes) -> list[bytes]:
    """Merged checked values, ``crc + len + body`` each, with or without a ``,`` between them."""
    out: list[bytes] = []
    pos = 0
    while pos < len(value):
        if out and value[pos : pos + 1] == b",":
            pos += 1
        (size,) = struct.unpack_from("<i", value, pos + 4)
        out.append(_rocksdb_value(key, value[pos : pos + 8 + size]))
        pos += 8 + size
    return out


def _row_checksums(data: bytes) -> dict[str, Any]:
    op = data[0] % 7
    flags = data[1] if op in (0, 4, 6) and len(data) > 1 else 0
    items = targets._split_items(data[2:] if op in (0, 4, 6) else data[1:])
    if op == 0:  # HDFS: a value is crc + value row, a removed key crc + key row
        keys, values = targets._flagged_pairs(items, flags)
        out_keys: list[bytes] = []
        out_values: list[bytes | None] = []
        for key, value in zip(keys, values, strict=True):
            if value is None:
                _checked(key[:4], key[4:])
                out_keys.append(key[4:])
                out_values.append(None)
            else:
                _checked(value[:4], key, value[4:])
                out_keys.append(key)
                out_values.append(value[4:])
        return {"hdfs": (out_keys, out_values)}
    if op == 1:
        return {"value": _rocksdb_value(items[0], items[1])}
    if op == 2:  # a removed RocksDB key: crc + key
        _checked(items[0][:4], items[0][4:])
        return {"removed_key": items[0][4:]}
    if op == 3:
        return {"operands": [list_elements(o) for o in _operands(items[0], items[1])]}
    if op == 4:  # operands the seed builds from bodies, with correct CRCs: the bodies come back
        return {"operands": list(items[1:])}
    if op == 5:
        return {"elements": list_elements(items[0])}
    return {"elements": list(items)}  # a list value the seed builds from rows: the rows come back


# --------------------------------------------------------------------------------------------------
# UnsafeRow seeds and changelogs


def _unsaferow(data: bytes) -> tuple[Any, ...]:
    entries = json.loads((targets.HERE / "schemas.json").read_text())
    return unsafe_row(data[2:], json.loads(entries[data[0] % len(entries)]["json"]))


def changelog(body: bytes) -> dict[str, Any]:
    """A decompressed changelog. Format 1 has no header (``keySize:i32 BE, key, valueSize, value``,
    ``valueSize -1`` a removal, ``keySize -1`` the end); 2 to 4 start with ``writeUTF("v<n>")``, 3 and 4
    then with ``writeUTF(lineage JSON)``; 2 and 4 put a record type byte before each record (``00``
    end, ``01`` put, ``10`` delete, ``11`` merge), 3 writes format 1's records."""
    version, lineage, pos = 1, None, 0
    if body[:2] == b"\x00\x02" and body[2:3] == b"v" and body[3:4] in b"234":
        version, pos = int(body[3:4]), 4
    if version in (3, 4):
        (size,) = struct.unpack_from(">H", body, pos)
        lineage = body[pos + 2 : pos + 2 + size].decode("utf-8")
        pos += 2 + size
    typed = version in (2, 4)
    records: list[tuple[bytes, bytes | None]] = []
    while True:
        if typed:
            kind = body[pos]
            pos += 1
            if kind == 0x00:
                break
            if kind not in (0x01, 0x10, 0x11):
                raise NotCovered(f"record type {kind:#x}")
        (key_size,) = struct.unpack_from(">i", body, pos)
        pos += 4
        if key_size == -1 and not typed:
            break
        key = body[pos : pos + key_size]
        pos += key_size
        (value_size,) = struct.unpack_from(">i", body, pos)
        pos += 4
        if value_size == -1:
            records.append((key, None))
            continue
        records.append((key, body[pos : pos + value_size]))
        pos += value_size
    if pos != len(body):
        raise NotCovered("bytes after the end of a changelog")
    return {"version": version, "lineage": lineage, "records": records}


#: What each target's second reading is called in ``expected.json``'s ``source``.
SOURCES = {
    "unsaferow": "independent-decode:unsaferow",
    "cf_rows": "independent-decode:cf-keys-values",
    "row_checksums": "independent-decode:crc32c",
    "changelog": "independent-decode:changelog",
    "records": "independent-decode:changelog",
}


def read_seed(target: str, data: bytes) -> Any:
    """The value ``data`` (a seed of ``target``) holds, read by this module (``NotCovered`` if it cannot)."""
    try:
        if target == "unsaferow":
            return _unsaferow(data)
        if target == "cf_rows":
            return _cf_rows(data)
        if target == "row_checksums":
            return _row_checksums(data)
        if target == "changelog" or (target == "records" and data[0] & 1):
            return changelog(data[1:])
    except (struct.error, IndexError, ValueError, KeyError) as err:
        raise NotCovered(f"{type(err).__name__}: {err}") from err
    raise NotCovered(f"no second reading of {target} seeds here")


def unframe_lzf(data: bytes) -> bytes:
    """compress-lzf's ``LZFOutputStream`` chunks: ``ZV``, a type byte, then ``00`` + ``len:u16 BE`` +
    stored bytes, or ``01`` + ``clen:u16 BE`` + ``len:u16 BE`` + an LZF block (liblzf's format: a control
    byte below 32 copies that many plus one literal bytes; above, its top 3 bits (7: plus the next byte)
    plus 2 bytes are copied from ``1 + (low 5 bits << 8 | next byte)`` bytes back)."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        if data[pos : pos + 2] != b"ZV":
            raise NotCovered(f"an LZF chunk without its ZV at {pos}")
        kind = data[pos + 2]
        if kind == 0:
            (size,) = struct.unpack_from(">H", data, pos + 3)
            out += data[pos + 5 : pos + 5 + size]
            pos += 5 + size
            continue
        clen, size = struct.unpack_from(">HH", data, pos + 3)
        block, start = data[pos + 7 : pos + 7 + clen], len(out)
        i = 0
        while i < len(block):
            ctrl = block[i]
            i += 1
            if ctrl < 32:
                out += block[i : i + ctrl + 1]
                i += ctrl + 1
                continue
            length = ctrl >> 5
            if length == 7:
                length += block[i]
                i += 1
            back = ((ctrl & 0x1F) << 8 | block[i]) + 1
            i += 1
            for _ in range(length + 2):
                out.append(out[-back])
        if len(out) - start != size:
            raise NotCovered("an LZF chunk whose size is not the one it declares")
        pos += 7 + clen
    return bytes(out)

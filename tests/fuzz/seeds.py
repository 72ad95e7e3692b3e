"""What each seed of ``tests/fuzz/corpus/`` holds, and the check that its decoder reads exactly that.

The seeds are real files (or pieces of them) of generated checkpoints and the unit tests' real bytes, so
they must decode, to the values they hold; "a value or a typed error" is the rule for damaged inputs
only. Two kinds of evidence, both checked by :func:`check_seed`:

* **Recorded expectations**, ``tests/fuzz/expected.json``: for each seed the outcome (``"value"``, or the
  :class:`~readers.errors.StatelensError` class a seed built to be refused must raise: a zip entry
  outside the folder, bzip2 entries, an Avro-unsupported family...), a digest of the value and a few
  counts (records, removes, entries, fields), and its ``source``: the reading that confirmed it.
  ``python -m tests.fuzz.seeds`` records them whenever ``build_corpus`` rewrites the corpus, and only
  what a reading without statelens confirms (:func:`record`): the UnsafeRow seeds' rows are what
  Spark's ``statestore`` source holds (``--spark``, :func:`spark_reading`); column family keys and
  values, row checksums and changelogs of formats 2-4 are read by :mod:`tests.fuzz.independent`
  (written from the format, sharing no code with ``readers/``), whose value is the one recorded; the
  other targets by the facts below. A seed no such reading confirms is listed and nothing is written.
* **Facts derived without statelens**, at check time, from the seed's own bytes: log and operator
  metadata files are JSON lines (read with :mod:`json`), a zip's entries are what :mod:`zipfile`
  reads, a delta or snapshot record stream is walked by :func:`walk_hdfs_records` (a dozen lines
  written from Spark's ``HDFSBackedStateStoreProvider``), a compressed stream is what the lz4, zstd and
  snappy libraries (and an LZF reader of the tests) read, a schema file's key and value schemas are
  the JSON documents it embeds.

``decode(target, data)`` calls the main decoders the fuzz target of the same name calls, with the same
selector bytes, but lets every error through: a decoder that refuses a valid seed fails the check.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import zipfile
from dataclasses import fields, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from statelens.readers import logs, opmeta, schemas
from statelens.readers._format import codecs, records, rocksdb_store, rowchecksum, unsaferow
from statelens.readers.errors import StatelensError
from tests.fuzz import independent, targets
from tests.fuzz.targets import CORPUS, HERE, TARGETS

EXPECTED = HERE / "expected.json"
_PATH = "fuzz/seed"


# --------------------------------------------------------------------------------------------------
# decoding, errors let through


def _record_list(data: bytes, index: records.RecordIndex) -> list[tuple[bytes, bytes | None]]:
    return list(records.iter_records(data, index, aligned=False))  # the bytes as stored


def _decode_codecs(data: bytes) -> Any:
    hint = targets._CODEC_HINTS[data[0] % len(targets._CODEC_HINTS)]
    return codecs.decompress(data[1:], _PATH, hint, max_output_bytes=targets.FUZZ_MAX_OUTPUT_BYTES)


def _decode_records(data: bytes) -> Any:
    mode, body = data[0], data[1:]
    limit = records.DEFAULT_MAX_RECORD_BYTES if mode & 0x80 else 64
    if mode & 1:
        version, lineage, index = records.scan_changelog(body, _PATH, max_record_bytes=limit)
        return {"version": version, "lineage": lineage, "records": _record_list(body, index)}
    index = records.scan_records(body, _PATH, allow_removes=bool(mode & 2), max_record_bytes=limit)
    return {"records": _record_list(body, index)}


def _decode_unsaferow(data: bytes) -> Any:
    layouts = targets.unsaferow_layouts()
    layout = layouts[data[0] % len(layouts)]
    row = data[2:]
    one = unsaferow.decode_row(row, 0, len(row), layout, path=_PATH, record=0)
    many = unsaferow.decode_rows(row, [0], [len(row)], layout, path=_PATH, records=[0])
    assert repr(many) == repr([one]), (one, many)  # the row and the columnar decoders agree
    return one


def _decode_schemas(data: bytes) -> Any:
    return schemas.parse_schema_v3_entries(data, _PATH)


_LOG_DECODERS = (
    lambda body: logs.parse_offsets(body, "fuzz/offsets/0", 0),
    lambda body: logs.parse_commit(body, "fuzz/commits/0", 0),
    lambda body: logs.parse_metadata_fields(body, "fuzz/metadata"),
    lambda body: logs.parse_file_source_log(body, "fuzz/sources/0/0"),
    lambda body: logs.parse_kafka_initial_offsets(body, "fuzz/sources/0/0"),
)


def _decode_logs(data: bytes) -> Any:
    return _LOG_DECODERS[data[0] % len(_LOG_DECODERS)](data[1:])


def _decode_opmeta(data: bytes) -> Any:
    return opmeta.parse_operator_metadata(data, "fuzz/state/0/_metadata/metadata")


def _decode_rocksdb_zip(data: bytes) -> Any:
    body = data[1:]
    if data[0] & 1:
        return {"metadata": rocksdb_store.parse_zip_metadata(body, _PATH)}
    entries = rocksdb_store.read_zip(body, _PATH, targets.FUZZ_ZIP_LIMITS)
    out: dict[str, Any] = {"entries": entries}
    if "metadata" in entries:
        out["metadata"] = rocksdb_store.parse_zip_metadata(entries["metadata"], _PATH)
    return out


def _decode_changelog(data: bytes) -> Any:
    mode, body = data[0], data[1:]
    limit = records.DEFAULT_MAX_RECORD_BYTES if mode & 0x80 else 64
    version, lineage, index = records.scan_changelog(body, _PATH, max_record_bytes=limit)
    return {"version": version, "lineage": lineage, "records": _record_list(body, index)}


def _decode_cf_rows(data: bytes) -> Any:
    from statelens.readers._format import cf_store

    families = targets.cf_families()
    family = families[data[0] % len(families)]
    op, avro = data[1] & 3, bool(data[1] & 4)
    items = targets._split_items(data[2:])
    if op == 3:
        family = targets._with_spec(family, items[0])
        assert family is not None, "the seed's key encoder spec is one parse_schema_v3 accepts"
        items = items[1:]
    if op in (0, 3):
        return {"keys": cf_store.decode_keys(family, items, _PATH, avro)}
    if op == 1:
        rows = [cf_store.strip_version(v, _PATH) for v in items]
    else:
        rows = [row for v in items for row in rocksdb_store.split_list_value(v, _PATH)]
    return {"values": cf_store.decode_values(rows, family.schema.value_schema, _PATH, avro)}


def _decode_row_checksums(data: bytes) -> Any:
    op = data[0] % 7
    flags = data[1] if op in (0, 4, 6) and len(data) > 1 else 0
    items = targets._split_items(data[2:] if op in (0, 4, 6) else data[1:])
    if op == 0:
        keys, values = targets._flagged_pairs(items, flags)
        return {"hdfs": rowchecksum.strip_hdfs(keys, values, _PATH)}
    if op == 1:
        return {"value": rowchecksum.strip_rocksdb_value(items[0], items[1], _PATH, 0)}
    if op == 2:
        return {"removed_key": rowchecksum.strip_rocksdb_removed_key(items[0], _PATH, 0)}
    if op == 3:
        operands = rocksdb_store.split_checked_operands(items[0], items[1], _PATH, 0)
        return {"operands": [rocksdb_store.split_list_value(o, _PATH) for o in operands]}
    if op == 4:
        key, bodies = items[0], items[1:]
        value = b"".join(
            (b"," if n and flags >> (n - 1) & 1 else b"") + targets._checked_operand(key, body)
            for n, body in enumerate(bodies)
        )
        return {"operands": rocksdb_store.split_checked_operands(key, value, _PATH, 0)}
    if op == 5:
        return {"elements": rocksdb_store.split_list_value(items[0], _PATH)}
    value = b"".join(
        (b"," if n and flags >> (n - 1) & 1 else b"") + struct.pack("<i", len(row) + 1) + b"\x00" + row
        for n, row in enumerate(items)
    )
    return {"elements": rocksdb_store.split_list_value(value, _PATH)}


DECODERS = {
    "codecs": _decode_codecs,
    "records": _decode_records,
    "unsaferow": _decode_unsaferow,
    "schemas": _decode_schemas,
    "logs": _decode_logs,
    "opmeta": _decode_opmeta,
    "rocksdb_zip": _decode_rocksdb_zip,
    "changelog": _decode_changelog,
    "cf_rows": _decode_cf_rows,
    "row_checksums": _decode_row_checksums,
}
assert set(DECODERS) == set(TARGETS)


def decode(target: str, data: bytes) -> Any:
    """The value the main decoders of ``target`` read from ``data`` (errors propagate)."""
    return DECODERS[target](data)


# --------------------------------------------------------------------------------------------------
# what a value is: a stable text form, its digest, a few counts


def _plain(value: Any) -> Any:
    """``value`` as JSON-able data with the same content (bytes as hex, dataclasses as dicts)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, float):
        return repr(value)  # nan, inf and -0.0 stay apart
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if type(value).__name__ == "StoreSchema":  # held as JSON text: compared as the pyspark types it makes
        names = ("key_schema", "value_schema", "schema_version", "path", "key_encoder", "user_key_schema")
        return {"StoreSchema": {name: _plain(getattr(value, name)) for name in names}}
    if is_dataclass(value) and not isinstance(value, type):
        return {type(value).__name__: {f.name: _plain(getattr(value, f.name)) for f in fields(value)}}
    if hasattr(value, "json") and callable(value.json):  # StructType and other schema types
        return {type(value).__name__: value.json()}
    if hasattr(value, "_asdict"):
        return {type(value).__name__: _plain(value._asdict())}
    return {type(value).__name__: repr(value)}


def digest(value: Any) -> str:
    """A digest of everything in ``value`` (its order included)."""
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def summary(target: str, value: Any) -> dict[str, Any]:
    """Counts a reader of the diff can check by eye: records and removes, entries, families, fields."""
    if target == "codecs":
        return {"bytes": len(value)}
    if target in ("records", "changelog"):
        recs = value["records"]
        out = {"records": len(recs), "removes": sum(1 for _, v in recs if v is None)}
        if "version" in value:
            out["version"] = value["version"]
        return out
    if target == "unsaferow":
        return {"fields": len(value)}
    if target == "schemas":
        return {"families": len(value)}
    if target == "rocksdb_zip":
        out: dict[str, Any] = {}
        if "entries" in value:
            out["entries"] = sorted(value["entries"])
        if "metadata" in value:
            out["num_keys"] = value["metadata"].num_keys
            out["sst_files"] = len(value["metadata"].sst_files)
        return out
    if target == "cf_rows":
        kind = next(iter(value))
        return {kind: len(value[kind])}
    if target == "row_checksums":
        kind = next(iter(value))
        got = value[kind]
        return {kind: len(got[0]) if kind == "hdfs" else len(got)}
    if target == "logs":
        return {"type": type(value).__name__}
    return {"type": type(value).__name__}


def outcome(target: str, data: bytes) -> dict[str, Any]:
    """The expectation to record for one seed, as the decoders read it now."""
    try:
        value = decode(target, data)
    except StatelensError as err:
        return {"outcome": type(err).__name__}
    return {"outcome": "value", "digest": digest(value), "summary": summary(target, value)}


# --------------------------------------------------------------------------------------------------
# facts derived from the bytes without statelens


def walk_hdfs_records(body: bytes) -> list[tuple[bytes, bytes | None]]:
    """An HDFS delta or snapshot, decompressed: ``keySize:i32 BE, key, valueSize:i32 BE, value``
    repeated, ``valueSize -1`` for a removal, ``keySize -1`` at the end (``HDFSBackedStateStoreProvider``
    ``writeUpdateToDeltaFile``/``writeRemoveToDeltaFile``/``finalizeDeltaFile``)."""
    out: list[tuple[bytes, bytes | None]] = []
    pos = 0
    while True:
        (key_size,) = struct.unpack_from(">i", body, pos)
        pos += 4
        if key_size == -1:
            assert pos == len(body), "bytes after the end marker"
            return out
        key = body[pos : pos + key_size]
        pos += key_size
        (value_size,) = struct.unpack_from(">i", body, pos)
        pos += 4
        if value_size == -1:
            out.append((key, None))
            continue
        out.append((key, body[pos : pos + value_size]))
        pos += value_size


def unframe_lz4_block(data: bytes) -> bytes:
    """lz4-java ``LZ4BlockOutputStream`` blocks: ``LZ4Block``, token (``0x10`` stored, ``0x20`` LZ4),
    compressed and original length and a checksum (little-endian ints), then the payload."""
    import lz4.block

    out = b""
    pos = 0
    while pos < len(data):
        assert data[pos : pos + 8] == b"LZ4Block"
        token = data[pos + 8]
        clen, dlen, _checksum = struct.unpack_from("<iii", data, pos + 9)
        payload = data[pos + 21 : pos + 21 + clen]
        pos += 21 + clen
        if token & 0xF0 == 0x10:
            out += payload
        elif dlen:
            out += lz4.block.decompress(payload, uncompressed_size=dlen)
    return out


def unframe_snappy(data: bytes) -> bytes:
    """xerial ``SnappyOutputStream``: an 8-byte magic and two version ints, then ``length:i32 BE`` +
    raw Snappy block, repeated."""
    import cramjam

    assert data[:8] == b"\x82SNAPPY\x00"
    out = b""
    pos = 16
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


def unframe_zstd(data: bytes) -> bytes:
    """zstd frames, one after the other (``ZstdOutputStream``), read by the zstandard library."""
    import zstandard

    out = b""
    while data:
        d = zstandard.ZstdDecompressor().decompressobj()
        out += d.decompress(data)
        data = d.unused_data
    return out


#: Spark's codec framings read with other libraries (lzf: by :func:`tests.fuzz.independent.unframe_lzf`).
UNFRAME = {
    b"ZV": independent.unframe_lzf,
    b"LZ4Block": unframe_lz4_block,
    b"\x82SNAPPY\x00": unframe_snappy,
    b"\x28\xb5\x2f\xfd": unframe_zstd,
}


def _json_lines(body: bytes) -> list[str]:
    return body.decode("utf-8").split("\n")


def _embedded_structs(data: bytes) -> list[dict[str, Any]]:
    """Every ``{"type":"struct",...}`` JSON document written into a schema file, in file order."""
    text = data.decode("latin-1")  # one character per byte: finds the documents between binary lengths
    decoder = json.JSONDecoder(strict=False)
    out = []
    pos = text.find('{"type":"struct"')
    while pos >= 0:
        _doc, end = decoder.raw_decode(text, pos)
        # Java's modified UTF-8 writes a character outside the BMP as two 3-byte surrogates
        raw = data[pos:end].decode("utf-8", "surrogatepass")
        out.append(json.loads(raw.encode("utf-16", "surrogatepass").decode("utf-16")))
        pos = text.find('{"type":"struct"', end)
    return out


def _field_names(struct_json: dict[str, Any]) -> list[str]:
    return [f["name"] for f in struct_json["fields"]]


def check_independent_facts(target: str, data: bytes, value: Any) -> int:
    """Assert what ``data`` holds, read without statelens, is what the decoder returned.

    Returns how many facts were compared (0 for targets with no such reading here).
    """
    if target in ("records", "changelog"):
        return _check_records(data, value)
    if target == "codecs":  # a delta of an HDFS store: its framing read elsewhere, its records walked
        body = data[1:]
        framed = [fn for magic, fn in UNFRAME.items() if body.startswith(magic)]
        if framed:
            assert value == framed[0](body)
        return len(walk_hdfs_records(value)) + len(framed)
    if target == "logs":
        return _check_log(data[0] % len(_LOG_DECODERS), data[1:], value)
    if target == "opmeta":
        lines = _json_lines(data)
        version = int(lines[0].lstrip("v"))
        info = json.loads(lines[1])
        operator = info["operatorInfo"]
        assert (value.operator_id, value.operator_name, value.format_version) == (
            operator["operatorId"],
            operator["operatorName"],
            version,
        )
        stores = info["stateStoreInfo"]
        assert [s.store_name for s in value.stores] == [s["storeName"] for s in stores]
        assert [s.num_partitions for s in value.stores] == [s["numPartitions"] for s in stores]
        return 3 + 2 * len(stores)
    if target == "rocksdb_zip":
        compared = 0
        if "entries" in value:
            with zipfile.ZipFile(io.BytesIO(data[1:])) as zf:
                assert value["entries"] == {i.filename: zf.read(i) for i in zf.infolist()}
            compared += len(value["entries"])
            meta_bytes = value["entries"].get("metadata")
        else:
            meta_bytes = data[1:]
        if meta_bytes is not None:
            lines = _json_lines(meta_bytes)
            assert lines[0] == "v1"
            meta = json.loads(lines[1])
            got = value["metadata"]
            assert got.num_keys == meta.get("numKeys")
            assert [(s[0], s[1], s[2]) for s in got.sst_files] == [
                (f["localFileName"], f["dfsSstFileName"], f["sizeBytes"]) for f in meta.get("sstFiles", [])
            ]
            compared += 2
        return compared
    if target == "schemas":
        embedded = _embedded_structs(data)
        decoded = [
            part for family in value for part in (family.schema.key_schema, family.schema.value_schema)
        ]
        assert [_field_names(s) for s in embedded[: len(decoded)]] == [
            [f.name for f in part.fields] for part in decoded
        ]
        # the whole key and value schemas: every field's name, type, nullability and metadata
        assert [json.loads(part.json()) for part in decoded] == embedded[: len(decoded)]
        return len(decoded)
    return 0


def _check_records(data: bytes, value: dict[str, Any]) -> int:
    if "version" in value and value["version"] != 1:
        return 0  # changelog formats 2-4: recorded expectations only
    # deltas, snapshots and RocksDB changelogs of format 1 (``StateStoreChangelogWriterV1``)
    assert value["records"] == walk_hdfs_records(data[1:])
    return len(value["records"]) + 1


def _check_log(kind: int, body: bytes, value: Any) -> int:
    lines = _json_lines(body)
    if kind == 0:  # offsets: v1 or v2, the batch metadata, then one line per source ("-": none yet)
        meta = json.loads(lines[1])
        assert value.format_version == int(lines[0].lstrip("v"))
        assert value.watermark_ms == meta.get("batchWatermarkMs", 0)
        assert value.timestamp_ms == meta.get("batchTimestampMs")
        assert value.conf == meta.get("conf", {})
        texts = [line for line in lines[2:] if line]
        if lines[0] == "v2":  # "<sourceId>:<offset JSON>"
            assert [s.source_id for s in value.sources] == [t.split(":", 1)[0] for t in texts]
            texts = [t.split(":", 1)[1] for t in texts]
        sources = [None if t == "-" else json.loads(t) for t in texts]
        assert [s.parsed for s in value.sources] == sources
        return 4 + len(sources)
    if kind == 1:  # commits: v1, then {"nextBatchWatermarkMs": ...}
        assert value.next_watermark_ms == json.loads(lines[1]).get("nextBatchWatermarkMs", 0)
        return 1
    if kind == 2:  # metadata: one JSON object
        assert value == json.loads(body)
        return len(value)
    if kind == 3:  # a file source log: v1, then one JSON object per file
        entries = [json.loads(line) for line in lines[1:] if line]
        assert value == entries
        return len(entries) + 1
    # Kafka initial offsets: a 0 byte, v1, then the JSON of partition offsets
    text = body.decode("utf-8").lstrip("\x00")
    assert value == json.loads(text.split("\n", 1)[1])
    return 1


# --------------------------------------------------------------------------------------------------
# the check of one seed, and the recorder


@lru_cache(maxsize=1)
def expectations() -> dict[str, dict[str, Any]]:
    """``tests/fuzz/expected.json``: ``{"<target>/<seed file>": expectation}``."""
    return dict(json.loads(EXPECTED.read_text()))


def seed_files() -> list[tuple[str, Path]]:
    """Every seed file: ``(target, path)``."""
    return [
        (t, p)
        for t in TARGETS
        for p in sorted((CORPUS / t).iterdir())
        if (CORPUS / t).is_dir() and p.is_file()
    ]


def check_seed(target: str, path: Path) -> None:
    """Assert the seed decodes to what it holds (or is refused with the recorded error class), and
    that the fuzz target's own rule holds on it."""
    data = path.read_bytes()
    want = expectations()[f"{target}/{path.name}"]
    if want["outcome"] == "value":
        value = decode(target, data)  # any error fails the check
        assert summary(target, value) == want["summary"]
        assert digest(value) == want["digest"], f"{target}/{path.name} decodes to something else"
        check_independent_facts(target, data, value)
    else:
        import pytest

        with pytest.raises(StatelensError) as info:
            decode(target, data)
        assert type(info.value).__name__ == want["outcome"], info.value
    TARGETS[target](data)


_CUT_AVRO = ("CorruptFileError", "4 bytes that are no whole Avro row of the family")
#: Seeds built to be refused (their names' starts), with the error class their construction calls for:
#: only these may be recorded with an error class instead of a value, and only with that class.
BUILT_TO_BE_REFUSED = {
    "synthetic-bzip2-": ("UnsupportedVersionError", "a bzip2 zip entry, which Spark never writes"),
    "synthetic-lzma-": ("UnsupportedVersionError", "an lzma zip entry, which Spark never writes"),
    "unit-parent-path-": ("CorruptFileError", "a zip entry outside the folder"),
    "unit-symlink-": ("CorruptFileError", "a zip entry that is a link"),
    "synthetic-null_arrays-values-": ("UnsupportedVersionError", "Avro arrays of elements of no bytes"),
    "synthetic-unsupported-values-": ("UnsupportedVersionError", "a map and a decimal in an Avro row"),
    "synthetic-deep-values-": _CUT_AVRO,
    "synthetic-prefix_two-values-": _CUT_AVRO,
    "synthetic-range_all_columns-values-": _CUT_AVRO,
    "synthetic-range_every_type-values-": _CUT_AVRO,
    "synthetic-range_string-values-": _CUT_AVRO,
    "synthetic-rich_values-values-": _CUT_AVRO,
}


def built_to_be_refused(name: str) -> tuple[str, str] | None:
    """The error class a seed built to be refused must raise, and why (``None``: it must decode)."""
    return next((want for start, want in BUILT_TO_BE_REFUSED.items() if name.startswith(start)), None)


#: What :func:`check_independent_facts` reads each target's seeds with: the ``source`` of their records
#: ("independent-decode": the whole value read without statelens; "independent-facts": the fields named).
FACTS_SOURCE = {
    "codecs": "independent-decode:codec-libraries",
    "records": "independent-decode:record-walk",
    "changelog": "independent-decode:record-walk",
    "logs": "independent-facts:json",
    "opmeta": "independent-facts:json",
    "rocksdb_zip": "independent-facts:zipfile+json",
    "schemas": "independent-facts:schema-json",
}


class Unconfirmed(Exception):
    """No reading but statelens' own confirms what a seed decodes to: nothing is recorded for it."""


def _confirmed(target: str, data: bytes, value: Any) -> dict[str, Any]:
    """The expectation of a seed that decodes to ``value``, taken from a second reading of ``data``."""
    second: Any = None
    if target in independent.SOURCES:
        try:
            second = independent.read_seed(target, data)
        except independent.NotCovered:
            second = None
    if second is not None:
        if digest(second) != digest(value):
            raise Unconfirmed(f"decodes to {_plain(value)!r:.300}, read as {_plain(second)!r:.300}")
        return {
            "outcome": "value",
            "digest": digest(second),
            "summary": summary(target, second),
            "source": independent.SOURCES[target],
        }
    try:
        compared = check_independent_facts(target, data, value)
    except AssertionError as err:
        raise Unconfirmed(f"its facts read without statelens differ: {err}") from err
    if not compared:
        raise Unconfirmed("no reading but statelens' own")
    return {
        "outcome": "value",
        "digest": digest(value),
        "summary": summary(target, value),
        "source": FACTS_SOURCE[target],
    }


# --------------------------------------------------------------------------------------------------
# UnsafeRow seeds read by Spark: their rows are still in the cached checkpoints' deltas


def _unsaferow_origin(name: str) -> tuple[str, str, int, str, int] | None:
    """``(scenario, store folder, version, "key" | "value", record)`` of an UnsafeRow seed cut from a
    delta by ``build_corpus`` (``<scenario>-<store>-<version>.delta-<key|value><n>-<digest>``)."""
    from tests.fuzz.build_corpus import SCENARIOS

    match = re.fullmatch(r"(.+)-(\d+)\.delta-(key|value)(\d+)-[0-9a-f]{10}", name)
    if match is None:
        return None
    head, version, kind, n = match.groups()
    scenario = next((s for s in SCENARIOS if head.startswith(s + "-")), None)
    if scenario is None:
        return None
    return scenario, head[len(scenario) + 1 :], int(version), kind, int(n)


def spark_reading(spark: Any, target: str, path: Path, cache: dict[Any, Any] | None = None) -> Any:
    """What Spark's ``statestore`` source holds for the row of an UnsafeRow seed (the key, or the value
    of the record's key, in the batch that wrote the seed's delta), read by :mod:`tests.oracle`; a
    sentence saying why not when the seed is no row of a delta still in the cached checkpoint."""
    from tests import oracle
    from tests.spark_checkpoints import get_checkpoint

    origin = _unsaferow_origin(path.name) if target == "unsaferow" else None
    if origin is None:
        return "not an UnsafeRow seed cut from a delta"
    scenario, store, version, kind, n = origin
    root = get_checkpoint(scenario) / "checkpoint"
    part = root / "state" / "0" / "0" / ("" if store == "0" else store)
    delta = part / f"{version}.delta"
    if not delta.is_file():
        return f"{delta} is not in the cached checkpoint"
    raw = delta.read_bytes()
    unframe = next((fn for magic, fn in UNFRAME.items() if raw.startswith(magic)), None)
    records = walk_hdfs_records(unframe(raw) if unframe else raw)
    if n >= len(records):
        return f"{delta} has {len(records)} records"
    key_bytes, value_bytes = records[n]
    row = path.read_bytes()[2:]
    if row != (key_bytes if kind == "key" else value_bytes):
        return f"record {n} of {delta} is not the seed's row (the checkpoint was written anew)"
    # a put is in the state of the batch that wrote it, a removed key in the one before
    batch = version - 1 if value_bytes is not None else version - 2
    cache = {} if cache is None else cache
    store_name = "default" if store == "0" else store
    if (scenario, store, batch) not in cache:
        cache[scenario, store, batch] = oracle.read_state(spark, root, 0, store_name, batch_id=batch)
    key_schema = _embedded_structs((part / "_metadata" / "schema").read_bytes())[0]
    key = independent.unsafe_row(key_bytes, key_schema)
    found = [r for r in cache[scenario, store, batch] if r[0] == 0 and digest(r[1]) == digest(key)]
    if len(found) != 1:
        return f"Spark holds {len(found)} rows of that key in partition 0 of batch {batch}"
    return found[0][1] if kind == "key" else found[0][2]


def _by_spark(
    target: str, path: Path, value: Any, spark: Any, cache: dict[Any, Any]
) -> dict[str, Any] | None:
    """The expectation Spark's reading gives an UnsafeRow seed (``None``: Spark has no row for it)."""
    if spark is None or target != "unsaferow":
        return None
    held = spark_reading(spark, target, path, cache)
    if isinstance(held, str):
        return None
    if digest(held) != digest(value):
        raise Unconfirmed(f"decodes to {_plain(value)!r:.300}, Spark holds {_plain(held)!r:.300}")
    return {"outcome": "value", "digest": digest(held), "summary": summary(target, held), "source": SPARK}


#: The source of an expectation Spark's ``statestore`` source confirmed (:func:`spark_reading`).
SPARK = "spark-statestore"


def record(
    files: list[tuple[str, Path]], spark: Any = None, before: dict[str, dict[str, Any]] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The expectations of ``files`` and, apart, the seeds none can be recorded for (and why).

    A value is recorded only as a second reading found it: Spark's ``statestore`` source for the
    UnsafeRow seeds whose rows are still in the cached checkpoints (with ``spark``; without it, an
    expectation Spark confirmed in ``before`` keeps its source while its value is unchanged), else
    :mod:`tests.fuzz.independent`, else the facts of :func:`check_independent_facts` checked again at
    every test run. An error class only for a seed built to be refused, the one its construction calls
    for (:data:`BUILT_TO_BE_REFUSED`)."""
    recorded: dict[str, dict[str, Any]] = {}
    unconfirmed: dict[str, str] = {}
    cache: dict[Any, Any] = {}
    for target, path in files:
        key = f"{target}/{path.name}"
        data = path.read_bytes()
        refusal = built_to_be_refused(path.name)
        try:
            value = decode(target, data)
        except StatelensError as err:
            if refusal is not None and type(err).__name__ == refusal[0]:
                recorded[key] = {"outcome": refusal[0], "source": "built-to-be-refused"}
            else:
                unconfirmed[key] = f"refused with {type(err).__name__}: {err}"
            continue
        if refusal is not None:
            unconfirmed[key] = f"built to be refused ({refusal[1]}), but decodes"
            continue
        try:
            want = _confirmed(target, data, value)
            by_spark = _by_spark(target, path, value, spark, cache)
        except Unconfirmed as err:
            unconfirmed[key] = str(err)
            continue
        earlier = (before or {}).get(key, {})
        if by_spark is not None:
            want = by_spark
        elif spark is None and earlier.get("source") == SPARK and earlier.get("digest") == want["digest"]:
            want = {**want, "source": SPARK}
        recorded[key] = want
    return recorded, unconfirmed


def main(out: Path = EXPECTED, argv: list[str] | None = None) -> int:
    """Record every seed's expectation in ``out``; write nothing and return 1 if any is unconfirmed.

    ``--spark`` asks Spark's ``statestore`` source too (starts a JVM; reads the cached checkpoints)."""
    import argparse

    parser = argparse.ArgumentParser(
        description="Record what each fuzz seed holds (tests/fuzz/expected.json)."
    )
    parser.add_argument("--spark", action="store_true", help="confirm UnsafeRow seeds with Spark's reader")
    args = parser.parse_args([] if argv is None else argv)
    spark = None
    if args.spark:
        from tests.oracle import spark_session

        spark = spark_session()
    before = json.loads(out.read_text()) if out.is_file() else {}
    recorded, unconfirmed = record(seed_files(), spark, before)
    if unconfirmed:
        print(f"{out.name} not written: {len(unconfirmed)} seed(s) no second reading confirms:")
        for key, why in sorted(unconfirmed.items()):
            print(f"  {key}: {why}")
        return 1
    out.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    refused = sorted(k for k, v in recorded.items() if v["outcome"] != "value")
    sources: dict[str, int] = {}
    for want in recorded.values():
        sources[want["source"]] = sources.get(want["source"], 0) + 1
    print(f"{out.name}: {len(recorded)} seeds, {len(refused)} refused by design:")
    for key in refused:
        print(f"  {key}: {recorded[key]['outcome']}")
    for source, count in sorted(sources.items()):
        print(f"  {count:4d} {source}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(argv=sys.argv[1:]))

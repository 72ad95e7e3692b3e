"""The fuzz targets: one function per decoder, each taking arbitrary bytes.

The rule every target enforces: any input yields a value or a :class:`~readers.errors.StatelensError`.
Any other exception propagates, and the fuzzer (or :mod:`tests.test_fuzz`, which replays the committed
corpora and crash regressions through these same functions without atheris) reports it as a crash.
Hangs and unbounded allocation are caught by the fuzzer's ``-timeout`` and ``-rss_limit_mb`` (see
:mod:`tests.fuzz.run`).

Targets stay free of atheris so they can run anywhere; ``tests/fuzz/fuzz_<target>.py`` wrap them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from statelens.readers import logs, opmeta, schemas
from statelens.readers._format import codecs, records, rocksdb_store, unsaferow
from statelens.readers.errors import StatelensError

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"

#: Decompressed-size cap used while fuzzing codecs: the stated limit, small enough for ``-rss_limit_mb``.
FUZZ_MAX_OUTPUT_BYTES = 32 << 20

#: Codec names a file may be opened with (the offsets ``conf`` hint), chosen by the first byte.
_CODEC_HINTS: tuple[str | None, ...] = (
    None,
    "lz4",
    "zstd",
    "snappy",
    "lzf",
    "org.apache.spark.io.ZStdCompressionCodec",
    "brotli",
)


def _tolerate(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except StatelensError as err:
        str(err)  # messages must render (they format offsets, context and redact)
        err.to_json()
        return None


# --------------------------------------------------------------------------------------------------
# codecs


def target_codecs(data: bytes) -> None:
    """``readers._format.codecs.decompress``; the first byte picks the codec hint, the rest is the file."""
    if not data:
        return
    hint = _CODEC_HINTS[data[0] % len(_CODEC_HINTS)]
    body = data[1:]
    out = _tolerate(
        lambda: codecs.decompress(body, "fuzz/1.delta", hint, max_output_bytes=FUZZ_MAX_OUTPUT_BYTES)
    )
    if out is not None:
        assert isinstance(out, bytes)
        assert len(out) <= FUZZ_MAX_OUTPUT_BYTES
    codecs.sniff_codec(body)


# --------------------------------------------------------------------------------------------------
# record streams


def _walk(data: bytes, index: records.RecordIndex) -> None:
    n = len(data)
    for key, value in records.iter_records(data, index, aligned=True):
        assert len(key) <= n and (value is None or len(value) <= n)


def target_records(data: bytes) -> None:
    """``scan_records`` (delta and snapshot rules) and ``scan_changelog`` on the same bytes."""
    if not data:
        return
    mode = data[0]
    body = data[1:]
    limit = records.DEFAULT_MAX_RECORD_BYTES if mode & 0x80 else 64
    if mode & 1:
        got = _tolerate(lambda: records.scan_changelog(body, "fuzz/1.changelog", max_record_bytes=limit))
        if got is not None:
            version, lineage, index = got
            assert version in (1, 2, 3, 4)
            _walk(body, index)
    else:
        index = _tolerate(
            lambda: records.scan_records(
                body, "fuzz/1.delta", allow_removes=bool(mode & 2), max_record_bytes=limit
            )
        )
        if index is not None:
            assert index.eof_offset + 4 == len(body)
            _walk(body, index)


# --------------------------------------------------------------------------------------------------
# UnsafeRow


@lru_cache(maxsize=1)
def unsaferow_layouts() -> tuple[unsaferow.RowLayout, ...]:
    """Key and value layouts of the schemas in ``schemas.json`` (real files of generated checkpoints)."""
    entries = json.loads((HERE / "schemas.json").read_text())
    out = []
    for entry in entries:
        schema = schemas.struct_type_from_json(entry["json"])
        out.append(unsaferow.compile_layout(schema))
    return tuple(out)


def _same(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)


def target_unsaferow(data: bytes) -> None:
    """``decode_row`` and ``decode_rows`` on one row; both must agree (value or the same error class).

    Byte 0 picks the schema, byte 1 the split: the row is decoded alone, then as two rows (the row
    and a tail of it) through the columnar path.
    """
    if len(data) < 2:
        return
    layouts = unsaferow_layouts()
    layout = layouts[data[0] % len(layouts)]
    row = data[2:]
    one = _outcome(lambda: unsaferow.decode_row(row, 0, len(row), layout, path="fuzz/row", record=0))
    many = _outcome(lambda: unsaferow.decode_rows(row, [0], [len(row)], layout, path="fuzz/row", records=[0]))
    if isinstance(one, StatelensError) or isinstance(many, StatelensError):
        assert type(one) is type(many), f"decode_row gave {one!r}, decode_rows gave {many!r}"
    else:
        assert _same([one], many), f"decode_row gave {one!r}, decode_rows gave {many!r}"
    cut = data[1] % (len(row) + 1)
    pair = _outcome(lambda: unsaferow.decode_rows(row, [0, cut], [len(row), len(row) - cut], layout))
    if not isinstance(pair, StatelensError):
        assert len(pair) == 2


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except StatelensError as err:
        str(err)
        return err


# --------------------------------------------------------------------------------------------------
# schema files


def target_schemas(data: bytes) -> None:
    """Every schema file reader: ``parse_schema_v3_entries`` (v1, v2, v3), ``parse_schema_file``, ``parse_schema_v3``."""
    entries = _tolerate(lambda: schemas.parse_schema_v3_entries(data, "fuzz/schema"))
    _tolerate(lambda: schemas.parse_schema_file(data, "fuzz/schema"))
    _tolerate(lambda: schemas.parse_schema_v3(data, "fuzz/schema"))
    for family in entries or ():
        # a parsed schema must compile (or be refused with a typed error) for the row decoder
        _tolerate(lambda f=family: unsaferow.compile_layout(f.schema.key_schema))
        _tolerate(lambda f=family: unsaferow.compile_layout(f.schema.value_schema))


# --------------------------------------------------------------------------------------------------
# text logs


def _offsets(body: bytes) -> None:
    entry = _tolerate(lambda: logs.parse_offsets(body, "fuzz/offsets/0", 0))
    if entry is None:
        return
    logs.effective_conf([entry])
    for source in entry.sources:
        if source.source_kind == "kafka":
            _tolerate(lambda s=source: logs.kafka_partition_offsets(s.parsed, entry.path))
            _tolerate(lambda s=source: logs.kafka_record_counts(s.parsed, s.parsed, entry.path))


def _kafka_initial(body: bytes) -> None:
    parsed = _tolerate(lambda: logs.parse_kafka_initial_offsets(body, "fuzz/sources/0/0"))
    if parsed is not None:
        _tolerate(lambda: logs.kafka_record_counts(parsed, parsed))


_LOG_PARSERS: tuple[Callable[[bytes], Any], ...] = (
    _offsets,
    lambda body: logs.parse_commit(body, "fuzz/commits/0", 0),
    lambda body: logs.parse_metadata_fields(body, "fuzz/metadata"),
    lambda body: logs.parse_file_source_log(body, "fuzz/sources/0/0"),
    _kafka_initial,
)


def target_logs(data: bytes) -> None:
    """``metadata``, ``offsets/``, ``commits/`` and ``sources/`` parsers; the first byte picks one."""
    if not data:
        return
    parser = _LOG_PARSERS[data[0] % len(_LOG_PARSERS)]
    body = data[1:]
    _tolerate(lambda: parser(body))
    text = body[:40].decode("latin-1")
    logs.batch_id_from_name(text)


# --------------------------------------------------------------------------------------------------
# operator metadata


def target_opmeta(data: bytes) -> None:
    """``parse_operator_metadata`` (v1, v2), then resolve every schema file URI it names."""
    meta = _tolerate(lambda: opmeta.parse_operator_metadata(data, "fuzz/state/0/_metadata/metadata"))
    if meta is None:
        return
    for store in meta.stores:
        for uri in store.state_schema_file_paths:
            _tolerate(lambda s=store, u=uri: opmeta.schema_file_relpath(meta.operator_id, s.store_name, u))


# --------------------------------------------------------------------------------------------------
# RocksDB zips and changelogs

#: Zip caps used while fuzzing: the stated limits of :class:`~readers._format.rocksdb_store.ZipLimits`, scaled
#: down so that what they let through fits ``-rss_limit_mb`` many times over.
FUZZ_ZIP_LIMITS = rocksdb_store.ZipLimits(
    max_zip_bytes=1 << 20,
    max_entries=64,
    max_entry_bytes=4 << 20,
    max_total_bytes=16 << 20,
    max_metadata_bytes=1 << 20,
)


def _check_zip_metadata(meta: rocksdb_store.ZipMetadata) -> None:
    for local, dfs, size in (*meta.sst_files, *meta.log_files):
        assert isinstance(local, str) and isinstance(dfs, str) and isinstance(size, int)
        assert "/" not in local and "/" not in dfs and local not in (".", "..") and dfs not in (".", "..")
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in meta.column_family_mapping.items())
    assert meta.num_keys is None or isinstance(meta.num_keys, int)


def target_rocksdb_zip(data: bytes) -> None:
    """``read_zip`` (with :data:`FUZZ_ZIP_LIMITS`), then ``parse_zip_metadata`` of its ``metadata`` entry.

    The first byte picks the input: even, the rest is a ``<v>.zip``; odd, the rest is the ``metadata``
    entry alone (so the fuzzer need not get a zip's CRC-32 right to reach the JSON).
    """
    if not data:
        return
    body = data[1:]
    path = "fuzz/state/0/0/1.zip"
    if data[0] & 1:
        meta = _tolerate(lambda: rocksdb_store.parse_zip_metadata(body, path))
        if meta is not None:
            _check_zip_metadata(meta)
        return
    entries = _tolerate(lambda: rocksdb_store.read_zip(body, path, FUZZ_ZIP_LIMITS))
    if entries is None:
        return
    limits = FUZZ_ZIP_LIMITS
    assert len(entries) <= limits.max_entries
    assert sum(len(v) for v in entries.values()) <= limits.max_total_bytes
    for name, value in entries.items():
        assert "/" not in name and "\\" not in name and name not in (".", ".."), name
        cap = limits.max_metadata_bytes if name == "metadata" else limits.max_entry_bytes
        assert len(value) <= cap
    if "metadata" in entries:
        meta = _tolerate(lambda: rocksdb_store.parse_zip_metadata(entries["metadata"], path))
        if meta is not None:
            _check_zip_metadata(meta)


def target_changelog(data: bytes) -> None:
    """``scan_changelog`` (v1-v4) on a decompressed changelog, then the RocksDB reader's row checks.

    Byte 0: bit 7 set uses the default record-size limit (else 64 bytes), bit 1 the row-checksum
    value layout (8 checksum bytes before the version byte). Format v1/v3 records go through the
    version-byte check of :class:`~readers._format.rocksdb_store.RocksDBStoreReader`.
    """
    if not data:
        return
    mode = data[0]
    body = data[1:]
    path = "fuzz/state/0/0/2.changelog"
    limit = records.DEFAULT_MAX_RECORD_BYTES if mode & 0x80 else 64
    got = _tolerate(lambda: records.scan_changelog(body, path, max_record_bytes=limit))
    if got is None:
        return
    version, lineage, index = got
    assert version in (1, 2, 3, 4)
    assert (lineage is not None) == (version in (3, 4))
    kinds = set(index.kind.tolist())
    assert kinds <= {records.KIND_PUT, records.KIND_REMOVE, records.KIND_MERGE}, kinds
    removes = index.kind == records.KIND_REMOVE
    assert bool(((index.val_len < 0) == removes).all())
    _walk(body, index)
    if version in (1, 3):
        check = rocksdb_store.RocksDBStoreReader._check_version_bytes
        skip = 9 if mode & 2 else 1
        put = index.val_len >= 0
        _tolerate(lambda: check(body, index.key_start, index.key_len, path, "key", 1))
        _tolerate(lambda: check(body, index.val_start[put], index.val_len[put], path, "value", skip))


# --------------------------------------------------------------------------------------------------
# column family keys and values (every key encoder, UnsafeRow and Avro), row checksums

#: Items one input carries at most (keys, values, operands).
_MAX_ITEMS = 16


def _flagged_pairs(items: list[bytes], flags: int) -> tuple[list[bytes], list[bytes | None]]:
    """Up to 8 records from ``items``: a key, then its value unless bit ``n`` of ``flags`` marks record
    ``n`` a remove (or no item is left for a value)."""
    keys: list[bytes] = []
    values: list[bytes | None] = []
    pos = 0
    for n in range(8):
        if pos >= len(items):
            break
        keys.append(items[pos])
        remove = bool(flags >> n & 1) or pos + 1 >= len(items)
        values.append(None if remove else items[pos + 1])
        pos += 1 if remove else 2
    return keys, values


def _split_items(body: bytes) -> list[bytes]:
    """``len:u8`` + bytes, repeated (a length past the end takes the rest): the harnesses' item framing."""
    items: list[bytes] = []
    pos = 0
    while pos < len(body) and len(items) < _MAX_ITEMS:
        size = body[pos]
        items.append(body[pos + 1 : pos + 1 + size])
        pos += 1 + size
    return items


@lru_cache(maxsize=1)
def cf_families() -> tuple[Any, ...]:
    """The column families of ``cf_families.json``: real ones of generated checkpoints (tws, timers, TTL,
    join format 4) and synthetic ones (every range-scan type, Avro-only types), as ``ColumnFamily``."""
    from statelens.readers.model import StoreSchema

    out = []
    for entry in json.loads((HERE / "cf_families.json").read_text()):
        schema = StoreSchema.from_types(
            key_schema=schemas.struct_type_from_json(entry["key_schema"]),
            value_schema=schemas.struct_type_from_json(entry["value_schema"]),
            schema_version=3,
            path="fuzz/schema",
            key_encoder=entry["key_encoder"],
        )
        out.append(rocksdb_store.ColumnFamily(entry["name"], schema, entry["variable_type"]))
    return tuple(out)


def _with_spec(family: Any, spec_text: bytes) -> Any:
    """``family`` with the key encoder spec ``spec_text``, if ``parse_schema_v3`` would accept it."""
    import dataclasses

    try:
        spec = json.loads(spec_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("keyStateEncoderType"), str):
        return None  # refused by parse_schema_v3 with a CorruptFileError
    schema = dataclasses.replace(family.schema, key_encoder=spec)
    return rocksdb_store.ColumnFamily(family.name, schema, family.variable_type)


def target_cf_rows(data: bytes) -> None:
    """``cf_store.decode_keys`` / ``decode_values`` (hence ``avro_rows.decode_avro``) and ``split_list_value``.

    Byte 0 picks the column family (its schemas and key encoder), byte 1 the operation (bits 0-1: keys,
    values, list values, keys under a key encoder spec given as the first item) and bit 2 Avro rows; the
    rest is items, each ``len:u8`` + bytes: keys without their column family id, values as stored.
    """
    from statelens.readers._format import cf_store

    if len(data) < 2:
        return
    families = cf_families()
    family = families[data[0] % len(families)]
    op, avro = data[1] & 3, bool(data[1] & 4)
    items = _split_items(data[2:])
    path = "fuzz/state/0/0/2.changelog"
    if op == 3:
        if not items:
            return
        family = _with_spec(family, items[0])
        items = items[1:]
        if family is None:
            return
    if op in (0, 3):
        keys = _tolerate(lambda: cf_store.decode_keys(family, items, path, avro))
        if keys is not None:
            width = len(family.schema.key_schema.fields)
            assert len(keys) == len(items) and all(len(k) == width for k in keys), keys
            _tolerate(lambda: rocksdb_store.RocksDBColumnFamilyReader._is_map(family))
        return
    if op == 1:
        rows = _tolerate(lambda: [cf_store.strip_version(v, path) for v in items])
    else:
        rows = _tolerate(lambda: [row for v in items for row in rocksdb_store.split_list_value(v, path)])
    if rows is None:
        return
    values = _tolerate(lambda: cf_store.decode_values(rows, family.schema.value_schema, path, avro))
    if values is not None:
        width = len(family.schema.value_schema.fields)
        assert len(values) == len(rows) and all(len(v) == width for v in values), values


def _checked_operand(key: bytes, body: bytes) -> bytes:
    from crc32c import crc32c

    return struct.pack("<Ii", crc32c(body, crc32c(key)), len(body)) + body


def target_row_checksums(data: bytes) -> None:
    """``rowchecksum.strip_*`` and ``rocksdb_store.split_checked_operands`` / ``split_list_value``.

    Byte 0 picks the operation: 0 ``strip_hdfs`` (byte 1: bit ``i`` makes record ``i`` a remove, which
    takes one item, a put two), 1 ``strip_rocksdb_value(key, value)``, 2 ``strip_rocksdb_removed_key``,
    3 ``split_checked_operands(key, value)`` then ``split_list_value`` of each operand (a snapshot's list
    value), 4 the same on operands built with correct CRCs (byte 1: bit ``i`` puts a ``,`` before
    operand ``i + 1``), which must come back unchanged, 5 ``split_list_value``, 6 ``split_list_value``
    of a list value built from the items (byte 1: delimiters), which must split. The rest is items
    (``len:u8`` + bytes).
    """
    from statelens.readers._format import rowchecksum

    if not data:
        return
    op = data[0] % 7
    flags = data[1] if op in (0, 4, 6) and len(data) > 1 else 0
    items = _split_items(data[2:] if op in (0, 4, 6) else data[1:])
    path = "fuzz/state/0/0/2.changelog"
    if op == 0:
        keys, values = _flagged_pairs(items, flags)
        got = _tolerate(lambda: rowchecksum.strip_hdfs(keys, values, path))
        if got is not None:
            assert len(got[0]) == len(keys) and [v is None for v in got[1]] == [v is None for v in values]
        return
    if op in (1, 2, 3, 5) and len(items) < (1 if op in (2, 5) else 2):
        return
    if op == 1:
        body = _tolerate(lambda: rowchecksum.strip_rocksdb_value(items[0], items[1], path, 0))
        assert body is None or body == items[1][rowchecksum.ROCKSDB_VALUE_HEADER :]
    elif op == 2:
        key = _tolerate(lambda: rowchecksum.strip_rocksdb_removed_key(items[0], path, 0))
        assert key is None or key == items[0][4:]
    elif op == 3:
        operands = _tolerate(lambda: rocksdb_store.split_checked_operands(items[0], items[1], path, 0))
        for operand in operands or ():
            _tolerate(lambda o=operand: rocksdb_store.split_list_value(o, path))
    elif op == 4:
        if len(items) < 2:
            return
        key, bodies = items[0], items[1:]
        value = b"".join(
            (b"," if n and flags >> (n - 1) & 1 else b"") + _checked_operand(key, body)
            for n, body in enumerate(bodies)
        )
        got = rocksdb_store.split_checked_operands(key, value, path, 0)
        assert got == bodies, (got, bodies)
    elif op == 5:
        elements = _tolerate(lambda: rocksdb_store.split_list_value(items[0], path))
        if elements is not None:
            assert elements and sum(len(e) + 5 for e in elements) <= len(items[0])
    else:
        if not items:
            return
        value = b"".join(
            (b"," if n and flags >> (n - 1) & 1 else b"") + struct.pack("<i", len(row) + 1) + b"\x00" + row
            for n, row in enumerate(items)
        )
        elements = rocksdb_store.split_list_value(value, path)
        assert elements and sum(len(e) + 5 for e in elements) <= len(value)


#: Target name -> function; the corpus of each is ``tests/fuzz/corpus/<name>/``.
TARGETS: dict[str, Callable[[bytes], None]] = {
    "codecs": target_codecs,
    "records": target_records,
    "unsaferow": target_unsaferow,
    "schemas": target_schemas,
    "logs": target_logs,
    "opmeta": target_opmeta,
    "rocksdb_zip": target_rocksdb_zip,
    "changelog": target_changelog,
    "cf_rows": target_cf_rows,
    "row_checksums": target_row_checksums,
}


def check_value_or_typed_error(target: str, data: bytes) -> None:
    """Run ``target`` on ``data``: its checks of what came back hold, and it ends with a value or a
    :class:`~readers.errors.StatelensError` (the targets return ``None`` for those); anything else
    fails the calling test, named with the target."""
    try:
        TARGETS[target](data)
    except Exception as err:  # noqa: BLE001 - any other error is the finding
        import pytest

        pytest.fail(f"{target}: {type(err).__name__} escaped the decoders: {err}")

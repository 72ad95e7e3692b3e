"""Build the seed corpora ``tests/fuzz/corpus/<target>/`` from real files (run on demand, then commit).

Seeds come from the checkpoints PySpark generates for the tests (``tests/spark_checkpoints.py``,
generated on first use, which needs a JVM) and from the real bytes the unit tests keep (RocksDB
changelogs, v3 schema files and v2 operator metadata that no generated checkpoint here has)::

    python -m tests.fuzz.build_corpus                                  # every target
    python -m tests.fuzz.build_corpus --targets rocksdb_zip,changelog  # only these corpora are rewritten
    python -m tests.fuzz.build_corpus --targets cf_rows,row_checksums  # and cf_families.json

Each seed file is named ``<scenario>-<what>`` and starts with the target's selector byte where the
target has one (see :mod:`tests.fuzz.targets`). ``schemas.json`` (the UnsafeRow target's schemas) is
written from the same checkpoints, ``cf_families.json`` (the column families of the ``cf_rows`` target)
from the column family scenarios plus synthetic families. Files are kept small (at most ``MAX_SEED`` bytes).
After a rebuild, record what each seed holds (``tests/fuzz/expected.json``, see :mod:`tests.fuzz.seeds`;
``--spark`` lets Spark's reader confirm the UnsafeRow seeds) and review its diff::

    python -m tests.fuzz.seeds --spark
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import struct
import zipfile

from tests.fuzz.targets import CORPUS, HERE

MAX_SEED = 4096
SCENARIOS = (
    "agg_count",
    "codec_zstd",
    "codec_snappy",
    "codec_lzf",
    "dedup_watermark",
    "join",
    "pandas_state_event",
    "rich_types",
    "window_agg_watermark",
    "agg_many_partitions",
)
_HINT_BYTE = {"lz4": 1, "zstd": 2, "snappy": 3, "lzf": 4}
#: RocksDB scenarios: zips (with and without changelog checkpointing, checkpoint format v2, column
#: families) and changelogs of formats v1 (plain), v2 (transformWithState), v3 (lineage).
ROCKS_SCENARIOS = (
    "rocks_agg",
    "rocks_agg_changelog",
    "rocks_ckpt_v2",
    "rocks_dedup_changelog",
    "rocks_join",
    "rocks_pandas_state",
    "rocks_tws",
)
#: Scenarios whose smallest zip is also kept whole (3.8 KB each; the others only slimmed down).
FULL_ZIP_SCENARIOS = ("rocks_agg", "rocks_ckpt_v2", "rocks_tws")

#: Not from a checkpoint: nested arrays let one row fan out to many values (amplification).
SYNTHETIC_SCHEMAS = {
    "synthetic_nested": {
        "type": "struct",
        "fields": [
            {
                "name": "a",
                "type": {
                    "type": "array",
                    "elementType": {"type": "array", "elementType": "string", "containsNull": True},
                    "containsNull": True,
                },
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": {"type": "array", "elementType": "binary", "containsNull": True},
                    "valueContainsNull": True,
                },
                "nullable": True,
                "metadata": {},
            },
        ],
    }
}


class _Corpus:
    def __init__(self) -> None:
        self.seeds: dict[str, dict[str, bytes]] = {}

    def add(self, target: str, name: str, data: bytes) -> None:
        if len(data) > MAX_SEED:
            return
        by_target = self.seeds.setdefault(target, {})
        digest = hashlib.sha1(data).hexdigest()[:10]
        if any(hashlib.sha1(d).hexdigest()[:10] == digest for d in by_target.values()):
            return
        by_target[f"{name}-{digest}"] = data

    def write(self, targets: set[str] | None = None) -> None:
        for target, seeds in self.seeds.items():
            if targets is not None and target not in targets:
                continue
            folder = CORPUS / target
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for name, data in sorted(seeds.items()):
                (folder / name).write_bytes(data)
            print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")


def _checkpoint_seeds(corpus: _Corpus) -> list[dict[str, str]]:
    from statelens.readers._format.codecs import decompress, sniff_codec
    from statelens.readers._format.records import iter_records, scan_records
    from statelens.readers.schemas import parse_schema_file
    from tests.spark_checkpoints import get_checkpoint

    schema_entries: list[dict[str, str]] = []
    schema_index: dict[str, int] = {}
    for scenario in SCENARIOS:
        root = get_checkpoint(scenario) / "checkpoint"
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".crc"))
        for p in files:
            rel = p.relative_to(root).as_posix()
            data = p.read_bytes()
            tag = f"{scenario}-{rel.replace('/', '_')}"
            if rel.split("/")[0] in ("offsets", "commits", "sources") and p.name not in ("0", "1"):
                continue  # later batches look like the first two
            if rel == "metadata":
                corpus.add("logs", tag, bytes([2]) + data)
            elif rel.startswith("offsets/"):
                corpus.add("logs", tag, bytes([0]) + data)
            elif rel.startswith("commits/"):
                corpus.add("logs", tag, bytes([1]) + data)
            elif rel.startswith("sources/"):
                corpus.add("logs", tag, bytes([3]) + data)
            elif rel.endswith("_metadata/metadata"):
                corpus.add("opmeta", tag, data)
            elif rel.endswith("_metadata/schema"):
                corpus.add("schemas", tag, data)
        # state files: codec framing, record streams, rows (a few per store, smallest first)
        for schema_path in sorted(root.glob("state/*/0/**/_metadata/schema")):
            store_dir = schema_path.parent.parent
            schema = parse_schema_file(schema_path.read_bytes(), str(schema_path))
            layout_ids = []
            for part in ("key", "value"):
                st = schema.key_schema if part == "key" else schema.value_schema
                text = st.json()
                if text not in schema_index:
                    schema_index[text] = len(schema_entries)
                    schema_entries.append({"name": f"{scenario}-{store_dir.name}-{part}", "json": text})
                layout_ids.append(schema_index[text])
            state_files = sorted(
                (p for p in store_dir.iterdir() if p.suffix in (".delta", ".snapshot")),
                key=lambda p: p.stat().st_size,
            )
            for sf in state_files[:3]:
                raw = sf.read_bytes()
                codec = sniff_codec(raw) or "lz4"
                tag = f"{scenario}-{store_dir.name}-{sf.name}"
                corpus.add("codecs", tag, bytes([_HINT_BYTE[codec]]) + raw)
                plain = decompress(raw, str(sf))
                delta = sf.suffix == ".delta"
                corpus.add("records", tag, bytes([0x82 if delta else 0x80]) + plain)
                idx = scan_records(plain, str(sf), allow_removes=delta)
                for n, (key, value) in enumerate(iter_records(plain, idx, aligned=True)):
                    if n >= 2:
                        break
                    corpus.add("unsaferow", f"{tag}-key{n}", bytes([layout_ids[0], 0]) + key)
                    if value is not None:
                        corpus.add("unsaferow", f"{tag}-value{n}", bytes([layout_ids[1], 0]) + value)
    for name, schema_json in SYNTHETIC_SCHEMAS.items():
        schema_entries.append({"name": name, "json": json.dumps(schema_json, separators=(",", ":"))})
    return schema_entries


def _repacked(entries: dict[str, bytes], compression: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries.items():
            zf.writestr(zipfile.ZipInfo(name), data, compression)  # fixed time stamp: reproducible seeds
    return buf.getvalue()


def _rocksdb_seeds(corpus: _Corpus) -> None:
    """Zips (byte 0 even), their ``metadata`` entries (odd) and decompressed changelogs (``0x80``)."""
    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.rocksdb_store import read_zip, sniff_rocksdb_file_name
    from tests.fuzz.targets import FUZZ_ZIP_LIMITS
    from tests.spark_checkpoints import get_checkpoint

    for scenario in ROCKS_SCENARIOS:
        root = get_checkpoint(scenario) / "checkpoint"
        # the first store of the first operator, partition 0 (other stores' files look alike)
        part_dir = next(
            p.parent for p in sorted(root.glob("state/*/0/**/*")) if sniff_rocksdb_file_name(p.name)
        )
        files = [p for p in part_dir.iterdir() if p.is_file() and sniff_rocksdb_file_name(p.name)]
        tag = f"{scenario}-{part_dir.relative_to(root).as_posix().replace('/', '_')}"
        zips = sorted((p for p in files if p.suffix == ".zip"), key=lambda p: p.stat().st_size)
        for n, z in enumerate(zips[:2]):
            data = z.read_bytes()
            entries = read_zip(data, str(z), FUZZ_ZIP_LIMITS)
            corpus.add("rocksdb_zip", f"{tag}-{z.name}-metadata", bytes([1]) + entries["metadata"])
            if n:
                continue
            if scenario in FULL_ZIP_SCENARIOS:
                corpus.add("rocksdb_zip", f"{tag}-{z.name}", bytes([0]) + data)
            # The same entries without the 7.6 KB OPTIONS file: a smaller seed of the same structure.
            slim = {k: v for k, v in entries.items() if not k.startswith("OPTIONS")}
            corpus.add(
                "rocksdb_zip", f"{tag}-{z.name}-slim", bytes([0]) + _repacked(slim, zipfile.ZIP_DEFLATED)
            )
        changelogs = sorted((p for p in files if p.suffix == ".changelog"), key=lambda p: p.stat().st_size)
        plain = [(p, decompress(p.read_bytes(), str(p))) for p in changelogs]
        useful = [(p, d) for p, d in plain if len(d) > 8]  # records, not just an end marker
        for p, d in useful[:1] + useful[-1:]:  # the smallest and the largest
            corpus.add("changelog", f"{tag}-{p.name}", bytes([0x80]) + d)
    # Other compression methods a zip may declare (zipfile reads them: their own error types).
    small = {"CURRENT": b"MANIFEST-000005\n", "metadata": b'v1\n{"sstFiles":[],"numKeys":0}'}
    for method, name in (
        (zipfile.ZIP_STORED, "stored"),
        (zipfile.ZIP_BZIP2, "bzip2"),
        (zipfile.ZIP_LZMA, "lzma"),
    ):
        corpus.add("rocksdb_zip", f"synthetic-{name}", bytes([0]) + _repacked(small, method))


def _unit_test_seeds(corpus: _Corpus) -> None:
    from tests import test_logs, test_opmeta, test_records, test_rocksdb_store, test_schemas

    for name in (
        "CHANGELOG_V1",
        "CHANGELOG_V2",
        "CHANGELOG_V3",
        "CHANGELOG_V4",
        "CHANGELOG_V2_EMPTY",
        "CHANGELOG_V3_EMPTY",
    ):
        corpus.add("records", f"unit-{name.lower()}", bytes([0x81]) + getattr(test_records, name))
        corpus.add("changelog", f"unit-{name.lower()}", bytes([0x80]) + getattr(test_records, name))
    corpus.add("changelog", "unit-changelog_v1-row-checksums", bytes([0x82]) + test_records.CHANGELOG_V1)
    # the archives the archive-safety tests craft: a parent path, a link
    zip_bytes = test_rocksdb_store._zip_bytes
    corpus.add("rocksdb_zip", "unit-parent-path", bytes([0]) + zip_bytes({"../evil": b"x"}))
    corpus.add(
        "rocksdb_zip", "unit-symlink", bytes([0]) + zip_bytes({"CURRENT": b"/etc/passwd"}, symlink="CURRENT")
    )
    for name in ("REAL_SCHEMA_V3_TWS", "REAL_SCHEMA_V3_JOIN_V4", "REAL_SCHEMA_V2_SURROGATES"):
        corpus.add("schemas", f"unit-{name.lower()}", getattr(test_schemas, name))
    for name, data in test_opmeta.REAL.items():
        corpus.add("opmeta", f"unit-{name}", data)
    corpus.add("opmeta", "unit-spec_v2_400", test_opmeta.SPEC_V2_400)
    corpus.add("logs", "unit-offsets_v2", bytes([0]) + test_logs.REAL_OFFSETS_V2_430)
    kafka = b"\x00v1\n" + test_logs.SPEC_KAFKA_OFFSET.encode()
    corpus.add("logs", "unit-kafka_initial", bytes([4]) + kafka)
    kafka_offsets = (
        b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n' + test_logs.SPEC_KAFKA_OFFSET.encode()
    )
    corpus.add("logs", "unit-offsets_kafka", bytes([0]) + kafka_offsets)


# --------------------------------------------------------------------------------------------------
# column family keys and values, Avro rows, row checksums


#: Column family stores (transformWithState, join state format 4; UnsafeRow, Avro, row checksums) and
#: the HDFS store with row checksums.
CF_SCENARIOS = (
    "rocks_tws_timers",
    "rocks_tws_timers_avro",
    "rocks_tws_avro",
    "rocks_tws_checksum",
    "rocks_join_v4",
)
CHECKSUM_HDFS_SCENARIO = "checksum_window"


def _field(name: str, data_type: object, nullable: bool = True) -> dict[str, object]:
    return {"name": name, "type": data_type, "nullable": nullable, "metadata": {}}


def _struct(*fields: dict[str, object]) -> dict[str, object]:
    return {"type": "struct", "fields": list(fields)}


def _array(element: object, contains_null: bool = True) -> dict[str, object]:
    return {"type": "array", "elementType": element, "containsNull": contains_null}


_ORDERED = _struct(
    _field("b", "byte"),
    _field("s", "short"),
    _field("i", "integer"),
    _field("l", "long"),
    _field("f", "float"),
    _field("d", "double"),
    _field("t", "timestamp"),
    _field("k", "string"),
)
_RICH = _struct(
    _field("b", "boolean"),
    _field("i", "integer"),
    _field("l", "long", False),
    _field("f", "float"),
    _field("d", "double"),
    _field("s", "string"),
    _field("bin", "binary"),
    _field("dt", "date"),
    _field("ts", "timestamp"),
    _field("ntz", "timestamp_ntz"),
    _field("n", "null"),
    _field("a", _array(_struct(_field("x", "integer", False), _field("y", _array("string", False))))),
    _field("st", _struct(_field("p", "string", False), _field("q", _array(_array("binary"))))),
)


def _deep(levels: int) -> dict[str, object]:
    schema: object = "string"
    for _ in range(levels):
        schema = _struct(_field("x", schema))
    return _struct(_field("v", schema))


#: Families no generated checkpoint has: every range-scan ordering type (several ordinals, out of
#: order), a two-column prefix, values of every type Avro rows support, arrays whose elements take no
#: bytes (Avro amplification), types Avro rows do not support, deep nesting.
SYNTHETIC_FAMILIES = (
    (
        "range_every_type",
        _ORDERED,
        _struct(_field("v", "long")),
        {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "orderingOrdinals": [5, 0, 1, 2, 3, 4, 6]},
    ),
    (
        "range_all_columns",
        _struct(_field("d", "double"), _field("f", "float")),
        _struct(_field("n", "null")),
        {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "orderingOrdinals": [0, 1]},
    ),
    (
        "range_string",
        _ORDERED,
        _struct(_field("n", "null")),
        {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "orderingOrdinals": [7]},
    ),
    (
        "prefix_two",
        _ORDERED,
        _RICH,
        {"keyStateEncoderType": "PrefixKeyScanStateEncoderSpec", "numColsPrefixKey": 2},
    ),
    (
        "rich_values",
        _struct(_field("k", "string")),
        _RICH,
        {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"},
    ),
    (
        "null_arrays",
        _struct(_field("k", "string")),
        _struct(_field("a", _array("null", False)), _field("b", _array(_struct(_field("n", "null")), False))),
        {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"},
    ),
    (
        "unsupported",
        _struct(_field("k", "string")),
        _struct(
            _field("m", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}),
            _field("dec", "decimal(10,2)"),
        ),
        {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"},
    ),
    (
        "deep",
        _struct(_field("k", "string")),
        _deep(60),
        {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"},
    ),
)


def _items(*items: bytes) -> bytes:
    """The harnesses' item framing: each item is ``len:u8`` + bytes (the last may run to the end)."""
    out = b""
    for n, item in enumerate(items):
        if len(item) > 255 and n == len(items) - 1:
            return out + b"\xff" + item
        out += bytes([min(len(item), 255)]) + item[:255]
    return out


def _list_value(rows: list[bytes], delimiter: bytes) -> bytes:
    return delimiter.join(struct.pack("<i", len(r) + 1) + b"\x00" + r for r in rows)


def _cf_seeds(corpus: _Corpus) -> None:
    """``cf_rows`` seeds (keys, values, list values of every family, Avro and UnsafeRow) and
    ``row_checksums`` seeds (checksummed RocksDB values, removed keys, merged operands, HDFS records),
    and ``cf_families.json`` (the families' schemas and key encoder specs)."""
    from statelens.readers._format.codecs import decompress
    from statelens.readers._format.records import iter_records, scan_changelog, scan_records
    from statelens.readers.checkpoint import open_checkpoint
    from tests.spark_checkpoints import get_checkpoint

    families: list[dict[str, object]] = []
    index: dict[str, int] = {}

    def family_id(name: str, key: str, value: str, spec: object, variable_type: object) -> int:
        ident = json.dumps([key, value, spec, variable_type], sort_keys=True)
        if ident not in index:
            index[ident] = len(families)
            families.append(
                {
                    "name": name,
                    "key_schema": key,
                    "value_schema": value,
                    "key_encoder": spec,
                    "variable_type": variable_type,
                }
            )
        return index[ident]

    for scenario in CF_SCENARIOS:
        cp = open_checkpoint(str(get_checkpoint(scenario) / "checkpoint"))
        op = cp.operators[0]
        for store in [s.store_name for s in op.stores][:1]:
            reader = cp.column_family_reader(op.operator_id, store)
            avro = 4 if reader.avro else 0
            pid = reader.partition_ids()[0]
            ids = reader.column_family_ids(pid)
            state = reader.read_raw(pid, max(reader.versions(pid)))
            for name, family in reader.families.items():
                fid = family_id(
                    name,
                    family.schema.key_schema.json(),
                    family.schema.value_schema.json(),
                    family.schema.key_encoder,
                    family.variable_type,
                )
                prefix = struct.pack("<H", ids[name]) if name in ids else None
                entries = [(k[2:], v) for k, v in state.items() if prefix is not None and k[:2] == prefix][:3]
                tag = f"{scenario}-{name.replace('$', '')}"
                if not entries:
                    continue
                keys = [k for k, _ in entries]
                corpus.add("cf_rows", f"{tag}-keys", bytes([fid, 0 | avro]) + _items(*keys))
                spec = json.dumps(family.schema.key_encoder).encode()
                corpus.add("cf_rows", f"{tag}-spec-keys", bytes([fid, 3 | avro]) + _items(spec, *keys))
                if family.multi_value:
                    for delimiter in (b"", b","):
                        values = [_list_value(v, delimiter) for _, v in entries]
                        corpus.add("cf_rows", f"{tag}-lists", bytes([fid, 2 | avro]) + _items(*values))
                else:
                    corpus.add(
                        "cf_rows", f"{tag}-values", bytes([fid, 1 | avro]) + _items(*[v for _, v in entries])
                    )
            if not reader.row_checksum:
                continue
            # values and removed keys as stored: changelog records and the zip's SST entries
            pf = reader.files._partition(pid)
            for version in sorted(pf.deltas)[:3]:
                sf = pf.deltas[version]
                data = decompress(reader.files.fs.read_bytes(sf.path), sf.path, reader.files.codec)
                _fmt, _lineage, idx = scan_changelog(data, sf.path)
                for n, (key, value) in enumerate(iter_records(data, idx, aligned=False)):
                    if n >= 6:
                        break
                    if value is None:
                        corpus.add(
                            "row_checksums", f"{scenario}-{version}-removed-key", bytes([2]) + _items(key)
                        )
                    else:
                        corpus.add(
                            "row_checksums", f"{scenario}-{version}-value", bytes([1]) + _items(key, value)
                        )
            with reader.files.workspace() as ws:
                items = list(reader.files._zip_items(ws, pid, max(pf.snapshots), False, column_families=True))
            multi = reader._multi_value_prefixes(pid)
            for key, value in items[:12]:
                op_code = 3 if key[:2] in multi else 1
                corpus.add(
                    "row_checksums",
                    f"{scenario}-zip-{'operands' if op_code == 3 else 'value'}",
                    bytes([op_code]) + _items(key, value),
                )
                if op_code == 3:
                    rows = state.get(key) or []
                    corpus.add(
                        "row_checksums",
                        f"{scenario}-zip-built-operands",
                        bytes([4, 0x55])
                        + _items(key, _list_value(rows[:1], b""), _list_value(rows[1:], b",")),
                    )
                    corpus.add(
                        "row_checksums", f"{scenario}-zip-list", bytes([5]) + _items(_list_value(rows, b","))
                    )
                    corpus.add(
                        "row_checksums", f"{scenario}-zip-built-list", bytes([6, 0x05]) + _items(*rows)
                    )
    for name, key, value, spec in SYNTHETIC_FAMILIES:
        key_json = json.dumps(key, separators=(",", ":"))
        value_json = json.dumps(value, separators=(",", ":"))
        fid = family_id(f"synthetic_{name}", key_json, value_json, spec, None)
        corpus.add(
            "cf_rows", f"synthetic-{name}-spec-keys", bytes([fid, 3]) + _items(json.dumps(spec).encode())
        )
        corpus.add("cf_rows", f"synthetic-{name}-values", bytes([fid, 1 | 4]) + _items(b"\x00\x00\x00\x02"))
    # HDFS deltas and snapshots with row checksums: (key, crc + value) and removed (crc + key)
    root = get_checkpoint(CHECKSUM_HDFS_SCENARIO) / "checkpoint"
    for sf in sorted(root.glob("state/*/0/*.delta"))[:3] + sorted(root.glob("state/*/0/*.snapshot"))[:1]:
        plain = decompress(sf.read_bytes(), str(sf))
        idx = scan_records(plain, str(sf), allow_removes=sf.suffix == ".delta")
        pairs = list(iter_records(plain, idx, aligned=False))[:4]
        removes = sum(1 << n for n, (_, v) in enumerate(pairs) if v is None)
        flat = [b for k, v in pairs for b in ((k,) if v is None else (k, v))]
        corpus.add(
            "row_checksums", f"{CHECKSUM_HDFS_SCENARIO}-{sf.name}", bytes([0, removes]) + _items(*flat)
        )
    (HERE / "cf_families.json").write_text(json.dumps(families, indent=1) + "\n")
    print(f"cf_families.json: {len(families)} families")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=None, help="comma-separated corpora to rewrite (default: all)")
    args = parser.parse_args(argv)
    targets = set(args.targets.split(",")) if args.targets else None
    corpus = _Corpus()
    if targets is None or targets - {"rocksdb_zip", "changelog", "cf_rows", "row_checksums"}:
        entries = _checkpoint_seeds(corpus)
        if targets is None or "unsaferow" in targets:
            (HERE / "schemas.json").write_text(json.dumps(entries, indent=1) + "\n")
            print(f"schemas.json: {len(entries)} schemas")
    _rocksdb_seeds(corpus)
    _unit_test_seeds(corpus)
    if targets is None or targets & {"cf_rows", "row_checksums"}:
        _cf_seeds(corpus)
    corpus.write(targets)


if __name__ == "__main__":
    main()

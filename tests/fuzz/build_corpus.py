"""Build the seed corpora ``tests/fuzz/corpus/<target>/`` from real files (run on demand, then commit).

Seeds come from the checkpoints PySpark generates for the tests (``tests/spark_checkpoints.py``,
generated on first use, which needs a JVM) and from the real bytes the unit tests keep (RocksDB
changelogs, v3 schema files and v2 operator metadata that no generated checkpoint here has)::

    python -m tests.fuzz.build_corpus                                  # every target
    python -m tests.fuzz.build_corpus --targets rocksdb_zip,changelog  # only these corpora are rewritten

Each seed file is named ``<scenario>-<what>`` and starts with the target's selector byte where the
target has one (see :mod:`tests.fuzz.targets`). ``schemas.json`` (the UnsafeRow target's schemas) is
written from the same checkpoints. Files are kept small (at most ``MAX_SEED`` bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
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
    from readers.codecs import decompress, sniff_codec
    from readers.records import iter_records, scan_records
    from readers.schemas import parse_schema_file
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
    from readers.codecs import decompress
    from readers.rocksdb_store import read_zip, sniff_rocksdb_file_name
    from tests.fuzz.targets import FUZZ_ZIP_LIMITS
    from tests.spark_checkpoints import get_checkpoint

    for scenario in ROCKS_SCENARIOS:
        root = get_checkpoint(scenario) / "checkpoint"
        # the first store of the first operator, partition 0 (other stores' files look alike)
        part_dir = next(p.parent for p in sorted(root.glob("state/*/0/**/*")) if sniff_rocksdb_file_name(p.name))
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
            corpus.add("rocksdb_zip", f"{tag}-{z.name}-slim", bytes([0]) + _repacked(slim, zipfile.ZIP_DEFLATED))
        changelogs = sorted((p for p in files if p.suffix == ".changelog"), key=lambda p: p.stat().st_size)
        plain = [(p, decompress(p.read_bytes(), str(p))) for p in changelogs]
        useful = [(p, d) for p, d in plain if len(d) > 8]  # records, not just an end marker
        for p, d in useful[:1] + useful[-1:]:  # the smallest and the largest
            corpus.add("changelog", f"{tag}-{p.name}", bytes([0x80]) + d)
    # Other compression methods a zip may declare (zipfile reads them: their own error types).
    small = {"CURRENT": b"MANIFEST-000005\n", "metadata": b'v1\n{"sstFiles":[],"numKeys":0}'}
    for method, name in ((zipfile.ZIP_STORED, "stored"), (zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "lzma")):
        corpus.add("rocksdb_zip", f"synthetic-{name}", bytes([0]) + _repacked(small, method))


def _unit_test_seeds(corpus: _Corpus) -> None:
    from tests import test_logs, test_opmeta, test_records, test_rocksdb_store, test_schemas

    for name in ("CHANGELOG_V1", "CHANGELOG_V2", "CHANGELOG_V3", "CHANGELOG_V4", "CHANGELOG_V2_EMPTY",
                 "CHANGELOG_V3_EMPTY"):
        corpus.add("records", f"unit-{name.lower()}", bytes([0x81]) + getattr(test_records, name))
        corpus.add("changelog", f"unit-{name.lower()}", bytes([0x80]) + getattr(test_records, name))
    corpus.add("changelog", "unit-changelog_v1-row-checksums", bytes([0x82]) + test_records.CHANGELOG_V1)
    # the archives the archive-safety tests craft: a parent path, a link
    zip_bytes = test_rocksdb_store._zip_bytes
    corpus.add("rocksdb_zip", "unit-parent-path", bytes([0]) + zip_bytes({"../evil": b"x"}))
    corpus.add("rocksdb_zip", "unit-symlink", bytes([0]) + zip_bytes({"CURRENT": b"/etc/passwd"}, symlink="CURRENT"))
    for name in ("REAL_SCHEMA_V3_TWS", "REAL_SCHEMA_V3_JOIN_V4", "REAL_SCHEMA_V2_SURROGATES"):
        corpus.add("schemas", f"unit-{name.lower()}", getattr(test_schemas, name))
    for name, data in test_opmeta.REAL.items():
        corpus.add("opmeta", f"unit-{name}", data)
    corpus.add("opmeta", "unit-spec_v2_400", test_opmeta.SPEC_V2_400)
    corpus.add("logs", "unit-offsets_v2", bytes([0]) + test_logs.REAL_OFFSETS_V2_430)
    kafka = b"\x00v1\n" + test_logs.SPEC_KAFKA_OFFSET.encode()
    corpus.add("logs", "unit-kafka_initial", bytes([4]) + kafka)
    kafka_offsets = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n' + test_logs.SPEC_KAFKA_OFFSET.encode()
    corpus.add("logs", "unit-offsets_kafka", bytes([0]) + kafka_offsets)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=None, help="comma-separated corpora to rewrite (default: all)")
    args = parser.parse_args(argv)
    targets = set(args.targets.split(",")) if args.targets else None
    corpus = _Corpus()
    if targets is None or targets - {"rocksdb_zip", "changelog"}:
        entries = _checkpoint_seeds(corpus)
        if targets is None or "unsaferow" in targets:
            (HERE / "schemas.json").write_text(json.dumps(entries, indent=1) + "\n")
            print(f"schemas.json: {len(entries)} schemas")
    _rocksdb_seeds(corpus)
    _unit_test_seeds(corpus)
    corpus.write(targets)


if __name__ == "__main__":
    main()

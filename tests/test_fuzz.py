"""Decoders never crash on bytes: fuzz corpora, crash regressions and a short fuzz run.

* Every committed seed (``tests/fuzz/corpus/<target>/``, real files of generated checkpoints) decodes
  to what it holds: the recorded expectation of ``tests/fuzz/expected.json`` and, where the format can
  be read without statelens (JSON lines, zips, record streams, codec framings, schema JSON), the
  facts read that way (:mod:`tests.fuzz.seeds`); the few seeds made to be refused raise their
  recorded error class. Every recorded value was confirmed by a reading without statelens (Spark's
  ``statestore`` source, :mod:`tests.fuzz.independent` or those facts), and the recorder refuses any
  other. Sabotage checks
  prove it: decoders that always raise fail every valid seed, and decoders that return wrong values
  (a field dropped, values swapped, a length one byte off, the previous row) fail every seed they change.
* Every input that once crashed a decoder (``tests/fuzz/regressions/<target>/``) and every mutated seed
  goes through its target: a value or a :class:`~readers.errors.StatelensError`, nothing else.
* Each crash found by fuzzing has a test named after it that calls the decoder directly.
* Hypothesis mutates the real seeds of every target (byte flips, cuts, insertions).
* ``-m fuzz``-marked: every atheris harness runs for a few seconds in its own process, with
  ``-rss_limit_mb`` and ``-timeout``; longer runs on demand with ``python -m tests.fuzz.run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers import logs, opmeta, schemas
from statelens.readers.errors import CorruptFileError, StatelensError, UsageError
from tests.fuzz import seeds
from tests.fuzz.targets import CORPUS, REGRESSIONS, TARGETS, check_value_or_typed_error

#: Seconds each harness runs inside the test suite (two at a time: about 50 s for all ten).
SHORT_RUN_S = 8


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def _cases(root: Path) -> list[Any]:
    return [pytest.param(t, p, id=f"{t}/{p.name}") for t in TARGETS for p in _files(root / t)]


def test_every_target_has_a_seed_corpus() -> None:
    for name in TARGETS:
        assert len(_files(CORPUS / name)) >= 5, name


@pytest.mark.parametrize(("target", "path"), _cases(CORPUS))
def test_seed_decodes_to_what_it_holds(target: str, path: Path) -> None:
    seeds.check_seed(target, path)


def test_every_seed_has_a_recorded_expectation() -> None:
    on_disk = {f"{t}/{p.name}" for t, p in seeds.seed_files()}
    recorded = seeds.expectations()
    assert set(recorded) == on_disk, "run: python -m tests.fuzz.seeds (after build_corpus)"
    refused = {k for k, v in recorded.items() if v["outcome"] != "value"}
    # only synthetic inputs are refused: every seed cut from a real file must decode
    assert refused and all(
        k.split("/", 1)[1].startswith(("synthetic-", "unit-parent", "unit-symlink")) for k in refused
    )
    assert len(on_disk) - len(refused) == sum(1 for v in recorded.values() if v["outcome"] == "value")


def test_valid_seeds_are_checked_against_facts_read_without_statelens() -> None:
    """For these targets the format is read by test code alone (json, zipfile, the record walker, the
    lz4/zstd/snappy libraries, the schema JSON) and compared with what the decoder returned."""
    compared: dict[str, int] = {}
    for target, path in seeds.seed_files():
        if seeds.expectations()[f"{target}/{path.name}"]["outcome"] != "value":
            continue
        data = path.read_bytes()
        if seeds.check_independent_facts(target, data, seeds.decode(target, data)):
            compared[target] = compared.get(target, 0) + 1
    assert set(compared) == {"codecs", "records", "schemas", "logs", "opmeta", "rocksdb_zip", "changelog"}
    assert compared["logs"] == len(_files(CORPUS / "logs")) and compared["codecs"] == len(
        _files(CORPUS / "codecs")
    )
    assert sum(compared.values()) >= 150, compared


#: The main decoders every seed goes through; the sabotage check makes each raise instead.
_DECODERS = {
    "_format.codecs": ("decompress",),
    "_format.records": ("scan_records", "scan_changelog"),
    "_format.unsaferow": ("decode_row", "decode_rows"),
    "schemas": ("parse_schema_v3_entries", "parse_schema_file", "parse_schema_v3"),
    "logs": (
        "parse_offsets",
        "parse_commit",
        "parse_metadata_fields",
        "parse_file_source_log",
        "parse_kafka_initial_offsets",
    ),
    "opmeta": ("parse_operator_metadata",),
    "_format.rocksdb_store": ("read_zip", "parse_zip_metadata", "split_list_value", "split_checked_operands"),
    "_format.cf_store": ("decode_keys", "decode_values", "strip_version"),
    "_format.rowchecksum": ("strip_hdfs", "strip_rocksdb_value", "strip_rocksdb_removed_key"),
}


def test_sabotage_a_decoder_that_always_raises_fails_every_valid_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every main decoder replaced by one that raises a typed error, the old rule ("a value or a
    StatelensError") would pass every seed; the seed check must fail each valid one."""
    import importlib

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise CorruptFileError("sabotaged decoder", "fuzz/seed")

    for module, names in _DECODERS.items():
        mod = importlib.import_module(f"statelens.readers.{module}")
        for name in names:
            monkeypatch.setattr(mod, name, refuse)
    valid = [
        (t, p) for t, p in seeds.seed_files() if seeds.expectations()[f"{t}/{p.name}"]["outcome"] == "value"
    ]
    failed = 0
    for target, path in valid:
        try:
            seeds.check_seed(target, path)
        except (AssertionError, StatelensError):
            failed += 1
    assert len(valid) > 300 and failed == len(valid)


#: Decoders that return wrong values, each as the product's function it wraps and what it does to the
#: result; the targets whose seeds it reaches.
_WRONG_VALUES: dict[str, tuple[tuple[tuple[str, str, Any], ...], tuple[str, ...]]] = {
    "drop a row's last field": (
        (
            ("_format.unsaferow", "decode_row", lambda row: row[:-1]),
            ("_format.unsaferow", "decode_rows", lambda rows: [r[:-1] for r in rows]),
        ),
        ("unsaferow",),
    ),
    "swap the first two keys and values": (
        (
            ("_format.cf_store", "decode_keys", lambda rows: rows[1:2] + rows[:1] + rows[2:]),
            ("_format.cf_store", "decode_values", lambda rows: rows[1:2] + rows[:1] + rows[2:]),
        ),
        ("cf_rows",),
    ),
    "return the previous key or value": (
        (
            ("_format.cf_store", "decode_keys", lambda rows: rows[:1] + rows[:-1]),
            ("_format.cf_store", "decode_values", lambda rows: rows[:1] + rows[:-1]),
        ),
        ("cf_rows",),
    ),
    "swap two fields of a key": (
        (("_format.cf_store", "decode_keys", lambda rows: [r[1:2] + r[:1] + r[2:] for r in rows]),),
        ("cf_rows",),
    ),
    "one byte short: a checksummed value, key or list element": (
        (
            ("_format.rowchecksum", "strip_hdfs", lambda kv: (kv[0], [v and v[:-1] for v in kv[1]])),
            ("_format.rowchecksum", "strip_rocksdb_value", lambda v: v[:-1]),
            ("_format.rowchecksum", "strip_rocksdb_removed_key", lambda k: k[1:]),
            ("_format.rocksdb_store", "split_checked_operands", lambda ops: [o[:-1] for o in ops]),
            ("_format.rocksdb_store", "split_list_value", lambda rows: [r[:-1] for r in rows]),
        ),
        ("row_checksums", "cf_rows"),
    ),
    "one byte short: a record's value, a decompressed stream": (
        (
            ("_format.records", "iter_records", lambda recs: [(k, v and v[:-1]) for k, v in recs]),
            ("_format.codecs", "decompress", lambda out: out[:-1]),
        ),
        ("records", "changelog", "codecs"),
    ),
}


def _wrapped(original: Any, change: Any) -> Any:
    def wrong(*args: Any, **kwargs: Any) -> Any:
        return change(original(*args, **kwargs))

    return wrong


@pytest.mark.parametrize("sabotage", sorted(_WRONG_VALUES))
def test_sabotage_a_decoder_that_returns_wrong_values_fails_the_seeds(
    sabotage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoder that returns a value, but a wrong one (a field dropped, two values swapped, a length
    one byte off, the previous row): every seed whose decoded value it changes fails the seed check,
    and it changes most seeds of the targets it reaches."""
    import importlib

    patches, reached = _WRONG_VALUES[sabotage]
    valid = [
        (t, p)
        for t, p in seeds.seed_files()
        if t in reached and seeds.expectations()[f"{t}/{p.name}"]["outcome"] == "value"
    ]
    truth = {p: seeds.digest(seeds.decode(t, p.read_bytes())) for t, p in valid}
    for module, name, change in patches:
        mod = importlib.import_module(f"statelens.readers.{module}")
        monkeypatch.setattr(mod, name, _wrapped(getattr(mod, name), change))
    changed = failed = 0
    for target, path in valid:
        try:
            wrong = seeds.digest(seeds.decode(target, path.read_bytes()))
        except (StatelensError, AssertionError):
            wrong = None
        if wrong == truth[path]:
            continue  # e.g. a swap of two equal values, the previous row of a one-row seed
        changed += 1
        try:
            seeds.check_seed(target, path)
        except (AssertionError, StatelensError):
            failed += 1
    assert failed == changed, f"{changed - failed} of {changed} changed seeds pass the seed check"
    assert changed == _WRONG_VALUES_CHANGED[sabotage], (changed, len(valid))


#: How many seeds each sabotage changes (measured on the committed corpus): the others it leaves as
#: they are (one-key seeds, equal values swapped, one-field keys, removes with no value to shorten).
_WRONG_VALUES_CHANGED = {
    "drop a row's last field": 21,
    "swap the first two keys and values": 76,
    "return the previous key or value": 76,
    "swap two fields of a key": 28,
    "one byte short: a checksummed value, key or list element": 41,
    "one byte short: a record's value, a decompressed stream": 48,
}


def test_every_valid_seed_is_recorded_from_a_second_reading() -> None:
    """No expectation comes from statelens alone: each names the reading that confirmed it."""
    from tests.fuzz import independent

    sources: dict[str, int] = {}
    for key, want in seeds.expectations().items():
        sources[want["source"]] = sources.get(want["source"], 0) + 1
        target = key.split("/", 1)[0]
        if want["outcome"] != "value":
            assert want["source"] == "built-to-be-refused", key
        elif target == "unsaferow":  # every UnsafeRow seed is a row Spark's reader holds
            assert want["source"] == seeds.SPARK, key
        elif target in ("cf_rows", "row_checksums"):
            assert want["source"] == independent.SOURCES[target], key
        else:
            assert want["source"] in (independent.SOURCES.get(target), seeds.FACTS_SOURCE[target]), key
    assert sources == {
        "built-to-be-refused": 12,
        "independent-decode:cf-keys-values": 92,
        "independent-decode:changelog": 25,
        "independent-decode:codec-libraries": 22,
        "independent-decode:crc32c": 36,
        "independent-decode:record-walk": 13,
        "independent-facts:json": 73,
        "independent-facts:schema-json": 11,
        "independent-facts:zipfile+json": 25,
        "spark-statestore": 21,
    }


def test_recorded_values_are_what_the_second_reading_finds() -> None:
    """The digests recorded from :mod:`tests.fuzz.independent` (and from Spark, for the UnsafeRow seeds it
    also reads) are its reading's, now as when recorded."""
    from tests.fuzz import independent

    compared = 0
    for target, path in seeds.seed_files():
        want = seeds.expectations()[f"{target}/{path.name}"]
        if want["source"] in (independent.SOURCES.get(target), seeds.SPARK):
            second = independent.read_seed(target, path.read_bytes())
            assert seeds.digest(second) == want["digest"], path.name
            assert seeds.summary(target, second) == want["summary"], path.name
            compared += 1
    assert compared == 92 + 25 + 36 + 21


@pytest.mark.spark
def test_unsaferow_seeds_are_the_rows_spark_reads(spark: Any) -> None:
    """Each UnsafeRow seed is a key or value of a delta still in the cached checkpoints, and Spark's
    ``statestore`` source holds that row in the batch that wrote it (a removed key: in the batch before):
    the recorded value is Spark's."""
    cache: dict[Any, Any] = {}
    compared = 0
    for target, path in seeds.seed_files():
        want = seeds.expectations()[f"{target}/{path.name}"]
        if want["source"] == seeds.SPARK:
            held = seeds.spark_reading(spark, target, path, cache)
            assert not isinstance(held, str), f"{path.name}: {held}"
            assert seeds.digest(held) == want["digest"], path.name
            compared += 1
    assert compared == len(_files(CORPUS / "unsaferow")) == 21
    assert len(cache) == 12  # the (scenario, store, batch) states Spark read


def test_the_recorder_refuses_values_no_second_reading_confirms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``python -m tests.fuzz.seeds`` cannot bless a decoder's output: with a decoder that drops a field,
    every UnsafeRow seed is left unconfirmed and nothing is written; a real seed refused by a decoder
    is not recorded as refused by design."""
    from statelens.readers._format import rocksdb_store, unsaferow

    files = [(t, p) for t, p in seeds.seed_files() if t in ("unsaferow", "rocksdb_zip")]
    recorded, unconfirmed = seeds.record(files, before=seeds.expectations())
    assert not unconfirmed and recorded == {k: v for k, v in seeds.expectations().items() if k in recorded}
    assert len(recorded) == len(files)
    assert {v["source"] for k, v in recorded.items() if k.startswith("unsaferow/")} == {seeds.SPARK}
    row, rows = unsaferow.decode_row, unsaferow.decode_rows
    monkeypatch.setattr(unsaferow, "decode_row", _wrapped(row, lambda r: r[:-1]))
    monkeypatch.setattr(unsaferow, "decode_rows", _wrapped(rows, lambda rs: [r[:-1] for r in rs]))

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise CorruptFileError("sabotaged decoder", "fuzz/seed")

    monkeypatch.setattr(rocksdb_store, "parse_zip_metadata", refuse)
    recorded, unconfirmed = seeds.record(files, before=seeds.expectations())
    assert {k.split("/")[0] for k in unconfirmed} == {"unsaferow", "rocksdb_zip"}
    assert sum(k.startswith("unsaferow/") for k in unconfirmed) == len(_files(CORPUS / "unsaferow"))
    assert all("read as" in why for k, why in unconfirmed.items() if k.startswith("unsaferow/"))
    zips = {k for k, v in seeds.expectations().items() if k.startswith("rocksdb_zip/")}
    valid_zips = {k for k in zips if seeds.expectations()[k]["outcome"] == "value"}
    assert {k for k in unconfirmed if k.startswith("rocksdb_zip/")} == valid_zips  # synthetic-stored too
    assert all(unconfirmed[k].startswith("refused with CorruptFileError") for k in valid_zips)
    assert set(recorded) == zips - valid_zips  # the four built to be refused, with their classes
    monkeypatch.setattr(seeds, "seed_files", lambda: files)
    out = tmp_path / "expected.json"
    assert seeds.main(out) == 1 and not out.exists()


def test_the_recorder_records_refusals_only_as_built(tmp_path: Path) -> None:
    """A seed built to be refused is recorded with the class its construction calls for, and no other
    seed with a refusal; a seed named as built to be refused that decodes is left unconfirmed."""
    built = {k for k in seeds.expectations() if seeds.built_to_be_refused(k.split("/", 1)[1])}
    refused = {k for k, v in seeds.expectations().items() if v["outcome"] != "value"}
    assert built == refused and len(built) == len(seeds.BUILT_TO_BE_REFUSED) == 12
    for key in built:
        assert seeds.expectations()[key]["outcome"] == seeds.built_to_be_refused(key.split("/", 1)[1])[0]
    stored = next(p for p in (CORPUS / "rocksdb_zip").iterdir() if p.name.startswith("synthetic-stored-"))
    bzip2 = next(p for p in (CORPUS / "rocksdb_zip").iterdir() if p.name.startswith("synthetic-bzip2-"))
    recorded, unconfirmed = seeds.record([("rocksdb_zip", bzip2)])
    assert recorded == {
        f"rocksdb_zip/{bzip2.name}": {"outcome": "UnsupportedVersionError", "source": "built-to-be-refused"}
    }
    assert not unconfirmed
    disguised = tmp_path / ("synthetic-bzip2-" + stored.name)  # a stored zip, which reads
    disguised.write_bytes(stored.read_bytes())
    recorded, unconfirmed = seeds.record([("rocksdb_zip", disguised)])
    assert not recorded
    assert unconfirmed == {
        f"rocksdb_zip/{disguised.name}": "built to be refused (a bzip2 zip entry, which Spark never writes), but decodes"
    }


@pytest.mark.parametrize(("target", "path"), _cases(REGRESSIONS))
def test_former_crash_gives_a_value_or_a_statelens_error(target: str, path: Path) -> None:
    check_value_or_typed_error(target, path.read_bytes())


# --------------------------------------------------------------------------------------------------
# one test per crash found, named after it


def test_fuzz_crash_logs_kafka_partition_double_minus() -> None:
    """``{"t": {"--1": 0}}`` passed the Kafka shape check (``lstrip("-")``) and then ``int("--1")`` raised."""
    data = (REGRESSIONS / "logs" / "kafka-partition-double-minus").read_bytes()
    TARGETS["logs"](data)
    assert not logs._is_kafka_shape({"t": {"--1": 0}})
    assert logs.kafka_partition_offsets({"t": {"-1": 5, "2": 7}}) == {("t", -1): 5, ("t", 2): 7}
    with pytest.raises(CorruptFileError, match="Kafka shape"):
        logs.kafka_partition_offsets({"t": {"--1": 0}}, "offsets/3")
    with pytest.raises(CorruptFileError, match="shape"):
        logs.parse_kafka_initial_offsets(b'\x00v1\n{"t":{"--1":0}}', "sources/0/0")


def test_fuzz_crash_schemas_v3_without_families() -> None:
    """A v3 schema file declaring 0 column families made ``parse_schema_file`` index an empty tuple."""
    data = (REGRESSIONS / "schemas" / "v3-without-families").read_bytes()
    assert data == b"\x00\x02v3\x00\x00\x00\x00"
    assert schemas.parse_schema_v3(data, "s") == {}
    with pytest.raises(UsageError, match="v3 schema file"):
        schemas.parse_schema_file(data, "state/0/0/_metadata/schema")


# --------------------------------------------------------------------------------------------------
# hypothesis: mutations of the real seeds, every target


def _seeds() -> list[tuple[str, bytes]]:
    return [(t, p.read_bytes()) for t in TARGETS for p in _files(CORPUS / t)]


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    target, seed = draw(st.sampled_from(_seeds()))
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(("flip", "cut", "insert", "set")))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from((0x00, 0x7F, 0x80, 0xFF, 0x2D, 0x7B, 0x5B)))
    if target not in ("schemas", "opmeta") and data:
        data[0] = seed[0]  # keep the selector byte most of the time: mutate the file, not the choice
    return target, bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_mutated_seeds_give_a_value_or_a_statelens_error(case: tuple[str, bytes]) -> None:
    target, data = case
    check_value_or_typed_error(target, data)


def test_a_statelens_error_is_the_only_tolerated_exception() -> None:
    """The targets let anything else through (so the fuzzer sees it as a crash)."""
    from tests.fuzz import targets

    def boom() -> None:
        raise ValueError("not typed")

    with pytest.raises(ValueError, match="not typed"):
        targets._tolerate(boom)
    assert targets._tolerate(lambda: (_ for _ in ()).throw(CorruptFileError("typed", "p"))) is None
    assert issubclass(CorruptFileError, StatelensError)


# --------------------------------------------------------------------------------------------------
# a short coverage-guided run of every harness


@pytest.mark.fuzz
def test_short_fuzz_run_of_every_harness(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tests.fuzz.run import TARGET_NAMES, run_target

    def one(name: str) -> dict[str, Any]:
        return run_target(
            name,
            seconds=SHORT_RUN_S,
            runs=None,
            work_dir=tmp_path / "corpus",
            artifacts=tmp_path / "artifacts",
            rss_limit_mb=2048,
            timeout_s=10,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, TARGET_NAMES))
    crashed = [r for r in results if r["crashed"]]
    assert not crashed, "\n\n".join(f"{r['target']}: {r['artifact']}\n{r['log_tail']}" for r in crashed)
    for r in results:
        assert r["executions"] > 100, r  # the harness really ran (not just started)
        assert r["coverage"], r


def test_fuzz_crash_unsaferow_nested_arrays_share_one_payload() -> None:
    """Element words that all point at the same bytes made an 18 KB row decode to 2 GB of strings.

    ``array<array<string>>``: 1000 outer elements point at one inner array whose 1000 elements point at
    one 2000-byte string (found by review, confirmed with ``ulimit -v``: a 30 KB row ran a 3 GB process
    out of memory). Spark never shares payloads, so their sizes must add up to at most the room after
    the fixed part; both decoders refuse the row before decoding a payload.
    """
    from statelens.readers._format.unsaferow import decode_row, decode_rows
    from statelens.readers.errors import SchemaMismatchError
    from tests.fuzz.targets import unsaferow_layouts

    data = (REGRESSIONS / "unsaferow" / "nested-arrays-share-one-payload").read_bytes()
    layout = unsaferow_layouts()[data[0]]
    row = data[2:]
    with pytest.raises(SchemaMismatchError, match="payloads overlap") as one:
        decode_row(row, 0, len(row), layout, path="p", record=3)
    assert one.value.context["field"] == "a[0][1]" and one.value.path == "p"
    with pytest.raises(SchemaMismatchError, match="payloads overlap") as many:
        decode_rows(row, [0], [len(row)], layout, path="p", records=[3])
    assert many.value.context == {"record": 3, "field": "a"}
    TARGETS["unsaferow"](data)


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("logs", "offsets-json-integer-of-4301-digits"),
        ("logs", "commit-json-integer-of-4301-digits"),
        ("opmeta", "json-integer-of-4301-digits"),
        ("opmeta", "properties-json-integer-of-4301-digits"),
        ("schemas", "v2-schema-json-integer-of-4301-digits"),
        ("schemas", "v3-user-key-schema-integer-of-4301-digits"),
    ],
)
def test_fuzz_crash_json_integer_of_4301_digits(target: str, name: str) -> None:
    """``json.loads`` raises a plain ``ValueError`` (not ``JSONDecodeError``) for an integer longer than
    ``sys.get_int_max_str_digits()`` (4300); every JSON reader let it through."""
    data = (REGRESSIONS / target / name).read_bytes()
    TARGETS[target](data)
    body = data[1:] if target == "logs" else data
    parse = {
        "logs": (lambda: logs.parse_offsets(body, "offsets/0", 0))
        if name.startswith("offsets")
        else (lambda: logs.parse_commit(body, "commits/0", 0)),
        "opmeta": lambda: opmeta.parse_operator_metadata(body, "state/0/_metadata/metadata"),
        "schemas": lambda: schemas.parse_schema_v3(body, "state/0/_stateSchema/default/0_x"),
    }[target]
    with pytest.raises(CorruptFileError, match="4300 digits"):
        parse()


def test_fuzz_crash_schemas_key_encoder_spec_nested_too_deeply() -> None:
    """A key encoder spec of 3000 nested arrays raised ``RecursionError`` from ``json.loads``."""
    data = (REGRESSIONS / "schemas" / "v3-key-encoder-spec-nested-too-deeply").read_bytes()
    TARGETS["schemas"](data)
    with pytest.raises(CorruptFileError, match="key encoder spec JSON of column family") as info:
        schemas.parse_schema_v3(data, "state/0/_stateSchema/default/0_x")
    assert info.value.path == "state/0/_stateSchema/default/0_x" and info.value.offset


# --------------------------------------------------------------------------------------------------
# RocksDB zips and their metadata entry


def test_fuzz_crash_rocksdb_zip_file_version_7_8() -> None:
    """A central directory entry asking for zip version 7.8 made ``zipfile.ZipFile`` raise
    ``NotImplementedError`` (any "needs version" above 6.3 does)."""
    from statelens.readers._format.rocksdb_store import ZipLimits, read_zip
    from statelens.readers.errors import UnsupportedVersionError

    data = (REGRESSIONS / "rocksdb_zip" / "zip-file-version-7.8").read_bytes()
    TARGETS["rocksdb_zip"](data)
    with pytest.raises(UnsupportedVersionError, match="zip file version 7.8") as info:
        read_zip(data[1:], "state/0/0/1.zip", ZipLimits())
    assert info.value.path == "state/0/0/1.zip"


def test_fuzz_crash_rocksdb_zip_entry_offset_past_the_directory() -> None:
    """A central directory entry whose local header offset lies past the directory (and past the end of
    the file), the next entry's even further: the plain zip reader unpacked a header out of range
    (``struct.error``); now the entry is named by zipfile's reading, at the offset it claims."""
    from statelens.readers._format.rocksdb_store import ZipLimits, read_zip
    from statelens.readers.errors import TruncatedFileError

    data = (REGRESSIONS / "rocksdb_zip" / "central-directory-offset-past-the-directory").read_bytes()
    TARGETS["rocksdb_zip"](data)
    with pytest.raises(TruncatedFileError, match="MANIFEST-000005") as info:
        read_zip(data[1:], "state/0/0/1.zip", ZipLimits())
    assert (info.value.path, info.value.offset) == ("state/0/0/1.zip", 98304)


def test_fuzz_crash_rocksdb_zip_metadata_size_bytes_infinity() -> None:
    """``"sizeBytes": 1e4001260`` is a float infinity in JSON: ``int()`` raised ``OverflowError``."""
    from statelens.readers._format.rocksdb_store import parse_zip_metadata

    data = (REGRESSIONS / "rocksdb_zip" / "metadata-size-bytes-infinity").read_bytes()
    TARGETS["rocksdb_zip"](data)
    with pytest.raises(CorruptFileError, match="no integer sizeBytes") as info:
        parse_zip_metadata(data[1:], "state/0/0/1.zip")
    assert info.value.path == "state/0/0/1.zip"
    ok = parse_zip_metadata(
        b'v1\n{"sstFiles":[{"localFileName":"000008.sst","dfsSstFileName":"000008-a.sst",'
        b'"sizeBytes":1119}],"numKeys":2}',
        "p",
    )
    assert ok.sst_files == (("000008.sst", "000008-a.sst", 1119),) and ok.num_keys == 2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("metadata-column-family-id-not-an-integer", "not an object of integer ids"),
        ("metadata-json-nested-too-deeply", "nested too deeply"),
    ],
)
def test_zip_metadata_crashes_found_by_review(name: str, message: str) -> None:
    """Found reading ``parse_zip_metadata`` next to the fuzzer's finds: ``int("x")``/``int(None)`` of a
    column family id (``ValueError``, ``TypeError``) and ``RecursionError`` from deeply nested JSON."""
    from statelens.readers._format.rocksdb_store import parse_zip_metadata

    data = (REGRESSIONS / "rocksdb_zip" / name).read_bytes()
    TARGETS["rocksdb_zip"](data)
    with pytest.raises(CorruptFileError, match=message):
        parse_zip_metadata(data[1:], "state/0/0/1.zip")


def test_zip_entries_spark_never_writes_are_refused() -> None:
    """bzip2, lzma and encrypted entries are refused by name before ``zipfile`` decodes them (their
    decoders raise ``OSError``, ``LZMAError``, ``RuntimeError``...); stored and deflated entries read."""
    import zipfile

    from statelens.readers._format.rocksdb_store import ZipLimits, read_zip
    from statelens.readers.errors import UnsupportedVersionError

    seeds = {
        p.name.rsplit("-", 1)[0]: p.read_bytes()[1:] for p in (CORPUS / "rocksdb_zip").glob("synthetic-*")
    }
    assert set(read_zip(seeds["synthetic-stored"], "1.zip", ZipLimits())) == {"CURRENT", "metadata"}
    for method, code in (("bzip2", zipfile.ZIP_BZIP2), ("lzma", zipfile.ZIP_LZMA)):
        with pytest.raises(UnsupportedVersionError, match=f"compression method {code} "):
            read_zip(seeds[f"synthetic-{method}"], "1.zip", ZipLimits())
    encrypted = bytearray(seeds["synthetic-stored"])
    central = encrypted.find(b"PK\x01\x02")
    encrypted[central + 8] |= 0x01  # general purpose flag bit 0 in the central directory: encrypted
    with pytest.raises(UnsupportedVersionError, match="flags 0x0001"):
        read_zip(bytes(encrypted), "1.zip", ZipLimits())


def test_changelog_v3_lineage_nested_too_deeply() -> None:
    """Found by review of the changelog harness's target: a v3 lineage string (up to 64 KiB) of 3000
    nested arrays raised ``RecursionError`` from ``json.loads``."""
    from statelens.readers._format.records import scan_changelog

    data = (REGRESSIONS / "changelog" / "v3-lineage-nested-too-deeply").read_bytes()
    TARGETS["changelog"](data)
    with pytest.raises(CorruptFileError, match="lineage JSON is nested too deeply") as info:
        scan_changelog(data[1:], "state/0/0/4.changelog")
    assert info.value.path == "state/0/0/4.changelog" and info.value.offset == 4


# --------------------------------------------------------------------------------------------------
# column family keys and values, Avro rows, row checksums (found by review while writing their harnesses)


def _cf_family(name: str) -> Any:
    from tests.fuzz.targets import cf_families

    return next(f for f in cf_families() if f.name == name)


def test_avro_array_of_nulls_count_2_pow_40() -> None:
    """An Avro array of ``null`` elements (``array<void>``) takes no bytes per element: a 15-byte row
    declaring 2**40 elements ran for 40 s and then caught the ``MemoryError`` as a ``CorruptFileError``
    (a hang under the fuzzer). Such arrays are refused before decoding; every element costs a byte."""
    from statelens.readers._format.avro_rows import decode_avro
    from statelens.readers.errors import UnsupportedVersionError
    from tests.fuzz.targets import cf_families

    data = (REGRESSIONS / "cf_rows" / "avro-array-of-nulls-count-2-pow-40").read_bytes()
    family = _cf_family("synthetic_null_arrays")
    assert cf_families()[data[0]] is family
    TARGETS["cf_rows"](data)
    with pytest.raises(UnsupportedVersionError, match="elements of no bytes") as info:
        decode_avro([data[6:]], family.schema.value_schema, "state/0/0/2.changelog")
    assert info.value.path == "state/0/0/2.changelog"
    rich = _cf_family("synthetic_rich_values").schema.value_schema  # arrays with nullable elements decode
    row = bytes(
        len(rich.fields) - 1
    )  # every field null (union branch 0) but the void one, which has no bytes
    assert decode_avro([row], rich, "p") == [(None,) * len(rich.fields)]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("prefix-spec-numColsPrefixKey-text", "numColsPrefixKey x, not an integer"),
        ("range-spec-orderingOrdinals-infinity", "orderingOrdinals inf, not an integer"),
        ("range-spec-orderingOrdinals-not-a-list", "orderingOrdinals 3 of '\\$ttl_ttlm' is not a list"),
    ],
)
def test_key_encoder_spec_numbers_not_integers(name: str, message: str) -> None:
    """The key encoder spec is JSON of the v3 schema file, checked only for ``keyStateEncoderType``:
    ``int()`` of ``"x"``, ``1e400`` or ``[1]`` raised ``ValueError``/``OverflowError``/``TypeError``."""
    import dataclasses
    import json

    from statelens.readers._format.cf_store import decode_keys
    from statelens.readers._format.rocksdb_store import ColumnFamily, RocksDBColumnFamilyReader
    from tests.fuzz.targets import _split_items, cf_families

    data = (REGRESSIONS / "cf_rows" / name).read_bytes()
    TARGETS["cf_rows"](data)
    family = cf_families()[data[0]]
    spec_text, *keys = _split_items(data[2:])
    schema = dataclasses.replace(family.schema, key_encoder=json.loads(spec_text))
    odd = ColumnFamily(family.name, schema, family.variable_type)
    with pytest.raises(CorruptFileError, match=message):
        decode_keys(odd, keys, "state/0/0/2.changelog", avro=bool(data[1] & 4))
    assert RocksDBColumnFamilyReader._is_map(odd) is False
    spec = {"keyStateEncoderType": "PrefixKeyScanStateEncoderSpec", "numColsPrefixKey": 3}
    too_many = ColumnFamily(
        "ttlm", dataclasses.replace(_cf_family("ttlm").schema, key_encoder=spec), "MapState"
    )
    with pytest.raises(CorruptFileError, match="numColsPrefixKey 3 outside the 2-column key"):
        decode_keys(too_many, keys, "p")


def test_split_list_value_of_40000_elements() -> None:
    """A list state of 40,000 elements (880 KB, a real size) and 20,000 checksummed operands split right.

    Splitting copied the tuple of elements found so far at every element: 49 s for this input, now
    0.13 s (measured, not asserted: tests hold no timings; a quadratic regression shows as a slow test).
    """
    import struct

    from crc32c import crc32c

    from statelens.readers._format.rocksdb_store import split_checked_operands, split_list_value

    row = bytes(range(16))
    value = b",".join(struct.pack("<i", 17) + b"\x00" + row for _ in range(40_000))
    assert split_list_value(value, "p") == [row] * 40_000
    key, body = b"\x00\x00k", struct.pack("<i", 2) + b"\x00\x07"
    operand = struct.pack("<Ii", crc32c(body, crc32c(key)), len(body)) + body
    assert split_checked_operands(key, b",".join([operand] * 20_000), "p", 0) == [body] * 20_000

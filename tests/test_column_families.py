"""Column family stores read natively, checked against Spark's own reader on the same checkpoints.

transformWithState with timers and TTL (range-scan keyed internal families), Avro-encoded state, the
change feed of each state variable, and the stream-stream join in state formats 3 and 4 (its logical
stores kept as column families of one RocksDB store). Spark reads these checkpoints only where the query
ran (operator metadata v2 records absolute schema paths); the generator keeps that folder.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers._format.cf_codec import _range_value
from statelens.readers._format.cf_store import ColumnFamilyStoreReader
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import CorruptFileError
from tests import oracle
from tests.test_native_vs_spark import canon

pytestmark = pytest.mark.spark

TWS = [
    "rocks_tws",
    "rocks_tws_timers",
    "rocks_tws_avro",
    "rocks_tws_checksum",
    "rocks_tws_timers_avro",
    "rocks_tws_event_time",
]
TIMERS = ["rocks_tws_timers", "rocks_tws_timers_avro"]


def _spark_df(spark: Any, root: Path, **options: str) -> Any:
    reader = spark.read.format("statestore").option("operatorId", "0")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(root))


def _spark_variable(spark: Any, root: Path, var: str, batch_id: int) -> Counter:
    df = _spark_df(spark, root, stateVarName=var, batchId=str(batch_id))
    cols = [c for c in df.columns if c != "partition_id"]
    return Counter(canon((t[-1], *t[:-1])) for t in oracle.collect(df, [*cols, "partition_id"]))


def _native_variable(reader: Any, var: str, version: int) -> Counter:
    out: Counter = Counter()
    for pid in reader.partition_ids():
        for row in reader.read_variable(pid, version, var):
            extra = () if row.user_key is None else (row.user_key,)
            out[canon((row.partition_id, row.key, *extra, row.value))] += 1
    return out


# -- transformWithState ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "scenario", ["rocks_tws_timers", "rocks_tws_avro", "rocks_tws_checksum", "rocks_tws_timers_avro"]
)
def test_state_variables_match_spark_at_every_version(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    expected = json.loads((checkpoint(scenario) / "expected.json").read_text())
    reader = open_checkpoint(str(root)).column_family_reader(0)
    assert reader.avro == scenario.endswith("avro")
    assert reader.row_checksum == (scenario == "rocks_tws_checksum")
    assert reader.state_variables() == sorted(expected["state_variables"], key=reader.state_variables().index)
    compared = 0
    for var in reader.state_variables():
        for version in reader.versions():
            native = _native_variable(reader, var, version)
            assert native == _spark_variable(spark, root, var, version - 1), (scenario, var, version)
            compared += bool(native)
    assert compared >= 10


@pytest.mark.parametrize("scenario", TIMERS)
def test_timers_match_spark_registered_timers(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    reader = open_checkpoint(str(root)).column_family_reader(0)
    assert reader.timer_family() == "$procTimers_keyToTimestamp"
    seen = 0
    for version in reader.versions():
        native = Counter(canon(t) for pid in reader.partition_ids() for t in reader.read_timers(pid, version))
        df = _spark_df(spark, root, readRegisteredTimers="true", batchId=str(version - 1))
        spark_rows = oracle.collect(df, ["partition_id", "key", "expiration_timestamp_ms"])
        assert native == Counter(canon(tuple(r)) for r in spark_rows), version
        seen += sum(native.values())
    assert seen > 0


@pytest.mark.parametrize("scenario", TIMERS)
def test_timer_and_ttl_indexes_agree_with_what_they_index(scenario: str, checkpoint: Any) -> None:
    """Range-scan families (Spark's reader refuses them) decode to exactly the entries they index."""
    root = checkpoint(scenario) / "checkpoint"
    folder = checkpoint(scenario)
    reader = open_checkpoint(str(root)).column_family_reader(0)
    out = json.loads((folder / "output.json").read_text())
    registered = {(r["key"], r["timer_ms"]) for r in out if r["event"] == "input"}
    for version in reader.versions():
        for pid in reader.partition_ids():
            by_key = {
                (r.key[0], r.key[1]) for r in reader.read_variable(pid, version, "$procTimers_keyToTimestamp")
            }
            by_time = {
                (r.key[1], r.key[0]) for r in reader.read_variable(pid, version, "$procTimers_timestampToKey")
            }
            assert by_key == by_time, (version, pid)
            assert {(k[0], t) for k, t in by_key} <= registered  # only timers the function registered
            ttl_index = {(r.key[1], r.key[0]) for r in reader.read_variable(pid, version, "$ttl_ttlv")}
            values = {(r.key, r.value[1]) for r in reader.read_variable(pid, version, "ttlv")}
            assert ttl_index == values, (version, pid)
            # Lists index each key once, at the earliest expiry of its elements ($min_<list>).
            list_index = {(r.key[1], r.key[0]) for r in reader.read_variable(pid, version, "$ttl_ttll")}
            minimum = {(r.key, r.value[0]) for r in reader.read_variable(pid, version, "$min_ttll")}
            elements = {(r.key, r.value[1]) for r in reader.read_variable(pid, version, "ttll")}
            assert list_index == minimum and list_index <= elements, (version, pid)
            assert {k for k, _ in list_index} == {k for k, _ in elements}, (version, pid)


@pytest.mark.parametrize("scenario", TWS)
def test_state_variable_change_feed_matches_spark(scenario: str, checkpoint: Any, spark: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    reader = ckpt.column_family_reader(0)
    from statelens.readers.backends.native import NativeBackend

    native_backend = NativeBackend(ckpt)
    last = max(reader.versions())
    kinds = {"update": "put", "delete": "remove"}  # Spark's change types as statelens names them
    compared = 0
    for var in reader.state_variables():
        native = Counter(canon(c) for c in native_backend.read_state_variable_changes(0, var, 1, last))
        feed = oracle.read_state_variable_changes(spark, root, 0, var, 0, last - 1)
        expected = Counter(canon((b + 1, p, kinds.get(t, t), k, v, u)) for b, t, p, k, v, u in feed)
        assert native == expected, (scenario, var)
        compared += sum(native.values())
    assert compared > 0
    assert compared > 0


def test_range_scan_values_of_every_sign() -> None:
    from pyspark.sql.types import DoubleType, IntegerType, LongType

    assert _range_value(b"\x01" + (1234).to_bytes(8, "big"), LongType(), "x") == 1234
    assert _range_value(b"\x00" + (-5).to_bytes(8, "big", signed=True), LongType(), "x") == -5
    assert _range_value(b"\x01" + (7).to_bytes(4, "big"), IntegerType(), "x") == 7
    assert _range_value(b"\x02" + bytes(8), LongType(), "x") is None
    import struct

    neg = int.from_bytes(struct.pack(">d", -2.5), "big") ^ ((1 << 64) - 1)
    assert _range_value(b"\x00" + neg.to_bytes(8, "big"), DoubleType(), "x") == -2.5
    assert _range_value(b"\x01" + struct.pack(">d", 2.5), DoubleType(), "x") == 2.5
    with pytest.raises(CorruptFileError, match="marker 07"):
        _range_value(b"\x07" + bytes(8), LongType(), "state/0/0/1.changelog")


def test_cli_reads_timers_internal_families_and_changes(checkpoint: Any, capsys: Any) -> None:
    root = checkpoint("rocks_tws_timers") / "checkpoint"
    assert main(["rows", str(root), "--operator", "0", "--timers"]) == 0
    timers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert timers and set(timers[0]) == {"partition", "key", "expiration_timestamp_ms"}
    assert main(["rows", str(root), "--operator", "0", "--state-var", "$ttl_ttlv"]) == 0
    index = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert index and set(index[0]["key"]) == {"expirationMs", "elementKey"}
    assert main(["rows", str(root), "--operator", "0", "--state-var", "ttll", "--changes"]) == 0
    changes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {c["change"] for c in changes} >= {"append"}
    assert all(set(c) == {"version", "partition", "change", "key", "value"} for c in changes)
    assert main(["rows", str(checkpoint("rocks_tws") / "checkpoint"), "--operator", "0", "--timers"]) == 2
    assert "registers no timers" in capsys.readouterr().err


# -- stream-stream join in state formats 3 and 4 -------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["rocks_join_v3", "rocks_join_v4"])
def test_join_column_families_are_shown_as_stores(scenario: str, checkpoint: Any) -> None:
    folder = checkpoint(scenario)
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = open_checkpoint(str(folder / "checkpoint"))
    (op,) = ckpt.operators
    assert op.kind.value == "join"
    assert [s.store_name for s in op.stores] == expected["operators"][0]["store_names"]
    assert ckpt.state_variables(0) == []  # not transformWithState: no state variables listed
    for store in op.stores:
        reader = ckpt.store_reader(0, store.store_name)
        assert isinstance(reader, ColumnFamilyStoreReader)
        assert store.schema is not None and reader.schema == store.schema
    # Every left row Spark kept is in the value family, keyed by its join key (and event time for v4).
    value_store = "left-keyWithIndexToValue" if scenario.endswith("v3") else "left-keyWithTsToValues"
    reader = ckpt.store_reader(0, value_store)
    last = max(store.versions[-1] for store in op.stores)
    rows = [r for pid in reader.partition_ids() for r in reader.read_rows(pid, last)]
    assert rows and all(r.key[0] == r.value[0] for r in rows)  # field0 is the join key lkey
    if scenario.endswith("v4"):
        assert all(r.key[1] == r.value[3] for r in rows)  # __event_time (µs) is the row's lts


@pytest.mark.parametrize("scenario", ["rocks_join_v3", "rocks_join_v4"])
def test_join_growth_and_cli(scenario: str, checkpoint: Any, capsys: Any) -> None:
    root = checkpoint(scenario) / "checkpoint"
    assert main(["growth", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    text = json.dumps(doc)
    stores = json.loads((checkpoint(scenario) / "expected.json").read_text())["operators"][0]["store_names"]
    for name in stores:
        assert name in text


# -- transformWithState leaks: a timer fired and the handler kept the state ------------------------------------
def _expected_timer_zombies(folder: Path) -> set[tuple[str, int, int]]:
    """``(key, version, fired batch)`` from what the function reported: after a timer event that did not
    clear ``cnt`` (``cnt != -1``), every version until the key's next input (which registers a timer)."""
    out = json.loads((folder / "output.json").read_text())
    expected = json.loads((folder / "expected.json").read_text())
    last_version = max(expected["committed_batches"]) + 1
    zombies: set[tuple[str, int, int]] = set()
    for key in {r["key"] for r in out}:
        events = sorted((r["_batch"], r["event"], r["cnt"]) for r in out if r["key"] == key)
        for b, event, cnt in events:
            if event != "timer" or cnt == -1:
                continue
            later_inputs = [c for c, e, _ in events if e == "input" and c > b]
            until = min(later_inputs) if later_inputs else last_version
            zombies.update((key, v, b) for v in range(b + 1, until + 1))
    return zombies


@pytest.mark.parametrize(
    ("scenario", "leak", "kind"),
    [
        ("rocks_tws_timers", "s1", "processing_time"),
        ("rocks_tws_timers_avro", "s1", "processing_time"),
        ("rocks_tws_event_time", "b", "event_time"),
    ],
)
def test_expired_finds_the_timer_handler_leak(
    scenario: str, leak: str, kind: str, checkpoint: Any, capsys: Any
) -> None:
    folder = checkpoint(scenario)
    expected = _expected_timer_zombies(folder)
    assert {k for k, _, _ in expected} == {leak}  # the scenario's one leaking key, from the function's output
    root = folder / "checkpoint"
    assert main(["expired", str(root), "--all-versions", "--jsonl"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(f["key"]["key"], f["version"], f["batch_id"]) for f in found} == expected
    assert {f["store_name"] for f in found} == {"cnt"}  # TTL'd variables are Spark's to clean
    assert all(f["category"] == "zombie" and f["timeout_kind"] == kind for f in found)
    assert all(f["timeout_ms"] <= f["threshold_ms"] for f in found)
    # Without --all-versions: only each partition's latest version.
    assert main(["expired", str(root), "--jsonl"]) == 0
    latest = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    last = max(v for _, v, _ in expected)
    assert {(f["key"]["key"], f["version"]) for f in latest} == {(k, v) for k, v, _ in expected if v == last}


def test_no_timer_zombies_without_timers_or_leaks(checkpoint: Any, capsys: Any) -> None:
    for scenario in ("rocks_tws", "rocks_tws_avro"):  # timeMode None: nothing to check
        assert main(["expired", str(checkpoint(scenario) / "checkpoint"), "--jsonl"]) == 0
        assert capsys.readouterr().out == ""


def test_timer_zombies_counted_at_earlier_versions_for_the_app(checkpoint: Any) -> None:
    """The app's over-time view: zombies of earlier versions counted (not kept), the latest ones found."""
    from collections import Counter as C

    from statelens.app.analysis._common import key_fields, run_to_end
    from statelens.app.analysis.expired import iter_expired

    folder = checkpoint("rocks_tws_timers")
    expected = _expected_timer_zombies(folder)
    last = max(v for _, v, _ in expected)
    counts: C = C()
    result = run_to_end(iter_expired(open_checkpoint(str(folder / "checkpoint")), version_counts=counts))
    found = {(key_fields(f.key)["key"], f.version) for f in result.examples}
    assert found == {(k, v) for k, v, _ in expected if v == last}
    assert counts == C({(0, "cnt", v, "zombie"): 1 for _, v, _ in expected if v != last})


def test_range_scan_spec_naming_a_column_twice_is_corrupt(checkpoint: Any) -> None:
    import dataclasses

    from statelens.readers._format.cf_store import decode_keys

    reader = open_checkpoint(str(checkpoint("rocks_tws_timers") / "checkpoint")).column_family_reader(0)
    family = reader.families["$ttl_ttlv"]
    for ordinals in ([0, 0], []):
        spec = {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "orderingOrdinals": ordinals}
        bad = dataclasses.replace(family, schema=dataclasses.replace(family.schema, key_encoder=spec))
        with pytest.raises(CorruptFileError, match="ordinals"):
            decode_keys(bad, [b"\x00" * 24], "state/0/_stateSchema/default/0_x")


COLUMNAR = ["rocks_join_v3", "rocks_join_v4", "rocks_tws", "rocks_tws_timers", "rocks_tws_event_time"]


def _family_readers(root: Path) -> list[ColumnFamilyStoreReader]:
    ckpt = open_checkpoint(str(root))
    out = []
    for op in ckpt.operators:
        for store in op.stores:
            reader = ckpt.store_reader(op.operator_id, store.store_name)
            if isinstance(reader, ColumnFamilyStoreReader):
                out.append(reader)
    return out


def test_column_families_decode_column_by_column_to_the_rows_of_the_per_row_path(checkpoint: Any) -> None:
    """Every family read columnar (replayed as arrays, keys split by their encoder with numpy) gives the
    rows of the per-row replay, at every version of every partition: lists, maps, timestamps as key
    postfix and prefix, internal families; only the order of a key removed and put again may differ."""
    encoders: Counter = Counter()
    for scenario in COLUMNAR:
        for reader in _family_readers(checkpoint(scenario) / "checkpoint"):
            if not reader.columnar:  # range-scan keyed internal families (timers, TTL indexes)
                assert reader.family.encoder == "RangeKeyScanStateEncoderSpec", (scenario, reader.store_name)
                continue
            for pid in reader.partition_ids():
                for v in reader.versions(pid):
                    got = reader._columnar_arrow(pid, v, True)
                    want = reader._rows_arrow(pid, v, True)
                    assert got is not None, (scenario, reader.store_name, pid, v)
                    assert got.schema.equals(want.schema, check_metadata=True), (scenario, reader.store_name)
                    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist())), (
                        scenario,
                        reader.store_name,
                        pid,
                        v,
                    )
                    encoders[(reader.family.encoder, reader.multi)] += got.num_rows
    assert {
        ("NoPrefixKeyStateEncoderSpec", False),
        ("NoPrefixKeyStateEncoderSpec", True),  # list state, join v3 values
        ("PrefixKeyScanStateEncoderSpec", False),  # map state
        ("TimestampAsPostfixKeyStateEncoderSpec", True),  # join v4
        ("TimestampAsPrefixKeyStateEncoderSpec", True),
    } <= {k for k, rows in encoders.items() if rows}, encoders


def test_avro_and_checksummed_families_keep_the_per_row_decode(checkpoint: Any) -> None:
    for scenario in ("rocks_tws_avro", "rocks_tws_checksum"):
        readers = _family_readers(checkpoint(scenario) / "checkpoint")
        assert readers and not any(r.columnar for r in readers), scenario


def test_damaged_version_byte_in_a_changelog_is_named_by_the_columnar_read(
    checkpoint: Any, monkeypatch: Any
) -> None:
    """A value whose version byte is damaged (a real changelog, one byte changed after decompression)
    is not decoded as a row: the read falls back to the per-row path, which names the file."""
    from statelens.readers._format.rocksdb_store import RocksDBColumnFamilyReader

    readers = {r.store_name: r for r in _family_readers(checkpoint("rocks_join_v4") / "checkpoint")}
    reader = readers["left-keyWithTsToValues"]
    files = reader.physical.files
    pid, version = next(
        (p, v)  # a version rebuilt through changelogs (not read from a zip of its own)
        for p in reader.partition_ids()
        for v in reader.versions(p)
        if reader.read_arrow(p, v).num_rows and files._base_for(files._partition(p), v) < v
    )
    prefix = reader._prefix(pid)
    read = RocksDBColumnFamilyReader._read_changelog_index

    def damaged(self: Any, sf: Any) -> Any:
        data, idx = read(self, sf)
        mine = [
            i
            for i, (s, n) in enumerate(zip(idx.key_start, idx.val_len, strict=True))
            if data[s : s + 2] == prefix and n > 5
        ]
        if not mine:
            return data, idx
        at = int(idx.val_start[mine[0]]) + 4  # after the element's length word: its version byte
        return data[:at] + b"\x07" + data[at + 1 :], idx

    monkeypatch.setattr(RocksDBColumnFamilyReader, "_read_changelog_index", damaged)
    fresh = {r.store_name: r for r in _family_readers(checkpoint("rocks_join_v4") / "checkpoint")}
    with pytest.raises(CorruptFileError, match="length-prefixed rows") as err:
        fresh["left-keyWithTsToValues"].read_arrow(pid, version)
    assert str(err.value.path).endswith(".changelog") and f"/{pid}/" in str(err.value.path), err.value.path

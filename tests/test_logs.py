"""Tests of readers.logs on real log bytes (spec-quoted files and files written by PySpark 4.3.0)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers import logs
from statelens.readers.errors import (
    CorruptFileError,
    StatelensError,
    TruncatedFileError,
    UnsupportedVersionError,
)
from statelens.readers.model import OffsetLogEntry
from tests._mutations import EDITS, ROCKSDB_PROVIDER, mutate, run_files_query

# --- real bytes -----------------------------------------------------------------------------------

#: docs/format.md §2.1 [RUN 4.1.1][TEST-RES checkpoint-version-2.1.0/metadata]
SPEC_METADATA = b'{"id":"78aa9857-107c-4971-acea-9c5495842e99"}'

#: docs/format.md §2.2, offsets/0 of a 4.1.1 run with one MemoryStream source [RUN 4.1.1]
SPEC_OFFSETS_V1 = (
    b"v1\n"
    b'{"batchWatermarkMs":0,"batchTimestampMs":1795340810531,"conf":{"spark.sql.streaming.stateStore.providerClass":'
    b'"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider","spark.sql.streaming.stateStore.'
    b'rocksdb.formatVersion":"5","spark.sql.streaming.stateStore.encodingFormat":"unsaferow","spark.sql.streaming.'
    b'statefulOperator.useStrictDistribution":"true","spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion":'
    b'"2","spark.sql.streaming.multipleWatermarkPolicy":"min","spark.sql.streaming.aggregation.stateFormatVersion":'
    b'"2","spark.sql.shuffle.partitions":"2","spark.sql.streaming.join.stateFormatVersion":"2","spark.sql.streaming.'
    b'stateStore.compression.codec":"lz4","spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan":"false"}}\n'
    b"0"
)

_CONF_430 = (
    b'"conf":{"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.state.'
    b'HDFSBackedStateStoreProvider","spark.sql.dropDuplicates.deterministicKeyOrder.enabled":"true","spark.sql.'
    b'streaming.stateStore.rocksdb.mergeOperatorVersion":"2","spark.sql.streaming.stateStore.rocksdb.formatVersion":'
    b'"5","spark.sql.streaming.queryEvolution.enableSourceEvolution":"false","spark.sql.streaming.stateStore.'
    b'encodingFormat":"unsaferow","spark.sql.streaming.statefulOperator.useStrictDistribution":"true","spark.sql.'
    b'streaming.flatMapGroupsWithState.stateFormatVersion":"2","spark.sql.streaming.multipleWatermarkPolicy":"min",'
    b'"spark.sql.streaming.stateStore.rowChecksum.enabled":"false","spark.sql.streaming.statefulOperator.'
    b'alwaysNullableOutput.enabled":"true","spark.sql.streaming.aggregation.stateFormatVersion":"2","spark.sql.'
    b'function.protobufExtensions.enabled":"false","spark.sql.shuffle.partitions":"2","spark.sql.streaming.join.'
    b'stateFormatVersion":"2","spark.sql.streaming.stateStore.compression.codec":"lz4","spark.sql.optimizer.'
    b'pruneFiltersCanPruneStreamingSubplan":"false"}'
)

#: offsets/0 of a PySpark 4.3.0 aggregation over a file source [RUN 4.3.0]
REAL_OFFSETS_V1_430 = (
    b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795383762077,' + _CONF_430 + b'}\n{"logOffset":0}'
)

#: offsets/1 of the same query with spark.sql.streaming.offsetLog.formatVersion=2 [RUN 4.3.0]
REAL_OFFSETS_V2_430 = (
    b'v2\n{"batchWatermarkMs":0,"batchTimestampMs":1795383766939,'
    + _CONF_430
    + b',"sourceMetadataInfo":{}}\n'
    b'0:{"logOffset":1}'
)

#: docs/format.md §2.5 [RUN 4.1.1]
SPEC_COMMIT_V1 = b'v1\n{"nextBatchWatermarkMs":0}'
#: docs/format.md §2.5, Spark 2.2/2.3 [TEST-RES checkpoint-version-2.3.1-flatMapGroupsWithState-state-format-1/commits/1]
SPEC_COMMIT_V1_EMPTY = b"v1\n{}"
#: commits/2 of a RocksDB aggregation with checkpointFormatVersion=2 [RUN 4.3.0]
REAL_COMMIT_V2_430 = (
    b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["d03a6211-298b-46eb-a2cd-aa12250a8b12"],'
    b'["8323d96f-9e7b-4b0b-a1ba-22f7a20fd150"]]}}'
)
#: sources/0/1 of a file source [RUN 4.3.0]
REAL_FILE_SOURCE_LOG = (
    b'v1\n{"path":"file:///tmp/sl_ckpts/agg_src/part-001.json","timestamp":1795383764919,"batchId":1}'
)
#: docs/format.md §2.3 Kafka example
SPEC_KAFKA_OFFSET = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'

REAL_FILES = {
    "metadata": SPEC_METADATA,
    "offsets_v1_411": SPEC_OFFSETS_V1,
    "offsets_v1_430": REAL_OFFSETS_V1_430,
    "offsets_v2_430": REAL_OFFSETS_V2_430,
    "commit_v1": SPEC_COMMIT_V1,
    "commit_v1_empty": SPEC_COMMIT_V1_EMPTY,
    "commit_v2": REAL_COMMIT_V2_430,
    "file_source_log": REAL_FILE_SOURCE_LOG,
}


# --- metadata -------------------------------------------------------------------------------------


def test_metadata_query_id():
    assert logs.parse_metadata(SPEC_METADATA, "metadata") == "78aa9857-107c-4971-acea-9c5495842e99"


def test_metadata_extra_fields_kept():
    data = b'{"id":"q","extra":{"a":1}}\n'
    assert logs.parse_metadata(data, "metadata") == "q"
    assert logs.parse_metadata_fields(data, "metadata") == {"id": "q", "extra": {"a": 1}}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", TruncatedFileError),
        (b"  \n", TruncatedFileError),
        (b'{"id":', CorruptFileError),
        (b'{"name":"x"}', CorruptFileError),
        (b'["id"]', CorruptFileError),
        (b'{"id":"\xff"}', CorruptFileError),
    ],
)
def test_metadata_errors(data, error):
    with pytest.raises(error) as info:
        logs.parse_metadata(data, "ck/metadata")
    assert info.value.path == "ck/metadata"


# --- offsets --------------------------------------------------------------------------------------


def test_offsets_v1_spec_example():
    e = logs.parse_offsets(SPEC_OFFSETS_V1, "offsets/0", 0)
    assert isinstance(e, OffsetLogEntry)
    assert (e.batch_id, e.format_version, e.watermark_ms, e.timestamp_ms) == (0, 1, 0, 1795340810531)
    assert e.conf["spark.sql.shuffle.partitions"] == "2"
    assert e.conf["spark.sql.streaming.stateStore.compression.codec"] == "lz4"
    assert len(e.conf) == 11
    assert all(isinstance(v, str) for v in e.conf.values())
    assert len(e.sources) == 1
    s = e.sources[0]
    assert (s.index, s.raw, s.parsed, s.source_kind, s.source_id) == (0, "0", 0, "long", None)
    assert e.path == "offsets/0"
    assert e.extra == {}


def test_offsets_v1_real_430_file_source():
    e = logs.parse_offsets(REAL_OFFSETS_V1_430, "offsets/0", 0)
    assert e.timestamp_ms == 1795383762077
    assert e.conf["spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"] == "2"
    assert [(s.raw, s.parsed, s.source_kind) for s in e.sources] == [
        ('{"logOffset":0}', {"logOffset": 0}, "file")
    ]


def test_offsets_v2_real_430():
    e = logs.parse_offsets(REAL_OFFSETS_V2_430, "offsets/1", 1)
    assert (e.batch_id, e.format_version, e.timestamp_ms) == (1, 2, 1795383766939)
    assert e.extra == {"sourceMetadataInfo": {}}
    assert len(e.sources) == 1
    s = e.sources[0]
    assert (s.source_id, s.raw, s.parsed, s.source_kind) == ("0", '{"logOffset":1}', {"logOffset": 1}, "file")


def test_offsets_v2_sources_metadata_and_control_batch():
    meta = {
        "batchWatermarkMs": 5,
        "batchTimestampMs": 7,
        "conf": {},
        "sourceMetadataInfo": {"src_a": {"sourceId": "src_a", "providerName": "kafka", "apiVersion": "v2"}},
        "controlBatchInfo": {"operationType": "evolve", "operationInfo": "x"},
    }
    data = f'v2\n{json.dumps(meta)}\nsrc_a:{SPEC_KAFKA_OFFSET}\nb:-\nc:{{"a:b":1}}\n'.encode()
    e = logs.parse_offsets(data, "offsets/3", 3)
    assert e.watermark_ms == 5
    assert e.extra["controlBatchInfo"] == {"operationType": "evolve", "operationInfo": "x"}
    assert e.extra["sourceMetadataInfo"]["src_a"]["providerName"] == "kafka"
    assert [(s.index, s.source_id, s.source_kind) for s in e.sources] == [
        (0, "src_a", "kafka"),
        (1, "b", "unknown"),
        (2, "c", "unknown"),
    ]
    assert e.sources[0].raw == SPEC_KAFKA_OFFSET
    assert e.sources[1].raw is None
    assert e.sources[1].parsed is None
    assert e.sources[2].parsed == {"a:b": 1}  # split at the first ':' only


def test_offsets_v2_requires_metadata_and_prefix():
    with pytest.raises(CorruptFileError, match="metadata"):
        logs.parse_offsets(b"v2\n\n0:1", "offsets/0", 0)
    with pytest.raises(CorruptFileError, match="sourceId") as info:
        logs.parse_offsets(b'v2\n{"batchWatermarkMs":0}\n0:1\n17', "offsets/0", 0)
    assert info.value.offset == len(b'v2\n{"batchWatermarkMs":0}\n0:1\n')


def test_offsets_trailing_newline_and_crlf():
    a = logs.parse_offsets(SPEC_OFFSETS_V1 + b"\n", "o", 0)
    b = logs.parse_offsets(SPEC_OFFSETS_V1.replace(b"\n", b"\r\n"), "o", 0)
    ref = logs.parse_offsets(SPEC_OFFSETS_V1, "o", 0)
    assert a == ref
    assert b == ref


def test_offsets_2_1_style_without_conf_and_timestamp():
    e = logs.parse_offsets(b'v1\n{"batchWatermarkMs":1000}\n0\n-', "offsets/4", 4)
    assert (e.watermark_ms, e.timestamp_ms, e.conf) == (1000, None, {})
    assert [s.raw for s in e.sources] == ["0", None]


def test_offsets_empty_metadata_line():
    e = logs.parse_offsets(b"v1\n\n5", "offsets/0", 0)
    assert (e.watermark_ms, e.timestamp_ms, e.conf, e.extra) == (0, None, {}, {})
    assert e.sources[0].parsed == 5


def test_offsets_conf_values_become_strings():
    e = logs.parse_offsets(b'v1\n{"conf":{"a":2,"b":true,"c":"x"}}\n0', "o", 0)
    assert e.conf == {"a": "2", "b": "true", "c": "x"}


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("0", "long"),
        ("123456789012", "long"),
        ('{"logOffset":3}', "file"),
        ('{"offset":10,"timestamp":1700000000000}', "rate"),
        (SPEC_KAFKA_OFFSET, "kafka"),
        ('{"t":{}}', "kafka"),
        ("{}", "unknown"),
        ('{"logOffset":3,"more":1}', "unknown"),
        ('"text"', "unknown"),
        ("true", "unknown"),
        ('{"t":{"x":1}}', "unknown"),
        ("[1,2]", "unknown"),
    ],
)
def test_source_kind_guess(line, kind):
    e = logs.parse_offsets(b"v1\n\n" + line.encode(), "o", 0)
    assert e.sources[0].source_kind == kind
    assert e.sources[0].raw == line


def test_offsets_raw_kept_exactly():
    line = '{"topicB":{"0":-2},  "topicA":{"1":-1,"0":23}}'
    e = logs.parse_offsets(b"v1\n\n" + line.encode(), "o", 0)
    assert e.sources[0].raw == line


def test_offsets_java_serialized_spark_2_0():
    data = b"\xac\xed\x00\x05sr\x00-org.apache.spark.sql.execution.streaming.OffsetSeq"
    with pytest.raises(UnsupportedVersionError, match="Java-serialized") as info:
        logs.parse_offsets(data, "ck/offsets/0", 0)
    assert info.value.path == "ck/offsets/0"


@pytest.mark.parametrize("tag", [b"v3", b"v9", b"v100"])
def test_offsets_newer_version(tag):
    data = SPEC_OFFSETS_V1.replace(b"v1", tag, 1)
    with pytest.raises(UnsupportedVersionError) as info:
        logs.parse_offsets(data, "ck/offsets/7", 7)
    assert tag.decode() in str(info.value)
    assert "ck/offsets/7" in str(info.value)


@pytest.mark.parametrize(
    ("data", "error", "offset"),
    [
        (b"", TruncatedFileError, 0),
        (b"v1", TruncatedFileError, None),
        (b"v1\n", TruncatedFileError, None),
        (b"x1\n{}\n0", CorruptFileError, 0),
        (b"v0\n{}\n0", CorruptFileError, 0),
        (b"v\n{}\n0", CorruptFileError, 0),
        (b'v1\n{"batchWatermarkMs":0,\n0', CorruptFileError, 3 + len(b'{"batchWatermarkMs":0,')),
        (b"v1\n[]\n0", CorruptFileError, 3),
        (b'v1\n{"batchWatermarkMs":"0"}\n0', CorruptFileError, 3),
        (b'v1\n{"conf":[1]}\n0', CorruptFileError, 3),
        (b"v1\n{}\n{bad", CorruptFileError, 7),
        (b"v1\n{}\n0\n\n1", CorruptFileError, 8),
        (b"v1\n{}\n\xc3(", CorruptFileError, 6),
    ],
)
def test_offsets_errors(data, error, offset):
    with pytest.raises(error) as info:
        logs.parse_offsets(data, "ck/offsets/0", 0)
    assert info.value.path == "ck/offsets/0"
    assert info.value.offset == offset


def test_bad_json_offset_points_into_non_ascii_line():
    data = 'v1\n{"conf":{"é":"x"},}\n0'.encode()
    with pytest.raises(CorruptFileError) as info:
        logs.parse_offsets(data, "o", 0)
    assert data[info.value.offset : info.value.offset + 1] == b"}"


# --- effective conf -------------------------------------------------------------------------------


def test_effective_conf_overlays_the_newest_on_the_earliest_and_fills_defaults():
    e0 = logs.parse_offsets(
        b'v1\n{"conf":{"spark.sql.shuffle.partitions":"3","spark.sql.streaming.only.early":"x"}}\n0',
        "offsets/10",
        10,
    )
    e1 = logs.parse_offsets(b'v1\n{"conf":{"spark.sql.shuffle.partitions":"2"}}\n0', "offsets/11", 11)
    conf = logs.effective_conf([e1, e0])
    assert conf["spark.sql.shuffle.partitions"] == "2"  # the newest entry's, as a restart sets it
    assert conf["spark.sql.streaming.only.early"] == "x"
    assert conf["spark.sql.streaming.stateStore.compression.codec"] == "lz4"
    assert conf["spark.sql.streaming.aggregation.stateFormatVersion"] == "1"
    assert conf["spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"] == "1"
    assert conf["spark.sql.streaming.join.stateFormatVersion"] == "1"
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("HDFSBackedStateStoreProvider")
    assert conf["spark.sql.streaming.stateStore.encodingFormat"] == "unsaferow"


def test_effective_conf_newest_entry_wins_as_on_restart():
    """A repartition (Spark 4.2+) records a new partition count in the batch it adds: a restart uses it."""
    old = logs.parse_offsets(b'v1\n{"conf":{"spark.sql.shuffle.partitions":"2"}}\n0', "offsets/7", 7)
    new = logs.parse_offsets(b'v1\n{"conf":{"spark.sql.shuffle.partitions":"4"}}\n0', "offsets/8", 8)
    assert logs.effective_conf([new, old])["spark.sql.shuffle.partitions"] == "4"


def test_effective_conf_recorded_values_win():
    e = logs.parse_offsets(REAL_OFFSETS_V1_430, "offsets/0", 0)
    conf = logs.effective_conf([e])
    assert conf["spark.sql.streaming.aggregation.stateFormatVersion"] == "2"
    assert conf["spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"] == "2"
    # every key Spark 4.3.0 records is either a documented default or one of the two without default
    assert set(e.conf) - set(logs.SPARK_CONF_DEFAULTS) == {
        "spark.sql.shuffle.partitions",
        "spark.sql.streaming.stateStore.rocksdb.formatVersion",
    }


def test_effective_conf_no_entries():
    assert logs.effective_conf([]) == logs.SPARK_CONF_DEFAULTS
    assert "spark.sql.shuffle.partitions" not in logs.effective_conf([])


# --- Kafka helpers --------------------------------------------------------------------------------


def test_kafka_partition_offsets():
    flat = logs.kafka_partition_offsets(json.loads(SPEC_KAFKA_OFFSET))
    assert flat == {("topicA", 0): 23, ("topicA", 1): -1, ("topicB", 0): -2}
    assert list(flat) == sorted(flat)


def test_kafka_record_counts():
    prev = {"t": {"0": 10, "1": 5}, "u": {"0": -2}}
    cur = {"t": {"0": 25, "1": 5, "2": 7}, "u": {"0": 4}}
    assert logs.kafka_record_counts(prev, cur) == {
        ("t", 0): 15,
        ("t", 1): 0,
        ("t", 2): None,
        ("u", 0): None,
    }


@pytest.mark.parametrize("bad", [0, {"logOffset": 1}, {"t": {"x": 1}}, {"t": {"0": "1"}}, {}, None])
def test_kafka_helpers_reject_other_shapes(bad):
    with pytest.raises(CorruptFileError):
        logs.kafka_partition_offsets(bad, "offsets/0")
    with pytest.raises(CorruptFileError):
        logs.kafka_record_counts({"t": {"0": 1}}, bad)


def test_kafka_initial_offsets():
    data = b"\x00v1\n" + SPEC_KAFKA_OFFSET.encode()
    assert logs.parse_kafka_initial_offsets(data, "sources/0/0") == json.loads(SPEC_KAFKA_OFFSET)
    assert logs.parse_kafka_initial_offsets(data[1:], "sources/0/0") == json.loads(SPEC_KAFKA_OFFSET)
    with pytest.raises(UnsupportedVersionError):
        logs.parse_kafka_initial_offsets(b"\x00v2\n{}", "sources/0/0")
    with pytest.raises(CorruptFileError):
        logs.parse_kafka_initial_offsets(b"\x00v1\n[1]", "sources/0/0")


# --- commits --------------------------------------------------------------------------------------


def test_commit_v1():
    c = logs.parse_commit(SPEC_COMMIT_V1, "commits/0", 0)
    assert (c.batch_id, c.format_version, c.next_watermark_ms, c.state_unique_ids, c.extra) == (
        0,
        1,
        0,
        None,
        {},
    )
    assert c.path == "commits/0"


def test_commit_v1_empty_json_and_missing_line():
    for data in (SPEC_COMMIT_V1_EMPTY, b"v1", b"v1\n", b"v1\n\n"):
        c = logs.parse_commit(data, "commits/1", 1)
        assert (c.format_version, c.next_watermark_ms) == (1, 0)


def test_commit_v1_watermark_and_unknown_fields():
    c = logs.parse_commit(b'v1\n{"nextBatchWatermarkMs":1704067230000,"future":[1]}\n', "c", 2)
    assert c.next_watermark_ms == 1704067230000
    assert c.extra == {"future": [1]}


def test_commit_v2_real():
    c = logs.parse_commit(REAL_COMMIT_V2_430, "commits/2", 2)
    assert c.format_version == 2
    assert c.state_unique_ids == {
        "0": [["d03a6211-298b-46eb-a2cd-aa12250a8b12"], ["8323d96f-9e7b-4b0b-a1ba-22f7a20fd150"]]
    }
    assert c.extra == {}


def test_commit_v2_without_ids():
    c = logs.parse_commit(b'v2\n{"nextBatchWatermarkMs":3}', "c", 0)
    assert (c.format_version, c.next_watermark_ms, c.state_unique_ids) == (2, 3, None)


def test_commit_v3_sink_metadata_kept():
    sink = {
        "s": {"sinkName": "s", "commitOffset": "1", "providerName": "p", "apiVersion": "v2", "isActive": True}
    }
    body = {"nextBatchWatermarkMs": 0, "stateUniqueIds": {"0": [["u"]]}, "sinkMetadataMap": sink}
    c = logs.parse_commit(b"v3\n" + json.dumps(body).encode(), "c", 0)
    assert c.format_version == 3
    assert c.state_unique_ids == {"0": [["u"]]}
    assert c.extra == {"sinkMetadataMap": sink}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", TruncatedFileError),
        (b"v9\n{}", UnsupportedVersionError),
        (b"v4\n{}", UnsupportedVersionError),
        (b"1\n{}", CorruptFileError),
        (b"v1\n{nextBatchWatermarkMs:0}", CorruptFileError),
        (b'v1\n{"nextBatchWatermarkMs":1.5}', CorruptFileError),
        (b'v2\n{"stateUniqueIds":{"0":["u"]}}', CorruptFileError),
        (b'v2\n{"stateUniqueIds":[]}', CorruptFileError),
    ],
)
def test_commit_errors(data, error):
    with pytest.raises(error) as info:
        logs.parse_commit(data, "ck/commits/5", 5)
    assert info.value.path == "ck/commits/5"
    if error is UnsupportedVersionError:
        assert data[:2].decode() in str(info.value)


# --- file source log ------------------------------------------------------------------------------


def test_file_source_log_real():
    entries = logs.parse_file_source_log(REAL_FILE_SOURCE_LOG, "sources/0/1")
    assert entries == [
        {"path": "file:///tmp/sl_ckpts/agg_src/part-001.json", "timestamp": 1795383764919, "batchId": 1}
    ]


def test_file_source_log_compact():
    lines = [
        json.dumps({"path": f"file:///in/p{i}.json", "timestamp": 100 + i, "batchId": i // 2})
        for i in range(6)
    ]
    data = ("v1\n" + "\n".join(lines) + "\n").encode()
    entries = logs.parse_file_source_log(data, "sources/0/9.compact")
    assert [e["batchId"] for e in entries] == [0, 0, 1, 1, 2, 2]


def test_file_source_log_only_version_line():
    assert logs.parse_file_source_log(b"v1\n", "sources/0/3") == []


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", TruncatedFileError),
        (b'v2\n{"path":"a","timestamp":1,"batchId":0}', UnsupportedVersionError),
        (b"v1\n{bad}", CorruptFileError),
        (b'v1\n{"timestamp":1,"batchId":0}', CorruptFileError),
        (b'v1\n{"path":"a","timestamp":"1","batchId":0}', CorruptFileError),
    ],
)
def test_file_source_log_errors(data, error):
    with pytest.raises(error):
        logs.parse_file_source_log(data, "sources/0/0")


# --- file names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "batch_id"),
    [
        ("0", 0),
        ("17", 17),
        ("007", 7),
        ("+3", 3),
        ("-1", -1),  # Long.parseLong accepts it, so Spark lists it
        ("9223372036854775807", 9223372036854775807),
        ("9223372036854775808", None),
        ("", None),
        ("+", None),
        (".0.crc", None),
        ("0.crc", None),
        (".0.0dada23b-2142-4db7-a392-3c06434a66f4.tmp", None),
        ("9.compact", None),
        (" 1", None),
        ("1 ", None),
        ("1_000", None),
        ("0x1", None),
        ("metadata", None),
    ],
)
def test_batch_file_names(name, batch_id):
    assert logs.batch_id_from_name(name) == batch_id
    assert logs.is_batch_file_name(name) is (batch_id is not None)


# --- robustness -----------------------------------------------------------------------------------


def _parse_any(kind: str, data: bytes):
    if kind == "metadata":
        return logs.parse_metadata(data, "f")
    if kind.startswith("offsets"):
        return logs.parse_offsets(data, "f", 0)
    if kind.startswith("commit"):
        return logs.parse_commit(data, "f", 0)
    return logs.parse_file_source_log(data, "f")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(REAL_FILES)),
    edits=EDITS,
)
def test_mutated_real_logs_give_value_or_statelens_error(kind, edits):
    data = mutate(REAL_FILES[kind], edits)
    error = None
    try:
        _parse_any(kind, bytes(data))
    except StatelensError as err:
        error = err
    assert error is None or error.path == "f"


# --- every log file of every real scenario (PySpark 4.3.0) ----------------------------------------

SCENARIOS = [
    "agg_count",
    "window_agg_watermark",
    "dedup_watermark",
    "join",
    "pandas_state_processing",
    "pandas_state_event",
    "codec_zstd",
    "codec_snappy",
    "codec_lzf",
    "rich_types",
    "uncommitted",
    "agg_many_partitions",
]


def _batch_files(folder):
    """``{batch_id: path}`` of a metadata log folder, skipping what Spark skips (.crc, temp files)."""
    out = {}
    for p in folder.iterdir():
        batch_id = logs.batch_id_from_name(p.name)
        if batch_id is not None:
            out[batch_id] = p
        else:
            assert p.name.startswith(".") or p.name.endswith(".compact"), p
    return dict(sorted(out.items()))


@pytest.mark.spark
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_log_file_of_real_checkpoints(checkpoint, name):
    scenario = checkpoint(name)
    expected = json.loads((scenario / "expected.json").read_text())
    cp = scenario / "checkpoint"

    query_id = logs.parse_metadata((cp / "metadata").read_bytes(), "metadata")
    assert len(query_id) == 36
    assert query_id.count("-") == 4

    offsets = {
        b: logs.parse_offsets(p.read_bytes(), f"offsets/{b}", b)
        for b, p in _batch_files(cp / "offsets").items()
    }
    assert list(offsets) == expected["batches"]
    for b, e in offsets.items():
        assert (e.batch_id, e.format_version, e.path) == (b, 1, f"offsets/{b}")
        assert e.watermark_ms == expected["batch_watermark_ms"][str(b)]
        assert e.timestamp_ms == expected["batch_timestamp_ms"][str(b)]
        assert all(isinstance(v, str) for v in e.conf.values())
        # every scenario reads files: each source offset is {"logOffset": n}
        assert [s.source_kind for s in e.sources] == ["file"] * len(e.sources)
        assert [s.raw for s in e.sources] == [json.dumps(s.parsed, separators=(",", ":")) for s in e.sources]

    commits = {
        b: logs.parse_commit(p.read_bytes(), f"commits/{b}", b)
        for b, p in _batch_files(cp / "commits").items()
    }
    assert list(commits) == expected["committed_batches"]
    for b, c in commits.items():
        assert (c.format_version, c.state_unique_ids, c.extra) == (1, None, {})
        assert c.next_watermark_ms == expected["next_watermark_ms"][str(b)]

    conf = logs.effective_conf(offsets.values())
    assert int(conf["spark.sql.shuffle.partitions"]) == expected["num_partitions"]
    assert conf["spark.sql.streaming.stateStore.compression.codec"] == expected["codec"]
    assert conf["spark.sql.streaming.stateStore.providerClass"].rsplit(".", 1)[-1] == expected["provider"]

    # sources/<i>/: the files each source took, one log file per source batch
    last = offsets[max(offsets)]
    total_entries = 0
    for i, source in enumerate(last.sources):
        entries = []
        for b, p in _batch_files(cp / "sources" / str(i)).items():
            got = logs.parse_file_source_log(p.read_bytes(), f"sources/{i}/{b}")
            assert {e["batchId"] for e in got} == {b}
            entries.extend(got)
        assert max(e["batchId"] for e in entries) == source.parsed["logOffset"]
        assert len({e["path"] for e in entries}) == len(entries)
        total_entries += len(entries)
    inputs = [p for p in (scenario / "input").rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert total_entries == len(inputs)


# --- offsets v2 and commits v2, written by PySpark 4.3.0 --------------------------


_ROCKSDB = ROCKSDB_PROVIDER
_V2_BATCHES = [
    [
        {"user": "a", "v": 1, "ts": "2024-01-01T00:00:01Z"},
        {"user": "b", "v": 2, "ts": "2024-01-01T00:00:02Z"},
    ],
    [{"user": "a", "v": 3, "ts": "2024-01-01T00:00:30Z"}],
    [{"user": "c", "v": 4, "ts": "2024-01-01T00:01:30Z"}],
]


@pytest.fixture(scope="module")
def v2_formats_checkpoint(spark, tmp_path_factory):
    """A RocksDB aggregation with offsets log v2 and checkpoint format v2 (commits v2)."""
    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.providerClass": _ROCKSDB,
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
        "spark.sql.streaming.offsetLog.formatVersion": "2",
    }
    cp = run_files_query(
        spark,
        tmp_path_factory.mktemp("v2_formats"),
        lambda df: df.groupBy("user").count(),
        "update",
        conf,
        _V2_BATCHES,
    )
    return spark, cp


@pytest.mark.spark
@pytest.mark.slow
def test_offsets_v2_and_commits_v2_written_by_spark(v2_formats_checkpoint):
    from tests.oracle import read_state_metadata
    from tests.spark_checkpoints import session_conf

    spark, cp = v2_formats_checkpoint
    offsets = {
        b: logs.parse_offsets(p.read_bytes(), str(p), b) for b, p in _batch_files(cp / "offsets").items()
    }
    commits = {
        b: logs.parse_commit(p.read_bytes(), str(p), b) for b, p in _batch_files(cp / "commits").items()
    }
    assert list(offsets) == list(commits) == [0, 1, 2]
    for b, e in offsets.items():
        assert e.format_version == 2
        assert "sourceMetadataInfo" in e.extra
        assert [(s.source_id, s.parsed, s.source_kind) for s in e.sources] == [
            ("0", {"logOffset": b}, "file")
        ]
    conf = logs.effective_conf(offsets.values())
    assert conf["spark.sql.streaming.stateStore.providerClass"] == _ROCKSDB

    # Each commit names, per partition, the unique id of the RocksDB checkpoint the batch wrote:
    # state/0/<p>/<b+1>_<uniqueId>.zip must exist.
    for b, c in commits.items():
        assert c.format_version == 2
        assert set(c.state_unique_ids) == {"0"}
        per_partition = c.state_unique_ids["0"]
        assert len(per_partition) == 2
        for p, ids in enumerate(per_partition):
            assert len(ids) == 1
            assert (cp / "state" / "0" / str(p) / f"{b + 1}_{ids[0]}.zip").is_file()

    # Spark's state-metadata reads minBatchId/maxBatchId from the same commit log.
    with session_conf(spark, {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}):
        (row,) = read_state_metadata(spark, cp)
    assert (row["minBatchId"], row["maxBatchId"]) == (min(commits), max(commits))


def test_offsets_v1_of_a_version_and_a_metadata_line_holds_no_source():
    """``OffsetSeqLog`` reads every line after the metadata line as a source's offset: none after it is a
    batch of no sources, not a cut file; only a file ending after its version line is refused."""
    two_lines = b"\n".join(SPEC_OFFSETS_V1.split(b"\n")[:2])
    e = logs.parse_offsets(two_lines, "ck/offsets/0", 0)
    assert e.sources == () and e.timestamp_ms == 1795340810531
    with pytest.raises(
        TruncatedFileError, match=r"offsets file ends after its version line \(no metadata line\)"
    ):
        logs.parse_offsets(b"v1", "ck/offsets/0", 0)


def test_a_bad_version_line_names_the_file_kind_and_shows_40_characters():
    with pytest.raises(
        CorruptFileError, match="malformed commit log file: first line '1' is not a version tag"
    ):
        logs.parse_commit(b"1\n{}", "ck/commits/5", 5)
    for tag, shown in [("x" * 40, "x" * 40), ("y" * 41, "y" * 40 + "...")]:
        with pytest.raises(CorruptFileError) as info:
            logs.parse_commit(f"{tag}\n{{}}".encode(), "ck/commits/5", 5)
        assert f"first line {shown!r} is not" in str(info.value)

"""Tests of readers.opmeta on real operator metadata files (spec-quoted and written by PySpark 4.3.0)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statelens.readers import opmeta
from statelens.readers.errors import (
    CorruptFileError,
    StatelensError,
    TruncatedFileError,
    UnsupportedVersionError,
)
from tests._mutations import EDITS, mutate

#: docs/format.md §8.1 [RUN 4.1.1]
SPEC_V1_AGG = (
    b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
    b'"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
)

#: state/0/_metadata/metadata of a stream-stream join (format v2) [RUN 4.3.0]
REAL_V1_JOIN = (
    b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"symmetricHashJoin"},"stateStoreInfo":['
    b'{"storeName":"left-keyToNumValues","numColsPrefixKey":0,"numPartitions":2},'
    b'{"storeName":"left-keyWithIndexToValue","numColsPrefixKey":0,"numPartitions":2},'
    b'{"storeName":"right-keyToNumValues","numColsPrefixKey":0,"numPartitions":2},'
    b'{"storeName":"right-keyWithIndexToValue","numColsPrefixKey":0,"numPartitions":2}]}'
)

#: state/0/_metadata/v2/0 of transformWithStateInPandas [RUN 4.3.0]
REAL_V2_TWS = (
    b'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"transformWithStateInPandasExec"},"stateStoreInfo":'
    b'[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2,"stateSchemaFilePaths":["file:/tmp/sl_ckpts/'
    b'tws_pandas/state/0/_stateSchema/default/0_3e286b3d-e2f2-4e32-9631-2a6039ff8e5e"]}],"operatorPropertiesJson":'
    b'"{\\"timeMode\\":\\"NoTime\\",\\"outputMode\\":\\"Update\\",\\"stateVariables\\":[{\\"stateName\\":\\"mp\\",'
    b'\\"stateVariableType\\":\\"MapState\\",\\"ttlEnabled\\":false},{\\"stateName\\":\\"cnt\\",\\"stateVariableType'
    b'\\":\\"ValueState\\",\\"ttlEnabled\\":false},{\\"stateName\\":\\"lst\\",\\"stateVariableType\\":\\"ListState\\",'
    b'\\"ttlEnabled\\":false}]}"}'
)

#: state/0/_metadata/v2/0 of a stream-stream join with join.stateFormatVersion=4 [RUN 4.3.0]
REAL_V2_JOIN_V4 = (
    b'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"symmetricHashJoin"},"stateStoreInfo":[{"storeName":'
    b'"default","numColsPrefixKey":0,"numPartitions":2,"stateSchemaFilePaths":["file:/tmp/sl_ckpts/join_v4/state/0/'
    b'_stateSchema/default/0_da9dcb3d-1522-4431-ba1b-96933cc9a442"]}],"operatorPropertiesJson":'
    b'"{\\"useVirtualColumnFamilies\\":true}"}'
)

#: The 4.0.0 form (docs/format.md §8.2, TEST-RES checkpoint-version-4.0.0-tws-avro/state/0/_metadata/v2/0), one line,
#: with the elided parts of the quoted path filled in.
SPEC_V2_400 = (
    b'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"transformWithStateExec"},"stateStoreInfo":[{"storeName":'
    b'"default","numColsPrefixKey":0,"numPartitions":5,"stateSchemaFilePath":"file:/Users/x/ck/state/0/_stateSchema/'
    b'default/0_6b12d3c5-0000-4000-8000-000000000000"}],"operatorPropertiesJson":"{\\"timeMode\\":\\"NoTime\\",'
    b'\\"outputMode\\":\\"Update\\",\\"stateVariables\\":[{\\"stateName\\":\\"countState\\",\\"stateVariableType\\":'
    b'\\"ValueState\\",\\"ttlEnabled\\":false}]}"}'
)

REAL = {"v1_agg": SPEC_V1_AGG, "v1_join": REAL_V1_JOIN, "v2_tws": REAL_V2_TWS, "v2_join_v4": REAL_V2_JOIN_V4}


def test_v1_aggregation():
    m = opmeta.parse_operator_metadata(SPEC_V1_AGG, "state/0/_metadata/metadata")
    assert (m.operator_id, m.operator_name, m.format_version, m.path) == (
        0,
        "stateStoreSave",
        1,
        "state/0/_metadata/metadata",
    )
    assert m.stores == (opmeta.StateStoreMetadata("default", 0, 2, ()),)
    assert (m.properties, m.properties_json, m.extra) == ({}, None, {})


def test_v1_join_four_stores():
    m = opmeta.parse_operator_metadata(REAL_V1_JOIN, "f")
    assert [s.store_name for s in m.stores] == [
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    ]
    assert m.store("right-keyToNumValues").num_partitions == 2
    assert m.store("default") is None


def test_v1_session_window_prefix_key_and_trailing_newline():
    data = SPEC_V1_AGG.replace(b"stateStoreSave", b"sessionWindowStateStoreSaveExec").replace(
        b'"numColsPrefixKey":0', b'"numColsPrefixKey":1'
    )
    m = opmeta.parse_operator_metadata(data + b"\n", "f")
    assert m.stores[0].num_cols_prefix_key == 1


def test_v2_transform_with_state_real():
    m = opmeta.parse_operator_metadata(REAL_V2_TWS, "state/0/_metadata/v2/0")
    assert (m.operator_name, m.format_version) == ("transformWithStateInPandasExec", 2)
    (store,) = m.stores
    assert store.state_schema_file_paths == (
        "file:/tmp/sl_ckpts/tws_pandas/state/0/_stateSchema/default/0_3e286b3d-e2f2-4e32-9631-2a6039ff8e5e",
    )
    assert m.properties["timeMode"] == "NoTime"
    assert m.properties["outputMode"] == "Update"
    assert [(v["stateName"], v["stateVariableType"]) for v in m.properties["stateVariables"]] == [
        ("mp", "MapState"),
        ("cnt", "ValueState"),
        ("lst", "ListState"),
    ]
    assert json.loads(m.properties_json) == m.properties


def test_v2_join_v4_real():
    m = opmeta.parse_operator_metadata(REAL_V2_JOIN_V4, "f")
    assert m.operator_name == "symmetricHashJoin"
    assert m.properties == {"useVirtualColumnFamilies": True}


def test_v2_spark_400_single_path_string():
    m = opmeta.parse_operator_metadata(SPEC_V2_400, "f")
    assert m.stores[0].num_partitions == 5
    assert m.stores[0].state_schema_file_paths == (
        "file:/Users/x/ck/state/0/_stateSchema/default/0_6b12d3c5-0000-4000-8000-000000000000",
    )
    assert m.properties["stateVariables"][0]["stateName"] == "countState"


def test_v2_both_path_forms_merged():
    meta = json.loads(REAL_V2_TWS[3:])
    meta["stateStoreInfo"][0]["stateSchemaFilePath"] = "file:/old/state/0/_stateSchema/default/0_a"
    m = opmeta.parse_operator_metadata(b"v2\n" + json.dumps(meta).encode(), "f")
    assert len(m.stores[0].state_schema_file_paths) == 2


def test_v2_without_properties_and_unknown_fields_kept():
    meta = json.loads(REAL_V2_JOIN_V4[3:])
    del meta["operatorPropertiesJson"]
    meta["future"] = 1
    m = opmeta.parse_operator_metadata(b"v2\n" + json.dumps(meta).encode(), "f")
    assert (m.properties, m.properties_json, m.extra) == ({}, None, {"future": 1})


def test_dataclasses_are_frozen():
    m = opmeta.parse_operator_metadata(SPEC_V1_AGG, "f")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.operator_id = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.stores[0].num_partitions = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("uri", "name", "relpath"),
    [
        (
            "file:/tmp/sl_ckpts/tws_pandas/state/0/_stateSchema/default/0_3e286b3d-e2f2-4e32-9631-2a6039ff8e5e",
            "0_3e286b3d-e2f2-4e32-9631-2a6039ff8e5e",
            "state/0/_stateSchema/default/0_3e286b3d-e2f2-4e32-9631-2a6039ff8e5e",
        ),
        ("s3a://bucket/a b/ck/state/2/_stateSchema/default/5_u", "5_u", "state/2/_stateSchema/default/5_u"),
        ("hdfs://nn:8020/x/0_u/", "0_u", "state/7/_stateSchema/st/0_u"),
        ("0_u", "0_u", "state/7/_stateSchema/st/0_u"),
    ],
)
def test_schema_file_name_and_relpath(uri, name, relpath):
    assert opmeta.schema_file_name(uri) == name
    assert opmeta.schema_file_relpath(7, "st", uri) == relpath


@pytest.mark.parametrize("uri", ["", "/", "file:", "file:/"])
def test_schema_file_name_errors(uri):
    with pytest.raises(CorruptFileError):
        opmeta.schema_file_name(uri)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", TruncatedFileError),
        (b"v1", TruncatedFileError),
        (b"v1\n", TruncatedFileError),
        (b"v3\n{}", UnsupportedVersionError),
        (b"v9\n{}", UnsupportedVersionError),
        (b"1\n{}", CorruptFileError),
        (b"v1\n{bad", CorruptFileError),
        (b"v1\n[]", CorruptFileError),
        (b'v1\n{"stateStoreInfo":[]}', CorruptFileError),
        (b'v1\n{"operatorInfo":{"operatorId":"0","operatorName":"x"},"stateStoreInfo":[]}', CorruptFileError),
        (b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":1},"stateStoreInfo":[]}', CorruptFileError),
        (b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"x"}}', CorruptFileError),
        (b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"x"},"stateStoreInfo":[1]}', CorruptFileError),
        (
            b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"x"},"stateStoreInfo":[{"storeName":"d"}]}',
            CorruptFileError,
        ),
        (REAL_V2_TWS.replace(b'"stateSchemaFilePaths":[', b'"stateSchemaFilePaths":[1,'), CorruptFileError),
        (REAL_V2_JOIN_V4.replace(b'"{\\"useVirtualColumnFamilies\\":true}"', b'"{bad"'), CorruptFileError),
        (REAL_V2_JOIN_V4.replace(b'"{\\"useVirtualColumnFamilies\\":true}"', b'"[1]"'), CorruptFileError),
        (REAL_V2_JOIN_V4.replace(b'"{\\"useVirtualColumnFamilies\\":true}"', b"{}"), CorruptFileError),
        (b"v1\n\xff", CorruptFileError),
    ],
)
def test_errors(data, error):
    with pytest.raises(error) as info:
        opmeta.parse_operator_metadata(data, "ck/state/0/_metadata/metadata")
    assert info.value.path == "ck/state/0/_metadata/metadata"
    if error is UnsupportedVersionError:
        assert data[:2].decode() in str(info.value)


def test_bad_json_offset():
    data = SPEC_V1_AGG.replace(b'"numPartitions":2', b'"numPartitions":2,,')
    with pytest.raises(CorruptFileError) as info:
        opmeta.parse_operator_metadata(data, "f")
    assert data[info.value.offset : info.value.offset + 1] == b","


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(REAL)),
    edits=EDITS,
)
def test_mutated_real_metadata_give_value_or_statelens_error(name, edits):
    data = mutate(REAL[name], edits)
    error = None
    try:
        result = opmeta.parse_operator_metadata(bytes(data), "f")
    except StatelensError as err:
        error = err
    if error is None:
        assert isinstance(result, opmeta.OperatorMetadata)
        for uri in (u for s in result.stores for u in s.state_schema_file_paths):
            try:
                opmeta.schema_file_name(uri)
            except CorruptFileError:
                pass
    else:
        assert error.path == "f"


# --- every operator metadata file of every real scenario, against Spark's state-metadata ----------

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


@pytest.mark.spark
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_operator_metadata_of_real_checkpoints(spark, checkpoint, name):
    from tests.oracle import read_state_metadata

    scenario = checkpoint(name)
    expected = json.loads((scenario / "expected.json").read_text())
    cp = scenario / "checkpoint"
    ours = {}
    for op in expected["operators"]:
        rel = f"state/{op['operator_id']}/_metadata/metadata"
        m = opmeta.parse_operator_metadata((cp / rel).read_bytes(), rel)
        assert (m.operator_id, m.operator_name, m.format_version) == (
            op["operator_id"],
            op["operator_name"],
            1,
        )
        assert [s.store_name for s in m.stores] == op["store_names"]
        assert all(s.num_partitions == expected["num_partitions"] for s in m.stores)
        assert all(s.state_schema_file_paths == () for s in m.stores)
        assert (m.properties, m.extra) == ({}, {})
        ours[m.operator_id] = m
    # v2 metadata only for transformWithState / join v3+ (none of these scenarios)
    assert not list((cp / "state").glob("*/_metadata/v2"))

    rows = read_state_metadata(spark, cp)
    assert len(rows) == sum(len(m.stores) for m in ours.values())
    for row in rows:
        m = ours[row["operatorId"]]
        store = m.store(row["stateStoreName"])
        assert store is not None
        assert row["operatorName"] == m.operator_name
        assert row["numPartitions"] == store.num_partitions
        assert row["_numColsPrefixKey"] == store.num_cols_prefix_key
        assert row["operatorProperties"] is None

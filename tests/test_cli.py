"""``statelens info | rows | growth`` end to end on real checkpoints, against Spark and the logs.

Also the bad-input contract: a typed one-line error naming the file, a non-zero exit code,
the rest of the checkpoint still readable, and nothing inside the checkpoint written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.app.output import dumps_jsonl
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.values import row_to_json
from tests import oracle

pytestmark = pytest.mark.spark


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tree_digest(root: Path) -> dict[str, str]:
    """Every file (hidden ones too) with its SHA-256: proves nothing was written, renamed or deleted."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_info_json_matches_logs_and_spark(
    checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = checkpoint("agg_count")
    expected = json.loads((folder / "expected.json").read_text())
    code, out, _ = run(capsys, "info", str(folder / "checkpoint"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert [b["batch_id"] for b in doc["batches"]] == expected["batches"]
    assert all(b["committed"] for b in doc["batches"])
    assert all(isinstance(b["timestamp_ms"], int) and b["timestamp_ms"] > 0 for b in doc["batches"])
    assert doc["conf"]["spark.sql.shuffle.partitions"] == "2"
    (op,) = doc["operators"]
    assert op["operator_id"] == 0 and op["kind"] == "aggregation"
    (store,) = op["stores"]
    assert store["name"] == "default" and store["provider"] == "hdfs"
    assert store["partitions"] == 2
    assert store["versions"][-1] == expected["batches"][-1] + 1
    df = spark.read.format("statestore").load(str(folder / "checkpoint"))
    assert store["key_schema"] == json.loads(df.schema["key"].dataType.json())
    assert store["value_schema"] == json.loads(df.schema["value"].dataType.json())


def test_info_human_table_names_uncommitted_batch(
    checkpoint: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = checkpoint("uncommitted")
    expected = json.loads((folder / "expected.json").read_text())
    code, out, _ = run(capsys, "info", str(folder / "checkpoint"))
    assert code == 0
    assert f"UNCOMMITTED {expected['uncommitted_batch']}" in out
    code, out, _ = run(capsys, "info", str(folder / "checkpoint"), "--json")
    assert json.loads(out)["uncommitted_batches"] == [expected["uncommitted_batch"]]


@pytest.mark.parametrize(
    "scenario", ["window_agg_watermark", "pandas_state_event", "dedup_watermark", "rich_types"]
)
def test_rows_jsonl_equals_spark(
    scenario: str, checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoint(scenario) / "checkpoint"
    ckpt = open_checkpoint(str(root))
    store = ckpt.operators[0].stores[0]
    code, out, _ = run(capsys, "rows", str(root), "--operator", "0")
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln]
    expected = []
    for pid, key, value in oracle.read_state(spark, root, operator_id=0):
        doc = [
            ("partition", pid),
            ("key", row_to_json(key, store.key_schema)),
            ("value", row_to_json(value, store.value_schema)),
        ]
        from statelens.readers.values import JsonObject

        expected.append(dumps_jsonl(JsonObject(doc)))
    assert Counter(lines) == Counter(expected)
    assert lines, "the latest version of every scenario here holds rows"


def test_rows_version_partition_and_changes(checkpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = checkpoint("window_agg_watermark") / "checkpoint"
    ckpt = open_checkpoint(str(root))
    reader = ckpt.store_reader(0)
    code, out, _ = run(capsys, "rows", str(root), "--operator", "0", "--version", "2", "--partition", "1")
    assert code == 0
    docs = [json.loads(ln, object_pairs_hook=list) for ln in out.splitlines()]
    assert len(docs) == len(reader.read_rows(1, 2))
    assert all(dict(d)["partition"] == 1 for d in docs)
    code, out, _ = run(capsys, "rows", str(root), "--operator", "0", "--changes")
    assert code == 0
    changes = [json.loads(ln) for ln in out.splitlines()]
    kinds = Counter(c["change"] for c in changes)
    assert kinds["put"] > 0 and kinds["remove"] > 0, "watermark eviction writes removes"
    assert {c["version"] for c in changes} <= set(ckpt.operators[0].stores[0].versions)
    assert all(c["value"] is None for c in changes if c["change"] == "remove")


def test_rows_csv_and_parquet(checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import csv

    import pyarrow.parquet as pq

    root = checkpoint("rich_types") / "checkpoint"
    code, out, _ = run(capsys, "rows", str(root), "--operator", "0")
    n = len(out.splitlines())
    code, _, _ = run(
        capsys, "rows", str(root), "--operator", "0", "--format", "csv", "-o", str(tmp_path / "r.csv")
    )
    assert code == 0
    with open(tmp_path / "r.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) == n + 1
    assert rows[0][0] == "partition" and "key.k_struct.a" in rows[0]
    assert len({len(r) for r in rows}) == 1, "a null struct still gives one cell per leaf"
    assert {"true", "false"} & {c for r in rows[1:] for c in r}
    code, _, _ = run(
        capsys, "rows", str(root), "--operator", "0", "--format", "parquet", "-o", str(tmp_path / "r.parquet")
    )
    assert code == 0
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == n
    assert str(table.schema.field("key").type.field("k_ts").type) == "timestamp[us, tz=UTC]"


@pytest.mark.parametrize(
    "scenario",
    ["agg_many_partitions", "window_agg_watermark", "join", "rocks_agg_changelog", "rocks_dedup_changelog"],
)
def test_growth_json_equals_spark_counts(
    scenario: str, checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoint(scenario) / "checkpoint"
    code, out, _ = run(capsys, "growth", str(root), "--json")
    assert code == 0
    records = json.loads(out)
    assert out == json.dumps(records, indent=1) + "\n"  # the layout of json.dump(indent=1)
    ckpt = open_checkpoint(str(root))
    if scenario.startswith("rocks_"):  # changelogs from version 1 on: counted from key ids, not walked
        reader = ckpt.store_reader(0)
        assert all(reader.version_rows(pid) is not None for pid in reader.partition_ids())
    checked = 0
    for op in ckpt.operators:
        for store in op.stores:
            for batch_id in sorted(ckpt.commits):
                df = (
                    spark.read.format("statestore")
                    .option("operatorId", op.operator_id)
                    .option("batchId", batch_id)
                )
                if store.store_name != "default":
                    df = df.option("storeName", store.store_name)
                counts = {
                    r["partition_id"]: r["count"]
                    for r in df.load(str(root)).groupBy("partition_id").count().collect()
                }
                ours = {
                    r["partition_id"]: r["rows"]
                    for r in records
                    if r["operator_id"] == op.operator_id
                    and r["store_name"] == store.store_name
                    and r["version"] == batch_id + 1
                }
                assert {p: n for p, n in ours.items() if n} == counts, (store.store_name, batch_id)
                assert all(r["bytes"] > 0 for r in records)
                checked += 1
    assert checked >= 4


#: Libraries a command reading state natively never needs: the compiled walks' numba (until a process
#: has walked ``records.PYTHON_WALK_BYTES`` of variable-width records), pandas, DuckDB (SQL only), Qt;
#: on a local checkpoint fsspec and asyncio (URLs only) and crc32c (row checksums only) are not needed;
#: pyspark (its types, ~45 ms) only where rows are decoded, not to count them or to describe a store.
HEAVY_MODULES = ("numba", "pandas", "duckdb", "PySide6", "fsspec", "asyncio", "crc32c", "pyspark")


#: ``growth`` counts keys with numpy alone (``readers._format.keyids``), and ``info`` reads no state.
NO_ARROW = ("pyarrow",)


@pytest.mark.parametrize(
    ("scenario", "command", "also"),
    [
        ("agg_count", ["info"], NO_ARROW),
        ("agg_count", ["growth", "--json"], NO_ARROW),
        ("rich_types", ["growth", "--json"], NO_ARROW),  # keys of several widths: the record walk
        ("pandas_state_processing", ["growth", "--json"], NO_ARROW),  # removes, and files of two widths
        ("rocks_agg_changelog", ["info"], NO_ARROW),
        ("rocks_agg_changelog", ["growth", "--json"], NO_ARROW),  # RocksDB changelogs: the record walk
        ("join", ["growth"], NO_ARROW),
    ],
)
def test_native_commands_do_not_import_heavy_libraries(
    scenario: str, command: list[str], also: tuple[str, ...], checkpoint: Any, tmp_path: Path
) -> None:
    """A native command in a fresh process imports none of :data:`HEAVY_MODULES`, nor the modules of
    ``also`` (``sys.modules`` at exit), and does its work (exit code 0, its output)."""
    import subprocess

    root = checkpoint(scenario) / "checkpoint"
    probe = (
        "import atexit, sys\n"
        f"heavy = {HEAVY_MODULES + also!r}\n"
        "atexit.register(lambda: sys.stderr.write('LOADED ' + repr(sorted(m for m in heavy if m in sys.modules)) + '\\n'))\n"
        "from statelens.app.launcher import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, command[0], str(root), *command[1:]],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "STATELENS_CACHE_DIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    loaded = [line for line in out.stderr.splitlines() if line.startswith("LOADED ")]
    assert loaded == ["LOADED []"], out.stderr


@pytest.mark.skipif(
    not Path("/proc/self/status").exists() or (os.cpu_count() or 1) < 2, reason="Linux, 2+ cores"
)
def test_the_command_line_starts_no_blas_threads_unless_asked() -> None:
    """The entry point keeps OpenBLAS to the calling thread (statelens does no linear algebra; its
    threads spin after numpy's import, ~0.1 s of CPU a command); a value the user set stands."""
    import subprocess

    probe = (
        "import statelens.app.launcher, numpy\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Threads:')][0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    ours = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    theirs = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**env, "OPENBLAS_NUM_THREADS": "2"},
        check=True,
    )
    assert (ours.stdout.strip(), theirs.stdout.strip()) == ("1", "2")


# -- bad input --------------------------------------------------------------------------------------------
def test_not_a_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, out, err = run(capsys, "info", str(tmp_path))
    assert code == 2
    assert "not a Structured Streaming checkpoint" in err and str(tmp_path) in err
    assert "Traceback" not in err
    code, _, err = run(capsys, "info", str(tmp_path / "missing"))
    assert code == 2 and "no such folder" in err


def _copy(checkpoint: Any, scenario: str, tmp_path: Path) -> Path:
    dest = tmp_path / scenario
    shutil.copytree(checkpoint(scenario) / "checkpoint", dest)
    return dest


def test_truncated_delta_is_named_and_the_rest_still_reads(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(checkpoint, "agg_many_partitions", tmp_path)
    victim = root / "state/0/2/8.delta"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    code, out, err = run(capsys, "rows", str(root), "--operator", "0")
    assert code == 1
    assert "state/0/2/8.delta" in err and "Traceback" not in err
    partitions = {json.loads(ln)["partition"] for ln in out.splitlines()}
    assert partitions == {0, 1, 3}
    # the version before the damaged delta is still readable from partition 2
    code, out, err = run(capsys, "rows", str(root), "--operator", "0", "--partition", "2", "--version", "7")
    assert code == 0 and out
    code, out, err = run(capsys, "rows", str(root), "--operator", "0", "--partition", "2")
    assert code == 2 and "state/0/2/8.delta" in err
    code, out, err = run(capsys, "growth", str(root), "--json")
    assert code == 1 and "state/0/2/8.delta" in err
    assert {r["partition_id"] for r in json.loads(out) if r["version"] == 8} == {0, 1, 3}
    code, _, _ = run(capsys, "info", str(root))
    assert code == 0


def test_wrong_magic_and_flipped_checksum(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(checkpoint, "agg_count", tmp_path)
    victim = root / "state/0/0/2.delta"
    data = bytearray(victim.read_bytes())
    data[0:8] = b"NOTLZ4!!"
    victim.write_bytes(bytes(data))
    code, _, err = run(capsys, "rows", str(root), "--operator", "0", "--partition", "0", "--version", "2")
    assert code == 2 and "state/0/0/2.delta" in err
    victim2 = root / "state/0/1/1.delta"
    data = bytearray(victim2.read_bytes())
    data[17] ^= 0xFF  # lz4-java block checksum
    victim2.write_bytes(bytes(data))
    code, _, err = run(capsys, "rows", str(root), "--operator", "0", "--partition", "1", "--version", "1")
    assert code == 2 and "state/0/1/1.delta" in err and "checksum" in err.lower()


def test_corrupt_schema_and_missing_commit(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(checkpoint, "agg_count", tmp_path)
    schema = root / "state/0/0/_metadata/schema"
    schema.write_bytes(schema.read_bytes()[:20])
    code, out, err = run(capsys, "info", str(root), "--json")
    assert code == 1
    assert "state/0/0/_metadata/schema" in err
    doc = json.loads(out)
    assert doc["operators"][0]["stores"][0]["key_schema"] is None
    assert doc["problems"] and doc["problems"][0]["path"].endswith("_metadata/schema")
    code, _, err = run(capsys, "rows", str(root), "--operator", "0")
    assert code == 2 and "schema" in err
    code, _, err = run(capsys, "rows", str(root), "--operator", "7")
    assert code == 2 and "no stateful operator 7" in err


def test_commands_never_write_inside_the_checkpoint(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(checkpoint, "join", tmp_path)
    before = tree_digest(root)
    run(capsys, "info", str(root), "--json")
    run(capsys, "growth", str(root))
    for store in ("left-keyToNumValues", "right-keyWithIndexToValue"):
        run(capsys, "rows", str(root), "--operator", "0", "--store", store, "--changes")
    assert tree_digest(root) == before


def test_info_and_rows_of_transform_with_state_variables(
    checkpoint: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformWithState on RocksDB: every state variable read natively equals Spark's stateVarName read."""
    from statelens.readers.backends.native import NativeBackend
    from statelens.readers.backends.spark import SparkBackend

    root = checkpoint("rocks_tws") / "checkpoint"
    code, out, _ = run(capsys, "info", str(root), "--json")
    assert code == 0
    (op,) = json.loads(out)["operators"]
    declared = {v["name"]: v["variable_type"] for v in op["state_variables"]}
    assert {"cnt": "ValueState", "lst": "ListState", "mp": "MapState"}.items() <= declared.items()
    ckpt = open_checkpoint(str(root))
    sparkb = SparkBackend(ckpt, spark=spark)
    for name in ("cnt", "lst", "mp"):
        code, out, _ = run(
            capsys, "rows", str(root), "--operator", "0", "--state-var", name, "--backend", "native"
        )
        assert code == 0
        native = sorted(out.splitlines())
        assert native, name
        assert all(("user_key" in json.loads(ln)) == (name == "mp") for ln in native)
        version = sparkb.latest_version(0)
        entries = sparkb.read_state_variable(0, name, version)
        assert len(entries) == len(native), name
        ours = NativeBackend(ckpt).read_state_variable(0, name, version)
        assert sorted(map(repr, entries)) == sorted(map(repr, ours)), name
    code, _, err = run(capsys, "rows", str(root), "--operator", "0", "--state-var", "nope")
    assert code == 2 and "no state variable 'nope'" in err


# -- --storage-option ------------------------------------------------------------------------------------
def test_storage_options_are_parsed_and_nested() -> None:
    from statelens.app.cli import parse_storage_options

    got = parse_storage_options(
        [
            "endpoint_url=http://localhost:9000",
            "anon=true",
            "use_ssl=False",
            "client_kwargs.region_name=eu-west-1",
            "client_kwargs.verify=false",
            "default_block_size=5242880",
            "timeout=2.5",
            "requester_pays=null",
            'config_kwargs={"connect_timeout": 5}',
            'version_id="123"',
            "secret=12345",
            "token=true",
            "anon=false",
        ]
    )
    assert got == {
        "endpoint_url": "http://localhost:9000",
        "anon": False,
        "use_ssl": False,
        "client_kwargs": {"region_name": "eu-west-1", "verify": False},
        "default_block_size": 5242880,
        "timeout": 2.5,
        "requester_pays": None,
        "config_kwargs": {"connect_timeout": 5},
        "version_id": "123",
        "secret": "12345",
        "token": "true",  # credentials stay strings, whatever they look like
    }
    assert parse_storage_options(None) == {} == parse_storage_options([])


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["sEcReTvAlUe"], "#1 has no '='"),
        (["anon=true", "secret key=sEcReTvAlUe"], "#2: key is not"),
        (["we ird=sEcReTvAlUe"], "key 'we ird' is not"),
        (
            ["client_kwargs=sEcReTvAlUe", "client_kwargs.region_name=x"],
            "client_kwargs is given a value and also used",
        ),
        (["a.b=1", "a=sEcReTvAlUe"], "a is used as a group"),
    ],
)
def test_bad_storage_options_are_refused_without_showing_values(
    items: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.app.cli import parse_storage_options
    from statelens.readers.errors import UsageError

    with pytest.raises(UsageError, match=message) as info:
        parse_storage_options(items)
    assert "sEcReTvAlUe" not in str(info.value)
    argv = [a for item in items for a in ("--storage-option", item)]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "info", "/nowhere"])
    assert exit_info.value.code == 2
    _, err = capsys.readouterr()
    assert message in err and "sEcReTvAlUe" not in err


def test_storage_options_before_or_after_the_command_and_for_the_app(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[Any] = []

    def gui(args: Any) -> int:
        seen.append((args.checkpoint, args.storage_options))
        return 0

    opts = ["--storage-option", "endpoint_url=http://127.0.0.1:9", "--storage-option=anon=true"]
    expected = {"endpoint_url": "http://127.0.0.1:9", "anon": True}
    assert main([*opts, "s3://b/ckpt"], gui_runner=gui) == 0  # a bare path: the app
    assert main(["--debug", *opts], gui_runner=gui) == 0  # no path: the app on the sample
    assert main(["gui", "s3://b/ckpt", *opts], gui_runner=gui) == 0
    assert (
        main(
            [opts[0], "anon=true", "gui", "s3://b/ckpt", opts[0], "endpoint_url=http://127.0.0.1:9"],
            gui_runner=gui,
        )
        == 0
    )
    assert seen == [
        ("s3://b/ckpt", expected),
        (None, expected),
        ("s3://b/ckpt", expected),
        ("s3://b/ckpt", expected),
    ]


def test_storage_options_reach_the_filesystem(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import statelens.app.cli._common
    import statelens.readers.checkpoint
    from statelens.app.resources import sample_checkpoint_path

    got: list[Any] = []
    real = statelens.readers.checkpoint.open_checkpoint

    def spy(url: str, storage_options: Any = None, **kwargs: Any) -> Any:
        got.append(storage_options)
        return real(url, **kwargs)

    monkeypatch.setattr(statelens.app.cli._common, "open_checkpoint", spy)
    code, out, _ = run(
        capsys, "info", str(sample_checkpoint_path()), "--storage-option", "client_kwargs.region_name=x"
    )
    assert code == 0 and "Query id" in out
    assert got == [{"client_kwargs": {"region_name": "x"}}]


def test_the_command_leaves_its_imports_out_of_the_collectors_passes(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """While a command runs, the objects the imports made are out of the garbage collector's passes
    (``gc.freeze``: a full pass would walk them all again); when it ends they are given back, so a
    process that goes on (this test run) collects them again; the command does its work."""
    import gc

    from statelens.app import launcher

    frozen: list[int] = []
    real = launcher.cli_main

    def spied(*args: Any, **kwargs: Any) -> int:
        frozen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(launcher, "cli_main", spied)
    before = gc.get_freeze_count()
    assert launcher.main(["growth", str(checkpoint("agg_count") / "checkpoint"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert frozen and frozen[0] > before + 10_000  # the modules, functions and classes imported
    assert gc.get_freeze_count() == before


def test_importing_the_entry_point_leaves_the_collector_as_it_was() -> None:
    """The entry point imports with the garbage collector off (its passes over the young objects the
    imports make cost every start), then turns it back on, unless it was off before; nothing stays
    frozen."""
    import subprocess

    probe = (
        "import gc, sys\n"
        "if sys.argv[1] == 'off':\n"
        "    gc.disable()\n"
        "import statelens.app.launcher\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    for before, after in (("on", "True 0"), ("off", "False 0")):
        out = subprocess.run(
            [sys.executable, "-c", probe, before], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == after


def test_the_command_keeps_freed_memory_mapped(tmp_path: Path) -> None:
    """The ``statelens`` entry point sets glibc's mmap and trim thresholds (``app.allocator``) before any
    work, so each partition's megabytes are not page-faulted in afresh; a process whose environment set
    them keeps its own."""
    import subprocess

    probe = (
        "import sys\n"
        "from statelens.app import allocator, launcher\n"
        "calls = []\n"
        "real = allocator.tune\n"
        "allocator.tune = lambda: calls.append(real()) or calls[-1]\n"
        "try:\n"
        "    launcher.main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(calls)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert out.stdout.strip().splitlines()[-1] == (
        "[True]" if sys.platform.startswith("linux") else "[False]"
    )
    env["MALLOC_TRIM_THRESHOLD_"] = str(1 << 20)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert out.stdout.strip().splitlines()[-1] == "[False]"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``statelens --version`` prints the installed version and exits 0 (it does not open the app)."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"statelens {version('statelens')}"


# -- defects a first use found ------------------------------------------------------------------------------
def test_rows_reads_the_only_operator_without_operator(
    capsys: pytest.CaptureFixture[str], checkpoint: Any
) -> None:
    root = str(checkpoint("pandas_state_event") / "checkpoint")
    code, implicit, _ = run(capsys, "rows", root)
    assert code == 0
    code, explicit, _ = run(capsys, "rows", root, "--operator", "0")
    assert code == 0 and implicit == explicit and implicit.count("\n") > 0


def test_info_shows_watermarks_as_times(capsys: pytest.CaptureFixture[str], checkpoint: Any) -> None:
    from datetime import datetime, timezone

    folder = checkpoint("window_agg_watermark")
    expected = json.loads((folder / "expected.json").read_text())
    code, out, _ = run(capsys, "info", str(folder / "checkpoint"))
    assert code == 0
    assert out.count("UTC") == 1  # the zone said once
    for batch, ms in expected["batch_watermark_ms"].items():
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [batch])
        if ms:
            when = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            assert when in line and str(ms) not in line, line
        else:
            assert line.split()[3] == "none", line


def test_csv_of_a_map_state_names_columns_as_the_browser(
    capsys: pytest.CaptureFixture[str], checkpoint: Any, tmp_path: Path
) -> None:
    """``rows --store`` on a map state variable: ``key.<field>`` and ``user_key.<field>`` columns, as the
    app's browser and ``rows --state-var`` name them (not the composite ``key.key.<field>``)."""
    import csv

    from statelens.app.columns import state_columns

    root = checkpoint("rocks_tws_timers") / "checkpoint"
    code, _, _ = run(
        capsys, "rows", str(root), "--store", "ttlm", "--format", "csv", "-o", str(tmp_path / "m.csv")
    )
    assert code == 0
    with open(tmp_path / "m.csv", newline="") as f:
        header = next(csv.reader(f))
    ckpt = open_checkpoint(str(root))
    browser = [s.header for s in state_columns(ckpt.operator(0).store("ttlm").schema, "ttlm")]
    assert header == browser
    assert "user_key.mk" in header and not any(h.startswith("key.key.") for h in header)
    code, via_var, _ = run(capsys, "rows", str(root), "--state-var", "ttlm", "--format", "csv")
    assert via_var.splitlines() == (tmp_path / "m.csv").read_text().splitlines()


def test_overdue_findings_say_their_batch_has_not_run(
    capsys: pytest.CaptureFixture[str], checkpoint: Any, tmp_path: Path
) -> None:
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    root = tmp_path / "checkpoint"
    shutil.copytree(folder / "checkpoint", root)
    last = max(expected["committed_batches"])
    commit = root / "commits" / str(last)
    version, body = commit.read_text().splitlines()[:2]
    commit.write_text(
        version + "\n" + json.dumps({**json.loads(body), "nextBatchWatermarkMs": 10**13}) + "\n"
    )
    code, out, _ = run(capsys, "expired", str(root), "--stale-after", "0")
    overdue = [ln for ln in out.splitlines() if " overdue " in ln]
    assert overdue
    assert all(f"{last + 1} (next, not run yet)" in ln for ln in overdue)
    zombies = [ln for ln in out.splitlines() if " zombie " in ln]
    assert zombies and not any("not run yet" in ln for ln in zombies)


def test_progress_without_query_ids_is_not_silently_ignored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.eventlog_gen import get_event_log

    folder = get_event_log("plain")
    doc = json.loads((folder / "progress.json").read_text())
    records = [p for run_ in doc for p in (run_ if isinstance(run_, list) else [run_])]
    damaged = tmp_path / "progress.json"
    damaged.write_text("".join(json.dumps({k: v for k, v in p.items() if k != "id"}) + "\n" for p in records))
    code, out, err = run(capsys, "timeline", str(folder / "checkpoint"), "--event-log", str(damaged))
    assert code == 1
    line = next(ln for ln in out.splitlines() if ln.startswith("event logs:"))
    assert "progress for 0 of" in line and f"{len(records)} progress record(s) have no query id" in line
    assert "progress without a query id" in err
    code, out, _ = run(capsys, "timeline", str(folder / "checkpoint"), "--event-log", str(damaged), "--json")
    assert "have no query id" in json.loads(out)["event_logs"]["why_no_progress"]


def test_an_unreachable_storage_endpoint_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    pytest.importorskip("s3fs")
    with socket.socket() as probe:  # a port nothing listens on: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    code, out, err = run(
        capsys, "info", "s3://bucket/ckpt", "--storage-option", f"endpoint_url=http://127.0.0.1:{port}"
    )
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines  # no line per retry
    assert "cannot connect to the storage endpoint" in lines[0] and f"127.0.0.1:{port}" in lines[0]
    assert "throttling" not in lines[0]

"""What Spark does when a query restarts on a damaged checkpoint: the truth the restart verdict is held to.

Each *kind* is a small streaming query over a file source whose input folder this module controls, run
one micro-batch per input file (``availableNow``, ``maxFilesPerTrigger=1``). Each *cell* is a copy of
the kind's checkpoint with one damage (partition 0 of operator 0's default store unless the damage
says otherwise), kept pristine on disk; the same query is then restarted on a second copy of it with
one more input file (one more micro-batch), and what Spark did is recorded. The damages
(:data:`DAMAGES`): the newest or oldest delta, snapshot, changelog or zip truncated to half its bytes,
bit-flipped (the middle byte XOR 0xFF) or deleted; an SST the newest zip names deleted or bit-flipped;
the newest commit deleted; the newest batch's offsets and commit deleted (a checkpoint rolled back one
batch); the newest or oldest offsets file, or the newest zip, saved again with a final newline added; the newest delta replaced by the one before it (``newest-delta-stale``: every file valid, the
content wrong; :data:`UNDETECTABLE`). A damaged file keeps its Hadoop ``.crc`` (which Spark's local file system checks) unless the
damage ends in ``-nocrc`` (as a copy from an object store, which has none). The outcomes:

``failed``
    the restart ended with an exception (its class and the first line of its message are kept);
``restarted``
    it ran the new batch, and Spark's ``statestore`` source reads, at the new batch, the same rows in
    every partition as it reads on the undamaged copy restarted the same way (the ``control`` cell);
``restarted-wrong-state``
    it ran the new batch but the state differs from the control's: data lost without an error.

The kinds: ``hdfs-snap`` (HDFS store, snapshots every 2 deltas), ``hdfs`` (no snapshot),
``rocks-changelog`` (RocksDB with changelog checkpointing: zips and changelogs), ``rocks`` (RocksDB,
zips only), ``rocks-v2`` (RocksDB, changelogs, checkpoint format v2), ``stateless`` (no state store),
``tws`` (transformWithStateInPandas on RocksDB with changelogs) and ``pandas-state``
(applyInPandasWithState on the HDFS store). Restarts use Spark's defaults but for the confs the query
was written with that a restart of it would set again (the provider's changelog flag and the checkpoint
format version); cells with a ``conf`` of their own (``+repair-off``) restart with auto snapshot repair
off. Spark's log lines about loading state (auto snapshot repair) during each restart are kept.

Cached like :mod:`tests.spark_checkpoints`: ``<cache>/restart-matrix-<pyspark version>-<sha1 of this
file[:12]>/`` holds ``kinds/<kind>/`` (the checkpoint as written, its input), ``cells/<kind>/<damage>/``
(the damaged copy, never restarted) and ``outcomes.json``, written last; generated once under a file
lock, reused after. CLI::

    python -m tests.restart_matrix [--out DIR] [--force] [--kinds KIND ...] [--table]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import sys
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.spark_checkpoints import session_conf

REPO = Path(__file__).resolve().parent.parent
_SOURCE_HASH = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:12]

#: Modification time (epoch s) of the first input file, +10 s per later file (the file source orders
#: new files by modification time).
_BASE_MTIME = 1_704_067_200

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT_VERSION = "spark.sql.streaming.stateStore.checkpointFormatVersion"
MIN_DELTAS = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
#: Auto snapshot repair (Spark 4.1+; on by default outside Spark's own tests).
REPAIR = "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"
REPAIR_OFF = {REPAIR: "false"}

OUTCOMES = ("failed", "restarted", "restarted-wrong-state")

#: Loggers whose lines about a restart's load are kept (auto snapshot repair logs there).
_STATE_LOGGER = "org.apache.spark.sql.execution.streaming.state"


# --------------------------------------------------------------------------------------------------
# Public view of the matrix


@dataclass(frozen=True)
class Cell:
    """One damaged copy and what Spark did when the query restarted on it."""

    name: str
    """``<kind>/<damage>`` (``+repair-off`` when restarted with auto snapshot repair off)."""
    kind: str
    """The query and store: a key of :data:`KINDS`."""
    damage: str
    """What was done to the copy (``control``: nothing)."""
    path: Path
    """The damaged checkpoint, as damaged (the restart ran on another copy of it)."""
    outcome: str
    """``failed``, ``restarted`` or ``restarted-wrong-state``."""
    error: str
    """``Class: first line`` of the restart's exception (``""`` unless failed)."""
    conf: dict[str, str]
    """The confs the restart set beyond Spark's defaults."""
    spark_version: str
    files: list[str] = field(default_factory=list)
    """The damaged files, relative to the checkpoint."""
    log: list[str] = field(default_factory=list)
    """Spark's log lines about loading state during the restart (auto snapshot repair)."""
    errors: list[str] = field(default_factory=list)
    """Every exception of the failure's chain, ``Class: first line``, outermost first."""
    state_rows: int = -1
    """State rows Spark reads at the new batch on the restarted copy (-1 when it failed)."""
    restart_batch: int = -1
    """The batch the restart ran last (the control's: the checkpoint's last batch + 1)."""
    state_error: str = ""
    """Why Spark's ``statestore`` source could not read the restarted copy at the new batch, if it could not."""
    differs: list[str] = field(default_factory=list)
    """Rows where the restart's view differs from the control's (``loaded``: what the new batch emitted,
    one row a key; ``state``: Spark's ``statestore`` read), ``-`` the control's and ``+`` this cell's."""


def cache_key() -> str:
    import pyspark

    return f"{pyspark.__version__}-{_SOURCE_HASH}"


def cache_root() -> Path:
    base = os.environ.get("STATELENS_TEST_CACHE")
    root = Path(base) if base else REPO / ".cache" / "checkpoints"
    return root / f"restart-matrix-{cache_key()}"


def cells(root: Path | None = None) -> list[Cell]:
    """Every cell of the matrix (generated on first use, then read from the cache)."""
    root = generate(root)
    doc = json.loads((root / "outcomes.json").read_text())
    out = []
    for c in doc["cells"]:
        out.append(
            Cell(
                name=c["name"],
                kind=c["kind"],
                damage=c["damage"],
                path=root / c["path"],
                outcome=c["outcome"],
                error=c["error"],
                conf=c["conf"],
                spark_version=doc["spark_version"],
                files=c["files"],
                log=c["log"],
                errors=c["errors"],
                state_rows=c["state_rows"],
                restart_batch=c["restart_batch"],
                state_error=c["state_error"],
                differs=c["differs"],
            )
        )
    return out


def generate(root: Path | None = None, *, force: bool = False, kinds: list[str] | None = None) -> Path:
    """The matrix folder, generated under a file lock when ``outcomes.json`` is missing.

    Generated in place (not renamed): Spark records absolute paths of transformWithState schema files in
    the checkpoint, and reads them back on restart.
    """
    root = root if root is not None else cache_root()
    if (root / "outcomes.json").is_file() and not force:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.with_name(root.name + ".lock")):
        if (root / "outcomes.json").is_file() and not force:
            return root
        if root.exists():
            shutil.rmtree(root)
        root.mkdir()
        t0 = time.monotonic()
        doc = _run_matrix(root, kinds or list(KINDS))
        doc["generation_seconds"] = round(time.monotonic() - t0, 1)
        tmp = root / "outcomes.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.rename(tmp, root / "outcomes.json")
    return root


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------
# Kinds: the queries


@dataclass
class Run:
    """One kind's folders and the query that writes (and restarts on) a checkpoint."""

    kind: str
    spark: Any
    dir: Path
    conf: dict[str, str]
    """Confs the query sets every time it runs (written, and restarted)."""
    write_conf: dict[str, str]
    """Confs set only while the checkpoint is first written (snapshot cadence)."""
    build: Callable[[Any, Path], Any]
    """``(spark, input folder) -> streaming DataFrame``."""
    mode: str
    rows: Callable[[int], list[dict[str, Any]]]
    """The rows of input file ``i``."""
    batches: int
    reader: str = "statestore"
    """``statestore``, ``tws`` (the ``cnt`` variable) or ``none`` (stateless)."""
    wait: str = ""
    """What to wait for after each batch: ``snapshot`` (HDFS), ``zip`` (RocksDB) or nothing."""

    @property
    def input(self) -> Path:
        return self.dir / "input"

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint"


def input_rows(i: int) -> list[dict[str, Any]]:
    """The rows of input file ``i``: batch ``i < BATCHES`` touches 3 keys it shares with other batches and a
    new one (both partitions change every batch); the restart's file (``i == BATCHES``) holds every key
    of the earlier files once and a new one, so what the restart's batch emits shows the state it loaded
    for every key."""
    keys = "abcdefghijklmnopqrstuvwxyz"
    if i >= BATCHES:
        seen = sorted({r["key"] for j in range(BATCHES) for r in input_rows(j)})
        picked = [*seen, keys[9 + i]]
    else:
        picked = [keys[(i + j * 3) % 9] for j in range(3)] + [keys[9 + i]]
    return [{"key": k, "value": i * 100 + j} for j, k in enumerate(picked)]


def _agg(spark: Any, src: Path) -> Any:
    return _source(spark, src).groupBy("key").count()


def _stateless(spark: Any, src: Path) -> Any:
    from pyspark.sql import functions as F

    return _source(spark, src).where(F.col("value") % 2 == 0).select("key", (F.col("value") * 10).alias("v"))


def _pandas_state(spark: Any, src: Path) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    def func(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        cnt, total = state.get if state.exists else (0, 0)
        for pdf in pdfs:
            cnt += len(pdf)
            total += int(pdf["value"].sum())
        state.update((cnt, total))
        yield pd.DataFrame({"key": [key[0]], "cnt": [cnt], "total": [total]})

    return (
        _source(spark, src)
        .groupBy("key")
        .applyInPandasWithState(
            func,
            "key STRING, cnt LONG, total LONG",
            "cnt LONG, total LONG",
            "update",
            GroupStateTimeout.NoTimeout,
        )
    )


def _tws(spark: Any, src: Path) -> Any:
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.cnt = handle.getValueState("cnt", "c LONG, total LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            c, t = self.cnt.get() if self.cnt.exists() else (0, 0)
            for pdf in rows:
                c += len(pdf)
                t += int(pdf["value"].sum())
            self.cnt.update((c, t))
            yield pd.DataFrame({"key": [key[0]], "cnt": [c]})

        def close(self) -> None:
            pass

    return (
        _source(spark, src)
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=Counter(),
            outputStructType="key STRING, cnt LONG",
            outputMode="Update",
            timeMode="None",
        )
    )


def _source(spark: Any, src: Path) -> Any:
    return (
        spark.readStream.format("json")
        .schema("key STRING, value LONG")
        .option("maxFilesPerTrigger", "1")
        .load(str(src))
    )


def _rocks(changelog: bool, v2: bool = False) -> dict[str, str]:
    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        CHANGELOG: str(changelog).lower(),
    }
    if v2:
        conf[FORMAT_VERSION] = "2"
    return conf


#: kind -> (query, output mode, confs of every run, confs of the first run, batches, reader, wait)
KINDS: dict[str, dict[str, Any]] = {
    "hdfs-snap": {"build": _agg, "mode": "update", "write_conf": {MIN_DELTAS: "2"}, "wait": "snapshot"},
    "hdfs": {"build": _agg, "mode": "update", "write_conf": {MIN_DELTAS: "1000"}},
    "rocks-changelog": {
        "build": _agg,
        "mode": "update",
        "conf": _rocks(changelog=True),
        "write_conf": {MIN_DELTAS: "2"},
        "wait": "zip",
    },
    "rocks": {"build": _agg, "mode": "update", "conf": _rocks(changelog=False)},
    "rocks-v2": {
        "build": _agg,
        "mode": "update",
        "conf": _rocks(changelog=True, v2=True),
        "write_conf": {MIN_DELTAS: "2"},
        "wait": "zip",
    },
    "stateless": {"build": _stateless, "mode": "append", "reader": "none"},
    "tws": {
        "build": _tws,
        "mode": "update",
        "conf": _rocks(changelog=True),
        "write_conf": {MIN_DELTAS: "2"},
        "reader": "tws",
        "wait": "zip",
    },
    "pandas-state": {"build": _pandas_state, "mode": "update"},
}

#: Batches each kind's checkpoint holds before the restart runs one more.
BATCHES = 7


def _make_run(kind: str, spark: Any, root: Path) -> Run:
    k = KINDS[kind]
    return Run(
        kind=kind,
        spark=spark,
        dir=root / "kinds" / kind,
        conf={"spark.sql.shuffle.partitions": "2", **k.get("conf", {})},
        write_conf=k.get("write_conf", {}),
        build=k["build"],
        mode=k["mode"],
        rows=input_rows,
        batches=BATCHES,
        reader=k.get("reader", "statestore"),
        wait=k.get("wait", ""),
    )


def _write_input(run: Run, i: int) -> None:
    run.input.mkdir(parents=True, exist_ok=True)
    path = run.input / f"part-{i:03d}.json"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in run.rows(i)))
    os.utime(path, (_BASE_MTIME + 10 * i, _BASE_MTIME + 10 * i))


class _BatchFailed(Exception):
    """A batch of the restart raised: ``cause`` is Spark's exception as PySpark raised it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _start(
    run: Run, checkpoint: Path, hook: Callable[[int], None] | None = None
) -> dict[int, list[tuple[Any, ...]]]:
    """Run the query on ``checkpoint`` until its input is read (``availableNow``); the rows each batch
    emitted. A batch's failure raises :class:`_BatchFailed` with Spark's own exception (the sink runs
    the batch's plan and keeps what it raised)."""
    from pyspark.errors import StreamingQueryException

    emitted: dict[int, list[tuple[Any, ...]]] = {}
    raised: list[BaseException] = []

    def sink(df: Any, batch_id: int) -> None:
        try:
            emitted[batch_id] = [tuple(r) for r in df.collect()]
        except Exception as e:
            raised.append(e)
            raise
        if hook is not None:
            hook(batch_id)

    q = (
        run.build(run.spark, run.input)
        .writeStream.outputMode(run.mode)
        .foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination()
    except StreamingQueryException as e:
        raise _BatchFailed(raised[0] if raised else e) from e
    finally:
        if q.isActive:
            q.stop()
    return emitted


def _write_kind(run: Run) -> dict[str, Any]:
    """The kind's checkpoint: :data:`BATCHES` batches, one input file each; then the restart's file."""
    for i in range(run.batches):
        _write_input(run, i)
    suffix = ".snapshot" if run.wait == "snapshot" else ".zip"
    parts = [run.checkpoint / "state" / "0" / str(p) for p in (0, 1)]

    def hook(batch_id: int) -> None:
        # Time for background maintenance (every 200 ms) to write snapshots (or zips) between batches,
        # so the kind has several to damage on a busy machine: from batch 2 on, one at most two
        # versions old in both partitions.
        deadline = time.monotonic() + (5.0 if batch_id >= 2 else 0.3)
        while time.monotonic() < deadline:
            if batch_id >= 2 and all(_newest_version(p, suffix) >= batch_id - 1 for p in parts):
                break
            time.sleep(0.1)

    if not run.wait:
        with session_conf(run.spark, {**run.conf, **run.write_conf}):
            _start(run, run.checkpoint)
    else:
        # The last batch runs on its own with no snapshot due, so the newest version is never one a
        # snapshot (or zip) covers: a restart needs its delta (or changelog).
        (run.input / f"part-{run.batches - 1:03d}.json").unlink()
        with session_conf(run.spark, {**run.conf, **run.write_conf}):
            _start(run, run.checkpoint, hook)
        _quiet(run.checkpoint / "state")
        _write_input(run, run.batches - 1)
        with session_conf(run.spark, {**run.conf, MIN_DELTAS: "1000"}):
            _start(run, run.checkpoint)
    _quiet(run.checkpoint / "state")
    _write_input(run, run.batches)  # the restart's one more micro-batch
    part0 = run.checkpoint / "state" / "0" / "0"
    files = sorted(p.relative_to(run.checkpoint).as_posix() for p in part0.rglob("*") if p.is_file())
    return {"partition_0_files": [f for f in files if not f.endswith(".crc")]}


def _newest_version(d: Path, suffix: str) -> int:
    vs = [_version(p) for p in d.glob(f"*{suffix}")]
    return max(vs, default=-1)


def _version(p: Path) -> int:
    return int(p.name.split(".")[0].split("_")[0])


def _quiet(state: Path, settle_s: float = 1.5, timeout_s: float = 15.0) -> None:
    """Wait until background maintenance stops writing state files after the query ended."""
    if not state.is_dir():
        return
    deadline = time.monotonic() + timeout_s
    last: list[tuple[str, int]] = []
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        now = sorted((p.as_posix(), p.stat().st_size) for p in state.rglob("*") if p.is_file())
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= settle_s:
            return
        time.sleep(0.1)


# --------------------------------------------------------------------------------------------------
# Damage


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _bitflip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def _delete(p: Path) -> None:
    p.unlink()


def _resave(p: Path) -> None:
    """Opened in an editor and saved: the content the same, a final newline added."""
    p.write_bytes(p.read_bytes() + b"\n")


_ACTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "bitflip": _bitflip,
    "deleted": _delete,
    "resaved": _resave,
}


def _state_files(part: Path, suffix: str) -> list[Path]:
    """State files of one partition with this suffix, oldest version first (newest file last on ties)."""
    return sorted(part.glob(f"*{suffix}"), key=lambda p: (_version(p), p.stat().st_mtime_ns, p.name))


def _newest_zip_sst(part: Path) -> Path:
    """An SST the newest zip's metadata names (the first it lists)."""
    zp = _state_files(part, ".zip")[-1]
    with zipfile.ZipFile(zp) as z:
        meta = z.read("metadata").decode()
    doc = json.loads(meta.split("\n", 1)[1])
    name = doc["sstFiles"][0]["dfsSstFileName"]
    return part / "SSTs" / name


def _target(checkpoint: Path, what: str) -> Path:
    """The file a damage names: ``newest-delta``, ``oldest-changelog``, ``newest-zip-sst``, ``newest-commit``..."""
    if what == "newest-commit":
        return (
            checkpoint
            / "commits"
            / str(max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()))
        )
    if what in ("newest-offsets", "oldest-offsets"):
        ids = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        return checkpoint / "offsets" / str(ids[-1] if what.startswith("newest") else ids[0])
    part = checkpoint / "state" / "0" / "0"
    if what == "newest-zip-sst":
        return _newest_zip_sst(part)
    age, suffix = what.split("-")
    files = _state_files(part, f".{suffix}")
    if not files:
        raise FileNotFoundError(f"no {suffix} file in {part}")
    return files[-1] if age == "newest" else files[0]


def _remove_crc(p: Path) -> None:
    crc = p.with_name(f".{p.name}.crc")
    if crc.exists():
        crc.unlink()


def damage(checkpoint: Path, name: str) -> list[str]:
    """Damage a copy as ``name`` says (``newest-delta-truncated``, ``control``...); the files it touched."""
    if name == "control":
        return []
    if name == "newest-delta-stale":
        # A valid file with the wrong content: the newest delta's bytes (and .crc) replaced by the
        # previous delta's, as a stale copy or upload would leave it. Every file still decodes.
        newest = _target(checkpoint, "newest-delta")
        older = newest.with_name(f"{_version(newest) - 1}.delta")
        shutil.copyfile(older, newest)
        crc = older.with_name(f".{older.name}.crc")
        if crc.exists():
            shutil.copyfile(crc, newest.with_name(f".{newest.name}.crc"))
        return [newest.relative_to(checkpoint).as_posix()]
    if name == "newest-batch-deleted":
        # Offsets and commit of the last batch: the checkpoint rolled back one batch, state files kept.
        n = _target(checkpoint, "newest-commit").name
        gone = [checkpoint / "offsets" / n, checkpoint / "commits" / n]
        for p in gone:
            _delete(p)
            _remove_crc(p)
        return [p.relative_to(checkpoint).as_posix() for p in gone]
    nocrc = name.endswith("-nocrc")
    what, action = name.removesuffix("-nocrc").rsplit("-", 1)
    p = _target(checkpoint, what)
    _ACTIONS[action](p)
    # The .crc beside a file is Hadoop's checksum, which Spark's local file system checks on read: a
    # damaged file keeps its old one (as on a disk), unless the damage says -nocrc (as in a copy from an
    # object store, which has none): then only the file's own format can tell.
    if action == "deleted" or nocrc:
        _remove_crc(p)
    return [p.relative_to(checkpoint).as_posix()]


_HDFS = ["newest-delta-truncated", "newest-delta-bitflip", "newest-delta-deleted", "oldest-delta-truncated"]
_ZIP = ["newest-zip-truncated", "newest-zip-bitflip", "newest-zip-deleted", "newest-zip-sst-deleted"]
_CHANGELOG = ["newest-changelog-truncated", "newest-changelog-bitflip", "newest-changelog-deleted"]
_COMMON = ["newest-commit-deleted", "control"]

#: kind -> damages; a damage in REPAIR_OFF_CELLS also gets a cell restarted with repair off.
DAMAGES: dict[str, list[str]] = {
    "hdfs-snap": [
        *_HDFS,
        "newest-snapshot-truncated",
        "newest-snapshot-bitflip",
        "newest-snapshot-deleted",
        "newest-delta-bitflip-nocrc",
        "newest-snapshot-bitflip-nocrc",
        *_COMMON,
    ],
    "hdfs": [
        *_HDFS,
        "newest-batch-deleted",
        "newest-delta-stale",
        "newest-offsets-resaved",
        "newest-offsets-resaved-nocrc",
        "oldest-offsets-resaved",
        *_COMMON,
    ],
    "rocks-changelog": [
        *_CHANGELOG,
        *_ZIP,
        "oldest-changelog-truncated",
        "newest-changelog-bitflip-nocrc",
        "newest-zip-bitflip-nocrc",
        "newest-zip-sst-bitflip-nocrc",
        "newest-batch-deleted",
        *_COMMON,
    ],
    "rocks": [*_ZIP, "oldest-zip-truncated", "newest-zip-sst-bitflip-nocrc", "newest-zip-resaved", *_COMMON],
    "rocks-v2": [*_CHANGELOG, *_ZIP, "oldest-changelog-truncated", *_COMMON],
    "stateless": ["newest-batch-deleted", *_COMMON],
    "tws": [*_CHANGELOG, "newest-zip-truncated", *_COMMON],
    "pandas-state": [*_HDFS, *_COMMON],
}

#: Cells whose files all decode and agree with the logs: what Spark did there shows the oracle tells
#: wrong state from right, but no reader of the files can know the content is stale.
UNDETECTABLE = ["hdfs/newest-delta-stale"]

REPAIR_OFF_CELLS: dict[str, list[str]] = {
    "hdfs-snap": ["newest-snapshot-truncated", "newest-snapshot-bitflip"],
    "rocks-changelog": ["newest-zip-truncated", "newest-zip-bitflip", "newest-zip-sst-deleted"],
    "rocks-v2": ["newest-zip-truncated", "newest-zip-bitflip"],
}


# --------------------------------------------------------------------------------------------------
# Restarts


def _read_state(run: Run, checkpoint: Path, batch: int) -> list[Any]:
    """Every state row Spark reads at ``batch`` (all partitions), as plain Python."""
    from tests import oracle

    if run.reader == "none":
        return []
    if run.reader == "tws":
        return oracle.read_state_variable(run.spark, checkpoint, 0, "cnt", batch_id=batch)
    return oracle.read_state(run.spark, checkpoint, 0, batch_id=batch)


def _committed(checkpoint: Path) -> int:
    return max((int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), default=-1)


def _chain(exc: BaseException) -> list[str]:
    """``Class: first line`` of each exception in the JVM cause chain (outermost first), deduplicated."""
    out: list[str] = []
    origin = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    seen = 0
    while origin is not None and seen < 12:
        seen += 1
        msg = str(origin.getMessage() or "").strip().split("\n", 1)[0]
        line = f"{origin.getClass().getName()}: {msg}"
        if line not in out:
            out.append(line)
        nxt = origin.getCause()
        if nxt is None or nxt.equals(origin):
            break
        origin = nxt
    if not out:
        out.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    return out


def _headline(chain: list[str]) -> str:
    """The exception that says what went wrong: the first one with a Spark error condition in brackets
    below the streaming wrappers, else the innermost."""
    for line in chain:
        if "[" in line and "STREAM_FAILED" not in line and "Job aborted" not in line:
            return line
    return chain[-1]


class _LogTap:
    """Spark's log lines of the state store package, written to a file while a restart runs."""

    def __init__(self, spark: Any, path: Path) -> None:
        self.path = path
        self.ok = False
        self._undo: tuple[Any, Any, Any] = (None, None, None)
        try:
            jvm = spark._jvm
            log4j = jvm.org.apache.logging.log4j
            core = log4j.core
            ctx = log4j.LogManager.getContext(False)
            config = ctx.getConfiguration()
            layout = core.layout.PatternLayout.newBuilder().withPattern("%p %c{1}: %m%n").build()
            appender = (
                core.appender.FileAppender.newBuilder()
                .withFileName(str(path))
                .setName("statelens-restart-matrix")
                .setLayout(layout)
                .build()
            )
            appender.start()
            config.addAppender(appender)
            level = log4j.Level.INFO
            lc = core.config.LoggerConfig(_STATE_LOGGER, level, False)
            lc.addAppender(appender, level, None)
            config.addLogger(_STATE_LOGGER, lc)
            ctx.updateLoggers()
            self._undo = (ctx, config, appender)
            self.ok = True
        except Exception:  # a log layout this code does not know: no log lines, the outcome stands
            self.ok = False

    def close(self) -> None:
        """Take the logger and its file away again (the session lives on for other tests)."""
        if self.ok:
            ctx, config, appender = self._undo
            config.removeLogger(_STATE_LOGGER)
            ctx.updateLoggers()
            appender.stop()
            self.ok = False

    def lines(self, since: int) -> tuple[list[str], int]:
        """Lines about snapshot loading and repair written after byte ``since``; the new end."""
        if not self.ok or not self.path.exists():
            return [], since
        data = self.path.read_bytes()
        text = data[since:].decode(errors="replace")
        keep = [
            _compact(ln)
            for ln in text.splitlines()
            if any(
                w in ln
                for w in ("Failed to load snapshot", "auto repair", "Repair complete", "snapshot repair")
            )
        ]
        return keep[:20], len(data)


def _compact(line: str) -> str:
    """``ERROR RocksDB partition 0: Failed to load snapshot version 6 ...`` from a log line of the tap."""
    m = re.match(r"(\w+) (\w+)\S* .*?part(?:ition)?Id=(\d+).*?(?:\]|\)): (.*)", line.strip())
    if not m:
        return line.strip()
    level, cls, part, msg = m.groups()
    return f"{level} {cls} partition {part}: {msg}"


def _restart(run: Run, pristine: Path, work: Path, conf: dict[str, str]) -> dict[str, Any]:
    """Restart the kind's query on a copy of ``pristine``; what happened, and the state it left."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work)
    result: dict[str, Any] = {
        "outcome": "",
        "error": "",
        "errors": [],
        "loaded": None,
        "state": None,
        "state_error": "",
        "restart_batch": -1,
    }
    try:
        with session_conf(run.spark, {**run.conf, **conf}):
            emitted = _start(run, work)
    except _BatchFailed as e:
        chain = [ln.replace(str(work), "<checkpoint>") for ln in _chain(e.cause)]
        head = _headline(chain)
        error = head if head == chain[-1] else f"{head} <- {chain[-1]}"
        result.update(outcome="failed", errors=chain, error=error)
    else:
        batch = _committed(work)
        result["restart_batch"] = batch
        if run.reader == "none":
            # No state: every row the restart emitted (a rolled-back batch may come back merged with the next).
            result["loaded"] = sorted({r for rows in emitted.values() for r in rows}, key=repr)
        else:
            # The restart's last batch touched every key: its rows show the state the query loaded.
            result["loaded"] = sorted(emitted.get(batch, []), key=repr)
        try:
            with session_conf(run.spark, conf):
                result["state"] = _read_state(run, work, batch)
        except (PySparkException, Py4JJavaError) as e:
            # The restarted copy still holds the damaged file the restart skipped.
            chain = [ln.replace(str(work), "<checkpoint>") for ln in _chain(e)]
            result["state_error"] = f"{_headline(chain)} <- {chain[-1]}"
    _quiet(work / "state", settle_s=0.3, timeout_s=5.0)  # maintenance may still write there
    shutil.rmtree(work, ignore_errors=True)
    return result


def _same(run: Run, control: dict[str, Any], res: dict[str, Any]) -> bool:
    """Whether a restart holds what the control's restart holds: the rows its last batch emitted (one a
    key, after the state it loaded) and, where Spark's reader can read it, the stored state. Without state,
    whether it emitted every row the control did (none of the new input lost). The batch number may
    differ: a checkpoint rolled back one batch runs the rest of its input as one batch."""
    if run.reader == "none":
        return set(control["loaded"]) <= set(res["loaded"])
    if res["loaded"] != control["loaded"]:
        return False
    return res["state"] is None or res["state"] == control["state"]


def _differs(control: dict[str, Any], res: dict[str, Any]) -> list[str]:
    """Up to 5 rows in which the restart's view differs from the control's (``-`` control, ``+`` this)."""
    out: list[str] = []
    for what in ("loaded", "state"):
        a, b = control[what], res[what]
        if a is None or b is None or a == b:
            continue
        sa, sb = {repr(r) for r in a}, {repr(r) for r in b}
        out += [f"{what} - {r}" for r in sorted(sa - sb)[:5]] + [f"{what} + {r}" for r in sorted(sb - sa)[:5]]
    return out[:10]


def _run_matrix(root: Path, kinds: list[str]) -> dict[str, Any]:
    from tests.spark_checkpoints import spark_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the Python workers need this venv's pandas
    spark = spark_session()
    tap = _LogTap(spark, root / "spark-state.log")
    log_at = 0
    out_cells: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    with warnings.catch_warnings(), contextlib.closing(tap):
        warnings.simplefilter("ignore")
        for kind in kinds:
            t0 = time.monotonic()
            run = _make_run(kind, spark, root)
            facts[kind] = _write_kind(run)
            facts[kind]["write_seconds"] = round(time.monotonic() - t0, 1)
            control: Any = None
            damages = DAMAGES[kind]
            plan = [(d, {}) for d in damages if d != "control"]
            plan.insert(0, ("control", {}))
            plan += [(d, REPAIR_OFF) for d in REPAIR_OFF_CELLS.get(kind, [])]
            for dmg, extra in plan:
                t1 = time.monotonic()
                suffix = "+repair-off" if extra else ""
                rel = Path("cells") / kind / f"{dmg}{suffix}" / "checkpoint"
                copy = root / rel
                shutil.copytree(run.checkpoint, copy)
                files = damage(copy, dmg)
                _, log_at = tap.lines(log_at)
                res = _restart(run, copy, root / "restart" / kind, extra)
                log, log_at = tap.lines(log_at)
                if dmg == "control":
                    if res["outcome"] == "failed":
                        raise RuntimeError(f"{kind}: the undamaged copy did not restart: {res['error']}")
                    control = res
                    if run.reader != "none":
                        facts[kind]["control_counts"] = {r[0]: r[1] for r in res["loaded"]}
                if not res["outcome"]:
                    res["outcome"] = "restarted" if _same(run, control, res) else "restarted-wrong-state"
                out_cells.append(
                    {
                        "name": f"{kind}/{dmg}{suffix}",
                        "kind": kind,
                        "damage": dmg,
                        "path": rel.as_posix(),
                        "outcome": res["outcome"],
                        "error": res["error"],
                        "errors": res["errors"],
                        "conf": {**run.conf, **extra},
                        "files": files,
                        "log": log,
                        "state_rows": -1 if res["state"] is None else len(res["state"]),
                        "state_error": res["state_error"],
                        "emitted_keys": -1 if res["loaded"] is None else len(res["loaded"]),
                        "differs": _differs(control, res) if control is not None and dmg != "control" else [],
                        "restart_batch": res["restart_batch"],
                        "seconds": round(time.monotonic() - t1, 1),
                    }
                )
                print(
                    f"{out_cells[-1]['name']:48s} {res['outcome']:24s} {out_cells[-1]['seconds']:5.1f}s",
                    flush=True,
                )
            facts[kind]["seconds"] = round(time.monotonic() - t0, 1)
    shutil.rmtree(root / "restart", ignore_errors=True)
    return {"spark_version": spark.version, "kinds": facts, "cells": out_cells}


# --------------------------------------------------------------------------------------------------
# The table for the docs


def short_error(cell: Cell) -> str:
    """``[CONDITION] <- RootClass: message`` of a failed cell (Spark's error condition and what caused it)."""
    cond = re.search(r"\[([A-Z_.]+)\]", cell.error)
    root = cell.errors[-1] if cell.errors else cell.error
    cls, _, msg = root.partition(": ")
    text = f"{cls.rsplit('.', 1)[-1]}: {msg}"[:110]
    return f"[{cond.group(1)}] <- {text}" if cond else text


def markdown_table(rows: list[tuple[Cell, str]]) -> str:
    """The matrix as a markdown table: cell, what Spark did (and said), and the verdict beside it."""
    out = io.StringIO()
    out.write("| cell | Spark 4.3 on restart | statelens verdict |\n| --- | --- | --- |\n")
    for cell, verdict in rows:
        spark = cell.outcome
        if cell.error:
            spark += f": `{short_error(cell)}`"
        repair = [ln for ln in cell.log if "Failed to load snapshot" in ln or "Repair complete" in ln]
        if repair:
            spark += f" (log: `{repair[0][:120]}`)"
        out.write(f"| `{cell.name}` | {spark.replace('|', '/')} | {verdict.replace('|', '/')} |\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.restart_matrix", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, help="generate into this folder instead of the cache")
    parser.add_argument("--force", action="store_true", help="regenerate even when cached")
    parser.add_argument("--kinds", nargs="*", help=f"only these kinds: {', '.join(KINDS)}")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    root = generate(args.out, force=args.force, kinds=args.kinds)
    for c in cells(root):
        print(f"{c.name:48s} {c.outcome:24s} {c.error[:100]}")
        for ln in c.log[:3]:
            print(f"{'':48s}   log: {ln[:150]}")
    print(f"total {time.monotonic() - t0:.1f}s  {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

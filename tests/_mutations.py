"""Shared test helpers: byte mutations of real files (hypothesis) and small throwaway streaming queries.

Used by the tests of logs, schema files and operator metadata, which all check that a mutated real file
gives a value or a typed statelens error, and which all write their own small checkpoints with PySpark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

#: Up to four edits: (operation, position, byte).
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "delete"]), st.integers(0, 10_000), st.integers(0, 255)
    ),
    min_size=1,
    max_size=4,
)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def mutate(original: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    """Apply ``EDITS`` to a copy of ``original``: overwrite a byte, cut the tail, insert or delete a byte."""
    data = bytearray(original)
    for op, pos, byte in edits:
        pos = pos % (len(data) + 1)
        if op == "flip" and pos < len(data):
            data[pos] = byte
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = bytes([byte])
        elif op == "delete" and pos < len(data):
            del data[pos]
    return bytes(data)


def run_files_query(
    spark: Any,
    base: Path,
    build: Callable[[Any], Any],
    mode: str,
    conf: dict[str, str],
    batches: list[list[dict[str, Any]]],
) -> Path:
    """Run ``build(df)`` over JSON files ``user, v, ts``, one file per trigger; returns the checkpoint."""
    from tests.spark_checkpoints import session_conf

    src = base / "in"
    src.mkdir(parents=True)
    cp = base / "checkpoint"
    with session_conf(spark, conf):
        for i, rows in enumerate(batches):
            (src / f"part-{i:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
            df = spark.readStream.schema("user STRING, v LONG, ts TIMESTAMP").json(str(src))
            q = (
                build(df)
                .writeStream.format("noop")
                .outputMode(mode)
                .option("checkpointLocation", str(cp))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
    return cp


def set_log_json(path: Path, **fields: Any) -> None:
    """Rewrite fields of the JSON line of an offsets/commits log file (a damaged or edited copy)."""
    lines = path.read_text().split("\n")
    doc = json.loads(lines[1])
    doc.update(fields)
    lines[1] = json.dumps(doc, separators=(",", ":"))
    path.write_text("\n".join(lines))

"""Repartition: Spark's own state repartition, run on a copy, never on the checkpoint, with a proof.

Spark 4.2+ can rewrite a checkpoint's state to another number of partitions
(``checkpointManager.repartition``: experimental, classic sessions, RocksDB stores only). It works *in
place* and adds a batch ``N+1`` holding the repartitioned state; when it fails half-way it leaves that
batch's offsets behind without a commit (seen on Spark 4.3 with an HDFS store). ``statelens repartition``
therefore checks first what Spark would refuse, copies the checkpoint (as ``statelens prune`` does), runs
Spark on the copy, and reads the copy back: every store holds the same rows, byte for byte, spread over
the new partitions (docs/prune.md).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import xxhash

from statelens.app.prune import _check_target, _last_committed, _LocalTarget
from statelens.readers.backends.native import NativeBackend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import RefusedError, UsageError
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan

__all__ = ["RepartitionPlan", "iter_repartition"]

_ROCKSDB = "rocksdb"


@dataclass
class StoreDigest:
    """The rows of one store at one version, whatever the partitioning: their count and the sum (mod
    2^64) of each row's XXH64 over its stored key and value bytes."""

    rows: int = 0
    digest: int = 0

    def add(self, key: bytes, value: bytes) -> None:
        self.rows += 1
        h = xxhash.xxh64()
        h.update(len(key).to_bytes(4, "little"))
        h.update(key)
        h.update(value)
        self.digest = (self.digest + h.intdigest()) & 0xFFFFFFFFFFFFFFFF


@dataclass
class RepartitionPlan:
    """What ``statelens repartition`` does (a dry run) and, once applied, the proof."""

    checkpoint: str
    last_batch: int
    partitions_before: int
    partitions: int
    stores: list[tuple[int, str]]
    target: str | None = None
    applied: bool = False
    copied_files: int = 0
    mismatches: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def new_batch(self) -> int:
        return self.last_batch + 1

    @property
    def ok(self) -> bool:
        return self.applied and not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "target": self.target,
            "applied": self.applied,
            "last_committed_batch": self.last_batch,
            "new_batch": self.new_batch,
            "partitions_before": self.partitions_before,
            "partitions": self.partitions,
            "stores": [{"operator_id": op, "store_name": name} for op, name in self.stores],
            "copied_files": self.copied_files,
            "proof": (
                {"ok": not self.mismatches, "rows_per_store": self.rows, "mismatches": self.mismatches}
                if self.applied
                else None
            ),
        }


def _digests(
    backend: Any, ckpt: Any, version: int
) -> Generator[Progress, None, dict[tuple[int, str], StoreDigest]]:
    out: dict[tuple[int, str], StoreDigest] = {}
    for op in ckpt.operators:
        for st in op.stores:
            d = out.setdefault((op.operator_id, st.store_name), StoreDigest())
            scan = StateScan(backend, op.operator_id, st.store_name, version=version, raw=True, strict=True)
            for t in scan.iter_tables():
                yield Progress(0, 1, f"proof: operator {op.operator_id} {st.store_name}")
                for k, v in zip(
                    t.column("key_bytes").to_pylist(), t.column("value_bytes").to_pylist(), strict=True
                ):
                    d.add(k, v)
    return out


def iter_repartition(
    ckpt: Any,
    partitions: int,
    target: str | None = None,
    *,
    apply: bool = False,
    spark: Callable[[], Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, RepartitionPlan]:
    """Check a repartition (a dry run) and, with ``apply``, run Spark's on a copy in ``target`` and prove it.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint (only read).
    partitions : int
        The new number of state partitions.
    target : str, optional
        A new or empty local folder for the copy (needed with ``apply``).
    apply : bool
        Copy and run Spark; without it nothing is written.
    spark : callable, optional
        Returns the Spark backend to run the repartition with (``readers.backends.spark.SparkBackend``);
        needed with ``apply``.
    cancelled : callable, optional
        Polled by the copy.

    Returns
    -------
    RepartitionPlan

    Raises
    ------
    RefusedError
        What Spark would refuse, before anything is written: a store that is not RocksDB, the same
        partition count, an uncommitted last batch, a target inside the checkpoint or not empty.
    """

    if partitions < 1:
        raise UsageError(f"--partitions {partitions}: give at least 1")
    last, _ = _last_committed(ckpt, drop_uncommitted=False)
    stores = [(op.operator_id, st.store_name, st.provider) for op in ckpt.operators for st in op.stores]
    if not stores:
        raise RefusedError("this checkpoint has no state stores: nothing to repartition")
    other = [(op, name, provider) for op, name, provider in stores if provider != _ROCKSDB]
    if other:
        op, name, provider = other[0]
        raise RefusedError(
            f"operator {op} store {name!r} is kept by the {provider} provider: Spark's repartition rewrites "
            "RocksDB stores only (STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER)",
            path=f"state/{op}",
        )
    before = int(ckpt.conf.get("spark.sql.shuffle.partitions", "0") or 0)
    if partitions == before:
        raise RefusedError(f"the state already has {before} partitions")
    root = _check_target(ckpt, target) if target is not None else None
    if root is not None and not isinstance(root, _LocalTarget):
        raise UsageError(f"--out {target}: repartition writes a local folder (Spark rewrites it in place)")
    plan = RepartitionPlan(
        ckpt.location, last, before, partitions, [(o, n) for o, n, _ in stores], root.url if root else None
    )
    if not apply:
        return plan
    if root is None:
        raise UsageError("--apply needs --out NEW: the folder the repartitioned copy is written to")
    if spark is None:
        raise UsageError("a repartition runs in Spark: no Spark backend was given")
    plan.copied_files = yield from root.copy(ckpt, None, cancelled)
    yield Progress(0, 1, "Spark repartitions the copy")
    spark().repartition_checkpoint(root.url, partitions)
    plan.applied = True
    copy = open_checkpoint(root.url, mirror=False)
    if copy.last_committed_batch_id != plan.new_batch:
        plan.mismatches.append(
            f"the copy's last committed batch is {copy.last_committed_batch_id}, not {plan.new_batch}"
        )
    got = copy.conf.get("spark.sql.shuffle.partitions")
    if got != str(partitions):
        plan.mismatches.append(f"the copy's offsets say {got} partitions, not {partitions}")
    old = yield from _digests(NativeBackend(ckpt), ckpt, last + 1)
    new = yield from _digests(NativeBackend(copy), copy, last + 2)
    for (op, name), d in old.items():
        n = new.get((op, name), StoreDigest())
        plan.rows[f"{op}/{name}"] = n.rows
        if (n.rows, n.digest) != (d.rows, d.digest):
            plan.mismatches.append(
                f"operator {op} store {name!r}: {n.rows} rows after, {d.rows} before"
                + ("" if n.rows != d.rows else ", the same count but other bytes")
            )
    return plan

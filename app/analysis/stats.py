"""Rows and on-disk bytes of every store partition at every version, as plain records: what
``statelens growth --json`` prints and :meth:`statelens.Checkpoint.growth_table` holds (the growth
analysis itself, with footprint and heaviest keys, is :mod:`app.analysis.growth`). Light on imports: it
runs at the start of ``statelens growth``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statelens.readers.backends import BackendChooser
from statelens.readers.model import Progress
from statelens.readers.scan import StateScan

__all__ = ["GROWTH_FIELDS", "iter_growth_records", "store_growth"]

#: The fields of each record, in order.
GROWTH_FIELDS = ("operator_id", "store_name", "version", "batch_id", "partition_id", "rows", "bytes")


def iter_growth_records(
    ckpt: Any, progress: Callable[[Any], None] | None = None, backends: Any = None
) -> Iterable[dict[str, Any]]:
    """Rows and on-disk bytes for every operator, store, version and partition (streamed), counted by a
    stats scan of each store (:func:`store_growth`)."""
    backends = backends or BackendChooser(ckpt, "native")
    stores = [(op, s) for op in ckpt.operators for s in op.stores]
    for n, (op, s) in enumerate(stores):
        if progress:
            progress(Progress(n, len(stores), f"operator {op.operator_id} {s.store_name}"))
        yield from store_growth(ckpt, backends, op.operator_id, s.store_name)


def store_growth(ckpt: Any, backends: Any, operator_id: int, store_name: str) -> Iterator[dict[str, Any]]:
    """One store's records (:data:`GROWTH_FIELDS`), counted by a stats scan
    (:class:`readers.scan.StateScan`) of the backend ``backends`` picks for it; what the scan could not
    read goes to the checkpoint's report."""
    scan = StateScan(backends.for_store(operator_id, store_name), operator_id, store_name, "stats")
    for st in scan.iter_stats():
        yield {
            "operator_id": st.operator_id,
            "store_name": st.store_name,
            "version": st.version,
            "batch_id": st.version - 1,
            "partition_id": st.partition_id,
            "rows": st.rows,
            "bytes": st.bytes,
        }
    for err in scan.problems:
        ckpt.report.add(err)

"""The difference of two versions of one store, partition by partition, through the scan's files: both
versions rebuilt as raw key and value bytes (UnsafeRow bytes of equal values are equal), only the rows that
differ decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from statelens.readers.scan import ScanPart
from statelens.readers.values import rows_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.readers.scan import StateScan

__all__ = ["iter_diff"]


def iter_diff(
    scan: StateScan, old_version: int, new_version: int, *, in_place: bool = False, threads: int = 1
) -> Iterator[ScanPart]:
    """Each partition's differences between two versions as one Arrow table (``change`` added, changed or
    removed, ``partition, key, value`` (the newer value; the old one of a removed row), ``before`` (the
    older value of a changed row)), in partition order, with the scan's error policy, ``threads`` at once.

    With the scan's ``cache`` the tables are kept there and found again; ``in_place`` gives each with its
    file (:attr:`ScanPart.cache_file`).
    """
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    reader, cache = scan._files(), scan.cache
    kt, vt = reader.schema.key_schema, reader.schema.value_schema
    names = ("change", "partition", "key", "value", "before")
    types = (T.StringType(), T.IntegerType(), kt, vt, vt)
    schema = T.StructType([T.StructField(n, t) for n, t in zip(names, types, strict=True)])

    def differences(pid: int) -> pa.Table:
        old = reader.read_raw(pid, old_version)
        new = reader.read_raw(pid, new_version)
        added = [k for k in new if k not in old]
        removed = [k for k in old if k not in new]
        changed = [k for k, v in new.items() if k in old and old[k] != v]
        path = f"state/{scan.operator_id}/{pid}/{new_version}"
        dec_new = reader.decode_pairs([(k, new[k]) for k in (*added, *changed)], path)
        dec_old = reader.decode_pairs([(k, old[k]) for k in (*removed, *changed)], path)
        rows = [("added", pid, key, value, None) for key, value in dec_new[: len(added)]]
        rows.extend(("removed", pid, key, value, None) for key, value in dec_old[: len(removed)])
        rows.extend(
            ("changed", pid, key, value, before)
            for (key, value), (_, before) in zip(dec_new[len(added) :], dec_old[len(removed) :], strict=True)
        )
        return rows_to_arrow(rows, schema)

    def read(pid: int) -> ScanPart:
        if cache is None:
            return ScanPart(pid, new_version, [differences(pid)])
        key = reader.cache_key(cache, pid, new_version, {"table": "diff", "old_version": old_version})
        if in_place:
            path, table = cache.entry(key, lambda: differences(pid))
            return ScanPart(pid, new_version, [table], path)
        table = cache.get(key)
        return ScanPart(pid, new_version, [differences(pid) if table is None else table])

    return scan._per_partition(read, threads)

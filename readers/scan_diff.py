"""The difference of two versions of one store, partition by partition, as stored (:meth:`StateScan.iter_diff`).

Both versions are rebuilt as raw key and value bytes (UnsafeRow bytes of equal values are equal) and only
the rows that differ are decoded, into one Arrow table per partition: ``change`` (``added``, ``changed``,
``removed``), ``partition``, ``key``, ``value`` (the newer value; the old one for removed rows) and
``before`` (the older value of a changed row). With the scan's ``cache`` the tables are kept there (one
Parquet file per partition and pair of versions) and found again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statelens.readers.scan import ScanPart
from statelens.readers.values import rows_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa

    from statelens.readers.scan import StateScan

__all__ = ["diff_schema", "iter_diff"]


def diff_schema(schema: Any) -> Any:
    """Spark schema of a diff table (``change, partition, key, value, before``) of a store's schema."""
    from pyspark.sql import types as T  # deferred: pyspark (heavy)

    return T.StructType(
        [
            T.StructField("change", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("key", schema.key_schema),
            T.StructField("value", schema.value_schema),
            T.StructField("before", schema.value_schema),
        ]
    )


def iter_diff(
    scan: StateScan, old_version: int, new_version: int, *, in_place: bool = False, threads: int = 1
) -> Iterator[ScanPart]:
    """The differences of each partition of ``scan`` between ``old_version`` and ``new_version``, in
    partition order, with the scan's error policy; a part's version is ``new_version``.

    With ``in_place`` and the scan's ``cache``, each table is kept in the cache and comes with its file
    (:attr:`ScanPart.cache_file`); without ``in_place`` a table the cache holds is read from it.
    ``threads`` partitions are compared at once.
    """
    reader, cache = scan._files(), scan.cache
    schema = diff_schema(reader.schema)

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

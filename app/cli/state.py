"""The commands that read a checkpoint's logs and state: ``info``, ``rows``, ``growth``, ``sql``,
``cache`` and ``mirror``."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as quote
from typing import IO, Any

from statelens.app.analysis._common import key_text, run_to_end, write_json
from statelens.app.analysis.growth import iter_growth_records
from statelens.app.analysis.heavy import iter_top_keys, with_top_keys
from statelens.app.analysis.sql import answer_rows, iter_sql, write_answer
from statelens.app.cli import _common
from statelens.app.cli._common import (
    _open,
    _Progress,
    _report_problems,
    _say_backend,
    _usage,
    add_backend_options,
    format_table,
)
from statelens.app.output import csv_cell, dumps_jsonl, flat_columns, flatten_row, write_parquet
from statelens.readers.cache import StateCache
from statelens.readers.errors import SchemaMismatchError, UsageError
from statelens.readers.fs import CheckpointFS
from statelens.readers.mirror import FileMirror, iter_copy_checkpoint
from statelens.readers.scan import StateScan
from statelens.readers.textfmt import format_epoch_ms, ranges
from statelens.readers.values import row_to_json, state_row_schema


# -- info ----------------------------------------------------------------------------------------------
def info_json(ckpt: Any) -> dict[str, Any]:
    """The ``statelens info --json`` document."""

    batches = []
    for b in ckpt.batches:
        sources = []
        if b.offsets is not None:
            for s in b.offsets.sources:
                sources.append(
                    {"index": s.index, "source_id": s.source_id, "kind": s.source_kind, "offset": s.parsed}
                )
        batches.append(
            {
                "batch_id": b.batch_id,
                "timestamp_ms": b.timestamp_ms,
                "watermark_ms": b.watermark_ms,
                "committed": b.committed,
                "next_watermark_ms": b.commit.next_watermark_ms if b.commit else None,
                "sources": sources,
            }
        )
    operators = []
    for op in ckpt.operators:
        stores = []
        for s in op.stores:
            stores.append(
                {
                    "name": s.store_name,
                    "provider": s.provider,
                    "partitions": len(s.partitions),
                    "partition_ids": list(s.partitions),
                    "versions": list(s.versions),
                    "codec": s.codec,
                    "key_schema": json.loads(s.schema.key_json) if s.schema is not None else None,
                    "value_schema": json.loads(s.schema.value_json) if s.schema is not None else None,
                }
            )
        variables = [
            {
                "name": v["name"],
                "store_name": v["store_name"],
                "variable_type": v["variable_type"],
                "ttl": v["ttl"],
                "key_encoder": v["key_encoder"],
                "key_schema": json.loads(v["key_schema"].json()),
                "value_schema": json.loads(v["value_schema"].json()),
                "user_key_schema": json.loads(v["user_key_schema"].json()) if v["user_key_schema"] else None,
            }
            for v in ckpt.state_variables(op.operator_id)
        ]
        operators.append(
            {
                "operator_id": op.operator_id,
                "kind": op.kind.value,
                "operator_name": op.operator_name,
                "timeout_kind": op.timeout_kind,
                "time_columns": [
                    {"store": t.store_name, "side": t.side, "field": t.name, "unit": t.unit, "role": t.role}
                    for t in op.time_columns
                ],
                "stores": stores,
                "state_variables": variables,
            }
        )
    return {
        "checkpoint": ckpt.location,
        "query_id": ckpt.query_id,
        "last_batch_id": ckpt.last_batch_id,
        "last_committed_batch_id": ckpt.last_committed_batch_id,
        "uncommitted_batches": ckpt.uncommitted_batches(),
        "batches": batches,
        "conf": dict(sorted(ckpt.conf.items())),
        "operators": operators,
        "problems": [e.to_json() for e in ckpt.report.problems],
    }


def _print_info(doc: dict[str, Any], out: IO[str]) -> None:
    w = out.write
    w(f"Checkpoint  {doc['checkpoint']}\n")
    w(f"Query id    {doc['query_id'] or '(no metadata file)'}\n")
    n = len(doc["batches"])
    w(
        f"Batches     {n}"
        + (f" ({doc['batches'][0]['batch_id']}..{doc['last_batch_id']})" if n else "")
        + "\n"
    )
    if doc["uncommitted_batches"]:
        w(
            f"UNCOMMITTED {', '.join(map(str, doc['uncommitted_batches']))} (offsets written, no commit: "
            "a restart re-runs the last one)\n"
        )
    else:
        w("Committed   all planned batches committed\n")
    w("\n")
    rows = []
    for b in doc["batches"]:
        src = "; ".join(
            f"{s['kind']}:{s['offset'] if not isinstance(s['offset'], (dict, list)) else _short_json(s['offset'])}"
            for s in b["sources"]
        )
        rows.append(
            [
                b["batch_id"],
                format_epoch_ms(b["timestamp_ms"]),
                # 0 is Spark's "no watermark yet" (no event-time operator, or none moved it)
                format_epoch_ms(b["watermark_ms"]) if b["watermark_ms"] else "none",
                "yes" if b["committed"] else "NO",
                src,
            ]
        )
    w("Times in UTC.\n")
    w(format_table(["batch", "started", "watermark", "committed", "sources"], rows) + "\n\n")
    rows = []
    for op in doc["operators"]:
        for s in op["stores"]:
            versions = s["versions"]
            rows.append(
                [
                    op["operator_id"],
                    op["kind"],
                    s["name"],
                    s["provider"],
                    s["codec"],
                    s["partitions"],
                    ranges(versions) if versions else "-",
                    _schema_str(s["key_schema"]),
                    _schema_str(s["value_schema"]),
                ]
            )
    if rows:
        w(
            format_table(
                ["op", "kind", "store", "provider", "codec", "parts", "versions", "key", "value"], rows
            )
            + "\n"
        )
    else:
        w("No stateful operators (no state/ folder).\n")
    rows = [
        [
            op["operator_id"],
            v["name"],
            v["variable_type"] or "(internal)",
            "yes" if v["ttl"] else "",
            _schema_str(v["key_schema"]),
            _schema_str(v["value_schema"]),
        ]
        for op in doc["operators"]
        for v in op["state_variables"]
    ]
    if rows:
        w("\nState variables (transformWithState; read one with rows --state-var NAME)\n")
        w(format_table(["op", "variable", "type", "ttl", "key", "value"], rows) + "\n")
    keys = (
        "spark.sql.shuffle.partitions",
        "spark.sql.streaming.stateStore.providerClass",
        "spark.sql.streaming.stateStore.compression.codec",
    )
    w("\n" + "\n".join(f"{k} = {doc['conf'].get(k)}" for k in keys if k in doc["conf"]) + "\n")


def _short_json(obj: Any, limit: int = 60) -> str:
    text = json.dumps(obj, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_str(t: Any) -> str:
    if isinstance(t, str):
        return t
    if t.get("type") == "struct":
        return "struct<" + ", ".join(f"{f['name']}:{_type_str(f['type'])}" for f in t["fields"]) + ">"
    if t.get("type") == "array":
        return f"array<{_type_str(t['elementType'])}>"
    if t.get("type") == "map":
        return f"map<{_type_str(t['keyType'])},{_type_str(t['valueType'])}>"
    return str(t.get("type"))


def _schema_str(schema: dict[str, Any] | None, limit: int = 70) -> str:
    if schema is None:
        return "(no schema)"
    text = ", ".join(f"{f['name']} {_type_str(f['type'])}" for f in schema["fields"])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cmd_info(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt = _open(args)
    doc = info_json(ckpt)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        _print_info(doc, out)
    return _report_problems(ckpt)


def _iter_state_tuples(
    args: argparse.Namespace, ckpt: Any, backend: Any, store: str
) -> Iterable[tuple[Any, ...]]:
    """Decoded rows in the field order of :func:`readers.values.state_row_schema`.

    ``(partition, key, value)``, or with ``--changes`` ``(version, partition, change, key, value, derived)``,
    read through the one scan (:class:`readers.scan.StateScan`): a partition whose files cannot be read
    is reported (and left out) unless it was asked for alone.
    """
    scan = StateScan(
        backend,
        args.operator,
        store,
        kind="changes" if args.changes else "rows",
        version=args.version if not args.changes else None,
        start_version=args.version if args.changes else None,
        end_version=args.version if args.changes else None,
        partitions=_one(args),
    )
    try:
        for rec in scan.iter_records():
            if args.changes:
                yield (rec.version, rec.partition_id, rec.change, rec.key, rec.value, rec.derived)  # type: ignore[union-attr]
            else:
                yield (rec.partition_id, rec.key, rec.value)
    finally:
        for err in scan.problems:
            ckpt.report.add(err)


def _column_family_backend(args: argparse.Namespace, ckpt: Any) -> tuple[Any, Any]:
    """``(chooser, backend)`` for transformWithState reads: ``auto`` is native unless it cannot decode."""
    chooser = _common._backends(args, ckpt)
    return chooser, chooser.for_column_families(args.operator)


def _one(args: argparse.Namespace) -> list[int] | None:
    """The partition asked for (``--partition``), as a scan's ``partitions``."""
    return [args.partition] if args.partition is not None else None


def _state_variable_rows(args: argparse.Namespace, ckpt: Any) -> tuple[Any, Iterable[tuple[Any, ...]], Any]:
    """``(row_schema, rows, chooser)`` for ``rows --state-var NAME`` / ``--timers`` (transformWithState)."""
    from pyspark.sql.types import (  # deferred: pyspark (heavy)
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    variables = {v["name"]: v for v in ckpt.state_variables(args.operator)}
    if args.timers:
        timer = next((v for n, v in variables.items() if n.endswith("Timers_keyToTimestamp")), None)
        if timer is None:
            raise UsageError(f"operator {args.operator} registers no timers (no timer column family)")
        if args.changes:
            raise _usage(
                "--changes is not available with --timers; read the timer family with "
                f"--state-var '{timer['name']}' --changes"
            )
        grouping = timer["key_schema"].fields[0].dataType
        schema = StructType(
            [
                StructField("partition", IntegerType()),
                StructField("key", grouping),
                StructField("expiration_timestamp_ms", LongType()),
            ]
        )
        chooser, backend = _column_family_backend(args, ckpt)
        timers = StateScan(backend, args.operator, kind="timers", version=args.version, partitions=_one(args))
        return schema, timers.iter_records(), chooser
    var = variables.get(args.state_var)
    if var is None:
        have = ", ".join(variables) or "none (not a transformWithState operator)"
        raise UsageError(f"operator {args.operator} has no state variable {args.state_var!r}; it has: {have}")
    key_schema, user_key_schema = var["key_schema"], None
    if var["variable_type"] == "MapState":
        key_schema, user_key_schema = key_schema.fields[0].dataType, key_schema.fields[1].dataType
    fields = [StructField("partition", IntegerType()), StructField("key", key_schema)]
    if args.changes:
        fields = [
            StructField("version", LongType()),
            fields[0],
            StructField("change", StringType()),
            fields[1],
        ]
    if user_key_schema is not None:
        fields.append(StructField("user_key", user_key_schema))
    fields.append(StructField("value", var["value_schema"]))
    chooser, backend = _column_family_backend(args, ckpt)
    rows: Iterable[tuple[Any, ...]]
    if args.changes:
        changes = StateScan(
            backend,
            args.operator,
            args.state_var,
            "changes",
            start_version=args.version,
            end_version=args.version,
            partitions=_one(args),
        ).iter_entries()
        if user_key_schema is None:
            rows = ((v, p, c, k, val) for v, p, c, k, val, _ in changes)
        else:
            rows = ((v, p, c, k, u, val) for v, p, c, k, val, u in changes)
        return StructType(fields), rows, chooser
    entries = StateScan(
        backend, args.operator, args.state_var, version=args.version, partitions=_one(args)
    ).iter_entries()
    if user_key_schema is None:
        rows = ((p, k, v) for p, k, v, _ in entries)
    else:
        rows = ((p, k, u, v) for p, k, v, u in entries)
    return StructType(fields), rows, chooser


def cmd_rows(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt = _open(args)
    if args.operator is None:
        ids = [op.operator_id for op in ckpt.operators]
        if len(ids) != 1:
            raise _usage(
                "the checkpoint has no stateful operator"
                if not ids
                else f"the checkpoint has {len(ids)} stateful operators; pick one with --operator: "
                + ", ".join(map(str, ids))
            )
        args.operator = ids[0]
    if args.state_var is None and not args.timers and args.store is not None:
        # A map state variable picked as a store reads as --state-var does (and as the browser shows
        # it): key.<field> and user_key.<field>, not the composite key.key.<field>, key.userKey.<field>.
        variables = {v["name"]: v for v in ckpt.state_variables(args.operator)}
        if variables.get(args.store, {}).get("variable_type") == "MapState":
            args.state_var = args.store
    if args.state_var is not None or args.timers:
        row_schema, rows, chooser = _state_variable_rows(args, ckpt)
        try:
            return _write_rows(args, ckpt, row_schema, rows, out)
        finally:
            _say_backend(args, chooser)
            chooser.close()
    op = ckpt.operator(args.operator)
    if args.store is None and len(op.stores) != 1:
        names = ", ".join(s.store_name for s in op.stores)
        raise _usage(f"operator {args.operator} has several stores; pick one with --store: {names}")
    store = op.store(args.store or op.stores[0].store_name)
    if store.schema is None:
        raise SchemaMismatchError(
            "this store has no readable schema file, so its rows cannot be decoded",
            path=f"state/{args.operator}/0/_metadata/schema",
        )
    chooser = _common._backends(args, ckpt)
    backend = chooser.for_store(args.operator, store.store_name)
    row_schema = state_row_schema(store.key_schema, store.value_schema, changes=args.changes)
    try:
        if args.format == "parquet":
            if not args.output:
                raise _usage("--format parquet needs -o FILE (a folder with --backend spark)")
            # Straight from the scan: the native decoder writes each partition's Arrow table into one
            # file; Spark writes a folder where it runs, collecting nothing here.
            scan = StateScan(
                backend,
                args.operator,
                store.store_name,
                "changes" if args.changes else "rows",
                version=None if args.changes else args.version,
                start_version=args.version if args.changes else None,
                end_version=args.version if args.changes else None,
                partitions=_one(args),
            )
            scan.to_parquet(args.output)
            for err in scan.problems:
                ckpt.report.add(err)
            return _report_problems(ckpt)
        rows = _iter_state_tuples(args, ckpt, backend, store.store_name)
        return _write_rows(args, ckpt, row_schema, rows, out)
    finally:
        _say_backend(args, chooser)
        chooser.close()


def _write_rows(
    args: argparse.Namespace, ckpt: Any, row_schema: Any, rows: Iterable[tuple[Any, ...]], out: IO[str]
) -> int:
    """Write decoded rows (positional, in ``row_schema``'s field order) as JSON lines, CSV or Parquet."""

    if args.format == "parquet":
        if not args.output:
            raise _usage("--format parquet needs -o FILE")

        write_parquet(list(rows), args.output, row_schema)
        return _report_problems(ckpt)
    docs = (row_to_json(t, row_schema) for t in rows)
    target: IO[str] = open(args.output, "w", encoding="utf-8", newline="") if args.output else out  # noqa: SIM115
    try:
        if args.format == "jsonl":
            for doc in docs:
                target.write(dumps_jsonl(doc) + "\n")
        else:
            _write_csv(docs, row_schema, target)
    finally:
        if args.output:
            target.close()
    return _report_problems(ckpt)


def _write_csv(docs: Iterable[Any], row_schema: Any, target: IO[str]) -> None:
    writer = csv.writer(target)
    writer.writerow(flat_columns(row_schema))
    for doc in docs:
        writer.writerow([csv_cell(v) for _, v in flatten_row(doc, "", row_schema)])


# -- growth --------------------------------------------------------------------------------------------
def _dump_flat_records(records: list[dict[str, Any]], out: IO[str]) -> None:
    """``json.dump(records, out, indent=1)`` for records of plain values, written at the speed of the C
    encoder: with ``indent`` the json module encodes in Python (~60 us a record, 0.4 s for the 6,000
    records of a 200-partition, 30-batch store)."""

    if not records:
        out.write("[]")
        return
    dumps = json.dumps
    items = []
    for record in records:
        fields = ",\n  ".join(
            f"{quote(k)}: {quote(v) if type(v) is str else v if type(v) is int else dumps(v)}"
            for k, v in record.items()
        )
        items.append(f" {{\n  {fields}\n }}" if record else " {}")
    out.write("[\n" + ",\n".join(items) + "\n]")


def cmd_growth(args: argparse.Namespace, out: IO[str]) -> int:
    ckpt = _open(args)
    bar = _Progress()
    chooser = _common._backends(args, ckpt)
    if args.top_keys is not None and args.top_keys < 1:
        raise _usage(f"--top-keys must be at least 1, not {args.top_keys}")
    heavy: list[Any] = []
    try:
        records = list(iter_growth_records(ckpt, bar, chooser))
        if args.top_keys:
            heavy, problems = run_to_end(iter_top_keys(ckpt, args.top_keys, backends=chooser), bar)
            for err in problems:
                ckpt.report.add(err)
    finally:
        bar.close()
        _say_backend(args, chooser)
        chooser.close()
    if args.json:
        if heavy:  # keys keep Spark's field names, repeated ones too: written by the analysis' writer
            write_json(with_top_keys(records, heavy), out)
        else:
            _dump_flat_records(records, out)
            out.write("\n")
        return _report_problems(ckpt)
    totals: dict[tuple[int, str, int], list[int]] = {}
    for r in records:
        t = totals.setdefault((r["operator_id"], r["store_name"], r["version"]), [0, 0, 0, 0])
        t[0] += r["rows"]
        t[1] += r["bytes"]
        t[2] = max(t[2], r["rows"])
        t[3] += 1
    rows = [[op, store, v, v - 1, t[3], t[0], t[1], t[2]] for (op, store, v), t in sorted(totals.items())]
    out.write(
        format_table(
            ["op", "store", "version", "batch", "partitions", "rows", "bytes_on_disk", "max_partition_rows"],
            rows,
        )
        + "\n"
    )
    for store in heavy:
        head = f"\nHeaviest keys of operator {store.operator_id} {store.store_name}"
        if store.skipped:
            out.write(f"{head}: not weighed ({store.skipped})\n")
            continue
        out.write(f"{head} at version {store.version} (of {store.keys} keys):\n")
        counted = ["elements"] if store.grouping else []
        out.write(
            format_table(
                ["partition", "key", "bytes", *counted],
                [
                    [h.partition_id, key_text(h.key), h.bytes, *([h.elements] if counted else [])]
                    for h in store.overall
                ],
            )
            + "\n"
        )
    return _report_problems(ckpt)


# -- sql -----------------------------------------------------------------------------------------------
def cmd_sql(args: argparse.Namespace, out: IO[str]) -> int:
    fmt = (
        "json"
        if args.json
        else "jsonl"
        if args.jsonl
        else "csv"
        if args.csv
        else "parquet"
        if args.parquet
        else "table"
    )
    if fmt == "parquet" and not args.output:
        raise _usage("--parquet needs -o FILE")
    if args.in_spark:
        if args.backend == "native":
            raise _usage("--in-spark runs the query in Spark: it cannot be used with --backend native")
        args.backend = "spark"
    ckpt = _open(args)
    chooser = _common._backends(args, ckpt)
    bar = _Progress()
    try:
        cache = None if _common.no_cache(args) or args.in_spark else StateCache()
        result = run_to_end(
            iter_sql(
                ckpt,
                args.query,
                operator_id=args.operator,
                store_name=args.store,
                version=args.version,
                backends=chooser,
                cache=cache,
                in_spark=args.in_spark,
                output_url=args.output if args.in_spark and fmt == "parquet" else None,
            ),
            bar,
        )
    except BaseException:
        chooser.close()
        raise
    finally:
        bar.close()
    try:
        for err in result.problems:
            ckpt.report.add(err)
        if result.rows_written is not None:
            sys.stderr.write(f"statelens: {result.rows_written:,} rows written by Spark to {args.output}\n")
        elif fmt == "table":
            rows, n = answer_rows(result, args.max_rows)
            out.write(format_table(result.columns, rows) + "\n")
            if n > len(rows):
                out.write(
                    f"... {n - len(rows):,} more rows not shown (--csv, --json or --parquet -o FILE write all)\n"
                )
            out.write(f"({n:,} row{'s' if n != 1 else ''})\n")
        elif fmt == "parquet":
            write_answer(result, fmt, args.output)
        else:
            target: IO[str] = open(args.output, "w", encoding="utf-8", newline="") if args.output else out  # noqa: SIM115
            try:
                write_answer(result, fmt, target)
            finally:
                if args.output:
                    target.close()
    finally:
        result.close()
        _say_backend(args, chooser)
        chooser.close()
    return _report_problems(ckpt)


def cmd_cache(args: argparse.Namespace, out: IO[str]) -> int:
    cache = StateCache()
    mirror = FileMirror()
    if args.action == "clear":
        removed = cache.clear()
        files = mirror.clear()
        doc: dict[str, Any] = {
            "removed": removed,
            **cache.info().to_json(),
            "mirror": {"removed": files, **mirror.info().to_json()},
        }
        text = (
            f"removed {removed:,} entr{'y' if removed == 1 else 'ies'} from {cache.root}\n"
            f"removed {files:,} mirrored file{'' if files == 1 else 's'} from {mirror.root}"
        )
    else:
        info = cache.info()
        held = mirror.info()
        doc = {**info.to_json(), "mirror": held.to_json()}
        text = (
            f"cache   {info.path}\nentries {info.entries:,}\n"
            f"size    {info.bytes / 2**20:,.1f} MiB of {info.max_bytes / 2**30:,.1f} GiB\n"
            f"mirror  {held.path}\nfiles   {held.files:,}\n"
            f"size    {held.bytes / 2**20:,.1f} MiB of {held.max_bytes / 2**30:,.1f} GiB"
        )
    out.write((json.dumps(doc) if args.json else text) + "\n")
    return 0


# -- mirror --------------------------------------------------------------------------------------------
def cmd_mirror(args: argparse.Namespace, out: IO[str]) -> int:
    bar = _Progress()
    try:
        fs = CheckpointFS(args.checkpoint, getattr(args, "storage_options", None), mirror=False, keep_bytes=0)
        result = run_to_end(iter_copy_checkpoint(fs, args.target), bar)
    finally:
        bar.close()
    for err in result.failed:
        sys.stderr.write(f"statelens: warning: {err}\n")
    if args.json:
        out.write(json.dumps(result.to_json()) + "\n")
    else:
        out.write(
            f"copied {result.copied:,} file{'' if result.copied == 1 else 's'} "
            f"({result.copied_bytes / 2**20:,.1f} MiB) to {result.target}; {result.skipped:,} already there; "
            f"{result.verified:,} checked against their MD5 ETag"
            + (f"; {len(result.failed):,} failed (named above)" if result.failed else "")
            + "\n"
        )
    return _common.EXIT_PARTIAL if result.failed else _common.EXIT_OK


def add_commands(sub: Any) -> None:
    """Add ``info``, ``rows``, ``growth``, ``sql``, ``cache`` and ``mirror`` to the ``statelens`` subparsers."""
    p = sub.add_parser("info", help="query id, batches, conf, operators and stores")
    p.add_argument("checkpoint", help="checkpoint folder: local path, file:// or any fsspec URL (s3://...)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("rows", help="decoded state rows of one store at one version (or its changes)")
    p.add_argument("checkpoint")
    p.add_argument("--operator", type=int, metavar="N", help="stateful operator id (default: the only one)")
    p.add_argument("--store", metavar="NAME", help="store name (joins have four; default: the only one)")
    p.add_argument(
        "--version",
        type=int,
        metavar="V",
        help="state version (written by batch V-1); default: the latest readable",
    )
    p.add_argument("--partition", type=int, metavar="P", help="one partition only")
    p.add_argument("--changes", action="store_true", help="the put/remove records of each version instead")
    p.add_argument(
        "--state-var",
        metavar="NAME",
        help="transformWithState: read this state variable (see 'info' for the names; internal "
        "families such as '$ttl_NAME' too, natively)",
    )
    p.add_argument(
        "--timers",
        action="store_true",
        help="transformWithState: the registered timers (key, expiration_timestamp_ms)",
    )
    p.add_argument("--format", choices=("jsonl", "csv", "parquet"), default="jsonl")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    add_backend_options(p)
    p.set_defaults(func=cmd_rows)

    p = sub.add_parser("growth", help="rows and on-disk bytes per operator, store, version and partition")
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per partition-version")
    p.add_argument(
        "--top-keys",
        type=int,
        metavar="N",
        help="also the N heaviest keys (encoded key + value bytes; list/map state by element) per "
        "partition and per store at the latest version",
    )
    add_backend_options(p)
    p.set_defaults(func=cmd_growth)

    p = sub.add_parser(
        "sql",
        help="query the checkpoint with SQL (DuckDB, or Spark with --in-spark): tables batches, growth, state, "
        "changes, expired",
        description="Run a DuckDB SQL query over the checkpoint. Tables (filled only when the query names them): "
        "batches (the timeline), growth (rows and bytes per store, version and partition), state (one "
        "store's rows at one version: partition_id, key, value as typed structs), changes (that store's "
        "change feed), expired (expired-but-unremoved keys). With --in-spark the query is Spark SQL and runs where "
        "Spark runs. Example: statelens sql CKPT "
        '"SELECT partition_id, count(*) FROM state GROUP BY 1 ORDER BY 2 DESC"',
    )
    p.add_argument("checkpoint")
    p.add_argument("query", help="the SQL query (quote it)")
    p.add_argument("--operator", type=int, help="operator of the state and changes tables")
    p.add_argument("--store", help="store of the state and changes tables")
    p.add_argument("--version", type=int, help="state version of the state table (default: the latest)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON list of objects")
    fmt.add_argument("--jsonl", action="store_true", help="one JSON object per line")
    fmt.add_argument("--csv", action="store_true", help="CSV (structs flattened to a.b columns)")
    fmt.add_argument("--parquet", action="store_true", help="Parquet, typed (needs -o FILE)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument(
        "--max-rows", type=int, default=1000, metavar="N", help="rows shown as a table (default 1000)"
    )
    p.add_argument(
        "--in-spark",
        action="store_true",
        help="run the query in Spark (Spark SQL, on --spark-master/--spark-remote or local[*]): state and "
        "changes are read where Spark runs and never come here; at most 1,000,000 answer rows come back "
        "(--parquet -o URL: Spark writes the answer there, a folder of part files)",
    )
    p.add_argument("--no-cache", action="store_true", help=_common.NO_CACHE_HELP)
    add_backend_options(p)
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser(
        "cache",
        help="the cache of decoded state and the mirror of remote files: where, how big, clear them",
        description="Decoded state versions are kept as Parquet under the user's cache folder "
        "($STATELENS_CACHE_DIR overrides it; $STATELENS_CACHE_MAX_BYTES caps it, default "
        "4 GiB, least recently used first out) and reused while their source files are "
        "unchanged. Files read from remote storage (s3://...) are mirrored in its files/ folder "
        "($STATELENS_MIRROR_DIR, $STATELENS_MIRROR_MAX_BYTES, default 4 GiB; $STATELENS_MIRROR=0 or "
        "--no-cache: not mirrored), keyed by path, size and ETag. Nothing is ever written inside a checkpoint.",
    )
    p.add_argument(
        "action", choices=("info", "clear"), help="info: folder, entries and bytes; clear: remove them"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser(
        "mirror",
        help="copy a checkpoint (s3://...) into a local folder, many files at a time; resumable",
        description="Copy every file of a checkpoint into DIR for a post-mortem archive or fast local work, "
        "many requests at a time. Each file is checked against its listed size and ETag (and the ETag's MD5 "
        "where the object was uploaded in one part); files already in DIR with their size are kept, so an "
        "interrupted copy resumes. Open DIR with statelens afterwards.",
    )
    p.add_argument("checkpoint", help="checkpoint folder: s3://..., any fsspec URL or a local path")
    p.add_argument("target", metavar="DIR", help="local folder to copy into (created if needed)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_mirror)

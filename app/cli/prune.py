"""``statelens prune`` and ``statelens repartition``: commands that write a changed copy of a checkpoint,
never the checkpoint (docs/prune.md)."""

from __future__ import annotations

import argparse
import json
from typing import IO, Any

from statelens.app.analysis._common import counted, run_to_end
from statelens.app.cli import _common
from statelens.app.cli._common import _open, _Progress
from statelens.app.prune import CATEGORIES, Selection, finding_text, iter_prune, read_key_lines
from statelens.app.repartition import iter_repartition

PRUNE_EPILOG = """\
Without --apply nothing is written: the dry run says what would be removed, per store and partition.
With --apply the checkpoint is copied to NEW (an empty or new folder, local or s3://...; the source is never
written), one batch that reads no data is added to the copy with the keys removed from its state, and
the copy is read back and compared with the original byte for byte. Restart the same query on NEW
(same code, same configuration): it continues with the next batch.
First, the checks of 'statelens doctor' run on what the copy carries and a restart of it loads (logs,
metadata, schema files, the state files of the last committed version): an error there refuses the
prune (exit code 2, nothing written) unless --force, which copies it and records it in the report.

examples:
  statelens prune CKPT --zombies                       # dry run: the forgotten-remove() keys
  statelens prune CKPT --zombies --out NEW --apply --report prune.json
  statelens expired CKPT --jsonl > keys.jsonl          # pick lines, then
  statelens prune CKPT --keys keys.jsonl --out NEW --apply
  statelens prune CKPT --where "key.user LIKE 'test-%'" --operator 0 --out NEW --apply
"""


def cmd_prune(args: argparse.Namespace, out: IO[str]) -> int:
    keys = None
    if args.keys is not None:
        try:
            with open(args.keys, encoding="utf-8") as f:
                keys = read_key_lines(f, args.keys)
        except OSError as err:
            raise _common._usage(f"cannot read --keys {args.keys}: {err.strerror or err}") from err
    categories = (
        tuple(c.strip() for c in args.category.split(",") if c.strip()) if args.category else ("zombie",)
    )
    selection = Selection(
        zombies=args.zombies or bool(args.category),
        categories=categories,
        keys=keys,
        where=args.where,
        operator_id=args.operator,
        store_name=args.store,
    )
    if args.apply and not args.out:
        raise _common._usage("--apply needs --out NEW: the folder the pruned copy is written to")
    ckpt = _open(args)
    bar = _Progress()
    try:
        plan = run_to_end(
            iter_prune(
                ckpt,
                selection,
                args.out,
                apply=args.apply,
                drop_uncommitted=args.drop_uncommitted,
                force=args.force,
                storage_options=getattr(args, "storage_options", None),
            ),
            bar,
        )
    finally:
        bar.close()
    doc = plan.to_json()
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
    if args.json:
        out.write(json.dumps(doc, ensure_ascii=False) + "\n")
    else:
        _print_plan(plan, out)
    if plan.proof is not None and not plan.proof.ok:
        return _common.EXIT_ERROR
    return _common.EXIT_OK


def _print_plan(plan: Any, out: IO[str]) -> None:
    w = out.write
    if plan.findings:
        w(
            f"statelens doctor finds, in files the copy {'carries' if plan.applied else 'would carry'} and a "
            "restart of it loads:\n"
        )
        for f in plan.findings:
            w(f"  {f.severity}: {finding_text(f)}\n")
        w("\n")
    verb = "Removed" if plan.applied else "Would remove"
    w(
        f"{verb} {plan.removed_rows:,} row{'' if plan.removed_rows == 1 else 's'} "
        f"({plan.removed_bytes:,} bytes as stored) from state version {plan.base_version} "
        f"(after batch {plan.last_batch}, the last committed)"
        + (
            f"; batch{'es' if len(plan.dropped_uncommitted) > 1 else ''} "
            f"{', '.join(map(str, plan.dropped_uncommitted))} (uncommitted) left out"
            if plan.dropped_uncommitted
            else ""
        )
        + ".\n\n"
    )
    shown = 10
    stores = [
        [
            s.operator_id,
            s.store_name,
            s.provider,
            sum(1 for p in s.partitions if p.removed_rows),
            s.removed_rows,
            s.removed_bytes,
        ]
        for s in plan.stores
    ]
    if plan.removed_rows:
        w(
            _common.format_table(["op", "store", "provider", "partitions", "removed", "bytes"], stores)
            + "\n\n"
        )
        parts = sorted(
            ((s, p) for s in plan.stores for p in s.partitions if p.removed_rows),
            key=lambda sp: (-sp[1].removed_rows, sp[0].operator_id, sp[0].store_name, sp[1].partition),
        )
        rows = [
            [
                s.operator_id,
                s.store_name,
                p.partition,
                f"{p.rows:,}",
                f"{p.removed_rows:,}",
                f"{p.removed_bytes:,}",
            ]
            for s, p in parts[:shown]
        ]
        w(_common.format_table(["op", "store", "partition", "rows", "removed", "bytes"], rows) + "\n")
        if len(parts) > shown:
            w(
                f"... and {len(parts) - shown:,} more partitions (--json or --report lists every one and the keys)\n"
            )
        w("\n")
    else:
        w("No key matched: nothing to remove.\n\n")
    if not plan.applied:
        w(
            f"Dry run: nothing written. With --out NEW --apply, statelens copies the checkpoint to NEW and adds "
            f"batch {plan.new_batch} (no data) whose state version {plan.new_version} removes these keys.\n"
        )
        return
    w(
        f"Copied {plan.copied_files:,} files to {plan.target} and wrote {counted(len(plan.written), 'file')} "
        f"(batch {plan.new_batch}: offsets, commit and state version {plan.new_version} of every partition, "
        "with their .crc).\n"
    )
    proof = plan.proof
    carried = plan.carried_errors
    if proof is not None and proof.ok:
        w(
            f"Proof: read back, the copy holds {counted(proof.kept_rows, 'row')} identical to the original byte for "
            f"byte and none of the {counted(proof.gone_rows, 'row')} removed ({counted(proof.partitions, 'partition')} "
            "compared).\n"
        )
        if carried:
            w(
                f"Forced: the copy carries {counted(len(carried), 'error')} statelens doctor finds "
                f"({', '.join(sorted({p for f in carried for p in f.files})) or 'listed above'}); a restart on "
                f"{plan.target} loads them: repair them before restarting the same query there.\n"
            )
        else:
            w(f"Restart the same query on {plan.target}: it runs batch {plan.new_batch + 1} next.\n")
    elif proof is not None:
        w("Proof FAILED: the copy does not read back as expected; do not restart from it.\n")
        for m in proof.mismatches:
            w(f"  {m}\n")


def cmd_repartition(args: argparse.Namespace, out: IO[str]) -> int:
    if args.apply and not args.out:
        raise _common._usage("--apply needs --out NEW: the folder the repartitioned copy is written to")
    ckpt = _open(args)
    args.backend = "spark"
    chooser = _common._backends(args, ckpt)
    bar = _Progress()
    try:
        plan = run_to_end(
            iter_repartition(ckpt, args.partitions, args.out, apply=args.apply, spark=lambda: chooser.spark),
            bar,
        )
    finally:
        bar.close()
        chooser.close()
    if args.json:
        out.write(json.dumps(plan.to_json()) + "\n")
    elif not plan.applied:
        out.write(
            f"Dry run: nothing written. With --out NEW --apply, statelens copies the checkpoint to NEW and runs "
            f"Spark's repartition there: batch {plan.new_batch} (no data) rewrites the state of "
            f"{counted(len(plan.stores), 'store')} from {plan.partitions_before} to {plan.partitions} partitions.\n"
        )
    elif plan.ok:
        rows = sum(plan.rows.values())
        out.write(
            f"Copied {plan.copied_files:,} files to {plan.target}; Spark added batch {plan.new_batch} with "
            f"{plan.partitions} partitions.\nProof: read back, every store holds the same {counted(rows, 'row')} as "
            f"before, byte for byte.\nRestart the same query on {plan.target}.\n"
        )
    else:
        out.write("Proof FAILED: the copy does not hold the rows it had; do not restart from it.\n")
        for m in plan.mismatches:
            out.write(f"  {m}\n")
    return _common.EXIT_OK if not plan.applied or plan.ok else _common.EXIT_ERROR


def add_commands(sub: Any) -> None:
    """Add ``prune`` to the ``statelens`` subparsers."""

    p = sub.add_parser(
        "prune",
        help="write a copy of the checkpoint with chosen keys removed (leaked state), that Spark restarts from",
        description="Write a repaired copy of a checkpoint with chosen keys removed from its last committed "
        "state, so that the same query restarted on the copy no longer carries them.",
        epilog=PRUNE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", help="checkpoint folder: local path, file:// or any fsspec URL (s3://...)")
    p.add_argument(
        "--out",
        metavar="NEW",
        help="new or empty folder for the pruned copy: a local path or any fsspec URL (s3://...; the "
        "--storage-option values apply to it too)",
    )
    p.add_argument(
        "--apply", action="store_true", help="write the copy (default: a dry run that writes nothing)"
    )
    p.add_argument("--zombies", action="store_true", help="remove the keys 'statelens expired' reports")
    p.add_argument(
        "--category",
        metavar="LIST",
        help=f"with --zombies: which findings, comma-separated, of {', '.join(CATEGORIES)} (default: zombie)",
    )
    p.add_argument(
        "--keys", metavar="FILE", help='remove the keys listed in JSON lines ({"key": ...} per line)'
    )
    p.add_argument(
        "--where", metavar="SQL", help="remove the rows a DuckDB predicate over the 'state' table picks"
    )
    p.add_argument("--operator", type=int, metavar="N", help="only this stateful operator")
    p.add_argument("--store", metavar="NAME", help="only this store")
    p.add_argument(
        "--drop-uncommitted",
        action="store_true",
        help="when the last planned batch never committed, prune on top of the last committed one and leave "
        "the uncommitted batch out of the copy",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="copy even when 'statelens doctor' finds errors in files the copy carries and a restart of it "
        "loads; the report records each",
    )
    p.add_argument(
        "--report",
        metavar="FILE",
        help="write the JSON record: keys removed, files written, checksums, doctor findings carried",
    )
    p.add_argument("--json", action="store_true", help="print the JSON record instead of text")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser(
        "repartition",
        help="run Spark's state repartition (4.2+, RocksDB) on a copy of the checkpoint, never in place",
        description="Copy the checkpoint to NEW, run Spark's checkpointManager.repartition there (Spark 4.2+, "
        "RocksDB stores; it adds a batch whose state has the new number of partitions), and read the copy back: "
        "every store must hold the same rows, byte for byte. Without --apply nothing is written.",
    )
    p.add_argument("checkpoint", help="checkpoint folder: local path, file:// or any fsspec URL (s3://...)")
    p.add_argument("--partitions", type=int, required=True, metavar="N", help="the new number of partitions")
    p.add_argument("--out", metavar="NEW", help="new or empty local folder for the copy")
    p.add_argument("--apply", action="store_true", help="copy and repartition (default: a dry run)")
    p.add_argument(
        "--spark-master", metavar="URL", help="Spark master (default: $STATELENS_SPARK_MASTER or local[*])"
    )
    p.add_argument("--spark-conf", metavar="FILE", help="spark-defaults style file of extra Spark confs")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_repartition, spark_remote=None)

"""Verdicts: the answers of a post-mortem, one line each (``statelens summary``, the app's overview, the
report's first section).

Every verdict comes from an existing analysis and names the view that proves it:

``restart``
    :mod:`app.analysis.doctor`: any error finding means Spark will fail or lose data on restart (a file
    the restart reads is damaged, as :mod:`readers.restart` models Spark's loader); the first one is named
    with its file. A restart that loads only through auto snapshot repair says so: ``ok`` for a Spark
    known to repair (``--spark-version``/``--conf``), ``warning`` when the version is unknown. Otherwise
    the version a restart loads.
``commit``
    offsets without a commit (``docs/format.md`` §2.6): the batch a restart re-runs.
``expired``
    :mod:`app.analysis.expired`, per store: keys at each partition's latest version, and their trend
    over the last :data:`TREND_VERSIONS` versions (counted without decoding, ``version_counts``).
``growth``
    :mod:`app.analysis.growth`, per store: rows and key + value bytes now, their change over the last
    :data:`GROWTH_VERSIONS` versions, and the heaviest partition against the median (skew).
``watermark``
    the batches' watermarks (:mod:`app.analysis.timeline`): when it last moved, stuck since which batch.
``slow_batches``, ``dropped_rows``
    what the query reported (event logs): the slowest batches, rows dropped by the watermark.
``unreadable``
    every file an analysis could not read (their ``problems`` lists and doctor's decode checks).
``runs``, ``fix``
    when the checkpoint holds two or more runs of its query (:mod:`app.analysis.runs`: the event logs'
    run ids, else a gap in the batch timestamps), or the user names the fix batch: the runs, and per
    store expired keys and rows per batch before and after the fix batch (the last run's first batch).

:func:`summarize` builds the verdicts from results already computed (the report does); :func:`iter_summary`
runs the analyses first. :func:`early_verdicts` (no state file) and :func:`iter_first_look` (each store's
latest version only) give the verdicts that can be known sooner, which the app's overview shows while
:func:`iter_summary` runs; each is one of its verdicts, or a part of one (rows now without the trend).
Qt-free; the app shows the same :class:`Verdict` objects.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis._common import as_step, counted, run_to_end
from statelens.app.analysis.doctor import DoctorResult, iter_doctor
from statelens.app.analysis.expired import CATEGORIES, ExpiredResult, iter_expired
from statelens.app.analysis.growth import GrowthResult, StoreGrowth, iter_growth, iter_latest_growth
from statelens.app.analysis.runs import (
    Run,
    StoreBeforeAfter,
    before_after,
    describe_change,
    find_runs,
    fix_batch_of,
    fix_margin,
)
from statelens.app.analysis.timeline import Timeline, iter_timeline
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.readers.restart import RestartConf
from statelens.readers.textfmt import format_duration_ms, format_epoch_ms

#: Severities, worst first. ``ok`` says a question was asked and the answer is good.
SEVERITIES = ("error", "warning", "info", "ok")
#: Versions the expired-keys trend looks back over.
TREND_VERSIONS = 5
#: Versions (batches) the state growth looks back over.
GROWTH_VERSIONS = 10
#: A store that gained at least this share of its rows over :data:`GROWTH_VERSIONS`, never shrinking, grows.
GROWTH_WARN_SHARE = 0.10
#: The heaviest partition holding this many times the median is skew...
SKEW_WARN = 3.0
#: ...when it holds at least this many rows (tiny stores are always uneven).
SKEW_MIN_ROWS = 100
#: Batches without a watermark move, while batches ran, before the watermark counts as stuck.
STUCK_BATCHES = 3
#: Runs named in the ``runs`` verdict (the first and the last halves of them).
RUNS_SHOWN = 4
#: Slowest batches named.
SLOWEST_SHOWN = 3
#: A batch this many times slower than the median is worth a look.
SLOW_FACTOR = 5.0
#: Doctor checks whose findings are files that could not be read or decoded.
UNREADABLE_CHECKS = (
    "unreadable_file",
    "undecodable_file",
    "row_checksum",
    "bad_schema_file",
    "rocksdb_restart_zip",
    "rocksdb_restart_changelog",
    "rocksdb_zip",
    "rocksdb_changelog",
)


@dataclass(frozen=True)
class Verdict:
    """One answer: a severity, a line of text, the number behind it and the view that shows it.

    Attributes
    ----------
    check : str
        ``restart``, ``commit``, ``expired``, ``growth``, ``skew``, ``watermark``, ``slow_batches``,
        ``dropped_rows``, ``event_logs``, ``unreadable``, ``runs`` or ``fix``.
    severity : str
        One of :data:`SEVERITIES`.
    text : str
        The verdict, one line, the number in it.
    value : float or None
        The number the verdict rests on (findings, rows, batches, files...).
    view : str
        The app view that proves it (a key of :data:`app.analysis.views.VIEWS`).
    operator_id, store_name, batch_id, partition : optional
        Where that view should open.
    files : tuple of str
        Files named by the verdict (the first damaged one, for ``restart``).
    """

    check: str
    severity: str
    text: str
    value: float | None
    view: str
    operator_id: int | None = None
    store_name: str | None = None
    batch_id: int | None = None
    partition: int | None = None
    files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The verdict as ``statelens summary --json`` prints it."""
        return {
            "check": self.check,
            "severity": self.severity,
            "text": self.text,
            "value": self.value,
            "view": self.view,
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "batch_id": self.batch_id,
            "partition": self.partition,
            "files": list(self.files),
        }


@dataclass
class Summary:
    """The verdicts (worst first) and every problem the analyses met."""

    location: str
    verdicts: list[Verdict]
    problems: list[StatelensError] = field(default_factory=list)
    doctor: DoctorResult | None = None
    expired: ExpiredResult | None = None
    #: The expired run's counts at earlier versions (``iter_expired(version_counts=...)``).
    version_counts: Counter[tuple[int, str, int, str]] | None = None
    growth: GrowthResult | None = None
    #: False for :func:`iter_first_look`'s verdicts (from the latest versions' files only).
    complete: bool = True
    #: The query's runs (:func:`app.analysis.runs.find_runs`), the fix batch and the stores around it.
    runs: list[Run] = field(default_factory=list)
    fix_batch: int | None = None
    before_after: list[StoreBeforeAfter] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every verdict is fine (``ok`` or ``info``), 1 on a finding or damage."""
        bad = any(v.severity in ("error", "warning") for v in self.verdicts)
        return 1 if bad or self.problems else 0

    def counts(self) -> dict[str, int]:
        """Verdicts per severity, every severity present."""
        return {s: sum(1 for v in self.verdicts if v.severity == s) for s in SEVERITIES}

    def to_json(self) -> dict[str, Any]:
        """``statelens summary --json``: the checkpoint, whether every check ran (``complete``; False
        with ``--latest``), exit code, counts, verdicts, problems, the runs, the fix batch (null with
        one run and none chosen) and per store the rates before and after it."""
        return {
            "checkpoint": self.location,
            "complete": self.complete,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "verdicts": [v.to_json() for v in self.verdicts],
            "problems": [p.to_json() for p in self.problems],
            "runs": [r.to_json() for r in self.runs],
            "fix_batch": self.fix_batch,
            "before_after": [s.to_json() for s in self.before_after],
        }


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"  # pragma: no cover


def _store_text(operator_id: int, store_name: str) -> str:
    return f"operator {operator_id} store {store_name}"


# -- the verdicts -----------------------------------------------------------------------------------
def _restart(ckpt: Any, doctor: DoctorResult, unloadable: Sequence[StatelensError] = ()) -> Verdict:
    errors = [f for f in doctor.findings if f.severity == "error"]
    last = ckpt.last_committed_batch_id
    if not errors and unloadable:  # a file the latest version loads (the first look reads only those)
        bad = unloadable[0]
        more = f" (+{len(unloadable) - 1} more)" if len(unloadable) > 1 else ""
        ctx = bad.context
        return Verdict(
            "restart",
            "error",
            f"Restart will fail: a file the latest state loads cannot be read: {bad}{more}",
            float(len(unloadable)),
            "overview",
            operator_id=ctx.get("operator_id"),
            store_name=ctx.get("store_name"),
            partition=ctx.get("partition_id"),
            files=(bad.path,) if bad.path else (),
        )
    if errors:
        first = errors[0]
        more = f" (+{len(errors) - 1} more errors)" if len(errors) > 1 else ""
        where = f" [{first.files[0]}]" if first.files else ""
        return Verdict(
            "restart",
            "error",
            f"Restart will fail or lose data: {first.message}{where}{more}",
            float(len(errors)),
            "overview",
            operator_id=first.operator_id,
            store_name=first.store_name,
            batch_id=first.batch_id,
            partition=first.partition,
            files=first.files,
        )
    if last is None:
        return Verdict(
            "restart",
            "info",
            "Restart: no batch committed yet, the query starts from scratch",
            0.0,
            "overview",
        )
    warnings = doctor.counts()["warning"]
    tail = f"; {counted(warnings, 'health warning')} (details below)" if warnings else ""
    repaired = [f for f in doctor.findings if f.check == "restart_snapshot_repair"]
    if repaired:
        first = repaired[0]
        more = f" (+{len(repaired) - 1} more partitions)" if len(repaired) > 1 else ""
        unknown = doctor.restart.repair is None
        return Verdict(
            "restart",
            "warning" if unknown else "ok",
            (
                "Restart depends on the Spark version: "
                if unknown
                else f"Restart should succeed on {doctor.restart.text()}, through auto snapshot repair: "
            )
            + f"{first.message}{more}",
            float(len(repaired)),
            "overview",
            operator_id=first.operator_id,
            store_name=first.store_name,
            batch_id=last,
            partition=first.partition,
            files=first.files,
        )
    return Verdict(
        "restart",
        "ok",
        f"Restart should succeed: it loads state version {last + 1} (after committed batch {last}){tail}",
        0.0,
        "overview",
        batch_id=last,
    )


def _commit(ckpt: Any) -> Verdict:
    uncommitted = ckpt.uncommitted_batches()
    batches = len(ckpt.batches)
    if uncommitted:
        b = uncommitted[-1]
        return Verdict(
            "commit",
            "warning",
            f"Not committed: batch {', '.join(map(str, uncommitted))} planned (offsets) but never committed; "
            f"a restart re-runs batch {b}",
            float(len(uncommitted)),
            "timeline",
            batch_id=b,
        )
    if not batches:
        return Verdict("commit", "info", "No batches: no offsets or commits files", 0.0, "timeline")
    return Verdict(
        "commit",
        "ok",
        f"Committed: all {counted(batches, 'batch', 'batches')} (last {ckpt.last_committed_batch_id})",
        0.0,
        "timeline",
        batch_id=ckpt.last_committed_batch_id,
    )


def _expired(
    expired: ExpiredResult,
    version_counts: Counter[tuple[int, str, int, str]] | None,
    store_versions: dict[tuple[int, str], tuple[int, ...]],
) -> list[Verdict]:
    out: list[Verdict] = []
    checked = [o for o in expired.operators if o.check != "skipped"]
    for o in checked:
        tally = expired.store_tally(o.operator_id, o.store_name)
        counts: Counter[str] = Counter()
        latest: Counter[int] = Counter()  # findings per version (the latest of each partition)
        for (_pid, v, c), n in tally.items():
            counts[c] += n
            if c != "overdue":  # overdue exists only at the latest version: not a trend
                latest[v] += n
        total = sum(counts.values())
        if not total:
            continue
        per_version: Counter[int] = Counter()
        for (op, store, v, c), n in (version_counts or Counter()).items():
            if (op, store) == (o.operator_id, o.store_name) and c != "overdue":
                per_version[v] += n
        per_version.update(latest)
        found = ", ".join(f"{n:,} {c.replace('_', ' ')}" for c in CATEGORIES if (n := counts[c]))
        text = f"{_store_text(o.operator_id, o.store_name)}: {found} key{'s' if total != 1 else ''} expired but still in the state"
        if version_counts is not None and per_version:
            # Every version of the store up to the latest counted (none found there is a 0).
            known = set(per_version) | set(store_versions.get((o.operator_id, o.store_name), ()))
            versions = sorted(v for v in known if v <= max(per_version))[-TREND_VERSIONS:]
            series = [per_version.get(v, 0) for v in versions]
            if len(series) > 1:
                trend = (
                    "rising" if series[-1] > series[0] else "falling" if series[-1] < series[0] else "steady"
                )
                text += (
                    f"; {trend} over versions {versions[0]}–{versions[-1]}: {' → '.join(map(str, series))}"
                )
        out.append(
            Verdict(
                "expired",
                "warning",
                text,
                float(total),
                "expired",
                operator_id=o.operator_id,
                store_name=o.store_name,
            )
        )
    if not out:
        skipped = len(expired.operators) - len(checked)
        if checked:
            text = f"Expired keys: none still in the state ({counted(len(checked), 'store')} checked"
            text += f", {skipped} not checkable)" if skipped else ")"
            out.append(Verdict("expired", "ok", text, 0.0, "expired"))
        elif expired.operators:
            out.append(
                Verdict(
                    "expired",
                    "info",
                    f"Expired keys: not checkable here: {expired.operators[0].reason}",
                    0.0,
                    "expired",
                    operator_id=expired.operators[0].operator_id,
                    store_name=expired.operators[0].store_name,
                )
            )
    out.sort(key=lambda v: -(v.value or 0))
    return out


def _store_versions(ckpt: Any) -> dict[tuple[int, str], tuple[int, ...]]:
    """Each store's state versions, by ``(operator_id, store_name)``."""
    return {(op.operator_id, st.store_name): st.versions for op in ckpt.operators for st in op.stores}


def expired_verdicts(
    ckpt: Any, expired: ExpiredResult, version_counts: Counter[tuple[int, str, int, str]] | None
) -> list[Verdict]:
    """The ``expired`` verdicts :func:`summarize` gives for these results (the fleet's rows add them to
    :func:`iter_first_look`'s, so a leaking query ranks as a full summary ranks it).

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    expired : ExpiredResult
    version_counts : Counter, optional
        ``iter_expired(version_counts=...)`` of the same run: the trend over versions.

    Returns
    -------
    list of Verdict
        Most keys first.
    """
    return _expired(expired, version_counts, _store_versions(ckpt))


def _growth(store: StoreGrowth) -> list[Verdict]:
    if store.skipped or not store.versions:
        return []
    where = _store_text(store.operator_id, store.store_name)
    rows = store.total_rows()
    sbytes = store.total_state_bytes()
    now = rows[-1]
    size = f", {_bytes(sbytes[-1])} of keys + values" if store.state_bytes_known and sbytes[-1] else ""
    window = rows[-(GROWTH_VERSIONS + 1) :]
    first_v = store.versions[-len(window)]
    change = window[-1] - window[0]
    text = f"{where}: {counted(now, 'row')}{size}"
    severity = "info"
    if len(window) > 1:
        share = change / window[0] if window[0] else (float("inf") if change else 0.0)
        pct = "" if window[0] == 0 else f" ({share:+.0%})"
        text += (
            f"; {change:+,} rows{pct} since version {first_v}"
            if change
            else f"; unchanged since version {first_v}"
        )
        never_shrank = all(b >= a for a, b in zip(window, window[1:], strict=False))
        if change > 0 and never_shrank and share >= GROWTH_WARN_SHARE and len(window) > 2:
            severity = "warning"
            text += ", never shrinking"
    latest = store.latest_rows()
    skew: Verdict | None = None
    if len(latest) > 1:
        med = statistics.median(latest.values())
        pid, top = max(latest.items(), key=lambda kv: (kv[1], -kv[0]))
        ratio = top / med if med else float("inf")
        times = "∞" if ratio == float("inf") else f"{ratio:.1f}×"
        median = f"{med:,.0f}" if med == int(med) else f"{med:,.1f}"
        heaviest = f"heaviest partition {pid} holds {counted(top, 'row')}, {times} the median ({median})"
        if top >= SKEW_MIN_ROWS and ratio >= SKEW_WARN:
            skew = Verdict(
                "skew",
                "warning",
                f"{where}: skewed: {heaviest}",
                ratio if ratio != float("inf") else None,
                "growth",
                store.operator_id,
                store.store_name,
                partition=pid,
            )
        else:
            text += f"; {heaviest}"
    out = [Verdict("growth", severity, text, float(now), "growth", store.operator_id, store.store_name)]
    if skew is not None:
        out.append(skew)
    return out


def _growth_verdicts(growth: GrowthResult) -> list[Verdict]:
    out: list[Verdict] = []
    for store in growth.stores:
        if store.store_name.startswith("$") or store.store_name.endswith("keyToNumValues"):
            continue  # Spark's own bookkeeping (transformWithState), a join's index of its rows store
        out += _growth(store)
    return out


def _runs_verdict(runs: list[Run], fix_batch: int) -> Verdict:
    def one(r: Run) -> str:
        span = (
            f"batches {r.first_batch}–{r.last_batch}"
            if r.last_batch > r.first_batch
            else f"batch {r.first_batch}"
        )
        how = {"run id": f"run {r.run_id[:8]}" if r.run_id else "", "gap": "", "chosen": "chosen"}.get(
            r.evidence, ""
        )
        if r.evidence == "gap" and r.gap_ms is not None:
            how = f"after a {format_duration_ms(r.gap_ms)} gap, or from batch {r.first_batch - 1} if it re-ran it"
        elif r.evidence == "operator metadata":
            how = "operator metadata written"
        elif r.evidence == "first batch" and r.run_id:
            how = f"run {r.run_id[:8]}"
        return f"{span} ({how})" if how else span

    shown = [one(r) for r in runs]
    if len(shown) > RUNS_SHOWN:  # the first and the last ones
        half = RUNS_SHOWN // 2
        shown = [*shown[:half], f"… {len(shown) - 2 * half} more …", *shown[-half:]]
    text = f"{counted(len(runs), 'run')}: " + ", ".join(shown) + f"; before/after batch {fix_batch}"
    return Verdict("runs", "info", text, float(len(runs)), "timeline", batch_id=fix_batch)


def _fix_verdicts(stores: list[StoreBeforeAfter], fix_batch: int) -> list[Verdict]:
    out: list[Verdict] = []
    for s in stores:
        if s.store_name.startswith("$") or s.store_name.endswith("keyToNumValues"):
            continue  # Spark's own bookkeeping, a join's index of its rows store (as for growth)
        parts: list[str] = []
        severity = "info"
        view = "growth"
        if s.expired is not None:
            view = "expired"
            part = describe_change(s.expired, "expired keys")
            after = s.expired.after.per_batch
            if after is not None and after > 0:
                severity = "warning"
                part += ": still rising"
            elif s.expired.stopped:
                severity = "ok"
                part += ": stopped"
            parts.append(part)
        if s.rows is not None:
            parts.append(describe_change(s.rows, "rows"))
        if not parts:
            continue
        text = f"{_store_text(s.operator_id, s.store_name)}, before/after batch {fix_batch}: " + "; ".join(
            parts
        )
        rate = (
            s.expired.after.per_batch if s.expired is not None else s.rows.after.per_batch if s.rows else None
        )
        out.append(
            Verdict("fix", severity, text, rate, view, s.operator_id, s.store_name, batch_id=fix_batch)
        )
    return out


def _worst_first(verdicts: list[Verdict]) -> list[Verdict]:
    """Worst severity first, in topic order within one (a stable sort)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(verdicts, key=lambda v: order[v.severity])


def _watermark(timeline: Timeline) -> Verdict | None:
    rows = [r for r in timeline.rows if r.has_offsets]
    marks = [(r.batch_id, r.watermark_ms) for r in rows if r.watermark_ms]
    if not marks:
        return None
    last_move = marks[0][0]
    for (_, a), (b, c) in zip(marks, marks[1:], strict=False):
        if c != a:
            last_move = b
    current = marks[-1][1]
    since = [r.batch_id for r in rows if r.batch_id > last_move]
    when = format_epoch_ms(current)
    if len(since) >= STUCK_BATCHES:
        return Verdict(
            "watermark",
            "warning",
            f"Watermark stuck at {when} since batch {last_move}: {len(since)} batches ran without moving it "
            "(no newer event time arrived, or one source is idle)",
            float(len(since)),
            "timeline",
            batch_id=last_move,
        )
    return Verdict(
        "watermark",
        "ok",
        f"Watermark advancing: {when} at batch {marks[-1][0]}, last moved in batch {last_move}",
        float(len(since)),
        "timeline",
        batch_id=marks[-1][0],
    )


def _event_logs(timeline: Timeline) -> list[Verdict]:
    if timeline.event_logs is None:
        return [
            Verdict(
                "event_logs",
                "info",
                "Batch durations and rows dropped by the watermark: no event logs loaded (--event-log)",
                None,
                "timeline",
            )
        ]
    reported = [(r.batch_id, r.progress.to_json()) for r in timeline.rows if r.progress is not None]
    if not reported:
        return [
            Verdict(
                "event_logs",
                "warning",
                f"The event logs hold no progress of this query ({timeline.query_id or 'no query id'})",
                0.0,
                "timeline",
            )
        ]
    out: list[Verdict] = []
    durations = [
        (b, d["duration_ms"]["triggerExecution"])
        for b, d in reported
        if d["duration_ms"].get("triggerExecution") is not None
    ]
    if durations:
        med = statistics.median(ms for _, ms in durations)
        slowest = sorted(durations, key=lambda bd: (-bd[1], bd[0]))[:SLOWEST_SHOWN]
        worst = slowest[0][1]
        slow = med > 0 and worst >= SLOW_FACTOR * med
        out.append(
            Verdict(
                "slow_batches",
                "warning" if slow else "ok",
                "Slowest batches: "
                + ", ".join(f"{b} ({format_duration_ms(ms, 'compact')})" for b, ms in slowest)
                + f"; median {format_duration_ms(med, 'compact')}",
                float(worst),
                "timeline",
                batch_id=slowest[0][0],
            )
        )
    dropped = [
        (b, sum(op["num_rows_dropped_by_watermark"] or 0 for op in d["state_operators"])) for b, d in reported
    ]
    total = sum(n for _, n in dropped)
    if total:
        hit = [bn for bn in dropped if bn[1]]
        b, n = max(hit, key=lambda bn: (bn[1], -bn[0]))
        out.append(
            Verdict(
                "dropped_rows",
                "warning",
                f"{counted(total, 'row')} dropped by the watermark (late data) in {counted(len(hit), 'batch', 'batches')}; "
                f"most in batch {b} ({n:,})",
                float(total),
                "timeline",
                batch_id=b,
            )
        )
    else:
        out.append(
            Verdict(
                "dropped_rows",
                "ok",
                f"No rows dropped by the watermark in the {counted(len(reported), 'batch', 'batches')} reported",
                0.0,
                "timeline",
            )
        )
    return out


def _unreadable(problems: Sequence[StatelensError], doctor: DoctorResult, decoded: bool) -> Verdict:
    files: dict[str, None] = {}
    for p in problems:
        files.setdefault(p.path or str(p), None)
    for f in doctor.findings:
        if f.check in UNREADABLE_CHECKS:
            for path in f.files[:1]:
                files.setdefault(path, None)
    if files:
        first = next(iter(files))
        return Verdict(
            "unreadable",
            "error",
            f"Unreadable: {counted(len(files), 'file')} could not be read or decoded (first: {first}); "
            "everything else is shown",
            float(len(files)),
            "overview",
            files=tuple(files),
        )
    text = "Every file read" + (
        " and every state file decoded" if decoded else " (state files not decoded: --quick)"
    )
    return Verdict("unreadable", "ok", text, 0.0, "overview")


def summarize(
    ckpt: Any,
    timeline: Timeline,
    doctor: DoctorResult,
    expired: ExpiredResult,
    growth: GrowthResult,
    *,
    version_counts: Counter[tuple[int, str, int, str]] | None = None,
    decoded: bool = True,
    fix_batch: int | None = None,
) -> Summary:
    """The verdicts from results already computed.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    timeline, doctor, expired, growth
        The analyses' results (``timeline`` with event logs for the duration verdicts).
    version_counts : Counter, optional
        ``iter_expired(version_counts=...)`` of the same run: the expired-keys trend over versions.
    decoded : bool
        Doctor read every state file (else the ``unreadable`` verdict says they were not decoded).
    fix_batch : int, optional
        The batch the fix went in with (default: the last run's first batch, when there are two runs).

    Returns
    -------
    Summary
        Verdicts worst first (in topic order within a severity); problems without duplicates.

    Raises
    ------
    UsageError
        ``fix_batch`` is not a batch of the checkpoint.
    """
    problems: dict[str, StatelensError] = {}
    for p in [*ckpt.report.problems, *timeline.problems, *growth.problems, *expired.problems]:
        problems.setdefault(str(p), p)
    verdicts = [_restart(ckpt, doctor), _commit(ckpt)]
    verdicts += expired_verdicts(ckpt, expired, version_counts)
    verdicts += _growth_verdicts(growth)
    wm = _watermark(timeline)
    if wm is not None:
        verdicts.append(wm)
    verdicts += _event_logs(timeline)
    verdicts.append(_unreadable(list(problems.values()), doctor, decoded))
    runs = find_runs(ckpt, timeline, fix_batch=fix_batch)
    fix = fix_batch_of(runs, fix_batch)
    around: list[StoreBeforeAfter] = []
    if fix is not None:
        around = before_after(
            fix, growth, expired, version_counts, _store_versions(ckpt), fix_margin(runs, fix)
        )
        verdicts.append(_runs_verdict(runs, fix))
        verdicts += _fix_verdicts(around, fix)
    verdicts = _worst_first(verdicts)
    return Summary(
        ckpt.location,
        verdicts,
        list(problems.values()),
        doctor,
        expired,
        version_counts,
        growth,
        runs=runs,
        fix_batch=fix,
        before_after=around,
    )


def early_verdicts(ckpt: Any) -> list[Verdict]:
    """The verdicts that need no state file read: whether the last batch committed, and how the
    watermark moved (from the offsets and commits read at open). Shown while the others are checked,
    which on remote storage takes as long as reading every state file.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint

    Returns
    -------
    list of Verdict
        Worst first.
    """
    timeline = run_to_end(iter_timeline(ckpt))
    verdicts = [_commit(ckpt)]
    wm = _watermark(timeline)
    if wm is not None:
        verdicts.append(wm)
    verdicts = _worst_first(verdicts)
    return verdicts


def iter_summary(
    ckpt: Any,
    *,
    decode_files: bool = True,
    event_logs: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
    backends: Any = None,
    max_examples: int = 0,
    top_keys: int | None = None,
    restart: RestartConf | None = None,
    fix_batch: int | None = None,
) -> Generator[Progress, None, Summary]:
    """Run the timeline, health checks, expired keys and growth, then :func:`summarize`.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    decode_files : bool
        Let the health checks read every state file (finds damage the logs do not show).
    event_logs : list of str, optional
        Event logs, driver logs or progress JSON lines: slowest batches, rows dropped by the watermark.
    storage_options : dict, optional
        fsspec options for the event log URLs.
    cancelled : callable, optional
        Polled by the long steps.
    backends : readers.backends.BackendChooser, optional
        Where growth and expired keys read state rows (default native).
    max_examples, top_keys : int, optional
        Keep this many expired keys per store and category, weigh this many heaviest keys per store
        (the verdicts need neither; the app shows the expired and growth results in their views too).
    restart : readers.restart.RestartConf, optional
        The Spark that will restart the query (see :func:`app.analysis.doctor.iter_doctor`).
    fix_batch : int, optional
        The batch the fix went in with (see :func:`summarize`).

    Yields
    ------
    Progress

    Returns
    -------
    Summary
    """
    steps = 4

    def sub(step: int, gen: Generator[Progress, None, Any]) -> Generator[Progress, None, Any]:
        return as_step(step, steps, gen)

    timeline = yield from sub(0, iter_timeline(ckpt, event_logs, storage_options, cancelled))
    doctor = yield from sub(
        1, iter_doctor(ckpt, decode_files=decode_files, cancelled=cancelled, restart=restart)
    )
    earlier: Counter[tuple[int, str, int, str]] = Counter()
    expired = yield from sub(
        2,
        iter_expired(
            ckpt, cancelled=cancelled, version_counts=earlier, max_examples=max_examples, backends=backends
        ),
    )
    growth = yield from sub(3, iter_growth(ckpt, cancelled=cancelled, backends=backends, top_keys=top_keys))
    yield Progress(steps, steps, "verdicts")
    return summarize(
        ckpt,
        timeline,
        doctor,
        expired,
        growth,
        version_counts=earlier,
        decoded=decode_files,
        fix_batch=fix_batch,
    )


def iter_first_look(
    ckpt: Any,
    *,
    cancelled: Callable[[], bool] | None = None,
    backends: Any = None,
    restart: RestartConf | None = None,
) -> Generator[Progress, None, Summary]:
    """The verdicts that need only the files of each store's latest version: shown while
    :func:`iter_summary` reads every state file (on S3 a few times fewer requests: the newest snapshot
    and the deltas after it, not the history).

    ``restart`` runs doctor's checks of the listing and the logs and reads every file a restart loads
    (one that cannot be read is an error naming it); ``growth`` and ``skew`` give rows and bytes now and
    the heaviest partition (:func:`app.analysis.growth.iter_latest_growth`, the numbers
    :func:`iter_growth` counts at those versions); ``commit`` and ``watermark`` as :func:`early_verdicts`;
    ``unreadable`` only when a file could not be read. Left for :func:`iter_summary`: expired keys, the
    growth over versions, the files of older versions, the event logs.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
    cancelled : callable, optional
        Polled between partitions.
    backends : readers.backends.BackendChooser, optional
        Where state rows are read (default native; stores read by Spark wait for the full check).
    restart : readers.restart.RestartConf, optional
        The Spark that will restart the query (see :func:`app.analysis.doctor.iter_doctor`).

    Yields
    ------
    Progress

    Returns
    -------
    Summary
        ``complete`` False.
    """
    steps = 3
    timeline = yield from as_step(0, steps, iter_timeline(ckpt, cancelled=cancelled))
    growth = yield from as_step(1, steps, iter_latest_growth(ckpt, cancelled=cancelled, backends=backends))
    # the files the latest versions load that could not be read, judged as the full check judges them
    doctor = yield from as_step(
        2,
        steps,
        iter_doctor(
            ckpt, decode_files=False, cancelled=cancelled, restart=restart, known_damage=growth.problems
        ),
    )
    yield Progress(steps, steps, "first verdicts")
    problems: dict[str, StatelensError] = {}
    for p in [*ckpt.report.problems, *timeline.problems, *growth.problems]:
        problems.setdefault(str(p), p)
    unjudged = [p for p in growth.problems if str(p.path) not in doctor.judged]
    verdicts = [_restart(ckpt, doctor, unjudged), _commit(ckpt)]
    verdicts += _growth_verdicts(growth)
    wm = _watermark(timeline)
    if wm is not None:
        verdicts.append(wm)
    if problems:
        verdicts.append(_unreadable(list(problems.values()), doctor, decoded=False))
    verdicts = _worst_first(verdicts)
    return Summary(ckpt.location, verdicts, list(problems.values()), doctor, growth=growth, complete=False)

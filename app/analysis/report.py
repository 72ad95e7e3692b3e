"""The post-mortem report: one self-contained HTML file to attach to an incident ticket.

Sections: the verdicts (:mod:`app.analysis.summary`, each linking to the section that proves it), overview,
batch timeline, state growth and skew (with each store's heaviest keys), expired keys (zombies and their top
keys), health checks. Plots are inline SVG drawn by :mod:`app.analysis.svg`: no script, no stylesheet, font or
image from anywhere else, no network. Keys and values come from the checkpoint and are untrusted:
every piece of text goes through ``html.escape``.
"""

from __future__ import annotations

import datetime as dt
import html
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis import svg
from statelens.app.analysis._common import as_step, key_text
from statelens.app.analysis.doctor import DoctorResult, iter_doctor
from statelens.app.analysis.expired import CATEGORIES, DEFAULT_STALE_AFTER, ExpiredResult, iter_expired
from statelens.app.analysis.finding_text import batch_text
from statelens.app.analysis.growth import GrowthResult, iter_growth
from statelens.app.analysis.heavy import StoreTopKeys, iter_top_keys
from statelens.app.analysis.summary import Summary, summarize
from statelens.app.analysis.timeline import DURATION_PARTS, Timeline, iter_timeline
from statelens.readers.errors import StatelensError
from statelens.readers.model import Progress
from statelens.readers.restart import RestartConf
from statelens.readers.textfmt import format_duration_ms as _dur

#: Rows shown at most in the timeline and key tables (the JSON commands give everything).
MAX_TABLE_ROWS = 500
TOP_KEYS = 25

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;color:#222;
line-height:1.4;padding:0 16px}
h1{font-size:1.6em;margin-bottom:0}h2{border-bottom:2px solid #0072B2;padding-bottom:4px;margin-top:2em}
h3{margin-top:1.5em}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f4f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.key{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.error{color:#b00020;font-weight:600}.warning{color:#a15c00;font-weight:600}.info{color:#555}
.muted{color:#666}.chart{margin:12px 0}nav a{margin-right:12px}
.summary li{margin:2px 0}
.verdicts{list-style:none;padding:0}.verdicts li{margin:4px 0}
.badge{display:inline-block;min-width:5.5em;text-align:center;color:#fff;font-weight:600;border-radius:3px;
padding:1px 4px;margin-right:8px;font-size:12px}
.badge.error{background:#dc2626;color:#fff}.badge.warning{background:#d97706;color:#fff}
.badge.info{background:#64748b;color:#fff}.badge.ok{background:#16a34a;color:#fff}
"""

#: Verdict view -> the report section that shows it.
_SECTION_OF_VIEW = {"timeline": "timeline", "growth": "growth", "expired": "zombies", "overview": "doctor"}
_BADGES = {"error": "ERROR", "warning": "WARNING", "info": "NOTE", "ok": "OK"}


def _verdicts(summary: Summary) -> str:
    """The verdicts, worst first, each linking to the section that proves it."""
    items = []
    for v in summary.verdicts:
        section = (
            "problems"
            if v.check == "unreadable" and summary.problems  # the report lists them in that section
            else _SECTION_OF_VIEW.get(v.view, "overview")
        )
        items.append(
            f'<li><span class="badge {_e(v.severity)}">{_e(_BADGES.get(v.severity, v.severity))}</span>'
            f'{_e(v.text)} <a href="#{section}">→ {_e(section if section != "zombies" else "expired keys")}</a></li>'
        )
    c = summary.counts()
    return (
        '<section id="verdicts"><h2>Verdicts</h2>'
        f"<p class='muted'>{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s), {c['ok']} fine; "
        "statelens summary prints the same lines.</p>"
        f'<ul class="verdicts">{"".join(items)}</ul></section>'
    )


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _utc(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "" if ms is None else str(ms)
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    """An HTML table; every cell is escaped."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for r in rows[:MAX_TABLE_ROWS]:
        out.append("<tr>")
        for i, c in enumerate(r):
            cls = ' class="num"' if i in numeric else ""
            out.append(f"<td{cls}>{_e(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if len(rows) > MAX_TABLE_ROWS:
        out.append(
            f'<p class="muted">{len(rows) - MAX_TABLE_ROWS} more rows not shown (use the --json commands).</p>'
        )
    return "".join(out)


def _chart(markup: str) -> str:
    return f'<div class="chart">{markup}</div>'


# -- sections ------------------------------------------------------------------------------------------
def _overview(
    ckpt: Any, tl: Timeline, growth: GrowthResult, expired: ExpiredResult, doctor: DoctorResult
) -> str:
    uncommitted = ckpt.uncommitted_batches()
    counts = expired.counts()
    dc = doctor.counts()
    total_rows = sum(sum(s.latest_rows().values()) for s in growth.stores)
    fp = growth.footprint
    med = tl.median_interval_ms()
    items = [
        f"Checkpoint <code>{_e(ckpt.location)}</code>",
        f"Query id <code>{_e(ckpt.query_id or '(no metadata file)')}</code>",
        f"{len(ckpt.batches)} batches"
        + (f" ({ckpt.batches[0].batch_id}..{ckpt.last_batch_id})" if ckpt.batches else "")
        + f", last committed {_e(ckpt.last_committed_batch_id)}",
        (
            "<span class='warning'>Uncommitted: batch "
            + _e(", ".join(map(str, uncommitted)))
            + " (a restart re-runs the last one)</span>"
        )
        if uncommitted
        else "All planned batches committed",
        f"First batch {_e(_utc(tl.rows[0].timestamp_ms))}, last {_e(_utc(tl.rows[-1].timestamp_ms))}"
        + (f", median interval {_e(_dur(med))}" if med is not None else "")
        if tl.rows
        else "No batches",
        f"Health: <span class='error'>{dc['error']} error(s)</span>, "
        f"<span class='warning'>{dc['warning']} warning(s)</span>, {dc['info']} note(s)",
        "Expired keys at the latest version: " + ", ".join(f"{n} {_e(c)}" for c, n in counts.items()),
        f"State: {total_rows:,} rows at the latest versions; checkpoint {fp.total_files:,} files, "
        f"{_e(svg.fmt_bytes(fp.total_bytes))}",
    ]
    ops = []
    for op in ckpt.operators:
        for st in op.stores:
            ops.append(
                [
                    op.operator_id,
                    op.kind.value,
                    op.operator_name or "",
                    st.store_name,
                    st.provider,
                    st.codec,
                    len(st.partitions),
                    f"{st.versions[0]}..{st.versions[-1]}" if st.versions else "-",
                ]
            )
    keys = (
        "spark.sql.shuffle.partitions",
        "spark.sql.streaming.stateStore.providerClass",
        "spark.sql.streaming.stateStore.compression.codec",
    )
    conf_rows = [[k, ckpt.conf.get(k)] for k in keys if k in ckpt.conf]
    return (
        '<section id="overview"><h2>Overview</h2><ul class="summary">'
        + "".join(f"<li>{i}</li>" for i in items)
        + "</ul><h3>Stateful operators</h3>"
        + (
            _table(
                ["op", "kind", "operator name", "store", "provider", "codec", "partitions", "versions"],
                ops,
                (0, 6),
            )
            if ops
            else "<p>No stateful operators (no state/ folder).</p>"
        )
        + _table(["conf", "value"], conf_rows)
        + "</section>"
    )


def _timeline(tl: Timeline) -> str:
    rows = tl.rows
    parts = ['<section id="timeline"><h2>Batch timeline</h2>']
    if not rows:
        return parts[0] + "<p>No batches.</p></section>"
    ids = [r.batch_id for r in rows]
    iv = [(r.batch_id, r.interval_ms / 1000) for r in rows if r.interval_ms is not None]
    if iv:
        parts.append(
            _chart(
                svg.bar_chart(
                    [str(b) for b, _ in iv],
                    [("interval", [v for _, v in iv])],
                    title="Time since the previous batch started",
                    x_label="batch id",
                    y_label="interval (s)",
                    y_format=svg.fmt_seconds,
                )
            )
        )
    wms = [r.watermark_ms if r.watermark_ms else None for r in rows]
    if any(w is not None for w in wms):
        parts.append(
            _chart(
                svg.line_chart(
                    [("watermark", ids, wms)],
                    title="Event-time watermark used by each batch",
                    x_label="batch id",
                    y_label=f"watermark (UTC, {svg.epoch_range_label(wms)})",
                    y_format=svg.fmt_epoch_ms,
                    y_zero=False,
                )
            )
        )
    else:
        parts.append('<p class="muted">No batch had an event-time watermark.</p>')
    if tl.event_logs is not None:
        parts.append(_reported(tl))
    n_sources = max((len(r.sources) for r in rows), default=0)
    series = []
    unit = set()
    for i in range(n_sources):
        vals = []
        for r in rows:
            s = next((x for x in r.sources if x.index == i), None)
            v = None if s is None else (s.files if s.files is not None else s.records)
            if s is not None:
                unit.add("files" if s.kind == "file" else "records" if s.kind == "kafka" else "offset delta")
            vals.append(float(v) if v is not None else 0.0)
        kind = next((x.kind for r in rows for x in r.sources if x.index == i), "?")
        series.append((f"source {i} ({kind})", vals))
    if series:
        parts.append(
            _chart(
                svg.bar_chart(
                    [str(b) for b in ids],
                    series,
                    title="Input per batch and source",
                    x_label="batch id",
                    y_label=" / ".join(sorted(unit)) + " per batch",
                    integer_y=True,
                )
            )
        )
    table = []
    for r in rows:
        src = "; ".join(
            f"{s.index}:{s.kind} "
            + (
                f"{s.files} files"
                if s.files is not None
                else f"{s.records} records"
                if s.records is not None
                else "?"
            )
            for s in r.sources
        )
        table.append(
            [
                r.batch_id,
                _utc(r.timestamp_ms),
                _dur(r.interval_ms),
                _utc(r.watermark_ms),
                _dur(r.watermark_move_ms),
                "yes" if r.committed else "NO",
                src,
                "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in r.conf_changes.items()),
            ]
        )
    parts.append(
        _table(
            [
                "batch",
                "start (UTC)",
                "interval",
                "watermark",
                "watermark moved",
                "committed",
                "sources",
                "conf changes",
            ],
            table,
            (0,),
        )
    )
    parts.append("</section>")
    return "".join(parts)


def _reported(tl: Timeline) -> str:
    """What the query reported per batch (event logs): duration parts, rates, rows dropped, a table."""

    covered = [(r.batch_id, r.progress.to_json()) for r in tl.rows if r.progress is not None]
    cover = tl.progress_coverage()
    logs = tl.event_logs
    runs = [r for r in logs.runs.values() if r.query_id == tl.query_id]
    out = [
        f"<h3>What the query reported (event logs)</h3><p>{len(covered):,} of {len(tl.rows):,} batches covered by "
        f"{len(logs.files)} file(s), {len(runs)} run(s) of this query"
        + (
            f"; batches {_e(cover['batches_not_in_checkpoint'])} are in the logs but not in the checkpoint"
            if cover["batches_not_in_checkpoint"]
            else ""
        )
        + ".</p>"
    ]
    if not covered:
        return "".join(out)
    labels = [str(b) for b, _ in covered]
    series = [
        (name, [d["duration_ms"].get(name, 0) / 1000 for _, d in covered])
        for name in DURATION_PARTS
        if any(d["duration_ms"].get(name) for _, d in covered)
    ]
    out.append(
        _chart(
            svg.bar_chart(
                labels,
                series,
                title="Batch duration by part (as the query reported it)",
                x_label="batch id",
                y_label="duration (s)",
                y_format=svg.fmt_seconds,
            )
        )
    )
    rates = [
        ("input rows/s", [d["input_rows_per_second"] or 0.0 for _, d in covered]),
        ("processed rows/s", [d["processed_rows_per_second"] or 0.0 for _, d in covered]),
    ]
    out.append(
        _chart(
            svg.bar_chart(
                labels,
                rates,
                title="Input and processed rows per second",
                x_label="batch id",
                y_label="rows per second",
            )
        )
    )
    table = []
    for b, d in covered:
        ops = d["state_operators"]
        table.append(
            [
                b,
                d["run_id"][:8],
                _dur(d["duration_ms"].get("triggerExecution")),
                d["num_input_rows"],
                f"{d['processed_rows_per_second']:.1f}" if d["processed_rows_per_second"] is not None else "",
                sum(op["num_rows_total"] or 0 for op in ops),
                sum(op["num_rows_updated"] or 0 for op in ops),
                sum(op["num_rows_removed"] or 0 for op in ops),
                sum(op["num_rows_dropped_by_watermark"] or 0 for op in ops),
                sum(op["memory_used_bytes"] or 0 for op in ops),
                d["sink_num_output_rows"],
            ]
        )
    out.append(
        _table(
            [
                "batch",
                "run",
                "duration",
                "input rows",
                "processed rows/s",
                "state rows",
                "updated",
                "removed",
                "dropped by watermark",
                "state memory (bytes)",
                "sink rows",
            ],
            table[-MAX_TABLE_ROWS:],
            (0, 3, 4, 5, 6, 7, 8, 9, 10),
        )
    )
    return "".join(out)


def _heavy(store: StoreTopKeys | None) -> str:
    """The heaviest keys of one store, as a table (nothing when it was not weighed)."""
    if store is None or store.skipped or not store.overall:
        return ""
    counted = {"list": "list elements", "map": "map entries", "values": "values"}.get(store.grouping or "")
    head = (
        f"<h4>Heaviest keys at version {store.version} (of {store.keys:,} keys; encoded key + value bytes"
        + (f", all {counted} of a key together" if counted else "")
        + ")</h4>"
    )
    headers = ["partition", "bytes", *(["elements"] if counted else []), "key"]
    rows = [
        [h.partition_id, svg.fmt_bytes(h.bytes), *([f"{h.elements:,}"] if counted else []), h.key_text]
        for h in store.overall
    ]
    return head + _table(headers, rows, (0, 1, 2) if counted else (0, 1))


def _growth(growth: GrowthResult, target_rows: int | None, heavy: Sequence[StoreTopKeys] = ()) -> str:
    parts = ['<section id="growth"><h2>State growth and skew</h2>']
    summary = []
    weighed = {(s.operator_id, s.store_name): s for s in heavy}
    for g in growth.stores:
        title = f"operator {g.operator_id} ({g.kind}) store {g.store_name}"
        parts.append(f"<h3>{_e(title)}</h3>")
        if g.skipped:
            parts.append(f'<p class="muted">{_e(g.skipped)}</p>')
            continue
        if not g.versions:
            parts.append('<p class="muted">No readable versions.</p>')
            continue
        parts.append(
            _chart(
                svg.line_chart(
                    [("rows", g.versions, g.total_rows())],
                    title="Rows in the state (all partitions)",
                    x_label="state version (= batch id + 1)",
                    y_label="rows",
                    integer_y=True,
                )
            )
        )
        sizes = [("files written for the version", g.versions, g.total_file_bytes())]
        if g.state_bytes_known:
            sizes.insert(0, ("state (key + value bytes)", g.versions, g.total_state_bytes()))
        else:
            parts.append(
                f'<p class="muted">Read by {_e(g.backend)}: rows from its change feed; the key + value '
                "bytes held are not known.</p>"
            )
        parts.append(
            _chart(
                svg.line_chart(
                    sizes,
                    title="State size (all partitions)",
                    x_label="state version (= batch id + 1)",
                    y_label="size (bytes)",
                    y_format=svg.fmt_bytes,
                )
            )
        )
        latest = g.latest_rows()
        if latest:
            pids = sorted(latest)
            parts.append(
                _chart(
                    svg.bar_chart(
                        [str(p) for p in pids],
                        [("rows", [float(latest[p]) for p in pids])],
                        title="Rows per partition at the latest version",
                        x_label="partition id",
                        y_label="rows",
                        integer_y=True,
                    )
                )
            )
        parts.append(_heavy(weighed.get((g.operator_id, g.store_name))))
        rate = g.rows_per_batch()
        skew = g.skew()
        share = g.zombie_share()
        proj = g.projection(target_rows, growth.median_interval_ms) if target_rows else None
        summary.append(
            [
                g.operator_id,
                g.store_name,
                f"{sum(latest.values()):,}",
                "" if rate is None else f"{rate:.2f}",
                "" if skew is None else f"{skew:.2f}",
                ", ".join(f"p{p}: {r}" for p, r in g.top_partitions()),
                "" if share is None else f"{share:.1%}",
                ""
                if proj is None
                else (
                    "reached"
                    if proj["reached"]
                    else "never at this rate"
                    if proj["batches"] is None
                    else f"{proj['batches']:.0f} batches" + (f" (~{_dur(proj['ms'])})" if proj["ms"] else "")
                ),
            ]
        )
    if summary:
        parts.append("<h3>Summary</h3>")
        parts.append(
            _table(
                [
                    "op",
                    "store",
                    "rows now",
                    "rows per batch (last versions)",
                    "skew (max/median)",
                    "top partitions",
                    "zombie share",
                    f"reaches {target_rows:,} rows in" if target_rows else "projection",
                ],
                summary,
                (0, 2, 3, 4),
            )
        )
    fp = growth.footprint
    parts.append("<h3>Checkpoint footprint</h3>")
    parts.append(
        _table(
            ["area", "files", "bytes"],
            [[a, f, svg.fmt_bytes(b)] for a, (f, b) in sorted(fp.areas.items())]
            + [["total", fp.total_files, svg.fmt_bytes(fp.total_bytes)]],
            (1, 2),
        )
    )
    parts.append(
        f"<p>{fp.small_files:,} files under {svg.fmt_bytes(65536)}; {len(fp.temp_files)} leftover temp files; "
        f"{fp.old_state_files:,} state files ({_e(svg.fmt_bytes(fp.old_state_bytes))}) are older than the snapshot "
        "each partition's latest version is rebuilt from (kept for minBatchesToRetain, not needed to read the "
        "latest state).</p>"
    )
    parts.append("</section>")
    return "".join(parts)


def _expired(expired: ExpiredResult, top: int) -> str:
    parts = ['<section id="zombies"><h2>Expired keys: zombies, overdue, stale, eviction lag</h2>']
    op_rows = []
    for o in expired.operators:
        tk = o.timeout_kind
        op_rows.append(
            [
                o.operator_id,
                o.kind,
                o.store_name,
                o.check if o.check != "skipped" else f"skipped: {o.reason}",
                "" if tk is None else f"{tk.timeout_kind or 'unknown'} ({tk.source})",
                "" if tk is None else tk.evidence,
                ", ".join(f"{n} {c}" for c, n in sorted(o.counts.items())) or "none",
            ]
        )
    parts.append(
        _table(["op", "kind", "store", "check", "timeout kind", "evidence", "findings"], op_rows, (0,))
    )
    counts = expired.counts()
    if not expired.total():
        parts.append("<p>No expired-but-present keys at the latest version.</p></section>")
        return "".join(parts)
    cats = [c for c in CATEGORIES if counts.get(c)]
    parts.append(
        _chart(
            svg.bar_chart(
                cats,
                [("keys", [float(counts[c]) for c in cats])],
                title="Expired-but-present keys by category",
                x_label="category",
                y_label="keys",
                integer_y=True,
            )
        )
    )
    ages: Counter[int] = Counter()
    for (_, _, category, age), n in expired.ages.items():
        if category == "zombie" and age is not None:
            ages[min(age, 50)] += n
    if ages:
        xs = list(range(min(ages), max(ages) + 1))
        parts.append(
            _chart(
                svg.bar_chart(
                    [f"{a}" if a < 50 else "50+" for a in xs],
                    [("zombies", [float(ages[a]) for a in xs])],
                    title="Zombie age: batches run after the one that fired the timeout",
                    x_label="age (batches)",
                    y_label="keys",
                    integer_y=True,
                )
            )
        )
    # The examples hold the most overdue findings of every store and category: the top keys overall.
    findings = expired.examples
    ranked = sorted(findings, key=lambda f: (CATEGORIES.index(f.category), -(f.age_ms or 0)))[:top]
    parts.append(
        f"<h3>Top {len(ranked)} of {expired.total():,} keys (oldest first within each category)</h3>"
    )
    parts.append(
        _table(
            [
                "category",
                "op",
                "store",
                "partition",
                "version",
                "key",
                "timeout / event time (UTC)",
                "threshold",
                "timeout kind",
                "expired in batch",
                "age (batches)",
                "age",
                "note",
            ],
            [
                [
                    f.category,
                    f.operator_id,
                    f.store_name,
                    f.partition,
                    f.version,
                    key_text(f.key),
                    _utc(f.timeout_ms),
                    _utc(f.threshold_ms),
                    f.timeout_kind,
                    batch_text(f.category, f.batch_id),
                    f.age_batches,
                    _dur(f.age_ms),
                    f.note,
                ]
                for f in ranked
            ],
            (1, 3, 4, 9, 10),
        )
    )
    parts.append("</section>")
    return "".join(parts)


def _doctor(doctor: DoctorResult) -> str:
    parts = ['<section id="doctor"><h2>Health checks</h2>']
    parts.append("<p class='muted'>Checked: " + _e("; ".join(doctor.checked)) + "</p>")
    if not doctor.findings:
        parts.append("<p>No problems found.</p>")
    else:
        rows = []
        for f in doctor.findings:
            rows.append(
                f'<tr><td class="{_e(f.severity)}">{_e(f.severity)}</td><td>{_e(f.check)}</td>'
                f"<td>{_e(f.message)}</td><td><code>{'<br>'.join(_e(p) for p in f.files)}</code></td></tr>"
            )
        parts.append(
            "<table><thead><tr><th>severity</th><th>check</th><th>finding</th><th>files</th></tr></thead><tbody>"
            + "".join(rows[:MAX_TABLE_ROWS])
            + "</tbody></table>"
        )
    parts.append("</section>")
    return "".join(parts)


def render_html(
    ckpt: Any,
    timeline: Timeline,
    growth: GrowthResult,
    expired: ExpiredResult,
    doctor: DoctorResult,
    *,
    target_rows: int | None = None,
    top_keys: int = TOP_KEYS,
    generated_at: dt.datetime | None = None,
    heavy: Sequence[StoreTopKeys] = (),
    summary: Summary | None = None,
) -> str:
    """Assemble the report from the analyses' results; ``summary`` (the verdicts of the same results,
    :func:`app.analysis.summary.summarize`) opens it.

    Returns
    -------
    str
        A complete HTML document (UTF-8 text, no external references).
    """
    when = (generated_at or dt.datetime.now(tz=dt.timezone.utc)).strftime("%Y-%m-%d %H:%M:%SZ")
    problems = [*ckpt.report.problems, *timeline.problems, *growth.problems, *expired.problems]
    prob = ""
    if problems:
        seen: dict[str, None] = {}
        for p in problems:
            seen.setdefault(str(p), None)
        prob = (
            '<section id="problems"><h2>Files that could not be read</h2><ul>'
            + "".join(f"<li><code>{_e(t)}</code></li>" for t in seen)
            + "</ul></section>"
        )
    body = "".join(
        [
            _verdicts(summary) if summary is not None else "",
            _overview(ckpt, timeline, growth, expired, doctor),
            _timeline(timeline),
            _growth(growth, target_rows, heavy),
            _expired(expired, top_keys),
            _doctor(doctor),
            prob,
        ]
    )
    title = f"statelens post-mortem: {ckpt.location}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>Streaming checkpoint post-mortem</h1><p class="muted">{_e(ckpt.location)} · generated {_e(when)} '
        "by statelens</p>"
        + ('<nav><a href="#verdicts">Verdicts</a>' if summary is not None else "<nav>")
        + '<a href="#overview">Overview</a><a href="#timeline">Timeline</a><a href="#growth">Growth</a>'
        '<a href="#zombies">Expired keys</a><a href="#doctor">Health</a></nav>'
        f"{body}</body></html>\n"
    )


@dataclass
class ReportResult:
    """The report's HTML and the per-file problems the analyses met (also listed in the HTML)."""

    html: str
    problems: list[StatelensError] = field(default_factory=list)


def _iter_unweighed_top_keys(
    ckpt: Any, growth: GrowthResult, n: int, cancelled: Callable[[], bool] | None, backends: Any = None
) -> Generator[Progress, None, tuple[list[StoreTopKeys], list[StatelensError]]]:
    """Growth's heaviest keys, plus :func:`iter_top_keys` for each store growth did not weigh."""
    weighed = {(g.operator_id, g.store_name): g.top_keys for g in growth.stores if g.top_keys is not None}
    out: list[StoreTopKeys] = []
    problems: list[StatelensError] = []
    for op in ckpt.operators:
        for st in op.stores:
            key = (op.operator_id, st.store_name)
            if key in weighed:
                out.append(weighed[key])  # type: ignore[arg-type]
                continue
            stores, errs = yield from iter_top_keys(ckpt, n, cancelled=cancelled, only=key, backends=backends)
            out.extend(stores)
            problems.extend(errs)
    return out, problems


def iter_report(
    ckpt: Any,
    *,
    target_rows: int | None = None,
    stale_after: int | None = DEFAULT_STALE_AFTER,
    timeout_kind: str | None = None,
    decode_files: bool = True,
    top_keys: int = TOP_KEYS,
    cancelled: Callable[[], bool] | None = None,
    backends: Any = None,
    event_logs: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    restart: RestartConf | None = None,
) -> Generator[Progress, None, ReportResult]:
    """Run every analysis and return the report.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    target_rows : int, optional
        Project when each store reaches this many rows (default: ten times its current size).
    stale_after, timeout_kind
        As for :func:`app.analysis.expired.iter_expired`.
    decode_files : bool
        Let the health checks read every state file.
    top_keys : int
        Keys listed in the expired-keys table, and heaviest keys listed per store.
    cancelled : callable, optional
        Polled by the long steps.
    backends : readers.backends.BackendChooser, optional
        Where growth and expired keys read state rows (native, Spark or auto); default native.
    event_logs : list of str, optional
        Event logs, driver logs or progress dumps: the timeline section shows what the query reported.
    storage_options : dict, optional
        fsspec options for the event log URLs.
    restart : readers.restart.RestartConf, optional
        The Spark that will restart the query (see :func:`app.analysis.doctor.iter_doctor`).

    Yields
    ------
    Progress

    Returns
    -------
    ReportResult
        The HTML document and the problems met.
    """
    steps = 5

    def sub(step: int, gen: Generator[Progress, None, Any]) -> Generator[Progress, None, Any]:
        return as_step(step, steps, gen)

    timeline = yield from sub(0, iter_timeline(ckpt, event_logs, storage_options, cancelled))
    # Only the top keys are shown: keep (and decode) no more than that many per store and category.
    earlier: Counter[tuple[int, str, int, str]] = Counter()  # the verdicts' trend over versions
    expired = yield from sub(
        1,
        iter_expired(
            ckpt,
            stale_after=stale_after,
            timeout_kind=timeout_kind,
            cancelled=cancelled,
            max_examples=max(top_keys, 1),
            backends=backends,
            version_counts=earlier,
        ),
    )
    zombies: Counter[tuple[int, str]] = Counter()
    for (op_id, store, _, _, category), n in expired.tally.items():
        if category == "zombie":
            zombies[(op_id, store)] += n
    timeout_stores = {(o.operator_id, o.store_name) for o in expired.operators if o.check == "timeouts"}
    growth = yield from sub(
        2,
        iter_growth(
            ckpt,
            {k: zombies.get(k, 0) for k in timeout_stores},
            cancelled,
            backends=backends,
            top_keys=top_keys,
        ),
    )
    # Stores growth did not weigh on its walk (read by Spark, column families) are weighed on their own.
    heavy, heavy_problems = yield from sub(
        3, _iter_unweighed_top_keys(ckpt, growth, top_keys, cancelled, backends)
    )
    doctor = yield from sub(
        4, iter_doctor(ckpt, decode_files=decode_files, cancelled=cancelled, restart=restart)
    )
    if target_rows is None:
        current = max((sum(g.latest_rows().values()) for g in growth.stores), default=0)
        target_rows = max(10 * current, 1000)
    yield Progress(steps, steps, "writing the report")
    verdicts = summarize(
        ckpt, timeline, doctor, expired, growth, version_counts=earlier, decoded=decode_files
    )
    text = render_html(
        ckpt,
        timeline,
        growth,
        expired,
        doctor,
        target_rows=target_rows,
        top_keys=top_keys,
        heavy=heavy,
        summary=verdicts,
    )
    problems: dict[str, StatelensError] = {}
    for p in [*timeline.problems, *growth.problems, *expired.problems, *heavy_problems]:
        problems.setdefault(str(p), p)
    return ReportResult(text, list(problems.values()))

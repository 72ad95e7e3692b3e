"""The fleet report (``statelens fleet --html FILE``): one self-contained HTML page, one row per
checkpoint worst first, each linking to that checkpoint's own report (:mod:`app.analysis.report`) when
one was written beside it, else naming the command that writes it. Qt-free."""

from __future__ import annotations

import html
from collections.abc import Mapping

from statelens.app.analysis.fleet import FleetResult, FleetRow
from statelens.app.analysis.report import _BADGES, _CSS
from statelens.readers.textfmt import format_duration_ms, format_epoch_ms


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def _row(r: FleetRow, now_ms: int, link: str | None) -> str:
    age = r.age_ms(now_ms)
    when = (
        f"{format_epoch_ms(r.last_batch_ms)} ({format_duration_ms(age, 'compact')} ago)"
        if r.last_batch_ms and age is not None
        else ""
    )
    name = _e(r.path or r.location)
    where = f'<a href="{_e(link)}">{name}</a>' if link else name
    report = (
        f'<a href="{_e(link)}">report</a>'
        if link
        else f"<code>statelens report {_e(r.location)} -o REPORT.html</code>"
    )
    findings = (
        f"<span class='error'>cannot read: {_e((r.error or {}).get('message'))}</span>"
        if r.error is not None
        else "<br>".join(
            f'<span class="badge {_e(v.severity)}">{_e(_BADGES.get(v.severity, v.severity))}</span>{_e(v.text)}'
            for v in r.verdicts
            if v.severity in ("error", "warning")
        )
        or _e(r.headline())
    )
    changes = "".join(f"<br><span class='muted'>since: {_e(c)}</span>" for c in r.changes)
    cells = [
        f'<span class="badge {_e(r.severity)}">{_e(_BADGES.get(r.severity, r.severity))}</span>',
        where,
        f"<code>{_e(r.query_id or '')}</code>",
        _e(r.last_batch if r.last_batch is not None else ""),
        _e(when),
        _e(r.stores),
        _num(r.rows),
        _num(r.state_bytes),
        "" if r.rows_change is None else f"{r.rows_change:+,}",
        _num(r.zombies),
        _e(r.restart),
        _e(r.unreadable or ""),
        findings + changes,
        report,
    ]
    numeric = {3, 5, 6, 7, 8, 9, 11}
    return (
        "<tr>"
        + "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(cells))
        + "</tr>"
    )


def render_fleet_html(result: FleetResult, links: Mapping[str, str] | None = None) -> str:
    """The fleet report.

    Parameters
    ----------
    result : FleetResult
    links : mapping, optional
        Row path -> the URL (relative to the page) of that checkpoint's own report.

    Returns
    -------
    str
        A whole HTML document, every value escaped.
    """
    links = links or {}
    c = result.counts()
    headers = [
        "",
        "checkpoint",
        "query id",
        "last batch",
        "when (UTC)",
        "stores",
        "rows",
        "key + value bytes",
        "rows since",
        "zombies",
        "restart",
        "unreadable",
        "findings",
        "report",
    ]
    body = "".join(_row(r, result.scanned_ms, links.get(r.path)) for r in result.rows)
    gone = (
        "<p>No longer found since the previous run: "
        + ", ".join(f"<code>{_e(p)}</code>" for p in result.gone)
        + "</p>"
        if result.gone
        else ""
    )
    since = f" Changes since the run of {_e(format_epoch_ms(result.since_ms))}." if result.since_ms else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>statelens fleet: {_e(result.root)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Fleet: {_e(result.root)}</h1>"
        f"<p class='muted'>{len(result.rows)} checkpoint(s) read at {_e(format_epoch_ms(result.scanned_ms))} by "
        f"statelens: {c['error']} with errors, {c['warning']} with warnings, {c['info'] + c['ok']} fine. Worst first; "
        f"each row's findings are the verdicts <code>statelens summary --latest</code> prints for it.{since}</p>"
        f"{gone}<table><thead><tr>{''.join(f'<th>{_e(h)}</th>' for h in headers)}</tr></thead>"
        f"<tbody>{body}</tbody></table></body></html>\n"
    )

"""Small, dependency-free SVG charts for the HTML report: line and bar charts with labelled axes.

Every piece of text (titles, labels, legend entries, tick labels) is escaped with ``html.escape``;
nothing refers to anything outside the SVG (no fonts, images, scripts, not even the SVG namespace
URL: inline ``<svg>`` in HTML5 needs none), so the report stays one self-contained file.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence

#: Colour-blind-safe palette (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

WIDTH = 720
HEIGHT = 300
_MARGIN_LEFT = 84
_MARGIN_RIGHT = 20
_MARGIN_TOP = 48
_LEGEND_ROW = 18
_MARGIN_BOTTOM = 52
_FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"

Formatter = Callable[[float], str]


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_ticks(lo: float, hi: float, count: int = 6, min_step: float = 0.0) -> list[float]:
    """Round tick values covering ``[lo, hi]`` (1, 2, 5 × 10^k steps, at least ``min_step`` apart)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = max((hi - lo) / max(count - 1, 1), min_step)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    if ticks[-1] < hi:
        ticks.append(ticks[-1] + step)
    return ticks


def byte_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Like :func:`nice_ticks`, but round in the binary unit :func:`fmt_bytes` will print (KiB, MiB...)."""
    unit = 1.0
    while max(abs(lo), abs(hi)) / unit >= 1024 and unit < 1 << 40:
        unit *= 1024
    return [t * unit for t in nice_ticks(lo / unit, hi / unit, count)]


def fmt_number(v: float) -> str:
    """Compact number: 1.2k, 3.4M, 0.25."""
    a = abs(v)
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= limit:
            return f"{v / limit:.3g}{suffix}"
    if a == 0 or a >= 1:
        return f"{v:.4g}"
    return f"{v:.3g}"


def fmt_bytes(v: float) -> str:
    a = abs(v)
    for limit, suffix in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if a >= limit:
            return f"{v / limit:.3g} {suffix}"
    return f"{v:.0f} B"


def fmt_seconds(v: float) -> str:
    return f"{v:.3g} s"


def fmt_epoch_ms(v: float) -> str:
    """UTC time of day of an epoch-ms value (``hh:mm:ss``; put the date in the axis label)."""
    t = dt.datetime.fromtimestamp(v / 1000, tz=dt.timezone.utc)
    return t.strftime("%H:%M:%S")


def epoch_range_label(values: Sequence[float | None]) -> str:
    """``2024-01-01`` or ``2024-01-01..2024-01-03``: the UTC dates an epoch-ms axis spans."""
    vs = [v for v in values if v is not None]
    if not vs:
        return ""
    a, b = (
        dt.datetime.fromtimestamp(x / 1000, tz=dt.timezone.utc).date().isoformat() for x in (min(vs), max(vs))
    )
    return a if a == b else f"{a}..{b}"


def _axes(
    title: str,
    x_label: str,
    y_label: str,
    xticks: list[tuple[float, str]],
    yticks: list[tuple[float, str]],
    sx: Callable[[float], float],
    sy: Callable[[float], float],
) -> list[str]:
    pw = WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT
    ph = HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM
    out = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{_esc(title)}" style="{_FONT};font-size:12px;background:#fff">',
        f"<title>{_esc(title)}</title>",
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14" font-weight="600">{_esc(title)}</text>',
        f'<rect x="{_MARGIN_LEFT}" y="{_MARGIN_TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for v, label in yticks:
        y = sy(v)
        out.append(
            f'<line x1="{_MARGIN_LEFT}" x2="{_MARGIN_LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        out.append(f'<text x="{_MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_esc(label)}</text>')
    for v, label in xticks:
        x = sx(v)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_MARGIN_TOP + ph}" y2="{_MARGIN_TOP + ph + 5}" stroke="#666"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{_MARGIN_TOP + ph + 18}" text-anchor="middle">{_esc(label)}</text>')
    out.append(
        f'<text x="{_MARGIN_LEFT + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle" font-weight="600">{_esc(x_label)}</text>'
    )
    cy = _MARGIN_TOP + ph / 2
    out.append(
        f'<text x="16" y="{cy}" text-anchor="middle" font-weight="600" transform="rotate(-90 16 {cy})">{_esc(y_label)}</text>'
    )
    return out


def _legend(labels: Sequence[str]) -> list[str]:
    """One row of swatches between the title and the plot (never over the data)."""
    if len(labels) < 2:
        return []
    out = []
    x = float(_MARGIN_LEFT)
    y = 29
    for i, label in enumerate(labels):
        color = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x:.0f}" y="{y}" width="12" height="10" fill="{color}"/>')
        out.append(f'<text x="{x + 16:.0f}" y="{y + 9}">{_esc(label)}</text>')
        x += 28 + 6.5 * len(label)
    return out


def _scales(
    x_lo: float, x_hi: float, y_lo: float, y_hi: float
) -> tuple[Callable[[float], float], Callable[[float], float]]:
    pw = WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT
    ph = HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM
    xr = (x_hi - x_lo) or 1.0
    yr = (y_hi - y_lo) or 1.0

    def sx(v: float) -> float:
        return _MARGIN_LEFT + (v - x_lo) / xr * pw

    def sy(v: float) -> float:
        return _MARGIN_TOP + ph - (v - y_lo) / yr * ph

    return sx, sy


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_format: Formatter = fmt_number,
    y_format: Formatter = fmt_number,
    y_zero: bool = True,
    integer_x: bool = True,
    integer_y: bool = False,
) -> str:
    """An SVG line chart (markers on each point, gaps where a value is ``None``).

    Parameters
    ----------
    series : sequence of (label, xs, ys)
        One line each; a legend is drawn when there is more than one.
    title, x_label, y_label : str
        Title and axis labels; put units in the labels (``"rows"``, ``"state size (bytes)"``).
    x_format, y_format : callable
        Tick label formatters.
    y_zero : bool
        Start the y axis at zero.
    integer_x : bool
        Only integer x ticks (batch ids, versions).
    integer_y : bool
        Only integer y ticks (counts).

    Returns
    -------
    str
        ``<svg>`` markup.
    """
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys if y is not None]
    if not xs_all or not ys_all:
        return empty_chart(title, "no data")
    x_lo, x_hi = min(xs_all), max(xs_all)
    y_lo = min(0.0, min(ys_all)) if y_zero else min(ys_all)
    y_hi = max(ys_all)
    if y_format is fmt_bytes:
        yt = byte_ticks(y_lo, y_hi)
    else:
        yt = nice_ticks(y_lo, y_hi, min_step=1.0 if integer_y else 0.0)
    xt = nice_ticks(x_lo, x_hi, 8)
    if integer_x:
        xt = sorted({round(v) for v in xt if x_lo - 1e-9 <= v <= x_hi + 1e-9}) or [x_lo]
        if x_hi == x_lo:
            xt = [x_lo]
    else:
        xt = [v for v in xt if x_lo <= v <= x_hi] or [x_lo]
    pad = (x_hi - x_lo) * 0.02 or 0.5
    sx, sy = _scales(x_lo - pad, x_hi + pad, yt[0], yt[-1])
    out = _axes(
        title, x_label, y_label, [(v, x_format(v)) for v in xt], [(v, y_format(v)) for v in yt], sx, sy
    )
    for i, (label, xs, ys) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        segments: list[list[str]] = [[]]
        for x, y in zip(xs, ys, strict=True):
            if y is None:
                segments.append([])
                continue
            segments[-1].append(f"{sx(x):.1f},{sy(y):.1f}")
        for seg in segments:
            if len(seg) > 1:
                out.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(seg)}"/>'
                )
        if len(xs) <= 200:
            for x, y in zip(xs, ys, strict=True):
                if y is not None:
                    out.append(
                        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                        f"<title>{_esc(label)}: {_esc(x_format(x))} → {_esc(y_format(y))}</title></circle>"
                    )
    out.extend(_legend([label for label, _, _ in series]))
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_format: Formatter = fmt_number,
    max_labels: int = 30,
    integer_y: bool = False,
) -> str:
    """An SVG grouped bar chart.

    Parameters
    ----------
    labels : sequence of str
        One category per group (x axis).
    series : sequence of (name, values)
        One bar per category each; a legend is drawn when there is more than one.
    title, x_label, y_label : str
        Title and axis labels, with units.
    y_format : callable
        Tick label formatter.
    max_labels : int
        Show at most this many category labels (every n-th otherwise).
    integer_y : bool
        Only integer y ticks (counts).

    Returns
    -------
    str
        ``<svg>`` markup.
    """
    if not labels or not series:
        return empty_chart(title, "no data")
    values = [v for _, vs in series for v in vs]
    y_lo = min(0.0, min(values))
    yt = nice_ticks(y_lo, max(values) if max(values) > y_lo else y_lo + 1, min_step=1.0 if integer_y else 0.0)
    n = len(labels)
    sx, sy = _scales(0, n, yt[0], yt[-1])
    room = (WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT) // (7 * max(len(x) for x in labels) + 12)
    every = max(1, math.ceil(n / max(1, min(max_labels, room))))
    xt = [(i + 0.5, labels[i]) for i in range(0, n, every)]
    out = _axes(title, x_label, y_label, xt, [(v, y_format(v)) for v in yt], sx, sy)
    group = (sx(1) - sx(0)) * 0.8
    width = group / len(series)
    zero = sy(0 if yt[0] <= 0 <= yt[-1] else yt[0])
    for j, (name, vs) in enumerate(series):
        color = PALETTE[j % len(PALETTE)]
        for i, v in enumerate(vs):
            x = sx(i + 0.1) + j * width
            y = sy(v)
            top, h = (y, zero - y) if y <= zero else (zero, y - zero)
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{max(width - 1, 1):.1f}" height="{max(h, 0.5):.1f}" fill="{color}">'
                f"<title>{_esc(name)} {_esc(labels[i])}: {_esc(y_format(v))}</title></rect>"
            )
    out.extend(_legend([name for name, _ in series]))
    out.append("</svg>")
    return "\n".join(out)


def empty_chart(title: str, message: str) -> str:
    """A placeholder with a title and a message (no data to plot)."""
    return (
        f'<svg width="{WIDTH}" height="80" viewBox="0 0 {WIDTH} 80" role="img" '
        f'aria-label="{_esc(title)}" style="{_FONT};font-size:12px;background:#fff">'
        f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="14" font-weight="600">{_esc(title)}</text>'
        f'<text x="{WIDTH / 2}" y="52" text-anchor="middle" fill="#666">{_esc(message)}</text></svg>'
    )

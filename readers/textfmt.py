"""Text for people: ranges of numbers, durations and epoch times, the same in the command line, the
analyses, the report and the desktop app.

Qt-free and dependency-free so every layer may use it (``viewers`` may import it, as it imports
``readers.model``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

__all__ = ["format_duration_ms", "format_epoch_ms", "ranges"]


def ranges(values: Sequence[int], sep: str = ",", dash: str = "-") -> str:
    """``1-4,7,9-10`` for sorted ints (``sep=", ", dash="–"`` for prose: ``1–4, 7``)."""
    spans: list[list[int]] = []
    for v in values:
        if spans and spans[-1][1] == v - 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return sep.join(f"{a}" if a == b else f"{a}{dash}{b}" for a, b in spans)


def format_epoch_ms(ms: int | None, utc: bool = True) -> str:
    """Epoch milliseconds as ``2024-01-02 03:04:05.678Z`` (UTC) or ``2024-01-02 04:04:05.678`` (local).

    Empty for None; negative values (Spark's "no timeout" ``-1``) and values out of the calendar's range
    show as numbers: ``-1 (none)``, ``-5``, ``99999999999999999 ms``.
    """
    if ms is None:
        return ""
    if ms < 0:
        return f"{ms} (none)" if ms == -1 else str(ms)
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
        if utc:
            return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
        return when.astimezone().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def format_duration_ms(ms: float | None, style: str = "decimal") -> str:
    """A duration in milliseconds as text (empty for None), in one of three styles.

    ``decimal`` (reports, prose): ``850 ms``, ``12.5 s``, ``3.2 min``, ``4.0 h``, ``2.1 days``.
    ``compact`` (table cells): ``850ms``, ``3.2s``, ``1m25s``, ``1h02m``, ``2d04h``, signed.
    ``words`` (spans in the app): ``4.2 s``, ``3 min 2 s``, ``3 h 2 min``, ``2 d 4 h``, unsigned.
    """
    if ms is None:
        return ""
    if style == "compact":
        return _compact(int(ms))
    if style == "words":
        return _words(abs(ms) / 1000)
    if style != "decimal":
        raise ValueError(f"unknown duration style {style!r}")
    s = ms / 1000
    if abs(s) < 1:
        return f"{ms:.0f} ms"
    if abs(s) < 120:
        return f"{s:.1f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def _compact(ms: int) -> str:
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{sign}{s:.1f}s"
    m, si = divmod(int(s), 60)
    if m < 60:
        return f"{sign}{m}m{si:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{sign}{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{sign}{d}d{h:02d}h"


def _words(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {s} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"

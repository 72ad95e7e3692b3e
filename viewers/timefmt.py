"""How the checkpoint's own times (batch starts, watermarks, timeouts, thresholds) are shown: local or UTC.

Qt-free. One :class:`TimeZoneState` is owned by the window and handed to the views; views format
epoch times through it and re-render when it calls them back (``connect``/``disconnect``, like the
selection). Timestamps inside decoded state values are not formatted here: they stay ISO UTC.

Local time is whatever the process' time zone is (``TZ``, honoured after ``time.tzset()``); its UTC
offset is taken at the time being shown, so a span across a daylight-saving change labels each
time with its own offset and the axis with the offset at the middle of the span.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from statelens.readers.textfmt import format_epoch_ms

TimeZoneCallback = Callable[[bool], None]


def _local(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).astimezone()


def utc_offset_s(seconds: float | None = None) -> int:
    """Local time's offset east of UTC, in seconds, at ``seconds`` since the epoch (now when None)."""
    when = _local(seconds) if seconds is not None else dt.datetime.now().astimezone()
    offset = when.utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def offset_text(offset_s: int) -> str:
    """``UTC+01:00``, ``UTC-05:30``, ``UTC+00:00`` for offsets east of UTC in seconds."""
    sign = "+" if offset_s >= 0 else "-"
    hours, minutes = divmod(abs(offset_s) // 60, 60)
    return f"UTC{sign}{hours:02d}:{minutes:02d}"


def format_ms(ms: int | None, utc: bool = False) -> str:
    """Epoch milliseconds as ``2024-01-02 03:04:05.678Z`` (UTC) or ``2024-01-02 04:04:05.678`` (local);
    see ``readers.textfmt.format_epoch_ms``."""
    return format_epoch_ms(ms, utc)


def zone_label(utc: bool, seconds: float | None = None) -> str:
    """``UTC`` or ``local, UTC+01:00`` (the local offset at ``seconds`` since the epoch, now when None)."""
    return "UTC" if utc else f"local, {offset_text(utc_offset_s(seconds))}"


class TimeZoneState:
    """Whether times show in UTC or local time (the default); observers are called with ``utc``.

    Parameters
    ----------
    utc : bool
        Start in UTC.
    """

    def __init__(self, utc: bool = False) -> None:
        self._utc = bool(utc)
        self._callbacks: list[TimeZoneCallback] = []

    @property
    def utc(self) -> bool:
        return self._utc

    def set_utc(self, utc: bool) -> None:
        """Switch zones; observers are called only when it changes."""
        if bool(utc) == self._utc:
            return
        self._utc = bool(utc)
        for callback in list(self._callbacks):
            callback(self._utc)

    def connect(self, callback: TimeZoneCallback) -> None:
        if callback not in self._callbacks:
            self._callbacks.append(callback)

    def disconnect(self, callback: TimeZoneCallback) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def format_ms(self, ms: int | None) -> str:
        """Epoch milliseconds in the current zone (see :func:`format_ms`)."""
        return format_ms(ms, self._utc)

    def label(self, seconds: float | None = None) -> str:
        """``UTC`` or ``local, UTC+01:00`` for the current zone (offset at ``seconds``)."""
        return zone_label(self._utc, seconds)

    def axis_offset_s(self, seconds: float | None = None) -> int:
        """Offset east of UTC for a time axis around ``seconds`` (0 in UTC)."""
        return 0 if self._utc else utc_offset_s(seconds)

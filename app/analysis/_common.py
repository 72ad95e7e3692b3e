"""Helpers shared by the analyses: driving generators, batch clocks, key encoding (the raw version walk
is the scan's: :meth:`readers.scan.StateScan.iter_replay`; reading a field of stored bytes too:
:meth:`readers.scan.StateScan.field_reader`).

Batch/version arithmetic follows ``docs/format.md`` §1.2: state version ``v`` holds
the state after batch ``v-1``; batch ``b`` reads version ``b`` and writes version ``b+1``. Batch
timestamps and watermarks come from ``offsets/<b>`` (§2.2), the next batch's watermark from
``commits/<b>`` (§2.5).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from statelens.app.output import dumps_jsonl
from statelens.readers.model import Progress
from statelens.readers.values import JsonObject, json_converter

T = TypeVar("T")


def run_to_end(gen: Generator[Progress, None, T], progress: Callable[[Progress], None] | None = None) -> T:
    """Drive an analysis generator to its end and return its result.

    Parameters
    ----------
    gen : generator
        Yields :class:`Progress`, returns the result.
    progress : callable, optional
        Called with every progress record.

    Returns
    -------
    object
        What the generator returned.
    """
    while True:
        try:
            item = next(gen)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if progress is not None:
            progress(item)


def as_step(step: int, steps: int, gen: Generator[Progress, None, T]) -> Generator[Progress, None, T]:
    """Run analysis ``gen`` as step ``step`` of ``steps`` of a larger one (the report, the summary):
    its progress records become that step's (their text kept), its result is returned."""
    while True:
        try:
            p = next(gen)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        yield Progress(step, steps, p.what)


# -- keys ----------------------------------------------------------------------------------------------
def row_converter(schema: Any) -> Callable[[tuple[Any, ...] | None], Any]:
    """:func:`readers.values.row_to_json` compiled once for ``schema`` (use it in loops)."""

    return json_converter(schema)


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``1,980,092 rows``: a count with its noun, plural when it is not 1."""
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"


def key_fields(key: Any) -> dict[str, Any]:
    """An encoded key as a dict (the last of repeated names wins), for lookups."""
    if isinstance(key, dict):
        return key
    return {k: v for k, v in key} if isinstance(key, list) else {}


def key_text(key: Any) -> str:
    """One-line text of an encoded key, for tables (never rich text)."""

    if isinstance(key, JsonObject) and len(key) == 1:
        value = key[0][1]
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    return dumps_jsonl(key)


def finite(x: float | None) -> float | None:
    """``x`` unless it is NaN or infinite (JSON has no such numbers)."""

    return x if x is None or math.isfinite(x) else None


def write_json(obj: Any, out: Any) -> None:
    """Write a JSON document (lists one item per line) keeping repeated struct names in keys."""

    if isinstance(obj, list) and not isinstance(obj, JsonObject):
        if not obj:
            out.write("[]\n")
            return
        out.write("[\n" + ",\n".join(dumps_jsonl(x) for x in obj) + "\n]\n")
    else:
        out.write(dumps_jsonl(obj) + "\n")


class JsonArrayWriter:
    """Writes a JSON list one item at a time, in the layout of :func:`write_json` (one item per line).

    Parameters
    ----------
    out : text stream
        Where the list goes; nothing is written before the first item or :meth:`close`.
    """

    def __init__(self, out: Any):
        self.out = out
        self.items = 0

    def write(self, obj: Any) -> None:
        """Append one item."""

        self.out.write(("[\n" if self.items == 0 else ",\n") + dumps_jsonl(obj))
        self.items += 1

    def close(self) -> None:
        """End the list (``[]`` when nothing was written)."""
        self.out.write("[]\n" if self.items == 0 else "\n]\n")


# -- batch clock ---------------------------------------------------------------------------------------
class BatchClock:
    """Batch timestamps and watermarks of a checkpoint, by batch id.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The opened checkpoint.
    """

    def __init__(self, ckpt: Any):
        self.timestamp_ms: dict[int, int] = {}
        self.watermark_ms: dict[int, int] = {}
        self.next_watermark_ms: dict[int, int] = {}
        for b, entry in ckpt.offsets.items():
            if entry.timestamp_ms is not None:
                self.timestamp_ms[b] = entry.timestamp_ms
            self.watermark_ms[b] = entry.watermark_ms
        for b, entry in ckpt.commits.items():
            self.next_watermark_ms[b] = entry.next_watermark_ms
        self._ts_sorted = sorted(self.timestamp_ms.items())
        self._wm_sorted = sorted(self.watermark_ms.items())

    def threshold(self, batch_id: int, kind: str) -> int | None:
        """The timeout threshold batch ``batch_id`` used: its timestamp or its watermark (docs/format.md §7.3).

        Returns ``None`` when the batch's offsets file is missing, or for event time when the batch
        had no watermark yet (0 means none: no event-time timeout can fire).
        """
        if kind == "processing_time":
            return self.timestamp_ms.get(batch_id)
        if kind == "event_time":
            wm = self.watermark_ms.get(batch_id)
            return wm if wm else None
        return None

    def next_threshold(self, batch_id: int, kind: str) -> tuple[int | None, str]:
        """The threshold the batch *after* ``batch_id`` uses or would use, and where it came from."""
        nxt = batch_id + 1
        thr = self.threshold(nxt, kind)
        if thr is not None:
            return thr, f"offsets/{nxt}"
        if kind == "event_time":
            wm = self.next_watermark_ms.get(batch_id)
            if wm:
                return wm, f"commits/{batch_id} nextBatchWatermarkMs"
        return None, ""

    def first_batch_over(self, value_ms: int, kind: str, upto: int) -> int | None:
        """The first batch ``<= upto`` whose threshold is above ``value_ms`` (when that timeout fired)."""
        series = self._ts_sorted if kind == "processing_time" else self._wm_sorted
        for b, thr in series:
            if b > upto:
                break
            if thr and thr > value_ms:
                return b
        return None

    def series(self, kind: str) -> list[tuple[int, int]]:
        """``(batch, threshold)`` of every batch with one recorded, by batch id (timestamps for processing
        time, watermarks for event time): what :meth:`first_batch_over` searches."""
        return list(self._ts_sorted if kind == "processing_time" else self._wm_sorted)

    def batches_with_timestamp(self) -> list[int]:
        return [b for b, _ in self._ts_sorted]


def to_ms(value: int | None, unit: str) -> int | None:
    """Microseconds or milliseconds to milliseconds (floor)."""
    if value is None:
        return None
    return value // 1000 if unit == "us" else value

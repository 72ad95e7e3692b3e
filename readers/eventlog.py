"""Streaming query progress from what survives the driver: Spark event logs, driver logs, progress dumps.

Accepted sources (a local path or any fsspec URL, read-only; folders are listed):

* a Spark event log (``spark.eventLog.enabled``): JSON lines of ``SparkListener...`` events, among them
  ``org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent`` (``id``, ``runId``,
  ``timestamp``), ``...$QueryProgressEvent`` (``progress``: the ``StreamingQueryProgress`` JSON) and
  ``...$QueryTerminatedEvent`` (``id``, ``runId``, ``exception``); compressed as Spark writes it with
  ``spark.eventLog.compress`` (the codec from the file name suffix: ``.lz4``, ``.lzf``, ``.snappy``,
  ``.zstd``; the same stream framings as state files, docs/format.md §3.2);
* a rolling event log, Spark 4's default: an ``eventlog_v2_<app>`` folder of ``events_<n>_<app>[.codec]``
  files, read in ``n`` order (or a folder holding such folders and single logs);
* a driver log holding ``Streaming query made progress: {...}`` blocks (``MicroBatchExecution`` at INFO);
* a file of progress JSON objects, one per line (``query.lastProgress`` dumps).

Plain and zstd files are streamed line by line (bounded memory whatever their size); lz4, lzf and
snappy files are decompressed one file at a time (a rolling log's files are at most
``spark.eventLog.rolling.maxFileSize``, 128 MiB by default). A line that does not parse, or a file cut
short, is a located warning (file and line) and the rest is still read.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import zstandard

from statelens.readers._format.codecs import decompress
from statelens.readers.errors import CorruptFileError, MissingFileError, StatelensError, TruncatedFileError
from statelens.readers.model import Progress

__all__ = ["EventLogRead", "QueryProgress", "QueryRun", "iter_read_event_logs"]

_PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_STARTED_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent"
_TERMINATED_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent"
_DRIVER_MARK = "Streaming query made progress: "
_CODEC_SUFFIXES = {".lz4": "lz4", ".lzf": "lzf", ".snappy": "snappy", ".zstd": "zstd", ".zst": "zstd"}
_ROLLING_FILE = re.compile(r"^events_(\d+)_")
#: A driver-log progress block longer than this many lines is abandoned (a warning), never buffered on.
_MAX_BLOCK_LINES = 10_000
#: Compressed bytes handed to the zstd decompressor at once.
_ZSTD_SLICE = 4096


@dataclass(frozen=True)
class QueryProgress:
    """One batch's ``StreamingQueryProgress``, as the query reported it, and where it was read."""

    query_id: str
    run_id: str
    batch_id: int
    timestamp: str
    raw: dict[str, Any]
    source: str
    line: int

    def _total(self, name: str) -> Any:
        """A query-level figure: as reported, or (event logs leave the query-level copies out, verified on
        Spark 4.3 logs) the sum over the sources, which is how Spark computes it."""
        if name in self.raw:
            return self.raw[name]
        values = [s.get(name) for s in self.raw.get("sources") or [] if isinstance(s, dict)]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not numbers:
            return None
        return sum(numbers) if name == "numInputRows" else float(sum(numbers))

    def to_json(self) -> dict[str, Any]:
        """The ``progress`` object of ``statelens timeline --json --event-log``."""
        p = self.raw
        return {
            "run_id": self.run_id,
            "timestamp": self.timestamp,
            "duration_ms": dict(p.get("durationMs") or {}),
            "num_input_rows": self._total("numInputRows"),
            "input_rows_per_second": self._total("inputRowsPerSecond"),
            "processed_rows_per_second": self._total("processedRowsPerSecond"),
            "state_operators": [
                {
                    "operator_name": op.get("operatorName"),
                    "num_rows_total": op.get("numRowsTotal"),
                    "num_rows_updated": op.get("numRowsUpdated"),
                    "num_rows_removed": op.get("numRowsRemoved"),
                    "num_rows_dropped_by_watermark": op.get("numRowsDroppedByWatermark"),
                    "memory_used_bytes": op.get("memoryUsedBytes"),
                    "custom_metrics": dict(op.get("customMetrics") or {}),
                }
                for op in p.get("stateOperators") or []
            ],
            "sink_num_output_rows": (p.get("sink") or {}).get("numOutputRows"),
        }


@dataclass
class QueryRun:
    """One run (``runId``) of a query: a start and restart of the same checkpoint."""

    query_id: str
    run_id: str
    started: str | None = None
    terminated: bool = False
    exception: str | None = None
    batches: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "run_id": self.run_id,
            "started": self.started,
            "terminated": self.terminated,
            "exception": self.exception,
            "batches": list(self.batches),
        }


@dataclass
class EventLogRead:
    """Everything read from the given sources."""

    files: list[str] = field(default_factory=list)
    progress: list[QueryProgress] = field(default_factory=list)
    runs: dict[str, QueryRun] = field(default_factory=dict)
    warnings: list[StatelensError] = field(default_factory=list)

    def for_query(self, query_id: str | None) -> dict[int, QueryProgress]:
        """Batch id -> its progress in query ``query_id`` (the last reported, when a batch was re-run)."""
        out: dict[int, QueryProgress] = {}
        for p in self.progress:
            if query_id is None or p.query_id == query_id:
                old = out.get(p.batch_id)
                if old is None or p.timestamp >= old.timestamp:
                    out[p.batch_id] = p
        return out

    def other_queries(self, query_id: str | None) -> dict[str, int]:
        """Progress reports of other queries, counted per query id."""
        counts: dict[str, int] = {}
        for p in self.progress:
            if query_id is not None and p.query_id != query_id:
                counts[p.query_id] = counts.get(p.query_id, 0) + 1
        return counts

    def to_json(self, query_id: str | None = None) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "runs": [r.to_json() for r in self.runs.values() if query_id is None or r.query_id == query_id],
            "other_queries": self.other_queries(query_id),
            "warnings": [w.to_json() for w in self.warnings],
        }


def iter_read_event_logs(
    sources: list[str],
    storage_options: dict[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Generator[Progress, None, EventLogRead]:
    """Read progress from every source (see the module docstring), file by file.

    Yields
    ------
    Progress
        One per file, and every 50,000 lines within a file.

    Returns
    -------
    EventLogRead

    Raises
    ------
    MissingFileError
        A source that does not exist.
    """
    import fsspec  # deferred: fsspec (slow import)

    out = EventLogRead()
    files: list[tuple[Any, str]] = []
    for src in sources:
        fs, path = fsspec.core.url_to_fs(src, **(storage_options or {}))
        if not fs.exists(path):
            raise MissingFileError("event log not found", path=src)
        files.extend((fs, f) for f in _files_of(fs, path))
    for n, (fs, path) in enumerate(files):
        if cancelled is not None and cancelled():
            break
        yield Progress(n, len(files), f"reading {posixpath.basename(path)}")
        out.files.append(path)
        yield from _read_file(fs, path, out, cancelled)
    yield Progress(len(files), len(files), "event logs read")
    return out


def _files_of(fs: Any, path: str) -> list[str]:
    """The files of a source in reading order: a file, a rolling log folder, or a folder of logs."""
    if not fs.isdir(path):
        return [path]
    entries = sorted(fs.ls(path, detail=True), key=lambda e: e["name"])
    names = [e["name"] for e in entries if e.get("type") != "directory"]
    rolling = [n for n in names if _ROLLING_FILE.match(posixpath.basename(n))]
    if rolling:
        return sorted(rolling, key=lambda n: int(_ROLLING_FILE.match(posixpath.basename(n)).group(1)))  # type: ignore[union-attr]
    out: list[str] = []
    for e in entries:
        base = posixpath.basename(e["name"].rstrip("/"))
        if base.startswith("."):
            continue
        if e.get("type") == "directory":
            out.extend(_files_of(fs, e["name"]))
        elif not base.endswith((".crc", ".inprogress.crc")) and not base.startswith("appstatus"):
            out.append(e["name"])
    return out


def _lines(fs: Any, path: str, out: EventLogRead) -> Iterator[str]:
    """The text lines of one file, decompressed by its suffix; a file cut short ends with a warning."""
    suffix = next((s for s in _CODEC_SUFFIXES if path.endswith(s) or path.endswith(s + ".inprogress")), None)
    codec = _CODEC_SUFFIXES.get(suffix) if suffix else None
    if codec is None or codec == "zstd":
        pending = b""
        for chunk in _chunks(fs, path, codec, out):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
        return

    with fs.open(path, "rb") as raw:
        data = raw.read()
    try:
        text = decompress(data, path, codec)
    except StatelensError as err:
        out.warnings.append(err)
        return
    yield from text.decode("utf-8", "replace").split("\n")


def _chunks(fs: Any, path: str, codec: str | None, out: EventLogRead) -> Iterator[bytes]:
    """Decompressed bytes of a plain or zstd file, a little input at a time (bounded memory)."""
    with fs.open(path, "rb") as raw:
        if codec is None:
            while chunk := raw.read(1 << 20):
                yield chunk
            return

        dctx = zstandard.ZstdDecompressor()
        frame = dctx.decompressobj()
        fed = read = 0
        try:
            while chunk := raw.read(1 << 16):
                read += len(chunk)
                # Small input slices bound what one call can expand to (a compressed megabyte of a log may
                # hold a gigabyte of repeated events).
                for at in range(0, len(chunk), _ZSTD_SLICE):
                    data = chunk[at : at + _ZSTD_SLICE]
                    while data:
                        fed += len(data)
                        yield frame.decompress(data)
                        if frame.eof:  # the next frame (Spark may write several) starts in the unused bytes
                            data, frame, fed = frame.unused_data, dctx.decompressobj(), 0
                        else:
                            data = b""
        except zstandard.ZstdError as err:
            out.warnings.append(
                CorruptFileError(f"the zstd stream is damaged after byte {read:,}: {err}", path)
            )
            return
        if fed and not frame.eof:
            out.warnings.append(
                TruncatedFileError(
                    f"the zstd stream ends early, inside a frame, after {read:,} bytes (a log still being written, "
                    "or cut); the lines before are read",
                    path,
                )
            )


def _read_file(
    fs: Any, path: str, out: EventLogRead, cancelled: Callable[[], bool] | None
) -> Generator[Progress, None, None]:
    block: list[str] | None = None  # a driver-log progress block being collected
    block_line = 0
    for number, line in enumerate(_lines(fs, path, out), start=1):
        if number % 50_000 == 0:
            if cancelled is not None and cancelled():
                return
            yield Progress(number, 0, f"{posixpath.basename(path)}: line {number:,}")
        if block is not None:
            block.append(line)
            text = "\n".join(block)
            if text.count("{") <= text.count("}"):
                _take_progress(text, path, block_line, out)
                block = None
            elif len(block) > _MAX_BLOCK_LINES:
                out.warnings.append(
                    CorruptFileError(
                        f"progress block at line {block_line} never closes", path, line=block_line
                    )
                )
                block = None
            continue
        at = line.find(_DRIVER_MARK)
        if at >= 0:
            block, block_line = [line[at + len(_DRIVER_MARK) :]], number
            text = block[0]
            if text.count("{") <= text.count("}"):
                _take_progress(text, path, number, out)
                block = None
            continue
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        if "StreamingQueryListener$" not in stripped and '"batchId"' not in stripped:
            continue  # the other events (tasks, stages, SQL executions...): not parsed at all
        try:
            doc = json.loads(stripped)
        except ValueError as err:
            out.warnings.append(
                CorruptFileError(f"line {number} is not JSON ({err.args[0][:60]})", path, line=number)
            )
            continue
        if not isinstance(doc, dict):
            continue
        event = doc.get("Event")
        if event == _PROGRESS_EVENT:
            _add_progress(doc.get("progress"), path, number, out)
        elif event == _STARTED_EVENT:
            run = _run(out, doc)
            if run is not None:
                run.started = doc.get("timestamp")
        elif event == _TERMINATED_EVENT:
            run = _run(out, doc)
            if run is not None:
                run.terminated = True
                run.exception = doc.get("exception")
        elif event is None and "batchId" in doc and "runId" in doc:
            _add_progress(doc, path, number, out)
    if block is not None:
        out.warnings.append(
            TruncatedFileError(f"the progress block at line {block_line} is cut short", path, line=block_line)
        )


def _run(out: EventLogRead, doc: dict[str, Any]) -> QueryRun | None:
    qid, rid = doc.get("id"), doc.get("runId")
    if not isinstance(qid, str) or not isinstance(rid, str):
        return None
    run = out.runs.get(rid)
    if run is None:
        run = out.runs[rid] = QueryRun(qid, rid)
    return run


def _take_progress(text: str, path: str, line: int, out: EventLogRead) -> None:
    try:
        doc = json.loads(text)
    except ValueError as err:
        out.warnings.append(
            CorruptFileError(
                f"the progress block at line {line} is not JSON ({err.args[0][:60]})", path, line=line
            )
        )
        return
    _add_progress(doc, path, line, out)


def _add_progress(doc: Any, path: str, line: int, out: EventLogRead) -> None:
    if not isinstance(doc, dict):
        out.warnings.append(
            CorruptFileError(f"line {line}: a progress event without its progress", path, line=line)
        )
        return
    qid, rid, batch = doc.get("id"), doc.get("runId"), doc.get("batchId")
    if not isinstance(qid, str) or not isinstance(rid, str) or not isinstance(batch, int):
        out.warnings.append(
            CorruptFileError(f"line {line}: progress without a query id, run id or batch id", path, line=line)
        )
        return
    out.progress.append(QueryProgress(qid, rid, batch, str(doc.get("timestamp") or ""), doc, path, line))
    run = _run(out, {"id": qid, "runId": rid})
    if run is not None and batch not in run.batches:
        run.batches.append(batch)

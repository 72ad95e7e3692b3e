"""Parsers for the text logs of a streaming checkpoint: ``metadata``, ``offsets/``, ``commits/``, ``sources/``.

Follows ``docs/format.md`` §2. The files are written by Spark's ``HDFSMetadataLog``
subclasses: ``StreamMetadata`` (``metadata``), ``OffsetSeqLog`` (``offsets/<batchId>``, format v1 since
Spark 2.1, v2 with ``spark.sql.streaming.offsetLog.formatVersion=2`` on 4.3), ``CommitLog``
(``commits/<batchId>``, v1 since 2.2, v2 with checkpoint format v2 on 4.0+, v3 with sink evolution on
4.3) and ``FileStreamSourceLog`` (``sources/<i>/<n>`` and ``<n>.compact``). Classes live in
``sql/core/.../execution/streaming/checkpointing/`` (4.1+) or ``.../execution/streaming/`` (earlier).

Every parser takes the file's bytes and the path they came from (for error messages); none does I/O.
Version lines are dispatched through dicts of ``_v<N>`` functions; an unknown version raises
:class:`~readers.errors.UnsupportedVersionError` naming the tag and file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statelens.readers.errors import CorruptFileError, TruncatedFileError, UnsupportedVersionError
from statelens.readers.model import CommitLogEntry, OffsetLogEntry, SourceOffset

__all__ = [
    "SPARK_CONF_DEFAULTS",
    "batch_id_from_name",
    "effective_conf",
    "is_batch_file_name",
    "kafka_partition_offsets",
    "kafka_record_counts",
    "parse_commit",
    "parse_file_source_log",
    "parse_kafka_initial_offsets",
    "parse_metadata",
    "parse_metadata_fields",
    "parse_offsets",
]

# Java serialization stream magic (``ObjectOutputStream``): Spark 2.0.x wrote offsets this way.
_JAVA_SERIALIZATION_MAGIC = b"\xac\xed\x00\x05"

#: Source offset line meaning "this source has no offset yet" (``OffsetSeqLog.SERIALIZED_VOID_OFFSET``).
VOID_OFFSET = "-"

#: Values Spark assumes for offsets ``conf`` keys an older checkpoint lacks
#: (``OffsetSeqMetadata.relevantSQLConfDefaultValues`` in 4.3.0, docs/format.md §2.2), plus the state store
#: provider, which before 2.3 (no key) could only be the HDFS-backed one.
SPARK_CONF_DEFAULTS: dict[str, str] = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ),
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1",
    "spark.sql.streaming.aggregation.stateFormatVersion": "1",
    "spark.sql.streaming.join.stateFormatVersion": "1",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "false",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "true",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "1",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled": "false",
    "spark.sql.dropDuplicates.deterministicKeyOrder.enabled": "false",
}

_LINE_BREAK_BYTES_RE = re.compile(rb"\r\n|\r|\n")
_VERSION_RE = re.compile(r"v([0-9]+)")
# java.lang.Long.parseLong: optional sign, then decimal digits (Character.digit accepts Unicode Nd digits).
_JAVA_LONG_RE = re.compile(r"[+-]?\d+")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------------------------------
# shared helpers


class _Line:
    """One line of a text log and the byte offset where it starts."""

    __slots__ = ("offset", "text")

    def __init__(self, text: str, offset: int):
        self.text = text
        self.offset = offset


def _decode_text(data: bytes, path: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptFileError(f"not valid UTF-8 text ({err.reason})", path, offset=err.start) from err


def _split_lines(data: bytes, path: str) -> list[_Line]:
    """Split like ``scala.io.Source.getLines``: ``\\n``, ``\\r\\n`` or ``\\r`` end a line; a final break adds none."""
    raw = bytes(data)
    _decode_text(raw, path)  # locate any UTF-8 error in the whole file first
    lines: list[_Line] = []
    start = 0
    # Line-break bytes never occur inside a multi-byte UTF-8 sequence, so splitting bytes is safe.
    for m in _LINE_BREAK_BYTES_RE.finditer(raw):
        lines.append(_Line(raw[start : m.start()].decode("utf-8"), start))
        start = m.end()
    if start < len(raw):
        lines.append(_Line(raw[start:].decode("utf-8"), start))
    return lines


def _parse_version(line: _Line | None, path: str, max_version: int, what: str) -> int:
    """Read a ``v<N>`` line the way ``MetadataVersionUtil.validateVersion`` does."""
    if line is None:
        raise TruncatedFileError(f"empty {what} file: expected a version line such as 'v1'", path, offset=0)
    tag = line.text.strip()
    m = _VERSION_RE.fullmatch(tag)
    if m is None or int(m.group(1)) <= 0:
        shown = tag if len(tag) <= 40 else tag[:40] + "..."
        raise CorruptFileError(
            f"malformed {what} file: first line {shown!r} is not a version tag such as 'v1'",
            path,
            offset=line.offset,
        )
    version = int(m.group(1))
    if version > max_version:
        raise UnsupportedVersionError(
            f"{what} format {tag!r} is newer than statelens supports (v1..v{max_version}); "
            "it was written by a newer Spark",
            path,
            offset=line.offset,
        )
    return version


def _loads(text: str, path: str, offset: int, what: str) -> Any:
    """``json.loads`` raising :class:`CorruptFileError` with the byte offset of the problem."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = offset + len(text[: err.pos].encode("utf-8"))
        raise CorruptFileError(f"bad JSON in {what}: {err.msg}", path, offset=where) from err
    except RecursionError as err:
        raise CorruptFileError(f"JSON in {what} is nested too deeply", path, offset=offset) from err
    except ValueError as err:  # e.g. an integer of more than 4300 digits (sys.get_int_max_str_digits)
        raise CorruptFileError(f"bad JSON in {what}: {err}", path, offset=offset) from err


def _json_object(text: str, path: str, offset: int, what: str) -> dict[str, Any]:
    value = _loads(text, path, offset, what)
    if not isinstance(value, dict):
        raise CorruptFileError(f"{what} is not a JSON object but {type(value).__name__}", path, offset=offset)
    return value


def _long_field(obj: Mapping[str, Any], name: str, default: int | None, path: str, offset: int) -> int | None:
    value = obj.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptFileError(f"field {name!r} should be a whole number, got {value!r}", path, offset=offset)
    return value


# --------------------------------------------------------------------------------------------------
# metadata


def parse_metadata_fields(data: bytes, path: str) -> dict[str, Any]:
    """Parse the checkpoint's ``metadata`` file into its JSON fields.

    Parameters
    ----------
    data : bytes
        The file's bytes: one line of JSON such as ``{"id":"78aa9857-..."}`` (docs/format.md §2.1).
    path : str
        Where the bytes came from, for error messages.

    Returns
    -------
    dict
        Every field of the JSON object; ``id`` is guaranteed to be a string.

    Raises
    ------
    TruncatedFileError
        The file is empty.
    CorruptFileError
        Not UTF-8, not a JSON object, or no string ``id``.
    """
    text = _decode_text(data, path)
    if not text.strip():
        raise TruncatedFileError('empty metadata file: expected {"id": ...}', path, offset=0)
    fields = _json_object(text, path, 0, "checkpoint metadata")
    query_id = fields.get("id")
    if not isinstance(query_id, str):
        raise CorruptFileError(f"checkpoint metadata has no string 'id' (got {query_id!r})", path)
    return fields


def parse_metadata(data: bytes, path: str) -> str:
    """Return the query id stored in the checkpoint's ``metadata`` file.

    Parameters
    ----------
    data : bytes
        The file's bytes.
    path : str
        Where the bytes came from, for error messages.

    Returns
    -------
    str
        The query id (stable across restarts). Extra fields are tolerated; see
        :func:`parse_metadata_fields` to get them.

    Raises
    ------
    TruncatedFileError, CorruptFileError
        As :func:`parse_metadata_fields`.
    """
    return parse_metadata_fields(data, path)["id"]


# --------------------------------------------------------------------------------------------------
# offsets


def _source_kind(parsed: Any) -> str:
    """Guess the kind of source from the shape of its offset JSON (docs/format.md §2.3)."""
    if isinstance(parsed, bool):
        return "unknown"
    if isinstance(parsed, int):
        return "long"
    if not isinstance(parsed, dict) or not parsed:
        return "unknown"
    if set(parsed) == {"logOffset"} and _is_long(parsed["logOffset"]):
        return "file"
    if (
        set(parsed) == {"offset", "timestamp"}
        and _is_long(parsed["offset"])
        and _is_long(parsed["timestamp"])
    ):
        return "rate"
    if _is_kafka_shape(parsed):
        return "kafka"
    return "unknown"


def _is_long(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_kafka_shape(parsed: Any) -> bool:
    if not isinstance(parsed, dict) or not parsed:
        return False
    for partitions in parsed.values():
        if not isinstance(partitions, dict):
            return False
        for partition, offset in partitions.items():
            if not (partition.isascii() and partition.removeprefix("-").isdigit()) or not _is_long(offset):
                return False
    return True


def _source_offset(index: int, raw: str, path: str, offset: int, source_id: str | None) -> SourceOffset:
    if raw == VOID_OFFSET:
        return SourceOffset(index=index, raw=None, parsed=None, source_kind="unknown", source_id=source_id)
    if not raw.strip():
        raise CorruptFileError(f"source {index} has an empty offset line", path, offset=offset)
    parsed = _loads(raw, path, offset, f"offset of source {index}")
    return SourceOffset(
        index=index, raw=raw, parsed=parsed, source_kind=_source_kind(parsed), source_id=source_id
    )


def _offset_metadata(
    line: _Line | None, path: str, required: bool
) -> tuple[int, int | None, dict[str, str], dict[str, Any]]:
    """Parse ``OffsetSeqMetadata`` JSON: watermark, timestamp, conf and the other fields."""
    text = line.text.strip() if line is not None else ""
    if not text:
        if required:
            offset = line.offset if line is not None else None
            raise CorruptFileError(
                "offsets v2 file has no metadata line (Spark requires one)", path, offset=offset
            )
        return 0, None, {}, {}
    assert line is not None
    meta = _json_object(text, path, line.offset, "offsets metadata")
    watermark = _long_field(meta, "batchWatermarkMs", 0, path, line.offset)
    timestamp = _long_field(meta, "batchTimestampMs", None, path, line.offset)
    raw_conf = meta.get("conf")
    if raw_conf is None:
        raw_conf = {}
    if not isinstance(raw_conf, dict):
        raise CorruptFileError("offsets metadata 'conf' is not a JSON object", path, offset=line.offset)
    conf = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw_conf.items()}
    extra = {k: v for k, v in meta.items() if k not in ("batchWatermarkMs", "batchTimestampMs", "conf")}
    assert watermark is not None
    return watermark, timestamp, conf, extra


def _parse_offsets_v1(lines: list[_Line], path: str, batch_id: int) -> OffsetLogEntry:
    if len(lines) < 2:
        raise TruncatedFileError("offsets file ends after its version line (no metadata line)", path)
    watermark, timestamp, conf, extra = _offset_metadata(lines[1], path, required=False)
    sources = tuple(_source_offset(i, line.text, path, line.offset, None) for i, line in enumerate(lines[2:]))
    return OffsetLogEntry(batch_id, 1, watermark, timestamp, conf, sources, path, extra)


def _parse_offsets_v2(lines: list[_Line], path: str, batch_id: int) -> OffsetLogEntry:
    if len(lines) < 2:
        raise TruncatedFileError("offsets file ends after its version line (no metadata line)", path)
    watermark, timestamp, conf, extra = _offset_metadata(lines[1], path, required=True)
    sources = []
    for i, line in enumerate(lines[2:]):
        source_id, sep, raw = line.text.partition(":")
        if not sep:
            raise CorruptFileError(
                f"offsets v2 source line {i} has no 'sourceId:' prefix", path, offset=line.offset
            )
        value_offset = line.offset + len(source_id.encode("utf-8")) + 1
        sources.append(_source_offset(i, raw, path, value_offset, source_id))
    return OffsetLogEntry(batch_id, 2, watermark, timestamp, conf, tuple(sources), path, extra)


_OFFSETS_PARSERS: dict[int, Callable[[list[_Line], str, int], OffsetLogEntry]] = {
    1: _parse_offsets_v1,
    2: _parse_offsets_v2,
}


def parse_offsets(data: bytes, path: str, batch_id: int) -> OffsetLogEntry:
    """Parse an ``offsets/<batchId>`` file (``OffsetSeqLog``, docs/format.md §2.2).

    Parameters
    ----------
    data : bytes
        The file's bytes. Format v1: ``v1``, a metadata JSON line (possibly empty), then one offset
        JSON line (or ``-``) per source in plan order. Format v2: ``v2``, metadata JSON (with
        ``sourceMetadataInfo`` and optional ``controlBatchInfo``), then ``<sourceId>:<offset>`` lines.
        A trailing line break is tolerated.
    path : str
        Where the bytes came from, for error messages and the entry's ``path``.
    batch_id : int
        The batch id (the file name).

    Returns
    -------
    OffsetLogEntry
        ``watermark_ms`` is 0 and ``conf`` empty when the metadata lacks them; ``timestamp_ms`` is
        ``None`` when unknown (the metadata line is empty or has no ``batchTimestampMs``). ``conf``
        values are strings. Metadata fields other than watermark, timestamp and conf (e.g.
        ``sourceMetadataInfo``, ``controlBatchInfo``) are kept in ``extra``. Each source keeps the exact
        ``raw`` text Spark wrote.

    Raises
    ------
    UnsupportedVersionError
        A Spark 2.0 Java-serialized offsets file, or a version above v2.
    TruncatedFileError
        The file is empty or has no metadata line.
    CorruptFileError
        Malformed version line, bad JSON, a v2 source line without ``sourceId:``, bad UTF-8.
    """
    if bytes(data[:4]) == _JAVA_SERIALIZATION_MAGIC:
        raise UnsupportedVersionError(
            "offsets file is Java-serialized (written by Spark 2.0.x); statelens reads the text offset "
            "log of Spark 2.1 and later only — Spark 2.1+ cannot resume such checkpoints either",
            path,
            offset=0,
        )
    lines = _split_lines(data, path)
    version = _parse_version(lines[0] if lines else None, path, max(_OFFSETS_PARSERS), "offsets")
    return _OFFSETS_PARSERS[version](lines, path, batch_id)


def effective_conf(offsets_entries: Iterable[OffsetLogEntry]) -> dict[str, str]:
    """The SQL confs the checkpoint runs with, as a restart sets them.

    Spark pins the confs recorded in the first offsets file and carries them into every later one; a
    restart takes them from the newest (``OffsetSeqMetadata.setSessionConf``). Only Spark 4.2+'s
    ``checkpointManager.repartition`` changes one of them (``spark.sql.shuffle.partitions``, in the batch it
    adds; docs/format.md §2.2). This takes the earliest *surviving* entry (lowest ``batch_id``), overlays the
    newest one, and fills keys both lack with :data:`SPARK_CONF_DEFAULTS` (codec ``lz4``, state format
    versions ``1``, HDFS provider, ...), as Spark does when it restarts an older checkpoint.

    Parameters
    ----------
    offsets_entries : iterable of OffsetLogEntry
        Parsed offsets files, in any order.

    Returns
    -------
    dict of str to str
        The conf; only the defaults when no entry is given. ``spark.sql.shuffle.partitions`` has no
        default (before Spark 2.3 it is not recorded: count the state partition folders instead).
    """
    entries = sorted(offsets_entries, key=lambda e: e.batch_id)
    conf = dict(SPARK_CONF_DEFAULTS)
    if entries:
        conf.update(entries[0].conf)
        conf.update(entries[-1].conf)
    return conf


# --------------------------------------------------------------------------------------------------
# Kafka offsets


def kafka_partition_offsets(parsed: Any, path: str | None = None) -> dict[tuple[str, int], int]:
    """Flatten a Kafka source offset into ``{(topic, partition): offset}``.

    Parameters
    ----------
    parsed : object
        A Kafka offset JSON as decoded (``SourceOffset.parsed``):
        ``{"topic": {"0": 23, "1": 42}, ...}`` — topic to partition (a decimal string) to the next offset
        to read. In starting offsets ``-2`` means earliest and ``-1`` latest.
    path : str, optional
        The offsets file, for error messages.

    Returns
    -------
    dict
        ``(topic, partition)`` to offset, sorted by topic then partition.

    Raises
    ------
    CorruptFileError
        ``parsed`` does not have the Kafka shape.
    """
    if not _is_kafka_shape(parsed):
        raise CorruptFileError(
            "source offset does not have the Kafka shape {topic: {partition: offset}}", path
        )
    flat = {(topic, int(p)): offset for topic, parts in parsed.items() for p, offset in parts.items()}
    return dict(sorted(flat.items()))


def kafka_record_counts(
    previous: Any, current: Any, path: str | None = None
) -> dict[tuple[str, int], int | None]:
    """Records read per Kafka partition between two batches' offsets.

    ``offsets/N`` holds the *end* offsets of batch N, so batch N read ``offsets(N) - offsets(N-1)``
    records of each partition (pass ``offsets/N-1`` as ``previous``; for batch 0 pass the initial
    offsets from ``sources/<i>/0``, see :func:`parse_kafka_initial_offsets`).

    Parameters
    ----------
    previous, current : object
        Kafka offset JSONs as decoded (``SourceOffset.parsed``).
    path : str, optional
        For error messages.

    Returns
    -------
    dict
        For every ``(topic, partition)`` in ``current``: the offset delta, or ``None`` when it cannot be
        known (partition new in ``current``, or either side negative, i.e. the -1/-2 latest/earliest
        markers). Deltas can be negative if a topic was recreated.

    Raises
    ------
    CorruptFileError
        Either argument does not have the Kafka shape.
    """
    before = kafka_partition_offsets(previous, path)
    after = kafka_partition_offsets(current, path)
    counts: dict[tuple[str, int], int | None] = {}
    for tp, end in after.items():
        start = before.get(tp)
        counts[tp] = end - start if start is not None and start >= 0 and end >= 0 else None
    return counts


def parse_kafka_initial_offsets(data: bytes, path: str) -> Any:
    """Parse ``sources/<i>/0`` of a Kafka source: the offsets it started from (docs/format.md §2.4).

    Parameters
    ----------
    data : bytes
        A ``00`` byte (kept since Spark 2.1.0, SPARK-19517), ``v1`` and a line break, then the Kafka
        offset JSON. Files without the leading ``00`` byte are accepted too.
    path : str
        For error messages.

    Returns
    -------
    object
        The decoded Kafka offset JSON.

    Raises
    ------
    TruncatedFileError, CorruptFileError, UnsupportedVersionError
        Empty file, bad version line or JSON, version above v1.
    """
    skip = 1 if bytes(data[:1]) == b"\x00" else 0
    lines = _split_lines(bytes(data[skip:]), path)
    _parse_version(lines[0] if lines else None, path, 1, "Kafka initial offsets")
    if len(lines) < 2:
        raise TruncatedFileError("Kafka initial offsets file has no offsets line", path)
    body = "\n".join(line.text for line in lines[1:])
    parsed = _loads(body, path, lines[1].offset + skip, "Kafka initial offsets")
    if not _is_kafka_shape(parsed):
        raise CorruptFileError(
            "Kafka initial offsets do not have the shape {topic: {partition: offset}}", path
        )
    return parsed


# --------------------------------------------------------------------------------------------------
# commits


def _commit_common(lines: list[_Line], path: str) -> tuple[dict[str, Any], int, int]:
    line = lines[1] if len(lines) > 1 else None
    text = line.text if line is not None else ""
    offset = line.offset if line is not None else 0
    # CommitLog reads a missing second line as "{}"; Spark 2.2/2.3 wrote "{}" itself.
    meta = _json_object(text, path, offset, "commit metadata") if text.strip() else {}
    watermark = _long_field(meta, "nextBatchWatermarkMs", 0, path, offset)
    assert watermark is not None
    return meta, watermark, offset


def _state_unique_ids(meta: dict[str, Any], path: str, offset: int) -> dict[str, Any] | None:
    ids = meta.get("stateUniqueIds")
    if ids is None:
        return None
    ok = isinstance(ids, dict) and all(
        isinstance(parts, list)
        and all(isinstance(stores, list) and all(isinstance(u, str) for u in stores) for stores in parts)
        for parts in ids.values()
    )
    if not ok:
        raise CorruptFileError(
            "commit 'stateUniqueIds' is not {operatorId: [[uniqueId, ...] per partition]}",
            path,
            offset=offset,
        )
    return ids


def _parse_commit_v1(lines: list[_Line], path: str, batch_id: int) -> CommitLogEntry:
    meta, watermark, _ = _commit_common(lines, path)
    extra = {k: v for k, v in meta.items() if k != "nextBatchWatermarkMs"}
    return CommitLogEntry(batch_id, 1, watermark, path, None, extra)


def _parse_commit_v2(lines: list[_Line], path: str, batch_id: int) -> CommitLogEntry:
    meta, watermark, offset = _commit_common(lines, path)
    ids = _state_unique_ids(meta, path, offset)
    extra = {k: v for k, v in meta.items() if k not in ("nextBatchWatermarkMs", "stateUniqueIds")}
    return CommitLogEntry(batch_id, 2, watermark, path, ids, extra)


def _parse_commit_v3(lines: list[_Line], path: str, batch_id: int) -> CommitLogEntry:
    # v3 (Spark 4.3, sink evolution) = v2 + "sinkMetadataMap" (sink name -> {sinkName, commitOffset,
    # providerName, apiVersion, isActive}); that map stays in ``extra``.
    entry = _parse_commit_v2(lines, path, batch_id)
    return CommitLogEntry(batch_id, 3, entry.next_watermark_ms, path, entry.state_unique_ids, entry.extra)


_COMMIT_PARSERS: dict[int, Callable[[list[_Line], str, int], CommitLogEntry]] = {
    1: _parse_commit_v1,
    2: _parse_commit_v2,
    3: _parse_commit_v3,
}


def parse_commit(data: bytes, path: str, batch_id: int) -> CommitLogEntry:
    """Parse a ``commits/<batchId>`` file (``CommitLog``, docs/format.md §2.5).

    Parameters
    ----------
    data : bytes
        The file's bytes: ``v<N>`` then a JSON line. v1: ``{"nextBatchWatermarkMs":...}`` (Spark
        2.2/2.3 wrote ``{}``; a missing line is read as ``{}``). v2 adds ``stateUniqueIds``; v3 (Spark
        4.3) adds ``sinkMetadataMap``.
    path : str
        Where the bytes came from.
    batch_id : int
        The batch id (the file name).

    Returns
    -------
    CommitLogEntry
        ``next_watermark_ms`` 0 when absent; ``state_unique_ids`` for v2/v3 (``None`` when absent); any
        other fields in ``extra``.

    Raises
    ------
    UnsupportedVersionError
        A version above v3.
    TruncatedFileError
        An empty file.
    CorruptFileError
        Malformed version line, bad JSON or a field of the wrong type.
    """
    lines = _split_lines(data, path)
    version = _parse_version(lines[0] if lines else None, path, max(_COMMIT_PARSERS), "commit log")
    return _COMMIT_PARSERS[version](lines, path, batch_id)


# --------------------------------------------------------------------------------------------------
# file source log


def _parse_file_source_log_v1(lines: list[_Line], path: str) -> list[dict[str, Any]]:
    entries = []
    for i, line in enumerate(lines[1:]):
        entry = _json_object(line.text, path, line.offset, f"file source log entry {i}")
        if not isinstance(entry.get("path"), str):
            raise CorruptFileError(
                f"file source log entry {i} has no string 'path'", path, offset=line.offset
            )
        for name in ("timestamp", "batchId"):
            _long_field(entry, name, None, path, line.offset)
        entries.append(entry)
    return entries


_FILE_SOURCE_LOG_PARSERS: dict[int, Callable[[list[_Line], str], list[dict[str, Any]]]] = {
    1: _parse_file_source_log_v1,
}


def parse_file_source_log(data: bytes, path: str) -> list[dict[str, Any]]:
    """Parse a file source log file ``sources/<i>/<n>`` or ``<n>.compact`` (docs/format.md §2.4).

    Parameters
    ----------
    data : bytes
        ``v1`` then one JSON object per line:
        ``{"path":"file:///.../part-000.json","timestamp":1795341824670,"batchId":0}``.
    path : str
        Where the bytes came from.

    Returns
    -------
    list of dict
        One dict per file entry (``path``, ``timestamp``, ``batchId``, and whatever else was there), in
        file order. ``batchId`` is the source's ``logOffset``, not the query batch id.

    Raises
    ------
    UnsupportedVersionError, TruncatedFileError, CorruptFileError
        Unknown version, empty file, bad JSON or entries without a ``path``.
    """
    lines = _split_lines(data, path)
    version = _parse_version(
        lines[0] if lines else None, path, max(_FILE_SOURCE_LOG_PARSERS), "file source log"
    )
    return _FILE_SOURCE_LOG_PARSERS[version](lines, path)


# --------------------------------------------------------------------------------------------------
# file names


def batch_id_from_name(name: str) -> int | None:
    """The batch id a log file name stands for, or ``None`` if Spark would skip the file.

    Mirrors ``HDFSMetadataLog.isBatchFile``: a name is a batch file when ``java.lang.Long.parseLong``
    accepts it (optional sign, decimal digits, within the signed 64-bit range). Temp files
    (``.0.<uuid>.tmp``), Hadoop checksums (``.0.crc``) and ``.compact`` files are therefore not.

    Parameters
    ----------
    name : str
        A file name (not a path).

    Returns
    -------
    int or None
    """
    if not _JAVA_LONG_RE.fullmatch(name):
        return None
    value = int(name)
    return value if _LONG_MIN <= value <= _LONG_MAX else None


def is_batch_file_name(name: str) -> bool:
    """Whether Spark treats ``name`` as a batch file of a metadata log (see :func:`batch_id_from_name`).

    Parameters
    ----------
    name : str
        A file name (not a path).

    Returns
    -------
    bool
    """
    return batch_id_from_name(name) is not None

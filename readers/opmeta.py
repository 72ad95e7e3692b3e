"""Parser for operator metadata files ``state/<op>/_metadata/metadata`` (v1) and ``_metadata/v2/<batchId>`` (v2).

Follows ``docs/format.md`` §8. Written by Spark 4.0+ only
(``OperatorStateMetadataV1Writer`` / ``OperatorStateMetadataV2Writer`` in
``sql/core/.../execution/streaming/state/OperatorStateMetadata.scala``): a ``v<N>`` line, then one JSON
line ``{"operatorInfo":{...},"stateStoreInfo":[...]}``; v2 (transformWithState on 4.0+, joins v3/v4 on
4.1+) adds each store's schema file URI(s) and ``operatorPropertiesJson``, a JSON document inside a JSON
string. Spark 4.0 wrote ``stateSchemaFilePath`` (a string), 4.1+ ``stateSchemaFilePaths`` (an array);
both are accepted. Versions are dispatched through a dict of ``_v1``/``_v2`` functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statelens.readers.errors import CorruptFileError, TruncatedFileError, UnsupportedVersionError

__all__ = [
    "OperatorMetadata",
    "StateStoreMetadata",
    "parse_operator_metadata",
    "schema_file_name",
    "schema_file_relpath",
]

_VERSION_RE = re.compile(r"v([0-9]+)")
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")
_SCHEMA_URI_TAIL_RE = re.compile(r"/state/[0-9]+/_stateSchema/[^/]+/[^/]+$")


@dataclass(frozen=True)
class StateStoreMetadata:
    """One state store of an operator as its metadata file describes it.

    ``state_schema_file_paths`` are absolute URIs from the machine that wrote the checkpoint (v2 only;
    empty for v1): resolve them with :func:`schema_file_relpath`.
    """

    store_name: str
    num_cols_prefix_key: int
    num_partitions: int
    state_schema_file_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperatorMetadata:
    """``state/<op>/_metadata/metadata`` (v1) or ``state/<op>/_metadata/v2/<batchId>`` (v2).

    ``operator_name`` is Spark's short name (``stateStoreSave``, ``dedupe``, ``symmetricHashJoin``,
    ``transformWithStateExec``...). ``properties`` is ``operatorPropertiesJson`` decoded (``{}`` for v1
    or when absent), ``properties_json`` the string as written. Unknown top-level fields stay in ``extra``.
    """

    operator_id: int
    operator_name: str
    stores: tuple[StateStoreMetadata, ...]
    format_version: int
    path: str
    properties: dict[str, Any] = field(default_factory=dict)
    properties_json: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def store(self, store_name: str) -> StateStoreMetadata | None:
        """Return the store named ``store_name``, or ``None``."""
        for s in self.stores:
            if s.store_name == store_name:
                return s
        return None


# --------------------------------------------------------------------------------------------------


def _int(
    obj: dict[str, Any], name: str, path: str, offset: int, what: str, default: int | None = None
) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptFileError(f"{what} field {name!r} should be a whole number, got {value!r}", path, offset)
    return value


def _operator_info(meta: dict[str, Any], path: str, offset: int) -> tuple[int, str]:
    info = meta.get("operatorInfo")
    if not isinstance(info, dict):
        raise CorruptFileError("operator metadata has no 'operatorInfo' object", path, offset)
    operator_id = _int(info, "operatorId", path, offset, "operatorInfo")
    name = info.get("operatorName")
    if not isinstance(name, str):
        raise CorruptFileError(f"operatorInfo 'operatorName' should be a string, got {name!r}", path, offset)
    return operator_id, name


def _schema_paths(info: dict[str, Any], path: str, offset: int, what: str) -> tuple[str, ...]:
    paths: list[str] = []
    many = info.get("stateSchemaFilePaths")  # 4.1+
    if many is not None:
        if not isinstance(many, list) or not all(isinstance(p, str) for p in many):
            raise CorruptFileError(f"{what} 'stateSchemaFilePaths' should be a list of strings", path, offset)
        paths.extend(many)
    one = info.get("stateSchemaFilePath")  # 4.0
    if one is not None:
        if not isinstance(one, str):
            raise CorruptFileError(f"{what} 'stateSchemaFilePath' should be a string", path, offset)
        if one not in paths:
            paths.append(one)
    return tuple(paths)


def _stores(
    meta: dict[str, Any], path: str, offset: int, with_schema_paths: bool
) -> tuple[StateStoreMetadata, ...]:
    infos = meta.get("stateStoreInfo")
    if not isinstance(infos, list):
        raise CorruptFileError("operator metadata has no 'stateStoreInfo' list", path, offset)
    stores = []
    for i, info in enumerate(infos):
        what = f"stateStoreInfo[{i}]"
        if not isinstance(info, dict):
            raise CorruptFileError(f"{what} is not a JSON object", path, offset)
        name = info.get("storeName")
        if not isinstance(name, str):
            raise CorruptFileError(f"{what} 'storeName' should be a string, got {name!r}", path, offset)
        stores.append(
            StateStoreMetadata(
                store_name=name,
                num_cols_prefix_key=_int(info, "numColsPrefixKey", path, offset, what, default=0),
                num_partitions=_int(info, "numPartitions", path, offset, what),
                state_schema_file_paths=_schema_paths(info, path, offset, what) if with_schema_paths else (),
            )
        )
    return tuple(stores)


def _parse_v1(meta: dict[str, Any], path: str, offset: int) -> OperatorMetadata:
    operator_id, name = _operator_info(meta, path, offset)
    stores = _stores(meta, path, offset, with_schema_paths=False)
    extra = {k: v for k, v in meta.items() if k not in ("operatorInfo", "stateStoreInfo")}
    return OperatorMetadata(operator_id, name, stores, 1, path, extra=extra)


def _parse_v2(meta: dict[str, Any], path: str, offset: int) -> OperatorMetadata:
    operator_id, name = _operator_info(meta, path, offset)
    stores = _stores(meta, path, offset, with_schema_paths=True)
    props_json = meta.get("operatorPropertiesJson")
    properties: dict[str, Any] = {}
    if props_json is not None:
        if not isinstance(props_json, str):
            raise CorruptFileError("'operatorPropertiesJson' should be a JSON string", path, offset)
        if props_json.strip():
            try:
                properties = json.loads(props_json)
            except json.JSONDecodeError as err:
                raise CorruptFileError(
                    f"bad JSON inside 'operatorPropertiesJson': {err.msg} (at character {err.pos})",
                    path,
                    offset,
                ) from err
            except RecursionError as err:
                raise CorruptFileError("'operatorPropertiesJson' is nested too deeply", path, offset) from err
            except ValueError as err:  # e.g. an integer of more than 4300 digits
                raise CorruptFileError(
                    f"bad JSON inside 'operatorPropertiesJson': {err}", path, offset
                ) from err
            if not isinstance(properties, dict):
                raise CorruptFileError("'operatorPropertiesJson' is not a JSON object", path, offset)
    extra = {
        k: v for k, v in meta.items() if k not in ("operatorInfo", "stateStoreInfo", "operatorPropertiesJson")
    }
    return OperatorMetadata(operator_id, name, stores, 2, path, properties, props_json, extra)


_PARSERS: dict[int, Callable[[dict[str, Any], str, int], OperatorMetadata]] = {
    1: _parse_v1,
    2: _parse_v2,
}


def parse_operator_metadata(data: bytes, path: str) -> OperatorMetadata:
    """Parse an operator metadata file (docs/format.md §8).

    Parameters
    ----------
    data : bytes
        The file's bytes: ``v1`` or ``v2``, a line break, one JSON line (a trailing line break is
        tolerated).
    path : str
        Where the bytes came from.

    Returns
    -------
    OperatorMetadata

    Raises
    ------
    UnsupportedVersionError
        A version other than v1/v2.
    TruncatedFileError
        Empty, or no JSON line.
    CorruptFileError
        Not UTF-8, malformed version line, bad JSON (including inside ``operatorPropertiesJson``), or
        missing/mistyped fields.
    """
    raw = bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptFileError(f"not valid UTF-8 text ({err.reason})", path, offset=err.start) from err
    if not text:
        raise TruncatedFileError(
            "empty operator metadata file: expected 'v1' or 'v2' and a JSON line", path, 0
        )
    m = _LINE_BREAK_RE.search(text)
    tag = (text[: m.start()] if m else text).strip()
    vm = _VERSION_RE.fullmatch(tag)
    if vm is None or int(vm.group(1)) <= 0:
        shown = tag if len(tag) <= 40 else tag[:40] + "..."
        raise CorruptFileError(
            f"operator metadata does not start with a version line such as 'v1' (got {shown!r})",
            path,
            offset=0,
        )
    parser = _PARSERS.get(int(vm.group(1)))
    if parser is None:
        raise UnsupportedVersionError(
            f"operator metadata version {tag!r} is not supported (statelens reads v1, v2)", path, offset=0
        )
    body_char = m.end() if m else len(text)
    body = text[body_char:]
    offset = len(text[:body_char].encode("utf-8"))
    if not body.strip():
        raise TruncatedFileError("operator metadata ends after its version line (no JSON)", path, offset)
    try:
        meta = json.loads(body)
    except json.JSONDecodeError as err:
        where = offset + len(body[: err.pos].encode("utf-8"))
        raise CorruptFileError(f"bad JSON in operator metadata: {err.msg}", path, where) from err
    except RecursionError as err:
        raise CorruptFileError("operator metadata JSON is nested too deeply", path, offset) from err
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        raise CorruptFileError(f"bad JSON in operator metadata: {err}", path, offset) from err
    if not isinstance(meta, dict):
        raise CorruptFileError("operator metadata is not a JSON object", path, offset)
    return parser(meta, path, offset)


def schema_file_name(uri: str) -> str:
    """The file name at the end of a schema file URI (``.../_stateSchema/default/0_6b12d3c5-...``).

    The operator metadata stores absolute URIs of the machine that wrote the checkpoint (docs/format.md §8.2);
    only the name is meaningful once the checkpoint is copied elsewhere.

    Parameters
    ----------
    uri : str
        E.g. ``file:/data/ck/state/0/_stateSchema/default/0_6b12d3c5-...`` or ``s3a://bucket/ck/...``.

    Returns
    -------
    str
        The last path segment.

    Raises
    ------
    CorruptFileError
        The URI has no file name.
    """
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    if not name or name.endswith(":"):
        raise CorruptFileError(f"schema file URI {uri!r} has no file name")
    return name


def schema_file_relpath(operator_id: int, store_name: str, uri: str) -> str:
    """Where a schema file named in operator metadata lives, relative to the checkpoint root.

    Parameters
    ----------
    operator_id : int
        The operator.
    store_name : str
        The store the URI was listed under.
    uri : str
        The URI from ``state_schema_file_paths``.

    Returns
    -------
    str
        ``state/<operator_id>/_stateSchema/<store_name>/<file name>``; the folder names are taken from
        the URI when it ends in ``state/<op>/_stateSchema/<folder>/<file name>`` (as Spark writes it),
        else from the arguments.

    Raises
    ------
    CorruptFileError
        The URI has no file name.
    """
    name = schema_file_name(uri)
    m = _SCHEMA_URI_TAIL_RE.search(uri.rstrip("/"))
    if m is not None:
        return m.group(0).lstrip("/")
    return f"state/{operator_id}/_stateSchema/{store_name}/{name}"

"""One fixed-width integer field of stored records, read from their bytes without decoding the rest
(:meth:`readers.scan.StateScan.field_reader`): the timeout or event time of every key of a store, version
after version, costs one slot read per record.

The layout is the store's UnsafeRow layout compiled from its schema (docs/format.md §6.1), the same the
store's decoder uses (flatMapGroupsWithState v1's long ``timeoutTimestamp`` included).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["field_reader", "int_reader"]

_I64 = struct.Struct("<q")


def field_reader(
    files: Any, side: Literal["key", "value"], path: tuple[int, ...]
) -> Callable[[bytes], int | None]:
    """An :func:`int_reader` over the compiled key or value layout of one store's files.

    Raises
    ------
    SchemaMismatchError
        The store has no schema file.
    """
    key_layout, value_layout = files.layouts()
    return int_reader(key_layout if side == "key" else value_layout, path)


def int_reader(layout: Any, path: tuple[int, ...]) -> Callable[[bytes], int | None]:
    """A function reading one fixed-width integer field of a raw UnsafeRow by positional path.

    Follows nested structs through their offset/size words (docs/format.md §6.1), so the time column of a
    key or value is read without decoding the rest of the row. Returns ``None`` for null or out-of-range.
    """
    steps = []
    rl = layout
    for depth, index in enumerate(path):
        fl = rl.fields[index]
        steps.append((fl.slot, fl.null_word, fl.null_bit))
        if depth < len(path) - 1:
            rl = fl.type.row

    if len(steps) == 1:
        slot, word, bit = steps[0]
        unpack = _I64.unpack_from
        need = max(slot, 8 * word) + 8

        def read_top(data: bytes) -> int | None:
            if len(data) < need or (unpack(data, 8 * word)[0] >> bit) & 1:
                return None
            return int(unpack(data, slot)[0])

        return read_top

    def read(data: bytes) -> int | None:
        base = 0
        n = len(data)
        for depth, (slot, word, bit) in enumerate(steps):
            wpos = base + 8 * word
            if wpos + 8 > n or base + slot + 8 > n:
                return None
            if (_I64.unpack_from(data, wpos)[0] >> bit) & 1:
                return None
            raw = _I64.unpack_from(data, base + slot)[0]
            if depth == len(steps) - 1:
                return int(raw)
            base = base + ((raw >> 32) & 0xFFFFFFFF)
        return None  # pragma: no cover

    return read

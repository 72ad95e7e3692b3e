"""Decompress Spark state-store files: lz4, zstd, snappy and lzf streams, chosen by their magic bytes.

Every HDFS-backed state file (``<v>.delta``, ``<v>.snapshot``) and every RocksDB changelog
(``<v>[_<uuid>].changelog``) is one byte stream written through Spark's
``org.apache.spark.io.CompressionCodec`` (``core/src/main/scala/org/apache/spark/io/CompressionCodec.scala``),
configured by ``spark.sql.streaming.stateStore.compression.codec``. The codec is not recorded in the
file (``docs/format.md`` §3.2, §11 item 3), so it is picked here from the in-band
magic; the value from the offsets ``conf`` is only a hint that makes error messages better.

Formats, as Spark 2.x-4.x write them (docs/format.md §3.2):

* ``lz4`` - ``LZ4CompressionCodec`` -> lz4-java ``net.jpountz.lz4.LZ4BlockOutputStream``: blocks with a
  21-byte header (``LZ4Block`` magic, token = method | log2(blockSize) - 10, compressed and original
  length int32 LE, XXHash32(seed ``0x9747B28C``) ``& 0x0FFFFFFF`` of the original bytes), RAW or LZ4
  payload, an all-zero end block; streams may be concatenated (``LZ4BlockInputStream`` with
  concatenation enabled). Header checks follow ``LZ4BlockInputStream.refill``.
* ``zstd`` - ``ZStdCompressionCodec`` -> zstd-jni ``ZstdOutputStream``: standard zstd frames (RFC 8878)
  without a content size; frames and their blocks are walked here, then decoded by ``zstandard``.
* ``snappy`` - ``SnappyCompressionCodec`` -> snappy-java ``org.xerial.snappy.SnappyOutputStream``:
  16-byte header (``82 'SNAPPY' 00``, version and compatible version int32 BE), then
  ``[int32 BE length][raw Snappy block]`` chunks; a repeated header starts a concatenated stream
  (``SnappyInputStream.hasNextChunk``). Blocks are decoded with ``cramjam.snappy.decompress_raw``.
* ``lzf`` - ``LZFCompressionCodec`` -> compress-lzf ``com.ning.compress.lzf.LZFOutputStream``: chunks
  ``ZV 00 <len u16 BE> <stored>`` or ``ZV 01 <clen u16 BE> <ulen u16 BE> <LZF>``. No maintained Python
  library decodes this chunk format (``cramjam`` has no LZF; the ``python-lzf`` bindings decode only raw
  liblzf blocks and are not a dependency), so the raw LZF blocks are decoded by the small pure-Python
  :func:`_lzf_block` below; its output per chunk is bounded by the chunk's declared 64 KiB.

Safety: every declared size is checked against the bytes left and against ``max_output_bytes`` before
anything is allocated (decompression bombs raise :class:`~readers.errors.LimitExceededError`). Every
error is a typed :class:`~readers.errors.StatelensError` with the file ``path`` and the compressed byte
``offset`` of the block (or frame, or chunk) header at fault; library exceptions are chained, never
leaked.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam
import lz4.block
import xxhash
import zstandard

from statelens.readers.errors import (
    BadMagicError,
    ChecksumError,
    CorruptFileError,
    LimitExceededError,
    StatelensError,
    TruncatedFileError,
    UnknownCodecError,
)

__all__ = ["CODECS", "DEFAULT_LIMIT", "compress", "decompress", "normalize_codec_name", "sniff_codec"]

#: Codecs Spark's state stores write, by their short (conf) names.
CODECS = ("lz4", "lzf", "snappy", "zstd")

#: Default cap on the decompressed size of one file (1 GiB).
DEFAULT_LIMIT = 1 << 30

_LZ4_MAGIC = b"LZ4Block"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_LZF_MAGIC = b"ZV"
_MAGICS = {"lz4": _LZ4_MAGIC, "zstd": _ZSTD_MAGIC, "snappy": _SNAPPY_MAGIC, "lzf": _LZF_MAGIC}

# Spark's CompressionCodec.shortCompressionCodecNames: short names are matched case-insensitively,
# anything else is loaded as a class name (case-sensitive).
_CLASS_NAMES = {
    "org.apache.spark.io.LZ4CompressionCodec": "lz4",
    "org.apache.spark.io.LZFCompressionCodec": "lzf",
    "org.apache.spark.io.SnappyCompressionCodec": "snappy",
    "org.apache.spark.io.ZStdCompressionCodec": "zstd",
}

# lz4-java LZ4BlockOutputStream: magic, token, compressed len, original len, checksum (all LE).
_LZ4_HEADER = struct.Struct("<8sBiiI")
_LZ4_SEED = 0x9747B28C
_LZ4_METHOD_RAW = 0x10
_LZ4_METHOD_LZ4 = 0x20

_ZSTD_FRAME_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_MAX_WINDOW = 1 << 27  # zstd's own default decoder limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT)
_ZSTD_READ = 1 << 20

_I32_BE = struct.Struct(">i")
_U16_BE = struct.Struct(">H")
_SNAPPY_HEADER = struct.Struct(">8sii")
_SNAPPY_MAGIC_HEAD = _I32_BE.unpack(_SNAPPY_MAGIC[:4])[0]

_Fail = Callable[[type[StatelensError], str, int], StatelensError]


def normalize_codec_name(name: str | None) -> str | None:
    """Turn a ``spark.sql.streaming.stateStore.compression.codec`` value into a short codec name.

    Parameters
    ----------
    name : str or None
        A short name (``lz4``, ``LZ4``...) or a Spark codec class name
        (``org.apache.spark.io.ZStdCompressionCodec``...), as Spark accepts them.

    Returns
    -------
    str or None
        One of :data:`CODECS`, or ``None`` when ``name`` is ``None`` or names no codec Spark ships.
    """
    if name is None:
        return None
    text = name.strip()
    if text.lower() in CODECS:
        return text.lower()
    return _CLASS_NAMES.get(text)


def sniff_codec(data: bytes | memoryview) -> str | None:
    """Name the codec whose magic bytes start ``data``.

    Parameters
    ----------
    data : bytes-like
        The first bytes of a state file (8 are enough).

    Returns
    -------
    str or None
        ``lz4``, ``zstd``, ``snappy`` or ``lzf``; ``None`` if no magic matches.
    """
    head = bytes(data[:8])
    for codec, magic in _MAGICS.items():
        if head.startswith(magic):
            return codec
    return None


def decompress(
    data: bytes | bytearray | memoryview,
    path: str,
    codec: str | None = None,
    *,
    max_output_bytes: int = DEFAULT_LIMIT,
) -> bytes:
    """Decompress a whole state file, choosing the codec from its magic bytes.

    Parameters
    ----------
    data : bytes-like
        The complete compressed file.
    path : str
        The file's path, put into every error.
    codec : str, optional
        The codec the offsets ``conf`` names (short or class name). Only used to explain errors:
        the magic in the file always decides.
    max_output_bytes : int
        Refuse files that decompress, or declare they decompress, to more than this many bytes.

    Returns
    -------
    bytes
        The decompressed stream.

    Raises
    ------
    TruncatedFileError
        The file is empty, or ends inside a header, a block or before the lz4 end block.
    BadMagicError
        A block, frame or chunk header does not start with its magic, or the file starts with no
        magic while ``codec`` names a known codec.
    UnknownCodecError
        The file starts with no known magic and ``codec`` is absent or unknown.
    ChecksumError
        An lz4 block's XXHash32 (or a zstd frame's checksum) does not match.
    CorruptFileError
        A header holds impossible values, or the compressed bytes do not decode.
    LimitExceededError
        A declared or actual size is beyond ``max_output_bytes`` (or a zstd window beyond 128 MiB).
    """
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    hint = normalize_codec_name(codec)
    if len(view) == 0:
        raise TruncatedFileError(
            "file is empty; a state file holds at least a compressed end marker", path, 0
        )
    sniffed = sniff_codec(view)
    if sniffed is None:
        _raise_no_magic(bytes(view[:8]), path, codec, hint)

    note = ""
    if codec is not None and hint != sniffed:
        note = f" (the offsets conf names codec {codec!r}, but the file's magic is {sniffed}'s)"

    def fail(cls: type[StatelensError], message: str, offset: int) -> StatelensError:
        return cls(message + note, path, offset, codec=sniffed)

    assert sniffed is not None  # _raise_no_magic raised otherwise
    decoder = _DECODERS[sniffed]
    parts = decoder(view, fail, max_output_bytes)
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def _raise_no_magic(head: bytes, path: str, codec: str | None, hint: str | None) -> None:
    found = head.hex(" ")
    for name, magic in _MAGICS.items():
        if len(head) < len(magic) and magic.startswith(head):
            raise TruncatedFileError(
                f"file is only {len(head)} bytes, cut inside the {len(magic)}-byte {name} magic", path, 0
            )
    if hint is not None:
        magic = _MAGICS[hint]
        raise BadMagicError(
            f"expected the {hint} magic {magic.hex(' ')} (offsets conf codec {codec!r}), found {found}; "
            f"the file is not compressed by any codec Spark writes ({', '.join(CODECS)})",
            path,
            0,
        )
    if codec is not None:
        raise UnknownCodecError(
            f"the offsets conf names codec {codec!r}, which is none of {', '.join(CODECS)}, "
            f"and the file starts with {found}, which is no known magic",
            path,
            0,
        )
    raise UnknownCodecError(
        f"file starts with {found}, which is the magic of none of {', '.join(CODECS)}", path, 0
    )


def _check_budget(fail: _Fail, total: int, size: int, limit: int, what: str, offset: int) -> None:
    if total + size > limit:
        raise fail(
            LimitExceededError,
            f"{what} declares {size} decompressed bytes, which with the {total} already decoded exceeds "
            f"the limit of {limit} bytes (pass a larger max_output_bytes if the file is genuine)",
            offset,
        )


def _cut_header(
    fail: _Fail, view: memoryview, pos: int, magic: bytes, size: int, what: str
) -> StatelensError:
    """Error for fewer than ``size`` bytes left at ``pos``: truncated if they could start a header."""
    left = bytes(view[pos : pos + size])
    if magic.startswith(left[: len(magic)]):
        return fail(
            TruncatedFileError, f"file ends inside a {what} header ({len(left)} of {size} bytes)", pos
        )
    return fail(BadMagicError, f"expected a {what} header ({magic.hex(' ')}), found {left.hex(' ')}", pos)


def _decode_lz4(view: memoryview, fail: _Fail, limit: int) -> list[bytes]:
    n = len(view)
    pos = 0
    total = 0
    parts: list[bytes] = []
    ended = False
    unpack = _LZ4_HEADER.unpack_from
    while pos < n:
        if n - pos < _LZ4_HEADER.size:
            raise _cut_header(fail, view, pos, _LZ4_MAGIC, _LZ4_HEADER.size, "LZ4Block")
        magic, token, clen, dlen, check = unpack(view, pos)
        if magic != _LZ4_MAGIC:
            raise fail(BadMagicError, f"expected an LZ4Block block header, found {magic.hex(' ')}", pos)
        method = token & 0xF0
        block_max = 1 << (10 + (token & 0x0F))
        if method not in (_LZ4_METHOD_RAW, _LZ4_METHOD_LZ4):
            raise fail(CorruptFileError, f"LZ4Block token 0x{token:02x} has an unknown method", pos)
        if clen < 0 or dlen < 0:
            raise fail(
                CorruptFileError, f"LZ4Block lengths are negative (compressed {clen}, original {dlen})", pos
            )
        if clen == 0 and dlen == 0:
            if check != 0:
                raise fail(CorruptFileError, f"LZ4Block end block has a non-zero checksum 0x{check:08x}", pos)
            pos += _LZ4_HEADER.size
            ended = True
            continue
        if clen == 0 or dlen == 0:
            raise fail(
                CorruptFileError, f"LZ4Block block has compressed {clen} but original {dlen} bytes", pos
            )
        _check_budget(fail, total, dlen, limit, "LZ4Block block", pos)
        if dlen > block_max:
            raise fail(
                CorruptFileError,
                f"LZ4Block block declares {dlen} original bytes, more than its block size {block_max}",
                pos,
            )
        if method == _LZ4_METHOD_RAW and clen != dlen:
            raise fail(
                CorruptFileError, f"stored LZ4Block block has compressed {clen} != original {dlen}", pos
            )
        start = pos + _LZ4_HEADER.size
        if start + clen > n:
            raise fail(
                TruncatedFileError,
                f"LZ4Block block declares {clen} compressed bytes but only {n - start} remain",
                pos,
            )
        payload = view[start : start + clen]
        if method == _LZ4_METHOD_RAW:
            block = bytes(payload)
        else:
            try:
                block = lz4.block.decompress(payload, uncompressed_size=dlen)
            except lz4.block.LZ4BlockError as err:
                raise fail(CorruptFileError, f"LZ4Block block does not decompress: {err}", pos) from err
            if len(block) != dlen:
                raise fail(
                    CorruptFileError,
                    f"LZ4Block block decompressed to {len(block)} bytes, header says {dlen}",
                    pos,
                )
        actual = xxhash.xxh32_intdigest(block, _LZ4_SEED) & 0x0FFFFFFF
        if actual != check:
            raise fail(
                ChecksumError,
                f"LZ4Block block checksum mismatch: header 0x{check:08x}, bytes hash to 0x{actual:08x}",
                pos,
            )
        parts.append(block)
        total += dlen
        pos = start + clen
        ended = False
    if not ended:
        raise fail(TruncatedFileError, "LZ4Block stream ends without its end block", n)
    return parts


def _zstd_frame_end(view: memoryview, pos: int, fail: _Fail) -> tuple[int, int | None, bool]:
    """Walk one zstd frame's header and block headers; return (end, content size, has checksum)."""
    n = len(view)
    p = pos + 4
    if p >= n:
        raise fail(TruncatedFileError, "file ends inside a zstd frame header", pos)
    fhd = view[p]
    fcs_flag = fhd >> 6
    single_segment = (fhd >> 5) & 1
    if (fhd >> 3) & 1:
        raise fail(CorruptFileError, f"zstd frame header descriptor 0x{fhd:02x} sets the reserved bit", pos)
    has_checksum = bool((fhd >> 2) & 1)
    did_size = (0, 1, 2, 4)[fhd & 3]
    fcs_size = (single_segment, 2, 4, 8)[fcs_flag]
    header_len = 1 + (0 if single_segment else 1) + did_size + fcs_size
    if p + header_len > n:
        raise fail(TruncatedFileError, "file ends inside a zstd frame header", pos)
    window = 0
    if not single_segment:
        wd = view[p + 1]
        base = 1 << (10 + (wd >> 3))
        window = base + (base >> 3) * (wd & 7)
    content_size: int | None = None
    if fcs_size:
        raw = bytes(view[p + header_len - fcs_size : p + header_len])
        content_size = int.from_bytes(raw, "little") + (256 if fcs_size == 2 else 0)
        if single_segment:
            window = content_size
    if window > _ZSTD_MAX_WINDOW:
        raise fail(
            LimitExceededError,
            f"zstd frame declares a {window}-byte window, beyond the {_ZSTD_MAX_WINDOW}-byte decoder limit",
            pos,
        )
    p += header_len
    while True:
        if p + 3 > n:
            raise fail(TruncatedFileError, "file ends inside a zstd block header", p)
        bh = view[p] | (view[p + 1] << 8) | (view[p + 2] << 16)
        block_type = (bh >> 1) & 3
        block_size = bh >> 3
        if block_type == 3:
            raise fail(CorruptFileError, "zstd block has the reserved block type 3", p)
        if block_size > _ZSTD_BLOCK_MAX:
            raise fail(CorruptFileError, f"zstd block size {block_size} exceeds the 128 KiB maximum", p)
        stored = 1 if block_type == 1 else block_size
        if p + 3 + stored > n:
            raise fail(
                TruncatedFileError,
                f"zstd block declares {stored} bytes but only {n - p - 3} remain",
                p,
            )
        p += 3 + stored
        if bh & 1:
            break
    if has_checksum:
        if p + 4 > n:
            raise fail(TruncatedFileError, "file ends inside a zstd frame checksum", p)
        p += 4
    return p, content_size, has_checksum


def _decode_zstd(view: memoryview, fail: _Fail, limit: int) -> list[bytes]:
    n = len(view)
    pos = 0
    total = 0
    parts: list[bytes] = []
    dctx = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    while pos < n:
        if n - pos < 4:
            raise _cut_header(fail, view, pos, _ZSTD_MAGIC, 4, "zstd frame")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if n - pos < 8:
                raise fail(TruncatedFileError, "file ends inside a zstd skippable frame header", pos)
            size = int.from_bytes(view[pos + 4 : pos + 8], "little")
            if pos + 8 + size > n:
                raise fail(
                    TruncatedFileError, f"zstd skippable frame declares {size} bytes past the end", pos
                )
            pos += 8 + size
            continue
        if magic != _ZSTD_FRAME_MAGIC:
            found = bytes(view[pos : pos + 4]).hex(" ")
            raise fail(BadMagicError, f"expected a zstd frame ({_ZSTD_MAGIC.hex(' ')}), found {found}", pos)
        end, content_size, has_checksum = _zstd_frame_end(view, pos, fail)
        if content_size is not None:
            _check_budget(fail, total, content_size, limit, "zstd frame", pos)
        budget = limit - total
        got = 0
        try:
            with dctx.stream_reader(view[pos:end], read_across_frames=False) as reader:
                while True:
                    piece = reader.read(min(_ZSTD_READ, budget - got + 1))
                    if not piece:
                        break
                    got += len(piece)
                    if got > budget:
                        raise fail(
                            LimitExceededError,
                            f"zstd frame decompresses to more than the {budget} bytes left of the "
                            f"{limit}-byte limit (pass a larger max_output_bytes if the file is genuine)",
                            pos,
                        )
                    parts.append(piece)
        except zstandard.ZstdError as err:
            cls = ChecksumError if has_checksum and "checksum" in str(err).lower() else CorruptFileError
            raise fail(cls, f"zstd frame does not decompress: {err}", pos) from err
        if content_size is not None and got != content_size:
            raise fail(
                CorruptFileError, f"zstd frame decompressed to {got} bytes, header says {content_size}", pos
            )
        total += got
        pos = end
    return parts


def _snappy_header(view: memoryview, pos: int, fail: _Fail) -> None:
    if len(view) - pos < _SNAPPY_HEADER.size:
        raise _cut_header(fail, view, pos, _SNAPPY_MAGIC, _SNAPPY_HEADER.size, "snappy-java stream")
    magic, version, _compatible = _SNAPPY_HEADER.unpack_from(view, pos)
    if magic != _SNAPPY_MAGIC:
        raise fail(BadMagicError, f"expected a snappy-java stream header, found {magic.hex(' ')}", pos)
    if version < 1:
        raise fail(
            CorruptFileError, f"snappy-java stream header has version {version}, at least 1 is required", pos
        )


def _snappy_length(view: memoryview, start: int, end: int) -> int | None:
    """The varint original length at the start of a raw Snappy block, or None if malformed."""
    value = 0
    for i in range(5):
        if start + i >= end:
            return None
        byte = view[start + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value if value < (1 << 32) else None
    return None


def _decode_snappy(view: memoryview, fail: _Fail, limit: int) -> list[bytes]:
    n = len(view)
    _snappy_header(view, 0, fail)
    pos = _SNAPPY_HEADER.size
    total = 0
    parts: list[bytes] = []
    while pos < n:
        if n - pos < 4:
            raise fail(
                TruncatedFileError, f"file ends inside a snappy chunk length ({n - pos} of 4 bytes)", pos
            )
        clen = _I32_BE.unpack_from(view, pos)[0]
        if clen == _SNAPPY_MAGIC_HEAD:
            _snappy_header(view, pos, fail)  # a concatenated stream starts here
            pos += _SNAPPY_HEADER.size
            continue
        if clen <= 0:
            raise fail(CorruptFileError, f"snappy chunk length {clen} is not positive", pos)
        start = pos + 4
        if start + clen > n:
            raise fail(
                TruncatedFileError, f"snappy chunk declares {clen} bytes but only {n - start} remain", pos
            )
        dlen = _snappy_length(view, start, start + clen)
        if dlen is None:
            raise fail(CorruptFileError, "snappy chunk does not start with a valid length varint", pos)
        _check_budget(fail, total, dlen, limit, "snappy chunk", pos)
        try:
            block = bytes(cramjam.snappy.decompress_raw(view[start : start + clen]))
        except cramjam.DecompressionError as err:
            raise fail(CorruptFileError, f"snappy chunk does not decompress: {err}", pos) from err
        if len(block) != dlen:
            raise fail(
                CorruptFileError, f"snappy chunk decompressed to {len(block)} bytes, header says {dlen}", pos
            )
        parts.append(block)
        total += dlen
        pos = start + clen
    return parts


def _lzf_block(src: bytes, size: int) -> bytes | str:
    """Decode one raw LZF block (liblzf ``lzf_decompress``) to exactly ``size`` bytes.

    Returns the bytes, or a message saying why the block is corrupt. Each token is a literal run
    (``ctrl < 32``: ``ctrl + 1`` bytes follow) or a back-reference (length ``(ctrl >> 5) + 2``, plus
    the next byte when that is 9; distance from the low 5 bits and the next byte, + 1). Output stops
    growing within 264 bytes of ``size`` (literal runs are bounded by the input).
    """
    out = bytearray()
    olen = 0
    i = 0
    n = len(src)
    while i < n:
        ctrl = src[i]
        i += 1
        if ctrl < 32:
            j = i + ctrl + 1
            if j > n:
                return f"literal run of {ctrl + 1} bytes passes the end of the block"
            out += src[i:j]
            olen += j - i
            i = j
            continue
        length = (ctrl >> 5) + 2
        if length == 9:
            if i >= n:
                return "back-reference length passes the end of the block"
            length += src[i]
            i += 1
        if i >= n:
            return "back-reference distance passes the end of the block"
        distance = ((ctrl & 0x1F) << 8) + src[i] + 1
        i += 1
        start = olen - distance
        if start < 0:
            return f"back-reference reaches {-start} bytes before the start of the block"
        if distance >= length:
            out += out[start : start + length]
        else:  # overlapping copy repeats the last `distance` bytes
            pattern = out[start:]
            reps, rest = divmod(length, distance)
            out += pattern * reps + pattern[:rest]
        olen += length
        if olen > size:
            return f"block decodes to more than its declared {size} bytes"
    if olen != size:
        return f"block decodes to {olen} bytes, header says {size}"
    return bytes(out)


def _decode_lzf(view: memoryview, fail: _Fail, limit: int) -> list[bytes]:
    n = len(view)
    pos = 0
    total = 0
    parts: list[bytes] = []
    while pos < n:
        if n - pos < 5:
            raise _cut_header(fail, view, pos, _LZF_MAGIC, 5, "LZF chunk")
        if view[pos] != 0x5A or view[pos + 1] != 0x56:
            found = bytes(view[pos : pos + 3]).hex(" ")
            raise fail(BadMagicError, f"expected an LZF chunk header (5a 56), found {found}", pos)
        kind = view[pos + 2]
        if kind == 0:
            clen = dlen = _U16_BE.unpack_from(view, pos + 3)[0]
            start = pos + 5
        elif kind == 1:
            if n - pos < 7:
                raise fail(
                    TruncatedFileError,
                    f"file ends inside a compressed LZF chunk header ({n - pos} of 7)",
                    pos,
                )
            clen = _U16_BE.unpack_from(view, pos + 3)[0]
            dlen = _U16_BE.unpack_from(view, pos + 5)[0]
            start = pos + 7
        else:
            raise fail(
                CorruptFileError, f"LZF chunk type {kind} is neither 0 (stored) nor 1 (compressed)", pos
            )
        _check_budget(fail, total, dlen, limit, "LZF chunk", pos)
        if start + clen > n:
            raise fail(
                TruncatedFileError, f"LZF chunk declares {clen} bytes but only {n - start} remain", pos
            )
        if kind == 0:
            block: bytes | str = bytes(view[start : start + clen])
        else:
            block = _lzf_block(bytes(view[start : start + clen]), dlen)
        if isinstance(block, str):
            raise fail(CorruptFileError, f"LZF chunk is corrupt: {block}", pos)
        parts.append(block)
        total += dlen
        pos = start + clen
    return parts


# -- writing (statelens prune): the same framings, as Spark's codecs write them ------------------------

#: Spark's default ``spark.io.compression.lz4.blockSize`` / ``...snappy.blockSize`` (32 KiB).
_BLOCK = 32 * 1024
_LZF_CHUNK = 0xFFFF


def compress(data: bytes, codec: str) -> bytes:
    """Compress a whole record stream as Spark's ``CompressionCodec`` for ``codec`` frames it, so that
    Spark (and :func:`decompress`) reads it back.

    Parameters
    ----------
    data : bytes
        The decompressed stream (a delta's or changelog's records and end marker).
    codec : str
        ``lz4``, ``zstd``, ``snappy`` or ``lzf`` (short or Spark class name).

    Returns
    -------
    bytes
        lz4: lz4-java ``LZ4BlockOutputStream`` blocks of at most 32 KiB with their XXH32 checksums and
        the end block; zstd: one standard frame; snappy: the snappy-java stream header and
        ``[length][raw block]`` chunks; lzf: stored ``ZV 00`` chunks (a form compress-lzf reads).

    Raises
    ------
    UnknownCodecError
        ``codec`` names no codec Spark ships.
    """
    name = normalize_codec_name(codec)
    if name == "lz4":
        level = _BLOCK.bit_length() - 1 - 10
        out = bytearray()
        for i in range(0, len(data), _BLOCK):
            block = data[i : i + _BLOCK]
            packed = lz4.block.compress(block, store_size=False)
            method = _LZ4_METHOD_LZ4
            if len(packed) >= len(block):
                packed, method = block, _LZ4_METHOD_RAW
            check = xxhash.xxh32_intdigest(block, _LZ4_SEED) & 0x0FFFFFFF
            out += _LZ4_HEADER.pack(_LZ4_MAGIC, method | level, len(packed), len(block), check)
            out += packed
        out += _LZ4_HEADER.pack(_LZ4_MAGIC, _LZ4_METHOD_RAW | level, 0, 0, 0)
        return bytes(out)
    if name == "zstd":
        return bytes(zstandard.ZstdCompressor().compress(data))
    if name == "snappy":
        out = bytearray(_SNAPPY_HEADER.pack(_SNAPPY_MAGIC, 1, 1))
        for i in range(0, len(data), _BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _BLOCK]))
            out += _I32_BE.pack(len(block)) + block
        return bytes(out)
    if name == "lzf":
        out = bytearray()
        for i in range(0, len(data), _LZF_CHUNK):
            chunk = data[i : i + _LZF_CHUNK]
            out += _LZF_MAGIC + b"\x00" + _U16_BE.pack(len(chunk)) + chunk
        return bytes(out)
    raise UnknownCodecError(f"cannot write codec {codec!r}: Spark ships {', '.join(CODECS)}")


_DECODERS: dict[str, Callable[[memoryview, _Fail, int], list[bytes]]] = {
    "lz4": _decode_lz4,
    "zstd": _decode_zstd,
    "snappy": _decode_snappy,
    "lzf": _decode_lzf,
}

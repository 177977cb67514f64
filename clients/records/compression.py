"""Kafka's compression codecs for RecordBatch v2, bounded decompression, and batch helpers.

A compressed batch keeps its 61-byte header plain (:mod:`clients.records.batch`); the
records section after it is compressed as a whole, bits 0-2 of ``attributes`` name the
codec, ``batch_length`` counts the compressed bytes and the CRC-32C covers them.  What is
written and what is read, per codec id::

    id  name    written here                          read here
    0   none    the records as they are               the same
    1   gzip    one gzip member (RFC 1952), level 6   gzip, several members read as one
    2   snappy  xerial framing, as Kafka's Java       xerial framing (any version/compat
                client writes it: 8-byte magic         ints, concatenated streams) or one
                82 'SNAPPY' 00, int32 version 1,       raw snappy block (what librdkafka
                int32 compat 1, then per 32 KiB of     sends)
                input an int32 length + raw block
    3   lz4     LZ4 frame, independent 64 KiB         an LZ4 frame (linked blocks too)
                blocks with block checksums, no
                content size (Kafka's Java reader
                decompresses each block on its own)
    4   zstd    zstd frame, level 3 (Kafka's           zstd frames
                default), content size declared
    5-7 -       never                                 UNSUPPORTED_COMPRESSION_TYPE (76)

Decompression is bounded: at most ``max_bytes`` of output (default
:data:`MAX_DECOMPRESSED_BYTES`) is ever allocated or produced; more is a
:class:`DecompressedSizeError` (a :class:`CorruptRecordError` for readers; a leader
refuses such a batch as MESSAGE_TOO_LARGE, :mod:`storage.log.validator`) naming the codec
and the limit; any corrupt stream is a :class:`CorruptRecordError`.  The output buffer
is sized from the stream's own size field when it has one (raw snappy preambles, zstd and
LZ4 content sizes, the gzip trailer; never above what the format can expand the input to)
or 4x the input, and grown (4x, up to ``max_bytes``) when it was too small; a declared
size above ``max_bytes`` fails before any work.

One library does all four codecs: cramjam (Rust: flate2, snap, lz4, zstd), a single
binary wheel instead of python-snappy + lz4 + zstandard.

Costs: one compression or decompression pass in the library (the GIL is held), plus one
copy of the output into ``bytes``; bounded decompression restarts at most a few times
when the size guess was low (<= 1.4x the work).  Pure functions: thread-safe.
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam

from clients.protocol.errors import CorruptRecordError, InvalidRecordError
from clients.records.batch import (
    COMPRESSION_CODECS,
    COMPRESSION_MASK,
    HEADER_SIZE,
    BatchHeader,
    Buffer,
    assemble_batch,
    read_header,
    unsupported_compression,
    validate_batch,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
MAX_DECOMPRESSED_BYTES = 64 << 20  # per batch; a larger records section is refused
GZIP_LEVEL = 6  # java.util.zip's default, as Kafka's producer
ZSTD_LEVEL = 3  # Kafka's default compression.zstd.level
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1
XERIAL_BLOCK = 32 << 10  # input bytes per snappy block (snappy-java's default)
_MIN_GUESS = 64 << 10
# Most output one input byte can give: deflate ~1032 (258-byte matches in ~2 bits), LZ4
# ~255 (one length byte per 255 match bytes), snappy ~21.3 (3-byte copies of 64 bytes).
_MAX_RATIO = {GZIP: 1032, LZ4: 256, SNAPPY: 32}
_OUTPUT_FULL = "failed to write whole buffer"  # cramjam: *_into ran out of output room
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_INT32 = struct.Struct(">i")


class DecompressedSizeError(CorruptRecordError):
    """Compressed records that declare or decompress to more than the limit."""


def codec_name(codec: int) -> str:
    """Kafka's name of a codec id (``"codec 5"`` for ids Kafka does not define)."""
    return COMPRESSION_CODECS[codec] if 0 <= codec < len(COMPRESSION_CODECS) else f"codec {codec}"


def check_codec(codec: int) -> None:
    """InvalidRecordError with UNSUPPORTED_COMPRESSION_TYPE unless ``codec`` is 0-4."""
    if not 0 <= codec < len(COMPRESSION_CODECS):
        raise unsupported_compression(codec)


# -- compressing -----------------------------------------------------------------------


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """``data`` compressed with Kafka codec ``codec`` (0 returns it unchanged).

    ``level`` overrides the codec's default (gzip 1-9, lz4 0-16, zstd -7..22; ignored
    by snappy).  Codecs 5-7 raise InvalidRecordError (UNSUPPORTED_COMPRESSION_TYPE).
    """
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL if level is None else level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        lz4 = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        lz4.compress(data if isinstance(data, bytes) else bytes(data))  # it takes bytes only
        return bytes(lz4.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL if level is None else level))
    raise unsupported_compression(codec)


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data).cast("B")
    parts: list[Any] = [XERIAL_HEADER]  # bytes and cramjam.Buffer (a buffer too)
    for start in range(0, len(view), XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# -- decompressing ---------------------------------------------------------------------


def decompress(codec: int, data: Buffer, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """``data`` decompressed with Kafka codec ``codec``; at most ``max_bytes`` of output.

    Raises :class:`CorruptRecordError` naming the codec for a corrupt stream or one that
    decompresses to more than ``max_bytes``, and InvalidRecordError
    (UNSUPPORTED_COMPRESSION_TYPE) for codecs 5-7.
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if codec == NONE:
        if len(view) > max_bytes:
            raise _too_large(codec, max_bytes)
        return bytes(view)
    if codec == GZIP:
        hint = int.from_bytes(view[-4:], "little") if len(view) >= 18 else None  # ISIZE
        return _bounded(cramjam.gzip, codec, view, hint, max_bytes)
    if codec == SNAPPY:
        return _snappy_decompress(view, max_bytes)
    if codec == LZ4:
        return _bounded(cramjam.lz4, codec, view, _lz4_content_size(view), max_bytes, True)
    if codec == ZSTD:
        return _bounded(cramjam.zstd, codec, view, _zstd_content_size(view), max_bytes, True)
    raise unsupported_compression(codec)


def _too_large(codec: int, max_bytes: int, declared: int | None = None
               ) -> DecompressedSizeError:
    name = codec_name(codec)
    if declared is None:
        return DecompressedSizeError(
            f"{name}-compressed records decompress to more than the limit of {max_bytes} bytes"
        )
    return DecompressedSizeError(
        f"{name}-compressed records declare {declared} bytes, above the limit of {max_bytes} bytes"
    )


def _corrupt(codec: int, exc: Exception) -> CorruptRecordError:
    return CorruptRecordError(f"corrupt {codec_name(codec)}-compressed records: {exc}")


def _bounded(
    module: object,
    codec: int,
    view: memoryview,
    hint: int | None,
    max_bytes: int,
    declared: bool = False,
) -> bytes:
    """Decompress into a buffer of at most ``max_bytes``: sized by ``hint`` (a size the
    stream states; ``declared``: one the decoder enforces) or a guess, grown on overflow."""
    if hint is not None and declared and hint > max_bytes:
        raise _too_large(codec, max_bytes, hint)
    if hint is None:
        hint = max(4 * len(view), _MIN_GUESS)
    elif codec in _MAX_RATIO:  # a size the format cannot reach is a lie: do not allocate it
        hint = min(hint, _MAX_RATIO[codec] * len(view) + _MIN_GUESS)
    cap = min(hint, max_bytes)
    decompress_into = module.decompress_into  # type: ignore[attr-defined]
    while True:
        out = bytearray(cap + 1)  # one spare byte: a full buffer means there may be more
        try:
            n = decompress_into(view, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL not in str(exc):
                raise _corrupt(codec, exc) from None
            n = cap + 1
        if n <= cap:
            del out[n:]
            return bytes(out)
        if cap >= max_bytes:
            raise _too_large(codec, max_bytes)
        cap = min(max(4 * cap, _MIN_GUESS), max_bytes)


def _zstd_content_size(view: memoryview) -> int | None:
    """Frame_Content_Size of the first zstd frame, if its header declares one."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    single_segment = (descriptor >> 5) & 1
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    size = (single_segment, 2, 4, 8)[descriptor >> 6]
    if size == 0 or len(view) < pos + size:
        return None
    value = int.from_bytes(view[pos : pos + size], "little")
    return value + 256 if size == 2 else value


def _lz4_content_size(view: memoryview) -> int | None:
    """Content size of the first LZ4 frame, if its descriptor declares one (FLG bit 3)."""
    if len(view) < 15 or view[:4] != _LZ4_MAGIC or not view[4] & 0x08:
        return None
    return int.from_bytes(view[6:14], "little")


def _snappy_decompress(view: memoryview, max_bytes: int) -> bytes:
    """Xerial-framed snappy (Kafka's Java client, kafka-python, aiokafka) or one raw
    snappy block (librdkafka)."""
    if view[:8] != XERIAL_MAGIC:
        return bytes(_snappy_block(view, max_bytes, max_bytes))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError(
            f"corrupt snappy-compressed records: xerial header of {len(view)} bytes, "
            f"expected {len(XERIAL_HEADER)}"
        )
    pieces: list[bytearray] = []
    total, pos, end = 0, len(XERIAL_HEADER), len(view)
    while pos < end:
        if view[pos : pos + 8] == XERIAL_MAGIC:  # a concatenated stream's header
            pos += len(XERIAL_HEADER)
            continue
        if end - pos < 4:
            raise CorruptRecordError(
                f"corrupt snappy-compressed records: {end - pos} bytes after the last xerial "
                "block, too few for a block length"
            )
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError(
                f"corrupt snappy-compressed records: xerial block of {size} bytes at "
                f"position {pos - 4} runs past the end ({end} bytes)"
            )
        piece = _snappy_block(view[pos : pos + size], max_bytes - total, max_bytes)
        pieces.append(piece)
        total += len(piece)
        pos += size
    return b"".join(pieces)


def _snappy_block(block: memoryview, room: int, max_bytes: int) -> bytearray:
    """One raw snappy block, refused before decompressing when its preamble exceeds
    ``room`` (what is left of ``max_bytes``)."""
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise _corrupt(SNAPPY, exc) from None
    if size > room:
        raise _too_large(SNAPPY, max_bytes, size if room == max_bytes else None)
    if size > _MAX_RATIO[SNAPPY] * len(block):
        raise CorruptRecordError(
            f"corrupt snappy-compressed records: a {len(block)}-byte block declares {size} "
            "bytes, more than snappy can encode in it"
        )
    out = bytearray(size)
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise _corrupt(SNAPPY, exc) from None
    if written != size:  # pragma: no cover - the library checks the preamble itself
        raise CorruptRecordError(
            f"corrupt snappy-compressed records: {written} bytes, preamble says {size}"
        )
    return out


# -- batches ---------------------------------------------------------------------------


def plain_records(
    buf: Buffer, pos: int, header: BatchHeader, max_bytes: int = MAX_DECOMPRESSED_BYTES
) -> tuple[Buffer, int, int]:
    """The records section of the batch at ``pos`` (``header`` read there), uncompressed:
    ``(buffer, start, end)``, the caller's own ``buf`` when the batch is not compressed
    (nothing copied), else the decompressed bytes (``start`` 0).  Errors name the batch
    position and the codec."""
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos} claims {header.size_in_bytes} bytes, "
            f"only {len(buf) - pos} available"
        )
    codec = header.compression
    if codec == NONE:
        return buf, pos + HEADER_SIZE, end
    try:
        records = decompress(codec, memoryview(buf)[pos + HEADER_SIZE : end], max_bytes)
    except (CorruptRecordError, InvalidRecordError) as exc:
        raise type(exc)(f"batch at position {pos}: {exc.message}", exc.code) from None
    return records, 0, len(records)


def decompress_batch(
    buf: Buffer, pos: int = 0, max_bytes: int = MAX_DECOMPRESSED_BYTES, validate: bool = True
) -> bytes:
    """The batch at ``pos`` as an uncompressed batch: same header fields, codec 0, new
    ``batch_length`` and CRC (the batch itself when it is not compressed).  For tools
    that walk records byte by byte (the log cleaner, key checks of compacted topics)."""
    header = validate_batch(buf, pos) if validate else read_header(buf, pos)
    records, start, end = plain_records(buf, pos, header, max_bytes)
    if header.compression == NONE:
        return bytes(memoryview(buf)[pos : pos + header.size_in_bytes])
    return _rebuild(header, memoryview(records)[start:end], header.attributes & ~COMPRESSION_MASK)


def compress_batch(batch: Buffer, codec: int, level: int | None = None) -> bytes:
    """The uncompressed batch ``batch`` with its records compressed with ``codec``: same
    header fields, codec bits set, new ``batch_length`` and CRC."""
    header = validate_batch(batch)
    if header.compression != NONE:
        raise ValueError(f"batch is already {codec_name(header.compression)}-compressed")
    check_codec(codec)
    view = memoryview(batch)[HEADER_SIZE : header.size_in_bytes]
    return _rebuild(header, compress(codec, view, level), header.attributes | codec)


def _rebuild(header: BatchHeader, records: Buffer, attributes: int) -> bytes:
    return assemble_batch(
        records,
        record_count=header.record_count,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        attributes=attributes,
    )

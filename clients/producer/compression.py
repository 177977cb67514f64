"""The producer's ``compression_type``: codec names, and compressing a batch's records.

Kafka's codecs and their numbers (bits 0-2 of a batch's attributes)::

    none 0   gzip 1   snappy 2   lz4 3   zstd 4

What is compressed: everything after the 61-byte header (the records), as Kafka does;
the header stays plain, carries the codec in its attributes and the CRC covers the
compressed bytes.  *Choice*: when the compressed records are not smaller than the
plain ones (tiny or random data), the batch is sent uncompressed (codec 0), which every
reader accepts; Kafka's producer would send the larger compressed form.

The codecs themselves are :mod:`clients.records.compression`'s (the one place record
bytes are encoded and decoded: gzip level 6, snappy in xerial framing, LZ4 frames, zstd
level 3, as Kafka's Java producer writes them).

Costs: one compression pass over each batch's records, on the sender thread when the
batch closes (its first drain) or on the calling thread for ``send_bulk`` chunks.
Thread safety: pure functions.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from crc32c import crc32c

from clients.protocol.errors import InvalidConfigError
from clients.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODECS,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
)
from clients.records.compression import compress

COMPRESSION_TYPES = {name: codec for codec, name in enumerate(COMPRESSION_CODECS)}

# compress(codec, records bytes) -> compressed bytes
Compressor = Callable[[int, bytes], bytes]

_BATCH_LENGTH_OFFSET = 8


def compression_codec(name: object) -> int:
    """The codec number of a ``compression_type`` name (InvalidConfigError if unknown)."""
    if not isinstance(name, str) or name.lower() not in COMPRESSION_TYPES:
        raise InvalidConfigError(
            f"compression_type must be one of {', '.join(COMPRESSION_TYPES)}, got {name!r}"
        )
    return COMPRESSION_TYPES[name.lower()]


def compressor(codec: int) -> Compressor | None:
    """The function compressing with ``codec`` (None for ``none``)."""
    return None if codec == 0 else compress


def pack_records(
    memory: memoryview, size: int, codec: int, compress: Compressor
) -> tuple[int, int]:
    """Compress the records after the header of ``memory[:size]`` in place; returns
    (new size, codec for the attributes), or (``size``, 0) untouched when compressing
    does not make them smaller.  The header is not touched."""
    raw = bytes(memory[HEADER_SIZE:size])
    packed = compress(codec, raw)
    if len(packed) >= len(raw):
        return size, 0
    end = HEADER_SIZE + len(packed)
    memory[HEADER_SIZE:end] = packed
    return end, codec


def compress_records(memory: memoryview, size: int, codec: int, compress: Compressor) -> int:
    """Compress the records of the finished batch in ``memory[:size]`` in place (its
    batch length, attributes and CRC rewritten); returns the new size."""
    end, used = pack_records(memory, size, codec, compress)
    if not used:
        return size
    (attributes,) = struct.unpack_from(">h", memory, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", memory, ATTRIBUTES_OFFSET, (attributes & ~COMPRESSION_MASK) | used)
    struct.pack_into(">i", memory, _BATCH_LENGTH_OFFSET, end - LOG_OVERHEAD)
    struct.pack_into(">I", memory, CRC_OFFSET, crc32c(memory[ATTRIBUTES_OFFSET:end]))
    return end

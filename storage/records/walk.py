"""Walking a run of stored batches by their header fields, without a header object each.

:func:`header_fields` yields ``(position, fields)`` for each batch of a buffer of
consecutive RecordBatch v2 (from a batch boundary), ``fields`` being the 13 values of
:data:`clients.records.batch.HEADER` in its order (base_offset, batch_length,
partition_leader_epoch, magic, crc, attributes, last_offset_delta, base_timestamp,
max_timestamp, producer_id, producer_epoch, base_sequence, record_count).  It walks and
fails exactly as ``clients.records.batch.iter_batches(buf, validate=False)`` does (no
CRC check; a short header, a bad magic or batch length raises the codec's
:class:`CorruptRecordError`, a batch running past the buffer "partial batch"), so a
caller that needs a :class:`~clients.records.batch.BatchHeader` for only some batches
builds it for those (``BatchHeader(*fields)``).

Why: a ``BatchHeader`` (a frozen dataclass of 13 fields) costs about four times the
``struct`` unpack it is built from, and walks such as the producer-state rebuild at a
log's open look at most batches' producer id only.

Costs: one ``struct.unpack_from`` per batch.  A pure function: thread-safe (the caller
owns the buffer).
"""

from __future__ import annotations

from collections.abc import Iterator

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, Buffer, read_header

__all__ = ["PRODUCER_ID_FIELD", "header_fields"]

PRODUCER_ID_FIELD = 9  # index of producer_id in HEADER's fields


def header_fields(buf: Buffer) -> Iterator[tuple[int, tuple[int, ...]]]:
    """``(position, HEADER fields)`` of each batch in ``buf`` (see the module docstring)."""
    unpack = HEADER.unpack_from
    pos, total = 0, len(buf)
    while pos < total:
        if total - pos >= HEADER_SIZE:
            fields = unpack(buf, pos)
            length = fields[1]
            if fields[3] == MAGIC and length >= HEADER_SIZE - LOG_OVERHEAD and \
                    pos + length + LOG_OVERHEAD <= total:
                yield pos, fields
                pos += length + LOG_OVERHEAD
                continue
        read_header(buf, pos)  # raises the codec's error for a short or bad header
        raise CorruptRecordError(f"partial batch at position {pos}")

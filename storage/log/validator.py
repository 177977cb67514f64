"""Walking runs of record batches: append validation and segment rescans.

Both paths share one rule set so that whatever the log accepts on append is exactly what a
recovery scan later accepts.  A run of batches is plain concatenation of RecordBatch v2
(see :mod:`clients.records.batch` for the 61-byte header table); nothing else is stored in
a ``.log`` file::

    position   size                 content
    0          12 + batch_length_0  batch 0 (base_offset, batch_length, ... records)
    p1         12 + batch_length_1  batch 1, base_offset >= batch 0's last offset + 1
    ...

:func:`validate_append_batches` checks every batch of a produce/replication request up
front (length, magic, CRC-32C, counts, compression codec, size limit) so the append is
all-or-nothing; :class:`LeaderCheck` is that check for a leader append as a value (one
log's limits and timestamp window) that may run on another thread, its result handed to
the append (``checked``), which answers a :class:`LogAppendInfo`. A segment's rescan
(recovery, the scrubber) is :func:`storage.records.scan.scan_segment`, with the same
framing constants; recovery itself (which segments to rescan, what to cut) is in
:mod:`storage.log.recovery`.

Compressed batches (codecs 1-4, :mod:`clients.records.compression`) are stored exactly
as sent, never recompressed.  A leader append (``require_records``) checks that every
batch's records parse (decompressed first): as
many as ``record_count``, nothing after the last, offset deltas ``0 .. count - 1``
(Kafka would reassign inner offsets by recompressing; we refuse instead), refuses
control batches (INVALID_RECORD: only the leader writes markers, for WriteTxnMarkers)
and transactional batches without a producer id (INVALID_RECORD); whether a
transactional batch belongs to an ongoing transaction is the producer state's rule
(:mod:`replication.producer_state`).  A follower append and a recovery scan trust the
leader's check and the CRC.  Codec ids 5-7 are UNSUPPORTED_COMPRESSION_TYPE everywhere;
a recovery scan stops at them.

Bounds of a leader's check (issue 30: one Produce held the broker's event loop 1.55 s and
+228 MiB): a batch's ``record_count`` at most ``max_batch_records`` (65,536; read from the
header, before any decompression), its records inflating to at most
``max_decompressed_bytes`` (16 MiB; decompression stops there); both MESSAGE_TOO_LARGE,
which producers answer by splitting the batch.  A :class:`CheckBudget` spans a Produce
request's partitions: records plus record headers (``max_produce_records``), inflated
bytes (``max_produce_decompressed_bytes``), and the share of the check allowed on the
event loop (:class:`CheckDeferred` past it; :mod:`broker.handlers.record_checks`).  A
batch claiming fewer records than it holds is read for its count only and refused;
record headers are checked without being kept, counted before they are walked, so the
memory of a check is one batch's inflated records plus O(records) of columns.

Costs: O(bytes) for the CRC (hardware CRC-32C) plus O(batches) of Python for the header
walk; one ``struct.unpack_from`` per batch.  A leader append adds, per batch, the record
check (:func:`check_records`; plus one decompression for a compressed batch, two when
the fast path fails).  Its fast
path (:func:`clients.records.bulk_decode.records_well_formed`) proves the records well
formed without building any column (about a dozen numpy calls per run of same-shaped
records; one Python step per record plus numpy per field when sizes vary); batches it
cannot prove (headers, anything invalid, a compacted log's keys) are decoded in full
(:func:`~clients.records.bulk_decode.decode_batch_bulk`, headers checked not kept: about
1.5 us of Python per record with headers, 0.3 us per header), which also names the
error.
Figures: ``bench/storage.py`` (``record_check_*`` in ``bench/results/storage.json``)
and docs/status.md; a whole Produce against a broker: ``bench/produce_stall.py``.  Pure
functions: thread-safe (the caller owns the buffer; a :class:`CheckBudget` is charged by
the check it is given to, one thread at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    MessageTooLargeError,
)
from clients.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    unsupported_compression,
    validate_batch,
)
from clients.records.bulk_decode import MIN_RECORD_BYTES, decode_batch_bulk, records_well_formed
from clients.records.compression import DecompressedSizeError, plain_records
from storage.records.scan import INT32_MAX, MAX_CODEC, MIN_BATCH_LENGTH

__all__ = [
    "MAX_BATCH_DECOMPRESSED_BYTES",
    "MAX_BATCH_RECORDS",
    "BatchInfo",
    "CheckBudget",
    "CheckDeferred",
    "KeylessRecordError",
    "LeaderCheck",
    "LogAppendInfo",
    "validate_append_batches",
]


# A leader's bounds per produced batch (the broker's max_batch_records and
# max_batch_decompressed_bytes; these are the defaults of both)
MAX_BATCH_RECORDS = 65_536
MAX_BATCH_DECOMPRESSED_BYTES = 16 << 20


# What the log needs to know about one batch of a request, as a plain tuple (cheapest
# to build on the append path): (position in the request, size, base_offset,
# last_offset_delta, max_timestamp, record_count, partition_leader_epoch, header), the
# header being the 13 fields of clients.records.batch.HEADER as unpacked once here (the
# leader's producer-state check reads them: BatchHeader(*header)).
BatchInfo = tuple[int, int, int, int, int, int, int, tuple[int, ...]]


class LogAppendInfo(NamedTuple):
    """Result of an append, built from what validation found in its batches (Kafka's
    ``LogAppendInfo``; a NamedTuple: immutable and cheap to build per request)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    num_records: int
    valid_bytes: int
    log_start_offset: int
    # (leader_epoch, base_offset) of the first appended batch and of every batch whose
    # epoch differs from the previous one: feeds the leader-epoch cache without rescans.
    epoch_changes: tuple[tuple[int, int], ...]
    rolled: bool = False


class CheckDeferred(Exception):
    """The record check needs more than what is left of its event-loop share
    (:attr:`CheckBudget.inline_bytes`): run it again where it cannot stall the loop."""


class KeylessRecordError(InvalidRecordError):
    """A record without a key for a compacted log (INVALID_RECORD)."""


@dataclass(slots=True)
class CheckBudget:
    """What the leader's record checks of one Produce request may still do; shared by its
    partitions and charged batch by batch (so one request's work is bounded whatever it
    holds).  Mutable; one request's checks run on one thread at a time."""

    records: int  # records plus record headers (max_produce_records)
    decompressed_bytes: int  # inflated bytes of compressed batches (max_produce_decompressed_bytes)
    # bytes (as sent, plus inflated) the checks may still inspect on the event loop:
    # beyond, CheckDeferred (None: no such share, the check may run to the end here)
    inline_bytes: int | None = None

    def copy(self) -> CheckBudget:
        return replace(self)


@dataclass(frozen=True, slots=True)
class LeaderCheck:
    """What a leader append checks of a producer's batches (one log's limits and
    timestamp window, taken when it was made), as a value: :meth:`run` is a pure
    function of the bytes, so it may run on another thread than the log's owner."""

    max_message_bytes: int
    timestamp_bounds: tuple[int, int] | None = None
    keys_of: str | None = None  # a compacted log's name: every record needs a key
    max_batch_records: int = MAX_BATCH_RECORDS
    max_decompressed_bytes: int = MAX_BATCH_DECOMPRESSED_BYTES

    def run(self, batches: bytes | bytearray | memoryview,
            budget: CheckBudget | None = None) -> list[BatchInfo]:
        """:func:`validate_append_batches` of ``batches`` as a leader append; the result
        may be handed to the append (``checked``) of the same bytes."""
        view = batches if type(batches) is memoryview else memoryview(batches)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        return validate_append_batches(
            view, self.max_message_bytes, require_records=True,
            max_decompressed_bytes=self.max_decompressed_bytes,
            timestamp_bounds=self.timestamp_bounds, max_batch_records=self.max_batch_records,
            budget=budget, keys_of=self.keys_of)


def _bad(buf: memoryview, pos: int) -> CorruptRecordError | InvalidRecordError:
    """The precise error for an invalid batch (delegates to the codec's validator)."""
    try:
        validate_batch(buf, pos)
    except (CorruptRecordError, InvalidRecordError) as exc:
        return exc
    return CorruptRecordError(f"batch at position {pos} is invalid")


def validate_append_batches(
    buf: memoryview, max_message_bytes: int, *, require_records: bool,
    max_decompressed_bytes: int = MAX_BATCH_DECOMPRESSED_BYTES,
    timestamp_bounds: tuple[int, int] | None = None,
    max_batch_records: int = MAX_BATCH_RECORDS,
    budget: CheckBudget | None = None,
    keys_of: str | None = None,
) -> list[BatchInfo]:
    """Validate every batch of a request; raise the precise error for the first bad one.

    ``require_records`` (leader appends) also demands ``1 <= record_count <=
    max_batch_records`` (the header's count, read before any decompression; more is
    MESSAGE_TOO_LARGE) and ``last_offset_delta == record_count - 1`` (what producers
    send), and decompresses compressed batches (to at most ``max_decompressed_bytes``,
    more is MESSAGE_TOO_LARGE) to check their records.  With ``timestamp_bounds`` ``(low,
    high)`` every record of a CreateTime batch must carry a timestamp in ``[low, high]``
    (the topic's ``message.timestamp.before/after.max.ms`` around the leader's clock),
    else INVALID_TIMESTAMP.  ``budget`` (a Produce request's, shared by its partitions)
    is spent batch by batch (:class:`CheckBudget`; over it: MESSAGE_TOO_LARGE, or
    :class:`CheckDeferred` when only its event-loop share ran out).  ``keys_of`` (a
    compacted log's name, ``topic-partition``): every record needs a key, else
    :class:`KeylessRecordError` (INVALID_RECORD).
    Errors: CorruptRecordError (CORRUPT_MESSAGE: framing, CRC, corrupt compressed data,
    records that do not parse), InvalidRecordError (INVALID_RECORD;
    UNSUPPORTED_COMPRESSION_TYPE for codecs 5-7; INVALID_TIMESTAMP), MessageTooLargeError.
    """
    out: list[BatchInfo] = []
    pos, total = 0, len(buf)
    unpack = HEADER.unpack_from
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise _bad(buf, pos)
        fields = unpack(buf, pos)
        (_base, length, epoch, magic, crc, attrs, lod, _bts, max_ts, _pid, _pep, _seq,
         count) = fields
        size = length + LOG_OVERHEAD
        end = pos + size
        if magic != MAGIC or length < MIN_BATCH_LENGTH or end > total:
            raise _bad(buf, pos)
        if size > max_message_bytes:
            raise MessageTooLargeError(
                f"batch at position {pos} is {size} bytes, above max_message_bytes "
                f"{max_message_bytes}"
            )
        if (crc32c(buf[pos + ATTRIBUTES_OFFSET : end]) != crc or count < 0 or lod < 0
                or (count and lod < count - 1)):
            raise _bad(buf, pos)
        codec = attrs & COMPRESSION_MASK
        if codec > MAX_CODEC:
            raise unsupported_compression(codec, pos)
        if require_records:
            if count == 0 or lod != count - 1:
                raise InvalidRecordError(
                    f"batch at position {pos}: record_count {count} and last_offset_delta "
                    f"{lod} do not describe consecutive records"
                )
            if attrs & CONTROL_MASK:
                raise InvalidRecordError(f"batch at position {pos}: control batches are not "
                                         "accepted from producers (markers are written by "
                                         "the transaction coordinator's WriteTxnMarkers)")
            if attrs & TRANSACTIONAL_MASK and _pid < 0:
                raise InvalidRecordError(f"batch at position {pos}: a transactional batch "
                                         f"needs a producer id, got {_pid}")
            if not codec and count * MIN_RECORD_BYTES > size - HEADER_SIZE:
                raise CorruptRecordError(f"batch at position {pos}: {count} records cannot "
                                         f"fit in {size - HEADER_SIZE} bytes")
            if count > max_batch_records:
                raise MessageTooLargeError(
                    f"batch at position {pos} holds {count} records, above max_batch_records "
                    f"{max_batch_records} (split it into smaller batches)")
            if budget is not None and count > budget.records:
                raise MessageTooLargeError(
                    f"batch at position {pos} holds {count} records, above the "
                    f"{max(budget.records, 0)} records and headers left of this request's "
                    "max_produce_records")
            check_records(buf, pos, count, codec, max_decompressed_bytes,
                          None if attrs & TIMESTAMP_TYPE_MASK else timestamp_bounds,
                          budget=budget, keys_of=keys_of, header=fields)
        out.append((pos, size, _base, lod, max_ts, count, epoch, fields))
        pos = end
    return out


def check_records(buf: memoryview, pos: int, count: int, codec: int, max_bytes: int,
                  timestamp_bounds: tuple[int, int] | None = None, *,
                  budget: CheckBudget | None = None, keys_of: str | None = None,
                  header: tuple[int, ...] | None = None) -> None:
    """Check that the records of the (CRC-checked) batch at ``pos`` parse, decompressed
    if need be (to at most ``max_bytes``, and what is left of ``budget``): ``count`` of
    them, nothing after the last, offset deltas 0 .. count - 1, record headers checked
    without being kept, every key present with ``keys_of``; ``budget`` is charged
    (a valid CRC says nothing about whether a producer wrote records that parse).
    ``header``: the batch's header fields as the caller unpacked them (read here if not
    given)."""
    try:
        fields = header if header is not None else HEADER.unpack_from(buf, pos)
        base_offset, length, base_timestamp = fields[0], fields[1], fields[7]
        size = length + LOG_OVERHEAD
        inline = None if budget is None else budget.inline_bytes
        if inline is not None and size > inline:
            raise CheckDeferred(f"batch at position {pos}: {size} bytes")
        cap = max_bytes
        if codec:
            if budget is not None:
                cap = min(cap, max(budget.decompressed_bytes, 0))
            if inline is not None:
                cap = min(cap, inline - size)
            try:
                plain, start, end = plain_records(buf, pos, BatchHeader(*fields), cap)
            except DecompressedSizeError as exc:
                raise _too_large(exc, pos, max_bytes, budget, inline - size
                                 if inline is not None else None) from None
        else:
            plain, start, end = buf, pos + HEADER_SIZE, pos + size
        inflated = end - start if codec else 0
        if budget is not None:
            budget.records -= count
            budget.decompressed_bytes -= inflated
            if budget.inline_bytes is not None:
                budget.inline_bytes -= size + inflated
        if keys_of is None and records_well_formed(plain, start, end, count, base_offset,
                                                   base_timestamp, timestamp_bounds):
            return
        del plain  # the decoder decompresses again: one copy alive at a time
        headers_left = INT32_MAX if budget is None else max(budget.records, 0)
        try:
            records = decode_batch_bulk(buf, pos, validate=False, max_bytes=cap,
                                        max_headers=headers_left)
        except MessageTooLargeError as exc:
            raise MessageTooLargeError(
                f"batch at position {pos}: {exc.message} (records and headers left of this "
                "request's max_produce_records)") from None
        if budget is not None:
            budget.records -= records.header_count
    except CorruptRecordError as exc:
        if exc.message.startswith("batch at position"):
            raise
        raise CorruptRecordError(f"batch at position {pos}: {exc.message}") from None
    deltas = records.offsets - records.header.base_offset
    if not np.array_equal(deltas, np.arange(count, dtype=np.int64)):
        wrong = int(np.flatnonzero(deltas != np.arange(count))[0])
        raise InvalidRecordError(
            f"batch at position {pos}: {'compressed ' if codec else ''}record {wrong} has "
            f"offset delta "
            f"{int(deltas[wrong])}, expected {wrong} (offset deltas must be 0 .. {count - 1})"
        )
    if timestamp_bounds is not None and count:
        low, high = timestamp_bounds
        stamps = records.timestamps
        outside = (stamps < low) | (stamps > high)
        if outside.any():
            wrong = int(np.flatnonzero(outside)[0])
            raise InvalidRecordError(
                f"batch at position {pos}: record {wrong} has timestamp {int(stamps[wrong])}, "
                f"outside [{low}, {high}] (message.timestamp.before/after.max.ms around the "
                "broker's clock)", ErrorCode.INVALID_TIMESTAMP)
    if keys_of is not None:
        keyless = np.flatnonzero(records.key_lengths < 0)
        if len(keyless):
            raise KeylessRecordError(
                f"compacted topic {keys_of} cannot accept a record without a key (batch at "
                f"position {pos}, offset delta {int(keyless[0])})")


def _too_large(exc: DecompressedSizeError, pos: int, max_bytes: int,
               budget: CheckBudget | None, inline: int | None) -> Exception:
    """What records that decompress to more than the smallest of their limits mean: the
    batch is over ``max_batch_decompressed_bytes`` or the request over its
    ``max_produce_decompressed_bytes`` (MESSAGE_TOO_LARGE), or only the event loop's share
    ran out (:class:`CheckDeferred`: check it again off the loop)."""
    request = max_bytes if budget is None else max(budget.decompressed_bytes, 0)
    if inline is not None and inline < min(max_bytes, request):
        return CheckDeferred(f"batch at position {pos}: records decompress to more than "
                             f"the {inline} bytes left on the event loop")
    what = ("max_batch_decompressed_bytes" if max_bytes <= request
            else "what is left of this request's max_produce_decompressed_bytes")
    return MessageTooLargeError(f"{exc.message} ({what})")

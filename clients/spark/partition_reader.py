"""Reads one :class:`OffsetRange` in a Spark executor, as Arrow record batches.

The reader opens its own :class:`clients.consumer.Consumer` (``assign`` + ``seek`` to
``from_offset``, ``auto_offset_reset="none"`` so a range whose start was deleted fails
instead of silently jumping), polls numpy columns (``poll_bulk``), keeps exactly the
records with ``from_offset <= offset < until_offset`` (a fetch returns whole batches and
may run past the end) and stops once the consumer's position reaches ``until_offset``.
Consumers only ever see records below the high watermark, and the planned end is at most
the high watermark, so a range is always readable unless records were lost (unclean
election) or deleted: if the position makes no progress for ``readTimeoutMs`` the read
fails with REQUEST_TIMED_OUT naming the range, never hangs.

Transactions: the consumer reads with the query's ``kafka.isolation.level``.  Control
batches (COMMIT/ABORT markers) are never rows; under ``read_committed`` the records of
aborted transactions are dropped too and ranges end at the last stable offset.  Either
way the offsets they occupy are gaps inside ``[from_offset, until_offset)``: the
position still moves past them (a fetch advances it past every whole batch it returned,
delivered or not), so a gap is told from loss by progress, not by counting rows, and is
never reported as data loss.  Real loss (the range start deleted) fails at the seek
(``auto_offset_reset="none"``: OFFSET_OUT_OF_RANGE); records vanished below the planned
end fail by the read timeout.

``failOnDataLoss=false`` (Spark's option): an OFFSET_OUT_OF_RANGE at the position
(records deleted by retention or DeleteRecords, before or while the range is read) is
logged as a warning naming the skipped offsets, and the read goes on from the log
start offset (or ends, if that is at or past ``until_offset``), as Spark's Kafka source
skips data aged out.  With ``true`` (the default) it fails the task as above.

Arrow columns (Spark's Kafka source schema; one record batch per poll)::

    column         arrow type                               note
    key            binary                                   null if the record has none
    value          binary                                   null if the record has none
    topic          string
    partition      int32
    offset         int64
    timestamp      timestamp[us, UTC]                       record timestamp (ms) * 1000
    timestampType  int32                                    0 = CreateTime,
                                                            1 = LogAppendTime (from the
                                                            batch's attributes)
    headers        list<struct<key: string, value: binary>> [] when none; only with
                                                            ``includeHeaders=true``

Keys and values are gathered from the fetch response with numpy (one vectorised copy per
column, no per-record Python); headers are built per record only for records that have
any (and only with ``includeHeaders=true``).  Costs: O(bytes in range) copies, memory
bounded by one fetch (``maxPartitionFetchBytes``) plus one Arrow batch of it.
Thread safety: one reader per Spark task; nothing shared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from clients.consumer.consumer import Consumer
from clients.protocol.errors import OffsetOutOfRangeError, RequestTimedOutError
from clients.protocol.topics import TopicPartition
from clients.records.bulk_decode import BulkRecords
from clients.spark.options import SourceOptions
from clients.spark.ranges import OffsetRange

__all__ = ["ARROW_SCHEMA", "arrow_schema", "read_range", "to_arrow"]

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", HEADER_TYPE),
])  # fmt: skip
_POLL_MS = 500
log = logging.getLogger(__name__)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """:data:`ARROW_SCHEMA`, without ``headers`` unless ``includeHeaders=true``."""
    return ARROW_SCHEMA if include_headers else ARROW_SCHEMA.remove(
        ARROW_SCHEMA.get_field_index("headers"))


def read_range(options: SourceOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` in offset order, exactly once each."""
    if part.count <= 0:
        return
    tp = TopicPartition(part.topic, part.partition)
    consumer = Consumer(**options.consumer_kwargs(
        bootstrap_servers=options.bootstrap_servers,
        request_timeout_ms=options.request_timeout_ms,
        max_partition_fetch_bytes=options.max_partition_fetch_bytes,
        fetch_max_bytes=options.max_partition_fetch_bytes, fetch_max_wait_ms=_POLL_MS,
        client_id=f"minikafka-spark-{part.topic}-{part.partition}",
    ), auto_offset_reset="none", enable_auto_commit=False,
       isolation_level=options.isolation_level)  # fmt: skip
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.from_offset)
        position = part.from_offset
        progress_at = time.monotonic()
        while position < part.until_offset:
            try:
                bulk = consumer.poll_bulk(_POLL_MS).get(tp)
            except OffsetOutOfRangeError:
                if options.fail_on_data_loss:
                    raise
                position = _skip_deleted(consumer, tp, part, position, options)
                progress_at = time.monotonic()
                continue
            if bulk is not None and len(bulk):
                batch = to_arrow(part, bulk, options.include_headers)
                if batch.num_rows:
                    yield batch
            new_position = consumer.position(tp)
            if new_position > position:
                position, progress_at = new_position, time.monotonic()
            elif time.monotonic() - progress_at > options.read_timeout_ms / 1000:
                raise RequestTimedOutError(
                    f"reading {part.topic}-{part.partition} [{part.from_offset}, "
                    f"{part.until_offset}): stuck at offset {position} for "
                    f"{options.read_timeout_ms} ms (high watermark "
                    f"{consumer.high_watermark(tp)}; records lost or deleted?)"
                )
    finally:
        consumer.close()


def _skip_deleted(consumer: Consumer, tp: TopicPartition, part: OffsetRange, position: int,
                  options: SourceOptions) -> int:
    """failOnDataLoss=false: warn and move to the log start offset (or the range end)."""
    start = consumer.beginning_offsets([tp], options.request_timeout_ms)[tp]
    resume = min(max(start, position), part.until_offset)
    log.warning(
        "%s-%d: records [%d, %d) of the range [%d, %d) are no longer in the log (log start "
        "offset %d: deleted by retention or DeleteRecords); skipped because "
        "failOnDataLoss=false. Some data may have been lost.", tp.topic, tp.partition,
        position, resume, part.from_offset, part.until_offset, start)  # fmt: skip
    if resume < part.until_offset:
        consumer.seek(tp, resume)
    return resume


def to_arrow(part: OffsetRange, bulk: BulkRecords, include_headers: bool = True
             ) -> pa.RecordBatch:
    """The records of ``bulk`` inside ``part``'s range as one Arrow batch (with a
    ``headers`` column when ``include_headers``)."""
    offsets = bulk.offsets
    keep = np.flatnonzero((offsets >= part.from_offset) & (offsets < part.until_offset))
    n = len(keep)
    buf = np.frombuffer(bulk.buffer, dtype=np.uint8)
    columns = [
        _binary(buf, bulk.key_offsets[keep], bulk.key_lengths[keep]),
        _binary(buf, bulk.value_offsets[keep], bulk.value_lengths[keep]),
        pa.array([part.topic] * n, pa.string()),
        pa.array(np.full(n, part.partition, dtype=np.int32)),
        pa.array(offsets[keep].astype(np.int64)),
        pa.array(bulk.timestamps[keep].astype(np.int64) * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(bulk.timestamp_type_column()[keep].astype(np.int32)),
    ]  # fmt: skip
    if include_headers:
        headers = [list(_header_dicts(bulk.headers(int(i)))) for i in keep]
        columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _header_dicts(headers: tuple[tuple[str, bytes | None], ...]) -> Iterator[dict[str, object]]:
    for key, value in headers:
        yield {"key": key, "value": value}


def _binary(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary column gathered from ``buf`` (length -1 = null) in one numpy copy; int32
    Arrow offsets suffice since one poll holds at most ``maxPartitionFetchBytes``."""
    n = len(starts)
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0).astype(np.int64)
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    total = int(out_offsets[-1])
    index = np.arange(total, dtype=np.int64) + np.repeat(
        starts.astype(np.int64) - out_offsets[:-1], sizes
    )
    data = buf[index] if total else np.zeros(0, dtype=np.uint8)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    null_count = int(n - valid.sum())
    return pa.BinaryArray.from_buffers(
        pa.binary(), n,
        [bitmap, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(data)], null_count,
    )  # fmt: skip

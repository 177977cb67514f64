"""Which fetched batches a consumer hands out: control batches never, aborted data not
under ``read_committed`` (Kafka's ``CompletedFetch`` filter).

A Fetch with ``isolation_level=1`` answers up to the partition's last stable offset and
lists, per partition, the transactions aborted in that range as ``aborted_transactions``
``[{producer_id, first_offset}]``.  Kafka's algorithm, kept here: the aborted
transactions go in a min-heap by first offset; walking the batches in offset order,
every aborted transaction whose first offset is at or below the batch's last offset is
opened (its producer id joins the set of aborted producers); a transactional data batch
of an aborted producer is dropped; an ABORT marker (a control batch whose record's key is
type 0) of a producer closes its aborted transaction (later batches of that producer
belong to a newer transaction).  Control batches (COMMIT / ABORT markers) are never
handed out, under either isolation level.  Dropping a batch does not stop the
position: it moves past the last complete fetched batch
(:class:`~clients.consumer.fetcher.CompletedFetch` ``next_offset``), so the offsets that
markers and aborted records occupy are skipped, as Kafka's consumer does.

Costs: O(batches + aborted log aborted) per fetched partition; a control batch's one
record is decoded to read its type.  Not thread-safe (one fetched partition, the
consumer's thread).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from clients.protocol.errors import MiniKafkaError
from clients.records.batch import read_header
from clients.records.control import ControlType, parse_marker
from clients.records.record import decode_batch


class AbortedTransactions:
    """The read_committed filter of one fetched partition (see the module)."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (producer_id, first_offset) of each aborted transaction."""
        self._heap = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._heap)
        self._aborted_producers: set[int] = set()

    def keep(self, buf: memoryview, pos: int) -> bool:
        """Whether the batch at ``pos`` holds records to hand out (call in offset order)."""
        header = read_header(buf, pos)
        pid = header.producer_id
        if pid >= 0:
            heap = self._heap
            while heap and heap[0][0] <= header.last_offset:
                self._aborted_producers.add(heapq.heappop(heap)[1])
            if header.is_control:
                if is_abort_marker(buf, pos, header.size_in_bytes):
                    self._aborted_producers.discard(pid)
                return False
            if header.is_transactional and pid in self._aborted_producers:
                return False
        return not header.is_control


def is_abort_marker(buf: memoryview, pos: int, size: int) -> bool:
    """A control batch whose first record is an ABORT marker (junk reads as not one)."""
    try:
        records = decode_batch(buf[pos : pos + size])
        if not records:
            return False
        control_type, _ = parse_marker(records[0].key, records[0].value)
    except MiniKafkaError:
        return False
    return control_type is ControlType.ABORT


def deliverable(buf: memoryview, positions: list[int],
                aborted: list[tuple[int, int]] | None) -> list[int]:  # fmt: skip
    """The positions of ``positions`` whose batches are handed out: every batch but
    control ones when ``aborted`` is None (read_uncommitted), else Kafka's filter."""
    if aborted is None:
        return [pos for pos in positions if not read_header(buf, pos).is_control]
    keep = AbortedTransactions(aborted).keep
    return [pos for pos in positions if keep(buf, pos)]

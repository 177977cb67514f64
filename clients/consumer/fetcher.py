"""The consumer's fetcher: Fetch requests to the partition leaders, the fetched data of
each partition, and decoding it into what ``poll`` / ``poll_bulk`` return.

Fetch path: one Fetch request in flight per leader node (at the connection's highest
common version, Fetch 4-17: by topic id, v13+, when the metadata gave every topic of the
request an id, else by name at most v12, Kafka's rule), for every assigned, unpaused
partition led by it that has a known position and no unconsumed data, in a fetch
session with that node (KIP-227,
:class:`clients.protocol.fetch_session.handler.FetchSessionHandler`: a full fetch first,
then incremental ones naming only the partitions added or moved, the others in
``forgotten_topics_data``; a partition the answer leaves out had nothing new; a session
error, a failed request or a lost connection make the next fetch full),
``isolation_level`` 0 (read_uncommitted) or 1 (read_committed: the broker answers up to
the last stable offset, with the partition's ``aborted_transactions``)::

    {replica_id: -1, max_wait_ms, min_bytes, max_bytes, isolation_level: 0 | 1,
     session_id, session_epoch, forgotten_topics_data,
     topics: [{name | topic_id, partitions: [{partition, fetch_offset,
                                              partition_max_bytes}]}]}

Records come from ``responses[].partitions[].records``: whole batches (possibly a
partial batch at the end, which is ignored and fetched again).  A batch may start before
the fetch position (Kafka returns whole batches), so records below the position are
skipped.  Control batches (transaction markers) are never handed out, and under
read_committed neither are the batches of aborted transactions
(:mod:`clients.consumer.aborted_transactions`); the position still moves past them.
Fetched data (:class:`CompletedFetch`) waits in its partition's
:class:`~clients.consumer.subscription_state.PartitionState` until handed out; a
position transition (seek, reset) drops it.  Buffered bytes are bounded by
``fetch_max_bytes`` per node (nothing new is fetched for a partition with data).
OFFSET_OUT_OF_RANGE requests a reset per ``auto_offset_reset`` (or, with ``"none"``,
raises :class:`~clients.protocol.errors.OffsetOutOfRangeError` from the next poll);
NOT_LEADER_OR_FOLLOWER and friends refresh the metadata and fetch again.

Decoding: deserializers (``key_deserializer`` / ``value_deserializer``, read from the
settings at each poll) never apply to a null key or value; one that raises stops at
that record (:class:`RecordDeserializationError`, the records before it returned
first, the position left at it).  An invalid batch: the records before it are handed
out, then poll raises a CorruptRecordError naming the partition and offsets until the
application seeks past it.

Costs: each batch decoded once (O(record bytes), plus a decompression pass for a
compressed batch); records handed out by index (O(records taken)); ``take_bulk`` uses
the numpy decoder with no per-record Python.  Not thread-safe (the consumer's thread).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from clients.consumer.aborted_transactions import deliverable
from clients.consumer.offset_fetcher import RESET_TIMESTAMPS
from clients.consumer.subscription_state import SubscriptionState
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    MiniKafkaError,
    OffsetOutOfRangeError,
    error_for,
)
from clients.protocol.fetch_session.handler import (
    SESSION_ERRORS,
    FetchRequestData,
    FetchSessionHandler,
)
from clients.protocol.message_types import (
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
)
from clients.protocol.request_channel import ClientResponse, InFlightRequest
from clients.protocol.topics import TopicPartition
from clients.records.batch import COMPRESSION_MASK, HEADER_SIZE, read_header
from clients.records.bulk_decode import BulkRecords, concat_bulk, decode_batch_bulk
from clients.types import ConsumerRecord

__all__ = ["CompletedFetch", "FetchSettings", "Fetcher", "RecordDeserializationError"]

Deserializer = Callable[[bytes], Any]


class FetchSettings(Protocol):
    """The consumer settings the fetcher reads (at each request / poll, so a changed
    setting applies from the next one)."""

    auto_offset_reset: str
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    request_timeout_ms: int
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None


class RecordDeserializationError(MiniKafkaError):
    """A key or value deserializer raised; the consumer's position is that record's
    offset (``seek(tp, offset + 1)`` skips it).  ``__cause__`` is the original error."""

    code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, tp: TopicPartition, offset: int) -> None:
        super().__init__(message)
        self.tp = tp
        self.offset = offset


@dataclass
class CompletedFetch:
    """Records data of one partition from one fetch response, handed out by poll."""

    fetch_offset: int
    records: memoryview
    high_watermark: int
    decoded: list[ConsumerRecord] | None = None
    index: int = 0  # the next record of ``decoded`` to hand out
    next_offset: int = -1  # offset after the last complete batch (-1: none)
    corrupt: CorruptRecordError | None = None  # the first invalid batch (records stop there)
    # read_committed: (producer_id, first_offset) of the aborted transactions answered
    aborted: list[tuple[int, int]] | None = None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a fetch's records are built.

    Decoding allocates one tuple per record (tens of thousands per fetch); each
    allocation counts towards the collector's thresholds, and the collections that
    follow rescan the growing list for cycles it cannot hold (the records are tuples of
    ints, strings and bytes).  With it paused and the records built in one list
    comprehension, per-record ``poll()`` of 200k records of 100 B (one partition, RF 3)
    went from ~0.71 to ~0.94 M records/s in one run.  Re-enabled afterwards only if it
    was enabled before (the switch is process-wide: another thread that disables the
    collector while a poll decodes finds it enabled again afterwards).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Fetcher:
    """Sends fetches, files their results in the subscription state, decodes them."""

    def __init__(self, settings: FetchSettings, subscriptions: SubscriptionState[CompletedFetch],
                 metadata: ClusterMetadata, net: NodeConnections, *, isolation: int) -> None:
        self._settings = settings
        self._subscriptions = subscriptions
        self._metadata = metadata
        self._net = net
        self._isolation = isolation
        self.in_flight: dict[int, InFlightRequest] = {}  # node -> in-flight Fetch
        self._sessions: dict[int, FetchSessionHandler] = {}  # node -> KIP-227 session
        self._pending_error: MiniKafkaError | None = None

    def raise_pending(self) -> None:
        """Raise (once) a fatal error a fetch response carried."""
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    # ------------------------------------------------------------ fetch requests
    def send_fetches(self) -> None:
        settings = self._settings
        by_node: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
        for tp, state in self._subscriptions.states.items():
            if state.position is None or state.fetched is not None or state.paused:
                continue
            leader = self._metadata.leader_for(tp)
            if leader is None:
                self._metadata.request_update()
                continue
            if leader in self.in_flight:
                continue
            by_node.setdefault(leader, {})[(tp.topic, tp.partition)] = {
                "partition": tp.partition, "fetch_offset": state.position,
                "partition_max_bytes": settings.max_partition_fetch_bytes,
            }  # fmt: skip
        for node, wanted in by_node.items():
            session = self._sessions.setdefault(node, FetchSessionHandler())
            topics = {t for t, _ in wanted}
            data = session.build(wanted, {t: self._metadata.topic_id(t) for t in topics})
            body = cast(FetchRequest, {
                "replica_id": -1,
                "max_wait_ms": settings.fetch_max_wait_ms,
                "min_bytes": settings.fetch_min_bytes,
                "max_bytes": settings.fetch_max_bytes,
                "isolation_level": self._isolation,
                **data.fields(),
            })  # fmt: skip
            try:
                conn = self._net.get(node)
                request = conn.send(
                    ApiKey.FETCH,
                    body,
                    api_version=min(conn.version_for(ApiKey.FETCH), data.max_version),
                    context=(data, wanted),
                    timeout_ms=settings.request_timeout_ms + settings.fetch_max_wait_ms,
                )
            except MiniKafkaError:
                session.handle_error()
                self._metadata.request_update()
                continue
            assert request is not None
            self.in_flight[node] = request

    def handle_fetch(self, response: ClientResponse) -> None:
        request = response.request
        if self.in_flight.get(request.node_id) is request:
            del self.in_flight[request.node_id]
        if request.api_key != ApiKey.FETCH:
            return
        data, wanted = cast(tuple[FetchRequestData, dict[tuple[str, int], dict[str, Any]]],
                            request.context)
        session = self._sessions.setdefault(request.node_id, FetchSessionHandler())
        if response.error is not None or response.body is None:
            session.handle_error()
            self._metadata.request_update()
            return
        body = cast(FetchResponse, response.body)
        code = body["error_code"]  # v7+: the request as a whole (0 before v7)
        if not session.handle_response(data, body) and code in SESSION_ERRORS:
            return  # the next fetch to this node is full
        if code != ErrorCode.NONE:
            error = error_for(code, f"fetch from node {request.node_id} failed")
            if error.retriable:
                self._metadata.request_update()
            else:
                self._pending_error = error
            return
        states = self._subscriptions.states
        for t in body["responses"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                state = states.get(tp)
                asked = wanted.get(tp)
                fetch_offset = None if asked is None else asked["fetch_offset"]
                if state is None or fetch_offset is None or state.position != fetch_offset:
                    continue  # unassigned or sought meanwhile: stale data
                self._partition_result(tp, fetch_offset, p)

    def _partition_result(self, tp: TopicPartition, fetch_offset: int,
                          p: FetchResponsePartition) -> None:
        state = self._subscriptions.states[tp]
        code = p["error_code"]
        if code == ErrorCode.NONE:
            state.high_watermark = p["high_watermark"]
            records = cast(memoryview, p["records"])  # decoded: a view of the frame
            if len(records):
                aborted = None
                if self._isolation == 1:
                    aborted = [(a["producer_id"], a["first_offset"])
                               for a in p["aborted_transactions"] or ()]  # fmt: skip
                state.fetched = CompletedFetch(fetch_offset, records, p["high_watermark"],
                                               aborted=aborted)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = RESET_TIMESTAMPS[self._settings.auto_offset_reset]
            if reset is None:
                self._pending_error = OffsetOutOfRangeError(
                    f"fetch offset {fetch_offset} is out of range for {tp} "
                    "and auto_offset_reset='none'"
                )
            else:
                state.request_reset(reset)
            return
        error = error_for(code, f"fetch from {tp} failed")
        if error.retriable:
            self._metadata.request_update()
        else:
            self._pending_error = error

    # ------------------------------------------------------------ handing records out
    def take_records(
        self, tp: TopicPartition, fetched: CompletedFetch, budget: int
    ) -> list[ConsumerRecord]:
        state = self._subscriptions.states[tp]
        if fetched.decoded is None:
            fetched.decoded = self._decode(tp, fetched)
        position = state.position
        assert position is not None
        records = fetched.decoded
        start = fetched.index
        while start < len(records) and records[start].offset < position:
            start += 1
        taken = records[start : start + budget]
        settings = self._settings
        if settings.key_deserializer is not None or settings.value_deserializer is not None:
            taken = self._deserialize(tp, taken)
        fetched.index = start + len(taken)
        if taken:
            state.position = taken[-1].offset + 1
        elif start >= len(records):
            self._raise_corrupt(tp, fetched)
        if fetched.index >= len(records):
            state.fetched = None
            if fetched.next_offset > (state.position or 0):
                state.position = fetched.next_offset  # skip past the last batch's tail
        return taken

    def _deserialize(self, tp: TopicPartition, taken: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Apply the deserializers; on a failure return the records before it (raise if
        it is the first): the position then stays at the failing record."""
        kd, vd = self._settings.key_deserializer, self._settings.value_deserializer
        out: list[ConsumerRecord] = []
        for r in taken:
            try:
                key = r.key if kd is None or r.key is None else kd(r.key)
                value = r.value if vd is None or r.value is None else vd(r.value)
            except Exception as e:
                if out:
                    return out
                raise RecordDeserializationError(
                    f"{tp} offset {r.offset}: cannot deserialize: {type(e).__name__}: {e}; "
                    f"seek to {r.offset + 1} to skip it", tp, r.offset) from e
            out.append(r._replace(key=key, value=value))
        return out

    def _decode(self, tp: TopicPartition, fetched: CompletedFetch) -> list[ConsumerRecord]:
        """Every record of the fetched batches as a ConsumerRecord (keys and values as
        bytes).  The numpy bulk decoder walks the varints; one copy of the fetched bytes
        (or of a batch's decompressed records) then gives every key and value by a bytes
        slice - about three times the per-record Python decoder's rate.  The cyclic
        garbage collector is paused meanwhile (:func:`_gc_paused`)."""
        with _gc_paused():
            return self._decode_records(tp, fetched)

    def _decode_records(self, tp: TopicPartition, fetched: CompletedFetch) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        topic, partition = tp.topic, tp.partition
        records = fetched.records
        whole: bytes | None = None  # the fetched bytes, copied once when first needed
        new, record = tuple.__new__, ConsumerRecord
        for pos in _deliverable_positions(fetched):
            try:
                bulk = decode_batch_bulk(records, pos)
            except CorruptRecordError as exc:
                _stop_at_corrupt_batch(tp, fetched, pos, exc)
                break
            if bulk.header.attributes & COMPRESSION_MASK:
                raw = bytes(bulk.buffer)  # the decompressed records
            else:
                if whole is None:
                    whole = bytes(records)
                raw = whole
            first = len(out)
            out += [new(record, (topic, partition, offset, timestamp,
                                 None if kn < 0 else raw[ko : ko + kn],
                                 None if vn < 0 else raw[vo : vo + vn], ()))
                    for offset, timestamp, ko, kn, vo, vn in zip(
                        bulk.offsets.tolist(), bulk.timestamps.tolist(),
                        bulk.key_offsets.tolist(), bulk.key_lengths.tolist(),
                        bulk.value_offsets.tolist(), bulk.value_lengths.tolist(),
                        strict=True)]  # fmt: skip
            for i, headers in bulk.record_headers.items():  # only records that have any
                out[first + i] = out[first + i]._replace(headers=headers)
        return out

    def _raise_corrupt(self, tp: TopicPartition, fetched: CompletedFetch) -> None:
        """Raise the fetched data's invalid batch once the records before it are out."""
        error = fetched.corrupt
        if error is None:
            return
        self._subscriptions.states[tp].fetched = None  # a later poll fetches again: same error
        raise error

    def take_bulk(self, tp: TopicPartition, fetched: CompletedFetch) -> BulkRecords | None:
        state = self._subscriptions.states[tp]
        position = state.position
        assert position is not None
        state.fetched = None
        parts = []
        for pos in _deliverable_positions(fetched):
            try:
                parts.append(decode_batch_bulk(fetched.records, pos))
            except CorruptRecordError as exc:
                _stop_at_corrupt_batch(tp, fetched, pos, exc)
                break
        if fetched.next_offset > position:
            state.position = fetched.next_offset
        if not parts:
            self._raise_corrupt(tp, fetched)
            return None
        bulk = concat_bulk(parts, position)
        if len(bulk) == 0:
            self._raise_corrupt(tp, fetched)
            return None
        state.position = max(state.position or 0, int(bulk.offsets[-1]) + 1)
        return bulk


def _batch_positions(fetched: CompletedFetch) -> list[int]:
    """Positions of the complete batches (a partial trailing batch is ignored)."""
    view, pos, out = fetched.records, 0, []
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        if pos + header.size_in_bytes > len(view):
            break
        out.append(pos)
        fetched.next_offset = header.next_offset
        pos += header.size_in_bytes
    if not out and len(view) > 0 and fetched.next_offset < 0:
        # the first batch alone exceeds what the broker returned: cannot progress
        raise CorruptRecordError(
            f"fetch returned {len(view)} bytes without one complete batch; "
            "raise max_partition_fetch_bytes"
        )
    return out


def _deliverable_positions(fetched: CompletedFetch) -> list[int]:
    """The complete batches to decode: no control batches, no aborted data."""
    return deliverable(fetched.records, _batch_positions(fetched), fetched.aborted)


def _stop_at_corrupt_batch(tp: TopicPartition, fetched: CompletedFetch, pos: int,
                           exc: CorruptRecordError) -> None:
    """The records before an invalid batch are handed out; the position then stops at
    it and poll raises an error naming the partition and offsets (as Kafka's consumer
    does) until the application seeks past it."""
    header = read_header(fetched.records, pos)
    fetched.next_offset = header.base_offset  # never skip past it
    fetched.corrupt = CorruptRecordError(
        f"{tp.topic}-{tp.partition}: the record batch at offsets {header.base_offset}.."
        f"{header.next_offset - 1} is invalid ({exc.message}); the records before it "
        f"were delivered; seek to {header.next_offset} to skip it")

"""ProduceRequests: build the sender's Produce requests and settle their batches' outcomes.

The Produce half of :class:`~clients.producer.sender.Sender`, an object the sender owns
(the loop, connections and metadata requests live in the sender; this part only
writes on connections the loop already opened and hands back finished batches).

Produce request built per node (v3-12, the connection's highest common version;
``transactional_id`` null, or a transactional producer's id: the broker refuses
transactional batches without it)::

    {transactional_id, acks, timeout_ms, topics: [{name, partitions: [{index, records}]}]}

``records`` is the one batch's pooled buffer (zero copy) or, when a drain took several
consecutive batches of the partition, their concatenation.  The response's
``base_offset`` belongs to the first batch; the following batches get consecutive
offsets.  With ``acks=0`` no response is awaited: the batches complete with offset -1
once the request is written.

The answer's ``error_message`` exists from v8 (None before); ``log_append_time_ms`` is
-1 unless the topic uses LogAppendTime.  Error handling per partition: NONE resolves
the futures; a retriable code (or a lost
connection / request timeout for the whole request) puts the batches back at the head
of their queue with ``retry_backoff_ms`` unless ``retries`` or ``delivery_timeout_ms``
are exhausted (then their futures fail); leadership/unknown-topic errors and lost
connections also request a metadata refresh; MESSAGE_TOO_LARGE splits the batches
that hold more than one record and resends the pieces (:mod:`clients.producer.split`);
other codes fail the futures at once.
After :meth:`ProduceRequests.stop_retries` (the producer was force-closed) nothing is
retried.

With idempotence, produce errors are classified by the
:class:`~clients.producer.idempotence.IdempotenceManager` (retry with the same sequence, fail,
bump the epoch, or fatal); DUPLICATE_SEQUENCE_NUMBER counts as acknowledged (offset
-1); a fenced producer (FATAL) fails the batch and stops the producer.  A batch whose
attempt ended without an answer is marked ``maybe_written`` (its outcome is unknown).

Test-only fault hook ``debug_drop_response_ratio``: that fraction of produce responses
(chosen by a ``random.Random(debug_drop_seed)``) is discarded after the broker answered,
as if lost on the network: the batches are retried and their outcome counts as unknown.

Completions: finished batches are queued (batch, base offset, log append time, error)
and taken by the sender with :meth:`ProduceRequests.take_completions`; the sender
resolves their futures and frees their buffers with no lock held.

Costs: a request is O(partitions + batches) to build (the records are not copied for a
single batch); a response is O(partitions + batches).

Thread safety: none of its own.  Every method runs with the sender lock held (sender
thread, or a ``send_now`` caller that won the try-lock), except ``metrics``,
``has_completions`` and ``stop_retries``, which any thread may call.
"""

from __future__ import annotations

import random
from typing import cast

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import BrokerConnection, NetworkError
from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import ProducerBatch
from clients.producer.idempotence import (
    NO_SEQUENCE,
    Action,
    IdempotenceManager,
    ProducerFencedError,
)
from clients.producer.split import can_split, split_batch
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError, error_for
from clients.protocol.message_types import (
    ProduceRequest,
    ProduceRequestPartition,
    ProduceResponse,
    ProduceResponsePartitionResponse,
)
from clients.protocol.request_channel import ClientResponse
from clients.protocol.topics import TopicPartition

_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)


class DeliveryTimeoutError(RequestTimedOutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` of its creation."""


class ProduceRequests:
    """Produce requests of one sender and the outcome of their batches (see the module).

    Owns: the queue of finished batches, the produce counters (``metrics``), the
    ``debug_drop_response_ratio`` fault hook.  Reads and updates: the accumulator
    (unmute, re-enqueue, expiry), the metadata (refresh requests) and, with
    idempotence, the :class:`~clients.producer.idempotence.IdempotenceManager`.  Called
    by the :class:`~clients.producer.sender.Sender` (``send``, ``handle_response``,
    ``fail``, ``expire``, ``take_completions``) and, for ``fail``, by the
    :class:`~clients.producer.producer_id.ProducerIdExchange`.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        *,
        acks: int,
        retries: int,
        request_timeout_ms: int,
        idempotence: IdempotenceManager | None = None,
        transactional_id: str | None = None,
        debug_drop_response_ratio: float = 0.0,
        debug_drop_seed: int | None = None,
    ) -> None:
        self._acc = accumulator
        self._metadata = metadata
        self._acks = acks
        self._retries = retries
        self._request_timeout_ms = request_timeout_ms
        self._idem = idempotence
        self._transactional_id = transactional_id  # a transactional producer's, else None
        self._drop_ratio = debug_drop_response_ratio
        self._drop_rng = random.Random(debug_drop_seed)
        self._retrying = True  # False once force-closed
        self._stats = {"produce_requests": 0, "retries": 0, "failed_batches": 0,
                       "split_batches": 0, "debug_dropped_responses": 0}  # fmt: skip
        self._completions: list[tuple[ProducerBatch, int, int, BaseException | None]] = []

    def stop_retries(self) -> None:
        """Force-close: from now on every failed attempt fails its batches (any thread)."""
        self._retrying = False

    def metrics(self) -> dict[str, int]:
        return dict(self._stats)

    @property
    def has_completions(self) -> bool:
        """Finished batches are waiting for :meth:`take_completions` (a racy hint)."""
        return bool(self._completions)

    def take_completions(self) -> list[tuple[ProducerBatch, int, int, BaseException | None]]:
        """The finished batches (batch, base offset, log append time, error), emptied."""
        done, self._completions = self._completions, []
        return done

    def send(self, conn: BrokerConnection, batches: list[ProducerBatch], now: float) -> bool:
        """Build and write one Produce request; False when the send failed (retried)."""
        by_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        for b in batches:
            by_tp.setdefault(b.tp, []).append(b)
        topics: dict[str, list[ProduceRequestPartition]] = {}
        for tp, bl in by_tp.items():
            records = bl[0].wire() if len(bl) == 1 else b"".join(b.wire() for b in bl)
            topics.setdefault(tp.topic, []).append({"index": tp.partition, "records": records})
        body: ProduceRequest = {
            "transactional_id": self._transactional_id,
            "acks": self._acks,
            "timeout_ms": self._request_timeout_ms,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        self._stats["produce_requests"] += 1
        try:
            request = conn.send(ApiKey.PRODUCE, body, expect_response=self._acks != 0,
                                context=by_tp)  # fmt: skip
        except MiniKafkaError as e:
            for tp, bl in by_tp.items():  # not (wholly) written: the broker drops the frame
                self._attempt_failed(tp, bl, e, now, maybe_written=False)
            return False
        if request is None:  # acks=0: written is all we will ever know
            for tp, bl in by_tp.items():
                for b in bl:
                    self._done(b, -1, -1, None)
                self._acc.unmute(tp)
        return True

    def handle_response(self, response: ClientResponse, now: float) -> None:
        """A Produce response (or its loss): settle each partition's batches."""
        by_tp: dict[TopicPartition, list[ProducerBatch]] = response.request.context
        error = response.error
        if error is None and response.body is None:
            error = NetworkError("empty response")
        if error is None and self._drop_ratio and self._drop_rng.random() < self._drop_ratio:
            self._stats["debug_dropped_responses"] += 1
            error = NetworkError("produce response discarded (debug_drop_response_ratio)")
        if error is not None:
            self._metadata.request_update()
            for tp, bl in by_tp.items():
                self._attempt_failed(tp, bl, error, now, maybe_written=True)
            return
        assert response.body is not None
        seen: set[TopicPartition] = set()
        for topic in cast(ProduceResponse, response.body)["responses"]:
            for p in topic["partition_responses"]:
                tp = TopicPartition(topic["name"], p["index"])
                found = by_tp.get(tp)
                if found is None or tp in seen:
                    continue
                seen.add(tp)
                self._complete_partition(tp, found, p, now)
        for tp, bl in by_tp.items():
            if tp not in seen:
                err = MiniKafkaError(f"produce response has no result for {tp}")
                self._attempt_failed(tp, bl, err, now, maybe_written=True)

    def _attempt_failed(
        self, tp: TopicPartition, bl: list[ProducerBatch], error: MiniKafkaError, now: float,
        maybe_written: bool,
    ) -> None:  # fmt: skip
        """An attempt ended without a result for ``tp`` (send failure, lost response)."""
        self._attempt_ended(tp, bl)
        if maybe_written:
            for b in bl:
                b.maybe_written = True
        self._retry_or_fail(tp, bl, error, now)

    def _attempt_ended(self, tp: TopicPartition, bl: list[ProducerBatch]) -> None:
        if self._idem is not None:
            for _ in bl:
                self._idem.on_attempt_done(tp)

    def _complete_partition(
        self, tp: TopicPartition, bl: list[ProducerBatch], p: ProduceResponsePartitionResponse,
        now: float
    ) -> None:
        self._attempt_ended(tp, bl)
        code = p["error_code"]
        idem = self._idem
        if code == ErrorCode.NONE or (idem is not None
                                      and code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER):  # fmt: skip
            base = p["base_offset"] if code == ErrorCode.NONE else -1
            for b in bl:
                if idem is not None:
                    idem.on_acked(tp, b.base_sequence, base, b.record_count, b.attempts > 0)
                    if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                        idem.duplicates += 1
                self._done(b, base, p["log_append_time_ms"], None)
                if base >= 0:
                    base += b.record_count
            self._acc.unmute(tp)
            return
        if code == ErrorCode.MESSAGE_TOO_LARGE and self._split_too_large(tp, bl, now):
            return
        error = error_for(code, p.get("error_message") or f"produce to {tp} failed")
        if error.code in _REFRESH_CODES:
            self._metadata.request_update()
        if idem is None:
            self._retry_or_fail(tp, bl, error, now)
            return
        for b in bl:
            action = idem.classify(tp, b.base_sequence, error)
            if action is Action.FATAL:
                fenced = ProducerFencedError(
                    f"producer id {b.producer_id} epoch {b.producer_epoch} is fenced on "
                    f"{tp.topic}-{tp.partition} (a newer epoch wrote there): {error.message}"
                )
                idem.set_fatal(fenced)
                self.fail(b, fenced)
            else:
                self._retry_or_fail(tp, [b], error, now, retriable=action is not Action.FAIL)

    def _split_too_large(self, tp: TopicPartition, bl: list[ProducerBatch], now: float) -> bool:
        """MESSAGE_TOO_LARGE: split what can be split and resend everything of the answer
        as retries (:mod:`clients.producer.split`); False when nothing can be done (one
        batch that cannot be split, retries or delivery time used up): it then fails."""
        if len(bl) == 1 and not can_split(bl[0]):
            return False
        if (not self._retrying or bl[0].attempts >= self._retries
                or any(self._acc.is_expired(b, now) for b in bl)):  # fmt: skip
            return False
        retry: list[ProducerBatch] = []
        for b in bl:
            if not can_split(b):  # maybe not the one too large: alone next time
                if self._idem is not None:
                    self._idem.on_retry(tp, b.base_sequence)
                retry.append(b)
                continue
            parts = split_batch(b, self._acc.batch_size)
            if self._idem is not None and b.base_sequence != NO_SEQUENCE:
                self._idem.on_split(tp, b.base_sequence, [p.base_sequence for p in parts])
            self._acc.replace_split(b, parts)
            self._stats["split_batches"] += 1
            retry.extend(parts)
        self._stats["retries"] += 1
        self._acc.reenqueue(retry, now)
        self._acc.unmute(tp)
        return True

    def _retry_or_fail(
        self, tp: TopicPartition, bl: list[ProducerBatch], error: MiniKafkaError, now: float,
        retriable: bool | None = None,
    ) -> None:  # fmt: skip
        first = bl[0]
        if retriable is None:
            retriable = error.retriable
        if (
            retriable
            and self._retrying
            and first.attempts < self._retries
            and not self._acc.is_expired(first, now)
        ):
            self._stats["retries"] += 1
            if error.code in _REFRESH_CODES:
                self._metadata.request_update()
            if self._idem is not None:
                for b in bl:
                    self._idem.on_retry(tp, b.base_sequence)
            self._acc.reenqueue(bl, now)
        else:
            for b in bl:
                if retriable and self._acc.is_expired(b, now):
                    self.fail(b, self._expiry_error(b, now, error))
                else:
                    self.fail(b, error)
        self._acc.unmute(tp)

    def expire(self, batch: ProducerBatch, now: float) -> None:
        """Fail a batch the accumulator found past ``delivery_timeout_ms``."""
        self.fail(batch, self._expiry_error(batch, now))

    def _expiry_error(
        self, batch: ProducerBatch, now: float, cause: MiniKafkaError | None = None
    ) -> DeliveryTimeoutError:
        why = f"; last error: {cause}" if cause is not None else ""
        return DeliveryTimeoutError(
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"{now - batch.created_ms:.0f} ms has passed since batch creation "
            f"(delivery_timeout_ms={self._acc.delivery_timeout_ms:g}){why}"
        )

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        """Queue the batch's failure (and release its sequence, with idempotence)."""
        self._stats["failed_batches"] += 1
        if self._idem is not None:
            if batch.base_sequence != NO_SEQUENCE:
                self._idem.on_failed(batch.tp, batch.base_sequence, f"failed: {error}")
            if self._idem.transaction is not None:
                self._idem.transaction.on_batch_failed(batch.tp, error)
        self._done(batch, -1, -1, error)

    def _done(
        self, batch: ProducerBatch, base: int, log_append_time_ms: int,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        """Queue the batch's completion; the sender takes it and runs it unlocked."""
        self._completions.append((batch, base, log_append_time_ms, error))

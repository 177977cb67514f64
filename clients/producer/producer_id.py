"""The sender's producer-id exchange: InitProducerId, and epoch bumps.

Owned by :class:`~clients.producer.sender.Sender` when idempotence is on (an
:class:`~clients.producer.idempotence.IdempotenceManager` is given).  Before the first batch goes
out the sender thread sends InitProducerId to the least loaded broker; batches wait in
the accumulator meanwhile (the manager's ``can_send`` is False without a producer id).
The id is fetched lazily: not before something is queued.  The broker's versions are
known from the connection's own ApiVersions exchange
(:meth:`~clients.network.connection.BrokerConnection.connect`): a broker that does not
serve InitProducerId at a version we speak makes the producer fail with
:class:`~clients.producer.idempotence.IdempotenceUnsupportedError`, telling the user to set
``enable_idempotence=False``.

Epoch bump (the manager sets ``bump_reason`` when a batch holding a sequence failed,
or a broker reported a sequence error it cannot explain): it waits until nothing is
in flight (``needs_producer_id``), then batches whose earlier attempt may have been
written (``maybe_written``) are failed with
:class:`~clients.producer.idempotence.SequenceAbandonedError` rather than resent (a resend
under a new epoch could duplicate them); the other batches holding sequences lose them
and are restamped on their next drain; then InitProducerId is sent with the current
(id, epoch).  Fatal errors (fenced, unsupported) fail every queued batch; the producer
then refuses new records.  InitProducerId itself is retried after ``retry_backoff_ms``
on connection loss and retriable codes; other codes are fatal (the manager decides).

Request body (ApiKey 22 InitProducerId, v0-5; schema in
:mod:`clients.protocol.messages.produce_fetch`)::

    InitProducerId  {transactional_id: null, transaction_timeout_ms: -1,
                     producer_id, producer_epoch}   (-1, -1 for a new id; v3+ only, so
                                                     an epoch bump needs v3)

Request contexts are ``(kind, connection)`` tuples, which is how the sender tells these
responses from Metadata (``"metadata"``) and Produce (a dict) responses.  One request
at a time.

Costs: O(1) per loop iteration when nothing is due; an epoch bump is O(queued batches).

Thread safety: none of its own; only the sender thread calls it, holding the sender
lock (the accumulator calls take the accumulator lock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import BrokerConnection
from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import ProducerBatch
from clients.producer.idempotence import IdempotenceManager, SequenceAbandonedError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError
from clients.protocol.message_types import InitProducerIdRequest, InitProducerIdResponse
from clients.protocol.request_channel import ClientResponse

_INIT_PRODUCER_ID = "init_producer_id"  # request context besides "metadata" and produce


class ProducerIdExchange:
    """Gets, and bumps the epoch of, the producer id for one sender (see the module).

    Owns: the one outstanding InitProducerId request and its retry backoff.  Reads and updates: the
    :class:`~clients.producer.idempotence.IdempotenceManager` (which holds the id, the
    epoch and the bump reason), the accumulator (queued batches, sequence resets) and
    the metadata (refresh on a lost answer).  Given two callables of the sender:
    ``least_loaded(now_ms)`` (a connection that can send, connecting if need be) and
    ``fail(batch, error)`` (:meth:`~clients.producer.produce_requests.ProduceRequests.fail`).
    Called by the sender loop: :meth:`maybe_init_producer_id` each iteration, and
    :meth:`handle_response` for responses whose context is one of its tuples.
    """

    def __init__(
        self,
        idempotence: IdempotenceManager,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        *,
        retry_backoff_ms: int,
        least_loaded: Callable[[float], BrokerConnection | None],
        fail: Callable[[ProducerBatch, BaseException], None],
    ) -> None:
        self._idem = idempotence
        self._acc = accumulator
        self._metadata = metadata
        self._retry_backoff_ms = retry_backoff_ms
        self._least_loaded = least_loaded  # the sender's: connects if need be
        self._fail = fail  # ProduceRequests.fail: queues the batch's failure
        self._pid_in_flight = False
        self._pid_backoff_until = 0.0  # monotonic ms

    def maybe_init_producer_id(self, now: float) -> None:
        """Idempotence: fail everything once fatal; get or bump the producer id when due."""
        idem = self._idem
        if idem.fatal_error is not None:
            for batch in self._acc.undrained_batches():
                self._fail(batch, idem.fatal_error)
            return
        if self._pid_in_flight or not idem.needs_producer_id or now < self._pid_backoff_until:
            return
        if idem.producer_id < 0 and self._acc.incomplete == 0:
            return  # lazily: the id is fetched before the first batch goes out
        if idem.bump_reason is not None:
            why = idem.bump_reason
            for batch in self._acc.reset_sequences(lambda b: b.maybe_written):
                self._fail(batch, SequenceAbandonedError(
                    f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} "
                    f"(sequence {batch.base_sequence}): an earlier attempt's outcome is unknown "
                    f"and the producer epoch is being bumped ({why}); not resent, to avoid "
                    "a duplicate: the records may or may not be in the log"
                ))  # fmt: skip
        conn = self._least_loaded(now)
        if conn is None:
            self._pid_backoff_until = now + max(self._retry_backoff_ms, 50)
            return
        self._send_pid_request(conn, now)

    def _send_pid_request(self, conn: BrokerConnection, now: float) -> None:
        """InitProducerId, if the broker serves it (else the manager turns fatal)."""
        self._idem.on_api_versions(conn.api_versions, f"{conn.host}:{conn.port}")
        if self._idem.fatal_error is not None:
            return
        body: InitProducerIdRequest = {"transactional_id": None, "transaction_timeout_ms": -1,
                                       **self._idem.init_request()}  # fmt: skip
        try:
            conn.send(ApiKey.INIT_PRODUCER_ID, body, context=(_INIT_PRODUCER_ID, conn))
            self._pid_in_flight = True
        except MiniKafkaError:
            self._pid_backoff_until = now + self._retry_backoff_ms

    def handle_response(self, response: ClientResponse, now: float) -> None:
        self._pid_in_flight = False
        body = response.body
        if response.error is not None or body is None:
            self._pid_backoff_until = now + self._retry_backoff_ms
            self._metadata.request_update()
            return
        if self._idem.on_init_response(cast(InitProducerIdResponse, body)):
            self._pid_backoff_until = now + self._retry_backoff_ms

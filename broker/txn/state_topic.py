"""The transaction-state topic ``__transaction_state`` and the broker's transaction
coordinator around it (Kafka's TransactionStateManager's I/O side).

:class:`TransactionStateTopic` glues the sans-IO
:class:`~broker.txn.coordinator.TransactionCoordinator` to the broker core
(:class:`broker.core.BrokerCore` creates it and implements :class:`TransactionStateHost`;
this module does not import the core).  Hosting the topic (creation on demand,
placement, leadership, loading and unloading, acks=all writes) is the
:class:`~broker.coordination.internal_topic.InternalTopic` it shares with
:class:`broker.group.offsets_topic.OffsetsTopic`; what is the state topic's own:

- **The topic**: partitions ``transaction_state_log_num_partitions`` (default 5),
  replication factor ``min(transaction_state_log_replication_factor, live brokers)``,
  configs ``cleanup_policy=compact``, ``min_insync_replicas=min(2, RF)``,
  ``segment_bytes=transaction_state_log_segment_bytes``.
- **FindCoordinator** key_type 1: the leader of partition
  ``abs(javaStringHash(transactional_id)) % partitions``; no leader:
  COORDINATOR_NOT_AVAILABLE; an empty id: INVALID_REQUEST.
- **Loading** (:func:`load_batches`): every record of a non-control batch goes to the
  coordinator (coordinator epoch = the partition's leader epoch); after the last step
  the coordinator finishes the transactions that were being completed (markers again,
  then Complete*).
- **Writes** (:meth:`append`): one batch (wall-clock timestamps), through the
  :class:`~broker.coordination.internal_topic.InternalTopic`.
- **Timers**: :meth:`tick` every
  ``transaction_abort_timed_out_transaction_cleanup_interval_ms`` on the broker's timer
  (timeouts, expiry, retried Complete* writes).
- **Parking**: the coordinator parks AddPartitionsToTxn/AddOffsetsToTxn during the
  previous transaction's PrepareCommit/PrepareAbort on the broker's timer
  (:mod:`broker.txn.parking`); :meth:`shutdown` drops them unanswered.
- **Markers**: a :class:`~broker.txn.markers.MarkerSender` to each partition's leader
  (``host.leader_id``) at its replication endpoint, logged in as this broker.
- **KIP-890 verification** (:meth:`verify`, the core's ``txn_verifier``): a leader's
  question about its own partitions is answered by asking the coordinator here when the
  transactional id's state partition is led by this broker; otherwise
  :class:`~broker.txn.verifier.RemoteTxnVerifier` (AddPartitionsToTxn v4
  ``verify_only`` to the coordinator broker, batched; no cache, see there).  A refusal
  (any answer but NONE: the partition is not in the transaction, the producer is fenced,
  the coordinator is away) is logged at INFO through a
  :class:`~broker.logs.rate_limit.RateLimitedLog` keyed by transactional id, producer,
  epoch and answer (a producer retrying a refused batch logs one line per
  ``VERIFICATION_LOG_INTERVAL_MS``, with the count suppressed).

Costs: those of :class:`~broker.coordination.internal_topic.InternalTopic`; a load step
applies O(LOAD_STEP_BYTES) of batches.  Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Mapping, Sequence
from typing import Protocol

from broker.auth import broker_login
from broker.config import BrokerConfig
from broker.coordination.internal_topic import InternalTopic, InternalTopicHost, InternalTopicSpec
from broker.delayed import DelayedFetch, DelayedProduce
from broker.logs.rate_limit import RateLimitedLog
from broker.metadata.image import MetadataImage
from broker.network.tls import client_context
from broker.producer_ids import ProducerIdAllocator
from broker.txn.coordinator import (
    Done,
    IdAnswer,
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from broker.txn.markers import GONE, MarkerSender
from broker.txn.state import TxnError
from broker.txn.verifier import RemoteTxnVerifier
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import FindCoordinatorResponseCoordinator
from clients.protocol.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import build_batch, decode_batch
from replication.partition import Partition
from storage.log.log import wall_clock_ms
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike
from timer.timing_wheel import CallableTask

log = logging.getLogger(__name__)

ID_TIMEOUT_MS = 5_000
VERIFICATION_LOG_INTERVAL_MS = 10_000


class TransactionStateHost(InternalTopicHost, Protocol):
    """What :class:`TransactionStateTopic` reads of the core beyond the offsets topic's
    questions: its current config (the server sets the ports it got), the metadata image
    (where each broker's replication listener is) and the cluster secret (the broker
    login of the marker and verification connections)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def image(self) -> MetadataImage | None: ...

    @property
    def cluster_secret(self) -> str: ...


class _AllocatorIds:
    """:class:`~broker.txn.coordinator.ProducerIdSource` over the broker's allocator."""

    def __init__(self, allocator: ProducerIdAllocator) -> None:
        self.allocator = allocator
        self._tasks: set[asyncio.Task[None]] = set()

    def next_producer_id(self, done: IdAnswer) -> None:
        try:
            now = self.allocator.next_id_now()
        except MiniKafkaError as exc:
            done(None, exc.code)
            return
        if now is not None:
            done(now, ErrorCode.NONE)
            return

        async def wait() -> None:
            try:
                done(await self.allocator.next_id(ID_TIMEOUT_MS), ErrorCode.NONE)
            except MiniKafkaError as exc:
                done(None, exc.code)

        task = asyncio.get_running_loop().create_task(wait())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class TransactionStateTopic:
    """The state topic and the transaction coordinator of one broker; see the module
    docstring.  Owns the :class:`TransactionCoordinator` (``coordinator``) and is its
    :class:`~broker.txn.coordinator.TxnLog`."""

    def __init__(self, config: BrokerConfig, clock: Clock, timer: TimerLike,
                 partitions: Mapping[TopicPartition, Partition],
                 produce_purgatory: Purgatory[DelayedProduce],
                 fetch_purgatory: Purgatory[DelayedFetch], host: TransactionStateHost,
                 producer_ids: ProducerIdAllocator) -> None:
        self.config = config
        self.timer = timer
        self.host = host
        tls = (client_context(config.ssl_cafile, config.ssl_certfile, config.ssl_keyfile)
               if config.ssl_certfile else None)
        self.tls: ssl.SSLContext | None = tls
        self.markers = MarkerSender(config.node_id,
                                    broker_login(host.cluster_secret, config.node_id),
                                    self._leader_of, self.replication_endpoint, clock, tls)
        self.coordinator = TransactionCoordinator(
            TxnCoordinatorConfig(config.transaction_max_timeout_ms,
                                 config.transactional_id_expiration_ms),
            clock, self, _AllocatorIds(producer_ids), self.markers, timer=timer)
        spec = InternalTopicSpec(
            TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor, self._topic_configs,
            "transactions")
        self.topic = InternalTopic(spec, config, timer, partitions, produce_purgatory,
                                   fetch_purgatory, host, self.coordinator,
                                   functools.partial(load_batches, self.coordinator))
        self.closed = False
        self.refusals = RateLimitedLog(log, clock, VERIFICATION_LOG_INTERVAL_MS)
        self.remote_verifier = RemoteTxnVerifier(
            config.node_id, broker_login(host.cluster_secret, config.node_id), tls)
        self._schedule_tick()

    # -- topic -----------------------------------------------------------------------

    def num_partitions(self) -> int:
        return self.topic.num_partitions()

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        return {"cleanup_policy": "compact",
                "min_insync_replicas": str(min(2, replication_factor)),
                "segment_bytes": str(self.config.transaction_state_log_segment_bytes)}

    # -- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, transactional_id: str) -> FindCoordinatorResponseCoordinator:
        """FindCoordinator key_type 1: ``{error_code, error_message, node_id, host,
        port}``."""
        if not transactional_id:
            return {"error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": "transactional id is empty", "node_id": -1, "host": "",
                    "port": -1}
        return self.topic.coordinator_of(transactional_id)

    # -- leadership ----------------------------------------------------------------------

    def on_partitions_changed(self) -> None:
        """Load the state partitions newly led here; unload those not led any more."""
        self.topic.on_partitions_changed()

    # -- writes (the coordinator's TxnLog) -----------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        now = wall_clock_ms()
        self.topic.append(partition, build_batch([(k, v, now, ()) for k, v in records]), done)

    # -- markers and timers ------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition) -> int | None:
        if not self.host.partition_exists(tp.topic, tp.partition):
            return GONE
        found = self.host.leader_endpoint(tp.topic, tp.partition)
        return found[0] if found is not None else None

    def replication_endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where broker ``node_id`` serves other brokers (its internal listener, else its
        client one); standalone: this broker's own."""
        image, config = self.host.image, self.host.config
        if image is None:
            if node_id != config.node_id:
                return None
            internal = config.internal_advertised
            return internal if internal is not None else config.advertised
        broker = image.brokers.get(node_id)
        return broker.replication_endpoint if broker is not None else None

    def _schedule_tick(self) -> None:
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self.timer.add(CallableTask(interval, self._tick))

    def _tick(self) -> None:
        if self.closed:
            return
        try:
            self.coordinator.tick()
        except Exception:
            log.exception("transaction coordinator tick failed")
        self._schedule_tick()

    # -- KIP-890 verification (the core's TxnVerifier) ----------------------------------

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Whether ``partitions`` are in ``transactional_id``'s ongoing transaction of
        this producer: asked here when this broker coordinates the id, else by an
        AddPartitionsToTxn v4 ``verify_only`` to its coordinator as a broker.  Refusals
        are logged (rate-limited)."""
        answers = await self._verify(transactional_id, producer_id, producer_epoch,
                                     partitions)
        refused: dict[ErrorCode, list[str]] = {}
        for tp, code in answers.items():
            if code != ErrorCode.NONE:
                refused.setdefault(code, []).append(f"{tp.topic}-{tp.partition}")
        for code, where in refused.items():
            self.refusals.info((transactional_id, producer_id, producer_epoch, code),
                               "KIP-890 verification refused %s for transactional id %r "
                               "(producer %d epoch %d): %s", code.name, transactional_id,
                               producer_id, producer_epoch, ", ".join(sorted(where)))
        return answers

    async def _verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        local = self.coordinator.coordinator_error(transactional_id)
        if local is None:
            try:
                return self.coordinator.verify(transactional_id, producer_id,
                                               producer_epoch, partitions)
            except TxnError as exc:
                return dict.fromkeys(partitions, exc.code)
        found = self.find_coordinator(transactional_id)
        if found["error_code"] != 0:
            return dict.fromkeys(partitions, ErrorCode(found["error_code"]))
        if found["node_id"] == self.config.node_id:  # ours, loading or not loaded yet
            return dict.fromkeys(partitions, local)
        endpoint = self.replication_endpoint(found["node_id"])
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return await self.remote_verifier.verify(found["node_id"], endpoint, transactional_id,
                                                 producer_id, producer_epoch, partitions)

    def shutdown(self) -> None:
        self.closed = True
        self.topic.shutdown()
        self.remote_verifier.close()
        self.markers.stop()
        self.coordinator.shutdown()


def load_batches(coordinator: TransactionCoordinator, partition: int,
                 data: bytes | memoryview, position: int) -> int:
    """Hand the records of ``data`` (read from state ``partition`` at ``position``) to the
    coordinator's load in log order, control batches left out; returns the offset after
    the last batch.  A batch that does not decode is skipped (logged)."""
    for pos, header in iter_batches(data, validate=False):
        if not header.is_control:
            try:
                records = decode_batch(data, pos, validate=False)
            except MiniKafkaError as exc:
                log.warning("%s-%d: skipped a batch at %d: %s", TRANSACTION_STATE_TOPIC,
                            partition, header.base_offset, exc)
                records = []
            for record in records:
                coordinator.load_record(partition, record.key, record.value)
        position = header.next_offset
    return position

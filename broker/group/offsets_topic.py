"""The offsets topic ``__consumer_offsets`` and the broker's group coordinator around it.

:class:`OffsetsTopic` glues the sans-IO :class:`GroupCoordinator` to the broker core
(:class:`broker.core.BrokerCore`, which creates it and implements
:class:`~broker.coordination.internal_topic.InternalTopicHost`; this module does not
import the core).  Hosting the topic (creation on demand, placement, leadership,
loading and unloading, acks=all writes) is the
:class:`~broker.coordination.internal_topic.InternalTopic` both coordinators share; what
is the offsets topic's own:

- **The topic**: partitions ``offsets_topic_num_partitions`` (default 5), replication
  factor ``min(offsets_topic_replication_factor, live brokers)``, configs
  ``cleanup_policy=compact``, ``min_insync_replicas=min(2, RF)``,
  ``segment_bytes=offsets_topic_segment_bytes``, ``max_message_bytes`` large enough for
  a group's record at ``group_max_metadata_bytes`` (plus 1 MiB for the members' fixed
  fields; at least the broker's ``max_message_bytes``).
- **FindCoordinator**: the coordinator of a group is the leader of its offsets
  partition (:meth:`InternalTopic.coordinator_of`).  Only groups (key_type 0) have
  coordinators here (transactional ids: :mod:`broker.txn.state_topic`); an empty group
  id is INVALID_GROUP_ID.
- **Loading** (:func:`load_batches`): records of a transactional batch are loaded as its
  producer's (pending), a control batch as its marker
  (:func:`~clients.records.control.parse_marker`: COMMIT or ABORT of the batch's
  producer); a batch or marker that does not decode is skipped and counted.
- **Writes** (:meth:`append`): one record batch (wall-clock timestamps); the
  coordinator maps the errors for its clients.  A TxnOffsetCommit's records go as one
  transactional batch of its producer id and epoch, base sequence 0 (as Kafka's): the
  append's origin is COORDINATOR, so the leader checks the epoch but not the sequence.
- **TxnOffsetCommit** (:meth:`commit_txn_offsets`): KIP-890 part 1, the group's offsets
  partition verified with the transaction coordinator before the producer's first
  transactional batch there (as Kafka's ``maybeStartTransactionVerificationForPartition``),
  when the handler passes a verifier.
- **Transaction markers**: :meth:`on_txn_marker` is the core's ``TxnMarkerListener``
  (:mod:`broker.handlers.broker_view`), told by WriteTxnMarkers after a marker on an
  offsets partition is replicated; the coordinator commits or drops the producer's
  pending offsets of that partition's groups.

Costs: those of :class:`~broker.coordination.internal_topic.InternalTopic`; a load
step applies O(LOAD_STEP_BYTES) of batches.
Not thread-safe: the broker's event loop owns it (like the core).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from broker.config import BrokerConfig
from broker.coordination.internal_topic import InternalTopic, InternalTopicHost, InternalTopicSpec
from broker.delayed import DelayedFetch, DelayedProduce
from broker.group.consumer.coordinator import ConsumerGroupConfig
from broker.group.consumer.migration import MigrationPolicy
from broker.group.coordinator import GroupCoordinator
from broker.group.offsets import txn_commit_error
from broker.group.protocol import (
    Done,
    GroupCoordinatorConfig,
    TxnProducer,
    verification_error,
)
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    FindCoordinatorResponseCoordinator,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.control import ControlType, parse_marker
from clients.records.record import build_batch, decode_batch
from replication.partition import Partition
from storage.log.log import wall_clock_ms
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike

log = logging.getLogger(__name__)

# the transaction coordinator's KIP-890 check of a producer's partitions, bound to its
# transactional id, producer id and epoch: partition -> the coordinator's answer
Verify = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]

GROUP_RECORD_SLACK_BYTES = 1024 * 1024  # members' fixed fields and the batch's framing


class OffsetsTopic:
    """The offsets topic and the group coordinator of one broker; see the module docstring.

    Owns the :class:`GroupCoordinator` (``coordinator``) and is its offsets log.  Gets from
    the broker core that creates it: the config (read for the offsets-topic and group
    settings only; the port the server may set later is the core's business), clock
    and timer, the hosted partitions, the produce and fetch purgatories (all handed to
    its :class:`InternalTopic`, ``topic``), and the
    :class:`InternalTopicHost` functions.  Called by the core: :meth:`on_partitions_changed`
    and :meth:`shutdown`; by the group handlers: :meth:`find_coordinator`,
    :meth:`commit_txn_offsets` (TxnOffsetCommit with its verification) and the
    coordinator's request methods; by WriteTxnMarkers, as the core's
    ``TxnMarkerListener``: :meth:`on_txn_marker`.
    """

    def __init__(self, config: BrokerConfig, clock: Clock, timer: TimerLike,
                 partitions: Mapping[TopicPartition, Partition],
                 produce_purgatory: Purgatory[DelayedProduce],
                 fetch_purgatory: Purgatory[DelayedFetch], host: InternalTopicHost) -> None:
        self.config = config
        self.partitions = partitions
        consumer_config = ConsumerGroupConfig(
            config.group_consumer_session_timeout_ms,
            config.group_consumer_heartbeat_interval_ms, config.group_consumer_max_size,
            migration_policy=MigrationPolicy(config.group_consumer_migration_policy))
        self.coordinator = GroupCoordinator(GroupCoordinatorConfig.from_broker(config), clock,
                                            timer, self, partition_exists=host.partition_exists,
                                            topics=host.topic_ids,
                                            consumer_config=consumer_config)
        spec = InternalTopicSpec(OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                 config.offsets_topic_replication_factor,
                                 self._topic_configs, "groups")
        self.topic = InternalTopic(spec, config, timer, partitions, produce_purgatory,
                                   fetch_purgatory, host, self.coordinator,
                                   functools.partial(load_batches, self.coordinator))
        self._tasks: set[asyncio.Task[None]] = set()

    # -- topic -------------------------------------------------------------------------

    def num_partitions(self) -> int:
        return self.topic.num_partitions()

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        config = self.config
        # a group's record holds every member's metadata and assignment: up to
        # group_max_metadata_bytes, plus the members' fixed fields
        record_bytes = config.group_max_metadata_bytes + GROUP_RECORD_SLACK_BYTES
        return {"cleanup_policy": "compact",
                "min_insync_replicas": str(min(2, replication_factor)),
                "segment_bytes": str(config.offsets_topic_segment_bytes),
                "max_message_bytes": str(max(record_bytes, config.max_message_bytes))}

    # -- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, key: str,
                         key_type: int = 0) -> FindCoordinatorResponseCoordinator:
        """Where the coordinator of ``key`` is: ``{error_code, error_message, node_id,
        host, port}`` (FindCoordinator's v0-3 answer, and one entry of its v4 batch).
        Only groups (``key_type`` 0) have coordinators here: transactional ids (1) are
        answered by :class:`broker.txn.state_topic.TransactionStateTopic`, any other key
        type is INVALID_REQUEST."""
        def error(code: ErrorCode, message: str) -> FindCoordinatorResponseCoordinator:
            return {"error_code": int(code), "error_message": message, "node_id": -1,
                    "host": "", "port": -1}

        if key_type != 0:
            return error(ErrorCode.INVALID_REQUEST, f"key_type {key_type} is not "
                         "supported (only 0: groups)")
        if not key:
            return error(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        return self.topic.coordinator_of(key)

    # -- leadership ------------------------------------------------------------------------

    def on_partitions_changed(self) -> None:
        """Load the offsets partitions newly led here; unload those not led any more."""
        self.topic.on_partitions_changed()

    # -- writes (the coordinator's OffsetsLog) ----------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done, producer: TxnProducer | None = None) -> None:
        now = wall_clock_ms()
        items = [(k, v, now, ()) for k, v in records]
        if producer is None:
            self.topic.append(partition, build_batch(items), done)
            return
        batch = build_batch(items, producer_id=producer.producer_id,
                            producer_epoch=producer.producer_epoch,
                            base_sequence=0,
                            attributes=TRANSACTIONAL_MASK)
        self.topic.append(partition, batch, done, guard=producer.guard,
                          verification_required=producer.verification_required)

    # -- TxnOffsetCommit's KIP-890 verification ---------------------------------------------

    def commit_txn_offsets(self, body: TxnOffsetCommitRequest,
                           respond: Respond[TxnOffsetCommitResponse],
                           verify: Verify | None) -> None:
        """TxnOffsetCommit, verified first when ``verify`` is given (the transaction
        coordinator's KIP-890 check, bound to the request's transactional id, producer
        id and epoch): when the producer has no transaction open on the group's offsets
        partition, its verification guard is taken, the coordinator asked whether that
        partition is in the producer's ongoing transaction (AddOffsetsToTxn put it
        there), and only a yes lets the commit go on (with the guard: a marker written
        meanwhile refuses the append, INVALID_TXN_STATE); a no is every partition's
        error (:func:`~broker.group.protocol.verification_error`).  The group checks
        come first (a group this coordinator cannot serve is answered at once)."""
        coordinator = self.coordinator
        if verify is None:
            coordinator.commit_txn_offsets(body, respond)
            return
        producer_id, epoch = body["producer_id"], body["producer_epoch"]
        group_id = body["group_id"]
        tp = TopicPartition(OFFSETS_TOPIC, coordinator.manager.partition_for(group_id)) \
            if coordinator.manager.coordinator_error(group_id) is None else None
        replica = None if tp is None else self.partitions.get(tp)
        if tp is None or replica is None or producer_id < 0 or epoch < 0 \
                or not replica.producer_state.needs_verification(producer_id, epoch):
            coordinator.commit_txn_offsets(body, respond, verification_required=True)
            return
        guard = replica.producer_state.verification_guard(producer_id)
        wanted = tp

        async def verify_then_commit() -> None:
            try:
                answers = await verify([wanted])
            except Exception as exc:  # the transaction coordinator cannot be reached
                log.warning("TxnOffsetCommit %s: verification failed: %s", group_id, exc)
                answers = {}
            code = verification_error(answers.get(wanted, ErrorCode.NETWORK_EXCEPTION))
            if code != ErrorCode.NONE:
                respond(txn_commit_error(body, code))
                return
            coordinator.commit_txn_offsets(body, respond, guard, verification_required=True)

        task = asyncio.get_running_loop().create_task(verify_then_commit())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- transaction markers (the core's TxnMarkerListener) ---------------------------------

    def on_txn_marker(self, topic: str, partition: int, producer_id: int,
                      committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` was written and
        replicated on ``topic``-``partition`` (WriteTxnMarkers): the coordinator commits or
        drops the producer's pending offsets of that partition's groups."""
        if topic == OFFSETS_TOPIC:
            self.coordinator.complete_txn(partition, producer_id, committed)

    def shutdown(self) -> None:
        self.coordinator.shutdown()
        self.topic.shutdown()
        for task in list(self._tasks):
            task.cancel()


def load_batches(coordinator: GroupCoordinator, partition: int, data: bytes | memoryview,
                 position: int) -> int:
    """Apply the batches of ``data`` (read from offsets ``partition`` at ``position``) to
    the coordinator's load in log order; returns the offset after the last one.  A
    control batch is its producer's marker, a transactional batch's records are its
    producer's; a batch (or marker) that does not decode is skipped and counted."""
    for pos, header in iter_batches(data, validate=False):
        try:
            records = decode_batch(data, pos, validate=False)
            if header.is_control:
                control_type, _epoch = parse_marker(records[0].key, records[0].value)
                coordinator.load_marker(partition, header.producer_id,
                                        control_type == ControlType.COMMIT)
                records = []
        except (MiniKafkaError, IndexError) as exc:  # forged or damaged: the rest loads
            coordinator.ownership.skip(partition, header.base_offset,
                                       f"a batch that does not decode ({exc!r})")
            records = []
        txn_producer_id = header.producer_id if header.is_transactional else -1
        for record in records:
            coordinator.load_record(partition, record.key, record.value, record.offset,
                                    txn_producer_id)
        position = header.next_offset
    return position

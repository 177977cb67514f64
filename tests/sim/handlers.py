"""The leader side of replication in the simulation: the broker's real handlers.

A follower's OffsetsForLeaderEpoch, Fetch and ListOffsets requests (built by the real
:class:`replication.follower_fetch.FollowerFetchSession`) and the consumer's Fetch are
encoded with Kafka's codec at our highest version, decoded as the broker decodes them,
and answered by the broker's handlers (``broker.handlers.dispatch.HANDLERS``:
``handle_offsets_for_leader_epoch``, ``handle_fetch``, ``handle_list_offsets``); the
answer goes back through the codec too (file regions read into bytes), so a field the
two sides disagree on fails here as it would on a wire
(:func:`tests.broker.handlers.wire.call`).

The producer's acks=all Produce goes through the real ``handle_produce`` the same way
(:func:`produce`).

The handlers take a :class:`HandlerCore`; :class:`SimHandlerCore` is the part of it they
use, over a simulated broker's partitions: ``partition_or_error``, ``wake_partition``
(parked acks=all produces re-check), ``isr`` (``check_isr_of`` / ``maybe_expand_isr``: ISR
proposals go to the simulated controller), ``config``, ``clock``, ``image`` (the broker
process's: topic ids for Fetch v13+, ``current_leader`` hints), ``hosted_topic_uuids``,
``configs.min_insync_replicas``, ``produce_purgatory`` (the broker's) and
``fetch_purgatory`` (a follower's Fetch with nothing new
parks there for up to its ``max_wait_ms``; the simulated broker wakes it when the
partition changes and its timer expires it).

Costs: two codec round trips per request.  Single-threaded, like the simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.fetch_sessions.cache import FetchSessionCache
from broker.handlers.broker_view import HandlerCore, TxnVerifier
from broker.metadata.image import MetadataImage
from broker.metrics.topic_metrics import BrokerTopicMetrics
from broker.replica.topic_configs import TopicError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from tests.broker.handlers.wire import call
from timer.clock import ManualClock
from timer.purgatory import Purgatory

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker

Body = dict[str, Any]
FOLLOWER_APIS = (ApiKey.OFFSETS_FOR_LEADER_EPOCH, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
                 ApiKey.WRITE_TXN_MARKERS)


class SimIsrProposals:
    """What the handlers use of :class:`~broker.replica.isr_proposals.IsrProposals`: the
    simulated broker's proposals go to the simulated controller."""

    def __init__(self, broker: SimBroker, clock: ManualClock,
                 replica_lag_time_max_ms: int) -> None:
        self.broker = broker
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms

    def check_isr_of(self, key: TopicPartition) -> None:
        p = self.broker.partitions.get(key.partition)
        if p is None or not p.is_leader:
            return
        self.broker.propose(p.pending_alter_partition or p.maybe_shrink_isr(
            self.clock.now_ms(), self.replica_lag_time_max_ms))

    def maybe_expand_isr(self, key: TopicPartition, replica_id: int) -> None:
        p = self.broker.partitions.get(key.partition)
        if p is not None:
            self.broker.propose(p.maybe_expand_isr(replica_id))


class SimTopicConfigs:
    """What the handlers use of :class:`~broker.replica.topic_configs.TopicConfigs`."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker

    def min_insync_replicas(self, topic: str) -> int:
        return self.broker.c.config.min_insync_replicas


class TopicPartitions(Mapping[TopicPartition, Partition]):
    """The broker's partitions by :class:`TopicPartition` (what ``HandlerCore.partitions``
    is), a view of ``SimBroker.partitions``: nothing copied per look-up (a parked Fetch
    asks it at every wake-up)."""

    def __init__(self, broker: SimBroker, topic: str) -> None:
        self.broker = broker
        self.topic = topic

    def __getitem__(self, key: TopicPartition) -> Partition:
        p = self.broker.partitions.get(key.partition) if key.topic == self.topic else None
        if p is None:
            raise KeyError(key)
        return p

    def get(self, key: TopicPartition, default: Any = None) -> Any:
        if key.topic != self.topic:
            return default
        return self.broker.partitions.get(key.partition, default)

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter([TopicPartition(self.topic, pid) for pid in self.broker.partitions])

    def __len__(self) -> int:
        return len(self.broker.partitions)


class SimHandlerCore:
    """What the fetch handlers use of a :class:`HandlerCore`, over a simulated broker."""

    def __init__(self, broker: SimBroker, clock: ManualClock, topic: str,
                 replica_lag_time_max_ms: int, fetch_max_bytes: int) -> None:
        self.broker = broker
        self.clock = clock
        self.topic = topic
        self.config = BrokerConfig(node_id=broker.id, fetch_max_bytes=fetch_max_bytes,
                                   replica_lag_time_max_ms=replica_lag_time_max_ms)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", broker.timer)
        self.fetch_sessions = FetchSessionCache(0, 0, 1, clock)  # KIP-227: none kept
        self.isr = SimIsrProposals(broker, clock, replica_lag_time_max_ms)
        self.configs = SimTopicConfigs(broker)
        self.topic_metrics = BrokerTopicMetrics(max_topics=10)  # Produce counts into it
        # KIP-890 verification: the broker process's coordinator
        # (tests.sim.txn_coordinator.SimTxnCoordinator.verify) with transactions; no
        # group coordinator to tell of markers
        self.txn_verifier: TxnVerifier | None = None
        self.txn_marker_listener = None
        self._partitions = TopicPartitions(broker, topic)

    @property
    def image(self) -> MetadataImage:
        """The broker process's metadata image (topic ids for Fetch v13+, leader hints)."""
        return self.broker.metadata.image

    @property
    def hosted_topic_uuids(self) -> dict[str, bytes]:
        """The hosted topic's id (its partition.metadata), when it has a UUID."""
        hosted = self.broker.hosted_topic_id
        return {self.topic: hosted} if isinstance(hosted, bytes) else {}

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]:
        return self._partitions

    @property
    def produce_purgatory(self) -> Purgatory[DelayedProduce]:
        return self.broker.produce_purgatory

    def partition_or_error(self, topic: str, index: int) -> Partition:
        p = self.broker.partitions.get(index) if topic == self.topic else None
        if p is None:
            raise TopicError(f"unknown topic or partition {topic}-{index}",
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p

    def wake_partition(self, key: TopicPartition) -> None:
        self.broker.wake_partition(key.partition)


def serve(core: SimHandlerCore, api: ApiKey, body: Body,
          respond: Callable[[Body], None]) -> None:
    """Answer one follower request with the broker's real handler, through the codec
    both ways (:func:`tests.broker.handlers.wire.call`); ``respond`` gets the answer now
    or, for a Fetch parked in the fetch purgatory, when it completes."""
    assert api in FOLLOWER_APIS, api
    answered = 0

    def on_answer(answer: Body | None) -> None:
        nonlocal answered
        answered += 1
        assert answered == 1 and answer is not None, f"{api.name}: answered {answered} times"
        respond(answer)

    call(cast(HandlerCore, core), api, body, client_id=f"replica-{core.broker.id}",
         respond=on_answer)


def produce(core: SimHandlerCore, pid: int, records: bytes, timeout_ms: int,
            respond: Callable[[Body], None], transactional_id: str | None = None) -> None:
    """An acks=all Produce of ``records`` to partition ``pid`` of the topic, answered by
    the broker's real handler through the codec both ways; ``respond`` gets the
    partition's answer (``error_code``, ``base_offset``) when the handler gives it: at
    once for an error, else when the DelayedProduce completes or expires."""
    def on_answer(answer: Body | None) -> None:
        assert answer is not None
        respond(answer["responses"][0]["partition_responses"][0])

    call(cast(HandlerCore, core), ApiKey.PRODUCE, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": timeout_ms,
        "topics": [{"name": core.topic, "partitions": [{"index": pid, "records": records}]}]},
        client_id="sim-producer", respond=on_answer)

"""What the request handlers may use of the broker: narrow Protocols, never the whole.

:class:`HandlerCore` is the broker as every handler sees it (read-only properties, so an
implementation's attributes may be of narrower types): its config and clock, the hosted
partitions with their purgatories and fetch sessions, the metadata image (controller
mode) or the standalone topics (:class:`TopicLookup`,
:class:`broker.topic_registry.TopicRegistry`), and the rooms handlers ask things of,
each behind a Protocol of its own:
:class:`GroupCoordinatorLookup` (:class:`broker.group.offsets_topic.OffsetsTopic`) and
:class:`GroupCoordinatorView` (:class:`broker.group.coordinator.GroupCoordinator`),
:class:`TransactionCoordinatorLookup` (:class:`broker.txn.state_topic.TransactionStateTopic`)
and :class:`TransactionCoordinatorView`
(:class:`broker.txn.coordinator.TransactionCoordinator`),
:class:`TopicConfigView` (:class:`broker.replica.topic_configs.TopicConfigs`),
:class:`IsrChecks` (:class:`broker.replica.isr_proposals.IsrProposals`),
:class:`RecoveryCuts` (:class:`broker.replica.recovery_marks.RecoveryMarks`), and the
transaction hooks (contracts 3-4 of issue 32, each None until its room is wired):
:class:`TxnVerifier` (KIP-890 part 1: a leader asks the transaction coordinator whether
a producer's first transactional batch belongs to its ongoing transaction) and
:class:`TxnMarkerListener` (told of every marker written to a ``__consumer_offsets``
partition, for the group coordinator's pending transactional offsets); the
controller connection is :class:`broker.async_client.ControllerChannel` (for requests a
broker forwards).  :class:`broker.core.BrokerCore` implements it (mypy checks that where
the server hands the core to the dispatch table); the simulation's ``SimHandlerCore``
implements the part the replication handlers use.

No code; no costs.  The handlers run on the broker's event loop thread only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from broker.async_client import ControllerChannel
from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.dynamic_config.broker_configs import DynamicBrokerConfigs
from broker.fetch_sessions.cache import FetchSessionCache
from broker.metadata.image import MetadataImage
from broker.metrics.topic_metrics import BrokerTopicMetrics
from broker.producer_ids import ProducerIdAllocator
from broker.topic_registry import StandaloneTopic
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTransactionsResponseTransactionState,
    FindCoordinatorResponseCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    ListTransactionsResponseTransactionState,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequestTopic,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from storage.log_manager import LogManager
from timer.clock import Clock
from timer.purgatory import Purgatory


class TopicLookup(Protocol):
    """The standalone topics (:class:`broker.topic_registry.TopicRegistry`)."""

    @property
    def topics(self) -> Mapping[str, StandaloneTopic]: ...

    def get(self, name: str) -> StandaloneTopic | None: ...


class GroupCoordinatorView(Protocol):
    """The group coordinator's requests (:class:`broker.group.coordinator.GroupCoordinator`),
    over the generated bodies of :mod:`clients.protocol.message_types`; each ``respond``
    is called exactly once, now or later."""

    def join_group(self, body: JoinGroupRequest,
                   respond: Callable[[JoinGroupResponse | None], None],
                   client_id: str = "", client_host: str = "",
                   require_member_id: bool = True) -> None: ...

    def sync_group(self, body: SyncGroupRequest,
                   respond: Callable[[SyncGroupResponse | None], None]) -> None: ...

    def heartbeat(self, body: HeartbeatRequest,
                  respond: Callable[[HeartbeatResponse | None], None]) -> None: ...

    def leave_group(self, body: LeaveGroupRequest,
                    respond: Callable[[LeaveGroupResponse | None], None]) -> None: ...

    def commit_offsets(self, body: OffsetCommitRequest,
                       respond: Callable[[OffsetCommitResponse | None], None],
                       version: int = 9) -> None: ...

    def fetch_offsets(self, group_id: str, wanted: Sequence[OffsetFetchRequestTopic] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1
                      ) -> tuple[ErrorCode, list[OffsetFetchResponseTopic]]: ...

    def consumer_group_heartbeat(self, body: ConsumerGroupHeartbeatRequest, version: int,
                                 respond: Callable[[ConsumerGroupHeartbeatResponse | None],
                                                   None],
                                 client_id: str = "", client_host: str = "",
                                 may_describe: Callable[[str], bool] = ...) -> None: ...

    def consumer_group_describe(self, group_id: str) -> ConsumerGroupDescribeResponseGroup: ...

    def list_groups(self, states: list[str], types: list[str]) -> ListGroupsResponse: ...

    def describe_groups(self, body: DescribeGroupsRequest) -> DescribeGroupsResponse: ...

    def delete_groups(self, group_ids: list[str],
                      respond: Callable[[list[tuple[str, ErrorCode]]], None]) -> None: ...

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition],
                       respond: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None]
                       ) -> None: ...


class GroupCoordinatorLookup(Protocol):
    """FindCoordinator and this broker's group coordinator
    (:class:`broker.group.offsets_topic.OffsetsTopic`)."""

    @property
    def coordinator(self) -> GroupCoordinatorView: ...

    def find_coordinator(self, key: str,
                         key_type: int = 0) -> FindCoordinatorResponseCoordinator: ...

    def commit_txn_offsets(self, body: TxnOffsetCommitRequest,
                           respond: Callable[[TxnOffsetCommitResponse | None], None],
                           verify: Callable[[list[TopicPartition]],
                                            Awaitable[dict[TopicPartition, ErrorCode]]] | None
                           ) -> None: ...


class TransactionCoordinatorView(Protocol):
    """The transaction coordinator's requests
    (:class:`broker.txn.coordinator.TransactionCoordinator`); each callback is called
    exactly once, now or later."""

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                         producer_id: int, producer_epoch: int,
                         respond: Callable[[ErrorCode, int, int], None]) -> None: ...

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition],
                       respond: Callable[[ErrorCode], None],
                       client_transaction_version: int = 0) -> None: ...

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]: ...

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool, transaction_version: int,
                respond: Callable[[ErrorCode, int, int], None]) -> None: ...

    def describe(self, transactional_id: str
                 ) -> DescribeTransactionsResponseTransactionState: ...

    def list_transactions(self, states: Sequence[str], producer_ids: Sequence[int],
                          duration_ms: int = -1
                          ) -> tuple[ErrorCode,
                                     list[ListTransactionsResponseTransactionState]]: ...


class TransactionCoordinatorLookup(Protocol):
    """FindCoordinator key_type 1 and this broker's transaction coordinator
    (:class:`broker.txn.state_topic.TransactionStateTopic`)."""

    @property
    def coordinator(self) -> TransactionCoordinatorView: ...

    def find_coordinator(self, transactional_id: str
                         ) -> FindCoordinatorResponseCoordinator: ...


class TopicConfigView(Protocol):
    def topic_configs(self, topic: str) -> dict[str, str]: ...

    def validate(self, configs: Mapping[str, str]) -> dict[str, str]: ...

    def min_insync_replicas(self, topic: str) -> int: ...


class IsrChecks(Protocol):
    def check_isr_of(self, key: TopicPartition) -> None: ...

    def maybe_expand_isr(self, key: TopicPartition, replica_id: int) -> None: ...


class RecoveryCuts(Protocol):
    @property
    def recovery_cuts(self) -> set[TopicPartition]: ...


class TxnVerifier(Protocol):
    """The transaction coordinator's verify-only AddPartitionsToTxn (v4+), as the Produce
    handler asks it (KIP-890 part 1): per partition, NONE when the partition is in
    ``transactional_id``'s ongoing transaction with that producer id and epoch, else the
    coordinator's error (mapped to the produce error as Kafka does,
    :func:`broker.handlers.produce.verification_error`)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]: ...


class TxnMarkerListener(Protocol):
    """Told after a transaction marker was appended to a partition of
    ``__consumer_offsets`` (WriteTxnMarkers), on the event loop."""

    def on_txn_marker(self, topic: str, partition: int, producer_id: int,
                      committed: bool) -> None: ...


class HandlerCore(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def data_dir(self) -> Path: ...

    @property
    def controller_mode(self) -> bool: ...

    @property
    def dynamic_configs(self) -> DynamicBrokerConfigs: ...

    @property
    def image(self) -> MetadataImage | None: ...

    @property
    def registry(self) -> TopicLookup: ...

    @property
    def partitions(self) -> dict[TopicPartition, Partition]: ...

    @property
    def hosted_topic_uuids(self) -> dict[str, bytes]: ...  # name -> id of the hosted log

    @property
    def produce_purgatory(self) -> Purgatory[DelayedProduce]: ...

    @property
    def fetch_purgatory(self) -> Purgatory[DelayedFetch]: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def log_manager(self) -> LogManager: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...

    @property
    def groups(self) -> GroupCoordinatorLookup: ...

    @property
    def transactions(self) -> TransactionCoordinatorLookup: ...

    @property
    def controller(self) -> ControllerChannel | None: ...

    @property
    def configs(self) -> TopicConfigView: ...

    @property
    def isr(self) -> IsrChecks: ...

    @property
    def recovery(self) -> RecoveryCuts: ...

    @property
    def topic_metrics(self) -> BrokerTopicMetrics: ...

    @property
    def txn_verifier(self) -> TxnVerifier | None: ...

    @property
    def txn_marker_listener(self) -> TxnMarkerListener | None: ...

    def partition_or_error(self, topic: str, index: int) -> Partition: ...

    def wake_partition(self, key: TopicPartition) -> None: ...

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> StandaloneTopic: ...

    def create_topic(self, info: StandaloneTopic) -> None: ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def add_partitions(self, name: str, count: int) -> None: ...

    def delete_topic(self, name: str) -> None: ...

"""What the request handlers may use of the broker: narrow Protocols, never the whole.

:class:`HandlerCore` is the broker as every handler sees it (read-only properties, so an
implementation's attributes may be of narrower types): its config and clock, the hosted
partitions with their purgatories, the metadata image (controller mode) or topic registry
(standalone), and the rooms handlers ask things of, each behind a Protocol of its own:
:class:`TopicConfigView` (:class:`broker.replica.topic_configs.TopicConfigs`),
:class:`IsrChecks` (:class:`broker.replica.isr_proposals.IsrProposals`),
:class:`RecoveryCuts` (:class:`broker.replica.recovery_marks.RecoveryMarks`) and
:class:`ControllerChannel` (the broker's connection to the controller, for requests a
broker forwards).  :class:`broker.core.BrokerCore` implements it (mypy checks that where
the server hands the core to the dispatch table); the simulation's ``SimHandlerCore``
implements the part the replication handlers use.

No code; no costs.  The handlers run on the broker's event loop thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.group.offsets_topic import OffsetsTopic
from broker.metadata.image import MetadataImage
from broker.producer_ids import ProducerIdAllocator
from broker.topic_registry import StandaloneTopic, TopicRegistry
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from storage.log_manager import LogManager
from timer.clock import Clock
from timer.purgatory import Purgatory


class ControllerChannel(Protocol):
    """The broker's connection to the controller (:class:`broker.async_client.AsyncConnection`)."""

    async def request(self, api_key: int, body: dict[str, Any], *,
                      api_version: int | None = None,
                      timeout_ms: int = 30_000) -> dict[str, Any]: ...


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
    def image(self) -> MetadataImage | None: ...

    @property
    def registry(self) -> TopicRegistry: ...

    @property
    def partitions(self) -> dict[TopicPartition, Partition]: ...

    @property
    def produce_purgatory(self) -> Purgatory[DelayedProduce]: ...

    @property
    def fetch_purgatory(self) -> Purgatory[DelayedFetch]: ...

    @property
    def log_manager(self) -> LogManager: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...

    @property
    def groups(self) -> OffsetsTopic: ...

    @property
    def controller(self) -> ControllerChannel | None: ...

    @property
    def configs(self) -> TopicConfigView: ...

    @property
    def isr(self) -> IsrChecks: ...

    @property
    def recovery(self) -> RecoveryCuts: ...

    def partition_or_error(self, topic: str, index: int) -> Partition: ...

    def wake_partition(self, key: TopicPartition) -> None: ...

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> StandaloneTopic: ...

    def create_topic(self, info: StandaloneTopic) -> None: ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def add_partitions(self, name: str, count: int) -> None: ...

    def delete_topic(self, name: str) -> None: ...

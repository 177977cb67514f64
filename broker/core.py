"""The broker's state, independent of processes and sockets (the sans-IO part).

:class:`BrokerCore` owns the LogManager, the partitions hosted here, the topic registry
and the produce/fetch purgatories.  The request handlers (:mod:`broker.handlers`) work
on it; the process adapter (:mod:`broker.server`) feeds it decoded requests and a clock,
and encodes what the handlers answer.  Tests drive a BrokerCore directly with a manual
clock: no sockets, no processes, no sleeping.

Standalone mode (no controller): this broker leads every partition of every topic in
its :class:`TopicRegistry`, at leader epoch 0, with an ISR of itself.

Not thread-safe: one event loop owns it (see docs/broker.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.topic_registry import MAX_PARTITIONS_PER_TOPIC, TopicInfo, TopicRegistry
from clients.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.topics import topic_name_error
from replication.partition import Partition
from storage.config import LogConfig
from storage.log_manager import LogManager
from timer import Clock, Purgatory, SystemTimer

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


class TopicError(MiniKafkaError):
    """An error about a topic as a whole, with the code given per instance."""


class BrokerCore:
    def __init__(self, config: BrokerConfig, clock: Clock, timer: SystemTimer) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.data_dir = Path(config.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registry = TopicRegistry(self.data_dir)
        self.log_manager = LogManager(self.data_dir, self._default_log_config(),
                                      config_for=self.log_config_for)
        self.partitions: dict[TopicPartitionKey, Partition] = {}
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce", timer)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", timer)

    # -- lifecycle -----------------------------------------------------------------

    def startup(self) -> None:
        self.registry.load()
        self.log_manager.startup()
        high_watermarks = self.log_manager.read_high_watermarks()
        for info in self.registry.topics.values():
            for index in range(info.num_partitions):
                self._host_partition(info.name, index, high_watermarks.get((info.name, index), 0))

    def shutdown(self) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.write_checkpoints()
        self.log_manager.shutdown()

    def write_checkpoints(self) -> None:
        self.log_manager.write_high_watermarks(
            {key: p.high_watermark for key, p in self.partitions.items()}
        )
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    def run_retention(self) -> int:
        return self.log_manager.run_retention()

    def flush_dirty_logs(self) -> None:
        self.log_manager.flush_dirty_logs()

    # -- configs -------------------------------------------------------------------

    def _default_log_config(self) -> LogConfig:
        return LogConfig.from_dict(
            {k: v for k, v in self.config.log_defaults().items() if v is not None}
        )

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.registry.get(topic)
        overrides: dict[str, object] = dict(
            (k, v) for k, v in self.config.log_defaults().items() if v is not None
        )
        if info is not None:
            overrides.update(info.configs)
        return LogConfig.from_dict(overrides)  # type: ignore[arg-type]

    def min_insync_replicas(self, topic: str) -> int:
        info = self.registry.get(topic)
        raw = info.configs.get("min_insync_replicas") if info else None
        return int(raw) if raw is not None else self.config.min_insync_replicas

    # -- topics --------------------------------------------------------------------

    def validate_new_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        reason = topic_name_error(name)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if name in self.registry.topics:
            raise TopicError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if not 1 <= num_partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                f"num_partitions must be in 1..{MAX_PARTITIONS_PER_TOPIC}, got {num_partitions}",
                ErrorCode.INVALID_PARTITIONS,
            )
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if replication_factor != 1:
            raise TopicError(
                f"replication factor {replication_factor} is larger than the 1 available "
                "broker (standalone broker)",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        clean = {str(k).replace(".", "_"): str(v) for k, v in configs.items()}
        min_isr = clean.pop("min_insync_replicas", None)
        try:
            LogConfig.from_dict({**{k: v for k, v in self.config.log_defaults().items()
                                    if v is not None}, **clean})
            if min_isr is not None and int(min_isr) < 1:
                raise InvalidConfigError("min_insync_replicas must be >= 1")
        except InvalidConfigError as exc:
            raise TopicError(exc.message, ErrorCode.INVALID_CONFIG) from None
        except ValueError:
            raise TopicError(f"min_insync_replicas must be an integer, got {min_isr!r}",
                             ErrorCode.INVALID_CONFIG) from None
        if min_isr is not None:
            clean["min_insync_replicas"] = min_isr
        return TopicInfo(name, num_partitions, replication_factor, clean)

    def create_topic(self, info: TopicInfo) -> None:
        self.registry.add(info)
        for index in range(info.num_partitions):
            self._host_partition(info.name, index, 0)

    def delete_topic(self, name: str) -> None:
        info = self.registry.remove(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for index in range(info.num_partitions):
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                partition.leader_id = -1  # wakes parked operations with NOT_LEADER
                self.wake_partition((name, index))
            self.log_manager.delete_log(name, index)

    def _host_partition(self, topic: str, index: int, high_watermark: int) -> None:
        log_ = self.log_manager.get_log(topic, index) or self.log_manager.create_log(topic, index)
        partition = Partition(topic, index, log_, local_broker_id=self.config.node_id)
        partition.high_watermark = min(high_watermark, log_.log_end_offset)
        partition.make_leader(0, [self.config.node_id], [self.config.node_id])
        self.partitions[(topic, index)] = partition

    def partition_or_error(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition
        reason = topic_name_error(topic)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        raise TopicError(f"unknown topic or partition {topic}-{index}",
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def wake_partition(self, key: TopicPartitionKey) -> None:
        """Something changed on the partition: let parked produces and fetches re-check."""
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

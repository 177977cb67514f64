"""The broker's state, independent of processes and sockets (the sans-IO part).

:class:`BrokerCore` is the broker main process's composition of its rooms: the
LogManager, the partitions hosted here with the produce/fetch purgatories, the topic
registry, and

- :attr:`configs` (:class:`~broker.replica.topic_configs.TopicConfigs`): topic settings,
  their validation, the one path by which they reach hosted logs;
- :attr:`isr` (:class:`~broker.replica.isr_proposals.IsrProposals`): the ISR changes this
  broker proposes as a leader, with their in-flight state;
- :attr:`recovery` (:class:`~broker.replica.recovery_marks.RecoveryMarks`): what log
  recovery did, and the recovery-cut marks reported until healed;
- :attr:`repair` (:class:`~broker.replica.damage_repair.DamageRepair`): damaged ranges
  and their repair from another replica;
- :attr:`groups` (:class:`~broker.group.offsets_topic.OffsetsTopic`): the group
  coordinator and ``__consumer_offsets``; it asks the core back only through
  :class:`~broker.coordination.internal_topic.InternalTopicHost`;
- :attr:`transactions` (:class:`~broker.txn.state_topic.TransactionStateTopic`): the
  transaction coordinator and ``__transaction_state``, asking the core back through
  :class:`~broker.txn.state_topic.TransactionStateHost`; it is also the core's
  :attr:`txn_verifier` (KIP-890 part 1).

The request handlers (:mod:`broker.handlers`) work on it; the process adapter
(:mod:`broker.server`) feeds it decoded requests and a clock, and encodes what the
handlers answer.  Tests drive a BrokerCore directly with a manual clock: no sockets, no
processes, no sleeping.

Standalone mode (no controller): this broker leads every partition of every topic in
its :class:`TopicRegistry`, at leader epoch 0, with an ISR of itself.

Controller mode (``config.controller_address`` set): topics, replicas, leaders and ISRs
come from the :class:`MetadataImage` the :class:`MetadataFollower` builds from the
controller's metadata log; :meth:`reconcile` makes every local replica leader or
follower as the image says and hands followers to the replica fetchers.

Producer ids (InitProducerId) come from :attr:`producer_ids`: a block file in the data
directory when standalone, blocks from the controller otherwise.  Controller-mode
collaborators (the controller connection, the replica fetchers, producer-id blocks, the
AlterPartition channel) come in at construction as one :class:`ControllerLink`; nothing
is attached afterwards.
:meth:`write_checkpoints` (the checkpoint timer and shutdown) also forgets expired
producers and writes each partition's producer-state snapshot.

Not thread-safe: one event loop owns it (see docs/broker.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker.acls import Authorizer
from broker.async_client import ControllerChannel
from broker.auth import read_cluster_secret
from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.dynamic_config.broker_configs import DynamicBrokerConfigs
from broker.fetch_sessions.cache import FetchSessionCache
from broker.group.offsets_topic import OffsetsTopic
from broker.handlers.broker_view import TxnMarkerListener, TxnVerifier
from broker.metadata.image import MetadataImage, TopicInfo
from broker.metadata.replica_dirs import open_replica_log, other_topic_on_disk, relabel, shown
from broker.metadata.replica_plan import TopicLabel, partition_metadata_label, plan_replicas
from broker.metadata.topic_shape_checks import partition_count_error, replication_factor_error
from broker.metrics.topic_metrics import BrokerTopicMetrics
from broker.producer_ids import ProducerIdAllocator, StandaloneProducerIdAllocator
from broker.replica.damage_repair import DamageRepair
from broker.replica.isr_proposals import IsrProposals
from broker.replica.recovery_marks import RecoveryMarks
from broker.replica.topic_configs import TopicConfigs, TopicError
from broker.topic_registry import MAX_PARTITIONS_PER_TOPIC, StandaloneTopic, TopicRegistry
from broker.txn.state_topic import TransactionStateTopic
from broker.users import ScramUsers
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import ZERO_UUID, TopicPartition, topic_name_error
from replication.isr import AlterPartitionProposal
from replication.partition import Partition
from storage.cleaner.config import CleanerConfig
from storage.log.log import Log
from storage.log_manager import LogManager
from storage.meta_properties import check_data_dir_identity
from timer.clock import Clock
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer

log = logging.getLogger(__name__)


# logs opened or created per event-loop turn by prepare_logs (7-10 ms a log on a slow disk)
LOG_OPENS_PER_TURN = 8


class ReplicaFollowing(Protocol):
    """The replica fetchers (:class:`broker.replica_fetcher.ReplicaFetcherManager`)."""

    def follow(self, partition: Partition, host: str, port: int,
               topic_id: bytes = ZERO_UUID) -> None: ...

    def unfollow(self, key: TopicPartition) -> None: ...

    def following(self, key: TopicPartition) -> bool: ...


@dataclass(frozen=True)
class ControllerLink:
    """What a broker in controller mode is given at construction by its server (the
    asyncio side): the connection to the controller (for requests a broker forwards), the
    replica fetchers its followers are handed to, producer-id blocks from the controller,
    and the channel its ISR proposals (AlterPartition) go out on."""

    controller: ControllerChannel
    fetchers: ReplicaFollowing
    producer_ids: ProducerIdAllocator
    send_alter_partition: Callable[[AlterPartitionProposal], None]


class BrokerCore:
    def __init__(self, config: BrokerConfig, clock: Clock, timer: SystemTimer,
                 link: ControllerLink | None = None) -> None:
        """``link``: the controller-mode collaborators (None standalone, and in tests that
        drive a core without a controller)."""
        self.config = config
        self.cluster_secret = read_cluster_secret(config.cluster_secret_file)
        self.users = ScramUsers(config.sasl_users_file)
        self.authorizer = Authorizer(config.authorizer_enabled, config.acl_file,
                                     config.super_users)
        self.clock = clock
        self.timer = timer
        self.data_dir = Path(config.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        check_data_dir_identity(self.data_dir, config.cluster_id, config.node_id)
        self.registry = TopicRegistry(self.data_dir)
        # the broker configs an operator changes at run time (broker.dynamic_config)
        self.dynamic_configs = DynamicBrokerConfigs(config, self.data_dir)
        # controller mode: set by the metadata follower
        self.image: MetadataImage | None = None
        self.configs = TopicConfigs(config, self.registry, lambda: self.image)
        self.log_manager = LogManager(
            self.data_dir, self.configs.default_log_config(),
            config_for=self.configs.log_config_for,
            prefer_stored_configs=self.controller_mode,  # no image yet at startup: see there
            cleaner_config=CleanerConfig(dedupe_buffer_bytes=config.log_cleaner_dedupe_buffer_bytes,
                                         step_bytes=config.log_cleaner_step_bytes),
            scrub_step_bytes=max(4096, config.log_scrub_bytes_per_second
                                 * config.log_scrub_interval_ms // 1000),
            scrub_round_pause_ms=config.log_scrub_round_pause_ms)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce", timer)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", timer)
        self.fetch_sessions = FetchSessionCache.for_broker(config, clock)  # KIP-227
        self.topic_metrics = BrokerTopicMetrics(config.metrics_max_topics)  # bytes in/out
        self.isr = IsrProposals(config.node_id, config.replica_lag_time_max_ms, clock,
                                self.partitions, self.wake_partition,
                                link.send_alter_partition if link is not None else None)
        self.recovery = RecoveryMarks(self.log_manager, clock, self.controller_mode)
        self.repair = DamageRepair(config.node_id, config.log_scrub_bytes_per_second > 0,
                                   self.log_manager, self.partitions, self.recovery, self.isr)
        # set by the first reconcile: the image was complete (at the metadata log's HW)
        # and every hosted log took its topic's config
        self.image_reconciled = False
        # each hosted topic's partition_metadata_label (its UUID, else its old int id)
        self.hosted_topic_ids: dict[str, TopicLabel] = {}
        self.hosted_topic_uuids: dict[str, bytes] = {}  # those with ids (Fetch v13+ checks)
        self.fetchers = link.fetchers if link is not None else None
        self.controller = link.controller if link is not None else None
        self._checkpointed_hws: dict[TopicPartition, int] = {}
        # standalone: a block file in the data directory; else blocks from the controller
        self.producer_ids: ProducerIdAllocator = (
            link.producer_ids if link is not None
            else StandaloneProducerIdAllocator(self.data_dir))
        # group coordinator and __consumer_offsets; asks this core (InternalTopicHost)
        self.groups = OffsetsTopic(config, clock, timer, self.partitions,
                                   self.produce_purgatory, self.fetch_purgatory, self)
        # transaction coordinator and __transaction_state (TransactionStateHost); hooks
        # (issue 32): its KIP-890 verifier, the __consumer_offsets marker listener
        self.transactions = TransactionStateTopic(
            config, clock, timer, self.partitions, self.produce_purgatory,
            self.fetch_purgatory, self, self.producer_ids)
        self.txn_verifier: TxnVerifier | None = (
            self.transactions if config.transaction_partition_verification_enable else None)
        self.txn_marker_listener: TxnMarkerListener | None = self.groups

    @property
    def controller_mode(self) -> bool:
        return bool(self.config.controller_address)

    # -- lifecycle -----------------------------------------------------------------

    def startup(self) -> None:
        if not self.controller_mode:
            self.registry.load()  # before the logs load: they take the topics' configs
        self.log_manager.startup()
        self._checkpointed_hws = self.log_manager.read_high_watermarks()
        self.recovery.report(self._checkpointed_hws)
        if self.controller_mode:
            return  # partitions come from the metadata image (reconcile)
        high_watermarks = self._checkpointed_hws
        for info in self.registry.topics.values():
            for index in range(info.num_partitions):
                high_watermark = high_watermarks.get(TopicPartition(info.name, index), 0)
                self._host_partition(info.name, index, high_watermark)
        self.configs.apply(self.partitions)
        self.groups.on_partitions_changed()
        self.transactions.on_partitions_changed()

    def shutdown(self) -> None:
        for partition in self.partitions.values():
            partition.abort_repair()  # its file goes; the next run's scrubber finds it again
        self.groups.shutdown()
        self.transactions.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.write_checkpoints(final=True)
        self.log_manager.shutdown()

    def write_checkpoints(self, final: bool = False) -> None:
        """The checkpoint timer's work (and the shutdown's, ``final``: producer snapshots
        fsync'd only then, replication/producer_state_store.py says why)."""
        now_ms = self.clock.now_ms()  # producer expiry runs on the broker's clock
        for key, p in self.partitions.items():
            try:
                p.remove_expired_producers(now_ms)
                p.take_producer_snapshot(durable=final)
            except OSError:
                log.exception("%s-%d: cannot write the producer-state snapshot", *key)
        # a log not hosted yet (no metadata image so far) keeps the HW it had on disk
        kept = {key: hw for key, hw in self._checkpointed_hws.items()
                if key not in self.partitions and self.log_manager.get_log(*key) is not None}
        self.log_manager.write_high_watermarks(
            {**kept, **{key: p.high_watermark for key, p in self.partitions.items()}}
        )
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    def topic_configs_known(self) -> bool:
        """Whether hosted logs have their topics' configs: standalone, from the registry
        loaded at startup; with a controller, once a complete metadata image was
        reconciled (the metadata follower installs an empty image before it has fetched
        anything).  Until then logs are open with the config stored beside them (maybe
        older, storage/log/config_file.py) or the defaults, so retention and compaction
        wait (a topic kept forever, or compacted, must not be cleaned by those)."""
        return not self.controller_mode or self.image_reconciled

    def run_retention(self) -> int:
        if not self.topic_configs_known():
            return 0
        return self.log_manager.run_retention(  # never at or above a partition's HW
            {key: p.high_watermark for key, p in self.partitions.items()})

    def flush_dirty_logs(self) -> None:
        self.log_manager.flush_dirty_logs()

    def run_log_cleaner(self) -> None:
        """One bounded compaction step (storage/cleaner.py); scheduled by the server.
        Tests call ``log_manager.clean_until_idle()`` to compact deterministically."""
        if self.topic_configs_known():
            self.log_manager.run_cleaner_step(high_watermarks={
                key: bound for key, p in self.partitions.items()
                if (bound := p.compaction_bound) is not None})

    # -- configs -------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        """The topic's partition count in the cluster (0: no such topic)."""
        if self.image is not None:
            info = self.image.topics.get(topic)
            return info.num_partitions if info is not None else 0
        registered = self.registry.get(topic)
        return registered.num_partitions if registered is not None else 0

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the cluster has the partition (hosted here or not)."""
        if self.controller_mode:
            return self.image is not None and self.image.partition(topic, index) is not None
        info = self.registry.get(topic)
        return info is not None and 0 <= index < info.num_partitions

    def topic_ids(self) -> Mapping[str, tuple[bytes, int]]:
        """Topics with an id (KIP-848 assignments name them by id): the image's."""
        return {} if self.image is None else self.image.topic_ids()

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None:
        """``(node_id, host, port)`` of the partition's leader; None when it has none or
        the leader is fenced.  Without a metadata image this broker leads everything."""
        if self.image is None:
            host, port = self.config.advertised
            return self.config.node_id, host, port
        state = self.image.partition(topic, index)
        broker = self.image.brokers.get(state.leader) if state is not None else None
        if state is None or broker is None or broker.fenced:
            return None
        return state.leader, broker.host, broker.port

    def live_broker_count(self) -> int | None:
        """Unfenced brokers in the metadata image (None: no image yet)."""
        return len(self.image.unfenced_brokers()) if self.image is not None else None

    # -- topics --------------------------------------------------------------------

    def validate_new_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> StandaloneTopic:
        reason = topic_name_error(name)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if name in self.registry.topics:
            raise TopicError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        error = (partition_count_error(num_partitions, MAX_PARTITIONS_PER_TOPIC)
                 or replication_factor_error(replication_factor, 1, "registered (standalone)"))
        if error is not None:
            raise TopicError(error.message, error.code)
        clean = self.configs.validate(configs)
        return StandaloneTopic(name, num_partitions, replication_factor, clean)

    def create_topic(self, info: StandaloneTopic) -> None:
        self.registry.add(info)
        for index in range(info.num_partitions):
            self._host_partition(info.name, index, 0)
        self.configs.apply(self.partitions)
        self.groups.on_partitions_changed()
        self.transactions.on_partitions_changed()

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Standalone: replace the topic's config overrides (already validated) and apply
        them to its logs."""
        info = self.registry.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        info.configs = dict(configs)
        self.registry.add(info)
        self.configs.apply(self.partitions)

    def add_partitions(self, name: str, count: int) -> None:
        """Standalone: grow the topic to ``count`` partitions (validated by the caller)."""
        info = self.registry.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        old = info.num_partitions
        info.num_partitions = count
        self.registry.add(info)
        for index in range(old, count):
            self._host_partition(name, index, 0)
        self.configs.apply(self.partitions)
        self.groups.on_partitions_changed()
        self.transactions.on_partitions_changed()

    def delete_topic(self, name: str) -> None:
        info = self.registry.remove(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        keys = [TopicPartition(name, index) for index in range(info.num_partitions)]
        for key in keys:
            partition = self.partitions.pop(key, None)
            if partition is not None:
                partition.leader_id = -1  # parked produces fail with NOT_LEADER
            self.log_manager.delete_log(*key)
        for key in keys:  # once the whole topic is gone: a parked fetch of several
            self.wake_partition(key)  # partitions answers UNKNOWN_TOPIC for each
        self.configs.forget(name)
        self.groups.on_partitions_changed()
        self.transactions.on_partitions_changed()

    def _host_partition(self, topic: str, index: int, high_watermark: int) -> None:
        log_ = self.log_manager.get_log(topic, index) or self.log_manager.create_log(topic, index)
        partition = Partition(topic, index, log_, local_broker_id=self.config.node_id)
        partition.high_watermark = min(high_watermark, log_.log_end_offset)
        partition.make_leader(0, [self.config.node_id], [self.config.node_id])
        self.partitions[TopicPartition(topic, index)] = partition

    def partition_or_error(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get(TopicPartition(topic, index))
        if partition is not None:
            return partition
        reason = topic_name_error(topic)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if self.image is not None and self.image.partition(topic, index) is not None:
            raise TopicError(f"broker {self.config.node_id} holds no replica of "
                             f"{topic}-{index}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        raise TopicError(f"unknown topic or partition {topic}-{index}",
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def wake_partition(self, key: TopicPartition) -> None:
        """Something changed on the partition: let parked produces and fetches re-check."""
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

    # -- controller mode -------------------------------------------------------------

    async def prepare_logs(self, per_turn: int = LOG_OPENS_PER_TURN) -> None:
        """Open or create the logs of the replicas the image adds here, ahead of
        :meth:`reconcile`, giving the event loop a turn after every ``per_turn`` of them.

        Creating a log is a directory, three segment files and a ``partition.metadata``
        (file creations cost ~0.7 ms each on the 2-core test machine's disk); for a new
        topic of 200 partitions (RF 3, 3 brokers) the one synchronous reconcile held a
        broker's loop for ~1.8 s, next to a local cluster's 2 s heartbeat session.
        Same decision as reconcile's (``_log_for_topic`` on the same image, which only
        the metadata follower's task changes); replicas already hosted are left to it.
        """
        image = self.image
        if image is None:
            return
        plan = plan_replicas(image, self.config.node_id, list(self.partitions),
                             self.hosted_topic_ids)
        opened = 0
        for key, (topic, _) in plan.host.items():
            if key in self.partitions:
                continue
            self._log_for_topic(key, topic)
            opened += 1
            if opened % per_turn == 0:
                await asyncio.sleep(0)

    def reconcile(self) -> None:
        """Make local replicas match the metadata image (after new records were applied)."""
        image = self.image
        assert image is not None
        me = self.config.node_id
        plan = plan_replicas(image, me, list(self.partitions), self.hosted_topic_ids)
        wanted = {key: state for key, (_, state) in plan.host.items()}
        # marks that end here: not a replica any more (the image is complete), or back
        # in the ISR with a leader (healed); one checkpoint rewrite for all of them
        done_cuts = [key for key in self.recovery.recovery_cuts if key not in wanted
                     or (me in wanted[key].isr and wanted[key].leader >= 0)]
        if done_cuts:
            self.recovery.forget(done_cuts)
        # parked produces/fetches are woken once the whole image is applied, so a fetch
        # of several partitions is answered from the new state of all of them
        woken: list[TopicPartition] = []
        for key in plan.drop:
            self._drop_partition(key)
            woken.append(key)
        labels: dict[str, TopicLabel] = {}
        for key, (info, state) in plan.host.items():
            topic, index = key
            labels[topic] = label = partition_metadata_label(info)
            partition = self.partitions.get(key)
            if partition is not None and self.hosted_topic_ids.get(topic) != label:
                relabel(partition.log.dir, label)  # an old metadata log was upgraded
            if partition is None:
                log_ = self._log_for_topic(key, info)
                partition = Partition(topic, index, log_, local_broker_id=me)
                partition.high_watermark = min(self._checkpointed_hws.get(key, 0),
                                               log_.log_end_offset)
                self.partitions[key] = partition
            if state.leader == me:
                if partition.make_leader(state.leader_epoch, state.replicas, state.isr,
                                         state.partition_epoch, now_ms=self.clock.now_ms()):
                    log.info("%s-%d: leader in epoch %d", topic, index, state.leader_epoch)
                if self.fetchers is not None:
                    self.fetchers.unfollow(key)
            else:
                changed = partition.make_follower(state.leader, state.leader_epoch,
                                                  state.replicas, state.partition_epoch,
                                                  state.isr)
                repair = self.isr.resign_to_repair.pop(key, None) if state.leader >= 0 else None
                if repair is not None:  # resigned to repair: cut, then fetch it again
                    self.repair.repair_follower(key, partition, *repair)
                leader = image.brokers.get(state.leader)
                # a follower parked by FENCED_LEADER_EPOCH tries again on new metadata: the
                # leader that fenced it may be a stale one of a deleted topic of this name
                # in a higher epoch (epochs restart at 0), which has applied the delete since
                parked = (self.fetchers is not None and leader is not None
                          and state.leader >= 0 and not self.fetchers.following(key))
                if (changed or parked) and self.fetchers is not None:
                    if leader is not None and state.leader >= 0:
                        self.fetchers.follow(partition, *leader.replication_endpoint,
                                             topic_id=info.topic_uuid)
                    else:
                        self.fetchers.unfollow(key)
            woken.append(key)
        self.hosted_topic_ids = labels
        self.hosted_topic_uuids = {n: t for n, t in labels.items() if isinstance(t, bytes)}
        self.configs.apply(self.partitions)
        self.image_reconciled = True
        for key in woken:
            self.wake_partition(key)
        self.groups.on_partitions_changed()
        self.transactions.on_partitions_changed()

    def _log_for_topic(self, key: TopicPartition, topic: TopicInfo) -> Log:
        """The log to host ``key`` (:func:`~broker.metadata.replica_dirs.open_replica_log`)."""
        log_, replaced = open_replica_log(self.log_manager, key, topic)
        if replaced and key in self.recovery.recovery_cuts:
            self.recovery.forget([key])  # the cut log is gone
        return log_

    def _drop_partition(self, key: TopicPartition) -> None:
        """Stop hosting ``key`` and delete its log (kept and reported if its
        ``partition.metadata`` names another topic id than the one hosted); the caller wakes
        its parked operations (NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION)."""
        partition = self.partitions.pop(key)
        if key in self.recovery.recovery_cuts:
            self.recovery.forget([key])  # a later log of this name starts afresh
        if self.fetchers is not None:
            self.fetchers.unfollow(key)
        partition.leader_id = -1  # parked produces fail with NOT_LEADER
        partition.abort_repair()
        hosted = self.hosted_topic_ids.get(key[0])
        other = None if hosted is None else other_topic_on_disk(partition.log.dir, hosted)
        if other is not None:
            log.error("%s-%d: not deleting %s: it belongs to topic %s, not the hosted %s",
                      *key, partition.log.dir, shown(other), shown(hosted))
            return
        self.log_manager.delete_log(*key)
        log.info("%s-%d: replica removed", *key)

    def min_insync_replicas(self, topic: str) -> int:
        """:class:`~broker.coordination.internal_topic.InternalTopicHost`'s question,
        answered by :meth:`TopicConfigs.min_insync_replicas`."""
        return self.configs.min_insync_replicas(topic)
